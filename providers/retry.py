"""Retry and timeout policy shared by the OVH, Dedibox and Robot clients.

Only `TransientVendorError` is retried (429, 5xx, Robot's RATE_LIMIT_EXCEEDED, connection errors and
timeouts); anything else is a real answer from the vendor and surfaces at once. Waits grow
exponentially with jitter, are capped at `max_delay`, and follow the vendor's Retry-After when it
sends one (still capped, so a vendor cannot park a `pulumi up` for an hour).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import tenacity

from providers.errors import TransientVendorError

T = TypeVar("T")

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


def next_wait(policy: RetryPolicy, attempt: int, error: BaseException | None) -> float:
    """Seconds to wait before attempt `attempt + 1`: the vendor's Retry-After if given, else capped
    jittered exponential backoff."""
    if isinstance(error, TransientVendorError) and error.retry_after is not None:
        return max(0.0, min(error.retry_after, policy.max_delay))
    backoff = tenacity.wait_exponential_jitter(
        multiplier=policy.base_delay, max=policy.max_delay, jitter=policy.base_delay
    )
    return float(min(backoff(_state_for(attempt)), policy.max_delay))


def _state_for(attempt: int) -> tenacity.RetryCallState:
    state = tenacity.RetryCallState(retry_object=tenacity.Retrying(), fn=None, args=(), kwargs={})
    state.attempt_number = attempt
    return state


def with_retries(
    policy: RetryPolicy,
    operation: Callable[[], T],
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run `operation`, retrying it on `TransientVendorError` within `policy`; the last error is
    re-raised unchanged once the attempts are spent."""

    def wait(state: tenacity.RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        return next_wait(policy, state.attempt_number, error)

    def before_sleep(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        delay = state.next_action.sleep if state.next_action else 0.0
        # The error's str() is already scrubbed of credentials.
        log.warning("%s; retry %d/%d in %.2fs", error, state.attempt_number, policy.max_attempts - 1, delay)

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(TransientVendorError),
        stop=tenacity.stop_after_attempt(policy.max_attempts),
        wait=wait,
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
    return retrying(operation)


DEFAULT_TIMEOUTS = HttpTimeouts()
DEFAULT_RETRY = RetryPolicy()
