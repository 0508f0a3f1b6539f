"""Typed errors every vendor client raises.

A `VendorError` names the vendor, the call (method + path template), the HTTP status, the vendor's
own error code and its message, so an operator can tell from one line what failed where. Clients
build the message from the response body only after `scrub`bing their own secrets out of it: a
vendor that echoes a credential back must not leak it into logs or Pulumi diagnostics.
"""

from __future__ import annotations

from collections.abc import Iterable

_MAX_MESSAGE = 500
REDACTED = "***"


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every non-empty secret replaced, cut to a length fit for one log line."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    if len(text) > _MAX_MESSAGE:
        text = text[:_MAX_MESSAGE] + "..."
    return text


class VendorError(Exception):
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
    """Worth retrying: 429, 5xx, rate limits, connection errors and timeouts."""

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
    ) -> None:
        # Seconds the vendor asked us to wait (Retry-After), when it said so.
        self.retry_after = retry_after
        super().__init__(
            vendor=vendor,
            call=call,
            message=message,
            status=status,
            code=code,
            request_id=request_id,
            subject=subject,
        )


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


class VendorInputError(ValueError):
    """Bad input to a client call (malformed box id, unusable hardware, unknown OS label)."""


def transport_error(vendor: str, call: str, error: Exception, *, subject: str | None = None) -> VendorError:
    """A connection failure or timeout as a transient error. Only the exception's class goes into
    the message: requests' own text can carry the full URL with its query string."""
    return TransientVendorError(
        vendor=vendor,
        call=call,
        subject=subject,
        message=f"connection failed: {type(error).__name__}",
    )
