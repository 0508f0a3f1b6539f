"""The failover watcher's vendor credentials under Pulumi's mocks: one Secret per region with only the
region's vendor's keys, kept secret, mounted read-only where watcher/mover.py reads them."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from components.failover_watcher import FailoverWatcher, FailoverWatcherArgs, robot_failover_watchers
from config.models import DediboxAccount, FailoverIP, Fleet, OvhAccount, Region, RobotAccount, Vendor, Vendors
from tests.components.conftest import WATCHER_IMAGE
from tests.support.k8s_schema import ManifestRecorder, collect_manifests, validate_manifest

VENDORS = Vendors(
    ovh=OvhAccount(endpoint="ovh-ca", application_key="ak-public"),
    dedibox=DediboxAccount(project_id="b781bdf3-6efc-4c4a-a11d-f57edf663188"),
)
OVH_SECRETS = {"ovh_application_secret": "as-5c1f0e", "ovh_consumer_key": "ck-9d2e11"}


# How a secret value travels to the engine (pulumi.runtime.rpc): wrapped in this signature.
SECRET_SIG = "4dabf18193072939515e22adb298388d"
SECRET_VALUE = "1b47061264138c4ac30d75fd1eb44270"


def as_registered_secret(value: Any) -> dict[str, Any]:
    return {SECRET_SIG: SECRET_VALUE, "value": value}


def render(args: FailoverWatcherArgs) -> ManifestRecorder:
    return collect_manifests(lambda: FailoverWatcher("us-east-watcher", args))


def watcher_args(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, **overrides: Any
) -> FailoverWatcherArgs:
    values: dict[str, Any] = {
        "region": region,
        "fleet": fleet,
        "failover_ip": failover_ip,
        "namespace": "kura",
        "image": WATCHER_IMAGE,
        "vendors": VENDORS,
        **OVH_SECRETS,
        "dedibox_secret_key": "dedibox-must-not-appear",
    }
    values.update(overrides)
    return FailoverWatcherArgs(**values)


def test_secret_holds_only_the_regions_vendor_keys_as_secrets(
    region: Region, fleet: Fleet, failover_ip: FailoverIP
) -> None:
    recorded = render(watcher_args(region, fleet, failover_ip))
    secret = recorded.find("Secret", "tuist-failover-vendor-credentials-us-east")
    # Out of the Kura namespace, whose gateways (ingress-nginx) read every Secret.
    assert secret["metadata"]["namespace"] == "kura-failover"
    deployment = recorded.find("Deployment", "kura-failover-watcher-us-east")
    assert deployment["metadata"]["namespace"] == "kura-failover"
    # It lists the demux pods of the Kura namespace through a Role there, bound to its account.
    role_binding = recorded.find("RoleBinding", "kura-failover-watcher-us-east")
    assert role_binding["metadata"]["namespace"] == "kura"
    assert role_binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "kura-failover-watcher-us-east", "namespace": "kura-failover"}
    ]
    assert secret["type"] == "Opaque"
    # Registered as a secret although the caller passed plain strings.
    assert recorded.registered[("Secret", secret["metadata"]["name"])]["stringData"] == as_registered_secret(
        {"ovhApplicationSecret": "as-5c1f0e", "ovhConsumerKey": "ck-9d2e11"}
    )
    validate_manifest(secret)
    # Nothing else carries a credential.
    others = [m for m in recorded.manifests if m["kind"] != "Secret"]
    for value in ("as-5c1f0e", "ck-9d2e11", "dedibox-must-not-appear"):
        assert value not in json.dumps(others)
    assert "dedibox-must-not-appear" not in json.dumps(secret)


def test_deployment_mounts_the_secret_read_only_and_gets_no_credential_env(
    region: Region, fleet: Fleet, failover_ip: FailoverIP
) -> None:
    recorded = render(watcher_args(region, fleet, failover_ip))
    deployment = recorded.find("Deployment", "kura-failover-watcher-us-east")
    validate_manifest(deployment)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["volumes"] == [
        {
            "name": "vendor-credentials",
            "secret": {"secretName": "tuist-failover-vendor-credentials-us-east", "defaultMode": 0o440},
        },
        {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    ]
    assert pod["securityContext"] == {"fsGroup": 65532}
    (container,) = pod["containers"]
    assert container["volumeMounts"] == [
        {"name": "vendor-credentials", "mountPath": "/etc/tuist-failover", "readOnly": True},
        {"name": "run", "mountPath": "/run/watcher"},
    ]
    assert "envFrom" not in container
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FAILOVER_VENDOR"] == "ovh"
    assert json.loads(env["FAILOVER_VENDOR_ACCOUNT"]) == {
        "endpoint": "ovh-ca",
        "application_key": "ak-public",
    }
    assert env["FAILOVER_CREDENTIALS_DIR"] == "/etc/tuist-failover"


def test_dedibox_region_gets_only_the_dedibox_key(region: Region, fleet: Fleet) -> None:
    dedibox_fleet = fleet.model_copy(update={"vendor": Vendor.DEDIBOX})
    fip = FailoverIP(name="us-east-peer", vendor=Vendor.DEDIBOX, fleet=fleet.name, address="198.51.100.20")
    recorded = render(watcher_args(region, dedibox_fleet, fip, dedibox_secret_key="dk-77aa"))
    secret = recorded.find("Secret", "tuist-failover-vendor-credentials-us-east")
    assert recorded.registered[("Secret", secret["metadata"]["name"])]["stringData"] == as_registered_secret(
        {"dediboxSecretKey": "dk-77aa"}
    )


def test_missing_vendor_secret_is_refused(region: Region, fleet: Fleet, failover_ip: FailoverIP) -> None:
    args = watcher_args(region, fleet, failover_ip, ovh_consumer_key=None)
    with pytest.raises(ValueError) as raised:
        FailoverWatcher("w", args)
    assert str(raised.value) == (
        "failover watcher of region 'us-east': the ovh secret(s) ovhConsumerKey were not passed "
        "(FailoverWatcherArgs); the watcher cannot move the IP"
    )


def test_missing_vendor_account_is_refused(region: Region, fleet: Fleet, failover_ip: FailoverIP) -> None:
    args = watcher_args(region, fleet, failover_ip, vendors=Vendors())
    with pytest.raises(
        ValueError, match=re.escape("failover_ips 'us-east-peer' is on ovh, but vendors.ovh is not set")
    ):
        FailoverWatcher("w", args)


def test_a_robot_watcher_knows_how_many_share_the_robot_budget(region: Region, fleet: Fleet) -> None:
    """Robot allows 100 GET /failover/{ip} an hour per account: the stack's Robot watchers split it,
    so each one is told how many they are (watcher/__main__.py slows down accordingly)."""
    robot = Vendors(robot=RobotAccount(username="#ws+tuist"))
    fip = FailoverIP(name="us-east-peer", vendor=Vendor.ROBOT, fleet=fleet.name, address="198.51.100.31")
    args = watcher_args(
        region,
        fleet.model_copy(update={"vendor": Vendor.ROBOT}),
        fip,
        vendors=robot,
        robot_password="rp-5e",
        robot_failover_watchers=3,
    )
    (container,) = render(args).find("Deployment", "kura-failover-watcher-us-east")["spec"]["template"][
        "spec"
    ]["containers"]
    assert {e["name"]: e.get("value") for e in container["env"]}["ROBOT_FAILOVER_WATCHERS"] == "3"
    # An OVH watcher has no Robot budget to share.
    ovh = render(
        watcher_args(
            region, fleet, FailoverIP(name="x", vendor=Vendor.OVH, fleet=fleet.name, address="198.51.100.9")
        )
    )
    (container,) = ovh.find("Deployment", "kura-failover-watcher-us-east")["spec"]["template"]["spec"][
        "containers"
    ]
    assert "ROBOT_FAILOVER_WATCHERS" not in {e["name"] for e in container["env"]}


def test_the_robot_watchers_are_the_regions_with_a_routed_robot_ip(region: Region) -> None:
    ips = [
        FailoverIP(name="a", vendor=Vendor.ROBOT, fleet="f", address="198.51.100.31"),
        FailoverIP(name="b", vendor=Vendor.ROBOT, fleet="f", address="198.51.100.32"),
        FailoverIP(name="parked", vendor=Vendor.ROBOT, fleet="f"),
        FailoverIP(name="o", vendor=Vendor.OVH, fleet="f", address="198.51.100.9"),
    ]
    regions = [
        region.model_copy(update={"id": rid, "failover_ip": ip})
        for rid, ip in [("r1", "a"), ("r2", "b"), ("r3", "parked"), ("r4", "o"), ("r5", None)]
    ]
    assert robot_failover_watchers(regions, ips) == 2
    assert robot_failover_watchers(regions[2:], ips) == 1  # none routed: the watcher default


def test_a_watcher_that_misses_its_own_heartbeat_is_restarted(
    region: Region, fleet: Fleet, failover_ip: FailoverIP
) -> None:
    # The loop writes the time by which it writes again; a call that never returns misses it.
    deployment = render(watcher_args(region, fleet, failover_ip)).find(
        "Deployment", "kura-failover-watcher-us-east"
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HEARTBEAT_FILE"] == "/run/watcher/heartbeat"
    assert container["livenessProbe"] == {
        "exec": {"command": ["/bin/sh", "-c", '[ "$(date +%s)" -le "$(cat /run/watcher/heartbeat)" ]']},
        "initialDelaySeconds": 30,
        "periodSeconds": 30,
        "failureThreshold": 2,
    }


def test_a_move_in_flight_outlives_a_rollout_and_the_heartbeat_covers_the_longest_move(
    region: Region, fleet: Fleet, failover_ip: FailoverIP
) -> None:
    """A Dedibox move detaches, then attaches, each waited for up to the clients' task timeout: the
    heartbeat promised before a poll covers both, and SIGTERM (a rollout) waits for the poll to end
    rather than killing the move between its halves, leaving the IP unrouted."""
    from providers.clients import ClientTiming
    from watcher.loop import MOVE_BUDGET_SECONDS, POLL_BUDGET_SECONDS, WatcherSettings

    # The move's two shared task timeouts, and the put-back's own after them.
    assert 3 * ClientTiming().task_timeout <= MOVE_BUDGET_SECONDS
    assert WatcherSettings(ip="x", region="r", node_pool="p").move_budget_seconds == MOVE_BUDGET_SECONDS
    deployment = render(watcher_args(region, fleet, failover_ip)).find(
        "Deployment", "kura-failover-watcher-us-east"
    )
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace == POLL_BUDGET_SECONDS + MOVE_BUDGET_SECONDS == 1980


def test_a_replacement_goes_after_the_old_one_is_gone(
    region: Region, fleet: Fleet, failover_ip: FailoverIP
) -> None:
    # Never two watchers moving one IP, even for the length of an up.
    options = render(watcher_args(region, fleet, failover_ip)).options
    assert options["us-east-watcher-deployment"].delete_before_replace
