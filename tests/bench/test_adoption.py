"""The adoption benchmark's parts (bench/adoption.py): what it measures and what it builds. The
benchmark itself runs the engine for minutes and is not part of the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.adoption import (
    FLEETS,
    MARKERS,
    PROBE,
    REPO,
    bench_inventory,
    bench_stack,
    count_calls,
    phase_times,
)
from config.loader import load_stack_config
from vendorsim.inventory import load_inventory


def line(step: str, slot: str, start: float, end: float) -> dict[str, object]:
    return {"step": step, "slot": slot, "start": start, "end": end, "ok": True}


def test_phase_and_critical_path_from_the_providers_timings() -> None:
    timings = [
        line("claim.create", "a", 10.0, 11.0),
        line("claim.create", "b", 10.5, 12.0),
        line("machine.create", "a", 11.2, 15.0),  # a: 1.0 + 3.8 = 4.8 s of its own
        line("machine.create", "b", 12.1, 14.0),  # b: 1.5 + 1.9 = 3.4 s
        line("claim.delete", "a", 20.0, 30.0),  # another command's step: not counted
    ]
    phase, critical, own = phase_times(timings, "claim.create", "machine.create")
    assert phase == 5.0  # 10.0 .. 15.0
    assert round(critical, 6) == 4.8
    assert {k: round(v, 6) for k, v in own.items()} == {"a": 4.8, "b": 3.4}
    assert phase_times([], "claim.create", "machine.create") == (0.0, 0.0, {})


def test_listings_are_told_from_calls_on_one_box() -> None:
    calls = [
        {"vendor": "dedibox", "method": "GET", "path": "/dedibox/v1/zones/fr-par-2/servers?page=1"},
        {"vendor": "dedibox", "method": "GET", "path": "/dedibox/v1/zones/fr-par-2/servers/200101"},
        {"vendor": "dedibox", "method": "POST", "path": "/dedibox/v1/zones/fr-par-2/servers/200101/tags"},
        {"vendor": "ovh", "method": "GET", "path": "/ovh/1.0/dedicated/server"},
        {"vendor": "ovh", "method": "GET", "path": "/ovh/1.0/dedicated/server/ns3000.ip-203-0-113.net"},
    ]
    assert count_calls(calls, "dedibox") == (3, 1)
    assert count_calls(calls, "ovh") == (2, 1)


@pytest.mark.parametrize("vendor", ["dedibox", "ovh"])
def test_the_generated_inventory_and_stack_are_valid(tmp_path: Path, vendor: str) -> None:
    dev = yaml.safe_load((REPO / "vendorsim" / "inventory.dev.yaml").read_text())
    doc = bench_inventory(dev, vendor=vendor, boxes=64, prefix="198.18.200", ssh_port=2299, api_ms=100)
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc))
    load_inventory(path)  # raises on any problem (duplicate ids or IPs, dangling references)
    servers = doc[vendor]["servers"]
    assert len(servers) == 7 + 64
    # The dev fleet's three free ones and one another stack claimed, and N more.
    marked = [s for s in servers if MARKERS[vendor] in (s.get("tags") or [s.get("display_name", "")[:18]])]
    assert len(marked) == 4 + 64
    assert {s["ip"].rsplit(".", 1)[0] for s in servers} == {"198.18.200"}
    assert doc["faults"] == [{"vendor": vendor, "latency_ms": 100}]
    others = [v for v in ("ovh", "dedibox", "robot", "scaleway_em", "applesilicon") if v != vendor]
    assert all(not doc[v]["servers"] for v in others)

    stack = bench_stack(
        yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text()),
        vendor=vendor,
        boxes=16,
        port=9999,
        ssh_port=2299,
    )
    config = stack["config"]
    fleets = {f["name"]: f for f in config["tuist-infra:fleets"]}
    fleet = FLEETS[vendor]
    assert fleets[fleet]["size"] == 16 and fleets[fleet]["ssh_port"] == 2299
    assert [name for name, f in fleets.items() if f.get("enabled", True)] == [fleet]
    assert "127.0.0.1:8710" not in json.dumps(config)
    plain = {k.split(":", 1)[1]: v for k, v in config.items() if not (isinstance(v, dict) and "secure" in v)}
    load_stack_config(plain, stack=f"bench-{vendor}-n16")  # raises on any problem


def test_the_probe_times_provider_calls_in_any_process(tmp_path: Path) -> None:
    timings = tmp_path / "timings.jsonl"
    script = (
        "from providers.machine.provider import ClaimProvider\n"
        "try:\n"
        "    ClaimProvider().create({'resource_name': 'kura-dedibox-0'})\n"
        "except Exception as error:\n"
        "    print(type(error).__name__)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{PROBE}:{REPO}", "BENCH_TIMINGS": str(timings)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip()  # the create failed (bad inputs), and its time was still written
    [entry] = [json.loads(x) for x in timings.read_text().splitlines()]
    assert entry["step"] == "claim.create" and entry["slot"] == "kura-dedibox-0" and entry["ok"] is False
    assert entry["end"] >= entry["start"]
