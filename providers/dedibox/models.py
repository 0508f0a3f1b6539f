"""Dedibox shapes: the scaleway SDK's own dataclasses, decoded by its own unmarshal functions.

The Python SDK (scaleway 2.12) decodes the Dedibox answers correctly (tests/providers/dedibox pins
that), unlike the Go SDK the anchor gave up on. Its transport is another matter: it sends requests
without any timeout, assumes every error body is JSON, and its credential check puts the secret key
into a ValueError message. So the client speaks HTTP itself and hands the bodies to these decoders.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

from providers.errors import VendorInputError
from providers.lazy import lazy_module
from providers.vendor import (
    Box,
    Claim,
    InstallState,
    Vendor,
    split_claim_tags,
    with_claim_tag,
)

if TYPE_CHECKING:
    from scaleway.dedibox.v1 import marshalling, types
    from scaleway.dedibox.v1.types import OS, Server, ServerInstall
else:
    # The failover provider's module (imported by the program) only needs parse_box_id from here.
    marshalling = lazy_module("scaleway.dedibox.v1.marshalling")
    types = lazy_module("scaleway.dedibox.v1.types")

_ZONE = re.compile(r"^[a-z]{2}-[a-z]{3}-[0-9]+$")
_INSTALL_DONE = "installed"
_INSTALL_UNKNOWN = "unknown"


def parse_box_id(box_id: str) -> tuple[str, int]:
    """(zone, server id) of a Dedibox box id `<zone>/<server id>` such as `fr-par-2/104523`."""
    zone, sep, server = box_id.partition("/")
    if not sep or not _ZONE.match(zone) or not server.isdigit():
        raise VendorInputError(
            f"Dedibox box id {box_id!r} is not '<zone>/<server id>' (e.g. fr-par-2/104523)"
        )
    return zone, int(server)


def check_zone(zone: str) -> str:
    if not _ZONE.match(zone):
        raise VendorInputError(f"Dedibox zone {zone!r} is not a zone name (e.g. fr-par-2)")
    return zone


def decode_server(body: Mapping[str, Any]) -> Server:
    return marshalling.unmarshal_Server(dict(body))


def decode_os(body: Mapping[str, Any]) -> OS:
    return marshalling.unmarshal_OS(dict(body))


def decode_install(body: Mapping[str, Any]) -> ServerInstall:
    return marshalling.unmarshal_ServerInstall(dict(body))


def install_partitions(plan: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The `partitions` of POST .../install from GET .../partitioning/{os_id}'s answer.

    That answer's partitions are the SDK's `Partition` (`type`, `file_system`, `raid_level`,
    `capacity`, `connectors`, `mount_point`); the install takes `InstallPartition`, which has no
    `type`. Each partition is decoded by the SDK and sent with exactly InstallPartition's fields,
    whatever else the answer carries."""
    decoded = marshalling.unmarshal_ServerDefaultPartitioning(dict(plan or {}))
    names = [field.name for field in dataclasses.fields(types.InstallPartition)]
    return [{name: _plain(getattr(partition, name)) for name in names} for partition in decoded.partitions]


def _plain(value: Any) -> Any:
    """A decoded value as JSON: the SDK's enums (defaults for absent fields) as their strings."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def public_ipv4(server: Server) -> str | None:
    """The first IPv4 with semantic `public`, else any IPv4."""
    ipv4 = [ip for iface in server.interfaces for ip in iface.ips if str(ip.version) == "ipv4"]
    public = [ip for ip in ipv4 if str(ip.semantic) == "public"]
    chosen = (public or ipv4 or [None])[0]
    return str(chosen.address) if chosen is not None else None


def box_from_server(zone: str, server: Server) -> Box:
    fleet_tags, claim = parse_tags(server.tags or [])
    return Box(
        vendor=Vendor.DEDIBOX,
        id=f"{zone}/{server.id}",
        name=str(server.hostname or ""),
        datacenter=str(server.location.datacenter_name) if server.location else "",
        public_ipv4=public_ipv4(server),
        state=str(server.status),
        offer=str(server.offer.name) if server.offer else "",
        marker_field=",".join(fleet_tags),
        claim=claim,
        has_os=server.os is not None,
        tags=fleet_tags,
    )


def resolve_os(label: str, systems: Sequence[OS], *, box_id: str) -> OS:
    """The OS for a label like `ubuntu_24.04`: every `_`-token, dots removed, must appear in the
    OS name + version (dots removed), case-insensitively."""
    tokens = [token.replace(".", "").lower() for token in label.split("_") if token]
    if not tokens:
        raise VendorInputError(f"Dedibox OS label {label!r} is empty")
    for system in systems:
        haystack = f"{system.name}{system.version}".replace(".", "").lower()
        if all(token in haystack for token in tokens):
            return system
    shown = ", ".join(f"{s.name} {s.version}" for s in systems[:12]) or "none"
    raise VendorInputError(f"no Dedibox OS matches {label!r} for {box_id}; offered: {shown}")


def install_state_of(status: str) -> InstallState | None:
    """`installed` is done, `unknown` says nothing (None: the caller looks at the server), any
    other status is a step of a running install. Dedibox has no failed install status: a failed
    install reads `unknown` with the server in `error` (docs/vendor-behaviour.md)."""
    if status == _INSTALL_DONE:
        return InstallState.DONE
    if status == _INSTALL_UNKNOWN:
        return None
    return InstallState.RUNNING


# Server statuses that end an install badly (ServerStatus): the install cannot finish from them.
SERVER_FAILED = frozenset({"error", "locked"})


def install_digest(body: Mapping[str, Any] | None) -> str:
    """What identifies an install record, to tell a new install from the one before it (the record
    has no id): its parameters and its status."""
    if not body:
        return ""
    keys = ("os_id", "hostname", "ssh_key_ids", "user_login", "partitions", "status")
    return repr([body.get(key) for key in keys])


# --- the claim as a tag ------------------------------------------------------------------------------


def parse_tags(tags: Sequence[str]) -> tuple[tuple[str, ...], Claim | None]:
    """(tags without claim tags, claim) of a Dedibox server: the claim is a tag of its own,
    `tuist-claim-<token>` or `tuist-releasing-<token>` (providers.vendor.split_claim_tags)."""
    return split_claim_tags(tags)


def tags_with(tags: Sequence[str], claim: Claim | None) -> list[str]:
    """The full tag list carrying `claim`, inside the Dedibox tag limit (providers.vendor.with_claim_tag)."""
    return with_claim_tag(tags, claim, vendor=Vendor.DEDIBOX)
