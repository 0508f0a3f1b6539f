"""Does the program's cost grow with the stack, and only linearly? Stacks of 1x, 10x, 30x (and 100x)
a real stack's fleets and regions (bench/scale.py), measured side by side in one run:

    python -m bench.preview evaluate [--stack production] [--times 1,10,100]
        the program alone under Pulumi's mocks, each size in a new process: the process's wall time,
        the program's own evaluation, and the resources it registers; beside it, in another new
        process, the SDK's floor (as many plain resources registered by a program that does nothing
        else), as shipped and with the program's own trims of the SDK (components/sdk.py: the least
        any program of that many resources costs here), and the resources the SDK's dependency-cycle
        check walks per resource registered
    python -m bench.preview engine [--times 1,10,30] [--backend file|s3|both] [--set KEY=VALUE]
        `pulumi preview` of the dev stack grown (rendering its objects: production needs its real
        cluster) through the real engine, each size a fresh stack of a DIY backend (a folder, or S3
        on a local moto server): time per resource and the fitted exponent of time against resources
    python -m bench.preview up [--resources 80,680] [--backend file|s3|both] [--set KEY=VALUE]
        `pulumi up` of N no-op dynamic resources: the engine's and the backend's own cost of a first
        up, a no-change up and an up that changes ten
    scripts/netns.sh exec -- python -m bench.preview nochange [--rounds 3] [--set KEY=VALUE]
        the dev stack up once against vendorsim, then a no-change `pulumi preview` of it beside the
        same engine previewing an empty program

`--gate` (evaluate, engine, nochange) checks issue 16.3 and 16.4's goals on what was measured and
exits 1 if one fails (bench/goals.py). The engine runs with scripts/engine.env (as every run of the
project does); --set adds a setting to compare. Figures are wall-clock on a shared machine: read the
ratios and the exponent, not the seconds.
"""

from __future__ import annotations

import argparse
import importlib
import ipaddress
import json
import math
import os
import re
import resource
import runpy
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import yaml

from bench.goals import Verdict, gate, goal
from bench.project import copy_project

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

    # The test suite's mocks of the whole program (tests/ is outside mypy's run: imported by name).
    ProgramMocks: Any = importlib.import_module("tests.test_program").ProgramMocks

    raw = grow(read_stack_file(REPO / f"Pulumi.{stack}.yaml"), times)
    config, secret_keys = _mock_config(raw)
    pulumi.runtime.set_all_config(config, secret_keys)

    class Counting(ProgramMocks):  # type: ignore[misc]
        count = 0

        def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
            Counting.count += 1
            id_, outs = super().new_resource(args)
            if args.typ == "pulumi-python:dynamic/machine:MachineClaim":
                # One address per box however many there are (ProgramMocks counts up in one /24).
                outs["public_ipv4"] = str(ipaddress.IPv4Address("198.18.0.10") + len(self.claims))
            return id_, outs

    pulumi.runtime.set_mocks(Counting(), project=PROJECT, stack=stack, preview=True)
    visits = _count_cycle_checks()
    start, cpu = time.perf_counter(), time.process_time()

    def program() -> None:
        runpy.run_path(str(REPO / "__main__.py"), run_name="__main__")

    pulumi.runtime.test(program)()  # type: ignore[no-untyped-call]
    return {
        "evaluate_s": time.perf_counter() - start,
        "evaluate_cpu_s": time.process_time() - cpu,
        "process_cpu_s": time.process_time(),
        "resources": Counting.count,
        "cycle_check_visits": visits[0],
    }


def _count_cycle_checks() -> list[int]:
    """Count the resources the dependency-cycle check walks (pulumi/runtime/resource_cycle_breaker.py,
    which the program calls only where a cycle is possible: components/sdk.py): the SDK's check walks
    everything a new edge's target reaches, so a resource that reaches many (the control-plane
    firewall reaches every machine claim) made each edge into it cost that much. Same walk, counted;
    the bench's only change to it."""
    from pulumi.runtime import resource_cycle_breaker as breaker

    visits = [0]
    walk = breaker._with_transitive_deps

    def reachable(from_resource: Any, to_resource: Any) -> bool:
        seen: set[Any] = set()
        found = any(x == to_resource for x in walk(from_resource, seen))
        visits[0] += len(seen)
        return found

    breaker._reachable = reachable
    return visits


def _floor_here(resources: int, trimmed: bool) -> dict[str, Any]:
    """The SDK's own cost under the same mocks machinery: `resources` custom resources of three small
    properties each, no dependencies, no components, registered by a program that does nothing else;
    `trimmed`, with the trims the program makes of the SDK first (components/sdk.py)."""
    import pulumi

    class Mocks(pulumi.runtime.Mocks):
        def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
            return f"{args.name}-id", dict(args.inputs)

        def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], None]:
            return {}, None

    class Plain(pulumi.CustomResource):
        def __init__(self, name: str, props: dict[str, Any]) -> None:
            super().__init__("bench:index:Plain", name, props)

    pulumi.runtime.set_mocks(Mocks(), project=PROJECT, stack="floor", preview=True)
    if trimmed:
        from components.sdk import trim_sdk

        trim_sdk()
    start, cpu = time.perf_counter(), time.process_time()

    def program() -> None:
        for i in range(resources):
            Plain(f"r{i}", {"name": f"r{i}", "size": i, "spec": {"values": ["a", "b"]}})

    pulumi.runtime.test(program)()  # type: ignore[no-untyped-call]
    from pulumi.runtime import stack as sdk_stack

    from components import sdk

    return {
        "evaluate_s": time.perf_counter() - start,
        "evaluate_cpu_s": time.process_time() - cpu,
        "trimmed": sdk_stack.wait_for_rpcs is sdk.wait_for_rpcs,
    }


def _evaluate(*child_args: str) -> dict[str, Any]:
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "bench.preview", *child_args],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - start
    return result


Gated = tuple[list[Verdict], list[str]]  # what a `--gate` checks (bench/goals.py), and what it could not


def evaluate(args: argparse.Namespace) -> Gated:
    from bench.scale import grow, machines
    from config.loader import read_stack_file

    raw = read_stack_file(REPO / f"Pulumi.{args.stack}.yaml")
    print(f"{args.stack} under mocks, one new process per size ({os.cpu_count()} cores, load {_load()})")
    print("wall and CPU seconds: the whole process (imports included), and the program's evaluation;")
    print("floor: the SDK alone registering as many plain resources (3 properties, no dependencies),")
    print("  as shipped; trimmed: with the program's own trims of the SDK (components/sdk.py), the least")
    print("  a program of that many resources costs under these mocks, whatever it does;")
    print("walked/res: resources the SDK's dependency-cycle check visits, per resource registered")
    print(
        f"{'size':>5} {'machines':>9} {'resources':>10} {'process':>9} {'cpu':>7}"
        f" {'program':>9} {'cpu':>7} {'cpu ms/res':>11} {'floor cpu':>10} {'x floor':>8}"
        f" {'trimmed':>8} {'x trimmed':>10} {'walked/res':>11}"
    )
    measured: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
    for times in args.times:
        r = _evaluate("_evaluate", "--stack", args.stack, "--times", str(times))
        floor = _evaluate("_floor", "--resources", str(r["resources"]))
        trimmed = _evaluate("_floor", "--resources", str(r["resources"]), "--trimmed")
        measured.append((times, r, floor))
        per = 1000 * r["evaluate_cpu_s"] / r["resources"]
        print(
            f"{'x' + str(times):>5} {machines(grow(raw, times)):>9} {r['resources']:>10}"
            f" {r['process_s']:>8.2f}s {r['process_cpu_s']:>6.2f}s"
            f" {r['evaluate_s']:>8.2f}s {r['evaluate_cpu_s']:>6.2f}s {per:>11.2f}"
            f" {floor['evaluate_cpu_s']:>9.2f}s {r['evaluate_cpu_s'] / floor['evaluate_cpu_s']:>8.2f}"
            f" {trimmed['evaluate_cpu_s']:>7.2f}s {r['evaluate_cpu_s'] / trimmed['evaluate_cpu_s']:>10.2f}"
            f" {r['cycle_check_visits'] / r['resources']:>11.1f}"
        )
    return evaluate_verdicts(measured)


def evaluate_verdicts(measured: list[tuple[int, dict[str, Any], dict[str, Any]]]) -> Gated:
    """Issue 16.4's goals from (size, the program's run, the SDK floor's run, as shipped) per size: the
    program's CPU grows linearly with its resources, stays within its guard of the SDK's floor at the
    largest size, and (reported) x100 in 10 s."""
    verdicts, skipped = [], []
    points = [(r["resources"], r["evaluate_cpu_s"]) for _, r, _ in measured]
    if len(points) >= 2:
        verdicts.append(Verdict(goal("evaluate.exponent"), exponent(points)))
    else:
        skipped.append("evaluate.exponent: needs two sizes")
    if measured:
        _, largest, floor = max(measured, key=lambda m: m[0])
        verdicts.append(Verdict(goal("evaluate.floor"), largest["evaluate_cpu_s"] / floor["evaluate_cpu_s"]))
    x100 = [r for times, r, _ in measured if times == 100]
    if x100:
        verdicts.append(Verdict(goal("evaluate.x100"), x100[0]["evaluate_cpu_s"]))
    else:
        skipped.append("evaluate.x100: x100 not measured (--times)")
    return verdicts, skipped


# --- the program through the engine ---------------------------------------------------------------

PASSPHRASE = "bench-only-passphrase"


def engine_stack(raw: dict[str, Any]) -> dict[str, Any]:
    """The dev stack in its rendering mode (Kubernetes objects written to a folder): the engine previews
    it with no cluster, vendor or cloud behind it, and every resource of the program is registered.
    (Production cannot: it requires a real api_server and refuses render_dir.)"""
    cluster = {k: v for k, v in dict(raw["cluster"]).items() if k != "api_server"}
    cluster["render_dir"] = "rendered/bench"
    return {**raw, "cluster": cluster}


@dataclass
class Project:
    """A copy of the project with a private backend and PULUMI_HOME; `pulumi` runs in it."""

    root: Path
    env: dict[str, str]

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["pulumi", *args, "--non-interactive"],
            cwd=self.root,
            env=self.env,
            input=stdin,
            text=True,
            capture_output=True,
        )
        if proc.returncode != 0:
            raise SystemExit(
                f"pulumi {' '.join(args)} exited {proc.returncode}:\n"
                f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc

    def stack(self, name: str, raw: dict[str, Any]) -> None:
        """Create stack `name` with `raw` as its config, its secrets as stand-in secret values."""
        from config.loader import load_stack_config, required_secret_keys

        config: dict[str, Any] = {f"{PROJECT}:{k}": v for k, v in raw.items()}
        (self.root / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
        self.run("stack", "init", name, "--secrets-provider", "passphrase")
        secrets = required_secret_keys(load_stack_config(raw))
        if secrets:
            pairs = [arg for key in secrets for arg in ("--secret", f"{key}=stand-in-{key}")]
            self.run("config", "set-all", "-s", name, *pairs)


def project(tmp: Path, backend_url: str, extra_env: dict[str, str]) -> Project:
    root = tmp / "project"
    copy_project(REPO, root)
    (root / ".venv").symlink_to(REPO / ".venv")
    return Project(root, {**project_env(tmp, backend_url), **extra_env})


def project_env(tmp: Path, backend_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{REPO / '.toolchain' / 'bin'}:{REPO / '.venv' / 'bin'}:{os.environ['PATH']}",
        "PULUMI_HOME": str(tmp / "pulumi-home"),
        "PULUMI_BACKEND_URL": backend_url,
        "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
        **engine_settings(),
    }


def engine_settings() -> dict[str, str]:
    """The engine settings every CLI run of the project gets (scripts/engine.env)."""
    settings = {}
    for line in (REPO / "scripts" / "engine.env").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            key, _, value = line.partition("=")
            settings[key] = value
    return settings


_CREATED = re.compile(r"^\s*\+ (\d+) to create$", re.M)


def preview(p: Project, stack: str) -> tuple[float, int]:
    """Seconds of one `pulumi preview`, and the resources it would create."""
    start = time.perf_counter()
    out = p.run("preview", "-s", stack, "--color", "never", "--suppress-progress").stdout
    seconds = time.perf_counter() - start
    created = _CREATED.search(out)
    if created is None:
        raise SystemExit(f"no '+ N to create' in the preview of {stack}:\n{out[-2000:]}")
    return seconds, int(created.group(1))


def exponent(points: list[tuple[int, float]]) -> float:
    """The least-squares slope of log(time) against log(resources): 1.0 is linear."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def engine(args: argparse.Namespace) -> Gated:
    from bench.scale import grow, machines
    from config.loader import read_stack_file

    raw = engine_stack(read_stack_file(REPO / f"Pulumi.{args.stack}.yaml"))
    verdicts: list[Verdict] = []
    skipped: list[str] = []
    for backend in ("file", "s3") if args.backend == "both" else (args.backend,):
        with (
            tempfile.TemporaryDirectory(prefix="bench-preview-") as tmp_name,
            _backend(backend, Path(tmp_name)) as (
                url,
                env,
            ),
        ):
            tmp = Path(tmp_name)
            p = project(tmp, url, {**env, **dict(args.set)})
            print(
                f"`pulumi preview` of {args.stack} grown, fresh stacks, {backend} backend"
                f" (load {_load()}){_overrides(args)}"
            )
            print(f"{'size':>5} {'machines':>9} {'resources':>10} {'preview':>9} {'ms/resource':>12}")
            points = []
            for times in args.times:
                grown = grow(raw, times)
                p.stack(f"x{times}", grown)
                seconds, resources = preview(p, f"x{times}")
                points.append((resources, seconds))
                print(
                    f"{'x' + str(times):>5} {machines(grown):>9} {resources:>10} {seconds:>8.2f}s"
                    f" {1000 * seconds / resources:>12.2f}",
                    flush=True,
                )
            if len(points) > 1:
                print(f"fitted exponent (time ~ resources^k): k = {exponent(points):.2f}  (goal <= 1.1)")
                verdicts.append(Verdict(goal("preview.exponent"), exponent(points), where=backend))
            else:
                skipped.append(f"preview.exponent ({backend}): needs two sizes")
    return verdicts, skipped


# --- `pulumi up` and the backend ------------------------------------------------------------------

# N resources that change nothing anywhere: what an `up` costs the engine and the backend alone. Each
# carries about what a machine of this program keeps in state (its inputs and outputs, ~1.5 KB).
SYNTHETIC = """
import pulumi
import pulumi.dynamic as dyn

from providers.dynamic_resource import DynamicResource


class Noop(dyn.ResourceProvider):
    def create(self, props):
        return dyn.CreateResult(id_=props["slot"], outs=props)

    def diff(self, _id, olds, news):
        return dyn.DiffResult(changes=olds.get("serial") != news.get("serial"))

    def update(self, _id, _olds, news):
        return dyn.UpdateResult(outs=news)


class Slot(DynamicResource):
    def __init__(self, name, props):
        super().__init__(Noop(), name, props)


config = pulumi.Config()
serial = config.get_int("serial") or 0
changed = config.get_int("changed") or 0
for i in range(config.require_int("resources")):
    Slot(f"slot-{i}", {"slot": f"slot-{i}", "serial": serial if i < changed else 0, "payload": "x" * 1500})
"""


def up(args: argparse.Namespace) -> None:
    for backend in ("file", "s3") if args.backend == "both" else (args.backend,):
        with (
            tempfile.TemporaryDirectory(prefix="bench-up-") as tmp_name,
            _backend(backend, Path(tmp_name)) as (
                url,
                env,
            ),
        ):
            tmp = Path(tmp_name)
            root = tmp / "synthetic"
            root.mkdir()
            (root / "Pulumi.yaml").write_text(
                yaml.safe_dump(
                    {
                        "name": "synthetic",
                        "runtime": {"name": "python", "options": {"virtualenv": str(REPO / ".venv")}},
                    }
                )
            )
            (root / "__main__.py").write_text(SYNTHETIC)
            p = Project(root, {**project_env(tmp, url), **env, **dict(args.set)})
            print(f"`pulumi up` of N no-op resources, {backend} backend (load {_load()}){_overrides(args)}")
            print(
                f"{'N':>6} {'first up':>9} {'ms/res':>7} {'no change':>10} {'ms/res':>7} {'10 changed':>11}"
            )
            first, same = [], []
            for n in args.resources:
                stack = f"n{n}"
                p.run("stack", "init", stack, "--secrets-provider", "passphrase")
                p.run("config", "set", "resources", str(n), "-s", stack)
                t_first = _timed(p, "up", "--yes", "-s", stack, "--suppress-progress")
                t_same = _timed(p, "up", "--yes", "-s", stack, "--suppress-progress")
                p.run("config", "set", "serial", "1", "-s", stack)
                p.run("config", "set", "changed", "10", "-s", stack)
                t_ten = _timed(p, "up", "--yes", "-s", stack, "--suppress-progress")
                first.append((n, t_first))
                same.append((n, t_same))
                print(
                    f"{n:>6} {t_first:>8.2f}s {1000 * t_first / n:>7.2f}"
                    f" {t_same:>9.2f}s {1000 * t_same / n:>7.2f} {t_ten:>10.2f}s",
                    flush=True,
                )
            if len(first) > 1:
                print(
                    f"fitted exponent: first up k = {exponent(first):.2f},"
                    f" no-change up k = {exponent(same):.2f}"
                )


def _timed(p: Project, *args: str) -> float:
    start = time.perf_counter()
    p.run(*args)
    return time.perf_counter() - start


def _timed_cpu(p: Project, *args: str) -> tuple[float, float]:
    """Wall seconds and CPU seconds of one run: the CLI and every process under it that it waited for
    (the program, the language host, the plugins)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = _timed(p, *args)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


# --- a no-change preview against an empty program -------------------------------------------------

EMPTY = "import pulumi\n"


def nochange(args: argparse.Namespace) -> Gated:
    """The dev stack, up once against vendorsim (rendering its objects, no cluster), then previewed with
    nothing to change, beside the same engine previewing a program that registers nothing. Runs in a
    network namespace (the boxes' addresses): scripts/netns.sh exec -- python -m bench.preview nochange."""
    from tests.providers.test_machine_support import fresh_box_range, move_boxes
    from tests.support.pulumi_home import quiet_pulumi_home

    with tempfile.TemporaryDirectory(prefix="bench-nochange-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "state").mkdir()
        p = project(tmp, f"file://{tmp / 'state'}", {"PULUMI_CONFIG_PASSPHRASE": "tuist-dev-only-passphrase"})
        port, ssh_port = _free_port(), _free_port()
        inventory_file = p.root / "vendorsim" / "inventory.dev.yaml"
        inventory = yaml.safe_load(inventory_file.read_text())
        move_boxes(inventory, fresh_box_range(), ssh_port)
        inventory_file.write_text(yaml.safe_dump(inventory, sort_keys=False))
        stack_file = p.root / "Pulumi.dev.yaml"
        text = stack_file.read_text().replace("      ssh_port: 2222\n", f"      ssh_port: {ssh_port}\n")
        text = text.replace("127.0.0.1:8710", f"127.0.0.1:{port}")
        text, found = re.subn(
            r"^    api_server: https://127\.0\.0\.1:\d+\n",
            "    render_dir: rendered/bench\n",
            text,
            flags=re.M,
        )
        assert found == 1, "Pulumi.dev.yaml: no api_server line"
        stack_file.write_text(text)
        sim_state = tmp / "vendorsim"
        sim_state.mkdir()
        with (sim_state / "vendorsim.log").open("w") as sim_log:
            sim = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "vendorsim",
                    "--inventory",
                    str(inventory_file),
                    "--state",
                    str(sim_state),
                    "--port",
                    str(port),
                    "--task-seconds",
                    "0.5",
                ],
                cwd=p.root,
                env=p.env,
                stdout=sim_log,
                stderr=subprocess.STDOUT,
            )
        try:
            _wait_http(f"http://127.0.0.1:{port}/_admin/health", sim)
            p.run("stack", "select", "dev", "--create")
            up_s = _timed(p, "up", "--yes", "-s", "dev", "--suppress-progress")
            empty = tmp / "empty"
            empty.mkdir()
            (empty / "Pulumi.yaml").write_text(
                yaml.safe_dump(
                    {
                        "name": "empty",
                        "runtime": {"name": "python", "options": {"virtualenv": str(REPO / ".venv")}},
                    }
                )
            )
            (empty / "__main__.py").write_text(EMPTY)
            e = Project(empty, p.env)
            e.run("stack", "init", "empty", "--secrets-provider", "passphrase")
            _timed(e, "up", "--yes", "-s", "empty", "--suppress-progress")
            dev, nothing, varied = [], [], []
            # (wall, CPU) of each preview without the CLI's automatic log.
            dev_unlogged: list[tuple[float, float]] = []
            nothing_unlogged: list[tuple[float, float]] = []
            pv = Project(p.root, {**p.env, **dict(args.set)})
            # The same two previews without the CLI's automatic log (as the tests run them).
            unlogged = {**p.env, "PULUMI_HOME": str(quiet_pulumi_home(tmp / "pulumi-home-unlogged"))}
            pu, eu = Project(p.root, unlogged), Project(empty, unlogged)
            quiet = ("--suppress-progress", "--expect-no-changes")
            for _ in range(args.rounds):
                dev.append(_timed(p, "preview", "-s", "dev", *quiet))
                nothing.append(_timed(e, "preview", "-s", "empty", *quiet))
                dev_unlogged.append(_timed_cpu(pu, "preview", "-s", "dev", *quiet))
                nothing_unlogged.append(_timed_cpu(eu, "preview", "-s", "empty", *quiet))
                if args.set:
                    varied.append(_timed(pv, "preview", "-s", "dev", *quiet))
            profiles = _cli_profiles(pu, eu, tmp / "profiles", quiet) if args.cli_profile else []
        finally:
            sim.terminate()
            sim.wait(timeout=60)
        d, n = statistics.median(dev), statistics.median(nothing)
        print(f"no-change `pulumi preview`, median of {args.rounds} each, side by side (load {_load()})")
        print(f"  dev stack (up once in {up_s:.0f} s) : {d:6.2f} s")
        print(f"  empty program               : {n:6.2f} s")
        print(f"  ratio                       : {d / n:6.2f}x  (goal <= 2)")
        du, nu = (statistics.median(w for w, _ in runs) for runs in (dev_unlogged, nothing_unlogged))
        print("  without the CLI's automatic log ($PULUMI_HOME/logs, tests/support/pulumi_home.py):")
        print(f"    dev stack {du:6.2f} s, empty program {nu:6.2f} s: {du / nu:.2f}x")
        dc, nc = (statistics.median(c for _, c in runs) for runs in (dev_unlogged, nothing_unlogged))
        print(f"    CPU of every process: dev stack {dc:6.2f} s, empty program {nc:6.2f} s: {dc / nc:.2f}x")
        if varied:
            v = statistics.median(varied)
            print(f"  dev stack{_overrides(args)} : {v:6.2f} s, {v / n:.2f}x the empty program")
        for title, top in profiles:
            print(f"  the CLI's own CPU (`pulumi --profiling`, go tool pprof -top), {title}:")
            print("\n".join("    " + line for line in top.splitlines()))
        # The gate reads CPU, not wall: on a shared machine the wall of a 1-second run is mostly others'.
        return [Verdict(goal("nochange.cpu"), dc / nc)], []


def _cli_profiles(dev: Project, empty: Project, out: Path, quiet: tuple[str, ...]) -> list[tuple[str, str]]:
    """One more no-change preview of each, with the CLI's CPU profile: where the `pulumi` process
    itself spends its CPU (the program and the plugins are other processes)."""
    out.mkdir()
    binary = shutil.which("pulumi", path=dev.env["PATH"])
    if binary is None or shutil.which("go") is None:
        raise SystemExit("--cli-profile needs `pulumi` and `go` (go tool pprof) on PATH")
    tops = []
    for title, p, stack in (("dev stack", dev, "dev"), ("empty program", empty, "empty")):
        prefix = out / stack
        p.run("preview", "-s", stack, *quiet, "--profiling", str(prefix))
        (cpu,) = out.glob(f"{stack}.*.cpu")
        top = subprocess.run(
            ["go", "tool", "pprof", "-top", "-nodecount=25", binary, str(cpu)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        tops.append((title, top))
    return tops


def _wait_http(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{url} did not answer") from None
            time.sleep(0.2)


@contextmanager
def _backend(kind: str, tmp: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """The login URL and environment of a fresh DIY backend: a folder, or a bucket on a local moto S3
    server (the URL scripts/ci/backend.sh builds, with only the endpoint swapped)."""
    if kind == "file":
        (tmp / "state").mkdir()
        yield f"file://{tmp / 'state'}", {}
        return
    port = _free_port()
    log = (tmp / "moto.log").open("w")
    server = subprocess.Popen(
        [str(REPO / ".venv" / "bin" / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"moto did not start: {(tmp / 'moto.log').read_text()}") from None
                time.sleep(0.2)
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).create_bucket(Bucket="tuist-infra-state")
        url = subprocess.run(
            ["bash", "-c", f"source {REPO / 'scripts' / 'ci' / 'backend.sh'} && backend_url"],
            env={**os.environ, "TUIST_STATE_ENDPOINT": endpoint, "TUIST_STATE_REGION": "us-east-1"},
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        yield url, env
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _overrides(args: argparse.Namespace) -> str:
    return "".join(f", {key}={value}" for key, value in args.set)


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key, value


def _sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("evaluate", help="the program alone under mocks")
    ev.add_argument("--stack", default="production")
    ev.add_argument("--times", type=_sizes, default=[1, 10, 100])
    ev.add_argument("--gate", action="store_true", help=GATE_HELP)
    ev.set_defaults(func=evaluate)
    en = sub.add_parser("engine", help="`pulumi preview` through the real engine")
    en.add_argument("--stack", default="dev")
    en.add_argument("--times", type=_sizes, default=[1, 10, 30])
    en.add_argument("--backend", choices=["file", "s3", "both"], default="file")
    en.add_argument("--set", type=_setting, action="append", default=[], metavar="KEY=VALUE")
    en.add_argument("--gate", action="store_true", help=GATE_HELP)
    en.set_defaults(func=engine)
    u = sub.add_parser("up", help="`pulumi up` of N no-op resources: the engine and the backend alone")
    u.add_argument("--resources", type=_sizes, default=[80, 680, 2000])
    u.add_argument("--backend", choices=["file", "s3", "both"], default="file")
    u.add_argument("--set", type=_setting, action="append", default=[], metavar="KEY=VALUE")
    u.set_defaults(func=up)
    nc = sub.add_parser("nochange", help="a no-change dev preview against an empty program (in a netns)")
    nc.add_argument("--rounds", type=int, default=3)
    nc.add_argument("--set", type=_setting, action="append", default=[], metavar="KEY=VALUE")
    nc.add_argument("--cli-profile", action="store_true", help="print where the CLI's own CPU goes")
    nc.add_argument("--gate", action="store_true", help=GATE_HELP)
    nc.set_defaults(func=nochange)
    child = sub.add_parser("_evaluate")
    child.add_argument("--stack", default="production")
    child.add_argument("--times", type=int, default=1)
    child.set_defaults(func=lambda a: print(json.dumps(_evaluate_here(a.stack, a.times))))
    fl = sub.add_parser("_floor")
    fl.add_argument("--resources", type=int, default=1000)
    fl.add_argument("--trimmed", action="store_true")
    fl.set_defaults(func=lambda a: print(json.dumps(_floor_here(a.resources, a.trimmed))))
    args = parser.parse_args()
    result = args.func(args)
    if getattr(args, "gate", False):
        return gate(*result)
    return 0


GATE_HELP = "check issue 16's goals (bench/goals.py); exit 1 if one fails"

if __name__ == "__main__":
    sys.exit(main())
