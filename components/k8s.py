"""Shared Kubernetes naming, labels and scheduling helpers for the Kura components.

Pure functions only: every component builds its metadata and pool placement through
these, so a region's objects agree on names, labels and which boxes they run on.
"""

from __future__ import annotations

import hashlib

import pulumi_kubernetes as k8s

from config.models import Environment, Fleet

__all__ = [
    "MANAGED_BY",
    "POOL_LABEL",
    "config_hash",
    "env_suffix",
    "metadata",
    "pool_node_selector",
    "pool_tolerations",
    "region_labels",
]

# The pool label every adopted box carries (the self-join stamps it) and every
# regional workload selects on.
POOL_LABEL = "node.cluster.x-k8s.io/pool"
# Pulumi, not kura-controller, owns these objects here; the label says so.
MANAGED_BY = "tuist-infra"


def env_suffix(environment: Environment) -> str:
    """Public hostname suffix: empty in production, `-<env>` elsewhere (regions.ex)."""
    return "" if environment is Environment.PRODUCTION else f"-{environment.value}"


def region_labels(*, name: str, component: str, region: str) -> dict[str, str]:
    """The recommended app.kubernetes.io labels plus the region, used as selectors too."""
    return {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/instance": region,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "tuist.dev/region": region,
    }


def metadata(
    name: str,
    namespace: str | None,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
) -> k8s.meta.v1.ObjectMetaArgs:
    # An explicit name (no Pulumi auto-suffix): other objects and the watcher address
    # these by name, and the anchor's names are part of the operational contract.
    return k8s.meta.v1.ObjectMetaArgs(
        name=name, namespace=namespace, labels=dict(labels), annotations=annotations
    )


def pool_node_selector(fleet: Fleet) -> dict[str, str]:
    return {POOL_LABEL: fleet.node_pool}


def pool_tolerations(fleet: Fleet) -> list[k8s.core.v1.TolerationArgs]:
    """One toleration per fleet taint, matching key, value and effect exactly."""
    return [
        k8s.core.v1.TolerationArgs(
            key=t.key,
            operator="Equal" if t.value else "Exists",
            value=t.value or None,
            effect=t.effect.value,
        )
        for t in fleet.taints
    ]


def config_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
