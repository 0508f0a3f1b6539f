"""scripts/private-tmp.sh: a command runs with a TMPDIR of its own, removed once the command has ended.

The command here is a small Python program that reports what it sees (its TMPDIR, a line of stdin, the
signals it gets) and leaves a file in its TMPDIR, as the Kubernetes plugin leaves its kubeconfig
(tests/regional_dns/test_handover.py shows that with the real plugin).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRIVATE_TMP = REPO / "scripts" / "private-tmp.sh"

# Writes {"tmpdir", "mode", "stdin", "sigint" (as inherited)} to $REPORT, leaves "kubeconfig123" in
# its TMPDIR, then (with "wait") sleeps until SIGINT or SIGTERM: it records each signal and exits 7 a
# second after the first.
COMMAND = """
import json, os, signal, sys, time
tmp = os.environ["TMPDIR"]
inherited = "ignored" if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else "default"
(open(os.path.join(tmp, "kubeconfig123"), "w")).write("client-key-data: secret")
got = []
def report():
    with open(os.environ["REPORT"], "w") as f:
        json.dump({"tmpdir": tmp, "mode": oct(os.stat(tmp).st_mode & 0o777), "stdin": line,
                   "signals": got, "tmp_left": os.path.isdir(tmp), "sigint": inherited}, f)
def on_signal(number, frame):
    got.append(number)
    report()
    if len(got) == 1:
        time.sleep(1)
        report()
        sys.exit(7)
signal.signal(signal.SIGINT, on_signal)
signal.signal(signal.SIGTERM, on_signal)
line = sys.stdin.readline().strip()
report()
if sys.argv[1] == "wait":
    print("ready", flush=True)
    time.sleep(60)
sys.exit(int(sys.argv[2]))
"""


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(tmp_path: Path, mode: str, code: int = 0) -> tuple[subprocess.Popen[str], Path, Path]:
    outer = tmp_path / "outer"
    outer.mkdir()
    report = tmp_path / "report.json"
    proc = subprocess.Popen(
        ["bash", str(PRIVATE_TMP), sys.executable, "-c", COMMAND, mode, str(code)],
        env={**os.environ, "TMPDIR": str(outer), "REPORT": str(report)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal's foreground job
        # SIGINT as a terminal's job has it, whatever the test run inherited (a run started in the
        # background, `bash scripts/test.sh &`, ignores it, and the command below would inherit that).
        preexec_fn=_sigint_default,
    )
    assert proc.stdin is not None
    proc.stdin.write("a line for the command\n")
    proc.stdin.flush()
    return proc, outer, report


def _ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"


def test_the_command_runs_in_a_folder_of_its_own_that_is_gone_after(tmp_path: Path) -> None:
    proc, outer, report = _start(tmp_path, "exit", code=3)
    assert proc.wait(timeout=30) == 3  # the command's status
    seen = json.loads(report.read_text())
    assert Path(seen["tmpdir"]).parent == outer
    assert Path(seen["tmpdir"]).name.startswith("tuist-run.")
    assert seen["mode"] == "0o700"
    assert seen["stdin"] == "a line for the command"  # not /dev/null, as a background job's would be
    # Not ignored, as a background job's would be: a command that installs no handler must still stop.
    assert seen["sigint"] == "default"
    assert list(outer.iterdir()) == []  # the folder and what the command left in it


def test_sigterm_to_the_wrapper_reaches_the_command_and_the_folder_goes_once_it_ends(tmp_path: Path) -> None:
    proc, outer, report = _start(tmp_path, "wait")
    _ready(proc)
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=30) == 7
    seen = json.loads(report.read_text())
    assert seen["signals"] == [signal.SIGTERM]
    assert seen["tmp_left"] is True  # still there while the command wound down
    assert list(outer.iterdir()) == []


def test_a_ctrl_c_reaches_the_command_once_and_the_wrapper_waits_for_it(tmp_path: Path) -> None:
    proc, outer, report = _start(tmp_path, "wait")
    _ready(proc)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends its foreground process group
    started = time.monotonic()
    assert proc.wait(timeout=30) == 7
    assert time.monotonic() - started >= 0.9  # it waited out the command's second of winding down
    seen = json.loads(report.read_text())
    assert seen["signals"] == [signal.SIGINT]  # once: Pulumi reads a second Ctrl-C as "stop now"
    assert list(outer.iterdir()) == []


def test_no_command_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", str(PRIVATE_TMP)],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "usage: private-tmp.sh COMMAND [ARG...]"
    assert list(tmp_path.iterdir()) == []


def test_env_sh_runs_pulumi_through_it_in_an_operators_shell_only(tmp_path: Path) -> None:
    """An interactive shell that sourced env.sh: `pulumi` is the function, and it leaves nothing behind.
    A script that sources it keeps the program: set-up looks `pulumi` up on PATH, and a function
    answering `pulumi version` passed for an installed CLI at the path "pulumi"."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "pulumi").write_text(
        '#!/bin/sh\necho "$TMPDIR" > "$REPORT"; touch "$TMPDIR/kubeconfig9"; exit 4\n'
    )
    (fake_bin / "pulumi").chmod(0o755)
    outer = tmp_path / "outer"
    outer.mkdir()
    report = tmp_path / "report"
    env = {
        **os.environ,
        "TMPDIR": str(outer),
        "REPORT": str(report),
        "PATH": f"{fake_bin}:{os.environ['PATH']}",
    }
    script = f'source "{REPO}/scripts/env.sh"; PATH="{fake_bin}:$PATH"; type -t pulumi; pulumi up'
    interactive = subprocess.run(
        ["bash", "--norc", "--noprofile", "-i", "-c", script],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    assert interactive.returncode == 4, interactive.stderr
    assert interactive.stdout.strip() == "function"
    assert Path(report.read_text().strip()).parent == outer
    assert list(outer.iterdir()) == []

    sourced = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=False)
    assert sourced.returncode == 4, sourced.stderr
    assert sourced.stdout.strip() == "file"
    assert Path(report.read_text().strip()) == outer  # the program itself, in the caller's TMPDIR
