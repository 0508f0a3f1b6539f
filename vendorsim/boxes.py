"""Simulated bare-metal boxes that answer SSH: a real OpenSSH sshd per box, commands run in a sandbox.

Each box lives in `<state_dir>/<box_key>/`:

    box.env            login user and the sudo password's salted hash, read by the sandbox shims
    ssh/               sshd_config, host key, authorized_keys, nss_wrapper passwd/group, pid, log
    system/root/       the box's disk: the installed OS, the writable overlay layer over the host's /
    system/work/       (see sandbox/login.sh); one directory so installimage can mount it as a whole
    rescue/            while the box runs Robot's rescue system: that system's RAM (root/, work/)
    boot               "rescue" while the rescue system runs (login.sh reads it)
    system-ssh/        the installed OS's SSH identity (host key, keys, user), kept while rescue runs
    hardware/disks     "<name> <bytes>" lines: the box's disks, as lsblk in the box lists them
    hardware/cpuinfo   the box's CPU threads and memory, bound over /proc/cpuinfo and /proc/meminfo
    hardware/meminfo   in the box (as lxcfs does), where the kubelet stand-in reads its capacity
    disks/data/        /data's own filesystem, mounted only when the `data-is-separate` flag file exists

Why this shape: the login user (ubuntu, tuist, root) must exist for sshd without creating users on the
host, so sshd runs under libnss-wrapper with a per-box passwd file mapping that user to uid 0 and key
auth only (PermitRootLogin prohibit-password). Every session is forced through sandbox/login.sh, which
enters a private mount namespace where / is an overlay with the box's disk on top: the script really
runs in bash and really writes files, all of them into the box. sshd itself runs in a mount namespace
with its own /run (it needs /run/sshd), so nothing on the host changes. StrictModes is off because the
state dir may sit under a world-writable /tmp.

Services: `systemctl enable --now kubelet` in a box really starts the kubelet stand-in
(sandbox/shims/systemctl, sim-service), detached from the SSH session, in the box's namespace; its
supervisor's pid is <disk>/var/lib/sim/systemd/kubelet.service.pid and its output the box's
/var/log/kubelet.log (`journalctl -u kubelet` in the box). The farm stops every service of a box
before a reinstall, a rescue boot, a reboot or a stop, and starts the enabled ones when the box
boots (its sshd starts), as systemd would.

A reinstall wipes the disk and generates a new host key, as a real reinstall does. A rescue boot keeps
the disk and runs a fresh rescue system (new host key, root with the rescue keys); the sandbox's
installimage lays a new OS down on the disk from there, and a reboot boots whatever the disk holds.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import ipaddress
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from vendorsim import macos_disk

SANDBOX_DIR = Path(__file__).resolve().parent / "sandbox"
LOGIN_WRAPPER = SANDBOX_DIR / "login.sh"
SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = Path("/usr/bin/ssh-keygen")
NSS_WRAPPER = Path("/usr/lib/x86_64-linux-gnu/libnss_wrapper.so")

_BOX_KEY = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_PUBLIC_KEY = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+( .*)?$")
_DISK_NAME = re.compile(r"^(nvme[0-9]+n[0-9]+|sd[a-z]+|vd[a-z]+)$")
# What cloud-init writes on a real Ubuntu cloud image for its default user.
CLOUD_INIT_SUDOERS = "etc/sudoers.d/90-cloud-init-users"
# What BoxFarm.reset compares to tell a box nobody used since the last reset.
_RESET_STAMP = "reset.stamp"
# The installimage shim's mark, in the rescue system: an install finished since this rescue boot.
INSTALLIMAGE_DONE = "var/lib/sim/installimage.done"


class BoxError(RuntimeError):
    """A simulated box could not be created, started or read."""


@dataclass(frozen=True)
class BoxInfo:
    ssh_port: int
    host_key_fingerprint: str  # "SHA256:<base64, unpadded>", as ssh-keygen -l prints it
    host_public_key: str  # OpenSSH line: "ssh-ed25519 AAAA..."
    sandbox_root: Path  # the running system's writable layer: what the box wrote, at its own paths
    data_disk: Path  # /data's own filesystem when the box has one
    disk_root: Path  # the installed OS on the box's disk (the same as sandbox_root unless in rescue)
    in_rescue: bool = False
    ssh_host: str = "127.0.0.1"  # the address sshd listens on: the box's own public IPv4 in vendorsim


@dataclass(frozen=True)
class Disk:
    name: str  # nvme0n1, sda, ...
    size: int  # bytes


@dataclass(frozen=True)
class Hardware:
    """What the box's /proc says about it: CPU threads and memory (the kubelet's capacity)."""

    threads: int
    memory_bytes: int


# Where boxes get their public IPv4s besides loopback: RFC 2544's benchmarking range, which
# scripts/netns.sh puts on the lo of the simulated world's network namespace. The apiserver accepts
# these in EndpointSlices (it refuses loopback ones), and they are never routed anywhere.
BOX_NETWORK = ipaddress.IPv4Network("198.18.0.0/15")

# Services the sandbox's systemctl really runs (sandbox/shims/systemctl RUNNABLE).
RUNNABLE_UNITS = ("kubelet.service",)


def _install_host_key(ssh_dir: Path, pem: str, comment: str) -> None:
    """Make `pem` (an ed25519 OpenSSH private key) the box's sshd host key."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_ssh_private_key(pem.encode(), password=None)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    private = ssh_dir / "ssh_host_ed25519_key"
    private.write_text(pem)
    private.chmod(0o600)
    (ssh_dir / "ssh_host_ed25519_key.pub").write_text(f"{public.decode()} {comment}\n")


def fingerprint_of(public_key_line: str) -> str:
    """OpenSSH SHA256 fingerprint of a public key line."""
    blob = base64.b64decode(public_key_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


class BoxFarm:
    def __init__(self, state_dir: Path, *, cpu_budget: Path | None = None) -> None:
        """`cpu_budget`: the cgroup file (vendorsim/cpu_budget.py) every box's sshd, so everything
        the box runs (sessions, scripts, its kubelet), joins as it starts; None: no budget."""
        self.cpu_budget = cpu_budget
        self.state_dir = Path(state_dir).resolve()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # One lock per box: operations on one box are serialized, boxes go side by side (a reset
        # reinstalls every box at once). `_lock` guards only the two dicts.
        self._lock = threading.Lock()
        self._box_locks: dict[str, threading.Lock] = {}
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    # --- public API ---------------------------------------------------------------------------------

    def ensure(
        self,
        box_key: str,
        *,
        ssh_port: int,
        user: str,
        authorized_key: str | None,
        sudo_password: str | None,
        data_is_separate: bool | None = None,
        disks: Sequence[Disk] | None = None,
        ssh_host: str = "127.0.0.1",
        platform: Mapping[str, object] | None = None,
        hardware: Hardware | None = None,
    ) -> BoxInfo:
        """Create the box if missing (fresh OS, given key and sudo password) and start its sshd on
        `ssh_host`:`ssh_port` (vendorsim gives each box an address of its own in BOX_NETWORK).

        An existing box keeps its disk, host key, user and keys: only a reinstall changes those.
        `disks` and `hardware` are hardware: they survive reinstalls and rescue boots. Without
        `hardware`, the box's /proc shows the host's CPUs and memory. `platform`
        (vendorsim/macos_disk.py) makes the box a Mac: macOS laid down on its disk, macOS tools on
        its PATH.
        """
        box = self._box_dir(box_key)
        _check_port(box_key, ssh_port)
        _check_host(box_key, ssh_host)
        with self._box_lock(box_key):
            if disks is not None:
                _write_disks(box_key, box, disks)
            if platform is not None:
                macos_disk.write_platform(box, platform)
            if hardware is not None:
                _write_hardware(box_key, box, hardware)
            if not (box / "ssh" / "ssh_host_ed25519_key").exists():
                self._install(box_key, user=user, authorized_key=authorized_key, sudo_password=sudo_password)
            if data_is_separate is not None:
                self._set_data_separate(box, data_is_separate)
            if self._running_pid(box) is None or self._configured_endpoint(box) != (ssh_host, ssh_port):
                self._stop(box_key)
                self._write_sshd_config(box_key, ssh_host, ssh_port)
                self._start(box_key)
            return self._info(box_key)

    def reinstall(
        self,
        box_key: str,
        *,
        user: str,
        authorized_key: str | None,
        sudo_password: str | None,
        data_is_separate: bool | None = None,
        nopasswd_sudo: bool = False,
        platform: Mapping[str, object] | None = None,
    ) -> BoxInfo:
        """Wipe the box's disk, give it a new host key, the fleet key and the sudo password; restart sshd.

        `nopasswd_sudo` grants the login user passwordless sudo as cloud-init does on an OVH Ubuntu
        install (/etc/sudoers.d/90-cloud-init-users). `platform`, when given, is the image installed
        now (a Mac reinstalled with another macOS)."""
        with self._box_lock(box_key):
            return self._reinstall(
                box_key,
                user=user,
                authorized_key=authorized_key,
                sudo_password=sudo_password,
                data_is_separate=data_is_separate,
                nopasswd_sudo=nopasswd_sudo,
                platform=platform,
            )

    def reset(
        self,
        box_key: str,
        *,
        user: str,
        authorized_key: str | None,
        sudo_password: str | None,
        platform: Mapping[str, object] | None = None,
    ) -> BoxInfo:
        """vendorsim's admin reset of one box: `reinstall` with these (the prep key and password),
        unless the box is exactly as the last reset left it: the same sshd process, no session since
        (login.sh opens <box>/session.lock for each), every file of its disk and identity as it was,
        the same prep. Then there is nothing to undo; a suite that resets before each test would
        otherwise reinstall every box to undo the one or two its last test used."""
        box = self._box_dir(box_key)
        prep = hashlib.sha256(
            json.dumps([user, authorized_key, sudo_password, platform], sort_keys=True, default=str).encode()
        ).hexdigest()
        stamp = box / _RESET_STAMP
        with self._box_lock(box_key):
            recorded = stamp.read_text() if stamp.exists() else None
            if recorded is not None and recorded == self._reset_state(box, prep):
                return self._info(box_key)
            stamp.unlink(missing_ok=True)
            info = self._reinstall(
                box_key,
                user=user,
                authorized_key=authorized_key,
                sudo_password=sudo_password,
                platform=platform,
            )
            state = self._reset_state(box, prep)
            if state is not None:
                stamp.write_text(state)
            return info

    def _reset_state(self, box: Path, prep: str) -> str | None:
        """What `reset` compares: the prep, sshd's pid, when the last session began, and every file of
        the box (contents, not times: ensure() rewrites the hardware files unchanged). None when sshd
        is down."""
        pid = self._running_pid(box)
        if pid is None:
            return None
        digest = hashlib.sha256(f"{prep} {pid}".encode())
        lock = box / "session.lock"
        digest.update(f" session {lock.stat().st_mtime_ns if lock.exists() else '-'}".encode())
        skip = {box / "merged", box / _RESET_STAMP, lock, box / "ssh" / "sshd.log", box / "ssh" / "sshd.pid"}
        for path in sorted(_walk(box, skip)):
            rel = path.relative_to(box)
            if path.is_symlink():
                digest.update(f"\0{rel} -> {os.readlink(path)}".encode())
            elif path.is_dir():
                digest.update(f"\0{rel}/".encode())
            else:
                digest.update(f"\0{rel} ".encode())
                try:
                    digest.update(path.read_bytes())
                except OSError:
                    digest.update(b"<unreadable>")
        return digest.hexdigest()

    def _reinstall(
        self,
        box_key: str,
        *,
        user: str,
        authorized_key: str | None,
        sudo_password: str | None,
        data_is_separate: bool | None = None,
        nopasswd_sudo: bool = False,
        platform: Mapping[str, object] | None = None,
    ) -> BoxInfo:
        box = self._box_dir(box_key)
        endpoint = self._configured_endpoint(box)
        if endpoint is None:
            raise BoxError(f"box {box_key}: cannot reinstall a box that was never created (ensure first)")
        self._stop(box_key)
        (box / _RESET_STAMP).unlink(missing_ok=True)
        if platform is not None:
            macos_disk.write_platform(box, platform)
        separate = (box / "data-is-separate").exists() if data_is_separate is None else data_is_separate
        for part in (*_OS_PARTS, "disks", "data-is-separate"):
            _remove(box / part)
        self._install(box_key, user=user, authorized_key=authorized_key, sudo_password=sudo_password)
        if nopasswd_sudo:
            sudoers = box / "system" / "root" / CLOUD_INIT_SUDOERS
            sudoers.write_text(f"# Created by cloud-init\n{user} ALL=(ALL) NOPASSWD:ALL\n")
            sudoers.chmod(0o440)
        self._set_data_separate(box, separate)
        self._write_sshd_config(box_key, *endpoint)
        self._start(box_key)
        return self._info(box_key)

    def boot_rescue(
        self, box_key: str, *, authorized_key: str | None, host_key_pem: str | None = None
    ) -> BoxInfo:
        """Boot Robot's rescue system: a fresh system in RAM (new host key, root with `authorized_key`,
        also in /root/.ssh/authorized_keys for installimage to copy), the disk left as it is.
        `host_key_pem`: the ed25519 host key (OpenSSH PEM) Robot announced when the rescue boot was
        armed; without it a new one is made."""
        box = self._box_dir(box_key)
        with self._box_lock(box_key):
            endpoint = self._configured_endpoint(box)
            if endpoint is None:
                raise BoxError(f"box {box_key}: cannot boot a box that was never created (ensure first)")
            key_line = _check_key(box_key, authorized_key)
            self._stop(box_key)
            if not self._in_rescue(box):
                # The installed OS's identity comes back if the box reboots without an install.
                _remove(box / "system-ssh")
                shutil.copytree(box / "ssh", box / "system-ssh", ignore=shutil.ignore_patterns("sshd.*"))
                shutil.copy2(box / "box.env", box / "system-ssh" / "box.env")
            _remove(box / "rescue")
            for part in ("rescue/root", "rescue/work"):
                (box / part).mkdir(parents=True)
            self._write_identity(
                box_key, user="root", key_line=key_line, sudo_password=None, new_host_key=True
            )
            if host_key_pem is not None:
                _install_host_key(box / "ssh", host_key_pem, f"root@{box_key}")
            _seed_os(box / "rescue" / "root", "rescue")
            ssh_dir = box / "rescue" / "root" / "root" / ".ssh"
            ssh_dir.mkdir(parents=True)
            (ssh_dir / "authorized_keys").write_text(key_line + "\n" if key_line else "")
            (box / "boot").write_text("rescue\n")
            self._write_sshd_config(box_key, *endpoint)
            self._start(box_key)
            return self._info(box_key)

    def reboot(self, box_key: str, *, new_host_key: bool) -> BoxInfo:
        """Reset the box: it boots the OS on its disk, which is kept as it is.

        Out of the rescue system, the installed OS comes back with its own SSH identity, unless
        `new_host_key`: then the disk holds a fresh install (installimage), which boots with a new host
        key and root's keys from the disk's /root/.ssh/authorized_keys, as installimage copied them."""
        box = self._box_dir(box_key)
        with self._box_lock(box_key):
            endpoint = self._configured_endpoint(box)
            if endpoint is None:
                raise BoxError(f"box {box_key}: cannot reboot a box that was never created (ensure first)")
            self._stop(box_key)
            was_rescue = self._in_rescue(box)
            _remove(box / "rescue")
            (box / "boot").unlink(missing_ok=True)
            if new_host_key:
                keys = box / "system" / "root" / "root" / ".ssh" / "authorized_keys"
                key_lines = keys.read_text().strip() if keys.exists() else ""
                self._write_identity(
                    box_key, user="root", key_line=key_lines, sudo_password=None, new_host_key=True
                )
            elif was_rescue and (box / "system-ssh").is_dir():
                saved = box / "system-ssh"
                shutil.copy2(saved / "box.env", box / "box.env")
                for item in saved.iterdir():
                    if item.name != "box.env":
                        shutil.copy2(item, box / "ssh" / item.name)
            _remove(box / "system-ssh")
            self._write_sshd_config(box_key, *endpoint)
            self._start(box_key)
            return self._info(box_key)

    def installed_in_rescue(self, box_key: str) -> bool:
        """Whether installimage finished in the rescue system running now (the next reboot boots it)."""
        box = self._box_dir(box_key)
        return self._in_rescue(box) and (box / "rescue" / "root" / INSTALLIMAGE_DONE).exists()

    def info(self, box_key: str) -> BoxInfo:
        with self._box_lock(box_key):
            return self._info(box_key)

    def is_running(self, box_key: str) -> bool:
        return self._running_pid(self._box_dir(box_key)) is not None

    def service_pid(self, box_key: str, unit: str = "kubelet.service") -> int | None:
        """The pid of the supervisor running `unit` in the box, or None when it does not run."""
        box = self._box_dir(box_key)
        return next((pid for u, pid in _service_pids(box) if u == unit), None)

    def service_log(self, box_key: str, unit: str = "kubelet.service") -> Path:
        """The box's log of `unit` (what `journalctl -u` shows in the box), on the host."""
        return self.info(box_key).sandbox_root / "var" / "log" / f"{unit.removesuffix('.service')}.log"

    def stop(self, box_key: str) -> None:
        with self._box_lock(box_key):
            self._stop(box_key)

    def stop_all(self) -> None:
        for box in sorted(p for p in self.state_dir.iterdir() if (p / "ssh").is_dir()):
            with self._box_lock(box.name):
                self._stop(box.name)
        reap_orphans(self.state_dir)

    def _box_lock(self, box_key: str) -> threading.Lock:
        with self._lock:
            return self._box_locks.setdefault(box_key, threading.Lock())

    # --- layout -------------------------------------------------------------------------------------

    def _box_dir(self, box_key: str) -> Path:
        if not _BOX_KEY.match(box_key):
            raise BoxError(f"box key {box_key!r} is not a valid box name (a-z, 0-9, '.', '_', '-')")
        return self.state_dir / box_key

    def _info(self, box_key: str) -> BoxInfo:
        box = self._box_dir(box_key)
        pub_path = box / "ssh" / "ssh_host_ed25519_key.pub"
        endpoint = self._configured_endpoint(box)
        if endpoint is None or not pub_path.exists():
            raise BoxError(f"box {box_key}: no such box in {self.state_dir}")
        host, port = endpoint
        public_key = " ".join(pub_path.read_text().split()[:2])
        rescue = self._in_rescue(box)
        return BoxInfo(
            ssh_port=port,
            ssh_host=host,
            host_key_fingerprint=fingerprint_of(public_key),
            host_public_key=public_key,
            sandbox_root=box / ("rescue" if rescue else "system") / "root",
            data_disk=box / "disks" / "data",
            disk_root=box / "system" / "root",
            in_rescue=rescue,
        )

    @staticmethod
    def _in_rescue(box: Path) -> bool:
        boot = box / "boot"
        return boot.exists() and boot.read_text().strip() == "rescue"

    @staticmethod
    def _configured_endpoint(box: Path) -> tuple[str, int] | None:
        """(ListenAddress, Port) of the box's sshd_config; None before the box exists."""
        config = box / "ssh" / "sshd_config"
        if not config.exists():
            return None
        text = config.read_text()
        port = re.search(r"^Port (\d+)$", text, re.MULTILINE)
        host = re.search(r"^ListenAddress (\S+)$", text, re.MULTILINE)
        return (host.group(1), int(port.group(1))) if port and host else None

    @staticmethod
    def _set_data_separate(box: Path, separate: bool) -> None:
        flag = box / "data-is-separate"
        if separate:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)

    # --- install: a fresh OS on the box -------------------------------------------------------------

    def _install(
        self, box_key: str, *, user: str, authorized_key: str | None, sudo_password: str | None
    ) -> None:
        key_line = _check_key(box_key, authorized_key)
        box = self._box_dir(box_key)
        (box / "home").mkdir(parents=True, exist_ok=True)
        for part in ("system/root", "system/work", "merged", "disks/data"):
            (box / part).mkdir(parents=True, exist_ok=True)
        self._write_identity(
            box_key, user=user, key_line=key_line, sudo_password=sudo_password, new_host_key=True
        )
        if macos_disk.is_macos(box):
            try:
                platform = macos_disk.read_platform(box)
                macos_disk.lay_down(box / "system" / "root", box_key=box_key, user=user, platform=platform)
            except RuntimeError as e:
                raise BoxError(f"box {box_key}: {e}") from None
        else:
            _seed_os(box / "system" / "root", box_key)

    def _write_identity(
        self, box_key: str, *, user: str, key_line: str, sudo_password: str | None, new_host_key: bool
    ) -> None:
        """The running system's SSH side: host key, authorized keys, login user, sudo password hash."""
        if not _USER.match(user):
            raise BoxError(f"box {box_key}: login user {user!r} is not a valid user name")
        box = self._box_dir(box_key)
        ssh_dir = box / "ssh"
        ssh_dir.mkdir(parents=True, exist_ok=True)
        if new_host_key:
            for name in ("ssh_host_ed25519_key", "ssh_host_ed25519_key.pub"):
                (ssh_dir / name).unlink(missing_ok=True)
            subprocess.run(
                [
                    str(SSH_KEYGEN),
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    f"root@{box_key}",
                    "-f",
                    str(ssh_dir / "ssh_host_ed25519_key"),
                ],
                check=True,
                capture_output=True,
            )
        (ssh_dir / "authorized_keys").write_text(key_line + "\n" if key_line else "")

        try:
            privsep = pwd.getpwnam("sshd")
        except KeyError:
            raise BoxError("the host has no 'sshd' user: install Debian's openssh-server") from None
        home = box / "home"
        passwd = [f"{user}:x:0:0:{user}:{home}:/bin/bash"]
        if user != "root":
            passwd.append(f"root:x:0:0:root:{home}:/bin/bash")
        passwd.append(f"sshd:x:{privsep.pw_uid}:65534::/run/sshd:/usr/sbin/nologin")
        passwd.append("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin")
        (ssh_dir / "passwd").write_text("\n".join(passwd) + "\n")
        (ssh_dir / "group").write_text("root:x:0:\nnogroup:x:65534:\n")

        salt, digest = "", ""
        if sudo_password:
            salt = secrets.token_hex(16)
            digest = hashlib.sha256((salt + sudo_password).encode()).hexdigest()
        env_path = box / "box.env"
        env_path.write_text(f"SIM_USER={user}\nSIM_SUDO_SALT={salt}\nSIM_SUDO_HASH={digest}\n")
        env_path.chmod(0o600)

    def _write_sshd_config(self, box_key: str, host: str, port: int) -> None:
        box = self._box_dir(box_key)
        ssh_dir = box / "ssh"
        user = _read_env(box / "box.env")["SIM_USER"]
        (ssh_dir / "sshd_config").write_text(
            "\n".join(
                [
                    f"# sshd of simulated box {box_key} (vendorsim/boxes.py)",
                    f"Port {port}",
                    f"ListenAddress {host}",
                    f"HostKey {ssh_dir / 'ssh_host_ed25519_key'}",
                    f"PidFile {ssh_dir / 'sshd.pid'}",
                    f"AuthorizedKeysFile {ssh_dir / 'authorized_keys'}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "UsePAM no",
                    "StrictModes no",
                    f"AllowUsers {user}",
                    f"ForceCommand {LOGIN_WRAPPER} {box}",
                    "PermitUserEnvironment no",
                    "AllowTcpForwarding no",
                    "AllowAgentForwarding no",
                    "X11Forwarding no",
                    "PermitTTY no",
                    "PrintMotd no",
                    "PrintLastLog no",
                    "UseDNS no",
                    "MaxStartups 64:30:128",
                    "LogLevel INFO",
                    "",
                ]
            )
        )

    # --- sshd process -------------------------------------------------------------------------------

    def _start(self, box_key: str) -> None:
        box = self._box_dir(box_key)
        ssh_dir = box / "ssh"
        endpoint = self._configured_endpoint(box)
        assert endpoint is not None
        host, port = endpoint
        for binary in (SSHD, NSS_WRAPPER):
            if not binary.exists():
                raise BoxError(f"{binary} is missing: install Debian's openssh-server and libnss-wrapper")
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "LD_PRELOAD": str(NSS_WRAPPER),
            "NSS_WRAPPER_PASSWD": str(ssh_dir / "passwd"),
            "NSS_WRAPPER_GROUP": str(ssh_dir / "group"),
        }
        # sshd insists on /run/sshd for privilege separation: give it a /run of its own.
        argv = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "/bin/sh",
            "-c",
            'mount -t tmpfs -o mode=755 tmpfs /run && mkdir -m 755 /run/sshd && exec "$0" "$@"',
            str(SSHD),
            "-D",
            "-e",
            "-f",
            str(ssh_dir / "sshd_config"),
        ]
        (ssh_dir / "sshd.pid").unlink(missing_ok=True)
        with open(ssh_dir / "sshd.log", "ab") as log:
            proc = subprocess.Popen(
                self._budgeted(argv),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        with self._lock:
            self._children[box_key] = proc
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = (ssh_dir / "sshd.log").read_text(errors="replace")[-1500:]
                raise BoxError(
                    f"box {box_key}: sshd exited with status {proc.returncode} on {host}:{port}:\n{tail}"
                )
            if _answers_ssh(host, port):
                self._boot_services(box_key)
                return
            time.sleep(0.02)
        self._stop(box_key)
        raise BoxError(f"box {box_key}: sshd did not answer on {host}:{port} within 10s")

    def _boot_services(self, box_key: str) -> None:
        """Start the services enabled on the installed OS, as systemd does when the box boots."""
        box = self._box_dir(box_key)
        if self._in_rescue(box):
            return
        enabled = box / "system" / "root" / "var" / "lib" / "sim" / "systemd" / "enabled"
        units = enabled.read_text().split() if enabled.exists() else []
        if not any(u in RUNNABLE_UNITS for u in units):
            return
        result = subprocess.run(
            self._budgeted([str(LOGIN_WRAPPER), str(box), "--boot"]),
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            raise BoxError(
                f"box {box_key}: starting its enabled services failed (exit {result.returncode}): "
                + result.stderr.decode(errors="replace")[-800:]
            )

    def _budgeted(self, argv: list[str]) -> list[str]:
        if self.cpu_budget is None:
            return argv
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.cpu_budget), *argv]

    def _running_pid(self, box: Path) -> int | None:
        pid_file = box / "ssh" / "sshd.pid"
        try:
            pid = int(pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        # sshd rewrites its process title, so look for the config path anywhere in it.
        return pid if str(box / "ssh" / "sshd_config").encode() in cmdline else None

    def _stop(self, box_key: str) -> None:
        """Stop the box's services, its sshd and every session under it (a reinstall, a rescue boot, a
        reboot or a stop must not leave one running)."""
        box = self._box_dir(box_key)
        (box / _RESET_STAMP).unlink(missing_ok=True)
        _stop_services(box)
        pid = self._running_pid(box)
        with self._lock:
            child = self._children.pop(box_key, None)
        if pid is None and child is not None and child.poll() is None:
            pid = child.pid
        if pid is not None:
            for victim in [*_descendants(pid), pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGKILL)
            _wait_gone(pid)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)
        (box / "ssh" / "sshd.pid").unlink(missing_ok=True)


# --- helpers ----------------------------------------------------------------------------------------


def reap_orphans(state_dir: Path) -> list[int]:
    """SIGKILL every sshd serving a box under `state_dir`, and every service a box runs, tracked or not.

    A vendorsim that was SIGKILLed leaves its boxes' sshd and kubelets running (they are in sessions
    of their own), holding the boxes' ports; the next start, and test teardowns, sweep them up here.
    """
    marker = str(state_dir.resolve()).encode() + b"/"
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker not in cmdline:
            continue
        pid = int(entry.name)
        if b"sim-service\0" in cmdline:
            # The supervisor and the service under it: one process group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
                killed.append(pid)
        elif b"sshd" in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed


def _service_pids(box: Path) -> list[tuple[str, int]]:
    """(unit, supervisor pid) of every service running in the box, on its disk or rescue system."""
    found = []
    for layer in ("system", "rescue"):
        for pid_file in sorted((box / layer / "root" / "var" / "lib" / "sim" / "systemd").glob("*.pid")):
            try:
                pid = int(pid_file.read_text().strip())
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except (OSError, ValueError):
                continue
            if f"sim-service\0{box}\0{pid_file.stem}\0".encode() in cmdline:
                found.append((pid_file.stem, pid))
    return found


def _stop_services(box: Path, timeout: float = 10.0) -> None:
    """SIGTERM each service's process group (the kubelet stops as on shutdown), SIGKILL what is left."""
    services = _service_pids(box)
    for _, pid in services:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for _, pid in services:
        _wait_gone(pid, max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        _wait_gone(pid)
    for layer in ("system", "rescue"):
        for pid_file in (box / layer / "root" / "var" / "lib" / "sim" / "systemd").glob("*.pid"):
            pid_file.unlink(missing_ok=True)


def _seed_os(root: Path, box_key: str) -> None:
    """What a fresh Ubuntu install leaves that the scripts touch (the rest shows through from the host)."""
    files = {
        "etc/hostname": f"{box_key}\n",
        "etc/fstab": "UUID=0a1b2c3d-sim / ext4 defaults 0 1\n/swap.img\tnone\tswap\tsw\t0\t0\n",
        "etc/netplan/50-cloud-init.yaml": (
            "network:\n  version: 2\n  ethernets:\n    enp3s0:\n      dhcp4: true\n"
        ),
        "var/log/sim-calls.log": "",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for rel in (
        "etc/sudoers.d",
        "etc/sysctl.d",
        "etc/modules-load.d",
        "etc/apt/sources.list.d",
        "var/lib/sim",
    ):
        (root / rel).mkdir(parents=True, exist_ok=True)


# What a reinstall wipes: the OS, its SSH identity and everything the rescue system left.
_OS_PARTS = ("system", "rescue", "boot", "system-ssh", "root", "work", "merged", "ssh", "home", "box.env")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _check_key(box_key: str, authorized_key: str | None) -> str:
    """The authorized key(s) as lines, each one an OpenSSH public key ("" for none)."""
    if authorized_key is None:
        return ""
    lines = [line.strip() for line in authorized_key.strip().splitlines() if line.strip()]
    for number, line in enumerate(lines, 1):
        if not _PUBLIC_KEY.match(line):
            raise BoxError(f"box {box_key}: authorized_key line {number} is not an OpenSSH public key")
    return "\n".join(lines)


def _write_disks(box_key: str, box: Path, disks: Sequence[Disk]) -> None:
    lines = []
    for disk in disks:
        if not _DISK_NAME.match(disk.name):
            raise BoxError(f"box {box_key}: disk name {disk.name!r} is not nvmeXnY, sdX or vdX")
        if disk.size <= 0:
            raise BoxError(f"box {box_key}: disk {disk.name} has size {disk.size}; sizes are bytes > 0")
        lines.append(f"{disk.name} {disk.size}")
    (box / "hardware").mkdir(parents=True, exist_ok=True)
    (box / "hardware" / "disks").write_text("".join(f"{line}\n" for line in lines))


def _write_hardware(box_key: str, box: Path, hardware: Hardware) -> None:
    if hardware.threads <= 0 or hardware.memory_bytes <= 0:
        raise BoxError(
            f"box {box_key}: hardware threads={hardware.threads} "
            f"memory_bytes={hardware.memory_bytes}; both > 0"
        )
    (box / "hardware").mkdir(parents=True, exist_ok=True)
    (box / "hardware" / "cpuinfo").write_text(
        "".join(f"processor\t: {i}\nmodel name\t: simulated\n\n" for i in range(hardware.threads))
    )
    mem_total = kernel_memory_kib(hardware.memory_bytes)
    (box / "hardware" / "meminfo").write_text(f"MemTotal:       {mem_total} kB\n")


def kernel_memory_kib(installed_bytes: int) -> int:
    """What a box's kernel reports as MemTotal: not the DIMMs, less the page descriptors (64 bytes per
    4 KiB page, a 64th) and about 512 MiB of firmware ranges, kernel image and crash kernel (a 64 GiB
    box reports about 62.5 GiB; components/capacity.py counts with the same)."""
    installed = installed_bytes // 1024
    return installed - installed // 64 - 512 * 1024


def _read_env(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k: v for k, v in pairs}


def _check_port(box_key: str, port: int) -> None:
    if not 1 <= port <= 65535:
        raise BoxError(f"box {box_key}: ssh_port {port} is not a TCP port")


def _check_host(box_key: str, host: str) -> None:
    # A box listens on loopback (Linux routes all of 127.0.0.0/8 to lo) or on the box network, which
    # scripts/netns.sh puts on the lo of a network namespace of its own. Never on an address another
    # interface carries: the simulated world stays on this machine.
    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        raise BoxError(f"box {box_key}: ssh_host {host!r} is not an IPv4 address") from None
    if address.is_loopback:
        return
    if address not in BOX_NETWORK:
        raise BoxError(
            f"box {box_key}: ssh_host {host} is neither a loopback address (127.0.0.0/8) nor in the box "
            f"network {BOX_NETWORK}"
        )
    if not _lo_seen_carrying and not _lo_carries_box_network_now():
        raise BoxError(
            f"box {box_key}: ssh_host {host} is in the box network {BOX_NETWORK}, which lo does not carry "
            "here: run vendorsim in its network namespace (scripts/netns.sh; scripts/vendorsim.sh does)"
        )


# Once lo is seen carrying the box network, the process's namespace keeps it: not asked again for each
# box (`ip` is a process of its own, and a reset ensures every box).
_lo_seen_carrying = False


def _lo_carries_box_network_now() -> bool:
    global _lo_seen_carrying
    _lo_seen_carrying = lo_carries_box_network()
    return _lo_seen_carrying


def lo_carries_box_network() -> bool:
    """True when this network namespace's lo carries BOX_NETWORK (scripts/netns.sh set it up)."""
    result = subprocess.run(
        ["ip", "-o", "-4", "addr", "show", "dev", "lo"], capture_output=True, text=True, check=False
    )
    networks = [
        ipaddress.IPv4Interface(fields[fields.index("inet") + 1]).network
        for fields in (line.split() for line in result.stdout.splitlines())
        if "inet" in fields
    ]
    return BOX_NETWORK in networks


def _answers_ssh(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as sock:
            sock.settimeout(0.5)
            return sock.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def _walk(root: Path, skip: set[Path]) -> list[Path]:
    found: list[Path] = []
    for directory, dirs, files in os.walk(root):
        here = Path(directory)
        dirs[:] = [d for d in dirs if here / d not in skip]
        found.extend(here / name for name in [*dirs, *files] if here / name not in skip)
    return found


def _descendants(pid: int) -> list[int]:
    """Every process under `pid`, read from the kernel's per-task children lists (a walk of the whole
    /proc costs tens of milliseconds per call on a machine running many boxes)."""
    found: list[int] = []
    queue = [pid]
    while queue:
        parent = queue.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:
            continue  # gone already
        for task in tasks:
            try:
                children = (task / "children").read_text().split()
            except FileNotFoundError:
                if not Path("/proc/self/task").joinpath(str(threading.get_native_id()), "children").exists():
                    return _descendants_by_scan(pid)  # a kernel without CONFIG_PROC_CHILDREN
                continue
            except OSError:
                continue
            for child in map(int, children):
                found.append(child)
                queue.append(child)
    return found


def _descendants_by_scan(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    queue = [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def _wait_gone(pid: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state == "Z":
            return
        time.sleep(0.01)
