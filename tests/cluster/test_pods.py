"""Pods on a kubelet stand-in, as far as the API can tell: Running and Ready, readiness probes,
graceful termination with preStop, Deployments, and evictions judged by PodDisruptionBudgets."""

from __future__ import annotations

import datetime as dt
import ipaddress
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from providers.kube import BootstrapToken, create_bootstrap_token
from tests.support.cluster import KubeCluster, Kubelet, Kubelets, wait_until

NODE = "pods-worker-1"


@pytest.fixture(scope="module")
def worker(
    kube_cluster: KubeCluster, fleet_rbac: Callable[[str], None], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Kubelet]:
    fleet_rbac("cluster-tests")
    runner = Kubelets(kube_cluster, tmp_path_factory.mktemp("kubelets"))
    token = BootstrapToken.generate()
    create_bootstrap_token(
        kube_cluster.api, token, fleet="cluster-tests", node_name=NODE, ttl=dt.timedelta(minutes=30)
    )
    kubelet = runner.start(NODE, token.value, node_ip="198.19.250.1")
    wait_until(
        f"node {NODE} to get a pod CIDR", lambda: kube_cluster.core.read_node(NODE).spec.pod_cidr, timeout=60
    )
    try:
        yield kubelet
    finally:
        runner.stop_all()
        kube_cluster.core.delete_node(NODE)


def pod_manifest(name: str, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "nginx:1.27"}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": NODE}, "containers": [container], **spec},
    }


def create_pod(cluster: KubeCluster, namespace: str, name: str, **spec: Any) -> k8s.V1Pod:
    return cluster.core.create_namespaced_pod(namespace, pod_manifest(name, **spec))


def condition(pod: k8s.V1Pod, kind: str) -> str | None:
    found = [c.status for c in pod.status.conditions or [] if c.type == kind]
    return found[0] if found else None


def wait_ready(
    cluster: KubeCluster, namespace: str, name: str, ready: str = "True", timeout: float = 30
) -> k8s.V1Pod:
    def probe() -> k8s.V1Pod | None:
        pod = cluster.core.read_namespaced_pod(name, namespace)
        return pod if condition(pod, "Ready") == ready else None

    return wait_until(f"pod {namespace}/{name} Ready={ready}", probe, timeout=timeout)


def wait_deleted(cluster: KubeCluster, namespace: str, name: str, timeout: float = 60) -> None:
    def gone() -> bool:
        try:
            cluster.core.read_namespaced_pod(name, namespace)
        except k8s.ApiException as error:
            return error.status == 404
        return False

    wait_until(f"pod {namespace}/{name} to be deleted", gone, timeout=timeout)


def test_a_pod_runs_ready_with_an_ip_of_the_nodes_pod_cidr(
    kube_cluster: KubeCluster, namespace: str, worker: Kubelet
):
    create_pod(kube_cluster, namespace, "web")
    pod = wait_ready(kube_cluster, namespace, "web")
    assert pod.status.phase == "Running"
    assert pod.spec.node_name == NODE and pod.status.host_ip == "198.19.250.1"
    cidr = ipaddress.ip_network(kube_cluster.core.read_node(NODE).spec.pod_cidr)
    assert ipaddress.ip_address(pod.status.pod_ip) in cidr
    (status,) = pod.status.container_statuses
    assert status.ready and status.started and status.state.running is not None
    assert status.container_id.startswith("containerd://")


def test_a_host_network_pod_has_the_node_ip(kube_cluster: KubeCluster, namespace: str, worker: Kubelet):
    create_pod(kube_cluster, namespace, "demux", hostNetwork=True)
    pod = wait_ready(kube_cluster, namespace, "demux")
    assert pod.status.pod_ip == "198.19.250.1"


def test_cluster_first_pods_resolve_through_the_cluster_dns(
    kube_cluster: KubeCluster, namespace: str, worker: Kubelet
):
    pod = create_pod(kube_cluster, namespace, "resolver")
    wait_ready(kube_cluster, namespace, "resolver")
    resolv = (worker.root_dir / "pods" / pod.metadata.uid / "resolv.conf").read_text()
    assert resolv.splitlines() == [
        "nameserver 10.96.0.10",
        f"search {namespace}.svc.cluster.local svc.cluster.local cluster.local",
        "options ndots:5",
    ]


def test_readiness_follows_the_probe_and_its_thresholds(
    kube_cluster: KubeCluster, namespace: str, worker: Kubelet
):
    probe = {"httpGet": {"path": "/ready", "port": 80}, "periodSeconds": 1, "failureThreshold": 2}
    pod = create_pod(kube_cluster, namespace, "probed", container={"readinessProbe": probe})
    wait_ready(kube_cluster, namespace, "probed")

    worker.set_ready(pod, "app", ready=False)
    started = time.monotonic()
    unready = wait_ready(kube_cluster, namespace, "probed", ready="False")
    # failureThreshold 2 at a 1s period: not before the second failed probe.
    assert time.monotonic() - started >= 1.0
    assert unready.status.phase == "Running" and not unready.status.container_statuses[0].ready
    events = kube_cluster.core.list_namespaced_event(
        namespace, field_selector="involvedObject.name=probed"
    ).items
    assert any(e.reason == "Unhealthy" and e.source.host == NODE for e in events)

    worker.set_ready(pod, "app", ready=True)
    wait_ready(kube_cluster, namespace, "probed")


def test_a_container_without_a_readiness_probe_cannot_be_made_unready(
    kube_cluster: KubeCluster, namespace: str, worker: Kubelet
):
    pod = create_pod(kube_cluster, namespace, "unprobed")
    wait_ready(kube_cluster, namespace, "unprobed")
    worker.set_ready(pod, "app", ready=False)
    time.sleep(2)
    assert condition(kube_cluster.core.read_namespaced_pod("unprobed", namespace), "Ready") == "True"


@pytest.mark.parametrize(
    "hook",
    [{"exec": {"command": ["/bin/sh", "-c", "sleep 3"]}}, {"sleep": {"seconds": 3}}],
    ids=["exec-sleep", "sleep-action"],
)
def test_deletion_waits_for_the_prestop_sleep(
    kube_cluster: KubeCluster, namespace: str, worker: Kubelet, hook: dict[str, Any]
):
    pre_stop = {"lifecycle": {"preStop": hook}}
    create_pod(kube_cluster, namespace, "draining", container=pre_stop, terminationGracePeriodSeconds=30)
    wait_ready(kube_cluster, namespace, "draining")
    started = time.monotonic()
    kube_cluster.core.delete_namespaced_pod("draining", namespace)
    wait_deleted(kube_cluster, namespace, "draining")
    assert 3.0 <= time.monotonic() - started < 20  # not the 30 s grace period


def test_the_grace_period_cuts_a_longer_prestop_short(
    kube_cluster: KubeCluster, namespace: str, worker: Kubelet
):
    # (The API refuses a sleep action as long as the grace period; an exec hook may run longer.)
    pre_stop = {"lifecycle": {"preStop": {"exec": {"command": ["sleep", "20"]}}}}
    create_pod(kube_cluster, namespace, "slow", container=pre_stop, terminationGracePeriodSeconds=2)
    wait_ready(kube_cluster, namespace, "slow")
    started = time.monotonic()
    kube_cluster.core.delete_namespaced_pod("slow", namespace)
    wait_deleted(kube_cluster, namespace, "slow")
    assert 2.0 <= time.monotonic() - started < 15  # not the hook's 20 s


def create_deployment(cluster: KubeCluster, namespace: str, name: str, replicas: int) -> None:
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_manifest(name)["spec"]},
        },
    }
    k8s.AppsV1Api(cluster.api).create_namespaced_deployment(namespace, body)


def available(cluster: KubeCluster, namespace: str, name: str) -> bool:
    d = k8s.AppsV1Api(cluster.api).read_namespaced_deployment(name, namespace)
    return any(c.type == "Available" and c.status == "True" for c in d.status.conditions or []) and (
        d.status.ready_replicas == d.spec.replicas
    )


def test_a_deployment_becomes_available(kube_cluster: KubeCluster, namespace: str, worker: Kubelet):
    create_deployment(kube_cluster, namespace, "api", 3)
    wait_until(
        "deployment api Available with 3 ready replicas", lambda: available(kube_cluster, namespace, "api")
    )


def test_an_eviction_waits_for_the_disruption_budget(
    kube_cluster: KubeCluster, namespace: str, worker: Kubelet
):
    create_deployment(kube_cluster, namespace, "cache", 2)
    wait_until("deployment cache Available", lambda: available(kube_cluster, namespace, "cache"))
    policy = k8s.PolicyV1Api(kube_cluster.api)
    policy.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "cache"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "cache"}}},
        },
    )
    wait_until(
        "the PDB to observe both pods",
        lambda: policy.read_namespaced_pod_disruption_budget("cache", namespace).status.current_healthy == 2,
    )
    victim = (
        kube_cluster.core.list_namespaced_pod(namespace, label_selector="app=cache").items[0].metadata.name
    )
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": victim, "namespace": namespace},
    }

    with pytest.raises(k8s.ApiException) as blocked:
        kube_cluster.core.create_namespaced_pod_eviction(victim, namespace, eviction)
    assert blocked.value.status == 429
    assert "Cannot evict pod as it would violate the pod's disruption budget" in blocked.value.body

    policy.patch_namespaced_pod_disruption_budget("cache", namespace, {"spec": {"minAvailable": 1}})
    wait_until(
        "the PDB to allow one disruption",
        lambda: (
            policy.read_namespaced_pod_disruption_budget("cache", namespace).status.disruptions_allowed == 1
        ),
    )
    kube_cluster.core.create_namespaced_pod_eviction(victim, namespace, eviction)
    wait_deleted(kube_cluster, namespace, victim)
    wait_until(
        "the deployment to replace the evicted pod", lambda: available(kube_cluster, namespace, "cache")
    )


def test_a_kubelet_without_cluster_dns_warns_and_falls_back(
    kube_cluster: KubeCluster, namespace: str, join: Callable[..., Kubelet]
):
    # What a box joined without clusterDNS (issue 11 point 4) does to every ClusterFirst pod.
    kubelet = join("no-dns-1", config={"clusterDNS": []})
    manifest = pod_manifest("lost")
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "no-dns-1"}
    pod = kube_cluster.core.create_namespaced_pod(namespace, manifest)
    wait_ready(kube_cluster, namespace, "lost")
    events = wait_until(
        "a MissingClusterDNS event",
        lambda: [
            e
            for e in kube_cluster.core.list_namespaced_event(
                namespace, field_selector="involvedObject.name=lost"
            ).items
            if e.reason == "MissingClusterDNS"
        ],
    )
    assert events[0].type == "Warning"
    assert "kubelet does not have ClusterDNS IP configured" in events[0].message
    resolv = (kubelet.root_dir / "pods" / pod.metadata.uid / "resolv.conf").read_text()
    assert "10.96.0.10" not in resolv
