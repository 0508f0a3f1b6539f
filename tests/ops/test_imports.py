"""A `tuist-ops` command starts without the Pulumi SDK, the Kubernetes client or paramiko: every
runbook step is one such process, and those imports were half its start. The commands that use them
import them when they run (a failover move, SSH to a box, a cluster read)."""

from __future__ import annotations

from tests.support.new_process import run_python


def test_the_cli_module_loads_none_of_the_heavy_sdks() -> None:
    heavy = ("pulumi", "kubernetes", "paramiko")
    probe = f"import sys, ops.cli; print(' '.join(m for m in {heavy!r} if m in sys.modules))"
    assert run_python(probe).split() == []


def test_the_cli_module_defers_every_commands_modules() -> None:
    """`tuist-ops --help` and each runbook step start with ops.cli alone: the config models (pydantic),
    the vendor clients (urllib3), rich, the watcher and the ops modules are imported by the command
    that uses them (ops/cli.py), about 0.6 s of every start before."""
    deferred = (
        "config cryptography kubernetes paramiko pulumi pydantic requests rich tenacity urllib3 watcher yaml"
    )
    probe = (
        "import sys, ops.cli; print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{deferred.split()!r} or m.startswith(('ops.', 'providers.')))))"
    )
    assert set(run_python(probe).split()) - {"ops.cli", "providers.lazy"} == set()
