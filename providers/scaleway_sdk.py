"""The scaleway SDK as the Elastic Metal and Apple silicon clients use it. No Pulumi import.

The SDK's API classes (paths, query and body marshalling, pagination, unmarshalling) are used as
they are. Three things about its transport are not fit for a `pulumi up`, so they are replaced here:

- `API._request` calls `requests.request` with no timeout: a dead peer would hang the engine.
  `TimedTransport._request` sends the same request (same headers, params, JSON body, the
  `x-total-count` fold) through a pooled session with connect/read timeouts.
- `API._throw_on_error` calls `res.json()` on every error body, so a proxy's HTML 502 becomes a
  JSONDecodeError that reads like a broken connection. Here an error answer always raises
  `HttpFailure(response)`, and `error_from` reads whatever body came back.
- `Client.validate()` puts the secret key into its ValueError. `make_client` checks the same
  formats first and names the bad setting, never its value.

Every call goes through `Caller.call`, which maps answers onto providers.errors and retries only
`TransientVendorError` (429, 5xx, connection failures), the answers Scaleway documents as worth
retrying, on the rules of providers/retry.py: reads and whole-value writes (GET, PATCH) freely, a
POST only when the failure proves it never reached Scaleway; otherwise it raises
OutcomeUnknownError and the client reads back whether it took effect (an install, a reinstall, an
ssh key) before it sends it again. A 409 `transient_state` is an answer about the resource, not the
request: never retried.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import requests
from scaleway.iam.v1alpha1 import IamV1Alpha1API
from scaleway_core.api import API, Body, Params
from scaleway_core.client import Client
from scaleway_core.validations.string_validation import is_access_key, is_url, is_zone

from providers.constants import fleet_key_name
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
from providers.vendor import Box, InstallState, MarkerFiltering, Reinstall, Vendor, single_line_key

T = TypeVar("T")
log = logging.getLogger(__name__)

# The largest page the Scaleway list routes accept.
PAGE_SIZE = 100


class HttpFailure(Exception):
    """An HTTP error answer, body not yet read (it may not be JSON)."""

    def __init__(self, response: requests.Response) -> None:
        super().__init__(response.status_code)
        self.response = response


class TimedTransport(API):
    """Mixed in ahead of an SDK API class: its requests carry timeouts and fail as HttpFailure."""

    _session: requests.Session
    _timeouts: HttpTimeouts

    def _request(
        self,
        method: str,
        path: str,
        params: Params = {},  # noqa: B006 - the SDK's own signature, never mutated
        headers: dict[str, str] = {},  # noqa: B006
        body: Body | None = None,
    ) -> requests.Response:
        method = method.upper()
        sent_headers = {"accept": "application/json", "user-agent": self.client.user_agent}
        if method in ("POST", "PUT", "PATCH"):
            sent_headers["Content-Type"] = "application/json; charset=utf-8"
        sent_headers.update(headers)
        if self.client.secret_key is not None:
            sent_headers["x-auth-token"] = self.client.secret_key
        # As the SDK: a missing body is "{}", lists repeat their key, None params are left out.
        raw = body if isinstance(body, bytes) else json.dumps({} if body is None else body)
        query: list[tuple[str, Any]] = []
        for key, value in params.items():
            if value is None:
                continue
            if isinstance(value, list):
                query.extend((key, item) for item in value)
            else:
                query.append((key, value))
        log.debug("Scaleway %s %s", method, path)
        response = self._session.request(
            method,
            f"{self.client.api_url}{path}",
            params=query,
            headers=sent_headers,
            data=raw,
            verify=not self.client.api_allow_insecure,
            timeout=self._timeouts.pair(),
        )
        total = response.headers.get("x-total-count")
        if response.ok and total:
            # The SDK folds the header into the body; its list types read total_count from there.
            folded = response.json()
            folded["total_count"] = int(total)
            response._content = json.dumps(folded).encode()
        return response

    def _throw_on_error(self, res: requests.Response) -> None:
        if res.status_code >= 400:
            raise HttpFailure(res)


def timed(api_class: type[T], client: Client, timeouts: HttpTimeouts) -> T:
    """An instance of SDK `api_class` whose requests go through TimedTransport."""
    cls = type(f"Timed{api_class.__name__}", (TimedTransport, api_class), {})
    api = cls(client)
    api._session = requests.Session()
    api._timeouts = timeouts
    return api  # type: ignore[no-any-return]


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def make_client(*, api_url: str, access_key: str, secret_key: str, project_id: str, where: str) -> Client:
    """An SDK Client, its settings checked as `Client.validate()` would, without echoing the secret."""
    if not secret_key:
        raise VendorInputError(f"{where}: the Scaleway secret key is empty")
    if not _is_uuid(secret_key):
        raise VendorInputError(f"{where}: the Scaleway secret key is not a UUID (the SDK requires one)")
    if not is_access_key(access_key):
        raise VendorInputError(f"{where}: access key {access_key!r} is not of the form SCW + 17 characters")
    if not _is_uuid(project_id):
        raise VendorInputError(f"{where}: project_id {project_id!r} is not a UUID")
    if not is_url(api_url) or not api_url.startswith(("http://", "https://")) or api_url.endswith("/"):
        raise VendorInputError(f"{where}: api_url {api_url!r} is not an http(s) URL without a trailing slash")
    client = Client(
        access_key=access_key,
        secret_key=secret_key,
        api_url=api_url,
        default_project_id=project_id,
        default_page_size=PAGE_SIZE,
    )
    client.validate()  # cannot fail now; kept so an SDK upgrade that adds checks is noticed
    return client


def check_zone(zone: str, *, what: str) -> str:
    if not is_zone(zone):
        raise VendorInputError(f"{what} zone {zone!r} is not a zone name (e.g. fr-par-2)")
    return zone


def parse_box_id(box_id: str, *, what: str) -> tuple[str, str]:
    """(zone, server id) of a box id `<zone>/<uuid>` such as `fr-par-2/1f0c...`."""
    zone, sep, server = box_id.partition("/")
    if not sep or not is_zone(zone) or not _is_uuid(server):
        raise VendorInputError(f"{what} box id {box_id!r} is not '<zone>/<server uuid>'")
    return zone, server


# --- errors -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ErrorBody:
    """What a Scaleway error answer says, whichever of its shapes it uses."""

    type: str | None
    message: str
    current_state: str | None = None


def read_error(response: requests.Response) -> ErrorBody:
    """The `type` and a one-line text of a Scaleway error body: `invalid_arguments` details, the
    SDK's `Validation Error` fields, a `precondition_failed` help message, a `transient_state`'s
    current state. A body that is not JSON reads as the HTTP reason."""
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        return ErrorBody(type=None, message=response.reason or f"HTTP {response.status_code}")
    kind = payload.get("type")
    message = str(payload.get("message") or response.reason or "")
    details = payload.get("details")
    if isinstance(details, list) and details:
        parts = []
        for d in details:
            if isinstance(d, dict):
                name = d.get("argument_name") or d.get("resource") or "?"
                why = d.get("help_message") or d.get("reason") or ""
                parts.append(f"{name}: {why}" if why else str(name))
        message += " (" + "; ".join(parts) + ")"
    fields = payload.get("fields")
    if isinstance(fields, dict) and fields:
        message += (
            " ("
            + "; ".join(
                f"{k}: {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in fields.items()
            )
            + ")"
        )
    if payload.get("help_message") and not details:
        message += f": {payload['help_message']}"
    state = payload.get("current_state")
    if state:
        message += f" (current state {state})"
    return ErrorBody(type=str(kind) if kind else None, message=message, current_state=state or None)


def error_from(
    vendor: str, call: str, response: requests.Response, subject: str | None, hidden: Sequence[str]
) -> VendorError:
    body = read_error(response)
    fields: dict[str, Any] = {
        "vendor": vendor,
        "call": call,
        "status": response.status_code,
        "code": body.type,
        "message": scrub(body.message, hidden),
        "request_id": response.headers.get("x-request-id"),
        "subject": subject,
    }
    status = response.status_code
    if status == 429 or status >= 500:
        # A throttled request was refused before Scaleway acted on it; a 5xx may have been acted on.
        return TransientVendorError(
            retry_after=parse_retry_after(response.headers.get("Retry-After")),
            maybe_applied=status != 429,
            **fields,
        )
    if status in (401, 403):
        return AuthError(**fields)
    if status == 404:
        return NotFoundError(**fields)
    if status in (409, 412):
        return ConflictError(**fields)
    return VendorError(**fields)


# --- calls --------------------------------------------------------------------------------------------


class Caller:
    """Runs SDK calls with the typed errors and the retry policy; shared by both clients."""

    def __init__(
        self,
        *,
        vendor: str,
        secret_key: str,
        retry: RetryPolicy = DEFAULT_RETRY,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.vendor = vendor
        self._secret = secret_key
        self._retry = retry
        self._sleep = sleep

    def call(
        self,
        call: str,
        operation: Callable[[], T],
        *,
        subject: str | None = None,
        hidden: Sequence[str] = (),
        idempotent: bool | None = None,
    ) -> T:
        """`operation()` (one SDK call), its failures as VendorError; `call` is 'METHOD /path/{template}'.

        `idempotent` defaults to the method's nature: every Scaleway POST this program sends creates
        something (an install, a reinstall, a key, an attachment), the other methods read or set a
        whole value. The one DELETE (an attachment, `ProjectClient._detach`) says it is not: sent
        twice, the second is a 404, so a lost answer is settled by reading back instead."""
        secrets = (self._secret, *hidden)
        if idempotent is None:
            idempotent = not call.startswith("POST ")

        def once() -> T:
            try:
                return operation()
            except HttpFailure as failure:
                raise error_from(self.vendor, call, failure.response, subject, secrets) from None
            except requests.exceptions.JSONDecodeError:
                raise VendorError(
                    vendor=self.vendor, call=call, subject=subject, message="answer is not JSON"
                ) from None
            except requests.RequestException as error:
                raise transport_error(self.vendor, call, error, subject=subject) from None
            except TypeError as error:
                # The SDK's unmarshal functions say "Unmarshalling the type 'X' failed ..." on a body of
                # another shape; any other TypeError is a bug here and surfaces as one.
                if not str(error).startswith("Unmarshalling"):
                    raise
                raise VendorError(
                    vendor=self.vendor,
                    call=call,
                    subject=subject,
                    message=f"answer has an unexpected shape: {error}",
                ) from None

        return call_with_retries(self._retry, once, idempotent=idempotent, sleep=self._sleep)

    def verified(self, write: Callable[[], T], read_back: Callable[[], T | None]) -> T:
        """A non-idempotent write sent again only after `read_back` shows the lost one did nothing."""
        return verified_write(self._retry, write, read_back, sleep=self._sleep)


def key_material(public_key: str) -> list[str]:
    """Type and base64 of an OpenSSH key line: what identifies a key, whatever its comment."""
    return public_key.split()[:2]


# Not a Scaleway status: the attachment is gone (the server's list no longer shows it).
DETACHED = "detached"
# Scaleway's statuses in which an attachment may be taken away; in the others (attaching, detaching,
# locked, unknown) a DELETE is refused or pointless, and the caller waits.
DETACHABLE = frozenset({"attached", "error"})


@dataclass(frozen=True)
class Attachment:
    """A server's attachment to a Private Network. `vlan` is the 802.1Q tag the box brings its
    interface up with (None until Scaleway assigned it); `ready` once attached with a VLAN; `gone`
    once detached (status DETACHED)."""

    private_network_id: str
    status: str
    vlan: int | None

    @property
    def ready(self) -> bool:
        return self.status == "attached" and bool(self.vlan)

    @property
    def gone(self) -> bool:
        return self.status == DETACHED


class ProjectClient(MarkerFiltering):
    """What the Elastic Metal and Apple silicon clients share: one project reached with an IAM API
    key, its zones, the SDK client, IAM's ssh keys and the call runner."""

    VENDOR = ""  # the vendor's name in errors
    VENDOR_ENUM: Vendor  # the same, as a Vendor
    WHAT = ""  # the product's name in messages
    SERVER_PATH = ""  # the server route, as errors name it

    def __init__(
        self,
        *,
        api_url: str,
        access_key: str,
        secret_key: str,
        project_id: str,
        zones: Sequence[str],
        timeouts: HttpTimeouts = DEFAULT_TIMEOUTS,
        retry: RetryPolicy = DEFAULT_RETRY,
        poll: PollPolicy = DEFAULT_POLL,
        sleep: Sleep = time.sleep,
        clock: Clock = time.monotonic,
    ) -> None:
        where = type(self).__name__
        if not zones:
            raise VendorInputError(f"{where}: zones is empty")
        self._zones = [check_zone(zone, what=self.WHAT) for zone in zones]
        self._project_id = project_id
        self._client = make_client(
            api_url=api_url, access_key=access_key, secret_key=secret_key, project_id=project_id, where=where
        )
        self._timeouts = timeouts
        self._iam = self._api_of(IamV1Alpha1API)
        self._caller = Caller(vendor=self.VENDOR, secret_key=secret_key, retry=retry, sleep=sleep)
        self._poll = poll
        self._sleep = sleep
        self._clock = clock
        self._init_apis()

    def _init_apis(self) -> None:
        """The product's own SDK APIs (a subclass sets them up with `_api_of`)."""

    def _servers(self, zone: str) -> list[Any]:
        """Every server of the project in `zone` (the subclass's SDK list call)."""
        raise NotImplementedError

    def list_boxes(self) -> list[Box]:
        raise NotImplementedError

    def list_box_ids(self) -> list[str]:
        """Every server of the project as `<zone>/<id>`: one call per zone and page of 100."""
        return [f"{zone}/{server.id}" for zone in self._zones for server in self._servers(zone)]

    def install_state(self, box_id: str, reinstall: Reinstall | None = None) -> InstallState:
        raise NotImplementedError

    def wait_reinstall(self, reinstall: Reinstall, *, timeout: float) -> None:
        """Wait until the (re)install the ticket names is done; TaskFailedError when it fails,
        TaskTimeoutError after `timeout` seconds. Polls start short and back off; a transient read
        failure is waited out within the timeout."""
        box_id = reinstall.box_id
        call = f"GET {self.SERVER_PATH}"
        last = ""
        ticket = reinstall

        def check() -> bool | None:
            nonlocal last, ticket
            try:
                state = self.install_state(box_id, ticket)
            except TransientVendorError as error:
                last = str(error)
                return None
            ticket = ticket.after(state)
            last = state.value
            if state is InstallState.FAILED:
                raise TaskFailedError(
                    vendor=self.VENDOR, call=call, subject=box_id, message=f"the {self.WHAT} reinstall failed"
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
                vendor=self.VENDOR,
                call=call,
                subject=box_id,
                message=f"reinstall not finished after {timeout:g}s (last seen: {last or 'no answer'})",
            ) from None

    def _api_of(self, api_class: type[T]) -> T:
        return timed(api_class, self._client, self._timeouts)

    def register_ssh_key(self, name: str, public_key: str) -> str:
        """The project's IAM id for `public_key`, registered under `name` if absent. Idempotent by key
        material; IAM answers 409 to a second registration of the same key (a parallel release may
        have registered it between our list and our POST), so the list is read again then."""
        if not name:
            raise VendorInputError("Scaleway ssh key name is empty")
        key = single_line_key(public_key, where=f"Scaleway ssh key {name!r}")
        found = self._ssh_key_id(key)
        if found:
            return found

        def post() -> str:
            created = self._caller.call(
                "POST /iam/v1alpha1/ssh-keys",
                lambda: self._iam.create_ssh_key(public_key=key, name=name, project_id=self._project_id),
                subject=name,
            )
            return str(created.id)

        try:
            return self._caller.verified(post, lambda: self._ssh_key_id(key))
        except ConflictError:
            found = self._ssh_key_id(key)
            if found:
                return found
            raise

    def _ssh_key_id(self, key: str) -> str | None:
        keys = self._caller.call(
            "GET /iam/v1alpha1/ssh-keys",
            lambda: self._iam.list_ssh_keys_all(project_id=self._project_id, page_size=PAGE_SIZE),
        )
        for existing in keys:
            if key_material(str(existing.public_key or "")) == key_material(key):
                return str(existing.id)
        return None

    def _register_fleet_key(self, public_key: str, *, box_id: str) -> str:
        """The IAM id of the fleet key, registered under a name derived from the key itself."""
        key = single_line_key(public_key, where=f"{self.WHAT} reinstall of {box_id}")
        return self.register_ssh_key(fleet_key_name(key), key)

    def _start(
        self,
        box_id: str,
        post: Callable[[], object],
        progress: Callable[[], tuple[InstallState, str]],
        what: str,
    ) -> Reinstall:
        """Start a (re)install the vendor runs on its own, once: `post` sends it, `progress` reads the
        server's (state, what identifies its last install). A (re)install already running is followed,
        never a second one sent; a lost answer is settled by reading back whether the install record
        changed; a 409 while one runs (a parallel release) is that one's ticket.

        RUNNING from `progress` must mean a (re)install runs, nothing else: it is followed with no
        POST, and the ticket's later DONE ends the release. A server busy with something else (an
        Apple silicon Mac rebooting) is not RUNNING: `progress` raises TransientVendorError for it
        instead, before the POST or after a 409 alike, and the caller retries once it is ready."""
        ticket = Reinstall(vendor=self.VENDOR_ENUM, box_id=box_id, started_running=True)
        state, before = progress()
        if state is InstallState.RUNNING:
            log.info("%s %s of %s already runs; following it", self.WHAT, what, box_id)
            return ticket
        # A read just after the POST may still show the server as it was: its `done` counts only once
        # this install was seen running or the server's install identity moved on from `before`.
        sent = Reinstall(vendor=self.VENDOR_ENUM, box_id=box_id, started_running=False, baseline=before)

        def send() -> Reinstall:
            post()
            return sent

        def read_back() -> Reinstall | None:
            state, now = progress()
            if state is InstallState.RUNNING or (state is not InstallState.PENDING and now != before):
                return ticket
            return None  # the server shows no new install: the POST started nothing

        try:
            return self._caller.verified(send, read_back)
        except ConflictError:
            if progress()[0] is not InstallState.RUNNING:
                raise
            log.info("%s %s of %s already runs; following it", self.WHAT, what, box_id)
            return ticket

    def _attachments(
        self, pn_api: Any, *, zone: str, server_id: str, box_id: str, path: str
    ) -> list[Attachment]:
        """Every Private Network attachment of the server, whatever its status."""
        attached = self._caller.call(
            f"GET {path}/zones/{{zone}}/server-private-networks",
            lambda: pn_api.list_server_private_networks_all(
                zone=zone, server_id=server_id, project_id=self._project_id, page_size=PAGE_SIZE
            ),
            subject=box_id,
        )
        return [Attachment(str(a.private_network_id), str(a.status), a.vlan or None) for a in attached]

    def _attach(
        self, pn_api: Any, *, zone: str, server_id: str, private_network_id: str, box_id: str, path: str
    ) -> Attachment:
        """The server's attachment to the Private Network, made if missing (POST once, then read)."""
        where = {"zone": zone, "server_id": server_id, "box_id": box_id, "path": path}
        for a in self._attachments(pn_api, **where):
            if a.private_network_id == private_network_id:
                return a
        created = self._caller.call(
            f"POST {path}/zones/{{zone}}/servers/{{server_id}}/private-networks",
            lambda: pn_api.add_server_private_network(
                zone=zone, server_id=server_id, private_network_id=private_network_id
            ),
            subject=box_id,
        )
        return Attachment(private_network_id, str(created.status), created.vlan or None)

    def _detach(
        self, pn_api: Any, *, zone: str, server_id: str, private_network_id: str, box_id: str, path: str
    ) -> Attachment:
        """The server's attachment to the Private Network taken away, idempotently: the attachment as
        it is now (`gone` once the server's list no longer shows it; call again until then).

        DELETE only while the attachment reads attached (or error): one still attaching is waited
        for, one detaching already is not sent another. A lost answer is settled by reading the list
        back (a second DELETE of a detached attachment would be a 404), as is a 404 or 409 answer
        (another run detached it meanwhile)."""
        where = {"zone": zone, "server_id": server_id, "box_id": box_id, "path": path}

        def current() -> Attachment:
            for a in self._attachments(pn_api, **where):
                if a.private_network_id == private_network_id:
                    return a
            return Attachment(private_network_id, DETACHED, None)

        now = current()
        if now.status not in DETACHABLE:
            return now

        def send() -> Attachment:
            self._caller.call(
                f"DELETE {path}/zones/{{zone}}/servers/{{server_id}}/private-networks/{{private_network_id}}",
                lambda: pn_api.delete_server_private_network(
                    zone=zone, server_id=server_id, private_network_id=private_network_id
                ),
                subject=box_id,
                idempotent=False,
            )
            return Attachment(private_network_id, "detaching", now.vlan)

        def read_back() -> Attachment | None:
            seen = current()
            return None if seen.status in DETACHABLE else seen

        try:
            return self._caller.verified(send, read_back)
        except (NotFoundError, ConflictError):
            seen = read_back()
            if seen is None:
                raise
            return seen


__all__ = [
    "DETACHABLE",
    "DETACHED",
    "PAGE_SIZE",
    "Attachment",
    "Caller",
    "HttpFailure",
    "ProjectClient",
    "TimedTransport",
    "check_zone",
    "error_from",
    "make_client",
    "parse_box_id",
    "read_error",
    "timed",
]
