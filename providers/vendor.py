"""Vendor-neutral shapes and rules the machine and failover providers and the watcher work with.

Each vendor client (providers/ovh, dedibox, robot, scaleway_em, applesilicon) turns its API's objects into
these, so the adoption and failover logic is written once. No Pulumi import here or in the clients,
and no import of config: config.models imports `Vendor` from here.

Also here, because more than one caller needs them:
- `MARKER_LIMITS`: what each vendor's per-box marker field accepts, and the claim grammar that stays
  inside it (docs/vendor-behaviour.md says where each limit comes from): the one table config,
  the machine provider's input checks, the clients and vendorsim read;
- `failover_placement`: the one failover placement rule (deploy time and the watcher).
"""

from __future__ import annotations

import base64
import enum
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from providers.errors import NotFoundError, VendorInputError


class Vendor(enum.StrEnum):
    OVH = "ovh"
    DEDIBOX = "dedibox"
    ROBOT = "robot"
    SCALEWAY_EM = "scaleway_em"  # Scaleway Elastic Metal
    APPLESILICON = "applesilicon"  # Scaleway Apple silicon (Mac mini)


# The vendors whose failover IPs the program routes (providers/failover.py); Elastic Metal and Apple
# silicon have flexible IPs and none, which nothing here moves.
FAILOVER_IP_VENDORS = (Vendor.OVH, Vendor.DEDIBOX, Vendor.ROBOT)


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
class Reinstall:
    """The reinstall a release started, as `start_reinstall` returns it: what waiting for it (or
    resuming the wait after a crash, from `to_record()`) needs.

    `task_id`: OVH's server task id; None where the vendor has no task object (Dedibox, Robot,
    Scaleway), and then a `done` read from the server alone could still be the previous install's:
    a read just after the POST may show the box as it was (reference/tuist-anchor.md 2.4: "done but
    never observed in progress: keep waiting").
    `started_running`: this install was seen running at the vendor (a read showed it, or it was
    running already and is the one followed), so a later `done` is its own.
    `baseline`: until then, what identified the box's last install before the POST (the client's
    own digest of it); a `done` that still reads as `baseline` is the previous install's, and
    install_state says PENDING for it. None: nothing to compare (the vendor follows a task).
    """

    vendor: Vendor
    box_id: str
    task_id: str | None = None
    started_running: bool = True
    baseline: str | None = None

    def to_record(self) -> dict[str, Any]:
        record = asdict(self)
        record["vendor"] = self.vendor.value
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Reinstall:
        try:
            return cls(
                vendor=Vendor(record["vendor"]),
                box_id=str(record["box_id"]),
                task_id=None if record.get("task_id") is None else str(record["task_id"]),
                started_running=bool(record.get("started_running", True)),
                baseline=None if record.get("baseline") is None else str(record["baseline"]),
            )
        except (KeyError, ValueError) as error:
            raise VendorInputError(f"not a reinstall record: {dict(record)!r} ({error})") from None

    def after(self, state: InstallState) -> Reinstall:
        """The ticket after a read of `state`: once RUNNING was read, this install was seen running
        (every later `done` is its own), and the caller keeps the returned ticket."""
        if state is InstallState.RUNNING and not self.started_running:
            return replace(self, started_running=True)
        return self

    def unseen_done(self, state: InstallState, identity: str) -> bool:
        """An end (`done`, or `failed`) that is still the previous install's: this one was never seen
        running and the box's install reads as it did before the POST."""
        ended = state in (InstallState.DONE, InstallState.FAILED)
        return ended and not self.started_running and identity == self.baseline


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


@dataclass(frozen=True)
class RescueInfo:
    """A rescue boot as the vendor reports it (Robot). `password` is the root password the vendor
    generated for the rescue system; it is kept out of repr so it never lands in a log line.

    `host_key_fingerprints` are the rescue system's SSH host keys as the vendor announced them at
    activation ("SHA256:<base64>", as ssh-keygen -l prints them): pin the rescue session to them
    instead of trusting the first key that answers."""

    server_number: str
    server_ip: str | None
    active: bool
    authorized_key_fingerprints: tuple[str, ...]
    host_key_fingerprints: tuple[str, ...]
    password: str | None = field(default=None, repr=False)


def host_key_matches(announced: Iterable[str], host_key_blob: bytes) -> bool:
    """Whether a host key (its wire blob, as paramiko's `asbytes()` gives it) is one of the
    `announced` fingerprints, in either form a vendor may print: "SHA256:<base64>" or
    "MD5:<hex:pairs>"."""
    sha256 = "SHA256:" + base64.b64encode(hashlib.sha256(host_key_blob).digest()).decode().rstrip("=")
    digest = hashlib.md5(host_key_blob, usedforsecurity=False).hexdigest()
    md5 = "MD5:" + ":".join(digest[i : i + 2] for i in range(0, 32, 2))
    return any(fingerprint in (sha256, md5) for fingerprint in announced)


class VendorClient(Protocol):
    """What the machine and failover providers need from a vendor.

    `list_box_ids` is one call (a page per 100 on Dedibox); `list_boxes` reads every box in full
    (OVH and Dedibox: one or three calls per box), so callers that need a few boxes list ids and
    `get_box` the ones they look at.
    """

    def list_box_ids(self) -> list[str]: ...

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
    ) -> Reinstall: ...

    def install_state(self, box_id: str, reinstall: Reinstall | None = None) -> InstallState: ...

    def wait_reinstall(self, reinstall: Reinstall, *, timeout: float) -> None: ...

    def failover_target(self, ip: str) -> str | None: ...

    def move_failover(self, ip: str, box_id: str) -> None: ...

    def register_ssh_key(self, name: str, public_key: str) -> str | None: ...


@runtime_checkable
class RescueInstaller(Protocol):
    """A vendor that installs a box through a rescue system it boots on request (Robot): arm the
    rescue boot with an SSH key, reset into it, install over SSH, reset into the new OS."""

    def register_ssh_key(self, name: str, public_key: str) -> str: ...

    def rescue_state(self, box_id: str) -> RescueInfo: ...

    def activate_rescue(self, box_id: str, key_fingerprint: str) -> RescueInfo: ...

    def reset(self, box_id: str, kind: str = "hw", *, verify: Callable[[], bool] | None = None) -> None: ...


@runtime_checkable
class MarkerWriter(Protocol):
    """A vendor whose fleet marker an operator stamps through the API (ops/: `tuist-ops mark`).

    `value` is the whole marker field as `Box.marker_field` reads it, claim left out: the OVH
    displayName / Robot server_name / Apple silicon server name before any claim suffix, or the
    Dedibox / Elastic Metal tags joined by ",".
    The box's claim, if any, is kept as it is."""

    def set_marker_field(self, box_id: str, value: str) -> None: ...


@runtime_checkable
class FailoverMoveReader(Protocol):
    """A vendor whose failover-IP move runs as its own task (OVH's IP move task, the Dedibox
    failover IP's attach): the task's state, as the vendor words it, for a progress line."""

    def failover_move_state(self, ip: str) -> str | None: ...


class NetworkAttachment(Protocol):
    """A server's attachment to a Private Network, as the Elastic Metal client reads it."""

    @property
    def private_network_id(self) -> str: ...

    @property
    def status(self) -> str: ...


# Attachment statuses in which the server is on the network or getting there; not `detaching`,
# `detached`, nor `error` (an attachment Scaleway failed to make carries no traffic).
ON_NETWORK = frozenset({"attaching", "attached", "locked"})


@runtime_checkable
class PrivateNetworkReader(Protocol):
    """A vendor whose servers join Private Networks (Elastic Metal): every attachment of one server."""

    def private_networks(self, box_id: str) -> Sequence[NetworkAttachment]: ...


def private_network_reader(client: object) -> PrivateNetworkReader:
    """`client` as a PrivateNetworkReader, or a clear error naming what it is instead."""
    if not isinstance(client, PrivateNetworkReader):
        raise VendorInputError(f"{type(client).__name__} cannot read a server's Private Networks")
    return client


def marker_writer(client: object) -> MarkerWriter:
    """`client` as a MarkerWriter, or a clear error naming what it is instead."""
    if not isinstance(client, MarkerWriter):
        raise VendorInputError(f"{type(client).__name__} cannot write fleet markers")
    return client


def rescue_installer(client: object) -> RescueInstaller:
    """`client` as a RescueInstaller, or a clear error naming what it is instead."""
    if not isinstance(client, RescueInstaller):
        raise VendorInputError(
            f"{type(client).__name__} cannot boot a rescue system: only Robot boxes are installed this way"
        )
    return client


class MarkerFiltering:
    """Mixin giving a client `boxes_with_marker(marker)` on top of its `list_boxes()`."""

    def list_boxes(self) -> list[Box]:
        raise NotImplementedError

    def get_box(self, box_id: str) -> Box:
        raise NotImplementedError

    def boxes_still_there(self, box_ids: Iterable[str]) -> list[Box]:
        """`get_box` of each listed id, leaving out one that went away between the listing and its
        read (terminated, moved to another account): it is not in the account any more, and must not
        fail the others."""
        boxes = []
        for box_id in box_ids:
            try:
                boxes.append(self.get_box(box_id))
            except NotFoundError:
                continue
        return boxes

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


# --- markers and the claims written into them ---------------------------------------------------------

# A claim token: 12 lowercase hex characters (providers.claims.claim_token).
CLAIM_TOKEN = re.compile(r"^[0-9a-f]{12}$")
# The claim as a suffix of the OVH displayName, the Robot server_name and the Apple silicon server
# name: `<base>--c-<token>` (claimed) or `<base>--r-<token>` (its release reinstall runs). Only
# [A-Za-z0-9._-] characters (lowercase ones on Apple silicon).
CLAIM_SUFFIX = re.compile(r"^(?P<base>.*)--(?P<kind>[cr])-(?P<token>[A-Za-z0-9]+)$")
CLAIM_SUFFIX_LENGTH = len("--c-") + 12
# The claim as a tag of its own on the vendors with tag lists (Dedibox, Elastic Metal).
CLAIM_TAG = "tuist-claim-"
RELEASING_TAG = "tuist-releasing-"

# Claims the first version of this program wrote, still read as claims (never written): a box
# someone marked that way is held by someone, and adopting it would be the worse mistake.
LEGACY_OVH_SUFFIX = re.compile(r"^(?P<base>.*?) (?P<kind>claim|releasing):(?P<token>\S+)$")
LEGACY_ROBOT_SUFFIX = re.compile(r"^(?P<base>.*?)~(?P<kind>[cr])-(?P<token>[^~]+)$")
LEGACY_CLAIM_TAGS = ("tuist-claim:", "tuist-releasing:")

# The characters every marker value we write is made of: no space, no ':', '~' or '/', which the
# vendors do not document as accepted (docs/vendor-behaviour.md).
MARKER_VALUE = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
# Apple silicon names stay lowercase so every name is also a hostname label.
LOWERCASE_MARKER_VALUE = r"^[a-z0-9][a-z0-9-]*$"


@dataclass(frozen=True)
class MarkerLimit:
    """What a vendor's per-box marker field accepts, and how much of it a claim takes.

    `max_length` bounds the whole field value (a tag: each tag). `claim_length` is what a claim adds
    to the field (0 where the claim is a tag of its own), so a fleet marker may be at most
    `marker_max_length` long. `documented` says whether the vendor publishes the limit; where it
    does not, the limit is this program's conservative assumption, and vendorsim enforces it so the
    client is shown to stay inside it. `pattern` is what a value (and a marker) must match.
    """

    vendor: Vendor
    field_name: str
    max_length: int
    claim_length: int
    documented: bool
    source: str
    charset: str = "letters, digits, '.', '_' and '-', starting with a letter or digit"
    pattern: str = MARKER_VALUE

    @property
    def marker_max_length(self) -> int:
        return self.max_length - self.claim_length

    @property
    def is_tag(self) -> bool:
        """Whether the claim is a tag of its own (the marker is matched as a whole tag)."""
        return self.claim_length == 0

    def value_problem(self, value: str) -> str | None:
        """Why `value` cannot be written to the field, or None."""
        if len(value) > self.max_length:
            return f"is {len(value)} characters long; {self.field_name} takes at most {self.max_length}"
        if not re.match(self.pattern, value):
            return f"must consist of {self.charset}"
        return None


MARKER_LIMITS: dict[Vendor, MarkerLimit] = {
    Vendor.OVH: MarkerLimit(
        vendor=Vendor.OVH,
        field_name="OVH service displayName (PUT /service/{serviceId})",
        max_length=50,
        claim_length=CLAIM_SUFFIX_LENGTH,
        documented=False,
        source="OVH's API schema types resource.displayName as a plain string with no length or "
        "pattern (service.json, serviceList.Service); 50 characters of [A-Za-z0-9._-] is assumed",
    ),
    Vendor.DEDIBOX: MarkerLimit(
        vendor=Vendor.DEDIBOX,
        field_name="Dedibox server tag (POST /dedibox/v1/zones/{zone}/servers/{id}/tags)",
        max_length=64,
        claim_length=0,
        documented=False,
        source="the scaleway SDK types tags as list[str] with no length or pattern; "
        "64 characters of [A-Za-z0-9._-] per tag is assumed",
    ),
    Vendor.ROBOT: MarkerLimit(
        vendor=Vendor.ROBOT,
        field_name="Robot server_name (POST /server/{server-number})",
        max_length=100,
        claim_length=CLAIM_SUFFIX_LENGTH,
        documented=True,
        source="Robot raised server_name from 50 to 100 characters (NixOS/nixops#152); its character "
        "set is undocumented and [A-Za-z0-9._-] is assumed",
    ),
    Vendor.SCALEWAY_EM: MarkerLimit(
        vendor=Vendor.SCALEWAY_EM,
        field_name="Elastic Metal server tag (PATCH /baremetal/v1/zones/{zone}/servers/{id})",
        max_length=64,
        claim_length=0,
        documented=False,
        source="the scaleway SDK types baremetal Server.tags as list[str] with no length or pattern; "
        "64 characters of [A-Za-z0-9._-] per tag is assumed, as on Dedibox (one Scaleway tag model)",
    ),
    Vendor.APPLESILICON: MarkerLimit(
        vendor=Vendor.APPLESILICON,
        field_name="Apple silicon server name (PATCH /apple-silicon/v1alpha1/zones/{zone}/servers/{id})",
        max_length=63,
        claim_length=CLAIM_SUFFIX_LENGTH,
        documented=False,
        source="Scaleway documents no limit for the name (vendorsim accepts 1 to 255 characters); names "
        "are kept to 63 characters of [a-z0-9-] so each is also a valid hostname label",
        charset="lowercase letters, digits and '-', starting with a letter or digit",
        pattern=LOWERCASE_MARKER_VALUE,
    ),
}


def marker_problem(vendor: Vendor, marker: str) -> str | None:
    """Why `marker` cannot be a fleet marker of `vendor`, or None. For config validation."""
    limit = MARKER_LIMITS[vendor]
    if not marker:
        return "is empty: it would match boxes of every environment"
    if len(marker) > limit.marker_max_length:
        room = f" (a claim adds {limit.claim_length})" if limit.claim_length else ""
        return (
            f"is {len(marker)} characters long; {vendor.value} markers take at most "
            f"{limit.marker_max_length}{room}"
        )
    if not re.match(limit.pattern, marker):
        return f"must consist of {limit.charset}"
    if CLAIM_SUFFIX.match(marker) or "--" in marker:
        return "must not contain '--', which starts a claim"
    if limit.is_tag and marker.startswith((CLAIM_TAG, RELEASING_TAG)):
        return f"must not start with {CLAIM_TAG!r} or {RELEASING_TAG!r}, which name claims"
    return None


def check_claim_token(claim: Claim) -> str:
    if not CLAIM_TOKEN.match(claim.token):
        raise VendorInputError(f"claim token {claim.token!r} is not 12 lowercase hex characters")
    return claim.token


_NO_LEGACY = re.compile(r"(?!)")  # matches nothing: a vendor no earlier version wrote claims to


def split_claim_suffix(value: str, *, legacy: re.Pattern[str] = _NO_LEGACY) -> tuple[str, Claim | None]:
    """(marker part, claim) of an OVH displayName, a Robot server_name or an Apple silicon server
    name: the claim suffix this program writes, or the `legacy` one an earlier version wrote."""
    match = CLAIM_SUFFIX.match(value)
    if match and match["base"]:
        return match["base"], Claim(token=match["token"], releasing=match["kind"] == "r")
    match = legacy.match(value)
    if match:
        return match["base"], Claim(token=match["token"], releasing=match["kind"] in ("r", "releasing"))
    return value, None


def with_claim_suffix(
    base: str, claim: Claim | None, *, vendor: Vendor, legacy: re.Pattern[str] = _NO_LEGACY
) -> str:
    """The field value carrying `claim` on top of the marker part `base`, checked against the
    vendor's length limit so a write the vendor would refuse (or cut) is never sent."""
    limit = MARKER_LIMITS[vendor]
    if not base.strip():
        raise VendorInputError(f"{limit.field_name}: the fleet marker part is empty")
    if split_claim_suffix(base, legacy=legacy)[1] is not None:
        raise VendorInputError(f"{limit.field_name}: {base!r} already ends in a claim")
    value = base if claim is None else f"{base}--{'r' if claim.releasing else 'c'}-{check_claim_token(claim)}"
    # The base is the vendor's already (an operator wrote it): only what the claim adds is judged.
    if len(value) > limit.max_length:
        raise VendorInputError(
            f"{limit.field_name}: {_cut(value)!r} is {len(value)} characters long with the claim; the "
            f"field takes at most {limit.max_length}, so the box's name before the claim may be at most "
            f"{limit.marker_max_length} characters"
        )
    return value


def _claim_of_tag(tag: str) -> Claim | None:
    for prefix, releasing in (
        (CLAIM_TAG, False),
        (RELEASING_TAG, True),
        (LEGACY_CLAIM_TAGS[0], False),
        (LEGACY_CLAIM_TAGS[1], True),
    ):
        if tag.startswith(prefix) and len(tag) > len(prefix):
            return Claim(token=tag[len(prefix) :], releasing=releasing)
    return None


def split_claim_tags(tags: Iterable[str]) -> tuple[tuple[str, ...], Claim | None]:
    """(tags without claim tags, claim) of a server whose claim is a tag of its own (Dedibox,
    Elastic Metal): `tuist-claim-<token>` or `tuist-releasing-<token>` (an earlier version's
    `tuist-claim:<token>` is still read). Two claim tags should never happen (a claim write replaces
    them all); if they do, the box reads as claimed by the first in sorted order, never as free."""
    tags = list(tags)
    fleet = tuple(tag for tag in tags if _claim_of_tag(tag) is None)
    claim_tags = sorted(tag for tag in tags if _claim_of_tag(tag) is not None)
    return fleet, (_claim_of_tag(claim_tags[0]) if claim_tags else None)


def with_fleet_tags(current: Sequence[str], value: str, *, vendor: Vendor, subject: str) -> list[str]:
    """A tag-marked server's full tag list once its fleet tags are `value` (every tag but the claim's,
    joined by ","): the claim tag `current` carries kept at the end. A tag the vendor would not take is
    refused, naming `subject`, before anything is written."""
    _, claim = split_claim_tags(current)
    fleet_tags = [tag for tag in value.split(",") if tag]
    for tag in fleet_tags:
        problem = MARKER_LIMITS[vendor].value_problem(tag)
        if problem:
            raise VendorInputError(f"{subject}: tag {tag!r} {problem}")
    return with_claim_tag(fleet_tags, claim, vendor=vendor)


def with_claim_tag(tags: Iterable[str], claim: Claim | None, *, vendor: Vendor) -> list[str]:
    """The full tag list carrying `claim`: every other tag kept as it is and in order (the vendor
    took them), old claim tags dropped, the claim tag inside the vendor's MARKER_LIMITS."""
    kept = [tag for tag in tags if _claim_of_tag(tag) is None]
    if claim is None:
        return kept
    tag = (RELEASING_TAG if claim.releasing else CLAIM_TAG) + check_claim_token(claim)
    limit = MARKER_LIMITS[vendor]
    problem = limit.value_problem(tag)
    if problem:
        raise VendorInputError(f"{limit.field_name}: tag {tag!r} {problem}")
    return [*kept, tag]


def _cut(value: str, length: int = 80) -> str:
    return value if len(value) <= length else value[:length] + "..."


# --- failover placement -------------------------------------------------------------------------------


def failover_placement(current: str | None, eligible: Mapping[str, str]) -> str | None:
    """Where a failover IP belongs (reference/tuist-anchor.md 4.1): the box it is routed to while
    that box is eligible, else the eligible box whose name sorts lowest; None when no box is
    eligible, and then the IP must not move at all.

    `current` is the box id the vendor routes the IP to (None: unrouted); `eligible` maps each
    eligible box id to the name it is ordered by (its Node's name; the box id where none exists).
    """
    if current is not None and current in eligible:
        return current
    if not eligible:
        return None
    return min(eligible, key=lambda box: (eligible[box], box))
