"""The dynamic resources: MachineClaim (a box held for a fleet slot) and AdoptedMachine (that box
joined to the cluster). BareMetalFleet (components/fleet.py) registers one of each per slot, the
machine depending on the claim's outputs, so `pulumi destroy` leaves the cluster first, then releases.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

from providers.dynamic_resource import DynamicResource
from providers.machine.provider import CLAIM_OUTPUTS, MACHINE_OUTPUTS, ClaimProvider, MachineProvider


class MachineClaim(DynamicResource, module="machine", name="MachineClaim"):
    """A box of the fleet claimed for one slot. Inputs: see ClaimSpec / docs/machines.md."""

    box_id: pulumi.Output[str]
    box_name: pulumi.Output[str]
    datacenter: pulumi.Output[str]
    public_ipv4: pulumi.Output[str]
    provider_id: pulumi.Output[str]
    node_name: pulumi.Output[str]
    claim_token: pulumi.Output[str]
    record: pulumi.Output[str]
    state: pulumi.Output[str]
    vendor: pulumi.Output[str]

    def __init__(
        self, name: str, props: Mapping[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        outputs = dict.fromkeys(CLAIM_OUTPUTS)
        super().__init__(ClaimProvider(), name, {**outputs, **props}, opts)


class AdoptedMachine(DynamicResource, module="machine", name="AdoptedMachine"):
    """One adopted box, joined. Inputs: see MachineSpec / docs/machines.md."""

    box_id: pulumi.Output[str]
    datacenter: pulumi.Output[str]
    public_ipv4: pulumi.Output[str]
    provider_id: pulumi.Output[str]
    node_name: pulumi.Output[str]
    host_key_fingerprint: pulumi.Output[str]
    node_registered: pulumi.Output[bool]
    state: pulumi.Output[str]
    vendor: pulumi.Output[str]

    def __init__(
        self, name: str, props: Mapping[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        outputs = dict.fromkeys(MACHINE_OUTPUTS)
        super().__init__(MachineProvider(), name, {**outputs, **props, "resource_name": name}, opts)
