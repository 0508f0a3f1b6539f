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


QUIET_CI = REPO / "scripts" / "ci" / "quiet-cli-log.sh"


def quiet_ci(home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(QUIET_CI)],
        env={**os.environ, "PULUMI_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_ci_runners_turn_the_log_off_the_same_way(tmp_path: Path) -> None:
    home = tmp_path / "runner-home"
    done = quiet_ci(home)
    assert done.returncode == 0, done.stderr
    assert (home / "logs").is_file()
    ran = stack_ls(home, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert (home / "logs").is_file() and (home / "logs").stat().st_size == 0
    # Twice is the same (a job that runs set-up again).
    assert quiet_ci(home).returncode == 0 and (home / "logs").is_file()
    # Only CI's set-up calls it: an operator's machine keeps its log.
    setup = (REPO / "scripts" / "ci" / "setup.sh").read_text().splitlines()
    assert 'bash "$here/quiet-cli-log.sh"' in setup
    callers = [
        p.relative_to(REPO).as_posix()
        for p in (REPO / "scripts").rglob("*.sh")
        if "quiet-cli-log.sh" in p.read_text() and p != QUIET_CI
    ]
    assert callers == ["scripts/ci/setup.sh"]


def test_a_runner_whose_log_folder_exists_keeps_it_and_says_so(tmp_path: Path) -> None:
    home = tmp_path / "reused-home"
    (home / "logs").mkdir(parents=True)
    (home / "logs" / "earlier.log").write_text("earlier")
    done = quiet_ci(home)
    assert done.returncode == 0, done.stderr
    assert "is a folder already" in done.stderr
    assert (home / "logs" / "earlier.log").read_text() == "earlier"


def test_without_a_pulumi_home_it_changes_nothing_and_says_what_is_missing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PULUMI_HOME"}
    done = subprocess.run(
        ["bash", str(QUIET_CI)],
        env={**env, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert "PULUMI_HOME is not set" in done.stderr
    assert list(tmp_path.iterdir()) == []
