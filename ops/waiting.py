"""Long waits on a vendor, shown as a rich progress line with the vendor's own task state.

Every wait here only reads: the work it waits for (a reinstall, an IP move) runs at the vendor
whether or not this process is still there. So Ctrl-C during a wait loses nothing: the commands
that start such work find it running on the next run and follow it (OVH's and Dedibox's
start_reinstall return the install that already runs; a failover move reads the route first).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ops.stack import OpsError


@dataclass
class Poll:
    """What one poll saw: `state` is shown as is; `done` ends the wait; `failed` ends it with an error."""

    state: str
    done: bool = False
    failed: str | None = None


def wait_for(
    console: Console,
    what: str,
    poll: Callable[[], Poll],
    *,
    timeout: float,
    interval: float = 2.0,
    max_interval: float = 15.0,
    resume_hint: str,
) -> Poll:
    """Poll until done, failed or `timeout`; the progress line shows `what`, the vendor state and the
    time spent. `resume_hint` is what Ctrl-C and a timeout tell the operator to run next."""
    deadline = time.monotonic() + timeout
    delay = interval
    try:
        with _progress(console) as progress:
            task = progress.add_task(f"{what}: starting", total=None)
            while True:
                seen = poll()
                progress.update(task, description=f"{what}: {seen.state}")
                if seen.failed:
                    raise OpsError(f"{what}: {seen.failed}")
                if seen.done:
                    return seen
                if time.monotonic() + delay > deadline:
                    raise OpsError(
                        f"{what}: still {seen.state} after {timeout:g}s; it runs on at the vendor: "
                        f"{resume_hint}"
                    )
                time.sleep(delay)
                delay = min(delay * 1.5, max_interval)
    except KeyboardInterrupt:
        raise OpsError(
            f"{what}: interrupted; nothing is half-written, the vendor carries on: {resume_hint}"
        ) from None


@contextmanager
def _progress(console: Console) -> Iterator[Progress]:
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    with progress:
        yield progress


@contextmanager
def spinner(
    console: Console, what: str, state: Callable[[], str] | None = None, every: float = 2.0
) -> Iterator[None]:
    """A progress line for a call that waits inside the vendor client (its own polls). `state`, when
    given, is read from the vendor every `every` seconds on a thread of its own and shown on the line
    (a read that fails shows as unknown: it must never break the call being watched)."""
    with _progress(console) as progress:
        task = progress.add_task(what, total=None)
        stop = threading.Event()

        def read() -> str:
            try:
                return state() if state is not None else ""
            except Exception:  # the watched call reports its own errors
                return "vendor state unknown"

        def watch() -> None:
            while not stop.wait(every):
                progress.update(task, description=f"{what}: {read()}")

        watcher = threading.Thread(target=watch, daemon=True) if state is not None else None
        if watcher is not None:
            watcher.start()
        try:
            yield
        finally:
            stop.set()
            if watcher is not None:
                # A read in flight (with its client's retries) is not waited out: the thread is a daemon.
                watcher.join(timeout=every)
        # The last line stays on the terminal: it says what the vendor says now, not only "done".
        progress.update(task, description=f"{what}: done" + (f" ({read()})" if state is not None else ""))
