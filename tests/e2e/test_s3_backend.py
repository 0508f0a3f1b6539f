"""The dev stack on an S3 DIY backend (a local moto S3 server), read the ways other teams read it.

The stack is the dev stack rendering its manifests, with one box of every vendor and two of OVH (so
the preview below has one to shrink away): the backend and its readers are the subject, and each box
adopted costs an SSH join this module's assertions do not read (test_dev_stack.py adopts them all).

One test walks the stack's life in order, as test_dev_stack.py does on the file backend:
- `pulumi login` through scripts/ci/backend.sh (the code CI uses), only the endpoint and bucket
  pointed at moto;
- two `pulumi up` of the stack at once: the second is refused by the backend's lock while the first
  holds it, and the first completes with nothing lost;
- `pulumi stack output --json` validates against docs/outputs.schema.json;
- the two consumer examples of docs/outputs.md, extracted from the page and run as written: another
  project's StackReference and a plain script;
- scripts/ci/preview.py (the pull-request preview) on a config that shrinks a fleet: the policy pack
  compares it with the stack's deployed machines and warns, and the comment says so;
- `pulumi destroy` releases every box.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.docs.outputs_contract import examples, schema_errors
from tests.e2e.conftest import Engine, free_port, render_only_text
from tests.support.pulumi_home import quiet_pulumi_home

REPO = Path(__file__).resolve().parents[2]
BUCKET = "tuist-infra-state"
STACK = "organization/tuist-infra/dev"
LOCKS = ".pulumi/locks/organization/tuist-infra/dev/"


@dataclass
class S3:
    endpoint: str
    env: dict[str, str]

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def keys(self, prefix: str) -> list[str]:
        listed = self.client().list_objects_v2(Bucket=BUCKET, Prefix=prefix)
        return [o["Key"] for o in listed.get("Contents", [])]


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3]:
    port = free_port()
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [str(REPO / ".venv" / "bin" / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).read()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"moto S3 server did not start:\n{log_path.read_text()}")
            time.sleep(0.2)
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        # scripts/ci/backend.env's settings, with only the store swapped for the local one.
        "TUIST_STATE_BUCKET": BUCKET,
        "TUIST_STATE_ENDPOINT": endpoint,
        "TUIST_STATE_REGION": "us-east-1",
    }
    store = S3(endpoint, env)
    store.client().create_bucket(Bucket=BUCKET)
    try:
        yield store
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


# The module's fleet sizes (the dev stack's are 3, 3, 3, 1, 1).
SIZES = {"kura-ovh": 2, "kura-dedibox": 1, "runners-linux": 1, "kura-scw": 1, "runners-macos": 1}


def with_sizes(stack_file: str, sizes: dict[str, int]) -> str:
    """A stack file's text with each named fleet's `size:` line set (its layout kept)."""
    for name, size in sizes.items():
        stack_file, count = re.subn(
            rf"^(    - name: {re.escape(name)}\n(?:      .*\n)*?      size: )\d+$",
            rf"\g<1>{size}",
            stack_file,
            count=1,
            flags=re.M,
        )
        assert count == 1, f"the stack file has no size line for fleet {name}"
    return stack_file


@pytest.fixture(scope="module")
def rendering(engine: Engine) -> Iterator[None]:
    """The copy's dev stack in its rendering mode, with this module's fleet sizes (the backend is the
    subject here; the run's one dev-stack lifecycle on a cluster is test_dev_stack.py's)."""
    stack_file = engine.project / "Pulumi.dev.yaml"
    original = stack_file.read_text()
    stack_file.write_text(with_sizes(render_only_text(original), SIZES))
    try:
        yield
    finally:
        stack_file.write_text(original)


@pytest.fixture(scope="module")
def on_s3(engine: Engine, s3: S3, rendering: None, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    """The module's engine, logged in to the S3 backend instead of its file backend."""
    env = {k: v for k, v in engine.env.items() if k != "PULUMI_BACKEND_URL"}
    env.update(s3.env, PULUMI_HOME=str(quiet_pulumi_home(tmp_path_factory.mktemp("s3-pulumi-home"))))
    login = subprocess.run(
        ["bash", "-c", "source scripts/ci/backend.sh && backend_url && backend_login"],
        cwd=engine.project,
        env=env,
        text=True,
        capture_output=True,
        check=False,
    )
    assert login.returncode == 0, login.stdout + login.stderr
    url = login.stdout.splitlines()[0]
    assert url == f"s3://{BUCKET}?region=us-east-1&endpoint={s3.endpoint}&use_path_style=true", url
    return Engine(project=engine.project, env=env, vendorsim_url=engine.vendorsim_url)


def _up(engine: Engine) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            "pulumi",
            "up",
            "--yes",
            "--skip-preview",
            "--non-interactive",
            "--stack",
            "dev",
            "--policy-pack",
            str(engine.project / "policy"),
        ],
        cwd=engine.project,
        env=engine.env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _two_concurrent_ups(engine: Engine, s3: S3) -> subprocess.CompletedProcess[str]:
    """Start an update, wait until it holds the stack's lock, then start a second one; the second's result."""
    first = _up(engine)
    deadline = time.monotonic() + 120
    while not s3.keys(LOCKS):
        if first.poll() is not None:
            out, err = first.communicate()
            pytest.fail(f"the first update ended before its lock was seen:\n{out[-4000:]}\n{err[-2000:]}")
        assert time.monotonic() < deadline, "the first update never took the stack's lock"
        time.sleep(0.1)
    second = engine.run("up", "--yes", "--skip-preview", "--stack", "dev", check=False)
    out, err = first.communicate(timeout=900)
    assert first.returncode == 0, f"the first update failed:\n{out[-6000:]}\n{err[-3000:]}"
    return second


def _run_consumer_program(engine: Engine, tmp: Path) -> dict[str, Any]:
    project = tmp / "consumer"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        "name: estate-consumer\nruntime:\n  name: python\n  options:\n"
        f"    virtualenv: {engine.project / '.venv'}\n"
    )
    (project / "__main__.py").write_text(examples()["consumer-program"])
    consumer = Engine(project=project, env=engine.env, vendorsim_url=engine.vendorsim_url)
    consumer.run("stack", "select", "consumer", "--create")
    consumer.run("config", "set", "estate", STACK, "--stack", "consumer")
    consumer.run("up", "--yes", "--skip-preview", "--stack", "consumer")
    read: dict[str, Any] = json.loads(consumer.run("stack", "output", "--json", "--stack", "consumer").stdout)
    consumer.run("stack", "rm", "consumer", "--yes", "--force")
    return read


def _shrink_preview(engine: Engine, tmp: Path) -> str:
    """scripts/ci/preview.py on a config whose kura-ovh fleet goes from 2 machines to 1."""
    stack_file = engine.project / "Pulumi.dev.yaml"
    original = stack_file.read_text()
    stack_file.write_text(with_sizes(original, {"kura-ovh": 1}))
    try:
        results = tmp / "preview"
        ran = subprocess.run(
            [sys.executable, "scripts/ci/preview.py", "run", "dev", "--out", str(results)],
            cwd=engine.project,
            env=engine.env,
            text=True,
            capture_output=True,
            timeout=900,
            check=False,
        )
        body = subprocess.run(
            [sys.executable, "scripts/ci/preview.py", "comment", str(results)],
            cwd=engine.project,
            env=engine.env,
            text=True,
            capture_output=True,
            check=True,
        ).stdout
    finally:
        stack_file.write_text(original)
    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-3000:]
    return body


def test_dev_stack_on_s3_read_by_other_teams(on_s3: Engine, s3: S3, tmp_path: Path) -> None:
    engine = on_s3
    engine.run("stack", "select", "dev", "--create")
    try:
        second = _two_concurrent_ups(engine, s3)
        assert second.returncode != 0
        assert "the stack is currently locked by 1 lock(s)" in second.stdout + second.stderr, second.stdout[
            -3000:
        ]
        assert not s3.keys(LOCKS), "an update left its lock behind"
        assert ".pulumi/stacks/tuist-infra/dev.json" in s3.keys(".pulumi/stacks/"), (
            "no checkpoint in the bucket"
        )

        # Nothing lost: the refused update changed nothing and the first one recorded everything.
        preview = engine.run("preview", "--stack", "dev", "--expect-no-changes")
        assert "error" not in preview.stderr.lower(), preview.stderr
        outputs = json.loads(engine.run("stack", "output", "--json", "--stack", "dev").stdout)
        assert schema_errors(outputs) == []
        machines = [m for fleet in outputs["fleets"].values() for m in fleet["machines"]]
        assert len(machines) == sum(SIZES.values()), machines

        # Another team's Pulumi program (docs/outputs.md, run as written) through a StackReference.
        consumed = _run_consumer_program(engine, tmp_path)
        assert consumed["outputs_version"] == 1
        assert consumed["peer_endpoints"] == {
            rid: f"{r['peer_host']}:7443"
            for rid, r in outputs["regions"].items()
            if r["exposed"] and not r["private"]
        }
        assert set(consumed["peer_endpoints"]) == set(outputs["available_regions"])
        assert consumed["runner_slots"] == outputs["capacity"]["total"]["runner_slots"]

        # A plain script (docs/outputs.md) with nothing but the CLI, from outside any project.
        script = tmp_path / "regions.py"
        script.write_text(examples()["consumer-script"])
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        printed = subprocess.run(
            [sys.executable, str(script), STACK],
            cwd=elsewhere,
            env=engine.env,
            text=True,
            capture_output=True,
            check=False,
        )
        assert printed.returncode == 0, printed.stderr
        assert printed.stdout.splitlines() == [
            f"{rid}\t{outputs['regions'][rid]['host']}\t{outputs['regions'][rid]['failover_ip'] or '-'}"
            for rid in outputs["available_regions"]
        ]

        # The pull-request preview: the pack compares the program with what the stack holds.
        comment = _shrink_preview(engine, tmp_path)
        assert comment.startswith("<!-- tuist-infra-preview -->\n")
        row = next(line for line in comment.splitlines() if line.startswith("| `dev` |"))
        assert "✅ previewed" in row and "1 advisory: fleet-shrinking" in row, comment[:4000]
        assert "fleet kura-ovh shrinks from 2 to 1 machine(s): kura-ovh-1 will be released" in comment
        # The slot's claim, machine and NodeLabels, and the four local volumes of its box (ca-east's
        # volumes_per_box, by default 4): nothing else of the stack goes.
        assert "7 to delete" in row, row
    finally:
        destroy = engine.run("destroy", "--yes", "--skip-preview", "--stack", "dev", check=False)
    assert destroy.returncode == 0, destroy.stdout[-6000:] + destroy.stderr[-2000:]
    remaining = json.loads(engine.run("stack", "export", "--stack", "dev").stdout)
    assert not remaining["deployment"].get("resources"), "destroy left resources in state"
    # --preserve-config: the project copy's Pulumi.dev.yaml is the other e2e tests' too.
    engine.run("stack", "rm", "dev", "--yes", "--preserve-config")
    left = s3.keys(".pulumi/stacks/tuist-infra/dev")
    assert left == [".pulumi/stacks/tuist-infra/dev.json.bak"], (
        f"stack rm should leave only its backup: {left}"
    )
