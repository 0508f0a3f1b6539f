"""docs/runbook.md, run: every `sh` block of every procedure, in the order written, against a stack of
the copied project on the module's vendorsim through the real Pulumi engine (tests/e2e/conftest.py).

The stack is the dev stack's config, rendering its manifests (no cluster: these procedures are about
boxes, claims and failover IPs; the cluster half of the watcher's rule is tests/watcher's), with one
box per Kura fleet and no runner box, so each `pulumi up` adopts little. The test sets each
procedure's variables (the runbook's blocks default them for the dev stack), sets up what the
procedure is about where it needs it (a release that died midway), and checks the estate after each.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from providers.claims import claim_token
from tests.e2e.conftest import Engine, render_only

REPO = Path(__file__).resolve().parents[2]
RUNBOOK = REPO / "docs" / "runbook.md"
STACK = "runbook"
PROJECT = "tuist-infra"

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]
KURA_IMAGES = ("runtime_image_tag", "controller_image", "failover_watcher_image")


def procedures() -> dict[str, str]:
    """heading -> the procedure's `sh` blocks, joined in order."""
    text = RUNBOOK.read_text()
    found: dict[str, str] = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        heading, _, body = section.partition("\n")
        blocks = re.findall(r"^```sh\n(.*?)^```", body, flags=re.M | re.S)
        if blocks:
            found[heading.strip()] = "\n".join(blocks)
    return found


def run_procedure(engine: Engine, heading: str, **variables: str) -> subprocess.CompletedProcess[str]:
    script = procedures()[heading]
    # Each command is traced with the time it started, into engine-logs/ beside the engine's own logs.
    env = {**engine.env, "STACK": STACK, **variables}
    logs = engine.project.parent / "engine-logs"
    logs.mkdir(exist_ok=True)
    log = logs / f"runbook-{re.sub(r'[^a-z]+', '-', heading.lower()).strip('-')}.log"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-x", "-c", "PS4='+ $(date +%T) '\n" + script],
        cwd=engine.project,
        env=env,
        text=True,
        capture_output=True,
        timeout=1200,
    )
    log.write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    assert done.returncode == 0, (
        f"runbook: {heading!r} failed ({log}):\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    )
    return done


def ops_json(engine: Engine, *args: str) -> Any:
    done = subprocess.run(
        ["tuist-ops", *args, "-s", STACK, "--json"],
        cwd=engine.project,
        env=engine.env,
        text=True,
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def ovh_rows(engine: Engine) -> dict[str, dict[str, Any]]:
    return {r["box"]: r for r in ops_json(engine, "inventory", "--vendor", "ovh")["boxes"]}


def test_every_preview_and_up_in_the_runbook_runs_the_policy_pack() -> None:
    """As CI's (scripts/ci/deploy.sh, scripts/ci/preview.py): an operator's deploy of a real stack
    without the pack would skip the invariants it enforces (protected production machines, ...)."""
    commands = [
        line.strip()
        for script in procedures().values()
        for line in script.splitlines()
        if re.search(r"\bpulumi\s+(preview|up|destroy)\b", line)
    ]
    assert len(commands) == 4, commands
    assert [c for c in commands if "--policy-pack policy" not in c.split("#")[0]] == []


def test_the_runbook_procedures_run_as_written(engine: Engine) -> None:
    assert set(procedures()) == {
        "Bring a region's box online",
        "Rotate a box out",
        "Failover with no eligible box",
        "Host-key mismatch",
        "A stuck release",
    }
    dev = yaml.safe_load((engine.project / "Pulumi.dev.yaml").read_text())
    dev["config"] = render_only(dev["config"])
    # The runbook's procedures are about the boxes an operator preps (OVH, Dedibox): the Scaleway
    # fleets and the private region on them stay out of this stack.
    scaleway = {"kura-scw", "runners-macos"}
    config = dev["config"]
    config[f"{PROJECT}:fleets"] = [f for f in config[f"{PROJECT}:fleets"] if f["name"] not in scaleway]
    config[f"{PROJECT}:regions"] = [r for r in config[f"{PROJECT}:regions"] if r["fleet"] not in scaleway]
    fleets = config[f"{PROJECT}:fleets"]
    for fleet in fleets:
        fleet["size"] = {"kura-ovh": 1, "kura-dedibox": 1, "runners-linux": 0}[fleet["name"]]
    # No runner box: no runner pool either (its replicas must fit the fleet).
    dev["config"].pop(f"{PROJECT}:runner_pools")
    # The runbook previews and deploys with the policy pack, which allows the dev config's floating
    # image tags (latest, main) to the dev stack alone: this stack pins production's images.
    production = yaml.safe_load((engine.project / "Pulumi.production.yaml").read_text())["config"]
    for key, fields in (("kura", KURA_IMAGES), ("cluster", ("runners_controller_image",))):
        for name in fields:
            config[f"{PROJECT}:{key}"][name] = production[f"{PROJECT}:{key}"][name]
    (engine.project / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump(dev, sort_keys=False))
    engine.run("stack", "select", STACK, "--create")
    engine.run("up", "-s", STACK, "--yes", "--skip-preview")
    rows = ovh_rows(engine)
    assert rows["ns1001.ip-203-0-113.net"]["holder"] == f"{STACK}/kura-ovh-0"
    try:
        # 1. A new box for kura-ovh: prepped, marked, and the fleet grown by one.
        run_procedure(
            engine,
            "Bring a region's box online",
            BOX="ovh:ns1007.ip-203-0-113.net",
            FLEET="kura-ovh",
            FLEET_INDEX=str([f["name"] for f in fleets].index("kura-ovh")),
            NEW_SIZE="2",
        )
        rows = ovh_rows(engine)
        assert (rows["ns1007.ip-203-0-113.net"]["fleet"], rows["ns1007.ip-203-0-113.net"]["state"]) in {
            ("kura-ovh", "free"),
            ("kura-ovh", "claimed"),
        }
        held = {r["holder_resource"]: box for box, r in rows.items() if r["holder_stack"] == STACK}
        assert set(held) == {"kura-ovh-0", "kura-ovh-1"}
        assert held["kura-ovh-0"] == "ns1001.ip-203-0-113.net"

        # 2. The box holding the region's IP and slot 0 leaves: the IP moves to slot 1's box first,
        #    then the fleet excludes the box; the preview shows that slot alone replaced.
        target = held["kura-ovh-1"]
        # The audit holds this test's earlier steps too: count from here on.
        since = max((e["id"] for e in engine.admin("audit")["entries"]), default=0)  # type: ignore[index]
        rotated = run_procedure(
            engine,
            "Rotate a box out",
            BOX="ovh:ns1001.ip-203-0-113.net",
            REGION="ca-east",
            TARGET=target,
            FLEET_INDEX=str([f["name"] for f in fleets].index("kura-ovh")),
            EXCLUDED_INDEX="0",
        )
        replaced = set(re.findall(r"\+-\s+\S+\s+(\S+)\s+replace", rotated.stdout))
        assert {"kura-ovh-0-claim", "kura-ovh-0"} <= replaced, rotated.stdout[-6000:]
        assert not {name for name in replaced if name.startswith("kura-ovh-1")}, replaced
        rows = ovh_rows(engine)
        assert (rows["ns1001.ip-203-0-113.net"]["state"], rows["ns1001.ip-203-0-113.net"]["holder"]) == (
            "unmarked",
            None,
        )
        held = {r["holder_resource"]: box for box, r in rows.items() if r["holder_stack"] == STACK}
        assert set(held) == {"kura-ovh-0", "kura-ovh-1"} and "ns1001.ip-203-0-113.net" not in held.values()
        routes = {r["region"]: r for r in ops_json(engine, "failover", "status")["regions"]}
        assert routes["ca-east"]["routed_to"] == target
        reinstalls = [
            e
            for e in engine.admin("audit")["entries"]  # type: ignore[index]
            if e["id"] > since
            and e["method"] == "POST"
            and e["path"].endswith("ns1001.ip-203-0-113.net/reinstall")
        ]
        assert len(reinstalls) == 1  # the release's; nothing was cancelled or deleted

        # 3. The Dedibox region's IP, moved past the rule onto its one box (where it already is).
        dedibox = ops_json(engine, "inventory", "--vendor", "dedibox")["boxes"]
        (dedibox_box,) = [r["box"] for r in dedibox if r["holder"] == f"{STACK}/kura-dedibox-0"]
        run_procedure(engine, "Failover with no eligible box", REGION="eu-central", TARGET=dedibox_box)

        # 4. The host-key check of an adopted box: it answers with the key its machine pinned.
        check = run_procedure(engine, "Host-key mismatch", BOX=f"ovh:{target}")
        assert ": matches" in check.stdout

        # 5. A release of a slot that is no longer in state died after marking its box releasing.
        free = sorted(box for box, r in rows.items() if r["state"] == "free")
        assert free, rows
        stuck = free[0]
        token = claim_token(PROJECT, STACK, "kura-ovh-9")
        before = rows[stuck]["marker"]
        set_releasing(engine, stuck, token)
        assert ovh_rows(engine)[stuck]["state"] == "releasing"
        run_procedure(engine, "A stuck release", BOX=f"ovh:{stuck}")
        assert (ovh_rows(engine)[stuck]["state"], ovh_rows(engine)[stuck]["marker"]) == ("free", before)
    finally:
        engine.run("destroy", "-s", STACK, "--yes", "--skip-preview")
        engine.run("stack", "rm", STACK, "--yes")


def set_releasing(engine: Engine, box: str, token: str) -> None:
    """What a release leaves when it dies after RELEASE_MARKING: the OVH displayName says releasing."""
    from providers.ovh.client import OvhClient
    from providers.vendor import Claim

    inventory = yaml.safe_load((engine.project / "vendorsim" / "inventory.dev.yaml").read_text())
    creds = inventory["credentials"]["ovh"]
    client = OvhClient(
        endpoint=f"{engine.vendorsim_url}/ovh/1.0",
        application_key=creds["application_key"],
        application_secret=creds["application_secret"],
        consumer_key=creds["consumer_key"],
    )
    client.set_claim(box, Claim(token, releasing=True))
