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

from providers.machine import MachineProvider
from tests.providers.test_machine_support import machine_props, start_sim

ENGINE_WORKERS = 4  # grpc.server(futures.ThreadPoolExecutor(max_workers=4)) in pulumi.dynamic


def _adopt(provider: MachineProvider, fleet: str, count: int, workers: int) -> tuple[float, list[Any]]:
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        outs = list(pool.map(lambda i: provider.create(machine_props(fleet, i)).outs, range(count)))
    return time.perf_counter() - start, outs


def _release(provider: MachineProvider, outs: list[Any]) -> None:
    with ThreadPoolExecutor(max_workers=ENGINE_WORKERS) as pool:
        list(pool.map(lambda o: provider.delete(f"{o['vendor']}:{o['box_id']}", o), outs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--machines", type=int, default=3, help="dev Dedibox boxes to adopt (at most 3)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-adoption-") as tmp:
        sim = start_sim(Path(tmp))
        try:
            provider = sim.provider()
            serial, parallel = [], []
            for _ in range(args.rounds):
                seconds, outs = _adopt(provider, "kura-dedibox", args.machines, workers=1)
                serial.append(seconds)
                _release(provider, outs)
                seconds, outs = _adopt(provider, "kura-dedibox", args.machines, workers=ENGINE_WORKERS)
                parallel.append(seconds)
                _release(provider, outs)
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
