"""One mover per region: the coordination.k8s.io/v1 Lease a watcher must hold to move the IP.

One replica and the Recreate strategy keep a rollout to one watcher, but not a partition: when the
watcher's Node stops answering the control plane, its pod is evicted and the ReplicaSet starts another
at once, while the first may still be running and still reach the vendor. Two movers deciding on
different views issue opposing moves. The Lease settles it: the watcher moves only while it holds
the region's Lease, renewed every `renew_seconds` by a thread of its own (a Dedibox move takes minutes
and must not lose it midway), and a contender takes it over only after it went unrenewed for
`duration_seconds`.

Expiry is judged as client-go's leader election judges it: by how long the record has gone unchanged
on the contender's own clock, never by comparing the holder's timestamps with local time, so clock
skew between Nodes cannot hand the Lease to two watchers. Every write is a compare-and-swap on the
record's resourceVersion. A holder counts its lease from before the read that preceded its renewal,
so its window always closes before any contender's can open; a Lease created anew is held only once a
holder of a deleted one would have lapsed. A move checks the lease before each vendor call
(`require`, through providers.retry.call_guard).

The timing, with the defaults (LeaseSettings checks that its numbers keep it):
- A Lease call takes at most 9 s: 2 s to connect, tried twice only when no connection was made (the
  client's retries, providers.kube.loop_retries), and 5 s to answer. A renewal (a read and a write)
  takes at most 18 s (`RENEWAL_SECONDS`).
- Renewed every 10 s from the start of the last renewal (at once after one that took longer), a failed
  one again after 2 s; held 60 s from before the renewal's read.
- A vendor call starts only with more than 20 s of that window left (`CALL_MARGIN_SECONDS`), and the
  mover's calls take at most 15 s (3 s to connect, 12 s to answer: watcher.mover.MOVER_TIMEOUTS,
  checked when a mover is built). So the last call lands before the holder's own window closes, hence
  before any contender's opens: never two opposing moves.
- Renewals that succeed, however slowly, never stop a move: two start at most max(10, 18) s apart and
  the second answers within 18 s, leaving 60 - 36 = 24 s of the window, more than 20 s. When they
  fail, calls still start for 40 s after the last good renewal began, and the window closes at 60 s.
- A contender takes over once the record has gone unchanged for more than 60 s on its own clock,
  counted from the answer that showed it; it reads every 10 s, so within 70 s of that answer. A Lease
  created anew is held 60 s after the answer that showed it gone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from providers.lazy import lazy_module

if TYPE_CHECKING:
    from kubernetes.client import exceptions as kube_errors
else:
    # The operator's CLI imports the loop (its failover commands), and has no cluster to talk to.
    kube_errors = lazy_module("kubernetes.client.exceptions")

log = logging.getLogger("watcher")

# (connect, read) seconds of each Lease call: a renewal (a read and a write) must fit well inside the
# gap between renewal and lapse, so a slow control plane costs one renewal, not the lease.
KUBE_TIMEOUT = (2, 5)
# The longest one Lease call takes on the watcher's client, which tries a connection that was never
# made once more and nothing else (providers.kube.loop_retries): 2 + 2 + 5 = 9 s.
LEASE_CALL_SECONDS = 2 * KUBE_TIMEOUT[0] + KUBE_TIMEOUT[1]
# The longest a renewal takes: a read and a write, 18 s.
RENEWAL_SECONDS = 2 * LEASE_CALL_SECONDS
# After a failed renewal, the next try comes this soon rather than a whole renew period later.
RETRY_SECONDS = 2.0
# A move's vendor call starts only while more than this much of the lease's window is left: longer
# than the longest one vendor request of the watcher's mover (watcher.mover.MOVER_TIMEOUTS: 3 s to
# connect + 12 s to answer; a mover whose timeouts add up to this or more is refused), so a call sent
# at the last moment still lands before a contender could take over. The 5 s beyond them cover what
# those timeouts do not bound: the name's resolution, a second address of the vendor's host.
CALL_MARGIN_SECONDS = 20.0


class LeaseLost(Exception):
    """Raised by `LeaseFence.require` when this watcher does not hold the lease (any more)."""


@dataclass(frozen=True)
class LeaseSettings:
    namespace: str
    name: str
    identity: str  # the pod's name: a restarted container of the same pod takes its lease back
    duration_seconds: int = 60
    renew_seconds: float = 10.0

    def __post_init__(self) -> None:
        # Two renewals start at most max(renew_seconds, RENEWAL_SECONDS) apart and the second answers
        # within RENEWAL_SECONDS: until it does, more than CALL_MARGIN_SECONDS of the last one's window
        # must be left, or a slow control plane stops a move midway although the lease stays held.
        needed = max(self.renew_seconds, RENEWAL_SECONDS) + RENEWAL_SECONDS + CALL_MARGIN_SECONDS
        if not needed < self.duration_seconds:
            raise ValueError(
                f"lease {self.namespace}/{self.name}: duration_seconds ({self.duration_seconds}) must "
                f"exceed {needed:g}: max(renew_seconds ({self.renew_seconds:g}), a renewal's "
                f"{RENEWAL_SECONDS:g}s) + a renewal's {RENEWAL_SECONDS:g}s + the vendor call margin "
                f"({CALL_MARGIN_SECONDS:g}s), or a slow renewal stops a move"
            )


def _micro_time(now: datetime) -> str:
    # MicroTime wants exactly six fraction digits; isoformat() drops them at microsecond 0.
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseFence:
    """Acquire, renew and release one Lease over a kubernetes `CoordinationV1Api`."""

    def __init__(
        self,
        coordination_v1: Any,
        settings: LeaseSettings,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.settings = settings
        self._api = coordination_v1
        self._clock = clock
        self._wall = wall
        # Guards the window and the term, which the loop's thread reads while the renewal thread
        # writes them; everything else is the renewal thread's alone.
        self._lock = threading.Lock()
        # From and until when (on `clock`) this watcher holds the lease; until None: it does not.
        self._held_from = 0.0
        self._held_until: float | None = None
        # Goes up each time this watcher comes to hold the lease anew (or creates it): a loop that
        # sees another term decides afresh, as another watcher may have moved the IP in between.
        self._term = 0
        # The record last read (its resourceVersion) and when this watcher first saw it.
        self._seen: tuple[str, float] | None = None
        self.holder: str | None = None  # as last read, for the logs
        self.failed = False  # the last hold() could not read or write the record
        self._announced = False  # whether the logs last said this watcher holds it

    def _held_now(self, now: float) -> bool:
        return self._held_until is not None and self._held_from <= now < self._held_until

    def held_term(self) -> tuple[bool, int]:
        """Whether this watcher holds the lease now, and in which term: read together."""
        with self._lock:
            return self._held_now(self._clock()), self._term

    def held(self) -> bool:
        """Whether this watcher holds the lease now: renewed less than `duration_seconds` ago."""
        return self.held_term()[0]

    def require(self, term: int | None = None) -> None:
        """LeaseLost unless the lease is held (in `term`, when given) with more than
        `CALL_MARGIN_SECONDS` of its window left: the check a move makes before each vendor call, so a
        call that still takes its connect and answer time lands before any contender could have
        taken over."""
        with self._lock:
            now = self._clock()
            ok = (
                self._held_now(now)
                and self._held_until is not None
                and now + CALL_MARGIN_SECONDS < self._held_until
                and (term is None or term == self._term)
            )
        if not ok:
            s = self.settings
            raise LeaseLost(
                f"lease {s.namespace}/{s.name} is not held by {s.identity}"
                + ("" if term is None else f" in term {term}")
                + " with time to spare"
            )

    def hold(self) -> bool:
        """Acquire the lease, or renew it when held. True when this watcher holds it afterwards; a
        failed read or a lost compare-and-swap is False (the next call tries again)."""
        s = self.settings
        self.failed = False
        started = self._clock()
        try:
            lease = self._api.read_namespaced_lease(s.name, s.namespace, _request_timeout=KUBE_TIMEOUT)
        except kube_errors.ApiException as exc:
            if exc.status != 404:
                return self._lost(f"read failed: {exc.status} {exc.reason}")
            # Gone (deleted by hand): whatever this watcher believed ends, and the one that creates
            # it anew holds it only a whole duration after the answer that showed it gone, as a
            # holder that still believes it holds the deleted one may go on for that long. Set
            # before the create, so a create whose answer is lost waits all the same.
            gone = self._clock()
            with self._lock:
                self._held_until = None
                self._held_from = max(self._held_from, gone + s.duration_seconds)
            return self._write(started, None, transitions=0)
        except Exception as exc:
            return self._lost(f"read failed: {exc}")
        # When a new record is first seen counts from after the read that returned it: a read sent
        # before the holder's renewal and answered after it must not date the renewal earlier.
        observed = self._clock()
        version = str(lease.metadata.resource_version)
        spec = lease.spec
        holder = spec.holder_identity or None
        self.holder = holder
        if self._seen is None or self._seen[0] != version:
            self._seen = (version, observed)
        unchanged_for = observed - self._seen[1]
        duration = spec.lease_duration_seconds or s.duration_seconds
        transitions = spec.lease_transitions or 0
        if holder == s.identity:
            return self._write(started, version, transitions=transitions, acquired=spec.acquire_time)
        # Another watcher holds it by the record: whatever this one believed ends now.
        with self._lock:
            self._held_until = None
        if holder is None or unchanged_for > duration:
            if holder is not None:
                log.warning(
                    "lease %s/%s: %s let it lapse %.0fs ago; taking it over",
                    s.namespace,
                    s.name,
                    holder,
                    unchanged_for - duration,
                )
            return self._write(started, version, transitions=transitions + 1)
        return self._lost(None)

    def _write(
        self, started: float, version: str | None, *, transitions: int, acquired: datetime | None = None
    ) -> bool:
        s = self.settings
        now = self._wall()
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": s.name, "namespace": s.namespace},
            "spec": {
                "holderIdentity": s.identity,
                "leaseDurationSeconds": s.duration_seconds,
                "acquireTime": _micro_time(acquired or now),
                "renewTime": _micro_time(now),
                "leaseTransitions": transitions,
            },
        }
        try:
            if version is None:
                written = self._api.create_namespaced_lease(s.namespace, body, _request_timeout=KUBE_TIMEOUT)
            else:
                body["metadata"]["resourceVersion"] = version
                written = self._api.replace_namespaced_lease(
                    s.name, s.namespace, body, _request_timeout=KUBE_TIMEOUT
                )
        except kube_errors.ApiException as exc:
            # 409: another watcher wrote first (it created the lease, or renewed or took it over).
            return self._lost(f"write refused: {exc.status} {exc.reason}" if exc.status != 409 else None)
        except Exception as exc:
            return self._lost(f"write failed: {exc}")
        with self._lock:
            was_held = self._held_now(self._clock())
            # A renewal's window counts from before its read, so from before any contender's view.
            self._held_from = max(self._held_from, started)
            self._held_until = started + s.duration_seconds
            if version is None or not was_held:
                self._term += 1
            held = self._held_now(self._clock())
        self._seen = (str(written.metadata.resource_version), started)
        self.holder = s.identity
        if held and not self._announced:
            self._announced = True
            log.info("lease %s/%s: held by %s", s.namespace, s.name, s.identity)
        elif version is None:
            log.info(
                "lease %s/%s: created by %s, held once %ss have passed",
                s.namespace,
                s.name,
                s.identity,
                s.duration_seconds,
            )
        return held

    def _lost(self, why: str | None) -> bool:
        """After a failed read or write (`why`), or a lease another holds: held while the last
        renewal's window lasts."""
        s = self.settings
        if why is not None:
            self.failed = True
            log.warning("lease %s/%s: %s", s.namespace, s.name, why)
        held = self.held()
        if self._announced and not held:
            self._announced = False
            log.error(
                "lease %s/%s: ALERT not held any more (holder: %s); no moves until it is again",
                s.namespace,
                s.name,
                self.holder,
            )
        return held

    def release(self) -> None:
        """Give the lease up (a clean shutdown), so the next watcher need not wait for it to lapse."""
        s = self.settings
        with self._lock:
            held, self._held_until = self._held_until is not None, None
        if not held:
            return
        try:
            lease = self._api.read_namespaced_lease(s.name, s.namespace, _request_timeout=KUBE_TIMEOUT)
            if lease.spec.holder_identity != s.identity:
                return
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": s.name,
                    "namespace": s.namespace,
                    "resourceVersion": lease.metadata.resource_version,
                },
                "spec": {"leaseTransitions": lease.spec.lease_transitions or 0},
            }
            self._api.replace_namespaced_lease(s.name, s.namespace, body, _request_timeout=KUBE_TIMEOUT)
            log.info("lease %s/%s: released", s.namespace, s.name)
        except Exception as exc:
            log.warning(
                "lease %s/%s: release failed, it lapses in %ss: %s",
                s.namespace,
                s.name,
                s.duration_seconds,
                exc,
            )

    def renew_until(self, stop: threading.Event) -> None:
        """Hold the lease every `renew_seconds` until `stop` is set (the watcher's renewal thread)."""
        while not stop.is_set():
            began = time.monotonic()
            held = False
            try:
                held = self.hold()
            except Exception:
                self.failed = True
                # A thread that died would leave the lease to lapse with no word said.
                log.exception("lease %s/%s: renewal failed", self.settings.namespace, self.settings.name)
            # Every renew_seconds from the start of the last one; sooner after a failed call (not
            # after a lease another holds, or one just created: those wait their turn).
            wait = RETRY_SECONDS if self.failed and not held else self.settings.renew_seconds
            stop.wait(max(0.0, wait - (time.monotonic() - began)))
