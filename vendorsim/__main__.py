"""python -m vendorsim --inventory FILE [--port 8710] [--state DIR] [--task-seconds 2] [--apt-seconds 0]
[--box-cpus N] [--reset] [--no-ssh]"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from werkzeug.serving import make_server

from vendorsim import cpu_budget
from vendorsim.app import App
from vendorsim.core import Sim
from vendorsim.farm import open_farm
from vendorsim.inventory import InventoryError, load_inventory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vendorsim", description=__doc__)
    parser.add_argument("--inventory", type=Path, required=True, help="inventory YAML (seeds the state)")
    parser.add_argument("--port", type=int, default=8710, help="port on 127.0.0.1 (0 picks a free one)")
    parser.add_argument(
        "--state", type=Path, default=Path("build/vendorsim"), help="state directory (SQLite)"
    )
    parser.add_argument(
        "--task-seconds",
        type=float,
        default=2.0,
        help="wall time an async vendor task takes from creation to done",
    )
    parser.add_argument(
        "--apt-seconds",
        type=float,
        default=0.0,
        help="wall time each `apt-get install` takes on a box (the slow step of a real self-join)",
    )
    parser.add_argument(
        "--box-cpus",
        type=float,
        help="CPUs all the boxes may use together (a cgroup quota; the adoption benchmark's, not the"
        " dev stack's): a real box has CPUs of its own, these share this machine's with the engine",
    )
    parser.add_argument("--reset", action="store_true", help="reseed the state from the inventory")
    parser.add_argument("--no-ssh", action="store_true", help="do not start an SSH server per box")
    args = parser.parse_args(argv)
    if args.task_seconds < 0:
        parser.error("--task-seconds must be >= 0")
    if args.apt_seconds < 0:
        parser.error("--apt-seconds must be >= 0")

    try:
        inventory = load_inventory(args.inventory)
    except InventoryError as e:
        print(f"vendorsim: {e}", file=sys.stderr)
        return 2
    budget = None
    if args.box_cpus is not None:
        try:
            budget = cpu_budget.create(args.box_cpus)
        except cpu_budget.BudgetError as e:
            print(f"vendorsim: --box-cpus: {e}", file=sys.stderr)
            return 2
    farm = open_farm(args.state, ssh=not args.no_ssh, cpu_budget=budget)
    # Read by every box session (sandbox/login.sh), so it holds for boxes started before a restart too.
    timing = args.state / "boxes" / "timing.env"
    timing.parent.mkdir(parents=True, exist_ok=True)
    timing.write_text(f"SIM_APT_SECONDS={args.apt_seconds:g}\n")
    sim = Sim(inventory, args.state, task_seconds=args.task_seconds, farm=farm, reset=args.reset)
    try:
        server = make_server("127.0.0.1", args.port, App(sim), threaded=True)
    except OSError as e:
        print(f"vendorsim: cannot listen on 127.0.0.1:{args.port}: {e.strerror}", file=sys.stderr)
        farm.stop_all()
        if budget is not None:
            cpu_budget.remove(budget)
        return 1

    def stop(signum: int, frame: FrameType | None) -> None:
        # shutdown() blocks until serve_forever returns, so it must run on another thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        with sim.lock:
            sim.start_boxes()
        print(f"vendorsim listening on http://127.0.0.1:{server.port}", flush=True)
        server.serve_forever()
    finally:
        server.server_close()
        farm.stop_all()
        if budget is not None:
            cpu_budget.remove(budget)
        with sim.lock:
            sim.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
