"""Where the test suite's CPU goes: the README's test command (or any command) run under a sampler of
every process on the machine, its CPU summed by kind of process.

    python -m bench suite                      # bash scripts/test.sh, every test
    python -m bench suite -- tests/e2e -n 2    # arguments after -- go to scripts/test.sh
    python -m bench suite --command 'CMD ...'  # any other command; --json for the figures as JSON

The suite is CPU-bound on a 2-core machine (more pytest workers make it slower, not faster), so its
wall time is set by how many CPU-seconds it needs. This prints:
- `busy`: the CPU-seconds the whole machine spent while the command ran (/proc/stat), and that as a
  share of every core for the whole wall time (how CPU-bound the run was);
- `floor`: busy / cores, the wall time the same work needs with every core busy all the time; a wall
  goal below it needs fewer CPU-seconds, not a better schedule;
- per kind of process (the control plane's, the engine's, the workers' own, vendorsim, ...): CPU-seconds,
  share of what was sampled, and how many processes. The sampler reads /proc every `--interval`
  seconds (0.5) and keeps each process's last reading: a process that lives less than an interval
  is missed, so `sampled` says what share of `busy` the table covers.

Processes already running when the command starts count only the CPU they use after it, so a quiet
machine is all the method needs; anything else running shows up in its kind (or `other`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.goals import Verdict, gate, goal

REPO = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")

# Kinds by command line, first match wins. The order matters where one command line holds another's
# words (a control plane's flags name the pytest temp folder; a program's path names the project).
KINDS: tuple[tuple[str, str], ...] = (
    ("control plane: kube-apiserver", r"^\S*kube-apiserver "),
    ("control plane: etcd", r"^\S*etcd "),
    ("control plane: kube-controller-manager", r"^\S*kube-controller-manager "),
    ("control plane: kube-scheduler", r"^\S*kube-scheduler "),
    ("kubelets (stand-ins, boxes')", r"^\S*(kubelet-standin|/run/sim/kubelet) "),
    ("kubectl", r"^\S*kubectl "),
    (
        "pulumi CLI: up, preview, destroy, refresh, import",
        r"^\S*pulumi (up|preview|destroy|refresh|import)\b",
    ),
    ("pulumi CLI: other commands", r"^\S*pulumi \S"),
    ("pulumi kubernetes plugin", r"^\S*pulumi-resource-kubernetes "),
    ("dynamic providers (machines, claims)", r"-m pulumi\.dynamic|pulumi-resource-pulumi-python"),
    ("policy pack", r"pulumi-analyzer-policy|/policy( |$)"),
    ("programs (__main__.py) and their language host", r"PULUMI_CONFIG_FD|pulumi-language-python"),
    ("pytest workers (and children no reading saw)", r"exec\(eval\(sys\.stdin|-m pytest( |$)"),
    ("vendorsim", r"-m vendorsim( |$)"),
    ("boxes: sshd and their scripts", r"sshd|/run/sim/|sandbox/login\.sh"),
    ("moto (S3)", r"moto_server"),
    ("tuist-ops", r"/tuist-ops( |$)"),
    ("nginx", r"nginx"),
    ("other python", r"^\S*python\S* "),
    ("kernel threads (no command line)", r"^$"),
    ("control plane: scripts/cluster.sh", r"scripts/cluster\.sh "),
    (
        "shells and tools",
        r"^\S*(bash|sh|openssl|curl|ssh|ssh-keygen|shellcheck|ruff|mypy|install|mkdir)( |$)",
    ),
)
# A shell, tool or plain Python started under a box's sshd or scripts/cluster.sh is of that kind (a
# self-join's commands are the box's); under a pytest worker it keeps its own.
GENERIC = frozenset({"shells and tools", "kubectl", "other", "other python"})
PASSED_DOWN = frozenset({"boxes: sshd and their scripts", "control plane: scripts/cluster.sh"})
_COMPILED = tuple((kind, re.compile(pattern)) for kind, pattern in KINDS)


def kind_of(cmdline: str) -> str:
    for kind, pattern in _COMPILED:
        if pattern.search(cmdline):
            return kind
    return "other"


@dataclass
class Seen:
    cmdline: str
    pid: int
    ppid: int
    started: int  # clock ticks after boot
    own: float  # CPU-seconds since the sampler started (or since the process did)
    waited: float  # of the children it reaped (their own and what they reaped), the same way
    alive: bool = True


@dataclass
class Sampler:
    """Every process's CPU, read from /proc every `interval` seconds on a thread of its own."""

    interval: float = 0.5
    proc: Path = Path("/proc")
    seen: dict[str, Seen] = field(default_factory=dict)
    _base: dict[str, tuple[float, float]] = field(default_factory=dict)  # (own, waited) at the start
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    own_cpu: float = 0.0

    def start(self) -> None:
        self._scan(first=True)
        self._thread = threading.Thread(target=self._loop, name="bench-suite-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._scan(first=False)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._scan(first=False)
        self.own_cpu = time.thread_time()

    def _scan(self, first: bool) -> None:
        me = os.getpid()
        for seen in self.seen.values():
            seen.alive = False
        for entry in os.scandir(self.proc):
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            try:
                stat = (Path(entry.path) / "stat").read_text()
                cmdline = (
                    (Path(entry.path) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
            except OSError:
                continue  # gone between the listing and the read
            # comm (field 2) may hold spaces and parentheses: the fields after it follow the last ')'.
            fields = stat[stat.rindex(")") + 2 :].split()
            own = (int(fields[11]) + int(fields[12])) / TICK
            waited = (int(fields[13]) + int(fields[14])) / TICK
            key = f"{entry.name}:{fields[19]}"  # pid and start time: a reused pid is another process
            if first:
                self._base[key] = (own, waited)
            base_own, base_waited = self._base.get(key, (0.0, 0.0))
            previous = self.seen.get(key)
            # A process reads an empty command line while it execs, and after it exits (a zombie).
            cmdline = cmdline.strip() or (previous.cmdline if previous else "")
            self.seen[key] = Seen(
                cmdline,
                int(entry.name),
                int(fields[1]),
                int(fields[19]),
                own - base_own,
                waited - base_waited,
            )

    def parents(self) -> dict[str, str | None]:
        """key -> its parent's key: the process of its ppid that started last before it did."""
        by_pid: dict[int, list[str]] = {}
        for key, seen in self.seen.items():
            by_pid.setdefault(seen.pid, []).append(key)
        found: dict[str, str | None] = {}
        for key, seen in self.seen.items():
            candidates = [p for p in by_pid.get(seen.ppid, []) if self.seen[p].started <= seen.started]
            found[key] = max(candidates, key=lambda p: self.seen[p].started) if candidates else None
        return found

    def kinds(self) -> dict[str, str]:
        """key -> kind of process: its command line's, or for a shell or tool the kind of the box or
        script it ran under (a self-join's bash under a box's sshd is the box's)."""
        parent = self.parents()
        own = {key: kind_of(seen.cmdline) for key, seen in self.seen.items()}
        found = {}
        for key, kind in own.items():
            ancestor = parent[key]
            for _ in range(64):  # a process tree is not deeper; a cycle of reused pids ends here
                if kind not in GENERIC or ancestor is None:
                    break
                if own[ancestor] in PASSED_DOWN:
                    kind = own[ancestor]
                ancestor = parent[ancestor]
            found[key] = kind
        return found

    def cpu_by_process(self) -> dict[str, tuple[str, float]]:
        """key -> (command line, CPU-seconds): each process's own, and that of the children it reaped
        which no reading saw (a process living less than an interval: a shimmed command's bash).

        A reaped child's last reading may predate its own children's exit, so its total at exit is
        taken as at least its own CPU plus theirs (bottom up): a parent is not credited twice with
        what a grandchild spent."""
        reaped: dict[str, list[str]] = {key: [] for key in self.seen}
        for key, parent in self.parents().items():
            if not self.seen[key].alive and parent is not None:
                reaped[parent].append(key)
        total: dict[str, float] = {}

        def total_at_exit(key: str) -> float:
            if key not in total:
                seen = self.seen[key]
                children = sum(total_at_exit(child) for child in reaped[key])
                total[key] = seen.own + max(seen.waited, children)
            return total[key]

        result = {}
        for key, seen in self.seen.items():
            unseen = seen.waited - sum(total_at_exit(child) for child in reaped[key])
            result[key] = (seen.cmdline, seen.own + max(0.0, unseen))
        return result


def machine_busy() -> float:
    """CPU-seconds every core has spent on anything but idle and iowait since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / TICK


def measure(command: list[str], interval: float = 0.5, cwd: Path = REPO, top: int = 15) -> dict[str, Any]:
    sampler = Sampler(interval=interval)
    busy, started = machine_busy(), time.perf_counter()
    sampler.start()
    try:
        returncode = subprocess.run(command, cwd=cwd).returncode
    finally:
        sampler.stop()
    wall = time.perf_counter() - started
    busy = machine_busy() - busy
    cpu: dict[str, float] = {}
    processes: Counter[str] = Counter()
    kinds = sampler.kinds()
    attributed = sorted(
        ((kinds[key], cmdline, seconds) for key, (cmdline, seconds) in sampler.cpu_by_process().items()),
        key=lambda row: row[2],
        reverse=True,
    )
    for kind, _, seconds in attributed:
        if seconds <= 0:
            continue
        cpu[kind] = cpu.get(kind, 0.0) + seconds
        processes[kind] += 1
    cores = os.cpu_count() or 1
    return {
        "command": command,
        "returncode": returncode,
        "wall_s": wall,
        "cores": cores,
        "busy_cpu_s": busy,
        "sampled_cpu_s": sum(cpu.values()),
        "sampler_cpu_s": sampler.own_cpu,
        "costliest": [
            {"cpu_s": seconds, "kind": kind, "cmdline": cmdline[:300]}
            for kind, cmdline, seconds in attributed[:top]
        ],
        "kinds": {
            kind: {"cpu_s": cpu[kind], "processes": processes[kind]}
            for kind in sorted(cpu, key=cpu.__getitem__, reverse=True)
        },
    }


def report(result: dict[str, Any]) -> str:
    wall, cores, busy, sampled = (
        result["wall_s"],
        result["cores"],
        result["busy_cpu_s"],
        result["sampled_cpu_s"],
    )
    # A command that spent next to nothing (a clock tick at most) still gets a report, not a division by 0.
    busy, wall = max(busy, 1 / TICK), max(wall, 1e-3)
    lines = [
        f"`{shlex.join(result['command'])}` exited {result['returncode']}, load now "
        + " ".join(f"{x:.1f}" for x in os.getloadavg()),
        f"  wall     {wall:7.1f} s on {cores} cores",
        f"  busy     {busy:7.1f} CPU-s  = {busy / (wall * cores):4.0%} of {cores} cores for the whole wall",
        f"  floor    {busy / cores:7.1f} s      busy / cores: the wall with every core busy all the time"
        f" ({wall / (busy / cores):.2f}x under the wall)",
        f"  sampled  {sampled:7.1f} CPU-s  = {sampled / busy:4.0%} of busy (processes seen at least once"
        " every interval; the sampler itself "
        f"{result['sampler_cpu_s']:.1f} CPU-s)",
        "",
        f"  {'kind of process':50s} {'CPU-s':>7s} {'share':>6s} {'procs':>6s}",
    ]
    for kind, row in result["kinds"].items():
        lines.append(f"  {kind:50s} {row['cpu_s']:7.1f} {row['cpu_s'] / sampled:6.1%} {row['processes']:6d}")
    lines += ["", f"  the {len(result['costliest'])} costliest processes (with the children no reading saw):"]
    for row in result["costliest"]:
        lines.append(
            f"  {row['cpu_s']:7.1f}  {(row['cmdline'].splitlines() or ['(no command line)'])[0][:100]}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--command", help="the command to measure (default: bash scripts/test.sh ARGS)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between readings of /proc")
    parser.add_argument("--top", type=int, default=15, help="how many of the costliest processes to list")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--gate", action="store_true", help="report issue 16.5's goal (bench/goals.py); never fails the run"
    )
    parser.add_argument("args", nargs="*", help="after --: arguments for scripts/test.sh")
    args = parser.parse_args()
    if args.command and args.args:
        parser.error("--command takes its arguments in its own string; nothing goes after --")
    if args.interval <= 0:
        parser.error(f"--interval must be above 0 seconds, not {args.interval:g}")
    command = shlex.split(args.command) if args.command else ["bash", "scripts/test.sh", *args.args]
    result = measure(command, interval=args.interval, top=args.top)
    print(json.dumps(result, indent=2) if args.json else report(result))
    if args.gate and not args.json:
        gated = gate(*suite_verdicts(result, whole=not (args.command or args.args)))
        return int(result["returncode"]) or gated
    return int(result["returncode"])


def suite_verdicts(result: dict[str, Any], *, whole: bool) -> tuple[list[Verdict], list[str]]:
    """Issue 16.5's goal, reported: the least wall the suite's CPU allows on this machine's cores. Only a
    whole run of the README's test command measures it."""
    if not whole:
        return [], ["suite.floor: not the whole suite (--command or arguments after --)"]
    return [Verdict(goal("suite.floor"), result["busy_cpu_s"] / result["cores"])], []


if __name__ == "__main__":
    sys.exit(main())
