"""How much parallelism adoption really gets: N machines adopted one after another vs at once.

The engine drives a dynamic provider through one process whose gRPC server has four worker threads
(DESIGN.md), and claim selection is serialized inside it, so the speed-up of parallel adoption is
bounded by min(N, 4) and by how much of a create is the serialized claim. This prints that ratio,
measured against vendorsim with real SSH boxes (claim + real self-join over SSH), so a change that
widens the claim lock or serializes the join shows up as a ratio collapsing towards 1.

    .venv/bin/python -m bench.adoption [--machines 3] [--rounds 3]

Figures are wall-clock and machine-dependent; read the ratio, not the seconds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from providers.machine import record
from tests.providers.test_machine_support import Sim, resource_id, start_sim

ENGINE_WORKERS = 4  # grpc.server(futures.ThreadPoolExecutor(max_workers=4)) in pulumi.dynamic


def _adopt(sim: Sim, fleet: str, count: int, workers: int) -> tuple[float, list[Any]]:
    """Each slot's claim then its machine, `workers` slots at a time (the engine runs a slot's machine
    as soon as its claim is done)."""
    claims, machines = sim.claims(), sim.machines()
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        slots = list(pool.map(lambda i: sim.adopt(fleet, i, claims=claims, machines=machines), range(count)))
    return time.perf_counter() - start, slots


def _release(sim: Sim, slots: list[Any]) -> None:
    claims = sim.claims()
    with ThreadPoolExecutor(max_workers=ENGINE_WORKERS) as pool:
        list(pool.map(lambda slot: claims.delete(resource_id(slot[0]), slot[0]), slots))
    record._PROCESS_STORE.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--machines", type=int, default=3, help="dev Dedibox boxes to adopt (at most 3)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-adoption-") as tmp:
        sim = start_sim(Path(tmp))
        try:
            serial, parallel = [], []
            for _ in range(args.rounds):
                seconds, slots = _adopt(sim, "kura-dedibox", args.machines, workers=1)
                serial.append(seconds)
                _release(sim, slots)
                seconds, slots = _adopt(sim, "kura-dedibox", args.machines, workers=ENGINE_WORKERS)
                parallel.append(seconds)
                _release(sim, slots)
        finally:
            sim.stop()

    s, p = statistics.median(serial), statistics.median(parallel)
    ideal = min(args.machines, ENGINE_WORKERS)
    print(f"adopting {args.machines} Dedibox machines (claim + SSH self-join), median of {args.rounds}")
    print(f"  one after another : {s:6.2f} s")
    print(f"  {ENGINE_WORKERS} engine workers  : {p:6.2f} s")
    print(f"  speed-up          : {s / p:5.2f}x (ideal {ideal}x; 1.0x would mean adoption is serialized)")


if __name__ == "__main__":
    main()
