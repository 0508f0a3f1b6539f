"""A `tuist-ops` command starts without the Pulumi SDK, the Kubernetes client or paramiko: every
runbook step is one such process, and those imports were half its start. The commands that use them
import them when they run (a failover move, SSH to a box, a cluster read)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_cli_module_loads_none_of_the_heavy_sdks() -> None:
    heavy = ("pulumi", "kubernetes", "paramiko")
    probe = f"import sys, ops.cli; print(' '.join(m for m in {heavy!r} if m in sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert loaded.stdout.split() == []
