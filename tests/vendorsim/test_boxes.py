"""vendorsim.boxes: real OpenSSH sshd per box, sandboxed sessions; driven with the OpenSSH client."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vendorsim import cpu_budget
from vendorsim.boxes import BoxError, BoxFarm, Hardware, fingerprint_of, reap_orphans

SUDO_PASSWORD = "box-sudo-pass-7"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keypair(directory: Path, name: str) -> tuple[Path, str]:
    path = directory / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)], check=True)
    return path, (directory / f"{name}.pub").read_text().strip()


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    directory = tmp_path_factory.mktemp("keys")
    return {"fleet": _keypair(directory, "fleet"), "other": _keypair(directory, "other")}


@pytest.fixture
def farm(tmp_path: Path) -> Iterator[BoxFarm]:
    farm = BoxFarm(tmp_path / "boxes")
    yield farm
    farm.stop_all()


def ssh(
    port: int,
    key: Path,
    command: str,
    *,
    user: str = "ubuntu",
    stdin: str = "",
    known_hosts: Path | None = None,
    host: str = "127.0.0.1",
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "ssh",
            "-i",
            str(key),
            "-p",
            str(port),
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=" + ("yes" if known_hosts else "no"),
            "-o",
            f"UserKnownHostsFile={known_hosts or '/dev/null'}",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "ConnectTimeout=5",
            # The key exchange the providers' client (paramiko) negotiates with a box. OpenSSH's default
            # (sntrup761x25519) made up most of each login's time here: about 0.8 s of 1.3 s.
            "-o",
            "KexAlgorithms=curve25519-sha256",
            f"{user}@{host}",
            command,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
    )


def make(farm: BoxFarm, keys: dict[str, tuple[Path, str]], key: str = "box1", **kw: object):
    args: dict[str, object] = {
        "ssh_port": _free_port(),
        "user": "ubuntu",
        "authorized_key": keys["fleet"][1],
        "sudo_password": SUDO_PASSWORD,
        **kw,
    }
    return farm.ensure(key, **args)  # type: ignore[arg-type]


def test_the_fleet_key_logs_in_and_another_key_is_refused(farm: BoxFarm, keys):
    info = make(farm, keys)
    ok = ssh(info.ssh_port, keys["fleet"][0], "id -un; hostname")
    assert (ok.returncode, ok.stdout) == (0, "ubuntu\nbox1\n")
    refused = ssh(info.ssh_port, keys["other"][0], "true")
    assert refused.returncode == 255
    assert "Permission denied (publickey)." in refused.stderr
    wrong_user = ssh(info.ssh_port, keys["fleet"][0], "true", user="tuist")
    assert wrong_user.returncode == 255


def test_everything_a_box_runs_runs_in_the_farms_cpu_budget(tmp_path: Path, keys):
    budget = cpu_budget.create(0.5)
    farm = BoxFarm(tmp_path / "budgeted", cpu_budget=budget)
    try:
        info = make(farm, keys)
        session = ssh(info.ssh_port, keys["fleet"][0], "cat /proc/self/cgroup")
        assert f"/vendorsim-boxes-{os.getpid()}\n" in session.stdout, session.stdout
    finally:
        farm.stop_all()
        cpu_budget.remove(budget)
    assert not budget.parent.exists()


def test_the_host_key_the_client_sees_is_the_one_reported(farm: BoxFarm, keys, tmp_path: Path):
    info = make(farm, keys)
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{info.ssh_port} {info.host_public_key}\n")
    assert ssh(info.ssh_port, keys["fleet"][0], "true", known_hosts=known).returncode == 0
    scanned = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(known)], capture_output=True, text=True, check=True
    )
    assert scanned.stdout.split()[1] == info.host_key_fingerprint == fingerprint_of(info.host_public_key)


def test_ensure_is_idempotent_and_the_host_key_survives_sshd_restarts(farm: BoxFarm, keys):
    info = make(farm, keys)
    pid = (farm.state_dir / "box1/ssh/sshd.pid").read_text()
    again = farm.ensure(
        "box1",
        ssh_port=info.ssh_port,
        user="ubuntu",
        authorized_key=keys["fleet"][1],
        sudo_password=SUDO_PASSWORD,
    )
    assert again == info
    assert (farm.state_dir / "box1/ssh/sshd.pid").read_text() == pid, "a running sshd is left alone"

    farm.stop("box1")
    assert not farm.is_running("box1")
    restarted = farm.ensure(
        "box1", ssh_port=info.ssh_port, user="ubuntu", authorized_key=None, sudo_password=None
    )
    assert restarted.host_key_fingerprint == info.host_key_fingerprint
    assert ssh(info.ssh_port, keys["fleet"][0], "true").returncode == 0

    # A new farm object (a restarted simulator) finds the same box.
    assert BoxFarm(farm.state_dir).info("box1") == info


def test_reinstall_wipes_the_disk_gives_a_new_host_key_and_the_new_fleet_key(farm: BoxFarm, keys):
    info = make(farm, keys)
    assert (
        ssh(info.ssh_port, keys["fleet"][0], "echo kept > /etc/tuist-marker; mkdir -p /opt/x").returncode == 0
    )
    assert (info.sandbox_root / "etc/tuist-marker").read_text() == "kept\n"

    new = farm.reinstall("box1", user="ubuntu", authorized_key=keys["other"][1], sudo_password="new-pass")
    assert new.ssh_port == info.ssh_port
    assert new.host_key_fingerprint != info.host_key_fingerprint
    assert not (new.sandbox_root / "etc/tuist-marker").exists()
    assert not (new.sandbox_root / "opt/x").exists()
    assert ssh(info.ssh_port, keys["fleet"][0], "true").returncode == 255, "the old key is gone"
    out = ssh(
        info.ssh_port, keys["other"][0], "cat /etc/tuist-marker 2>&1; echo new-pass | sudo -S -p '' id -u"
    )
    assert out.stdout == "cat: /etc/tuist-marker: No such file or directory\n0\n"


def test_reset_reinstalls_only_a_box_used_since_the_last_reset(farm: BoxFarm, keys):
    info = make(farm, keys)
    fleet = {"user": "ubuntu", "authorized_key": keys["fleet"][1], "sudo_password": SUDO_PASSWORD}
    first = farm.reset("box1", **fleet)
    assert first.host_key_fingerprint != info.host_key_fingerprint  # never reset before: reinstalled
    # Nothing used it since: left as it is, sshd and host key included.
    pid = (farm.state_dir / "box1/ssh/sshd.pid").read_text()
    assert farm.reset("box1", **fleet) == first
    assert (farm.state_dir / "box1/ssh/sshd.pid").read_text() == pid
    # A session, even one that writes nothing: reinstalled.
    assert ssh(info.ssh_port, keys["fleet"][0], "true").returncode == 0
    after_session = farm.reset("box1", **fleet)
    assert after_session.host_key_fingerprint != first.host_key_fingerprint
    # A file of its disk changed from outside a session: reinstalled, the file gone.
    (after_session.sandbox_root / "etc/hostname").write_text("changed\n")
    after_edit = farm.reset("box1", **fleet)
    assert after_edit.host_key_fingerprint != after_session.host_key_fingerprint
    assert (after_edit.sandbox_root / "etc/hostname").read_text() == "box1\n"
    # sshd stopped and started again: reinstalled.
    farm.stop("box1")
    make(farm, keys, ssh_port=info.ssh_port)
    after_restart = farm.reset("box1", **fleet)
    assert after_restart.host_key_fingerprint != after_edit.host_key_fingerprint
    # Another prep (another key): reinstalled with it.
    other = farm.reset("box1", **{**fleet, "authorized_key": keys["other"][1]})
    assert other.host_key_fingerprint != after_restart.host_key_fingerprint
    assert ssh(info.ssh_port, keys["fleet"][0], "true").returncode == 255
    assert ssh(info.ssh_port, keys["other"][0], "true").returncode == 0


def test_reinstall_of_an_unknown_box_names_it(farm: BoxFarm):
    with pytest.raises(BoxError, match=r"^box ghost: cannot reinstall a box that was never created"):
        farm.reinstall("ghost", user="ubuntu", authorized_key=None, sudo_password=None)


def test_bad_inputs_are_refused_naming_the_box(farm: BoxFarm, keys):
    with pytest.raises(BoxError, match=r"^box key '\.\./x' is not a valid box name"):
        farm.ensure("../x", ssh_port=_free_port(), user="ubuntu", authorized_key=None, sudo_password=None)
    with pytest.raises(BoxError, match=r"^box b2: authorized_key line 1 is not an OpenSSH public key$"):
        farm.ensure("b2", ssh_port=_free_port(), user="ubuntu", authorized_key="hello", sudo_password=None)
    with pytest.raises(BoxError, match=r"^box b3: login user 'Bad User' is not a valid user name$"):
        farm.ensure("b3", ssh_port=_free_port(), user="Bad User", authorized_key=None, sudo_password=None)
    with pytest.raises(
        BoxError,
        match=r"^box b4: ssh_host 203\.0\.113\.9 is neither a loopback address \(127\.0\.0\.0/8\) "
        r"nor in the box network 198\.18\.0\.0/15$",
    ):
        make(farm, keys, key="b4", ssh_host="203.0.113.9")
    with pytest.raises(BoxError, match=r"^box b5: ssh_host 'box5\.invalid' is not an IPv4 address$"):
        make(farm, keys, key="b5", ssh_host="box5.invalid")


def test_boxes_share_a_port_each_on_its_own_address_of_the_box_network(farm: BoxFarm, keys):
    # As real boxes do: one port, each box on its own IP, and nothing answers on the others. The
    # addresses are the box network's, which the test session's namespace carries on lo.
    port = _free_port()
    first = make(farm, keys, key="first", ssh_port=port, ssh_host="198.19.77.11")
    second = make(farm, keys, key="second", ssh_port=port, ssh_host="198.19.77.12")
    assert (first.ssh_host, first.ssh_port, second.ssh_host, second.ssh_port) == (
        "198.19.77.11",
        port,
        "198.19.77.12",
        port,
    )
    for host, name in (("198.19.77.11", "first"), ("198.19.77.12", "second")):
        out = ssh(port, keys["fleet"][0], "hostname", host=host)
        assert (out.returncode, out.stdout) == (0, f"{name}\n")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    # The address survives a reinstall; ensure on another address moves the sshd there.
    assert farm.reinstall(
        "first", user="ubuntu", authorized_key=keys["fleet"][1], sudo_password=None
    ).ssh_host == ("198.19.77.11")
    moved = make(farm, keys, key="second", ssh_port=port, ssh_host="198.19.77.13")
    assert moved.ssh_host == "198.19.77.13"
    assert ssh(port, keys["fleet"][0], "hostname", host="198.19.77.13").stdout == "second\n"
    with pytest.raises(OSError):
        socket.create_connection(("198.19.77.12", port), timeout=1).close()


def test_the_box_network_is_refused_where_lo_does_not_carry_it(tmp_path: Path):
    # A fresh network namespace without scripts/netns.sh's set-up: the box network is nowhere, so a
    # box there could only be reached through some other interface. The farm refuses it.
    probe = (
        "from vendorsim.boxes import BoxFarm, BoxError\n"
        "try:\n"
        f"    BoxFarm({str(tmp_path)!r}).ensure('b6', ssh_port=2222, user='ubuntu', authorized_key=None,"
        " sudo_password=None, ssh_host='198.18.9.9')\n"
        "except BoxError as error:\n"
        "    print(error)\n"
    )
    command = ["unshare", "--net", sys.executable, "-c", probe]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == (
        "box b6: ssh_host 198.18.9.9 is in the box network 198.18.0.0/15, which lo does not carry here: "
        "run vendorsim in its network namespace (scripts/netns.sh; scripts/vendorsim.sh does)"
    )


def test_a_port_already_taken_is_reported(farm: BoxFarm, keys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(BoxError) as err:
            make(farm, keys, ssh_port=port)
    assert str(err.value).startswith(f"box box1: sshd exited with status 255 on 127.0.0.1:{port}:")
    assert "Address already in use" in str(err.value)


def test_writes_land_in_the_sandbox_and_never_on_the_host(farm: BoxFarm, keys):
    info = make(farm, keys)
    before = sorted(os.listdir("/etc/sysctl.d"))
    out = ssh(
        info.ssh_port,
        keys["fleet"][0],
        (
            "echo x > /etc/sysctl.d/50-box.conf; mkdir -p /var/lib/kubelet /data/y; echo 1 > /opt/z; "
            "echo 1 > /proc/sys/net/ipv4/ip_forward 2>/dev/null || echo proc-sys-is-read-only; "
            "ls /etc/sysctl.d"
        ),
    )
    assert "proc-sys-is-read-only\n" in out.stdout and "50-box.conf" in out.stdout
    assert (info.sandbox_root / "etc/sysctl.d/50-box.conf").read_text() == "x\n"
    assert (info.sandbox_root / "var/lib/kubelet").is_dir()
    assert sorted(os.listdir("/etc/sysctl.d")) == before
    assert not Path("/var/lib/kubelet").exists() and not Path("/opt/z").exists()


def test_data_is_its_own_filesystem_only_when_declared(farm: BoxFarm, keys):
    probe = "mountpoint -q /data && echo mounted || echo plain; findmnt -n -o SOURCE /"
    plain = make(farm, keys, key="plain", data_is_separate=False)
    separate = make(farm, keys, key="separate", data_is_separate=True)
    assert ssh(plain.ssh_port, keys["fleet"][0], probe).stdout == "plain\nbox\n"
    assert ssh(separate.ssh_port, keys["fleet"][0], probe).stdout == "mounted\nbox\n"
    ssh(separate.ssh_port, keys["fleet"][0], "echo on-data > /data/f")
    assert (separate.data_disk / "f").read_text() == "on-data\n"


def test_bind_mounts_persist_across_sessions_until_reinstall(farm: BoxFarm, keys):
    info = make(farm, keys, data_is_separate=True)
    key = keys["fleet"][0]
    ssh(
        info.ssh_port,
        key,
        "sudo -S -p '' sh -c "
        "'mkdir -p /data/kubelet /var/lib/kubelet && mount --bind /data/kubelet /var/lib/kubelet'",
        stdin=SUDO_PASSWORD + "\n",
    )
    assert (
        ssh(info.ssh_port, key, "mountpoint /var/lib/kubelet").stdout == "/var/lib/kubelet is a mountpoint\n"
    )
    farm.reinstall("box1", user="ubuntu", authorized_key=keys["fleet"][1], sudo_password=None)
    after = ssh(info.ssh_port, key, "mkdir -p /var/lib/kubelet; mountpoint /var/lib/kubelet")
    assert after.stdout == "/var/lib/kubelet is not a mountpoint\n"


def test_sudo_needs_the_password_until_nopasswd_is_granted(farm: BoxFarm, keys):
    info = make(farm, keys)
    key = keys["fleet"][0]

    plain = ssh(info.ssh_port, key, "sudo id -u")
    assert (plain.returncode, plain.stderr) == (
        1,
        (
            "sudo: a terminal is required to read the password; either use the -S option to read from "
            "standard input or configure an askpass helper\nsudo: a password is required\n"
        ),
    )
    wrong = ssh(info.ssh_port, key, "sudo -S id -u", stdin="nope\nstill-nope\n")
    assert wrong.returncode == 1
    assert wrong.stderr == (
        "[sudo] password for ubuntu: Sorry, try again.\n[sudo] password for ubuntu: Sorry, try again.\n"
        "[sudo] password for ubuntu: \nsudo: 2 incorrect password attempts\n"
    )
    right = ssh(info.ssh_port, key, "sudo -S -p '' id -u", stdin=SUDO_PASSWORD + "\n")
    assert (right.returncode, right.stdout) == (0, "0\n")

    grant = ssh(
        info.ssh_port,
        key,
        "sudo -S -p '' sh -c "
        "\"echo 'ubuntu ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/90-ubuntu "
        '&& chmod 440 /etc/sudoers.d/90-ubuntu"',
        stdin=SUDO_PASSWORD + "\n",
    )
    assert grant.returncode == 0
    later = ssh(info.ssh_port, key, "sudo id -u; id -u")
    assert (later.returncode, later.stdout) == (0, "0\n1000\n")
    log = (info.sandbox_root / "var/log/sim-calls.log").read_text()
    assert SUDO_PASSWORD not in log and "still-nope" not in log
    assert "sudo id -u\n" in log


def test_a_world_writable_sudoers_file_is_ignored_as_sudo_does(farm: BoxFarm, keys):
    info = make(farm, keys, user="tuist")
    key = keys["fleet"][0]
    granted = ssh(
        info.ssh_port,
        key,
        "sudo -S -p '' sh -c \"echo 'tuist ALL=(ALL) NOPASSWD:ALL' "
        '> /etc/sudoers.d/90-tuist; chmod 666 /etc/sudoers.d/90-tuist"',
        user="tuist",
        stdin=SUDO_PASSWORD + "\n",
    )
    assert granted.returncode == 0
    out = ssh(info.ssh_port, key, "sudo -n true", user="tuist")
    assert out.returncode == 1
    assert out.stderr == "sudo: /etc/sudoers.d/90-tuist is world writable\nsudo: a password is required\n"


def test_stop_all_stops_every_sshd(farm: BoxFarm, keys):
    a = make(farm, keys, key="a")
    b = make(farm, keys, key="b")
    farm.stop_all()
    for info in (a, b):
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", info.ssh_port), timeout=1).close()


# --- hardware and services ------------------------------------------------------------------------

# A unit under the name the sandbox runs for real; /bin/sleep stands in for the kubelet here (the
# kubelet stand-in itself is exercised against a real control plane in tests/providers/ssh).
SLEEPER_UNIT = """[Unit]
Description=stand-in service for the farm tests
[Service]
ExecStart=/bin/sleep \\
    1000
Restart=always
RestartSec=1
"""


def install_sleeper(info, keys) -> None:
    script = (
        "cat > /etc/systemd/system/kubelet.service <<'EOF'\n" + SLEEPER_UNIT + "EOF\n"
        "systemctl daemon-reload && systemctl enable --now kubelet"
    )
    result = ssh(info.ssh_port, keys["fleet"][0], script, user="root")
    assert result.returncode == 0, result.stderr


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def wait_for(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_the_box_proc_shows_its_own_hardware(farm: BoxFarm, keys):
    info = make(farm, keys, hardware=Hardware(threads=16, memory_bytes=64 * 2**30))
    out = ssh(
        info.ssh_port, keys["fleet"][0], "grep -c ^processor /proc/cpuinfo; grep MemTotal /proc/meminfo"
    )
    # The kernel's share is not the DIMMs': 64 GiB less a 64th and 512 MiB (components/capacity.py).
    assert out.stdout == "16\nMemTotal:       65536000 kB\n"
    # Hardware survives a reinstall, as the disks do.
    info = farm.reinstall("box1", user="ubuntu", authorized_key=keys["fleet"][1], sudo_password=SUDO_PASSWORD)
    assert ssh(info.ssh_port, keys["fleet"][0], "grep -c ^processor /proc/cpuinfo").stdout == "16\n"


def test_hardware_must_be_positive(farm: BoxFarm, keys):
    with pytest.raises(BoxError) as err:
        make(farm, keys, hardware=Hardware(threads=0, memory_bytes=1))
    assert str(err.value) == "box box1: hardware threads=0 memory_bytes=1; both > 0"


def test_enable_now_runs_the_service_detached_and_sessions_join_its_namespace(farm: BoxFarm, keys):
    info = make(farm, keys, user="root")
    install_sleeper(info, keys)
    pid = farm.service_pid("box1")
    assert pid is not None
    # Detached: its own session, not under sshd.
    assert os.getsid(pid) == pid
    assert (
        ssh(info.ssh_port, keys["fleet"][0], "systemctl is-active kubelet", user="root").stdout == "active\n"
    )
    # A later session sees the box the service sees: one mount namespace, one filesystem.
    session_ns = ssh(
        info.ssh_port, keys["fleet"][0], "readlink /proc/self/ns/mnt", user="root"
    ).stdout.strip()
    assert session_ns == os.readlink(f"/proc/{pid}/ns/mnt")
    log = farm.service_log("box1").read_text()
    assert "sim-service: starting kubelet.service: /bin/sleep 1000" in log
    journal = ssh(info.ssh_port, keys["fleet"][0], "journalctl -u kubelet --no-pager", user="root").stdout
    assert journal == log


def test_the_service_restarts_after_restart_sec_when_it_exits(farm: BoxFarm, keys):
    info = make(farm, keys, user="root")
    install_sleeper(info, keys)
    supervisor = farm.service_pid("box1")
    assert supervisor is not None

    def services(but: int | None = None) -> list[int]:
        # The service's own process (`sleep 1000`): not the supervisor's short-lived children (the
        # $(date) of its log lines, its `sleep 1` before a restart).
        found = []
        for c in children_of(supervisor):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{c}/cmdline").read_bytes().split(b"\0")[:2] == [b"/bin/sleep", b"1000"]:
                    found.append(c)
        return [c for c in found if c != but]

    (first,) = wait_for(services)
    os.kill(first, signal.SIGKILL)
    (second,) = wait_for(lambda: services(but=first))
    assert second != first
    wait_for(
        lambda: (
            "kubelet.service exited with status 137; restarting in 1s" in farm.service_log("box1").read_text()
        )
    )
    assert (
        ssh(info.ssh_port, keys["fleet"][0], "systemctl is-active kubelet", user="root").stdout == "active\n"
    )


@pytest.mark.parametrize("how", ["reinstall", "rescue", "stop", "stop_all"])
def test_the_service_stops_when_the_box_is_reinstalled_rescued_or_stopped(farm: BoxFarm, keys, how: str):
    info = make(farm, keys, user="root")
    install_sleeper(info, keys)
    supervisor = farm.service_pid("box1")
    assert supervisor is not None
    (child,) = wait_for(lambda: children_of(supervisor))
    if how == "reinstall":
        farm.reinstall("box1", user="root", authorized_key=keys["fleet"][1], sudo_password=None)
    elif how == "rescue":
        farm.boot_rescue("box1", authorized_key=keys["fleet"][1])
    elif how == "stop":
        farm.stop("box1")
    else:
        farm.stop_all()
    for pid in (supervisor, child):
        assert (
            not Path(f"/proc/{pid}").exists()
            or Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
        )
    assert farm.service_pid("box1") is None


def test_a_box_that_boots_starts_its_enabled_service_again(farm: BoxFarm, keys):
    info = make(farm, keys, user="root")
    install_sleeper(info, keys)
    farm.stop("box1")
    assert farm.service_pid("box1") is None
    # Powered on again (vendorsim restarting, say): systemd starts what is enabled.
    make(farm, keys, user="root", ssh_port=info.ssh_port)
    assert farm.service_pid("box1") is not None
    assert (
        ssh(info.ssh_port, keys["fleet"][0], "systemctl is-active kubelet", user="root").stdout == "active\n"
    )
    # A reboot out of the installed OS boots it as well.
    farm.reboot("box1", new_host_key=False)
    assert farm.service_pid("box1") is not None


def test_reap_orphans_kills_services_a_killed_vendorsim_left_behind(farm: BoxFarm, keys):
    info = make(farm, keys, user="root")
    install_sleeper(info, keys)
    supervisor = farm.service_pid("box1")
    assert supervisor is not None
    killed = reap_orphans(farm.state_dir)
    assert supervisor in killed
    wait_for(
        lambda: (
            not Path(f"/proc/{supervisor}").exists()
            or "Z" in Path(f"/proc/{supervisor}/stat").read_text().split(") ")[1][:1]
        )
    )
    assert info is not None
