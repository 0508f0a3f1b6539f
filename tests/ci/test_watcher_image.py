"""watcher/Dockerfile: what its build stage copies and installs is enough to run `python -m watcher`.

There is no Docker engine here, so the test does what the build stage does, from the Dockerfile's own
COPY lines: copy those paths alone into a fresh context, install the project from it without
dependencies (the image installs them from the hashed lock, as the venv here does), and start the
watcher from the installed copy, never from this work tree.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "watcher" / "Dockerfile"


def build_stage_copies() -> list[str]:
    stage = DOCKERFILE.read_text().split("\nFROM ")[1]  # the first FROM ... AS build, up to the next
    # COPY <source>... <destination>, skipping COPY --from=<stage>.
    return [src for m in re.finditer(r"^COPY (?!--)(.+)$", stage, re.MULTILINE) for src in m[1].split()[:-1]]


def test_the_build_stage_copies_the_lock_and_the_packages_the_watcher_imports() -> None:
    copies = build_stage_copies()
    assert copies[:2] == ["pyproject.toml", "requirements.lock"]
    # The project packages a running watcher has loaded (its imports, transitively).
    loaded = subprocess.run(
        # The image also runs each region's demux route reconciler (python -m demux), public DNS
        # reconciler (python -m regional_dns) and released-volume scrubber.
        [
            sys.executable,
            "-c",
            "import sys, watcher.__main__, demux.__main__, regional_dns.__main__, watcher.released_volumes\n"
            "print(' '.join(sys.modules))",
        ],
        cwd=REPO,
        text=True,
        capture_output=True,
        check=True,
    ).stdout.split()
    ours = {name.split(".")[0] for name in loaded} & {
        p.name for p in REPO.iterdir() if (p / "__init__.py").exists()
    }
    assert ours == {"config", "demux", "providers", "regional_dns", "watcher"}
    assert sorted(c.rstrip("/") for c in copies[2:]) == sorted(ours)


def test_the_installed_copy_runs_the_watcher(tmp_path: Path) -> None:
    context = tmp_path / "context"
    context.mkdir()
    for source in build_stage_copies():
        src = REPO / source.rstrip("/")
        if src.is_dir():
            shutil.copytree(src, context / src.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, context / src.name)
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(context),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    assert (site / "providers" / "ssh" / "scripts").is_dir(), (
        "package data (the box scripts) was not installed"
    )
    elsewhere = tmp_path / "run"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run(
        [sys.executable, "-c", "import watcher.mover, providers.clients; print(watcher.mover.__file__)"],
        cwd=elsewhere,
        env=env,
        text=True,
        capture_output=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(site)), f"imported {where}, not the installed copy"
    # Every module the image runs: each import goes through, and each stops at its first missing
    # setting, as in a Pod without its environment.
    for module, refusal in (
        ("watcher", "watcher: environment variable FAILOVER_VENDOR is required"),
        (
            "demux",
            "demux: environment variable(s) REGION, REGION_HOST, KURA_NAMESPACE, PEER_PORT, "
            "CLUSTER_DOMAIN required",
        ),
        (
            "regional_dns",
            "regional_dns: environment variable(s) REGION, REGION_HOST, KURA_NAMESPACE, GATEWAY_DEPLOYMENT, "
            "NODE_POOL, DNSENDPOINT required",
        ),
        (
            "watcher.released_volumes",
            "released_volumes: environment variable(s) REGION, NODE_NAME, KURA_NAMESPACE required",
        ),
    ):
        started = subprocess.run(
            [sys.executable, "-m", module],
            cwd=elsewhere,
            env=env,
            text=True,
            capture_output=True,
            check=False,
        )
        assert started.returncode == 1, f"{module}: {started.stderr}"
        assert started.stderr.strip() == refusal
