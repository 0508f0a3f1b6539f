"""`tuist-ops inventory` against vendorsim: one row per box of the stack's accounts, with holders decoded
from claim tokens, states, and no secret anywhere in the output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from config.loader import read_stack_file
from providers.claims import claim_token
from tests.ops.conftest import Ops, claim_resource, error_line
from tests.providers.test_machine_support import PROJECT, REPO, Sim, claim_props


def test_every_box_of_every_vendor_with_state_and_holder(sim: Sim, ops: Ops) -> None:
    since = sim.last_audit_id()
    # The stack claims one OVH box, as `pulumi up` would, and another stack's slot holds a Dedibox one.
    claimed = sim.claims().create(claim_props("kura-ovh", 0)).outs
    assert claimed is not None
    staging_slot = claim_token(PROJECT, "staging", "kura-dedibox-1")
    from providers.dedibox.client import DediboxClient

    creds = sim.inventory["credentials"]["dedibox"]
    DediboxClient(
        api_url=f"{sim.url}/dedibox",
        secret_key=creds["secret_key"],
        project_id=creds["project_id"],
        zones=["fr-par-2"],
    ).set_claim("fr-par-2/200102", __import__("providers.vendor", fromlist=["Claim"]).Claim(staging_slot))
    ops.state = [claim_resource("kura-ovh-0", "kura-ovh", "ovh", claimed["box_id"], claimed["claim_token"])]
    writes = len(sim.audit(since))

    doc = ops.json("inventory", "-s", "dev")

    rows = {row["box"]: row for row in doc["boxes"]}
    assert doc["cluster"] == "no cluster"
    assert len(rows) == 7 + 7 + 7  # every box of the OVH, Dedibox and Robot accounts
    assert {
        k: rows["ns1001.ip-203-0-113.net"][k] for k in ("vendor", "fleet", "state", "holder", "node_ready")
    } == {
        "vendor": "ovh",
        "fleet": "kura-ovh",
        "state": "claimed",
        "holder": "dev/kura-ovh-0",
        "node_ready": "-",
    }
    assert rows["ns1001.ip-203-0-113.net"]["holder_resource"] == "kura-ovh-0"
    assert (rows["fr-par-2/200102"]["state"], rows["fr-par-2/200102"]["holder"]) == (
        "claimed",
        "staging/kura-dedibox-1",
    )
    # A token no stack of the project derives is shown as such, never guessed.
    assert rows["ns1004.ip-203-0-113.net"]["holder"] == "unknown (a1ce00000001)"
    assert {
        b: rows[b]["state"]
        for b in ("ns1002.ip-203-0-113.net", "ns1005.ip-203-0-113.net", "ns1007.ip-203-0-113.net")
    } == {
        "ns1002.ip-203-0-113.net": "free",
        "ns1005.ip-203-0-113.net": "foreign",
        "ns1007.ip-203-0-113.net": "unmarked",
    }
    assert rows["fr-par-2/200105"]["state"] == "foreign"
    assert rows["2345601"]["state"] == "free"  # Robot boxes report no OS: they are installed on adoption
    assert rows["2345606"]["state"] == "foreign"
    # Reading wrote nothing.
    assert len(sim.audit(since)) == writes


def test_the_project_stack_files_are_read_once_per_command_not_once_per_box(
    ops: Ops, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Holders and foreign markers come from every Pulumi.<stack>.yaml of the project. Read per box,
    # an inventory of these 21 boxes parsed 79 files, and an estate of hundreds would parse thousands.
    reads: list[str] = []

    def counted(path: Path | str) -> dict[str, Any]:
        reads.append(Path(path).name)
        return read_stack_file(path)

    monkeypatch.setattr("ops.stack.read_stack_file", counted)
    doc = ops.json("inventory", "-s", "dev")

    assert len(doc["boxes"]) == 21
    assert doc["problems"] == []
    assert {"foreign", "unmarked", "free"} <= {row["state"] for row in doc["boxes"]}
    assert sorted(reads) == sorted(p.name for p in REPO.glob("Pulumi.*.yaml"))


def test_the_table_names_every_box_and_shows_no_secret(sim: Sim, ops: Ops) -> None:
    result = ops("inventory", "-s", "dev")
    assert result.exit_code == 0, result.output
    assert "ns1007.ip-203-0-113.net" in result.stdout and "2345607" in result.stdout
    for secret in ops.secrets():
        assert secret not in result.output


def test_a_vendor_down_is_one_warning_and_the_others_still_show(sim: Sim, ops: Ops) -> None:
    sim.faults({"vendor": "robot", "route": "/robot/server", "error_rate": 1, "status": 503})
    result = ops("inventory", "-s", "dev", "--json")
    assert result.exit_code == 1
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and warnings[0].startswith("warning: robot: listing boxes failed:"), (
        result.stderr
    )
    doc = json.loads(result.stdout)
    assert "ns1001.ip-203-0-113.net" in {row["box"] for row in doc["boxes"]}
    # The JSON says what it lacks, as the exit code does.
    assert [p.split(":", 1)[0] for p in doc["problems"]] == ["robot"]


def test_an_unknown_vendor_is_one_line(ops: Ops) -> None:
    assert error_line(ops("inventory", "-s", "dev", "--vendor", "linode")) == (
        "error: --vendor 'linode' is not one of ovh, dedibox, robot, scaleway_em, applesilicon"
    )


def test_a_stack_file_that_does_not_read_is_warned_about_once_not_skipped_silently(
    sim: Sim, tmp_path: Path
) -> None:
    from ops.stack import StaticStack, open_stack
    from tests.ops.conftest import FAST, dev_config

    for name in ("dev", "staging"):
        (tmp_path / f"Pulumi.{name}.yaml").write_text((REPO / f"Pulumi.{name}.yaml").read_text())
    (tmp_path / "Pulumi.canary.yaml").write_text("config:\n  tuist-infra:a: 1\n<<<<<<< HEAD\n")
    stack = open_stack(StaticStack("dev", dev_config(sim), []), timing=FAST, project_dir=tmp_path)
    said: list[str] = []
    stack.warn = said.append

    assert sorted(stack.project_stacks()) == ["dev", "staging"]
    stack.holders()
    stack.other_environment_markers(stack.cfg.fleets[0].vendor)

    assert len(said) == 1 and said[0].startswith("Pulumi.canary.yaml skipped ("), said
    assert said[0].endswith("claims of its stack read as unknown, and its markers as no other environment's")
