"""What a simulated Mac mini's disk holds after Scaleway installs macOS on it.

A box's disk is the writable layer over the host's / (sandbox/login.sh), so a Mac box starts out
looking like the Debian host. This lays down what makes it read as macOS to the scripts that log in:
SystemVersion.plist (what sw_vers prints), /Users/<user>, Apple's pf.conf with its com.apple anchor
point, /Library/LaunchDaemons; and it hides the host's Linux-only tools and release files with
overlayfs whiteouts, so `command -v apt-get` fails on a Mac as it does on a real one. The macOS
tools themselves (sw_vers, launchctl, pfctl, ...) are the shims in sandbox/macos/shims, which
login.sh puts first on a Mac's PATH.

`hardware/platform` in the box dir names the image and the machine (shell `KEY=value` lines read by
login.sh and the shims). It survives reinstalls, which rewrite it when the image changes.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Mapping
from pathlib import Path

PLATFORM_FILE = "hardware/platform"

# Host paths a Mac does not have: whited out of the Mac's view of the host's /. With Debian's
# merged /usr, /bin and /sbin are links into /usr, so the /usr paths cover them.
LINUX_ONLY = (
    "usr/bin/apt",
    "usr/bin/apt-get",
    "usr/bin/apt-mark",
    "usr/bin/apt-key",
    "usr/bin/dpkg",
    "usr/bin/systemctl",
    "usr/bin/journalctl",
    "usr/bin/lsblk",
    "usr/bin/findmnt",
    "usr/bin/mountpoint",
    "usr/sbin/modprobe",
    "usr/sbin/swapoff",
    "usr/sbin/ip",
    "usr/bin/ip",
    "etc/os-release",
    "usr/lib/os-release",
    "etc/debian_version",
    "etc/lsb-release",
    "etc/apt",
    "etc/systemd",
    "etc/netplan",
)

_KEYS = {
    "os": "SIM_OS",
    "name": "SIM_OS_NAME",
    "version": "SIM_OS_VERSION",
    "build": "SIM_OS_BUILD",
    "model": "SIM_HW_MODEL",
    "cpu": "SIM_CPU",
    "cores": "SIM_NCPU",
    "memory_bytes": "SIM_MEMSIZE",
}


def write_platform(box_dir: Path, platform: Mapping[str, object]) -> None:
    """Record the box's platform (`os` is required: linux or macos)."""
    if platform.get("os") not in ("linux", "macos"):
        raise ValueError(f"platform os must be linux or macos, got {platform.get('os')!r}")
    unknown = sorted(set(platform) - set(_KEYS))
    if unknown:
        raise ValueError(f"platform: unknown keys {unknown}")
    path = box_dir / PLATFORM_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{_KEYS[k]}={shlex.quote(str(v))}\n" for k, v in platform.items()))


def read_platform(box_dir: Path) -> dict[str, str]:
    """The recorded platform as {SIM_*: value}; a box without one is Linux."""
    path = box_dir / PLATFORM_FILE
    if not path.exists():
        return {"SIM_OS": "linux"}
    found = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition("=")
        found[key] = shlex.split(value)[0] if value else ""
    return found


def is_macos(box_dir: Path) -> bool:
    return read_platform(box_dir).get("SIM_OS") == "macos"


def _plist(version: str, build: str) -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" '
        '"http://www.apple.com/DTDs/PropertyList-1.0.dtd">\n'
        '<plist version="1.0">\n<dict>\n'
        f"\t<key>ProductBuildVersion</key>\n\t<string>{build}</string>\n"
        "\t<key>ProductCopyright</key>\n\t<string>1983-2025 Apple Inc.</string>\n"
        "\t<key>ProductName</key>\n\t<string>macOS</string>\n"
        f"\t<key>ProductUserVisibleVersion</key>\n\t<string>{version}</string>\n"
        f"\t<key>ProductVersion</key>\n\t<string>{version}</string>\n"
        "</dict>\n</plist>\n"
    )


# The main ruleset macOS boots with: no rules of its own, only Apple's anchor points, so anything
# loaded under com.apple/ (as the reference's com.apple/tuist.sshguard) is evaluated.
PF_CONF = """#
# Default PF configuration file (macOS): the main ruleset is loaded at boot, PF itself stays
# disabled until a component enables it (pfctl -E). Do not flush it: nested anchors hang off it.
#
scrub-anchor "com.apple/*"
nat-anchor "com.apple/*"
rdr-anchor "com.apple/*"
dummynet-anchor "com.apple/*"
anchor "com.apple/*"
load anchor "com.apple" from "/etc/pf.anchors/com.apple"
"""

PF_ANCHOR_APPLE = """#
# com.apple anchor: the sub-anchors macOS itself uses.
#
anchor "200.AirDrop/*"
anchor "250.ApplicationFirewall/*"
"""


def lay_down(root: Path, *, box_key: str, user: str, platform: Mapping[str, str]) -> None:
    """A fresh macOS install on the disk layer `root` (empty but for what a previous session left)."""
    files = {
        "System/Library/CoreServices/SystemVersion.plist": _plist(
            platform.get("SIM_OS_VERSION", "26.0"), platform.get("SIM_OS_BUILD", "25A354")
        ),
        "etc/pf.conf": PF_CONF,
        "etc/pf.anchors/com.apple": PF_ANCHOR_APPLE,
        # login.sh names the box's UTS hostname from here (a Mac keeps it in SystemConfiguration).
        "var/lib/sim/hostname": f"{box_key}\n",
        "var/log/sim-calls.log": "",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for rel in (
        "Library/LaunchDaemons",
        "Library/LaunchAgents",
        f"Users/{user}",
        "etc/sudoers.d",
        "usr/local/bin",
    ):
        (root / rel).mkdir(parents=True, exist_ok=True)
    for rel in LINUX_ONLY:
        if os.path.lexists(Path("/") / rel):
            _whiteout(root / rel)


def _whiteout(path: Path) -> None:
    """An overlayfs whiteout: a 0/0 character device in the upper layer hides the lower file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        return
    try:
        os.mknod(path, stat.S_IFCHR | 0o000, os.makedev(0, 0))
    except PermissionError:
        raise RuntimeError(
            f"cannot hide {path.name} from a simulated Mac: creating an overlayfs whiteout needs CAP_MKNOD"
        ) from None
