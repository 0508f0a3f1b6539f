"""ClaimProvider and MachineProvider on Scaleway Elastic Metal and Apple silicon, against a vendorsim
subprocess: the SDK's real HTTP to the simulated APIs, real OpenSSH boxes (a Linux one for Elastic
Metal, a Mac one answering as macOS for Apple silicon). Adopt, then release by reinstall, with the
audit showing the exact writes: never a delete, never a decoy."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from providers.claims import claim_token
from providers.machine.errors import MachineStepError
from providers.machine.record import ProcessClaimRecord
from tests.providers.test_machine_support import (
    PRIVATE_NETWORK,
    PROJECT,
    STACK,
    Sim,
    claim_props,
    claims_in_state,
    machine_props,
    running_sim,
)
from tests.vendorsim.test_applesilicon import launchd_dump, sim_pid
from vendorsim.artifacts import ARTIFACTS_DIR, NODE_AGENT, sha256_of

EM_DEV_1 = "fr-par-2/e1000000-0000-4000-8000-000000000001"
MAC_DEV_1 = "fr-par-3/a5000000-0000-4000-8000-000000000001"
# Other environments, other stacks' claims, unmarked boxes: never written by this stack.
DECOYS = [f"e1000000-0000-4000-8000-00000000000{n}" for n in (4, 5, 6, 7)] + [
    f"a5000000-0000-4000-8000-00000000000{n}" for n in (4, 5, 6, 7)
]


@pytest.fixture(scope="module")
def sim_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    yield from running_sim(tmp_path_factory.mktemp("scaleway-machine-sim"))


@pytest.fixture
def sim(sim_process: Sim) -> Sim:
    return sim_process.reset()


def token(name: str) -> str:
    return claim_token(PROJECT, STACK, name)


def agent_pin(sim: Sim, *, registers_node: bool = False) -> dict[str, Any]:
    return {
        "url": f"{sim.url}/artifacts/{NODE_AGENT}",
        "sha256": sha256_of(NODE_AGENT),
        "registers_node": registers_node,
    }


def writes(sim: Sim, since: int) -> list[tuple[str, str]]:
    return [(e["method"], e["path"]) for e in sim.audit(since) if e["method"] != "GET"]


def decoy_writes(sim: Sim, since: int) -> list[tuple[str, str]]:
    return [w for w in writes(sim, since) if any(decoy in w[1] for decoy in DECOYS)]


def states(caplog: pytest.LogCaptureFixture) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if "(budget" in r.getMessage()]
    return [line.split(": ")[1].split(" on ")[0] for line in lines]


# --- Elastic Metal ---------------------------------------------------------------------------------------


def test_an_elastic_metal_box_is_claimed_by_tag_joined_with_its_vlan_and_released_by_reinstall(
    sim: Sim, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    since = sim.last_audit_id()
    claim, machine = sim.adopt("kura-scw", 0, machine={"private_network": PRIVATE_NETWORK})

    server = "e1000000-0000-4000-8000-000000000001"
    assert claim["box_id"] == EM_DEV_1
    assert claim["provider_id"] == f"scaleway://fr-par-2/{server}"
    assert claims_in_state(sim.state())[EM_DEV_1] == f"tuist-kura-scw-dev,tuist-claim-{token('kura-scw-0')}"
    assert states(caplog) == ["CLAIMING", "PN_ATTACHING", "PN_VLAN", "JOINING", "NODE_READY"]
    # The server's Private Network option was enabled first, then the attachment made.
    path = f"/scaleway/baremetal/v1/zones/fr-par-2/servers/{server}"
    assert writes(sim, since) == [
        ("PATCH", path),  # the claim tag
        ("POST", f"{path}/options/0b700000-0000-4000-8000-000000000001"),
        ("POST", f"{path}/private-networks"),
    ]
    (attachment,) = [a for a in sim.state()["scaleway_em"]["private_networks"] if a["server_id"] == server]
    vlan = attachment["vlan"]
    root = sim.box_root(f"em-{server}")
    netplan = (root / "etc/netplan/60-tuist-private-network.yaml").read_text()
    assert f"    pn0:\n      id: {vlan}\n      link: enp1s0\n      dhcp4: true\n" in netplan
    assert (root / "var/lib/sim/ip/links").read_text() == f"pn0 vlan {vlan} enp1s0\n"
    assert "netplan apply" in sim.calls(f"em-{server}")
    # The vendor-agnostic self-join as ubuntu, with the Scaleway providerID.
    unit = (root / "etc/systemd/system/kubelet.service").read_text()
    assert f"--provider-id=scaleway://fr-par-2/{server}" in unit
    assert (root / "etc/sudoers.d/90-ubuntu-nopasswd").exists()
    assert machine["node_registered"] is False

    # A rejoin brings pn0 up again without a second netplan apply: nothing changed.
    calls_before = sim.calls(f"em-{server}").count("netplan apply")
    sim.machines().update(f"scaleway_em:{EM_DEV_1}", machine, {**machine, "kubernetes_minor": "v1.35"})
    assert sim.calls(f"em-{server}").count("netplan apply") == calls_before

    # A Dedibox release of the same stack registered the fleet key in the Dedibox project already:
    # the Elastic Metal release registers it in its own project all the same.
    dedibox_project = sim.inventory["credentials"]["dedibox"]["project_id"]
    registered = requests.post(
        f"{sim.url}/dedibox/iam/v1alpha1/ssh-keys",
        json={"name": "dedibox-fleet", "public_key": sim.key.public, "project_id": dedibox_project},
        headers={"X-Auth-Token": sim.inventory["credentials"]["dedibox"]["secret_key"]},
        timeout=10,
    )
    assert registered.status_code == 200, registered.text
    released_since = sim.last_audit_id()
    sim.destroy(claim, machine)
    assert claims_in_state(sim.state())[EM_DEV_1] == "tuist-kura-scw-dev"
    assert writes(sim, released_since) == [
        ("PATCH", path),  # releasing
        ("POST", "/scaleway/iam/v1alpha1/ssh-keys"),  # the fleet key, for the install
        ("POST", f"{path}/install"),
        ("PATCH", path),  # claim cleared
    ]
    assert not [w for w in writes(sim, since) if w[0] == "DELETE"]
    assert decoy_writes(sim, since) == []
    assert ProcessClaimRecord().get("scaleway_em", EM_DEV_1) is None


# --- Apple silicon ---------------------------------------------------------------------------------------


def test_a_mac_is_claimed_by_name_bootstrapped_the_macos_way_and_released_by_reinstall(
    sim: Sim, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    since = sim.last_audit_id()
    claim, machine = sim.adopt("runners-macos", 0, machine={"node_agent": agent_pin(sim)})

    server = "a5000000-0000-4000-8000-000000000001"
    box = f"mac-{server}"
    assert claim["box_id"] == MAC_DEV_1
    assert claim["provider_id"] == f"applesilicon://fr-par-3/{server}"
    assert claims_in_state(sim.state())[MAC_DEV_1] == f"tuist-macos-dev-1--c-{token('runners-macos-0')}"
    # Never the Linux self-join: the Mac's own bootstrap, then (no Node to wait for) ready.
    assert states(caplog) == ["CLAIMING", "MAC_BOOTSTRAP", "NODE_READY"]
    assert machine["node_registered"] is False
    root = sim.box_root(box)
    calls = sim.calls(box)
    assert not [c for c in calls if c.split()[0] in ("apt-get", "systemctl", "dpkg", "modprobe")]
    assert not (root / "etc/systemd/system/kubelet.service").exists()
    # The node agent, as pinned, under launchd; its plist names the Node's identity.
    agent = root / "usr/local/libexec/tuist/tart-kubelet"
    assert agent.read_bytes() == (ARTIFACTS_DIR / NODE_AGENT).read_bytes()
    plist = (root / "Library/LaunchDaemons/dev.tuist.node-agent.plist").read_text()
    node = claim["node_name"]
    assert f"<string>--node-name={node}</string>" in plist
    assert f"<string>--provider-id=applesilicon://fr-par-3/{server}</string>" in plist
    assert "<string>--register-node=false</string>" in plist
    assert "launchctl bootstrap system /Library/LaunchDaemons/dev.tuist.node-agent.plist" in calls
    assert "launchctl bootstrap system /Library/LaunchDaemons/dev.tuist.sshguard.plist" in calls
    # Is it loaded, then the two looks at it, agent_settle apart.
    assert calls.count("launchctl print system/dev.tuist.node-agent") == 3
    loaded = (root / "var/lib/sim/launchd/loaded").read_text()
    assert "dev.tuist.node-agent /Library/LaunchDaemons/dev.tuist.node-agent.plist" in loaded
    # pf is on and the sshguard anchor holds its rules, on the fleet's SSH port, with static self.
    assert (root / "var/lib/sim/pf/enabled").exists()
    rules = (root / "var/lib/sim/pf/anchors/com.apple%tuist.sshguard.rules").read_text()
    assert f"block drop in quick proto tcp from <sshguard> to self port {claim['ssh_port']}" in rules
    assert "(self)" not in rules
    for name in ("HostName", "LocalHostName", "ComputerName"):
        assert (root / f"var/lib/sim/scutil/{name}").read_text() == f"{node}\n"

    # The same agent from another URL reruns the bootstrap, which converges: nothing booted out or
    # loaded again, the guard re-armed in place.
    before = len(calls)
    moved = {**agent_pin(sim), "url": agent_pin(sim)["url"] + "?mirror=1"}
    sim.machines().update(f"applesilicon:{MAC_DEV_1}", machine, {**machine, "node_agent": moved})
    again = sim.calls(box)[before:]
    assert any(c.startswith("launchctl print system/dev.tuist.node-agent") for c in again)
    assert not [c for c in again if c.startswith(("launchctl bootout", "launchctl bootstrap"))]

    released_since = sim.last_audit_id()
    sim.destroy(claim, machine)
    assert claims_in_state(sim.state())[MAC_DEV_1] == "tuist-macos-dev-1"
    path = f"/scaleway/apple-silicon/v1alpha1/zones/fr-par-3/servers/{server}"
    assert writes(sim, released_since) == [
        ("PATCH", path),  # releasing
        ("POST", "/scaleway/iam/v1alpha1/ssh-keys"),
        ("POST", f"{path}/reinstall"),
        ("PATCH", path),  # claim cleared
    ]
    # The reinstall wiped the bootstrap: a fresh macOS, as Scaleway hands it back.
    assert not (sim.box_root(box) / "Library/LaunchDaemons/dev.tuist.node-agent.plist").exists()
    assert not [w for w in writes(sim, since) if w[0] == "DELETE"]
    assert decoy_writes(sim, since) == []


def test_a_mac_whose_agent_does_not_match_its_pin_is_not_bootstrapped(sim: Sim) -> None:
    claim = sim.claims().create(claim_props("runners-macos", 0)).outs
    assert claim is not None
    bad = {**agent_pin(sim), "sha256": "0" * 64}
    with pytest.raises(MachineStepError) as caught:
        sim.machines().create(machine_props("runners-macos", 0, claim, node_agent=bad))
    assert f"has sha256 {sha256_of(NODE_AGENT)}, not the pinned {'0' * 64}" in str(caught.value)
    root = sim.box_root("mac-a5000000-0000-4000-8000-000000000001")
    assert not (root / "usr/local/libexec/tuist/tart-kubelet").exists()
    assert not (root / "Library/LaunchDaemons/dev.tuist.node-agent.plist").exists()
    # The claim stays, for destroy to release.
    sim.destroy(claim, None)


@pytest.mark.parametrize(
    ("crash_loop", "second_look", "why"),
    [
        # Respawned before each look: the second finds another life.
        (
            "",
            ("running", 2, 1, "1"),
            "restarted in the 0.1 s between two looks: pid {pid} then pid {pid_1}, runs 1 then 2",
        ),
        # Down between lives: the second finds it waiting for launchd to respawn it.
        (
            " running,spawn scheduled",
            ("spawn scheduled", 1, None, "1"),
            "is not running at the second look, 0.1 s after the first (state = spawn scheduled)",
        ),
    ],
    ids=["respawned", "down-between-lives"],
)
def test_a_mac_whose_node_agent_crash_loops_is_not_bootstrapped(
    sim: Sim, crash_loop: str, second_look: tuple[str, int, int | None, str], why: str
) -> None:
    """The agent is running at the first look; the second, agent_settle later, sees the crash loop, and
    the bootstrap fails saying how, after the job as launchd printed it."""
    label = "dev.tuist.node-agent"
    root = sim.box_root("mac-a5000000-0000-4000-8000-000000000001")
    launchd = root / "var/lib/sim/launchd"
    launchd.mkdir(parents=True, exist_ok=True)
    (launchd / "crash-looping").write_text(f"{label}{crash_loop}\n")
    claim = sim.claims().create(claim_props("runners-macos", 0)).outs
    assert claim is not None
    with pytest.raises(MachineStepError) as caught:
        sim.machines().create(machine_props("runners-macos", 0, claim, node_agent=agent_pin(sim)))
    pid = sim_pid(label)
    message = str(caught.value)
    # The job as the second look found it (the agent's log tail: none here), then why.
    state, runs, pid_offset, last_exit = second_look
    dump = launchd_dump(state, runs, None if pid_offset is None else pid + pid_offset, last_exit)
    assert message.endswith(
        f"\n{dump}macos-bootstrap: launchd job {label} {why.format(pid=pid, pid_1=pid + 1)}\n"
    )
    assert (launchd / "looks" / label).read_text() == "2\n"
    # The claim stays, for destroy to release.
    sim.destroy(claim, None)
