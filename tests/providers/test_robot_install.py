"""Robot install on adopt: the pure pieces, and the whole state machine against vendorsim's Robot API
and real SSH boxes.

Nothing here plays the hardware: vendorsim's rescue system lists the box's disks from its inventory
(lsblk), its installimage lays the OS down on the box's disk and runs the post-install script in it,
which downloads vendorsim's /artifacts pinned the way Pulumi.dev.yaml pins them, and the reset out of
rescue boots that OS with a new host key. The test only watches the provider's progress log.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

import tests.providers.test_machine_support as support
from providers.claims import claim_token
from providers.constants import fleet_key_name
from providers.machine.errors import MachineInputError, MachineStepError
from providers.machine.record import ProcessClaimRecord
from providers.machine.robot_install import (
    INSTALL_STATES,
    LSBLK_COMMAND,
    RobotInstallError,
    disks_from_lsblk,
    installimage_script,
)
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
from vendorsim import artifacts

AX42_LSBLK = {
    "blockdevices": [
        {"name": "nvme0n1", "size": 512110190592, "type": "disk"},
        {"name": "nvme1n1", "size": 512110190592, "type": "disk"},
        {"name": "sda", "size": 16008609792, "type": "disk"},
        {"name": "loop0", "size": 3263422464, "type": "loop"},
    ]
}
# Where Pulumi.dev.yaml points its artifact URLs: vendorsim's default port.
DEV_SIM_URL = "http://127.0.0.1:8710"


# --- pure ---------------------------------------------------------------------------------------------


def test_disks_from_lsblk_keeps_whole_disks_only() -> None:
    assert disks_from_lsblk("+ lsblk\n" + json.dumps(AX42_LSBLK)) == {
        "/dev/nvme0n1": 512110190592,
        "/dev/nvme1n1": 512110190592,
        "/dev/sda": 16008609792,
    }


def test_disks_from_lsblk_failures_say_what_was_printed() -> None:
    with pytest.raises(RobotInstallError, match=r"^lsblk printed no JSON: 'lsblk: failed to access sysfs'$"):
        disks_from_lsblk("lsblk: failed to access sysfs")
    with pytest.raises(RobotInstallError, match=r"^lsblk lists no disks in the rescue system$"):
        disks_from_lsblk(json.dumps({"blockdevices": [{"name": "loop0", "size": 1, "type": "loop"}]}))


def test_installimage_script_carries_its_inputs_base64_in_a_header() -> None:
    script = installimage_script("DRIVE1 /dev/nvme0n1\n", "#!/bin/bash\necho 'hi'\n")
    header = dict(re.findall(r"^(\w+_B64)='([A-Za-z0-9+/=]+)'$", script, re.MULTILINE))
    assert base64.b64decode(header["INSTALLIMAGE_CONFIG_B64"]).decode() == "DRIVE1 /dev/nvme0n1\n"
    assert base64.b64decode(header["POSTINSTALL_B64"]).decode() == "#!/bin/bash\necho 'hi'\n"
    assert script.rstrip().endswith("sync")


# --- the state machine against vendorsim -------------------------------------------------------------


def dev_fleets(sim_url: str) -> list[dict[str, Any]]:
    """The dev stack's fleets as Pulumi.dev.yaml has them, the artifact URLs moved to this sim's port."""
    doc = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
    fleets: list[dict[str, Any]] = doc["config"][f"{PROJECT}:fleets"]
    for fleet in fleets:
        pins = fleet.get("install_artifacts") or {}
        for key, value in pins.items():
            if key.endswith("_url"):
                assert value.startswith(f"{DEV_SIM_URL}/artifacts/"), (key, value)
                pins[key] = sim_url + value.removeprefix(DEV_SIM_URL)
    return fleets


def pinned(sim: Sim) -> dict[str, Any]:
    """The Robot slot's claim inputs with the dev stack's pins (components/fleet.py passes them)."""
    return {"install_artifacts": sim.pins()}


@pytest.fixture(scope="module")
def sim_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    yield from running_sim(tmp_path_factory.mktemp("robot-sim"))


@pytest.fixture
def sim(sim_process: Sim) -> Sim:
    return sim_process.reset()


class Watcher(logging.Handler):
    """Reads along with the provider's progress log; it changes nothing on the boxes. When REBOOT
    starts, the rescue system is still up: it keeps what the rescue system logged then."""

    def __init__(self, sim: Sim) -> None:
        super().__init__()
        self.sim = sim
        self.states: list[str] = []
        self.rescue_calls: dict[str, list[str]] = {}
        self.on_state: dict[str, Callable[[], None]] = {}  # run as the state starts (e.g. inject a fault)

    def emit(self, record: logging.LogRecord) -> None:
        match = re.match(r"^\S+: (\w+) on robot (?:box (\d+)|fleet \S+) \(budget", record.getMessage())
        if not match:
            return
        state, number = match.groups()
        self.states.append(state)
        if state in self.on_state:
            self.on_state.pop(state)()
        if state == "REBOOT":
            log = self.sim.state_dir / "boxes" / f"robot-{number}" / "rescue/root/var/log/sim-calls.log"
            self.rescue_calls[number] = log.read_text().splitlines()


@pytest.fixture
def watcher(sim: Sim) -> Iterator[Watcher]:
    handler = Watcher(sim)
    logger = logging.getLogger("providers.machine")
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def robot_writes(sim: Sim, since: int) -> list[tuple[str, str, Any]]:
    return [(e["method"], e["path"], e["body"]) for e in sim.audit(since) if e["vendor"] == "robot"]


def test_the_dev_pins_are_the_sums_of_the_artifacts_vendorsim_serves(sim: Sim) -> None:
    (robot_fleet,) = [f for f in dev_fleets(sim.url) if f["vendor"] == "robot"]
    pins = robot_fleet["install_artifacts"]
    assert pins == {
        "runc_url": f"{sim.url}/artifacts/{artifacts.RUNC}",
        "runc_sha256": artifacts.sha256_of(artifacts.RUNC),
        "containerd_url": f"{sim.url}/artifacts/{artifacts.CONTAINERD}",
        "containerd_sha256": artifacts.sha256_of(artifacts.CONTAINERD),
        "kata_static_url": f"{sim.url}/artifacts/{artifacts.KATA_STATIC}",
        "kata_static_sha256": artifacts.sha256_of(artifacts.KATA_STATIC),
    }


def test_robot_box_is_installed_on_adopt_then_joined_and_reinstalled_on_release(
    sim: Sim, watcher: Watcher
) -> None:
    token = claim_token(PROJECT, STACK, "runners-linux-0")
    since = sim.last_audit_id()
    before = sim.box("robot-2345601")["host_key_fingerprint"]
    root = sim.box_root("robot-2345601")

    claim, outs = sim.adopt("runners-linux", 0, claim=pinned(sim))

    assert watcher.states == ["CLAIMING", *INSTALL_STATES, "JOINING", "NODE_READY"]
    # The rescue session was pinned to the host key Robot announced when the rescue boot was armed
    # (vendorsim boots the rescue system with exactly that key), not to the first key that answered.
    facts = ProcessClaimRecord().get("robot", "2345601").facts  # type: ignore[union-attr]
    assert facts["rescue_host_keys_announced"].startswith("SHA256:")
    assert (
        facts["rescue_host_key"]
        == facts["rescue_host_keys_announced"]
        not in (before, outs["host_key_fingerprint"])
    )
    assert (outs["box_id"], outs["provider_id"], outs["public_ipv4"]) == (
        "2345601",
        "hrobot://2345601",
        sim.ip(51),
    )
    # The box booted the OS installimage laid down: a host key neither the old OS's nor the rescue's.
    box = sim.box("robot-2345601")
    assert (box["state"], box["user"]) == ("installed", "root")
    assert outs["host_key_fingerprint"] == box["host_key_fingerprint"] != before
    fingerprint = next(k["fingerprint"] for k in sim.state()["robot"]["keys"])
    fleet_key = sim.key.public.rsplit(" ", 1)[0]
    assert robot_writes(sim, since) == [
        ("POST", "/robot/server/2345601", {"server_name": f"tuist-bm-dev-1--c-{token}"}),
        ("POST", "/robot/key", {"name": fleet_key_name(fleet_key), "data": fleet_key}),
        ("POST", "/robot/boot/2345601/rescue", {"os": "linux", "authorized_key": fingerprint}),
        ("POST", "/robot/reset/2345601", {"type": "hw"}),
        ("POST", "/robot/reset/2345601", {"type": "hw"}),
    ]
    # In the rescue system: lsblk, then installimage with the rendered config and post-install script.
    rescue = watcher.rescue_calls["2345601"]
    # (The calls log quotes each argument as bash's printf %q does.)
    assert rescue[0] == r"lsblk --json --bytes --nodeps --output NAME\,SIZE\,TYPE"
    assert "installimage -a -c /root/tuist-installimage.conf -x /root/tuist-postinstall.sh" in rescue
    # On the disk: installimage's config (RAID 1 on the AX42-U's NVMe pair), hostname, fstab on the md
    # arrays, and root's keys copied from the rescue system.
    config = (root / "installimage.conf").read_text()
    assert "DRIVE1 /dev/nvme0n1\nDRIVE2 /dev/nvme1n1\nSWRAID 1\nSWRAIDLEVEL 1\n" in config
    assert "HOSTNAME runners-linux-2345601\n" in config
    assert "PART /boot/efi esp 256M\nPART /boot ext4 1024M\nPART / ext4 all\n" in config
    assert (root / "etc/hostname").read_text() == "runners-linux-2345601\n"
    assert (root / "etc/fstab").read_text() == (
        "proc /proc proc defaults 0 0\n"
        "UUID=SIM-ESP1 /boot/efi vfat umask=0077 0 1\n"
        "/dev/md0 /boot ext4 defaults 0 2\n"
        "/dev/md1 / ext4 defaults 0 1\n"
    )
    assert (root / "root/.ssh/authorized_keys").read_text() == fleet_key + "\n"
    # The post-install ran chrooted in the new OS: it fetched the pinned artifacts from vendorsim.
    calls = sim.calls("robot-2345601")
    fetched = [c.split()[-1] for c in calls if c.startswith("curl ")]
    linux = (artifacts.RUNC, artifacts.CONTAINERD, artifacts.KATA_STATIC)
    assert fetched[:3] == [f"{sim.url}/artifacts/{name}" for name in linux]
    assert (root / "usr/local/sbin/runc").read_bytes() == artifacts.artifact(artifacts.RUNC)
    assert (root / "opt/kata/bin/containerd-shim-kata-v2").exists()
    assert (root / "etc/tuist/node-labels").read_text() == "katacontainers.io/kata-runtime=true\n"
    containerd_config = (root / "etc/containerd/config.toml").read_text()
    assert containerd_config.startswith("version = 3\n") and "kata-qemu" in containerd_config
    # The join: Kata labels and the bare-metal taint, containerd left as the post-install baked it.
    unit = (root / "etc/systemd/system/kubelet.service").read_text()
    assert (
        "--node-labels=katacontainers.io/kata-runtime=true,node.cluster.x-k8s.io/pool=runners-linux,"
        "tuist.dev/fleet=runners-linux,tuist.dev/kata-runtime=true" in unit
    )
    assert "--register-with-taints=tuist.dev/runner-tier=bare-metal:NoSchedule" in unit
    assert "--provider-id=hrobot://2345601" in unit
    assert (root / "etc/containerd/config.toml").read_text() == containerd_config

    # A create of the same slot whose record says READY (its answer was lost, or a refresh found the
    # Node gone): the box is joined again under its pinned key, never reinstalled under its workloads.
    since = sim.last_audit_id()
    watcher.states.clear()
    again = sim.machines().create(machine_props("runners-linux", 0, claim)).outs
    assert watcher.states == ["JOINING", "NODE_READY"]
    assert robot_writes(sim, since) == []
    assert again is not None and again["host_key_fingerprint"] == outs["host_key_fingerprint"]

    # A release reinstalls too: without the Kata pin it is refused before anything is written.
    since = sim.last_audit_id()
    sim.machines().delete("robot:2345601", outs)  # no cluster to leave: nothing happens
    unpinned = {**claim, "install_artifacts": {**claim["install_artifacts"], "kata_static_sha256": None}}
    with pytest.raises(MachineInputError) as refused:
        sim.claims().delete("robot:2345601", unpinned)
    assert str(refused.value) == unpinned_message()
    assert sim.audit(since) == []

    watcher.states.clear()
    sim.claims().delete(resource_id(claim), claim)

    assert watcher.states == ["RELEASE_MARKING", *INSTALL_STATES, "RELEASE_CLEARING"]
    writes = robot_writes(sim, since)
    assert writes[0] == ("POST", "/robot/server/2345601", {"server_name": f"tuist-bm-dev-1--r-{token}"})
    assert writes[-1] == ("POST", "/robot/server/2345601", {"server_name": "tuist-bm-dev-1"})
    # The fleet key is registered at /key already: no second POST.
    assert [w[1] for w in writes[1:-1]] == [
        "/robot/boot/2345601/rescue",
        "/robot/reset/2345601",
        "/robot/reset/2345601",
    ]
    assert claims_in_state(sim.state())["2345601"] == "tuist-bm-dev-1"
    # Back in the pool on a fresh install: another new host key, and the joined node's files are gone.
    released = sim.box("robot-2345601")
    assert released["state"] == "installed"
    assert released["host_key_fingerprint"] not in (before, outs["host_key_fingerprint"])
    assert not (root / "etc/systemd/system/kubelet.service").exists()
    assert (root / "etc/hostname").read_text() == "runners-linux-2345601\n"
    assert (root / "opt/kata/bin/containerd-shim-kata-v2").exists()


def unpinned_message(kata: str = "kata-static-3.30.0-amd64.tar.zst") -> str:
    return (
        "runners-linux-0: refusing to install a robot box: "
        f"{PROJECT}:fleets[name=runners-linux].install_artifacts.kata_static_sha256: required: "
        f"pin the sha256 of {kata} before a Robot box can be installed"
    )


@pytest.mark.parametrize("pins", ["defaults (Kata unpinned)", "none"])
def test_an_unpinned_kata_is_refused_before_any_vendor_write(sim: Sim, watcher: Watcher, pins: str) -> None:
    from config.models import InstallArtifacts

    artifacts = InstallArtifacts().model_dump() if pins.startswith("defaults") else None
    since = sim.last_audit_id()
    before = sim.box("robot-2345601")

    with pytest.raises(MachineInputError) as caught:
        sim.claims().create(claim_props("runners-linux", 0, install_artifacts=artifacts))

    assert str(caught.value) == unpinned_message() if artifacts else unpinned_message("kata-static")
    assert watcher.states == []
    assert sim.audit(since) == []
    assert claims_in_state(sim.state())["2345601"] == "tuist-bm-dev-1"
    assert sim.box("robot-2345601") == before


def test_lsblk_is_the_command_the_rescue_system_runs() -> None:
    assert LSBLK_COMMAND == "lsblk --json --bytes --nodeps --output NAME,SIZE,TYPE\n"


@pytest.fixture(scope="module")
def unpaired_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    """A vendorsim whose first dev Robot box has no two disks of one size (an NVMe and a USB stick)."""
    tmp = tmp_path_factory.mktemp("robot-unpaired")
    doc = yaml.safe_load(support.DEV_INVENTORY.read_text())
    first = next(s for s in doc["robot"]["servers"] if s["number"] == 2345601)
    first["disks"] = [{"name": "nvme0n1", "size": 512110190592}, {"name": "sda", "size": 16008609792}]
    inventory = tmp / "inventory.unpaired.yaml"
    inventory.write_text(yaml.safe_dump(doc))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(support, "DEV_INVENTORY", inventory)
        sim = support.start_sim(tmp)
    try:
        yield sim
    finally:
        sim.stop()


def test_rescue_without_a_disk_pair_fails_in_installimage_naming_the_box(unpaired_sim: Sim) -> None:
    sim = unpaired_sim
    before = sim.box("robot-2345601")["host_key_fingerprint"]
    since = sim.last_audit_id()

    with pytest.raises(MachineStepError) as caught:
        sim.adopt("runners-linux", 0, claim=pinned(sim))

    message = str(caught.value)
    assert re.fullmatch(
        r"runners-linux-0: INSTALLIMAGE failed on robot box 2345601 after \d+\.\ds "
        r"\(attempt 1, InstallInput, failure 1\): no two disks of the same size to mirror among "
        r"\['/dev/nvme0n1', '/dev/sda'\]: RAID 1 needs a pair",
        message,
    ), message
    # Stopped before installimage: the box sits in its rescue system, the disk's old OS untouched.
    paths = [e["path"] for e in sim.audit(since) if e["vendor"] == "robot"]
    assert paths == [
        "/robot/server/2345601",
        "/robot/key",
        "/robot/boot/2345601/rescue",
        "/robot/reset/2345601",
    ]
    box = sim.box("robot-2345601")
    assert box["state"] == "rescue" and box["host_key_fingerprint"] != before
    assert not (sim.box_root("robot-2345601") / "installimage.conf").exists()


# --- a create that fails in a state leaves a claim that destroy releases ---------------------------

FAULTS = {
    # state: the Robot route refused (HTTP 400, not worth retrying) from the moment the state starts
    "RESCUE_BOOT": "/robot/boot/*/rescue",
    "RESET": "/robot/reset/*",
    "REBOOT": "/robot/reset/*",
}


@pytest.mark.parametrize("state", list(FAULTS))
def test_a_create_failed_in_any_install_state_is_released_by_destroy(
    sim: Sim, watcher: Watcher, state: str
) -> None:
    """Issue 12 point 8, Robot: the machine's create fails in `state`; the claim is in state, so
    `pulumi destroy` (the claim's delete only: the machine never got into state) reinstalls the box
    and hands it back to the pool."""
    fault = {"vendor": "robot", "route": FAULTS[state], "method": "POST", "error_rate": 1, "status": 400}
    watcher.on_state[state] = lambda: sim.faults(fault)
    claim = sim.claims().create(claim_props("runners-linux", 0, **pinned(sim))).outs
    assert claim is not None
    try:
        with pytest.raises(MachineStepError) as caught:
            sim.machines().create(machine_props("runners-linux", 0, claim))
    finally:
        sim.clear_faults()
    assert caught.value.state == state, str(caught.value)
    progress = ProcessClaimRecord().get("robot", "2345601")
    assert progress is not None and (progress.phase, progress.state) == ("Adopting", state)
    assert progress.error_count >= 1 and progress.error_type

    sim.destroy(claim, None)

    assert claims_in_state(sim.state())["2345601"] == "tuist-bm-dev-1"
    box = sim.box("robot-2345601")
    assert box["state"] == "installed"
    assert ProcessClaimRecord().get("robot", "2345601") is None
