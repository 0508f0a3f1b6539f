"""Composition root: load the stack config, build the components, export the outputs.

Nothing else lives here: every decision is in config/, components/ or providers/.
The stack outputs are a contract other teams read (docs/outputs.md); bump
OUTPUTS_VERSION when a field changes meaning or disappears.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components.capacity import capacity_outputs, capacity_problems
from components.claims_crd import MachineClaimsCRD
from components.failover_ip import FailoverIP, FailoverIPArgs
from components.fleet import BareMetalFleet, BareMetalFleetArgs
from components.kura_region import KuraRegion, KuraRegionArgs
from components.runners import RunnerPools, RunnerPoolsArgs
from config.loader import ConfigError, fail, load_from_pulumi

OUTPUTS_VERSION = 1


def main() -> None:
    try:
        cfg, secrets = load_from_pulumi()
    except ConfigError as err:
        fail(err.problems)
        return
    # Capacity is a cross-field rule too, kept with the capacity math it checks.
    if problems := capacity_problems(cfg):
        fail(problems)
        return

    if cfg.cluster.render_dir:
        # No cluster (dev): every object is written as YAML instead of applied.
        cluster = k8s.Provider("cluster", render_yaml_to_directory=cfg.cluster.render_dir)
    else:
        cluster = k8s.Provider("cluster", kubeconfig=secrets.kubeconfig)
    on_cluster = pulumi.ResourceOptions(providers=[cluster])

    # Claims are recorded in the cluster (MachineClaim objects) when the stack has one.
    claims_crd = (
        MachineClaimsCRD("machine-claims", opts=on_cluster)
        if any(fleet.enabled and fleet.size for fleet in cfg.fleets)
        else None
    )
    fleets = {
        fleet.name: BareMetalFleet(
            f"fleet-{fleet.name}",
            BareMetalFleetArgs(
                fleet=fleet,
                environment=cfg.environment,
                cluster=cfg.cluster,
                allow_production_release=cfg.allow_production_release,
                claims_crd=claims_crd,
            ),
        )
        for fleet in cfg.fleets
    }

    regions: dict[str, KuraRegion] = {}
    failover: dict[str, FailoverIP] = {}
    for region in cfg.regions:
        fleet = fleets[region.fleet]
        fip = cfg.failover_ip(region.failover_ip) if region.failover_ip else None
        if fip is not None:
            failover[region.id] = FailoverIP(
                f"failover-{fip.name}",
                FailoverIPArgs(
                    failover_ip=fip,
                    region_id=region.id,
                    candidates=[machine.box_id for machine in fleet.machines],
                ),
            )
        regions[region.id] = KuraRegion(
            f"kura-{region.id}",
            KuraRegionArgs(
                region=region,
                fleet=cfg.fleet(region.fleet),
                failover_ip=fip,
                kura=cfg.kura,
                environment=cfg.environment,
                public_ipv4s=[machine.public_ipv4 for machine in fleet.machines],
                watcher_image=cfg.kura.failover_watcher_image,
                vendors=cfg.vendors,
                secrets=secrets,
            ),
            opts=on_cluster,
        )

    RunnerPools(
        "runners",
        RunnerPoolsArgs(pools=cfg.runner_pools, fleets=cfg.fleets, cluster=cfg.cluster),
        opts=on_cluster,
    )

    pulumi.export("outputs_version", OUTPUTS_VERSION)
    pulumi.export("environment", cfg.environment.value)
    pulumi.export(
        "regions",
        {
            rid: {
                "id": r.id,
                "cluster_id": r.cluster_id,
                "host": r.host,
                "peer_host": r.peer_host,
                "failover_ip": r.failover_ip,
                "failover_routed_to": failover[rid].routed_to if rid in failover else None,
                "node_pool": r.node_pool,
                "exposed": r.exposed,
                "gateway_mode": r.gateway_mode,
            }
            for rid, r in regions.items()
        },
    )
    pulumi.export("available_regions", sorted(region.id for region in cfg.regions if region.exposed))
    pulumi.export(
        "fleets",
        {
            name: {
                "vendor": cfg.fleet(name).vendor.value,
                "enabled": cfg.fleet(name).enabled,
                "node_pool": cfg.fleet(name).node_pool,
                "machines": fleet.machine_outputs,
            }
            for name, fleet in fleets.items()
        },
    )
    pulumi.export("capacity", capacity_outputs(cfg))


main()
