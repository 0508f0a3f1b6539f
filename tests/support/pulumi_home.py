"""A PULUMI_HOME for the CLI the tests run, and the environment a test runs that CLI with."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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


def cli_env(root: Path, *, passphrase: str | None = None, **settings: str) -> dict[str, str]:
    """This process's environment plus what a test's run of the Pulumi CLI needs: the project's
    toolchain and virtualenv first on PATH, a quiet PULUMI_HOME (root/pulumi-home), a folder backend
    (root/state, made here), the stack passphrase when given, no update check and no DIY-backend
    notice; `settings` on top (PYTHONPATH, a streaming preview, ...)."""
    state = root / "state"
    state.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PATH": f"{REPO / '.toolchain' / 'bin'}:{REPO / '.venv' / 'bin'}:{os.environ['PATH']}",
        "PULUMI_HOME": str(quiet_pulumi_home(root / "pulumi-home")),
        "PULUMI_BACKEND_URL": f"file://{state}",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DIY_BACKEND_NO_LEGACY_WARNING": "true",
    }
    if passphrase is not None:
        env["PULUMI_CONFIG_PASSPHRASE"] = passphrase
    env.update(settings)
    return env
