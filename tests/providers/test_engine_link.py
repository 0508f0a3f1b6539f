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
        # The engine's first calls come as a burst (a destroy's deletes): the call that widens the pool
        # is one of them, the others queue behind the old ceiling of four.
        queued, widened, gate = threading.Event(), threading.Event(), threading.Event()

        def widen_once_the_burst_queued() -> int | None:
            queued.wait(30)
            ceiling = engine_link.widen_workers(16)
            widened.set()
            gate.wait(30)
            return ceiling

        first = pool.submit(widen_once_the_burst_queued)
        burst = [pool.submit(gate.wait, 30) for _ in range(15)]
        queued.set()
        widened.wait(30)
        gate.set()  # the burst ends after the widening: the pool's count of idle threads runs ahead
        assert first.result() == 16 and all(f.result() for f in burst)
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
