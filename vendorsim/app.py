"""The WSGI application: routes each request to its vendor, applies faults, audits writes."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs

from werkzeug.exceptions import MethodNotAllowed, NotFound
from werkzeug.wrappers import Request, Response

from vendorsim import applesilicon, artifacts, dedibox, ovh, robot, scaleway_em
from vendorsim.core import Call, Reply, Sim, VendorError, redact
from vendorsim.faults import FaultSpecError

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_RULE_ARG = re.compile(r"<(?:\w+:)?(\w+)>")

VENDORS: dict[str, ModuleType] = {
    "ovh": ovh,
    "dedibox": dedibox,
    "robot": robot,
    "scaleway_em": scaleway_em,
    "applesilicon": applesilicon,
}
# Vendors whose JSON lists carry total_count, mirrored in an X-Total-Count header (Scaleway's APIs).
TOTAL_COUNT_HEADER = frozenset({"dedibox", "scaleway_em", "applesilicon"})


def _vendor_of(path: str) -> tuple[str, str] | None:
    for name, module in VENDORS.items():
        prefix: str = module.PREFIX
        if path == prefix or path.startswith(prefix + "/"):
            subpath = path[len(prefix) :] or "/"
            # Modules sharing one mount (Scaleway's one api_url) each answer their own API's paths.
            owns: tuple[str, ...] | None = getattr(module, "OWNS", None)
            if owns is None or subpath.startswith(owns):
                return name, subpath
    return None


class App:
    def __init__(self, sim: Sim) -> None:
        self.sim = sim

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        request = Request(environ)
        if request.path.startswith("/_admin/") or request.path == "/_admin":
            response = self._admin(request)
        elif request.path.startswith("/artifacts/"):
            response = _artifact(request)
        else:
            response = self._vendor(request)
        return response(environ, start_response)

    # --- vendor APIs ------------------------------------------------------------

    def _vendor(self, request: Request) -> Response:
        found = _vendor_of(request.path)
        if found is None:
            return _json(
                404,
                {
                    "message": f"no simulated vendor at {request.path}; "
                    "use /ovh/1.0, /dedibox, /robot, /scaleway or /_admin"
                },
            )
        vendor, subpath = found
        module = VENDORS[vendor]
        headers = _id_headers(vendor)
        decision = self.sim.faults.decide(vendor, request.method, request.path)
        if decision.latency_s:
            time.sleep(decision.latency_s)  # outside the lock: slow responses must not stall others
        if decision.status is not None:
            extra = {"Retry-After": str(decision.retry_after)} if decision.retry_after is not None else {}
            return _json(decision.status, module.injected_error(decision.status), {**headers, **extra})
        call = Call(request=request, vendor=vendor)
        with self.sim.lock:
            status, body, more = self._dispatch(module, call, subpath)
            if request.method in WRITE_METHODS:
                self.sim.store.audit(
                    time=self.sim.clock(),
                    vendor=vendor,
                    method=request.method,
                    path=_raw_path(request),
                    body=redact(call.body if call.form == {} else _flat_form(call.form)),
                    status=status,
                    box=call.box,
                )
            self.sim.store.commit()
        headers.update(more)
        listed = status == 200 and isinstance(body, dict) and "total_count" in body
        if vendor in TOTAL_COUNT_HEADER and listed:
            headers["X-Total-Count"] = str(body["total_count"])
        return _json(status, body, headers)

    def _dispatch(self, module: ModuleType, call: Call, subpath: str) -> tuple[int, Any, dict[str, str]]:
        adapter = module.ROUTES.bind("vendorsim", path_info=subpath)
        try:
            try:
                rule, args = adapter.match(subpath, method=call.request.method, return_rule=True)
            except NotFound:
                raise module.route_not_found(subpath) from None
            except MethodNotAllowed:
                raise module.bad_method(call.request.method, subpath) from None
            handler = rule.endpoint
            if not (module is ovh and handler in ovh.UNAUTHENTICATED):
                module.authenticate(self.sim, call)
            if module is robot:
                robot.check_rate_limit(self.sim, call, _RULE_ARG.sub(r"<\1>", rule.rule))
            _parse_body(module, call)
            # Settle tasks and keep their effects even if the handler then fails.
            self._settle()
            self.sim.store.commit()
            result = handler(self.sim, call, **args)
        except VendorError as e:
            self.sim.store.rollback()
            return e.status, e.body, e.headers
        if isinstance(result, Reply):
            return result.status, result.body, result.headers
        return 200, result, {}

    def _settle(self) -> None:
        ovh.settle(self.sim)
        dedibox.settle(self.sim)
        scaleway_em.settle(self.sim)
        applesilicon.settle(self.sim)

    # --- /_admin ------------------------------------------------------------------

    def _admin(self, request: Request) -> Response:
        route = (request.method, request.path)
        if route == ("GET", "/_admin/health"):
            # Readiness for scripts: answers once the server and every box's sshd are up.
            return _json(200, {"ok": True})
        with self.sim.lock:
            if route == ("GET", "/_admin/state"):
                self._settle()
                self.sim.store.commit()
                return _json(200, self.state())
            if route == ("GET", "/_admin/audit"):
                since = request.args.get("since", "0")
                if not since.isdigit():
                    return _json(400, {"error": "since: must be a non-negative integer (an audit id)"})
                return _json(200, {"entries": self.sim.store.audit_entries(int(since))})
            if route == ("GET", "/_admin/faults"):
                return _json(200, self.sim.faults.describe())
            if route == ("POST", "/_admin/faults"):
                try:
                    spec = json.loads(request.get_data(as_text=True) or "null")
                    return _json(201, self.sim.faults.add(spec))
                except (ValueError, FaultSpecError) as e:
                    return _json(400, {"error": f"fault spec: {e}"})
            if route == ("DELETE", "/_admin/faults"):
                self.sim.faults.clear()
                return _json(200, self.sim.faults.describe())
            if route == ("POST", "/_admin/reset"):
                self.sim.faults.clear()
                self.sim.seed()
                self.sim.reset_boxes()
                return _json(200, {"reset": True})
        return _json(
            404, {"error": f"no admin route {request.method} {request.path}; see vendorsim/README.md"}
        )

    def state(self) -> dict[str, Any]:
        store = self.sim.store
        state: dict[str, Any] = redact(
            {
                "ovh": {
                    "servers": store.all("ovh_server"),
                    "tasks": _public(store.all("ovh_task")),
                    "ips": store.all("ovh_ip"),
                    "ip_tasks": _public(store.all("ovh_ip_task")),
                },
                "dedibox": {
                    "servers": store.all("dedibox_server"),
                    "installs": _public(store.all("dedibox_install")),
                    "failover_ips": store.all("dedibox_fip"),
                    "ssh_keys": store.all("iam_ssh_key"),
                },
                "robot": {
                    "servers": store.all("robot_server"),
                    "keys": store.all("robot_key"),
                    "failover_ips": store.all("robot_failover"),
                },
                "scaleway_em": {
                    "servers": _public(store.all(scaleway_em.SERVERS)),
                    "private_networks": store.all(scaleway_em.ATTACHMENTS),
                },
                "applesilicon": {
                    "servers": _public(store.all(applesilicon.SERVERS)),
                    "private_networks": store.all(applesilicon.ATTACHMENTS),
                },
                "boxes": store.all("box"),
            }
        )
        return state


def _artifact(request: Request) -> Response:
    """A release artifact the sandboxed boxes download (vendorsim/artifacts.py); plain HTTP, no auth,
    like the public release pages it stands in for."""
    name = request.path.removeprefix("/artifacts/")
    if request.method not in ("GET", "HEAD"):
        return _json(405, {"message": f"method {request.method} not allowed on {request.path}"})
    data = artifacts.artifact(name)
    if data is None:
        known = ", ".join(artifacts.FILES)
        return _json(404, {"message": f"no artifact {name!r}; vendorsim serves {known}"})
    return Response(data, status=200, content_type="application/octet-stream")


def _raw_path(request: Request) -> str:
    """The path as the client sent it (OVH's {ip} stays escaped as 1.2.3.4%2F32)."""
    raw = request.environ.get("RAW_URI") or request.environ.get("REQUEST_URI")
    return str(raw) if raw else request.full_path.rstrip("?")


def _public(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in d.items() if not k.startswith("secret_")} for d in docs]


def _flat_form(form: dict[str, list[str]]) -> dict[str, Any]:
    return {k: v[0] if len(v) == 1 else v for k, v in form.items()}


def _parse_body(module: ModuleType, call: Call) -> None:
    raw = call.request.get_data(as_text=True)
    if module is robot:
        # Robot takes form-encoded bodies; a repeated field (authorized_key) is a list.
        if raw and not call.request.mimetype.startswith("application/x-www-form-urlencoded"):
            raise robot.error(
                400,
                "INVALID_INPUT",
                "request body must be application/x-www-form-urlencoded",
                missing=[],
                invalid=[],
            )
        call.form = parse_qs(raw, keep_blank_values=True)
        return
    if not raw:
        return
    try:
        call.body = json.loads(raw)
    except ValueError:
        if module is ovh:
            raise ovh.error(400, "Invalid JSON received") from None
        raise dedibox.invalid_request("request body is not valid JSON") from None


def _id_headers(vendor: str) -> dict[str, str]:
    if vendor == "ovh":
        return {"X-OVH-QUERYID": f"CA.ext-1.{uuid.uuid4().hex[:8]}.{uuid.uuid4()}"}
    if vendor in ("dedibox", "scaleway_em", "applesilicon"):
        return {"x-request-id": str(uuid.uuid4())}
    return {}


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    if status == 204:
        return Response(status=204, headers=headers or {})
    return Response(
        json.dumps(body), status=status, headers=headers or {}, content_type="application/json; charset=utf-8"
    )
