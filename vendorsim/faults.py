"""Failure injection and switchable vendor behaviours, set through /_admin/faults and
/_admin/behaviour (or the inventory's `faults` and `behaviour`).

Faults live in memory (a restart clears them); each rule has its own seeded RNG so a test that sets
`seed` sees the same pass/fail sequence every run. Kinds of fault:

- error rules (`error_rate`, `status`, `retry_after`, `latency_ms`, `count`): the request fails
  with the vendor's error shape. `answer: "before"` (default) fails it before the handler runs,
  so nothing happened; `answer: "lost"` runs the handler and keeps its effect, then answers the
  error instead (or, with `drop`, closes the connection without an answer): the request was
  carried out, the client cannot know.
- `task_failure` {kind, count, status?}: the next `count` tasks of that kind end in a failure
  status (`status`, or the vendor's usual one).
- `task_read_fault` {kind, status, count}: the next `count` reads of a task of that kind that is
  still in flight answer `status` (404 or 500), as OVH does now and then for running tasks.

Behaviours are the vendors' answers to repeated writes, and to a read just after a write, that their
documentation leaves open; each has a default (the likelier answer; for the reads after a write,
the simulator's earlier one) and the alternative, so the clients are tested under both
(docs/vendor-behaviour.md).
"""

from __future__ import annotations

import fnmatch
import random
import threading
from dataclasses import dataclass, field
from typing import Any

from vendorsim.store import Store

VENDORS = ("ovh", "dedibox", "robot", "scaleway_em", "applesilicon")

# Task kinds and the failure statuses each can end in (first: the usual one).
TASK_FAILURE_STATUSES: dict[str, tuple[str, ...]] = {
    "ovh.reinstallServer": ("error", "customerError", "ovhError", "cancelled"),
    "ovh.ipMove": ("ovhError", "customerError", "cancelled"),
    "dedibox.install": ("unknown", "missing"),
    "dedibox.failoverAttach": ("failed",),
    "scaleway_em.install": ("error",),
    "applesilicon.reinstall": ("error",),
}
TASK_READ_FAULT_KINDS = ("ovh.reinstallServer", "ovh.ipMove")

# behaviour -> (default, alternatives...)
BEHAVIOURS: dict[str, tuple[str, ...]] = {
    # POST /ip/{ip}/move to the service the IP is routed to already.
    "ovh.ip_move_to_current": ("reject", "accept"),
    # POST .../reinstall while a reinstall task of the server still runs.
    "ovh.reinstall_while_running": ("task_already_exists", "accept"),
    # POST failover-ips/attach of an IP attached to another server.
    "dedibox.attach_when_attached": ("move", "reject"),
    # The first read of a server's install state after an accepted reinstall POST: the state after
    # the POST ("current"), or, once, the state from just before it ("previous_once": a read that
    # has not caught up with the write yet). Which one the vendors give is undocumented: the default
    # keeps the simulator as it was, the alternative is the one a client accepting a `done` on its
    # first poll fails under. Kept with keep_previous_answer, read back with take_previous_answer.
    # GET .../servers/{id}/install after POST .../servers/{id}/install.
    "dedibox.install_read_after_post": ("current", "previous_once"),
    # GET /baremetal/v1/.../servers/{id} after POST .../servers/{id}/install.
    "scaleway_em.install_read_after_post": ("current", "previous_once"),
    # GET /apple-silicon/v1alpha1/.../servers/{id} after POST .../servers/{id}/reinstall.
    "applesilicon.reinstall_read_after_post": ("current", "previous_once"),
}
# The store kind the *_read_after_post behaviours keep their answers in (one per behaviour and server;
# a reseed wipes them with the rest of the state).
PREVIOUS_ANSWERS = "previous_answer"


class FaultSpecError(ValueError):
    pass


@dataclass
class Rule:
    id: int
    vendor: str | None
    route: str | None  # glob over the request path, e.g. /ovh/1.0/dedicated/server/*/reinstall
    method: str | None
    error_rate: float
    status: int
    retry_after: int | None
    latency_ms: int
    seed: int | None
    answer: str = "before"  # before | lost
    drop: bool = False
    count: int | None = None  # fires at most this many times; None: no bound
    fired: int = 0
    rng: random.Random = field(repr=False, default_factory=random.Random)

    def matches(self, vendor: str, method: str, path: str) -> bool:
        if self.vendor is not None and self.vendor != vendor:
            return False
        if self.method is not None and self.method != method:
            return False
        return self.route is None or fnmatch.fnmatchcase(path, self.route)

    def spent(self) -> bool:
        return self.count is not None and self.fired >= self.count

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "vendor": self.vendor,
            "route": self.route,
            "method": self.method,
            "error_rate": self.error_rate,
            "status": self.status,
            "retry_after": self.retry_after,
            "latency_ms": self.latency_ms,
            "seed": self.seed,
            "answer": self.answer,
            "drop": self.drop,
            "count": self.count,
            "fired": self.fired,
        }


@dataclass
class Decision:
    latency_s: float = 0.0
    status: int | None = None
    retry_after: int | None = None
    lost: bool = False  # run the handler, then answer `status` (or drop) instead of its answer
    drop: bool = False  # close the connection without an answer

    @property
    def fails(self) -> bool:
        return self.status is not None or self.drop


_KNOWN = {
    "vendor",
    "route",
    "method",
    "error_rate",
    "status",
    "retry_after",
    "latency_ms",
    "task_failure",
    "task_read_fault",
    "seed",
    "answer",
    "drop",
    "count",
}


def _positive_int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise FaultSpecError(f"{what}: must be an integer >= 1")
    return value


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._task_failures: dict[str, list[str]] = {}  # task kind -> failure statuses, next first
        self._task_read_faults: dict[str, list[int]] = {}  # task kind -> statuses of the next reads
        self._next_id = 1

    def add(self, spec: Any) -> dict[str, Any]:
        if not isinstance(spec, dict):
            raise FaultSpecError("body must be a JSON object")
        unknown = sorted(set(spec) - _KNOWN)
        if unknown:
            raise FaultSpecError(f"unknown field(s) {unknown}; known: {sorted(_KNOWN)}")
        vendor = spec.get("vendor")
        if vendor is not None and vendor not in VENDORS:
            raise FaultSpecError(f"vendor: '{vendor}' is not one of {list(VENDORS)}")
        route, method = spec.get("route"), spec.get("method")
        if route is not None and (not isinstance(route, str) or not route.startswith("/")):
            raise FaultSpecError("route: must be a path glob starting with '/'")
        if method is not None and method not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            raise FaultSpecError(f"method: '{method}' is not an HTTP method")
        error_rate = spec.get("error_rate", 0.0)
        if not isinstance(error_rate, int | float) or not 0 <= error_rate <= 1:
            raise FaultSpecError("error_rate: must be a number between 0 and 1")
        status = spec.get("status", 500)
        if not isinstance(status, int) or not 400 <= status <= 599:
            raise FaultSpecError("status: must be an HTTP error status (400-599)")
        retry_after = spec.get("retry_after")
        if retry_after is not None and (not isinstance(retry_after, int) or retry_after < 0):
            raise FaultSpecError("retry_after: must be a non-negative integer (seconds)")
        latency_ms = spec.get("latency_ms", 0)
        if not isinstance(latency_ms, int) or not 0 <= latency_ms <= 60_000:
            raise FaultSpecError("latency_ms: must be an integer between 0 and 60000")
        seed = spec.get("seed")
        if seed is not None and not isinstance(seed, int):
            raise FaultSpecError("seed: must be an integer")
        answer = spec.get("answer", "before")
        if answer not in ("before", "lost"):
            raise FaultSpecError(
                "answer: must be 'before' (the request is not carried out) or 'lost' "
                "(it is carried out, then its answer is lost)"
            )
        drop = spec.get("drop", False)
        if not isinstance(drop, bool):
            raise FaultSpecError("drop: must be true or false")
        count = None if spec.get("count") is None else _positive_int(spec["count"], "count")
        task_failure = spec.get("task_failure")
        if task_failure is not None:
            task_failure = self._check_task_failure(task_failure)
        task_read_fault = spec.get("task_read_fault")
        if task_read_fault is not None:
            task_read_fault = self._check_task_read_fault(task_read_fault)
        with self._lock:
            result: dict[str, Any] = {}
            if task_failure is not None:
                kind, n, failure = task_failure
                self._task_failures.setdefault(kind, []).extend([failure] * n)
                result["task_failures"] = self._task_failures_public()
            if task_read_fault is not None:
                kind, n, read_status = task_read_fault
                self._task_read_faults.setdefault(kind, []).extend([read_status] * n)
                result["task_read_faults"] = self._task_read_faults_public()
            if error_rate > 0 or latency_ms > 0:
                rule = Rule(
                    self._next_id,
                    vendor,
                    route,
                    method,
                    float(error_rate),
                    status,
                    retry_after,
                    latency_ms,
                    seed,
                    answer=answer,
                    drop=drop,
                    count=count,
                    rng=random.Random(seed),
                )
                self._next_id += 1
                self._rules.append(rule)
                result["rule"] = rule.public()
            if not result:
                raise FaultSpecError(
                    "nothing to inject: set error_rate, latency_ms, task_failure or task_read_fault"
                )
            return result

    @staticmethod
    def _check_task_failure(spec: Any) -> tuple[str, int, str]:
        if not isinstance(spec, dict) or set(spec) - {"kind", "count", "status"}:
            raise FaultSpecError('task_failure: must be {"kind": <task kind>, "count": <n >= 1>, "status"?}')
        kind = spec.get("kind")
        if kind not in TASK_FAILURE_STATUSES:
            raise FaultSpecError(f"task_failure.kind: {kind!r} is not one of {sorted(TASK_FAILURE_STATUSES)}")
        count = _positive_int(spec.get("count"), "task_failure.count")
        statuses = TASK_FAILURE_STATUSES[kind]
        status = spec.get("status", statuses[0])
        if status not in statuses:
            raise FaultSpecError(f"task_failure.status: {status!r} is not one of {list(statuses)} for {kind}")
        return kind, count, status

    @staticmethod
    def _check_task_read_fault(spec: Any) -> tuple[str, int, int]:
        if not isinstance(spec, dict) or set(spec) - {"kind", "count", "status"}:
            raise FaultSpecError(
                'task_read_fault: must be {"kind": <task kind>, "count": <n >= 1>, "status"}'
            )
        kind = spec.get("kind")
        if kind not in TASK_READ_FAULT_KINDS:
            raise FaultSpecError(
                f"task_read_fault.kind: {kind!r} is not one of {list(TASK_READ_FAULT_KINDS)}"
            )
        count = _positive_int(spec.get("count"), "task_read_fault.count")
        status = spec.get("status", 404)
        if status not in (404, 500):
            raise FaultSpecError("task_read_fault.status: must be 404 or 500")
        return kind, count, status

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
            self._task_failures.clear()
            self._task_read_faults.clear()

    def _task_failures_public(self) -> dict[str, int]:
        return {kind: len(queue) for kind, queue in self._task_failures.items() if queue}

    def _task_read_faults_public(self) -> dict[str, int]:
        return {kind: len(queue) for kind, queue in self._task_read_faults.items() if queue}

    def describe(self) -> dict[str, Any]:
        with self._lock:
            return {
                "rules": [r.public() for r in self._rules],
                "task_failures": self._task_failures_public(),
                "task_read_faults": self._task_read_faults_public(),
            }

    def decide(self, vendor: str, method: str, path: str) -> Decision:
        decision = Decision()
        with self._lock:
            for rule in self._rules:
                if not rule.matches(vendor, method, path):
                    continue
                decision.latency_s += rule.latency_ms / 1000
                if decision.fails or rule.error_rate <= 0 or rule.spent():
                    continue
                if rule.rng.random() < rule.error_rate:
                    rule.fired += 1
                    decision.status = None if rule.drop else rule.status
                    decision.retry_after = rule.retry_after
                    decision.lost = rule.answer == "lost"
                    decision.drop = rule.drop
        return decision

    def take_task_failure(self, kind: str) -> str | None:
        """The failure status the task being created now must end in, or None (consumes one)."""
        with self._lock:
            queue = self._task_failures.get(kind)
            return queue.pop(0) if queue else None

    def take_task_read_fault(self, kind: str) -> int | None:
        """The status a read of an in-flight task of `kind` must answer now, or None (consumes one)."""
        with self._lock:
            queue = self._task_read_faults.get(kind)
            return queue.pop(0) if queue else None


class Behaviour:
    """The switchable vendor behaviours (BEHAVIOURS), each at its default until set."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self._lock = threading.Lock()
        self._defaults = {name: values[0] for name, values in BEHAVIOURS.items()}
        self._values = dict(self._defaults)
        if settings:
            self.set(settings)

    def set(self, settings: Any) -> dict[str, str]:
        if not isinstance(settings, dict):
            raise FaultSpecError("behaviour: must be a JSON object of name -> value")
        for name, value in settings.items():
            if name not in BEHAVIOURS:
                raise FaultSpecError(f"behaviour {name!r} is unknown; known: {sorted(BEHAVIOURS)}")
            if value not in BEHAVIOURS[name]:
                raise FaultSpecError(f"behaviour {name}: {value!r} is not one of {list(BEHAVIOURS[name])}")
        with self._lock:
            self._values.update(settings)
            return dict(self._values)

    def reset(self, settings: dict[str, str] | None = None) -> None:
        with self._lock:
            self._values = dict(self._defaults)
        if settings:
            self.set(settings)

    def get(self, name: str) -> str:
        with self._lock:
            return self._values[name]

    def describe(self) -> dict[str, Any]:
        with self._lock:
            return {
                name: {"value": self._values[name], "values": list(values)}
                for name, values in BEHAVIOURS.items()
            }


# --- the *_read_after_post behaviours ----------------------------------------------------------------


def keep_previous_answer(
    store: Store, behaviour: Behaviour, name: str, key: str | int, status: int, body: Any
) -> None:
    """Under behaviour `name` = previous_once: keep what the server's read answered just before a write
    the vendor has just accepted (`status`, `body`), for the first read after it. Call it from the
    write's handler once nothing can refuse the write any more (a refused one keeps nothing: its
    handler's changes are rolled back). A second accepted write before that read replaces it."""
    if behaviour.get(name) == "previous_once":
        store.put(PREVIOUS_ANSWERS, f"{name}:{key}", {"status": status, "body": body})


def take_previous_answer(store: Store, behaviour: Behaviour, name: str, key: str | int) -> Any:
    """The kept answer of the first read after an accepted write (keep_previous_answer), once: a dict
    {"status", "body"}, or None (no write since the last read, or the behaviour was set back to
    current since: then the read answers the current state and the kept answer is dropped)."""
    kept = store.get(PREVIOUS_ANSWERS, f"{name}:{key}")
    if kept is None:
        return None
    store.delete(PREVIOUS_ANSWERS, f"{name}:{key}")
    return kept if behaviour.get(name) == "previous_once" else None
