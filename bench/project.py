"""A copy of the project to run the real engine on (benchmarks and the engine tests): everything a
`pulumi up` reads, nothing that is this checkout's own (its venv, toolchain links, state, caches)."""

from __future__ import annotations

import shutil
from pathlib import Path

LOCAL_ONLY = (
    ".git",
    ".venv",
    ".toolchain",
    ".pulumi-state",
    "build",
    "rendered",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    "*.egg-info",
)


def copy_project(source: Path, dest: Path) -> None:
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(*LOCAL_ONLY))
