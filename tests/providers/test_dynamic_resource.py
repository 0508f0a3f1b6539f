"""The dynamic resources' base (providers/dynamic_resource.py): one process registers any number of
them. The SDK's serialize_provider stacks a pickler wrapper per call, so without the base a program
past about a thousand dynamic resources died with RecursionError."""

from __future__ import annotations

import pickle
from typing import Any

import pulumi
from pulumi.dynamic import dynamic as sdk

from components.fleet import BareMetalFleet, BareMetalFleetArgs
from config.models import Cluster, Environment, Fleet, Hardware, Vendor
from providers.dynamic_resource import _PRISTINE, serialize_provider
from providers.machine.provider import ClaimProvider, MachineProvider

CLAIM = "pulumi-python:dynamic/machine:MachineClaim"
MACHINE = "pulumi-python:dynamic/machine:AdoptedMachine"
LABELS = "pulumi-python:dynamic/machine:NodeLabels"
MACHINES = 2_000


class Boxes(pulumi.runtime.Mocks):
    """Each claim gets a box of its own; every resource's `__provider` is kept."""

    def __init__(self) -> None:
        self.providers: dict[str, set[str]] = {CLAIM: set(), MACHINE: set(), LABELS: set()}
        self.names: dict[str, list[str]] = {CLAIM: [], MACHINE: [], LABELS: []}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
        inputs = dict(args.inputs)
        if args.typ not in self.names:  # the fleet component
            return f"{args.name}-id", inputs
        self.names[args.typ].append(args.name)
        self.providers[args.typ].add(inputs["__provider"])
        if args.typ == CLAIM:
            box = f"ns{len(self.names[CLAIM])}"
            inputs |= {"box_id": box, "public_ipv4": "203.0.113.7", "provider_id": f"ovh://bhs6/{box}"}
        if args.typ == MACHINE:
            inputs["node_name"] = f"kura-ovh-{inputs['box_id']}"
        return f"{args.name}-id", inputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]] | None]:
        return {}, None


def test_two_thousand_machines_register_in_one_process() -> None:
    fleet = Fleet(
        name="kura-ovh",
        vendor=Vendor.OVH,
        marker="tuist-kura-staging-ovh",
        size=MACHINES,
        node_pool="kura-ovh",
        hardware=Hardware(offer="Advance-1", threads=16, memory_gib=64),
    )
    args = BareMetalFleetArgs(
        fleet=fleet,
        environment=Environment.STAGING,
        cluster=Cluster(
            api_server="https://cp.staging.tuist.dev:6443", runners_controller_image="ghcr.io/t/r:1"
        ),
    )
    boxes = Boxes()
    pulumi.runtime.set_mocks(boxes, project="tuist-infra", stack="staging", preview=False)
    rows: list[Any] = []

    @pulumi.runtime.test  # type: ignore[misc]
    def run() -> Any:
        return BareMetalFleet("kura-ovh", args).machine_outputs.apply(rows.extend)

    run()
    assert [len(boxes.names[kind]) for kind in (CLAIM, MACHINE, LABELS)] == [MACHINES] * 3
    assert len({row["box_id"] for row in rows}) == MACHINES
    # Every resource of a kind carries the one provider, as the engine's first serialization gave it.
    assert boxes.providers[CLAIM] == {serialize_provider(ClaimProvider())}
    assert boxes.providers[MACHINE] == {serialize_provider(MachineProvider())}
    assert len(boxes.providers[LABELS]) == 1
    assert {name: getattr(pickle._Pickler, name) for name in _PRISTINE} == _PRISTINE


def test_the_sdk_serializer_alone_stacks_a_wrapper_per_call_which_the_base_undoes() -> None:
    # What the base guards against, shown on the SDK itself (then put back as it was).
    try:
        sdk.serialize_provider(ClaimProvider())
        once = pickle._Pickler._batch_setitems
        sdk.serialize_provider(ClaimProvider())
        assert pickle._Pickler._batch_setitems is not once  # a second wrapper around the first
        assert serialize_provider(ClaimProvider()) == sdk.serialize_provider(ClaimProvider())
    finally:
        for name, method in _PRISTINE.items():
            setattr(pickle._Pickler, name, method)
    serialize_provider(MachineProvider())
    assert {name: getattr(pickle._Pickler, name) for name in _PRISTINE} == _PRISTINE
