"""engine_link.widen_workers: the provider process serves more than the SDK's four calls at once."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pulumi.dynamic

from providers.machine import engine_link


def test_the_sdk_still_serves_dynamic_providers_from_a_pool_of_four() -> None:
    # What widen_workers lifts. A new SDK that builds its server another way must be looked at again.
    main = (Path(pulumi.dynamic.__file__).parent / "__main__.py").read_text()
    assert "grpc.server(\n        futures.ThreadPoolExecutor(max_workers=4)," in main


def test_a_call_widens_the_pool_it_runs_in_and_then_calls_run_together() -> None:
    calls = 12
    together = threading.Barrier(calls, timeout=30)  # a deadlock guard, not a timing assertion
    with ThreadPoolExecutor(max_workers=4) as pool:
        # A burst queued behind the ceiling first (as the engine's first deletes of a destroy are): the
        # pool's count of idle threads then runs ahead of its threads.
        gate = threading.Event()
        burst = [pool.submit(gate.wait, 30) for _ in range(16)]
        gate.set()
        assert all(f.result() for f in burst)
        assert pool.submit(engine_link.widen_workers, 16).result() == 16
        # Twelve calls that each wait for all the others: they only finish if all twelve run at once.
        results = [pool.submit(together.wait) for _ in range(calls)]
        assert sorted(r.result() for r in results) == list(range(calls))
        # Never lowered.
        assert pool.submit(engine_link.widen_workers, 2).result() == 16


def test_outside_a_pool_nothing_is_widened() -> None:
    assert engine_link.widen_workers(16) is None
    # Not started by the engine (no address in argv): serve_wide leaves any pool alone.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(engine_link.serve_wide).result()
        assert pool._max_workers == 1
