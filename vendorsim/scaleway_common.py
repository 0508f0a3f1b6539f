"""What the Elastic Metal and Apple silicon simulators share: one Scaleway account behind one
`api_url` (http://127.0.0.1:PORT/scaleway), its X-Auth-Token check, its list pagination and its
error bodies. The shapes follow the scaleway SDK (scaleway_core) and Scaleway's standard errors;
the ones Dedibox shares are reused from vendorsim.dedibox.
"""

from __future__ import annotations

import hmac
import uuid
from typing import Any

from vendorsim.core import Call, Sim, VendorError
from vendorsim.dedibox import invalid_argument, not_found

PREFIX = "/scaleway"
MAX_PAGE_SIZE = 100
DEFAULT_PAGE_SIZE = 20

__all__ = [
    "MAX_PAGE_SIZE",
    "PREFIX",
    "authenticate",
    "conflict",
    "invalid_argument",
    "not_found",
    "page",
    "precondition_failed",
    "project_filter",
    "transient_state",
    "validation_error",
]


def _denied(reason: str) -> VendorError:
    return VendorError(
        401,
        {
            "message": "authentication is denied",
            "method": "api_key",
            "reason": reason,
            "type": "denied_authentication",
        },
    )


def authenticate(sim: Sim, call: Call) -> None:
    """X-Auth-Token must be the account's secret key. A missing or non-UUID token is an
    `invalid_argument` ("invalid API key format or empty value"), a well-formed unknown one is
    `not_found` ("API key does not exist"), as the SDKs spell Scaleway's two reasons."""
    creds = sim.inventory.credentials.scaleway
    token = call.request.headers.get("X-Auth-Token") or ""
    try:
        uuid.UUID(token)
    except ValueError:
        raise _denied("invalid_argument") from None
    if creds is None or not hmac.compare_digest(token, creds.secret_key):
        raise _denied("not_found")


def validation_error(fields: dict[str, list[str]]) -> VendorError:
    """A request body of the wrong JSON types: the SDK raises its ValidationError on this shape."""
    return VendorError(
        400, {"fields": fields, "message": "Validation Error", "type": "invalid_request_error"}
    )


def transient_state(resource: str, resource_id: str, state: str) -> VendorError:
    return VendorError(
        409,
        {
            "current_state": state,
            "message": "resource is in a transient state",
            "resource": resource,
            "resource_id": resource_id,
            "type": "transient_state",
        },
    )


def conflict(resource: str, resource_id: str) -> VendorError:
    return VendorError(
        409,
        {
            "message": "resource already exists",
            "resource": resource,
            "resource_id": resource_id,
            "type": "conflict",
        },
    )


def precondition_failed(precondition: str, help_message: str) -> VendorError:
    return VendorError(
        412,
        {
            "help_message": help_message,
            "message": "precondition is not respected",
            "precondition": precondition,
            "type": "precondition_failed",
        },
    )


def _int_arg(call: Call, name: str, default: int, maximum: int | None = None) -> int:
    raw = call.args.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or int(raw) < 1 or (maximum is not None and int(raw) > maximum):
        limit = f" and at most {maximum}" if maximum else ""
        raise invalid_argument(name, f"{name} must be an integer of at least 1{limit}")
    return int(raw)


def page(call: Call, items: list[Any], key: str) -> dict[str, Any]:
    """One page of `items` under `key`, with `total_count` (app.py adds X-Total-Count).
    A page past the end is empty: the SDK's `*_all` helpers stop on it."""
    number = _int_arg(call, "page", 1)
    size = _int_arg(call, "page_size", DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
    start = (number - 1) * size
    return {key: items[start : start + size], "total_count": len(items)}


def project_filter(call: Call) -> str | None:
    """The optional `project_id` filter; a malformed one is refused, not ignored."""
    project = call.args.get("project_id")
    if project is None:
        return None
    try:
        uuid.UUID(project)
    except ValueError:
        raise invalid_argument("project_id", f"'{project}' is not a UUID", reason="syntax") from None
    return str(project)


def order(call: Call, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`order_by` created_at_asc (default) or created_at_desc."""
    by = call.args.get("order_by", "created_at_asc")
    if by not in ("created_at_asc", "created_at_desc"):
        raise invalid_argument("order_by", f"'{by}' is not one of created_at_asc, created_at_desc")
    return sorted(items, key=lambda s: (s["created_at"], s["id"]), reverse=by.endswith("desc"))


def body_of(call: Call) -> dict[str, Any]:
    if call.body is None:
        return {}
    if not isinstance(call.body, dict):
        raise validation_error({"body": ["must be a JSON object"]})
    return dict(call.body)


def check_types(body: dict[str, Any], types: dict[str, type | tuple[type, ...]]) -> None:
    """Every known key of `body` has its JSON type (a bool is not an int), unknown keys are refused."""
    fields: dict[str, list[str]] = {}
    for key, value in body.items():
        if key not in types:
            fields[key] = ["unknown field"]
            continue
        want = types[key]
        if value is None:
            continue
        wrong = not isinstance(value, want) or (isinstance(value, bool) and bool not in _as_tuple(want))
        if wrong:
            fields[key] = [f"must be of type {'/'.join(t.__name__ for t in _as_tuple(want))}"]
    if fields:
        raise validation_error(fields)


def _as_tuple(t: type | tuple[type, ...]) -> tuple[type, ...]:
    return t if isinstance(t, tuple) else (t,)


def zone_of(zones: list[str], zone: str) -> str:
    if zone not in zones:
        raise invalid_argument("zone", f"zone '{zone}' is not one of {zones}")
    return zone


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def private_network(sim: Sim, networks: Any, pn_id: str, zone: str) -> Any:
    for pn in networks:
        if pn.id == pn_id:
            if pn.region != region_of(zone):
                raise invalid_argument(
                    "private_network_id", f"private network {pn_id} is in {pn.region}, not {region_of(zone)}"
                )
            return pn
    raise not_found("private_network", pn_id)


def attachments_page(sim: Sim, call: Call, table: str, zone: str, view: Any) -> dict[str, Any]:
    """GET .../server-private-networks: a zone's attachments, filtered by the query's `project_id`,
    `server_id`, `private_network_id`, oldest first, each shown with `view`."""
    project = project_filter(call)
    server_id = call.args.get("server_id")
    pn_id = call.args.get("private_network_id")
    found = [
        a
        for a in sim.store.all(table)
        if a["zone"] == zone
        and (project is None or a["project_id"] == project)
        and (server_id is None or a["server_id"] == server_id)
        and (pn_id is None or a["private_network_id"] == pn_id)
    ]
    found.sort(key=lambda a: (a["created_at"], a["id"]))
    return page(call, [view(a) for a in found], "server_private_networks")
