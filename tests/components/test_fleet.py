"""BareMetalFleet under Pulumi's mocks: how many machines, with which inputs and options, and what
the fleet exports. (The machines' own behaviour is tested against vendorsim in tests/providers.)"""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from components.fleet import BareMetalFleet, BareMetalFleetArgs, machine_props
from config.models import Cluster, Environment, Fleet, Hardware, Taint, TaintEffect, Vendor
from providers.machine import input_problems


class Recorder(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.machines: dict[str, dict[str, Any]] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
        if args.typ == "pulumi-python:dynamic/machine:AdoptedMachine":
            self.machines[args.name] = dict(args.inputs)
            box = f"ns{len(self.machines)}"
            return f"ovh:{box}", {
                **args.inputs,
                "box_id": box,
                "datacenter": "bhs6",
                "public_ipv4": f"203.0.113.{len(self.machines)}",
                "provider_id": f"ovh://bhs6/{box}",
                "node_name": f"kura-ovh-{box}",
            }
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]] | None]:
        return {}, None


def fleet(**overrides: Any) -> Fleet:
    values: dict[str, Any] = {
        "name": "kura-ovh",
        "vendor": Vendor.OVH,
        "marker": "tuist-kura-staging-ovh",
        "size": 2,
        "node_pool": "kura-ovh",
        "labels": {"tuist.dev/region": "ca-east"},
        "taints": [Taint(key="tuist.dev/kura-cache", value="true", effect=TaintEffect.NO_SCHEDULE)],
        "hardware": Hardware(offer="Advance-1", threads=16, memory_gib=64),
        "datacenter": "bhs",
    }
    values.update(overrides)
    return Fleet(**values)


CLUSTER = Cluster(api_server="https://cp.staging.tuist.dev:6443", runners_controller_image="ghcr.io/t/r:1")


def build(args: BareMetalFleetArgs) -> tuple[Recorder, BareMetalFleet, list[dict[str, Any]]]:
    recorder = Recorder()
    pulumi.runtime.set_mocks(recorder, project="tuist-infra", stack="staging", preview=False)
    holder: dict[str, Any] = {}

    @pulumi.runtime.test
    def run() -> Any:
        component = BareMetalFleet("kura-ovh", args)
        holder["component"] = component
        return component.machine_outputs.apply(lambda rows: holder.__setitem__("rows", rows))

    run()
    return recorder, holder["component"], holder["rows"]


def test_size_machines_named_fleet_index_with_the_fleets_inputs() -> None:
    args = BareMetalFleetArgs(fleet=fleet(), environment=Environment.STAGING, cluster=CLUSTER)
    recorder, component, rows = build(args)
    assert sorted(recorder.machines) == ["kura-ovh-0", "kura-ovh-1"]
    inputs = recorder.machines["kura-ovh-0"]
    assert {k: inputs[k] for k in machine_props(args, project="tuist-infra", stack="staging")} == {
        "project": "tuist-infra",
        "stack": "staging",
        "environment": "staging",
        "fleet": "kura-ovh",
        "vendor": "ovh",
        "marker": "tuist-kura-staging-ovh",
        "node_pool": "kura-ovh",
        "labels": {"tuist.dev/region": "ca-east"},
        "taints": [{"key": "tuist.dev/kura-cache", "value": "true", "effect": "NoSchedule"}],
        "datacenter_prefix": "bhs",
        "ssh_user": "ubuntu",
        "ssh_port": 22,
        "os": "ubuntu_24.04",
        "kubernetes_minor": "v1.34",
        "api_server": "https://cp.staging.tuist.dev:6443",
        "allow_release": False,
        "allow_production_release": False,
    }
    assert inputs["resource_name"] == "kura-ovh-0"
    assert input_problems(inputs) == []
    # The fleet's SSH port reaches every machine (the dev stack's vendorsim boxes answer on 2222).
    dev_port = BareMetalFleetArgs(
        fleet=fleet(ssh_port=2222), environment=Environment.STAGING, cluster=CLUSTER
    )
    assert {m["ssh_port"] for m in build(dev_port)[0].machines.values()} == {2222}
    assert [m._protect for m in component.machines] == [False, False]
    assert rows == [
        {
            "name": "kura-ovh-0",
            "vendor": "ovh",
            "box_id": "ns1",
            "datacenter": "bhs6",
            "public_ipv4": "203.0.113.1",
            "provider_id": "ovh://bhs6/ns1",
            "node_name": "kura-ovh-ns1",
        },
        {
            "name": "kura-ovh-1",
            "vendor": "ovh",
            "box_id": "ns2",
            "datacenter": "bhs6",
            "public_ipv4": "203.0.113.2",
            "provider_id": "ovh://bhs6/ns2",
            "node_name": "kura-ovh-ns2",
        },
    ]


def test_a_parked_fleet_adopts_nothing() -> None:
    args = BareMetalFleetArgs(fleet=fleet(enabled=False), environment=Environment.STAGING, cluster=CLUSTER)
    recorder, component, rows = build(args)
    assert recorder.machines == {}
    assert component.machines == [] and rows == []


@pytest.mark.parametrize(
    ("environment", "protected"), [(Environment.PRODUCTION, True), (Environment.CANARY, False)]
)
def test_production_machines_are_protected(environment: Environment, protected: bool) -> None:
    marker = f"tuist-kura-{environment.value}-ovh"
    args = BareMetalFleetArgs(
        fleet=fleet(marker=marker), environment=environment, cluster=CLUSTER, allow_production_release=True
    )
    recorder, component, _ = build(args)
    assert [m._protect for m in component.machines] == [protected, protected]
    assert recorder.machines["kura-ovh-1"]["allow_production_release"] is True
