"""FailoverIPProvider without a vendor: the diff table, input checks, placement, and what the pickled
provider carries into state."""

from __future__ import annotations

import base64
import json
from typing import Any

import dill
import pytest
from pulumi.dynamic import ConfigureRequest
from pulumi.dynamic.config import Config
from pulumi.dynamic.dynamic import serialize_provider
from pulumi.output import Unknown
from pulumi.runtime.rpc import UNKNOWN

from providers.failover import (
    FailoverInputError,
    FailoverIPProvider,
    NotConfiguredError,
    failover_diff,
    input_problems,
    parse_spec,
    placement,
)

OLDS: dict[str, Any] = {
    "vendor": "ovh",
    "address": "198.51.100.10",
    "region": "us-east",
    "fleet": "kura-ovh",
    "candidates": ["ns1.example.net", "ns2.example.net"],
    "routed_to": "ns2.example.net",
    "__provider": "old-pickle",
}


@pytest.mark.parametrize(
    ("change", "changes", "replaces"),
    [
        ({}, False, []),
        ({"vendor": "dedibox"}, True, ["vendor"]),
        ({"address": "198.51.100.11"}, True, ["address"]),
        ({"vendor": "robot", "address": "198.51.100.30"}, True, ["vendor", "address"]),
        ({"candidates": ["ns1.example.net"]}, True, []),
        ({"candidates": ["ns1.example.net", "ns2.example.net", "ns3.example.net"]}, True, []),
        ({"candidates": []}, True, []),
        ({"candidates": UNKNOWN}, True, []),
        ({"candidates": ["ns1.example.net", UNKNOWN]}, True, []),
        # Same set in another order: placement would decide the same, so no change.
        ({"candidates": ["ns2.example.net", "ns1.example.net"]}, False, []),
        ({"region": "us-west"}, False, []),
        ({"fleet": "kura-ovh-2"}, False, []),
        ({"routed_to": None}, False, []),
        ({"__provider": "new-pickle"}, False, []),
    ],
    ids=lambda v: json.dumps(v) if isinstance(v, dict) else str(v),
)
def test_diff_table(change: dict[str, Any], changes: bool, replaces: list[str]) -> None:
    result = failover_diff(OLDS, {**OLDS, **change})
    assert (result.changes, result.replaces) == (changes, replaces)
    assert result.delete_before_replace is False
    if not replaces:
        assert result.stables == ["vendor", "address"]


@pytest.mark.parametrize(
    ("routed_to", "candidates", "changes"),
    [
        ("ns2.example.net", ["ns1.example.net", "ns2.example.net"], False),
        # A refresh read it off the fleet: forced onto another box, or unrouted. The up routes it back.
        ("ns9.example.net", ["ns1.example.net", "ns2.example.net"], True),
        (None, ["ns1.example.net", "ns2.example.net"], True),
        # No candidate: nowhere to route it, so nothing to do (the create or the candidates' change
        # said so already).
        (None, [], False),
    ],
)
def test_a_route_off_every_candidate_is_a_change(
    routed_to: str | None, candidates: list[str], changes: bool
) -> None:
    olds = {**OLDS, "candidates": candidates, "routed_to": routed_to}
    result = failover_diff(olds, {**olds, "routed_to": None})
    assert (result.changes, result.replaces) == (changes, [])


@pytest.mark.parametrize(
    ("current", "candidates", "target"),
    [
        (None, ["b", "a", "c"], "a"),
        ("a", ["a", "b"], "a"),
        ("b", ["a", "b"], "b"),  # kept though not lowest
        ("z", ["b", "c"], "b"),  # current box left the fleet
        ("a", [], None),
        (None, [], None),
    ],
)
def test_placement(current: str | None, candidates: list[str], target: str | None) -> None:
    assert placement(current, candidates) == target
    # An empty reading of the cluster (nothing eligible in it yet) falls back to the same rule.
    assert placement(current, candidates, {}) == target


@pytest.mark.parametrize(
    ("current", "candidates", "eligible", "target"),
    [
        # Ranked by Node name, as the watcher ranks: box "c" runs on the lowest-named Node.
        (None, ["a", "b", "c"], {"b": "kura-2", "c": "kura-1"}, "c"),
        # The box it is on stays while eligible.
        ("b", ["a", "b", "c"], {"b": "kura-2", "c": "kura-1"}, "b"),
        # The box it is on is a candidate but not eligible (cordoned, demux not Ready): it moves.
        ("a", ["a", "b", "c"], {"b": "kura-2", "c": "kura-1"}, "c"),
        # An eligible Node whose box the fleet did not adopt is not a candidate.
        (None, ["a", "b"], {"b": "kura-2", "z": "kura-0"}, "b"),
    ],
)
def test_placement_with_the_clusters_eligibility(
    current: str | None, candidates: list[str], eligible: dict[str, str], target: str
) -> None:
    assert placement(current, candidates, eligible) == target


def test_input_problems_name_each_bad_input() -> None:
    bad = {
        "vendor": "hetzner",
        "address": "198.51.100.300",
        "region": "",
        "fleet": None,
        "candidates": ["ns1.example.net"],
    }
    assert input_problems(bad) == [
        ("vendor", "'hetzner' is not one of ovh, dedibox, robot, scaleway_em, applesilicon"),
        ("address", "'198.51.100.300' is not an IPv4 address"),
        ("region", "must be a non-empty string, got ''"),
        ("fleet", "must be a non-empty string, got None"),
    ]


@pytest.mark.parametrize(
    ("where", "problems"),
    [
        ({"node_pool": "kura-ovh", "namespace": "kura"}, []),
        ({}, []),
        (
            {"node_pool": "", "namespace": "kura"},
            [("node_pool", "must be a non-empty string when set, got ''")],
        ),
        (
            {"node_pool": "kura-ovh"},
            [("node_pool", "node_pool and namespace are set together (where eligibility is read)")],
        ),
    ],
)
def test_where_eligibility_is_read_is_checked(where: dict[str, Any], problems: list[tuple[str, str]]) -> None:
    props = {**OLDS, **where}
    assert input_problems(props) == problems


@pytest.mark.parametrize(
    ("vendor", "candidates", "problems"),
    [
        (
            "dedibox",
            ["fr-par-2/200101", "200102"],
            [
                (
                    "candidates",
                    "candidates[1]: Dedibox box id '200102' is not '<zone>/<server id>' "
                    "(e.g. fr-par-2/104523)",
                )
            ],
        ),
        (
            "robot",
            ["2345601", "tuist-bm-dev-2"],
            [("candidates", "candidates[1]: Robot box id 'tuist-bm-dev-2' is not a server number")],
        ),
        ("ovh", ["ns1.example.net", ""], [("candidates", "candidates[1]: '' is not a box id")]),
        ("ovh", "ns1.example.net", [("candidates", "must be a list of box ids, got 'ns1.example.net'")]),
        ("robot", ["2345601", "2345601"], [("candidates", "box ids listed more than once: 2345601")]),
    ],
)
def test_candidate_problems(vendor: str, candidates: Any, problems: list[tuple[str, str]]) -> None:
    props = {
        "vendor": vendor,
        "address": "198.51.100.10",
        "region": "r",
        "fleet": "f",
        "candidates": candidates,
    }
    assert input_problems(props) == problems


def test_unknown_inputs_are_not_judged_at_preview() -> None:
    props = {"vendor": "ovh", "address": "198.51.100.10", "region": "r", "fleet": "f", "candidates": UNKNOWN}
    assert input_problems(props) == []
    assert input_problems({**props, "candidates": ["ns1.example.net", UNKNOWN]}) == []
    # What the provider process really receives at preview: the wire marker decoded to Unknown.
    assert input_problems({**props, "candidates": Unknown()}) == []
    assert input_problems({**props, "candidates": [Unknown(), Unknown()]}) == []


def test_check_reports_failures_and_sorts_candidates() -> None:
    provider = FailoverIPProvider()
    good = provider.check({}, {**OLDS, "candidates": ["ns2.example.net", "ns1.example.net"]})
    assert good.failures == []
    assert good.inputs["candidates"] == ["ns1.example.net", "ns2.example.net"]
    bad = provider.check({}, {**OLDS, "address": "not-an-ip"})
    assert [(f.property, f.reason) for f in bad.failures] == [
        ("address", "'not-an-ip' is not an IPv4 address")
    ]


def test_parse_spec_error_lists_every_problem() -> None:
    with pytest.raises(FailoverInputError) as raised:
        parse_spec({**OLDS, "vendor": "aws", "candidates": [1]})
    assert str(raised.value) == (
        "FailoverIP inputs are invalid: vendor: 'aws' is not one of "
        "ovh, dedibox, robot, scaleway_em, applesilicon; candidates: candidates[0]: 1 is not a box id"
    )


def test_an_unconfigured_provider_refuses_to_act() -> None:
    with pytest.raises(NotConfiguredError) as raised:
        FailoverIPProvider().create({**OLDS})
    assert str(raised.value) == "the failover provider was not configured with the stack config"


def test_read_without_state_is_refused() -> None:
    with pytest.raises(FailoverInputError) as raised:
        FailoverIPProvider().read("198.51.100.10", {})
    assert str(raised.value) == (
        "FailoverIP 198.51.100.10: read needs the resource's state (vendor, address); "
        "importing a failover IP by id alone is not supported"
    )


SECRET_VALUES = {
    "ovhApplicationSecret": "ovh-app-secret-5c1f",
    "ovhConsumerKey": "ovh-consumer-9d2e",
    "dediboxSecretKey": "dedibox-secret-77aa",
    "robotPassword": "robot-password-3b3b",
    "kubeconfig": "apiVersion: v1\nusers: [{name: admin, user: {token: kube-token-51c0}}]\n",
}


def configured_provider() -> FailoverIPProvider:
    raw = {
        "tuist-infra:vendors": json.dumps(
            {"ovh": {"endpoint": "ovh-eu", "application_key": "ak"}, "robot": {"username": "u"}}
        ),
        **{f"tuist-infra:{k}": v for k, v in SECRET_VALUES.items()},
    }
    provider = FailoverIPProvider()
    provider.configure(ConfigureRequest(Config(raw, "tuist-infra")))
    return provider


@pytest.mark.parametrize("make", [FailoverIPProvider, configured_provider], ids=["fresh", "configured"])
def test_the_serialized_provider_carries_no_secret(make: Any) -> None:  # kubeconfig included
    provider = make()
    serialized = serialize_provider(provider)
    raw = base64.b64decode(serialized)
    for value in SECRET_VALUES.values():
        assert value.encode() not in raw
    assert b"providers.failover" in raw  # pickled by reference to the importable class
    restored = dill.loads(raw)
    assert type(restored) is FailoverIPProvider
    assert vars(restored) == {}
    assert FailoverIPProvider.serialize_as_secret_always is False


def test_configured_credentials_do_not_show_in_repr() -> None:
    provider = configured_provider()
    text = repr(vars(provider))
    for value in SECRET_VALUES.values():
        assert value not in text


@pytest.mark.parametrize(
    ("current", "eligible", "target"),
    [
        # The box it is on stays while eligible, even when a lower one is eligible too.
        ("b", {"a": "node-a", "b": "node-b"}, "b"),
        # Otherwise the lowest by name: the node's name, not the box id.
        ("x", {"ns9": "kura-a", "ns1": "kura-b"}, "ns9"),
        (None, {"ns9": "kura-a", "ns1": "kura-b"}, "ns9"),
        # No eligible box: no target, and the IP must not move.
        ("b", {}, None),
        (None, {}, None),
    ],
)
def test_failover_placement_is_the_anchor_rule(current, eligible, target):
    """reference/tuist-anchor.md 4.1: keep the current box if eligible, else the lexically lowest;
    never move when none is eligible. The deploy-time provider and the watcher both apply it."""
    from providers.vendor import failover_placement

    assert failover_placement(current, eligible) == target


def test_config_admits_failover_ips_of_exactly_the_vendors_the_provider_moves() -> None:
    from providers import failover
    from providers.vendor import FAILOVER_IP_VENDORS

    assert tuple(failover._BOX_ID_CHECKS) == FAILOVER_IP_VENDORS
