"""MachineProvider against a vendorsim subprocess: real HTTP to the vendor APIs, real OpenSSH boxes that
run the self-join in their sandboxes. The provider's own create/read/update/delete/diff methods are
driven directly, the way the dynamic provider process calls them."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from config.models import Vendor
from providers.claims import claim_token
from providers.machine import (
    MachineHostKeyMismatchError,
    MachineProvider,
    MachineStepError,
    NoAdoptableBoxError,
    ReleaseRefusedError,
)
from providers.ssh.runner import HostKeyMismatchError
from providers.vendor import Claim
from tests.providers.test_kube import CA_PEM, FakeKube, serve_fake_kube
from tests.providers.test_machine_support import (
    PROJECT,
    REPO,
    STACK,
    Sim,
    claims_in_state,
    machine_props,
    running_sim,
)
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
    sim_process.admin("POST", "reset")
    return sim_process


@pytest.fixture
def cluster() -> Iterator[FakeKube]:
    yield from serve_fake_kube()


def token(name: str) -> str:
    return claim_token(PROJECT, STACK, name)


def decoy_writes(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if any(decoy in e["path"] or decoy == e.get("box") for decoy in DECOYS)]


def assert_no_secret(sim: Sim, *texts: str) -> None:
    for text in texts:
        for secret in sim.secret_values():
            assert secret not in text


# --- create -----------------------------------------------------------------------------------------


def test_create_claims_the_lowest_free_box_and_joins_it_over_ssh(
    sim: Sim, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    provider = sim.provider()
    props = machine_props("kura-ovh", 0, labels={"tuist.dev/region": "ca-east"})
    since = sim.last_audit_id()

    result = provider.create(props)

    box = "ns1001.ip-203-0-113.net"
    assert result.id == f"ovh:{box}"
    outs = result.outs
    assert outs is not None
    assert {k: outs[k] for k in ("vendor", "box_id", "name", "datacenter", "public_ipv4", "provider_id")} == {
        "vendor": "ovh",
        "box_id": box,
        "name": box,
        "datacenter": "bhs6",
        "public_ipv4": sim.ip(11),
        "provider_id": f"ovh://bhs6/{box}",
    }
    assert outs["node_name"] == "kura-ovh-ns1001-ip-203-0-113-net"
    assert outs["state"] == "ready"
    assert outs["claim_token"] == token("kura-ovh-0")
    assert outs["node_registered"] is False  # the dev stack has no cluster: no Secret was written
    assert outs["host_key_fingerprint"] == sim.box(f"ovh-{box}")["host_key_fingerprint"]
    # The claim is on the vendor side, on the fleet marker, and it is the only write of this create.
    assert claims_in_state(sim.state())[box] == f"tuist-kura-dev-ovh-1--c-{token('kura-ovh-0')}"
    writes = sim.audit(since)
    assert [(e["method"], e["path"], e["body"]) for e in writes] == [
        (
            "PUT",
            "/ovh/1.0/service/10001001",
            {"resource": {"displayName": f"tuist-kura-dev-ovh-1--c-{token('kura-ovh-0')}", "name": box}},
        )
    ]
    # The self-join really ran in the box: kubelet unit with the node's identity, labels and taints.
    unit = (sim.box_root(f"ovh-{box}") / "etc/systemd/system/kubelet.service").read_text()
    assert f"--node-ip={sim.ip(11)}" in unit
    assert f"--provider-id=ovh://bhs6/{box}" in unit
    assert "--hostname-override=kura-ovh-ns1001-ip-203-0-113-net" in unit
    assert (
        "--node-labels=node.cluster.x-k8s.io/pool=kura-ovh,tuist.dev/fleet=kura-ovh,tuist.dev/region=ca-east"
        in unit
    )
    assert "--register-with-taints=tuist.dev/kura-cache=true:NoSchedule" in unit
    sudoers = sim.box_root(f"ovh-{box}") / "etc/sudoers.d/90-ubuntu-nopasswd"
    assert sudoers.read_text() == "ubuntu ALL=(ALL) NOPASSWD:ALL\n"
    # The states were logged as they ran.
    states = [
        r.getMessage()
        for r in caplog.records
        if r.name == "providers.machine" and "(budget" in r.getMessage()
    ]
    assert [s.split(": ")[1].split(" on ")[0] for s in states] == ["CLAIMING", "JOINING"]
    assert_no_secret(sim, repr(outs), caplog.text)


def test_no_candidate_error_names_fleet_marker_count_and_each_skip(sim: Sim) -> None:
    provider = sim.provider()
    for i in range(3):
        provider.create(machine_props("kura-ovh", i))
    with pytest.raises(NoAdoptableBoxError) as caught:
        provider.create(machine_props("kura-ovh", 3))
    assert str(caught.value) == "\n".join(
        [
            "fleet kura-ovh: no adoptable box with marker 'tuist-kura-dev-ovh' among the 7 boxes seen",
            f"  ns1001.ip-203-0-113.net: claimed by {token('kura-ovh-0')}",
            f"  ns1002.ip-203-0-113.net: claimed by {token('kura-ovh-1')}",
            f"  ns1003.ip-203-0-113.net: claimed by {token('kura-ovh-2')}",
            "  ns1004.ip-203-0-113.net: claimed by a1ce00000001",
            "  ns1005.ip-203-0-113.net: marked for another environment or fleet ('tuist-kura-staging-ovh-1')",
            "  ns1006.ip-203-0-113.net: marked for another environment or fleet "
            "('tuist-kura-production-ovh-1')",
            "  ns1007.ip-203-0-113.net: not marked for this fleet ('ns1007.ip-203-0-113.net')",
        ]
    )


def test_transient_vendor_errors_still_converge(sim: Sim, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="providers.retry")
    provider = sim.provider()
    sim.faults({"vendor": "dedibox", "error_rate": 0.2, "status": 503, "seed": 7})
    sim.faults({"vendor": "ovh", "error_rate": 0.2, "status": 500, "seed": 11})
    try:
        outs = [provider.create(machine_props("kura-dedibox", i)).outs for i in range(2)]
        ovh = provider.create(machine_props("kura-ovh", 0)).outs
        assert ovh is not None and ovh["box_id"] == OVH_BOXES[0]
        assert [o["box_id"] for o in outs if o] == DEDIBOX_BOXES[:2]
        provider.delete(
            "dedibox:" + DEDIBOX_BOXES[0], {**machine_props("kura-dedibox", 0), **(outs[0] or {})}
        )
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
    provider = sim.provider()
    since = sim.last_audit_id()
    props = machine_props("kura-dedibox", 0)
    created = provider.create(props).outs
    assert created is not None and created["box_id"] == DEDIBOX_BOXES[0]
    generation = sim.box("dedibox-200101")["generation"]

    provider.delete(f"dedibox:{DEDIBOX_BOXES[0]}", created)

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
    # Never cancelled or terminated; decoys never written.
    assert not [w for w in writes if "cancel" in w[1] or "terminate" in w[1] or w[0] == "DELETE"]
    assert decoy_writes(sim.audit(since)) == []

    # The released box is back in the pool: a later create adopts it again, with its new host key.
    again = provider.create(machine_props("kura-dedibox", 5)).outs
    assert again is not None and again["box_id"] == DEDIBOX_BOXES[0]
    assert again["host_key_fingerprint"] == sim.box("dedibox-200101")["host_key_fingerprint"]
    assert again["host_key_fingerprint"] != created["host_key_fingerprint"]


def test_production_release_is_refused_naming_the_switches(sim: Sim) -> None:
    provider = sim.provider()
    props = machine_props("kura-ovh", 0, marker="tuist-kura-production-ovh", environment="production")
    outs = {**props, "box_id": "ns1006.ip-203-0-113.net", "node_name": "n"}
    since = sim.last_audit_id()
    with pytest.raises(ReleaseRefusedError) as caught:
        provider.delete("ovh:ns1006.ip-203-0-113.net", outs)
    assert str(caught.value) == (
        "kura-ovh-0: refusing to release production box (fleet kura-ovh): releasing reinstalls it. "
        "To allow it set fleets[name=kura-ovh].allow_release: true and allow_production_release: true "
        "in Pulumi.production.yaml, run `pulumi up` so the machine records it, then unprotect and delete "
        "(config forbids allow_release on production Kura fleets)"
    )
    with pytest.raises(ReleaseRefusedError, match=r"set allow_production_release: true in"):
        provider.delete("ovh:ns1006.ip-203-0-113.net", {**outs, "allow_release": True})
    assert sim.audit(since) == []


# --- read, update, host keys ---------------------------------------------------------------------------


def test_read_rederives_the_box_and_reports_a_lost_claim_as_gone(sim: Sim) -> None:
    provider = sim.provider()
    outs = provider.create(machine_props("kura-dedibox", 0)).outs
    assert outs is not None
    read = provider.read(f"dedibox:{DEDIBOX_BOXES[0]}", outs)
    assert read.id == f"dedibox:{DEDIBOX_BOXES[0]}"
    assert read.outs is not None
    assert (read.outs["public_ipv4"], read.outs["datacenter"], read.outs["state"]) == (
        sim.ip(31),
        "DC5",
        "ready",
    )
    # Someone takes the box away (an operator re-marks it for another stack).
    client = provider._config().vendor_client(Vendor.DEDIBOX)
    client.set_claim(DEDIBOX_BOXES[0], Claim("0123456789ab"))
    gone = provider.read(f"dedibox:{DEDIBOX_BOXES[0]}", outs)
    assert gone.id == ""


def test_update_relabels_in_place_by_rerunning_the_join(sim: Sim) -> None:
    provider = sim.provider()
    old = machine_props("kura-ovh", 0)
    outs = provider.create(old).outs
    assert outs is not None
    new = {**old, "labels": {"tuist.dev/tier": "gold"}}
    assert provider.diff(f"ovh:{OVH_BOXES[0]}", outs, new).replaces == []
    updated = provider.update(f"ovh:{OVH_BOXES[0]}", outs, new).outs
    assert updated is not None
    assert updated["box_id"] == OVH_BOXES[0] and updated["labels"] == {"tuist.dev/tier": "gold"}
    assert updated["host_key_fingerprint"] == outs["host_key_fingerprint"]
    unit = (sim.box_root(f"ovh-{OVH_BOXES[0]}") / "etc/systemd/system/kubelet.service").read_text()
    assert "tuist.dev/tier=gold" in unit


def test_host_key_changed_without_a_reinstall_is_refused_on_update(sim: Sim) -> None:
    provider = sim.provider()
    old = machine_props("kura-ovh", 0)
    outs = provider.create(old).outs
    assert outs is not None
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
    assert info.host_key_fingerprint != outs["host_key_fingerprint"]

    new = {**old, "labels": {"tuist.dev/tier": "gold"}}
    with pytest.raises(MachineHostKeyMismatchError) as caught:
        provider.update(f"ovh:{OVH_BOXES[0]}", outs, new)
    assert isinstance(caught.value, HostKeyMismatchError)
    assert isinstance(caught.value, MachineStepError)
    message = str(caught.value)
    assert message.startswith(f"kura-ovh-0: JOINING failed on ovh box {OVH_BOXES[0]} after ")
    assert f"expected {outs['host_key_fingerprint']}, seen {info.host_key_fingerprint}" in message
    assert_no_secret(sim, message)


# --- concurrency and crashes ------------------------------------------------------------------------


def parallel_creates(
    provider: MachineProvider, fleet: str, count: int
) -> tuple[dict[str, Any], list[BaseException]]:
    """`count` creates of one fleet started at once on threads, as the engine's workers would."""
    results: dict[str, Any] = {}
    errors: list[BaseException] = []

    def create(i: int) -> None:
        try:
            results[f"{fleet}-{i}"] = provider.create(machine_props(fleet, i)).outs
        except BaseException as error:  # collected and asserted on by the caller
            errors.append(error)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results, errors


def parallel_deletes(provider: MachineProvider, machines: list[dict[str, Any]]) -> None:
    errors: list[BaseException] = []

    def delete(outs: dict[str, Any]) -> None:
        try:
            provider.delete(f"{outs['vendor']}:{outs['box_id']}", outs)
        except BaseException as error:  # asserted on below
            errors.append(error)

    threads = [threading.Thread(target=delete, args=(outs,)) for outs in machines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_fifty_rounds_of_parallel_creates_never_double_claim(sim: Sim) -> None:
    provider = sim.provider()
    since = sim.last_audit_id()
    for round_ in range(50):
        results, errors = parallel_creates(provider, "kura-dedibox", 3)
        assert errors == [], f"round {round_}: {errors}"
        boxes = sorted(outs["box_id"] for outs in results.values())
        assert boxes == DEDIBOX_BOXES, f"round {round_}: {boxes}"
        fields = claims_in_state(sim.state())
        for name, outs in results.items():
            assert fields[outs["box_id"]] == f"tuist-kura-dev,tuist-claim-{token(name)}"
        parallel_deletes(provider, list(results.values()))
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
from providers.machine import MachineProvider
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
data = json.load(sys.stdin)
provider = MachineProvider()
provider.configure(ConfigureRequest(Config(data["config"], "tuist-infra")))
provider.create(data["props"])
"""


def test_a_create_killed_mid_join_is_resumed_on_the_same_box(sim: Sim) -> None:
    props = machine_props("kura-dedibox", 0)
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
    child.stdin.write(json.dumps({"config": sim.stack_config(), "props": props}))
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
    assert any("claimed dedibox box fr-par-2/200101" in line for line in seen), seen
    unit = sim.box_root("dedibox-200101") / "etc/systemd/system/kubelet.service"
    assert not unit.exists(), "the join finished before the kill; the test proves nothing"
    assert (
        claims_in_state(sim.state())[DEDIBOX_BOXES[0]]
        == f"tuist-kura-dev,tuist-claim-{token('kura-dedibox-0')}"
    )

    # A competing machine comes first: it must not get the half-joined box.
    provider = sim.provider()
    other = provider.create(machine_props("kura-dedibox", 1)).outs
    assert other is not None and other["box_id"] == DEDIBOX_BOXES[1]
    writes_before_retry = len(sim.audit(since))
    outs = provider.create(props).outs

    assert outs is not None and outs["box_id"] == DEDIBOX_BOXES[0]
    assert unit.exists()
    # It resumed on its own claim: the retry wrote nothing at the vendor.
    assert len(sim.audit(since)) == writes_before_retry


# --- with a cluster -----------------------------------------------------------------------------------


def test_with_a_cluster_the_join_gets_a_bootstrap_secret_and_release_drains_first(
    sim: Sim, cluster: FakeKube
) -> None:
    provider = sim.provider(kubeconfig=cluster.kubeconfig())
    props = machine_props("kura-dedibox", 0, api_server="https://cp.dev.invalid:6443")
    outs = provider.create(props).outs
    assert outs is not None and outs["node_registered"] is True
    (secret,) = cluster.secrets.values()
    assert secret["stringData"]["auth-extra-groups"] == "system:bootstrappers:tuist-kura-dedibox"
    assert secret["metadata"]["name"] == f"bootstrap-token-{secret['stringData']['token-id']}"
    root = sim.box_root("dedibox-200101")
    kubeconfig = (root / "var/lib/kubelet/bootstrap-kubeconfig").read_text()
    token = f"{secret['stringData']['token-id']}.{secret['stringData']['token-secret']}"
    assert f"token: {token}" in kubeconfig  # the box got the token the Secret makes valid
    assert "server: https://cp.dev.invalid:6443" in kubeconfig
    assert (root / "etc/kubernetes/pki/ca.crt").read_text() == CA_PEM
    assert token not in repr(outs)

    node = outs["node_name"]
    cluster.nodes[node] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}, "spec": {}}
    before = len(cluster.requests)
    provider.delete(f"dedibox:{DEDIBOX_BOXES[0]}", outs)
    kube_writes = [(m, p) for m, p, _ in cluster.requests[before:] if m != "GET"]
    assert kube_writes == [("PATCH", f"/api/v1/nodes/{node}"), ("DELETE", f"/api/v1/nodes/{node}")]
    assert node not in cluster.nodes
    assert claims_in_state(sim.state())[DEDIBOX_BOXES[0]] == "tuist-kura-dev"


# --- secrets ------------------------------------------------------------------------------------------


def test_no_secret_in_outputs_errors_or_logs(
    sim: Sim, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = sim.provider()
    props = machine_props("kura-ovh", 0)
    created = provider.create(props).outs
    assert created is not None
    updated = provider.update(f"ovh:{OVH_BOXES[0]}", created, {**props, "labels": {"a": "b"}}).outs
    # A failing join (the box refuses this sudo password) puts the box's output in the error.
    wrong = "wrong-" + sim.sudo_password
    with pytest.raises(MachineStepError) as caught:
        sim.provider(fleetSudoPassword=wrong).create(machine_props("kura-ovh", 1))
    message = str(caught.value)
    assert message.startswith(f"kura-ovh-1: JOINING failed on ovh box {OVH_BOXES[1]} after ")
    assert "sudo: 1 incorrect password attempt" in message
    assert wrong not in message
    captured = capsys.readouterr()
    texts = [repr(created), repr(updated), message, caplog.text, captured.out, captured.err]
    assert_no_secret(sim, *texts)
    for text in texts:
        assert wrong not in text


def test_ovh_release_reinstalls_with_the_trimmed_fleet_key_and_waits_for_the_task(sim: Sim) -> None:
    provider = sim.provider()
    outs = provider.create(machine_props("kura-ovh", 0)).outs
    assert outs is not None
    since = sim.last_audit_id()

    provider.delete(f"ovh:{OVH_BOXES[0]}", outs)

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
    gRPC, then Create with the pickled provider in `__provider`. The process unpickles the provider (by
    reference: it imports providers.machine), calls configure(), then create()."""
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
            props = {**machine_props("kura-dedibox", 2), "__provider": serialize_provider(MachineProvider())}
            response = stub.Create(proto.CreateRequest(urn="urn:x", properties=_struct(props)), timeout=120)
        outs = rpc.deserialize_properties(response.properties)
    finally:
        process.kill()
        process.wait()
    assert response.id == f"dedibox:{DEDIBOX_BOXES[0]}"
    assert outs["provider_id"] == f"dedibox://{DEDIBOX_BOXES[0]}" and outs["state"] == "ready"
    assert outs["__provider"] == props["__provider"]
    assert_no_secret(sim, json.dumps(outs, default=str))
