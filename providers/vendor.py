"""Vendor-neutral shapes the machine and failover providers work with.

Each vendor client (providers/ovh, providers/dedibox, providers/robot) turns its API's objects into
these, so the adoption and failover logic is written once. No Pulumi import here or in the clients.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from config.models import Vendor
from providers.errors import VendorInputError


@dataclass(frozen=True)
class Claim:
    """Who holds a box. `releasing` is set while the holder's release reinstall runs, so nobody
    else adopts a box that is being wiped."""

    token: str
    releasing: bool = False


class InstallState(enum.Enum):
    PENDING = "pending"  # no install known for the box
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class DiskGroup:
    """One group of identical disks, as OVH's specifications/hardware reports it."""

    id: int
    disk_count: int
    disk_size_mb: int
    disk_type: str = ""

    @property
    def capacity_mb(self) -> int:
        return self.disk_count * self.disk_size_mb


# Vendors whose fleet marker is a server tag rather than a name prefix.
TAG_MARKED_VENDORS = frozenset({Vendor.DEDIBOX, Vendor.SCALEWAY_EM})


@dataclass(frozen=True)
class Box:
    """One bare-metal server as the adoption logic sees it.

    `marker_field` is the text of the vendor field the fleet marker lives in, with any claim
    removed: the OVH displayName, the Robot server_name, the Apple silicon server name, the Dedibox
    and Elastic Metal tags joined by ",".
    `tags` is the Dedibox / Elastic Metal tag list (claim tags removed), empty elsewhere.
    """

    vendor: Vendor
    id: str
    name: str
    datacenter: str
    public_ipv4: str | None
    state: str
    offer: str
    marker_field: str
    claim: Claim | None
    has_os: bool
    tags: tuple[str, ...] = field(default=())

    def has_marker(self, marker: str) -> bool:
        """Whether the box belongs to the fleet `marker` names: a displayName / server_name / name
        prefix on OVH, Robot and Apple silicon, a tag on Dedibox and Elastic Metal."""
        if not marker:
            # An empty marker would match every box of the account, other environments included.
            raise VendorInputError("fleet marker is empty: it would match boxes of every environment")
        if self.vendor in TAG_MARKED_VENDORS:
            return marker in self.tags
        return self.marker_field.startswith(marker)


def boxes_with_marker(boxes: Iterable[Box], marker: str) -> list[Box]:
    """The boxes of `boxes` that carry the fleet marker, in the order given."""
    return [box for box in boxes if box.has_marker(marker)]


class VendorClient(Protocol):
    """What the machine and failover providers need from a vendor."""

    def list_boxes(self) -> list[Box]: ...

    def get_box(self, box_id: str) -> Box: ...

    def set_claim(self, box_id: str, claim: Claim | None) -> None: ...

    def start_reinstall(
        self,
        box_id: str,
        *,
        hostname: str,
        ssh_public_key: str,
        user_login: str,
        user_password: str,
        os_label: str = "ubuntu_24.04",
    ) -> None: ...

    def install_state(self, box_id: str) -> InstallState: ...

    def failover_target(self, ip: str) -> str | None: ...

    def move_failover(self, ip: str, box_id: str) -> None: ...

    def register_ssh_key(self, name: str, public_key: str) -> str | None: ...


class MarkerFiltering:
    """Mixin giving a client `boxes_with_marker(marker)` on top of its `list_boxes()`."""

    def list_boxes(self) -> list[Box]:
        raise NotImplementedError

    def boxes_with_marker(self, marker: str) -> list[Box]:
        return boxes_with_marker(self.list_boxes(), marker)


def single_line_key(public_key: str, *, where: str) -> str:
    """The public key with surrounding whitespace trimmed; refuses anything but one key.

    OVH reads a trailing newline as a second, empty key and answers 400 on every retry.
    """
    key = public_key.strip()
    if not key:
        raise VendorInputError(f"{where}: ssh public key is empty")
    if "\n" in key or "\r" in key:
        raise VendorInputError(f"{where}: ssh public key must be a single key on one line")
    if len(key.split()) < 2:
        raise VendorInputError(f"{where}: ssh public key is not of the form '<type> <base64> [comment]'")
    return key
