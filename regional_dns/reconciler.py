"""The public-plane reconciler: every pass reads the region's gateway pods and Nodes, decides the
wildcard's targets (regional_dns.records) and writes the region's DNSEndpoint when they differ from
what it holds.

The program creates the DNSEndpoint and never sends its spec (components/dns.py); this process owns
`spec.endpoints` through server-side apply under its own field manager, so a `pulumi up` and the
reconciler never undo each other. Any failed read, a missing gateway Deployment included, keeps the
records as they are: only a successful observation changes them, and one that finds no healthy
gateway withdraws the wildcard (anchor 4.4). A read in which every Node of the pool has Ready
`Unknown` keeps them too: the control plane has lost every kubelet at once (an apiserver restart, a
firewall mistake), which says nothing of the boxes, whose gateways still serve.

Kubernetes is reached through `ClusterView` (`KubeView` is the kubernetes-client one), so the loop
is tested against a local API server and against a recorded one alike.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Protocol

from providers.constants import POOL_LABEL
from regional_dns.records import (
    NodeAddress,
    NodeView,
    PodView,
    healthy_targets,
    kubelets_unheard,
    wildcard_endpoints,
)
from watcher.environment import positive_seconds
from watcher.heartbeat import write_heartbeat
from watcher.loop import condition_true, pod_view

__all__ = [
    "CALL_SECONDS",
    "DNSENDPOINT_GROUP",
    "DNSENDPOINT_VERSION",
    "FIELD_MANAGER",
    "PASS_BUDGET_SECONDS",
    "ClusterView",
    "KubeView",
    "Outcome",
    "Pass",
    "RegionalDns",
    "Settings",
    "label_selector",
    "node_view",
]

log = logging.getLogger("regional_dns")

# The field manager that owns the public DNSEndpoint's spec.endpoints (Pulumi owns its metadata).
FIELD_MANAGER = "kura-regional-dns"
DNSENDPOINT_GROUP = "externaldns.k8s.io"
DNSENDPOINT_VERSION = "v1alpha1"
# (connect, read) seconds of each call: the client's default waits on a half-open connection forever.
KUBE_TIMEOUT = (5, 30)
# The longest one call takes on the reconciler's client (regional_dns.__main__), which tries a
# connection that was never made once more and nothing else (providers.kube.loop_retries): 5 + 5 + 30 s.
CALL_SECONDS = 2 * KUBE_TIMEOUT[0] + KUBE_TIMEOUT[1]
# What one pass may take: four reads and a write, CALL_SECONDS each (200 s), and 20 s to spare.
PASS_BUDGET_SECONDS = 5 * CALL_SECONDS + 20.0


@dataclass(frozen=True)
class Settings:
    """One region's reconciler: the Deployment's environment (components/dns_reconciler.py)."""

    region: str
    host: str  # the region host: the wildcard is *.<host>
    namespace: str  # the Kura namespace: the gateway and the DNSEndpoint live there
    gateway: str  # the gateway Deployment (components/gateway.py gateway_name)
    node_pool: str
    dnsendpoint: str  # components/dns.py regional_dns_name
    # How often the cluster is read (anchor 4.4: 30 s, with records of TTL 60 s).
    refresh_seconds: float = 30.0
    # Where each pass promises the time by which it will write again (the liveness probe reads it).
    heartbeat_file: str | None = None

    ENV: ClassVar[dict[str, str]] = {
        "region": "REGION",
        "host": "REGION_HOST",
        "namespace": "KURA_NAMESPACE",
        "gateway": "GATEWAY_DEPLOYMENT",
        "node_pool": "NODE_POOL",
        "dnsendpoint": "DNSENDPOINT",
    }

    def to_env(self) -> dict[str, str]:
        env = {name: str(getattr(self, field)) for field, name in self.ENV.items()}
        env["REFRESH_SECONDS"] = f"{self.refresh_seconds:g}"
        if self.heartbeat_file:
            env["HEARTBEAT_FILE"] = self.heartbeat_file
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        missing = [name for name in cls.ENV.values() if not env.get(name)]
        if missing:
            raise ValueError(f"environment variable(s) {', '.join(missing)} required")
        return cls(
            **{field: env[name] for field, name in cls.ENV.items()},
            refresh_seconds=positive_seconds(env, "REFRESH_SECONDS", "30"),
            heartbeat_file=env.get("HEARTBEAT_FILE") or None,
        )


def node_view(node: Any) -> NodeView:
    """A kubernetes V1Node as the decision sees it."""
    status = node.status
    conditions = status.conditions if status else None
    return NodeView(
        name=node.metadata.name,
        ready=condition_true(conditions, "Ready"),
        ready_unknown=any(c.type == "Ready" and c.status == "Unknown" for c in conditions or []),
        terminating=node.metadata.deletion_timestamp is not None,
        unschedulable=bool(node.spec and node.spec.unschedulable),
        addresses=tuple(NodeAddress(a.type, a.address) for a in (status.addresses if status else None) or []),
    )


def label_selector(selector: Any) -> str:
    """A V1LabelSelector as the `labelSelector` query string the API takes."""
    terms = [f"{k}={v}" for k, v in sorted((selector.match_labels or {}).items())]
    for e in selector.match_expressions or []:
        values = ",".join(e.values or [])
        terms.append(
            {
                "In": f"{e.key} in ({values})",
                "NotIn": f"{e.key} notin ({values})",
                "Exists": e.key,
                "DoesNotExist": f"!{e.key}",
            }[e.operator]
        )
    if not terms:
        # An empty selector selects every pod of the namespace: never the gateway's.
        raise ValueError("the gateway Deployment's selector is empty")
    return ",".join(terms)


class ClusterView(Protocol):
    def observe(self) -> tuple[list[NodeView], list[PodView]]:
        """The region's pool Nodes and its gateway's pods; raises when any read fails."""

    def stored(self) -> list[dict[str, Any]]:
        """The DNSEndpoint's spec.endpoints as the API holds them; raises when the read fails."""

    def write(self, endpoints: list[dict[str, Any]]) -> None:
        """Apply spec.endpoints as this reconciler's field manager."""


class KubeView:
    """ClusterView over the kubernetes client (CoreV1Api, AppsV1Api, CustomObjectsApi)."""

    def __init__(self, settings: Settings, core_v1: Any, apps_v1: Any, custom: Any) -> None:
        self.settings = settings
        self._core, self._apps, self._custom = core_v1, apps_v1, custom

    def observe(self) -> tuple[list[NodeView], list[PodView]]:
        s = self.settings
        # A missing gateway Deployment is a failed read, not an empty region (anchor 4.4).
        deployment = self._apps.read_namespaced_deployment(
            s.gateway, s.namespace, _request_timeout=KUBE_TIMEOUT
        )
        pods = self._core.list_namespaced_pod(
            s.namespace,
            label_selector=label_selector(deployment.spec.selector),
            _request_timeout=KUBE_TIMEOUT,
        ).items
        nodes = self._core.list_node(
            label_selector=f"{POOL_LABEL}={s.node_pool}", _request_timeout=KUBE_TIMEOUT
        ).items
        return [node_view(n) for n in nodes], [pod_view(p) for p in pods]

    def _object(self) -> tuple[str, str, str, str, str]:
        s = self.settings
        return DNSENDPOINT_GROUP, DNSENDPOINT_VERSION, s.namespace, "dnsendpoints", s.dnsendpoint

    def stored(self) -> list[dict[str, Any]]:
        found = self._custom.get_namespaced_custom_object(*self._object(), _request_timeout=KUBE_TIMEOUT)
        endpoints: list[dict[str, Any]] = (found.get("spec") or {}).get("endpoints") or []
        return endpoints

    def write(self, endpoints: list[dict[str, Any]]) -> None:
        s = self.settings
        body = {
            "apiVersion": f"{DNSENDPOINT_GROUP}/{DNSENDPOINT_VERSION}",
            "kind": "DNSEndpoint",
            "metadata": {"name": s.dnsendpoint, "namespace": s.namespace},
            "spec": {"endpoints": endpoints},
        }
        self._custom.patch_namespaced_custom_object(
            *self._object(),
            body,
            field_manager=FIELD_MANAGER,
            # Takes spec.endpoints over from the program's manager the first time (the records it
            # once deployed), and from anyone who edited them by hand since.
            force=True,
            _content_type="application/apply-patch+yaml",
            _request_timeout=KUBE_TIMEOUT,
        )


class Outcome(StrEnum):
    WRITTEN = "written"  # the DNSEndpoint now holds `endpoints`
    UNCHANGED = "unchanged"  # it already held them
    # A read or the write failed, or every Node of the pool reads Ready Unknown: the DNSEndpoint is as
    # it was.
    KEPT = "kept"


@dataclass(frozen=True)
class Pass:
    outcome: Outcome
    # What the region should publish; None when a read failed or told nothing (every Node Unknown).
    endpoints: list[dict[str, Any]] | None


class RegionalDns:
    def __init__(self, settings: Settings, cluster: ClusterView) -> None:
        self.settings = settings
        self._cluster = cluster
        # Whether this process has applied the records once: until then it writes even when the
        # DNSEndpoint already holds them, so that spec.endpoints is its own (Pulumi then leaves it).
        self._applied = False

    def reconcile_once(self) -> Pass:
        s = self.settings
        try:
            nodes, pods = self._cluster.observe()
            stored = self._cluster.stored()
        except Exception as exc:
            # Not evidence that any box died: the records stay as they are until a read succeeds.
            log.warning("region %s: read failed, keeping the public records as they are: %s", s.region, exc)
            return Pass(Outcome.KEPT, None)
        if kubelets_unheard(nodes):
            # The node lifecycle controller marks a Node Unknown when its kubelet goes unheard, and the
            # pods on it not Ready: gateways that still serve would all read unfit, and withdrawing
            # the wildcard (NXDOMAIN, cached by resolvers) would be the outage.
            log.warning(
                "region %s: every Node of pool %s reads Ready Unknown (the control plane hears no "
                "kubelet: %s), keeping the public records as they are",
                s.region,
                s.node_pool,
                ", ".join(sorted(n.name for n in nodes)),
            )
            return Pass(Outcome.KEPT, None)
        healthy = healthy_targets(nodes, pods)
        endpoints = wildcard_endpoints(s.host, healthy.targets)
        left_out = "; ".join(healthy.left_out) or "none"
        if not healthy.targets:
            log.error(
                "region %s: ALERT no gateway serves: *.%s withdrawn (left out: %s)",
                s.region,
                s.host,
                "; ".join(healthy.left_out) or "no gateway pod",
            )
        if self._applied and stored == endpoints:
            return Pass(Outcome.UNCHANGED, endpoints)
        try:
            self._cluster.write(endpoints)
        except Exception as exc:
            log.warning("region %s: write failed, records left as they were, retrying: %s", s.region, exc)
            return Pass(Outcome.KEPT, endpoints)
        self._applied = True
        if healthy.targets:
            log.info(
                "region %s: *.%s -> %s (left out: %s)", s.region, s.host, ", ".join(healthy.targets), left_out
            )
        return Pass(Outcome.WRITTEN, endpoints)

    def run(self, stop: threading.Event) -> None:
        """A pass every `refresh_seconds` until `stop` is set, promising each next heartbeat first."""
        while not stop.is_set():
            self.beat(PASS_BUDGET_SECONDS)
            self.reconcile_once()
            self.beat(self.settings.refresh_seconds + PASS_BUDGET_SECONDS)
            stop.wait(self.settings.refresh_seconds)

    def beat(self, within: float) -> None:
        """Write the heartbeat: the time by which the loop will write it again."""
        write_heartbeat(self.settings.heartbeat_file, within)
