"""The real stack files (and the dev stand-in) load cleanly through the program's own path."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.failover_watcher import robot_failover_watchers
from config.loader import SECRET_KEYS, load_stack_config, read_stack_file, required_secret_keys
from config.models import Environment, GatewayMode, StackConfig, Vendor
from config.rules import robot_account_problems
from tests.config.stacks import REAL_STACKS, stack_path, stack_raw, with_robot_regions


def load(name: str) -> StackConfig:
    return load_stack_config(stack_raw(name), stack=name)


@pytest.mark.parametrize("name", [*REAL_STACKS, "dev"])
def test_stack_file_loads_and_names_its_environment(name: str) -> None:
    cfg = load(name)
    assert cfg.environment == Environment(name)


@pytest.mark.parametrize(
    ("name", "exposed"),
    [
        ("staging", ["eu-central", "ca-east"]),
        ("canary", ["eu-central", "ca-east"]),
        ("production", ["eu-central", "us-east", "us-west"]),
    ],
)
def test_regions_per_environment(name: str, exposed: list[str]) -> None:
    cfg = load(name)
    assert [r.id for r in cfg.regions if r.exposed] == exposed
    for region in cfg.regions:
        assert region.gateway is GatewayMode.HOST_NETWORK
        assert (region.replicas, region.storage_class, region.egress_floor_mbps) == (2, "scw-local-nvme", 25)
        assert region.egress_burst_mbps == (1500 if region.id.startswith("us-") else 500)
        # Failover IPs stay parked until ordered.
        assert region.failover_ip is not None
        assert cfg.failover_ip(region.failover_ip).address is None


@pytest.mark.parametrize(
    ("name", "ovh_endpoint", "dedibox_dc", "runner_offer", "runner_boxes", "floor", "max_replicas"),
    [
        ("staging", "ovh-ca", "DC5", "AX42-U", 1, 1, 15),
        ("canary", "ovh-ca", "DC2", "AX42-U", 1, 2, 14),
        ("production", "ovh-us", "DC5", "AX162-R", 2, 30, 120),
    ],
)
def test_fleets_and_runner_sizing_follow_the_seeds(
    name: str,
    ovh_endpoint: str,
    dedibox_dc: str,
    runner_offer: str,
    runner_boxes: int,
    floor: int | None,
    max_replicas: int,
) -> None:
    cfg = load(name)
    assert cfg.vendors.ovh is not None and cfg.vendors.ovh.endpoint == ovh_endpoint
    kura = cfg.fleet("kura-dedibox")
    assert (kura.vendor, kura.marker, kura.node_pool, kura.datacenter, kura.size) == (
        Vendor.DEDIBOX,
        f"tuist-kura-{name}",
        "kura-dedibox",
        dedibox_dc,
        1,
    )
    assert [(t.key, t.value, t.effect.value) for t in kura.taints] == [
        ("tuist.dev/kura-cache", "true", "NoSchedule")
    ]
    runners = cfg.fleet("runners-linux")
    assert (runners.vendor, runners.marker, runners.hardware.offer, runners.size) == (
        Vendor.ROBOT,
        f"tuist-bm-{name}-",
        runner_offer,
        runner_boxes,
    )
    assert runners.labels == {"tuist.dev/kata-runtime": "true", "katacontainers.io/kata-runtime": "true"}
    (pool,) = cfg.runner_pools
    assert (pool.autoscaling.min_warm_pool_floor, pool.autoscaling.max_replicas) == (floor, max_replicas)
    assert pool.autoscaling.scale_down_cooldown_seconds == 300
    assert not any(f.allow_release for f in cfg.fleets)


@pytest.mark.parametrize("name", REAL_STACKS)
def test_real_stacks_need_every_secret(name: str) -> None:
    # OVH, Dedibox and Robot fleets, all enabled, and a real cluster. No Elastic Metal or Mac fleet
    # yet (their Scaleway project is the operator's to add), so no Scaleway key. tuistServerToken is
    # retired (the runners-controller authenticates with its ServiceAccount token): never required.
    retired_or_unused = {"scalewaySecretKey", "tuistServerToken"}
    assert required_secret_keys(load(name)) == [k for k in SECRET_KEYS if k not in retired_or_unused]


def test_dev_needs_the_local_clusters_kubeconfig_and_no_cloud_secrets() -> None:
    assert required_secret_keys(load("dev")) == [
        "ovhApplicationSecret",
        "ovhConsumerKey",
        "dediboxSecretKey",
        "robotPassword",
        # vendorsim's Scaleway key: the Elastic Metal and Mac fleets share it.
        "scalewaySecretKey",
        "fleetSshPrivateKey",
        "fleetSudoPassword",
        # The local control plane's admin kubeconfig, set by scripts/dev-up.sh.
        "kubeconfig",
    ]


def test_required_secrets_follow_vendors_in_use_and_enabled_fleets() -> None:
    raw = stack_raw("staging")
    raw["fleets"] = [dict(f, enabled=False) for f in raw["fleets"] if f["vendor"] == "dedibox"]
    raw["failover_ips"] = [f for f in raw["failover_ips"] if f["vendor"] == "dedibox"]
    raw["regions"] = [dict(r, exposed=False) for r in raw["regions"] if r["id"] == "eu-central"]
    raw["runner_pools"] = []
    # Parked fleet: no SSH key or sudo password needed yet; no OVH or Robot in use; no runner pool, so
    # no Tuist server token; external-dns still publishes to Cloudflare. The control plane's firewall
    # stays on: its token is needed whatever the fleets are.
    needed = required_secret_keys(load_stack_config(raw))
    assert needed == ["dediboxSecretKey", "kubeconfig", "cloudflareApiToken", "hcloudToken"]
    raw["cluster"] = dict(raw["cluster"], control_plane_firewall={"enabled": False})
    needed = required_secret_keys(load_stack_config(raw))
    assert needed == ["dediboxSecretKey", "kubeconfig", "cloudflareApiToken"]


@pytest.mark.parametrize("name", REAL_STACKS)
def test_real_stack_files_hold_no_secret_values(name: str) -> None:
    text = stack_path(name).read_text()
    assert "secure:" not in text
    assert not set(read_stack_file(stack_path(name))) & set(SECRET_KEYS)


def test_read_stack_file_strips_the_prefix_and_leaves_secure_values_out(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text(
        "config:\n"
        "  tuist-infra:environment: staging\n"
        "  tuist-infra:robotPassword:\n"
        "    secure: AAABADQXFa+bbb==\n"
        "  kubernetes:context: other\n"
    )
    assert read_stack_file(path) == {"environment": "staging"}


def test_every_stack_counts_every_watcher_that_shares_its_robot_account() -> None:
    # The stack files as they are: the watchers of all stacks on one Robot account share its hourly
    # request budget, and each stack's count must cover them all.
    assert robot_account_problems({name: load(name) for name in REAL_STACKS}) == []


def test_robot_watchers_of_two_stacks_on_one_account_must_be_counted_in_each() -> None:
    staging = load_stack_config(with_robot_regions(stack_raw("staging"), 1, "staging"), stack="staging")
    production = load_stack_config(
        with_robot_regions(stack_raw("production"), 2, "production"), stack="production"
    )
    assert staging.vendors.robot and production.vendors.robot
    assert staging.vendors.robot.username == production.vendors.robot.username
    assert robot_account_problems({"staging": staging, "production": production}) == [
        "production: vendors.robot.failover_watchers is 2, but 3 watchers poll Robot account 'tuist-robot' "
        "(production: 2, staging: 1); set it to 3",
        "staging: vendors.robot.failover_watchers is 1, but 3 watchers poll Robot account 'tuist-robot' "
        "(production: 2, staging: 1); set it to 3",
    ]
    counted = {}
    for name, raw in (
        ("staging", with_robot_regions(stack_raw("staging"), 1, "staging")),
        ("production", with_robot_regions(stack_raw("production"), 2, "production")),
    ):
        raw["vendors"]["robot"]["failover_watchers"] = 3
        counted[name] = load_stack_config(raw, stack=name)
    assert robot_account_problems(counted) == []
    # ... and each of their watchers reads its route as one of the three.
    assert robot_failover_watchers(staging.regions, staging.failover_ips, 3) == 3
    assert robot_failover_watchers(staging.regions, staging.failover_ips) == 1
