"""Scaleway Dedibox client (`/dedibox/v1` + IAM ssh keys) over requests, vendor-neutral outside.

Every Dedibox lives in the organisation's default project, so the environment boundary is a server
tag and every call carries the `project_id` filter. Responses are decoded by the scaleway SDK's
own unmarshal functions (see models.py for why the SDK's transport is not used).
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import requests

from providers import claims
from providers.dedibox.models import (
    box_from_server,
    check_zone,
    decode_install,
    decode_os,
    decode_server,
    install_state_of,
    parse_box_id,
    resolve_os,
)
from providers.errors import (
    AuthError,
    ConflictError,
    NotFoundError,
    TaskAlreadyExistsError,
    TaskTimeoutError,
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
from providers.vendor import Box, Claim, InstallState, MarkerFiltering, single_line_key

log = logging.getLogger(__name__)

VENDOR = "dedibox"
PAGE_SIZE = 100


class DediboxClient(MarkerFiltering):
    """One Dedibox account: an IAM secret key with DediboxFullAccess on the default project."""

    def __init__(
        self,
        *,
        api_url: str,
        secret_key: str,
        project_id: str,
        zones: Sequence[str],
        timeouts: HttpTimeouts = DEFAULT_TIMEOUTS,
        retry: RetryPolicy = DEFAULT_RETRY,
        task_poll_interval: float = 5.0,
        task_timeout: float = 300.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not api_url.startswith(("http://", "https://")):
            raise VendorInputError(f"Dedibox api_url {api_url!r} is not an http(s) URL")
        if not secret_key:
            raise VendorInputError("DediboxClient: secret_key is empty")
        if not project_id:
            raise VendorInputError("DediboxClient: project_id is empty")
        if not zones:
            raise VendorInputError("DediboxClient: zones is empty")
        self._base = api_url.rstrip("/")
        self._secret = secret_key
        self._project_id = project_id
        self._zones = [check_zone(zone) for zone in zones]
        self._timeouts = timeouts
        self._retry = retry
        self._task_poll_interval = task_poll_interval
        self._task_timeout = task_timeout
        self._sleep = sleep
        self._session = requests.Session()

    # --- boxes -----------------------------------------------------------------------

    def list_boxes(self) -> list[Box]:
        """Every server of every zone; summaries omit tags, so each one is read in full."""
        boxes = []
        for zone in self._zones:
            for summary in self._pages(
                "/dedibox/v1/zones/{zone}/servers", f"/dedibox/v1/zones/{zone}/servers", "servers"
            ):
                boxes.append(self.get_box(f"{zone}/{int(summary['id'])}"))
        return boxes

    def get_box(self, box_id: str) -> Box:
        zone, server_id = parse_box_id(box_id)
        return box_from_server(zone, decode_server(self._server(zone, server_id, box_id)))

    def _server(self, zone: str, server_id: int, box_id: str) -> Any:
        return self._call(
            "GET",
            "/dedibox/v1/zones/{zone}/servers/{server_id}",
            f"/dedibox/v1/zones/{zone}/servers/{server_id}",
            subject=box_id,
        )

    def set_claim(self, box_id: str, claim: Claim | None) -> None:
        zone, server_id = parse_box_id(box_id)
        current = list(decode_server(self._server(zone, server_id, box_id)).tags or [])
        wanted = claims.dedibox_tags(current, claim)
        if wanted == current:
            return
        self._call(
            "POST",
            "/dedibox/v1/zones/{zone}/servers/{server_id}/tags",
            f"/dedibox/v1/zones/{zone}/servers/{server_id}/tags",
            body={"tags": wanted},
            subject=box_id,
        )

    # --- ssh keys ----------------------------------------------------------------------

    def register_ssh_key(self, name: str, public_key: str) -> str:
        """The IAM id of `public_key` in the project, registering it under `name` if absent.
        Idempotent by key material (type + base64), whatever name it was stored under."""
        if not name:
            raise VendorInputError("Dedibox ssh key name is empty")
        key = single_line_key(public_key, where=f"Dedibox ssh key {name!r}")
        found = self._ssh_key_id(key)
        if found:
            return found
        try:
            created = self._call(
                "POST",
                "/iam/v1alpha1/ssh-keys",
                "/iam/v1alpha1/ssh-keys",
                body={"name": name, "public_key": key, "project_id": self._project_id},
                subject=name,
            )
        except ConflictError as error:
            # 409 "already exists": a parallel release registered it between our list and our POST.
            found = self._ssh_key_id(key)
            if found:
                return found
            raise error from None
        return str(created["id"])

    def _ssh_key_id(self, key: str) -> str | None:
        material = key.split()[:2]
        for existing in self._pages("/iam/v1alpha1/ssh-keys", "/iam/v1alpha1/ssh-keys", "ssh_keys"):
            if str(existing.get("public_key") or "").split()[:2] == material:
                return str(existing["id"])
        return None

    # --- install -----------------------------------------------------------------------

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
        """POST .../install with the fleet key and, for a user-login OS, `user_login` +
        `user_password` (the fleet sudo password the re-join needs) and a blank root_password.

        Dedibox names no error class for "install already queued": when the POST is refused and the
        server's own install status reads running, TaskAlreadyExistsError is raised.
        """
        zone, server_id = parse_box_id(box_id)
        if not hostname:
            raise VendorInputError(f"Dedibox reinstall of {box_id}: hostname is empty")
        if not user_login or not user_password:
            # Without the password the later self-join fails with "sudo: a password is required".
            raise VendorInputError(
                f"Dedibox reinstall of {box_id}: user_login and user_password are required"
            )
        key = single_line_key(ssh_public_key, where=f"Dedibox reinstall of {box_id}")
        systems = [
            decode_os(raw)
            for raw in self._pages(
                "/dedibox/v1/zones/{zone}/os",
                f"/dedibox/v1/zones/{zone}/os",
                "os",
                extra={"server_id": server_id},
            )
        ]
        system = resolve_os(os_label, systems, box_id=box_id)
        if not system.allow_ssh_keys:
            raise VendorInputError(f"Dedibox OS {system.name} {system.version} does not accept ssh keys")
        key_name = "tuist-" + hashlib.sha256(key.encode()).hexdigest()[:12]
        body: dict[str, Any] = {
            "os_id": int(system.id),
            "hostname": hostname,
            "ssh_key_ids": [self.register_ssh_key(key_name, key)],
        }
        if system.requires_user:
            body["user_login"] = user_login
            body["user_password"] = user_password
            # The API rejects a root password next to a user login.
            body["root_password"] = ""
        else:
            body["root_password"] = user_password
        if system.requires_panel_password:
            # Nobody logs in to the panel; a random one satisfies the API and is never kept.
            body["panel_password"] = secrets.token_urlsafe(24)
        if system.allow_custom_partitioning:
            plan = self._call(
                "GET",
                "/dedibox/v1/zones/{zone}/servers/{server_id}/partitioning/{os_id}",
                f"/dedibox/v1/zones/{zone}/servers/{server_id}/partitioning/{int(system.id)}",
                subject=box_id,
            )
            body["partitions"] = list((plan or {}).get("partitions") or [])
        try:
            self._call(
                "POST",
                "/dedibox/v1/zones/{zone}/servers/{server_id}/install",
                f"/dedibox/v1/zones/{zone}/servers/{server_id}/install",
                body=body,
                subject=box_id,
                extra_secrets=(user_password, body.get("panel_password", "")),
            )
        except TransientVendorError:
            raise
        except VendorError as refused:
            if self.install_state(box_id) is InstallState.RUNNING:
                raise TaskAlreadyExistsError(
                    vendor=VENDOR,
                    call=refused.call,
                    status=refused.status,
                    code=refused.code,
                    request_id=refused.request_id,
                    subject=box_id,
                    message=f"an install already runs ({refused.message})",
                ) from None
            raise
        log.info("Dedibox reinstall of %s with %s %s started", box_id, system.name, system.version)

    def install_state(self, box_id: str) -> InstallState:
        """From GET .../install. Without an install record (404), a server carrying an OS reads as
        DONE and a bare one as PENDING; an `unknown` status reads FAILED when the server is in
        `error`, else PENDING."""
        zone, server_id = parse_box_id(box_id)
        try:
            install = decode_install(
                self._call(
                    "GET",
                    "/dedibox/v1/zones/{zone}/servers/{server_id}/install",
                    f"/dedibox/v1/zones/{zone}/servers/{server_id}/install",
                    subject=box_id,
                )
            )
        except NotFoundError:
            server = decode_server(self._server(zone, server_id, box_id))
            return InstallState.DONE if server.os is not None else InstallState.PENDING
        state = install_state_of(str(install.status))
        if state is not None:
            return state
        server = decode_server(self._server(zone, server_id, box_id))
        return InstallState.FAILED if str(server.status) == "error" else InstallState.PENDING

    # --- failover IPs --------------------------------------------------------------------

    def _find_failover(self, ip: str) -> tuple[str, Mapping[str, Any]]:
        address = ip.split("/")[0]
        for zone in self._zones:
            for fip in self._pages(
                "/dedibox/v1/zones/{zone}/failover-ips",
                f"/dedibox/v1/zones/{zone}/failover-ips",
                "failover_ips",
            ):
                if fip.get("address") == address:
                    return zone, fip
        raise NotFoundError(
            vendor=VENDOR,
            call="GET /dedibox/v1/zones/{zone}/failover-ips",
            subject=ip,
            message=f"no failover IP {address} in zones {', '.join(self._zones)}",
        )

    @staticmethod
    def _target_of(zone: str, fip: Mapping[str, Any]) -> str | None:
        server_id = fip.get("server_id")
        if not server_id:
            return None
        return f"{fip.get('server_zone') or zone}/{int(server_id)}"

    def failover_target(self, ip: str) -> str | None:
        zone, fip = self._find_failover(ip)
        return self._target_of(zone, fip)

    def move_failover(self, ip: str, box_id: str) -> None:
        """Attach `ip` to `box_id` and wait until the IP reads ready on it; a no-op when it is
        already there."""
        zone, server_id = parse_box_id(box_id)
        fip_zone, fip = self._find_failover(ip)
        if self._target_of(fip_zone, fip) == box_id:
            return
        fip_id = int(fip["id"])
        self._call(
            "POST",
            "/dedibox/v1/zones/{zone}/failover-ips/attach",
            f"/dedibox/v1/zones/{zone}/failover-ips/attach",
            body={"server_id": server_id, "fips_ids": [fip_id]},
            subject=ip,
        )
        deadline = time.monotonic() + self._task_timeout
        while True:
            current = self._call(
                "GET",
                "/dedibox/v1/zones/{zone}/failover-ips/{ip_id}",
                f"/dedibox/v1/zones/{fip_zone}/failover-ips/{fip_id}",
                subject=ip,
            )
            if self._target_of(fip_zone, current) == box_id and current.get("status") == "ready":
                return
            if time.monotonic() >= deadline:
                raise TaskTimeoutError(
                    vendor=VENDOR,
                    call="GET /dedibox/v1/zones/{zone}/failover-ips/{ip_id}",
                    subject=ip,
                    message=(
                        f"failover IP still {current.get('status')!r} on "
                        f"{self._target_of(fip_zone, current)} after {self._task_timeout:.0f}s"
                    ),
                )
            self._sleep(self._task_poll_interval)

    # --- transport ----------------------------------------------------------------------

    def _pages(
        self, template: str, path: str, field: str, *, extra: Mapping[str, Any] | None = None
    ) -> Iterator[Mapping[str, Any]]:
        page = 1
        seen = 0
        while True:
            params = {"project_id": self._project_id, "page": page, "page_size": PAGE_SIZE, **(extra or {})}
            body = self._call("GET", template, path, params=params)
            items = list(body.get(field) or [])
            yield from items
            seen += len(items)
            total = int(body.get("total_count") or 0)
            if not items or seen >= total:
                return
            page += 1

    def _call(
        self,
        method: str,
        template: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        subject: str | None = None,
        extra_secrets: Sequence[str] = (),
    ) -> Any:
        call = f"{method} {template}"
        hidden = (self._secret, *extra_secrets)

        def once() -> Any:
            log.debug("Dedibox %s", call)
            try:
                response = self._session.request(
                    method,
                    self._base + path,
                    params=params,
                    json=body,
                    headers={"X-Auth-Token": self._secret, "Accept": "application/json"},
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
            raise _error_from(call, response, subject, hidden)

        return with_retries(self._retry, once, sleep=self._sleep)


def _error_from(
    call: str, response: requests.Response, subject: str | None, hidden: Sequence[str]
) -> VendorError:
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        payload = {}
    code = payload.get("type") or payload.get("code")
    fields: dict[str, Any] = {
        "vendor": VENDOR,
        "call": call,
        "status": response.status_code,
        "code": str(code) if code else None,
        "message": scrub(str(payload.get("message") or response.reason or ""), hidden),
        "request_id": response.headers.get("x-request-id"),
        "subject": subject,
    }
    status = response.status_code
    if status == 429 or status >= 500:
        return TransientVendorError(
            retry_after=parse_retry_after(response.headers.get("Retry-After")), **fields
        )
    if status in (401, 403):
        return AuthError(**fields)
    if status == 404:
        return NotFoundError(**fields)
    if status == 409:
        return ConflictError(**fields)
    return VendorError(**fields)
