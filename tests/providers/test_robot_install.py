"""Robot install on adopt: the pure pieces, and the whole state machine against vendorsim's Robot API
and real SSH boxes.

vendorsim stands in for Robot's rescue system (reset with rescue armed boots a fresh root box with
the fleet key and a new host key) but not for two things a real box does, which this test supplies
at the exact state where they happen, through the provider's own progress log:
- the rescue system's disks (`lsblk`): at WAIT_RESCUE_SSH the test drops an lsblk that lists an
  AX42-U's two NVMe disks and a USB stick into the rescue box;
- booting the installed OS after REBOOT: at WAIT_NEW_HOST_KEY the test reinstalls the sandbox box
  (fresh disk, new host key, root with the fleet key) with what robot-postinstall.sh leaves
  (containerd config, /etc/tuist/node-labels), as installimage would have.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.providers.test_machine_support import PROJECT, STACK, Sim, claims_in_state, machine_props, running_sim

from providers.claims import claim_token
from providers.robot_install import (
    LSBLK_COMMAND,
    RobotInstallError,
    disks_from_lsblk,
    installimage_script,
)
from vendorsim.boxes import BoxFarm

AX42_LSBLK = {
    "blockdevices": [
        {"name": "nvme0n1", "size": 512110190592, "type": "disk"},
        {"name": "nvme1n1", "size": 512110190592, "type": "disk"},
        {"name": "sda", "size": 16008609792, "type": "disk"},
        {"name": "loop0", "size": 3263422464, "type": "loop"},
    ]
}

# What robot-postinstall.sh leaves on the installed OS that the join reads.
POSTINSTALL_LEAVES = {
    "etc/containerd/config.toml": "version = 3\n",
    "etc/systemd/system/containerd.service": "[Service]\nExecStart=/usr/local/bin/containerd\n",
    "etc/tuist/node-labels": "katacontainers.io/kata-runtime=true\n",
}


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


@pytest.fixture(scope="module")
def sim_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    yield from running_sim(tmp_path_factory.mktemp("robot-sim"))


@pytest.fixture
def sim(sim_process: Sim) -> Sim:
    sim_process.admin("POST", "reset")
    return sim_process


class Hardware(logging.Handler):
    """Plays the parts of a real Robot box vendorsim does not (see the module docstring)."""

    def __init__(self, sim: Sim) -> None:
        super().__init__()
        self.sim = sim
        self.farm = BoxFarm(sim.state_dir / "boxes")
        self.rescue_calls: dict[str, list[str]] = {}
        self.rescue_configs: dict[str, str] = {}
        self.states: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        match = re.match(r"^\S+: (\w+) on robot (?:box (\d+)|fleet \S+) \(budget", record.getMessage())
        if not match:
            return
        state, number = match.groups()
        self.states.append(state)
        if number is None:
            return
        root = self.sim.box_root(f"robot-{number}")
        if state == "WAIT_RESCUE_SSH":
            lsblk = root / "usr/local/sbin/lsblk"
            lsblk.parent.mkdir(parents=True, exist_ok=True)
            lsblk.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(AX42_LSBLK)}\nEOF\n")
            lsblk.chmod(0o755)
        elif state == "WAIT_NEW_HOST_KEY":
            self.rescue_calls[number] = self.sim.calls(f"robot-{number}")
            self.rescue_configs[number] = (root / "root/tuist-installimage.conf").read_text()
            self.farm.reinstall(
                f"robot-{number}", user="root", authorized_key=self.sim.key.public, sudo_password=None
            )
            for rel, text in POSTINSTALL_LEAVES.items():
                path = root / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)


@pytest.fixture
def hardware(sim: Sim) -> Iterator[Hardware]:
    handler = Hardware(sim)
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


def test_robot_box_is_installed_on_adopt_then_joined_and_reinstalled_on_release(
    sim: Sim, hardware: Hardware
) -> None:
    provider = sim.provider()
    props = machine_props("runners-linux", 0)
    token = claim_token(PROJECT, STACK, "runners-linux-0")
    since = sim.last_audit_id()
    before = sim.box("robot-2345601")["host_key_fingerprint"]

    outs = provider.create(props).outs

    assert outs is not None
    assert hardware.states == [
        "CLAIMING",
        "RESCUE_BOOT",
        "RESET",
        "WAIT_RESCUE_SSH",
        "INSTALLIMAGE",
        "REBOOT",
        "WAIT_NEW_HOST_KEY",
        "JOINING",
    ]
    assert (outs["box_id"], outs["provider_id"], outs["public_ipv4"]) == (
        "2345601",
        "hrobot://2345601",
        "203.0.113.51",
    )
    installed_key = BoxFarm(sim.state_dir / "boxes").info("robot-2345601").host_key_fingerprint
    assert outs["host_key_fingerprint"] == installed_key != before
    fingerprint = next(k["fingerprint"] for k in sim.state()["robot"]["keys"])
    assert robot_writes(sim, since) == [
        ("POST", "/robot/server/2345601", {"server_name": f"tuist-bm-dev-1~c-{token}"}),
        ("POST", "/robot/key", {"name": robot_key_name(sim), "data": sim.key.public.rsplit(" ", 1)[0]}),
        ("POST", "/robot/boot/2345601/rescue", {"os": "linux", "authorized_key": fingerprint}),
        ("POST", "/robot/reset/2345601", {"type": "hw"}),
        ("POST", "/robot/reset/2345601", {"type": "hw"}),
    ]
    # installimage ran in the rescue system with the RAID 1 config on the NVMe pair.
    assert (
        "installimage -a -c /root/tuist-installimage.conf -x /root/tuist-postinstall.sh"
        in (hardware.rescue_calls["2345601"])
    )
    config = hardware.rescue_configs["2345601"]
    assert "DRIVE1 /dev/nvme0n1\nDRIVE2 /dev/nvme1n1\nSWRAID 1\nSWRAIDLEVEL 1\n" in config
    assert "HOSTNAME runners-linux-2345601\n" in config
    assert "PART /boot/efi esp 256M\nPART /boot ext4 1024M\nPART / ext4 all\n" in config
    # The join: Kata labels and the bare-metal taint, containerd left as the post-install baked it.
    unit = (sim.box_root("robot-2345601") / "etc/systemd/system/kubelet.service").read_text()
    assert (
        "--node-labels=katacontainers.io/kata-runtime=true,node.cluster.x-k8s.io/pool=runners-linux,"
        "tuist.dev/fleet=runners-linux,tuist.dev/kata-runtime=true" in unit
    )
    assert "--register-with-taints=tuist.dev/runner-tier=bare-metal:NoSchedule" in unit
    assert "--provider-id=hrobot://2345601" in unit
    assert (sim.box_root("robot-2345601") / "etc/containerd/config.toml").read_text() == "version = 3\n"

    hardware.states.clear()
    since = sim.last_audit_id()
    provider.delete("robot:2345601", outs)

    assert hardware.states == [
        "RELEASE_MARKING",
        "RESCUE_BOOT",
        "RESET",
        "WAIT_RESCUE_SSH",
        "INSTALLIMAGE",
        "REBOOT",
        "WAIT_NEW_HOST_KEY",
        "RELEASE_CLEARING",
    ]
    writes = robot_writes(sim, since)
    assert writes[0] == ("POST", "/robot/server/2345601", {"server_name": f"tuist-bm-dev-1~r-{token}"})
    assert writes[-1] == ("POST", "/robot/server/2345601", {"server_name": "tuist-bm-dev-1"})
    assert [w[1] for w in writes[1:-1]] == [
        "/robot/boot/2345601/rescue",
        "/robot/reset/2345601",
        "/robot/reset/2345601",
    ]
    assert claims_in_state(sim.state())["2345601"] == "tuist-bm-dev-1"


def robot_key_name(sim: Sim) -> str:
    from providers.machine import fleet_key_name

    return fleet_key_name(sim.key.public.rsplit(" ", 1)[0])


def test_lsblk_is_the_command_the_rescue_system_runs() -> None:
    assert LSBLK_COMMAND == "lsblk --json --bytes --nodeps --output NAME,SIZE,TYPE\n"


def test_rescue_without_disks_fails_in_installimage_naming_the_box(sim: Sim, tmp_path: Path) -> None:
    provider = sim.provider()
    with pytest.raises(Exception) as caught:
        provider.create(machine_props("runners-linux", 0))
    message = str(caught.value)
    assert message.startswith("runners-linux-0: INSTALLIMAGE failed on robot box 2345601 after ")
    assert "RemoteCommandError: lsblk on root@127.0.0.1:" in message
    assert "failed with exit status 1; last output:\nlsblk: failed to access sysfs directory" in message
