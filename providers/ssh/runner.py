"""Run a shell script on a box over SSH (paramiko), with the box's host key pinned.

Trust on first use: with no pin, the host key seen is accepted and returned, and the caller keeps it
(in the resource's outputs) as the pin for every later call. A different key later is refused loudly,
never retried, unless the caller itself just reinstalled the box (`accept_new_host_key`), because a
reinstall gives a box a new host key. The key is checked right after the key exchange and before
authenticating, so the fleet key never signs anything for an impostor (hence a bare Transport rather
than SSHClient and a MissingHostKeyPolicy).

Secrets reach the box on the session's stdin only: never in the command line (visible in `ps` and in
sshd logs) and never as environment variables of the exec request. The remote command is a fixed
reader that takes one line per secret into shell variables, then runs the rest of stdin (the script):

    bash -c 'IFS= read -r SUDO_PASSWORD && IFS= read -r BOOTSTRAP_TOKEN && eval "$(cat)"'

`eval "$(cat)"`, not `source /dev/stdin`: macOS's /bin/bash is 3.2, whose `source` reads a pipe only as
far as its size says, which for a pipe is whatever happens to be buffered (often nothing).

No Pulumi import here: the dynamic providers call this.
"""

from __future__ import annotations

import hashlib
import io
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from providers.errors import InfraError, scrub
from providers.lazy import lazy_module

if TYPE_CHECKING:
    import paramiko
else:
    # The program imports this module through the machine providers but never opens a session.
    paramiko = lazy_module("paramiko")

OUTPUT_TAIL_CHARS = 2000
_SECRET_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")

T = TypeVar("T")

# Every transport this process has open, so a provider whose engine went away can close them all before
# it exits. That ends the sessions, not the scripts (no terminal, no SIGHUP): each is stopped on its box
# at its step's budget (bounded_command).
_OPEN: set[paramiko.Transport] = set()
_OPEN_LOCK = threading.Lock()


@dataclass(frozen=True)
class SshTarget:
    host: str
    port: int
    user: str

    def __str__(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


@dataclass(frozen=True)
class RunResult:
    host_key_fingerprint: str  # "SHA256:..."; keep it as the pin
    exit_status: int
    output_tail: str  # last OUTPUT_TAIL_CHARS of stdout+stderr, secrets replaced by ***


class SshError(InfraError):
    """Base of every error this module raises (under the project's one InfraError tree)."""


class HostKeyMismatchError(SshError):
    def __init__(self, target: SshTarget, expected: str, seen: str) -> None:
        self.target, self.expected, self.seen = target, expected, seen
        super().__init__(
            f"host key of {target.host}:{target.port} does not match its pin: expected {expected}, "
            f"seen {seen}. Refusing to connect: the box was reinstalled or someone is in the middle."
        )


class SshTimeoutError(SshError):
    def __init__(self, target: SshTarget, step: str, seconds: float) -> None:
        self.target, self.step, self.seconds = target, step, seconds
        super().__init__(f"{step} on {target} timed out after {seconds:g}s")


class SshConnectError(SshError):
    """The box could not be reached or logged into (after the retries, for transient errors)."""


class SshAuthError(SshConnectError):
    """The box answered but refused the key: not transient, so never retried."""


class RemoteCommandError(SshError):
    def __init__(self, target: SshTarget, step: str, exit_status: int, output_tail: str) -> None:
        self.target, self.step, self.exit_status, self.output_tail = target, step, exit_status, output_tail
        super().__init__(
            f"{step} on {target} failed with exit status {exit_status}; last output:\n{output_tail}"
        )


# --- keys and host-key pinning ------------------------------------------------------------------------


def load_private_key(private_key: str) -> paramiko.PKey:
    """A paramiko key from PEM / OpenSSH private key text (never from a path on disk)."""
    key_types: tuple[type[paramiko.PKey], ...] = (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey)
    for key_type in key_types:
        try:
            return key_type.from_private_key(io.StringIO(private_key))
        except (paramiko.SSHException, ValueError):
            continue
    # The text itself is secret: the message must not quote it.
    raise SshError("private_key is not an unencrypted Ed25519, ECDSA or RSA private key")


# --- public API ---------------------------------------------------------------------------------------


def run_script(
    target: SshTarget,
    script_path_or_text: str | Path,
    *,
    private_key: str,
    env_secrets: Mapping[str, str],
    expected_host_key: str | None,
    accept_new_host_key: bool = False,
    handshake_timeout: float = 30,
    step_timeout: float = 300,
    retries: int = 3,
    retry_delay: float = 30,
    step: str = "script",
) -> RunResult:
    """Run a bash script on the box; secrets arrive on stdin as shell variables named by their keys.

    `script_path_or_text` is a Path to a .sh file, or the script's text. Raises HostKeyMismatchError,
    SshTimeoutError, SshConnectError or RemoteCommandError; output in errors is scrubbed of secrets.
    """
    script = script_path_or_text.read_text() if isinstance(script_path_or_text, Path) else script_path_or_text
    for name, value in env_secrets.items():
        if not _SECRET_NAME.match(name):
            raise ValueError(f"env_secrets key {name!r} is not a shell variable name (A-Z, 0-9, _)")
        if "\n" in value or "\r" in value:
            raise ValueError(f"env_secrets[{name!r}] contains a line break; secrets travel one per line")
    reader = " && ".join([*(f"IFS= read -r {name}" for name in env_secrets), 'eval "$(cat)"'])
    command = bounded_command(f"bash -c '{reader}'", step_timeout)
    stdin = "".join(f"{value}\n" for value in env_secrets.values()) + script
    pkey = load_private_key(private_key)
    secrets = [v for v in env_secrets.values() if v]

    def attempt() -> RunResult:
        transport, fingerprint = _connect(
            target, pkey, expected_host_key, accept_new_host_key, handshake_timeout
        )
        started = time.monotonic()
        try:
            status, output = _exec(transport, target, command, stdin.encode(), step, step_timeout)
        finally:
            transport.close()
        tail = scrub(output, secrets, limit=None)[-OUTPUT_TAIL_CHARS:]
        # timeout's statuses, once the box's budget is spent: it stopped the script. Earlier, they are
        # the script's own (a nested timeout, a child the kernel killed), and fail it as any other.
        if status in (124, 137) and time.monotonic() - started >= remote_budget(step_timeout)[0]:
            raise SshTimeoutError(target, step, step_timeout)
        if status != 0:
            raise RemoteCommandError(target, step, status, tail)
        return RunResult(host_key_fingerprint=fingerprint, exit_status=status, output_tail=tail)

    return _with_retries(attempt, target, retries, retry_delay)


# A step's remote script is stopped on the box before this side gives up on it: TERM to its whole process
# group (apt, dpkg, installimage and all), KILL this long after. Closing the session alone stops nothing
# (no terminal, so no SIGHUP), and the state machine runs a timed-out step again: the old run must not
# be there beside the new one.
REMOTE_KILL_AFTER = 10


def remote_budget(step_timeout: float) -> tuple[int, int]:
    """(seconds until TERM, seconds from TERM to KILL) on the box: both land before `step_timeout`
    runs out here (by 2 s), whatever its size."""
    kill_after = min(REMOTE_KILL_AFTER, max(1, int(step_timeout // 10)))
    return max(1, int(step_timeout) - kill_after - 2), kill_after


def bounded_command(command: str, step_timeout: float) -> str:
    """`command` under coreutils' timeout where the box has it (every Linux box and rescue system; a Mac
    has none, and runs it as it is). Not exec'd: timeout's KILL reaches its own process group, itself
    included, and the login shell left outside it reports that as status 137."""
    term, kill_after = remote_budget(step_timeout)
    return (
        "if command -v timeout >/dev/null 2>&1; then "
        f"timeout -k {kill_after} {term} {command}; exit $?; else exec {command}; fi"
    )


def fetch_host_key(target: SshTarget, timeout: float = 30) -> str:
    """The box's host key fingerprint, from a key exchange without logging in."""
    return fetch_host_key_forms(target, timeout)[0]


def fetch_host_key_forms(target: SshTarget, timeout: float = 30) -> tuple[str, str]:
    """The box's host key fingerprint in both forms a vendor may announce it in, from a key exchange
    without logging in: ("SHA256:<base64>", "MD5:<hex:pairs>"), as ssh-keygen -l prints them."""
    transport, host_key = _handshake(target, timeout)
    transport.close()
    digest = hashlib.md5(host_key.asbytes(), usedforsecurity=False).hexdigest()
    return host_key.fingerprint, "MD5:" + ":".join(digest[i : i + 2] for i in range(0, 32, 2))


def close_all_sessions() -> int:
    """Close every SSH transport this process has open; returns how many there were."""
    with _OPEN_LOCK:
        transports = list(_OPEN)
        _OPEN.clear()
    for transport in transports:
        transport.close()
    return len(transports)


# --- internals ----------------------------------------------------------------------------------------


def _open_socket(target: SshTarget, timeout: float) -> socket.socket:
    try:
        return socket.create_connection((target.host, target.port), timeout=timeout)
    except TimeoutError:
        raise SshTimeoutError(target, "tcp connect", timeout) from None
    except OSError as e:
        raise SshConnectError(f"cannot reach {target}: {e.strerror or e}") from None


def _is_timeout(e: BaseException) -> bool:
    return (
        isinstance(e, (TimeoutError, socket.timeout))
        or "timeout" in str(e).lower()
        or ("banner" in str(e).lower())
    )


def _handshake(target: SshTarget, timeout: float) -> tuple[paramiko.Transport, paramiko.PKey]:
    """Key exchange only: the transport and the server's host key, before any authentication."""
    sock = _open_socket(target, timeout)
    transport = _transport_class()(sock)
    transport.banner_timeout = timeout
    transport.handshake_timeout = timeout
    transport.auth_timeout = timeout
    try:
        transport.start_client(timeout=timeout)
        # start_client returns quietly when its timeout passes: no host key yet means no handshake.
        return transport, transport.get_remote_server_key()
    except (paramiko.SSHException, EOFError, OSError) as e:
        transport.close()
        if _is_timeout(e) or str(e) == "No existing session":
            raise SshTimeoutError(target, "ssh handshake", timeout) from None
        raise SshConnectError(f"ssh handshake with {target} failed: {e}") from None


@cache
def _transport_class() -> type[paramiko.Transport]:
    """paramiko's Transport, in the process-wide registry from its start until it is closed (a class
    made on first use: paramiko is imported then)."""

    class _Transport(paramiko.Transport):
        def __init__(self, sock: socket.socket) -> None:
            super().__init__(sock)
            with _OPEN_LOCK:
                _OPEN.add(self)

        def close(self) -> None:
            with _OPEN_LOCK:
                _OPEN.discard(self)
            super().close()

    return _Transport


def _connect(
    target: SshTarget, pkey: paramiko.PKey, expected: str | None, accept_new: bool, timeout: float
) -> tuple[paramiko.Transport, str]:
    transport, host_key = _handshake(target, timeout)
    seen = host_key.fingerprint
    try:
        if expected is not None and seen != expected and not accept_new:
            raise HostKeyMismatchError(target, expected, seen)
        transport.auth_publickey(target.user, pkey)
    except paramiko.AuthenticationException:
        transport.close()
        raise SshAuthError(
            f"{target} refused the key (the box does not hold this fleet key for user {target.user})"
        ) from None
    except HostKeyMismatchError:
        transport.close()
        raise
    except (paramiko.SSHException, EOFError, OSError) as e:
        transport.close()
        raise SshConnectError(f"ssh login to {target} failed: {e}") from None
    return transport, seen


def _exec(
    transport: paramiko.Transport, target: SshTarget, command: str, stdin: bytes, step: str, timeout: float
) -> tuple[int, str]:
    channel = transport.open_session(timeout=timeout)
    try:
        channel.set_combine_stderr(True)
        channel.settimeout(1.0)
        channel.exec_command(command)
        channel.sendall(stdin)
        channel.shutdown_write()
        deadline = time.monotonic() + timeout
        chunks: list[bytes] = []
        kept = 0
        while True:
            if time.monotonic() > deadline:
                raise SshTimeoutError(target, step, timeout)
            try:
                data = channel.recv(65536)
            except TimeoutError:
                continue
            if not data:
                break
            chunks.append(data)
            kept += len(data)
            # Keep only enough to scrub and show the tail; a secret may straddle the cut, so keep extra.
            while kept > 4 * OUTPUT_TAIL_CHARS + 65536 and len(chunks) > 1:
                kept -= len(chunks.pop(0))
        while not channel.exit_status_ready():
            if time.monotonic() > deadline:
                raise SshTimeoutError(target, step, timeout)
            time.sleep(0.01)
        return channel.recv_exit_status(), b"".join(chunks).decode(errors="replace")
    finally:
        channel.close()


def _with_retries(attempt: Callable[[], T], target: SshTarget, retries: int, delay: float) -> T:
    """Retry transient connection failures; pin mismatches, command failures and step timeouts are final."""
    tries = max(1, retries)
    for n in range(1, tries + 1):
        try:
            return attempt()
        except (HostKeyMismatchError, RemoteCommandError, SshAuthError):
            raise
        except SshTimeoutError as e:
            if e.step not in ("ssh handshake", "tcp connect") or n == tries:
                raise
        except SshConnectError:
            if n == tries:
                raise
        time.sleep(delay)
    raise AssertionError("unreachable")
