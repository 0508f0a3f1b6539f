"""OVH shapes and the pure decisions made on them: storage plan, template choice, task states."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from providers.errors import VendorInputError
from providers.vendor import (
    LEGACY_OVH_SUFFIX,
    Claim,
    DiskGroup,
    InstallState,
    Vendor,
    split_claim_suffix,
    with_claim_suffix,
)

# The one layout every adopted OVH box gets (tuist-anchor 1.1). XFS on /data because it is the
# only filesystem of OVH's enum with project quotas, which enforce per-account cache quotas.
BOOT_MB = 1024
ROOT_MB = 65536

# Server task function the reinstall API creates (dedicated.TaskFunctionEnum). Tasks are told
# apart as the reference implementation does: any function containing "install" is a reinstall.
REINSTALL_FUNCTION = "reinstallServer"
IP_MOVE_FUNCTION = "genericMoveFloatingIp"

# Task statuses (dedicated.TaskStatusEnum, ip.TaskStatusEnum): init -> todo -> doing -> done, or one
# of the failures. `problem` and `error` are older server-task spellings the reference still maps.
TASK_DONE = "done"
TASK_FAILED = frozenset({"cancelled", "customerError", "ovhError", "problem", "error"})
IP_TASK_FAILED = frozenset({"cancelled", "ovhError", "customerError"})

_UNIT_MB = {
    "B": 1 / 1_000_000,
    "KB": 1 / 1000,
    "MB": 1,
    "GB": 1000,
    "TB": 1_000_000,
    "KIB": 1024 / 1_000_000,
    "MIB": 1.048576,
    "GIB": 1073.741824,
    "TIB": 1_099_511.627776,
}

_SERVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_service_name(box_id: str) -> str:
    """An OVH service name safe to put in a path (ns1234567.ip-1-2-3.eu)."""
    if not _SERVICE_NAME.match(box_id):
        raise VendorInputError(
            f"OVH box id {box_id!r} is not a service name (letters, digits, '.', '-', '_')"
        )
    return box_id


def ip_block_segment(ip: str) -> str:
    """The URL path segment OVH wants for an IP: the block, escaped (198.51.100.7%2F32)."""
    try:
        network = ipaddress.ip_network(ip if "/" in ip else f"{ip}/{32 if ':' not in ip else 128}")
    except ValueError:
        raise VendorInputError(f"OVH failover IP {ip!r} is not an IP address or block") from None
    return quote(str(network), safe="")


def disk_groups_from_hardware(hardware: Mapping[str, Any], *, box_id: str) -> list[DiskGroup]:
    """Disk groups of a GET .../specifications/hardware answer, sizes normalised to MB."""
    groups = []
    for index, raw in enumerate(hardware.get("diskGroups") or []):
        where = f"{box_id} diskGroups[{index}]"
        size = raw.get("diskSize") or {}
        unit = str(size.get("unit", "")).upper()
        if unit not in _UNIT_MB:
            raise VendorInputError(f"{where}: unknown diskSize unit {size.get('unit')!r}")
        try:
            groups.append(
                DiskGroup(
                    id=int(raw["diskGroupId"]),
                    disk_count=int(raw.get("numberOfDisks") or 0),
                    disk_size_mb=int(float(size.get("value") or 0) * _UNIT_MB[unit]),
                    disk_type=str(raw.get("diskType") or ""),
                )
            )
        except (KeyError, TypeError, ValueError) as error:
            raise VendorInputError(f"{where}: malformed disk group ({error})") from None
    return groups


def raid_level(disk_count: int) -> int:
    """10 for an even count >= 4, 1 for 2-3 disks and for odd counts >= 5 (no RAID 5/6), 0 for one."""
    if disk_count == 1:
        return 0
    if disk_count >= 4 and disk_count % 2 == 0:
        return 10
    return 1


def _usable_mb(group: DiskGroup, level: int) -> int:
    if level == 0:
        return group.capacity_mb
    if level == 10:
        return group.capacity_mb // 2
    return group.disk_size_mb


def plan_storage(disk_groups: Sequence[DiskGroup], *, box_id: str = "") -> list[dict[str, Any]]:
    """The `storage` of an OVH reinstall: exactly one entry, on the largest disk group.

    More than one entry may be cut to the first by OVH, installing a box without /data; an absent
    raidLevel reads as 1, so it is always sent.
    """
    where = f"OVH storage plan{f' for {box_id}' if box_id else ''}"
    usable = [group for group in disk_groups if group.disk_count > 0 and group.disk_size_mb > 0]
    if not usable:
        raise VendorInputError(f"{where}: no disk group with disks; refusing OVH's default layout")
    # Largest raw capacity wins; a tie goes to the lower diskGroupId.
    group = min(usable, key=lambda g: (-g.capacity_mb, g.id))
    level = raid_level(group.disk_count)
    if _usable_mb(group, level) <= BOOT_MB + ROOT_MB:
        raise VendorInputError(
            f"{where}: disk group {group.id} ({group.disk_count} x {group.disk_size_mb} MB, RAID {level}) "
            f"cannot hold /boot {BOOT_MB} MB + / {ROOT_MB} MB + /data"
        )
    layout = [
        {"fileSystem": "ext4", "mountPoint": "/boot", "raidLevel": level, "size": BOOT_MB},
        {"fileSystem": "ext4", "mountPoint": "/", "raidLevel": level, "size": ROOT_MB},
        # size 0: fill the rest of the group.
        {"fileSystem": "xfs", "mountPoint": "/data", "raidLevel": level, "size": 0},
    ]
    return [{"diskGroupId": group.id, "partitioning": {"disks": group.disk_count, "layout": layout}}]


def resolve_template(label: str, compatible: Mapping[str, Any], *, box_id: str = "") -> str:
    """The template for an OS label like `ubuntu_24.04`: every `_`-separated token, dots removed,
    must be a case-insensitive substring of the name. Personal templates are searched first."""
    tokens = [token.replace(".", "").lower() for token in label.split("_") if token]
    if not tokens:
        raise VendorInputError(f"OVH OS label {label!r} is empty")
    names = [str(n) for n in (compatible.get("personal") or [])] + [
        str(n) for n in (compatible.get("ovh") or [])
    ]
    for name in names:
        if all(token in name.lower() for token in tokens):
            return name
    shown = ", ".join(names[:12]) or "none"
    raise VendorInputError(
        f"no OVH template matches OS {label!r}{f' on {box_id}' if box_id else ''}; compatible: {shown}"
    )


def is_install_function(function: str) -> bool:
    """Whether a server task's function is a (re)install, as the reference implementation decides."""
    return "install" in function.lower()


def install_state_of_task(status: str) -> InstallState:
    """An install task's status as an InstallState (done / failure set / anything else runs)."""
    if status == TASK_DONE:
        return InstallState.DONE
    if status in TASK_FAILED:
        return InstallState.FAILED
    return InstallState.RUNNING


# --- the claim in the displayName ---------------------------------------------------------------------


def parse_display_name(display_name: str) -> tuple[str, Claim | None]:
    """(fleet marker part, claim) of an OVH displayName: `<base>--c-<token>` / `<base>--r-<token>`,
    or the `<base> claim:<token>` an earlier version wrote (still read, never written)."""
    return split_claim_suffix(display_name, legacy=LEGACY_OVH_SUFFIX)


def display_name(base: str, claim: Claim | None) -> str:
    """The displayName carrying `claim` on top of the marker part `base`, inside MARKER_LIMITS."""
    return with_claim_suffix(base, claim, vendor=Vendor.OVH, legacy=LEGACY_OVH_SUFFIX)
