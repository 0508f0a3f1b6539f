"""Inputs of a Hetzner Robot install: the installimage config and the post-install script.

Robot runner boxes are installed on adoption (rescue, installimage, reboot) because Kata must be baked
into the OS; scripts/robot-postinstall.sh does that part.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SCRIPTS_DIR = Path(__file__).resolve().parent / "scripts"
INSTALLIMAGE_TEMPLATE = SCRIPTS_DIR / "installimage.conf.tmpl"
POSTINSTALL_SCRIPT = SCRIPTS_DIR / "robot-postinstall.sh"
INSTALLIMAGE_RUNNER = SCRIPTS_DIR / "installimage-runner.sh"
PINS_MARKER = "# @ARTIFACT_PINS@\n"

_DRIVE = re.compile(r"^/dev/(nvme[0-9]+n[0-9]+|sd[a-z]+)$")
_HOSTNAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_URL = re.compile(r"^https?://[A-Za-z0-9.:\[\]-]+/[A-Za-z0-9._~/%+-]+$")


class RobotInstallInputError(ValueError):
    """A Robot install input is malformed; the message names it."""


def pick_raid_pair(disk_sizes: Mapping[str, int]) -> tuple[str, str]:
    """The two disks to mirror: from the same-size group holding the most capacity, first two by name.

    Groups of a single disk cannot be mirrored and are skipped (as the anchor's WWN fill does).
    """
    groups: dict[int, list[str]] = {}
    for disk, size in disk_sizes.items():
        if not _DRIVE.match(disk):
            raise RobotInstallInputError(f"disk {disk!r} is not a /dev/sdX or /dev/nvmeXnY device")
        if size <= 0:
            raise RobotInstallInputError(f"disk {disk} has size {size}; sizes are bytes > 0")
        groups.setdefault(size, []).append(disk)
    pairs = [(size * len(disks), size, sorted(disks)) for size, disks in groups.items() if len(disks) >= 2]
    if not pairs:
        raise RobotInstallInputError(
            f"no two disks of the same size to mirror among {sorted(disk_sizes)}: RAID 1 needs a pair"
        )
    _, _, disks = max(pairs)
    return disks[0], disks[1]


def render_installimage_config(*, drive1: str, drive2: str, hostname: str) -> str:
    for name, drive in (("drive1", drive1), ("drive2", drive2)):
        if not _DRIVE.match(drive):
            raise RobotInstallInputError(f"{name} {drive!r} is not a /dev/sdX or /dev/nvmeXnY device")
    if drive1 == drive2:
        raise RobotInstallInputError(f"drive1 and drive2 are both {drive1}: RAID 1 needs two disks")
    if not _HOSTNAME.match(hostname):
        raise RobotInstallInputError(f"hostname {hostname!r} is not a DNS label")
    return (
        INSTALLIMAGE_TEMPLATE.read_text()
        .replace("@DRIVE1@", drive1)
        .replace("@DRIVE2@", drive2)
        .replace("@HOSTNAME@", hostname)
    )


@dataclass(frozen=True)
class ArtifactPins:
    """URL and sha256 of each download of robot-postinstall.sh (config.models.InstallArtifacts)."""

    runc_url: str
    runc_sha256: str
    containerd_url: str
    containerd_sha256: str
    kata_static_url: str
    kata_static_sha256: str


def render_postinstall(pins: ArtifactPins) -> str:
    """robot-postinstall.sh with its pins as shell assignments where the script marks them."""
    lines = []
    for name, value in vars(pins).items():
        pattern = _SHA256 if name.endswith("_sha256") else _URL
        if not pattern.match(value):
            kind = "a sha256 (64 lowercase hex digits)" if pattern is _SHA256 else "an http(s) URL of a file"
            raise RobotInstallInputError(f"install artifact pin {name} {value!r} is not {kind}")
        lines.append(f"{name.upper()}={shlex.quote(value)}\n")
    script = POSTINSTALL_SCRIPT.read_text()
    if script.count(PINS_MARKER) != 1:
        raise RobotInstallInputError(
            f"{POSTINSTALL_SCRIPT.name} must carry the line {PINS_MARKER.strip()!r} once"
        )
    return script.replace(PINS_MARKER, "".join(lines))
