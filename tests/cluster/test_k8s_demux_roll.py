"""A demux roll keeps the peer plane, on the real control plane (seed 000: the failover IP "drains off
a box whose demux is rolling").

The demux DaemonSet the program renders rolls under the real DaemonSet controller over boxes that
joined as kubelet stand-ins (pods Ready, preStop and grace honoured as a kubelet does); the failover
watcher's own loop (watcher/) reads the real API and moves the IP through a mover that takes a
vendor's time to answer. Throughout the roll, a sampler checks the one invariant: the IP is never
routed to a box whose demux pod is not Ready.

Time runs ten times faster than in production, every ratio kept: the watcher polls every 0.5 s
(5 s), the preStop wait is 6 s (60 s), minReadySeconds 3 s (30 s), a vendor move takes 1 s. A
second test removes the preStop wait and shows the same sampler catching the IP on a dead box, so
the first one can fail.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client as k8s

from components.k8s import POOL_LABEL
from components.peer_demux import PeerDemux, PeerDemuxArgs
from config.models import (
    DEMUX_DRAIN_SECONDS,
    DEMUX_MIN_READY_SECONDS,
    Cluster,
    Environment,
    Fleet,
    Hardware,
    Kura,
    Region,
    Taint,
    TaintEffect,
    Vendor,
)
from tests.cluster.k8s_support import apply, rendered, suffix
from tests.support.cluster import KubeCluster, Kubelet, wait_until
from watcher.decision import box_id_from_provider_id
from watcher.loop import FailoverWatcher, WatcherSettings, kube_listers

SCALE = 10
POLL_SECONDS = 5 / SCALE
VENDOR_MOVE_SECONDS = 1.0
IP = "203.0.113.50"


@dataclass
class RecordingMover:
    """The vendor side: the IP stays where it is until the move has been answered."""

    current: str
    moves: list[tuple[float, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def failover_target(self, ip: str) -> str | None:
        with self.lock:
            return self.current

    def move_failover(self, ip: str, box_id: str) -> None:
        time.sleep(VENDOR_MOVE_SECONDS)
        with self.lock:
            self.current = box_id
            self.moves.append((time.monotonic(), box_id))


@dataclass
class Setup:
    namespace: str
    region: Region
    fleet: Fleet
    kura: Kura
    boxes: dict[str, str]  # node name -> box id


def fleet_and_region(pool: str) -> tuple[Fleet, Region]:
    fleet = Fleet(
        name=pool,
        vendor=Vendor.OVH,
        marker="tuist-kura-staging",
        size=2,
        node_pool=pool,
        taints=[Taint(key="tuist.dev/kura-cache", value="true", effect=TaintEffect.NO_SCHEDULE)],
        hardware=Hardware(offer="SYS-1", threads=12, memory_gib=32),
    )
    region = Region(
        id="ca-east",
        cluster_id="ca-east-1",
        fleet=pool,
        ingress_class="kura-ca-east",
        egress_burst_mbps=500,
        host="ca-east.staging.kura.tuist.dev",
        failover_ip=None,
    )
    return fleet, region


def demux_manifests(setup: Setup, cluster: Cluster, *, drain: bool = True) -> list[dict[str, Any]]:
    """The program's demux objects, on the test's time scale."""
    args = PeerDemuxArgs(
        region=setup.region,
        fleet=setup.fleet,
        kura=setup.kura,
        environment=Environment.STAGING,
        cluster=cluster,
        reconciler_image="ghcr.io/tuist/tuist-infra-watcher@sha256:" + "a" * 64,
    )
    manifests = copy.deepcopy(rendered(lambda: PeerDemux("demux", args)))
    for m in manifests:
        if m["kind"] != "DaemonSet":
            continue
        spec = m["spec"]
        assert spec["minReadySeconds"] == DEMUX_MIN_READY_SECONDS
        spec["minReadySeconds"] = DEMUX_MIN_READY_SECONDS // SCALE
        pod = spec["template"]["spec"]
        [container] = pod["containers"]
        assert container["lifecycle"]["preStop"]["sleep"]["seconds"] == DEMUX_DRAIN_SECONDS
        container["readinessProbe"].update(initialDelaySeconds=1, periodSeconds=1)
        pod["terminationGracePeriodSeconds"] = pod["terminationGracePeriodSeconds"] // SCALE
        if drain:
            container["lifecycle"]["preStop"]["sleep"]["seconds"] = DEMUX_DRAIN_SECONDS // SCALE
        else:
            del container["lifecycle"]
    return manifests


@pytest.fixture
def boxes(kube_cluster: KubeCluster, join: Callable[..., Kubelet]) -> Iterator[Setup]:
    pool = f"kura-roll-{suffix()}"
    fleet, region = fleet_and_region(pool)
    kura = Kura(namespace=pool, runtime_image_tag="0.10.5", controller_image="kc:1")
    kube_cluster.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=pool)))
    found: dict[str, str] = {}
    for letter in "ab":
        name = f"{pool}-{letter}"
        provider_id = f"ovh://bhs/ns-{letter}.{pool}.net"
        join(
            name,
            labels={POOL_LABEL: pool},
            taints=["tuist.dev/kura-cache=true:NoSchedule"],
            provider_id=provider_id,
        )
        found[name] = box_id_from_provider_id(provider_id)
    yield Setup(pool, region, fleet, kura, found)
    kube_cluster.delete_namespace(pool)


def demux_pods(cluster: KubeCluster, namespace: str) -> list[k8s.V1Pod]:
    selector = "app.kubernetes.io/component=peer-demux"
    return cluster.core.list_namespaced_pod(namespace, label_selector=selector).items


def ready(pod: k8s.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def rolled_out(cluster: KubeCluster, namespace: str, name: str) -> bool:
    ds = k8s.AppsV1Api(cluster.api).read_namespaced_daemon_set(name, namespace)
    s = ds.status
    return bool(
        s.observed_generation
        and s.observed_generation >= ds.metadata.generation
        and s.desired_number_scheduled == 2
        and s.updated_number_scheduled == 2
        and s.number_available == 2
        and s.number_ready == 2
    )


def roll_and_watch(
    kube_cluster: KubeCluster, setup: Setup, *, drain: bool
) -> tuple[list[str], RecordingMover]:
    """Deploy the demux, route the IP, roll the demux, and sample the invariant all along.
    Returns the violations seen and the mover."""
    ns, ds_name = setup.namespace, f"kura-peer-demux-{setup.region.id}"
    before = Cluster(runners_controller_image="rc:1")
    after = before.model_copy(update={"dns_service_ip": "10.96.0.53"})  # a new resolver: a config change
    apply(kube_cluster, demux_manifests(setup, before, drain=drain))
    wait_until("the demux Ready on both boxes", lambda: rolled_out(kube_cluster, ns, ds_name), timeout=120)

    first_box = setup.boxes[sorted(setup.boxes)[0]]
    mover = RecordingMover(current=first_box)
    settings = WatcherSettings(
        ip=IP,
        region=setup.region.id,
        node_pool=setup.fleet.node_pool,
        namespace=ns,
        poll_seconds=POLL_SECONDS,
        confirm_polls=2,
    )
    list_nodes, list_pods = kube_listers(kube_cluster.core, settings)
    watcher = FailoverWatcher(settings, list_nodes, list_pods, mover)
    stop = threading.Event()
    violations: list[str] = []

    def sample() -> None:
        node_of = {box: node for node, box in setup.boxes.items()}
        while not stop.is_set():
            target = mover.failover_target(IP)
            node = node_of[target] if target else None
            pods = [p for p in demux_pods(kube_cluster, ns) if p.spec.node_name == node]
            if not any(ready(p) for p in pods):
                states = [
                    (p.metadata.name, ready(p), p.metadata.deletion_timestamp is not None) for p in pods
                ]
                violations.append(f"{time.monotonic():.1f}: IP on {node} whose demux pods are {states}")
            stop.wait(0.1)

    threads = [threading.Thread(target=watcher.run, args=(stop,)), threading.Thread(target=sample)]
    for t in threads:
        t.start()
    try:
        time.sleep(2 * POLL_SECONDS)
        apply(kube_cluster, demux_manifests(setup, after, drain=drain))
        wait_until(
            "the DaemonSet controller to start the roll",
            lambda: (
                k8s.AppsV1Api(kube_cluster.api)
                .read_namespaced_daemon_set(ds_name, ns)
                .status.updated_number_scheduled
                != 2
                or None
            ),
            timeout=30,
        )
        wait_until("the demux roll to finish", lambda: rolled_out(kube_cluster, ns, ds_name), timeout=180)
        time.sleep(4 * POLL_SECONDS)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    return violations, mover


def test_during_a_demux_roll_the_ip_is_never_on_a_box_whose_demux_is_not_ready(
    kube_cluster: KubeCluster, boxes: Setup
) -> None:
    violations, mover = roll_and_watch(kube_cluster, boxes, drain=True)
    assert violations == []
    # The roll replaced the pod on the box that held the IP, so the IP had to move (at least once).
    assert mover.moves, "the roll never forced a move: the test would prove nothing"


def test_without_the_drain_wait_the_same_roll_leaves_the_ip_on_a_dead_demux(
    kube_cluster: KubeCluster, boxes: Setup
) -> None:
    violations, _ = roll_and_watch(kube_cluster, boxes, drain=False)
    assert violations, "a roll without preStop should have left the IP on a box without a Ready demux"
