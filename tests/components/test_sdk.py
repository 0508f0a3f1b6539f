"""components/sdk.py's wait for the program's outstanding outputs, beside the SDK's own: the same
answers (every output awaited, a failure raised, the SDK's registration-failed marker ignored, outputs
made while waiting awaited too), in one wait where the SDK's takes one per output."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import pulumi
import pytest
from pulumi.runtime import stack as sdk_stack

from components import sdk
from tests.support.new_process import run_python

SDK_WAIT = sdk_stack.wait_for_rpcs
WAITS = {"sdk": SDK_WAIT, "ours": sdk.wait_for_rpcs}
RESOLVERS: set[asyncio.Task[None]] = set()


class NoResources(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        return args.name, dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None


@pytest.fixture(params=sorted(WAITS))
def wait(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Installs one of the two waits; yields [asyncio.wait calls, futures handed to them]."""
    monkeypatch.setattr(sdk_stack, "wait_for_rpcs", WAITS[request.param])
    counted = [0, 0]
    real_wait = asyncio.wait

    async def counting(futures: Any, **kwargs: Any) -> Any:
        counted[0] += 1
        counted[1] += len(futures)
        return await real_wait(futures, **kwargs)

    monkeypatch.setattr(asyncio, "wait", counting)
    pulumi.runtime.set_mocks(NoResources(), project="t", stack="t", preview=False)
    yield counted


def one_by_one(count: int, make: Callable[[int], Any] = lambda i: i) -> list[asyncio.Future[Any]]:
    """`count` futures a task resolves one at a time, a short sleep apart, once the program has
    returned: as the engine's answers reach a program still waiting on its outputs."""
    loop = asyncio.get_event_loop()
    futures: list[asyncio.Future[Any]] = [loop.create_future() for _ in range(count)]

    async def resolve() -> None:
        for i, future in enumerate(futures):
            await asyncio.sleep(0.0002)
            value = make(i)
            if isinstance(value, BaseException):
                future.set_exception(value)
            else:
                future.set_result(value)

    resolver = asyncio.ensure_future(resolve())
    RESOLVERS.add(resolver)  # a reference, so the loop cannot drop the task before it is done
    resolver.add_done_callback(RESOLVERS.discard)
    return futures


def test_every_output_is_awaited_in_one_wait_where_the_sdk_waits_once_per_output(
    wait: list[int], request: pytest.FixtureRequest
) -> None:
    seen: list[int] = []

    def program() -> None:
        for future in one_by_one(300):
            pulumi.Output.from_input(future).apply(seen.append)

    pulumi.runtime.test(program)()  # type: ignore[no-untyped-call]
    assert sorted(seen) == list(range(300))
    calls, handed = wait
    if request.node.callspec.params["wait"] == "sdk":
        # One wait per completed output, each hooking every output still pending: quadratic.
        assert calls > 100 and handed > 10_000, wait
    else:
        assert calls <= 3 and handed <= 3 * 300, wait  # each output is a few tasks


def test_an_output_that_fails_fails_the_program(wait: list[int]) -> None:
    def program() -> None:
        for future in one_by_one(50, lambda i: ValueError("box 7 has no address") if i == 7 else i):
            pulumi.Output.from_input(future).apply(lambda v: v)

    with pytest.raises(ValueError, match="box 7 has no address"):
        pulumi.runtime.test(program)()  # type: ignore[no-untyped-call]


def test_the_sdks_registration_failed_marker_does_not_fail_the_program(wait: list[int]) -> None:
    seen: list[int] = []

    def program() -> None:
        marker = sdk_stack.ResourceRegistrationFailed
        for future in one_by_one(20, lambda i: marker("failed") if i == 3 else i):
            pulumi.Output.from_input(future).apply(seen.append)

    pulumi.runtime.test(program)()  # type: ignore[no-untyped-call]
    assert sorted(seen) == [i for i in range(20) if i != 3]


def test_outputs_made_while_waiting_are_awaited_too(wait: list[int]) -> None:
    late: list[int] = []

    def later(value: int) -> None:
        # An apply that makes more outputs, as a component does when an input resolves.
        for future in one_by_one(5, lambda i: value * 10 + i):
            pulumi.Output.from_input(future).apply(late.append)

    def program() -> None:
        for future in one_by_one(4):
            pulumi.Output.from_input(future).apply(later)

    pulumi.runtime.test(program)()  # type: ignore[no-untyped-call]
    assert sorted(late) == [v * 10 + i for v in range(4) for i in range(5)]


TRIMS_INSTALLED = """
import gc, json
import pulumi
from pulumi.runtime import resource, rpc, stack
from components import sdk
from tests.support.new_process import run_python
def installed():
    return {
        "wait": stack.wait_for_rpcs is sdk.wait_for_rpcs,
        "stack": resource._get_stack_trace is sdk.declaring_line,
        "cycles": rpc.declare_dependency is sdk.declare_dependency,
        "debug": pulumi.log.debug.__name__ == "dropped",
        "threshold": gc.get_threshold(),
        "frozen": gc.get_freeze_count() > 0,
    }
before = installed()
sdk.trim_sdk()
print(json.dumps({"before": before, "after": installed()}))
"""


def test_trim_sdk_installs_every_trim_and_the_collectors_schedule_in_a_new_process() -> None:
    # A process of its own: the trims are for the whole of a program's run (the freeze, the patched SDK).
    out = run_python(TRIMS_INSTALLED, env={k: v for k, v in os.environ.items() if k != sdk.SDK_DEBUG})
    seen = json.loads(out.strip().splitlines()[-1])
    trimmed = {"wait": True, "stack": True, "cycles": True, "debug": True}
    assert seen["before"] == {**{k: False for k in trimmed}, "threshold": [700, 10, 10], "frozen": False}
    assert seen["after"] == {**trimmed, "threshold": [1_000_000, 50, 100], "frozen": True}
