"""FailoverIPProvider against the vendorsim process: real HTTP to the simulated OVH, Dedibox and Robot
failover APIs, the exact writes read back from the simulator's audit log, injected faults."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pytest
from pulumi.dynamic import ConfigureRequest
from pulumi.dynamic.config import Config

import providers.failover as failover
from providers.errors import AuthError, OutcomeUnknownError, TaskFailedError
from providers.failover import FailoverIPProvider, FailoverMoveError, NoEligibleBoxError, NotConfiguredError
from providers.retry import PollPolicy, RetryPolicy
from tests.providers.conftest import Vendorsim, writes_since
from watcher.mover import ClientTiming

OVH_SECRET = "dev-ovh-application-secret"
OVH_CONSUMER = "dev-ovh-consumer-key"
DEDIBOX_SECRET = "f24d2ad3-cea4-48c1-a6bd-1b0d15fb94c3"
ROBOT_PASSWORD = "dev-robot-password"
SECRETS = {
    "ovhApplicationSecret": OVH_SECRET,
    "ovhConsumerKey": OVH_CONSUMER,
    "dediboxSecretKey": DEDIBOX_SECRET,
    "robotPassword": ROBOT_PASSWORD,
}


@dataclass(frozen=True)
class Case:
    vendor: str
    unrouted_ip: str
    low: str
    high: str
    # The IP the inventory routes to `low` already.
    routed_ip: str

    def write(self, ip: str, box: str) -> tuple[str, str, Any, int]:
        """The exact audit entry (method, path, body, status) of routing `ip` to `box`."""
        if self.vendor == "ovh":
            return ("POST", f"/ovh/1.0/ip/{ip}%2F32/move", {"to": box}, 200)
        if self.vendor == "dedibox":
            fip_ids = {"198.51.100.20": 3001, "198.51.100.21": 3002}
            server_id = int(box.split("/")[1])
            return (
                "POST",
                "/dedibox/dedibox/v1/zones/fr-par-2/failover-ips/attach",
                {"server_id": server_id, "fips_ids": [fip_ids[ip]]},
                200,
            )
        server_ips = {"2345601": "198.18.3.51", "2345602": "198.18.3.52", "2345603": "198.18.3.53"}
        return ("POST", f"/robot/failover/{ip}", {"active_server_ip": server_ips[box]}, 200)


CASES = [
    Case("ovh", "198.51.100.11", "ns1001.ip-203-0-113.net", "ns1003.ip-203-0-113.net", "198.51.100.10"),
    Case("dedibox", "198.51.100.21", "fr-par-2/200101", "fr-par-2/200103", "198.51.100.20"),
    Case("robot", "198.51.100.31", "2345601", "2345603", "198.51.100.30"),
]
BY_VENDOR = pytest.mark.parametrize("case", CASES, ids=[c.vendor for c in CASES])


@pytest.fixture(autouse=True)
def fast_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        failover,
        "CLIENT_TIMING",
        ClientTiming(
            retry=RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.02),
            poll=PollPolicy(first=0.05, max_interval=0.05),
            task_timeout=10,
        ),
    )


def stack_config(sim: Vendorsim, **secrets: str) -> dict[str, Any]:
    vendors = {
        "ovh": {"endpoint": f"{sim.url}/ovh/1.0", "application_key": "dev-ovh-application-key"},
        "dedibox": {
            "api_url": f"{sim.url}/dedibox",
            "project_id": "b781bdf3-6efc-4c4a-a11d-f57edf663188",
            "zones": ["fr-par-1", "fr-par-2", "nl-ams-1"],
        },
        "robot": {"api_url": f"{sim.url}/robot", "username": "dev-robot-user"},
    }
    # As the engine hands it over: structured keys as JSON text, secrets decrypted.
    raw = {"tuist-infra:vendors": json.dumps(vendors), "tuist-infra:environment": "dev"}
    raw.update({f"tuist-infra:{key}": value for key, value in {**SECRETS, **secrets}.items()})
    return raw


def provider_for(sim: Vendorsim, **secrets: str) -> FailoverIPProvider:
    provider = FailoverIPProvider()
    provider.configure(ConfigureRequest(Config(stack_config(sim, **secrets), "tuist-infra")))
    return provider


def props(case: Case, ip: str, candidates: list[str]) -> dict[str, Any]:
    return {
        "vendor": case.vendor,
        "address": ip,
        "region": "eu-central",
        "fleet": f"kura-{case.vendor}",
        "candidates": candidates,
        "routed_to": None,
    }


def audit(sim: Vendorsim, since: int = 0) -> list[tuple[str, str, Any, int]]:
    return [(e["method"], e["path"], e["body"], e["status"]) for e in writes_since(sim, since)]


def last_audit_id(sim: Vendorsim) -> int:
    entries = writes_since(sim, 0)
    return int(entries[-1]["id"]) if entries else 0


@BY_VENDOR
def test_create_routes_an_unrouted_ip_to_the_lowest_candidate(vendorsim: Vendorsim, case: Case) -> None:
    provider = provider_for(vendorsim)
    result = provider.create(props(case, case.unrouted_ip, [case.high, case.low]))
    assert result.id == case.unrouted_ip
    assert result.outs == {
        "vendor": case.vendor,
        "address": case.unrouted_ip,
        "region": "eu-central",
        "fleet": f"kura-{case.vendor}",
        "candidates": [case.low, case.high],
        "node_pool": None,
        "namespace": None,
        "routed_to": case.low,
    }
    assert audit(vendorsim) == [case.write(case.unrouted_ip, case.low)]
    assert provider.read(result.id, result.outs).outs["routed_to"] == case.low


@BY_VENDOR
def test_already_correct_routing_writes_nothing(vendorsim: Vendorsim, case: Case) -> None:
    result = provider_for(vendorsim).create(props(case, case.routed_ip, [case.low, case.high]))
    assert result.outs["routed_to"] == case.low
    assert audit(vendorsim) == []


@BY_VENDOR
def test_current_box_is_kept_while_eligible_even_if_not_lowest(vendorsim: Vendorsim, case: Case) -> None:
    provider = provider_for(vendorsim)
    first = provider.create(props(case, case.unrouted_ip, [case.high]))
    assert first.outs["routed_to"] == case.high
    since = last_audit_id(vendorsim)
    updated = provider.update(first.id, first.outs, props(case, case.unrouted_ip, [case.low, case.high]))
    assert updated.outs is not None
    assert updated.outs["routed_to"] == case.high
    assert updated.outs["candidates"] == [case.low, case.high]
    assert audit(vendorsim, since) == []


@BY_VENDOR
def test_current_box_gone_moves_to_the_lowest_candidate(vendorsim: Vendorsim, case: Case) -> None:
    provider = provider_for(vendorsim)
    first = provider.create(props(case, case.unrouted_ip, [case.high]))
    since = last_audit_id(vendorsim)
    updated = provider.update(first.id, first.outs, props(case, case.unrouted_ip, [case.low]))
    assert updated.outs is not None and updated.outs["routed_to"] == case.low
    assert audit(vendorsim, since) == [case.write(case.unrouted_ip, case.low)]


@BY_VENDOR
def test_no_candidate_is_an_error_and_moves_nothing(vendorsim: Vendorsim, case: Case) -> None:
    provider = provider_for(vendorsim)
    with pytest.raises(NoEligibleBoxError) as raised:
        provider.create(props(case, case.routed_ip, []))
    assert str(raised.value) == (
        f"failover IP {case.routed_ip} (region eu-central, fleet kura-{case.vendor}): no eligible box "
        f"(the fleet has no adopted machine); it stays on {case.low} and nothing was moved"
    )
    first = provider.create(props(case, case.unrouted_ip, [case.high]))
    since = last_audit_id(vendorsim)
    with pytest.raises(NoEligibleBoxError) as raised:
        provider.update(first.id, first.outs, props(case, case.unrouted_ip, []))
    assert str(raised.value).endswith(f"; it stays on {case.high} and nothing was moved")
    assert audit(vendorsim, since) == []


def test_ovh_move_task_failure_is_typed_and_the_next_create_converges(vendorsim: Vendorsim) -> None:
    case = CASES[0]
    vendorsim.admin("POST", "/faults", json={"task_failure": {"kind": "ovh.ipMove", "count": 1}})
    provider = provider_for(vendorsim)
    with pytest.raises(FailoverMoveError) as raised:
        provider.create(props(case, case.unrouted_ip, [case.high, case.low]))
    assert isinstance(raised.value.cause, TaskFailedError)
    assert re.fullmatch(
        r"failover IP 198\.51\.100\.11 \(region eu-central, fleet kura-ovh\): moving it from unrouted to "
        r"ns1001\.ip-203-0-113\.net failed: ovh: GET /ip/\{ip\}/task/\{taskId\} \[198\.51\.100\.11\] failed "
        r"\(no response ovhError\): IP move task \d+ ended ovhError:?; "
        r"the next pulumi up reads the route again and retries",
        str(raised.value),
    )
    result = provider.create(props(case, case.unrouted_ip, [case.high, case.low]))
    assert result.outs["routed_to"] == case.low
    move = case.write(case.unrouted_ip, case.low)
    assert audit(vendorsim) == [move, move]


def test_dedibox_attach_500_is_typed_and_the_next_create_converges(vendorsim: Vendorsim) -> None:
    case = CASES[1]
    vendorsim.admin(
        "POST",
        "/faults",
        json={
            "vendor": "dedibox",
            "route": "/dedibox/dedibox/v1/zones/*/failover-ips/attach",
            "error_rate": 1.0,
            "status": 500,
        },
    )
    provider = provider_for(vendorsim)
    with pytest.raises(FailoverMoveError) as raised:
        provider.create(props(case, case.unrouted_ip, [case.low]))
    # A 500 on a write leaves open whether it happened: read back (not attached, not busy), sent
    # again, until the attempts are spent.
    assert isinstance(raised.value.cause, OutcomeUnknownError)
    assert raised.value.cause.status == 500
    assert re.fullmatch(
        r"failover IP 198\.51\.100\.21 \(region eu-central, fleet kura-dedibox\): moving it from unrouted "
        r"to fr-par-2/200101 failed: dedibox: POST /dedibox/v1/zones/\{zone\}/failover-ips/attach "
        r"\[198\.51\.100\.21\] failed \(HTTP 500 internal_error\): internal error; the vendor may have "
        r"carried the request out \(request id [0-9a-f-]+\); "
        r"the next pulumi up reads the route again and retries",
        str(raised.value),
    )
    assert audit(vendorsim) == []  # refused attaches changed nothing
    vendorsim.admin("DELETE", "/faults")
    result = provider.create(props(case, case.unrouted_ip, [case.low]))
    assert result.outs["routed_to"] == case.low
    assert audit(vendorsim) == [case.write(case.unrouted_ip, case.low)]


@BY_VENDOR
def test_read_rereads_the_route_from_the_vendor(vendorsim: Vendorsim, case: Case) -> None:
    provider = provider_for(vendorsim)
    created = provider.create(props(case, case.unrouted_ip, [case.low, case.high]))
    # Someone else (the watcher) moves it.
    provider.update(created.id, created.outs, props(case, case.unrouted_ip, [case.high]))
    refreshed = provider.read(created.id, {**created.outs, "__provider": "opaque"})
    assert refreshed.id == case.unrouted_ip
    assert refreshed.outs == {**created.outs, "routed_to": case.high}


@BY_VENDOR
def test_delete_leaves_the_ip_where_it_is(vendorsim: Vendorsim, case: Case) -> None:
    provider = provider_for(vendorsim)
    created = provider.create(props(case, case.unrouted_ip, [case.low]))
    since = last_audit_id(vendorsim)
    provider.delete(created.id, created.outs)
    assert audit(vendorsim, since) == []
    assert provider.read(created.id, created.outs).outs["routed_to"] == case.low


def test_wrong_credential_is_an_auth_error_that_does_not_show_the_secret(vendorsim: Vendorsim) -> None:
    case = CASES[2]
    wrong = "not-the-robot-password-0123"
    provider = provider_for(vendorsim, robotPassword=wrong)
    with pytest.raises(FailoverMoveError) as raised:
        provider.create(props(case, case.unrouted_ip, [case.low]))
    assert isinstance(raised.value.cause, AuthError)
    assert str(raised.value).startswith(
        "failover IP 198.51.100.31 (region eu-central, fleet kura-robot): reading its route failed: "
        "robot: GET /failover/{ip} [198.51.100.31] failed (HTTP 401"
    )
    assert wrong not in str(raised.value) and wrong not in repr(raised.value.cause)
    assert audit(vendorsim) == []


def test_a_missing_secret_names_the_key_to_set(vendorsim: Vendorsim) -> None:
    provider = provider_for(vendorsim, dediboxSecretKey="")
    with pytest.raises(NotConfiguredError) as raised:
        provider.create(props(CASES[1], "198.51.100.21", ["fr-par-2/200101"]))
    assert str(raised.value) == (
        "stack secret tuist-infra:dediboxSecretKey is not set; the failover API needs it "
        "(pulumi config set --secret dediboxSecretKey ...)"
    )
