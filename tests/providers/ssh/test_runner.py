"""providers.ssh.runner against real OpenSSH boxes (vendorsim.boxes) on loopback."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from providers.ssh import runner
from providers.ssh.runner import (
    OUTPUT_TAIL_CHARS,
    REMOTE_KILL_AFTER,
    HostKeyMismatchError,
    RemoteCommandError,
    SshAuthError,
    SshError,
    SshTarget,
    SshTimeoutError,
    bounded_command,
    close_all_sessions,
    fetch_host_key,
    load_private_key,
    remote_budget,
    run_script,
)
from tests.providers.ssh.conftest import SUDO_PASSWORD, Box, KeyPair, free_port, new_key

FAST = {"retries": 1, "retry_delay": 0.0, "handshake_timeout": 5.0, "step_timeout": 30.0}


def test_first_use_pins_the_box_host_key_and_runs_the_script(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    box = make_box()
    result = run_script(
        box.target,
        "echo hello from $(hostname -s 2>/dev/null || cat /etc/hostname)",
        private_key=fleet_key.private,
        env_secrets={},
        expected_host_key=None,
        **FAST,
    )
    assert result.host_key_fingerprint == box.info.host_key_fingerprint
    assert result.exit_status == 0
    assert result.output_tail == f"hello from {box.key}\n"


def test_the_pinned_key_is_accepted(make_box: Callable[..., Box], fleet_key: KeyPair):
    box = make_box()
    pin = box.info.host_key_fingerprint
    result = run_script(
        box.target, "true", private_key=fleet_key.private, env_secrets={}, expected_host_key=pin, **FAST
    )
    assert result.host_key_fingerprint == pin


def test_pin_mismatch_is_refused_naming_host_expected_and_seen_without_retrying(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    box = make_box()
    wrong = "SHA256:" + "A" * 43
    started = time.monotonic()
    with pytest.raises(HostKeyMismatchError) as err:
        run_script(
            box.target,
            "touch /tmp/ran",
            private_key=fleet_key.private,
            env_secrets={},
            expected_host_key=wrong,
            retries=3,
            retry_delay=30,
        )
    # One retry would wait 30 s: the margin is for a loaded machine's handshake, not for a retry.
    assert time.monotonic() - started < 20, "a pin mismatch must not be retried"
    assert str(err.value) == (
        f"host key of 127.0.0.1:{box.info.ssh_port} does not match its pin: expected {wrong}, "
        f"seen {box.info.host_key_fingerprint}. Refusing to connect: the box was reinstalled or "
        "someone is in the middle."
    )


def test_after_a_reinstall_the_old_pin_fails_and_accept_new_takes_the_new_key(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    box = make_box()
    old = box.info.host_key_fingerprint
    new_info = box.farm.reinstall(
        box.key, user="ubuntu", authorized_key=fleet_key.public, sudo_password=SUDO_PASSWORD
    )
    assert new_info.host_key_fingerprint != old

    with pytest.raises(HostKeyMismatchError) as err:
        run_script(
            box.target, "true", private_key=fleet_key.private, env_secrets={}, expected_host_key=old, **FAST
        )
    assert err.value.seen == new_info.host_key_fingerprint

    result = run_script(
        box.target,
        "true",
        private_key=fleet_key.private,
        env_secrets={},
        expected_host_key=old,
        accept_new_host_key=True,
        **FAST,
    )
    assert result.host_key_fingerprint == new_info.host_key_fingerprint


def test_a_key_the_box_does_not_hold_is_refused_and_not_retried(make_box: Callable[..., Box]):
    box = make_box()
    started = time.monotonic()
    with pytest.raises(SshAuthError) as err:
        run_script(
            box.target,
            "true",
            private_key=new_key().private,
            env_secrets={},
            expected_host_key=None,
            retries=3,
            retry_delay=30,
        )
    assert time.monotonic() - started < 20, "a refused key must not be retried"
    assert str(err.value) == (
        f"ubuntu@127.0.0.1:{box.info.ssh_port} refused the key (the box does not hold this fleet key "
        "for user ubuntu)"
    )


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word (a wedged box)."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                held.append(conn)
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_handshake_timeout_against_a_port_that_never_speaks_ssh(silent_port: int, fleet_key: KeyPair):
    target = SshTarget("127.0.0.1", silent_port, "ubuntu")
    started = time.monotonic()
    with pytest.raises(SshTimeoutError) as err:
        run_script(
            target,
            "true",
            private_key=fleet_key.private,
            env_secrets={},
            expected_host_key=None,
            handshake_timeout=0.5,
            retries=2,
            retry_delay=0.1,
        )
    elapsed = time.monotonic() - started
    assert str(err.value) == f"ssh handshake on ubuntu@127.0.0.1:{silent_port} timed out after 0.5s"
    assert 1.0 <= elapsed < 15, "two attempts of 0.5s each"


def test_fetch_host_key_times_out_on_a_silent_port(silent_port: int):
    with pytest.raises(
        SshTimeoutError, match=r"^ssh handshake on ubuntu@127\.0\.0\.1:\d+ timed out after 0\.3s$"
    ):
        fetch_host_key(SshTarget("127.0.0.1", silent_port, "ubuntu"), timeout=0.3)


def test_a_step_that_runs_too_long_raises_a_timeout_naming_the_step(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    box = make_box()
    with pytest.raises(SshTimeoutError) as err:
        run_script(
            box.target,
            "sleep 20",
            private_key=fleet_key.private,
            env_secrets={},
            expected_host_key=None,
            step="self-join",
            retries=3,
            retry_delay=5,
            handshake_timeout=5,
            step_timeout=1,
        )
    assert str(err.value) == f"self-join on ubuntu@127.0.0.1:{box.info.ssh_port} timed out after 1s"


def test_transient_connection_failures_are_retried_until_the_box_answers(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    box = make_box()
    box.farm.stop(box.key)
    restart = threading.Timer(
        0.7,
        lambda: box.farm.ensure(
            box.key, ssh_port=box.info.ssh_port, user="ubuntu", authorized_key=None, sudo_password=None
        ),
    )
    restart.start()
    try:
        result = run_script(
            box.target,
            "echo up",
            private_key=fleet_key.private,
            env_secrets={},
            expected_host_key=box.info.host_key_fingerprint,
            retries=10,
            retry_delay=0.2,
            handshake_timeout=5,
        )
    finally:
        restart.join()
    assert result.output_tail == "up\n"


def test_connection_refused_after_the_retries_names_the_target(fleet_key: KeyPair):
    port = free_port()
    with pytest.raises(SshError, match=rf"^cannot reach ubuntu@127\.0\.0\.1:{port}: Connection refused$"):
        run_script(
            SshTarget("127.0.0.1", port, "ubuntu"),
            "true",
            private_key=fleet_key.private,
            env_secrets={},
            expected_host_key=None,
            retries=2,
            retry_delay=0.05,
        )


def test_secrets_arrive_as_shell_variables_from_stdin(make_box: Callable[..., Box], fleet_key: KeyPair):
    box = make_box()
    script = 'printf "%s|%s\\n" "${#FIRST}" "${#SECOND}"; [ "$FIRST" = "one two" ] && [ "$SECOND" = "x\'y" ]'
    result = run_script(
        box.target,
        script,
        private_key=fleet_key.private,
        env_secrets={"FIRST": "one two", "SECOND": "x'y"},
        expected_host_key=None,
        **FAST,
    )
    assert result.output_tail == "7|3\n"


def test_secrets_never_appear_in_any_process_command_line_or_environment_on_the_box(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    box = make_box()
    # Searches every process of the box while the script runs; the pattern comes from a file so
    # grep's own argv does not hold it.
    script = """
printf '%s\\n' "$TOKEN" > /tmp/pattern
hits=$(grep -l -a -F -f /tmp/pattern /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | wc -l)
echo "hits=$hits"
"""
    result = run_script(
        box.target,
        script,
        private_key=fleet_key.private,
        env_secrets={"TOKEN": "tok-5up3r-s3cr3t"},
        expected_host_key=None,
        **FAST,
    )
    assert result.output_tail == "hits=0\n"


def test_a_failing_script_raises_with_its_output_tail_and_the_secrets_scrubbed(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    box = make_box()
    script = (
        'for i in $(seq 1 400); do echo "line $i of noise"; done\n'
        'echo "the password is $SUDO_PASSWORD and the token is $BOOTSTRAP_TOKEN"\n'
        "exit 3\n"
    )
    with pytest.raises(RemoteCommandError) as err:
        run_script(
            box.target,
            script,
            private_key=fleet_key.private,
            env_secrets={"SUDO_PASSWORD": SUDO_PASSWORD, "BOOTSTRAP_TOKEN": "abcdef.0123456789abcdef"},
            expected_host_key=None,
            step="self-join",
            **FAST,
        )
    e = err.value
    assert e.exit_status == 3
    assert len(e.output_tail) == OUTPUT_TAIL_CHARS
    assert e.output_tail.endswith("line 400 of noise\nthe password is *** and the token is ***\n")
    assert SUDO_PASSWORD not in str(e) and "0123456789abcdef" not in str(e)
    assert str(e).startswith(
        f"self-join on ubuntu@127.0.0.1:{box.info.ssh_port} failed with exit status 3; last output:\n"
    )


def test_script_text_or_path(make_box: Callable[..., Box], fleet_key: KeyPair, tmp_path):
    box = make_box()
    script = tmp_path / "hello.sh"
    script.write_text("#!/bin/bash\necho from-a-file\n")
    result = run_script(
        box.target, script, private_key=fleet_key.private, env_secrets={}, expected_host_key=None, **FAST
    )
    assert result.output_tail == "from-a-file\n"


def test_secret_names_and_values_are_checked_before_connecting(fleet_key: KeyPair):
    target = SshTarget("127.0.0.1", 1, "ubuntu")
    with pytest.raises(ValueError, match=r"^env_secrets key 'bad name' is not a shell variable name"):
        run_script(
            target,
            "true",
            private_key=fleet_key.private,
            env_secrets={"bad name": "x"},
            expected_host_key=None,
        )
    with pytest.raises(ValueError, match=r"^env_secrets\['TOKEN'\] contains a line break"):
        run_script(
            target,
            "true",
            private_key=fleet_key.private,
            env_secrets={"TOKEN": "a\nb"},
            expected_host_key=None,
        )


def test_a_bad_private_key_is_rejected_without_quoting_it():
    text = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-really-a-key-c2VjcmV0\n-----END OPENSSH PRIVATE KEY-----\n"
    )
    with pytest.raises(SshError) as err:
        load_private_key(text)
    assert str(err.value) == "private_key is not an unencrypted Ed25519, ECDSA or RSA private key"


def test_fetch_host_key_reads_the_key_without_logging_in_and_sees_a_reinstall(
    make_box: Callable[..., Box], fleet_key: KeyPair
):
    box = make_box()
    old = fetch_host_key(box.target, timeout=5)
    assert old == box.info.host_key_fingerprint
    assert re.fullmatch(r"SHA256:[A-Za-z0-9+/]{43}", old)
    box.farm.reinstall(box.key, user="ubuntu", authorized_key=fleet_key.public, sudo_password=None)
    new = fetch_host_key(box.target, timeout=5)
    assert new != old
    assert new == box.farm.info(box.key).host_key_fingerprint


def test_close_all_sessions_hangs_up_a_running_script(make_box: Callable[..., Box], fleet_key: KeyPair):
    """What the provider does when its engine goes away: every open session is closed, the remote
    script is hung up, and the call that ran it returns at once instead of at its step timeout."""
    box = make_box()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            run_script(
                box.target,
                "echo started; sleep 60",
                private_key=fleet_key.private,
                env_secrets={},
                expected_host_key=None,
                **{**FAST, "step_timeout": 120.0},
            )
        except BaseException as error:  # asserted on below
            failures.append(error)

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 20
    while not runner._OPEN and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the script is running on the box now
    started = time.monotonic()
    assert close_all_sessions() == 1
    worker.join(timeout=40)
    assert not worker.is_alive() and time.monotonic() - started < 30  # not the script's 60 s
    assert len(failures) == 1 and isinstance(failures[0], SshError), failures
    assert close_all_sessions() == 0


def run_as_root(box: Box, fleet_key: KeyPair, script: str, step_timeout: float) -> None:
    run_script(
        box.target,
        script,
        private_key=fleet_key.private,
        env_secrets={},
        expected_host_key=None,
        **{**FAST, "step_timeout": step_timeout},
    )


def test_a_step_timeout_stops_the_script_on_the_box(make_box: Callable[..., Box], fleet_key: KeyPair) -> None:
    # Closing the session alone stops nothing on the box (no terminal, no SIGHUP), and the state machine
    # runs a timed-out step again: the old run must be gone, its children with it, not run on beside.
    box = make_box(user="root", sudo_password=None)
    marker = box.root / "var/lib/sim/still-running"
    with pytest.raises(SshTimeoutError):
        run_as_root(box, fleet_key, "sleep 3 & wait; touch /var/lib/sim/still-running\n", step_timeout=2)
    time.sleep(2.5)  # past the script's 3 s: TERM reached it (and its sleep) at 1 s
    assert not marker.exists()


def test_a_script_that_ignores_term_is_killed_and_read_as_a_timeout(
    make_box: Callable[..., Box], fleet_key: KeyPair
) -> None:
    # TERM at 5 s goes unheeded; KILL at 6 s ends the script and timeout with it (status 137).
    box = make_box(user="root", sudo_password=None)
    with pytest.raises(SshTimeoutError):
        run_as_root(box, fleet_key, "trap '' TERM; sleep 20\n", step_timeout=8)


def test_a_script_s_own_status_124_is_its_failure_not_a_timeout(
    make_box: Callable[..., Box], fleet_key: KeyPair
) -> None:
    box = make_box(user="root", sudo_password=None)
    with pytest.raises(RemoteCommandError) as err:
        run_as_root(box, fleet_key, "echo a nested timeout gave up; exit 124\n", step_timeout=30)
    assert err.value.exit_status == 124


def test_the_remote_budget_ends_before_this_side_gives_up() -> None:
    assert [remote_budget(t) for t in (1, 5, 30, 300, 2700)] == [
        (1, 1),
        (2, 1),
        (25, 3),
        (288, 10),
        (2688, 10),
    ]
    for step_timeout in (5, 30, 300, 2700):
        term, kill_after = remote_budget(step_timeout)
        assert term + kill_after + 2 == step_timeout and kill_after <= REMOTE_KILL_AFTER
    assert bounded_command("bash -c 'eval \"$(cat)\"'", 300) == (
        "if command -v timeout >/dev/null 2>&1; then timeout -k 10 288 bash -c 'eval \"$(cat)\"'; exit $?; "
        "else exec bash -c 'eval \"$(cat)\"'; fi"
    )
