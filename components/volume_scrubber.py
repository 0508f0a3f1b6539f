"""One region's released-volume scrubber: a DaemonSet on the region's pool, its ServiceAccount and
least-privilege RBAC. Deployed for a region whose `released_volumes` is `scrub`.

The scrubber (watcher/released_volumes.py, run from the failover watcher's image as
`python -m watcher.released_volumes`) empties a Released volume of its own box and clears the
volume's claimRef so that the box's next claim can bind it. What it may do, and nothing more:
- list PersistentVolumes (cluster-scoped; RBAC cannot narrow a list) and patch only the region's own
  volumes, by name (a ClusterRole whose names follow the region's boxes);
- read claims in the Kura namespace (a Role), to see that a volume's claim is really gone.
On the box it mounts only VOLUME_ROOT, and runs as root without any capability but the two that
removing another user's files needs (DAC_OVERRIDE, FOWNER for sticky folders); its root filesystem
is read-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pulumi

from components import kube as k8s
from components.k8s import (
    bound_cluster_role,
    bound_role,
    child_options,
    heartbeat_probe,
    heartbeat_volume,
    metadata,
    pod_field_env,
    pool_node_selector,
    pool_tolerations,
    region_labels,
)
from config.models import Fleet, Region
from providers.constants import VOLUME_ROOT
from watcher.released_volumes import ScrubberSettings

__all__ = ["VolumeScrubber", "VolumeScrubberArgs", "scrubber_name", "scrubber_settings"]

RUN_DIR = "/run/released-volumes"  # an emptyDir: the root filesystem is read-only
VOLUME_MOUNT = "/volumes"
# Emptying a volume is disk work: a little CPU, no more memory than a loop.
SCRUBBER_RESOURCES = k8s.core.v1.ResourceRequirementsArgs(
    requests={"cpu": "10m", "memory": "32Mi"}, limits={"memory": "128Mi"}
)


def scrubber_name(region_id: str) -> str:
    return f"kura-released-volumes-{region_id}"


def scrubber_settings(region: Region, namespace: str) -> ScrubberSettings:
    """Its settings, but the node (each pod's own, from the downward API)."""
    return ScrubberSettings(
        region=region.id,
        node="",
        namespace=namespace,
        volume_mount=Path(VOLUME_MOUNT),
        heartbeat_file=f"{RUN_DIR}/heartbeat",
    )


@dataclass(frozen=True)
class VolumeScrubberArgs:
    region: Region
    fleet: Fleet
    namespace: str  # the Kura namespace: the claims, and the scrubber's own objects
    # The image that runs `python -m watcher.released_volumes` (the failover watcher's image).
    image: str
    # The names of the region's volumes (components/storage.LocalVolumes): the only ones it may patch.
    volume_names: Sequence[pulumi.Input[str]] = field(default_factory=tuple)


class VolumeScrubber(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: VolumeScrubberArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tuist:volume_scrubber:VolumeScrubber", name, None, opts)
        region, ns, sname = args.region, args.namespace, scrubber_name(args.region.id)
        labels = region_labels(name="kura-released-volumes", component="released-volumes", region=region.id)
        child = child_options(self, opts)
        rule = k8s.rbac.v1.PolicyRuleArgs
        subject = k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=sname, namespace=ns)

        volume_rules = [rule(api_groups=[""], resources=["persistentvolumes"], verbs=["list"])]
        if args.volume_names:
            # Never an empty list: RBAC reads no names as every name.
            volume_rules.append(
                rule(
                    api_groups=[""],
                    resources=["persistentvolumes"],
                    resource_names=list(args.volume_names),
                    verbs=["patch"],
                )
            )
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata=metadata(sname, ns, labels), opts=child
        )
        self.cluster_role, self.cluster_role_binding = bound_cluster_role(
            name, role_name=sname, labels=labels, rules=volume_rules, subject=subject, opts=child
        )
        claims = [rule(api_groups=[""], resources=["persistentvolumeclaims"], verbs=["get"])]
        self.role, self.role_binding = bound_role(
            name, role_name=sname, namespace=ns, labels=labels, rules=claims, subject=subject, opts=child
        )
        settings = scrubber_settings(region, ns)
        self.daemon_set = k8s.apps.v1.DaemonSet(
            f"{name}-daemonset",
            metadata=metadata(sname, ns, labels),
            spec=k8s.apps.v1.DaemonSetSpecArgs(
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=labels),
                    spec=k8s.core.v1.PodSpecArgs(
                        service_account_name=sname,
                        # Every box of the region's pool: a volume is emptied only by its own box.
                        node_selector=pool_node_selector(args.fleet),
                        tolerations=pool_tolerations(args.fleet),
                        security_context=k8s.core.v1.PodSecurityContextArgs(
                            seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault")
                        ),
                        volumes=[
                            heartbeat_volume(),
                            k8s.core.v1.VolumeArgs(
                                name="volumes",
                                host_path=k8s.core.v1.HostPathVolumeSourceArgs(
                                    path=VOLUME_ROOT, type="DirectoryOrCreate"
                                ),
                            ),
                        ],
                        containers=[
                            k8s.core.v1.ContainerArgs(
                                name="scrubber",
                                image=args.image,
                                command=["python", "-m", "watcher.released_volumes"],
                                env=[
                                    pod_field_env("NODE_NAME", "spec.nodeName"),
                                    *(
                                        k8s.core.v1.EnvVarArgs(name=k, value=v)
                                        for k, v in settings.to_env().items()
                                    ),
                                ],
                                volume_mounts=[
                                    k8s.core.v1.VolumeMountArgs(name="run", mount_path=RUN_DIR),
                                    k8s.core.v1.VolumeMountArgs(name="volumes", mount_path=VOLUME_MOUNT),
                                ],
                                # Each pass promises the time of the next: a loop hung on a call that
                                # never returns misses it and is restarted.
                                liveness_probe=heartbeat_probe(RUN_DIR),
                                resources=SCRUBBER_RESOURCES,
                                security_context=k8s.core.v1.SecurityContextArgs(
                                    # Kura's files are its own user's: root, with only the capabilities
                                    # that remove them.
                                    run_as_user=0,
                                    run_as_non_root=False,
                                    read_only_root_filesystem=True,
                                    allow_privilege_escalation=False,
                                    capabilities=k8s.core.v1.CapabilitiesArgs(
                                        drop=["ALL"], add=["DAC_OVERRIDE", "FOWNER"]
                                    ),
                                ),
                            )
                        ],
                    ),
                ),
            ),
            opts=child_options(self, opts, depends_on=[self.cluster_role_binding, self.role_binding]),
        )
        self.register_outputs({"region": region.id, "name": sname})
