"""Hetzner Robot web-service client over requests: basic auth, form-encoded POSTs, JSON answers.

Robot has no tasks: every call is synchronous, and a rescue boot or an install takes effect only
after a reset. Robot also has no tags, so the fleet marker and the claim share the server_name.

Writes and their repeats (docs/vendor-behaviour.md):
- POST /server/{n} (server_name) sets a whole value: retried like a read.
- POST /boot/{n}/rescue is sent again only after reading back that no rescue boot with our key is
  armed; one armed with our key is the activation (its host keys and password are read back).
- POST /reset/{n} is never repeated blindly: a lost answer is settled by reading back whether the
  armed rescue boot was consumed (the reset happened), or by the caller's own check (`verify`).
- POST /failover/{ip} is sent again only after reading back that the IP is not routed to the box;
  FAILOVER_ALREADY_ROUTED is success and FAILOVER_LOCKED (another switch runs) is waited out, each
  known by its error code whatever the HTTP status it comes with (documented: 409).
Robot limits most calls per hour (models.RATE_LIMITS); over budget a call raises RateLimitError,
which names the budget and is not retried.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import requests

from providers.constants import fleet_key_name
from providers.errors import (
    AuthError,
    ConflictError,
    NotFoundError,
    OutcomeUnknownError,
    RateLimitError,
    TaskAlreadyExistsError,
    TaskTimeoutError,
    TransientVendorError,
    VendorError,
    VendorInputError,
    scrub,
    transport_error,
)
from providers.retry import (
    DEFAULT_POLL,
    DEFAULT_RETRY,
    DEFAULT_TIMEOUTS,
    Clock,
    HttpTimeouts,
    PollPolicy,
    PollTimeout,
    RetryPolicy,
    Sleep,
    call_with_retries,
    parse_retry_after,
    poll,
    verified_write,
)
from providers.robot.models import (
    box_from_server,
    check_server_number,
    parse_server_name,
    rescue_from,
    server_name,
)
from providers.vendor import (
    Box,
    Claim,
    InstallState,
    MarkerFiltering,
    Reinstall,
    RescueInfo,
    Vendor,
    single_line_key,
)

log = logging.getLogger(__name__)

VENDOR = "robot"
RESET_KINDS = ("sw", "hw", "man", "power", "power_long")
# POST /failover/{ip} to the server the IP is routed to already: success.
ALREADY_ROUTED = "FAILOVER_ALREADY_ROUTED"


class RobotClient(MarkerFiltering):
    """One Robot web-service user."""

    def __init__(
        self,
        *,
        api_url: str,
        username: str,
        password: str,
        timeouts: HttpTimeouts = DEFAULT_TIMEOUTS,
        retry: RetryPolicy = DEFAULT_RETRY,
        poll: PollPolicy = DEFAULT_POLL,
        reset_settle_timeout: float = 180.0,
        sleep: Sleep = time.sleep,
        clock: Clock = time.monotonic,
    ) -> None:
        if not api_url.startswith(("http://", "https://")):
            raise VendorInputError(f"Robot api_url {api_url!r} is not an http(s) URL")
        if not username or not password:
            raise VendorInputError("RobotClient: username and password are required")
        self._base = api_url.rstrip("/")
        self._auth = (username, password)
        self._timeouts = timeouts
        self._retry = retry
        self._poll = poll
        # How long a lost reset answer waits for the armed rescue boot to be consumed (the box
        # takes a minute or more to boot the rescue system after a reset).
        self._reset_settle_timeout = reset_settle_timeout
        self._sleep = sleep
        self._clock = clock
        self._session = requests.Session()
        # main IPv4 -> server number: fixed for a server's life, so GET /server (200 an hour) is
        # read again only when an address is not in it.
        self._numbers_by_ip: dict[str, str] = {}

    # --- boxes ------------------------------------------------------------------------

    def list_boxes(self) -> list[Box]:
        """Every server of the account, markers included: one call."""
        return [box_from_server(server) for server in self._servers()]

    def list_box_ids(self) -> list[str]:
        return [str(int(server["server_number"])) for server in self._servers()]

    def _servers(self) -> list[Mapping[str, Any]]:
        try:
            items = self._call("GET", "/server", "/server")
        except NotFoundError as error:
            # Robot answers 404 SERVER_NOT_FOUND for an account without servers.
            if error.code == "SERVER_NOT_FOUND":
                return []
            raise
        servers = [item["server"] for item in items or []]
        self._numbers_by_ip = {
            str(server["server_ip"]): str(int(server["server_number"]))
            for server in servers
            if server.get("server_ip")
        }
        return servers

    def get_box(self, box_id: str) -> Box:
        return box_from_server(self._server(box_id))

    def _server(self, box_id: str) -> Mapping[str, Any]:
        number = check_server_number(box_id)
        body = self._call("GET", "/server/{server-number}", f"/server/{number}", subject=number)
        return dict(body["server"])

    def set_claim(self, box_id: str, claim: Claim | None) -> None:
        """Write the claim into the server_name. Sets a whole value: safe to repeat."""
        self._rewrite_server_name(box_id, lambda base, _claim: server_name(base, claim))

    def set_marker_field(self, box_id: str, value: str) -> None:
        """Write the server_name's fleet marker part, keeping the claim suffix. Safe to repeat."""
        self._rewrite_server_name(box_id, lambda _base, kept: server_name(value, kept))

    def _rewrite_server_name(self, box_id: str, wanted_from: Callable[[str, Claim | None], str]) -> None:
        """Read the server_name, split into marker and claim; POST what `wanted_from` makes of them,
        unless it is already there."""
        number = check_server_number(box_id)
        current = str(self._server(number).get("server_name") or "")
        wanted = wanted_from(*parse_server_name(current))
        if wanted == current:
            return
        self._call(
            "POST",
            "/server/{server-number}",
            f"/server/{number}",
            form=[("server_name", wanted)],
            subject=number,
            idempotent=True,
        )

    # --- ssh keys -------------------------------------------------------------------

    def register_ssh_key(self, name: str, public_key: str) -> str:
        """The fingerprint of `public_key` in the account (Robot refers to keys by fingerprint),
        storing it under `name` if absent. Idempotent by key material."""
        if not name:
            raise VendorInputError("Robot ssh key name is empty")
        key = single_line_key(public_key, where=f"Robot ssh key {name!r}")
        found = self._key_fingerprint(key)
        if found:
            return found

        def post() -> str:
            created = self._call("POST", "/key", "/key", form=[("name", name), ("data", key)], subject=name)
            return str(created["key"]["fingerprint"])

        try:
            return verified_write(self._retry, post, lambda: self._key_fingerprint(key), sleep=self._sleep)
        except ConflictError as error:
            # KEY_ALREADY_EXISTS: a retried POST that went through, or the key under another name.
            found = self._key_fingerprint(key)
            if found:
                return found
            raise error from None

    def _key_fingerprint(self, key: str) -> str | None:
        material = key.split()[:2]
        try:
            items = self._call("GET", "/key", "/key")
        except NotFoundError:
            return None
        for item in items or []:
            stored = item.get("key") or {}
            if str(stored.get("data") or "").split()[:2] == material:
                return str(stored["fingerprint"])
        return None

    # --- rescue, reset, reinstall --------------------------------------------------------

    def rescue_state(self, box_id: str) -> RescueInfo:
        number = check_server_number(box_id)
        return rescue_from(
            self._call("GET", "/boot/{server-number}/rescue", f"/boot/{number}/rescue", subject=number)
        )

    def activate_rescue(self, box_id: str, key_fingerprint: str) -> RescueInfo:
        """Arm the Linux rescue system with `key_fingerprint` authorised; takes effect at the next
        reset. Returns the activation, with the rescue system's host key fingerprints to pin the
        rescue session to. An armed rescue boot with our key is that activation (a retried call
        whose first answer was lost); one armed with another key is deactivated first."""
        number = check_server_number(box_id)
        if not key_fingerprint:
            raise VendorInputError(f"Robot rescue of {number}: key fingerprint is empty")
        form = [("os", "linux"), ("authorized_key", key_fingerprint)]
        path = f"/boot/{number}/rescue"

        def post() -> RescueInfo:
            return rescue_from(
                self._call("POST", "/boot/{server-number}/rescue", path, form=form, subject=number)
            )

        def ours() -> RescueInfo | None:
            armed = self.rescue_state(number)
            return armed if armed.active and key_fingerprint in armed.authorized_key_fingerprints else None

        try:
            return verified_write(self._retry, post, ours, sleep=self._sleep)
        except ConflictError as error:
            if error.code != "BOOT_ALREADY_ENABLED":
                raise
            armed = ours()
            if armed is not None:
                return armed
            self._call("DELETE", "/boot/{server-number}/rescue", path, subject=number)
            return verified_write(self._retry, post, ours, sleep=self._sleep)

    def reset(self, box_id: str, kind: str = "hw", *, verify: Callable[[], bool] | None = None) -> None:
        """Reset the server. Never sent twice on a guess: Robot allows 50 resets an hour, and a
        second reset interrupts the boot the first one started. When the answer is lost, an armed
        rescue boot that is gone proves the reset happened; otherwise `verify` (the caller's own
        check, e.g. the box answers SSH with a new host key) decides; without either the error is
        OutcomeUnknownError, which says the reset may have happened."""
        number = check_server_number(box_id)
        if kind not in RESET_KINDS:
            raise VendorInputError(
                f"Robot reset of {number}: kind {kind!r} is not one of {', '.join(RESET_KINDS)}"
            )
        armed = self.rescue_state(number).active

        def post() -> bool:
            self._call(
                "POST", "/reset/{server-number}", f"/reset/{number}", form=[("type", kind)], subject=number
            )
            return True

        def consumed() -> bool | None:
            return True if not self.rescue_state(number).active else None

        def happened() -> bool | None:
            if verify is not None and verify():
                return True
            if not armed:
                return None
            # The box clears the armed rescue boot when it boots it, a minute or so after a reset.
            try:
                return poll(
                    consumed,
                    timeout=self._reset_settle_timeout,
                    policy=self._poll,
                    what=f"rescue boot of {number}",
                    sleep=self._sleep,
                    clock=self._clock,
                )
            except PollTimeout:
                return None

        try:
            post()
        except OutcomeUnknownError as unknown:
            if happened():
                log.info("Robot reset of %s: the answer was lost, but the reset happened", number)
                return
            raise OutcomeUnknownError(
                vendor=VENDOR,
                call=unknown.call,
                status=unknown.status,
                code=unknown.code,
                subject=number,
                message=(
                    f"{unknown.message}; the reset may have happened and is not sent again "
                    "(a second one would interrupt the boot it started)"
                ),
            ) from None

    def start_reinstall(
        self,
        box_id: str,
        *,
        hostname: str,
        ssh_public_key: str,
        user_login: str,
        user_password: str,
        os_label: str = "ubuntu_24.04",
    ) -> Reinstall:
        """Robot's half of a reinstall: arm the rescue system with the fleet key, then hardware
        reset into it. The installimage run (hostname, user, password, OS) happens over SSH in the
        rescue system and is not this client's. Raises TaskAlreadyExistsError while a rescue boot
        is already armed and not yet consumed."""
        number = check_server_number(box_id)
        key = single_line_key(ssh_public_key, where=f"Robot reinstall of {number}")
        armed = self.rescue_state(number)
        if armed.active:
            raise TaskAlreadyExistsError(
                vendor=VENDOR,
                call="GET /boot/{server-number}/rescue",
                subject=number,
                code="BOOT_ALREADY_ENABLED",
                message="a rescue boot is already armed and has not been booted yet",
            )
        fingerprint = self.register_ssh_key(fleet_key_name(key), key)
        self.activate_rescue(number, fingerprint)
        self.reset(number, "hw")
        log.info("Robot server %s reset into rescue", number)
        return Reinstall(vendor=Vendor.ROBOT, box_id=number)

    def install_state(self, box_id: str, reinstall: Reinstall | None = None) -> InstallState:
        """What Robot can tell, honestly: it only knows whether a rescue boot is armed.

        Armed (active) reads RUNNING: the reset is pending or the box is booting into rescue.
        Not armed reads DONE: no vendor-side step is pending, i.e. after start_reinstall the rescue
        boot was consumed and the box waits in rescue for installimage over SSH. Robot never
        reports PENDING or FAILED; the SSH installer owns the state of the install proper.
        """
        return InstallState.RUNNING if self.rescue_state(box_id).active else InstallState.DONE

    def wait_reinstall(self, reinstall: Reinstall, *, timeout: float) -> None:
        """Wait until the armed rescue boot is consumed (the box booted into rescue)."""
        number = check_server_number(reinstall.box_id)

        def check() -> bool | None:
            return True if self.install_state(number) is InstallState.DONE else None

        try:
            poll(
                check,
                timeout=timeout,
                policy=self._poll,
                what="rescue boot",
                sleep=self._sleep,
                clock=self._clock,
            )
        except PollTimeout:
            raise TaskTimeoutError(
                vendor=VENDOR,
                call="GET /boot/{server-number}/rescue",
                subject=number,
                message=f"the armed rescue boot was not consumed within {timeout:g}s",
            ) from None

    # --- failover IPs ---------------------------------------------------------------------

    def failover_target(self, ip: str) -> str | None:
        """The server number the IP is routed to; None when unrouted. Routed to a server that is not in
        this account (cancelled while it carried the IP, or another account's), it is that server's
        address, which no server number equals: the box the IP is on is none of the fleet's, so the
        watcher and the deploy move it to one that is (as OVH's other service names do)."""
        active = self._failover(ip).get("active_server_ip")
        if not active:
            return None
        number = self._numbers_by_ip.get(str(active))
        if number is None:
            self._servers()
            number = self._numbers_by_ip.get(str(active))
        return number if number is not None else str(active)

    def _failover(self, ip: str) -> Mapping[str, Any]:
        address = _check_ip(ip)
        return dict(self._call("GET", "/failover/{ip}", f"/failover/{address}", subject=address)["failover"])

    def move_failover(self, ip: str, box_id: str) -> None:
        """Route `ip` to the main IP of `box_id`. Synchronous; already routed there is success
        (checked first, since Robot allows 50 switches an hour)."""
        address = _check_ip(ip)
        server_ip = str(self._server(box_id).get("server_ip") or "")
        if not server_ip:
            raise VendorError(
                vendor=VENDOR, call="GET /server/{server-number}", subject=box_id, message="no server_ip"
            )
        if self._failover(address).get("active_server_ip") == server_ip:
            return

        def post() -> bool:
            self._call(
                "POST",
                "/failover/{ip}",
                f"/failover/{address}",
                form=[("active_server_ip", server_ip)],
                subject=address,
            )
            return True

        def routed() -> bool | None:
            return True if self._failover(address).get("active_server_ip") == server_ip else None

        try:
            verified_write(self._retry, post, routed, sleep=self._sleep)
        except VendorError as error:
            # Documented: FAILOVER_ALREADY_ROUTED (409) when the IP already goes to that server. The
            # code says it, whatever the status it comes with.
            if error.code != ALREADY_ROUTED:
                raise
            log.info("Robot failover %s: already routed to %s", address, server_ip)

    # --- transport --------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        template: str,
        path: str,
        *,
        form: Sequence[tuple[str, str]] | None = None,
        subject: str | None = None,
        idempotent: bool | None = None,
    ) -> Any:
        """One API call with the retry policy of its kind: reads are retried on transient errors;
        a write only when `idempotent` or when it surely never reached Robot."""
        call = f"{method} {template}"
        if idempotent is None:
            idempotent = method in ("GET", "DELETE")

        def once() -> Any:
            log.debug("Robot %s", call)
            try:
                response = self._session.request(
                    method,
                    self._base + path,
                    data=list(form) if form is not None else None,
                    auth=self._auth,
                    headers={"Accept": "application/json"},
                    timeout=self._timeouts.pair(),
                )
            except requests.RequestException as error:
                raise transport_error(VENDOR, call, error, subject=subject) from None
            if response.ok:
                if not response.content:
                    return None
                try:
                    return response.json()
                except ValueError:
                    raise VendorError(
                        vendor=VENDOR,
                        call=call,
                        subject=subject,
                        status=response.status_code,
                        message="answer is not JSON",
                    ) from None
            raise _error_from(call, response, subject, self._auth[1])

        return call_with_retries(self._retry, once, idempotent=idempotent, sleep=self._sleep)


def _check_ip(ip: str) -> str:
    try:
        return str(ipaddress.ip_address(ip))
    except ValueError:
        raise VendorInputError(f"Robot failover IP {ip!r} is not an IP address") from None


def _error_from(call: str, response: requests.Response, subject: str | None, password: str) -> VendorError:
    try:
        payload = response.json()
    except ValueError:
        payload = None
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict):
        error = {}
    code = str(error["code"]) if error.get("code") else None
    fields: dict[str, Any] = {
        "vendor": VENDOR,
        "call": call,
        "status": response.status_code,
        "code": code,
        "message": scrub(str(error.get("message") or response.reason or ""), (password,)),
        "subject": subject,
    }
    status = response.status_code
    retry_after = parse_retry_after(response.headers.get("Retry-After"))
    if code == "RATE_LIMIT_EXCEEDED":
        return RateLimitError(
            max_request=_int_or_none(error.get("max_request")),
            interval=_int_or_none(error.get("interval")),
            **fields,
        )
    if code == "FAILOVER_LOCKED":
        # Another switch of this IP runs: ours was refused, not carried out; worth waiting for.
        return TransientVendorError(retry_after=retry_after, maybe_applied=False, **fields)
    if code == ALREADY_ROUTED:
        # A refusal that says where the IP is, on any status: neither retried nor read as a lost
        # answer (a 5xx) or a refused credential (a 401/403); move_failover takes it as success.
        return ConflictError(**fields)
    if status == 429:
        return TransientVendorError(retry_after=retry_after, maybe_applied=False, **fields)
    if status >= 500:
        return TransientVendorError(retry_after=retry_after, **fields)
    if status in (401, 403):
        return AuthError(**fields)
    if status == 404:
        return NotFoundError(**fields)
    if status == 409:
        return ConflictError(**fields)
    return VendorError(**fields)


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
