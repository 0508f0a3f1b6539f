"""ClaimProvider and MachineProvider against a vendorsim subprocess: real HTTP to the vendor APIs, real
OpenSSH boxes that run the self-join in their sandboxes. The providers' create / read / update / delete
/ diff methods are driven directly, in the order the engine calls them: a slot's claim, then its machine
(and on destroy the machine, then the claim)."""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from config.models import Vendor
from providers.claims import claim_token
from providers.machine import record as claim_records
from providers.machine.errors import (
    BoxStillListedError,
    MachineHostKeyMismatchError,
    MachineStepError,
    NoAdoptableBoxError,
    ReleaseRefusedError,
)
from providers.machine.provider import ClaimProvider, MachineProvider
from providers.machine.record import ProcessClaimRecord
from providers.ssh.runner import HostKeyMismatchError
from providers.vendor import Claim
from tests.providers.test_machine_support import (
    PROJECT,
    REPO,
    STACK,
    Sim,
    claim_props,
    claims_in_state,
    machine_props,
    resource_id,
    running_sim,
)
from tests.support.cluster import KubeCluster, wait_until
from vendorsim.boxes import BoxFarm

OVH_BOXES = ["ns1001.ip-203-0-113.net", "ns1002.ip-203-0-113.net", "ns1003.ip-203-0-113.net"]
DEDIBOX_BOXES = ["fr-par-2/200101", "fr-par-2/200102", "fr-par-2/200103"]
DECOYS = {
    # other environments and other stacks' claims: never written by this stack
    "ns1004.ip-203-0-113.net",
    "ns1005.ip-203-0-113.net",
    "ns1006.ip-203-0-113.net",
    "ns1007.ip-203-0-113.net",
    "200104",
    "200105",
    "200106",
    "200107",
}


@pytest.fixture(scope="module")
def sim_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    yield from running_sim(tmp_path_factory.mktemp("machine-sim"))


@pytest.fixture
def sim(sim_process: Sim) -> Sim:
    return sim_process.reset()


def token(name: str) -> str:
    return claim_token(PROJECT, STACK, name)


def decoy_writes(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if any(decoy in e["path"] or decoy == e.get("box") for decoy in DECOYS)]


def assert_no_secret(sim: Sim, *texts: str) -> None:
    for text in texts:
        for secret in sim.secret_values():
            assert secret not in text


def progress_states(caplog: pytest.LogCaptureFixture) -> list[str]:
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "providers.machine" and "(budget" in r.getMessage()
    ]
    return [line.split(": ")[1].split(" on ")[0] for line in lines]


# --- create -----------------------------------------------------------------------------------------


def test_the_claim_takes_the_lowest_free_box_before_the_machine_joins_it(
    sim: Sim, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    since = sim.last_audit_id()
    claims = sim.claims()

    claimed = claims.create(claim_props("kura-ovh", 0))

    box = "ns1001.ip-203-0-113.net"
    assert claimed.id == f"ovh:{box}"
    outs = claimed.outs
    assert outs is not None
    assert {
        k: outs[k] for k in ("vendor", "box_id", "box_name", "datacenter", "public_ipv4", "provider_id")
    } == {
        "vendor": "ovh",
        "box_id": box,
        "box_name": box,
        "datacenter": "bhs6",
        "public_ipv4": sim.ip(11),
        "provider_id": f"ovh://bhs6/{box}",
    }
    assert (outs["claim_token"], outs["state"], outs["record"]) == (token("kura-ovh-0"), "claimed", "process")
    assert outs["node_name"] == "kura-ovh-ns1001-ip-203-0-113-net"
    # The claim is on the vendor side, on the fleet marker, and it is the only write of the claim.
    assert claims_in_state(sim.state())[box] == f"tuist-kura-dev-ovh-1--c-{token('kura-ovh-0')}"
    assert [(e["method"], e["path"], e["body"]) for e in sim.audit(since)] == [
        (
            "PUT",
            "/ovh/1.0/service/10001001",
            {"resource": {"displayName": f"tuist-kura-dev-ovh-1--c-{token('kura-ovh-0')}", "name": box}},
        )
    ]
    # Nothing ran on the box yet: the slow part is the machine's.
    unit = sim.box_root(f"ovh-{box}") / "etc/systemd/system/kubelet.service"
    assert not unit.exists()

    joined = sim.machines().create(machine_props("kura-ovh", 0, outs, labels={"tuist.dev/region": "ca-east"}))

    assert joined.id == f"ovh:{box}"
    machine = joined.outs
    assert machine is not None
    assert (machine["node_name"], machine["state"], machine["node_registered"]) == (
        "kura-ovh-ns1001-ip-203-0-113-net",
        "ready",
        False,  # the dev stack has no cluster: no Secret was written
    )
    assert machine["host_key_fingerprint"] == sim.box(f"ovh-{box}")["host_key_fingerprint"]
    # The self-join really ran in the box: kubelet unit with the node's identity, labels and taints.
    text = unit.read_text()
    assert f"--node-ip={sim.ip(11)}" in text
    assert f"--provider-id=ovh://bhs6/{box}" in text
    assert "--hostname-override=kura-ovh-ns1001-ip-203-0-113-net" in text
    assert (
        "--node-labels=node.cluster.x-k8s.io/pool=kura-ovh,tuist.dev/fleet=kura-ovh,tuist.dev/region=ca-east"
        in text
    )
    assert "--register-with-taints=tuist.dev/kura-cache=true:NoSchedule" in text
    sudoers = sim.box_root(f"ovh-{box}") / "etc/sudoers.d/90-ubuntu-nopasswd"
    assert sudoers.read_text() == "ubuntu ALL=(ALL) NOPASSWD:ALL\n"
    assert progress_states(caplog) == ["CLAIMING", "JOINING", "NODE_READY"]
    # The record walked the states and holds the pin for a later rejoin.
    progress = ProcessClaimRecord().get("ovh", box)
    assert progress is not None
    assert (progress.phase, progress.state, progress.attempt, progress.error_count) == (
        "Ready",
        "READY",
        1,
        0,
    )
    assert progress.facts["pin"] == machine["host_key_fingerprint"]
    assert_no_secret(sim, repr(outs), repr(machine), caplog.text)


def test_each_claim_costs_a_constant_number_of_vendor_calls_not_a_listing(sim: Sim) -> None:
    # Every Dedibox call the claims make, reads included (vendorsim's /_admin/calls).
    def dedibox_calls(since: int) -> list[tuple[str, str]]:
        entries = sim.admin("GET", f"calls?since={since}")["entries"]
        return [(e["method"], e["path"].split("?")[0]) for e in entries if e["vendor"] == "dedibox"]

    claims = sim.claims()  # one provider process: its claims share one listing of the account
    start = len(sim.admin("GET", "calls")["entries"])
    claims.create(claim_props("kura-dedibox", 0))
    one = dedibox_calls(start)
    servers = "/dedibox/dedibox/v1/zones/fr-par-2/servers"  # the mount, then the API path
    # The account listed once (a page, then each of its 7 servers, whose tags only the detail shows),
    # then the chosen box: read again, its tags read and written (the claim), read back.
    assert one == [
        ("GET", servers),
        *[("GET", f"{servers}/{n}") for n in range(200101, 200108)],
        ("GET", f"{servers}/200101"),
        ("GET", f"{servers}/200101"),
        ("POST", f"{servers}/200101/tags"),
        ("GET", f"{servers}/200101"),
    ]
    more = start + len(sim.admin("GET", f"calls?since={start}")["entries"])
    claims.create(claim_props("kura-dedibox", 1))
    claims.create(claim_props("kura-dedibox", 2))
    # Each further box: those four calls on that box, no listing.
    assert dedibox_calls(more) == [
        call
        for box in (200102, 200103)
        for call in [
            ("GET", f"{servers}/{box}"),
            ("GET", f"{servers}/{box}"),
            ("POST", f"{servers}/{box}/tags"),
            ("GET", f"{servers}/{box}"),
        ]
    ]


def test_no_candidate_error_names_fleet_marker_count_and_each_skip(sim: Sim) -> None:
    claims = sim.claims()
    for i in range(3):
        claims.create(claim_props("kura-ovh", i))
    with pytest.raises(NoAdoptableBoxError) as caught:
        claims.create(claim_props("kura-ovh", 3))
    assert str(caught.value) == "\n".join(
        [
            "fleet kura-ovh: no adoptable box with marker 'tuist-kura-dev-ovh' among the 7 boxes seen",
            # The record names the holder in full; the vendor marker of another stack only its token.
            f"  ns1001.ip-203-0-113.net: claimed by tuist-infra/dev/kura-ovh-0 ({token('kura-ovh-0')})",
            f"  ns1002.ip-203-0-113.net: claimed by tuist-infra/dev/kura-ovh-1 ({token('kura-ovh-1')})",
            f"  ns1003.ip-203-0-113.net: claimed by tuist-infra/dev/kura-ovh-2 ({token('kura-ovh-2')})",
            "  ns1004.ip-203-0-113.net: claimed by a1ce00000001",
            "  ns1005.ip-203-0-113.net: marked for another environment or fleet ('tuist-kura-staging-ovh-1')",
            "  ns1006.ip-203-0-113.net: marked for another environment or fleet "
            "('tuist-kura-production-ovh-1')",
            "  ns1007.ip-203-0-113.net: not marked for this fleet ('ns1007.ip-203-0-113.net')",
        ]
    )


def test_a_box_recorded_for_another_holder_is_skipped_though_its_marker_is_free(sim: Sim) -> None:
    """The record arbitrates: another process or stack recorded the box first (its marker write has not
    happened yet); this claim moves on to the next box and writes nothing to the first."""
    other = claim_records.Holder("tuist-infra", "bob-dev", "kura-ovh-0", "aaaaaaaaaaaa")
    ProcessClaimRecord().acquire(claim_records.Progress("ovh", OVH_BOXES[0], "kura-ovh", other))
    since = sim.last_audit_id()
    outs = sim.claims().create(claim_props("kura-ovh", 0)).outs
    assert outs is not None and outs["box_id"] == OVH_BOXES[1]
    assert OVH_BOXES[0] not in json.dumps(sim.audit(since))


def test_transient_vendor_errors_still_converge(sim: Sim, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="providers.retry")
    sim.faults({"vendor": "dedibox", "error_rate": 0.2, "status": 503, "seed": 7})
    sim.faults({"vendor": "ovh", "error_rate": 0.2, "status": 500, "seed": 11})
    try:
        slots = [sim.adopt("kura-dedibox", i) for i in range(2)]
        ovh, _ = sim.adopt("kura-ovh", 0)
        assert ovh["box_id"] == OVH_BOXES[0]
        assert [claim["box_id"] for claim, _ in slots] == DEDIBOX_BOXES[:2]
        sim.destroy(*slots[0])
    finally:
        sim.clear_faults()
    fields = claims_in_state(sim.state())
    assert fields[DEDIBOX_BOXES[0]] == "tuist-kura-dev"
    assert fields[DEDIBOX_BOXES[1]] == f"tuist-kura-dev,tuist-claim-{token('kura-dedibox-1')}"
    # The faults really fired (they answer before the simulator's audit sees the call): the clients
    # retried them.
    retried = [r.getMessage() for r in caplog.records if r.name == "providers.retry"]
    assert any("HTTP 503" in m for m in retried) and any("HTTP 500" in m for m in retried)


# --- release ----------------------------------------------------------------------------------------


def test_release_reinstalls_clears_the_claim_keeps_the_marker_and_the_box_is_readopted(sim: Sim) -> None:
    since = sim.last_audit_id()
    claim, machine = sim.adopt("kura-dedibox", 0)
    assert claim["box_id"] == DEDIBOX_BOXES[0]
    generation = sim.box("dedibox-200101")["generation"]

    sim.destroy(claim, machine)

    state = sim.state()
    assert claims_in_state(state)[DEDIBOX_BOXES[0]] == "tuist-kura-dev"
    install = next(i for i in state["dedibox"]["installs"] if i["server_id"] == 200101)
    assert install["status"] == "installed"
    assert install["user_login"] == "ubuntu"
    assert sim.box("dedibox-200101")["generation"] == generation + 1
    writes = [(e["method"], e["path"]) for e in sim.audit(since)]
    tags = "/dedibox/dedibox/v1/zones/fr-par-2/servers/200101/tags"
    assert writes[0] == ("POST", tags)  # claim
    assert writes[1] == ("POST", tags)  # releasing
    assert ("POST", "/dedibox/dedibox/v1/zones/fr-par-2/servers/200101/install") in writes
    assert writes[-1] == ("POST", tags)  # claim cleared
    bodies = [e["body"] for e in sim.audit(since) if e["path"] == tags]
    assert bodies == [
        {"tags": ["tuist-kura-dev", f"tuist-claim-{token('kura-dedibox-0')}"]},
        {"tags": ["tuist-kura-dev", f"tuist-releasing-{token('kura-dedibox-0')}"]},
        {"tags": ["tuist-kura-dev"]},
    ]
    install_body = next(e["body"] for e in sim.audit(since) if e["path"].endswith("/install"))
    assert install_body["user_password"] == "<redacted>" and install_body["root_password"] == ""
    # Never cancelled or terminated; decoys never written; the record is gone with the claim.
    assert not [w for w in writes if "cancel" in w[1] or "terminate" in w[1] or w[0] == "DELETE"]
    assert decoy_writes(sim.audit(since)) == []
    assert ProcessClaimRecord().get("dedibox", DEDIBOX_BOXES[0]) is None

    # The released box is back in the pool: a later slot adopts it again, with its new host key.
    _, again = sim.adopt("kura-dedibox", 5)
    assert again["box_id"] == DEDIBOX_BOXES[0]
    assert again["host_key_fingerprint"] == sim.box("dedibox-200101")["host_key_fingerprint"]
    assert again["host_key_fingerprint"] != machine["host_key_fingerprint"]


def test_production_release_is_refused_naming_the_switches(sim: Sim) -> None:
    props = claim_props("kura-ovh", 0, marker="tuist-kura-production-ovh", environment="production")
    outs = {**props, "box_id": "ns1006.ip-203-0-113.net", "claim_token": token("kura-ovh-0")}
    since = sim.last_audit_id()
    with pytest.raises(ReleaseRefusedError) as caught:
        sim.claims().delete("ovh:ns1006.ip-203-0-113.net", outs)
    assert str(caught.value) == (
        "kura-ovh-0: refusing to release production box (fleet kura-ovh): releasing reinstalls it. "
        "To allow it set fleets[name=kura-ovh].allow_release: true and allow_production_release: true "
        "in Pulumi.production.yaml, run `pulumi up` so the claim records it, then `pulumi state unprotect` "
        "the machine and remove it"
    )
    with pytest.raises(ReleaseRefusedError, match=r"set allow_production_release: true in"):
        sim.claims().delete("ovh:ns1006.ip-203-0-113.net", {**outs, "allow_release": True})
    assert sim.audit(since) == []


def test_a_failed_join_leaves_a_claim_that_destroy_releases(sim: Sim) -> None:
    """Issue 12 point 8: the machine's create fails (the box refuses this sudo password); the claim is
    in state already, so `pulumi destroy` (the claim's delete: the machine never got into state)
    returns the box to its pool."""
    claim = sim.claims().create(claim_props("kura-ovh", 0)).outs
    assert claim is not None
    wrong = sim.machines(fleetSudoPassword="wrong-" + sim.sudo_password)
    with pytest.raises(MachineStepError) as caught:
        wrong.create(machine_props("kura-ovh", 0, claim))
    assert caught.value.state == "JOINING" and caught.value.error_type == "RemoteCommandFailed"
    progress = ProcessClaimRecord().get("ovh", OVH_BOXES[0])
    assert progress is not None
    assert (progress.phase, progress.state, progress.error_type, progress.error_count) == (
        "Adopting",
        "JOINING",
        "RemoteCommandFailed",
        1,
    )
    assert "sudo: 1 incorrect password attempt" in (progress.last_error or "")

    sim.destroy(claim, None)

    assert claims_in_state(sim.state())[OVH_BOXES[0]] == "tuist-kura-dev-ovh-1"
    assert ProcessClaimRecord().get("ovh", OVH_BOXES[0]) is None


def test_a_failed_claim_leaves_no_claim_behind(sim: Sim) -> None:
    """The claim itself fails (the marker write is refused): nothing is in state, and nothing is held
    at the vendor or in the record, so there is nothing for destroy to find."""
    sim.faults(
        {"vendor": "ovh", "method": "PUT", "route": "/ovh/1.0/service/*", "error_rate": 1, "status": 403}
    )
    try:
        with pytest.raises(Exception, match="HTTP 403"):
            sim.claims().create(claim_props("kura-ovh", 0))
    finally:
        sim.clear_faults()
    assert claims_in_state(sim.state())[OVH_BOXES[0]] == "tuist-kura-dev-ovh-1"
    assert ProcessClaimRecord().held("ovh") == {}


# --- read, update, host keys ---------------------------------------------------------------------------


def test_read_uses_the_id_and_reports_a_lost_claim_as_gone(sim: Sim) -> None:
    claim, machine = sim.adopt("kura-dedibox", 0)
    claims, machines = sim.claims(), sim.machines()
    read = claims.read(f"dedibox:{DEDIBOX_BOXES[0]}", claim)
    assert read.id == f"dedibox:{DEDIBOX_BOXES[0]}"
    assert read.outs == claim  # a refresh with nothing changed reads back what is in state
    assert machines.read(f"dedibox:{DEDIBOX_BOXES[0]}", machine).outs == machine
    # The id decides which box is read, not the box_id in the props.
    other = claims.read(f"dedibox:{DEDIBOX_BOXES[1]}", claim)
    assert other.id == ""  # that box is free: not this slot's
    # Someone takes the box away (an operator re-marks it for another stack).
    client = claims._config().vendor_client(Vendor.DEDIBOX)
    client.set_claim(DEDIBOX_BOXES[0], Claim("0123456789ab"))
    assert claims.read(f"dedibox:{DEDIBOX_BOXES[0]}", claim).id == ""
    assert machines.read(f"dedibox:{DEDIBOX_BOXES[0]}", machine).id == ""


def test_a_404_for_a_box_its_account_still_lists_is_not_taken_as_gone(sim: Sim) -> None:
    """Refresh and destroy take a box that answers 404 as gone: refresh drops it from state, destroy lets
    go of its record. If the account still lists it (a wrong zone, the vendor's passing fault), the box
    still carries this slot's marker and nothing would find it again: both refuse, and keep it all."""
    claim, machine = sim.adopt("kura-dedibox", 0)
    id_ = f"dedibox:{DEDIBOX_BOXES[0]}"
    claims, machines = sim.claims(), sim.machines()
    marker = claims_in_state(sim.state())[DEDIBOX_BOXES[0]]
    generation = sim.box("dedibox-200101")["generation"]
    server = "/dedibox/dedibox/v1/zones/fr-par-2/servers/200101"
    sim.faults({"vendor": "dedibox", "method": "GET", "route": server, "error_rate": 1, "status": 404})
    still_listed = re.escape(
        f"dedibox answered 404 for box {DEDIBOX_BOXES[0]} "
        "(GET /dedibox/v1/zones/{zone}/servers/{server_id}), but its account still lists it: the box is "
        "not taken as gone and its claim is kept"
    )
    try:
        with pytest.raises(BoxStillListedError, match=still_listed):
            claims.read(id_, claim)
        with pytest.raises(BoxStillListedError, match=still_listed):
            machines.read(id_, machine)
        machines.delete(id_, machine)  # no cluster here: the machine has nothing to leave
        with pytest.raises(BoxStillListedError, match=still_listed):
            claims.delete(id_, claim)
    finally:
        sim.clear_faults()
    assert claims_in_state(sim.state())[DEDIBOX_BOXES[0]] == marker
    assert list(ProcessClaimRecord().held("dedibox")) == [DEDIBOX_BOXES[0]]
    claims.delete(id_, claim)  # once the box reads again, the release goes on: reinstalled and let go of
    assert sim.box("dedibox-200101")["generation"] == generation + 1
    assert claims_in_state(sim.state())[DEDIBOX_BOXES[0]] == "tuist-kura-dev"
    assert ProcessClaimRecord().held("dedibox") == {}


def test_a_label_edit_changes_no_machine_and_a_minor_bump_rejoins(sim: Sim) -> None:
    claim, machine = sim.adopt("kura-ovh", 0)
    machines = sim.machines()
    old = machine_props("kura-ovh", 0, claim)
    relabelled = {**old, "labels": {"tuist.dev/tier": "gold"}}
    diff = machines.diff(f"ovh:{OVH_BOXES[0]}", machine, relabelled)
    assert (diff.changes, diff.replaces) == (False, [])  # NodeLabels carries it

    bumped = {**old, "kubernetes_minor": "v1.35"}
    assert machines.diff(f"ovh:{OVH_BOXES[0]}", machine, bumped).changes is True
    updated = machines.update(f"ovh:{OVH_BOXES[0]}", machine, bumped).outs
    assert updated is not None
    assert updated["kubernetes_minor"] == "v1.35"
    assert updated["host_key_fingerprint"] == machine["host_key_fingerprint"]
    apt = (sim.box_root(f"ovh-{OVH_BOXES[0]}") / "etc/apt/sources.list.d/kubernetes.list").read_text()
    assert "/core:/stable:/v1.35/deb/" in apt


def test_an_ssh_port_change_updates_state_only(sim: Sim) -> None:
    claim, machine = sim.adopt("kura-ovh", 0)
    moved = {**machine_props("kura-ovh", 0, claim), "ssh_port": 1}  # nothing listens there: no dial
    since = sim.last_audit_id()
    outs = sim.machines().update(f"ovh:{OVH_BOXES[0]}", machine, moved).outs
    assert outs is not None and outs["ssh_port"] == 1
    assert outs["host_key_fingerprint"] == machine["host_key_fingerprint"]
    assert sim.audit(since) == []


def test_host_key_changed_without_a_reinstall_is_refused_on_rejoin(sim: Sim) -> None:
    claim, machine = sim.adopt("kura-ovh", 0)
    box_key = f"ovh-{OVH_BOXES[0]}"
    before = sim.box(box_key)
    # Same disk, same everything, but sshd now presents another host key: not our reinstall.
    farm = BoxFarm(sim.state_dir / "boxes")
    farm.stop(box_key)
    host_key = sim.state_dir / "boxes" / box_key / "ssh" / "ssh_host_ed25519_key"
    host_key.unlink()
    Path(f"{host_key}.pub").unlink()
    subprocess.run(
        [shutil.which("ssh-keygen") or "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)],
        check=True,
    )
    info = farm.ensure(
        box_key,
        ssh_port=before["ssh_port"],
        ssh_host=before["ip"],
        user="ubuntu",
        authorized_key=None,
        sudo_password=None,
    )
    assert info.host_key_fingerprint != machine["host_key_fingerprint"]

    bumped = {**machine_props("kura-ovh", 0, claim), "kubernetes_minor": "v1.35"}
    with pytest.raises(MachineHostKeyMismatchError) as caught:
        sim.machines().update(f"ovh:{OVH_BOXES[0]}", machine, bumped)
    assert isinstance(caught.value, HostKeyMismatchError)
    assert isinstance(caught.value, MachineStepError)
    message = str(caught.value)
    assert message.startswith(f"kura-ovh-0: JOINING failed on ovh box {OVH_BOXES[0]} after ")
    assert "(attempt 2, HostKeyMismatch, failure 1)" in message
    assert f"expected {machine['host_key_fingerprint']}, seen {info.host_key_fingerprint}" in message
    assert_no_secret(sim, message)


# --- concurrency and crashes ------------------------------------------------------------------------


def parallel(calls: list[Any]) -> list[Any]:
    """Run the calls at once on threads, as the engine's four workers would; errors are returned."""
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as error:  # returned to, and asserted on by, the caller
            results[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_twenty_five_rounds_of_parallel_claims_never_double_claim(sim: Sim) -> None:
    """The claims race each other; the releases between rounds do not race the claims (each round
    starts once every release is done). The first and last rounds release for real, three at once
    (marking, reinstall, clearing); the rounds between hand the boxes back as a finished release leaves
    them (the claim cleared at the vendor, the record gone), which costs no reinstall wait."""
    claims = sim.claims()
    client = claims._config().vendor_client(Vendor.DEDIBOX)
    record = ProcessClaimRecord()
    since = sim.last_audit_id()
    rounds = 25
    for round_ in range(rounds):
        created = parallel([lambda i=i: claims.create(claim_props("kura-dedibox", i)).outs for i in range(3)])
        assert not [e for e in created if isinstance(e, BaseException)], f"round {round_}: {created}"
        assert sorted(outs["box_id"] for outs in created) == DEDIBOX_BOXES, f"round {round_}"
        fields = claims_in_state(sim.state())
        for outs in created:
            assert fields[outs["box_id"]] == f"tuist-kura-dev,tuist-claim-{outs['claim_token']}"
        if round_ in (0, rounds - 1):
            released = parallel([lambda o=o: claims.delete(resource_id(o), o) for o in created])
            assert released == [None, None, None]
        else:
            for outs in created:
                client.set_claim(outs["box_id"], None)
                progress = record.get("dedibox", outs["box_id"])
                assert progress is not None
                record.release(progress)
        assert record.held("dedibox") == {}, f"round {round_}"
    # The audit trail: every claim write put exactly one claim tag on a box that had none.
    holder: dict[str, str | None] = {}
    for entry in sim.audit(since):
        if not entry["path"].endswith("/tags") or entry["status"] != 200:
            continue
        box = entry["path"].split("/servers/")[1].split("/")[0]
        claim_tags = [t for t in entry["body"]["tags"] if t.startswith(("tuist-claim-", "tuist-releasing-"))]
        assert len(claim_tags) <= 1
        new = claim_tags[0] if claim_tags else None
        if new and new.startswith("tuist-claim-"):
            assert holder.get(box) is None, f"box {box} claimed by {new} while held by {holder[box]}"
        holder[box] = new
    assert decoy_writes(sim.audit(since)) == []


CREATE_IN_A_SUBPROCESS = """
import json, logging, sys
from pulumi.dynamic import ConfigureRequest
from pulumi.dynamic.config import Config
from providers.machine.provider import MachineProvider
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
data = json.load(sys.stdin)
provider = MachineProvider()
provider.configure(ConfigureRequest(Config(data["config"], "tuist-infra")))
provider.create(data["props"])
"""


def test_a_machine_killed_mid_join_is_resumed_on_its_claimed_box(sim: Sim) -> None:
    claim = sim.claims().create(claim_props("kura-dedibox", 0)).outs
    assert claim is not None and claim["box_id"] == DEDIBOX_BOXES[0]
    since = sim.last_audit_id()
    child = subprocess.Popen(
        [sys.executable, "-c", CREATE_IN_A_SUBPROCESS],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stderr is not None
    child.stdin.write(
        json.dumps({"config": sim.stack_config(), "props": machine_props("kura-dedibox", 0, claim)})
    )
    child.stdin.close()
    seen = []
    for line in child.stderr:
        seen.append(line)
        if "JOINING on dedibox box" in line:
            break
    # The self-join starts now (it takes a second or two): kill the provider while it runs. The SSH
    # session dies with it (sshd hangs up the script), so the box is left half-joined.
    time.sleep(0.15)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    unit = sim.box_root("dedibox-200101") / "etc/systemd/system/kubelet.service"
    assert not unit.exists(), "the join finished before the kill; the test proves nothing"
    assert (
        claims_in_state(sim.state())[DEDIBOX_BOXES[0]] == f"tuist-kura-dev,tuist-claim-{claim['claim_token']}"
    )

    # A competing slot comes first: it must not get the half-joined, claimed box.
    other, _ = sim.adopt("kura-dedibox", 1)
    assert other["box_id"] == DEDIBOX_BOXES[1]
    writes_before_retry = len(sim.audit(since))
    machine = sim.machines().create(machine_props("kura-dedibox", 0, claim)).outs

    assert machine is not None and machine["box_id"] == DEDIBOX_BOXES[0]
    assert unit.exists()
    # The retry joined its claimed box and wrote nothing at the vendor.
    assert len(sim.audit(since)) == writes_before_retry


# --- with a cluster -----------------------------------------------------------------------------------


def test_with_a_cluster_the_box_joins_it_for_real_and_leaving_drains_before_the_release(
    sim: Sim, machine_claims_crd: KubeCluster, fleet_rbac: Callable[[str], None]
) -> None:
    """The session's real control plane: the machine writes the box's bootstrap token, the box's own
    kubelet TLS-bootstraps and registers its Node (the machine is ready only once that Node is), pods
    on it resolve through the cluster DNS the stack configures, and destroy leaves the cluster
    (cordon, drain, Node deleted) before the claim releases the box."""
    cluster = machine_claims_crd
    fleet_rbac("kura-dedibox")  # what components/node_bootstrap.py binds for the fleet
    kubeconfig = cluster.kubeconfig.read_text()
    claims, machines = sim.claims(kubeconfig=kubeconfig), sim.machines(kubeconfig=kubeconfig)
    api = {"api_server": cluster.api_server}
    claim, machine = sim.adopt(
        "kura-dedibox",
        0,
        claims=claims,
        machines=machines,
        claim=api,
        machine={"cluster_dns": "10.96.0.53", "cluster_domain": "cluster.example"},
    )
    assert (machine["node_registered"], machine["state"]) == (True, "ready")
    name = machine["node_name"]
    node = cluster.core.read_node(name)
    assert node.spec.provider_id == f"dedibox://{DEDIBOX_BOXES[0]}"
    assert [(a.type, a.address) for a in node.status.addresses] == [
        ("InternalIP", sim.ip(31)),
        ("Hostname", name),
    ]
    # The box's hardware (a Start-1-M-SSD: 8 threads, 16 GiB of DIMMs, of which its kernel reports
    # 16384 - 256 - 512 MiB), as its /proc shows it to the kubelet.
    assert (node.status.capacity["cpu"], node.status.capacity["memory"]) == ("8", "15616Mi")
    assert node.metadata.labels["node.cluster.x-k8s.io/pool"] == "kura-dedibox"
    assert ("tuist.dev/kura-cache", "true", "NoSchedule") in [
        (t.key, t.value, t.effect) for t in node.spec.taints
    ]
    # The box holds the token (in its bootstrap kubeconfig) that a Secret of the cluster makes valid.
    bootstrap = (sim.box_root("dedibox-200101") / "var/lib/kubelet/bootstrap-kubeconfig").read_text()
    (value,) = re.findall(r"token: ([a-z0-9]{6}\.[a-z0-9]{16})", bootstrap)
    secret = cluster.core.read_namespaced_secret(f"bootstrap-token-{value.split('.')[0]}", "kube-system")
    assert base64.b64decode(secret.data["token-secret"]).decode() == value.split(".")[1]
    assert base64.b64decode(secret.data["description"]).decode() == f"tuist-infra self-join of {name}"
    group = base64.b64decode(secret.data["auth-extra-groups"]).decode()
    assert group == "system:bootstrappers:tuist-kura-dedibox"
    token = base64.b64decode(secret.data["token-secret"]).decode()
    assert token not in repr(machine)
    # The certificate the kubelet holds is the node's own, signed after the token's CSR was approved.
    csrs = k8s.CertificatesV1Api(cluster.api).list_certificate_signing_request().items
    (csr,) = [
        c
        for c in csrs
        if c.spec.username == f"system:bootstrap:{base64.b64decode(secret.data['token-id']).decode()}"
    ]
    assert [c.type for c in csr.status.conditions] == ["Approved"]

    # A pod on the box gets the cluster DNS the machine's inputs name, as the kubelet writes it.
    namespace = cluster.namespace("resolv")
    pod = cluster.core.create_namespaced_pod(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "kura"},
            "spec": {
                "nodeName": name,
                "tolerations": [{"key": "tuist.dev/kura-cache", "operator": "Exists"}],
                "containers": [{"name": "kura", "image": "ghcr.io/tuist/kura:0.10.5"}],
            },
        },
    )
    resolv = sim.box_root("dedibox-200101") / "var/lib/kubelet/pods" / pod.metadata.uid / "resolv.conf"
    wait_until("the pod's resolv.conf on the box", resolv.exists, timeout=60)
    assert resolv.read_text().splitlines() == [
        "nameserver 10.96.0.53",
        f"search {namespace}.svc.cluster.example svc.cluster.example cluster.example",
        "options ndots:5",
    ]
    # Its namespace goes as the box leaves: evictions there are refused (403, NamespaceTerminating)
    # and the drain waits for the namespace controller instead, as kubectl drain does.
    cluster.delete_namespace(namespace)

    sim.destroy(claim, machine, claims=claims, machines=machines)
    wait_until(
        f"Node {name} gone", lambda: name not in {n.metadata.name for n in cluster.core.list_node().items}
    )
    assert claims_in_state(sim.state())[DEDIBOX_BOXES[0]] == "tuist-kura-dev"
    # The box was reinstalled: its kubelet is gone with its old disk, and nothing re-registers the Node.
    assert not (sim.box_root("dedibox-200101") / "etc/systemd/system/kubelet.service").exists()


# --- secrets ------------------------------------------------------------------------------------------


def test_no_secret_in_outputs_errors_or_logs(
    sim: Sim, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    claim, machine = sim.adopt("kura-ovh", 0)
    updated = (
        sim.machines()
        .update(
            f"ovh:{OVH_BOXES[0]}",
            machine,
            {**machine_props("kura-ovh", 0, claim), "kubernetes_minor": "v1.33"},
        )
        .outs
    )
    # A failing join (the box refuses this sudo password) puts the box's output in the error.
    wrong = "wrong-" + sim.sudo_password
    with pytest.raises(MachineStepError) as caught:
        sim.adopt("kura-ovh", 1, machines=sim.machines(fleetSudoPassword=wrong))
    message = str(caught.value)
    assert message.startswith(f"kura-ovh-1: JOINING failed on ovh box {OVH_BOXES[1]} after ")
    assert "sudo: 1 incorrect password attempt" in message
    assert wrong not in message
    captured = capsys.readouterr()
    texts = [repr(claim), repr(machine), repr(updated), message, caplog.text, captured.out, captured.err]
    progress = ProcessClaimRecord().get("ovh", OVH_BOXES[1])
    texts.append(repr(progress))
    assert_no_secret(sim, *texts)
    for text in texts:
        assert wrong not in text


def test_ovh_release_reinstalls_with_the_trimmed_fleet_key_and_waits_for_the_task(sim: Sim) -> None:
    claim, machine = sim.adopt("kura-ovh", 0)
    since = sim.last_audit_id()

    sim.destroy(claim, machine)

    writes = [(e["method"], e["path"], e["body"]) for e in sim.audit(since)]
    assert [(m, p) for m, p, _ in writes] == [
        ("PUT", "/ovh/1.0/service/10001001"),
        ("POST", f"/ovh/1.0/dedicated/server/{OVH_BOXES[0]}/reinstall"),
        ("PUT", "/ovh/1.0/service/10001001"),
    ]
    assert writes[0][2]["resource"]["displayName"] == f"tuist-kura-dev-ovh-1--r-{token('kura-ovh-0')}"
    reinstall = writes[1][2]
    assert reinstall["customizations"] == {
        "hostname": "kura-ovh-ns1001-ip-203-0-113-net",
        "sshKey": sim.key.public.rsplit(" ", 1)[0],
    }
    assert writes[2][2]["resource"]["displayName"] == "tuist-kura-dev-ovh-1"
    (task,) = [t for t in sim.state()["ovh"]["tasks"] if t["serviceName"] == OVH_BOXES[0]]
    assert task["status"] == "done"
    assert decoy_writes(sim.audit(since)) == []


# --- through the real dynamic provider process -------------------------------------------------------


def _struct(values: dict[str, Any]) -> Any:
    import asyncio

    from pulumi.runtime import rpc

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(rpc.serialize_properties(values, {}))
    finally:
        loop.close()


def test_the_engine_path_unpickles_configures_and_creates(sim: Sim) -> None:
    """What the engine does: start `python -m pulumi.dynamic`, Configure it with the stack config over
    gRPC, then Create the claim and the machine with the pickled providers in `__provider`. The process
    unpickles the providers (by reference: it imports providers.machine.provider), calls configure(),
    then create(); the machine finds the claim's record in the same process."""
    import grpc
    from pulumi.dynamic.dynamic import serialize_provider
    from pulumi.runtime import proto, rpc
    from pulumi.runtime.proto import provider_pb2_grpc

    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "pulumi.dynamic"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "PULUMI_PROJECT": PROJECT},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline().decode().strip())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = provider_pb2_grpc.ResourceProviderStub(channel)
            stub.Configure(proto.ConfigureRequest(args=_struct(sim.stack_config())), timeout=30)
            props = {**claim_props("kura-dedibox", 2), "__provider": serialize_provider(ClaimProvider())}
            claimed = stub.Create(proto.CreateRequest(urn="urn:x", properties=_struct(props)), timeout=120)
            claim = rpc.deserialize_properties(claimed.properties)
            machine_in = {
                **machine_props("kura-dedibox", 2, claim),
                "__provider": serialize_provider(MachineProvider()),
            }
            joined = stub.Create(
                proto.CreateRequest(urn="urn:y", properties=_struct(machine_in)), timeout=120
            )
        machine = rpc.deserialize_properties(joined.properties)
    finally:
        process.kill()
        process.wait()
    assert claimed.id == joined.id == f"dedibox:{DEDIBOX_BOXES[0]}"
    assert machine["provider_id"] == f"dedibox://{DEDIBOX_BOXES[0]}" and machine["state"] == "ready"
    assert machine["__provider"] == machine_in["__provider"]
    assert_no_secret(sim, json.dumps(machine, default=str), json.dumps(claim, default=str))


# --- import -------------------------------------------------------------------------------------------


def test_an_import_claims_the_named_box_and_what_it_records_reads_back_unchanged(sim: Sim) -> None:
    """providers/machine/importing.py: the import file's outputs are what read() says of the box, so a
    `pulumi refresh` after `pulumi import` finds nothing to change; the box is claimed like any other."""
    from providers.machine.importing import slot_resources

    claims, machines = sim.claims(), sim.machines()
    machine_in = {k: v for k, v in machine_props("kura-ovh", 3, {}).items() if v is not None}
    since = sim.last_audit_id()
    document = slot_resources(
        settings=claims._config(),
        stack=STACK,
        claim_inputs=claim_props("kura-ovh", 3),
        machine_inputs=machine_in,
        label_inputs={"labels": {"a": "b"}, "taints": [], "api_server": None},
        slot="kura-ovh-3",
        box_id=OVH_BOXES[1],
        log=lambda line: None,
    )
    claim, machine, labels = document["resources"]
    assert [r["name"] for r in document["resources"]] == [
        "kura-ovh-3-claim",
        "kura-ovh-3",
        "kura-ovh-3-labels",
    ]
    assert claim["id"] == machine["id"] == f"ovh:{OVH_BOXES[1]}"
    assert document["nameTable"] == {
        "fleet": "urn:pulumi:dev::tuist-infra::tuist:fleet:BareMetalFleet::fleet-kura-ovh"
    }
    assert claim["inputs"]["__provider"] == claim["outputs"]["__provider"]
    # Claimed at the vendor (the only write), recorded as ready, and the pin is the box's key.
    assert claims_in_state(sim.state())[OVH_BOXES[1]] == f"tuist-kura-dev-ovh-2--c-{token('kura-ovh-3')}"
    assert [e["method"] for e in sim.audit(since)] == ["PUT"]
    assert (
        machine["outputs"]["host_key_fingerprint"] == sim.box(f"ovh-{OVH_BOXES[1]}")["host_key_fingerprint"]
    )
    progress = ProcessClaimRecord().get("ovh", OVH_BOXES[1])
    assert progress is not None and progress.phase == "Ready"
    for provider, resource in ((claims, claim), (machines, machine)):
        outputs = {k: v for k, v in resource["outputs"].items() if k != "__provider"}
        assert provider.read(resource["id"], outputs).outs == outputs
    assert (
        labels["inputs"]["node_name"] == machine["outputs"]["node_name"] == "kura-ovh-ns1002-ip-203-0-113-net"
    )
    # The engine will diff the program's inputs against these: the same inputs are no change.
    assert claims.diff(claim["id"], claim["outputs"], claim["inputs"]).changes is False
    assert machines.diff(machine["id"], machine["outputs"], machine["inputs"]).changes is False
    assert_no_secret(sim, json.dumps(document))

    # A box someone else holds is refused, naming the holder; nothing is written.
    since = sim.last_audit_id()
    with pytest.raises(NoAdoptableBoxError, match=r"claimed by a1ce00000001$"):
        slot_resources(
            settings=claims._config(),
            stack=STACK,
            claim_inputs=claim_props("kura-ovh", 4),
            machine_inputs=machine_in,
            label_inputs={"labels": {}, "taints": [], "api_server": None},
            slot="kura-ovh-4",
            box_id="ns1004.ip-203-0-113.net",
        )
    assert sim.audit(since) == []
