"""Every object of a whole stack, rendered by the program under Pulumi's mocks (tests/test_program.py),
applied to the real control plane; then every identity the program gives rights to is judged by the
real authorizer (SubjectAccessReview): allowed what its workload does, denied a sample of what it must
never do.

What each workload needs is stated here from what the workload does (the process, its arguments and
the files it is given), not read off the roles the program renders: a role that lost a verb, or a
Deployment whose lease or ConfigMap no longer matches its role, fails here. A workload or a
ServiceAccount this file has no facts for fails too, so a new one cannot go unchecked.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.cluster.k8s_support import apply, can, install_crd_fixture
from tests.support.cluster import KubeCluster
from tests.test_program import run_program

STACK = "dev"  # the stack with every kind of workload (failover watchers, gateways, demux, runners)


@dataclass(frozen=True)
class Check:
    verb: str
    resource: str
    namespace: str | None = None  # None: cluster scope
    group: str = ""
    subresource: str | None = None
    name: str | None = None

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else " (cluster)"
        sub = f"/{self.subresource}" if self.subresource else ""
        named = f" {self.name}" if self.name else ""
        return f"{self.verb} {self.group + '/' if self.group else ''}{self.resource}{sub}{named}{where}"


@dataclass(frozen=True)
class Workload:
    kind: str
    name: str
    namespace: str
    service_account: str
    args: list[str]
    env: dict[str, str]
    # The stack's local volumes of the workload's region (REGION), what a scrubber acts on, and the rest.
    region_volumes: tuple[str, ...] = ()
    other_volumes: tuple[str, ...] = ()

    def arg(self, flag: str) -> str:
        found = [a.split("=", 1)[1] for a in self.args if a.startswith(f"--{flag}=")]
        assert len(found) == 1, f"{self.kind} {self.name}: expected one --{flag}, got {self.args}"
        return found[0].replace("$(POD_NAMESPACE)", self.namespace)


def workloads(manifests: list[dict[str, Any]]) -> list[Workload]:
    found = []
    volumes: dict[str, list[str]] = {}
    for m in manifests:
        if m["kind"] == "PersistentVolume":
            volumes.setdefault(m["metadata"]["labels"]["tuist.dev/region"], []).append(m["metadata"]["name"])
    for m in manifests:
        if m["kind"] not in ("Deployment", "DaemonSet", "StatefulSet"):
            continue
        pod = m["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        env = {e["name"]: e.get("value", "") for e in container.get("env") or []}
        found.append(
            Workload(
                kind=m["kind"],
                name=m["metadata"]["name"],
                namespace=m["metadata"]["namespace"],
                service_account=pod.get("serviceAccountName") or "default",
                args=list(container.get("args") or []),
                env=env,
                region_volumes=tuple(sorted(volumes.get(env.get("REGION", ""), []))),
                other_volumes=tuple(
                    sorted(v for r, vs in volumes.items() if r != env.get("REGION") for v in vs)
                ),
            )
        )
    return found


# --- what each workload does ----------------------------------------------------------------------------


# Upstream hardcodes both controllers' leader-election IDs (tuist/tuist infra/*/cmd/manager/main.go);
# the Lease is in the pod's own namespace.
KURA_CONTROLLER_LEASE = "kura-controller.kura.tuist.dev"
RUNNERS_CONTROLLER_LEASE = "runners-controller.tuist.dev"


def kura_controller(w: Workload) -> tuple[list[Check], list[Check]]:
    ns = w.arg("watch-namespace")
    assert not [a for a in w.args if a.startswith("--leader-election-")], w.args  # no such flags upstream
    needs = [
        *(Check(v, "statefulsets", ns, "apps") for v in ("create", "update", "delete", "watch")),
        *(Check(v, "services", ns) for v in ("create", "update", "delete", "watch")),
        Check("watch", "pods", ns),
        Check("delete", "persistentvolumeclaims", ns),  # a claim that can never bind again
        Check("list", "nodes"),  # topology of the bare-metal pool
        Check("patch", "persistentvolumes"),  # reclaim policy Delete before its claim goes
        *(Check(v, "kurainstances", ns, "kura.tuist.dev") for v in ("list", "watch", "update")),
        Check("update", "kurainstances", ns, "kura.tuist.dev", "status"),
        # The peer TLS Secret each account's pods mount, and the account's peer CA.
        *(Check(v, "secrets", ns) for v in ("create", "update", "watch")),
        Check("create", "dnsendpoints", ns, "externaldns.k8s.io"),  # a host-network region's peer host
        *(
            Check(v, r, ns, "networking.k8s.io")
            for r in ("ingresses", "networkpolicies")
            for v in ("create", "watch")
        ),
        Check("create", "poddisruptionbudgets", ns, "policy"),
        Check("create", "events", ns),
        Check("create", "leases", w.namespace, "coordination.k8s.io"),
        Check("update", "leases", w.namespace, "coordination.k8s.io", name=KURA_CONTROLLER_LEASE),
    ]
    never = [
        Check("get", "secrets", "kura-failover"),  # the failover watchers' vendor credentials
        Check("list", "secrets", "kura-dns"),  # external-dns's Cloudflare token
        Check("create", "pods", ns),  # it runs instances as StatefulSets, never bare pods
        Check("create", "statefulsets", "tuist-runners", "apps"),
        Check("delete", "nodes"),
        Check("patch", "nodes"),
        # Upstream's PeerDemuxReconciler would write our kura-peer-demux-<region> objects with these.
        Check("create", "configmaps", ns),
        Check("update", "daemonsets", ns, "apps"),
        Check("delete", "daemonsets", ns, "apps"),
        Check("update", "leases", w.namespace, "coordination.k8s.io", name=RUNNERS_CONTROLLER_LEASE),
    ]
    return needs, never


def external_dns(w: Workload) -> tuple[list[Check], list[Check]]:
    ns = w.arg("namespace")
    assert w.arg("source") == "crd"
    needs = [
        Check("list", "dnsendpoints", ns, "externaldns.k8s.io"),
        Check("watch", "dnsendpoints", ns, "externaldns.k8s.io"),
        Check("update", "dnsendpoints", ns, "externaldns.k8s.io", "status"),
    ]
    never = [
        # The program and the regional DNS reconcilers own the records.
        Check("update", "dnsendpoints", ns, "externaldns.k8s.io"),
        Check("patch", "dnsendpoints", ns, "externaldns.k8s.io"),
        Check("delete", "dnsendpoints", ns, "externaldns.k8s.io"),
        Check("list", "dnsendpoints", "default", "externaldns.k8s.io"),
        Check("list", "services", ns),  # the crd source only
        Check("get", "secrets", ns),  # its Cloudflare token is a mounted file
        Check("get", "secrets", w.namespace),
    ]
    return needs, never


def runners_controller(w: Workload) -> tuple[list[Check], list[Check]]:
    ns = w.arg("namespace")
    assert w.env["TUIST_RUNNER_DISPATCH_URL"].endswith("/api/internal/runners/dispatch"), w.env
    needs = [
        *(Check(v, "pods", ns) for v in ("create", "delete", "watch", "patch")),
        *(Check(v, "serviceaccounts", ns) for v in ("create", "delete", "watch")),
        *(Check(v, "runnerpools", ns, "tuist.dev") for v in ("list", "watch", "update", "patch")),
        Check("update", "runnerpools", ns, "tuist.dev", "status"),
        Check("watch", "nodes"),  # the drain of a cordoned node; its informer must sync
        Check("create", "events", ns),
        Check("create", "leases", w.namespace, "coordination.k8s.io"),
        Check("update", "leases", w.namespace, "coordination.k8s.io", name=RUNNERS_CONTROLLER_LEASE),
    ]
    never = [
        Check("get", "secrets", ns),  # it authenticates to the Tuist server with its own SA token
        Check("create", "pods", "kura"),
        Check("create", "rolebindings", ns, "rbac.authorization.k8s.io"),
        Check("create", "pods", ns, subresource="exec"),
        Check("get", "pods", ns, subresource="log"),  # only with --sessions-url, not passed
        Check("patch", "nodes"),  # upstream's node reservation taint: not granted
    ]
    return needs, never


def gateway(w: Workload) -> tuple[list[Check], list[Check]]:
    ns = w.arg("watch-namespace")
    configmap_ns, configmap = w.arg("configmap").split("/")
    lease = w.arg("election-id")
    # Host-network gateways publish their node's InternalIP; a node_port (private) region's gateway
    # is reached through its NodePort Service and reports no node address.
    node_port = w.name.endswith("scw-fr-par-runners")
    if not node_port:
        assert w.arg("report-node-internal-ip-address") == "true"
    needs = [
        *(Check(v, "ingresses", ns, "networking.k8s.io") for v in ("list", "watch")),
        Check("update", "ingresses", ns, "networking.k8s.io", "status"),
        Check("list", "ingressclasses", group="networking.k8s.io"),
        Check("list", "endpointslices", ns, "discovery.k8s.io"),
        *(Check("list", r, ns) for r in ("services", "secrets", "pods")),
        Check("get", "configmaps", configmap_ns, name=configmap),
        *([] if node_port else [Check("get", "nodes")]),  # --report-node-internal-ip-address reads its node
        Check("create", "events", ns),
        Check("create", "leases", ns, "coordination.k8s.io"),
        Check("update", "leases", ns, "coordination.k8s.io", name=lease),
    ]
    other_lease = lease.replace(w.name.removeprefix("kura-gateway-"), "other-region")
    never = [
        Check("get", "secrets", "kube-system"),
        Check("list", "secrets", "tuist-runners"),
        # It faces the internet and reads every Secret of its namespace: the failover watchers'
        # vendor credentials (they can reinstall boxes) live in a namespace of their own.
        Check("list", "secrets", "kura-failover"),
        Check("list", "secrets", "kura-dns"),  # external-dns's Cloudflare token, likewise
        Check("update", "leases", ns, "coordination.k8s.io", name=other_lease),
        Check("create", "pods", ns),
        Check("delete", "services", ns),
        Check("patch", "nodes"),
    ]
    return needs, never


def demux_routes(w: Workload) -> tuple[list[Check], list[Check]]:
    ns = w.env["KURA_NAMESPACE"]
    configmap = w.env["ROUTES_CONFIGMAP"]
    needs = [
        Check("list", "services", ns),
        Check("watch", "services", ns),
        Check("get", "configmaps", ns, name=configmap),
        Check("patch", "configmaps", ns, name=configmap),
    ]
    never = [
        # The static nginx.conf of the demux (its own ConfigMap) and any other one.
        Check("patch", "configmaps", ns, name=w.name.replace("-routes-", "-")),
        Check("list", "configmaps", ns),
        Check("list", "services", "default"),
        Check("get", "secrets", ns),
    ]
    return needs, never


def failover_watcher(w: Workload) -> tuple[list[Check], list[Check]]:
    ns, lease_ns, lease = w.env["KURA_NAMESPACE"], w.env["LEASE_NAMESPACE"], w.env["LEASE_NAME"]
    group = "coordination.k8s.io"
    other_lease = lease.replace(w.name.removeprefix("kura-failover-watcher-"), "other-region")
    needs = [
        Check("list", "nodes"),
        Check("list", "pods", ns),
        # watcher/lease.py: create it once, then read and compare-and-swap it.
        Check("create", "leases", lease_ns, group),
        Check("get", "leases", lease_ns, group, name=lease),
        Check("update", "leases", lease_ns, group, name=lease),
    ]
    never = [
        Check("get", "secrets", ns),  # its vendor credentials are a mounted file
        Check("patch", "nodes"),
        Check("delete", "pods", ns),
        Check("list", "pods", "tuist-runners"),
        # Another region's watcher's Lease: taking it would let two watchers move that region's IP.
        Check("update", "leases", lease_ns, group, name=other_lease),
        Check("delete", "leases", lease_ns, group, name=lease),
        Check("update", "leases", ns, group, name=lease),
    ]
    return needs, never


def regional_dns(w: Workload) -> tuple[list[Check], list[Check]]:
    ns, gateway, endpoint = w.env["KURA_NAMESPACE"], w.env["GATEWAY_DEPLOYMENT"], w.env["DNSENDPOINT"]
    group = "externaldns.k8s.io"
    needs = [
        Check("list", "nodes"),
        Check("list", "pods", ns),
        Check("get", "deployments", ns, "apps", name=gateway),
        Check("get", "dnsendpoints", ns, group, name=endpoint),
        Check("patch", "dnsendpoints", ns, group, name=endpoint),  # server-side apply of spec.endpoints
    ]
    never = [
        Check("create", "dnsendpoints", ns, group),  # the program creates the object
        Check("delete", "dnsendpoints", ns, group, name=endpoint),
        # The peer records are the program's (the region's failover IP).
        Check("patch", "dnsendpoints", ns, group, name=endpoint.replace("kura-regional-", "kura-peer-")),
        Check("update", "dnsendpoints", ns, group, "status", name=endpoint),  # external-dns's
        Check("list", "dnsendpoints", ns, group),
        Check(
            "get",
            "deployments",
            ns,
            "apps",
            name=w.name.replace("kura-regional-dns-", "kura-peer-demux-routes-"),
        ),
        Check("get", "secrets", ns),
        Check("get", "secrets", w.namespace),  # external-dns's Cloudflare token lives beside it
        Check("patch", "nodes"),
    ]
    return needs, never


def released_volumes(w: Workload) -> tuple[list[Check], list[Check]]:
    ns = w.env["KURA_NAMESPACE"]
    assert w.region_volumes and w.other_volumes, f"{w.name}: the dev stack has volumes in several regions"
    needs = [
        Check("list", "persistentvolumes"),
        # It hands an emptied volume back by clearing its claimRef (a JSON patch).
        *(Check("patch", "persistentvolumes", name=v) for v in w.region_volumes),
        Check("get", "persistentvolumeclaims", ns),  # is the volume's claim really gone
    ]
    never = [
        # Another region's volumes, and what would lose a volume rather than hand it back.
        *(Check("patch", "persistentvolumes", name=v) for v in w.other_volumes[:2]),
        Check("delete", "persistentvolumes", name=w.region_volumes[0]),
        Check("update", "persistentvolumes", subresource="status", name=w.region_volumes[0]),
        Check("delete", "persistentvolumeclaims", ns),
        Check("get", "persistentvolumeclaims", "tuist-runners"),
        Check("get", "secrets", ns),
        Check("patch", "nodes"),
    ]
    return needs, never


def peer_demux(w: Workload) -> tuple[list[Check], list[Check]]:
    # nginx reads its config and routes from files the kubelet mounts: no API access at all.
    ns = w.namespace
    never = [Check("list", "services", ns), Check("get", "configmaps", ns), Check("list", "pods", ns)]
    return [], never


FACTS: list[tuple[str, str, Callable[[Workload], tuple[list[Check], list[Check]]]]] = [
    ("Deployment", "kura-controller", kura_controller),
    ("Deployment", "external-dns", external_dns),
    ("Deployment", "runners-controller", runners_controller),
    ("Deployment", "kura-gateway-", gateway),
    ("Deployment", "kura-peer-demux-routes-", demux_routes),
    ("Deployment", "kura-failover-watcher-", failover_watcher),
    ("Deployment", "kura-regional-dns-", regional_dns),
    ("DaemonSet", "kura-peer-demux-", peer_demux),
    ("DaemonSet", "kura-released-volumes-", released_volumes),
]

# Whoever it is, none of the program's identities may do these.
NEVER_ANYONE = [
    Check("create", "clusterrolebindings", group="rbac.authorization.k8s.io"),
    Check("escalate", "clusterroles", group="rbac.authorization.k8s.io"),
    Check("bind", "clusterroles", group="rbac.authorization.k8s.io"),
    Check("impersonate", "users"),
    Check("get", "secrets", "kube-system"),
    Check("create", "pods", "kube-system"),
    Check("delete", "namespaces"),
    Check("update", "certificatesigningrequests", group="certificates.k8s.io", subresource="approval"),
]


def facts_for(w: Workload) -> tuple[list[Check], list[Check]]:
    # The longest prefix wins: kura-peer-demux-routes- before kura-peer-demux-.
    matching = [
        fn
        for kind, prefix, fn in sorted(FACTS, key=lambda f: -len(f[1]))
        if w.kind == kind and w.name.startswith(prefix)
    ][:1]
    assert matching, f"{w.kind} {w.name}: no facts here about what it does; add them to FACTS"
    return matching[0](w)


def service_account(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def judge(cluster: KubeCluster, user: str, check: Check) -> bool:
    return can(
        cluster,
        user,
        check.verb,
        check.resource,
        namespace=check.namespace,
        group=check.group,
        subresource=check.subresource,
        name=check.name,
    )


# --- the stack, applied ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack(kube_cluster: KubeCluster) -> Iterator[list[dict[str, Any]]]:
    manifests = run_program(STACK).manifests
    # The platform installs Cilium's CRD before the program runs; the program installs the rest.
    install_crd_fixture(kube_cluster, "ciliumnodeconfigs.cilium.io.yaml")
    apply(kube_cluster, manifests)
    try:
        yield manifests
    finally:
        remove(kube_cluster, manifests)


def remove(cluster: KubeCluster, manifests: list[dict[str, Any]]) -> None:
    """What the stack put in the session's cluster goes again (its CRDs stay: other tests install
    them by the same name, and a CRD's deletion takes a while)."""
    namespaces = {m["metadata"]["name"] for m in manifests if m["kind"] == "Namespace"}
    for m in manifests:
        meta = m["metadata"]
        if m["kind"] in ("Namespace", "CustomResourceDefinition") or meta.get("namespace") in namespaces:
            continue
        target = [f"{m['kind']}.{m['apiVersion'].split('/')[0]}" if "/" in m["apiVersion"] else m["kind"]]
        scope = ["-n", meta["namespace"]] if meta.get("namespace") else []
        cluster.kubectl(
            "delete", *target, meta["name"], *scope, "--ignore-not-found", "--wait=false", check=False
        )
    for namespace in namespaces:
        with contextlib.suppress(k8s.ApiException):
            cluster.core.delete_namespace(namespace)


def test_every_object_of_the_stack_is_accepted_by_the_apiserver(
    kube_cluster: KubeCluster, stack: list[dict[str, Any]]
) -> None:
    # `apply` failed loudly otherwise; here the objects are read back where the program put them.
    apps = k8s.AppsV1Api(kube_cluster.api)
    for w in workloads(stack):
        read = apps.read_namespaced_deployment if w.kind == "Deployment" else apps.read_namespaced_daemon_set
        assert read(w.name, w.namespace).metadata.name == w.name
    accounts = {
        (m["metadata"]["namespace"], m["metadata"]["name"]) for m in stack if m["kind"] == "ServiceAccount"
    }
    for namespace, name in accounts:
        kube_cluster.core.read_namespaced_service_account(name, namespace)


def test_each_workloads_identity_may_do_what_it_does_and_nothing_near_it(
    kube_cluster: KubeCluster, stack: list[dict[str, Any]]
) -> None:
    problems = []
    used = set()
    for w in workloads(stack):
        needs, never = facts_for(w)
        user = service_account(w.namespace, w.service_account)
        used.add((w.namespace, w.service_account))
        problems += [f"{user} ({w.name}) may not {c}" for c in needs if not judge(kube_cluster, user, c)]
        problems += [
            f"{user} ({w.name}) may {c}" for c in [*never, *NEVER_ANYONE] if judge(kube_cluster, user, c)
        ]
    assert not problems, "\n".join(problems)
    # Every ServiceAccount the program makes runs some workload: none holds rights for nothing.
    accounts = {
        (m["metadata"]["namespace"], m["metadata"]["name"]) for m in stack if m["kind"] == "ServiceAccount"
    }
    assert accounts <= used, f"ServiceAccounts no workload runs as: {sorted(accounts - used)}"


def test_a_fleets_bootstrap_token_may_ask_for_a_node_certificate_and_nothing_else(
    kube_cluster: KubeCluster, stack: list[dict[str, Any]]
) -> None:
    groups = sorted(
        {
            s["name"]
            for m in stack
            if m["kind"] == "ClusterRoleBinding"
            for s in m["subjects"]
            if s["name"].startswith("system:bootstrappers:")
        }
    )
    assert groups == [
        "system:bootstrappers:tuist-kura-dedibox",
        "system:bootstrappers:tuist-kura-ovh",
        "system:bootstrappers:tuist-kura-scw",
        "system:bootstrappers:tuist-runners-linux",
        "system:bootstrappers:tuist-runners-macos",
    ]
    csr = "certificatesigningrequests"
    for group in groups:

        def may(
            verb: str, resource: str, subresource: str | None = None, api: str = "certificates.k8s.io"
        ) -> bool:
            review = k8s.V1SubjectAccessReview(
                spec=k8s.V1SubjectAccessReviewSpec(
                    user="system:bootstrap:abcdef",
                    groups=["system:bootstrappers", group, "system:authenticated"],  # noqa: B023
                    resource_attributes=k8s.V1ResourceAttributes(
                        verb=verb, resource=resource, subresource=subresource, group=api
                    ),
                )
            )
            result = k8s.AuthorizationV1Api(kube_cluster.api).create_subject_access_review(review)
            return bool(result.status.allowed)

        # What TLS bootstrap takes: create its CSR, read it back, and be auto-approved for a client one.
        assert may("create", csr) and may("get", csr), group
        assert may("create", csr, "nodeclient"), group
        # Not a renewal as a node, not its own approval, not the cluster.
        assert not may("create", csr, "selfnodeclient"), group
        assert not may("update", csr, "approval"), group
        assert not may("get", "nodes", api=""), group
        assert not may("list", "secrets", api=""), group
