"""BareMetalFleet: per slot of one fleet, a MachineClaim, the AdoptedMachine that joins its box, and
the NodeLabels that keep the Node's labels and taints.

The claim is its own resource, recorded in state before the slow join: a create that fails in any
state leaves a claim `pulumi destroy` finds and releases. The machine takes the claim's outputs (box,
address, providerID), so on destroy the engine leaves the cluster first (the machine), then releases
(the claim). A parked fleet (`enabled: false`) registers nothing: it stays in config and outputs, so
a deploy never waits on a box nobody has prepped yet. Production claims and machines are `protect`ed,
and the claim's provider refuses a release unless the fleet allows it and the stack sets
allow_production_release.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi

from config.models import Cluster, Environment, Fleet
from providers.machine import AdoptedMachine, MachineClaim, NodeLabels
from providers.machine.spec import node_capacity, node_labels, node_taints

FLEET_TYPE = "tuist:fleet:BareMetalFleet"
CLAIM_TYPE = "pulumi-python:dynamic/machine:MachineClaim"
MACHINE_TYPE = "pulumi-python:dynamic/machine:AdoptedMachine"
LABELS_TYPE = "pulumi-python:dynamic/machine:NodeLabels"


@dataclass(frozen=True)
class BareMetalFleetArgs:
    fleet: Fleet
    environment: Environment
    cluster: Cluster
    allow_production_release: bool = False
    # The MachineClaim CRD (components/claims_crd.py) when the stack has a cluster: claims wait for it.
    claims_crd: pulumi.Resource | None = None
    # What each join waits for after its claim: the control plane's firewall admitting the box
    # (components/control_plane_firewall.py), which itself waits for the claims' addresses.
    join_after: pulumi.Input[pulumi.Resource] | None = None
    # The fleet's bootstrap RBAC (components/node_bootstrap.py): a kubelet whose CSR came before its
    # bindings is never approved (the approver does not retry), so every join waits for them.
    node_bootstrap: Sequence[pulumi.Resource] = ()


def machine_name(fleet: str, index: int) -> str:
    return f"{fleet}-{index}"


def _taints(fleet: Fleet) -> list[dict[str, str]]:
    return [{"key": t.key, "value": t.value, "effect": t.effect.value} for t in fleet.taints]


def _pins(fleet: Fleet) -> dict[str, Any] | None:
    """What a Robot install downloads; the claim's release reinstalls with it too."""
    if fleet.vendor.value != "robot":
        return None
    return fleet.artifacts.model_dump()


def claim_props(args: BareMetalFleetArgs, *, project: str, stack: str, slot: str) -> dict[str, Any]:
    """The MachineClaim inputs of one slot. Nothing secret: credentials reach the provider through the
    stack config."""
    fleet = args.fleet
    return {
        "project": project,
        "stack": stack,
        # The slot's name: the claim token derives from it, as it did when the machine held the claim.
        "resource_name": slot,
        "environment": args.environment.value,
        "fleet": fleet.name,
        "vendor": fleet.vendor.value,
        "marker": fleet.marker,
        "datacenter_prefix": fleet.datacenter,
        "os": fleet.os,
        "ssh_user": fleet.ssh_user,
        "ssh_port": fleet.ssh_port,
        "api_server": args.cluster.api_server,
        "allow_release": fleet.allow_release,
        "allow_production_release": args.allow_production_release,
        "install_artifacts": _pins(fleet),
        # None while empty: claims made before the key existed see no change.
        "excluded_boxes": sorted(fleet.excluded_boxes) or None,
    }


def machine_props(args: BareMetalFleetArgs, *, project: str, stack: str) -> dict[str, Any]:
    """The AdoptedMachine inputs shared by every slot (the claim's outputs are added per slot)."""
    fleet = args.fleet
    return {
        "project": project,
        "stack": stack,
        "environment": args.environment.value,
        "fleet": fleet.name,
        "vendor": fleet.vendor.value,
        "node_pool": fleet.node_pool,
        "labels": dict(fleet.labels),
        "taints": _taints(fleet),
        "ssh_user": fleet.ssh_user,
        "ssh_port": fleet.ssh_port,
        "kubernetes_minor": args.cluster.kubernetes_minor,
        "api_server": args.cluster.api_server,
        # What every kubelet resolves Services through (the self-join's clusterDNS and clusterDomain).
        "cluster_dns": str(args.cluster.dns_service_ip),
        "cluster_domain": args.cluster.domain,
        "install_artifacts": _pins(fleet),
        # Elastic Metal: the Private Network each box brings up as VLAN pn0 (None: no network).
        "private_network": fleet.private_network.id if fleet.private_network else None,
        # Apple silicon: the node agent each Mac runs under launchd (a Mac never self-joins).
        "node_agent": fleet.node_agent.model_dump() if fleet.node_agent else None,
    }


def label_props(args: BareMetalFleetArgs) -> dict[str, Any]:
    """The NodeLabels inputs shared by every slot: the whole set each Node carries."""
    fleet = args.fleet
    return {
        "labels": node_labels(fleet.vendor, fleet.name, fleet.node_pool, fleet.labels),
        "taints": node_taints(fleet.vendor, _taints(fleet)),
        "capacity": node_capacity(fleet.vendor, fleet.egress_budget_mbps),
        "api_server": args.cluster.api_server,
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
    claims: list[MachineClaim]
    machines: list[AdoptedMachine]
    node_labels: list[NodeLabels]
    # One entry per machine: name, vendor, box_id, datacenter, public_ipv4, provider_id, node_name.
    machine_outputs: pulumi.Output[list[dict[str, Any]]]

    def __init__(
        self, name: str, args: BareMetalFleetArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(FLEET_TYPE, name, None, opts)
        fleet = args.fleet
        production = args.environment is Environment.PRODUCTION
        project, stack = pulumi.get_project(), pulumi.get_stack()
        # Where the children's progress lines attach. Computed, not taken from self.urn: a child whose
        # inputs waited on its parent's URN would be a dependency cycle. (A fleet with a parent of its
        # own has a longer URN: its children's lines then go unattached, to the log only.)
        own_urn = None if opts and opts.parent else f"urn:pulumi:{stack}::{project}::{FLEET_TYPE}::{name}"

        def urn(child: str, type_: str) -> pulumi.Input[str] | None:
            return pulumi.create_urn(child, type_, parent=own_urn) if own_urn else None

        shared = machine_props(args, project=project, stack=stack)
        labels = label_props(args)
        self.claims, self.machines, self.node_labels = [], [], []
        for i in range(fleet.machine_slots):
            slot = machine_name(fleet.name, i)
            claim = MachineClaim(
                f"{slot}-claim",
                {
                    **claim_props(args, project=project, stack=stack, slot=slot),
                    "urn": urn(f"{slot}-claim", CLAIM_TYPE),
                },
                pulumi.ResourceOptions(
                    parent=self,
                    protect=production,
                    # A replacement claim carries the same claim token (it is the slot's), so created
                    # first it would take the old claim's box as its own, and the old claim's release
                    # would then reinstall the box under it. One slot, one box: release, then claim.
                    delete_before_replace=True,
                    depends_on=[args.claims_crd] if args.claims_crd is not None else None,
                ),
            )
            machine = AdoptedMachine(
                slot,
                {
                    **shared,
                    "box_id": claim.box_id,
                    "box_name": claim.box_name,
                    "datacenter": claim.datacenter,
                    "public_ipv4": claim.public_ipv4,
                    "provider_id": claim.provider_id,
                    "claim_token": claim.claim_token,
                    # Known in a preview of the claim's update, where the facts above are not.
                    "claim_id": claim.id,
                    "urn": urn(slot, MACHINE_TYPE),
                },
                pulumi.ResourceOptions(
                    parent=self,
                    protect=production,
                    # The replacement would join the same box before the old one's release reinstalls it.
                    delete_before_replace=True,
                    depends_on=[
                        claim,
                        *args.node_bootstrap,
                        *([args.join_after] if args.join_after is not None else []),
                    ],
                ),
            )
            node_labels = NodeLabels(
                f"{slot}-labels",
                {
                    **labels,
                    "node_name": machine.node_name,
                    "urn": urn(f"{slot}-labels", LABELS_TYPE),
                },
                pulumi.ResourceOptions(parent=self, depends_on=[machine]),
            )
            self.claims.append(claim)
            self.machines.append(machine)
            self.node_labels.append(node_labels)
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
