"""`pulumi up`, `stack output`, `preview` (no changes) and `destroy` of the dev stack, for real.

One test walks the whole life of the stack in order, because each step depends
on the state the previous one left; each step's failure message names it.
"""

from __future__ import annotations

import json

from tests.e2e.conftest import Engine


def _secret_values(engine: Engine) -> list[str]:
    shown = json.loads(engine.run("config", "-s", "dev", "--show-secrets", "--json").stdout)
    return [str(v["value"]) for v in shown.values() if v.get("secret") and len(str(v["value"])) >= 6]


def test_dev_stack_lifecycle(engine: Engine) -> None:
    engine.run("stack", "select", "dev", "--create")
    secrets = _secret_values(engine)
    assert secrets, "the dev stack should carry encrypted secrets (vendor keys, fleet key, sudo password)"

    up = engine.run("up", "-s", "dev", "--yes", "--skip-preview")
    outputs = json.loads(engine.run("stack", "output", "-s", "dev", "--json").stdout)
    assert outputs["outputs_version"] == 1
    assert outputs["environment"] == "dev"
    assert set(outputs["regions"]) == {"eu-central", "ca-east"}
    assert outputs["regions"]["eu-central"]["node_pool"] == "kura-dedibox"
    assert "capacity" in outputs

    preview = engine.run("preview", "-s", "dev", "--expect-no-changes", "--diff")
    assert "no changes" in preview.stdout.lower() or "unchanged" in preview.stdout.lower(), preview.stdout

    export = engine.run("stack", "export", "-s", "dev").stdout
    destroy = engine.run("destroy", "-s", "dev", "--yes", "--skip-preview")
    for text, where in ((export, "stack export"), (up.stdout + up.stderr, "up"),
                        (destroy.stdout + destroy.stderr, "destroy")):
        leaked = [s[:3] + "..." for s in secrets if s in text]
        assert not leaked, f"secret values {leaked} appear in the output of `pulumi {where}`"

    remaining = json.loads(engine.run("stack", "export", "-s", "dev").stdout)
    assert not remaining["deployment"].get("resources"), "destroy left resources in state"
