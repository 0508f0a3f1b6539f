"""One RunnerPool object per configured pool, and the scheduling facts it carries.

The runners-controller turns each RunnerPool into warm runner pods (macOS on Mac
minis, Linux as kata-qemu microVMs on Hetzner Robot hosts). The CRD itself is in
components/runners.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from components import kube as k8s
from components.k8s import MANAGED_BY, pool_node_selector, pool_toleration_dicts
from config import models

RUNNER_POOL_GROUP = "tuist.dev"
RUNNER_POOL_VERSION = "v1alpha1"
RUNNER_POOL_API_VERSION = f"{RUNNER_POOL_GROUP}/{RUNNER_POOL_VERSION}"
RUNNER_POOL_KIND = "RunnerPool"

# Robot runner hosts carry this taint so nothing but runner microVMs lands on them.
RUNNER_TIER_TAINT_KEY = "tuist.dev/runner-tier"
RUNNER_TIER_TAINT_VALUE = "bare-metal"
RUNNER_TIER_TAINT_EFFECT = "NoSchedule"
RUNNER_TIER_TOLERATION: dict[str, str] = {
    "key": RUNNER_TIER_TAINT_KEY,
    "operator": "Equal",
    "value": RUNNER_TIER_TAINT_VALUE,
    "effect": RUNNER_TIER_TAINT_EFFECT,
}

# Stamped by the Robot install (seed 003): Kata's own label, used for scheduling.
KATA_NODE_LABELS: dict[str, str] = {"katacontainers.io/kata-runtime": "true"}
KATA_RUNTIME_CLASS = "kata-qemu"

# What a runner microVM costs the host besides its containers' requests (seed 003: ~45-50 MiB of
# VMM overhead per pod at the 1 vCPU / 4 GiB slot). The Robot pre-bake writes the guest's base
# size as a Kata drop-in (providers/ssh/scripts/robot-postinstall.sh, 50-tuist-runner-slot.toml):
# 256 MiB, Kata's floor (a smaller default_memory is silently replaced by its 2048 default), one
# boot vCPU, and sandbox_cgroup_only, so QEMU, virtiofsd and the shim are charged to the pod. The
# container limits are hot-plugged on top of the base. The stock guest (2048 MiB) with a 2560Mi
# overhead fitted about 9 runner pods on an AX42-U; this fits 15, the seed's ~16 (components/capacity.py).
KATA_GUEST_BASE_MEMORY_MIB = 256
KATA_GUEST_BASE_VCPUS = 1
# QEMU's own memory, virtiofsd and containerd-shim-kata-v2 on the host.
KATA_HOST_OVERHEAD_MIB = 64
# Their CPU: the QEMU main loop and I/O threads, virtiofsd and the shim are light when idle.
KATA_OVERHEAD_CPU_MILLI = 50
KATA_OVERHEAD_MEMORY_MIB = KATA_GUEST_BASE_MEMORY_MIB + KATA_HOST_OVERHEAD_MIB
KATA_POD_OVERHEAD: dict[str, str] = {
    "cpu": f"{KATA_OVERHEAD_CPU_MILLI}m",
    "memory": f"{KATA_OVERHEAD_MEMORY_MIB}Mi",
}

# What the runner registers with on GitHub; the server mints JIT configs with these
# plus the dispatch label and treats an empty list as a bug, so every pool sets them.
RUNNER_LABELS: dict[models.RunnerOS, list[str]] = {
    models.RunnerOS.LINUX: ["self-hosted", "Linux", "X64"],
    models.RunnerOS.DARWIN: ["self-hosted", "macOS", "ARM64"],
}

FLEET_LABEL = "tuist.dev/fleet"


def autoscaling_spec(autoscaling: models.Autoscaling) -> dict[str, Any]:
    """Explicit values, zeros included, always rendered; unset ones left out so the
    CRD default applies. (The anchor's incident: an omitted 0 came back as 1 and
    pinned an unrequested Mac mini per pool.)"""
    spec: dict[str, Any] = {"enabled": autoscaling.enabled}
    optional = {
        "minWarmPoolFloor": autoscaling.min_warm_pool_floor,
        "maxReplicas": autoscaling.max_replicas,
        "scaleDownCooldownSeconds": autoscaling.scale_down_cooldown_seconds,
    }
    spec.update({key: value for key, value in optional.items() if value is not None})
    return spec


def runner_tolerations(fleet: models.Fleet) -> list[dict[str, str]]:
    """Every taint the fleet's Nodes carry (its own and the runner tier's, components/k8s.py
    pool_toleration_dicts), tolerated exactly: a runner fleet with a taint of its own still runs its pods."""
    tolerations = pool_toleration_dicts(fleet)
    if not any(t["key"] == RUNNER_TIER_TAINT_KEY for t in tolerations):
        tolerations.append(dict(RUNNER_TIER_TOLERATION))
    return tolerations


def runner_pool_spec(pool: models.RunnerPool, fleet: models.Fleet) -> dict[str, Any]:
    """spec of the pool's RunnerPool object.

    `replicas` is left out on purpose: the autoscaler owns it, and a value here would
    be reset on every `pulumi up`.
    """
    spec: dict[str, Any] = {
        "image": pool.image,
        "fleetSelector": pool.fleet,
        "dispatchLabel": pool.dispatch_label,
        "runnerLabels": list(RUNNER_LABELS[pool.os]),
        "os": pool.os.value,
        "podCPUMilli": pool.pod_cpu_milli,
        "podMemoryMB": pool.pod_memory_mb,
        "autoscaling": autoscaling_spec(pool.autoscaling),
    }
    if pool.os is models.RunnerOS.LINUX:
        # Every Linux runner pod has a privileged docker:dind sidecar: only a microVM
        # keeps that away from the host kernel.
        spec["runtimeClass"] = KATA_RUNTIME_CLASS
        # Kata's label, plus the fleet's pool label so two Linux fleets never share pods.
        spec["nodeSelector"] = {**KATA_NODE_LABELS, **pool_node_selector(fleet)}
        spec["tolerations"] = runner_tolerations(fleet)
    return spec


def runner_pool_metadata(pool: models.RunnerPool, namespace: str) -> dict[str, Any]:
    return {
        "name": pool.name,
        "namespace": namespace,
        "labels": {
            "app.kubernetes.io/managed-by": MANAGED_BY,
            "app.kubernetes.io/part-of": "tuist-runners",
            FLEET_LABEL: pool.fleet,
        },
    }


def runner_pool_manifest(pool: models.RunnerPool, fleet: models.Fleet, namespace: str) -> dict[str, Any]:
    """The whole object as the apiserver receives it."""
    return {
        "apiVersion": RUNNER_POOL_API_VERSION,
        "kind": RUNNER_POOL_KIND,
        "metadata": runner_pool_metadata(pool, namespace),
        "spec": runner_pool_spec(pool, fleet),
    }


@dataclass(frozen=True)
class RunnerPoolArgs:
    pool: models.RunnerPool
    fleet: models.Fleet  # the fleet the pool's pods run on
    namespace: str


class RunnerPool(pulumi.ComponentResource):
    """The RunnerPool custom resource of one configured pool.

    `opts.depends_on` (the CRD, the namespace) is handed to the object itself, since
    a component's dependencies do not hold back its children.
    """

    def __init__(self, name: str, args: RunnerPoolArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tuist:runner_pool:RunnerPool", name, None, opts)
        manifest = runner_pool_manifest(args.pool, args.fleet, args.namespace)
        self.object = k8s.apiextensions.CustomResource(
            f"{name}-object",
            api_version=manifest["apiVersion"],
            kind=manifest["kind"],
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=opts.depends_on if opts else None),
        )
        self.register_outputs({"name": args.pool.name, "namespace": args.namespace})
