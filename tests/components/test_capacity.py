"""Runner capacity and fleet cost: the pure math, then seed 003's numbers from the real stack files."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.capacity import (
    KUBELET_RESERVED,
    RESERVED_CPU_MILLI,
    RESERVED_MEMORY_MIB,
    Allocatable,
    allocatable,
    capacity_outputs,
    capacity_problems,
    effective_scale_down_cooldown_seconds,
    fleet_cost,
    fleet_slots,
    kernel_memory_mib,
    pod_footprint,
    pods_per_host,
    slots_per_host,
)
from config.loader import load_stack_config
from config.models import (
    Autoscaling,
    Cluster,
    Environment,
    Fleet,
    Hardware,
    Kura,
    Pricing,
    RobotAccount,
    RunnerOS,
    RunnerPool,
    StackConfig,
    Vendor,
    Vendors,
)

REPO = Path(__file__).resolve().parents[2]
AX42_U = Hardware(offer="AX42-U", threads=16, memory_gib=64)
AX162_R = Hardware(offer="AX162-R", threads=96, memory_gib=256)
IMAGE = "ghcr.io/tuist/linux-runner@sha256:" + "c" * 64


def robot_fleet(name: str = "runners-linux", **overrides: Any) -> Fleet:
    fields: dict[str, Any] = {
        "name": name,
        "vendor": Vendor.ROBOT,
        "marker": "tuist-bm-production-",
        "size": 2,
        "node_pool": name,
        "hardware": AX162_R,
        "pricing": Pricing(monthly_eur=Decimal("395"), setup_eur=Decimal("295")),
    }
    fields.update(overrides)
    return Fleet(**fields)


def pool(name: str = "linux", fleet: str = "runners-linux", **autoscaling: Any) -> RunnerPool:
    return RunnerPool(
        name=name,
        os=RunnerOS.LINUX,
        fleet=fleet,
        dispatch_label=f"tuist-{name}",
        image=IMAGE,
        autoscaling=Autoscaling(**autoscaling),
    )


def stack(fleets: list[Fleet], pools: list[RunnerPool]) -> StackConfig:
    return StackConfig(
        environment=Environment.PRODUCTION,
        vendors=Vendors(robot=RobotAccount(username="robot")),
        fleets=fleets,
        runner_pools=pools,
        kura=Kura(runtime_image_tag="1.0.0", controller_image="ghcr.io/tuist/kura-controller:1.0.0"),
        cluster=Cluster(runners_controller_image="ghcr.io/tuist/runners-controller:1.0.0"),
    )


# --- slots --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hardware", "slots"),
    [
        (AX42_U, 15),  # 15000m // 950m, and 61852Mi // 4064Mi
        (AX162_R, 62),  # memory-bound: 96 threads but (257536 - 2148)Mi // 4064Mi
        (Hardware(offer="thread-bound", threads=8, memory_gib=128), 7),  # (8000 - 1000)m // 950m
        (Hardware(offer="odd-memory", threads=32, memory_gib=30), 6),  # 27580Mi: whole slots only
    ],
)
def test_slots_per_host_is_one_vcpu_and_four_gib_per_slot(hardware: Hardware, slots: int) -> None:
    assert slots_per_host(hardware) == slots


def test_a_slot_is_the_default_pod_plus_the_kata_overhead_within_1_vcpu_and_4_gib() -> None:
    # Seed 003: "~50 MiB VMM overhead" on a "4 GiB Pod allocation" at "1 vCPU / 4 GB".
    foot = pod_footprint(pool())
    assert foot.cpu_milli <= 1000 and foot.memory_mib <= 4096
    assert pod_footprint(pool()).memory_mib - pool().pod_memory_mb == 256 + 64


def test_the_overhead_is_charged_so_a_4_gib_request_does_not_fit_16_on_an_ax42_u() -> None:
    full = pool().model_copy(update={"pod_cpu_milli": 1000, "pod_memory_mb": 4096})
    assert pods_per_host(AX42_U, full) == 14


def test_a_macos_pool_pays_no_kata_overhead() -> None:
    mac = pool().model_copy(update={"os": RunnerOS.DARWIN, "pod_cpu_milli": 4000, "pod_memory_mb": 16384})
    assert (pod_footprint(mac).cpu_milli, pod_footprint(mac).memory_mib) == (4000, 16384)


def test_fleet_slots_multiply_by_size() -> None:
    assert fleet_slots(robot_fleet(size=2)) == 124
    assert fleet_slots(robot_fleet(size=0)) == 0


def test_a_parked_fleet_offers_no_slots() -> None:
    assert fleet_slots(robot_fleet(enabled=False)) == 0


# --- capacity problems --------------------------------------------------------------


def test_max_replicas_above_fleet_slots_is_a_config_error() -> None:
    cfg = stack([robot_fleet()], [pool(max_replicas=130)])
    assert capacity_problems(cfg) == [
        "runner_pools[0].autoscaling.max_replicas: 130 exceeds the 124 pods of fleet 'runners-linux'"
        " (2 x AX162-R, 62 slots each; 62 of this pool's pods of 950m / 4064Mi with overhead fit a host)"
    ]


def test_max_replicas_equal_to_fleet_slots_is_fine() -> None:
    assert capacity_problems(stack([robot_fleet()], [pool(max_replicas=124)])) == []


def test_max_replicas_on_a_parked_fleet_is_a_config_error() -> None:
    cfg = stack([robot_fleet(enabled=False, size=1, hardware=AX42_U)], [pool(max_replicas=14)])
    assert capacity_problems(cfg) == [
        "runner_pools[0].autoscaling.max_replicas: 14 exceeds the 0 pods of fleet 'runners-linux'"
        " (parked, 1 x AX42-U, 15 slots each; 15 of this pool's pods of 950m / 4064Mi with overhead"
        " fit a host)"
    ]


def test_zero_or_unset_max_replicas_never_exceeds() -> None:
    cfg = stack([robot_fleet(enabled=False)], [pool("a", max_replicas=0), pool("b")])
    assert capacity_problems(cfg) == []


def test_problems_name_the_pool_by_index() -> None:
    small = robot_fleet("runners-small", size=1, hardware=AX42_U)
    cfg = stack(
        [robot_fleet(), small], [pool("ok", max_replicas=100), pool("big", "runners-small", max_replicas=16)]
    )
    assert capacity_problems(cfg) == [
        "runner_pools[1].autoscaling.max_replicas: 16 exceeds the 15 pods of fleet 'runners-small'"
        " (1 x AX42-U, 15 slots each; 15 of this pool's pods of 950m / 4064Mi with overhead fit a host)"
    ]


def test_pools_on_one_fleet_share_its_pods() -> None:
    # Each fits the 124 pods alone; together they could ask for 130.
    cfg = stack([robot_fleet()], [pool("a", max_replicas=100), pool("b", max_replicas=30)])
    assert capacity_problems(cfg) == [
        "runner_pools[0].autoscaling.max_replicas: 130 (runner_pools[0] 'a' 100 + runner_pools[1] 'b' 30)"
        " exceeds the 124 pods of their shared fleet 'runners-linux' (2 x AX162-R, 62 slots each; 62 of"
        " these pools' pods with overhead fit a host)"
    ]


def test_pools_that_fill_their_fleet_exactly_are_fine() -> None:
    cfg = stack([robot_fleet()], [pool("a", max_replicas=100), pool("b", max_replicas=24)])
    assert capacity_problems(cfg) == []


def test_the_shared_line_names_every_pool_on_the_fleet_and_only_those() -> None:
    small = robot_fleet("runners-small", size=1, hardware=AX42_U)
    pools = [
        pool("a", max_replicas=62),
        pool("other", "runners-small", max_replicas=15),
        pool("off", max_replicas=0),  # autoscaler off: asks for nothing
        pool("unset"),
        pool("b", max_replicas=40),
        pool("c", max_replicas=40),
    ]
    assert capacity_problems(stack([robot_fleet(), small], pools)) == [
        "runner_pools[0].autoscaling.max_replicas: 142 (runner_pools[0] 'a' 62 + runner_pools[4] 'b' 40"
        " + runner_pools[5] 'c' 40) exceeds the 124 pods of their shared fleet 'runners-linux'"
        " (2 x AX162-R, 62 slots each; 62 of these pools' pods with overhead fit a host)"
    ]


def test_a_pool_too_big_alone_is_named_alone_and_with_the_others() -> None:
    cfg = stack([robot_fleet()], [pool("a", max_replicas=125), pool("b", max_replicas=1)])
    assert capacity_problems(cfg) == [
        "runner_pools[0].autoscaling.max_replicas: 125 exceeds the 124 pods of fleet 'runners-linux'"
        " (2 x AX162-R, 62 slots each; 62 of this pool's pods of 950m / 4064Mi with overhead fit a host)",
        "runner_pools[0].autoscaling.max_replicas: 126 (runner_pools[0] 'a' 125 + runner_pools[1] 'b' 1)"
        " exceeds the 124 pods of their shared fleet 'runners-linux' (2 x AX162-R, 62 slots each; 62 of"
        " these pools' pods with overhead fit a host)",
    ]


def test_pools_of_different_pod_sizes_share_the_fleet_in_hosts() -> None:
    # 62 standard pods a host; 11 of 8000m / 16000Mi (CPU-bound: 95000m // 8050m with overhead).
    # 100 / 62 + 20 / 11 = 3.431... hosts, shown rounded up, of the 2.
    big = pool("big", max_replicas=20).model_copy(update={"pod_cpu_milli": 8000, "pod_memory_mb": 16000})
    assert pods_per_host(AX162_R, big) == 11
    cfg = stack([robot_fleet()], [pool("a", max_replicas=100), big])
    assert capacity_problems(cfg) == [
        "runner_pools[0].autoscaling.max_replicas: runner_pools[0] 'a' 100 (62 a host) + runner_pools[1]"
        " 'big' 20 (11 a host) together need 3.44 hosts, more than the 2 of their shared fleet"
        " 'runners-linux' (2 x AX162-R, 62 slots each)"
    ]
    # Half the fleet each: 62 / 62 + 11 / 11 = 2 hosts.
    fits = [pool("a", max_replicas=62), big.model_copy(update={"autoscaling": Autoscaling(max_replicas=11)})]
    assert capacity_problems(stack([robot_fleet()], fits)) == []


def test_pools_on_a_parked_fleet_are_each_named_once() -> None:
    cfg = stack([robot_fleet(enabled=False)], [pool("a", max_replicas=1), pool("b", max_replicas=1)])
    assert [line.split(":")[0] for line in capacity_problems(cfg)] == [
        "runner_pools[0].autoscaling.max_replicas",
        "runner_pools[1].autoscaling.max_replicas",
    ]


# --- cost ---------------------------------------------------------------------------------


def test_fleet_cost_is_size_times_pricing_in_exact_decimals() -> None:
    fleet = robot_fleet(size=3, pricing=Pricing(monthly_eur=Decimal("0.10"), setup_eur=Decimal("0.20")))
    cost = fleet_cost(fleet)
    assert (cost.monthly_eur, cost.setup_eur) == (Decimal("0.30"), Decimal("0.60"))


def test_fleet_without_pricing_has_no_cost() -> None:
    cost = fleet_cost(robot_fleet(pricing=None))
    assert (cost.monthly_eur, cost.setup_eur) == (None, None)


def test_capacity_outputs_shape_and_money_strings() -> None:
    kura = robot_fleet("kura-eu", vendor=Vendor.ROBOT, size=1, hardware=AX42_U, pricing=None)
    cfg = stack([robot_fleet(), kura], [pool(min_warm_pool_floor=0, max_replicas=120)])
    assert capacity_outputs(cfg) == {
        "fleets": {
            "runners-linux": {
                "hosts": 2,
                "os": "linux",
                "slots_per_host": 62,
                "slots": 124,
                "monthly_eur": "790.00",
                "setup_eur": "590.00",
            },
            "kura-eu": {
                "hosts": 1,
                "os": "linux",
                "slots_per_host": 15,
                "slots": 15,
                "monthly_eur": None,
                "setup_eur": None,
            },
        },
        "runner_pools": {
            "linux": {
                "fleet": "runners-linux",
                "os": "linux",
                "slots": 124,
                "pods_per_host": 62,
                "min_warm_pool_floor": 0,
                "max_replicas": 120,
            }
        },
        "total": {
            "monthly_eur": "790.00",
            "setup_eur": "590.00",
            "runner_slots": 124,
            "runner_slots_by_os": {"linux": 124, "darwin": 0},
        },
    }


def test_unset_floor_reports_the_crd_default_and_unset_max_reports_null() -> None:
    out = capacity_outputs(stack([robot_fleet()], [pool()]))
    assert out["runner_pools"]["linux"] == {
        "fleet": "runners-linux",
        "os": "linux",
        "slots": 124,
        "pods_per_host": 62,
        "min_warm_pool_floor": 1,
        "max_replicas": None,
    }


def test_cooldown_defaults_to_300_and_keeps_an_explicit_zero() -> None:
    assert effective_scale_down_cooldown_seconds(pool()) == 300
    assert effective_scale_down_cooldown_seconds(pool(scale_down_cooldown_seconds=0)) == 0


def test_runner_slots_count_a_shared_fleet_once() -> None:
    out = capacity_outputs(stack([robot_fleet()], [pool("a"), pool("b")]))
    assert out["total"]["runner_slots"] == 124


# --- macOS on Apple silicon ----------------------------------------------------------------

M2_L = Hardware(offer="M2-L", threads=12, memory_gib=32)
M4_PRO = Hardware(offer="M4-PRO", threads=14, memory_gib=64)


def mac_fleet(hardware: Hardware = M2_L, size: int = 3) -> Fleet:
    return Fleet(
        name="runners-macos",
        vendor=Vendor.APPLESILICON,
        marker="tuist-macos-production",
        size=size,
        node_pool="runners-macos",
        hardware=hardware,
        pricing=Pricing(monthly_eur=Decimal("149.99")),
    )


def mac_pool(**fields: Any) -> RunnerPool:
    return RunnerPool(
        name="macos",
        os=RunnerOS.DARWIN,
        fleet="runners-macos",
        dispatch_label="tuist-macos",
        image="ghcr.io/tuist/macos-runner@sha256:" + "d" * 64,
        **fields,
    )


def test_a_darwin_pool_defaults_to_the_crds_macos_runner_size() -> None:
    assert (mac_pool().pod_cpu_milli, mac_pool().pod_memory_mb) == (8000, 14336)
    assert mac_pool(pod_cpu_milli=4000).pod_cpu_milli == 4000


@pytest.mark.parametrize(
    ("hardware", "pod", "per_host"),
    [
        # 12 threads hold one 8-core VM; no Tart overhead is charged (no RuntimeClass).
        (M2_L, {}, 1),
        # Room for three 4-core / 8 GB VMs, but Apple's licence stops at two per Mac.
        (M4_PRO, {"pod_cpu_milli": 4000, "pod_memory_mb": 8192}, 2),
        # Memory binds first: 32 GiB less eviction holds one 16 GiB VM... and a bit.
        (M2_L, {"pod_cpu_milli": 2000, "pod_memory_mb": 20000}, 1),
    ],
)
def test_a_mac_holds_what_fits_and_never_more_than_two_macos_vms(
    hardware: Hardware, pod: dict[str, int], per_host: int
) -> None:
    assert pods_per_host(hardware, mac_pool(**pod)) == per_host


def test_a_mac_fleet_reports_its_own_slots_pods_and_cost() -> None:
    cfg = stack([robot_fleet(), mac_fleet()], [pool(), mac_pool(autoscaling=Autoscaling(max_replicas=3))])
    out = capacity_outputs(cfg)
    assert out["fleets"]["runners-macos"] == {
        "hosts": 3,
        "os": "darwin",
        "slots_per_host": 1,
        "slots": 3,
        "monthly_eur": "449.97",
        "setup_eur": "0.00",
    }
    assert out["runner_pools"]["macos"] == {
        "fleet": "runners-macos",
        "os": "darwin",
        "slots": 3,
        "pods_per_host": 1,
        "min_warm_pool_floor": 1,
        "max_replicas": 3,
    }
    assert out["total"]["runner_slots_by_os"] == {"linux": 124, "darwin": 3}
    assert out["total"]["runner_slots"] == 127
    assert out["total"]["monthly_eur"] == "1239.97"
    assert capacity_problems(cfg) == []
    over = stack([mac_fleet()], [mac_pool(autoscaling=Autoscaling(max_replicas=4))])
    assert capacity_problems(over) == [
        "runner_pools[0].autoscaling.max_replicas: 4 exceeds the 3 pods of fleet 'runners-macos' "
        "(3 x M2-L, 1 slots each; 1 of this pool's pods of 8000m / 14336Mi with overhead fit a host)"
    ]


# --- seed 003's numbers from the real stack files -------------------------------------------


def load_stack(env: str) -> StackConfig:
    raw = yaml.safe_load((REPO / f"Pulumi.{env}.yaml").read_text())["config"]
    stripped = {key.removeprefix("tuist-infra:"): value for key, value in raw.items()}
    return load_stack_config(stripped)


def runner_fleet(cfg: StackConfig) -> str:
    (name,) = {p.fleet for p in cfg.runner_pools if p.os is RunnerOS.LINUX}
    return name


def linux_pool_out(out: dict[str, Any], cfg: StackConfig) -> dict[str, Any]:
    (name,) = [p.name for p in cfg.runner_pools if p.os is RunnerOS.LINUX]
    return out["runner_pools"][name]


@pytest.mark.parametrize("env", ["staging", "canary", "production"])
def test_stack_files_have_no_capacity_problems(env: str) -> None:
    assert capacity_problems(load_stack(env)) == []


def test_staging_runs_one_ax42_u_with_15_slots_at_57_a_month() -> None:
    cfg = load_stack("staging")
    out = capacity_outputs(cfg)
    assert out["fleets"][runner_fleet(cfg)] == {
        "hosts": 1,
        "os": "linux",
        "slots_per_host": 15,
        "slots": 15,
        "monthly_eur": "57.00",
        "setup_eur": "234.00",
    }


def test_canary_runs_one_ax42_u_with_floor_2_and_max_14() -> None:
    cfg = load_stack("canary")
    out = capacity_outputs(cfg)
    assert out["fleets"][runner_fleet(cfg)] == {
        "hosts": 1,
        "os": "linux",
        "slots_per_host": 15,
        "slots": 15,
        "monthly_eur": "57.00",
        "setup_eur": "234.00",
    }
    pool_out = linux_pool_out(out, cfg)
    assert (pool_out["min_warm_pool_floor"], pool_out["max_replicas"], pool_out["slots"]) == (2, 14, 15)


def test_production_runs_two_ax162_r_with_124_slots_floor_30_and_max_120() -> None:
    cfg = load_stack("production")
    out = capacity_outputs(cfg)
    assert out["fleets"][runner_fleet(cfg)] == {
        "hosts": 2,
        "os": "linux",
        "slots_per_host": 62,
        "slots": 124,
        "monthly_eur": "790.00",
        "setup_eur": "590.00",
    }
    pool_out = linux_pool_out(out, cfg)
    assert (pool_out["min_warm_pool_floor"], pool_out["max_replicas"], pool_out["slots"]) == (30, 120, 124)


def test_canary_and_production_runners_add_847_a_month_and_824_setup() -> None:
    # Seed 003: "Total Hetzner spend introduced by this PR: ~847/mo + 824 one-time".
    fleets = [(env, runner_fleet(load_stack(env))) for env in ("canary", "production")]
    outs = {env: capacity_outputs(load_stack(env))["fleets"][fleet] for env, fleet in fleets}
    monthly = sum(Decimal(o["monthly_eur"]) for o in outs.values())
    setup = sum(Decimal(o["setup_eur"]) for o in outs.values())
    assert (monthly, setup) == (Decimal("847.00"), Decimal("824.00"))


@pytest.mark.parametrize("env", ["staging", "canary", "production"])
def test_stack_files_scale_down_after_300_seconds(env: str) -> None:
    cfg = load_stack(env)
    assert {p.name: effective_scale_down_cooldown_seconds(p) for p in cfg.runner_pools} == {
        p.name: 300 for p in cfg.runner_pools
    }


# --- what the kubelet of a box reports ----------------------------------------------------------


def test_the_kernel_keeps_a_64th_of_the_dimms_and_half_a_gib_from_the_kubelets_capacity() -> None:
    # A 64 GiB box reports MemTotal of about 62.5 GiB (65,536,000 kB here): the seed's 16 slots of
    # 4 GiB were the DIMMs', not the kubelet's.
    assert kernel_memory_mib(AX42_U) == 64000
    assert allocatable(AX42_U) == Allocatable(cpu_milli=15000, memory_mib=64000 - 2048 - 100)


def test_the_model_counts_the_reservations_the_self_join_writes() -> None:
    """The self-join's KubeletConfiguration, as a box's kubelet reads it, holds back exactly what the
    model subtracts (and tests/cluster/test_k8s_runners.py gives the same to a kubelet)."""
    script = (REPO / "providers/ssh/scripts/self-join.sh").read_text()
    heredoc = script.split("kind: KubeletConfiguration\n", 1)[1].split("\nEOF\n", 1)[0]
    written = yaml.safe_load(heredoc)
    assert {key: written[key] for key in ("systemReserved", "kubeReserved")} == KUBELET_RESERVED
    cpu = sum(int(r["cpu"].removesuffix("m")) for r in KUBELET_RESERVED.values())
    memory = sum(int(r["memory"].removesuffix("Gi")) * 1024 for r in KUBELET_RESERVED.values())
    assert (cpu, memory) == (RESERVED_CPU_MILLI, RESERVED_MEMORY_MIB)
