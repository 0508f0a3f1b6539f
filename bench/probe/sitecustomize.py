"""Loaded by every Python process of a benchmarked `pulumi up` (the bench puts this folder on
PYTHONPATH): times each machine provider call, as the provider process itself sees it, into the JSON
lines file `BENCH_TIMINGS` names. The product carries no timing hook, so any revision of it (the one
before a change, too) is measured the same way. Nothing happens without BENCH_TIMINGS.

A line: {"step": "claim.create", "slot": "kura-dedibox-0", "start": <epoch s>, "end": <epoch s>, "ok": true}
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

TARGET = "providers.machine.provider"
STEPS = {
    ("ClaimProvider", "create"): "claim.create",
    ("ClaimProvider", "delete"): "claim.delete",
    ("MachineProvider", "create"): "machine.create",
    ("MachineProvider", "delete"): "machine.delete",
}
_write_lock = threading.Lock()


def _timed(path: str, step: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Any, *args: Any) -> Any:
        props = args[-1] if args and isinstance(args[-1], dict) else {}
        started, ok = time.time(), False
        try:
            result = method(self, *args)
            ok = True
            return result
        finally:
            line = {
                "step": step,
                "slot": str(props.get("resource_name")),
                "start": started,
                "end": time.time(),
            }
            line["ok"] = ok
            with _write_lock, open(path, "a") as out:
                out.write(json.dumps(line) + "\n")

    return call


def _patch(module: ModuleType, path: str) -> None:
    for (cls, name), step in STEPS.items():
        klass = getattr(module, cls)
        setattr(klass, name, _timed(path, step, getattr(klass, name)))


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, path: str) -> None:
        self.path = path

    def find_spec(
        self, fullname: str, target_path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, target_path)
        if spec is None or spec.loader is None:
            return None
        loader, path = spec.loader, self.path
        exec_module = loader.exec_module

        def patched(module: ModuleType) -> None:
            exec_module(module)
            _patch(module, path)

        loader.exec_module = patched  # type: ignore[method-assign]
        return spec


if os.environ.get("BENCH_TIMINGS"):
    sys.meta_path.insert(0, _Finder(os.environ["BENCH_TIMINGS"]))
