"""Apple silicon shapes: the scaleway SDK's `applesilicon.v1alpha1` dataclasses as vendor-neutral Boxes.

The API lets a client write only a server's name (UpdateServer takes name, schedule_deletion,
enable_vpc, commitment, bandwidth, runner configurations; `tags` is read-only), so the fleet marker
is a name prefix, as the reference's pool prefix, and the claim a name suffix:

    <base>            free
    <base>--c-<token> claimed by <token>
    <base>--r-<token> being released (reinstalled) by <token>

Scaleway documents no length or charset for these names; the names written here stay within 63
characters of [a-z0-9-] (MARKER_LIMITS[APPLESILICON]), so they would also pass as hostname labels.
The claim grammar is the OVH and Robot one (providers.vendor.split_claim_suffix). Any name ending in a
claim-shaped suffix reads as claimed, even with a token this program would not write: a Mac someone
renamed by hand is held by someone, and adopting it would be the worse mistake.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field

from scaleway.applesilicon.v1alpha1 import SERVER_TRANSIENT_STATUSES
from scaleway.applesilicon.v1alpha1.types import OS, Server, ServerStatus

from providers.errors import VendorInputError
from providers.scaleway_sdk import parse_box_id as _parse_box_id
from providers.vendor import Box, Claim, InstallState, Vendor, split_claim_suffix, with_claim_suffix

VENDOR = Vendor.APPLESILICON.value
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
# The one ServerStatus a reinstall shows while it runs.
REINSTALLING = str(ServerStatus.REINSTALLING)
# The SDK's other transient ServerStatus values (starting, rebooting, updating, locking, unlocking,
# busy): the Mac is doing something else (a reboot from the console, a delivery, an update), no
# reinstall runs, and Scaleway refuses one until the Mac is `ready` again (409 `transient_state`).
NOT_READY = frozenset(str(s) for s in SERVER_TRANSIENT_STATUSES) - {REINSTALLING}


def parse_box_id(box_id: str) -> tuple[str, str]:
    """(zone, server id) of an Apple silicon box id `<zone>/<server uuid>`."""
    return _parse_box_id(box_id, what="Apple silicon")


def provider_id(box_id: str) -> str:
    """The Node's providerID, `applesilicon://<zone>/<server id>`.

    A scheme of its own, as every other vendor API has one (ovh://, dedibox://, hrobot://): Elastic
    Metal holds `scaleway://<zone>/<uuid>`, and an Apple silicon id has the same shape, so sharing
    the scheme would leave a reader of the providerID unable to tell which API owns the server."""
    zone, server_id = parse_box_id(box_id)
    return f"applesilicon://{zone}/{server_id}"


def parse_name(name: str) -> tuple[str, Claim | None]:
    """(fleet marker part, claim) of a server name."""
    return split_claim_suffix(name)


def compose_name(base: str, claim: Claim | None) -> str:
    """The name carrying `claim` on top of the fleet marker part `base`, inside MARKER_LIMITS."""
    if not _NAME.match(base):
        raise VendorInputError(
            f"Apple silicon server name {base!r}: use lowercase letters, digits and '-' "
            "(the claim is written into the name)"
        )
    return with_claim_suffix(base, claim, vendor=Vendor.APPLESILICON)


def box_from_server(server: Server) -> Box:
    base, claim = parse_name(str(server.name or ""))
    return Box(
        vendor=Vendor.APPLESILICON,
        id=f"{server.zone}/{server.id}",
        name=str(server.name or ""),
        datacenter=str(server.zone),
        public_ipv4=str(server.ip) if server.ip else None,
        state="deletion_scheduled" if server.deletion_scheduled else str(server.status),
        offer=str(server.type_ or ""),
        marker_field=base,
        claim=claim,
        # Delivered with an image: Scaleway hands a Mac over with macOS installed.
        has_os=bool(server.delivered) and server.os is not None,
    )


def install_state_of(server: Server) -> InstallState:
    """From the server status: only `reinstalling` runs, `ready` is done, `error` failed. Any other
    status says no reinstall is known to run: the transient ones (NOT_READY: a reboot, a delivery,
    an update) are not a reinstall, and `locked` is Scaleway's hold on the account or server."""
    status = str(server.status)
    if status == "ready":
        return InstallState.DONE
    if status == "error":
        return InstallState.FAILED
    if status == REINSTALLING:
        return InstallState.RUNNING
    return InstallState.PENDING


def not_ready_status(server: Server) -> str | None:
    """The server's status when it is one no reinstall can start from yet (NOT_READY), else None."""
    status = str(server.status)
    return status if status in NOT_READY else None


def _family_key(text: str) -> str:
    """`macos-tahoe-26.0`, `Tahoe`, `tahoe` -> `tahoe`; `macos-golden-gate-27` -> `goldengate`."""
    key = text.strip().lower().removeprefix("macos-").removeprefix("macos ")
    key = re.split(r"[-_ ](?=\d)", key, maxsplit=1)[0]
    return re.sub(r"[-_ ]", "", key)


def _version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in version.split("."))


def _server_types(system: OS) -> set[str]:
    # `compatible_server_types` is the deprecated spelling of `supported_server_types`.
    supported = {str(t.server_type) for t in system.supported_server_types or []}
    return supported | {str(t) for t in system.compatible_server_types or []}


def resolve_os(label: str, systems: Sequence[OS], *, server_type: str, box_id: str) -> OS:
    """The image a released Mac is reinstalled with.

    `label` is an exact image name (`macos-tahoe-26.0`) or a family (`tahoe`, `macos-tahoe`). A family
    resolves to its newest published image for the server type: Scaleway retires point releases,
    and a pin to an exact one strands the pool once it is gone (the reference lost a staging pool
    that way). An exact name that is no longer published is an error, never a silent default."""
    if not label.strip():
        raise VendorInputError(f"Apple silicon reinstall of {box_id}: the OS label is empty")
    fits = [s for s in systems if server_type in _server_types(s)]
    exact = [s for s in fits if s.name == label]
    if exact:
        return exact[0]
    family = _family_key(label)
    same = [s for s in fits if _family_key(s.family or s.name) == family and not s.is_beta]
    if not same or any(ch.isdigit() for ch in label):
        shown = ", ".join(sorted(s.name for s in fits)[:12]) or "none"
        raise VendorInputError(
            f"no Apple silicon image {label!r} for {server_type} ({box_id}); published: {shown}"
        )
    return max(same, key=lambda s: _version_key(str(s.version)))


@dataclass(frozen=True)
class MacLogin:
    """How a freshly installed Mac is logged into: its user and Scaleway's sudo password for it.
    The password is a secret: kept out of repr."""

    user: str
    sudo_password: str = field(repr=False)


def login_of(server: Server) -> MacLogin:
    """`sudo_password` is filled only in the answer that created the server; afterwards the same
    credentials live only in `vnc_url` (vnc://<user>:<password>@host:port), as the reference found."""
    user = str(server.ssh_username or "")
    password = str(server.sudo_password or "")
    if not password and server.vnc_url:
        parsed = urllib.parse.urlsplit(str(server.vnc_url))
        password = urllib.parse.unquote(parsed.password or "")
        user = user or urllib.parse.unquote(parsed.username or "")
    return MacLogin(user=user, sudo_password=password)
