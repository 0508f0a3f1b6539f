"""Robot install inputs: installimage config, RAID pair choice, artifact pins, and the post-install
script in a real box, downloading vendorsim's artifacts over real HTTP on loopback."""

from __future__ import annotations

import hashlib
import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from config.models import InstallArtifacts
from providers.ssh.robot_install import (
    PINS_MARKER,
    POSTINSTALL_SCRIPT,
    ArtifactPins,
    RobotInstallInputError,
    pick_raid_pair,
    render_installimage_config,
    render_postinstall,
)
from providers.ssh.runner import RemoteCommandError, RunResult, run_script
from providers.ssh.selfjoin import SelfJoinParams, render_self_join_script, self_join_secrets
from tests.providers.ssh.conftest import BOOTSTRAP_TOKEN, Box, KeyPair
from vendorsim import artifacts

REPO = Path(__file__).resolve().parents[3]


@dataclass
class ArtifactServer:
    """vendorsim's artifact files over plain HTTP, as vendorsim serves them at /artifacts/<file>."""

    url: str
    requests: list[str] = field(default_factory=list)

    def pins(self) -> ArtifactPins:
        def sha(name: str) -> str:
            return hashlib.sha256((artifacts.ARTIFACTS_DIR / name).read_bytes()).hexdigest()

        return ArtifactPins(
            runc_url=f"{self.url}/artifacts/{artifacts.RUNC}",
            runc_sha256=sha(artifacts.RUNC),
            containerd_url=f"{self.url}/artifacts/{artifacts.CONTAINERD}",
            containerd_sha256=sha(artifacts.CONTAINERD),
            kata_static_url=f"{self.url}/artifacts/{artifacts.KATA_STATIC}",
            kata_static_sha256=sha(artifacts.KATA_STATIC),
        )


@pytest.fixture(scope="module")
def artifact_server() -> Iterator[ArtifactServer]:
    served = ArtifactServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.requests.append(f"GET {self.path}")
            data = artifacts.artifact(self.path.removeprefix("/artifacts/"))
            if not self.path.startswith("/artifacts/") or data is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # quiet: the test reads .requests
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def served(artifact_server: ArtifactServer) -> ArtifactServer:
    artifact_server.requests.clear()
    return artifact_server


def sh(box: Box, fleet_key: KeyPair, script: str, step: str = "script") -> RunResult:
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


# --- render_postinstall -------------------------------------------------------------------------------


def test_the_shipped_script_carries_no_pins_only_the_marker_they_are_rendered_into() -> None:
    text = POSTINSTALL_SCRIPT.read_text()
    assert text.count(PINS_MARKER) == 1
    assert not re.search(r"^(RUNC|CONTAINERD|KATA_STATIC)_(URL|SHA256)=", text, re.MULTILINE)
    assert not re.search(r"[0-9a-f]{64}", text)


def test_render_postinstall_puts_each_pin_where_the_marker_was() -> None:
    pins = ArtifactPins(
        runc_url="https://example.net/runc.amd64",
        runc_sha256="1" * 64,
        containerd_url="https://example.net/containerd.tar.gz",
        containerd_sha256="2" * 64,
        kata_static_url="https://example.net/kata-static.tar.zst",
        kata_static_sha256="3" * 64,
    )
    rendered = render_postinstall(pins)
    assert rendered == POSTINSTALL_SCRIPT.read_text().replace(
        PINS_MARKER,
        "RUNC_URL=https://example.net/runc.amd64\n"
        f"RUNC_SHA256={'1' * 64}\n"
        "CONTAINERD_URL=https://example.net/containerd.tar.gz\n"
        f"CONTAINERD_SHA256={'2' * 64}\n"
        "KATA_STATIC_URL=https://example.net/kata-static.tar.zst\n"
        f"KATA_STATIC_SHA256={'3' * 64}\n",
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"kata_static_sha256": ""},
            "install artifact pin kata_static_sha256 '' is not a sha256 (64 lowercase hex digits)",
        ),
        (
            {"runc_sha256": "A" * 64},
            f"install artifact pin runc_sha256 '{'A' * 64}' is not a sha256 (64 lowercase hex digits)",
        ),
        (
            # Anything a shell would act on never reaches the script.
            {"containerd_url": "https://example.net/c.tar.gz;reboot"},
            "install artifact pin containerd_url 'https://example.net/c.tar.gz;reboot' "
            "is not an http(s) URL of a file",
        ),
        (
            {"kata_static_url": "ftp://example.net/kata.tar.zst"},
            "install artifact pin kata_static_url 'ftp://example.net/kata.tar.zst' "
            "is not an http(s) URL of a file",
        ),
    ],
)
def test_render_postinstall_refuses_a_bad_pin_naming_it(change: dict[str, str], message: str) -> None:
    defaults = InstallArtifacts(kata_static_sha256="3" * 64)
    pins = replace(ArtifactPins(**defaults.model_dump()), **change)
    with pytest.raises(RobotInstallInputError) as err:
        render_postinstall(pins)
    assert str(err.value) == message


# --- the post-install script in a box -----------------------------------------------------------------


def test_the_script_without_its_pins_refuses_before_anything_is_written(
    make_box: Callable[..., Box], fleet_key: KeyPair, served: ArtifactServer
) -> None:
    box = make_box(user="root", sudo_password=None)
    with pytest.raises(RemoteCommandError) as err:
        sh(box, fleet_key, POSTINSTALL_SCRIPT.read_text(), step="robot post-install")
    assert err.value.output_tail.endswith(
        "robot-postinstall: RUNC_URL is not set; render the script with its artifact pins\n"
    )
    assert not (box.root / "etc/tuist").exists()
    assert served.requests == []


def test_unpinned_kata_stops_the_install_before_anything_is_written(
    make_box: Callable[..., Box], fleet_key: KeyPair, served: ArtifactServer
) -> None:
    box = make_box(user="root", sudo_password=None)
    # The script's own guard, behind render_postinstall's: a script whose Kata pin is empty.
    rendered = render_postinstall(served.pins())
    script, n = re.subn(r"^KATA_STATIC_SHA256=.*$", "KATA_STATIC_SHA256=", rendered, flags=re.MULTILINE)
    assert n == 1
    with pytest.raises(RemoteCommandError) as err:
        sh(box, fleet_key, script, step="robot post-install")
    assert err.value.output_tail.endswith(
        "robot-postinstall: KATA_STATIC_SHA256 is not pinned; refusing to install an unchecked Kata\n"
    )
    assert not (box.root / "etc/tuist").exists()
    assert served.requests == []


def test_a_download_that_does_not_match_its_checksum_is_never_installed(
    make_box: Callable[..., Box], fleet_key: KeyPair, served: ArtifactServer
) -> None:
    box = make_box(user="root", sudo_password=None)
    # The real upstream runc's sum against vendorsim's stand-in runc: the check must stop the install.
    pins = replace(served.pins(), runc_sha256=InstallArtifacts().runc_sha256)
    with pytest.raises(RemoteCommandError) as err:
        sh(box, fleet_key, render_postinstall(pins), step="robot post-install")
    assert "sha256sum: WARNING: 1 computed checksum did NOT match" in err.value.output_tail
    assert served.requests == [f"GET /artifacts/{artifacts.RUNC}"]
    assert not (box.root / "usr/local/sbin/runc").exists()
    assert not (box.root / "usr/local/bin/containerd").exists()
    assert not (box.root / "opt/kata").exists()


def test_post_install_bakes_containerd_2_and_kata_and_the_self_join_keeps_them(
    make_box: Callable[..., Box], fleet_key: KeyPair, served: ArtifactServer
) -> None:
    box = make_box(user="root", sudo_password=None)
    pins = served.pins()
    out = sh(box, fleet_key, render_postinstall(pins), step="robot post-install").output_tail
    assert (
        f"robot-postinstall: runc, containerd and kata installed from {pins.runc_url}, "
        f"{pins.containerd_url}, {pins.kata_static_url}\n"
    ) in out
    assert served.requests == [
        f"GET /artifacts/{artifacts.RUNC}",
        f"GET /artifacts/{artifacts.CONTAINERD}",
        f"GET /artifacts/{artifacts.KATA_STATIC}",
    ]

    root = box.root
    assert (root / "usr/local/sbin/runc").read_bytes() == artifacts.artifact(artifacts.RUNC)
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


def test_post_install_turns_dhcp6_off_on_the_nic_the_installed_system_names(
    make_box: Callable[..., Box], fleet_key: KeyPair, served: ArtifactServer
) -> None:
    # Hetzner's models name their NIC differently; installimage writes the real name into 01-netcfg.
    box = make_box(user="root", sudo_password=None)
    (box.root / "etc/netplan/01-netcfg.yaml").write_text(
        "### Hetzner Online GmbH installimage\nnetwork:\n  version: 2\n  renderer: networkd\n"
        "  ethernets:\n    enp41s0:\n      addresses:\n        - 203.0.113.5/32\n"
    )
    sh(box, fleet_key, render_postinstall(served.pins()), step="robot post-install")
    assert (box.root / "etc/netplan/99-tuist-disable-dhcp6.yaml").read_text() == (
        "network:\n  version: 2\n  ethernets:\n    enp41s0:\n      dhcp6: false\n      accept-ra: false\n"
    )


def test_installimage_config_renders_raid1_on_the_pair() -> None:
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
def test_installimage_config_refuses_bad_inputs(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(RobotInstallInputError) as err:
        render_installimage_config(**kwargs)
    assert str(err.value) == message


def test_the_raid_pair_is_the_same_size_group_holding_the_most_capacity() -> None:
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


def test_every_shipped_shell_script_is_shellcheck_clean() -> None:
    scripts = sorted(
        [
            *(REPO / "providers/ssh/scripts").glob("*.sh"),
            *(REPO / "providers/ssh/scripts/macos").glob("*.sh"),
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
