"""Hetzner Robot shapes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from config.models import Vendor
from providers import claims
from providers.errors import VendorInputError
from providers.vendor import Box


def check_server_number(box_id: str) -> str:
    """A Robot box id: the server number as a string."""
    if not box_id.isdigit():
        raise VendorInputError(f"Robot box id {box_id!r} is not a server number")
    return box_id


def box_from_server(server: Mapping[str, Any]) -> Box:
    """A Box from the inner object of `{"server": {...}}`.

    Robot does not report the installed OS, so `has_os` is False: Robot boxes are installed on
    adoption (rescue + installimage) and nothing may assume an OS is there.
    """
    base, claim = claims.parse_robot_server_name(str(server.get("server_name") or ""))
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


@dataclass(frozen=True)
class RescueInfo:
    """An armed rescue boot. `password` is the root password Robot generated for the rescue
    system; it is kept out of repr so it never lands in a log line."""

    server_number: str
    server_ip: str | None
    active: bool
    authorized_key_fingerprints: tuple[str, ...]
    host_key_fingerprints: tuple[str, ...]
    password: str | None = field(default=None, repr=False)


def rescue_from(body: Mapping[str, Any]) -> RescueInfo:
    """RescueInfo from `{"rescue": {...}}`. `os`/`arch` are lists when inactive and scalars when
    active; neither is read here."""
    rescue = body.get("rescue") or {}
    keys = tuple(
        str((item.get("key") or {}).get("fingerprint"))
        for item in rescue.get("authorized_key") or []
        if isinstance(item, Mapping)
    )
    host_keys = tuple(
        str((item.get("key") or {}).get("fingerprint"))
        for item in rescue.get("host_key") or []
        if isinstance(item, Mapping)
    )
    return RescueInfo(
        server_number=str(rescue.get("server_number") or ""),
        server_ip=rescue.get("server_ip") or None,
        active=bool(rescue.get("active")),
        authorized_key_fingerprints=keys,
        host_key_fingerprints=host_keys,
        password=rescue.get("password") or None,
    )
