"""The dynamic resources' base (providers/dynamic_resource.py): one process registers any number of
them. The SDK's serialize_provider stacks a pickler wrapper per call, so without the base a program
past about a thousand dynamic resources died with RecursionError."""

from __future__ import annotations

import pickle
from typing import Any

import pulumi
from pulumi.dynamic import dynamic as sdk

from providers.dynamic_resource import _PRISTINE, serialize_provider
from providers.machine import AdoptedMachine
from providers.machine.provider import ClaimProvider, MachineProvider

MACHINE = "pulumi-python:dynamic/machine:AdoptedMachine"
MACHINES = 2_000


class Recorder(pulumi.runtime.Mocks):
    """Every registered resource's name and `__provider`, per type."""

    def __init__(self) -> None:
        self.names: dict[str, list[str]] = {}
        self.providers: dict[str, set[str]] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
        self.names.setdefault(args.typ, []).append(args.name)
        self.providers.setdefault(args.typ, set()).add(args.inputs["__provider"])
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]] | None]:
        return {}, None


def test_two_thousand_machines_register_in_one_process() -> None:
    # Machines on their own (the fleet adds a claim and NodeLabels per slot, three times the
    # resources and the time, and the same serializer): past where the SDK alone hit RecursionError.
    recorder = Recorder()
    pulumi.runtime.set_mocks(recorder, project="tuist-infra", stack="staging", preview=False)
    ids: list[str] = []

    def program() -> Any:
        machines = [
            AdoptedMachine(f"kura-ovh-{i}", {"fleet": "kura-ovh", "box_id": f"ns{i}"})
            for i in range(MACHINES)
        ]
        return pulumi.Output.all(*[m.id for m in machines]).apply(ids.extend)

    pulumi.runtime.test(program)()  # type: ignore[no-untyped-call]
    assert sorted(recorder.names[MACHINE]) == sorted(f"kura-ovh-{i}" for i in range(MACHINES))
    assert len(set(ids)) == MACHINES
    # Every machine carries the one provider, as the SDK's own first serialization gives it.
    assert recorder.providers[MACHINE] == {serialize_provider(MachineProvider())}
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
