"""Four adjustments of the Pulumi Python SDK's per-resource work, and the collector's schedule, made
once by `__main__.py` (`trim_sdk()`).

Each trims what the SDK does for every resource it registers and changes nothing the engine decides
with (docs/backends.md says what each saved):

- its debug lines are dropped unless TUIST_SDK_DEBUG=1;
- each resource records only the line that declares it, not the whole Python call stack above it;
- its dependency-cycle check walks the graph only when the edge could close a cycle;
- its wait for the program's outstanding outputs at the end is one wait, not one per output;
- the cyclic garbage collector leaves out what the imports made and runs rarely.

`bench.preview evaluate` installs the same on its SDK floor, so the floor it prints is what any
program of as many resources costs with these trims.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import pathlib
import sys
from types import FrameType
from typing import Any

import pulumi
from pulumi.runtime import resource as sdk_resource
from pulumi.runtime import resource_cycle_breaker as cycle_breaker
from pulumi.runtime import rpc as sdk_rpc
from pulumi.runtime import settings as sdk_settings
from pulumi.runtime import stack as sdk_stack
from pulumi.runtime.proto import source_pb2

SDK_DEBUG = "TUIST_SDK_DEBUG"


def drop_sdk_debug_lines() -> None:
    """The Python SDK sends each of its debug lines (several per resource: preparing, registering,
    resolving) to the engine as a blocking gRPC call, and the engine shows them only under
    `pulumi --debug`, which it does not tell the program. They were a fifth of a no-change dev
    preview's CPU (docs/backends.md); TUIST_SDK_DEBUG=1 sends them again, for `pulumi up --debug`."""
    if os.environ.get(SDK_DEBUG) == "1":
        return

    def dropped(*_args: Any, **_kwargs: Any) -> None:
        return None

    setattr(pulumi.log, "debug", dropped)  # noqa: B010 (the module attribute every SDK caller reads)


def declaring_line() -> source_pb2.StackTrace:
    """The SDK's `_get_stack_trace`, cut to its first frame: the line that declares the resource.

    The SDK walks out from its own frames to the third `__init__` (Resource, Custom/Component
    resource, the concrete class) and sends every frame outside it, each read through linecache and
    turned into a file URI. The engine keeps that whole stack in the state (1.4 KB of a machine's 4 to
    6 KB) and writes the state after every step. The first frame is the source position the engine
    shows; it is the only one kept, found by the same walk without reading any source line."""
    frame: FrameType | None = sys._getframe(1)
    inits = 0
    while frame is not None:
        if frame.f_code.co_name == "__init__":
            inits += 1
            if inits == 3:
                break
        frame = frame.f_back
    caller = frame.f_back if frame is not None else None
    if caller is None:
        return source_pb2.StackTrace()
    return source_pb2.StackTrace(frames=[source_pb2.StackFrame(pc=_position(caller))])


def _position(frame: FrameType) -> source_pb2.SourcePosition | None:
    # As the SDK's _get_source_position_for_frame: no position for a frame without a file or a line,
    # or whose file name is not an absolute path.
    filename, line = frame.f_code.co_filename, frame.f_lineno
    if not filename or line is None:
        return None
    try:
        uri = pathlib.Path(filename).as_uri()
    except ValueError:
        return None
    return source_pb2.SourcePosition(uri=uri, line=line)


def record_declaring_lines_only() -> None:
    setattr(sdk_resource, "_get_stack_trace", declaring_line)  # noqa: B010 (read by name per resource)


# Set on a resource once anything depends on it.
_HAS_DEPENDENTS = "_tuist_has_dependents"


def declare_dependency(from_resource: Any, to_resource: Any) -> bool:
    """The SDK's `declare_dependency` (pulumi/runtime/resource_cycle_breaker.py): records that
    `from_resource` depends on `to_resource` unless that closes a cycle; False if it would.

    The SDK walks everything `to_resource` reaches, for every edge, looking for `from_resource`. A
    path back to `from_resource` must end with an edge into it, and edges are only ever added here:
    while nothing depends on `from_resource`, no new edge can close a cycle through it, and the walk
    is skipped. The answer is the SDK's in every case. The walk made evaluation quadratic in the
    fleet: each edge into a machine (a local volume's, say) walked the control-plane firewall's
    dependencies, which are every claim of the stack (5.2 million resources visited at x100)."""
    if from_resource is to_resource:
        return False
    if getattr(from_resource, _HAS_DEPENDENTS, False) and cycle_breaker._reachable(
        from_resource=to_resource, to_resource=from_resource
    ):
        return False
    cycle_breaker._add_dep(from_resource, to_resource)
    setattr(to_resource, _HAS_DEPENDENTS, True)
    return True


def check_cycles_only_where_possible() -> None:
    setattr(sdk_rpc, "declare_dependency", declare_dependency)  # noqa: B010 (read by name per edge)


async def wait_for_rpcs(await_all_outstanding_tasks: bool = True) -> None:
    """The SDK's `wait_for_rpcs` (pulumi/runtime/stack.py), run when the program returns: it awaits
    the RPCs still in flight, then every output still outstanding, until neither is left.

    The SDK waits on the outstanding outputs with FIRST_COMPLETED, which returns as soon as any one
    finishes, then puts the others back and waits again: each round hooks and unhooks a callback on
    every one still pending, so the wait was quadratic in the stack (in a no-change dev preview,
    under a profiler, half the program's function calls and 30% of its time). This one waits with
    FIRST_EXCEPTION: it returns when all are done or as soon as one fails, which the SDK then raised,
    as this does. Everything else is the SDK's."""
    settings = sdk_settings.SETTINGS
    rpc_manager = settings.rpc_manager
    while True:
        while rpc_manager.rpcs:
            await asyncio.sleep(0)
            try:
                await rpc_manager.rpcs.pop()
            except Exception as exn:
                if rpc_manager.unhandled_exception is not None:
                    cause = rpc_manager.unhandled_exception.with_traceback(rpc_manager.exception_traceback)
                    raise exn from cause
                raise
        if rpc_manager.unhandled_exception is not None:
            raise rpc_manager.unhandled_exception.with_traceback(rpc_manager.exception_traceback)
        while await_all_outstanding_tasks:
            with settings.lock:
                if not settings.outputs:
                    break
                pending: list[asyncio.Task[Any]] = list(settings.outputs)
                settings.outputs.clear()
            done, not_done = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                # The SDK's marker of a resource the engine failed to register: the engine reports it,
                # and continue-on-error updates go on (as the SDK).
                with contextlib.suppress(sdk_stack.ResourceRegistrationFailed):
                    await task
            if not_done:
                with settings.lock:
                    settings.outputs.update(not_done)
        if not rpc_manager.rpcs:
            break


def wait_once_for_outstanding_outputs() -> None:
    # run_pulumi_func reads the name when the program has returned, so setting it from the program works.
    setattr(sdk_stack, "wait_for_rpcs", wait_for_rpcs)  # noqa: B010


def trim_sdk() -> None:
    """Everything above, and the collector's schedule: a run allocates a few hundred objects per
    resource and keeps nearly all of them to its end, so the cyclic collector's passes find little
    garbage and cost more the bigger the stack. Everything imported so far is left out of them, and
    they run rarely: at every 100,000 allocations they were still a third of x100's evaluation (48 s of
    CPU, 33 s at every million, for 7% more memory: docs/backends.md)."""
    drop_sdk_debug_lines()
    record_declaring_lines_only()
    check_cycles_only_where_possible()
    wait_once_for_outstanding_outputs()
    gc.freeze()
    gc.set_threshold(1_000_000, 50, 100)
