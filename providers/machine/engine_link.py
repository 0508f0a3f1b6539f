"""The provider process's link to the Pulumi engine that started it: progress lines and liveness.

The engine starts a provider plugin with its own gRPC address as the first argument (the Python
dynamic provider, `python -m pulumi.dynamic <engine address>`, ignores it). Through it:

- `progress(message, urn)` sends the line as an ephemeral info message attached to the resource, so
  the CLI shows it on the resource's row while the step runs and keeps it out of the Diagnostics
  summary. (`pulumi.log` in a dynamic provider has no engine connection and prints `info:` lines to
  stderr, which the engine repeats under Diagnostics: nine machines, ninety lines.)
- `widen_workers()` lifts the ceiling of the thread pool that serves the engine's calls (below).
- `watch_engine()` notices when the engine goes away (its CLI killed mid-`up`): the provider closes
  its SSH sessions, which hangs up the scripts on the boxes, and exits at once rather than finishing
  a join or an install nobody will record.

Outside the engine (tests calling the provider directly) there is no address: lines go to the
Python log only and no watchdog runs.
"""

from __future__ import annotations

import gc
import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from providers.ssh.runner import close_all_sessions

log = logging.getLogger("providers.machine")
# Lines reach the engine through Log below; without a handler of its own, Python's last-resort handler
# would print warnings to stderr too, and the engine repeats a plugin's stderr under Diagnostics.
log.addHandler(logging.NullHandler())

_ADDRESS = re.compile(r"^(?P<host>127\.0\.0\.1|localhost|\[::1\]|[0-9.]+):(?P<port>[0-9]{1,5})$")
EXIT_ENGINE_GONE = 75  # EX_TEMPFAIL: nothing failed here, the caller went away
# pulumi.dynamic (SDK 3.260, pulumi/dynamic/__main__.py) serves every call of a provider process from
# grpc.server(futures.ThreadPoolExecutor(max_workers=4)), with no setting to change it. A claim or a
# join holds its worker for the whole call (seconds of vendor calls, minutes of SSH), so a fleet
# adopted in waves of four whatever the engine's --parallel. The provider raises that ceiling to
# this once it runs in the pool (tests/providers/test_engine_link.py pins the SDK's pool).
PROVIDER_WORKERS = 64

_lock = threading.Lock()
_stub: Any = None
_watching = False
_widened = False


def engine_address(argv: list[str] | None = None) -> str | None:
    """The engine's gRPC address when this process is a provider plugin the engine started."""
    args = sys.argv if argv is None else argv
    if len(args) < 2 or not args[0].replace("\\", "/").endswith("pulumi/dynamic/__main__.py"):
        return None
    return args[1] if _ADDRESS.match(args[1]) else None


def _engine_stub() -> Any:
    global _stub
    address = engine_address()
    if address is None:
        return None
    with _lock:
        if _stub is None:
            import grpc
            from pulumi.runtime.proto import engine_pb2_grpc

            _stub = engine_pb2_grpc.EngineStub(grpc.insecure_channel(address))
        return _stub


def progress(message: str, urn: str | None, *, ephemeral: bool = True, warning: bool = False) -> None:
    """A progress line: to the Python log, and to the engine attached to `urn` when there is one."""
    if warning:
        log.warning(message)
    else:
        log.info(message)
    stub = _engine_stub()
    if stub is None or not urn:
        return
    from pulumi.runtime.proto import engine_pb2

    try:
        stub.Log(
            engine_pb2.LogRequest(
                severity=engine_pb2.WARNING if warning else engine_pb2.INFO,
                message=message,
                urn=urn,
                ephemeral=ephemeral,
            ),
            timeout=5,
        )
    except Exception as error:  # a lost progress line must never fail a step
        log.debug("engine log failed: %s", type(error).__name__)


def widen_workers(workers: int = PROVIDER_WORKERS) -> int | None:
    """Raise the ceiling of the thread pool running the calling thread to `workers` (never lower it).
    Returns the pool's ceiling, or None when the caller runs in no ThreadPoolExecutor.

    The pool is the one whose threads include this one; ThreadPoolExecutor starts a thread per
    submitted call while it has fewer than `_max_workers` and `_idle_semaphore` says no thread is idle
    (CPython 3.9 to 3.13): the ceiling is raised and the threads started. Claim arbitration is unchanged:
    within the process the claim record and the candidate pools hand each box to one claim; between
    processes the record and the vendor marker's read-back do."""
    me = threading.current_thread()
    for pool in gc.get_objects():
        if isinstance(pool, ThreadPoolExecutor) and me in pool._threads:
            with _lock:
                pool._max_workers = max(pool._max_workers, workers)
                # A submit starts no thread while `_idle_semaphore` has a count, and it counts
                # finished calls, not idle threads: after the calls that queued behind the old ceiling
                # (a destroy's first burst of deletes) it stays high and the pool would go on running
                # four at a time. So the threads are started now, up to the new ceiling, each waiting
                # on the pool's queue for a call.
                while len(pool._threads) < pool._max_workers:
                    pool._idle_semaphore = threading.Semaphore(0)
                    pool._adjust_thread_count()
                return int(pool._max_workers)
    return None


def serve_wide() -> None:
    """In a provider process the engine started: widen the pool that serves its calls (once is enough;
    it is cheap to ask again)."""
    global _widened
    if _widened or engine_address() is None:
        return
    ceiling = widen_workers()
    _widened = ceiling is not None
    log.debug("provider call pool: at most %s calls at once", ceiling)


def watch_engine(
    *,
    interval: float = 1.0,
    misses: int = 2,
    on_gone: Callable[[], None] | None = None,
    address: str | None = None,
) -> bool:
    """Start (once per process) a daemon thread that probes the engine's address; after `misses`
    refused probes in a row it closes every SSH session and exits the process. False when there is
    no engine to watch."""
    global _watching
    target = address or engine_address()
    if target is None:
        return False
    with _lock:
        if _watching:
            return True
        _watching = True
    match = _ADDRESS.match(target)
    assert match is not None
    host, port = match["host"].strip("[]"), int(match["port"])

    def gone() -> None:
        log.warning("the Pulumi engine at %s went away: closing SSH sessions and exiting", target)
        close_all_sessions()
        if on_gone is not None:
            on_gone()
        else:
            sys.stderr.flush()
            os._exit(EXIT_ENGINE_GONE)

    def loop() -> None:
        missed = 0
        while True:
            time.sleep(interval)
            try:
                with socket.create_connection((host, port), timeout=interval):
                    missed = 0
            except OSError:
                missed += 1
                if missed >= misses:
                    gone()
                    return

    threading.Thread(target=loop, name="engine-watchdog", daemon=True).start()
    return True
