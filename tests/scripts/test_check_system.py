"""scripts/check-system.sh as the set-up of a GitHub runner runs it: as the runner's user, not root."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_as_an_unprivileged_user_it_passes_and_leaves_the_root_checks_to_the_tests() -> None:
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "scripts/check-system.sh"],
        cwd=REPO,
        env={"PATH": os.environ["PATH"], "HOME": "/nonexistent"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "check-system: not root: sshd -t in a mount namespace is left to the tests (run as root)" in lines
    assert not [line for line in lines if "install the Debian package" in line], done.stderr
