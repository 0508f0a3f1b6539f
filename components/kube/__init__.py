"""The typed Kubernetes SDK's names, without its import cost: `from components import kube as k8s`,
then `k8s.apps.v1.Deployment(...)`, `k8s.core.v1.ContainerArgs(...)` as with pulumi_kubernetes
(components/kube/base.py says why and how they stay the same)."""

from pulumi_kubernetes.provider import Provider

from components.kube.api import apiextensions, apps, core, meta, networking, node, policy, rbac, storage

__all__ = [
    "Provider",
    "apiextensions",
    "apps",
    "core",
    "meta",
    "networking",
    "node",
    "policy",
    "rbac",
    "storage",
]
