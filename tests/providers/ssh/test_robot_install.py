"""Robot install inputs: installimage config, RAID pair choice, and the post-install script in a box."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from providers.ssh.robot_install import (
    POSTINSTALL_SCRIPT,
    RobotInstallInputError,
    pick_raid_pair,
    render_installimage_config,
)
from providers.ssh.runner import RemoteCommandError, run_script
from providers.ssh.selfjoin import SelfJoinParams, render_self_join_script, self_join_secrets
from tests.providers.ssh.conftest import BOOTSTRAP_TOKEN, Box, KeyPair

REPO = Path(__file__).resolve().parents[3]
URLS = {
    "RUNC_SHA256": "https://github.com/opencontainers/runc/releases/download/v1.2.5/runc.amd64",
    "CONTAINERD_SHA256": "https://github.com/containerd/containerd/releases/download/v2.2.3/"
    "containerd-2.2.3-linux-amd64.tar.gz",
    "KATA_STATIC_SHA256": "https://github.com/kata-containers/kata-containers/releases/download/3.30.0/"
    "kata-static-3.30.0-amd64.tar.zst",
}


def sh(box: Box, fleet_key: KeyPair, script: str, step: str = "script"):
    return run_script(
        box.target,
        script,
        private_key=fleet_key.private,
        env_secrets={},
        expected_host_key=None,
        step=step,
        retries=1,
        retry_delay=0,
        step_timeout=60,
    )


def with_checksums(script: str, checksums: dict[str, str]) -> str:
    for name, value in checksums.items():
        script, n = re.subn(rf"^{name}=.*$", f"{name}={value}", script, flags=re.MULTILINE)
        assert n == 1, name
    return script


def sim_checksums(box: Box, fleet_key: KeyPair) -> dict[str, str]:
    """The checksums of the simulator's stand-in artifacts, as the box downloads them."""
    out = sh(box, fleet_key, "".join(f"curl -fsSL {url} | sha256sum\n" for url in URLS.values())).output_tail
    sums = [line.split()[0] for line in out.splitlines()]
    return dict(zip(URLS, sums, strict=True))


def test_the_shipped_script_pins_real_checksums_and_refuses_an_unpinned_kata():
    text = POSTINSTALL_SCRIPT.read_text()
    assert "RUNC_SHA256=fbd851fce6a8e0d67a9d184ea544c2abf67c9fd29b80fcc1adf67dfe9eb036a1\n" in text
    assert "CONTAINERD_SHA256=ca26ef5138f17b847bbeeec36d4bf5e002b54d25858197a870c125d57f44d32f\n" in text
    assert "KATA_STATIC_SHA256=\n" in text


def test_unpinned_kata_stops_the_install_before_anything_is_written(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    box = make_box(user="root", sudo_password=None)
    with pytest.raises(RemoteCommandError) as err:
        sh(box, fleet_key, POSTINSTALL_SCRIPT.read_text(), step="robot post-install")
    assert err.value.output_tail.endswith(
        "robot-postinstall: KATA_STATIC_SHA256 is not pinned; refusing to install an unchecked Kata\n"
    )
    assert not (box.root / "etc/tuist").exists()


def test_a_download_that_does_not_match_its_checksum_is_never_installed(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    box = make_box(user="root", sudo_password=None)
    sums = sim_checksums(box, fleet_key)
    # The real runc checksum against the simulator's stand-in runc: must fail at the check.
    script = with_checksums(
        POSTINSTALL_SCRIPT.read_text(),
        {"CONTAINERD_SHA256": sums["CONTAINERD_SHA256"], "KATA_STATIC_SHA256": sums["KATA_STATIC_SHA256"]},
    )
    with pytest.raises(RemoteCommandError) as err:
        sh(box, fleet_key, script, step="robot post-install")
    assert "sha256sum: WARNING: 1 computed checksum did NOT match" in err.value.output_tail
    assert not (box.root / "usr/local/sbin/runc").exists()
    assert not (box.root / "usr/local/bin/containerd").exists()


def test_post_install_bakes_containerd_2_and_kata_and_the_self_join_keeps_them(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    box = make_box(user="root", sudo_password=None)
    script = with_checksums(POSTINSTALL_SCRIPT.read_text(), sim_checksums(box, fleet_key))
    out = sh(box, fleet_key, script, step="robot post-install").output_tail
    assert "robot-postinstall: runc 1.2.5, containerd 2.2.3, kata 3.30.0 installed\n" in out

    root = box.root
    assert not (root / "etc/netplan/50-cloud-init.yaml").exists()
    assert (root / "etc/cloud/cloud.cfg.d/99-disable-network-config.cfg").read_text() == (
        "network: {config: disabled}\n"
    )
    assert (root / "etc/netplan/99-tuist-disable-dhcp6.yaml").read_text() == (
        "network:\n  version: 2\n  ethernets:\n    enp3s0:\n      dhcp6: false\n      accept-ra: false\n"
    )
    assert (root / "etc/tuist/node-labels").read_text() == "katacontainers.io/kata-runtime=true\n"
    assert (root / "usr/local/sbin/runc").stat().st_mode & 0o111
    assert (root / "usr/local/bin/containerd").exists()
    assert (root / "opt/kata/bin/containerd-shim-kata-v2").exists()
    config = (root / "etc/containerd/config.toml").read_text()
    assert config.startswith("version = 3\n")
    assert "SystemdCgroup = true" in config and "SystemdCgroup = false" not in config
    assert config.endswith(
        "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.kata-qemu]\n"
        "  runtime_type = 'io.containerd.kata-qemu.v2'\n"
        "  runtime_path = '/opt/kata/bin/containerd-shim-kata-v2'\n"
        "  privileged_without_host_devices = true\n"
        "  pod_annotations = ['io.katacontainers.*']\n"
        "\n"
        "  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.kata-qemu.options]\n"
        "    ConfigPath = '/opt/kata/share/defaults/kata-containers/configuration-qemu.toml'\n"
    )
    assert (
        "ExecStart=/usr/local/bin/containerd\n"
        in (root / "etc/systemd/system/containerd.service").read_text()
    )
    assert "containerd.service" in (root / "var/lib/sim/systemd/enabled").read_text().split()
    calls = box.calls()
    verify = next(i for i, c in enumerate(calls) if c == "sha256sum -c -")
    assert verify < next(i for i, c in enumerate(calls) if c.startswith("install -D -m 0755"))

    # The self-join on this box leaves the baked-in containerd config alone and adds the Kata label.
    params = SelfJoinParams(
        node_name="tuist-bm-staging-1",
        node_ip="198.51.100.7",
        provider_id="hrobot://2345678",
        labels={"node.cluster.x-k8s.io/pool": "runners-linux", "tuist.dev/runner-tier": "bare-metal"},
        api_server="https://cp.example.net:6443",
        ca_bundle_pem="-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        containerd_source="preinstalled",
    )
    run_script(
        box.target,
        render_self_join_script(params),
        private_key=fleet_key.private,
        env_secrets=self_join_secrets(sudo_password=None, bootstrap_token=BOOTSTRAP_TOKEN),
        expected_host_key=None,
        retries=1,
        retry_delay=0,
        step_timeout=60,
    )
    assert (root / "etc/containerd/config.toml").read_text() == config
    assert not [c for c in box.calls() if c.startswith("apt-get install") and "containerd" in c]
    unit = (root / "etc/systemd/system/kubelet.service").read_text()
    assert (
        "--node-labels=node.cluster.x-k8s.io/pool=runners-linux,tuist.dev/runner-tier=bare-metal,"
        "katacontainers.io/kata-runtime=true"
    ) in unit
    assert "--provider-id=hrobot://2345678" in unit


def test_installimage_config_renders_raid1_on_the_pair():
    config = render_installimage_config(
        drive1="/dev/nvme0n1", drive2="/dev/nvme1n1", hostname="tuist-bm-staging-1"
    )
    lines = [line for line in config.splitlines() if line and not line.startswith("#")]
    assert lines == [
        "DRIVE1 /dev/nvme0n1",
        "DRIVE2 /dev/nvme1n1",
        "SWRAID 1",
        "SWRAIDLEVEL 1",
        "BOOTLOADER grub",
        "HOSTNAME tuist-bm-staging-1",
        "PART /boot/efi esp 256M",
        "PART /boot ext4 1024M",
        "PART / ext4 all",
        "IMAGE /root/.oldroot/nfs/install/../images/Ubuntu-2404-noble-amd64-base.tar.gz",
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"drive1": "/dev/nvme0n1", "drive2": "/dev/nvme0n1", "hostname": "h"},
            "drive1 and drive2 are both /dev/nvme0n1: RAID 1 needs two disks",
        ),
        (
            {"drive1": "nvme0n1", "drive2": "/dev/nvme1n1", "hostname": "h"},
            "drive1 'nvme0n1' is not a /dev/sdX or /dev/nvmeXnY device",
        ),
        (
            {"drive1": "/dev/sda", "drive2": "/dev/sdb", "hostname": "Bad_Host"},
            "hostname 'Bad_Host' is not a DNS label",
        ),
    ],
)
def test_installimage_config_refuses_bad_inputs(kwargs: dict[str, str], message: str):
    with pytest.raises(RobotInstallInputError) as err:
        render_installimage_config(**kwargs)
    assert str(err.value) == message


def test_the_raid_pair_is_the_same_size_group_holding_the_most_capacity():
    tb = 10**12
    assert pick_raid_pair(
        {
            "/dev/nvme0n1": 512 * 10**9,
            "/dev/nvme1n1": 512 * 10**9,
            "/dev/sda": 2 * tb,
            "/dev/sdb": 2 * tb,
            "/dev/sdc": 4 * tb,
        }
    ) == ("/dev/sda", "/dev/sdb")
    assert pick_raid_pair({"/dev/nvme1n1": tb, "/dev/nvme0n1": tb}) == ("/dev/nvme0n1", "/dev/nvme1n1")
    with pytest.raises(RobotInstallInputError) as err:
        pick_raid_pair({"/dev/sda": tb, "/dev/sdb": 2 * tb})
    assert str(err.value) == (
        "no two disks of the same size to mirror among ['/dev/sda', '/dev/sdb']: RAID 1 needs a pair"
    )


def test_every_shipped_shell_script_is_shellcheck_clean():
    scripts = sorted(
        [
            *(REPO / "providers/ssh/scripts").glob("*.sh"),
            REPO / "vendorsim/sandbox/login.sh",
            *(p for p in (REPO / "vendorsim/sandbox/shims").iterdir() if not p.is_symlink()),
        ]
    )
    assert len(scripts) >= 17
    result = subprocess.run(
        ["shellcheck", "-x", *map(str, scripts)],
        capture_output=True,
        text=True,
        cwd=REPO / "vendorsim/sandbox/shims",
    )
    assert (result.returncode, result.stdout) == (0, "")
