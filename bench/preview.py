"""Does the program's cost grow with the stack, and only linearly? Stacks of 1x, 10x, 30x (and 100x)
a real stack's fleets and regions (bench/scale.py), measured side by side in one run:

    python -m bench.preview evaluate [--stack production] [--times 1,10,100]
        the program alone under Pulumi's mocks, each size in a new process: the process's wall time,
        the program's own evaluation, and the resources it registers
    python -m bench.preview engine [--times 1,10,30] [--backend file|s3|both]
        `pulumi preview` of each size through the real engine on a fresh stack of a DIY backend
        (the file backend, and S3 on a local moto server), time per resource and the fitted exponent
        of time against resources; then a no-change `pulumi preview` of the dev-shaped stack against
        the same engine previewing an empty program

Figures are wall-clock on a shared machine: read the ratios and the exponent, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PROJECT = "tuist-infra"


# --- the program under mocks ----------------------------------------------------------------------


def _mock_config(raw: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The engine's view of a stack's config (JSON strings) with stand-ins for its secrets."""
    from config.loader import load_stack_config, required_secret_keys

    config = {f"{PROJECT}:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
    secret_keys = [f"{PROJECT}:{key}" for key in required_secret_keys(load_stack_config(raw))]
    config.update({key: f"stand-in-{key.split(':')[1]}" for key in secret_keys})
    return config, secret_keys


def _evaluate_here(stack: str, times: int) -> dict[str, Any]:
    """Run __main__.py under mocks in this process; what it cost and registered."""
    import pulumi

    from bench.scale import grow
    from config.loader import read_stack_file
    from tests.test_program import ProgramMocks

    raw = grow(read_stack_file(REPO / f"Pulumi.{stack}.yaml"), times)
    config, secret_keys = _mock_config(raw)
    pulumi.runtime.set_all_config(config, secret_keys)

    class Counting(ProgramMocks):
        count = 0

        def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
            Counting.count += 1
            return super().new_resource(args)

    pulumi.runtime.set_mocks(Counting(), project=PROJECT, stack=stack, preview=True)
    start, cpu = time.perf_counter(), time.process_time()

    def program() -> None:
        runpy.run_path(str(REPO / "__main__.py"), run_name="__main__")

    pulumi.runtime.test(program)()  # type: ignore[no-untyped-call]
    return {
        "evaluate_s": time.perf_counter() - start,
        "evaluate_cpu_s": time.process_time() - cpu,
        "process_cpu_s": time.process_time(),
        "resources": Counting.count,
    }


def _evaluate(stack: str, times: int) -> dict[str, Any]:
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "bench.preview", "_evaluate", "--stack", stack, "--times", str(times)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - start
    return result


def evaluate(args: argparse.Namespace) -> None:
    from bench.scale import grow, machines
    from config.loader import read_stack_file

    raw = read_stack_file(REPO / f"Pulumi.{args.stack}.yaml")
    print(f"{args.stack} under mocks, one new process per size ({os.cpu_count()} cores, load {_load()})")
    print("wall and CPU seconds: the whole process (imports included), and the program's evaluation")
    print(
        f"{'size':>5} {'machines':>9} {'resources':>10} {'process':>9} {'cpu':>7}"
        f" {'program':>9} {'cpu':>7} {'cpu ms/resource':>16}"
    )
    for times in args.times:
        r = _evaluate(args.stack, times)
        per = 1000 * r["evaluate_cpu_s"] / r["resources"]
        print(
            f"{'x' + str(times):>5} {machines(grow(raw, times)):>9} {r['resources']:>10}"
            f" {r['process_s']:>8.2f}s {r['process_cpu_s']:>6.2f}s"
            f" {r['evaluate_s']:>8.2f}s {r['evaluate_cpu_s']:>6.2f}s {per:>16.2f}"
        )


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("evaluate", help="the program alone under mocks")
    ev.add_argument("--stack", default="production")
    ev.add_argument("--times", type=_sizes, default=[1, 10, 100])
    ev.set_defaults(func=evaluate)
    child = sub.add_parser("_evaluate")
    child.add_argument("--stack", default="production")
    child.add_argument("--times", type=int, default=1)
    child.set_defaults(func=lambda a: print(json.dumps(_evaluate_here(a.stack, a.times))))
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
