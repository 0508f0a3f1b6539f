"""The watcher loop: read nodes and demux pods, decide, confirm, move.

Kubernetes reads are injected as list functions (`kube_listers` builds them from the
kubernetes client), and the vendor side is a `Mover`, so the loop is tested against a
local API server and a recording mover.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from providers.constants import POOL_LABEL
from providers.errors import AuthError, RateLimitError
from providers.retry import call_guard
from watcher.decision import (
    Action,
    Decision,
    MoveConfirmer,
    NodeView,
    PodView,
    box_id_from_provider_id,
    decide,
)
from watcher.heartbeat import write_heartbeat
from watcher.lease import LeaseFence, LeaseLost

__all__ = [
    "FailoverWatcher",
    "Mover",
    "WatcherSettings",
    "condition_true",
    "kube_listers",
    "node_view",
    "pod_view",
]

log = logging.getLogger("watcher")

# (connect, read) seconds of each Kubernetes list: the client's default waits on a half-open
# connection for good, and this is the one process that moves the IP.
KUBE_TIMEOUT = (5, 30)
# What one poll may take besides a move: the two lists and the vendor's route read, each bounded.
POLL_BUDGET_SECONDS = 120.0
# What one move may take: a Dedibox move's waits (detach, attach) share two of the clients' task
# timeouts (providers.clients.ClientTiming.task_timeout, 600 s), and a failed attach's put-back waits
# up to one more (a test holds them together).
MOVE_BUDGET_SECONDS = 3 * 600.0 + 60.0
# How long the vendor is left alone after it refused the credential (AuthError): longer than Robot's
# block of the source IP after 3 failed logins (10 minutes, robot.your-server.de/doc/webservice), so
# one watcher with a bad credential does not keep the egress IP every stack shares blocked.
AUTH_REFUSED_PAUSE_SECONDS = 11 * 60.0


class _NotDue(Exception):
    """No route is known and the vendor may not be read yet (its request budget)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"next vendor read in {seconds:.0f}s")
        self.seconds = seconds


class Mover(Protocol):
    """The vendor failover API (providers.vendor.VendorClient implements it)."""

    def failover_target(self, ip: str) -> str | None:
        """The box id the IP is routed to now, or None when unrouted."""

    def move_failover(self, ip: str, box_id: str) -> None:
        """Route the IP to `box_id`; returns once the vendor accepted (or finished) the move."""


NodeLister = Callable[[], list[NodeView]]
PodLister = Callable[[], list[PodView]]


@dataclass(frozen=True)
class WatcherSettings:
    ip: str
    region: str
    node_pool: str
    namespace: str = "kura"
    # How often the loop reads Kubernetes (nodes, demux pods): cheap, and what a move waits for.
    poll_seconds: float = 30.0
    # The shortest time between two reads of the vendor's route (Robot: what half its hourly budget
    # for GET /failover/{ip} allows; 0: every poll). Between reads the loop decides on the route it
    # last read or last set by its own move, so a demux going unready is acted on within
    # `confirm_polls` Kubernetes polls, not within one budget-limited vendor read.
    route_read_seconds: float = 0.0
    confirm_polls: int = 2
    # After a vendor's request budget ran out (Robot's hourly limits), the next read waits this long
    # rather than spend what refills on more refusals.
    rate_limited_pause_seconds: float = 300.0
    # After the vendor refused the credential (AuthError, on a read or a move), no vendor call for
    # this long: more than Robot's 10-minute block of the source IP after 3 failed logins.
    auth_refused_pause_seconds: float = AUTH_REFUSED_PAUSE_SECONDS
    # Where the loop writes the time by which it will have written again (epoch seconds); the pod's
    # liveness probe restarts a watcher that missed it (components/failover_watcher.py). None: not kept.
    heartbeat_file: str | None = None
    # The longest a vendor move may block a poll (the clients' task timeout, and some).
    move_budget_seconds: float = MOVE_BUDGET_SECONDS
    # The shortest period the wait after a failed move is counted in (see poll_once): OVH and Dedibox
    # read the route every poll, and a refused move must not be retried as often.
    failed_move_period_seconds: float = 30.0


def condition_true(conditions: list[Any] | None, kind: str) -> bool:
    return any(c.type == kind and c.status == "True" for c in conditions or [])


def node_view(node: Any) -> NodeView:
    """A kubernetes V1Node as the decision sees it."""
    provider_id = node.spec.provider_id if node.spec else None
    box_id: str | None = None
    if provider_id:
        try:
            box_id = box_id_from_provider_id(provider_id)
        except ValueError as exc:
            log.warning("node %s: %s; it cannot carry the failover IP", node.metadata.name, exc)
    return NodeView(
        name=node.metadata.name,
        box_id=box_id,
        ready=condition_true(node.status.conditions if node.status else None, "Ready"),
        terminating=node.metadata.deletion_timestamp is not None,
        unschedulable=bool(node.spec and node.spec.unschedulable),
    )


def pod_view(pod: Any) -> PodView:
    return PodView(
        name=pod.metadata.name,
        node_name=pod.spec.node_name if pod.spec else None,
        ready=condition_true(pod.status.conditions if pod.status else None, "Ready"),
        terminating=pod.metadata.deletion_timestamp is not None,
    )


def kube_listers(
    core_v1: Any, settings: WatcherSettings, timeout: tuple[float, float] = KUBE_TIMEOUT
) -> tuple[NodeLister, PodLister]:
    """List functions over a kubernetes `CoreV1Api`: the region's pool nodes and demux pods, each
    list bounded by `timeout` (connect, read): the watcher's own, or a caller's shorter one."""

    def list_nodes() -> list[NodeView]:
        items = core_v1.list_node(
            label_selector=f"{POOL_LABEL}={settings.node_pool}", _request_timeout=timeout
        ).items
        return [node_view(n) for n in items]

    def list_pods() -> list[PodView]:
        selector = f"app.kubernetes.io/component=peer-demux,app.kubernetes.io/instance={settings.region}"
        items = core_v1.list_namespaced_pod(
            settings.namespace, label_selector=selector, _request_timeout=timeout
        ).items
        return [pod_view(p) for p in items]

    return list_nodes, list_pods


class FailoverWatcher:
    def __init__(
        self,
        settings: WatcherSettings,
        list_nodes: NodeLister,
        list_pods: PodLister,
        mover: Mover,
        clock: Callable[[], float] = time.monotonic,
        fence: LeaseFence | None = None,
    ) -> None:
        self.settings = settings
        # The region's Lease (watcher/lease.py): no move unless held. None: this loop is the only
        # mover by construction (tests, a deploy that predates the Lease).
        self._fence = fence
        self._standby = False
        self._term = 0  # the fence's term this loop last decided in
        self._list_nodes = list_nodes
        self._list_pods = list_pods
        self._mover = mover
        self._clock = clock
        self._confirmer = MoveConfirmer(settings.confirm_polls)
        self._rate_limited = False
        # The route as last read from the vendor or set by this loop's own move, in a 1-tuple since
        # an unrouted IP reads None; None: unknown.
        self._route: tuple[str | None] | None = None
        # When the vendor may next be asked where the IP routes (None: now). A read, answered or not,
        # spends a request; so does a move, which checks the route itself (Robot) before its POST.
        self._next_read_at: float | None = None
        # Failed moves since the IP was last seen on an eligible box or moved by this loop: each
        # doubles the wait before the next read and move.
        self._failed_moves = 0
        # Box -> until when a move to it is tried only if no other box is eligible: the vendor refused
        # the last move there (it may refuse that box for good: not an allowed destination).
        self._refused: dict[str, float] = {}
        # Whether the vendor's last answer refused the credential; a read that succeeds clears it.
        self._auth_refused = False

    def _current_route(self) -> str | None:
        """The box the IP routes to: the vendor's answer when a read is due, else the route known.
        Raises _NotDue when no route is known (a read or a move failed) and no read is due yet."""
        now = self._clock()
        if self._next_read_at is not None and now < self._next_read_at:
            if self._route is None:
                raise _NotDue(self._next_read_at - now)
            return self._route[0]
        # A refused or failed read spent a request too: the next one waits its turn all the same.
        self._next_read_at, self._route = now + self.settings.route_read_seconds, None
        route = self._mover.failover_target(self.settings.ip)
        self._route = (route,)
        if self._auth_refused:
            self._auth_refused = False
            log.info("failover %s: the vendor accepts the credential again", self.settings.ip)
        return route

    def _pause_after_auth_refused(self, what: str, exc: AuthError) -> None:
        """The vendor refused the credential: no vendor call (read or move) before the pause is over.
        Robot blocks the source IP for 10 minutes after 3 failed logins, and the egress IP is every
        stack's: retrying a bad credential every poll would lock all of them out."""
        pause = self.settings.auth_refused_pause_seconds
        self._auth_refused = True
        self._route = None
        self._next_read_at = self._clock() + pause
        log.error(
            "failover %s: ALERT vendor credential refused (%s); not calling the vendor again for %.0fs: %s",
            self.settings.ip,
            what,
            pause,
            exc,
        )

    def poll_once(self) -> Decision | None:
        """One observation. Returns the decision, or None when a read failed (nothing changes)."""
        ip = self.settings.ip
        self._rate_limited = False
        if not self._holds_lease():
            return None
        term = self._term
        try:
            nodes = self._list_nodes()
            pods = self._list_pods()
            current = self._current_route()
        except _NotDue as wait:
            log.info("failover %s: route unknown (a read or move failed): %s", ip, wait)
            return None
        except RateLimitError as exc:
            # Not evidence of anything either; the message names the budget that ran out.
            self._rate_limited = True
            log.error(
                "failover %s: ALERT vendor request budget spent, keeping the current route: %s", ip, exc
            )
            return None
        except AuthError as exc:
            # Nor is a refused credential; asking again soon would get the egress IP blocked (Robot).
            self._pause_after_auth_refused("reading the route", exc)
            return None
        except Exception as exc:
            # A failed read is not evidence a box died: keep the route and read again when due.
            log.warning("failover %s: read failed, keeping the current route: %s", ip, exc)
            return None
        now = self._clock()
        self._refused = {box: until for box, until in self._refused.items() if until > now}
        decision = decide(current, nodes, pods, avoid=self._refused)
        # Every decision goes through the confirmer: a KEEP or STAY between two polls that decide a move
        # ends the streak, so a box that is unready for single polls now and then keeps the IP.
        confirmed = self._confirmer.confirm(decision)
        if decision.action is Action.STAY:
            log.error("failover %s: ALERT stay: %s", ip, decision.reason)
        elif decision.action is Action.KEEP:
            # The IP is on an eligible box, whatever the failed moves before did: a later failure
            # starts over at the shortest wait.
            self._failed_moves = 0
            self._refused.clear()
            log.info("failover %s: keep: %s", ip, decision.reason)
        elif not confirmed:
            log.info(
                "failover %s: move to %s pending confirmation (%d polls needed): %s",
                ip,
                decision.target,
                self.settings.confirm_polls,
                decision.reason,
            )
        elif not self._holds_lease() or self._term != term:
            return None  # it lapsed during this poll's reads (the holder decides), or was held anew
        else:
            assert decision.target is not None
            # Each of the move's vendor calls checks the lease first, in the term the move was decided
            # in: a move is several (a Dedibox detach, a wait of minutes, an attach), and one whose
            # watcher lost the lease midway must stop, even if it holds the lease again by then.
            fence = self._fence
            fenced = call_guard.set((lambda: fence.require(term)) if fence is not None else None)
            try:
                self._mover.move_failover(ip, decision.target)
            except LeaseLost as exc:
                self._route = None  # it may have stopped halfway (detached, not attached)
                log.error("failover %s: ALERT move to %s stopped: %s", ip, decision.target, exc)
                return decision
            except RateLimitError as exc:
                self._rate_limited = True
                log.error(
                    "failover %s: ALERT move to %s refused, vendor request budget spent: %s",
                    ip,
                    decision.target,
                    exc,
                )
                return decision
            except AuthError as exc:
                # The route is unknown (a Dedibox move may have stopped after its detach) until the
                # read after the pause.
                self._pause_after_auth_refused(f"moving to {decision.target}", exc)
                return decision
            except Exception as exc:
                # The move may have happened all the same (an answer lost): the route is unknown
                # until the vendor is read again, and the move is retried only after that read.
                # A vendor that keeps refusing is asked half as often each time (Robot: 50 moves an
                # hour), from two periods up to 32; a period is at least a poll and 30 s, since OVH
                # and Dedibox read every poll (route_read_seconds 0).
                self._route = None
                self._failed_moves += 1
                period = max(
                    self.settings.route_read_seconds,
                    self.settings.poll_seconds,
                    self.settings.failed_move_period_seconds,
                )
                backoff = period * 2 ** min(self._failed_moves, 5)
                self._next_read_at = self._clock() + backoff
                # Until the read after next, another eligible box goes first (decide's `avoid`).
                self._refused[decision.target] = self._next_read_at + backoff
                log.error(
                    "failover %s: ALERT move to %s failed, retrying after the next vendor read in %.0fs "
                    "(another eligible box first, if there is one): %s",
                    ip,
                    decision.target,
                    backoff,
                    exc,
                )
                return decision
            finally:
                call_guard.reset(fenced)
            log.info("failover %s: moved to %s (%s): %s", ip, decision.target, decision.node, decision.reason)
            self._route, self._failed_moves = (decision.target,), 0
            self._refused.clear()
            # The move read the route itself (Robot checks it before the POST): the next read waits.
            self._next_read_at = self._clock() + self.settings.route_read_seconds
            self._confirmer.reset()
        return decision

    def _holds_lease(self) -> bool:
        """Whether this loop may move the IP. A standby reads nothing: the vendor's request budget is
        the holder's, and the route it knew may have been changed by the holder since."""
        if self._fence is None:
            return True
        held, term = self._fence.held_term()
        if held:
            if self._standby:
                log.info("failover %s: holding the region's lease; deciding again", self.settings.ip)
                self._standby = False
            if term != self._term:
                # Held anew (even with no poll that saw it lapse, as after a rate-limit pause):
                # another watcher may have moved the IP meanwhile.
                self._term = term
                self._route = None
                self._confirmer.reset()
            return True
        if not self._standby:
            log.info(
                "failover %s: standby, this watcher does not hold the region's lease (holder: %s)",
                self.settings.ip,
                self._fence.holder or "nobody",
            )
            self._standby = True
        self._route = None
        self._confirmer.reset()
        return False

    def next_wait(self) -> float:
        """Seconds until the next poll: `poll_seconds`, or the longer pause after a rate limit."""
        if self._rate_limited:
            return max(self.settings.poll_seconds, self.settings.rate_limited_pause_seconds)
        return self.settings.poll_seconds

    def run(self, stop: threading.Event) -> None:
        """Poll every `poll_seconds` until `stop` is set, promising each next heartbeat before it."""
        while not stop.is_set():
            self.beat(POLL_BUDGET_SECONDS + self.settings.move_budget_seconds)
            self.poll_once()
            wait = self.next_wait()
            self.beat(wait + POLL_BUDGET_SECONDS)
            stop.wait(wait)

    def beat(self, within: float) -> None:
        """Write the heartbeat: the time by which the loop will write it again."""
        write_heartbeat(self.settings.heartbeat_file, within)
