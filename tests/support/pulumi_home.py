"""A PULUMI_HOME for the CLI the tests run."""

from __future__ import annotations

from pathlib import Path


def quiet_pulumi_home(path: Path) -> Path:
    """`path` made a PULUMI_HOME in which the CLI writes no automatic log.

    Pulumi (3.260, and still 3.274) writes a Debug-level log of every command, every resource's
    properties included, to $PULUMI_HOME/logs, with no setting to turn it off (pulumi/pulumi#22416
    asks for one): a quarter of the CPU of a no-change preview of the dev stack, most of it the
    CLI's. With a file where that folder would be, the CLI logs `automatic logging unavailable` and
    carries on (tests/toolchain/test_cli_logs.py holds it to that). The tests keep each run's own
    output instead (tests/e2e/conftest.py: engine-logs/), which is what a failure is read from.
    """
    path.mkdir(parents=True, exist_ok=True)
    (path / "logs").touch()
    return path
