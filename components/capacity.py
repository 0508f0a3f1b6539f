"""Runner capacity and fleet cost: pure functions of the stack config.

A runner slot is one microVM of 1 vCPU / 4 GiB (seed 003), so a host offers
min(threads, memory_gib // 4) slots: AX42-U (16 threads, 64 GiB) -> 16, AX162-R
(96 threads, 256 GiB) -> 64. Money stays Decimal end to end and leaves as a string
with two decimals, so stack outputs never carry float rounding.

Slots are seed 003's planning unit and ignore the kata-qemu pod overhead
(components/runners.py KATA_POD_OVERHEAD, 2560Mi): the scheduler charges a 4 GiB pod
6.5 GiB, so a 64 GiB AX42-U actually places about 9 such pods, not 16.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from config.models import Fleet, Hardware, RunnerPool, StackConfig

SLOT_THREADS = 1
SLOT_MEMORY_GIB = 4

# The RunnerPool CRD defaults (components/runners.py renders them into the schema);
# capacity reports what the controller will actually use when config leaves a field unset.
DEFAULT_MIN_WARM_POOL_FLOOR = 1
DEFAULT_SCALE_DOWN_COOLDOWN_SECONDS = 300

_CENT = Decimal("0.01")


def slots_per_host(hardware: Hardware) -> int:
    return min(hardware.threads // SLOT_THREADS, hardware.memory_gib // SLOT_MEMORY_GIB)


def fleet_slots(fleet: Fleet) -> int:
    """Slots the fleet offers right now: a parked fleet adopts nothing, so it offers none."""
    if not fleet.enabled:
        return 0
    return slots_per_host(fleet.hardware) * fleet.size


@dataclass(frozen=True)
class FleetCost:
    monthly_eur: Decimal | None
    setup_eur: Decimal | None


def fleet_cost(fleet: Fleet) -> FleetCost:
    """size x pricing; a parked fleet's boxes are still ordered and billed monthly."""
    if fleet.pricing is None:
        return FleetCost(monthly_eur=None, setup_eur=None)
    return FleetCost(
        monthly_eur=fleet.pricing.monthly_eur * fleet.size,
        setup_eur=fleet.pricing.setup_eur * fleet.size,
    )


def effective_min_warm_pool_floor(pool: RunnerPool) -> int:
    floor = pool.autoscaling.min_warm_pool_floor
    return DEFAULT_MIN_WARM_POOL_FLOOR if floor is None else floor


def effective_scale_down_cooldown_seconds(pool: RunnerPool) -> int:
    cooldown = pool.autoscaling.scale_down_cooldown_seconds
    return DEFAULT_SCALE_DOWN_COOLDOWN_SECONDS if cooldown is None else cooldown


def _fleet_shape(fleet: Fleet) -> str:
    shape = f"{fleet.size} x {fleet.hardware.offer}, {slots_per_host(fleet.hardware)} slots each"
    return shape if fleet.enabled else f"parked, {shape}"


def capacity_problems(cfg: StackConfig) -> list[str]:
    """One line per pool that could ask for more microVMs than its fleet can host.

    Lines use the config error format (`<path>: <problem>`). A pool naming an unknown
    fleet is left to the loader's reference check; an unset max_replicas is not
    checked because the controller treats it as autoscaling off.
    """
    fleets = {f.name: f for f in cfg.fleets}
    problems: list[str] = []
    for i, pool in enumerate(cfg.runner_pools):
        fleet = fleets.get(pool.fleet)
        max_replicas = pool.autoscaling.max_replicas
        if fleet is None or max_replicas is None:
            continue
        slots = fleet_slots(fleet)
        if max_replicas > slots:
            problems.append(
                f"runner_pools[{i}].autoscaling.max_replicas: {max_replicas} exceeds the {slots} slots"
                f" of fleet '{fleet.name}' ({_fleet_shape(fleet)})"
            )
    return problems


def _money(amount: Decimal | None) -> str | None:
    return None if amount is None else str(amount.quantize(_CENT))


def capacity_outputs(cfg: StackConfig) -> dict[str, Any]:
    """The `capacity` stack output: per fleet, per runner pool, and environment totals.

    Totals add up the fleets that have pricing; runner_slots counts each fleet that
    hosts at least one runner pool once.
    """
    fleets: dict[str, Any] = {}
    monthly_total = Decimal(0)
    setup_total = Decimal(0)
    for fleet in cfg.fleets:
        cost = fleet_cost(fleet)
        fleets[fleet.name] = {
            "hosts": fleet.size,
            "slots_per_host": slots_per_host(fleet.hardware),
            "slots": fleet_slots(fleet),
            "monthly_eur": _money(cost.monthly_eur),
            "setup_eur": _money(cost.setup_eur),
        }
        monthly_total += cost.monthly_eur or 0
        setup_total += cost.setup_eur or 0

    by_name = {f.name: f for f in cfg.fleets}
    runner_pools: dict[str, Any] = {}
    runner_fleets: set[str] = set()
    for pool in cfg.runner_pools:
        pool_fleet = by_name.get(pool.fleet)
        runner_pools[pool.name] = {
            "fleet": pool.fleet,
            "slots": 0 if pool_fleet is None else fleet_slots(pool_fleet),
            "min_warm_pool_floor": effective_min_warm_pool_floor(pool),
            "max_replicas": pool.autoscaling.max_replicas,
        }
        if pool_fleet is not None:
            runner_fleets.add(pool_fleet.name)

    return {
        "fleets": fleets,
        "runner_pools": runner_pools,
        "total": {
            "monthly_eur": _money(monthly_total),
            "setup_eur": _money(setup_total),
            "runner_slots": sum(fleet_slots(by_name[name]) for name in sorted(runner_fleets)),
        },
    }
