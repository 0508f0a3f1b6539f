"""What every script that runs on a box owes, read from the scripts themselves: no secret expanded
where bash traces it, and no download without a bound in time."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
BOX_SCRIPTS = sorted(
    [
        *(REPO / "providers/ssh/scripts").glob("**/*.sh"),
        *(REPO / "ops/scripts").glob("*.sh"),
    ]
)
# What runner.py hands a script on stdin (never argv or the environment).
SECRETS = ("SUDO_PASSWORD", "BOOTSTRAP_TOKEN")


def traced_secret_expansions(text: str) -> list[tuple[int, str]]:
    """Lines that expand a secret while `set -x` is on, reading the script top to bottom."""
    tracing, found = False, []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if re.match(r"set\s+(-[a-wyz]*x|-o\s+xtrace)\b", stripped):
            tracing = True
        elif re.match(r"set\s+(\+x|\+o\s+xtrace)\b", stripped):
            tracing = False
        elif tracing and any(re.search(rf"\$\{{?{name}\b", line) for name in SECRETS):
            found.append((number, stripped))
    return found


def test_no_box_script_expands_a_secret_while_bash_traces() -> None:
    # The runner scrubs secrets from what it keeps of the output, but a traced secret is still on the
    # wire and in any other reader of the stream: the scripts must never print one.
    assert len(BOX_SCRIPTS) >= 6
    assert {
        script.relative_to(REPO).as_posix(): traced_secret_expansions(script.read_text())
        for script in BOX_SCRIPTS
    } == {script.relative_to(REPO).as_posix(): [] for script in BOX_SCRIPTS}


def test_the_trace_check_finds_a_secret_expanded_while_tracing() -> None:
    script = 'set -x\n: "${BOOTSTRAP_TOKEN:?required}"\nset +x\necho "$SUDO_PASSWORD" | sudo -S true\n'
    assert traced_secret_expansions(script) == [(2, ': "${BOOTSTRAP_TOKEN:?required}"')]


def test_every_download_on_a_box_is_bounded_in_time() -> None:
    # A mirror that accepts the connection and stalls must fail the step it is in, not hold it until the
    # step's budget runs out: the state machine then runs the step again (installimage beside itself).
    curls = [
        (script.relative_to(REPO).as_posix(), line.strip())
        for script in BOX_SCRIPTS
        for line in script.read_text().splitlines()
        if re.match(r"\s*curl\s", line)
    ]
    assert len(curls) >= 3
    unbounded = [
        (path, line)
        for path, line in curls
        if "--connect-timeout" not in line or not ("--max-time" in line or "--speed-time" in line)
    ]
    assert unbounded == []
