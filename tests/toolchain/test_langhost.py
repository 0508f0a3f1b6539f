"""Our Python language host (scripts/toolchain/langhost) through the real engine: a stack's config of
any size reaches the program, its secrets still secrets.

The host once passed the config in one environment variable, which Linux caps at 128 KiB: a stack
of about 36 times production's fleets could not start. Here a program gets 600 KB of config.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tests.support.pulumi_home import cli_env

REPO = Path(__file__).resolve().parents[2]
PASSPHRASE = "langhost-test-passphrase"

PROGRAM = """
import json
import pulumi
from pulumi.runtime import config as runtime_config

config = pulumi.Config("bulk")
fleets = config.require_object("fleets")
token = config.require_secret("token")
pulumi.export("fleets", len(fleets))
pulumi.export("last", fleets[-1]["name"])
pulumi.export("bytes", len(json.dumps(fleets)))
pulumi.export("token_is_secret", runtime_config.is_config_secret("bulk:token"))
pulumi.export("token", token)
"""


def _pulumi(root: Path, env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(
        ["pulumi", *args, "--non-interactive"], cwd=root, env=env, input=stdin, text=True, capture_output=True
    )
    assert proc.returncode == 0, f"pulumi {' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_a_config_past_the_environment_variable_limit_reaches_the_program(tmp_path: Path) -> None:
    root = tmp_path / "bulk"
    root.mkdir()
    (root / "Pulumi.yaml").write_text(
        yaml.safe_dump(
            {"name": "bulk", "runtime": {"name": "python", "options": {"virtualenv": str(REPO / ".venv")}}}
        )
    )
    (root / "__main__.py").write_text(PROGRAM)
    fleets = [{"name": f"fleet-{i}", "marker": "m" * 40, "size": i, "note": "x" * 500} for i in range(1000)]
    stack_file = {"config": {"bulk:fleets": fleets}}
    (root / "Pulumi.big.yaml").write_text(yaml.safe_dump(stack_file))
    assert len(json.dumps(stack_file)) > 4 * 128 * 1024
    env = cli_env(tmp_path, passphrase=PASSPHRASE)
    _pulumi(root, env, "stack", "init", "big", "--secrets-provider", "passphrase")
    _pulumi(root, env, "config", "set", "--secret", "token", "-s", "big", stdin="the-token-value")

    _pulumi(root, env, "up", "--yes", "-s", "big")

    outputs = json.loads(_pulumi(root, env, "stack", "output", "--json", "--show-secrets", "-s", "big"))
    assert outputs == {
        "fleets": 1000,
        "last": "fleet-999",
        "bytes": len(json.dumps(fleets)),
        "token_is_secret": True,
        "token": "the-token-value",
    }
    state = _pulumi(root, env, "stack", "export", "-s", "big")
    assert "the-token-value" not in state
