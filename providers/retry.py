"""Retry and polling policy of the OVH, Dedibox and Robot clients, on tenacity.

Retries (`call_with_retries`):
- Only `TransientVendorError` is ever retried (429, 5xx, connection errors, timeouts); anything else
  is a real answer from the vendor and surfaces at once. Robot's RATE_LIMIT_EXCEEDED is not
  transient here: its budget refills over an hour (`RateLimitError`).
- Reads, and writes the vendor treats as idempotent (a PUT of a whole value, a tag list, a server
  name), are retried on any transient error.
- Other writes (a reinstall, an IP move, a rescue activation, a reset) are retried only when the
  failure proves the vendor never saw them (`maybe_applied` False: the connection was never made,
  or a throttle refused them). Any other failure leaves the outcome open: the call raises
  `OutcomeUnknownError` and the client reads back whether the write took effect before it
  decides to send it again (each client says how, per write).
- Waits grow exponentially with jitter, are capped at `max_delay`, and follow the vendor's
  Retry-After when it sends one (still capped, so a vendor cannot park a `pulumi up` for an hour).

Polling (`poll`): waits for a vendor task start short and back off up to a cap, so a task that
takes two seconds costs about two seconds, and one that takes thirty minutes costs a call every
`max_interval`. The clock and the sleep are injected so tests run without waiting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

import tenacity

from providers.errors import OutcomeUnknownError, TransientVendorError

T = TypeVar("T")

Clock = Callable[[], float]
Sleep = Callable[[float], None]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HttpTimeouts:
    """Per-request timeouts in seconds; every HTTP call a client makes carries them."""

    connect: float = 10.0
    read: float = 30.0

    def __post_init__(self) -> None:
        if self.connect <= 0 or self.read <= 0:
            raise ValueError(f"HttpTimeouts: connect and read must be > 0, got {self.connect}, {self.read}")

    def pair(self) -> tuple[float, float]:
        return (self.connect, self.read)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a transient failure is retried.

    `max_attempts` counts the first try. `max_delay` caps one wait, Retry-After included.
    """

    max_attempts: int = 8
    max_delay: float = 30.0
    base_delay: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"RetryPolicy.max_attempts must be >= 1, got {self.max_attempts}")
        if self.max_delay < 0 or self.base_delay < 0:
            raise ValueError(
                "RetryPolicy delays must be >= 0, "
                f"got max_delay={self.max_delay}, base_delay={self.base_delay}"
            )


@dataclass(frozen=True)
class PollPolicy:
    """How a wait for a vendor task polls: the first wait is `first` seconds, each next one
    `factor` times longer, never longer than `max_interval`."""

    first: float = 1.0
    factor: float = 2.0
    max_interval: float = 30.0

    def __post_init__(self) -> None:
        if self.first <= 0 or self.max_interval < self.first or self.factor < 1:
            raise ValueError(
                "PollPolicy needs 0 < first <= max_interval and factor >= 1, "
                f"got first={self.first}, max_interval={self.max_interval}, factor={self.factor}"
            )


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header given in seconds; None when absent or an HTTP date
    (the capped backoff is a fine answer then)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


# A check made before each attempt of each vendor call; it raises to stop the call (None: no check).
# The failover watcher sets it to "still holds the region's Lease" around a move (watcher/loop.py), so
# a move of several calls (and their retries) stops at the next one once another watcher may be moving
# the IP. Context-local: the Pulumi providers and other threads never see it set.
call_guard: ContextVar[Callable[[], None] | None] = ContextVar("call_guard", default=None)


def _guarded(operation: Callable[[], T]) -> Callable[[], T]:
    def attempt() -> T:
        guard = call_guard.get()
        if guard is not None:
            guard()
        return operation()

    return attempt


def _retryable(idempotent: bool) -> Callable[[BaseException], bool]:
    def decide(error: BaseException) -> bool:
        if not isinstance(error, TransientVendorError):
            return False
        return idempotent or not error.maybe_applied

    return decide


def call_with_retries(
    policy: RetryPolicy,
    operation: Callable[[], T],
    *,
    idempotent: bool,
    sleep: Sleep = time.sleep,
) -> T:
    """Run `operation`, retrying it within `policy` on the transient errors its kind allows (see the
    module docstring). A non-idempotent write whose outcome is open raises OutcomeUnknownError; any
    other last error is re-raised unchanged once the attempts are spent."""
    backoff = tenacity.wait_exponential_jitter(
        multiplier=policy.base_delay, max=policy.max_delay, jitter=policy.base_delay
    )

    def wait(state: tenacity.RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, TransientVendorError) and error.retry_after is not None:
            return max(0.0, min(error.retry_after, policy.max_delay))
        return float(min(backoff(state), policy.max_delay))

    def before_sleep(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        delay = state.next_action.sleep if state.next_action else 0.0
        # The error's str() is already scrubbed of credentials.
        log.warning("%s; retry %d/%d in %.2fs", error, state.attempt_number, policy.max_attempts - 1, delay)

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(_retryable(idempotent)),
        stop=tenacity.stop_after_attempt(policy.max_attempts),
        wait=wait,
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        return retrying(_guarded(operation))
    except TransientVendorError as error:
        if idempotent or not error.maybe_applied or isinstance(error, OutcomeUnknownError):
            raise
        raise OutcomeUnknownError(
            vendor=error.vendor,
            call=error.call,
            status=error.status,
            code=error.code,
            request_id=error.request_id,
            subject=error.subject,
            retry_after=error.retry_after,
            message=f"{error.message}; the vendor may have carried the request out",
        ) from None


def with_retries(
    policy: RetryPolicy,
    operation: Callable[[], T],
    *,
    sleep: Sleep = time.sleep,
) -> T:
    """`call_with_retries` for a read (or an idempotent write)."""
    return call_with_retries(policy, operation, idempotent=True, sleep=sleep)


def verified_write(
    policy: RetryPolicy,
    write: Callable[[], T],
    read_back: Callable[[], T | None],
    *,
    sleep: Sleep = time.sleep,
) -> T:
    """Send a non-idempotent `write` at most once per proof that the previous one did not take
    effect: when its answer is lost (OutcomeUnknownError), `read_back` looks at the vendor's state
    and returns what the write would have returned (it took effect) or None (it did not). A None is
    read again after the retry delay, just before the write is sent again: a vendor that accepted the
    write but shows it only a moment later (its task queued) must not get it twice. At most
    `policy.max_attempts` writes; the last OutcomeUnknownError surfaces."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return write()
        except OutcomeUnknownError as unknown:
            found = read_back()
            if found is None and attempt < policy.max_attempts:
                delay = min(policy.base_delay * 2 ** (attempt - 1), policy.max_delay)
                log.warning("%s; read back: not taken effect yet; reading again in %.2fs", unknown, delay)
                sleep(delay)
                found = read_back()
            if found is not None:
                log.info("%s: the vendor had carried it out; not sent again", unknown.call)
                return found
            if attempt >= policy.max_attempts:
                raise
            log.warning("%s; read back twice: it did not take effect; sending it again", unknown)


class PollTimeout(Exception):
    """`poll` ran out of time; `last` is the check's last answer (None). Clients turn it into their
    own typed TaskTimeoutError."""

    def __init__(self, what: str, timeout: float, attempts: int) -> None:
        self.what, self.timeout, self.attempts = what, timeout, attempts
        super().__init__(f"{what}: not reached within {timeout:g}s ({attempts} checks)")


def poll(
    check: Callable[[], T | None],
    *,
    timeout: float,
    policy: PollPolicy,
    what: str,
    sleep: Sleep = time.sleep,
    clock: Clock = time.monotonic,
) -> T:
    """Call `check` until it returns something other than None, waiting per `policy` between calls,
    for at most `timeout` seconds by `clock`; raises PollTimeout then. Exceptions from `check`
    propagate (a check decides itself what it tolerates)."""
    started = clock()

    def out_of_time(state: tenacity.RetryCallState) -> bool:
        return clock() - started >= timeout

    def wait(state: tenacity.RetryCallState) -> float:
        step = policy.first * policy.factor ** (state.attempt_number - 1)
        remaining = max(timeout - (clock() - started), 0.0)
        return min(step, policy.max_interval, remaining) if remaining > 0 else 0.0

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_result(lambda result: result is None),
        stop=out_of_time,
        wait=wait,
        sleep=sleep,
        reraise=True,
    )
    attempts = 0

    def counted() -> T | None:
        nonlocal attempts
        attempts += 1
        return check()

    try:
        result = retrying(counted)
    except tenacity.RetryError:
        raise PollTimeout(what, timeout, attempts) from None
    if result is None:
        raise PollTimeout(what, timeout, attempts)
    return result


DEFAULT_TIMEOUTS = HttpTimeouts()
DEFAULT_RETRY = RetryPolicy()
DEFAULT_POLL = PollPolicy()
