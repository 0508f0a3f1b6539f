"""OVH dedicated-server client over python-ovh (request signing), vendor-neutral on the outside.

python-ovh signs every request (application key/secret + consumer key, with OVH's clock from
/auth/time). We call its `raw_call` and read the response ourselves, so that the status, OVH's error
class, the X-OVH-QUERYID and Retry-After all reach the typed error, and a non-JSON 502 from a proxy
is still a retryable 502.
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

from config.models import Vendor
from providers import claims
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
    IP_TASK_FAILED,
    REINSTALL_FUNCTION,
    check_service_name,
    disk_groups_from_hardware,
    install_state_of_task,
    ip_block_segment,
    plan_storage,
    resolve_template,
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

VENDOR = "ovh"
_NO_OS = {"", "none_64"}
# OVH answers a bad signature with 400, not 401/403; it is still a credential problem.
_AUTH_CODES = {"INVALID_SIGNATURE", "INVALID_CREDENTIAL", "NOT_CREDENTIAL", "INVALID_KEY", "NOT_GRANTED_CALL"}


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
        task_poll_interval: float = 5.0,
        task_timeout: float = 600.0,
        sleep: Callable[[float], None] = time.sleep,
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
        self._sleep = sleep
        self._task_poll_interval = task_poll_interval
        self._task_timeout = task_timeout
        self._api = _build_ovh_client(endpoint, application_key, application_secret, consumer_key, timeouts)

    # --- boxes -------------------------------------------------------------------

    def list_boxes(self) -> list[Box]:
        names = self._call("GET", "/dedicated/server", "/dedicated/server")
        if not isinstance(names, list):
            raise self._shape_error("GET /dedicated/server", "expected a list of service names")
        return [self.get_box(str(name)) for name in names]

    def get_box(self, box_id: str) -> Box:
        svc = check_service_name(box_id)
        server = self._call("GET", "/dedicated/server/{svc}", f"/dedicated/server/{_seg(svc)}", subject=svc)
        display_name = self._display_name(svc, self._service_id(svc))
        base, claim = claims.parse_ovh_display_name(display_name)
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
        svc = check_service_name(box_id)
        service_id = self._service_id(svc)
        current = self._display_name(svc, service_id)
        base, _ = claims.parse_ovh_display_name(current)
        wanted = claims.ovh_display_name(base, claim)
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
        infos = self._call(
            "GET",
            "/dedicated/server/{svc}/serviceInfos",
            f"/dedicated/server/{_seg(svc)}/serviceInfos",
            subject=svc,
        )
        try:
            return int(infos["serviceId"])
        except (KeyError, TypeError, ValueError):
            raise self._shape_error(
                "GET /dedicated/server/{svc}/serviceInfos", "no serviceId in the answer", svc
            ) from None

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
    ) -> None:
        """POST /reinstall with one storage entry on the largest disk group.

        OVH images log in as their default user with the key; `user_login` / `user_password` are
        not sent (OVH has no such fields). Raises TaskAlreadyExistsError when an install runs.
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
        self._call(
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
        log.info("OVH reinstall of %s with %s started", svc, template)

    def install_state(self, box_id: str) -> InstallState:
        """State of the newest reinstall task; PENDING when the box has none. A task OVH has already
        purged (404) is skipped for the next newest."""
        svc = check_service_name(box_id)
        query = urlencode({"function": REINSTALL_FUNCTION})
        task_ids = self._call(
            "GET",
            "/dedicated/server/{svc}/task",
            f"/dedicated/server/{_seg(svc)}/task?{query}",
            subject=svc,
        )
        for task_id in sorted((int(t) for t in task_ids or []), reverse=True):
            try:
                task = self._call(
                    "GET",
                    "/dedicated/server/{svc}/task/{taskId}",
                    f"/dedicated/server/{_seg(svc)}/task/{task_id}",
                    subject=svc,
                )
            except NotFoundError:
                continue
            return install_state_of_task(str(task.get("status") or ""))
        return InstallState.PENDING

    # --- failover IPs --------------------------------------------------------------

    def failover_target(self, ip: str) -> str | None:
        block = ip_block_segment(ip)
        info = self._call("GET", "/ip/{ip}", f"/ip/{block}", subject=ip)
        routed = info.get("routedTo") if isinstance(info, Mapping) else None
        target = (routed or {}).get("serviceName")
        return str(target) if target else None

    def move_failover(self, ip: str, box_id: str) -> None:
        """Route `ip` to `box_id` and wait for OVH's IP task; a no-op when it is already there."""
        svc = check_service_name(box_id)
        block = ip_block_segment(ip)
        if self.failover_target(ip) == svc:
            return
        try:
            task = self._call("POST", "/ip/{ip}/move", f"/ip/{block}/move", body={"to": svc}, subject=ip)
        except ConflictError:
            # A retried POST whose first try went through: the IP may already be there.
            if self.failover_target(ip) == svc:
                return
            raise
        task_id = task.get("taskId") if isinstance(task, Mapping) else None
        if task_id is None:
            raise self._shape_error("POST /ip/{ip}/move", "no taskId in the answer", ip)
        self._wait_ip_task(ip, block, int(task_id))

    def _wait_ip_task(self, ip: str, block: str, task_id: int) -> None:
        call = "GET /ip/{ip}/task/{taskId}"
        deadline = time.monotonic() + self._task_timeout
        while True:
            task = self._call("GET", "/ip/{ip}/task/{taskId}", f"/ip/{block}/task/{task_id}", subject=ip)
            status = str(task.get("status") or "")
            if status == "done":
                return
            if status in IP_TASK_FAILED:
                raise TaskFailedError(
                    vendor=VENDOR,
                    call=call,
                    subject=ip,
                    code=status,
                    message=f"IP move task {task_id} ended {status}: {task.get('comment') or ''}".strip(),
                )
            if time.monotonic() >= deadline:
                raise TaskTimeoutError(
                    vendor=VENDOR,
                    call=call,
                    subject=ip,
                    message=f"IP move task {task_id} still {status!r} after {self._task_timeout:.0f}s",
                )
            self._sleep(self._task_poll_interval)

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
    ) -> Any:
        call = f"{method} {template}"

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

        return with_retries(self._retry, once, sleep=self._sleep)

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
    if status == 429 or status >= 500:
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
