"""Elastic Metal shapes: the scaleway SDK's `baremetal.v1` dataclasses seen as vendor-neutral Boxes.

The fleet marker is a server tag (the API filters on tags server-side) and the claim is one more
tag, written exactly as on Dedibox (`tuist-claim-<token>`, `tuist-releasing-<token>`; the
`tuist-claim:<token>` of an earlier version is still read): both are Scaleway tag lists, and the
program reads them with the same functions (providers.vendor.split_claim_tags / with_claim_tag),
inside MARKER_LIMITS[SCALEWAY_EM].
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from scaleway.baremetal.v1.types import OS, Server

from providers.errors import VendorInputError
from providers.scaleway_sdk import parse_box_id as _parse_box_id
from providers.vendor import Box, Claim, InstallState, Vendor, split_claim_tags, with_claim_tag

VENDOR = Vendor.SCALEWAY_EM.value
_RUNNING = frozenset({"to_install", "installing"})


def parse_box_id(box_id: str) -> tuple[str, str]:
    """(zone, server id) of an Elastic Metal box id `<zone>/<server uuid>`."""
    return _parse_box_id(box_id, what="Elastic Metal")


def provider_id(box_id: str) -> str:
    """The Node's providerID, `scaleway://<zone>/<server id>` (issue 13.3): a foreign scheme the
    Hetzner CCM leaves alone, carrying everything needed to find the server again."""
    zone, server_id = parse_box_id(box_id)
    return f"scaleway://{zone}/{server_id}"


def public_ipv4(server: Server) -> str | None:
    """The server's first public IPv4. Decided from the address: the SDK's IPVersion enum spells
    the values `i_pv4` while the API sends `IPv4`."""
    for ip in server.ips or []:
        try:
            address = ipaddress.ip_address(str(ip.address))
        except ValueError:
            continue
        if address.version == 4:
            return str(address)
    return None


def has_os(server: Server) -> bool:
    return server.install is not None and str(server.install.status) == "completed"


def box_from_server(server: Server) -> Box:
    fleet_tags, claim = split_claim_tags(server.tags or [])
    return Box(
        vendor=Vendor.SCALEWAY_EM,
        id=f"{server.zone}/{server.id}",
        name=str(server.name or ""),
        datacenter=str(server.zone),
        public_ipv4=public_ipv4(server),
        state=str(server.status),
        offer=str(server.offer_name or ""),
        marker_field=",".join(fleet_tags),
        claim=claim,
        has_os=has_os(server),
        tags=fleet_tags,
    )


def tags_with(tags: Sequence[str], claim: Claim | None) -> list[str]:
    """The full tag list carrying `claim`: every other tag kept in order, one claim tag at the end."""
    return with_claim_tag(tags, claim, vendor=Vendor.SCALEWAY_EM)


def install_state_of(server: Server) -> InstallState:
    """From `server.install.status`: `to_install`/`installing` run, `completed` is done, `error` failed.
    A server with no install record was never installed through the API: PENDING."""
    if str(server.status) == "error":
        return InstallState.FAILED
    if server.install is None:
        return InstallState.PENDING
    status = str(server.install.status)
    if status in _RUNNING:
        return InstallState.RUNNING
    if status == "completed":
        return InstallState.DONE
    if status == "error":
        return InstallState.FAILED
    return InstallState.PENDING


def resolve_os(label: str, systems: Sequence[OS], *, box_id: str) -> OS:
    """The OS for a label like `ubuntu_24.04`: every `_`-token, dots removed, must appear in the OS
    name + version (dots removed), case-insensitively; OSes the offer does not allow are skipped."""
    tokens = [token.replace(".", "").lower() for token in label.split("_") if token]
    if not tokens:
        raise VendorInputError(f"Elastic Metal OS label {label!r} is empty")
    usable = [s for s in systems if s.enabled and s.allowed]
    for system in usable:
        haystack = f"{system.name}{system.version}".replace(".", "").lower()
        if all(token in haystack for token in tokens):
            return system
    shown = ", ".join(f"{s.name} {s.version}" for s in usable[:12]) or "none"
    raise VendorInputError(f"no Elastic Metal OS matches {label!r} for {box_id}; offered: {shown}")
