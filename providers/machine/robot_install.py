"""Install a Hetzner Robot box (on adoption, and again on release), one handler per state.

RESCUE_BOOT       register the fleet key at /key (Robot refers to keys by fingerprint) and arm the
                  Linux rescue system with it; remember the host key the box answers with now
RESET             hardware reset: the box boots into the rescue system
WAIT_RESCUE_SSH   wait until the box answers SSH with a host key other than the one it had before
INSTALLIMAGE      read the disks with lsblk, pick the largest same-size pair, render
                  installimage.conf.tmpl (Ubuntu 24.04, SWRAID 1, ESP outside the RAID, /boot 1G,
                  / the rest) and run installimage with robot-postinstall.sh (Kata baked in)
REBOOT            hardware reset again: the rescue boot was consumed, so the box boots the new OS
WAIT_NEW_HOST_KEY wait for the installed OS's host key (other than the rescue system's); the join
                  pins it, the one time a new host key is accepted

The host keys are facts of the record, so a create that died in INSTALLIMAGE resumes there with the
rescue system's key still pinned. No Pulumi import here.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any, cast

from providers.constants import fleet_key_name
from providers.machine.errors import MachineError
from providers.machine.fsm import FAILED, Complete, Continue, Failed, Result, Row, Run
from providers.ssh.robot_install import (
    INSTALLIMAGE_RUNNER,
    ArtifactPins,
    RobotInstallInputError,
    pick_raid_pair,
    render_installimage_config,
    render_postinstall,
)
from providers.ssh.runner import SshError, SshTarget, fetch_host_key, run_script

if TYPE_CHECKING:
    from providers.robot.client import RobotClient

LSBLK_COMMAND = "lsblk --json --bytes --nodeps --output NAME,SIZE,TYPE\n"
INSTALL_STATES = ("RESCUE_BOOT", "RESET", "WAIT_RESCUE_SSH", "INSTALLIMAGE", "REBOOT", "WAIT_NEW_HOST_KEY")

# Facts this flow records.
BEFORE = "host_key_before"
RESCUE = "rescue_host_key"
INSTALLED = "installed_host_key"


class RobotInstallError(MachineError):
    """The rescue system's answers cannot drive an install (no disks, unreadable lsblk)."""


def robot(run: Run) -> RobotClient:
    """The vendor client as the Robot client it is: the rescue and reset calls are Robot's alone.
    The only cast in the package (the vendor interface grows these calls in the vendors session)."""
    return cast("RobotClient", run.get("client"))


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


# --- handlers -------------------------------------------------------------------------------------------


def _probe(run: Run) -> str:
    """The key the box answers with now, or "" when it does not answer."""
    target: SshTarget = run.get("target")
    try:
        return fetch_host_key(target, timeout=run.timeout("ssh_handshake"))
    except SshError:
        return ""


def rescue_boot(run: Run) -> Result:
    settings = run.get("settings")
    public_key = settings.fleet_public_key
    before = run.facts.get(BEFORE)
    if before is None:
        before = _probe(run)
    client = robot(run)
    fingerprint = client.register_ssh_key(fleet_key_name(public_key), public_key)
    client.activate_rescue(run.box_id, fingerprint)
    return Complete({BEFORE: before})


def reset(run: Run) -> Result:
    seen = _probe(run)
    if seen and seen != run.facts.get(BEFORE, ""):
        # A resumed run: the reset before the crash went through and the rescue system is up.
        return Complete()
    robot(run).reset(run.box_id, "hw")
    return Complete()


def wait_rescue_ssh(run: Run) -> Result:
    seen = _probe(run)
    if seen and seen != run.facts.get(BEFORE, ""):
        return Complete({RESCUE: seen})
    return Continue(run.timeout("poll_interval"), "the rescue system's SSH (a new host key)")


def installimage(run: Run) -> Result:
    rescue_key = run.facts.get(RESCUE)
    if not rescue_key:
        return Failed("MissingFact", "no rescue host key recorded: the install has to start over")
    pins: ArtifactPins = run.get("pins")
    try:
        postinstall = render_postinstall(pins)
    except RobotInstallInputError as error:
        return Failed("InstallInput", str(error))
    target: SshTarget = run.get("target")
    common: dict[str, Any] = {
        "private_key": run.get("settings").fleet_private_key,
        "env_secrets": {},
        "expected_host_key": rescue_key,
        "handshake_timeout": run.timeout("ssh_handshake"),
        "retries": 1,
        "retry_delay": run.timeout("ssh_retry_delay"),
    }
    budget = run.timeout("installimage")
    listing = run_script(target, LSBLK_COMMAND, step_timeout=budget, step="lsblk", **common)
    try:
        drive1, drive2 = pick_raid_pair(disks_from_lsblk(listing.output_tail))
        config = render_installimage_config(drive1=drive1, drive2=drive2, hostname=run.get("hostname"))
    except (RobotInstallInputError, RobotInstallError) as error:
        return Failed("InstallInput", str(error))
    run_script(
        target, installimage_script(config, postinstall), step_timeout=budget, step="installimage", **common
    )
    return Complete()


def reboot(run: Run) -> Result:
    seen = _probe(run)
    if seen and seen not in (run.facts.get(RESCUE, ""), run.facts.get(BEFORE, "")):
        return Complete()  # a resumed run: the box already booted the installed OS
    robot(run).reset(run.box_id, "hw")
    return Complete()


def wait_new_host_key(run: Run) -> Result:
    seen = _probe(run)
    if seen and seen != run.facts.get(RESCUE, ""):
        return Complete({INSTALLED: seen})
    return Continue(
        run.timeout("poll_interval"), "the installed OS's SSH (a host key other than the rescue's)"
    )


def install_rows(then: str) -> dict[str, Row]:
    """The install flow, ending in `then`. Resets are not retried within a run (a second reset is a
    second reboot); waiting states go back to arming the rescue system once their budget is spent."""
    return {
        "RESCUE_BOOT": Row("RESCUE_BOOT", rescue_boot, "rescue_boot", "RESET", "RESCUE_BOOT"),
        "RESET": Row("RESET", reset, "reset", "WAIT_RESCUE_SSH", FAILED),
        "WAIT_RESCUE_SSH": Row(
            "WAIT_RESCUE_SSH", wait_rescue_ssh, "wait_rescue_ssh", "INSTALLIMAGE", "RESCUE_BOOT"
        ),
        "INSTALLIMAGE": Row(
            "INSTALLIMAGE", installimage, "installimage", "REBOOT", "INSTALLIMAGE", retries=2
        ),
        "REBOOT": Row("REBOOT", reboot, "reboot", "WAIT_NEW_HOST_KEY", FAILED),
        "WAIT_NEW_HOST_KEY": Row("WAIT_NEW_HOST_KEY", wait_new_host_key, "wait_new_host_key", then, "REBOOT"),
    }


__all__ = [
    "INSTALL_STATES",
    "LSBLK_COMMAND",
    "RobotInstallError",
    "disks_from_lsblk",
    "install_rows",
    "installimage_script",
]
