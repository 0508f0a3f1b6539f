"""FailoverIP: one region's failover IP routed to a box of the region's fleet (deploy time).

Wraps the FailoverIPResource dynamic provider (providers/failover.py). A parked IP (not ordered yet,
no address) registers nothing. `candidates` are the box ids of the fleet's adopted machines
(BareMetalFleet machines' `box_id` outputs). When placement runs, the provider reads the fleet's Node
pool and the region's demux pods in the Kura namespace from the stack's cluster and ranks the
candidates as the failover watcher does (Ready Node, Ready demux pod); without a cluster, a box is
eligible once it is adopted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi

from config.models import FailoverIP as FailoverIPConfig
from providers.failover import FailoverIPResource

__all__ = ["FailoverIP", "FailoverIPArgs", "sorted_candidates"]


@dataclass(frozen=True)
class FailoverIPArgs:
    failover_ip: FailoverIPConfig
    region_id: str
    candidates: pulumi.Input[Sequence[pulumi.Input[str]]]
    node_pool: str  # the fleet's Node pool label value: the Nodes the watcher's rule reads
    namespace: str  # the Kura namespace: the region's peer-demux pods


def sorted_candidates(name: str, box_ids: Sequence[Any]) -> list[str]:
    """The box ids sorted and de-duplicated; a missing id is a wiring error, not an ineligible box."""
    bad = [box_id for box_id in box_ids if not isinstance(box_id, str) or not box_id]
    if bad:
        raise ValueError(f"failover IP {name}: candidate box ids must be non-empty strings, got {bad!r}")
    return sorted(set(box_ids))


class FailoverIP(pulumi.ComponentResource):
    address: pulumi.Output[str | None]
    routed_to: pulumi.Output[str | None]

    def __init__(self, name: str, args: FailoverIPArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tuist:failover_ip:FailoverIP", name, None, opts)
        fip = args.failover_ip
        self.resource: FailoverIPResource | None = None
        if fip.address is None:
            # Parked: the IP has not been ordered, so there is nothing to route.
            self.address = pulumi.Output.from_input(None)
            self.routed_to = pulumi.Output.from_input(None)
        else:
            candidates = pulumi.Output.from_input(args.candidates).apply(
                lambda ids: sorted_candidates(fip.name, ids)
            )
            self.resource = FailoverIPResource(
                name,
                vendor=fip.vendor.value,
                address=fip.address,
                region=args.region_id,
                fleet=fip.fleet,
                candidates=candidates,
                node_pool=args.node_pool,
                namespace=args.namespace,
                opts=pulumi.ResourceOptions(parent=self),
            )
            self.address = self.resource.address
            self.routed_to = self.resource.routed_to
        self.register_outputs({"address": self.address, "routed_to": self.routed_to})
