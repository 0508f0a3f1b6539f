"""Machines through the real engine (3.260): refresh, import, a small edit's preview, a failed create
that destroy cleans up, and the provider going away with a killed CLI.

Each test runs its own stack of the copied project (Pulumi.<name>.yaml written from Pulumi.dev.yaml,
one box per fleet, encrypted secrets shared through the same salt), against the module's vendorsim.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import Engine, render_only

# Each test is a sequence of engine runs (the longest, nine): 3 to 5 minutes alone, and past the
# suite's 10-minute default on a machine shared with a cold toolchain build, as its siblings allow for.
pytestmark = pytest.mark.timeout(1800)

OVH = ("ovh-ns1001.ip-203-0-113.net", "ovh-ns1002.ip-203-0-113.net")
NEVER = re.compile(r"cancel|terminat|confirmTermination|/order/", re.IGNORECASE)


def write_stack(
    engine: Engine,
    name: str,
    sizes: dict[str, int],
    labels: dict[str, str] | None = None,
    kura_ovh: dict[str, Any] | None = None,
) -> None:
    """Pulumi.<name>.yaml: the dev stack's config with the given fleet sizes (and extra kura-ovh labels
    or fields), rendering its manifests: these tests are about machines through the engine, and the
    run's one dev-stack lifecycle on a cluster is test_dev_stack.py's."""
    dev = yaml.safe_load((engine.project / "Pulumi.dev.yaml").read_text())
    dev["config"] = render_only(dev["config"])
    # The fleets a test does not size (Elastic Metal, the Macs) are left out, with what runs on them:
    # test_dev_stack.py adopts and releases them; here they would only add time.
    config = dev["config"]
    config["tuist-infra:fleets"] = [f for f in config["tuist-infra:fleets"] if f["name"] in sizes]
    for key in ("tuist-infra:regions", "tuist-infra:runner_pools"):
        config[key] = [item for item in config[key] if item["fleet"] in sizes]
    for fleet in dev["config"]["tuist-infra:fleets"]:
        fleet["size"] = sizes[fleet["name"]]
        if labels and fleet["name"] == "kura-ovh":
            fleet["labels"] = {**fleet.get("labels", {}), **labels}
        if kura_ovh and fleet["name"] == "kura-ovh":
            fleet.update(kura_ovh)
    (engine.project / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(dev, sort_keys=False))


def markers(engine: Engine) -> dict[str, str]:
    state: dict[str, Any] = engine.admin("state")  # type: ignore[assignment]
    fields = {s["box"]: s["displayName"] for s in state["ovh"]["servers"]}
    fields.update({s["box"]: " ".join(s.get("tags") or []) for s in state["dedibox"]["servers"]})
    fields.update({s["box"]: s["server_name"] for s in state["robot"]["servers"]})
    return fields


def steps(engine: Engine, stack: str) -> dict[str, str]:
    """urn -> op of a `pulumi preview --json`."""
    preview = engine.run("preview", "-s", stack, "--json")
    return {step["urn"]: step["op"] for step in json.loads(preview.stdout)["steps"]}


def resources(engine: Engine, stack: str) -> dict[str, dict[str, Any]]:
    exported = json.loads(engine.run("stack", "export", "-s", stack).stdout)
    return {r["urn"]: r for r in exported["deployment"].get("resources") or []}


def refresh(engine: Engine, stack: str, *flags: str) -> Any:
    """`pulumi refresh` of the stack's machine resources. (The dev stack renders its Kubernetes objects
    to a folder: the kubernetes provider has no cluster to read them back from, so they are left out.)"""
    machines = [urn for urn in resources(engine, stack) if "dynamic/machine:" in urn]
    targets = [arg for urn in machines for arg in ("--target", urn)]
    return engine.run("refresh", "-s", stack, "--yes", *targets, *flags)


def short(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def test_refresh_import_small_edits_and_a_failed_create_that_destroy_cleans_up(engine: Engine) -> None:
    stack = "machines"
    sizes = {"kura-ovh": 1, "kura-dedibox": 1, "runners-linux": 1}
    write_stack(engine, stack, sizes)
    engine.run("stack", "select", stack, "--create")
    before = markers(engine)

    # 1. up: a claim, a machine and NodeLabels per slot; progress lines on the resources, not in
    #    Diagnostics.
    up = engine.run("up", "-s", stack, "--yes", "--skip-preview")  # previews are steps 2-4's subject
    state = resources(engine, stack)
    kinds = sorted(short(u) for u in state if "dynamic/machine:" in u)
    assert kinds == sorted(f"{fleet}-0{suffix}" for fleet in sizes for suffix in ("", "-claim", "-labels")), (
        kinds
    )
    # The update's Diagnostics summary, up to the outputs.
    diagnostics = up.stdout.rsplit("Diagnostics:", 1)[-1] if "Diagnostics:" in up.stdout else ""
    diagnostics = re.split(r"\n(?:Outputs|Resources):", diagnostics, maxsplit=1)[0]
    assert "JOINING" not in diagnostics and "CLAIMING" not in diagnostics, diagnostics[:2000]
    assert "JOINING on ovh box" in up.stdout  # shown on the resource's row as it ran

    # 2. refresh with nothing changed changes nothing; neither does a preview.
    refresh(engine, stack, "--expect-no-changes")
    engine.run("preview", "-s", stack, "--expect-no-changes")

    # 3. A label edit previews as a label edit: the NodeLabels resource of the fleet's slot, nothing else.
    write_stack(engine, stack, sizes, labels={"tuist.dev/tier": "gold"})
    changed = {short(urn): op for urn, op in steps(engine, stack).items() if op != "same"}
    assert changed == {"kura-ovh-0-labels": "update"}, changed
    #    An edit the claim only records (here the release switch) previews as that, nothing else: the
    #    machine still reads the same box from it, though a preview cannot run the claim's update.
    write_stack(engine, stack, sizes, kura_ovh={"allow_release": True})
    changed = {short(urn): op for urn, op in steps(engine, stack).items() if op != "same"}
    assert changed == {"kura-ovh-0-claim": "update"}, changed
    write_stack(engine, stack, sizes)

    # 4. Import a box that is in use as a new slot of the fleet: the import file carries inputs and
    #    outputs (pulumi 3.260 cannot import a dynamic resource by id); after it, the slot is in the
    #    program and previews as no change.
    shown = engine.run("config", "-s", stack, "--show-secrets", "--json").stdout
    config_file = engine.project.parent / f"{stack}-config.json"
    config_file.write_text(shown)
    config_file.chmod(0o600)
    importer = subprocess.run(
        [
            str(engine.project / ".venv" / "bin" / "python"),
            "-m",
            "providers.machine.importing",
            "--stack",
            stack,
            "--fleet",
            "kura-ovh",
            "--slot",
            "1",
            "--box",
            "ns1002.ip-203-0-113.net",
            "--config",
            str(config_file),
            "--out",
            "import.json",
        ],
        cwd=engine.project,
        env=engine.env,
        text=True,
        capture_output=True,
        timeout=120,
    )
    config_file.unlink()
    assert importer.returncode == 0, importer.stderr
    assert "pulumi import --file import.json --generate-code=false --yes -s machines" in importer.stderr
    engine.run("import", "--file", "import.json", "--generate-code=false", "--yes", "-s", stack)
    sizes["kura-ovh"] = 2
    write_stack(engine, stack, sizes)
    ops = {short(urn): op for urn, op in steps(engine, stack).items()}
    assert {ops[name] for name in ("kura-ovh-1-claim", "kura-ovh-1", "kura-ovh-1-labels")} == {"same"}, ops
    # The failover IP and the region now count the second box.
    engine.run("up", "-s", stack, "--yes", "--skip-preview")
    refresh(engine, stack, "--expect-no-changes")

    # 5. A claim removed by hand: refresh reports the slot's claim and machine gone.
    box = "ns1001.ip-203-0-113.net"
    secrets = {k.split(":", 1)[1]: v["value"] for k, v in json.loads(shown).items()}
    _clear_ovh_claim(engine, secrets, box)
    refreshed = refresh(engine, stack)
    assert re.search(r"kura-ovh-0-claim\s+deleted", refreshed.stdout), refreshed.stdout[-3000:]
    assert re.search(r"kura-ovh-0\s+deleted", refreshed.stdout), refreshed.stdout[-3000:]
    assert "is claimed by nobody, not by this machine" in refreshed.stdout
    assert not [u for u in resources(engine, stack) if short(u) in ("kura-ovh-0-claim", "kura-ovh-0")]

    # 6. Robot rescue boot failing on every call: the new slot's create fails with a clear line,
    #    its claim is in state, and the destroy that follows returns every box of the stack.
    sizes["kura-ovh"], sizes["runners-linux"] = 1, 2
    write_stack(engine, stack, sizes)
    engine.admin_post(
        "faults",
        {
            "vendor": "robot",
            "route": "/robot/boot/*/rescue",
            "method": "POST",
            "error_rate": 1,
            "status": 400,
        },
    )
    try:
        failed = engine.run("up", "-s", stack, "--yes", "--skip-preview", check=False)
    finally:
        engine.admin_delete("faults")
    assert failed.returncode != 0
    assert re.search(
        r"runners-linux-1: RESCUE_BOOT failed on robot box 2345602 .*VendorRefused", failed.stdout
    )
    names = {short(u) for u in resources(engine, stack)}
    assert "runners-linux-1-claim" in names and "runners-linux-1" not in names

    engine.run("destroy", "-s", stack, "--yes", "--skip-preview")
    assert not resources(engine, stack)
    after = markers(engine)
    for key in (
        "ovh-ns1001.ip-203-0-113.net",
        "ovh-ns1002.ip-203-0-113.net",
        "dedibox-200101",
        "robot-2345601",
        "robot-2345602",
    ):
        assert after[key] == before[key], (key, after[key], before[key])
    audit: list[dict[str, Any]] = engine.admin("audit")["entries"]  # type: ignore[index]
    assert not [(e["method"], e["path"]) for e in audit if NEVER.search(e["path"])]
    engine.run("stack", "rm", stack, "--yes")


def _clear_ovh_claim(engine: Engine, secrets: dict[str, str], box: str) -> None:
    """What an operator does by hand in the OVH console: the displayName loses its claim."""
    from config.models import Vendors
    from providers.clients import vendor_client
    from providers.machine.spec import Vendor

    dev = yaml.safe_load((engine.project / "Pulumi.dev.yaml").read_text())
    vendors = Vendors.model_validate(dev["config"]["tuist-infra:vendors"])
    vendor_client(Vendor.OVH, vendors, lambda key: secrets[key]).set_claim(box, None)


def _descendants(pid: int) -> dict[int, str]:
    """pid -> command line of every process below `pid`."""
    children: dict[int, list[int]] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
        commands[int(entry.name)] = command
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = commands.get(child, "")
            todo.append(child)
    return found


def test_killing_the_cli_mid_join_leaves_no_provider_behind(engine: Engine) -> None:
    """Issue 12 point 10: the engine is killed (SIGKILL) while a machine's self-join runs over SSH; the
    dynamic provider process notices within seconds, hangs up its SSH sessions and exits."""
    stack = "killed"
    write_stack(engine, stack, {"kura-ovh": 1, "kura-dedibox": 1, "runners-linux": 1})
    engine.run("stack", "select", stack, "--create")
    cli = subprocess.Popen(
        ["pulumi", "up", "-s", stack, "--yes", "--skip-preview", "--non-interactive"],
        cwd=engine.project,
        env=engine.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert cli.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 600
    for line in cli.stdout:
        seen.append(line)
        if "JOINING on" in line or time.monotonic() > deadline:
            break
    providers = {pid: cmd for pid, cmd in _descendants(cli.pid).items() if "pulumi.dynamic" in cmd}
    others = _descendants(cli.pid)
    assert providers, "no dynamic provider process under the CLI:\n" + "".join(seen[-40:])
    os.kill(cli.pid, signal.SIGKILL)
    cli.wait(timeout=10)
    try:
        gone_by = time.monotonic() + 15
        while time.monotonic() < gone_by and any(Path(f"/proc/{pid}").exists() for pid in providers):
            time.sleep(0.2)
        left = [cmd for pid, cmd in providers.items() if Path(f"/proc/{pid}").exists()]
        assert not left, f"provider processes still running 15 s after the CLI was killed: {left}"
    finally:
        # The CLI's other plugins (its language host) are the engine's; this test started them, so it
        # ends them.
        for pid in others:
            if Path(f"/proc/{pid}").exists():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        cli.stdout.close()
    # The interrupted update left its lock and pending creates: clear them, then the boxes go back.
    state = Path(engine.env["PULUMI_BACKEND_URL"].removeprefix("file://")) / ".pulumi"
    for lock in (state / "locks").rglob("*.json"):
        lock.unlink()
    # A kill that lands while the file backend writes a checkpoint's metadata sidecar leaves it empty
    # (the checkpoint itself is renamed into place whole), and every later command fails with "failed
    # to load checkpoint: EOF": the repair docs/backends.md gives the operator.
    for sidecar in (state / "stacks").rglob("*.attrs"):
        if sidecar.stat().st_size == 0:
            sidecar.unlink()
    refresh(engine, stack, "--clear-pending-creates")
    engine.run("destroy", "-s", stack, "--yes", "--skip-preview")
    assert not resources(engine, stack)
    engine.run("stack", "rm", stack, "--yes")
