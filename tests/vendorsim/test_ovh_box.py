"""An OVH reinstall on a real box: the image's `ubuntu` user gets cloud-init's passwordless sudo, as on a
real OVH Ubuntu install, so a released box can be adopted again."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from tests.vendorsim.conftest import DEV_INVENTORY, FakeClock, Served, ovh_signed
from tests.vendorsim.test_boxes import _free_port, _keypair, ssh
from vendorsim.app import App
from vendorsim.boxes import CLOUD_INIT_SUDOERS, BoxFarm
from vendorsim.core import Sim
from vendorsim.inventory import load_inventory

SVC = "ns1001.ip-203-0-113.net"
BOX = f"ovh-{SVC}"
PREP_SUDO = "prep-sudo-pass-3"


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    return {"prep": _keypair(tmp_path, "prep"), "fleet": _keypair(tmp_path, "fleet")}


@pytest.fixture
def served_box(tmp_path: Path, keys: dict[str, tuple[Path, str]]) -> Iterator[tuple[Served, BoxFarm, int]]:
    """vendorsim's OVH API over HTTP with ns1001 a real box, as the operator's prep left it: `ubuntu`
    with a sudo password and no passwordless sudo."""
    farm = BoxFarm(tmp_path / "boxes")
    clock = FakeClock()
    inventory = load_inventory(DEV_INVENTORY)
    sim = Sim(inventory, tmp_path, task_seconds=10, farm=farm, clock=clock)
    port = _free_port()
    farm.ensure(BOX, ssh_port=port, user="ubuntu", authorized_key=keys["prep"][1], sudo_password=PREP_SUDO)
    server = make_server("127.0.0.1", 0, App(sim), threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        # Served's farm is a RecordingFarm elsewhere; here the real one answers.
        yield Served(sim, f"http://127.0.0.1:{server.port}", clock, farm, inventory), farm, port  # type: ignore[arg-type]
    finally:
        server.shutdown()
        server.server_close()
        farm.stop_all()
        sim.store.close()


def test_an_ovh_reinstall_gives_ubuntu_passwordless_sudo(
    served_box: tuple[Served, BoxFarm, int], keys: dict[str, tuple[Path, str]]
) -> None:
    served, farm, port = served_box
    before = ssh(port, keys["prep"][0], "sudo -n id -u")
    assert (before.returncode, before.stderr) == (1, "sudo: a password is required\n")

    fleet_public = " ".join(keys["fleet"][1].split()[:2])
    body = {
        "operatingSystem": "ubuntu2404-server_64",
        "customizations": {"hostname": "kura-0", "sshKey": fleet_public},
    }
    r = ovh_signed(served, "POST", f"/dedicated/server/{SVC}/reinstall", body)
    assert r.status_code == 200, r.text
    served.clock.advance(10)
    task = ovh_signed(served, "GET", f"/dedicated/server/{SVC}/task/{r.json()['taskId']}").json()
    assert task["status"] == "done"

    after = ssh(port, keys["fleet"][0], "sudo -n id -u; id -un")
    assert (after.returncode, after.stdout, after.stderr) == (0, "0\nubuntu\n", "")
    sudoers = farm.info(BOX).sandbox_root / CLOUD_INIT_SUDOERS
    assert sudoers.read_text() == "# Created by cloud-init\nubuntu ALL=(ALL) NOPASSWD:ALL\n"
    assert sudoers.stat().st_mode & 0o777 == 0o440
    # The reinstall replaced the prep's key with the request's.
    assert ssh(port, keys["prep"][0], "true").returncode == 255


def test_a_reinstall_without_nopasswd_leaves_sudo_asking_for_the_password(
    tmp_path: Path, keys: dict[str, tuple[Path, str]]
) -> None:
    farm = BoxFarm(tmp_path / "plain")
    try:
        farm.ensure("b1", ssh_port=_free_port(), user="ubuntu", authorized_key=None, sudo_password=None)
        info = farm.reinstall(
            "b1", user="ubuntu", authorized_key=keys["fleet"][1], sudo_password=PREP_SUDO, nopasswd_sudo=False
        )
        out = ssh(info.ssh_port, keys["fleet"][0], "sudo -n true")
        assert (out.returncode, out.stderr) == (1, "sudo: a password is required\n")
        assert not (info.sandbox_root / CLOUD_INIT_SUDOERS).exists()
        out = ssh(info.ssh_port, keys["fleet"][0], "sudo -S -p '' id -u", stdin=PREP_SUDO + "\n")
        assert (out.returncode, out.stdout) == (0, "0\n")
    finally:
        farm.stop_all()
