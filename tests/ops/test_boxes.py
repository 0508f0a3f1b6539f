"""`tuist-ops prep`, `mark`, `unmark` against vendorsim with real SSH boxes: the exact vendor requests,
what changed on the box, and one clear line with nothing written for every refusal."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from providers.claims import claim_token
from providers.vendor import Claim, Vendor
from tests.ops.conftest import Ops, dev_config, dev_config_with_scaleway, error_line
from tests.providers.test_machine_support import PROJECT, FleetKey, Sim, new_fleet_key

OVH_FREE = "ns1001.ip-203-0-113.net"
OVH_UNMARKED = "ns1007.ip-203-0-113.net"


def writes(sim: Sim, since: int) -> list[tuple[str, str, Any]]:
    return [(e["method"], e["path"], e["body"]) for e in sim.audit(since)]


def authorized_keys(sim: Sim, key: str) -> str:
    return (sim.state_dir / "boxes" / key / "ssh" / "authorized_keys").read_text()


# --- prep -------------------------------------------------------------------------------------------------


def test_prep_of_a_ready_box_checks_it_over_ssh_and_writes_nothing(sim: Sim, ops: Ops) -> None:
    since = sim.last_audit_id()
    result = ops("prep", "-s", "dev", f"ovh:{OVH_FREE}")
    assert result.exit_code == 0, result.output
    assert "no reinstall: the fleet key logs in and sudo works" in result.stderr
    assert f"ovh:{OVH_FREE}: ready (ssh SHA256:" in result.stderr
    # The dev stack has one OVH fleet: the next step needs no --fleet.
    assert result.stderr.splitlines()[-1] == f"next: tuist-ops mark -s dev ovh:{OVH_FREE}"
    # The check really ran in the box, as the fleet's login, with sudo.
    calls = sim.calls(f"ovh-{OVH_FREE}")
    assert any(line.startswith("sudo") for line in calls), calls
    assert writes(sim, since) == []
    for secret in ops.secrets():
        assert secret not in result.output


def test_prep_reinstalls_a_box_that_refuses_the_fleet_key_then_verifies_it(sim: Sim) -> None:
    """A new fleet key: the box (pre-installed with the old one) refuses it, so prep reinstalls it
    through the OVH API with the new key, follows the task, and logs in with the new key."""
    key = new_fleet_key()
    ops = Ops(sim, key=key)
    since = sim.last_audit_id()

    dry = ops("prep", "-s", "dev", f"ovh:{OVH_UNMARKED}", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "reinstall ubuntu_24.04 with the fleet key" in dry.stderr
    assert "the box does not accept the fleet key" in dry.stderr
    assert writes(sim, since) == []

    result = ops("prep", "-s", "dev", f"ovh:{OVH_UNMARKED}", "--yes")
    assert result.exit_code == 0, result.output
    public = " ".join(key.public.split()[:2])
    assert writes(sim, since) == [
        (
            "POST",
            f"/ovh/1.0/dedicated/server/{OVH_UNMARKED}/reinstall",
            {
                "operatingSystem": "ubuntu2404-server_64",
                "customizations": {"hostname": "kura-ovh-ns1007-ip-203-0-113-net", "sshKey": public},
                "storage": writes(sim, since)[0][2]["storage"],
            },
        )
    ]
    assert public in authorized_keys(sim, f"ovh-{OVH_UNMARKED}")
    assert f"ovh:{OVH_UNMARKED}: ready" in result.stderr
    assert "sudo nopasswd" in result.stderr  # OVH's cloud-init grants it
    for secret in ops.secrets():
        assert secret not in result.output

    # Idempotent: the box now takes the key; a second prep writes nothing.
    again = sim.last_audit_id()
    assert ops("prep", "-s", "dev", f"ovh:{OVH_UNMARKED}").exit_code == 0
    assert writes(sim, again) == []


def test_prep_of_a_dedibox_box_installs_ubuntu_with_the_fleet_login_and_sudo_password(sim: Sim) -> None:
    """A box that refuses the (new) fleet key is reinstalled with Ubuntu, the fleet login and the
    fleet sudo password, which the self-join then uses."""
    ops = Ops(sim, key=new_fleet_key())
    since = sim.last_audit_id()
    result = ops("prep", "-s", "dev", "dedibox:fr-par-2/200107", "--yes")
    assert result.exit_code == 0, result.output
    installs = [w for w in writes(sim, since) if w[1].endswith("/install")]
    assert len(installs) == 1
    body = installs[0][2]
    assert (body["os_id"], body["user_login"], body["user_password"], body["hostname"]) == (
        501,
        "ubuntu",
        "<redacted>",
        "kura-dedibox-fr-par-2-200107",
    )
    assert "dedibox:fr-par-2/200107: ready" in result.stderr
    assert "sudo password" in result.stderr


def test_prep_refuses_unknown_foreign_and_claimed_boxes_with_one_line_and_no_write(
    sim: Sim, ops: Ops
) -> None:
    since = sim.last_audit_id()
    assert error_line(ops("prep", "-s", "dev", "ovh:ns9999.ip-203-0-113.net")) == (
        "error: ovh:ns9999.ip-203-0-113.net: no such box in stack dev's ovh account"
    )
    assert error_line(ops("prep", "-s", "dev", "ns1005.ip-203-0-113.net")) == (
        "error: refusing to prep ovh:ns1005.ip-203-0-113.net: it belongs to another environment "
        "(its marker 'tuist-kura-staging-ovh-1' names the staging environment)"
    )
    assert error_line(ops("prep", "-s", "dev", "ns1004.ip-203-0-113.net")) == (
        "error: refusing to prep ovh:ns1004.ip-203-0-113.net: it is claimed by unknown (a1ce00000001)"
    )
    assert error_line(ops("prep", "-s", "dev", "robot:2345607")).startswith(
        "error: robot:2345607: prep is for ovh and dedibox boxes;"
    )
    assert error_line(ops("prep", "-s", "dev", "banana")) == (
        "error: banana: cannot tell the vendor from the id; "
        "write <vendor>:banana (one of ovh, dedibox, robot)"
    )
    assert writes(sim, since) == []


def test_a_vendor_5xx_mid_prep_is_one_line_changes_nothing_and_a_rerun_converges(sim: Sim) -> None:
    key = new_fleet_key()
    ops = Ops(sim, key=key)
    before = authorized_keys(sim, f"ovh-{OVH_UNMARKED}")
    since = sim.last_audit_id()
    # The box was read and found to need a reinstall; the reinstall POST then keeps failing.
    sim.faults(
        {"vendor": "ovh", "route": "/ovh/1.0/dedicated/server/*/reinstall", "error_rate": 1, "status": 500}
    )

    line = error_line(ops("prep", "-s", "dev", f"ovh:{OVH_UNMARKED}", "--yes"))

    assert line.startswith(f"error: ovh:{OVH_UNMARKED}: starting the reinstall failed: ovh: POST ")
    assert "HTTP 500" in line
    assert writes(sim, since) == []
    assert authorized_keys(sim, f"ovh-{OVH_UNMARKED}") == before
    sim.clear_faults()
    assert ops("prep", "-s", "dev", f"ovh:{OVH_UNMARKED}", "--yes").exit_code == 0
    assert " ".join(key.public.split()[:2]) in authorized_keys(sim, f"ovh-{OVH_UNMARKED}")


@pytest.mark.parametrize(
    ("status", "code"), [(404, "Client::NotFound"), (500, "Server::InternalServerError")]
)
def test_prep_whose_newest_reinstall_task_does_not_answer_cannot_tell_and_never_reinstalls(
    sim: Sim, status: int, code: str
) -> None:
    """The box was prepped (its newest reinstall task ended long ago); OVH now answers 404 or 500 for
    that task. Whether an install runs cannot be told: the plan says so (not "a reinstall runs:
    following it"), and neither the dry run nor the real run sends a reinstall: the box is ready and
    --reinstall was not given."""
    key = new_fleet_key()
    ops = Ops(sim, key=key)
    assert ops("prep", "-s", "dev", f"ovh:{OVH_UNMARKED}", "--yes").exit_code == 0
    (task,) = [t for t in sim.state()["ovh"]["tasks"] if t["serviceName"] == OVH_UNMARKED]
    assert task["status"] == "done"
    sim.faults(
        {
            "vendor": "ovh",
            "route": "/ovh/1.0/dedicated/server/*/task/*",
            "method": "GET",
            "error_rate": 1,
            "status": status,
        }
    )
    since = sim.last_audit_id()
    calls = len(sim.admin("GET", "calls")["entries"])

    for dry_run in (["--dry-run"], []):
        line = error_line(ops("prep", "-s", "dev", f"ovh:{OVH_UNMARKED}", *dry_run))
        assert re.sub(r" \(request id [^()]+\)", "", line) == (
            f"error: ovh:{OVH_UNMARKED}: cannot tell whether an install runs at ovh (ovh: GET "
            f"/dedicated/server/{{svc}}/task/{{taskId}} [{OVH_UNMARKED}] failed (HTTP {status} {code}): "
            f"the newest reinstall task, {task['taskId']}, did not answer: whether an install runs cannot "
            "be told); rerun in a minute"
        )

    assert writes(sim, since) == []
    sent = [(c["method"], c["path"]) for c in sim.admin("GET", "calls")["entries"][calls:]]
    assert not [c for c in sent if c[0] != "GET"], sent


def test_prep_follows_an_install_that_runs_and_never_starts_another(
    sim: Sim, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An install runs at the vendor when prep starts (a prep cut short): the plan says it follows
    it, and the run only waits for it, even when OVH then answers 404 for the running task (a read
    that start_reinstall takes as "none runs", and would have sent a second reinstall on)."""
    import ops.boxes as boxes
    from providers.vendor import Vendor

    ops = Ops(sim)
    sim.admin("POST", "timings", {"task_seconds": 4})  # still running when prep reads it
    client = sim.claims()._config().vendor_client(Vendor.OVH)
    client.start_reinstall(
        OVH_FREE,
        hostname="kura-ovh-ns1001",
        ssh_public_key=sim.key.public,
        user_login="ubuntu",
        user_password="x",
    )
    since = sim.last_audit_id()

    dry = ops("prep", "-s", "dev", f"ovh:{OVH_FREE}", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert dry.stderr.splitlines()[1:] == [
        "  follow the reinstall that runs at the vendor (no new one is started)",
        "  then wait for SSH with the fleet key and check sudo and /data again",
        "dry run: nothing was changed",
    ]

    real_plan = boxes.plan_prep

    def then_unreadable(*args: Any, **kwargs: Any) -> Any:
        plan = real_plan(*args, **kwargs)
        sim.faults({"task_read_fault": {"kind": "ovh.reinstallServer", "status": 404, "count": 1}})
        return plan

    monkeypatch.setattr(boxes, "plan_prep", then_unreadable)
    result = ops("prep", "-s", "dev", f"ovh:{OVH_FREE}")

    assert result.exit_code == 0, result.output
    assert f"ovh:{OVH_FREE}: following the reinstall that runs at the vendor" in result.stderr
    assert f"ovh:{OVH_FREE}: ready (ssh SHA256:" in result.stderr
    assert sim.admin("GET", "faults")["task_read_faults"] == {}  # the run did read the task unreadable
    assert writes(sim, since) == []


# --- mark / unmark ----------------------------------------------------------------------------------------


def test_mark_and_unmark_an_ovh_box_are_one_put_each_and_idempotent(sim: Sim, ops: Ops) -> None:
    since = sim.last_audit_id()
    dry = ops("mark", "-s", "dev", f"ovh:{OVH_UNMARKED}", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert f"OVH service displayName '{OVH_UNMARKED}' -> 'tuist-kura-dev-ovh-ns1007'" in dry.stderr
    assert writes(sim, since) == []

    assert ops("mark", "-s", "dev", f"ovh:{OVH_UNMARKED}").exit_code == 0
    put = {"resource": {"displayName": "tuist-kura-dev-ovh-ns1007", "name": OVH_UNMARKED}}
    assert writes(sim, since) == [("PUT", "/ovh/1.0/service/10001007", put)]
    rows = {r["box"]: r for r in ops.json("inventory", "-s", "dev", "--vendor", "ovh")["boxes"]}
    assert (rows[OVH_UNMARKED]["fleet"], rows[OVH_UNMARKED]["state"]) == ("kura-ovh", "free")

    again = ops("mark", "-s", "dev", f"ovh:{OVH_UNMARKED}")
    assert "already carries fleet kura-ovh's marker" in again.stderr
    assert len(writes(sim, since)) == 1

    assert ops("unmark", "-s", "dev", f"ovh:{OVH_UNMARKED}").exit_code == 0
    back = {"resource": {"displayName": OVH_UNMARKED, "name": OVH_UNMARKED}}
    assert writes(sim, since)[1:] == [("PUT", "/ovh/1.0/service/10001007", back)]


def test_mark_a_dedibox_box_adds_the_fleet_tag(sim: Sim, ops: Ops) -> None:
    since = sim.last_audit_id()
    assert ops("mark", "-s", "dev", "dedibox:fr-par-2/200107").exit_code == 0
    assert writes(sim, since) == [
        ("POST", "/dedibox/dedibox/v1/zones/fr-par-2/servers/200107/tags", {"tags": ["tuist-kura-dev"]})
    ]
    assert ops("unmark", "-s", "dev", "dedibox:fr-par-2/200107").exit_code == 0
    assert writes(sim, since)[1:] == [
        ("POST", "/dedibox/dedibox/v1/zones/fr-par-2/servers/200107/tags", {"tags": []})
    ]


def test_mark_a_robot_box_names_it_after_the_marker(sim: Sim, ops: Ops) -> None:
    since = sim.last_audit_id()
    assert ops("mark", "-s", "dev", "robot:2345607").exit_code == 0
    assert writes(sim, since) == [("POST", "/robot/server/2345607", {"server_name": "tuist-bm-dev-2345607"})]


def test_mark_and_unmark_refuse_claimed_and_foreign_boxes(sim: Sim, ops: Ops) -> None:
    since = sim.last_audit_id()
    assert error_line(ops("unmark", "-s", "dev", "ns1004.ip-203-0-113.net")) == (
        "error: refusing to unmark ovh:ns1004.ip-203-0-113.net: it is claimed by unknown (a1ce00000001)"
    )
    assert error_line(ops("mark", "-s", "dev", "dedibox:fr-par-2/200106")) == (
        "error: refusing to mark dedibox:fr-par-2/200106: it belongs to another environment "
        "(carries stack production's marker 'tuist-kura-production')"
    )
    assert writes(sim, since) == []


Config = Callable[[Sim, FleetKey | None], dict[str, Any]]


def renamed_marker(config: Config, fleet: str, marker: str) -> Config:
    """`config` with `fleet`'s marker renamed in the stack file."""

    def values(sim: Sim, key: FleetKey | None) -> dict[str, Any]:
        found = config(sim, key)
        fleets = found[f"{PROJECT}:fleets"]
        found[f"{PROJECT}:fleets"] = [{**f, "marker": marker} if f["name"] == fleet else f for f in fleets]
        return found

    return values


def test_after_a_fleet_marker_rename_mark_takes_the_boxes_the_fleets_own_slots_hold(sim: Sim) -> None:
    """The claims of a renamed fleet are kept (their update refuses a box without the new marker, and
    never releases one): `mark` stamps the new marker on a box a slot of that fleet holds, the claim
    kept as it is. A box another fleet's slot, or another stack's, holds is still refused, with nothing
    written."""
    ovh = sim.claims()._config().vendor_client(Vendor.OVH)
    own = claim_token(PROJECT, "dev", "kura-ovh-0")
    ovh.set_claim(OVH_FREE, Claim(own))
    ovh.set_claim(OVH_UNMARKED, Claim(claim_token(PROJECT, "dev", "kura-dedibox-0")))
    ops = Ops(sim, config=renamed_marker(dev_config, "kura-ovh", "tuist-kura-dev-ovh-b"))
    since = sim.last_audit_id()

    marked = ops("mark", "-s", "dev", f"ovh:{OVH_FREE}")
    assert marked.exit_code == 0, marked.output
    assert f"ovh:{OVH_FREE}: marked for fleet kura-ovh" in marked.stderr
    [(method, path, body)] = writes(sim, since)
    assert (method, path) == ("PUT", "/ovh/1.0/service/10001001")
    assert body["resource"]["displayName"] == f"tuist-kura-dev-ovh-b-ns1001--c-{own}"
    box = ovh.get_box(OVH_FREE)
    assert box.has_marker("tuist-kura-dev-ovh-b") and box.claim == Claim(own)

    # Refused: another fleet's slot of this stack, and the same fleet's slot of another stack.
    dedibox = sim.claims()._config().vendor_client(Vendor.DEDIBOX)
    dedibox.set_claim("fr-par-2/200107", Claim(claim_token(PROJECT, "staging", "kura-dedibox-0")))
    since = sim.last_audit_id()
    assert error_line(ops("mark", "-s", "dev", f"ovh:{OVH_UNMARKED}")) == (
        f"error: refusing to mark ovh:{OVH_UNMARKED}: it is claimed by dev/kura-dedibox-0"
    )
    assert error_line(ops("mark", "-s", "dev", "dedibox:fr-par-2/200107")) == (
        "error: refusing to mark dedibox:fr-par-2/200107: it is claimed by staging/kura-dedibox-0"
    )
    assert writes(sim, since) == []


def test_mark_an_elastic_metal_box_adds_the_fleet_tag_and_keeps_its_claim(sim: Sim) -> None:
    """An Elastic Metal fleet's marker is a server tag, as Dedibox's: `mark` PATCHes the whole tag
    list, the claim tag kept at its end."""
    em = sim.claims()._config().vendor_client(Vendor.SCALEWAY_EM)
    box = "fr-par-2/e1000000-0000-4000-8000-000000000001"
    own = claim_token(PROJECT, "dev", "kura-scw-0")
    em.set_claim(box, Claim(own))
    since = sim.last_audit_id()
    renamed = renamed_marker(dev_config_with_scaleway, "kura-scw", "tuist-kura-scw-dev-b")
    marked = Ops(sim, config=renamed)("mark", "-s", "dev", f"scaleway_em:{box}")
    assert marked.exit_code == 0, marked.output
    assert writes(sim, since) == [
        (
            "PATCH",
            "/scaleway/baremetal/v1/zones/fr-par-2/servers/e1000000-0000-4000-8000-000000000001",
            {"tags": ["tuist-kura-scw-dev", "tuist-kura-scw-dev-b", f"tuist-claim-{own}"]},
        )
    ]
    assert em.get_box(box).claim == Claim(own)


def test_unmark_and_mark_an_apple_silicon_mac_rename_it_and_keep_its_claim(sim: Sim) -> None:
    """An Apple silicon fleet's marker is a name prefix (the only field an operator can write): `unmark`
    names the Mac after its zone and id, `mark` after the marker and the id's last group; a claim
    suffix stays as it is."""
    ops = Ops(sim, config=dev_config_with_scaleway)
    mac = "fr-par-3/a5000000-0000-4000-8000-000000000003"
    path = "/scaleway/apple-silicon/v1alpha1/zones/fr-par-3/servers/a5000000-0000-4000-8000-000000000003"
    since = sim.last_audit_id()
    dry = ops("unmark", "-s", "dev", f"applesilicon:{mac}", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert (
        f"applesilicon:{mac}: Apple silicon server name 'tuist-macos-dev-3' -> "
        "'fr-par-3-a5000000-0000-4000-8000-000000000003'"
    ) in dry.stderr
    assert writes(sim, since) == []

    assert ops("unmark", "-s", "dev", f"applesilicon:{mac}").exit_code == 0
    assert writes(sim, since) == [("PATCH", path, {"name": "fr-par-3-a5000000-0000-4000-8000-000000000003"})]
    rows = {r["box"]: r for r in ops.json("inventory", "-s", "dev", "--vendor", "applesilicon")["boxes"]}
    assert rows[mac]["state"] == "unmarked"

    marked = ops("mark", "-s", "dev", f"applesilicon:{mac}")
    assert marked.exit_code == 0, marked.output
    assert writes(sim, since)[1:] == [("PATCH", path, {"name": "tuist-macos-dev-000000000003"})]
    rows = {r["box"]: r for r in ops.json("inventory", "-s", "dev", "--vendor", "applesilicon")["boxes"]}
    assert (rows[mac]["fleet"], rows[mac]["state"]) == ("runners-macos", "free")

    # A Mac the fleet's own slot holds keeps its claim through a marker rename.
    macs = sim.claims()._config().vendor_client(Vendor.APPLESILICON)
    own = claim_token(PROJECT, "dev", "runners-macos-0")
    macs.set_claim(mac, Claim(own))
    since = sim.last_audit_id()
    renamed = Ops(sim, config=renamed_marker(dev_config_with_scaleway, "runners-macos", "tuist-macos-dev-b"))
    assert renamed("mark", "-s", "dev", f"applesilicon:{mac}").exit_code == 0
    assert writes(sim, since) == [("PATCH", path, {"name": f"tuist-macos-dev-b-000000000003--c-{own}"})]
    assert macs.get_box(mac).claim == Claim(own)


def test_unmark_in_a_stack_with_two_fleets_of_the_vendor_takes_the_fleet_from_the_box(
    sim: Sim, on_production: Ops
) -> None:
    """Production has two OVH fleets (kura-us-east, kura-us-west). Prep's next step names the fleet,
    mark needs it; unmark takes the fleet whose marker the box carries, refuses a --fleet that is not
    that one (nothing written), and says "nothing to do" only once the box carries no marker of the
    stack's fleets."""
    ops = on_production
    box = f"ovh:{OVH_UNMARKED}"
    since = sim.last_audit_id()

    prepped = ops("prep", "-s", "production", box, "--fleet", "kura-us-east")
    assert prepped.exit_code == 0, prepped.output
    assert prepped.stderr.splitlines()[-1] == f"next: tuist-ops mark -s production {box} --fleet kura-us-east"
    assert error_line(ops("mark", "-s", "production", box)) == (
        "error: stack production has 2 ovh fleets (kura-us-east, kura-us-west): name one with --fleet"
    )
    assert ops("mark", "-s", "production", box, "--fleet", "kura-us-east").exit_code == 0
    ((_, path, body),) = writes(sim, since)
    assert body["resource"]["displayName"].startswith("tuist-kura-production-us-east")
    marked = sim.last_audit_id()

    # A --fleet that is not the box's: refused in one line naming the box, its marker and the fleet.
    assert error_line(ops("unmark", "-s", "production", box, "--fleet", "kura-us-west")) == (
        f"error: refusing to unmark {box}: it carries fleet kura-us-east's marker "
        "'tuist-kura-production-us-east', not that of fleet kura-us-west given by --fleet "
        "('tuist-kura-production-us-west'); rerun with --fleet kura-us-east (or without --fleet) to "
        "remove the marker it carries"
    )
    assert writes(sim, marked) == []

    dry = ops("unmark", "-s", "production", box, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert writes(sim, marked) == []
    result = ops("unmark", "-s", "production", box)
    assert result.exit_code == 0, result.output
    assert f"{box}: unmarked for fleet kura-us-east" in result.stderr
    back = {"resource": {"displayName": OVH_UNMARKED, "name": OVH_UNMARKED}}
    assert writes(sim, marked) == [("PUT", path, back)]

    # Now it carries no fleet marker of the stack: nothing to do, whichever fleet is named.
    for fleet in ([], ["--fleet", "kura-us-west"], ["--fleet", "kura-us-east"]):
        again = ops("unmark", "-s", "production", box, *fleet)
        assert again.exit_code == 0, again.output
        assert (
            f"{box}: carries no fleet marker of stack production "
            f"(OVH service displayName '{OVH_UNMARKED}'): nothing to do"
        ) in again.stderr
    assert writes(sim, marked) == [("PUT", path, back)]


# --- hostkey ----------------------------------------------------------------------------------------------


def test_hostkey_compares_the_key_the_box_answers_with_against_the_pin_in_state(sim: Sim, ops: Ops) -> None:
    from ops.stack import MACHINE_TYPE

    seen = sim.box(f"ovh-{OVH_FREE}")["host_key_fingerprint"]
    machine = {"urn": "urn:pulumi:dev::tuist-infra::x::kura-ovh-0", "type": MACHINE_TYPE}
    ops.state = [{**machine, "outputs": {"box_id": OVH_FREE, "host_key_fingerprint": seen}}]
    ok = ops("hostkey", "-s", "dev", f"ovh:{OVH_FREE}")
    assert ok.exit_code == 0, ok.output
    assert f"kura-ovh-0 pins {seen}: matches" in ok.stdout

    ops.state = [{**machine, "outputs": {"box_id": OVH_FREE, "host_key_fingerprint": "SHA256:not-this-one"}}]
    bad = ops("hostkey", "-s", "dev", f"ovh:{OVH_FREE}")
    assert "kura-ovh-0 pins SHA256:not-this-one: MISMATCH" in bad.stdout
    assert error_line(bad) == (
        f"error: ovh:{OVH_FREE}: the box's host key is not the one state pins; do not accept it until you "
        "know why (docs/runbook.md: host-key mismatch)"
    )


def test_ctrl_c_during_the_reinstall_wait_loses_nothing_and_a_rerun_finishes(
    sim: Sim, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while prep waits for the vendor's reinstall: one line saying how to resume, the install
    runs on at the vendor, and the same command again ends with the box ready, never a second install."""
    import time
    from types import SimpleNamespace

    import ops.waiting as waiting

    key = new_fleet_key()
    ops = Ops(sim, key=key)
    since = sim.last_audit_id()

    def interrupted(_seconds: float) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        # Only the wait's own clock: the SSH and HTTP layers keep theirs.
        patch.setattr(waiting, "time", SimpleNamespace(sleep=interrupted, monotonic=time.monotonic))
        line = error_line(ops("prep", "-s", "dev", f"ovh:{OVH_UNMARKED}", "--yes"))
    assert line == (
        f"error: reinstall ovh:{OVH_UNMARKED}: interrupted; nothing is half-written, the vendor carries on: "
        f"rerun `tuist-ops prep -s dev ovh:{OVH_UNMARKED}` to follow it"
    )

    # The rerun's first read of the box may come while the install runs (a vendor may report no OS
    # then) and its read of the install's state once it has ended: that read, every time.
    import dataclasses

    import ops.boxes as boxes

    real_read, first = boxes.get_box, [True]

    def first_read_mid_install(stack: Any, ref: Any) -> Any:
        box = real_read(stack, ref)
        if not first:
            return box
        first.clear()
        time.sleep(0.5)  # the sim's tasks take 0.2 s: the install ends after this read
        return dataclasses.replace(box, has_os=False)

    with monkeypatch.context() as patch:
        patch.setattr(boxes, "get_box", first_read_mid_install)
        result = ops("prep", "-s", "dev", f"ovh:{OVH_UNMARKED}", "--yes")

    assert result.exit_code == 0, result.output
    assert [w[1] for w in writes(sim, since)] == [f"/ovh/1.0/dedicated/server/{OVH_UNMARKED}/reinstall"]
    assert " ".join(key.public.split()[:2]) in authorized_keys(sim, f"ovh-{OVH_UNMARKED}")


def test_prep_whose_check_fails_on_the_box_plans_no_reinstall_without_the_flag(
    sim: Sim, ops: Ops, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fleet key logs in, but the check script exits non-zero (a box without what it needs): that
    says nothing about sudo. Prep refuses to plan a reinstall on that guess, naming what failed, dry
    run or not, and writes nothing; with --reinstall the plan's one reason is the flag."""
    import ops.boxes as boxes
    from tests.providers.test_machine_support import SIM_SSH_PORT

    failing = tmp_path / "verify-box.sh"
    failing.write_text('echo "verify-box.sh: line 12: findmnt: command not found"\nexit 127\n')
    monkeypatch.setattr(boxes, "VERIFY_SCRIPT", failing)
    rows = {r["box"]: r for r in ops.json("inventory", "-s", "dev", "--vendor", "ovh")["boxes"]}
    address = rows[OVH_FREE]["public_ipv4"]
    since = sim.last_audit_id()

    for dry_run in (["--dry-run"], []):
        assert error_line(ops("prep", "-s", "dev", f"ovh:{OVH_FREE}", *dry_run)) == (
            f"error: ovh:{OVH_FREE}: the check failed on ubuntu@{address}:{SIM_SSH_PORT} (exit 127: "
            "verify-box.sh: line 12: findmnt: command not found), so whether ubuntu can sudo with the fleet "
            "sudo password is unknown; fix what stops the check and rerun, or reinstall the box with "
            "--reinstall"
        )
    assert writes(sim, since) == []

    dry = ops("prep", "-s", "dev", f"ovh:{OVH_FREE}", "--reinstall", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert dry.stderr.splitlines()[1] == (
        "  reinstall ubuntu_24.04 with the fleet key and the fleet sudo password "
        "(hostname kura-ovh-ns1001-ip-203-0-113-net): --reinstall was given"
    )
    assert writes(sim, since) == []


def test_prep_asks_before_a_reinstall_and_never_for_a_box_that_needs_none(sim: Sim) -> None:
    """A new fleet key the box refuses: prep's reinstall wipes it, so it is asked for (or --yes)."""
    ops = Ops(sim, key=new_fleet_key())
    since = sim.last_audit_id()
    assert error_line(ops("prep", "-s", "dev", f"ovh:{OVH_UNMARKED}")) == (
        f"error: ovh:{OVH_UNMARKED}: the reinstall wipes its disks; nothing was changed. Rerun with --yes "
        "(after --dry-run has shown the plan), or at a terminal to be asked"
    )
    declined = ops("prep", "-s", "dev", f"ovh:{OVH_UNMARKED}", answer="no\n")
    assert declined.exit_code == 1
    assert declined.stderr.endswith(f"error: ovh:{OVH_UNMARKED}: not confirmed; nothing was changed\n")
    assert writes(sim, since) == []

    assert ops("prep", "-s", "dev", f"ovh:{OVH_UNMARKED}", answer="y\n").exit_code == 0
    assert [e["path"] for e in sim.audit(since) if e["method"] == "POST"] == [
        f"/ovh/1.0/dedicated/server/{OVH_UNMARKED}/reinstall"
    ]
    # Ready now: a prep that reinstalls nothing asks nothing, with no terminal and no --yes.
    again = ops("prep", "-s", "dev", f"ovh:{OVH_UNMARKED}")
    assert again.exit_code == 0, again.output
    assert "wiping" not in again.stderr
