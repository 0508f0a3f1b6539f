"""Hetzner Robot web-service client over requests: basic auth, form-encoded POSTs, JSON answers.

Robot has no tasks: every call is synchronous, and a rescue boot or an install takes effect only
after a reset. Robot also has no tags, so the fleet marker and the claim share the server_name.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import requests

from providers import claims
from providers.errors import (
    AuthError,
    ConflictError,
    NotFoundError,
    TaskAlreadyExistsError,
    TransientVendorError,
    VendorError,
    VendorInputError,
    scrub,
    transport_error,
)
from providers.retry import (
    DEFAULT_RETRY,
    DEFAULT_TIMEOUTS,
    HttpTimeouts,
    RetryPolicy,
    parse_retry_after,
    with_retries,
)
from providers.robot.models import RescueInfo, box_from_server, check_server_number, rescue_from
from providers.vendor import Box, Claim, InstallState, MarkerFiltering, single_line_key

log = logging.getLogger(__name__)

VENDOR = "robot"
RESET_KINDS = ("sw", "hw", "man", "power", "power_long")


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
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not api_url.startswith(("http://", "https://")):
            raise VendorInputError(f"Robot api_url {api_url!r} is not an http(s) URL")
        if not username or not password:
            raise VendorInputError("RobotClient: username and password are required")
        self._base = api_url.rstrip("/")
        self._auth = (username, password)
        self._timeouts = timeouts
        self._retry = retry
        self._sleep = sleep
        self._session = requests.Session()

    # --- boxes ------------------------------------------------------------------------

    def list_boxes(self) -> list[Box]:
        return [box_from_server(server) for server in self._servers()]

    def _servers(self) -> list[Mapping[str, Any]]:
        try:
            items = self._call("GET", "/server", "/server")
        except NotFoundError as error:
            # Robot answers 404 SERVER_NOT_FOUND for an account without servers.
            if error.code == "SERVER_NOT_FOUND":
                return []
            raise
        return [item["server"] for item in items or []]

    def get_box(self, box_id: str) -> Box:
        return box_from_server(self._server(box_id))

    def _server(self, box_id: str) -> Mapping[str, Any]:
        number = check_server_number(box_id)
        body = self._call("GET", "/server/{server-number}", f"/server/{number}", subject=number)
        return dict(body["server"])

    def set_claim(self, box_id: str, claim: Claim | None) -> None:
        number = check_server_number(box_id)
        current = str(self._server(number).get("server_name") or "")
        base, _ = claims.parse_robot_server_name(current)
        wanted = claims.robot_server_name(base, claim)
        if wanted == current:
            return
        self._call(
            "POST",
            "/server/{server-number}",
            f"/server/{number}",
            form=[("server_name", wanted)],
            subject=number,
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
        try:
            created = self._call("POST", "/key", "/key", form=[("name", name), ("data", key)], subject=name)
        except ConflictError as error:
            # KEY_ALREADY_EXISTS: a retried POST that went through, or the key under another name.
            found = self._key_fingerprint(key)
            if found:
                return found
            raise error from None
        return str(created["key"]["fingerprint"])

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
        reset. An already armed rescue is deactivated first so the key is the one asked for."""
        number = check_server_number(box_id)
        if not key_fingerprint:
            raise VendorInputError(f"Robot rescue of {number}: key fingerprint is empty")
        form = [("os", "linux"), ("authorized_key", key_fingerprint)]
        path = f"/boot/{number}/rescue"
        try:
            body = self._call("POST", "/boot/{server-number}/rescue", path, form=form, subject=number)
        except ConflictError as error:
            if error.code != "BOOT_ALREADY_ENABLED":
                raise
            self._call("DELETE", "/boot/{server-number}/rescue", path, subject=number)
            body = self._call("POST", "/boot/{server-number}/rescue", path, form=form, subject=number)
        return rescue_from(body)

    def reset(self, box_id: str, kind: str = "hw") -> None:
        number = check_server_number(box_id)
        if kind not in RESET_KINDS:
            raise VendorInputError(
                f"Robot reset of {number}: kind {kind!r} is not one of {', '.join(RESET_KINDS)}"
            )
        self._call(
            "POST", "/reset/{server-number}", f"/reset/{number}", form=[("type", kind)], subject=number
        )

    def start_reinstall(
        self,
        box_id: str,
        *,
        hostname: str,
        ssh_public_key: str,
        user_login: str,
        user_password: str,
        os_label: str = "ubuntu_24.04",
    ) -> None:
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
        fingerprint = self.register_ssh_key("tuist-" + hashlib.sha256(key.encode()).hexdigest()[:12], key)
        self.activate_rescue(number, fingerprint)
        self.reset(number, "hw")
        log.info("Robot server %s reset into rescue", number)

    def install_state(self, box_id: str) -> InstallState:
        """What Robot can tell, honestly: it only knows whether a rescue boot is armed.

        Armed (active) reads RUNNING: the reset is pending or the box is booting into rescue.
        Not armed reads DONE: no vendor-side step is pending, i.e. after start_reinstall the rescue
        boot was consumed and the box waits in rescue for installimage over SSH. Robot never
        reports PENDING or FAILED; the SSH installer owns the state of the install proper.
        """
        return InstallState.RUNNING if self.rescue_state(box_id).active else InstallState.DONE

    # --- failover IPs ---------------------------------------------------------------------

    def failover_target(self, ip: str) -> str | None:
        active = self._failover(ip).get("active_server_ip")
        if not active:
            return None
        for server in self._servers():
            if server.get("server_ip") == active:
                return str(int(server["server_number"]))
        raise VendorError(
            vendor=VENDOR,
            call="GET /failover/{ip}",
            subject=ip,
            message=f"routed to {active}, which is no server of this account",
        )

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
        try:
            self._call(
                "POST",
                "/failover/{ip}",
                f"/failover/{address}",
                form=[("active_server_ip", server_ip)],
                subject=address,
            )
        except ConflictError as error:
            if error.code != "FAILOVER_ALREADY_ROUTED":
                raise

    # --- transport --------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        template: str,
        path: str,
        *,
        form: Sequence[tuple[str, str]] | None = None,
        subject: str | None = None,
    ) -> Any:
        call = f"{method} {template}"

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

        return with_retries(self._retry, once, sleep=self._sleep)


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
    if code == "RATE_LIMIT_EXCEEDED" or status == 429 or status >= 500:
        return TransientVendorError(retry_after=retry_after, **fields)
    if status in (401, 403):
        return AuthError(**fields)
    if status == 404:
        return NotFoundError(**fields)
    if status == 409:
        return ConflictError(**fields)
    return VendorError(**fields)
