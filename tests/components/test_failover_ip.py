"""The FailoverIP component under Pulumi's mocks: what it registers, with which inputs, and what it
exports. (The provider's behaviour against the vendors is tested in tests/providers.)"""

from __future__ import annotations

import base64
from typing import Any

import pulumi
import pytest

from components.failover_ip import FailoverIP, FailoverIPArgs, sorted_candidates
from config.models import FailoverIP as FailoverIPConfig
from config.models import Vendor

FAILOVER_TYPE = "pulumi-python:dynamic/failover:FailoverIP"


class Recorder(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[tuple[str, str, dict[str, Any], str | None]] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
        inputs = dict(args.inputs)
        self.resources.append((args.typ, args.name, inputs, args.resource_id))
        if args.typ == FAILOVER_TYPE:
            # What the provider's create answers when the IP is unrouted: the lowest candidate.
            return inputs["address"], {**inputs, "routed_to": inputs["candidates"][0]}
        return f"{args.name}-id", inputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]] | None]:
        return {}, None


def run(build: Any) -> tuple[Recorder, dict[str, Any]]:
    recorder = Recorder()
    pulumi.runtime.set_mocks(recorder, project="tuist-infra", stack="staging", preview=False)
    seen: dict[str, Any] = {}

    @pulumi.runtime.test  # type: ignore[misc]
    def program() -> Any:
        component = build()
        return pulumi.Output.all(component.address, component.routed_to).apply(
            lambda values: seen.update(address=values[0], routed_to=values[1])
        )

    program()
    return recorder, seen


ROUTED = FailoverIPConfig(
    name="eu-central-peer", vendor=Vendor.DEDIBOX, fleet="kura-dedibox", address="198.51.100.20"
)
PARKED = FailoverIPConfig(name="eu-central-peer", vendor=Vendor.DEDIBOX, fleet="kura-dedibox")


def test_routed_ip_registers_one_failover_resource_with_sorted_candidates() -> None:
    def build() -> FailoverIP:
        # As __main__ passes them: the fleet machines' box_id Outputs, in adoption order.
        box_ids = [
            pulumi.Output.from_input(b) for b in ("fr-par-2/200103", "fr-par-2/200101", "fr-par-2/200103")
        ]
        return FailoverIP(
            "failover-eu-central-peer",
            FailoverIPArgs(
                failover_ip=ROUTED,
                region_id="eu-central",
                candidates=box_ids,
                node_pool="kura-dedibox",
                namespace="kura",
            ),
        )

    recorder, seen = run(build)
    assert [(t, n) for t, n, _, _ in recorder.resources] == [
        ("tuist:failover_ip:FailoverIP", "failover-eu-central-peer"),
        (FAILOVER_TYPE, "failover-eu-central-peer"),
    ]
    inputs = recorder.resources[1][2]
    provider = inputs.pop("__provider")
    assert inputs == {
        "vendor": "dedibox",
        "address": "198.51.100.20",
        "region": "eu-central",
        "fleet": "kura-dedibox",
        "candidates": ["fr-par-2/200101", "fr-par-2/200103"],
        "node_pool": "kura-dedibox",
        "namespace": "kura",
    }
    assert b"providers.failover" in base64.b64decode(provider)
    assert seen == {"address": "198.51.100.20", "routed_to": "fr-par-2/200101"}


def test_parked_ip_registers_nothing_and_exports_none() -> None:
    recorder, seen = run(
        lambda: FailoverIP(
            "failover-eu-central-peer",
            FailoverIPArgs(
                failover_ip=PARKED,
                region_id="eu-central",
                candidates=["fr-par-2/200101"],
                node_pool="kura-dedibox",
                namespace="kura",
            ),
        )
    )
    assert [t for t, _, _, _ in recorder.resources] == ["tuist:failover_ip:FailoverIP"]
    assert seen == {"address": None, "routed_to": None}


def test_candidates_are_sorted_and_deduplicated() -> None:
    assert sorted_candidates("p", ["b", "a", "b"]) == ["a", "b"]
    assert sorted_candidates("p", []) == []


def test_a_missing_box_id_is_a_wiring_error() -> None:
    with pytest.raises(ValueError) as raised:
        sorted_candidates("eu-central-peer", ["fr-par-2/200101", None, ""])
    assert str(raised.value) == (
        "failover IP eu-central-peer: candidate box ids must be non-empty strings, got [None, '']"
    )
