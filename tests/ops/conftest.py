"""The operator's CLI against a vendorsim with real SSH boxes (tests/providers/test_machine_support.py).

The stack is the dev stack's config (Pulumi.dev.yaml) pointed at the test's simulator, with its
secrets; it reaches the CLI as data (ops.stack.StaticStack) instead of through `pulumi config`, which
tests/e2e/test_runbook.py drives for real. Commands run through typer's CliRunner in this process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from typer.testing import CliRunner

from config.loader import read_stack_file
from ops.cli import Context, app
from ops.stack import CLAIM_TYPE, StaticStack
from providers.clients import ClientTiming
from providers.retry import PollPolicy, RetryPolicy
from tests.providers.test_machine_support import PROJECT, REPO, SIM_SSH_PORT, FleetKey, Sim, running_sim

FAST = ClientTiming(
    retry=RetryPolicy(max_attempts=2, max_delay=0.05, base_delay=0.01),
    poll=PollPolicy(first=0.05, factor=1.0, max_interval=0.05),
    task_timeout=30.0,
)


@pytest.fixture(scope="package")
def sim_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    yield from running_sim(tmp_path_factory.mktemp("ops-sim"))


@pytest.fixture
def sim(sim_process: Sim) -> Sim:
    return sim_process.reset()


def dev_config(sim: Sim, key: FleetKey | None = None) -> dict[str, Any]:
    """Pulumi.dev.yaml's config, as `pulumi config --json` decodes it, on the test's simulator: its
    vendors, its boxes' SSH port, no cluster (manifests rendered), and its secrets."""
    raw = read_stack_file(REPO / "Pulumi.dev.yaml")
    # These tests are about the three vendors the operator preps and marks (prep refuses the
    # Scaleway kinds, tested by the machine tests): the Scaleway fleets and what uses them stay out.
    scaleway = {f["name"] for f in raw["fleets"] if f["vendor"] in ("scaleway_em", "applesilicon")}
    raw["fleets"] = [f for f in raw["fleets"] if f["name"] not in scaleway]
    raw["regions"] = [r for r in raw["regions"] if r["fleet"] not in scaleway]
    raw["runner_pools"] = [r for r in raw.get("runner_pools", []) if r["fleet"] not in scaleway]
    cluster = {k: v for k, v in raw["cluster"].items() if k != "api_server"}
    raw["cluster"] = {**cluster, "render_dir": "rendered/ops-test"}
    return on_sim(raw, sim, key)


def dev_config_with_scaleway(sim: Sim, key: FleetKey | None = None) -> dict[str, Any]:
    """Pulumi.dev.yaml's config with every fleet, the Elastic Metal and Apple silicon ones too (one
    Scaleway project and key for both, as the dev stack has), on the test's simulator: for what the
    operator does to those boxes (unclaim)."""
    raw = read_stack_file(REPO / "Pulumi.dev.yaml")
    cluster = {k: v for k, v in raw["cluster"].items() if k != "api_server"}
    raw["cluster"] = {**cluster, "render_dir": "rendered/ops-test"}
    values = on_sim(raw, sim, key)
    creds = sim.inventory["credentials"]["scaleway"]
    project = {
        "api_url": f"{sim.url}/scaleway",
        "access_key": creds["access_key"],
        "project_id": creds["project_id"],
    }
    values[f"{PROJECT}:vendors"] = {
        **values[f"{PROJECT}:vendors"],
        "scaleway_em": {**project, "zones": ["fr-par-1", "fr-par-2", "nl-ams-1"]},
        "applesilicon": {**project, "zones": ["fr-par-1", "fr-par-3"]},
    }
    values[f"{PROJECT}:scalewaySecretKey"] = creds["secret_key"]
    return values


def production_config(sim: Sim, key: FleetKey | None = None) -> dict[str, Any]:
    """Pulumi.production.yaml's config (two OVH fleets: kura-us-east, kura-us-west) with the
    simulator's secrets and its boxes' SSH port. Its vendor accounts stay the real APIs' (config
    refuses a loopback URL outside dev): the `on_production` fixture points the CLI's clients at the
    simulator."""
    return with_sim_secrets(read_stack_file(REPO / "Pulumi.production.yaml"), sim, key)


@pytest.fixture
def on_production(sim: Sim, monkeypatch: pytest.MonkeyPatch) -> Ops:
    """`tuist-ops` on the production stack's config, its vendor clients talking to the simulator."""
    import ops.stack as stack_module
    from providers.clients import vendor_client
    from providers.machine.settings import settings_from_config

    accounts = settings_from_config(stack_module._ConfigView(dev_config(sim))).vendors

    def on_the_simulator(vendor: Any, _accounts: Any, secret: Any, timing: Any = None) -> Any:
        return vendor_client(vendor, accounts, secret, timing)

    monkeypatch.setattr(stack_module, "vendor_client", on_the_simulator)
    return Ops(sim, config=production_config)


def on_sim(raw: dict[str, Any], sim: Sim, key: FleetKey | None = None) -> dict[str, Any]:
    """A stack file's config, as `pulumi config --json` decodes it, with the simulator's vendor
    accounts and secrets and every fleet's SSH on the simulator's port."""
    creds = sim.inventory["credentials"]
    raw["vendors"] = {
        "ovh": {"endpoint": f"{sim.url}/ovh/1.0", "application_key": creds["ovh"]["application_key"]},
        "dedibox": {
            "api_url": f"{sim.url}/dedibox",
            "project_id": creds["dedibox"]["project_id"],
            "zones": ["fr-par-2"],
        },
        "robot": {"api_url": f"{sim.url}/robot", "username": creds["robot"]["username"]},
    }
    return with_sim_secrets(raw, sim, key)


def with_sim_secrets(raw: dict[str, Any], sim: Sim, key: FleetKey | None = None) -> dict[str, Any]:
    """The config as `pulumi config --json` decodes it, with the simulator's secrets and every
    fleet's SSH on the simulator's port."""
    creds = sim.inventory["credentials"]
    for fleet in raw["fleets"]:
        fleet["ssh_port"] = SIM_SSH_PORT
    values = {f"{PROJECT}:{k}": v for k, v in raw.items()}
    key = key or sim.key
    values.update(
        {
            f"{PROJECT}:ovhApplicationSecret": creds["ovh"]["application_secret"],
            f"{PROJECT}:ovhConsumerKey": creds["ovh"]["consumer_key"],
            f"{PROJECT}:dediboxSecretKey": creds["dedibox"]["secret_key"],
            f"{PROJECT}:robotPassword": creds["robot"]["password"],
            f"{PROJECT}:fleetSshPrivateKey": key.private,
            f"{PROJECT}:fleetSudoPassword": sim.sudo_password,
        }
    )
    return values


def claim_resource(slot: str, fleet: str, vendor: str, box_id: str, token: str) -> dict[str, Any]:
    """A MachineClaim as `pulumi stack export` lists it."""
    return {
        "urn": f"urn:pulumi:dev::{PROJECT}::tuist:index:BareMetalFleet${CLAIM_TYPE}::{slot}-claim",
        "type": CLAIM_TYPE,
        "inputs": {"resource_name": slot, "fleet": fleet, "vendor": vendor},
        "outputs": {"box_id": box_id, "claim_token": token, "vendor": vendor, "resource_name": slot},
    }


@dataclass
class Ops:
    """Runs `tuist-ops` against the simulator's stack."""

    sim: Sim
    key: FleetKey | None = None
    state: list[Mapping[str, Any]] = field(default_factory=list)
    config: Callable[[Sim, FleetKey | None], dict[str, Any]] = dev_config
    # None: the project holding the working directory, as the CLI finds it run by hand.
    project_dir: Path | None = REPO

    def __call__(self, *args: str, answer: str | None = None) -> Result:
        """`answer`: run as at a terminal, typing it at any question (none: no terminal, as in CI)."""
        values = self.config(self.sim, self.key)
        context = Context(
            source=lambda name: StaticStack(name, values, self.state),
            timing=FAST,
            project_dir=self.project_dir,
            width=240,
            interactive=lambda: answer is not None,
        )
        return CliRunner().invoke(app, list(args), obj=context, input=answer)

    def json(self, *args: str) -> Any:
        result = self(*args, "--json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    def secrets(self) -> list[str]:
        return [*self.sim.secret_values(), *([self.key.private] if self.key else [])]


@pytest.fixture
def ops(sim: Sim) -> Ops:
    return Ops(sim)


def error_line(result: Result) -> str:
    """The one line a refused command prints (stderr), checked to be alone and first."""
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def box_root(sim: Sim, key: str) -> Path:
    return sim.box_root(key)
