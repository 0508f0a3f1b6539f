"""The stack files as the program sees them, and the bad-config corpus built on them."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from config.loader import read_stack_file

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BAD_DIR = HERE / "bad"
# Pulumi.dev.yaml is another engineer's; the fixture stands in until it lands.
DEV_FIXTURE = HERE / "fixtures" / "dev.yaml"
REAL_STACKS = ("staging", "canary", "production")


def stack_path(name: str) -> Path:
    if name == "dev":
        real = REPO / "Pulumi.dev.yaml"
        return real if real.exists() else DEV_FIXTURE
    return REPO / f"Pulumi.{name}.yaml"


def stack_raw(name: str) -> dict[str, Any]:
    return read_stack_file(stack_path(name))


_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _steps(path: str) -> list[str | int]:
    steps: list[str | int] = []
    for name, index in _STEP.findall(path):
        steps.append(int(index) if index else name)
    return steps


def _parent(doc: Any, path: str) -> tuple[Any, str | int]:
    steps = _steps(path)
    node = doc
    for step in steps[:-1]:
        node = node[step]
    return node, steps[-1]


@dataclass(frozen=True)
class BadCase:
    """One corpus file: a base stack, the edits that break it, the exact lines expected."""

    name: str
    why: str
    base: str
    raw: dict[str, Any]
    expected: list[str]
    # Secrets the stack needs but the operator has not set: such a case goes through the program's
    # own path (pulumi config, load_from_pulumi), where secrets are checked.
    unset_secrets: tuple[str, ...] = ()
    # The stack the config is loaded as (`stack:`), where the stack name matters; None: not said.
    stack: str | None = None


def load_case(path: Path) -> BadCase:
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    keys = {"why", "base", "stack", "set", "repeat", "delete", "append", "unset_secrets", "expected"}
    unknown = set(spec) - keys
    assert not unknown, f"{path.name}: unknown corpus keys {sorted(unknown)}"
    raw = copy.deepcopy(stack_raw(spec["base"]))
    for target, value in (spec.get("set") or {}).items():
        node, last = _parent(raw, target)
        node[last] = value
    for target, (text, times) in (spec.get("repeat") or {}).items():
        # A long value without a long file: `repeat: {path: [text, times]}`.
        node, last = _parent(raw, target)
        node[last] = text * times
    for target in spec.get("delete") or []:
        node, last = _parent(raw, target)
        del node[last]
    for target, item in (spec.get("append") or {}).items():
        node, last = _parent(raw, target)
        node[last].append(item)
    return BadCase(
        name=path.stem,
        why=spec["why"],
        base=spec["base"],
        raw=raw,
        expected=list(spec["expected"]),
        unset_secrets=tuple(spec.get("unset_secrets") or ()),
        stack=spec.get("stack"),
    )


def corpus() -> list[BadCase]:
    return [load_case(p) for p in sorted(BAD_DIR.glob("*.yaml"))]


def with_robot_regions(raw: dict[str, Any], count: int, environment: str = "dev") -> dict[str, Any]:
    """`raw` with `count` more Kura regions, each on a Robot fleet of its own with an ordered Robot
    failover IP: each runs a failover watcher polling the stack's Robot account."""
    raw = copy.deepcopy(raw)
    template = next(f for f in raw["fleets"] if f["vendor"] == "robot")
    for n in range(count):
        fleet = {k: v for k, v in copy.deepcopy(template).items() if k not in ("labels", "taints")}
        fleet.update(name=f"kura-robot-{n}", marker=f"tuist-kura-robot{n}-{environment}-", size=2)
        fleet["node_pool"] = fleet["name"]
        raw["fleets"].append(fleet)
        ip = {"name": f"kura-peer-fsn{n}", "vendor": "robot", "fleet": fleet["name"]}
        raw["failover_ips"].append({**ip, "address": f"88.99.0.{40 + n}"})
        host = (
            f"eu-fsn{n}.{environment}.kura.tuist.dev"
            if environment != "production"
            else f"eu-fsn{n}.kura.tuist.dev"
        )
        raw["regions"].append(
            {
                "id": f"eu-fsn{n}",
                "cluster_id": f"eu-fsn{n}-1",
                "fleet": fleet["name"],
                "ingress_class": f"kura-eu-fsn{n}",
                "egress_burst_mbps": 500,
                "host": host,
                "failover_ip": ip["name"],
            }
        )
    return raw
