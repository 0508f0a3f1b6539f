"""The WSGI application: routes each request to its vendor, applies faults, audits writes.

A vendor plugs in as a module in `VENDORS` (name -> module). Required: `PREFIX` (the mount, e.g.
"/ovh/1.0"), `ROUTES` (a werkzeug Map whose endpoints are handlers `handler(sim, call, **args)`
returning a JSON-able body or a `Reply`, raising `VendorError` for the vendor's error answers),
`seed(sim)` (state and boxes from the inventory), `authenticate(sim, call)`,
`injected_error(status)` (an injected fault's body in the vendor's error shape),
`route_not_found(path)` and `bad_method(method, path)` (VendorErrors). Optional: `UNAUTHENTICATED`
(handlers that skip authenticate), `BODY = "form"` (form-encoded bodies; default JSON),
`invalid_body(message)` (the VendorError for an unreadable body), `check_rate_limit(sim, call,
rule)`, `settle(sim)` (advance async work before each request), `id_headers()` (per-response
request-id headers), `state(sim)` (the vendor's part of /_admin/state), `TOTAL_COUNT_HEADER`
(the header a list's total_count is mirrored in), `OWNS` (path prefixes a module answers under a
mount it shares: Elastic Metal and Apple silicon under /scaleway).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
import time
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs

from werkzeug.exceptions import MethodNotAllowed, NotFound
from werkzeug.wrappers import Request, Response

from vendorsim import applesilicon, artifacts, dedibox, ovh, robot, scaleway_em
from vendorsim.core import Call, Reply, Sim, VendorError, redact
from vendorsim.faults import Decision, FaultSpecError

log = logging.getLogger("vendorsim")

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_RULE_ARG = re.compile(r"<(?:\w+:)?(\w+)>")

# The simulated vendors (see the module docstring for what a vendor module provides). Elastic Metal
# and Apple silicon share Scaleway's one mount; each answers the paths its `OWNS` names.
VENDORS: dict[str, ModuleType] = {
    "ovh": ovh,
    "dedibox": dedibox,
    "robot": robot,
    "scaleway_em": scaleway_em,
    "applesilicon": applesilicon,
}


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
        started = self.sim.clock()
        call = Call(request=request, vendor="")
        response = self._vendor_call(request, call)
        if call.vendor:
            self.sim.record_call(
                started=started,
                vendor=call.vendor,
                method=request.method,
                path=_raw_path(request),
                status=response.status_code,
                box=call.box,
            )
        return response

    def _vendor_call(self, request: Request, call: Call) -> Response:
        found = _vendor_of(request.path)
        if found is None:
            return _json(
                404,
                {
                    "message": f"no simulated vendor at {request.path}; "
                    f"use {', '.join(dict.fromkeys(m.PREFIX for m in VENDORS.values()))} or /_admin"
                },
            )
        vendor, subpath = found
        call.vendor = vendor
        module = VENDORS[vendor]
        headers = _id_headers(module)
        decision = self.sim.faults.decide(vendor, request.method, request.path)
        if decision.latency_s:
            time.sleep(decision.latency_s)  # outside the lock: slow responses must not stall others
        if decision.fails and not decision.lost:
            # Failed before the vendor did anything.
            return self._fault_answer(request, module, decision, headers)
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
        if decision.lost and status < 400:
            # Carried out and committed; the client never learns it.
            log.info("fault: %s %s carried out, answer lost", request.method, request.path)
            return self._fault_answer(request, module, decision, headers)
        headers.update(more)
        total_header = getattr(module, "TOTAL_COUNT_HEADER", None)
        if total_header and status == 200 and isinstance(body, dict) and "total_count" in body:
            headers[total_header] = str(body["total_count"])
        return _json(status, body, headers)

    @staticmethod
    def _fault_answer(
        request: Request, module: ModuleType, decision: Decision, headers: dict[str, str]
    ) -> Response:
        if decision.drop:
            _drop_connection(request)
            return Response(b"", status=500)
        assert decision.status is not None
        extra = {"Retry-After": str(decision.retry_after)} if decision.retry_after is not None else {}
        return _json(decision.status, module.injected_error(decision.status), {**headers, **extra})

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
            if handler not in getattr(module, "UNAUTHENTICATED", frozenset()):
                module.authenticate(self.sim, call)
            check_rate_limit = getattr(module, "check_rate_limit", None)
            if check_rate_limit is not None:
                check_rate_limit(self.sim, call, _RULE_ARG.sub(r"<\1>", rule.rule))
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
        for module in VENDORS.values():
            settle = getattr(module, "settle", None)
            if settle is not None:
                settle(self.sim)

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
            if route == ("GET", "/_admin/calls"):
                since = request.args.get("since", "0")
                if not since.isdigit():
                    return _json(400, {"error": "since: must be a non-negative integer (a call id)"})
                return _json(200, {"entries": self.sim.calls_since(int(since))})
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
            if route == ("GET", "/_admin/behaviour"):
                return _json(200, self.sim.behaviour.describe())
            if route == ("POST", "/_admin/behaviour"):
                try:
                    self.sim.behaviour.set(json.loads(request.get_data(as_text=True) or "null"))
                except (ValueError, FaultSpecError) as e:
                    return _json(400, {"error": f"behaviour: {e}"})
                return _json(200, self.sim.behaviour.describe())
            if route == ("POST", "/_admin/timings"):
                body = json.loads(request.get_data(as_text=True) or "null")
                seconds = body.get("task_seconds") if isinstance(body, dict) else None
                if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
                    return _json(400, {"error": "timings: task_seconds must be a number >= 0"})
                self.sim.task_seconds = float(seconds)
                return _json(200, {"task_seconds": self.sim.task_seconds})
            if route == ("POST", "/_admin/reset"):
                self.sim.task_seconds = self.sim.started_task_seconds
                self.sim.apply_inventory_settings()
                self.sim.seed()
                self.sim.reset_boxes()
                return _json(200, {"reset": True})
        return _json(
            404, {"error": f"no admin route {request.method} {request.path}; see vendorsim/README.md"}
        )

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for name, module in VENDORS.items():
            vendor_state = getattr(module, "state", None)
            if vendor_state is not None:
                state[name] = vendor_state(self.sim)
        state["boxes"] = self.sim.store.all("box")
        return dict(redact(state))


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


def _drop_connection(request: Request) -> None:
    """Close the client's connection with no answer at all (a timeout or reset, as it sees it)."""
    sock = request.environ.get("werkzeug.socket")
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _flat_form(form: dict[str, list[str]]) -> dict[str, Any]:
    return {k: v[0] if len(v) == 1 else v for k, v in form.items()}


def _parse_body(module: ModuleType, call: Call) -> None:
    raw = call.request.get_data(as_text=True)
    if getattr(module, "BODY", "json") == "form":
        # Form-encoded bodies (Robot); a repeated field (authorized_key) is a list.
        if raw and not call.request.mimetype.startswith("application/x-www-form-urlencoded"):
            raise module.invalid_body("request body must be application/x-www-form-urlencoded")
        call.form = parse_qs(raw, keep_blank_values=True)
        return
    if not raw:
        return
    try:
        call.body = json.loads(raw)
    except ValueError:
        raise module.invalid_body("request body is not valid JSON") from None


def _id_headers(module: ModuleType) -> dict[str, str]:
    id_headers = getattr(module, "id_headers", None)
    return dict(id_headers()) if id_headers is not None else {}


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    if status == 204:
        return Response(status=204, headers=headers or {})
    return Response(
        json.dumps(body), status=status, headers=headers or {}, content_type="application/json; charset=utf-8"
    )
