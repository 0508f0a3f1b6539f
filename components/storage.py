"""Local NVMe storage for Kura on bare metal: a StorageClass and static local volumes per box.

Kura on a bare-metal region claims 50Gi volumes on the box's /data disk (seed 000, "50Gi
local-NVMe PVCs bound"). Each adopted box gets `volumes_per_box` PersistentVolumes of
`storage_size_gi`, pinned to its node by node affinity, under /data/kura-volumes/. The StorageClass
has no provisioner and binds WaitForFirstConsumer, so the scheduler picks the box (the pool's, by
the pod's selector and tolerations) and a free volume on it together.

Why static volumes rather than a local-path provisioner: nothing more to run, patch and pin in the
cluster; capacity is declared, so the scheduler never puts a claim on a box whose volumes are all
taken (a hostPath provisioner promises any size); and a volume lives exactly as long as the box it
is on: it is created after the box joins and deleted when the box is released. The release
(providers/kube.py) deletes the claims of the classes in NODE_LOCAL_STORAGE_CLASSES, the names
config requires Kura regions to use, so the box's claims go with its reinstall.

A volume whose claim is deleted while its box stays (kura-controller drops a claim, an account's
instance goes) turns Released (Failed, when kura-controller first flipped it to reclaim policy Delete:
no deleter removes a hostPath volume outside /tmp), and Kubernetes never binds it again. Each volume says
what then becomes of its data (`tuist.dev/on-release`, the region's `released_volumes`): `keep`
leaves it to an operator (docs/runbook.md), `scrub` has the region's scrubber on the box empty it
and make it Available (components/volume_scrubber.py, watcher/released_volumes.py).

A volume bound to a claim cannot go before the claim does (pv-protection), and the claim goes
during the box's release, after Pulumi has asked for the volume's deletion: the volume therefore
skips Pulumi's delete await and disappears once the release has deleted its claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi

from components import kube as k8s
from components.k8s import MANAGED_BY, child_options
from config.models import Region
from providers.constants import HOSTNAME_LABEL, ON_RELEASE_ANNOTATION, volume_path
from providers.kube import NODE_LOCAL_STORAGE_CLASSES

__all__ = [
    "LocalStorageClass",
    "LocalStorageClassArgs",
    "LocalVolumes",
    "LocalVolumesArgs",
    "volume_name",
]

NO_PROVISIONER = "kubernetes.io/no-provisioner"


def volume_name(node: str, index: int) -> str:
    return f"kura-{node}-{index}"


@dataclass(frozen=True)
class LocalStorageClassArgs:
    name: str


class LocalStorageClass(pulumi.ComponentResource):
    """The node-local StorageClass (cluster-wide; one per class name the regions use)."""

    def __init__(self, name: str, args: LocalStorageClassArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tuist:storage:LocalStorageClass", name, None, opts)
        if args.name not in NODE_LOCAL_STORAGE_CLASSES:
            raise ValueError(
                f"storage class '{args.name}' is not one the release of a box cleans up "
                f"({', '.join(NODE_LOCAL_STORAGE_CLASSES)})"
            )
        self.storage_class = k8s.storage.v1.StorageClass(
            f"{name}-storageclass",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=args.name,
                labels={"app.kubernetes.io/managed-by": MANAGED_BY, "app.kubernetes.io/part-of": "kura"},
            ),
            provisioner=NO_PROVISIONER,
            # The scheduler chooses the box and the volume together, from the pod's placement.
            volume_binding_mode="WaitForFirstConsumer",
            reclaim_policy="Retain",
            allow_volume_expansion=False,
            opts=child_options(self, opts),
        )
        self.register_outputs({"name": args.name})


@dataclass(frozen=True)
class LocalVolumesArgs:
    region: Region
    # The node name of each adopted box of the region's fleet (machine outputs).
    node_names: Sequence[pulumi.Input[str]] = field(default_factory=tuple)


class LocalVolumes(pulumi.ComponentResource):
    """`volumes_per_box` local PersistentVolumes on each box of a region's fleet."""

    def __init__(self, name: str, args: LocalVolumesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tuist:storage:LocalVolumes", name, None, opts)
        region = args.region
        self.volumes: list[k8s.core.v1.PersistentVolume] = []
        self.names: list[pulumi.Output[str]] = []
        for box, node in enumerate(args.node_names):
            for index in range(region.volumes_per_box):
                # The node's name is in the volume's: a box replaced in the same fleet slot gets new
                # volumes (node affinity cannot change) while the old ones wait for their claims.
                pv_name: pulumi.Output[str] = pulumi.Output.from_input(node).apply(
                    lambda n, i=index: volume_name(n, i)  # type: ignore[misc]
                )
                self.names.append(pv_name)
                self.volumes.append(
                    k8s.core.v1.PersistentVolume(
                        f"{name}-{box}-{index}",
                        metadata=k8s.meta.v1.ObjectMetaArgs(
                            name=pv_name,
                            labels={
                                "app.kubernetes.io/managed-by": MANAGED_BY,
                                "app.kubernetes.io/part-of": "kura",
                                "tuist.dev/region": region.id,
                            },
                            annotations={
                                "pulumi.com/skipAwait": "true",
                                # Read by the region's scrubber (watcher/released_volumes.py), if any.
                                ON_RELEASE_ANNOTATION: region.released_volumes.value,
                            },
                        ),
                        spec=k8s.core.v1.PersistentVolumeSpecArgs(
                            capacity={"storage": f"{region.storage_size_gi}Gi"},
                            access_modes=["ReadWriteOnce"],
                            volume_mode="Filesystem",
                            storage_class_name=region.storage_class,
                            # Retain when made; kura-controller flips it to Delete before it deletes a
                            # claim, and owns the field from then on (ignore_changes below).
                            persistent_volume_reclaim_policy="Retain",
                            # Created on first use, under the box's /data disk.
                            host_path=k8s.core.v1.HostPathVolumeSourceArgs(
                                path=pv_name.apply(volume_path), type="DirectoryOrCreate"
                            ),
                            node_affinity=k8s.core.v1.VolumeNodeAffinityArgs(
                                required=k8s.core.v1.NodeSelectorArgs(
                                    node_selector_terms=[
                                        k8s.core.v1.NodeSelectorTermArgs(
                                            match_expressions=[
                                                k8s.core.v1.NodeSelectorRequirementArgs(
                                                    key=HOSTNAME_LABEL, operator="In", values=[node]
                                                )
                                            ]
                                        )
                                    ]
                                )
                            ),
                        ),
                        # An apply of Retain over kura-controller's Delete is a field conflict: it
                        # would fail every later up that touches the volume (a label, the
                        # released_volumes annotation), and forcing it would strand the volume.
                        opts=child_options(self, opts, ignore_changes=["spec.persistentVolumeReclaimPolicy"]),
                    )
                )
        self.register_outputs({"region": region.id, "volumes": len(self.volumes)})
