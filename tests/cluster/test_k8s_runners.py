"""The runners on the real control plane: the real scheduler fits the density the capacity model
says (15 runner microVMs on an AX42-U, 62 on an AX162-R: seed 003's ~16 and ~64 less the kernel's
share and the self-join's reservations; the next one Pending) with the kata-qemu RuntimeClass the
program renders; the RunnerPool CRD keeps explicit zeros through the apiserver's defaulting; the
runners-controller is told the Tuist server's URLs, runs as its own ServiceAccount (whose token the
server checks) and may do what upstream's RBAC markers say and nothing near it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s

from components.capacity import KUBELET_RESERVED, kernel_memory_mib, pods_per_host, slots_per_host
from components.runner_pool import KATA_NODE_LABELS, KATA_RUNTIME_CLASS, RUNNER_POOL_GROUP
from components.runners import RunnerPools, RunnerPoolsArgs
from config.models import (
    Autoscaling,
    Cluster,
    Fleet,
    Hardware,
    RunnerOS,
    RunnerPool,
    Taint,
    TaintEffect,
    Vendor,
)
from tests.cluster.k8s_support import apply, can, install_crd_fixture, rendered, sa, suffix
from tests.support.cluster import KubeCluster, Kubelet, wait_until

AX42_U = Hardware(offer="AX42-U", threads=16, memory_gib=64)
AX162_R = Hardware(offer="AX162-R", threads=96, memory_gib=256)
IMAGE = "ghcr.io/tuist/linux-runner@sha256:" + "c" * 64


def runner_objects(namespace: str, hardware: Hardware, **autoscaling: Any) -> list[dict[str, Any]]:
    fleet = Fleet(
        name="runners-linux",
        vendor=Vendor.ROBOT,
        marker="tuist-bm-staging-",
        size=1,
        node_pool="runners-linux",
        labels=dict(KATA_NODE_LABELS),
        hardware=hardware,
        taints=[Taint(key="tuist.dev/runner-tier", value="bare-metal", effect=TaintEffect.NO_SCHEDULE)],
    )
    pool = RunnerPool(
        name="linux",
        os=RunnerOS.LINUX,
        fleet="runners-linux",
        dispatch_label="tuist-linux",
        image=IMAGE,
        autoscaling=Autoscaling(**autoscaling),
    )
    cluster = Cluster(
        runners_namespace=namespace,
        runners_controller_image="ghcr.io/tuist/runners-controller:1.4.2",
        tuist_server_url="https://staging.tuist.dev",
    )
    args = RunnerPoolsArgs(pools=[pool], fleets=[fleet], cluster=cluster)
    return rendered(lambda: RunnerPools("runners", args))


@pytest.fixture(autouse=True)
def cilium_crd(kube_cluster: KubeCluster) -> None:
    # Cilium installs its CRDs itself; the program only creates a CiliumNodeConfig.
    install_crd_fixture(kube_cluster, "ciliumnodeconfigs.cilium.io.yaml")


def runner_pod(name: str, pool: RunnerPool) -> dict[str, Any]:
    """A runner microVM as the runners-controller builds it from its RunnerPool: the pool's size,
    the kata-qemu RuntimeClass (whose admission adds the overhead and the Kata node selector and
    toleration), on the fleet's pool."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "runner"}},
        "spec": {
            "runtimeClassName": KATA_RUNTIME_CLASS,
            "nodeSelector": {"node.cluster.x-k8s.io/pool": "runners-linux"},
            "containers": [
                {
                    "name": "runner",
                    "image": IMAGE,
                    "resources": {
                        "requests": {"cpu": f"{pool.pod_cpu_milli}m", "memory": f"{pool.pod_memory_mb}Mi"},
                        "limits": {"cpu": f"{pool.pod_cpu_milli}m", "memory": f"{pool.pod_memory_mb}Mi"},
                    },
                }
            ],
        },
    }


STANDARD = RunnerPool(name="linux", os=RunnerOS.LINUX, fleet="runners-linux", dispatch_label="x", image=IMAGE)


def scheduled(core: k8s.CoreV1Api, namespace: str) -> tuple[int, int]:
    pods = core.list_namespaced_pod(namespace, label_selector="app=runner").items
    placed = sum(1 for p in pods if p.spec.node_name)
    unschedulable = sum(
        1
        for p in pods
        if any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in p.status.conditions or [])
    )
    return placed, unschedulable


@pytest.mark.parametrize(("hardware", "slots"), [(AX42_U, 15), (AX162_R, 62)], ids=["AX42-U", "AX162-R"])
def test_the_real_scheduler_fits_the_models_density_and_not_one_more(
    kube_cluster: KubeCluster, join: Callable[..., Kubelet], hardware: Hardware, slots: int
) -> None:
    # The capacity outputs say the same number the scheduler finds.
    assert slots_per_host(hardware) == pods_per_host(hardware, STANDARD) == slots
    ns = f"runners-{suffix()}"
    node = f"runner-{hardware.offer.lower()}-{suffix()}"
    join(
        node,
        labels={**KATA_NODE_LABELS, "node.cluster.x-k8s.io/pool": "runners-linux"},
        taints=["tuist.dev/runner-tier=bare-metal:NoSchedule"],
        threads=hardware.threads,
        # What the box's kernel reports, and the reservations its self-join writes.
        memory_bytes=kernel_memory_mib(hardware) * 2**20,
        config=KUBELET_RESERVED,
    )
    # The RuntimeClass the program renders (and the rest of the runners' objects, as applied).
    apply(kube_cluster, runner_objects(ns, hardware))
    core = kube_cluster.core
    for i in range(slots + 1):
        core.create_namespaced_pod(ns, runner_pod(f"runner-{i}", STANDARD))

    wait_until(
        f"{slots} runner pods placed and one unschedulable",
        lambda: scheduled(core, ns) == (slots, 1),
        timeout=180,
    )
    pods = core.list_namespaced_pod(ns, label_selector="app=runner").items
    assert {p.spec.node_name for p in pods if p.spec.node_name} == {node}
    # RuntimeClass admission charged the overhead the density depends on.
    assert pods[0].spec.overhead == {"cpu": "50m", "memory": "320Mi"}
    [pending] = [p for p in pods if not p.spec.node_name]
    message = next(c.message for c in pending.status.conditions if c.type == "PodScheduled")
    assert "Insufficient" in message, message
    for pod in pods:
        core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
    kube_cluster.delete_namespace(ns)


def test_explicit_zeros_survive_the_apiserver_and_unset_fields_get_the_crd_defaults(
    kube_cluster: KubeCluster,
) -> None:
    ns = f"runners-{suffix()}"
    apply(
        kube_cluster,
        runner_objects(ns, AX42_U, min_warm_pool_floor=0, max_replicas=0, scale_down_cooldown_seconds=0),
    )
    custom = k8s.CustomObjectsApi(kube_cluster.api)
    stored = custom.get_namespaced_custom_object(RUNNER_POOL_GROUP, "v1alpha1", ns, "runnerpools", "linux")
    assert stored["spec"]["autoscaling"] == {
        "enabled": True,
        "minWarmPoolFloor": 0,
        "maxReplicas": 0,
        "scaleDownCooldownSeconds": 0,
    }
    # The anchor's incident: an omitted floor comes back as 1, an omitted cooldown as 300.
    unset = {**stored, "metadata": {"name": "defaults", "namespace": ns}}
    unset["spec"] = {**stored["spec"], "autoscaling": {"enabled": True}}
    created = custom.create_namespaced_custom_object(RUNNER_POOL_GROUP, "v1alpha1", ns, "runnerpools", unset)
    assert created["spec"]["autoscaling"] == {
        "enabled": True,
        "minWarmPoolFloor": 1,
        "scaleDownCooldownSeconds": 300,
    }
    assert created["spec"]["replicas"] == 0
    kube_cluster.delete_namespace(ns)


def test_a_runner_pool_without_runner_labels_is_refused_by_the_apiserver(kube_cluster: KubeCluster) -> None:
    ns = f"runners-{suffix()}"
    apply(kube_cluster, runner_objects(ns, AX42_U))
    custom = k8s.CustomObjectsApi(kube_cluster.api)
    stored = custom.get_namespaced_custom_object(RUNNER_POOL_GROUP, "v1alpha1", ns, "runnerpools", "linux")
    bad = {**stored, "metadata": {"name": "no-labels", "namespace": ns}}
    bad["spec"] = {**stored["spec"], "runnerLabels": []}
    with pytest.raises(k8s.ApiException) as error:
        custom.create_namespaced_custom_object(RUNNER_POOL_GROUP, "v1alpha1", ns, "runnerpools", bad)
    assert error.value.status == 422
    assert "runnerLabels" in error.value.body
    kube_cluster.delete_namespace(ns)


def test_the_controller_knows_the_server_runs_as_itself_and_may_do_what_upstream_does(
    kube_cluster: KubeCluster,
) -> None:
    ns = f"runners-{suffix()}"
    apply(kube_cluster, runner_objects(ns, AX42_U))
    deployment = k8s.AppsV1Api(kube_cluster.api).read_namespaced_deployment("runners-controller", ns)
    pod = deployment.spec.template.spec
    [container] = pod.containers
    assert container.args == [
        f"--namespace={ns}",
        "--health-probe-bind-address=:8081",
        "--metrics-bind-address=:8080",
    ]
    assert {e.name: e.value for e in container.env} == {
        "TUIST_RUNNER_DISPATCH_URL": "https://staging.tuist.dev/api/internal/runners/dispatch",
        "TUIST_SCALING_SIGNALS_URL": "https://staging.tuist.dev/api/internal/runners/desired_replicas",
    }
    # Its ServiceAccount token is mounted: the Tuist server knows it by that (TokenReview).
    assert pod.automount_service_account_token is True
    assert pod.service_account_name == "runners-controller"
    account = kube_cluster.core.read_namespaced_service_account("runners-controller", ns)
    assert account.automount_service_account_token is not False
    # No static token anywhere.
    assert [
        s.metadata.name for s in kube_cluster.core.list_namespaced_secret(ns).items if s.type == "Opaque"
    ] == []

    me = sa(ns, "runners-controller")
    allowed = [
        ("create", "pods", "", ns, None, None),
        ("patch", "pods", "", ns, None, None),  # the drain-eligible label of an image roll
        ("delete", "serviceaccounts", "", ns, None, None),
        ("patch", "runnerpools", "tuist.dev", ns, None, None),
        ("update", "runnerpools", "tuist.dev", ns, None, "status"),
        ("create", "events", "", ns, None, None),
        ("watch", "nodes", "", None, None, None),  # its Node informer must sync for it to start
        ("create", "leases", "coordination.k8s.io", ns, None, None),
        ("update", "leases", "coordination.k8s.io", ns, "runners-controller.tuist.dev", None),
    ]
    denied = [
        ("get", "secrets", "", ns, None, None),
        ("patch", "serviceaccounts", "", ns, None, None),
        ("get", "pods", "", ns, None, "log"),  # only with --sessions-url, which is not passed
        ("create", "pods", "", ns, None, "exec"),
        ("patch", "nodes", "", None, None, None),  # the reservation taint: not granted
        ("create", "pods", "", "default", None, None),
        ("list", "pods", "", None, None, None),
        ("update", "leases", "coordination.k8s.io", ns, "kura-controller.kura.tuist.dev", None),
        ("create", "rolebindings", "rbac.authorization.k8s.io", ns, None, None),
    ]
    for verb, resource, group, namespace, name, sub in allowed:
        assert can(
            kube_cluster, me, verb, resource, group=group, namespace=namespace, name=name, subresource=sub
        ), (verb, resource, sub)
    for verb, resource, group, namespace, name, sub in denied:
        assert not can(
            kube_cluster, me, verb, resource, group=group, namespace=namespace, name=name, subresource=sub
        ), (verb, resource, sub)
    kube_cluster.delete_namespace(ns)
