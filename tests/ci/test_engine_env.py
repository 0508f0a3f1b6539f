"""scripts/engine.env reaches every pulumi run: scripts/env.sh (which CI's preview.sh and deploy.sh
source first) exports each KEY=value of it, and a value the caller already set wins."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _settings() -> dict[str, str]:
    lines = (REPO / "scripts" / "engine.env").read_text().splitlines()
    pairs = [line.split("=", 1) for line in lines if line and not line.startswith("#")]
    return {key: value for key, value in pairs}


def _sourced(env: dict[str, str]) -> dict[str, str]:
    out = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source {REPO / 'scripts' / 'env.sh'}; env -0"],
        env=env,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def test_env_sh_exports_every_engine_setting() -> None:
    settings = _settings()
    assert settings  # the file is not empty
    clean = {k: v for k, v in os.environ.items() if k not in settings}
    exported = _sourced(clean)
    assert {key: exported.get(key) for key in settings} == settings


def test_a_value_already_set_wins() -> None:
    key = next(iter(_settings()))
    exported = _sourced({**os.environ, key: "set-by-the-caller"})
    assert exported[key] == "set-by-the-caller"


def test_ci_scripts_source_env_sh_before_running_pulumi() -> None:
    for script in ("preview.sh", "deploy.sh"):
        text = (REPO / "scripts" / "ci" / script).read_text()
        assert 'source "$here/../env.sh"' in text
        assert text.index('source "$here/../env.sh"') < text.index("backend_login\n")
