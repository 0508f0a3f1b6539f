"""Hetzner Robot shapes, the claim in the server_name, and Robot's documented request budgets."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from providers.errors import VendorInputError
from providers.vendor import (
    LEGACY_ROBOT_SUFFIX,
    Box,
    Claim,
    RescueInfo,
    Vendor,
    split_claim_suffix,
    with_claim_suffix,
)

__all__ = [
    "RATE_LIMITS",
    "RATE_WINDOW_S",
    "RescueInfo",
    "box_from_server",
    "check_server_number",
    "min_poll_interval",
    "parse_server_name",
    "rescue_from",
    "server_name",
]

# Requests per hour and web-service user, per "METHOD /route" as the client names its calls
# (Robot's web-service documentation, as the hrobot-py OpenAPI spec mirrors it). Over budget Robot
# answers 403 RATE_LIMIT_EXCEEDED with `max_request` and `interval`.
RATE_WINDOW_S = 3600
RATE_LIMITS: dict[str, int] = {
    "GET /server": 200,
    "GET /server/{server-number}": 200,
    "POST /server/{server-number}": 200,
    "GET /key": 500,
    "POST /key": 200,
    "GET /boot/{server-number}/rescue": 500,
    "POST /boot/{server-number}/rescue": 500,
    "DELETE /boot/{server-number}/rescue": 500,
    "GET /reset/{server-number}": 500,
    "POST /reset/{server-number}": 50,
    "GET /failover": 100,
    "GET /failover/{ip}": 100,
    "POST /failover/{ip}": 50,
    "DELETE /failover/{ip}": 50,
}


def min_poll_interval(call: str, *, pollers: int = 1, share: float = 0.5) -> float:
    """Seconds between two `call`s that keep `pollers` pollers of one account inside `share` of the
    call's hourly budget (the rest is left to deploys and operators)."""
    limit = RATE_LIMITS[call]
    if pollers < 1 or not 0 < share <= 1:
        raise ValueError(f"min_poll_interval: pollers >= 1 and 0 < share <= 1, got {pollers}, {share}")
    return RATE_WINDOW_S * pollers / (limit * share)


def check_server_number(box_id: str) -> str:
    """A Robot box id: the server number as a string."""
    if not box_id.isdigit():
        raise VendorInputError(f"Robot box id {box_id!r} is not a server number")
    return box_id


def parse_server_name(name: str) -> tuple[str, Claim | None]:
    """(fleet marker part, claim) of a Robot server_name: `<base>--c-<token>` / `<base>--r-<token>`,
    or the `<base>~c-<token>` an earlier version wrote (still read, never written)."""
    return split_claim_suffix(name, legacy=LEGACY_ROBOT_SUFFIX)


def server_name(base: str, claim: Claim | None) -> str:
    """The server_name carrying `claim` on top of the marker part `base`, inside MARKER_LIMITS."""
    return with_claim_suffix(base, claim, vendor=Vendor.ROBOT, legacy=LEGACY_ROBOT_SUFFIX)


def box_from_server(server: Mapping[str, Any]) -> Box:
    """A Box from the inner object of `{"server": {...}}`.

    Robot does not report the installed OS, so `has_os` is False: Robot boxes are installed on
    adoption (rescue + installimage) and nothing may assume an OS is there.
    """
    base, claim = parse_server_name(str(server.get("server_name") or ""))
    return Box(
        vendor=Vendor.ROBOT,
        id=str(int(server["server_number"])),
        name=str(server.get("server_name") or ""),
        datacenter=str(server.get("dc") or ""),
        public_ipv4=server.get("server_ip") or None,
        state=str(server.get("status") or ""),
        offer=str(server.get("product") or ""),
        marker_field=base,
        claim=claim,
        has_os=False,
    )


_SHA256 = re.compile(r"SHA256:[A-Za-z0-9+/]+=*")
_MD5 = re.compile(r"(?:MD5:)?((?:[0-9a-f]{2}:){15}[0-9a-f]{2})")


def _fingerprint(item: Any) -> str | None:
    """A host key fingerprint out of one `host_key` item. Robot does not document the item's shape
    (docs/vendor-behaviour.md): an object like `authorized_key`'s ({"key": {"fingerprint"}}), a
    bare {"fingerprint"}, or a string ("ED25519 SHA256:..." or an MD5 colon string) are all read."""
    if isinstance(item, Mapping):
        inner = item.get("key") if isinstance(item.get("key"), Mapping) else item
        item = inner.get("fingerprint") if isinstance(inner, Mapping) else None
    if not isinstance(item, str):
        return None
    sha = _SHA256.search(item)
    if sha:
        return sha.group(0).rstrip("=")
    md5 = _MD5.search(item)
    return f"MD5:{md5.group(1)}" if md5 else None


def rescue_from(body: Mapping[str, Any]) -> RescueInfo:
    """RescueInfo from `{"rescue": {...}}`. `os`/`arch` are lists when inactive and scalars when
    active; neither is read here."""
    rescue = body.get("rescue") or {}
    keys = tuple(
        str((item.get("key") or {}).get("fingerprint"))
        for item in rescue.get("authorized_key") or []
        if isinstance(item, Mapping)
    )
    host_keys = tuple(fp for fp in (_fingerprint(item) for item in rescue.get("host_key") or []) if fp)
    return RescueInfo(
        server_number=str(rescue.get("server_number") or ""),
        server_ip=rescue.get("server_ip") or None,
        active=bool(rescue.get("active")),
        authorized_key_fingerprints=keys,
        host_key_fingerprints=host_keys,
        password=rescue.get("password") or None,
    )
