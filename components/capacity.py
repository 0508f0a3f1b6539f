"""Runner capacity and fleet cost: pure functions of the stack config.

Capacity is the scheduler's own arithmetic. A runner pod costs its node its requests plus the
kata-qemu RuntimeClass overhead (components/runner_pool.py), charged against the node's
allocatable, which the kubelet computes as its capacity less its reservations:
- capacity: every thread, and the memory the kernel reports (MemTotal), which is not the DIMMs'
  size: the kernel's page descriptors take 1/64 of it (64 bytes per 4 KiB page) and firmware, the
  kernel image and the crash kernel about 512 MiB more (`kernel_memory_mib`);
- reservations: the self-join's `systemReserved` and `kubeReserved` (500m / 1Gi each,
  providers/ssh/scripts/self-join.sh) and the default hard-eviction threshold, memory.available
  100Mi.
A pool fits `min(cpu // pod cpu, memory // pod memory)` pods per box.

A slot is seed 003's planning unit, one microVM of the standard runner shape (1 vCPU / 4 GiB
including its overhead): the RunnerPool default size, 900m / 3744Mi plus 50m / 320Mi of overhead
= 950m / 4064Mi. The seed's "~16 per AX42-U" and "~64 per AX162-R" are the boxes' DIMMs divided by
4 GiB; what their kubelets can place is 15 (16 threads, 64 GiB: memory- and CPU-bound) and 62 (96
threads, 256 GiB: memory-bound). Money stays Decimal end to end and leaves as a string with two
decimals, so stack outputs never carry float rounding.

On a Mac a slot is one macOS VM of the standard macOS runner (the RunnerPool CRD's defaults, 8000m /
14336 MB: config.models.DARWIN_POD_DEFAULTS), and never more than two per Mac: Apple's macOS licence
allows two virtualised copies of macOS on each Mac it runs on, whatever the hardware would hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from components.runner_pool import KATA_OVERHEAD_CPU_MILLI, KATA_OVERHEAD_MEMORY_MIB
from config.models import Fleet, Hardware, RunnerOS, RunnerPool, StackConfig

# The kubelet's default hard eviction threshold (memory.available<100Mi) comes off allocatable.
KUBELET_EVICTION_MEMORY_MIB = 100
# The self-join's KubeletConfiguration reservations (providers/ssh/scripts/self-join.sh), as written.
KUBELET_RESERVED = {
    "systemReserved": {"cpu": "500m", "memory": "1Gi"},
    "kubeReserved": {"cpu": "500m", "memory": "1Gi"},
}
RESERVED_CPU_MILLI = 500 + 500
RESERVED_MEMORY_MIB = 1024 + 1024
# Firmware-reserved ranges, the kernel image and the crash kernel: what MemTotal lacks beyond the
# page descriptors (a 64 GiB box reports about 62.5 GiB).
KERNEL_FIXED_MEMORY_MIB = 512
# Apple's macOS software licence: at most two additional copies of macOS in VMs on each Mac.
MACOS_VMS_PER_HOST = 2

# The RunnerPool CRD defaults (components/runners.py renders them into the schema);
# capacity reports what the controller will actually use when config leaves a field unset.
DEFAULT_MIN_WARM_POOL_FLOOR = 1
DEFAULT_SCALE_DOWN_COOLDOWN_SECONDS = 300

_CENT = Decimal("0.01")


@dataclass(frozen=True)
class Allocatable:
    cpu_milli: int
    memory_mib: int


def kernel_memory_mib(hardware: Hardware) -> int:
    """The box's MemTotal, which the kubelet reports as its memory capacity: the DIMMs less the
    kernel's page descriptors (1/64) and its fixed reservations."""
    installed = hardware.memory_gib * 1024
    return installed - installed // 64 - KERNEL_FIXED_MEMORY_MIB


def allocatable(hardware: Hardware) -> Allocatable:
    """What the kubelet of a self-joined (Linux) box with this hardware reports as allocatable."""
    return Allocatable(
        cpu_milli=hardware.threads * 1000 - RESERVED_CPU_MILLI,
        memory_mib=kernel_memory_mib(hardware) - RESERVED_MEMORY_MIB - KUBELET_EVICTION_MEMORY_MIB,
    )


def _mac_allocatable(hardware: Hardware) -> Allocatable:
    """A Mac's: its node agent runs no kubelet reservations; the licence caps it long before."""
    return Allocatable(
        cpu_milli=hardware.threads * 1000, memory_mib=hardware.memory_gib * 1024 - KUBELET_EVICTION_MEMORY_MIB
    )


def pod_footprint(pool: RunnerPool) -> Allocatable:
    """What the scheduler charges a node for one of the pool's pods: requests plus, for a Linux
    (kata-qemu) pool, the RuntimeClass overhead."""
    kata = pool.os is RunnerOS.LINUX
    return Allocatable(
        cpu_milli=pool.pod_cpu_milli + (KATA_OVERHEAD_CPU_MILLI if kata else 0),
        memory_mib=pool.pod_memory_mb + (KATA_OVERHEAD_MEMORY_MIB if kata else 0),
    )


def pods_per_host(hardware: Hardware, pool: RunnerPool) -> int:
    darwin = pool.os is RunnerOS.DARWIN
    room, pod = (_mac_allocatable if darwin else allocatable)(hardware), pod_footprint(pool)
    fits = max(0, min(room.cpu_milli // pod.cpu_milli, room.memory_mib // pod.memory_mib))
    return min(fits, MACOS_VMS_PER_HOST) if darwin else fits


# The standard runner pods: a Linux and a macOS pool at the RunnerPool defaults.
STANDARD_POOL = RunnerPool(
    name="slot", os=RunnerOS.LINUX, fleet="slot", dispatch_label="slot", image="slot@sha256:" + "0" * 64
)
STANDARD_MACOS_POOL = RunnerPool(
    name="slot", os=RunnerOS.DARWIN, fleet="slot", dispatch_label="slot", image="slot@sha256:" + "0" * 64
)


def fleet_os(fleet: Fleet) -> RunnerOS:
    """What runs on the fleet's boxes: macOS on Apple silicon, Linux everywhere else."""
    return RunnerOS.DARWIN if fleet.is_macos else RunnerOS.LINUX


def slots_per_host(hardware: Hardware, os: RunnerOS = RunnerOS.LINUX) -> int:
    return pods_per_host(hardware, STANDARD_MACOS_POOL if os is RunnerOS.DARWIN else STANDARD_POOL)


def fleet_slots(fleet: Fleet) -> int:
    """Slots the fleet offers right now: a parked fleet adopts nothing, so it offers none."""
    if not fleet.enabled:
        return 0
    return slots_per_host(fleet.hardware, fleet_os(fleet)) * fleet.size


def pool_slots(pool: RunnerPool, fleet: Fleet) -> int:
    """How many of the pool's pods its fleet holds right now (0 while parked)."""
    if not fleet.enabled:
        return 0
    return pods_per_host(fleet.hardware, pool) * fleet.size


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
    shape = (
        f"{fleet.size} x {fleet.hardware.offer}, {slots_per_host(fleet.hardware, fleet_os(fleet))} slots each"
    )
    return shape if fleet.enabled else f"parked, {shape}"


def capacity_problems(cfg: StackConfig) -> list[str]:
    """One line per pool that could ask for more microVMs than its fleet can host, then one per fleet
    whose pools could together.

    Lines use the config error format (`<path>: <problem>`). A pool naming an unknown
    fleet is left to the loader's reference check; an unset max_replicas is not
    checked because the controller treats it as autoscaling off.

    Pools on one fleet share its boxes: at their max_replicas each fills max_replicas / pods_per_host
    boxes' worth, and together they must fit the fleet's size. When their pods are the same size
    that is their max_replicas summed against the fleet's pods; the line for a fleet whose pools
    overflow it together names each pool, at the first one's max_replicas.
    """
    fleets = {f.name: f for f in cfg.fleets}
    problems: list[str] = []
    sharing: dict[str, list[tuple[int, RunnerPool, int]]] = {}
    for i, pool in enumerate(cfg.runner_pools):
        fleet = fleets.get(pool.fleet)
        max_replicas = pool.autoscaling.max_replicas
        if fleet is None or max_replicas is None:
            continue
        if max_replicas > 0:
            sharing.setdefault(fleet.name, []).append((i, pool, max_replicas))
        slots = pool_slots(pool, fleet)
        if max_replicas > slots:
            per_host = pods_per_host(fleet.hardware, pool)
            foot = pod_footprint(pool)
            problems.append(
                f"runner_pools[{i}].autoscaling.max_replicas: {max_replicas} exceeds the {slots} pods"
                f" of fleet '{fleet.name}' ({_fleet_shape(fleet)}; {per_host} of this pool's pods of"
                f" {foot.cpu_milli}m / {foot.memory_mib}Mi with overhead fit a host)"
            )
    for fleet in cfg.fleets:
        pools = sharing.get(fleet.name, [])
        if line := _shared_fleet_problem(fleet, pools):
            problems.append(line)
    return problems


def _shared_fleet_problem(fleet: Fleet, pools: list[tuple[int, RunnerPool, int]]) -> str | None:
    """The line for the pools (index, pool, max_replicas > 0) on `fleet` that could together ask for
    more than it holds. None when they fit, when there is one pool (its own line covers it), or when
    one of them cannot be placed at all (its own line says so: a parked fleet, a pod no box holds)."""
    per_host = [pods_per_host(fleet.hardware, pool) for _, pool, _ in pools]
    if len(pools) < 2 or not fleet.enabled or 0 in per_host:
        return None
    boxes = sum(Fraction(m, n) for (_, _, m), n in zip(pools, per_host, strict=True))
    if boxes <= fleet.size:
        return None
    first = f"runner_pools[{pools[0][0]}].autoscaling.max_replicas"
    shape = _fleet_shape(fleet)
    if len(set(per_host)) == 1:
        # As many of each pool's pods fit a box: the fleet holds that many a box, the maxima add up.
        terms = " + ".join(f"runner_pools[{i}] '{pool.name}' {m}" for i, pool, m in pools)
        total = sum(m for _, _, m in pools)
        return (
            f"{first}: {total} ({terms}) exceeds the {per_host[0] * fleet.size} pods of their shared"
            f" fleet '{fleet.name}' ({shape}; {per_host[0]} of these pools' pods with overhead fit a host)"
        )
    terms = " + ".join(
        f"runner_pools[{i}] '{pool.name}' {m} ({n} a host)"
        for (i, pool, m), n in zip(pools, per_host, strict=True)
    )
    need = math.ceil(boxes * 100) / 100  # rounded up: a shown need never fits when the real one does not
    return (
        f"{first}: {terms} together need {need:.2f} hosts, more than the {fleet.size} of their shared"
        f" fleet '{fleet.name}' ({shape})"
    )


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
            "os": fleet_os(fleet).value,
            "slots_per_host": slots_per_host(fleet.hardware, fleet_os(fleet)),
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
            "os": pool.os.value,
            # The fleet's slots (the outputs contract); capacity_problems checks the pool's own size
            # and, with the other pools on its fleet, their sum.
            "slots": 0 if pool_fleet is None else fleet_slots(pool_fleet),
            # The pool's own pods one box holds (its pod size; a Mac holds at most two macOS VMs).
            "pods_per_host": 0 if pool_fleet is None else pods_per_host(pool_fleet.hardware, pool),
            "min_warm_pool_floor": effective_min_warm_pool_floor(pool),
            "max_replicas": pool.autoscaling.max_replicas,
        }
        if pool_fleet is not None:
            runner_fleets.add(pool_fleet.name)
    by_os = {os.value: 0 for os in RunnerOS}
    for name in sorted(runner_fleets):
        by_os[fleet_os(by_name[name]).value] += fleet_slots(by_name[name])

    return {
        "fleets": fleets,
        "runner_pools": runner_pools,
        "total": {
            "monthly_eur": _money(monthly_total),
            "setup_eur": _money(setup_total),
            "runner_slots": sum(fleet_slots(by_name[name]) for name in sorted(runner_fleets)),
            "runner_slots_by_os": by_os,
        },
    }
