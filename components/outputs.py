"""The stack outputs: the versioned contract other teams read (docs/outputs.md, docs/outputs.schema.json).

`stack_outputs` builds every output from the stack config and the components the program built;
__main__.py exports them one key at a time, and the schema test builds them the same way under
Pulumi's mocks. Bump OUTPUTS_VERSION (and the schema's `outputs_version` const) when a field changes
meaning or disappears; adding a field keeps the version (and adds it to the schema).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi

from components.capacity import capacity_outputs
from components.failover_ip import FailoverIP
from components.fleet import BareMetalFleet
from components.kura_region import KuraRegion
from config.models import StackConfig

__all__ = ["OUTPUTS_VERSION", "export_outputs", "stack_outputs"]

OUTPUTS_VERSION = 1


def _region(region: KuraRegion, failover: FailoverIP | None) -> dict[str, Any]:
    return {
        "id": region.id,
        "cluster_id": region.cluster_id,
        "host": region.host,
        "peer_host": region.peer_host,
        "failover_ip": region.failover_ip,
        "failover_routed_to": failover.routed_to if failover is not None else None,
        "node_pool": region.node_pool,
        "exposed": region.exposed,
        "gateway_mode": region.gateway_mode,
        "private": region.private,
        "node_ports": region.node_ports,
    }


def stack_outputs(
    cfg: StackConfig,
    *,
    fleets: Mapping[str, BareMetalFleet],
    regions: Mapping[str, KuraRegion],
    failover: Mapping[str, FailoverIP],
) -> dict[str, Any]:
    """Every stack output by key; values are plain data or Outputs of the components."""
    return {
        "outputs_version": OUTPUTS_VERSION,
        "environment": cfg.environment.value,
        "regions": {rid: _region(region, failover.get(rid)) for rid, region in regions.items()},
        # Private regions serve this stack's runners only: never offered to accounts.
        "available_regions": sorted(
            region.id for region in cfg.regions if region.exposed and not region.private
        ),
        "fleets": {
            name: {
                "vendor": cfg.fleet(name).vendor.value,
                "enabled": cfg.fleet(name).enabled,
                "node_pool": cfg.fleet(name).node_pool,
                "machines": fleet.machine_outputs,
            }
            for name, fleet in fleets.items()
        },
        "capacity": capacity_outputs(cfg),
    }


def export_outputs(outputs: Mapping[str, Any]) -> None:
    for key, value in outputs.items():
        pulumi.export(key, value)
