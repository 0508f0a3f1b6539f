"""The state machine's engine: results, table rows, the run context and the runner.

A flow (adopt, leave, release; providers/machine/states.py) is a table of rows: state, handler,
budget, next state on success, on a retryable error, on a permanent failure, and how many retryable
errors the state takes before they count as permanent. A handler does one step and answers with a
result, the way syself caph's host state machine does:

- `Continue(delay, waiting_for, facts)`: not there yet; call me again after `delay`, within the budget
  (the last pause is cut to what is left of it, for one last look). `facts` that change what a
  resumed wait must know (a reinstall seen running) are recorded before the pause.
- `Complete(facts)`: done; record `facts` (what later states need) and move on.
- `Error(error_type, message)`: failed, worth retrying (through the row's `on_error` state).
- `Failed(error_type, message)`: failed for good (through the row's `on_failure` state).

A state's budget bounds the whole state: an error is tried again in place only when the pause
before the next try still fits in it, and a handler's long step (an SSH script, a drain) is given what
is left of it (`Run.step_timeout`), not a whole budget more.

The runner persists every transition, the last error's type and message, the error count and the
attempt through a ClaimRecord, so a retried create finds where the last one stopped. Time comes from
an injected Clock: tests drive whole flows with a fake one, without sleeping.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from providers.errors import AuthError, TransientVendorError, VendorError, scrub
from providers.machine.errors import (
    ClaimLostError,
    MachineError,
    MachineHostKeyMismatchError,
    MachineInputError,
    MachineStepError,
    NotConfiguredError,
)
from providers.machine.record import ClaimRecord, Progress, now_iso
from providers.machine.spec import Timeouts
from providers.ssh.runner import (
    HostKeyMismatchError,
    RemoteCommandError,
    SshAuthError,
    SshConnectError,
    SshTimeoutError,
)

DONE = "DONE"
FAILED = "FAILED"
MAX_ERROR_TEXT = 1000  # the record's lastError and a failure's cause are cut to this
MAX_ENTRIES_PER_RUN = 3  # a state entered more often than this in one run fails the run (no loops)
MIN_STEP_TIMEOUT = 1.0  # seconds: the least a step is given, however little of its state's budget is left
MAX_RETRY_DELAY = 300  # seconds: the longest pause before a state is tried again in place


# --- time -----------------------------------------------------------------------------------------------


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds."""
        ...

    def wall(self) -> dt.datetime: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


# --- results --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Continue:
    delay: float
    waiting_for: str
    facts: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Complete:
    facts: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Error:
    error_type: str
    message: str


@dataclass(frozen=True)
class Failed:
    error_type: str
    message: str


Result = Continue | Complete | Error | Failed


def classify(error: BaseException) -> Error | Failed:
    """An exception a handler let through, as a result: transport trouble is worth retrying, a refusal
    or a broken promise is not."""
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, HostKeyMismatchError):
        return Failed("HostKeyMismatch", text)
    if isinstance(error, SshAuthError):
        return Failed("SshAuthRefused", text)
    if isinstance(error, RemoteCommandError):
        return Failed("RemoteCommandFailed", text)
    if isinstance(error, SshTimeoutError | SshConnectError):
        return Error("SshUnreachable", text)
    if isinstance(error, TransientVendorError):
        return Error("VendorUnavailable", text)
    if isinstance(error, AuthError):
        return Failed("VendorAuthRefused", text)
    if isinstance(error, VendorError):
        return Failed("VendorRefused", text)
    if isinstance(error, ClaimLostError):
        return Failed("ClaimLost", text)
    if isinstance(error, MachineInputError | NotConfiguredError):
        return Failed("NotConfigured", text)
    if type(error).__name__ == "KubeError" or type(error).__name__ == "KubeconfigError":
        return Error("KubeApi", text)
    if type(error).__module__.startswith("urllib3."):
        # The kubernetes client lets its transport's errors through as they are (no answer, a timeout):
        # worth retrying. Vendor clients turn theirs into TransientVendorError before this.
        return Error("KubeUnreachable", text)
    return Failed(type(error).__name__, text)


# --- the table ------------------------------------------------------------------------------------------


@dataclass
class Run:
    """What a flow's handlers work with. One per provider call; never pickled."""

    machine: str  # the resource's name, first word of every progress line
    vendor: Any  # providers.vendor.Vendor
    box_id: str
    box_label: str  # "ovh box ns1001..." in messages
    timeout: Timeouts
    clock: Clock
    log: Callable[[str], None]
    secrets: list[str]
    facts: dict[str, str] = field(default_factory=dict)
    # What a flow needs beyond that (the specs, settings, clients, SSH target, pins): see states.py.
    extra: dict[str, Any] = field(default_factory=dict)
    # The current state's budget and when it was entered (by `clock`): set by the Runner for each state.
    state_budget: float | None = None
    state_entered: float = 0.0

    def get(self, key: str) -> Any:
        return self.extra[key]

    def remaining(self) -> float:
        """Seconds left of the current state's budget, by the injected clock (negative once it is
        spent); unbounded outside a Runner (a handler called on its own)."""
        if self.state_budget is None:
            return math.inf
        return self.state_budget - (self.clock.now() - self.state_entered)

    def step_timeout(self, step_budget: float) -> float:
        """The timeout of a step started now: its own budget, cut to what is left of the state's, and
        never less than MIN_STEP_TIMEOUT (a step is never given no time at all)."""
        return max(min(step_budget, self.remaining()), MIN_STEP_TIMEOUT)

    def poll_delay(self, wait: str) -> float:
        """The pause before the next look at what `wait` waits for (a vendor task, an SSH host key, a
        Node): short at first, each one POLL_FACTOR times the last, at most POLL_CAP_INTERVALS poll
        intervals. A wait of two seconds then costs about two seconds, not a whole poll interval, and
        one of half an hour a few dozen looks."""
        polls = int(self.extra.get(f"polls:{wait}", 0))
        self.extra[f"polls:{wait}"] = polls + 1
        return poll_delay(polls, self.timeout("poll_interval"))


POLL_FIRST = 0.5  # seconds before the first look (never more than the poll interval)
POLL_FACTOR = 1.5  # each pause this much longer than the last: a wait overshoots by at most half
POLL_CAP_INTERVALS = 12  # the longest pause, in poll intervals (60 s at the default 5 s)


def poll_delay(polls: int, interval: float) -> float:
    """The pause after `polls` earlier looks, with a poll interval of `interval` seconds."""
    return min(min(POLL_FIRST, interval) * POLL_FACTOR**polls, interval * POLL_CAP_INTERVALS)


Handler = Callable[[Run], Result]


@dataclass(frozen=True)
class Row:
    state: str
    handler: Handler
    budget: str  # a Timeouts key
    on_success: str
    on_error: str  # a retryable error goes here (the same state: try again)
    on_failure: str = FAILED  # a permanent failure goes here
    retries: int = 3  # retryable errors this state takes in one run before they count as permanent


Table = Mapping[str, Row]


def check_table(table: Table) -> None:
    """Every next state is a row of the table or DONE / FAILED."""
    for row in table.values():
        for target in (row.on_success, row.on_error, row.on_failure):
            if target not in table and target not in (DONE, FAILED):
                raise ValueError(f"{row.state} leads to {target}, which is not a state of the table")


# --- the runner -----------------------------------------------------------------------------------------


class Runner:
    """Runs a flow from a state to DONE, persisting each transition through the record."""

    def __init__(self, table: Table, run: Run, record: ClaimRecord, progress: Progress, phase: str) -> None:
        check_table(table)
        self.table, self.run, self.record, self.phase = table, run, record, phase
        self.progress = replace(progress, attempt=progress.attempt + 1)
        self.run.facts.update(progress.facts)

    def start(self, state: str) -> Progress:
        try:
            return self._start(state)
        finally:
            self.run.state_budget = None

    def _start(self, state: str) -> Progress:
        clock = self.run.clock
        entries: dict[str, int] = {}
        while state != DONE:
            if state == FAILED:  # only reached through a row's on_failure: raise_failure ran already
                raise AssertionError("unreachable")
            row = self.table[state]
            entries[state] = entries.get(state, 0) + 1
            budget = self.run.timeout(row.budget)
            self._enter(state)
            self.run.log(f"{self.run.machine}: {state} on {self.run.box_label} (budget {budget:g}s)")
            entered = clock.now()
            self.run.state_budget, self.run.state_entered = budget, entered
            errors_here = 0
            last_look = False  # the pause before this look ran to the end of the budget
            while True:
                result = self._call(row)
                elapsed = clock.now() - entered
                if isinstance(result, Continue):
                    self._learn(result.facts)
                    left = budget - elapsed
                    if left > 0 and not last_look:
                        # A pause never runs past the budget: the last one is cut to what is left, for
                        # one more look at its end.
                        last_look = result.delay >= left
                        clock.sleep(min(result.delay, left))
                        continue
                    result = Error("Timeout", f"{result.waiting_for}: not reached within {budget:g}s")
                if isinstance(result, Complete):
                    self.run.facts.update(result.facts)
                    self.run.log(
                        f"{self.run.machine}: {state} on {self.run.box_label} done after {elapsed:.1f}s"
                    )
                    state = row.on_success
                    self.progress = replace(self.progress, error_type=None, last_error=None)
                    break
                errors_here += 1
                retry_in: float | None = None
                if isinstance(result, Error) and row.on_error == state and errors_here <= row.retries:
                    delay = min(self.run.timeout("retry_delay") * 2 ** (errors_here - 1), MAX_RETRY_DELAY)
                    if elapsed + delay < budget:
                        retry_in = delay
                    elif result.error_type != "Timeout":
                        # No time left for another try. The error keeps its type: where a later run
                        # resumes depends on it (a HostKeyMismatch in INSTALLIMAGE starts over).
                        result = Error(
                            result.error_type,
                            f"{result.message} (no time left of {state}'s {budget:g}s budget to try again)",
                        )
                self._failure(result)
                if retry_in is not None:
                    self.run.log(
                        f"{self.run.machine}: {state} on {self.run.box_label}: {result.error_type}, "
                        f"trying again ({errors_here}/{row.retries})"
                    )
                    clock.sleep(retry_in)
                    continue
                if isinstance(result, Error) and row.on_error == state:
                    following = row.on_failure
                elif isinstance(result, Error):
                    following = row.on_error
                else:
                    following = row.on_failure
                if following == FAILED or entries.get(following, 0) >= MAX_ENTRIES_PER_RUN:
                    self._raise(state, result, elapsed)
                self.run.log(
                    f"{self.run.machine}: {state} on {self.run.box_label}: {result.error_type}, "
                    f"going back to {following}"
                )
                state = following
                break
        self._enter(DONE)
        return self.progress

    def _call(self, row: Row) -> Result:
        try:
            return row.handler(self.run)
        except MachineStepError:
            raise
        except MachineError as error:
            return classify(error)
        except Exception as error:  # every other failure becomes a result the table routes
            return classify(error)

    def _enter(self, state: str) -> None:
        self.progress = replace(
            self.progress,
            phase=self.phase,
            state=state,
            last_transition=now_iso(self.run.clock.wall),
            facts=dict(self.run.facts),
        )
        self.progress = self.record.save(self.progress)

    def _learn(self, facts: Mapping[str, str]) -> None:
        """Record facts a waiting state learnt, once each (a record write only when one changed)."""
        if all(self.run.facts.get(key) == value for key, value in facts.items()):
            return
        self.run.facts.update(facts)
        self.progress = self.record.save(replace(self.progress, facts=dict(self.run.facts)))

    def _failure(self, result: Error | Failed) -> None:
        self.progress = replace(
            self.progress,
            error_type=result.error_type,
            error_count=self.progress.error_count + 1,
            last_error=self._text(result.message)[:MAX_ERROR_TEXT],
        )
        self.progress = self.record.save(self.progress)

    def _text(self, message: str) -> str:
        return scrub(message, self.run.secrets, limit=None)

    def _raise(self, state: str, result: Error | Failed, elapsed: float) -> None:
        kind = MachineHostKeyMismatchError if result.error_type == "HostKeyMismatch" else MachineStepError
        raise kind(
            self.run.machine,
            state,
            self.run.box_label,
            elapsed,
            self._text(result.message)[-2 * MAX_ERROR_TEXT :],
            error_type=result.error_type,
            attempt=self.progress.attempt,
            failures=self.progress.error_count,
        )
