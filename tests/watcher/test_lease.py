"""The region's Lease (watcher/lease.py) against the real control plane (tests/support/cluster.py).
What the program's RBAC lets the watcher do with it is tests/cluster/test_program_rbac.py's.

Each fence has a clock of its own that the test moves, as two watchers on two Nodes each judge the
record by their own clock; the API server, its resourceVersions and its compare-and-swap are real.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client as k8s

from providers.retry import RetryPolicy, call_guard, call_with_retries
from tests.support.cluster import KubeCluster
from watcher.lease import (
    CALL_MARGIN_SECONDS,
    KUBE_TIMEOUT,
    LEASE_CALL_SECONDS,
    RENEWAL_SECONDS,
    LeaseFence,
    LeaseLost,
    LeaseSettings,
)

NAME = "kura-failover-watcher-us-east"
DURATION = 60


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def lease_ns(kube_cluster: KubeCluster) -> Iterator[str]:
    name = kube_cluster.namespace("lease")
    yield name
    kube_cluster.delete_namespace(name)


def fence(
    cluster: KubeCluster, namespace: str, identity: str, clock: Clock, api: Any = None, name: str = NAME
) -> LeaseFence:
    settings = LeaseSettings(namespace=namespace, name=name, identity=identity, duration_seconds=DURATION)
    return LeaseFence(api or k8s.CoordinationV1Api(cluster.api), settings, clock=clock)


def two_watchers(cluster: KubeCluster, namespace: str) -> tuple[LeaseFence, Clock, LeaseFence, Clock]:
    """A holds the lease (it created it, then waited a duration out); B has read it once."""
    a_clock, b_clock = Clock(), Clock()
    a = fence(cluster, namespace, "watcher-a", a_clock)
    b = fence(cluster, namespace, "watcher-b", b_clock)
    assert not a.hold()  # created: held only once a holder of a deleted one would have lapsed
    a_clock.now += DURATION
    assert a.hold() and a.held()
    assert not b.hold() and not b.held() and b.holder == "watcher-a"
    return a, a_clock, b, b_clock


def record(cluster: KubeCluster, namespace: str) -> k8s.V1LeaseSpec:
    spec: k8s.V1LeaseSpec = k8s.CoordinationV1Api(cluster.api).read_namespaced_lease(NAME, namespace).spec
    return spec


def test_a_created_lease_is_held_a_duration_later_and_a_second_watcher_waits(
    kube_cluster: KubeCluster, lease_ns: str
) -> None:
    a, a_clock, b, b_clock = two_watchers(kube_cluster, lease_ns)
    spec = record(kube_cluster, lease_ns)
    assert (spec.holder_identity, spec.lease_duration_seconds, spec.lease_transitions) == ("watcher-a", 60, 0)
    term = a.held_term()[1]
    # A renews every 10 s: B, on its own clock, sees the record change each time and never takes over.
    for _ in range(6):
        a_clock.now += 10
        b_clock.now += 10
        assert a.hold()
        assert not b.hold()
    assert (record(kube_cluster, lease_ns).holder_identity, a.held_term()) == ("watcher-a", (True, term))


def test_a_lease_left_unrenewed_past_its_duration_is_taken_over(
    kube_cluster: KubeCluster, lease_ns: str
) -> None:
    a, a_clock, b, b_clock = two_watchers(kube_cluster, lease_ns)
    b_clock.now += DURATION
    assert not b.hold()  # unchanged for exactly the duration since B first saw it: not yet
    # A's own window closed first: it counts from before the write that renewed it.
    a_clock.now += DURATION
    assert not a.held()
    with pytest.raises(LeaseLost, match=r"lease \S+/kura-failover-watcher-us-east is not held by watcher-a"):
        a.require()
    b_clock.now += 1
    assert b.hold() and b.held_term() == (True, 1)
    spec = record(kube_cluster, lease_ns)
    assert (spec.holder_identity, spec.lease_transitions) == ("watcher-b", 1)
    # A comes back (its Node answers again): the record says B, so A holds nothing and writes nothing.
    a_clock.now += 1
    assert not a.hold() and not a.held() and a.holder == "watcher-b"
    assert record(kube_cluster, lease_ns).holder_identity == "watcher-b"


def test_a_record_is_dated_from_after_the_read_that_returned_it(
    kube_cluster: KubeCluster, lease_ns: str
) -> None:
    """B's read is sent, A renews, the read answers 40 s later with A's renewal: B counts A's renewal
    from when the answer came, so it cannot take over before A's window has closed."""
    a, a_clock, _, b_clock = two_watchers(kube_cluster, lease_ns)
    api = k8s.CoordinationV1Api(kube_cluster.api)

    class SlowRead:
        def __getattr__(self, name: str) -> Any:
            return getattr(api, name)

        def read_namespaced_lease(self, *args: Any, **kwargs: Any) -> Any:
            b_clock.now += 40  # in flight ...
            a_clock.now += 40
            assert a.hold()  # ... while A renews
            return api.read_namespaced_lease(*args, **kwargs)

    b = fence(kube_cluster, lease_ns, "watcher-b", b_clock, api=SlowRead())
    assert not b.hold()
    b._api = api
    b_clock.now += 25  # 65 s after the read was sent, 25 s after it answered
    assert not b.hold()
    assert record(kube_cluster, lease_ns).holder_identity == "watcher-a"


def test_a_renewal_that_fails_keeps_the_lease_only_until_its_window_closes(
    kube_cluster: KubeCluster, lease_ns: str
) -> None:
    a, clock, _, _ = two_watchers(kube_cluster, lease_ns)
    # The API server stops answering (an address nothing listens on).
    config = copy.deepcopy(kube_cluster.api.configuration)
    config.host = "https://127.0.0.1:1"
    a._api = k8s.CoordinationV1Api(k8s.ApiClient(config))
    clock.now += 50
    assert a.hold() and a.held()  # the read failed, but the last renewal's 60 s still run
    clock.now += 10
    assert not a.hold() and not a.held()


def test_a_deleted_lease_is_held_by_the_watcher_that_creates_it_only_once_the_old_holder_lapsed(
    kube_cluster: KubeCluster, lease_ns: str
) -> None:
    a, a_clock, b, b_clock = two_watchers(kube_cluster, lease_ns)
    k8s.CoordinationV1Api(kube_cluster.api).delete_namespaced_lease(NAME, lease_ns)
    assert not b.hold()  # B created it anew ...
    assert record(kube_cluster, lease_ns).holder_identity == "watcher-b"
    assert a.held()  # ... while A, which has not read since, still believes it holds the old one
    a_clock.now += DURATION
    b_clock.now += DURATION
    assert not a.held()
    assert b.hold() and b.held()
    assert not a.hold()


def test_a_released_lease_is_taken_at_once(kube_cluster: KubeCluster, lease_ns: str) -> None:
    a, _, b, _ = two_watchers(kube_cluster, lease_ns)
    a.release()
    assert not a.held()
    assert record(kube_cluster, lease_ns).holder_identity is None
    assert b.hold()  # no wait for the lapse: the next watcher of a rollout moves at once
    assert record(kube_cluster, lease_ns).holder_identity == "watcher-b"


def test_a_restarted_container_of_the_same_pod_takes_its_lease_back(
    kube_cluster: KubeCluster, lease_ns: str
) -> None:
    two_watchers(kube_cluster, lease_ns)
    again = fence(kube_cluster, lease_ns, "watcher-a", Clock())
    assert again.hold() and again.held()
    assert record(kube_cluster, lease_ns).lease_transitions == 0


def test_two_watchers_racing_for_a_lease_never_both_hold_it(kube_cluster: KubeCluster, lease_ns: str) -> None:
    for round_ in range(5):
        name = f"race-{round_}"
        # A held it and released it: the two take it over at once, by compare-and-swap.
        first = fence(kube_cluster, lease_ns, "watcher-first", Clock(), name=name)
        first.hold()
        first._clock.now += DURATION  # type: ignore[attr-defined]
        assert first.hold()
        first.release()
        fences = [fence(kube_cluster, lease_ns, f"watcher-{i}", Clock(), name=name) for i in range(2)]
        won = race([f.hold for f in fences])
        assert sorted(won) == [False, True], won
        holder = k8s.CoordinationV1Api(kube_cluster.api).read_namespaced_lease(name, lease_ns).spec
        assert holder.holder_identity == f"watcher-{won.index(True)}"


def race(calls: list[Callable[[], bool]]) -> list[bool]:
    """Each call on a thread of its own, released together; their answers in order."""
    start = threading.Barrier(len(calls))
    results: list[bool | None] = [None] * len(calls)

    def contend(i: int) -> None:
        start.wait()
        results[i] = calls[i]()

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [bool(r) for r in results]


def test_a_move_stops_at_its_next_write_once_the_lease_is_lost(
    kube_cluster: KubeCluster, lease_ns: str
) -> None:
    """The guard the loop sets around a move (watcher/loop.py): each vendor call checks it."""
    a, clock, _, _ = two_watchers(kube_cluster, lease_ns)
    sent: list[str] = []
    token = call_guard.set(a.require)
    try:
        call_with_retries(RetryPolicy(), lambda: sent.append("detach"), idempotent=False)
        clock.now += DURATION  # the detach's wait outlasted the lease
        with pytest.raises(LeaseLost):
            call_with_retries(RetryPolicy(), lambda: sent.append("attach"), idempotent=False)
    finally:
        call_guard.reset(token)
    assert sent == ["detach"]


def test_a_move_checks_its_own_term_and_leaves_time_to_spare(
    kube_cluster: KubeCluster, lease_ns: str
) -> None:
    a, clock, _, _ = two_watchers(kube_cluster, lease_ns)
    held, term = a.held_term()
    assert held
    a.require(term)
    clock.now += 39.5  # 20.5 s of the window left: a call may start
    a.require(term)
    clock.now += 0.5  # 20 s left: held, but a call started now could outlast it
    assert a.held()
    with pytest.raises(LeaseLost, match=f"not held by watcher-a in term {term} with time to spare"):
        a.require(term)
    # Lapsed and held again: a move decided in the old term stops, a new one may go.
    clock.now += 20
    assert a.hold()
    new_term = a.held_term()[1]
    assert new_term != term
    with pytest.raises(LeaseLost):
        a.require(term)
    a.require(new_term)


def test_a_created_lease_whose_answer_was_lost_is_held_no_sooner(
    kube_cluster: KubeCluster, lease_ns: str
) -> None:
    """The create committed but its answer was lost: the next read shows this watcher as the holder,
    and it still waits the whole duration counted from the answer that showed the lease gone."""
    api = k8s.CoordinationV1Api(kube_cluster.api)

    class LostAnswer:
        def __getattr__(self, name: str) -> Any:
            return getattr(api, name)

        def create_namespaced_lease(self, *args: Any, **kwargs: Any) -> Any:
            api.create_namespaced_lease(*args, **kwargs)
            raise TimeoutError("read timed out")

    clock = Clock()
    a = fence(kube_cluster, lease_ns, "watcher-a", clock, api=LostAnswer())
    assert not a.hold() and a.failed
    assert record(kube_cluster, lease_ns).holder_identity == "watcher-a"
    clock.now += 10
    assert not a.hold() and not a.failed  # renewed, but not held yet
    clock.now += DURATION - 10
    assert a.hold() and a.held()


def test_times_with_no_microseconds_are_written_as_the_api_wants_them(
    kube_cluster: KubeCluster, lease_ns: str
) -> None:
    settings = LeaseSettings(namespace=lease_ns, name=NAME, identity="watcher-a")
    on_the_second = datetime(2026, 12, 2, 14, 0, 0, tzinfo=UTC)
    a = LeaseFence(
        k8s.CoordinationV1Api(kube_cluster.api), settings, clock=Clock(), wall=lambda: on_the_second
    )
    a.hold()
    assert record(kube_cluster, lease_ns).renew_time == on_the_second


def test_the_timing_the_module_docstring_states() -> None:
    """A Lease call 2 + 2 + 5 s (a connection never made is tried again, nothing else), a renewal two
    of them; 60 s held, renewed every 10 s; vendor calls start with more than 20 s left."""
    settings = LeaseSettings(namespace="n", name="l", identity="i")
    assert (settings.duration_seconds, settings.renew_seconds) == (60, 10.0)
    assert (KUBE_TIMEOUT, LEASE_CALL_SECONDS, RENEWAL_SECONDS, CALL_MARGIN_SECONDS) == ((2, 5), 9, 18, 20.0)
    # Two renewals at most 18 s apart, the second answered 18 s later: 24 s of the window left.
    assert settings.duration_seconds - 2 * RENEWAL_SECONDS == 24 > CALL_MARGIN_SECONDS


@pytest.mark.parametrize(
    ("duration", "renew", "needed"),
    [(56, 10.0, 56), (30, 10.0, 56), (60, 25.0, 63)],
)
def test_a_duration_must_leave_the_call_margin_through_two_slow_renewals(
    duration: int, renew: float, needed: int
) -> None:
    with pytest.raises(ValueError) as raised:
        LeaseSettings(namespace="n", name="l", identity="i", duration_seconds=duration, renew_seconds=renew)
    assert str(raised.value) == (
        f"lease n/l: duration_seconds ({duration}) must exceed {needed}: max(renew_seconds ({renew:g}), "
        "a renewal's 18s) + a renewal's 18s + the vendor call margin (20s), or a slow renewal stops a move"
    )
    LeaseSettings(namespace="n", name="l", identity="i", duration_seconds=needed + 1, renew_seconds=renew)


def test_renewals_as_slow_as_their_timeouts_allow_never_stop_a_move(
    kube_cluster: KubeCluster, lease_ns: str
) -> None:
    """Each Lease call of A's renewals takes its whole 9 s, so each renewal starts as the last one
    ends (18 s apart): a move's call made at the end of a renewal, with the previous window the only
    one known, still has more than the call margin left."""
    a, clock, _, _ = two_watchers(kube_cluster, lease_ns)
    api = k8s.CoordinationV1Api(kube_cluster.api)
    left: list[float] = []

    class SlowCalls:
        def __getattr__(self, name: str) -> Any:
            return getattr(api, name)

        def read_namespaced_lease(self, *args: Any, **kwargs: Any) -> Any:
            clock.now += LEASE_CALL_SECONDS
            return api.read_namespaced_lease(*args, **kwargs)

        def replace_namespaced_lease(self, *args: Any, **kwargs: Any) -> Any:
            clock.now += LEASE_CALL_SECONDS
            assert a._held_until is not None
            left.append(a._held_until - clock.now)
            a.require()  # a move's vendor call, just before this renewal's answer
            return api.replace_namespaced_lease(*args, **kwargs)

    a._api = SlowCalls()
    clock.now += RENEWAL_SECONDS  # the renewal before took 18 s too: the next starts at once
    for _ in range(3):
        assert a.hold()
    assert left == [24.0, 24.0, 24.0]
