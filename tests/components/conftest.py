"""Typed config objects for the Kura component tests (built through config.models)."""

from __future__ import annotations

import pulumi
import pytest

from config.loader import Secrets
from config.models import (
    Cluster,
    Environment,
    FailoverIP,
    Fleet,
    Hardware,
    Kura,
    OvhAccount,
    Region,
    Taint,
    TaintEffect,
    Vendor,
    Vendors,
)

WATCHER_IMAGE = "ghcr.io/tuist/tuist-infra-watcher@sha256:" + "a" * 64
# The account the watcher's Secret and env are built from, and its secrets as the
# program passes them (pulumi secret Outputs).
VENDORS = Vendors(ovh=OvhAccount(endpoint="ovh-us", application_key="tuist-us-app"))


def stack_secrets() -> Secrets:
    return Secrets(
        ovh_application_secret=pulumi.Output.secret("ovh-app-secret-value"),
        ovh_consumer_key=pulumi.Output.secret("ovh-consumer-key-value"),
    )


@pytest.fixture
def fleet() -> Fleet:
    return Fleet(
        name="ovh-us-east",
        vendor=Vendor.OVH,
        marker="tuist-kura-staging-us-east",
        size=2,
        node_pool="kura-us-east",
        taints=[
            Taint(key="tuist.dev/kura", value="true", effect=TaintEffect.NO_SCHEDULE),
            Taint(key="tuist.dev/bare-metal", effect=TaintEffect.NO_EXECUTE),
        ],
        hardware=Hardware(offer="Advance-1", threads=16, memory_gib=64),
    )


@pytest.fixture
def region() -> Region:
    return Region(
        id="us-east",
        cluster_id="us-east-1",
        fleet="ovh-us-east",
        ingress_class="kura-us-east",
        egress_burst_mbps=1500,
        host="us-east.staging.kura.tuist.dev",
        failover_ip="us-east-peer",
    )


@pytest.fixture
def failover_ip() -> FailoverIP:
    return FailoverIP(name="us-east-peer", vendor=Vendor.OVH, fleet="ovh-us-east", address="203.0.113.7")


@pytest.fixture
def parked_ip() -> FailoverIP:
    return FailoverIP(name="us-east-peer", vendor=Vendor.OVH, fleet="ovh-us-east")


@pytest.fixture
def kura() -> Kura:
    return Kura(
        runtime_image_tag="0.10.5",
        controller_image="ghcr.io/tuist/kura-controller:1.4.0",
        failover_watcher_image=WATCHER_IMAGE,
    )


@pytest.fixture
def cluster() -> Cluster:
    return Cluster(
        api_server="https://k8s.staging.tuist.dev:6443",
        runners_controller_image="ghcr.io/tuist/runners-controller:1.4.2",
        tuist_server_url="https://staging.tuist.dev",
    )


@pytest.fixture
def environment() -> Environment:
    return Environment.STAGING
