"""Python code run in a new interpreter of the project: for what one process cannot show about
itself (what an import loads, what a pickle is elsewhere, what a once-per-process setting installs)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_python(code: str, *, env: Mapping[str, str] | None = None, timeout: float = 120) -> str:
    """`code`'s standard output; a failure shows the end of its standard error."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=dict(env) if env is not None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
