"""Install a Hetzner Robot box on adoption (and again on release), as explicit states.

RESCUE_BOOT       register the fleet key at /key (Robot refers to keys by fingerprint) and arm the
                  Linux rescue system with it
RESET             hardware reset: the box boots into the rescue system
WAIT_RESCUE_SSH   wait until the box answers SSH with a host key other than the one it had before
INSTALLIMAGE      read the disks with lsblk, pick the largest same-size pair, render
                  installimage.conf.tmpl (Ubuntu 24.04, SWRAID 1, ESP outside the RAID, /boot 1G,
                  / the rest) and run installimage with robot-postinstall.sh (Kata baked in)
REBOOT            hardware reset again: the rescue boot was consumed, so the box boots the new OS
WAIT_NEW_HOST_KEY wait for the installed OS's host key (other than the rescue system's); the caller
                  pins it for the join, which is the one time a new host key is accepted

Each state has its own budget (MachineSpec timeouts); a failure names the state, the box and the time
spent. No Pulumi import here.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from providers.ssh.robot_install import (
    INSTALLIMAGE_RUNNER,
    ArtifactPins,
    RobotInstallInputError,
    pick_raid_pair,
    render_installimage_config,
    render_postinstall,
)
from providers.ssh.runner import SshError, SshTarget, fetch_host_key, run_script, wait_for_new_host_key
from providers.vendor import Box, VendorClient

if TYPE_CHECKING:
    from providers.machine import MachineSpec, Settings, Steps
    from providers.robot.client import RobotClient

LSBLK_COMMAND = "lsblk --json --bytes --nodeps --output NAME,SIZE,TYPE\n"

class RobotInstallError(RuntimeError):
    """The rescue system's answers cannot drive an install (no disks, unreadable lsblk)."""


def disks_from_lsblk(output: str) -> dict[str, int]:
    """/dev/<name> -> size in bytes of every whole disk lsblk lists (loop, rom, zram left out)."""
    start = output.find("{")
    if start < 0:
        raise RobotInstallError(f"lsblk printed no JSON: {output[-300:]!r}")
    try:
        doc = json.loads(output[start:])
    except ValueError:
        raise RobotInstallError(f"lsblk printed unreadable JSON: {output[-300:]!r}") from None
    disks: dict[str, int] = {}
    for device in doc.get("blockdevices") or []:
        name, kind = str(device.get("name") or ""), device.get("type")
        if kind != "disk" or name.startswith(("loop", "ram", "zram", "sr")):
            continue
        disks[f"/dev/{name}"] = int(device.get("size") or 0)
    if not disks:
        raise RobotInstallError("lsblk lists no disks in the rescue system")
    return disks


def installimage_script(config: str, postinstall: str) -> str:
    """The runner with its two inputs as a quoted header (base64: no quoting can break them)."""
    header = (
        f"INSTALLIMAGE_CONFIG_B64='{base64.b64encode(config.encode()).decode()}'\n"
        f"POSTINSTALL_B64='{base64.b64encode(postinstall.encode()).decode()}'\n"
    )
    return header + INSTALLIMAGE_RUNNER.read_text()


def install(
    client: VendorClient,
    settings: Settings,
    spec: MachineSpec,
    box: Box,
    steps: Steps,
    *,
    hostname: str,
    target: Callable[[], SshTarget],
    pins: ArtifactPins,
) -> str:
    """Install the box through rescue + installimage; returns the new OS's host key fingerprint."""
    robot = cast("RobotClient", client)
    try:
        postinstall = render_postinstall(pins)
    except RobotInstallInputError as error:
        raise RobotInstallError(str(error)) from None
    private_key = settings.fleet_private_key
    public_key = settings.fleet_public_key
    handshake = spec.timeout("ssh_handshake")
    interval = spec.timeout("poll_interval")
    ssh = target()
    before = _current_host_key(ssh, handshake)

    with steps.state("RESCUE_BOOT", spec.timeout("rescue_boot")):
        from providers.machine import fleet_key_name

        fingerprint = robot.register_ssh_key(fleet_key_name(public_key), public_key)
        robot.activate_rescue(box.id, fingerprint)
    with steps.state("RESET", spec.timeout("reset")):
        robot.reset(box.id, "hw")
    with steps.state("WAIT_RESCUE_SSH", spec.timeout("wait_rescue_ssh")) as clock:
        rescue_key = wait_for_new_host_key(ssh, before, timeout=clock.timeout, poll_interval=interval)
    with steps.state("INSTALLIMAGE", spec.timeout("installimage")) as clock:
        common: Mapping[str, Any] = {
            "private_key": private_key,
            "env_secrets": {},
            "expected_host_key": rescue_key,
            "handshake_timeout": handshake,
            "retries": 3,
            "retry_delay": spec.timeout("ssh_retry_delay"),
        }
        listing = run_script(ssh, LSBLK_COMMAND, step_timeout=clock.remaining(), step="lsblk", **common)
        try:
            drive1, drive2 = pick_raid_pair(disks_from_lsblk(listing.output_tail))
            config = render_installimage_config(drive1=drive1, drive2=drive2, hostname=hostname)
        except RobotInstallInputError as error:
            raise RobotInstallError(str(error)) from None
        script = installimage_script(config, postinstall)
        run_script(ssh, script, step_timeout=clock.remaining(), step="installimage", **common)
    with steps.state("REBOOT", spec.timeout("reboot")):
        robot.reset(box.id, "hw")
    with steps.state("WAIT_NEW_HOST_KEY", spec.timeout("wait_new_host_key")) as clock:
        return wait_for_new_host_key(ssh, rescue_key, timeout=clock.timeout, poll_interval=interval)


def _current_host_key(target: SshTarget, timeout: float) -> str:
    """The key the box answers with now, or "" when it does not answer (any key is new then)."""
    try:
        return fetch_host_key(target, timeout=timeout)
    except SshError:
        return ""
