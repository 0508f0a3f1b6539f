"""OVH dedicated-server client over python-ovh (request signing), vendor-neutral on the outside.

python-ovh signs every request (application key/secret + consumer key, with OVH's clock from
/auth/time). We call its `raw_call` and read the response ourselves, so that the status, OVH's error
class, the X-OVH-QUERYID and Retry-After all reach the typed error, and a non-JSON 502 from a proxy
is still a retryable 502.

Writes and their repeats (docs/vendor-behaviour.md):
- PUT /service/{id} (the displayName) sets a whole value: retried like a read.
- POST .../reinstall and POST /ip/{ip}/move create tasks: sent again only after reading back that
  the first one created none (a new install task in the server's task list; the IP already routed,
  or a move task running). A reinstall refused because one runs is that one's ticket.
- A task is followed by its own id to its own terminal status; OVH answers 404 or 500 for tasks
  still in flight now and then, and those answers are waited out within the wait's budget.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import ovh
import ovh.exceptions
import requests

from providers.errors import (
    AuthError,
    ConflictError,
    NotFoundError,
    TaskAlreadyExistsError,
    TaskFailedError,
    TaskTimeoutError,
    TransientVendorError,
    VendorError,
    VendorInputError,
    scrub,
    transport_error,
)
from providers.ovh.models import (
    IP_MOVE_FUNCTION,
    IP_TASK_FAILED,
    REINSTALL_FUNCTION,
    TASK_DONE,
    TASK_FAILED,
    check_service_name,
    disk_groups_from_hardware,
    display_name,
    install_state_of_task,
    ip_block_segment,
    is_install_function,
    parse_display_name,
    plan_storage,
    resolve_template,
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
)

log = logging.getLogger(__name__)

VENDOR = "ovh"
_NO_OS = {"", "none_64"}
# OVH answers a bad signature with 400, not 401/403; it is still a credential problem.
_AUTH_CODES = {"INVALID_SIGNATURE", "INVALID_CREDENTIAL", "NOT_CREDENTIAL", "INVALID_KEY", "NOT_GRANTED_CALL"}
_RUNNING = frozenset({"init", "todo", "doing", "waitingAck"})
# How far back an IP's task list is searched for a running move (newest first).
_TASK_SCAN = 20


class OvhClient(MarkerFiltering):
    """One OVH account. `endpoint` is a python-ovh key (ovh-eu, ovh-ca, ovh-us, ...) or a base URL
    ending in /1.0 (a local simulator)."""

    def __init__(
        self,
        *,
        endpoint: str,
        application_key: str,
        application_secret: str,
        consumer_key: str,
        timeouts: HttpTimeouts = DEFAULT_TIMEOUTS,
        retry: RetryPolicy = DEFAULT_RETRY,
        poll: PollPolicy = DEFAULT_POLL,
        task_timeout: float = 600.0,
        sleep: Sleep = time.sleep,
        clock: Clock = time.monotonic,
    ) -> None:
        for what, value in (
            ("application_key", application_key),
            ("application_secret", application_secret),
            ("consumer_key", consumer_key),
        ):
            if not value:
                raise VendorInputError(f"OvhClient: {what} is empty")
        self._secrets = (application_secret, consumer_key)
        self._retry = retry
        self._poll = poll
        self._sleep = sleep
        self._clock = clock
        self._task_timeout = task_timeout
        # serviceName -> serviceId never changes for a server: read once per client.
        self._service_ids: dict[str, int] = {}
        self._api = _build_ovh_client(endpoint, application_key, application_secret, consumer_key, timeouts)

    # --- boxes -------------------------------------------------------------------

    def list_boxes(self) -> list[Box]:
        """Every box of the account; one that went away between the listing and its read (terminated,
        moved to another account) is not in it any more, and does not fail the others."""
        return self.boxes_still_there(self.list_box_ids())

    def list_box_ids(self) -> list[str]:
        """Every service name of the account: one call."""
        names = self._call("GET", "/dedicated/server", "/dedicated/server")
        if not isinstance(names, list):
            raise self._shape_error("GET /dedicated/server", "expected a list of service names")
        return [str(name) for name in names]

    def get_box(self, box_id: str) -> Box:
        svc = check_service_name(box_id)
        server = self._call("GET", "/dedicated/server/{svc}", f"/dedicated/server/{_seg(svc)}", subject=svc)
        base, claim = parse_display_name(self._display_name(svc, self._service_id(svc)))
        return Box(
            vendor=Vendor.OVH,
            id=svc,
            name=str(server.get("name") or svc),
            datacenter=str(server.get("datacenter") or ""),
            public_ipv4=server.get("ip") or None,
            state=str(server.get("state") or ""),
            offer=str(server.get("commercialRange") or ""),
            marker_field=base,
            claim=claim,
            has_os=str(server.get("os") or "") not in _NO_OS,
        )

    def set_claim(self, box_id: str, claim: Claim | None) -> None:
        """Write the claim into the displayName. A PUT of the whole value: safe to repeat."""
        self._rewrite_display_name(box_id, lambda base, _claim: display_name(base, claim))

    def set_marker_field(self, box_id: str, value: str) -> None:
        """Write the displayName's fleet marker part, keeping the claim suffix. Safe to repeat."""
        self._rewrite_display_name(box_id, lambda _base, kept: display_name(value, kept))

    def _rewrite_display_name(self, box_id: str, wanted_from: Callable[[str, Claim | None], str]) -> None:
        """Read the displayName, split into marker and claim; PUT what `wanted_from` makes of them,
        unless it is already there."""
        svc = check_service_name(box_id)
        service_id = self._service_id(svc)
        current = self._display_name(svc, service_id)
        wanted = wanted_from(*parse_display_name(current))
        if wanted == current:
            return
        self._call(
            "PUT",
            "/service/{serviceId}",
            f"/service/{service_id}",
            body={"resource": {"displayName": wanted, "name": svc}},
            subject=svc,
        )

    def _service_id(self, svc: str) -> int:
        known = self._service_ids.get(svc)
        if known is not None:
            return known
        infos = self._call(
            "GET",
            "/dedicated/server/{svc}/serviceInfos",
            f"/dedicated/server/{_seg(svc)}/serviceInfos",
            subject=svc,
        )
        try:
            service_id = int(infos["serviceId"])
        except (KeyError, TypeError, ValueError):
            raise self._shape_error(
                "GET /dedicated/server/{svc}/serviceInfos", "no serviceId in the answer", svc
            ) from None
        self._service_ids[svc] = service_id
        return service_id

    def _display_name(self, svc: str, service_id: int) -> str:
        service = self._call("GET", "/services/{serviceId}", f"/services/{service_id}", subject=svc)
        resource = service.get("resource") if isinstance(service, Mapping) else None
        return str((resource or {}).get("displayName") or "")

    # --- reinstall -----------------------------------------------------------------

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
        """POST /reinstall with one storage entry on the largest disk group; returns the ticket of
        the install task, the one a release must see through.

        OVH images log in as their default user with the key; `user_login` / `user_password` are
        not sent (OVH has no such fields). When OVH refuses because an install already runs
        (TaskAlreadyExists), that install is the one returned: a retried release waits for it
        instead of failing or queueing a second wipe.
        """
        svc = check_service_name(box_id)
        if not hostname:
            raise VendorInputError(f"OVH reinstall of {svc}: hostname is empty")
        key = single_line_key(ssh_public_key, where=f"OVH reinstall of {svc}")
        compatible = self._call(
            "GET",
            "/dedicated/server/{svc}/install/compatibleTemplates",
            f"/dedicated/server/{_seg(svc)}/install/compatibleTemplates",
            subject=svc,
        )
        template = resolve_template(os_label, compatible, box_id=svc)
        hardware = self._call(
            "GET",
            "/dedicated/server/{svc}/specifications/hardware",
            f"/dedicated/server/{_seg(svc)}/specifications/hardware",
            subject=svc,
        )
        storage = plan_storage(disk_groups_from_hardware(hardware, box_id=svc), box_id=svc)

        def ticket(task_id: int) -> Reinstall:
            return Reinstall(vendor=Vendor.OVH, box_id=svc, task_id=str(task_id))

        ids = self._install_task_ids(svc)
        # A reinstall that runs already is the one to follow: OVH's answer to a second POST is
        # TaskAlreadyExists on the accounts the reference saw, but it is not documented to be.
        running = self._running_install_task(svc, ids, unreadable_runs=False)
        if running is not None:
            log.info("OVH reinstall of %s: install task %s already runs; following it", svc, running)
            return ticket(running)
        # The newest reinstall task before the POST: a read-back looks only at newer ones.
        known = max(ids, default=0)

        def read_back() -> Reinstall | None:
            newer = [task_id for task_id in self._install_task_ids(svc) if task_id > known]
            return ticket(max(newer)) if newer else None

        def post() -> Reinstall:
            task = self._call(
                "POST",
                "/dedicated/server/{svc}/reinstall",
                f"/dedicated/server/{_seg(svc)}/reinstall",
                body={
                    "operatingSystem": template,
                    "customizations": {"hostname": hostname, "sshKey": key},
                    "storage": storage,
                },
                subject=svc,
            )
            task_id = task.get("taskId") if isinstance(task, Mapping) else None
            if task_id:
                return ticket(int(task_id))
            # Terraform and pigeon-as both met a POST that answered without the task it created.
            found = read_back()
            if found is None:
                raise self._shape_error(
                    "POST /dedicated/server/{svc}/reinstall", "no taskId in the answer", svc
                )
            return found

        try:
            result = verified_write(self._retry, post, read_back, sleep=self._sleep)
        except TaskAlreadyExistsError:
            running = self._running_install_task(svc, unreadable_runs=True)
            if running is None:
                raise
            log.info("OVH reinstall of %s: install task %s already runs; following it", svc, running)
            return ticket(running)
        log.info("OVH reinstall of %s with %s started (task %s)", svc, template, result.task_id)
        return result

    def install_state(self, box_id: str, reinstall: Reinstall | None = None) -> InstallState:
        """State of `reinstall`'s own task; without one, of the newest install task (PENDING when
        the box has none).

        With a ticket, its task answering 404 or 500 reads RUNNING: OVH does that for tasks in
        flight, and never falling through to an older task keeps a release from ending early.
        Without one, the same answer raises VendorError: the newest task may as well be one that
        ended long ago (the prep reinstall), and start_reinstall, which reads it as not running
        before its POST, would wipe a box a RUNNING here had promised only to follow."""
        return self._progress(check_service_name(box_id), reinstall)[0]

    def wait_reinstall(self, reinstall: Reinstall, *, timeout: float) -> None:
        """Wait until `reinstall`'s task is done; TaskFailedError on a failure status (named), and
        TaskTimeoutError after `timeout` seconds. Polls start short and back off."""
        svc = check_service_name(reinstall.box_id)
        if reinstall.task_id is None:
            raise VendorInputError(f"OVH reinstall of {svc}: the ticket names no task")
        last = ""

        def check() -> bool | None:
            nonlocal last
            state, status = self._progress(svc, reinstall)
            last = status
            if state is InstallState.FAILED:
                raise TaskFailedError(
                    vendor=VENDOR,
                    call="GET /dedicated/server/{svc}/task/{taskId}",
                    subject=svc,
                    code=status,
                    message=f"reinstall task {reinstall.task_id} ended {status}",
                )
            return True if state is InstallState.DONE else None

        try:
            poll(
                check,
                timeout=timeout,
                policy=self._poll,
                what="reinstall",
                sleep=self._sleep,
                clock=self._clock,
            )
        except PollTimeout:
            raise TaskTimeoutError(
                vendor=VENDOR,
                call="GET /dedicated/server/{svc}/task/{taskId}",
                subject=svc,
                message=(
                    f"reinstall task {reinstall.task_id} not done after {timeout:g}s "
                    f"(last seen: {last or 'no answer'})"
                ),
            ) from None

    def _progress(self, svc: str, reinstall: Reinstall | None) -> tuple[InstallState, str]:
        if reinstall is None or reinstall.task_id is None:
            ids = self._install_task_ids(svc)
            if not ids:
                return InstallState.PENDING, ""
            task_id, ticketless = ids[0], True
        else:
            task_id, ticketless = int(reinstall.task_id), False
        try:
            task = self._task(svc, task_id)
        except (NotFoundError, TransientVendorError) as error:
            if ticketless:
                # Nothing says the newest task is one in flight (see install_state): no guess.
                raise VendorError(
                    vendor=VENDOR,
                    call=error.call,
                    subject=svc,
                    status=error.status,
                    code=error.code,
                    request_id=error.request_id,
                    message=(
                        f"the newest reinstall task, {task_id}, did not answer: whether an install "
                        "runs cannot be told"
                    ),
                ) from error
            # OVH answers 404 or 500 for tasks in flight now and then; an older task says nothing
            # about this one.
            log.info("OVH task %s of %s: %s (in flight, as OVH does); waiting", task_id, svc, error)
            return InstallState.RUNNING, str(error.status or "no answer")
        status = str(task.get("status") or "")
        return install_state_of_task(status), status

    def _task_ids(self, svc: str, **query: str) -> list[int]:
        """Task ids of the server, newest first."""
        suffix = f"?{urlencode(query)}" if query else ""
        ids = self._call(
            "GET", "/dedicated/server/{svc}/task", f"/dedicated/server/{_seg(svc)}/task{suffix}", subject=svc
        )
        return sorted((int(t) for t in ids or []), reverse=True)

    def _install_task_ids(self, svc: str) -> list[int]:
        """The server's reinstall task ids, newest first (filtered by OVH on the function)."""
        return self._task_ids(svc, function=REINSTALL_FUNCTION)

    def _task(self, svc: str, task_id: int) -> Mapping[str, Any]:
        task = self._call(
            "GET",
            "/dedicated/server/{svc}/task/{taskId}",
            f"/dedicated/server/{_seg(svc)}/task/{task_id}",
            subject=svc,
        )
        return task if isinstance(task, Mapping) else {}

    def _running_install_task(
        self, svc: str, ids: list[int] | None = None, *, unreadable_runs: bool
    ) -> int | None:
        """The reinstall task that runs now: the newest one, unless it has ended (tasks of a
        server run one after the other). One that answers 404/500 is taken as running only when
        `unreadable_runs`: after OVH refused a POST because a task runs. Before any POST it is
        not: the newest task may be the prep reinstall, long done and purged, and following it would
        end a release on a box nobody wiped. A second reinstall, should one run after all, only
        wipes the box twice."""
        ids = self._install_task_ids(svc) if ids is None else ids
        if not ids:
            return None
        try:
            task = self._task(svc, ids[0])
        except (NotFoundError, TransientVendorError) as error:
            if not unreadable_runs:
                log.info("OVH task %s of %s unreadable (%s); reinstalling", ids[0], svc, error)
                return None
            return ids[0]
        if not is_install_function(str(task.get("function") or REINSTALL_FUNCTION)):
            return None
        return ids[0] if task.get("status") in _RUNNING else None

    # --- failover IPs --------------------------------------------------------------

    def failover_target(self, ip: str) -> str | None:
        block = ip_block_segment(ip)
        info = self._call("GET", "/ip/{ip}", f"/ip/{block}", subject=ip)
        routed = info.get("routedTo") if isinstance(info, Mapping) else None
        target = (routed or {}).get("serviceName")
        return str(target) if target else None

    def move_failover(self, ip: str, box_id: str, *, _after_other: bool = False) -> None:
        """Route `ip` to `box_id` and wait until OVH routes it there; a no-op when it already is.

        The POST is sent again only when a read-back shows the first one moved nothing and started
        no move task; a refusal (moving to where the IP is, a move already running) is settled by
        reading where the IP is routed and following the running move. A move someone else started
        (the watcher, an operator) is waited for, then this one is made once more if it went
        elsewhere."""
        svc = check_service_name(box_id)
        block = ip_block_segment(ip)
        if self.failover_target(ip) == svc:
            return
        known = max(self._ip_task_ids(ip, block), default=0)

        def post() -> int | None:
            task = self._call(
                "POST", "/ip/{ip}/move", f"/ip/{block}/move", body={"to": svc}, subject=ip, idempotent=False
            )
            task_id = task.get("taskId") if isinstance(task, Mapping) else None
            if task_id is None:
                raise self._shape_error("POST /ip/{ip}/move", "no taskId in the answer", ip)
            return int(task_id)

        def read_back() -> int | None:
            if self.failover_target(ip) == svc:
                return 0  # moved already: nothing to wait for
            return self._running_ip_task(ip, block, after=known)

        try:
            task_id = verified_write(self._retry, post, read_back, sleep=self._sleep)
        except VendorError as refused:
            if isinstance(refused, (TransientVendorError, AuthError, NotFoundError)):
                raise
            # "already routed there" or "a move already runs": where is it, what runs? OVH runs one
            # move of an IP at a time, and the one running may predate this call (after=0).
            found = read_back()
            other = None if found is not None else self._running_ip_task(ip, block)
            if found is None and other is None:
                raise
            log.info("OVH move of %s to %s refused (%s); settled by reading back", ip, svc, refused.message)
            task_id = found if found is not None else other
            if other is not None:
                self._wait_other_move(ip, block, other)
                if self.failover_target(ip) != svc and not _after_other:
                    self.move_failover(ip, box_id, _after_other=True)
                    return
                task_id = 0
        if task_id:
            self._wait_ip_task(ip, block, task_id, svc)
        if self.failover_target(ip) != svc:
            raise VendorError(
                vendor=VENDOR,
                call="GET /ip/{ip}",
                subject=ip,
                message=f"the move task ended but the IP is not routed to {svc}",
            )

    def failover_move_state(self, ip: str) -> str | None:
        """The newest IP move task of `ip` and its status ("move task 41: doing"); None without one."""
        block = ip_block_segment(ip)
        ids = self._ip_task_ids(ip, block, function=IP_MOVE_FUNCTION)
        if not ids:
            return None
        try:
            task = self._call("GET", "/ip/{ip}/task/{taskId}", f"/ip/{block}/task/{ids[0]}", subject=ip)
        except (NotFoundError, TransientVendorError) as error:
            # OVH answers 404/500 for some tasks in flight (see _wait_ip_task).
            return f"move task {ids[0]}: no answer ({error.status or 'none'})"
        return f"move task {ids[0]}: {task.get('status') or 'unknown'}"

    def _ip_task_ids(self, ip: str, block: str, **query: str) -> list[int]:
        suffix = f"?{urlencode(query)}" if query else ""
        ids = self._call("GET", "/ip/{ip}/task", f"/ip/{block}/task{suffix}", subject=ip)
        return sorted((int(t) for t in ids or []), reverse=True)

    def _running_ip_task(self, ip: str, block: str, *, after: int = 0) -> int | None:
        for task_id in self._ip_task_ids(ip, block, function=IP_MOVE_FUNCTION)[:_TASK_SCAN]:
            if task_id <= after:
                return None
            try:
                task = self._call("GET", "/ip/{ip}/task/{taskId}", f"/ip/{block}/task/{task_id}", subject=ip)
            except (NotFoundError, TransientVendorError):
                continue
            if task.get("status") in _RUNNING:
                return task_id
        return None

    def _wait_other_move(self, ip: str, block: str, task_id: int) -> None:
        """Wait for a move task someone else started to end, wherever it routes the IP."""

        def check() -> bool | None:
            try:
                task = self._call("GET", "/ip/{ip}/task/{taskId}", f"/ip/{block}/task/{task_id}", subject=ip)
            except (NotFoundError, TransientVendorError):
                return None
            return None if task.get("status") in _RUNNING else True

        self._poll_ip_task(
            ip,
            task_id,
            check,
            lambda: f"another IP move, task {task_id}, still runs after {self._task_timeout:.0f}s",
        )

    def _wait_ip_task(self, ip: str, block: str, task_id: int, svc: str) -> None:
        call = "GET /ip/{ip}/task/{taskId}"
        last = ""

        def check() -> bool | None:
            nonlocal last
            try:
                task = self._call("GET", "/ip/{ip}/task/{taskId}", f"/ip/{block}/task/{task_id}", subject=ip)
            except (NotFoundError, TransientVendorError) as error:
                # In flight, OVH sometimes answers 404/500 for the task: where the IP is decides.
                last = str(error.status or "no answer")
                return True if self.failover_target(ip) == svc else None
            status = last = str(task.get("status") or "")
            if status == TASK_DONE:
                return True
            if status in IP_TASK_FAILED or status in TASK_FAILED:
                raise TaskFailedError(
                    vendor=VENDOR,
                    call=call,
                    subject=ip,
                    code=status,
                    message=f"IP move task {task_id} ended {status}: {task.get('comment') or ''}".strip(),
                )
            return None

        self._poll_ip_task(
            ip,
            task_id,
            check,
            lambda: f"IP move task {task_id} still {last!r} after {self._task_timeout:.0f}s",
        )

    def _poll_ip_task(
        self, ip: str, task_id: int, check: Callable[[], bool | None], timed_out: Callable[[], str]
    ) -> None:
        """`check` until it answers, within the task timeout; TaskTimeoutError saying `timed_out()`."""
        try:
            poll(
                check,
                timeout=self._task_timeout,
                policy=self._poll,
                what=f"IP move task {task_id}",
                sleep=self._sleep,
                clock=self._clock,
            )
        except PollTimeout:
            raise TaskTimeoutError(
                vendor=VENDOR, call="GET /ip/{ip}/task/{taskId}", subject=ip, message=timed_out()
            ) from None

    def register_ssh_key(self, name: str, public_key: str) -> str | None:
        """OVH takes the key inline in the reinstall body: nothing to register."""
        single_line_key(public_key, where=f"OVH ssh key {name!r}")
        return None

    # --- transport -----------------------------------------------------------------

    def _call(
        self,
        method: str,
        template: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        subject: str | None = None,
        idempotent: bool | None = None,
    ) -> Any:
        """One API call with the retry policy of its kind: reads and PUTs are retried on transient
        errors; a POST only when it surely never reached OVH (else OutcomeUnknownError)."""
        call = f"{method} {template}"
        if idempotent is None:
            idempotent = method in ("GET", "PUT", "DELETE")

        def once() -> Any:
            log.debug("OVH %s", call)
            try:
                response = self._api.raw_call(method, path, data=body)
            except ovh.exceptions.APIError as error:
                # Only the lazy GET /auth/time goes through python-ovh's own error mapping.
                raise self._from_library_error(call, error, subject) from None
            except requests.RequestException as error:
                raise transport_error(VENDOR, call, error, subject=subject) from None
            return self._decode(call, response, subject)

        return call_with_retries(self._retry, once, idempotent=idempotent, sleep=self._sleep)

    def _decode(self, call: str, response: requests.Response, subject: str | None) -> Any:
        status = response.status_code
        if 200 <= status < 300:
            if status == 204 or not response.content:
                return None
            try:
                return response.json()
            except ValueError:
                raise self._shape_error(call, f"HTTP {status} answer is not JSON", subject) from None
        raise self._error_from(call, response, subject)

    def _error_from(self, call: str, response: requests.Response, subject: str | None) -> VendorError:
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            payload = {}
        code = payload.get("class") or payload.get("errorCode")
        return error_for_status(
            call=call,
            status=response.status_code,
            code=str(code) if code else None,
            message=scrub(str(payload.get("message") or response.reason or ""), self._secrets),
            request_id=response.headers.get("X-OVH-QUERYID"),
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
            subject=subject,
        )

    def _from_library_error(
        self, call: str, error: ovh.exceptions.APIError, subject: str | None
    ) -> VendorError:
        response = getattr(error, "response", None)
        if response is None:
            # python-ovh wraps the requests exception as the second argument of its HTTPError.
            cause = error.args[1] if len(error.args) > 1 and isinstance(error.args[1], Exception) else error
            return transport_error(VENDOR, call, cause, subject=subject)
        return self._error_from(call, response, subject)

    def _shape_error(self, call: str, message: str, subject: str | None = None) -> VendorError:
        return VendorError(vendor=VENDOR, call=call, subject=subject, message=message)


def error_for_status(
    *,
    call: str,
    status: int,
    code: str | None,
    message: str,
    request_id: str | None,
    retry_after: float | None,
    subject: str | None,
) -> VendorError:
    """The typed error for an OVH error answer."""
    fields: dict[str, Any] = {
        "vendor": VENDOR,
        "call": call,
        "status": status,
        "code": code,
        "message": message,
        "request_id": request_id,
        "subject": subject,
    }
    if status == 429:
        # A throttled request was not carried out.
        return TransientVendorError(retry_after=retry_after, maybe_applied=False, **fields)
    if status >= 500:
        return TransientVendorError(retry_after=retry_after, **fields)
    if status in (401, 403) or code in _AUTH_CODES:
        return AuthError(**fields)
    if status == 404:
        return NotFoundError(**fields)
    if (code or "").endswith("TaskAlreadyExists") or "already in todo" in message:
        return TaskAlreadyExistsError(**fields)
    if status == 409:
        return ConflictError(**fields)
    return VendorError(**fields)


def _seg(value: str) -> str:
    return quote(value, safe="")


def _build_ovh_client(
    endpoint: str, application_key: str, application_secret: str, consumer_key: str, timeouts: HttpTimeouts
) -> ovh.Client:
    custom_url = endpoint.startswith(("http://", "https://"))
    if not custom_url and endpoint not in ovh.client.ENDPOINTS:
        known = ", ".join(sorted(ovh.client.ENDPOINTS))
        raise VendorInputError(
            f"OVH endpoint {endpoint!r} is neither a known key ({known}) nor an http(s) URL"
        )
    try:
        api = ovh.Client(
            endpoint="ovh-eu" if custom_url else endpoint,
            application_key=application_key,
            application_secret=application_secret,
            consumer_key=consumer_key,
            timeout=timeouts.pair(),
        )
    except ovh.exceptions.InvalidConfiguration:
        # python-ovh still looks up the OAuth2 pair in OVH_CLIENT_ID / OVH_CLIENT_SECRET and ovh.conf
        # when it is not passed; both modes at once is refused.
        raise VendorInputError(
            "python-ovh found OAuth2 credentials (OVH_CLIENT_ID / OVH_CLIENT_SECRET in the environment "
            "or an ovh.conf) next to the application key; remove them, this client signs requests"
        ) from None
    if custom_url:
        # python-ovh has no argument for a custom base URL; its private _endpoint is the only way.
        api._endpoint = endpoint.rstrip("/")
    return api
