"""The watcher loop against the real control plane (tests/support/cluster.py) and a recording Mover.

Two boxes of a region's pool joined as kubelet stand-ins (TLS bootstrap, Node with the providerID the
program gives it), each running the region's demux pod with a readiness probe; the test fails a probe
through the stand-in's readiness file, cordons, deletes or stops a node, and the loop reads all of it
through the kubernetes client as it does in its pod.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client as k8s

from providers.errors import RateLimitError
from providers.retry import RetryPolicy, call_guard, call_with_retries
from providers.vendor import Vendor
from tests.support.cluster import KubeCluster, Kubelet, Kubelets, node_ready, wait_until
from watcher.decision import Action, NodeView, PodView
from watcher.lease import LeaseFence, LeaseSettings
from watcher.loop import FailoverWatcher, WatcherSettings, kube_listers
from watcher.mover import min_poll_seconds

IP = "203.0.113.7"
REGION = "us-east"
POOL = "watch-us-east"
A, B = "watch-a", "watch-b"
BOX = {A: "ns1.ip-1.net", B: "ns2.ip-2.net"}
DEMUX = {"app.kubernetes.io/component": "peer-demux", "app.kubernetes.io/instance": REGION}


@dataclass
class Region:
    namespace: str
    runner: Kubelets
    kubelets: dict[str, Kubelet]
    pods: dict[str, k8s.V1Pod]  # node -> its demux pod

    @property
    def settings(self) -> WatcherSettings:
        return WatcherSettings(
            ip=IP, region=REGION, node_pool=POOL, namespace=self.namespace, poll_seconds=0.01
        )


def demux_pod(name: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeName": node,
            "hostNetwork": True,
            "containers": [
                {
                    "name": "nginx",
                    "image": "nginx:1.27",
                    "readinessProbe": {
                        "tcpSocket": {"port": 7443},
                        "periodSeconds": 1,
                        "failureThreshold": 1,
                    },
                }
            ],
        },
    }


def pod_ready(cluster: KubeCluster, namespace: str, name: str) -> bool:
    found = cluster.core.read_namespaced_pod(name, namespace)
    return any(c.type == "Ready" and c.status == "True" for c in found.status.conditions or [])


@pytest.fixture(scope="module")
def region(
    kube_cluster: KubeCluster, fleet_rbac: Callable[[str], None], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Region]:
    """The region's two boxes and their demux pods; a decoy box of another pool runs a demux pod of
    this region, and box A also runs another region's demux pod: the watcher must see neither."""
    from providers.kube import BootstrapToken, create_bootstrap_token

    fleet_rbac("watch")
    runner = Kubelets(kube_cluster, tmp_path_factory.mktemp("watch-kubelets"))
    namespace = kube_cluster.namespace("watch")
    kubelets: dict[str, Kubelet] = {}
    for node, pool, provider_id in (
        (A, POOL, f"ovh://bhs/{BOX[A]}"),
        (B, POOL, f"ovh://bhs/{BOX[B]}"),
        # Lexically before both: it would win any placement it were part of.
        ("watch-decoy", "watch-other-pool", "ovh://bhs/ns0.ip-0.net"),
    ):
        token = BootstrapToken.generate()
        create_bootstrap_token(kube_cluster.api, token, fleet="watch", node_name=node)
        kubelets[node] = runner.start(
            node, token.value, labels={"node.cluster.x-k8s.io/pool": pool}, provider_id=provider_id
        )
    for node in kubelets:
        wait_until(f"node {node} Ready", lambda node=node: node_ready(kube_cluster, node), timeout=90)
    pods = {}
    for node, name in ((A, "demux-a"), (B, "demux-b"), ("watch-decoy", "demux-decoy")):
        pods[node] = kube_cluster.core.create_namespaced_pod(namespace, demux_pod(name, node, DEMUX))
    other_region = {**DEMUX, "app.kubernetes.io/instance": "us-west"}
    kube_cluster.core.create_namespaced_pod(namespace, demux_pod("demux-us-west-a", A, other_region))
    try:
        yield Region(namespace, runner, kubelets, pods)
    finally:
        runner.stop_all()
        for node in kubelets:
            try:
                kube_cluster.core.delete_node(node)
            except k8s.ApiException as gone:
                # A test deleted it, and its stopped kubelet did not register it again.
                if gone.status != 404:
                    raise
        kube_cluster.delete_namespace(namespace)


@pytest.fixture
def healthy(kube_cluster: KubeCluster, region: Region) -> Region:
    """Both boxes Ready and uncordoned, both demux pods Ready, as each test starts."""
    for node in (A, B):
        if not region.kubelets[node].running():
            region.kubelets[node] = restart(kube_cluster, region, node)
    for node in (A, B):
        wait_until(f"node {node} Ready", lambda node=node: node_ready(kube_cluster, node), timeout=90)
        kube_cluster.core.patch_node(node, {"spec": {"unschedulable": False}})
        pod = region.pods[node]
        try:
            kube_cluster.core.read_namespaced_pod(pod.metadata.name, region.namespace)
        except k8s.ApiException as error:
            if error.status != 404:
                raise
            # Its Node was deleted in an earlier test and the pod went with it: schedule it again.
            region.pods[node] = kube_cluster.core.create_namespaced_pod(
                region.namespace, demux_pod(pod.metadata.name, node, DEMUX)
            )
        region.kubelets[node].set_ready(region.pods[node], "nginx", True)
    for node in (A, B):
        name = region.pods[node].metadata.name
        wait_until(f"{name} Ready", lambda name=name: pod_ready(kube_cluster, region.namespace, name))
    return region


def restart(cluster: KubeCluster, region: Region, node: str) -> Kubelet:
    """The stopped stand-in again, with the certificate it holds (no new bootstrap); the module's
    runner stops it at the end like the others."""
    old = region.kubelets[node]
    return region.runner.start(
        node,
        "aaaaaa.bbbbbbbbbbbbbbbb",
        node_ip=old.node_ip,
        labels={"node.cluster.x-k8s.io/pool": POOL},
        provider_id=f"ovh://bhs/{BOX[node]}",
    )


def make_unready(cluster: KubeCluster, region: Region, node: str) -> None:
    pod = region.pods[node]
    region.kubelets[node].set_ready(pod, "nginx", False)
    wait_until(
        f"{pod.metadata.name} NotReady", lambda: not pod_ready(cluster, region.namespace, pod.metadata.name)
    )


def make_ready(cluster: KubeCluster, region: Region, node: str) -> None:
    pod = region.pods[node]
    region.kubelets[node].set_ready(pod, "nginx", True)
    wait_until(f"{pod.metadata.name} Ready", lambda: pod_ready(cluster, region.namespace, pod.metadata.name))


@dataclass
class RecordingMover:
    route: str | None
    calls: list[tuple[str, ...]] = field(default_factory=list)
    fail_moves: int = 0

    def failover_target(self, ip: str) -> str | None:
        self.calls.append(("failover_target", ip))
        return self.route

    def move_failover(self, ip: str, box_id: str) -> None:
        self.calls.append(("move_failover", ip, box_id))
        if self.fail_moves:
            self.fail_moves -= 1
            raise RuntimeError("vendor said 503")
        self.route = box_id


def watcher(
    cluster: KubeCluster, region: Region, mover: Any, api: k8s.ApiClient | None = None
) -> FailoverWatcher:
    list_nodes, list_pods = kube_listers(k8s.CoreV1Api(api or cluster.api), region.settings)
    return FailoverWatcher(region.settings, list_nodes, list_pods, mover)


def test_only_the_pools_nodes_and_the_regions_demux_pods_count(
    kube_cluster: KubeCluster, healthy: Region
) -> None:
    # Box A's own demux pod fails: the other region's Ready pod on A does not make it eligible, and
    # the decoy box (lowest name, Ready demux pod of this region) is not in the pool.
    make_unready(kube_cluster, healthy, A)
    w = watcher(kube_cluster, healthy, RecordingMover(BOX[A]))
    decision = w.poll_once()
    assert decision is not None
    assert (decision.action, decision.target, decision.node) == (Action.MOVE, BOX[B], B)


def test_healthy_current_box_is_kept_without_a_move(kube_cluster: KubeCluster, healthy: Region) -> None:
    mover = RecordingMover(BOX[B])
    w = watcher(kube_cluster, healthy, mover)
    assert [w.poll_once().action for _ in range(3)] == [Action.KEEP] * 3  # type: ignore[union-attr]
    assert mover.calls == [("failover_target", IP)] * 3


def test_a_box_whose_demux_pod_fails_is_left_after_two_polls(
    kube_cluster: KubeCluster, healthy: Region
) -> None:
    make_unready(kube_cluster, healthy, A)
    mover = RecordingMover(BOX[A])
    w = watcher(kube_cluster, healthy, mover)
    for _ in range(3):
        w.poll_once()
    assert mover.calls == [
        ("failover_target", IP),
        ("failover_target", IP),
        ("move_failover", IP, BOX[B]),
        ("failover_target", IP),
    ]


def test_a_demux_pod_unready_for_single_polls_apart_keeps_the_ip(
    kube_cluster: KubeCluster, healthy: Region, caplog: pytest.LogCaptureFixture
) -> None:
    """CONFIRM_POLLS counts polls in a row: a poll that keeps the IP ends the count, so box A's demux
    failing single probes now and then never moves the IP; failing two polls in a row does."""
    mover = RecordingMover(BOX[A])
    w = watcher(kube_cluster, healthy, mover)
    with caplog.at_level(logging.INFO, logger="watcher"):
        make_unready(kube_cluster, healthy, A)
        w.poll_once()
        make_ready(kube_cluster, healthy, A)
        for _ in range(3):
            w.poll_once()
        make_unready(kube_cluster, healthy, A)
        w.poll_once()
        assert mover.calls == [("failover_target", IP)] * 5
        w.poll_once()
    assert mover.calls == [("failover_target", IP)] * 6 + [("move_failover", IP, BOX[B])]
    why = f"current box {BOX[A]} is not eligible; lowest eligible node is {B}"
    pending = f"failover {IP}: move to {BOX[B]} pending confirmation (2 polls needed): {why}"
    keep = f"failover {IP}: keep: current box {BOX[A]} ({A}) is eligible"
    assert [r.getMessage() for r in caplog.records if r.name == "watcher"] == [
        pending,
        keep,
        keep,
        keep,
        pending,
        f"failover {IP}: moved to {BOX[B]} ({B}): {why}",
    ]


def lease_fence(
    cluster: KubeCluster, region: Region, lease: str, who: str, clock: Callable[[], float]
) -> LeaseFence:
    """A fence on `lease`, a Lease of the test's own in the module's namespace."""
    settings = LeaseSettings(namespace=region.namespace, name=lease, identity=who)
    return LeaseFence(k8s.CoordinationV1Api(cluster.api), settings, clock=clock)


def holding(fence: LeaseFence, clock: LeaseClock) -> LeaseFence:
    """`fence`, holding the lease: it created it, then waited a duration out."""
    fence.hold()
    clock.now += fence.settings.duration_seconds
    assert fence.hold()
    return fence


def test_only_the_watcher_holding_the_regions_lease_reads_the_vendor_or_moves(
    kube_cluster: KubeCluster, healthy: Region
) -> None:
    """Two watchers of one region (a partitioned Node's and its replacement): the one without the
    Lease reads no route and moves nothing; once the holder's lease lapses, the other decides afresh."""
    make_unready(kube_cluster, healthy, A)
    clock = LeaseClock()
    old_fence = holding(lease_fence(kube_cluster, healthy, "two-watchers", "watcher-old", clock), clock)
    new_fence = lease_fence(kube_cluster, healthy, "two-watchers", "watcher-new", clock)
    assert not new_fence.hold()
    mover = RecordingMover(BOX[A])
    list_nodes, list_pods = kube_listers(k8s.CoreV1Api(kube_cluster.api), healthy.settings)
    standby = FailoverWatcher(healthy.settings, list_nodes, list_pods, mover, fence=new_fence)
    assert [standby.poll_once() for _ in range(3)] == [None, None, None]
    assert mover.calls == []
    # The holder confirms the move over two polls, but its lease lapses before the second.
    holder = FailoverWatcher(healthy.settings, list_nodes, list_pods, mover, fence=old_fence)
    assert holder.poll_once().action is Action.MOVE  # type: ignore[union-attr]
    clock.now += old_fence.settings.duration_seconds + 1
    assert holder.poll_once() is None
    assert mover.calls == [("failover_target", IP)]
    # The replacement, which has seen the record unchanged for longer than its duration, takes the
    # lease over and confirms the move on its own polls.
    assert new_fence.hold()
    for _ in range(2):
        standby.poll_once()
    assert mover.calls[1:] == [
        ("failover_target", IP),
        ("failover_target", IP),
        ("move_failover", IP, BOX[B]),
    ]


def test_a_move_whose_lease_lapses_between_its_writes_stops_before_the_next(
    kube_cluster: KubeCluster, healthy: Region, caplog: pytest.LogCaptureFixture
) -> None:
    """A Dedibox move detaches, waits (minutes), attaches: each is a vendor call, and each checks
    the lease first, so a watcher that lost it during the wait attaches nothing."""
    make_unready(kube_cluster, healthy, A)
    clock = LeaseClock()
    fence = holding(lease_fence(kube_cluster, healthy, "lapsed-midway", "watcher", clock), clock)

    @dataclass
    class TwoStepMover(RecordingMover):
        def move_failover(self, ip: str, box_id: str) -> None:
            call_with_retries(RetryPolicy(), lambda: self.calls.append(("detach", ip)), idempotent=False)
            clock.now += fence.settings.duration_seconds + 1  # the detach's wait outlasts the lease
            call_with_retries(
                RetryPolicy(), lambda: self.calls.append(("attach", ip, box_id)), idempotent=False
            )

    mover = TwoStepMover(BOX[A])
    list_nodes, list_pods = kube_listers(k8s.CoreV1Api(kube_cluster.api), healthy.settings)
    w = FailoverWatcher(healthy.settings, list_nodes, list_pods, mover, fence=fence)
    with caplog.at_level(logging.ERROR, logger="watcher"):
        w.poll_once()
        fence.hold()  # its renewal thread, between the polls
        w.poll_once()
    assert mover.calls == [("failover_target", IP), ("failover_target", IP), ("detach", IP)]
    assert f"failover {IP}: ALERT move to {BOX[B]} stopped: lease" in caplog.text
    assert call_guard.get() is None  # the guard is the move's alone
    assert w.poll_once() is None  # standby, until its renewal thread holds the lease again


def test_a_watcher_that_holds_its_lease_anew_forgets_the_route_it_knew(
    kube_cluster: KubeCluster, healthy: Region
) -> None:
    """After a pause no poll saw (a rate-limit wait), the lease lapsed and was held again: another
    watcher may have moved the IP meanwhile, so a budgeted watcher decides on no route it knew."""
    lease_clock, clock, mover = LeaseClock(), Clock(), RecordingMover(BOX[A])
    fence = holding(lease_fence(kube_cluster, healthy, "held-anew", "watcher", lease_clock), lease_clock)
    settings = dataclasses.replace(healthy.settings, poll_seconds=5, route_read_seconds=72)
    list_nodes, list_pods = kube_listers(k8s.CoreV1Api(kube_cluster.api), settings)
    w = FailoverWatcher(settings, list_nodes, list_pods, mover, clock=clock, fence=fence)
    assert w.poll_once().action is Action.KEEP  # type: ignore[union-attr]
    term = fence.held_term()[1]
    lease_clock.now += fence.settings.duration_seconds + 1
    assert fence.hold() and fence.held_term() == (True, term + 1)
    clock.t = 5
    assert w.poll_once() is None  # the route is unknown until the next read the budget allows
    assert mover.calls == [("failover_target", IP)]
    clock.t = 72
    assert w.poll_once().action is Action.KEEP  # type: ignore[union-attr]
    assert mover.calls == [("failover_target", IP)] * 2


class LeaseClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_dead_node_is_left_once_the_node_controller_marks_it(
    kube_cluster: KubeCluster, healthy: Region
) -> None:
    healthy.kubelets[A].stop()
    # scripts/cluster.sh gives the node lifecycle controller a 20 s grace period.
    wait_until("node A not Ready", lambda: node_ready(kube_cluster, A) is None, timeout=90)
    mover = RecordingMover(BOX[A])
    w = watcher(kube_cluster, healthy, mover)
    decisions = [w.poll_once() for _ in range(2)]
    assert [d.action for d in decisions if d] == [Action.MOVE, Action.MOVE]
    assert "current box ns1.ip-1.net is not eligible" in decisions[0].reason  # type: ignore[union-attr]
    assert mover.route == BOX[B]


def test_a_cordoned_or_deleted_node_is_left_at_once(kube_cluster: KubeCluster, healthy: Region) -> None:
    # A release cordons first: a drain never flaps back, so no confirming poll.
    kube_cluster.core.patch_node(A, {"spec": {"unschedulable": True}})
    mover = RecordingMover(BOX[A])
    decision = watcher(kube_cluster, healthy, mover).poll_once()
    assert decision is not None and (decision.action, decision.target, decision.drain) == (
        Action.MOVE,
        BOX[B],
        True,
    )
    assert mover.route == BOX[B]
    # A Node being deleted (held by a finalizer here) is no candidate either.
    kube_cluster.core.patch_node(A, {"spec": {"unschedulable": False}})
    kube_cluster.core.patch_node(B, {"metadata": {"finalizers": ["tuist.dev/test-hold"]}})
    kube_cluster.core.delete_node(B)
    try:
        decision = watcher(kube_cluster, healthy, mover).poll_once()
        assert decision is not None and (decision.action, decision.target) == (Action.MOVE, BOX[A])
    finally:
        kube_cluster.core.patch_node(B, {"metadata": {"finalizers": None}})
        wait_until(
            "node B gone", lambda: B not in {n.metadata.name for n in kube_cluster.core.list_node().items}
        )
        # The stand-in does not register a deleted Node again (as the kubelet): start it afresh.
        healthy.kubelets[B].stop()


def test_an_unreadable_api_keeps_the_route(
    kube_cluster: KubeCluster, healthy: Region, caplog: pytest.LogCaptureFixture
) -> None:
    # An identity with no right to list nodes: the apiserver says 403 and the watcher moves nothing.
    from tests.cluster.k8s_support import service_account_api

    kube_cluster.core.create_namespaced_service_account(healthy.namespace, {"metadata": {"name": "nobody"}})
    api = service_account_api(kube_cluster, healthy.namespace, "nobody")
    make_unready(kube_cluster, healthy, A)
    mover = RecordingMover(BOX[A])
    with caplog.at_level(logging.WARNING, logger="watcher"):
        assert watcher(kube_cluster, healthy, mover, api=api).poll_once() is None
    assert mover.calls == []
    assert (
        caplog.records[0]
        .getMessage()
        .startswith(f"failover {IP}: read failed, keeping the current route: (403)")
    )


def test_no_eligible_box_stays_and_alerts(
    kube_cluster: KubeCluster, healthy: Region, caplog: pytest.LogCaptureFixture
) -> None:
    make_unready(kube_cluster, healthy, A)
    make_unready(kube_cluster, healthy, B)
    mover = RecordingMover(BOX[A])
    with caplog.at_level(logging.ERROR, logger="watcher"):
        decision = watcher(kube_cluster, healthy, mover).poll_once()
    assert decision is not None and decision.action is Action.STAY
    assert [r.getMessage() for r in caplog.records] == [
        f"failover {IP}: ALERT stay: no eligible box in pool ({A}: no Ready peer-demux pod, "
        f"{B}: no Ready peer-demux pod); IP left on {BOX[A]}"
    ]
    assert mover.calls == [("failover_target", IP)]


def polled_every_5s(
    cluster: KubeCluster, region: Region, mover: RecordingMover, clock: Clock, vendor: Vendor
) -> FailoverWatcher:
    """A watcher as deployed for `vendor`: Kubernetes every 5 s, the route as often as its budget allows."""
    settings = dataclasses.replace(
        region.settings, poll_seconds=5, route_read_seconds=min_poll_seconds(vendor)
    )
    list_nodes, list_pods = kube_listers(k8s.CoreV1Api(cluster.api), settings)
    return FailoverWatcher(settings, list_nodes, list_pods, mover, clock=clock)


@pytest.mark.parametrize("vendor", [Vendor.OVH, Vendor.DEDIBOX])
def test_a_refused_move_is_retried_after_a_growing_wait_not_every_poll(
    kube_cluster: KubeCluster, healthy: Region, caplog: pytest.LogCaptureFixture, vendor: Vendor
) -> None:
    """OVH and Dedibox read the route every poll, yet a vendor refusing moves is not asked every 5 s:
    the wait after a failure is two 30 s periods, doubled for each failure in a row up to 32."""
    kube_cluster.core.patch_node(A, {"spec": {"unschedulable": True}})
    clock, mover = Clock(), RecordingMover(BOX[A], fail_moves=7)
    w = polled_every_5s(kube_cluster, healthy, mover, clock, vendor)
    attempt = [("failover_target", IP), ("move_failover", IP, BOX[B])]
    waits = [60, 120, 240, 480, 960, 960, 960]
    with caplog.at_level(logging.ERROR, logger="watcher"):
        w.poll_once()
        assert mover.calls == attempt
        for wait in waits:
            # No vendor call at all within the wait: the route is unknown, so no decision either.
            for t in (clock.t + 5, clock.t + wait - 1):
                moves, clock.t = len(mover.calls), t
                assert w.poll_once() is None and len(mover.calls) == moves
            clock.t += 1
            w.poll_once()
            assert mover.calls[moves:] == attempt
    assert mover.route == BOX[B]  # the eighth move went through
    assert clock.t == sum(waits)
    assert caplog.messages == [
        f"failover {IP}: ALERT move to {BOX[B]} failed, retrying after the next vendor read in {wait}s "
        "(another eligible box first, if there is one): vendor said 503"
        for wait in waits
    ]


def test_a_box_the_vendor_keeps_refusing_is_passed_over_for_another_eligible_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The IP's box is NotReady and the vendor refuses every move to the lowest eligible box (OVH: not
    an allowed destination of this IP). The try after the wait goes to the next eligible box instead
    of the refused one again, every 16 minutes, for good. (Nodes as the listers give them: no cluster.)"""

    @dataclass
    class RefusesB(RecordingMover):
        def move_failover(self, ip: str, box_id: str) -> None:
            self.calls.append(("move_failover", ip, box_id))
            if box_id == "b":
                raise RuntimeError("customerError: not an allowed destination")
            self.route = box_id

    nodes = [
        NodeView("n-a", "a", ready=False),
        NodeView("n-b", "b", ready=True),
        NodeView("n-c", "c", ready=True),
    ]
    pods = [PodView("demux-b", "n-b", ready=True), PodView("demux-c", "n-c", ready=True)]
    settings = WatcherSettings(ip=IP, region="r", node_pool="p", poll_seconds=5, route_read_seconds=0)
    clock, mover = Clock(), RefusesB("a")
    w = FailoverWatcher(settings, lambda: nodes, lambda: pods, mover, clock=clock)
    with caplog.at_level(logging.INFO, logger="watcher"):
        while mover.route == "a" and clock.t < 600:
            w.poll_once()
            clock.t += 5
    assert mover.route == "c"
    assert [c for c in mover.calls if c[0] == "move_failover"] == [
        ("move_failover", IP, "b"),
        ("move_failover", IP, "c"),
    ]
    assert (
        f"failover {IP}: moved to c (n-c): current box a is not eligible; lowest eligible node whose box "
        "refused no recent move is n-c (skipped b)"
    ) in caplog.messages


def test_a_poll_that_keeps_the_ip_starts_the_failed_moves_over(
    kube_cluster: KubeCluster, healthy: Region, caplog: pytest.LogCaptureFixture
) -> None:
    """A move whose answer was lost went through: the next read keeps the IP there, and the next
    failure waits the shortest time again, not one doubled by a failure that was no failure."""

    @dataclass
    class LostAnswers(RecordingMover):
        def move_failover(self, ip: str, box_id: str) -> None:
            self.calls.append(("move_failover", ip, box_id))
            self.route = box_id
            raise RuntimeError("read timed out")

    kube_cluster.core.patch_node(A, {"spec": {"unschedulable": True}})
    clock, mover = Clock(), LostAnswers(BOX[A])
    w = polled_every_5s(kube_cluster, healthy, mover, clock, Vendor.OVH)
    with caplog.at_level(logging.ERROR, logger="watcher"):
        assert w.poll_once().action is Action.MOVE  # type: ignore[union-attr]
        clock.t = 60
        assert w.poll_once().action is Action.KEEP  # type: ignore[union-attr]
        # B is released in turn, A is back.
        kube_cluster.core.patch_node(A, {"spec": {"unschedulable": False}})
        kube_cluster.core.patch_node(B, {"spec": {"unschedulable": True}})
        clock.t = 65
        assert w.poll_once().action is Action.MOVE  # type: ignore[union-attr]
        clock.t = 65 + 59
        assert w.poll_once() is None
        clock.t = 65 + 60
        assert w.poll_once().action is Action.KEEP  # type: ignore[union-attr]
    assert mover.calls == [
        ("failover_target", IP),
        ("move_failover", IP, BOX[B]),
        ("failover_target", IP),
        ("failover_target", IP),
        ("move_failover", IP, BOX[A]),
        ("failover_target", IP),
    ]
    assert caplog.messages == [
        f"failover {IP}: ALERT move to {box} failed, retrying after the next vendor read in 60s "
        "(another eligible box first, if there is one): read timed out"
        for box in (BOX[B], BOX[A])
    ]


def test_a_node_with_a_foreign_provider_id_is_logged_and_never_a_target(
    kube_cluster: KubeCluster, healthy: Region, join: Callable[..., Kubelet], caplog: pytest.LogCaptureFixture
) -> None:
    # A Hetzner Cloud worker that carries the pool label by mistake.
    join("watch-cloud", fleet="watch", labels={"node.cluster.x-k8s.io/pool": POOL}, provider_id="hcloud://99")
    kube_cluster.core.patch_node(A, {"spec": {"unschedulable": True}})
    kube_cluster.core.patch_node(B, {"spec": {"unschedulable": True}})
    with caplog.at_level(logging.WARNING, logger="watcher"):
        decision = watcher(kube_cluster, healthy, RecordingMover(BOX[A])).poll_once()
    assert decision is not None and decision.action is Action.STAY
    assert (
        "node watch-cloud: providerID 'hcloud://99' has scheme 'hcloud'; "
        "expected ovh://, dedibox://, hrobot://, scaleway:// or applesilicon://; "
        "it cannot carry the failover IP"
    ) in [r.getMessage() for r in caplog.records]


def test_run_polls_until_stopped(kube_cluster: KubeCluster, healthy: Region) -> None:
    stop = threading.Event()

    class StopAfterThree(RecordingMover):
        def failover_target(self, ip: str) -> str | None:
            if len(self.calls) == 2:
                stop.set()
            return super().failover_target(ip)

    mover = StopAfterThree(BOX[A])
    thread = threading.Thread(target=watcher(kube_cluster, healthy, mover).run, args=(stop,))
    started = time.monotonic()
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive() and time.monotonic() - started < 10
    assert mover.calls == [("failover_target", IP)] * 3


@dataclass
class RateLimitedMover(RecordingMover):
    """A mover whose vendor's hourly budget ran out (Robot's 403 RATE_LIMIT_EXCEEDED)."""

    def failover_target(self, ip: str) -> str | None:
        self.calls.append(("failover_target", ip))
        raise RateLimitError(
            vendor="robot",
            call="GET /failover/{ip}",
            subject=ip,
            status=403,
            code="RATE_LIMIT_EXCEEDED",
            message="Rate limit exceeded",
            max_request=100,
            interval=3600,
        )


def test_a_spent_request_budget_keeps_the_route_alerts_and_pauses(
    kube_cluster: KubeCluster, healthy: Region, caplog: pytest.LogCaptureFixture
) -> None:
    make_unready(kube_cluster, healthy, A)
    mover = RateLimitedMover(BOX[A])
    w = watcher(kube_cluster, healthy, mover)
    with caplog.at_level(logging.ERROR, logger="watcher"):
        assert w.poll_once() is None
    assert [c[0] for c in mover.calls] == ["failover_target"]
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"failover {IP}: ALERT vendor request budget spent, keeping the current route: ")
    assert "may call GET /failover/{ip} 100 times per 3600 s" in line
    # The next read waits out the pause, not the poll interval.
    assert w.next_wait() == healthy.settings.rate_limited_pause_seconds
    mover.__class__ = RecordingMover
    w.poll_once()
    assert w.next_wait() == healthy.settings.poll_seconds


def test_robot_watcher_reads_its_route_no_faster_than_half_the_budget_allows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import watcher.__main__ as watcher_main

    for key, value in {
        "FAILOVER_IP": IP,
        "FAILOVER_VENDOR": "robot",
        "REGION": "us-east",
        "NODE_POOL": "kura-us-east",
        "POLL_SECONDS": "5",
    }.items():
        monkeypatch.setenv(key, value)
    # Kubernetes every poll as asked; Robot's GET /failover/{ip} once every 72 s per watcher.
    settings = watcher_main.settings_from_env()
    assert (settings.poll_seconds, settings.route_read_seconds) == (5.0, 72.0)
    monkeypatch.setenv("ROBOT_FAILOVER_WATCHERS", "2")
    assert watcher_main.settings_from_env().route_read_seconds == 144.0
    monkeypatch.setenv("FAILOVER_VENDOR", "ovh")
    settings = watcher_main.settings_from_env()
    assert (settings.poll_seconds, settings.route_read_seconds) == (5.0, 0.0)
    monkeypatch.setenv("POLL_SECONDS", "soon")
    with pytest.raises(SystemExit, match=r"POLL_SECONDS='soon' is not a number"):
        watcher_main.settings_from_env()


@dataclass
class Clock:
    t: float = 0.0

    def __call__(self) -> float:
        return self.t


def budgeted(cluster: KubeCluster, region: Region, mover: RecordingMover, clock: Clock) -> FailoverWatcher:
    """A watcher as a Robot region's: Kubernetes every 5 s, the vendor's route every 72 s."""
    settings = dataclasses.replace(region.settings, poll_seconds=5, route_read_seconds=72)
    list_nodes, list_pods = kube_listers(k8s.CoreV1Api(cluster.api), settings)
    return FailoverWatcher(settings, list_nodes, list_pods, mover, clock=clock)


def test_a_budgeted_watcher_leaves_a_failing_box_within_two_kubernetes_polls(
    kube_cluster: KubeCluster, healthy: Region
) -> None:
    """The demux drains for 60 s once it goes unready; a vendor read every 72 s could miss all of it.
    The watcher decides on the route it knows between reads, and knows where its own move put the IP."""
    clock, mover = Clock(), RecordingMover(BOX[A])
    w = budgeted(kube_cluster, healthy, mover, clock)

    def poll_at(t: float) -> Action | None:
        clock.t = t
        decision = w.poll_once()
        return decision.action if decision else None

    assert [poll_at(t) for t in (0, 5, 10)] == [Action.KEEP] * 3
    assert mover.calls == [("failover_target", IP)]  # one vendor read, three Kubernetes reads
    make_unready(kube_cluster, healthy, A)
    assert [poll_at(t) for t in (15, 20, 25)] == [Action.MOVE, Action.MOVE, Action.KEEP]
    assert mover.calls == [("failover_target", IP), ("move_failover", IP, BOX[B])]
    # The move read the route itself (Robot's checks it first): the next read is one period after it,
    # and agrees with the move.
    assert poll_at(91) is Action.KEEP
    assert mover.calls[2:] == []
    assert poll_at(92) is Action.KEEP
    assert mover.calls[2:] == [("failover_target", IP)]


def test_a_budgeted_watcher_retries_a_failed_move_after_its_next_vendor_read(
    kube_cluster: KubeCluster, healthy: Region, caplog: pytest.LogCaptureFixture
) -> None:
    """A failed move may have happened all the same: the route is unknown until the vendor is read.
    Each failure in a row doubles the wait before that read and the next move (Robot allows 50 moves
    an hour), so a vendor refusing moves is not asked every 5 s."""
    kube_cluster.core.patch_node(A, {"spec": {"unschedulable": True}})
    clock, mover = Clock(), RecordingMover(BOX[A], fail_moves=2)
    w = budgeted(kube_cluster, healthy, mover, clock)
    w.poll_once()
    assert mover.calls == [("failover_target", IP), ("move_failover", IP, BOX[B])]
    clock.t = 5
    with caplog.at_level(logging.INFO, logger="watcher"):
        assert w.poll_once() is None
    assert (
        f"failover {IP}: route unknown (a read or move failed): next vendor read in 139s" in caplog.messages
    )
    clock.t = 143
    assert w.poll_once() is None and len(mover.calls) == 2
    clock.t = 144  # two read periods after the first failure
    w.poll_once()
    assert mover.calls[2:] == [("failover_target", IP), ("move_failover", IP, BOX[B])]
    clock.t = 144 + 4 * 72 - 1  # the second failure in a row: four periods
    assert w.poll_once() is None and len(mover.calls) == 4
    clock.t = 144 + 4 * 72
    w.poll_once()
    assert mover.calls[4:] == [("failover_target", IP), ("move_failover", IP, BOX[B])]
    assert mover.route == BOX[B]


def test_the_loop_promises_its_next_heartbeat_before_each_poll_and_each_wait(tmp_path: Any) -> None:
    """The liveness probe restarts a watcher past the time it last wrote (components/
    failover_watcher.py): before a poll that time covers a move's budget, before a wait the wait."""
    from watcher.loop import POLL_BUDGET_SECONDS

    heartbeat = tmp_path / "heartbeat"
    settings = WatcherSettings(
        ip=IP,
        region="r",
        node_pool="p",
        poll_seconds=7.0,
        heartbeat_file=str(heartbeat),
        move_budget_seconds=600.0,
    )
    stop = threading.Event()
    during: list[tuple[float, int]] = []

    class Once(RecordingMover):
        def failover_target(self, ip: str) -> str | None:
            during.append((time.time(), int(heartbeat.read_text())))
            stop.set()
            return super().failover_target(ip)

    before = time.time()
    FailoverWatcher(settings, lambda: [], lambda: [], Once(BOX[A])).run(stop)
    after = time.time()

    [(seen_at, promised)] = during
    assert before + POLL_BUDGET_SECONDS + 600 - 1 <= promised <= seen_at + POLL_BUDGET_SECONDS + 600
    last = int(heartbeat.read_text())
    assert before + 7 + POLL_BUDGET_SECONDS - 1 <= last <= after + 7 + POLL_BUDGET_SECONDS
    assert not (tmp_path / "heartbeat.tmp").exists()
