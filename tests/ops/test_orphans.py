"""`tuist-ops orphans` and the `unclaim` it prescribes, against vendorsim: each disagreement between the
vendors' claims and the stack's state, with its exact fix, and the fix carried out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from providers.claims import claim_token
from tests.ops.conftest import Ops, claim_resource, dev_config_with_scaleway, error_line
from tests.providers.test_machine_support import PROJECT, REPO, Sim, claim_props
from tests.support.cluster import KubeCluster


def token(slot: str) -> str:
    return claim_token(PROJECT, "dev", slot)


def test_each_orphan_with_the_command_that_fixes_it(sim: Sim, ops: Ops) -> None:
    claims = sim.claims()
    # kura-ovh-0: claimed and in state (no finding). kura-ovh-1: claimed, the state write lost (a crash).
    # kura-ovh-7: a slot past the fleet's size, claimed and not in state (the fleet shrank by hand).
    held = claims.create(claim_props("kura-ovh", 0)).outs
    lost = claims.create(claim_props("kura-ovh", 1)).outs
    gone = claims.create(claim_props("kura-ovh", 7)).outs
    assert held and lost and gone
    # kura-dedibox-0 is in state, but its box no longer carries its claim.
    ops.state = [
        claim_resource("kura-ovh-0", "kura-ovh", "ovh", held["box_id"], held["claim_token"]),
        claim_resource(
            "kura-dedibox-0", "kura-dedibox", "dedibox", "fr-par-2/200103", token("kura-dedibox-0")
        ),
    ]

    findings = ops.json("orphans", "-s", "dev")["findings"]

    urn = ops.state[1]["urn"]
    assert sorted((f["kind"], f["box"], f["fix"]) for f in findings) == sorted(
        [
            ("claim-without-state", f"ovh:{lost['box_id']}", "pulumi up -s dev"),
            (
                "claim-without-state",
                f"ovh:{gone['box_id']}",
                f"tuist-ops unclaim -s dev ovh:{gone['box_id']}",
            ),
            (
                "state-without-claim",
                "dedibox:fr-par-2/200103",
                f"pulumi refresh -s dev --yes --target '{urn}'",
            ),
            # The simulator's decoys: claims whose tokens no stack file of the project derives.
            (
                "unknown-claim",
                "ovh:ns1004.ip-203-0-113.net",
                "tuist-ops unclaim -s dev ovh:ns1004.ip-203-0-113.net --force",
            ),
            (
                "unknown-claim",
                "dedibox:fr-par-2/200104",
                "tuist-ops unclaim -s dev dedibox:fr-par-2/200104 --force",
            ),
            ("unknown-claim", "robot:2345604", "tuist-ops unclaim -s dev robot:2345604 --force"),
        ]
    )
    details = {f["box"]: f["detail"] for f in findings}
    assert details[f"ovh:{lost['box_id']}"] == (
        "claimed by dev/kura-ovh-1, not in state; slot kura-ovh-1 is in the config: its create finds "
        "this claim and resumes"
    )
    assert details["dedibox:fr-par-2/200103"] == (
        f"kura-dedibox-0-claim holds it in state with claim {token('kura-dedibox-0')}, "
        "but the box is unclaimed"
    )


def test_unclaim_returns_an_orphaned_box_to_the_pool_by_reinstalling_it(sim: Sim, ops: Ops) -> None:
    gone = sim.claims().create(claim_props("kura-ovh", 7)).outs
    assert gone
    box = gone["box_id"]
    since = sim.last_audit_id()
    dry = ops("unclaim", "-s", "dev", f"ovh:{box}", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert sim.audit(since) == []

    result = ops("unclaim", "-s", "dev", f"ovh:{box}", "--yes")

    assert result.exit_code == 0, result.output
    base = "tuist-kura-dev-ovh-1"
    assert [(e["method"], e["path"], e["body"]) for e in sim.audit(since) if e["method"] == "PUT"] == [
        (
            "PUT",
            "/ovh/1.0/service/10001001",
            {"resource": {"displayName": f"{base}--r-{token('kura-ovh-7')}", "name": box}},
        ),
        ("PUT", "/ovh/1.0/service/10001001", {"resource": {"displayName": base, "name": box}}),
    ]
    assert [e["path"] for e in sim.audit(since) if e["method"] == "POST"] == [
        f"/ovh/1.0/dedicated/server/{box}/reinstall"
    ]
    assert ops.json("orphans", "-s", "dev")["findings"] == [
        f for f in ops.json("orphans", "-s", "dev")["findings"] if f["kind"] == "unknown-claim"
    ]


def test_unclaims_reinstall_is_asked_for_at_a_terminal_and_needs_yes_without_one(sim: Sim, ops: Ops) -> None:
    """The reinstall wipes the box: with no terminal (CI, a script) unclaim refuses without --yes; at a
    terminal it asks after printing the plan, and anything but yes changes nothing."""
    gone = sim.claims().create(claim_props("kura-ovh", 7)).outs
    assert gone
    box = gone["box_id"]
    since = sim.last_audit_id()

    assert error_line(ops("unclaim", "-s", "dev", f"ovh:{box}")) == (
        f"error: ovh:{box}: the reinstall wipes its disks; nothing was changed. Rerun with --yes (after "
        "--dry-run has shown the plan), or at a terminal to be asked"
    )
    for answer in ("n\n", "\n"):
        declined = ops("unclaim", "-s", "dev", f"ovh:{box}", answer=answer)
        assert declined.exit_code == 1
        # (At a terminal the answer's newline ends the question's line; the test runner echoes it on stdout.)
        assert declined.stderr.endswith(
            f"Reinstall ovh:{box}, wiping its disks? [y/N]:"
            f"error: ovh:{box}: not confirmed; nothing was changed\n"
        )
        # The plan came first, so the question is about something shown.
        assert declined.stderr.index("reinstall") < declined.stderr.index("wiping its disks?")
    assert [e for e in sim.audit(since) if e["method"] != "GET"] == []

    done = ops("unclaim", "-s", "dev", f"ovh:{box}", answer="y\n")
    assert done.exit_code == 0, done.output
    assert [e["path"] for e in sim.audit(since) if e["method"] == "POST"] == [
        f"/ovh/1.0/dedicated/server/{box}/reinstall"
    ]


def test_unclaim_without_reinstall_asks_nothing(sim: Sim, ops: Ops) -> None:
    gone = sim.claims().create(claim_props("kura-ovh", 7)).outs
    assert gone
    done = ops("unclaim", "-s", "dev", f"ovh:{gone['box_id']}", "--no-reinstall")
    assert done.exit_code == 0, done.output
    assert "wiping" not in done.stderr


def test_unclaim_refuses_a_claim_the_state_holds_and_another_stacks_claim(sim: Sim, ops: Ops) -> None:
    held = sim.claims().create(claim_props("kura-ovh", 0)).outs
    assert held
    ops.state = [claim_resource("kura-ovh-0", "kura-ovh", "ovh", held["box_id"], held["claim_token"])]
    staging = (
        sim.claims().create(claim_props("kura-ovh", 2, stack="staging", resource_name="kura-ca-east-0")).outs
    )
    assert staging
    since = sim.last_audit_id()
    assert error_line(ops("unclaim", "-s", "dev", f"ovh:{held['box_id']}")) == (
        f"error: refusing to unclaim ovh:{held['box_id']}: its holder dev/kura-ovh-0 is in stack dev's state "
        "(kura-ovh-0-claim); `pulumi up`/`pulumi destroy` releases it (or --force)"
    )
    for force in ([], ["--force"]):  # --force is for this stack's claims, never another stack's
        assert error_line(ops("unclaim", "-s", "dev", f"ovh:{staging['box_id']}", *force)) == (
            f"error: refusing to unclaim ovh:{staging['box_id']}: it is held by stack staging "
            "(kura-ca-east-0); run this against -s staging"
        )
    assert error_line(ops("unclaim", "-s", "dev", "ovh:ns1004.ip-203-0-113.net")).startswith(
        "error: refusing to unclaim ovh:ns1004.ip-203-0-113.net: its claim token a1ce00000001 names no slot"
    )
    assert error_line(ops("unclaim", "-s", "dev", "ovh:ns1007.ip-203-0-113.net")) == (
        "error: ovh:ns1007.ip-203-0-113.net: carries no claim; nothing to unclaim"
    )
    assert sim.audit(since) == []


def test_unclaim_leaves_a_claim_the_next_up_resumes_unless_forced(sim: Sim, ops: Ops) -> None:
    """A claim of a slot the config has, which the state does not hold (a create under way, a lost state
    write), is the one `pulumi up` resumes (orphans says so): unclaim would wipe the box from under it.
    --force gives the box up, and its resume hint keeps --force."""
    resumed = sim.claims().create(claim_props("kura-ovh", 1)).outs
    assert resumed
    box = resumed["box_id"]
    since = sim.last_audit_id()
    for extra in ([], ["--yes"], ["--dry-run"]):
        assert error_line(ops("unclaim", "-s", "dev", f"ovh:{box}", *extra)) == (
            f"error: refusing to unclaim ovh:{box}: its holder dev/kura-ovh-1 is a slot of stack dev's "
            "config that its state does not hold: `pulumi up` resumes that claim (`tuist-ops orphans` says "
            "so); to give the box up instead, rerun with --force"
        )
    assert sim.audit(since) == []
    forced = ops("unclaim", "-s", "dev", f"ovh:{box}", "--force", "--no-reinstall", "--yes")
    assert forced.exit_code == 0, forced.output
    assert [e["body"]["resource"]["displayName"] for e in sim.audit(since) if e["method"] == "PUT"] == [
        f"tuist-kura-dev-ovh-1--r-{token('kura-ovh-1')}",
        "tuist-kura-dev-ovh-1",
    ]


def test_unclaim_reads_the_claim_again_after_its_question_and_writes_over_no_other(
    sim: Sim, ops: Ops, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The question may wait on a person; a claim that changed meanwhile is not the one the plan showed."""
    import typer

    from providers.vendor import Claim, Vendor

    gone = sim.claims().create(claim_props("kura-ovh", 7)).outs
    assert gone
    box = gone["box_id"]

    def another_holder_meanwhile(*_args: object, **_kwargs: object) -> bool:
        sim.claims()._config().vendor_client(Vendor.OVH).set_claim(box, Claim(token("kura-ovh-8")))
        return True

    monkeypatch.setattr(typer, "confirm", another_holder_meanwhile)
    since = sim.last_audit_id()
    assert error_line(ops("unclaim", "-s", "dev", f"ovh:{box}", answer="y\n")) == (
        f"error: ovh:{box}: its claim changed since the plan ({token('kura-ovh-7')} -> "
        f"{token('kura-ovh-8')}); nothing was changed: run unclaim again to see the new plan"
    )
    writes = [e["body"]["resource"]["displayName"] for e in sim.audit(since) if e["method"] != "GET"]
    assert writes == [f"tuist-kura-dev-ovh-1--c-{token('kura-ovh-8')}"]  # the other holder's, alone


def test_a_stuck_release_is_finished_by_unclaim(sim: Sim, ops: Ops) -> None:
    """A release that died after marking the box releasing (the claim is `--r-`, the slot gone from
    state): unclaim carries on from there and leaves the box free."""
    from providers.vendor import Claim

    claims = sim.claims()
    outs = claims.create(claim_props("kura-ovh", 5)).outs
    assert outs
    client = claims._config().vendor_client(__import__("providers.vendor", fromlist=["Vendor"]).Vendor.OVH)
    client.set_claim(outs["box_id"], Claim(outs["claim_token"], releasing=True))
    rows = {r["box"]: r for r in ops.json("inventory", "-s", "dev", "--vendor", "ovh")["boxes"]}
    assert rows[outs["box_id"]]["state"] == "releasing"

    assert ops("unclaim", "-s", "dev", f"ovh:{outs['box_id']}", "--yes").exit_code == 0

    rows = {r["box"]: r for r in ops.json("inventory", "-s", "dev", "--vendor", "ovh")["boxes"]}
    assert (rows[outs["box_id"]]["state"], rows[outs["box_id"]]["holder"]) == ("free", None)


EM_SERVER = "e1000000-0000-4000-8000-000000000001"
MAC_SERVER = "a5000000-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    ("fleet", "vendor", "box", "server", "install"),
    [
        (
            "kura-scw",
            "scaleway_em",
            f"fr-par-2/{EM_SERVER}",
            f"/scaleway/baremetal/v1/zones/fr-par-2/servers/{EM_SERVER}",
            "install",
        ),
        (
            "runners-macos",
            "applesilicon",
            f"fr-par-3/{MAC_SERVER}",
            f"/scaleway/apple-silicon/v1alpha1/zones/fr-par-3/servers/{MAC_SERVER}",
            "reinstall",
        ),
    ],
    ids=["elastic-metal", "apple-silicon"],
)
def test_a_stuck_elastic_metal_or_mac_release_is_finished_by_unclaim_with_its_reinstall(
    sim: Sim, fleet: str, vendor: str, box: str, server: str, install: str
) -> None:
    """Their adoption installs nothing: a box unclaim put back unwiped would be adopted as it is. So
    unclaim reinstalls it through the vendor's API, waits for the install to end, then clears the claim,
    as their release does."""
    from providers.vendor import Claim, InstallState, Vendor

    ops = Ops(sim, config=dev_config_with_scaleway)
    claims = sim.claims()
    outs = claims.create(claim_props(fleet, 7)).outs  # a slot past the fleet's size: in no state
    assert outs and outs["box_id"] == box
    client = claims._config().vendor_client(Vendor(vendor))
    client.set_claim(box, Claim(outs["claim_token"], releasing=True))  # the release died after this
    since = sim.last_audit_id()

    dry = ops("unclaim", "-s", "dev", f"{vendor}:{box}", "--dry-run")
    assert dry.exit_code == 0, dry.output
    os_label = "macos-tahoe" if vendor == "applesilicon" else "ubuntu_24.04"
    assert f"  2. reinstall {os_label} with the fleet key and wait for it" in dry.stderr.splitlines()
    assert sim.audit(since) == []

    result = ops("unclaim", "-s", "dev", f"{vendor}:{box}", "--yes")

    assert result.exit_code == 0, result.output
    entries = [e for e in sim.audit(since) if e["method"] != "GET"]
    assert [(e["method"], e["path"]) for e in entries] == [
        ("POST", "/scaleway/iam/v1alpha1/ssh-keys"),  # the fleet key, for the install
        ("POST", f"{server}/{install}"),
        ("PATCH", server),  # the claim cleared (it was marked releasing already)
    ]
    # Waited for: the claim was cleared once the install had ended, not as soon as it was sent.
    assert client.install_state(box) is InstallState.DONE
    assert entries[2]["time"] - entries[1]["time"] >= 0.2  # the simulator's install time
    lines = result.stderr.splitlines()
    assert lines[-1] == f"{vendor}:{box}: back in the pool (claim removed)"
    assert client.get_box(box).claim is None
    for secret in ops.secrets():
        assert secret not in result.output


def test_unclaim_reinstalls_no_robot_box_it_is_the_adoption_that_installs_it(sim: Sim, ops: Ops) -> None:
    since = sim.last_audit_id()
    assert error_line(ops("unclaim", "-s", "dev", "robot:2345604", "--force")) == (
        "error: robot:2345604: robot boxes are reinstalled through a rescue system the program drives; "
        "rerun with --no-reinstall and let the next adoption install it"
    )
    assert sim.audit(since) == []


def test_urn_names_the_claim_that_holds_a_box(ops: Ops) -> None:
    ops.state = [
        claim_resource("kura-ovh-0", "kura-ovh", "ovh", "ns1001.ip-203-0-113.net", token("kura-ovh-0"))
    ]
    result = ops("urn", "-s", "dev", "ovh:ns1001.ip-203-0-113.net")
    assert (result.exit_code, result.stdout) == (0, ops.state[0]["urn"] + "\n")
    assert error_line(ops("urn", "-s", "dev", "ovh:ns1002.ip-203-0-113.net")) == (
        "error: ovh:ns1002.ip-203-0-113.net: no MachineClaim in stack dev's state holds it"
    )
    from ops.stack import MACHINE_TYPE

    machine = {"urn": "urn:pulumi:dev::tuist-infra::x::kura-ovh-0", "type": MACHINE_TYPE}
    ops.state.append({**machine, "outputs": {"box_id": "ns1001.ip-203-0-113.net", "vendor": "ovh"}})
    result = ops("urn", "-s", "dev", "ovh:ns1001.ip-203-0-113.net", "--machine")
    assert (result.exit_code, result.stdout) == (0, machine["urn"] + "\n")


def test_a_vendor_that_does_not_list_is_said_once_and_its_slots_are_not_read_one_by_one(
    sim: Sim, ops: Ops
) -> None:
    held = sim.claims().create(claim_props("kura-ovh", 0)).outs
    assert held
    ops.state = [claim_resource("kura-ovh-0", "kura-ovh", "ovh", held["box_id"], held["claim_token"])]
    sim.faults({"vendor": "ovh", "route": "/ovh/1.0/dedicated/server", "error_rate": 1, "status": 503})
    since = sim.last_audit_id()

    result = ops("orphans", "-s", "dev", "--json")

    assert result.exit_code == 1
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem.startswith("ovh: listing boxes failed:"), problem
    assert problem.endswith("; its 1 slot(s) in state were not checked"), problem
    # Each slot's box read from a vendor that just failed would cost it every retry.
    assert not [e for e in sim.audit(since) if e["path"].endswith(f"/dedicated/server/{held['box_id']}")]


def test_orphans_run_from_a_subdirectory_reads_the_project_s_other_stacks(
    sim: Sim, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From docs/, another stack's claim is still that stack's (no `--force` unclaim suggested for a
    box it holds): the stack files are read from the project's root, as `pulumi` finds it."""
    project = tmp_path / "project"
    (project / "docs").mkdir(parents=True)
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml"):
        (project / name).write_text((REPO / name).read_text())
    # Another stack of the dev environment (as tests/e2e/test_runbook.py's `runbook`) holds a box.
    (project / "Pulumi.other.yaml").write_text((REPO / "Pulumi.dev.yaml").read_text())
    held = sim.claims().create(claim_props("kura-ovh", 0, stack="other")).outs
    assert held
    box = f"ovh:{held['box_id']}"
    ops = Ops(sim, project_dir=None)  # the CLI's own: the project holding the working directory

    monkeypatch.chdir(project)
    at_root = ops.json("orphans", "-s", "dev")
    holder = {r["box"]: r["holder"] for r in ops.json("inventory", "-s", "dev", "--vendor", "ovh")["boxes"]}
    assert holder[held["box_id"]] == "other/kura-ovh-0"
    assert box not in {f["box"] for f in at_root["findings"]}

    monkeypatch.chdir(project / "docs")
    assert ops.json("orphans", "-s", "dev") == at_root
    below = {r["box"]: r["holder"] for r in ops.json("inventory", "-s", "dev", "--vendor", "ovh")["boxes"]}
    assert below == holder

    monkeypatch.chdir(tmp_path)
    assert error_line(ops("orphans", "-s", "dev")) == (
        f"error: no Pulumi.yaml in {tmp_path.resolve()} or any directory above it: run tuist-ops inside "
        "the project (the repository's checkout)"
    )


def test_urn_refuses_a_box_two_claims_of_the_state_hold_naming_both(ops: Ops) -> None:
    """Its URN goes to `pulumi state unprotect` and `--target`: with two holders it names neither
    alone, nothing on stdout."""
    box = "ns1001.ip-203-0-113.net"
    ops.state = [
        claim_resource("kura-ovh-0", "kura-ovh", "ovh", box, token("kura-ovh-0")),
        claim_resource("kura-ovh-1", "kura-ovh", "ovh", box, token("kura-ovh-1")),
        claim_resource("kura-ovh-2", "kura-ovh", "ovh", "ns1002.ip-203-0-113.net", token("kura-ovh-2")),
    ]
    result = ops("urn", "-s", "dev", f"ovh:{box}")
    assert error_line(result) == (
        f"error: ovh:{box}: 2 MachineClaims in stack dev's state hold it "
        f"({ops.state[0]['urn']}, {ops.state[1]['urn']}); find out which one really holds it before "
        "passing a URN to pulumi"
    )
    assert result.stdout == ""


def audited(sim: Sim, since: int) -> list[tuple[str, str, object]]:
    return [(e["method"], e["path"], e["body"]) for e in sim.audit(since) if e["method"] != "GET"]


def test_a_releasing_claim_of_a_slot_in_the_config_is_fixed_by_unclaim_not_pulumi_up(
    sim: Sim, ops: Ops
) -> None:
    """kura-ovh-1 is in the config, not in state, and its box's claim is releasing (a release cut
    short): `pulumi up` refuses such a box and names unclaim, so orphans prescribes unclaim, and the
    unclaim it prescribes (no --force) finishes the release."""
    from providers.vendor import Claim, Vendor

    claims = sim.claims()
    outs = claims.create(claim_props("kura-ovh", 1)).outs
    assert outs
    box = outs["box_id"]
    claims._config().vendor_client(Vendor.OVH).set_claim(box, Claim(outs["claim_token"], releasing=True))
    since = sim.last_audit_id()

    (finding,) = [f for f in ops.json("orphans", "-s", "dev")["findings"] if f["box"] == f"ovh:{box}"]

    assert finding == {
        "kind": "claim-without-state",
        "box": f"ovh:{box}",
        "detail": (
            "claimed by dev/kura-ovh-1, not in state; slot kura-ovh-1 is in the config, but the claim is "
            "releasing (a release cut short): `pulumi up` refuses it; unclaim finishes the release"
        ),
        "fix": f"tuist-ops unclaim -s dev ovh:{box}",
    }
    assert audited(sim, since) == []
    result = ops(*finding["fix"].split()[1:], "--yes")  # the operator says yes
    assert result.exit_code == 0, result.output
    base = "tuist-kura-dev-ovh-1"
    assert audited(sim, since) == [
        ("POST", f"/ovh/1.0/dedicated/server/{box}/reinstall", audited(sim, since)[0][2]),
        ("PUT", "/ovh/1.0/service/10001001", {"resource": {"displayName": base, "name": box}}),
    ]
    assert [f for f in ops.json("orphans", "-s", "dev")["findings"] if f["box"] == f"ovh:{box}"] == []


def test_a_claim_on_another_box_than_the_one_state_names_is_reported(sim: Sim, ops: Ops) -> None:
    """State holds kura-ovh-0's claim on box A; box B carries the same claim. While A carries it too,
    B's claim is a second one of the slot (unclaim --force returns B: the token is in state); once A
    does not, the state is what is wrong (refresh drops the slot). Read-only: nothing is written."""
    from providers.vendor import Claim, Vendor

    claims = sim.claims()
    held = claims.create(claim_props("kura-ovh", 0)).outs
    assert held
    a, tok = held["box_id"], held["claim_token"]
    b = "ns1002.ip-203-0-113.net"
    assert a != b
    client = claims._config().vendor_client(Vendor.OVH)
    client.set_claim(b, Claim(tok))
    ops.state = [claim_resource("kura-ovh-0", "kura-ovh", "ovh", a, tok)]
    urn = ops.state[0]["urn"]
    refresh = f"pulumi refresh -s dev --yes --target '{urn}'"
    since = sim.last_audit_id()

    findings = [f for f in ops.json("orphans", "-s", "dev")["findings"] if f["kind"] != "unknown-claim"]

    assert findings == [
        {
            "kind": "claim-on-another-box",
            "box": f"ovh:{b}",
            "detail": (
                f"carries claim {tok} of dev/kura-ovh-0, but kura-ovh-0-claim holds ovh:{a} in state, which "
                "carries it too: this box's claim is a second one of the slot"
            ),
            "fix": f"tuist-ops unclaim -s dev ovh:{b} --force",
        }
    ]
    assert audited(sim, since) == []

    client.set_claim(a, None)
    since = sim.last_audit_id()
    findings = [f for f in ops.json("orphans", "-s", "dev")["findings"] if f["kind"] != "unknown-claim"]
    assert sorted(findings, key=lambda f: f["box"]) == [
        {
            "kind": "state-without-claim",
            "box": f"ovh:{a}",
            "detail": f"kura-ovh-0-claim holds it in state with claim {tok}, but the box is unclaimed",
            "fix": refresh,
        },
        {
            "kind": "claim-on-another-box",
            "box": f"ovh:{b}",
            "detail": (
                f"carries claim {tok} of dev/kura-ovh-0, but kura-ovh-0-claim holds ovh:{a} in state, which "
                "does not carry it: the refresh drops the slot from state; then `tuist-ops orphans` again "
                "says what this box needs"
            ),
            "fix": refresh,
        },
    ]
    assert audited(sim, since) == []

    # State names a box of a vendor that does not answer: whether it carries the claim is not known,
    # and the fix is to look again once it answers (never an unclaim on a guess).
    ops.state = [claim_resource("kura-ovh-0", "kura-ovh", "dedibox", "fr-par-2/200103", tok)]
    sim.faults(
        {"vendor": "dedibox", "route": "/dedibox/dedibox/v1/zones/*/servers", "error_rate": 1, "status": 503}
    )
    result = ops("orphans", "-s", "dev", "--json")
    assert result.exit_code == 1, result.output
    findings = [f for f in json.loads(result.stdout)["findings"] if f["kind"] != "unknown-claim"]
    assert findings == [
        {
            "kind": "claim-on-another-box",
            "box": f"ovh:{b}",
            "detail": (
                f"carries claim {tok} of dev/kura-ovh-0, but kura-ovh-0-claim holds dedibox:fr-par-2/200103 "
                "in state, which could not be read: whether it carries the claim too is not known yet"
            ),
            "fix": "tuist-ops orphans -s dev",
        }
    ]
    assert audited(sim, since) == []


def test_unclaims_resume_hint_has_force_only_when_the_plan_needed_it(
    sim: Sim, ops: Ops, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An orphan of this stack needs no --force: given anyway, Ctrl-C's hint still leaves it out, so a
    rerun after a `pulumi up` put the slot back in state is refused, not let past that refusal; the
    rerun as hinted finishes the releasing claim. A claim no stack is known for needed --force, and
    its hint keeps it; a --no-reinstall plan's hint keeps --no-reinstall."""
    import time
    from types import SimpleNamespace

    import ops.waiting as waiting

    gone = sim.claims().create(claim_props("kura-ovh", 7)).outs
    assert gone
    box, tok = gone["box_id"], gone["claim_token"]
    # The install still runs when the rerun comes: it follows that one and starts none.
    sim.admin("POST", "timings", {"task_seconds": 5})
    since = sim.last_audit_id()

    def interrupted(_seconds: float) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(waiting, "time", SimpleNamespace(sleep=interrupted, monotonic=time.monotonic))
        assert error_line(ops("unclaim", "-s", "dev", f"ovh:{box}", "--force", "--yes")) == (
            f"error: reinstall ovh:{box}: interrupted; nothing is half-written, the vendor carries on: "
            f"rerun `tuist-ops unclaim -s dev ovh:{box}` to finish"
        )
        unknown = "ns1004.ip-203-0-113.net"
        assert error_line(ops("unclaim", "-s", "dev", f"ovh:{unknown}", "--force", "--yes")) == (
            f"error: reinstall ovh:{unknown}: interrupted; nothing is half-written, the vendor carries on: "
            f"rerun `tuist-ops unclaim -s dev ovh:{unknown} --force` to finish"
        )
    base = "tuist-kura-dev-ovh-1"
    releasing = {"resource": {"displayName": f"{base}--r-{tok}", "name": box}}
    first = audited(sim, since)
    assert [(m, p) for m, p, _ in first] == [
        ("PUT", "/ovh/1.0/service/10001001"),
        ("POST", f"/ovh/1.0/dedicated/server/{box}/reinstall"),
        ("PUT", "/ovh/1.0/service/10001004"),
        ("POST", f"/ovh/1.0/dedicated/server/{unknown}/reinstall"),
    ]
    assert first[0][2] == releasing

    # A `pulumi up` meanwhile put the slot back in state: the rerun as hinted refuses, writing nothing.
    ops.state = [claim_resource("kura-ovh-7", "kura-ovh", "ovh", box, tok)]
    rerun = sim.last_audit_id()
    assert error_line(ops("unclaim", "-s", "dev", f"ovh:{box}")) == (
        f"error: refusing to unclaim ovh:{box}: its holder dev/kura-ovh-7 is in stack dev's state "
        "(kura-ovh-7-claim); `pulumi up`/`pulumi destroy` releases it (or --force)"
    )
    assert audited(sim, rerun) == []

    # Not in state: the rerun as hinted (no --force) finishes the releasing claim.
    ops.state = []
    done = ops("unclaim", "-s", "dev", f"ovh:{box}", "--yes")
    assert done.exit_code == 0, done.output
    assert audited(sim, rerun) == [
        ("PUT", "/ovh/1.0/service/10001001", {"resource": {"displayName": base, "name": box}})
    ]
    assert f"ovh:{box}: back in the pool (claim removed)" in done.stderr

    sim.faults(
        {"vendor": "robot", "route": "/robot/server/*", "method": "POST", "error_rate": 1, "status": 500}
    )
    robot = sim.last_audit_id()
    line = error_line(ops("unclaim", "-s", "dev", "robot:2345604", "--no-reinstall", "--force"))
    assert line.startswith("error: robot:2345604: robot: POST "), line
    assert line.endswith("; rerun `tuist-ops unclaim -s dev robot:2345604 --no-reinstall --force` to finish")
    assert audited(sim, robot) == []


def test_unclaim_without_reinstall_of_a_production_box_needs_the_release_switches(
    sim: Sim, on_production: Ops, kube_cluster: KubeCluster
) -> None:
    """Put back unwiped, a production box would carry its last holder's data into the next adoption:
    --no-reinstall is refused, naming the switches, as the reinstall is, until both are set."""
    from providers.vendor import Claim, Vendor
    from tests.ops.conftest import production_config
    from tests.providers.test_machine_support import FleetKey

    box = "fr-par-2/200106"  # tagged tuist-kura-production: fleet kura-dedibox
    tok = claim_token(PROJECT, "production", "kura-dedibox-7")  # a slot past the fleet's size: no state
    sim.claims()._config().vendor_client(Vendor.DEDIBOX).set_claim(box, Claim(tok))
    since = sim.last_audit_id()
    switches = "fleets[name=kura-dedibox].allow_release: true and allow_production_release: true"

    def unwiped(switches: str) -> str:
        return (
            f"error: refusing to put production box dedibox:{box} (fleet kura-dedibox) back in the pool "
            f"unwiped (--no-reinstall): set {switches} in Pulumi.production.yaml first, as a release needs"
        )

    for dry_run in (["--dry-run"], []):
        unclaim = ("unclaim", "-s", "production", f"dedibox:{box}", "--no-reinstall", *dry_run)
        assert error_line(on_production(*unclaim)) == unwiped(switches)
    assert error_line(on_production("unclaim", "-s", "production", f"dedibox:{box}")) == (
        f"error: refusing to reinstall production box dedibox:{box} (fleet kura-dedibox): set {switches} in "
        "Pulumi.production.yaml first, as a release needs"
    )

    def stack_switch_only(sim: Sim, key: FleetKey | None) -> dict[str, object]:
        return {**production_config(sim, key), f"{PROJECT}:allow_production_release": True}

    def both_switches(sim: Sim, key: FleetKey | None) -> dict[str, object]:
        values = stack_switch_only(sim, key)
        fleets = [dict(f) for f in values[f"{PROJECT}:fleets"]]
        for fleet in fleets:
            if fleet["name"] == "kura-dedibox":
                fleet["allow_release"] = True
        # A kubeconfig secret naming the session's cluster answers whether the box is a Node (it is
        # not); without one, the stack's cluster would be refused as one that does not answer.
        return {
            **values,
            f"{PROJECT}:fleets": fleets,
            f"{PROJECT}:kubeconfig": kube_cluster.kubeconfig.read_text(),
        }

    one = Ops(sim, config=stack_switch_only)
    assert error_line(one("unclaim", "-s", "production", f"dedibox:{box}", "--no-reinstall")) == unwiped(
        "fleets[name=kura-dedibox].allow_release: true"
    )
    assert audited(sim, since) == []

    allowed = Ops(sim, config=both_switches)
    done = allowed("unclaim", "-s", "production", f"dedibox:{box}", "--no-reinstall")
    assert done.exit_code == 0, done.output
    tags = "/dedibox/dedibox/v1/zones/fr-par-2/servers/200106/tags"
    assert audited(sim, since) == [
        ("POST", tags, {"tags": ["tuist-kura-production", f"tuist-releasing-{tok}"]}),
        ("POST", tags, {"tags": ["tuist-kura-production"]}),
    ]
