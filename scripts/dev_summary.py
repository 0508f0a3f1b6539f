"""A short summary of what a stack made, read from its outputs (docs/outputs.md).

    pulumi stack output -s dev --json | python scripts/dev_summary.py

Prints three tables: fleets with their boxes and nodes, regions with their failover IP and where it
is routed, runner pools with their capacity. It reads only the published outputs contract, so it
works for any stack another team could read.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table


def fleet_table(outputs: dict[str, Any]) -> Table:
    table = Table(title="fleets", title_justify="left")
    for column in ("fleet", "vendor", "box", "datacenter", "public IPv4", "node", "provider id"):
        table.add_column(column)
    for name, fleet in sorted((outputs.get("fleets") or {}).items()):
        machines = fleet.get("machines") or []
        if not fleet.get("enabled", True):
            table.add_row(name, fleet.get("vendor", ""), "parked", "", "", "", "")
        elif not machines:
            table.add_row(name, fleet.get("vendor", ""), "no boxes", "", "", "", "")
        for machine in machines:
            table.add_row(
                name,
                str(machine.get("vendor") or fleet.get("vendor", "")),
                str(machine.get("box_id") or ""),
                str(machine.get("datacenter") or ""),
                str(machine.get("public_ipv4") or ""),
                str(machine.get("node_name") or ""),
                str(machine.get("provider_id") or ""),
            )
    return table


def region_table(outputs: dict[str, Any]) -> Table:
    table = Table(title="regions", title_justify="left")
    for column in ("region", "host", "exposed", "failover IP", "routed to", "pool"):
        table.add_column(column)
    for rid, region in sorted((outputs.get("regions") or {}).items()):
        table.add_row(
            rid,
            str(region.get("host") or ""),
            "yes" if region.get("exposed") else "no",
            str(region.get("failover_ip") or ("none (private)" if region.get("private") else "parked")),
            str(region.get("failover_routed_to") or "-"),
            str(region.get("node_pool") or ""),
        )
    return table


def runner_table(outputs: dict[str, Any]) -> Table:
    capacity = outputs.get("capacity") or {}
    table = Table(title="runner pools", title_justify="left")
    for column in ("pool", "fleet", "slots", "warm floor", "max replicas"):
        table.add_column(column)
    for name, pool in sorted((capacity.get("runner_pools") or {}).items()):
        table.add_row(
            name,
            str(pool.get("fleet") or ""),
            str(pool.get("slots")),
            str(pool.get("min_warm_pool_floor")),
            str(pool.get("max_replicas")),
        )
    total = capacity.get("total") or {}
    table.caption = (
        f"environment total: {total.get('runner_slots', 0)} runner slots, "
        f"EUR {total.get('monthly_eur') or '0'}/month + EUR {total.get('setup_eur') or '0'} setup"
    )
    return table


def main() -> int:
    outputs = json.load(sys.stdin)
    console = Console(width=max(Console().width, 120))
    console.print(f"stack outputs v{outputs.get('outputs_version')} ({outputs.get('environment')})")
    for table in (fleet_table(outputs), region_table(outputs), runner_table(outputs)):
        console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
