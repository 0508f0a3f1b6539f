"""Install a Hetzner Robot box (on adoption, and again on release), one handler per state.

RESCUE_BOOT       register the fleet key at /key (Robot refers to keys by fingerprint) and arm the
                  Linux rescue system with it; remember the host key the box answers with now, and
                  the rescue system's host keys Robot announces in its answer
RESET             hardware reset: the box boots into the rescue system. A reset whose answer was lost
                  is never sent again: it may have happened (Robot allows 50 an hour, and a second
                  one interrupts the boot the first started), so the flow goes on to wait for it
WAIT_RESCUE_SSH   wait until the box answers SSH with one of the announced rescue host keys (a key
                  that is neither the old one nor announced is refused: nothing logs in to it)
INSTALLIMAGE      read the disks with lsblk, pick the largest same-size pair, render
                  installimage.conf.tmpl (Ubuntu 24.04, SWRAID 1, ESP outside the RAID, /boot 1G,
                  / the rest) and run installimage with robot-postinstall.sh (Kata baked in), the
                  session pinned to the announced rescue key the box presented
REBOOT            hardware reset again: the rescue boot was consumed, so the box boots the new OS
WAIT_NEW_HOST_KEY wait for the installed OS's host key (other than the rescue system's); the join
                  pins it, the one time a new host key is accepted

The vendor calls are the `RescueInstaller` ones (providers/vendor.py: rescue_installer), so this
flow runs on any vendor that boots a rescue system on request. The host keys are facts of the
record, so a create that died in INSTALLIMAGE resumes there with the rescue system's key still
pinned. No Pulumi import here.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from providers.constants import fleet_key_name
from providers.errors import OutcomeUnknownError
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
from providers.ssh.runner import SshError, SshTarget, fetch_host_key_forms, run_script
from providers.vendor import RescueInstaller, rescue_installer

LSBLK_COMMAND = "lsblk --json --bytes --nodeps --output NAME,SIZE,TYPE\n"
INSTALL_STATES = ("RESCUE_BOOT", "RESET", "WAIT_RESCUE_SSH", "INSTALLIMAGE", "REBOOT", "WAIT_NEW_HOST_KEY")

# Facts this flow records.
BEFORE = "host_key_before"
ANNOUNCED = "rescue_host_keys_announced"  # the activation's host key fingerprints, space-separated
RESCUE = "rescue_host_key"
INSTALLED = "installed_host_key"


class RobotInstallError(MachineError):
    """The rescue system's answers cannot drive an install (no disks, unreadable lsblk)."""


def installer(run: Run) -> RescueInstaller:
    """The vendor client as the rescue installer it must be (a clear error when it is not)."""
    return rescue_installer(run.get("client"))


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


def _probe(run: Run) -> tuple[str, str]:
    """The key the box answers with now, as ("SHA256:...", "MD5:..."), or ("", "") when it does not
    answer."""
    target: SshTarget = run.get("target")
    try:
        return fetch_host_key_forms(target, timeout=run.timeout("ssh_handshake"))
    except SshError:
        return "", ""


def _announced(run: Run) -> list[str]:
    return run.facts.get(ANNOUNCED, "").split()


def _is_rescue(run: Run, seen: tuple[str, str]) -> bool:
    """Whether the key seen is the rescue system's: one Robot announced at activation; where Robot
    announced none, any key other than the one the box had before (the first one is trusted). Where
    the box did not answer before either, a key alone cannot tell the rescue system from the old OS
    answering again: the activation must also be consumed (Robot clears it at the boot it causes)."""
    if not seen[0]:
        return False
    announced = _announced(run)
    if announced:
        return any(form in announced for form in seen)
    before = run.facts.get(BEFORE, "")
    if before:
        return seen[0] != before
    return not installer(run).rescue_state(run.box_id).active


def rescue_boot(run: Run) -> Result:
    settings = run.get("settings")
    public_key = settings.fleet_public_key
    before = run.facts.get(BEFORE)
    if before is None:
        before = _probe(run)[0]
    client = installer(run)
    fingerprint = client.register_ssh_key(fleet_key_name(public_key), public_key)
    activation = client.activate_rescue(run.box_id, fingerprint)
    announced = activation.host_key_fingerprints
    if not announced:
        run.log(
            f"{run.machine}: Robot announced no host key for the rescue system of {run.box_label}: "
            "its first key is trusted"
        )
    return Complete({BEFORE: before, ANNOUNCED: " ".join(announced)})


def _reset(run: Run, verify: Callable[[], bool], next_state: str) -> Result:
    try:
        installer(run).reset(run.box_id, "hw", verify=verify)
    except OutcomeUnknownError as unknown:
        # It may have happened: a second reset would interrupt the boot it started. Wait instead;
        # the wait's budget running out sends the flow back to arm and reset again.
        run.log(f"{run.machine}: {unknown}; waiting in {next_state} instead of resetting again")
    return Complete()


def reset(run: Run) -> Result:
    if _is_rescue(run, _probe(run)):
        # A resumed run: the reset before the crash went through and the rescue system is up.
        return Complete()
    return _reset(run, lambda: _is_rescue(run, _probe(run)), "WAIT_RESCUE_SSH")


def wait_rescue_ssh(run: Run) -> Result:
    seen = _probe(run)
    if _is_rescue(run, seen):
        return Complete({RESCUE: seen[0]})
    announced = _announced(run)
    if announced and seen[0] and seen[0] != run.facts.get(BEFORE, ""):
        return Failed(
            "HostKeyMismatch",
            f"{run.box_label} answers SSH with host key {seen[0]}, which is neither its old one nor one "
            f"of the rescue system's keys Robot announced ({', '.join(announced)}); refusing to log in",
        )
    return Continue(run.poll_delay("rescue_ssh"), "the rescue system's SSH (an announced host key)")


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
    # Each step gets what is left of the state's budget: lsblk and installimage share it.
    budget = run.timeout("installimage")
    listing = run_script(target, LSBLK_COMMAND, step_timeout=run.step_timeout(budget), step="lsblk", **common)
    try:
        drive1, drive2 = pick_raid_pair(disks_from_lsblk(listing.output_tail))
        config = render_installimage_config(drive1=drive1, drive2=drive2, hostname=run.get("hostname"))
    except (RobotInstallInputError, RobotInstallError) as error:
        return Failed("InstallInput", str(error))
    run_script(
        target,
        installimage_script(config, postinstall),
        step_timeout=run.step_timeout(budget),
        step="installimage",
        **common,
    )
    return Complete()


def _is_installed(run: Run, seen: str) -> bool:
    return bool(seen) and seen not in (run.facts.get(RESCUE, ""), run.facts.get(BEFORE, ""))


def reboot(run: Run) -> Result:
    if _is_installed(run, _probe(run)[0]):
        return Complete()  # a resumed run: the box already booted the installed OS
    return _reset(run, lambda: _is_installed(run, _probe(run)[0]), "WAIT_NEW_HOST_KEY")


def wait_new_host_key(run: Run) -> Result:
    seen = _probe(run)[0]
    if seen and seen != run.facts.get(RESCUE, ""):
        return Complete({INSTALLED: seen})
    return Continue(
        run.poll_delay("new_host_key"), "the installed OS's SSH (a host key other than the rescue's)"
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
