"""BareMetalFleet: `size` AdoptedMachine children for one fleet of the stack config.

A parked fleet (`enabled: false`) registers no machine: it stays in config and outputs, so a deploy
never waits on a box nobody has prepped yet. Production machines are `protect`ed, and their provider
refuses a release unless the fleet allows it and the stack sets allow_production_release.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from config.models import Cluster, Environment, Fleet
from providers.machine import AdoptedMachine


@dataclass(frozen=True)
class BareMetalFleetArgs:
    fleet: Fleet
    environment: Environment
    cluster: Cluster
    allow_production_release: bool = False


def machine_name(fleet: str, index: int) -> str:
    return f"{fleet}-{index}"


def machine_props(args: BareMetalFleetArgs, *, project: str, stack: str) -> dict[str, Any]:
    """The AdoptedMachine inputs shared by every machine of the fleet (resource_name is added per
    machine). Nothing secret: credentials reach the provider through the stack config."""
    fleet = args.fleet
    return {
        "project": project,
        "stack": stack,
        "environment": args.environment.value,
        "fleet": fleet.name,
        "vendor": fleet.vendor.value,
        "marker": fleet.marker,
        "node_pool": fleet.node_pool,
        "labels": dict(fleet.labels),
        "taints": [{"key": t.key, "value": t.value, "effect": t.effect.value} for t in fleet.taints],
        "datacenter_prefix": fleet.datacenter,
        "ssh_user": fleet.ssh_user,
        "ssh_port": fleet.ssh_port,
        "os": fleet.os,
        "kubernetes_minor": args.cluster.kubernetes_minor,
        "api_server": args.cluster.api_server,
        "allow_release": fleet.allow_release,
        "allow_production_release": args.allow_production_release,
    }


def machine_row(name: str, row: list[Any]) -> dict[str, Any]:
    vendor, box_id, datacenter, public_ipv4, provider_id, node_name = row
    return {
        "name": name,
        "vendor": vendor,
        "box_id": box_id,
        "datacenter": datacenter,
        "public_ipv4": public_ipv4,
        "provider_id": provider_id,
        "node_name": node_name,
    }


def _machine_output(name: str, machine: AdoptedMachine) -> pulumi.Output[dict[str, Any]]:
    fields = pulumi.Output.all(
        machine.vendor,
        machine.box_id,
        machine.datacenter,
        machine.public_ipv4,
        machine.provider_id,
        machine.node_name,
    )
    return fields.apply(lambda row: machine_row(name, row))


class BareMetalFleet(pulumi.ComponentResource):
    machines: list[AdoptedMachine]
    # One entry per machine: name, vendor, box_id, datacenter, public_ipv4, provider_id, node_name.
    machine_outputs: pulumi.Output[list[dict[str, Any]]]

    def __init__(
        self, name: str, args: BareMetalFleetArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tuist:fleet:BareMetalFleet", name, None, opts)
        fleet = args.fleet
        production = args.environment is Environment.PRODUCTION
        props = machine_props(args, project=pulumi.get_project(), stack=pulumi.get_stack())
        count = fleet.size if fleet.enabled else 0
        self.machines = [
            AdoptedMachine(
                machine_name(fleet.name, i),
                props,
                pulumi.ResourceOptions(parent=self, protect=production),
            )
            for i in range(count)
        ]
        self.machine_outputs = pulumi.Output.all(
            *[_machine_output(machine_name(fleet.name, i), m) for i, m in enumerate(self.machines)]
        ).apply(list)
        self.register_outputs(
            {
                "fleet": fleet.name,
                "vendor": fleet.vendor.value,
                "enabled": fleet.enabled,
                "machines": self.machine_outputs,
            }
        )
