"""ClaimProvider and MachineProvider on Scaleway Elastic Metal and Apple silicon, against a vendorsim
subprocess: the SDK's real HTTP to the simulated APIs, real OpenSSH boxes (a Linux one for Elastic
Metal, a Mac one answering as macOS for Apple silicon). Adopt, move an Elastic Metal box from one
Private Network to another and off it, then release by reinstall, with the audit showing the exact
writes: never a server delete (only an attachment's), never a decoy."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import yaml

from providers.claims import claim_token
from providers.machine.errors import MachineStepError
from providers.machine.record import ProcessClaimRecord
from tests.providers import test_machine_support as support
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


# A second Private Network in the dev fleet's region, for the move: the dev inventory has one per region.
OTHER_NETWORK = "9e700000-0000-4000-8000-000000000003"


@pytest.fixture(scope="module")
def sim_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    tmp = tmp_path_factory.mktemp("scaleway-machine-sim")
    doc = yaml.safe_load(support.DEV_INVENTORY.read_text())
    doc["scaleway_em"]["private_networks"].append(
        {"id": OTHER_NETWORK, "name": "tuist-scw-fr-par-kura", "region": "fr-par"}
    )
    inventory = tmp / "inventory.dev.yaml"
    inventory.write_text(yaml.safe_dump(doc))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(support, "DEV_INVENTORY", inventory)  # start_sim reads it once, at start
        sims = running_sim(tmp)
        sim = next(sims)
    yield sim
    sims.close()  # stops it


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


def attachments(sim: Sim, server: str) -> list[tuple[str, str, int]]:
    """The server's Private Network attachments at the simulated Scaleway: (network, status, VLAN)."""
    return [
        (a["private_network_id"], a["status"], a["vlan"])
        for a in sim.state()["scaleway_em"]["private_networks"]
        if a["server_id"] == server
    ]


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
    caplog.clear()
    sim.destroy(claim, machine)
    assert claims_in_state(sim.state())[EM_DEV_1] == "tuist-kura-scw-dev"
    assert writes(sim, released_since) == [
        ("PATCH", path),  # releasing
        ("DELETE", f"{path}/private-networks/{PRIVATE_NETWORK}"),  # off the fleet's network
        ("POST", "/scaleway/iam/v1alpha1/ssh-keys"),  # the fleet key, for the install
        ("POST", f"{path}/install"),
        ("PATCH", path),  # claim cleared
    ]
    assert states(caplog) == [
        "RELEASE_MARKING",
        "RELEASE_PN_DETACHING",
        "RELEASE_REINSTALL",
        "RELEASE_WAIT_INSTALL",
        "RELEASE_CLEARING",
    ]
    # Back in the pool on no network: Scaleway keeps an attachment through a reinstall.
    assert attachments(sim, server) == []
    assert ("DELETE", path) not in writes(sim, since)  # the server itself: never
    assert decoy_writes(sim, since) == []
    assert ProcessClaimRecord().get("scaleway_em", EM_DEV_1) is None


PN_FILE = "/etc/netplan/60-tuist-private-network.yaml"


def pn_script_as_root(calls: list[str]) -> list[str]:
    """The commands pn-vlan.sh ran through sudo: the box's calls up to the self-join's own first
    `sudo -n true`, mktemp's random names as <tmp>."""
    end = calls.index("sudo -n true", 1)
    return [re.sub(r"/tmp/tmp\.\w+", "<tmp>", c) for c in calls[:end] if c.startswith("sudo ")]


def test_an_elastic_metal_box_moved_to_another_network_then_to_none_leaves_each_one(
    sim: Sim, caplog: pytest.LogCaptureFixture
) -> None:
    """private_network A -> B -> none through the provider's update: the server is detached from the
    old network at Scaleway before anything else, and the box's pn0 is replaced (the new VLAN), then
    removed; vendorsim's netplan, as the real one, would keep the old pn0 on its own."""
    caplog.set_level(logging.INFO)
    claim, machine = sim.adopt("kura-scw", 0, machine={"private_network": PRIVATE_NETWORK})
    server = "e1000000-0000-4000-8000-000000000001"
    path = f"/scaleway/baremetal/v1/zones/fr-par-2/servers/{server}"
    box = f"em-{server}"
    root = sim.box_root(box)
    netplan = root / "etc/netplan/60-tuist-private-network.yaml"
    links = root / "var/lib/sim/ip/links"
    assert attachments(sim, server) == [(PRIVATE_NETWORK, "attached", 1000)]
    assert links.read_text() == "pn0 vlan 1000 enp1s0\n"

    # A -> B: A detached (its attachment gone), B attached with the server's next VLAN, pn0 made anew.
    since, calls = sim.last_audit_id(), len(sim.calls(box))
    caplog.clear()
    moved = (
        sim.machines()
        .update(f"scaleway_em:{EM_DEV_1}", machine, {**machine, "private_network": OTHER_NETWORK})
        .outs
    )
    assert moved is not None
    assert states(caplog) == ["PN_DETACHING", "PN_ATTACHING", "PN_VLAN", "JOINING", "NODE_READY"]
    assert writes(sim, since) == [
        ("DELETE", f"{path}/private-networks/{PRIVATE_NETWORK}"),
        ("POST", f"{path}/private-networks"),
    ]
    assert [e["body"] for e in sim.audit(since) if e["method"] == "POST"] == [
        {"private_network_id": OTHER_NETWORK}
    ]
    assert attachments(sim, server) == [(OTHER_NETWORK, "attached", 1001)]
    assert "    pn0:\n      id: 1001\n      link: enp1s0\n" in netplan.read_text()
    assert links.read_text() == "pn0 vlan 1001 enp1s0\n"
    # What the script ran as root: pn0, still VLAN 1000, deleted before netplan made it again.
    assert pn_script_as_root(sim.calls(box)[calls:]) == [
        "sudo -n true",
        f"sudo -n cmp -s <tmp> {PN_FILE}",
        "sudo -n mkdir -p /etc/netplan",
        f"sudo -n install -m 0600 <tmp> {PN_FILE}",
        "sudo -n ip link delete pn0",
        "sudo -n netplan apply",
    ]
    assert moved["private_network"] == OTHER_NETWORK

    # B -> none: B detached, pn0 and its netplan file removed.
    since, calls = sim.last_audit_id(), len(sim.calls(box))
    caplog.clear()
    dropped = sim.machines().update(f"scaleway_em:{EM_DEV_1}", moved, {**moved, "private_network": None}).outs
    assert dropped is not None
    assert states(caplog) == ["PN_DETACHING", "PN_DOWN", "JOINING", "NODE_READY"]
    assert writes(sim, since) == [("DELETE", f"{path}/private-networks/{OTHER_NETWORK}")]
    assert attachments(sim, server) == []
    assert not netplan.exists()
    assert links.read_text() == ""
    assert pn_script_as_root(sim.calls(box)[calls:]) == [
        "sudo -n true",
        f"sudo -n test -e {PN_FILE}",
        f"sudo -n rm -f {PN_FILE}",
        "sudo -n ip link delete pn0",
        "sudo -n netplan apply",
    ]

    # Released with no network: nothing to detach, no DELETE at all.
    released_since = sim.last_audit_id()
    sim.destroy(claim, dropped)
    assert writes(sim, released_since) == [
        ("PATCH", path),
        ("POST", "/scaleway/iam/v1alpha1/ssh-keys"),
        ("POST", f"{path}/install"),
        ("PATCH", path),
    ]
    assert decoy_writes(sim, 0) == []


def test_an_elastic_metal_move_that_stopped_off_every_network_converges_once_reverted_and_refreshed(
    sim: Sim, caplog: pytest.LogCaptureFixture
) -> None:
    """private_network A -> B fails after the server left A (Scaleway refuses B's attachment), and the
    operator reverts the config to A. The engine kept the machine's outputs, which say A, so the
    reverted stack diffs as nothing to do while the server is on no network at all. `pulumi refresh`
    reads the server as Scaleway has it, and the next update attaches it to A again."""
    caplog.set_level(logging.INFO)
    claim, machine = sim.adopt("kura-scw", 0, machine={"private_network": PRIVATE_NETWORK})
    server = "e1000000-0000-4000-8000-000000000001"
    path = f"/scaleway/baremetal/v1/zones/fr-par-2/servers/{server}"
    urn = f"scaleway_em:{EM_DEV_1}"
    provider = sim.machines()
    sim.faults(
        {
            "vendor": "scaleway_em",
            "method": "POST",
            "route": f"{path}/private-networks",
            "error_rate": 1,
            "status": 403,
        }
    )
    with pytest.raises(MachineStepError, match="PN_ATTACHING"):
        provider.update(urn, machine, {**machine, "private_network": OTHER_NETWORK})
    sim.clear_faults()
    assert attachments(sim, server) == []  # A left, B never reached

    assert (
        provider.diff(urn, machine, machine).changes is False
    )  # reverted: nothing to do, as far as it knows
    caplog.clear()
    read = provider.read(urn, machine).outs
    assert read is not None and read["private_network"] is None
    assert (
        f"kura-scw-0: Elastic Metal server {EM_DEV_1} is on Private Network (none), not {PRIVATE_NETWORK}: "
        "`pulumi up` moves it"
    ) in caplog.text
    refreshed = {**machine, **read}
    diff = provider.diff(urn, refreshed, machine)
    assert (diff.changes, diff.replaces) == (True, [])

    since = sim.last_audit_id()
    caplog.clear()
    again = provider.update(urn, refreshed, machine).outs
    assert again is not None and again["private_network"] == PRIVATE_NETWORK
    assert states(caplog) == ["PN_ATTACHING", "PN_VLAN", "JOINING", "NODE_READY"]  # nothing to detach
    assert writes(sim, since) == [("POST", f"{path}/private-networks")]
    [(network, status, vlan)] = attachments(sim, server)
    assert (network, status) == (PRIVATE_NETWORK, "attached")
    assert (sim.box_root(f"em-{server}") / "var/lib/sim/ip/links").read_text() == f"pn0 vlan {vlan} enp1s0\n"
    # Refreshed again: as the stack says, without a word.
    caplog.clear()
    reread = provider.read(urn, again).outs
    assert reread is not None and (reread["private_network"], reread["state"]) == (PRIVATE_NETWORK, "ready")
    assert "is on Private Network" not in caplog.text
    sim.destroy(claim, again)
    assert decoy_writes(sim, 0) == []


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
