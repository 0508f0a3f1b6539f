"""The test harness turns off the Pulumi CLI's automatic log (tests/support/pulumi_home.py): the
CLI must still run, and write no log, where a plain PULUMI_HOME gets one per command."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.pulumi_home import quiet_pulumi_home

REPO = Path(__file__).resolve().parents[2]
PULUMI = REPO / ".toolchain" / "bin" / "pulumi"


def stack_ls(home: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "PULUMI_HOME": str(home),
        "PULUMI_BACKEND_URL": f"file://{state}",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DIY_BACKEND_NO_LEGACY_WARNING": "true",
    }
    return subprocess.run(
        [str(PULUMI), "stack", "ls", "--all", "--non-interactive"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_plain_home_gets_a_log_per_command_and_the_quiet_one_none(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    ran = stack_ls(plain, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert [p.suffix for p in (plain / "logs").iterdir()] == [".log"]

    quiet = quiet_pulumi_home(tmp_path / "quiet")
    ran = stack_ls(quiet, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert (quiet / "logs").is_file() and (quiet / "logs").stat().st_size == 0
    assert "error" not in ran.stderr.lower()
