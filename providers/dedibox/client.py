"""Scaleway Dedibox client (`/dedibox/v1` + IAM ssh keys) over requests, vendor-neutral outside.

Every Dedibox lives in the organisation's default project, so the environment boundary is a server
tag and every call carries the `project_id` filter. Responses are decoded by the scaleway SDK's
own unmarshal functions (see models.py for why the SDK's transport is not used).

Writes and their repeats (docs/vendor-behaviour.md):
- POST .../tags sets the whole tag list: retried like a read.
- POST .../install is sent again only after reading back that the first one started nothing (the
  install record unchanged since before the POST). A refusal while an install runs is that
  install's ticket. An install has no id: a read just after the POST may still show the previous
  record, so `installed` counts only once this install was seen running (the ticket says so, kept
  by the waiter: Reinstall.after) or the record differs from the one before the POST (its digest,
  the ticket's `baseline`).
- POST failover-ips/attach is sent again only after reading back that the IP is neither on the
  box nor busy moving. A refused attach (or detach) is settled by the IP's own state, read right
  after the refusal (GET failover-ips/{id}), never by the refusal's wording, which the API does not
  document: `busy` (another attach or detach of it runs) is waited out and the write sent again, at
  most BUSY_WAITS times; `ready` on the target is done; `ready` on another server (the API does not
  document whether an attach moves it) is done as detach, then attach, and when that second attach
  fails (the refusal had another cause: the server takes no more failover IPs, ...) the IP is
  attached back to the server it was on, so a failed move does not leave it unrouted; anything else
  (`ready` on no server, `locked`) raises the refusal as it came.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import requests

from providers.constants import fleet_key_name
from providers.dedibox.models import (
    SERVER_FAILED,
    box_from_server,
    check_zone,
    decode_os,
    decode_server,
    install_digest,
    install_partitions,
    install_state_of,
    parse_box_id,
    resolve_os,
    tags_with,
)
from providers.errors import (
    AuthError,
    ConflictError,
    NotFoundError,
    TaskFailedError,
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
from providers.vendor import (
    Box,
    Claim,
    InstallState,
    MarkerFiltering,
    Reinstall,
    Vendor,
    single_line_key,
    with_fleet_tags,
)

log = logging.getLogger(__name__)

VENDOR = "dedibox"
PAGE_SIZE = 100

# How many times a refused failover attach (or detach) waits out another operation of the IP (it reads
# `busy`) before the refusal is raised.
BUSY_WAITS = 3
# A move's own waits (for another operation to end, for its detach, for its attach) share this many
# task timeouts from its start, each at most one: the watcher's MOVE_BUDGET_SECONDS counts on it
# (watcher/loop.py; its liveness probe restarts a watcher whose poll outlasts the budget).
MOVE_TASK_TIMEOUTS = 2


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
        poll: PollPolicy = DEFAULT_POLL,
        task_timeout: float = 300.0,
        sleep: Sleep = time.sleep,
        clock: Clock = time.monotonic,
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
        self._poll = poll
        self._task_timeout = task_timeout
        self._sleep = sleep
        self._clock = clock
        self._session = requests.Session()

    # --- boxes -----------------------------------------------------------------------

    def list_boxes(self) -> list[Box]:
        """Every server of every zone; summaries omit tags, so each one is read in full. One that went
        away between the listing and its read is not in the account any more, and does not fail the
        others."""
        return self.boxes_still_there(self.list_box_ids())

    def list_box_ids(self) -> list[str]:
        """Every server of every zone as `<zone>/<id>`: one call per zone and page of 100."""
        return [
            f"{zone}/{int(summary['id'])}"
            for zone in self._zones
            for summary in self._pages(
                "/dedibox/v1/zones/{zone}/servers", f"/dedibox/v1/zones/{zone}/servers", "servers"
            )
        ]

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
        """Write the claim tag. The POST sets the whole list: safe to repeat."""
        zone, server_id = parse_box_id(box_id)
        current = list(decode_server(self._server(zone, server_id, box_id)).tags or [])
        wanted = tags_with(current, claim)
        if wanted == current:
            return
        self._call(
            "POST",
            "/dedibox/v1/zones/{zone}/servers/{server_id}/tags",
            f"/dedibox/v1/zones/{zone}/servers/{server_id}/tags",
            body={"tags": wanted},
            subject=box_id,
            idempotent=True,
        )

    def set_marker_field(self, box_id: str, value: str) -> None:
        """Write the fleet tags (`value`: tags joined by ","), keeping the claim tag. The POST sets
        the whole list: safe to repeat."""
        zone, server_id = parse_box_id(box_id)
        current = list(decode_server(self._server(zone, server_id, box_id)).tags or [])
        wanted = with_fleet_tags(current, value, vendor=Vendor.DEDIBOX, subject=f"Dedibox server {box_id}")
        if wanted == current:
            return
        self._call(
            "POST",
            "/dedibox/v1/zones/{zone}/servers/{server_id}/tags",
            f"/dedibox/v1/zones/{zone}/servers/{server_id}/tags",
            body={"tags": wanted},
            subject=box_id,
            idempotent=True,
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

        def post() -> str:
            created = self._call(
                "POST",
                "/iam/v1alpha1/ssh-keys",
                "/iam/v1alpha1/ssh-keys",
                body={"name": name, "public_key": key, "project_id": self._project_id},
                subject=name,
            )
            return str(created["id"])

        try:
            return verified_write(self._retry, post, lambda: self._ssh_key_id(key), sleep=self._sleep)
        except ConflictError as error:
            # 409 "already exists": a parallel release registered it between our list and our POST.
            found = self._ssh_key_id(key)
            if found:
                return found
            raise error from None

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
    ) -> Reinstall:
        """POST .../install with the fleet key and, for a user-login OS, `user_login` +
        `user_password` (the fleet sudo password the re-join needs) and a blank root_password.

        Dedibox names no error class for "install already queued": when the POST is refused and the
        server's own install status reads running, that running install is returned.
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
        key_name = fleet_key_name(key)
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
            # The answer's partitions are the SDK's Partition, which has a `type` the install's
            # InstallPartition does not: each is sent with InstallPartition's fields only.
            body["partitions"] = install_partitions(plan)
        followed = Reinstall(vendor=Vendor.DEDIBOX, box_id=box_id, started_running=True)
        record = self._install_record(zone, server_id, box_id)
        if record is not None and install_state_of(str(record.get("status") or "")) is InstallState.RUNNING:
            # An install runs already (a retried release): it is the one to follow, never a second.
            log.info("Dedibox reinstall of %s: an install already runs; following it", box_id)
            return followed
        before = install_digest(record)
        # The POST's answer is the new install, running (status `booting`), but a read just after it
        # may still show the previous record: `installed` counts only once this install was seen.
        sent = Reinstall(vendor=Vendor.DEDIBOX, box_id=box_id, started_running=False, baseline=before)

        def post() -> Reinstall:
            self._call(
                "POST",
                "/dedibox/v1/zones/{zone}/servers/{server_id}/install",
                f"/dedibox/v1/zones/{zone}/servers/{server_id}/install",
                body=body,
                subject=box_id,
                extra_secrets=(user_password, body.get("panel_password", "")),
            )
            return sent

        def read_back() -> Reinstall | None:
            record = self._install_record(zone, server_id, box_id)
            if record is None or install_digest(record) == before:
                return None  # the install record did not change: the POST started nothing
            state = install_state_of(str(record.get("status") or ""))
            # A changed record is the new install, seen.
            return followed if state in (InstallState.RUNNING, InstallState.DONE) else None

        try:
            result = verified_write(self._retry, post, read_back, sleep=self._sleep)
        except (TransientVendorError, AuthError, NotFoundError):
            raise
        except VendorError:
            if self.install_state(box_id) is not InstallState.RUNNING:
                raise
            log.info("Dedibox reinstall of %s: an install already runs; following it", box_id)
            return followed
        log.info("Dedibox reinstall of %s with %s %s started", box_id, system.name, system.version)
        return result

    def _install_record(self, zone: str, server_id: int, box_id: str) -> Mapping[str, Any] | None:
        try:
            record = self._call(
                "GET",
                "/dedibox/v1/zones/{zone}/servers/{server_id}/install",
                f"/dedibox/v1/zones/{zone}/servers/{server_id}/install",
                subject=box_id,
            )
        except NotFoundError:
            return None
        return record if isinstance(record, Mapping) else None

    def install_state(self, box_id: str, reinstall: Reinstall | None = None) -> InstallState:
        """From GET .../install and the server's status.

        With the ticket of an install this client started: a step status is RUNNING, `installed`
        DONE; `unknown` with the server in `error` (or `locked`) is FAILED; a missing record is
        waited out (RUNNING) unless the server is in `error`. Until the ticket's install was seen
        running (Reinstall.after), a record that still reads as before the POST is PENDING, as is
        a missing one: the vendor does not show this install yet.
        Without one (what an old install left): a missing record reads DONE on a server that
        carries an OS and PENDING on a bare one; `unknown` reads FAILED when the server is in
        `error`, else PENDING.
        """
        return self._progress(box_id, reinstall)[0]

    def _progress(self, box_id: str, reinstall: Reinstall | None) -> tuple[InstallState, str]:
        zone, server_id = parse_box_id(box_id)
        record = self._install_record(zone, server_id, box_id)
        status = str(record.get("status") or "") if record is not None else ""
        state = install_state_of(status) if record is not None else None
        if (
            reinstall is not None
            and record is not None
            and reinstall.unseen_done(state or InstallState.PENDING, install_digest(record))
        ):
            return InstallState.PENDING, f"{status}, the previous install's record"
        if state is not None:
            return state, status
        server = decode_server(self._server(zone, server_id, box_id))
        server_status = str(server.status)
        if server_status in SERVER_FAILED:
            return InstallState.FAILED, f"install {status or 'missing'}, server {server_status}"
        if reinstall is not None and not reinstall.started_running:
            # Not seen yet: a missing record is no sign that this install runs.
            return InstallState.PENDING, f"install {status or 'missing'}, server {server_status}"
        if reinstall is not None:
            return InstallState.RUNNING, f"install {status or 'missing'}, server {server_status}"
        if record is None:
            return (InstallState.DONE if server.os is not None else InstallState.PENDING), "no install"
        return InstallState.PENDING, status

    def wait_reinstall(self, reinstall: Reinstall, *, timeout: float) -> None:
        """Wait until the install is `installed`; TaskFailedError when it fails (the server goes to
        `error`), TaskTimeoutError after `timeout` seconds. Polls start short and back off."""
        box_id = reinstall.box_id
        last = ""
        ticket = reinstall

        def check() -> bool | None:
            nonlocal last, ticket
            try:
                state, last = self._progress(box_id, ticket)
            except TransientVendorError as error:
                last = str(error)
                return None
            ticket = ticket.after(state)
            if state is InstallState.FAILED:
                raise TaskFailedError(
                    vendor=VENDOR,
                    call="GET /dedibox/v1/zones/{zone}/servers/{server_id}/install",
                    subject=box_id,
                    code=last,
                    message=f"the install failed ({last})",
                )
            return True if state is InstallState.DONE else None

        try:
            poll(
                check,
                timeout=timeout,
                policy=self._poll,
                what="install",
                sleep=self._sleep,
                clock=self._clock,
            )
        except PollTimeout:
            raise TaskTimeoutError(
                vendor=VENDOR,
                call="GET /dedibox/v1/zones/{zone}/servers/{server_id}/install",
                subject=box_id,
                message=f"install not finished after {timeout:g}s (last seen: {last or 'no answer'})",
            ) from None

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

    def _fip(self, zone: str, fip_id: int, ip: str) -> Mapping[str, Any]:
        body = self._call(
            "GET",
            "/dedibox/v1/zones/{zone}/failover-ips/{ip_id}",
            f"/dedibox/v1/zones/{zone}/failover-ips/{fip_id}",
            subject=ip,
        )
        return body if isinstance(body, Mapping) else {}

    @staticmethod
    def _target_of(zone: str, fip: Mapping[str, Any]) -> str | None:
        server_id = fip.get("server_id")
        if not server_id:
            return None
        return f"{fip.get('server_zone') or zone}/{int(server_id)}"

    def failover_target(self, ip: str) -> str | None:
        zone, fip = self._find_failover(ip)
        return self._target_of(zone, fip)

    def failover_move_state(self, ip: str) -> str | None:
        """The failover IP's own status ("busy" while an attach or detach runs, then "ready")."""
        zone, fip = self._find_failover(ip)
        current = self._fip(zone, int(fip["id"]), ip)
        return f"failover IP {current.get('status') or 'unknown'}"

    def move_failover(self, ip: str, box_id: str) -> None:
        """Attach `ip` to `box_id` and wait until the IP reads ready on it; a no-op when it is
        already there. A refused attach is settled by the IP's state read right after it (its
        wording is undocumented and not looked at): `busy` is waited out and the attach sent again
        (at most BUSY_WAITS times); `ready` on `box_id` is done; `ready` on another server is
        detach, then attach, putting the IP back where it was if that attach fails; anything else
        raises the refusal. The move's waits share MOVE_TASK_TIMEOUTS task timeouts (the put-back's
        own wait aside)."""
        parse_box_id(box_id)
        fip_zone, fip = self._find_failover(ip)
        if self._target_of(fip_zone, fip) == box_id:
            return
        fip_id = int(fip["id"])
        deadline = self._clock() + MOVE_TASK_TIMEOUTS * self._task_timeout

        def there(current: Mapping[str, Any]) -> bool:
            return self._target_of(fip_zone, current) == box_id

        waits = 0
        while True:
            try:
                self._attach(fip_zone, fip_id, ip, box_id)
            except VendorError as refused:
                if isinstance(refused, (TransientVendorError, AuthError, NotFoundError)):
                    raise
                current = self._fip(fip_zone, fip_id, ip)
                status = current.get("status")
                where = self._target_of(fip_zone, current)
                if status == "busy":
                    if waits >= BUSY_WAITS:
                        raise _noted(refused, f"the IP still reads busy after {BUSY_WAITS} waits") from None
                    waits += 1
                    log.info(
                        "Dedibox attach of %s to %s refused while the IP is busy (on %s); "
                        "waiting for it, then attaching again",
                        ip,
                        box_id,
                        where or "no server",
                    )
                    if there(self._wait_fip(fip_zone, fip_id, ip, _settled, deadline)):
                        return  # the other operation put it there
                    continue
                if status != "ready" or where is None:
                    raise
                if where == box_id:
                    log.info("Dedibox attach of %s to %s refused, but the IP is there already", ip, box_id)
                    return
                log.info(
                    "Dedibox attach of %s to %s refused while on %s (%s); detaching first",
                    ip,
                    box_id,
                    where,
                    refused.message,
                )
                self._detach(fip_zone, fip_id, ip, where, deadline)
                try:
                    self._attach(fip_zone, fip_id, ip, box_id)
                    self._wait_fip(fip_zone, fip_id, ip, there, deadline)
                except VendorError as failed:
                    raise self._put_back(fip_zone, fip_id, ip, where, failed) from None
                return
            self._wait_fip(fip_zone, fip_id, ip, there, deadline)
            return

    def _attach(self, fip_zone: str, fip_id: int, ip: str, box_id: str) -> None:
        """POST failover-ips/attach of the IP to `box_id`, sent again only after reading back that the
        IP is neither there nor busy moving."""
        zone, server_id = parse_box_id(box_id)

        def attach() -> bool:
            self._call(
                "POST",
                "/dedibox/v1/zones/{zone}/failover-ips/attach",
                f"/dedibox/v1/zones/{zone}/failover-ips/attach",
                body={"server_id": server_id, "fips_ids": [fip_id]},
                subject=ip,
            )
            return True

        def read_back() -> bool | None:
            current = self._fip(fip_zone, fip_id, ip)
            if self._target_of(fip_zone, current) == box_id or current.get("status") == "busy":
                return True  # there, or on its way: the wait after it settles which
            return None

        verified_write(self._retry, attach, read_back, sleep=self._sleep)

    def _put_back(self, zone: str, fip_id: int, ip: str, previous: str, failed: VendorError) -> VendorError:
        """The move detached the IP from `previous` and its attach then failed: attach it back there,
        so the failed move does not leave it unrouted. Best effort, and only when the IP reads ready
        on no server (anything else is someone else's operation). Returns `failed`, noting what
        became of the IP."""
        detached = f"it had been detached from {previous} for the move"
        try:
            current = self._fip(zone, fip_id, ip)
            now = self._target_of(zone, current)
            if now is not None or current.get("status") != "ready":
                status = current.get("status") or "unknown"
                return _noted(
                    failed, f"{detached}; it now reads {status} on {now or 'no server'}: not put back"
                )
            log.warning(
                "Dedibox move of %s failed after its detach (%s); attaching it back to %s",
                ip,
                failed,
                previous,
            )
            self._attach(zone, fip_id, ip, previous)
            self._wait_fip(zone, fip_id, ip, lambda current: self._target_of(zone, current) == previous)
        except (VendorError, VendorInputError) as error:
            return _noted(failed, f"{detached}; attaching it back failed too, so it may be unrouted: {error}")
        return _noted(failed, f"{detached} and was put back there")

    def _detach(self, zone: str, fip_id: int, ip: str, previous: str, deadline: float) -> None:
        """Detach the IP from `previous` and wait until it reads ready on no server. A refused
        detach is settled by the IP's state, as an attach's: `busy` is waited out (at most
        BUSY_WAITS times), then the detach is sent again while the IP is still on `previous`, and
        is done once it is on no server; anything else raises the refusal."""

        def detach() -> bool:
            self._call(
                "POST",
                "/dedibox/v1/zones/{zone}/failover-ips/detach",
                f"/dedibox/v1/zones/{zone}/failover-ips/detach",
                body={"fips_ids": [fip_id]},
                subject=ip,
            )
            return True

        def read_back() -> bool | None:
            current = self._fip(zone, fip_id, ip)
            return True if not current.get("server_id") or current.get("status") == "busy" else None

        waits = 0
        while True:
            try:
                verified_write(self._retry, detach, read_back, sleep=self._sleep)
            except VendorError as refused:
                if isinstance(refused, (TransientVendorError, AuthError, NotFoundError)):
                    raise
                current = self._fip(zone, fip_id, ip)
                if current.get("status") == "busy" and waits < BUSY_WAITS:
                    waits += 1
                    log.info("Dedibox detach of %s refused while the IP is busy; waiting for it", ip)
                    current = self._wait_fip(zone, fip_id, ip, _settled, deadline)
                    if self._target_of(zone, current) == previous:
                        continue
                if current.get("status") == "ready" and not current.get("server_id"):
                    return  # on no server: nothing left to detach
                raise
            break
        self._wait_fip(zone, fip_id, ip, lambda current: not current.get("server_id"), deadline)

    def _wait_fip(
        self, zone: str, fip_id: int, ip: str, arrived: Any, deadline: float | None = None
    ) -> Mapping[str, Any]:
        """Until the IP is `ready` where `arrived` says; returns that read. For at most the task
        timeout, and not past `deadline` (by the client's clock; one read at least). Ready elsewhere
        after having been `busy` is an operation that ended without getting there: failed at once,
        not waited out to the timeout (the watcher is blocked meanwhile and the IP stays on the box it
        is leaving)."""
        last: Mapping[str, Any] = {}
        seen_busy = False
        timeout = self._task_timeout
        if deadline is not None:
            timeout = max(0.0, min(timeout, deadline - self._clock()))

        def check() -> Mapping[str, Any] | None:
            nonlocal last, seen_busy
            last = self._fip(zone, fip_id, ip)
            if last.get("status") != "ready":
                seen_busy = seen_busy or last.get("status") == "busy"
                return None
            if arrived(last):
                return last
            if seen_busy:
                raise TaskFailedError(
                    vendor=VENDOR,
                    call="GET /dedibox/v1/zones/{zone}/failover-ips/{ip_id}",
                    subject=ip,
                    code="ready",
                    message=f"the failover IP operation ended with the IP on {self._target_of(zone, last)}",
                )
            return None

        try:
            return poll(
                check,
                timeout=timeout,
                policy=self._poll,
                what=f"failover IP {ip}",
                sleep=self._sleep,
                clock=self._clock,
            )
        except PollTimeout:
            raise TaskTimeoutError(
                vendor=VENDOR,
                call="GET /dedibox/v1/zones/{zone}/failover-ips/{ip_id}",
                subject=ip,
                message=(
                    f"failover IP still {last.get('status')!r} on "
                    f"{self._target_of(zone, last)} after {timeout:.0f}s"
                ),
            ) from None

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
        idempotent: bool | None = None,
    ) -> Any:
        """One API call with the retry policy of its kind: reads are retried on transient errors;
        a write only when `idempotent` or when it surely never reached the API."""
        call = f"{method} {template}"
        hidden = (self._secret, *extra_secrets)
        if idempotent is None:
            idempotent = method in ("GET", "PUT", "DELETE")

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

        return call_with_retries(self._retry, once, idempotent=idempotent, sleep=self._sleep)


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
    retry_after = parse_retry_after(response.headers.get("Retry-After"))
    if status == 429:
        # A throttled request was not carried out.
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


def _settled(current: Mapping[str, Any]) -> bool:
    """Any `ready` read: another operation of the IP, waited out wherever it ends."""
    return True


def _noted(error: VendorError, note: str) -> VendorError:
    """`error` (same class and fields) with `note` added to its message."""
    noted = type(error).__new__(type(error))
    noted.__dict__.update(error.__dict__)
    noted.message = f"{error.message}; {note}"
    noted.args = (str(noted),)
    return noted
