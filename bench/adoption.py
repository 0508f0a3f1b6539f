"""Adoption at fleet scale, through the real engine: `pulumi up` then `pulumi destroy` of a stack with one
Dedibox (or OVH) fleet of N boxes, against vendorsim with a latency model, for each N.

    python -m bench adoption [--sizes 1,4,16] [--with-64] [--vendor dedibox|ovh] [--api-ms 100] [--scale 120]
                             [--task-seconds S] [--apt-seconds S] [--parallel 64] [--project DIR] [--gate]

Run it in the box network's namespace (the boxes answer SSH on 198.18.0.0/15):

    source scripts/env.sh && bash scripts/netns.sh exec -- python -m bench adoption

Per N it prints, for the adoption (`up`) and the release (`destroy`):
- `wall`: the whole CLI command, and `phase`: from the first box's first provider call to the last
  box's last (the engine's own start-up and the program's evaluation left out);
- `critical`: the slowest single box's own time, the sum of its provider calls (claim + join; on
  destroy, leave + release) as the provider process timed them in the same run;
- `ratio` = phase / critical: 1.0 is every box adopted at once; N would be one box after another.
  Goal: <= 1.10 at N = 16 and <= 1.25 at N = 64 with 100 ms per vendor call;
- `calls/box`: the vendor API calls of the phase (vendorsim's /_admin/calls, reads included) divided
  by N, and how many were account listings. Each box must cost O(1): the figure stays flat as N grows.

The latency model, scaled from the reference's real figures by `--scale` (real seconds per benchmark
second, default 120): every vendor call takes `--api-ms` (100); a reinstall (release) takes
`--task-seconds` (30 real minutes / scale = 15 s); each `apt-get install` of the self-join takes
`--apt-seconds` (one real minute / scale = 0.5 s; a real join is 2 to 5 minutes). The account holds the
fleet's N boxes plus the dev inventory's seven boxes at that vendor (other stacks' and environments'
decoys); the other vendors' accounts are empty.

`--gate` checks issue 16.1 and 16.2's goals on the sizes measured and exits 1 if one fails (bench/goals.py).

`--project DIR` benchmarks the program and providers of another checkout (e.g. the revision before a
change) with this checkout's vendorsim and timing probe (bench/probe/sitecustomize.py). The engine runs
with `--parallel` (the CLI's own default is 4 x cores: 8 on a 2-core machine).

Figures are wall-clock and machine-dependent; compare ratios and counts, measured side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.goals import Verdict, gate, goal
from bench.project import copy_project

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "bench" / "probe"
DEV_PASSPHRASE = "tuist-dev-only-passphrase"
VENDORS = ("dedibox", "ovh")
FLEETS = {"dedibox": "kura-dedibox", "ovh": "kura-ovh"}  # the dev stack's fleet at each vendor
MARKERS = {"dedibox": "tuist-kura-dev", "ovh": "tuist-kura-dev-ovh"}
# Real figures (../shared/reference: a self-join of 2-5 minutes, an install of about 30 minutes).
REAL_APT_INSTALL_S = 60.0
REAL_REINSTALL_S = 1800.0


@dataclass(frozen=True)
class Model:
    api_ms: int
    task_seconds: float
    apt_seconds: float
    box_cpus: float


@dataclass(frozen=True)
class Phase:
    """One command's run: its wall time, the provider's phase and each box's own time."""

    wall: float
    phase: float
    critical: float
    calls: int
    listings: int
    boxes: int

    @property
    def ratio(self) -> float:
        return self.phase / self.critical if self.critical else float("nan")


# --- the measured parts (unit-tested in tests/bench/test_adoption.py) ----------------------------------


def phase_times(
    timings: Sequence[dict[str, Any]], first: str, second: str
) -> tuple[float, float, dict[str, float]]:
    """(phase, critical path, each slot's own time) of the provider calls `first` then `second` per slot:
    the phase runs from the earliest start to the latest end; a slot's own time is the sum of its
    calls' durations (a slot whose call failed counts too: its time was spent)."""
    own: dict[str, float] = {}
    starts, ends = [], []
    for line in timings:
        if line["step"] not in (first, second):
            continue
        own[line["slot"]] = own.get(line["slot"], 0.0) + line["end"] - line["start"]
        starts.append(line["start"])
        ends.append(line["end"])
    if not own:
        return 0.0, 0.0, {}
    return max(ends) - min(starts), max(own.values()), own


def is_listing(call: dict[str, Any]) -> bool:
    """A call that lists the account (Dedibox: a page of servers; OVH: the service names), not one box."""
    path = str(call["path"]).split("?", 1)[0].rstrip("/")
    return call["method"] == "GET" and (path.endswith("/servers") or path.endswith("/dedicated/server"))


def count_calls(calls: Sequence[dict[str, Any]], vendor: str) -> tuple[int, int]:
    """(vendor calls, of which account listings) among vendorsim's call log entries."""
    mine = [c for c in calls if c["vendor"] == vendor]
    return len(mine), sum(1 for c in mine if is_listing(c))


def bench_inventory(
    dev: dict[str, Any], *, vendor: str, boxes: int, prefix: str, ssh_port: int, api_ms: int
) -> dict[str, Any]:
    """The dev inventory with only its `vendor` account (its seven boxes: three of the fleet, another
    stack's claimed one, staging and production decoys, an unmarked one) plus `boxes` more of the
    fleet, every box on `prefix`.x:`ssh_port`, and every call to that vendor `api_ms` slower."""
    doc: dict[str, Any] = json.loads(json.dumps(dev))
    for other in ("ovh", "dedibox", "robot", "scaleway_em", "applesilicon"):
        if other != vendor and other in doc:
            doc[other]["servers"] = []
            if "failover_ips" in doc[other]:
                doc[other]["failover_ips"] = []
    servers = doc[vendor]["servers"]
    used = {int(s["ip"].rsplit(".", 1)[1]) for s in servers}
    octets = [o for o in range(100, 255) if o not in used]
    if boxes > len(octets):
        raise SystemExit(f"bench: at most {len(octets)} boxes per run")
    marker = MARKERS[vendor]
    if vendor == "dedibox":
        template = next(s for s in servers if s.get("tags") == [marker])
        for i in range(boxes):
            server_id = 300000 + i
            new = {"id": server_id, "hostname": f"sd-{server_id}", "tags": [marker]}
            servers.append({**template, **new, "ip": f"0.0.0.{octets[i]}"})
    else:
        template = next(s for s in servers if s["display_name"] == f"{marker}-1")
        for i in range(boxes):
            name = f"ns{3000 + i}.ip-203-0-113.net"
            new = {"service_name": name, "service_id": 30000000 + i, "display_name": f"{marker}-{100 + i}"}
            servers.append({**template, **new, "ip": f"0.0.0.{octets[i]}"})
    for server in servers:
        server["ip"] = f"{prefix}.{server['ip'].rsplit('.', 1)[1]}"
        server["ssh_port"] = ssh_port
    doc[vendor]["failover_ips"] = [
        {k: v for k, v in f.items() if k not in ("server_id", "routed_to")}
        for f in doc[vendor]["failover_ips"]
    ]
    doc["faults"] = [{"vendor": vendor, "latency_ms": api_ms}] if api_ms else []
    return doc


def bench_stack(
    dev_stack: dict[str, Any], *, vendor: str, boxes: int, port: int, ssh_port: int
) -> dict[str, Any]:
    """The dev stack file reduced to one fleet of `boxes` at `vendor`: the other fleets parked, no region,
    failover IP or runner pool, manifests rendered to a folder (no cluster: the join runs in full
    against the dev placeholder endpoint, and nothing waits for a Node)."""
    doc: dict[str, Any] = json.loads(json.dumps(dev_stack))
    config = doc["config"]
    cluster = {k: v for k, v in config["tuist-infra:cluster"].items() if k != "api_server"}
    config["tuist-infra:cluster"] = {**cluster, "render_dir": "rendered/bench"}
    for fleet in config["tuist-infra:fleets"]:
        if fleet["name"] == FLEETS[vendor]:
            fleet.update(size=boxes, ssh_port=ssh_port, enabled=True)
        else:
            fleet["enabled"] = False
    config["tuist-infra:failover_ips"] = []
    config["tuist-infra:regions"] = []
    config["tuist-infra:runner_pools"] = []
    text = json.dumps(config).replace("127.0.0.1:8710", f"127.0.0.1:{port}")
    doc["config"] = json.loads(text)
    return doc


# --- running it ---------------------------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Run:
    """One N: a vendorsim of its own, a stack of its own in the copied project."""

    def __init__(
        self, root: Path, project: Path, vendor: str, boxes: int, model: Model, parallel: int
    ) -> None:
        self.root, self.project, self.boxes, self.model, self.parallel = root, project, boxes, model, parallel
        self.vendor = vendor
        self.stack = f"bench-{vendor}-n{boxes}"
        self.port = free_port()
        while (ssh := free_port()) == self.port:
            pass
        self.ssh_port = ssh
        self.timings = root / f"timings-{self.stack}.jsonl"
        self.sim_state = root / f"vendorsim-{self.stack}"
        self.env = {
            **os.environ,
            "PATH": f"{REPO / '.toolchain' / 'bin'}:{REPO / '.venv' / 'bin'}:{os.environ['PATH']}",
            "PULUMI_HOME": str(root / "pulumi-home"),
            "PULUMI_BACKEND_URL": f"file://{root / 'state'}",
            "PULUMI_CONFIG_PASSPHRASE": DEV_PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DIY_BACKEND_NO_LEGACY_WARNING": "true",
            # The probe first, then the benchmarked checkout's own code (before the editable install).
            "PYTHONPATH": f"{PROBE}:{project}",
            "BENCH_TIMINGS": str(self.timings),
        }
        self.sim: subprocess.Popen[bytes] | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> None:
        from tests.providers.test_machine_support import fresh_box_range

        dev = yaml.safe_load((REPO / "vendorsim" / "inventory.dev.yaml").read_text())
        inventory = self.root / f"inventory-{self.stack}.yaml"
        doc = bench_inventory(
            dev,
            vendor=self.vendor,
            boxes=self.boxes,
            prefix=fresh_box_range(),
            ssh_port=self.ssh_port,
            api_ms=self.model.api_ms,
        )
        inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
        dev_stack = yaml.safe_load((self.project / "Pulumi.dev.yaml").read_text())
        stack = bench_stack(
            dev_stack, vendor=self.vendor, boxes=self.boxes, port=self.port, ssh_port=self.ssh_port
        )
        (self.project / f"Pulumi.{self.stack}.yaml").write_text(yaml.safe_dump(stack, sort_keys=False))
        self.sim_state.mkdir()
        log = (self.sim_state / "vendorsim.log").open("w")
        self.sim = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vendorsim",
                "--inventory",
                str(inventory),
                "--state",
                str(self.sim_state),
                "--port",
                str(self.port),
                "--task-seconds",
                f"{self.model.task_seconds:g}",
                "--apt-seconds",
                f"{self.model.apt_seconds:g}",
                *(["--box-cpus", f"{self.model.box_cpus:g}"] if self.model.box_cpus else []),
            ],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60 + self.boxes
        while True:
            try:
                urllib.request.urlopen(self.url("/_admin/health"), timeout=1).read()
                return
            except OSError:
                if self.sim.poll() is not None or time.monotonic() > deadline:
                    log_text = (self.sim_state / "vendorsim.log").read_text()[-3000:]
                    raise SystemExit(f"bench: vendorsim did not start:\n{log_text}") from None
                time.sleep(0.2)

    def stop(self) -> None:
        from vendorsim.boxes import reap_orphans

        if self.sim is not None:
            self.sim.terminate()
            try:
                self.sim.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.sim.kill()
        reap_orphans(self.sim_state / "boxes")

    def calls(self, since: int) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.url(f"/_admin/calls?since={since}"), timeout=30) as resp:
            entries: list[dict[str, Any]] = json.load(resp)["entries"]
        return entries

    def pulumi(self, *args: str) -> float:
        log = self.root / f"{self.stack}-{args[0]}.log"
        started = time.perf_counter()
        with log.open("w") as out:
            done = subprocess.run(
                ["pulumi", *args, "-s", self.stack, "--non-interactive", *extra_flags(args[0])],
                cwd=self.project,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(
                f"bench: pulumi {' '.join(args)} failed; its output: {log}\n{log.read_text()[-4000:]}"
            )
        return seconds

    def measure(self, command: str, first: str, second: str) -> Phase:
        before = len(self.calls(0))
        self.timings.write_text("")
        wall = self.pulumi(command, "--yes", "--skip-preview", "--parallel", str(self.parallel))
        timings = [json.loads(line) for line in self.timings.read_text().splitlines() if line.strip()]
        self.timings.rename(self.root / f"timings-{self.stack}-{command}.jsonl")
        phase, critical, own = phase_times(timings, first, second)
        made = self.calls(before)
        (self.root / f"calls-{self.stack}-{command}.json").write_text(json.dumps(made, indent=1))
        calls, listings = count_calls(made, self.vendor)
        return Phase(wall, phase, critical, calls, listings, len(own))


def extra_flags(command: str) -> list[str]:
    """BENCH_PULUMI_FLAGS: more flags for every `pulumi up`/`destroy`, `{cmd}` replaced by the command
    (`--event-log /tmp/ev-{cmd}.json`, `--profiling /tmp/prof-{cmd}`)."""
    return os.environ.get("BENCH_PULUMI_FLAGS", "").replace("{cmd}", command).split()


def run_one(
    root: Path, project: Path, vendor: str, boxes: int, model: Model, parallel: int
) -> tuple[Phase, Phase]:
    run = Run(root, project, vendor, boxes, model, parallel)
    run.start()
    try:
        subprocess.run(
            ["pulumi", "stack", "init", run.stack, "--non-interactive"],
            cwd=project,
            env=run.env,
            check=True,
            capture_output=True,
        )
        up = run.measure("up", "claim.create", "machine.create")
        down = run.measure("destroy", "machine.delete", "claim.delete")
    finally:
        run.stop()
    return up, down


def row(n: int, what: str, p: Phase) -> str:
    return (
        f"{n:>4}  {what:<8} {p.wall:8.1f} {p.phase:8.1f} {p.critical:9.1f} {p.ratio:6.2f}"
        f" {p.calls / n:10.1f} {p.listings:9d}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench adoption", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,4,16", help="fleet sizes N, comma-separated (default 1,4,16)")
    parser.add_argument("--with-64", action="store_true", help="add N = 64 (heavy on a 2-core machine)")
    parser.add_argument("--vendor", choices=VENDORS, default="dedibox", help="the fleet's vendor")
    parser.add_argument("--api-ms", type=int, default=100, help="latency of every vendor call (ms)")
    parser.add_argument("--scale", type=float, default=120.0, help="real seconds per benchmark second")
    parser.add_argument("--task-seconds", type=float, help="a reinstall (default: 30 min / scale)")
    parser.add_argument("--apt-seconds", type=float, help="each apt-get install (default: 1 min / scale)")
    parser.add_argument(
        "--box-cpus",
        type=float,
        default=1.0,
        help="CPUs all the simulated boxes may use together (a cgroup quota, default 1; 0: no budget, the"
        " boxes share every core with the engine, which a real box does not)",
    )
    parser.add_argument("--parallel", type=int, default=64, help="the engine's --parallel")
    parser.add_argument(
        "--gate", action="store_true", help="check issue 16's goals (bench/goals.py); exit 1 if one fails"
    )
    parser.add_argument("--project", type=Path, default=REPO, help="the checkout whose program is measured")
    parser.add_argument(
        "--keep", type=Path, help="work in this new folder and keep it (logs, timings, vendorsim state)"
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s] + ([64] if args.with_64 else [])
    if any(n < 1 for n in sizes) or args.scale <= 0:
        parser.error("--sizes: every N >= 1; --scale > 0")
    if args.box_cpus < 0:
        parser.error("--box-cpus: >= 0")
    model = Model(
        api_ms=args.api_ms,
        task_seconds=args.task_seconds if args.task_seconds is not None else REAL_REINSTALL_S / args.scale,
        apt_seconds=args.apt_seconds if args.apt_seconds is not None else REAL_APT_INSTALL_S / args.scale,
        box_cpus=args.box_cpus,
    )
    if not (REPO / ".toolchain" / "bin" / "pulumi").exists():
        raise SystemExit("bench: no Pulumi CLI in .toolchain/bin: run `bash scripts/bootstrap.sh`")
    source = args.project.resolve()
    print(
        f"{args.vendor} adoption by `pulumi up`/`destroy` of {source}: {model.api_ms} ms per vendor call, "
        f"reinstall {model.task_seconds:g} s, apt-get install {model.apt_seconds:g} s, "
        f"boxes on {f'{model.box_cpus:g} CPU' if model.box_cpus else 'every core'}, "
        f"--parallel {args.parallel}"
    )
    print("   N  command      wall    phase  critical  ratio  calls/box  listings")
    if args.keep is not None:
        args.keep.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="bench-adoption-") as tmp:
        root = args.keep.resolve() if args.keep is not None else Path(tmp)
        project = root / "project"
        copy_project(source, project)
        (project / ".venv").symlink_to(REPO / ".venv")
        (project / ".toolchain").symlink_to(REPO / ".toolchain")
        (root / "state").mkdir()
        results: dict[int, tuple[Phase, Phase]] = {}
        for n in sizes:
            up, down = run_one(root, project, args.vendor, n, model, args.parallel)
            results[n] = (up, down)
            print(row(n, "up", up), flush=True)
            print(row(n, "destroy", down), flush=True)
    goal = "goal: <= 1.10 at N=16, <= 1.25 at N=64"
    print(f"ratio = phase / critical ({goal}); calls/box: {args.vendor} API calls / N")
    if args.gate:
        verdicts, skipped = gate_verdicts(results)
        return gate(verdicts, skipped)
    return 0


def gate_verdicts(results: dict[int, tuple[Phase, Phase]]) -> tuple[list[Verdict], list[str]]:
    """Issue 16.1 and 16.2's goals (bench/goals.py) from the sizes measured: the ratio at N = 16 and 64,
    and the calls per adopted box at the largest N against the smallest."""
    verdicts, skipped = [], []
    for n in (16, 64):
        for index, command in enumerate(("up", "destroy")):
            key = f"adoption.{command}.{n}"
            if n in results:
                verdicts.append(Verdict(goal(key), results[n][index].ratio))
            else:
                skipped.append(f"{key}: N={n} not measured (--sizes)")
    if len(results) >= 2:
        small, large = min(results), max(results)
        per_box = {n: results[n][0].calls / n for n in (small, large)}
        verdicts.append(Verdict(goal("adoption.calls"), per_box[large] / per_box[small]))
    else:
        skipped.append("adoption.calls: needs two sizes")
    return verdicts, skipped


if __name__ == "__main__":
    sys.exit(main())
