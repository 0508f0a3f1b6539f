"""The one error tree of tuist-infra, and `scrub`, the one way secrets leave an error message.

    InfraError                      everything this program raises on purpose
    ├── InputError (ValueError)     bad input: a malformed id, marker, key, label; nothing was sent
    │   └── VendorInputError
    ├── ConfigError                 the stack config lacks an account or a secret a call needs
    │   └── VendorConfigError
    └── VendorError                 a vendor API call failed (vendor, call, status, code, message)
        ├── TransientVendorError    worth retrying: 429, 5xx, connection errors, timeouts
        │   └── OutcomeUnknownError a write whose answer was lost: it may have been carried out
        ├── RateLimitError          an hourly request budget is spent (Robot): not worth retrying
        ├── NotFoundError           404
        ├── ConflictError           the object's state refuses the call (409 and kin)
        │   └── TaskAlreadyExistsError
        ├── AuthError               401/403: never retried
        ├── TaskFailedError         a vendor task ended in a failure status
        └── TaskTimeoutError        a vendor task did not finish within its budget

The machine provider's own errors (providers/machine/errors.py `MachineError`) and the SSH runner's
(providers/ssh/runner.py `SshError`) hang under InfraError too.

A `VendorError` names the vendor, the call (method + path template), the HTTP status, the vendor's
own error code and its message, so an operator can tell from one line what failed where. Clients
build the message from the response body only after `scrub`bing their own secrets out of it: a
vendor that echoes a credential back must not leak it into logs or Pulumi diagnostics.
"""

from __future__ import annotations

from collections.abc import Iterable

MAX_MESSAGE = 500
REDACTED = "***"


def scrub(text: str, secrets: Iterable[str], *, limit: int | None = MAX_MESSAGE) -> str:
    """`text` with every non-empty secret replaced by ***, longest first (so a secret inside another
    goes too), then cut to `limit` characters (None: not cut) so it fits one log line."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    if limit is not None and len(text) > limit:
        text = text[:limit] + "..."
    return text


class InfraError(Exception):
    """Root of every error tuist-infra raises on purpose."""


class InputError(InfraError, ValueError):
    """Bad input, refused before anything was sent or changed."""


class VendorInputError(InputError):
    """Bad input to a vendor client call (malformed box id, unusable hardware, unknown OS label)."""


class ConfigError(InfraError):
    """The stack config lacks what a call needs (an account, a secret)."""


class VendorConfigError(ConfigError):
    """A vendor client cannot be built: no account for the vendor, or a credential missing."""


class VendorError(InfraError):
    """A vendor API call failed. `status` is None when no HTTP response came back."""

    def __init__(
        self,
        *,
        vendor: str,
        call: str,
        message: str,
        status: int | None = None,
        code: str | None = None,
        request_id: str | None = None,
        subject: str | None = None,
    ) -> None:
        self.vendor = vendor
        self.call = call
        self.status = status
        self.code = code
        self.message = message
        self.request_id = request_id
        # The concrete thing the call was about (box id, IP): `call` is a path template.
        self.subject = subject
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [f"{self.vendor}: {self.call}"]
        if self.subject:
            parts.append(f"[{self.subject}]")
        status = f"HTTP {self.status}" if self.status is not None else "no response"
        parts.append(f"failed ({status}")
        head = " ".join(parts)
        code = f" {self.code}" if self.code else ""
        tail = f"): {self.message}"
        if self.request_id:
            tail += f" (request id {self.request_id})"
        return head + code + tail


class TransientVendorError(VendorError):
    """Worth retrying: 429, 5xx, connection errors and timeouts.

    `maybe_applied` says whether the vendor may have carried the request out before the failure:
    False only when the request surely never took effect (the connection was never made, or a
    throttle refused it). A write is retried blindly only when it is False; otherwise the client
    first reads back whether the write took effect (see providers/retry.py).
    """

    def __init__(
        self,
        *,
        vendor: str,
        call: str,
        message: str,
        status: int | None = None,
        code: str | None = None,
        request_id: str | None = None,
        subject: str | None = None,
        retry_after: float | None = None,
        maybe_applied: bool = True,
    ) -> None:
        # Seconds the vendor asked us to wait (Retry-After), when it said so.
        self.retry_after = retry_after
        self.maybe_applied = maybe_applied
        super().__init__(
            vendor=vendor,
            call=call,
            message=message,
            status=status,
            code=code,
            request_id=request_id,
            subject=subject,
        )


class OutcomeUnknownError(TransientVendorError):
    """A write failed in a way that leaves open whether the vendor carried it out (a read timeout,
    a dropped connection, a 5xx). Raised only after reading back could not settle it either."""


class RateLimitError(VendorError):
    """A per-hour request budget of the vendor is spent (Robot's 403 RATE_LIMIT_EXCEEDED). Not
    retried: the budget refills over the hour, far beyond any call's patience. `max_request` and
    `interval` (seconds) are the vendor's own figures."""

    def __init__(
        self,
        *,
        vendor: str,
        call: str,
        message: str,
        status: int | None = None,
        code: str | None = None,
        subject: str | None = None,
        max_request: int | None = None,
        interval: int | None = None,
    ) -> None:
        self.max_request = max_request
        self.interval = interval
        if max_request is not None and interval is not None:
            message = (
                f"{message}: this account may call {call} {max_request} times per {interval} s; "
                "wait for the budget to refill (Robot counts per web-service user), then run again"
            )
        super().__init__(vendor=vendor, call=call, message=message, status=status, code=code, subject=subject)


class NotFoundError(VendorError):
    """The box, IP, task or key does not exist (HTTP 404)."""


class ConflictError(VendorError):
    """The vendor refused because of the object's current state (HTTP 409, or OVH's conflict classes)."""


class TaskAlreadyExistsError(ConflictError):
    """An install (or other task of the same kind) already runs on that box."""


class AuthError(VendorError):
    """Credentials rejected or the call not granted (HTTP 401/403). Never retried: Robot blocks the
    source IP for ten minutes after three failed logins."""


class TaskFailedError(VendorError):
    """A vendor task the client waited for ended in a failure state."""


class TaskTimeoutError(VendorError):
    """A vendor task did not finish within the client's wait bound."""


def transport_error(vendor: str, call: str, error: Exception, *, subject: str | None = None) -> VendorError:
    """A connection failure or timeout as a transient error. Only the exception's class goes into
    the message: requests' own text can carry the full URL with its query string.

    A connect timeout or a refused connection never reached the vendor (`maybe_applied` False); a
    read timeout or a connection dropped mid-answer may have been carried out. A request that could
    not even be built (a credential with a trailing newline in a header, an endpoint without its
    scheme) is no transport trouble: retrying cannot help, and nothing was sent."""
    if _unsendable(error):
        return VendorError(
            vendor=vendor,
            call=call,
            subject=subject,
            message=(
                f"the request could not be built ({type(error).__name__}): a credential or endpoint "
                "in the stack config is malformed (a trailing newline or space, a URL without its "
                "scheme); nothing was sent"
            ),
        )
    return TransientVendorError(
        vendor=vendor,
        call=call,
        subject=subject,
        message=f"connection failed: {type(error).__name__}",
        maybe_applied=not _never_sent(error),
    )


def _unsendable(error: BaseException) -> bool:
    """requests refused to build the request: bad header value, URL or scheme."""
    import requests.exceptions as rex

    return isinstance(
        error, rex.InvalidHeader | rex.InvalidURL | rex.MissingSchema | rex.InvalidSchema | rex.URLRequired
    )


def _never_sent(error: BaseException) -> bool:
    """Whether `error` (a requests exception) happened before the request left this machine."""
    import requests

    if isinstance(error, requests.ConnectTimeout):
        return True
    if not isinstance(error, requests.ConnectionError):
        return False
    # requests wraps urllib3's MaxRetryError, whose `reason` is NewConnectionError when the TCP
    # connection itself failed (refused, unreachable): nothing was sent then.
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if type(current).__name__ in ("NewConnectionError", "ConnectionRefusedError"):
            return True
        pending.extend([current.__cause__, current.__context__, getattr(current, "reason", None)])
        pending.extend(arg for arg in current.args if isinstance(arg, BaseException))
    return False
