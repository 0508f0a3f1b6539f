"""The dev stack driven through the real Pulumi engine.

Each test module copies the project into a temporary folder (so the work tree,
its state and its vendorsim are never touched), points the dev stack at a
vendorsim of its own on a free port, and runs the `pulumi` CLI that
scripts/bootstrap.sh built. A module of its own, not one per session: no module
meets the boxes, claims and audit another left behind, in whatever order and on
whichever pytest-xdist worker the modules run. Nothing here skips: without the
CLI the fixture fails and says how to build it.

`dev_cluster` (module) is a control plane as scripts/dev-up.sh starts one (two
cloud workers for the controllers, the platform's CRDs): the copy's dev stack
applies to it, and its kubeconfig secret is set as dev-up.sh sets it. Tests
whose subject is not the cluster (machines through the engine, the S3 backend)
run their stacks in the dev stack's other mode, `render_only`: manifests written
to a folder, no cluster, so a run has one dev-stack lifecycle on a cluster.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from bench.project import copy_project
from tests.providers.test_machine_support import fresh_box_range, move_boxes
from tests.support.cluster import KubeCluster, start_cluster, stop_cluster
from tests.support.pulumi_home import cli_env
from vendorsim.boxes import reap_orphans

REPO = Path(__file__).resolve().parents[2]
DEV_PASSPHRASE = "tuist-dev-only-passphrase"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Engine:
    """Runs the real CLI in the copied project with a private backend."""

    project: Path
    env: dict[str, str]
    vendorsim_url: str
    sim_state: Path | None = None  # vendorsim's state dir (its boxes' disks under boxes/)

    def run(self, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """The CLI's output also goes to <project>/../engine-logs/ as it runs, so a run that hangs (and
        is cut off by the test's timeout) can still be read."""
        logs = self.project.parent / "engine-logs"
        logs.mkdir(exist_ok=True)
        log = (
            logs
            / f"{len(list(logs.iterdir())):03d}-{'-'.join(a for a in args[:2] if not a.startswith('-'))}.log"
        )
        with log.open("w") as out:
            child = subprocess.Popen(
                ["pulumi", *args, "--non-interactive"],
                cwd=self.project,
                env=self.env,
                text=True,
                stdout=out,
                stderr=subprocess.PIPE,
                # A group of its own: a run cut off below ends with its plugins (language host,
                # providers), which killing the CLI alone leaves running on the machine.
                start_new_session=True,
            )
            try:
                _, stderr = child.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                raise AssertionError(
                    f"pulumi {' '.join(args)} ran past {timeout:g}s; its output so far ({log}):\n"
                    + log.read_text()[-6000:]
                ) from None
        proc = subprocess.CompletedProcess(child.args, child.returncode, log.read_text(), stderr)
        if check and proc.returncode != 0:
            # The engine prints each resource's error in its diagnostics, far above the tail.
            errors = [line for line in proc.stdout.splitlines() if "error" in line.lower()]
            raise AssertionError(
                f"pulumi {' '.join(args)} exited {proc.returncode}\n--- errors ---\n"
                + "\n".join(errors[:40])[:6000]
                + f"\n--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
            )
        return proc

    def admin(self, path: str) -> object:
        with urllib.request.urlopen(f"{self.vendorsim_url}/_admin/{path}", timeout=10) as resp:
            return json.load(resp)

    def admin_post(self, path: str, body: object) -> object:
        request = urllib.request.Request(
            f"{self.vendorsim_url}/_admin/{path}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            return json.load(resp)

    def admin_delete(self, path: str) -> object:
        request = urllib.request.Request(f"{self.vendorsim_url}/_admin/{path}", method="DELETE")
        with urllib.request.urlopen(request, timeout=10) as resp:
            return json.load(resp)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    pulumi_bin = REPO / ".toolchain" / "bin" / "pulumi"
    if not pulumi_bin.exists():
        pytest.fail("the Pulumi CLI is not built: run `bash scripts/bootstrap.sh` (scripts/test.sh does)")
    root = tmp_path_factory.mktemp("e2e")
    project = root / "project"
    copy_project(REPO, project)
    (project / ".venv").symlink_to(REPO / ".venv")
    # The boxes' kubelet is the stand-in of the toolchain (vendorsim/sandbox/login.sh finds it there).
    (project / ".toolchain").symlink_to(REPO / ".toolchain")
    port = free_port()
    while (ssh_port := free_port()) == port:
        pass
    # The boxes move to a loopback range and port of this session's own: a developer's dev vendorsim
    # may hold the inventory's (127.0.1-3.x:2222). The stack dials them as it dials real boxes.
    inventory_file = project / "vendorsim" / "inventory.dev.yaml"
    inventory = yaml.safe_load(inventory_file.read_text())
    move_boxes(inventory, fresh_box_range(), ssh_port)
    inventory_file.write_text(yaml.safe_dump(inventory, sort_keys=False))
    stack_file = project / "Pulumi.dev.yaml"
    stack_text = stack_file.read_text()
    assert stack_text.count("      ssh_port: 2222\n") == 5, "Pulumi.dev.yaml: expected 5 fleets on port 2222"
    stack_text = stack_text.replace("      ssh_port: 2222\n", f"      ssh_port: {ssh_port}\n")
    stack_file.write_text(stack_text.replace("127.0.0.1:8710", f"127.0.0.1:{port}"))

    env = cli_env(root, passphrase=DEV_PASSPHRASE)
    sim_state = root / "vendorsim"
    sim_state.mkdir()
    sim_log = (sim_state / "vendorsim.log").open("w")
    sim = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vendorsim",
            "--inventory",
            str(project / "vendorsim" / "inventory.dev.yaml"),
            "--state",
            str(sim_state),
            "--port",
            str(port),
            "--task-seconds",
            "0.5",
        ],
        cwd=project,
        env=env,
        stdout=sim_log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{url}/_admin/health", timeout=1).read()
            break
        except OSError:
            if sim.poll() is not None or time.monotonic() > deadline:
                sim.kill()
                pytest.fail(f"vendorsim did not start:\n{(sim_state / 'vendorsim.log').read_text()}")
            time.sleep(0.2)
    try:
        yield Engine(project=project, env=env, vendorsim_url=url, sim_state=sim_state)
    finally:
        sim.terminate()
        try:
            sim.wait(timeout=60)
        except subprocess.TimeoutExpired:
            sim.kill()
        sim_log.close()
        leftover = reap_orphans(sim_state / "boxes")
        assert not leftover, f"vendorsim left {len(leftover)} sshd processes running after it stopped"


def render_only_text(stack_file: str) -> str:
    """The same, on a stack file's text (its layout kept): api_server's line becomes render_dir's."""
    rendered, count = re.subn(
        r"^    api_server: https://127\.0\.0\.1:\d+\n",
        "    render_dir: rendered/e2e\n",
        stack_file,
        flags=re.M,
    )
    assert count == 1, "the stack file has no dev api_server line"
    return rendered


def render_only(config: dict[str, object]) -> dict[str, object]:
    """A stack file's `config` in the dev stack's other mode: every Kubernetes object written to a
    folder for reading, no cluster (no api_server, so no join waits for a Node)."""
    key = "tuist-infra:cluster"
    cluster = {k: v for k, v in dict(config[key]).items() if k != "api_server"}  # type: ignore[call-overload]
    return {**config, key: {**cluster, "render_dir": "rendered/e2e"}}


@pytest.fixture(scope="module")
def dev_cluster(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """The control plane of the copy's dev stack, started as scripts/dev-up.sh starts it, and named
    in the copy's Pulumi.dev.yaml: api_server, and the kubeconfig secret (set through stdin)."""
    directory = tmp_path_factory.mktemp("dev-cluster")
    cluster = start_cluster(directory, "--cloud-workers", "2", "--platform")
    try:
        stack_file = engine.project / "Pulumi.dev.yaml"
        text = stack_file.read_text()
        assert text.count("api_server: https://127.0.0.1:6443\n") == 1, "Pulumi.dev.yaml: no api_server"
        stack_file.write_text(text.replace("https://127.0.0.1:6443", cluster.api_server))
        engine.run("stack", "select", "dev", "--create")
        subprocess.run(
            ["pulumi", "config", "set", "--secret", "kubeconfig", "-s", "dev", "--non-interactive"],
            cwd=engine.project,
            env=engine.env,
            input=cluster.kubeconfig.read_text(),
            text=True,
            capture_output=True,
            check=True,
        )
        yield cluster
    finally:
        stop_cluster(directory)
