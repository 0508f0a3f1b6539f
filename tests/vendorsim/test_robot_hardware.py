"""A Robot box's hardware and install in the simulator, on real OpenSSH boxes: lsblk from the inventory's
disks, installimage's validation and install in the rescue system, and the reset that boots the disk,
driven through vendorsim's Robot API over real HTTP."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from werkzeug.serving import make_server

from providers.ssh.robot_install import render_installimage_config
from tests.vendorsim.conftest import DEV_INVENTORY, FakeClock
from tests.vendorsim.test_boxes import _free_port, _keypair, ssh
from vendorsim.app import App
from vendorsim.boxes import BoxFarm, Disk
from vendorsim.core import Sim
from vendorsim.inventory import PRODUCT_DISKS, InventoryError, RobotDisk, load_inventory

N = 2345601
BOX = f"robot-{N}"
GB512 = 512110190592
TB384 = 3840755982336
THREE_DISKS = [Disk("nvme0n1", GB512), Disk("nvme1n1", GB512), Disk("nvme2n1", TB384)]
VALID_CONFIG = render_installimage_config(drive1="/dev/nvme0n1", drive2="/dev/nvme1n1", hostname="runner-7")


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    directory = tmp_path_factory.mktemp("keys")
    return {"fleet": _keypair(directory, "fleet"), "rescue": _keypair(directory, "rescue")}


Keys = dict[str, tuple[Path, str]]
RescueBox = tuple[BoxFarm, int]


def run(
    port: int, key: Path, command: str, *, user: str = "root", stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return ssh(port, key, command, user=user, stdin=stdin)


# --- lsblk -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rescue_box(
    tmp_path_factory: pytest.TempPathFactory, keys: dict[str, tuple[Path, str]]
) -> Iterator[tuple[BoxFarm, int]]:
    """A box with dev-3's disks (an NVMe pair and a lone 3.84 TB one), an old OS marked, in rescue."""
    farm = BoxFarm(tmp_path_factory.mktemp("rescue-boxes"))
    info = farm.ensure(
        "r1",
        ssh_port=_free_port(),
        user="root",
        authorized_key=keys["fleet"][1],
        sudo_password=None,
        disks=THREE_DISKS,
    )
    assert run(info.ssh_port, keys["fleet"][0], "echo old > /root/old-os").returncode == 0
    farm.boot_rescue("r1", authorized_key=keys["rescue"][1])
    yield farm, info.ssh_port
    farm.stop_all()


def test_lsblk_lists_the_inventory_disks_as_json_in_bytes(rescue_box: RescueBox, keys: Keys) -> None:
    _, port = rescue_box
    out = run(port, keys["rescue"][0], "lsblk --json --bytes --nodeps --output NAME,SIZE,TYPE")
    assert (out.returncode, out.stderr) == (0, "")
    # lsblk 2.39's own layout, so parsers that only ever saw the real one read it.
    assert out.stdout == (
        "{\n"
        '   "blockdevices": [\n'
        f'      {{"name":"nvme0n1", "size":{GB512}, "type":"disk"}},\n'
        f'      {{"name":"nvme1n1", "size":{GB512}, "type":"disk"}},\n'
        f'      {{"name":"nvme2n1", "size":{TB384}, "type":"disk"}}\n'
        "   ]\n"
        "}\n"
    )
    assert [d["name"] for d in json.loads(out.stdout)["blockdevices"]] == ["nvme0n1", "nvme1n1", "nvme2n1"]


def test_lsblk_table_uses_binary_units_and_refuses_what_it_does_not_emulate(
    rescue_box: RescueBox, keys: Keys
) -> None:
    _, port = rescue_box
    out = run(port, keys["rescue"][0], "lsblk -d")
    assert (out.returncode, out.stdout) == (
        0,
        "NAME     SIZE    TYPE\nnvme0n1  476.9G  disk\nnvme1n1  476.9G  disk\nnvme2n1  3.5T    disk\n",
    )
    out = run(port, keys["rescue"][0], "lsblk -bdn -o NAME,SIZE")
    assert out.stdout == f"nvme0n1  {GB512}\nnvme1n1  {GB512}\nnvme2n1  {TB384}\n"
    out = run(port, keys["rescue"][0], "lsblk -o NAME,MOUNTPOINT")
    assert (out.returncode, out.stderr) == (
        1,
        "lsblk: the simulator emulates the NAME, SIZE and TYPE columns, not 'MOUNTPOINT'\n",
    )


def test_robot_boxes_get_their_products_disks_unless_the_inventory_lists_them(tmp_path: Path) -> None:
    calls: list[tuple[str, object]] = []

    class Farm:
        def ensure(self, box_key: str, **kw: object) -> None:
            calls.append((box_key, kw["disks"]))

    sim = Sim(load_inventory(DEV_INVENTORY), tmp_path, task_seconds=10, farm=Farm(), clock=FakeClock())  # type: ignore[arg-type]
    sim.start_boxes()
    disks = dict(calls)
    ax42 = [Disk("nvme0n1", GB512), Disk("nvme1n1", GB512)]
    assert [RobotDisk(name=d.name, size=d.size) for d in ax42] == list(PRODUCT_DISKS["AX42-U"])
    assert disks["robot-2345601"] == ax42
    assert disks["robot-2345602"] == ax42
    assert disks["robot-2345603"] == THREE_DISKS  # listed in inventory.dev.yaml
    assert disks["dedibox-200101"] is None and disks["ovh-ns1001.ip-203-0-113.net"] is None


# --- inventory ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("disks", "product", "message"),
    [
        ([], "AX42-U", "robot.servers[0]: disks: a server needs at least one disk"),
        (
            [{"name": "nvme0n1", "size": GB512}, {"name": "nvme0n1", "size": GB512}],
            "AX42-U",
            "robot.servers[0]: disks: disk names appear twice: nvme0n1",
        ),
        (
            [{"name": "hda1", "size": GB512}],
            "AX42-U",
            "robot.servers[0].disks[0].name: String should match pattern '^(nvme[0-9]+n[0-9]+|sd[a-z]+)$'",
        ),
        (
            [{"name": "sda", "size": 0}],
            "AX42-U",
            "robot.servers[0].disks[0].size: Input should be greater than 0",
        ),
        (
            [{"name": "sda", "size": GB512, "model": "x"}],
            "AX42-U",
            "robot.servers[0].disks[0].model: Extra inputs are not permitted",
        ),
        (
            None,
            "EX44",
            "robot.servers[0]: disks: product 'EX44' has no default disks "
            "(known: AX42-U, AX162-R); list them",
        ),
    ],
)
def test_inventory_disks_errors_name_the_server(
    tmp_path: Path, disks: list[dict[str, object]] | None, product: str, message: str
) -> None:
    doc = yaml.safe_load(DEV_INVENTORY.read_text())
    server = doc["robot"]["servers"][0]
    server["product"] = product
    if disks is not None:
        server["disks"] = disks
    bad = tmp_path / "inventory.yaml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(InventoryError) as caught:
        load_inventory(bad)
    assert str(caught.value) == f"inventory {bad} is invalid:\n  {message}"


# --- installimage validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("DRIVE2 /dev/nvme1n1\n", ""),
            "ERROR: You need to select at least 2 disks for creating software raid!",
        ),
        (
            ("DRIVE2 /dev/nvme1n1\n", "DRIVE2 /dev/nvme2n1\n"),
            f"ERROR: DRIVE1 (/dev/nvme0n1, {GB512} bytes) and DRIVE2 (/dev/nvme2n1, {TB384} bytes) "
            "are not the same size",
        ),
        (("DRIVE2 /dev/nvme1n1\n", "DRIVE2 /dev/sdb\n"), "ERROR: Value for DRIVE2 is not correct: /dev/sdb"),
        (("PART / ext4 all\n", "PART / ext9 all\n"), "ERROR: Filesystem for partition 3 is not correct"),
        (
            ("PART /boot ext4 1024M\n", "PART /boot ext4 100M\n"),
            "ERROR: Your /boot partition has to be at least 200M (current size: 100)",
        ),
        (
            ("PART /boot ext4 1024M\n", "PART /boot ext4 all\n"),
            'ERROR: Partition size "all" has to be on the last partition',
        ),
        (
            ("Ubuntu-2404-noble-amd64-base.tar.gz", "Debian-1208-bookworm-amd64-base.tar.gz"),
            "installimage: the simulator lays down Ubuntu-2404-noble-amd64-base.tar.gz only, "
            "not Debian-1208-bookworm-amd64-base.tar.gz",
        ),
        (
            ("Ubuntu-2404-noble-amd64-base.tar.gz", "Windows-2022.tar.gz"),
            "ERROR: image /root/.oldroot/nfs/install/../images/Windows-2022.tar.gz does not exist",
        ),
    ],
)
def test_installimage_refuses_a_bad_config_with_its_own_message_and_writes_nothing(
    rescue_box: RescueBox, keys: Keys, edit: tuple[str, str], message: str
) -> None:
    farm, port = rescue_box
    old, new = edit
    assert VALID_CONFIG.count(old) == 1
    config = VALID_CONFIG.replace(old, new)
    out = run(port, keys["rescue"][0], "cat >/root/c.conf && installimage -a -c /root/c.conf", stdin=config)
    assert (out.returncode, out.stdout, out.stderr) == (1, "", message + "\n")
    assert not farm.installed_in_rescue("r1")
    disk = farm.info("r1").disk_root
    assert (disk / "root/old-os").read_text() == "old\n"
    assert not (disk / "installimage.conf").exists()


# --- the Robot flow with a real box ------------------------------------------------------------------


@dataclass
class RobotBox:
    url: str
    sim: Sim
    farm: BoxFarm
    port: int

    def robot(self, method: str, path: str, data: dict[str, Any] | None = None) -> requests.Response:
        creds = self.sim.inventory.credentials.robot
        return requests.request(
            method, f"{self.url}/robot{path}", data=data, auth=(creds.username, creds.password), timeout=30
        )

    def fingerprint(self) -> str:
        return self.farm.info(BOX).host_key_fingerprint

    def record(self) -> dict[str, Any]:
        box = self.sim.store.get("box", BOX)
        assert box is not None
        return box

    def reset(self) -> None:
        r = self.robot("POST", f"/reset/{N}", {"type": "hw"})
        assert r.status_code == 200, r.text

    def boot_rescue(self, public_key: str) -> None:
        r = self.robot("POST", "/key", {"name": "rescue", "data": public_key})
        assert r.status_code == 201, r.text
        fingerprint = r.json()["key"]["fingerprint"]
        r = self.robot("POST", f"/boot/{N}/rescue", {"os": "linux", "authorized_key": fingerprint})
        assert r.status_code == 200, r.text
        self.reset()


@pytest.fixture
def robot_box(tmp_path: Path, keys: dict[str, tuple[Path, str]]) -> Iterator[RobotBox]:
    """vendorsim's Robot API over HTTP with dev-1 a real box: root with the fleet key, an old OS."""
    farm = BoxFarm(tmp_path / "boxes")
    sim = Sim(load_inventory(DEV_INVENTORY), tmp_path, task_seconds=10, farm=farm, clock=FakeClock())
    record = sim.store.get("box", BOX)
    assert record is not None
    info = farm.ensure(
        BOX,
        ssh_port=_free_port(),
        user="root",
        authorized_key=keys["fleet"][1],
        sudo_password=None,
        disks=[Disk(d["name"], d["size"]) for d in record["disks"]],
    )
    assert run(info.ssh_port, keys["fleet"][0], "echo old > /root/old-os").returncode == 0
    server = make_server("127.0.0.1", 0, App(sim), threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield RobotBox(f"http://127.0.0.1:{server.port}", sim, farm, info.ssh_port)
    finally:
        server.shutdown()
        server.server_close()
        farm.stop_all()
        sim.store.close()


POST_INSTALL = """#!/bin/bash
set -euo pipefail
echo "post-install ran as $(id -un) on $(cat /etc/hostname)" >/root/post-install.log
"""


def test_reset_out_of_rescue_after_installimage_boots_the_new_os_with_a_new_host_key(
    robot_box: RobotBox, keys: dict[str, tuple[Path, str]]
) -> None:
    box = robot_box
    old_os_key = box.fingerprint()
    rescue_public = " ".join(keys["rescue"][1].split()[:2])
    box.boot_rescue(rescue_public)
    rescue_key = box.fingerprint()
    assert rescue_key != old_os_key
    assert box.record()["state"] == "rescue"

    rescue = keys["rescue"][0]
    assert run(box.port, rescue, "cat >/root/c.conf", stdin=VALID_CONFIG).returncode == 0
    assert run(box.port, rescue, "cat >/root/post.sh", stdin=POST_INSTALL).returncode == 0
    install = run(box.port, keys["rescue"][0], "installimage -a -c /root/c.conf -x /root/post.sh")
    assert install.returncode == 0, install.stderr
    assert install.stdout.splitlines()[-1] == "installimage: INSTALLATION COMPLETE"
    assert box.farm.installed_in_rescue(BOX)

    box.reset()

    new_os_key = box.fingerprint()
    assert new_os_key not in (old_os_key, rescue_key)
    assert box.record()["host_key_fingerprint"] == new_os_key
    record = box.record()
    assert (record["state"], record["user"], record["authorized_key"], record["generation"]) == (
        "installed",
        "root",
        rescue_public,
        1,
    )
    # root logs in with the keys installimage copied from the rescue system; the old OS's key is gone.
    # The disk was formatted: the old OS's files are gone (test -e on what the host's / does not hold).
    booted = run(box.port, keys["rescue"][0], "hostname; cat /root/post-install.log; test ! -e /root/old-os")
    assert (booted.returncode, booted.stdout) == (0, "runner-7\npost-install ran as root on runner-7\n")
    assert run(box.port, keys["fleet"][0], "true").returncode == 255
    assert not box.farm.info(BOX).in_rescue


def test_reset_out_of_rescue_without_an_install_brings_the_old_os_back_as_it_was(
    robot_box: RobotBox, keys: dict[str, tuple[Path, str]]
) -> None:
    box = robot_box
    old_os_key = box.fingerprint()
    box.boot_rescue(" ".join(keys["rescue"][1].split()[:2]))
    assert box.fingerprint() != old_os_key
    assert run(box.port, keys["rescue"][0], "touch /root/rescue-only").returncode == 0

    box.reset()

    assert box.fingerprint() == old_os_key
    record = box.record()
    assert (record["state"], record["generation"]) == ("installed", 0)
    # The rescue system's RAM is gone with it.
    back = run(box.port, keys["fleet"][0], "cat /root/old-os; test ! -e /root/rescue-only")
    assert (back.returncode, back.stdout) == (0, "old\n")
    assert run(box.port, keys["rescue"][0], "true").returncode == 255


def test_the_rescue_system_answers_with_the_host_key_its_activation_announced(
    robot_box: RobotBox, keys: dict[str, tuple[Path, str]]
) -> None:
    """Issue 17.5: Robot's rescue activation returns the rescue system's host keys, so the session
    into it is pinned rather than trusted on first use. The sshd that answers after the reset
    presents exactly the announced key."""
    import paramiko

    from providers.robot.models import rescue_from
    from providers.vendor import host_key_matches

    box = robot_box
    r = box.robot("POST", "/key", {"name": "rescue", "data": " ".join(keys["rescue"][1].split()[:2])})
    fingerprint = r.json()["key"]["fingerprint"]
    activation = box.robot("POST", f"/boot/{N}/rescue", {"os": "linux", "authorized_key": fingerprint}).json()
    announced = rescue_from(activation).host_key_fingerprints
    assert len(announced) == 1
    box.reset()

    transport = paramiko.Transport(("127.0.0.1", box.port))
    try:
        transport.start_client(timeout=10)
        presented = transport.get_remote_server_key()
    finally:
        transport.close()
    assert host_key_matches(announced, presented.asbytes())
    assert box.fingerprint() == announced[0]
