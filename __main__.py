"""Composition root: load the stack config, build the components, export the outputs.

Nothing else lives here: every decision is in config/, components/ or providers/.
The stack outputs are a contract other teams read (docs/outputs.md); they are built in
components/outputs.py.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components.capacity import capacity_problems
from components.claims_crd import MachineClaimsCRD
from components.failover_ip import FailoverIP, FailoverIPArgs
from components.failover_watcher import robot_failover_watchers
from components.fleet import BareMetalFleet, BareMetalFleetArgs
from components.kura_region import KuraRegion, KuraRegionArgs
from components.outputs import export_outputs, stack_outputs
from components.runners import RunnerPools, RunnerPoolsArgs
from config.loader import ConfigError, fail, load_from_pulumi


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
                robot_failover_watchers=robot_failover_watchers(cfg.regions, cfg.failover_ips),
            ),
            opts=on_cluster,
        )

    RunnerPools(
        "runners",
        RunnerPoolsArgs(pools=cfg.runner_pools, fleets=cfg.fleets, cluster=cfg.cluster),
        opts=on_cluster,
    )

    export_outputs(stack_outputs(cfg, fleets=fleets, regions=regions, failover=failover))

main()
