"""Composition root: load the stack config, build the components, export the outputs.

Nothing else lives here: every decision is in config/, components/ or providers/.
The stack outputs are a contract other teams read (docs/outputs.md); they are built in
components/outputs.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pulumi

from components import kube as k8s
from components.capacity import capacity_problems
from components.claims_crd import MachineClaimsCRD
from components.external_dns import ExternalDns, ExternalDnsArgs
from components.failover_ip import FailoverIP, FailoverIPArgs
from components.failover_watcher import robot_failover_watchers
from components.fleet import BareMetalFleet, BareMetalFleetArgs, machine_name
from components.kura_controller import KuraController, KuraControllerArgs, RegionPlacement
from components.kura_region import KuraRegion, KuraRegionArgs
from components.node_bootstrap import NodeBootstrap, NodeBootstrapArgs
from components.outputs import export_outputs, stack_outputs
from components.runners import RunnerPools, RunnerPoolsArgs
from components.sdk import trim_sdk
from components.storage import LocalStorageClass, LocalStorageClassArgs
from config.loader import ConfigError, fail, load_from_pulumi
from config.rules import install_warnings


def main() -> None:
    # What the SDK does per resource, trimmed (components/sdk.py), after every import the run needs.
    trim_sdk()
    try:
        cfg, secrets = load_from_pulumi()
    except ConfigError as err:
        fail(err.problems)
        return
    # Capacity is a cross-field rule too, kept with the capacity math it checks.
    if problems := capacity_problems(cfg):
        fail(problems)
        return
    for warning in install_warnings(cfg):
        pulumi.log.warn(warning)

    if cfg.cluster.render_dir:
        # No cluster (dev): every object is written as YAML instead of applied.
        cluster = k8s.Provider("cluster", render_yaml_to_directory=cfg.cluster.render_dir)
    else:
        cluster = k8s.Provider(
            "cluster", kubeconfig=secrets.kubeconfig, cluster_identifier=cfg.cluster_identifier
        )
    on_cluster = pulumi.ResourceOptions(providers=[cluster])

    joining = [fleet.name for fleet in cfg.fleets if fleet.enabled and fleet.size]
    # Claims are recorded in the cluster (MachineClaim objects) when the stack has one.
    claims_crd = MachineClaimsCRD("machine-claims", opts=on_cluster) if joining else None
    # What a joining box's kubelet needs to TLS-bootstrap. kube-controller-manager's approver never
    # looks at a CSR again once it could not approve it, so every join waits for these bindings.
    node_bootstrap = (
        NodeBootstrap("node-bootstrap", NodeBootstrapArgs(fleets=joining), opts=on_cluster)
        if joining
        else None
    )
    # The control plane's door (on Hetzner Cloud): it admits each box from its claim's address, and
    # every join waits for it. The fleets come first (the firewall needs their claims), so the joins
    # get the firewall through a deferred output, resolved once it exists.
    door = cfg.cluster.control_plane_firewall
    admitted: pulumi.Output[pulumi.Resource] | None = None
    admit: Callable[[pulumi.Output[pulumi.Resource]], None] | None = None
    if door.enabled:
        admitted, admit = pulumi.deferred_output()
    fleets = {
        fleet.name: BareMetalFleet(
            f"fleet-{fleet.name}",
            BareMetalFleetArgs(
                fleet=fleet,
                environment=cfg.environment,
                cluster=cfg.cluster,
                allow_production_release=cfg.allow_production_release,
                claims_crd=claims_crd,
                join_after=admitted,
                node_bootstrap=node_bootstrap.by_fleet.get(fleet.name, []) if node_bootstrap else [],
            ),
        )
        for fleet in cfg.fleets
    }
    if admit is not None:
        # Imported only here: the Hetzner Cloud SDK takes a few hundred ms to import; dev has no door.
        from components.control_plane_firewall import Box, ControlPlaneFirewall, ControlPlaneFirewallArgs

        firewall = ControlPlaneFirewall(
            "control-plane-firewall",
            ControlPlaneFirewallArgs(
                settings=door,
                environment=cfg.environment,
                token=secrets.hcloud_token,
                boxes=[
                    Box(fleet=name, slot=machine_name(name, i), public_ipv4=claim.public_ipv4)
                    for name, built in fleets.items()
                    for i, claim in enumerate(built.claims)
                ],
            ),
        )
        admit(firewall.ready)

    placements = [
        RegionPlacement(
            region=region,
            fleet=cfg.fleet(region.fleet),
            failover_ip=cfg.failover_ip(region.failover_ip) if region.failover_ip else None,
        )
        for region in cfg.regions
    ]
    regions: dict[str, KuraRegion] = {}
    failover: dict[str, FailoverIP] = {}
    if cfg.regions:
        kura = KuraController(
            "kura-controller",
            KuraControllerArgs(
                placements=placements, kura=cfg.kura, environment=cfg.environment, cluster=cfg.cluster
            ),
            opts=on_cluster,
        )
        # Everything of the regions lives in the Kura namespace: nothing is applied before it exists.
        in_kura = pulumi.ResourceOptions(providers=[cluster], depends_on=[kura.namespace])
        external_dns = ExternalDns(
            "external-dns",
            ExternalDnsArgs(
                namespace=cfg.kura.namespace,
                cluster=cfg.cluster,
                environment=cfg.environment,
                cloudflare_api_token=secrets.cloudflare_api_token,
            ),
            opts=in_kura,
        )
        storage_classes = [
            LocalStorageClass(f"storage-{name}", LocalStorageClassArgs(name=name), opts=on_cluster)
            for name in sorted({region.storage_class for region in cfg.regions})
        ]
        # config requires a watcher image once a region exists (it runs the demux route reconciler).
        assert cfg.kura.failover_watcher_image is not None
        for placement in placements:
            region, fip = placement.region, placement.failover_ip
            fleet = fleets[region.fleet]
            # A fleet with no machine (parked, or size 0) has no box to route the IP to: no resource
            # (removing it leaves the IP where the vendor routes it), rather than an up that stops on it.
            if fip is not None and placement.fleet.machine_slots > 0:
                failover[region.id] = FailoverIP(
                    f"failover-{fip.name}",
                    FailoverIPArgs(
                        failover_ip=fip,
                        region_id=region.id,
                        candidates=[machine.box_id for machine in fleet.machines],
                        node_pool=placement.fleet.node_pool,
                        namespace=cfg.kura.namespace,
                    ),
                )
            regions[region.id] = KuraRegion(
                f"kura-{region.id}",
                KuraRegionArgs(
                    region=region,
                    fleet=placement.fleet,
                    failover_ip=fip,
                    kura=cfg.kura,
                    environment=cfg.environment,
                    cluster=cfg.cluster,
                    watcher_image=cfg.kura.failover_watcher_image,
                    node_names=[machine.node_name for machine in fleet.machines],
                    vendors=cfg.vendors,
                    secrets=secrets,
                    robot_failover_watchers=robot_failover_watchers(
                        cfg.regions,
                        cfg.failover_ips,
                        cfg.vendors.robot.failover_watchers if cfg.vendors.robot else None,
                    ),
                ),
                # The DNSEndpoints need their CRD, the DNS reconciler external-dns's namespace; the
                # volumes their StorageClass.
                opts=pulumi.ResourceOptions(
                    providers=[cluster],
                    depends_on=[
                        kura.namespace,
                        kura.failover_namespace,
                        external_dns.namespace,
                        external_dns.crd,
                        *storage_classes,
                    ],
                ),
            )

    RunnerPools(
        "runners",
        RunnerPoolsArgs(
            pools=cfg.runner_pools,
            fleets=cfg.fleets,
            cluster=cfg.cluster,
        ),
        opts=on_cluster,
    )

    export_outputs(stack_outputs(cfg, fleets=fleets, regions=regions, failover=failover))


main()
