"""The progress line of a call that waits inside a vendor client: it shows the vendor's state, read on
a thread of its own, and a failing read never breaks the call it watches."""

from __future__ import annotations

import io
import threading

from rich.console import Console

from ops.waiting import spinner


def test_the_line_reads_the_vendors_state_while_the_call_runs_and_ends_done() -> None:
    console = Console(file=io.StringIO(), width=120)
    read = threading.Event()

    def state() -> str:
        read.set()
        return "the vendor routes it to ns1"

    with spinner(console, "moving 203.0.113.7 to ns1", state=state, every=0.01):
        # The call under way outlasts one read of the vendor's state.
        assert read.wait(5)
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert "moving 203.0.113.7 to ns1: done (the vendor routes it to ns1)" in output


def test_a_state_read_that_fails_is_shown_as_unknown_and_the_call_goes_on() -> None:
    console = Console(file=io.StringIO(), width=120)
    failed = threading.Event()

    def state() -> str:
        failed.set()
        raise RuntimeError("vendor 503")

    finished = False
    with spinner(console, "moving", state=state, every=0.01):
        assert failed.wait(5)
        finished = True
    assert finished
    assert "vendor 503" not in console.file.getvalue()  # type: ignore[attr-defined]
