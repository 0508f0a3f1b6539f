"""Failure injection: error rates, latency and failing tasks, set through /_admin/faults.

Faults live in memory (a restart clears them); each rule has its own seeded RNG so a test
that sets `seed` sees the same pass/fail sequence every run.
"""

from __future__ import annotations

import fnmatch
import random
import threading
from dataclasses import dataclass, field
from typing import Any

VENDORS = ("ovh", "dedibox", "robot", "scaleway_em", "applesilicon")


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
    rng: random.Random = field(repr=False, default_factory=random.Random)

    def matches(self, vendor: str, method: str, path: str) -> bool:
        if self.vendor is not None and self.vendor != vendor:
            return False
        if self.method is not None and self.method != method:
            return False
        return self.route is None or fnmatch.fnmatchcase(path, self.route)

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
        }


@dataclass
class Decision:
    latency_s: float = 0.0
    status: int | None = None
    retry_after: int | None = None


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._task_failures: dict[str, int] = {}  # task kind -> how many of the next ones fail
        self._next_id = 1

    def add(self, spec: Any) -> dict[str, Any]:
        if not isinstance(spec, dict):
            raise FaultSpecError("body must be a JSON object")
        known = {
            "vendor",
            "route",
            "method",
            "error_rate",
            "status",
            "retry_after",
            "latency_ms",
            "task_failure",
            "seed",
        }
        unknown = sorted(set(spec) - known)
        if unknown:
            raise FaultSpecError(f"unknown field(s) {unknown}; known: {sorted(known)}")
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
        task_failure = spec.get("task_failure")
        if task_failure is not None and (
            not isinstance(task_failure, dict)
            or not isinstance(task_failure.get("kind"), str)
            or not isinstance(task_failure.get("count"), int)
            or task_failure["count"] < 1
        ):
            raise FaultSpecError('task_failure: must be {"kind": <task kind>, "count": <n >= 1>}')
        with self._lock:
            result: dict[str, Any] = {}
            if task_failure is not None:
                kind = task_failure["kind"]
                self._task_failures[kind] = self._task_failures.get(kind, 0) + task_failure["count"]
                result["task_failures"] = dict(self._task_failures)
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
                    random.Random(seed),
                )
                self._next_id += 1
                self._rules.append(rule)
                result["rule"] = rule.public()
            if not result:
                raise FaultSpecError("nothing to inject: set error_rate, latency_ms or task_failure")
            return result

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
            self._task_failures.clear()

    def describe(self) -> dict[str, Any]:
        with self._lock:
            return {"rules": [r.public() for r in self._rules], "task_failures": dict(self._task_failures)}

    def decide(self, vendor: str, method: str, path: str) -> Decision:
        decision = Decision()
        with self._lock:
            for rule in self._rules:
                if not rule.matches(vendor, method, path):
                    continue
                decision.latency_s += rule.latency_ms / 1000
                if decision.status is None and rule.error_rate > 0 and rule.rng.random() < rule.error_rate:
                    decision.status = rule.status
                    decision.retry_after = rule.retry_after
        return decision

    def take_task_failure(self, kind: str) -> bool:
        """True if the task being created now must fail (consumes one)."""
        with self._lock:
            left = self._task_failures.get(kind, 0)
            if left <= 0:
                return False
            self._task_failures[kind] = left - 1
            return True
