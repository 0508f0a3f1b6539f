"""Release: the box goes back to its fleet's pool, clean. Never cancelled, never terminated.

RELEASE_MARKING       the vendor marker says `releasing` (nobody else adopts a box being wiped)
RELEASE_PN_DETACHING  Elastic Metal: the server leaves every Private Network (Scaleway keeps an
                      attachment across a reinstall)
RELEASE_REINSTALL     OVH / Dedibox: start the reinstall with the fleet key; the client returns its
                      `Reinstall` ticket (an install already running is followed: a retried release,
                      or OVH still busy), and the ticket is recorded
RELEASE_WAIT_INSTALL  until the vendor reports the install the ticket names done (`install_state(box,
                      ticket)`: OVH follows its own task; elsewhere a `done` counts once this install
                      was seen running, recorded in the ticket, or the box's install reads other
                      than before the POST); a retried release follows ITS ticket from the record
  Robot instead:      RESCUE_BOOT .. WAIT_NEW_HOST_KEY (providers/machine/robot_install.py)
RELEASE_CLEARING      the claim leaves the vendor marker; the fleet marker stays

Then the record is deleted. In production the release is refused unless the claim's inputs carry
both switches, and the machine's leaving before it unless the claim's record says they were set
(`leave_refusal`). No Pulumi import here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from providers.errors import TransientVendorError, VendorInputError
from providers.machine.fsm import DONE, FAILED, Complete, Continue, Failed, Result, Row, Run
from providers.machine.record import Progress
from providers.machine.robot_install import install_rows
from providers.machine.spec import ClaimSpec, MachineSpec, Vendor, node_name_for
from providers.vendor import Claim, InstallState, Reinstall, VendorClient

REINSTALL = "reinstall"  # the fact holding the release reinstall's ticket (Reinstall.to_record(), as JSON)


def release_refusal(spec: ClaimSpec) -> str | None:
    """Why a production release is refused, naming exactly the switch(es) to set; None if allowed."""
    if not spec.production:
        return None
    missing = []
    if not spec.allow_release:
        missing.append(f"fleets[name={spec.fleet}].allow_release: true")
    if not spec.allow_production_release:
        missing.append("allow_production_release: true")
    if not missing:
        return None
    return (
        f"{spec.resource_name}: refusing to release production box (fleet {spec.fleet}): releasing "
        f"reinstalls it. To allow it set {' and '.join(missing)} in Pulumi.production.yaml, run "
        "`pulumi up` so the claim records it, then `pulumi state unprotect` the machine and remove it"
    )


def leave_refusal(spec: MachineSpec, progress: Progress) -> str | None:
    """Why a production machine may not leave the cluster: its claim's release, which follows, would be
    refused, after the drain had deleted the Node and its local volumes' claims (Kura's data). The
    machine has no release switches of its own (as its inputs, every switch change would update it,
    and a preview would then replace what hangs off its outputs): it reads what the claim's create or
    update recorded in the box's record. None if allowed."""
    if not spec.production or progress.release_allowed:
        return None
    return (
        f"{spec.resource_name}: refusing to leave the cluster: production box {spec.box_id} (fleet "
        f"{spec.fleet}) may not be released after it (MachineClaim {progress.name} has no "
        f"status.releaseAllowed). To allow it set fleets[name={spec.fleet}].allow_release: true and "
        "allow_production_release: true in Pulumi.production.yaml, run `pulumi up` so the claim records "
        "it, then `pulumi state unprotect` the machine and remove it"
    )


def _client(run: Run) -> VendorClient:
    client: VendorClient = run.get("client")
    return client


def _claim(run: Run) -> ClaimSpec:
    spec: ClaimSpec = run.get("claim")
    return spec


def marking(run: Run) -> Result:
    # The token the box carries (the claim's stored `claim_token`), not one computed from today's
    # inputs: after a stack rename they differ, and a marker under a token nobody holds loses the box.
    _client(run).set_claim(run.box_id, Claim(run.get("token"), releasing=True))
    return Complete()


def reinstall(run: Run) -> Result:
    spec, client, settings = _claim(run), _client(run), run.get("settings")
    ticket = client.start_reinstall(
        run.box_id,
        hostname=node_name_for(spec.fleet, run.box_id),
        ssh_public_key=settings.fleet_public_key,
        user_login=spec.ssh_user,
        user_password=settings.sudo_password,
        os_label=spec.os,
    )
    return Complete({REINSTALL: json.dumps(ticket.to_record(), sort_keys=True)})


def ticket_of(run: Run) -> Reinstall | None:
    """The recorded reinstall ticket, or None when the record holds none (or an unreadable one)."""
    raw = run.facts.get(REINSTALL)
    if not raw:
        return None
    try:
        return Reinstall.from_record(json.loads(raw))
    except (ValueError, TypeError, VendorInputError):
        return None


def wait_install(run: Run) -> Result:
    ticket = ticket_of(run)
    if ticket is None or ticket.box_id != run.box_id:
        # resume_state never starts here without one: a record that lost it must not guess.
        return Failed("NoReinstallTicket", f"no reinstall ticket of {run.box_label} is recorded")
    # Short first, backing off (Run.poll_delay): an OVH install of half an hour costs tens of calls.
    delay = run.poll_delay("reinstall")
    try:
        state = _client(run).install_state(run.box_id, ticket)
    except TransientVendorError as error:
        # The client retried already; the install runs on at the vendor: keep waiting, within the budget.
        return Continue(delay, f"the reinstall to finish (last read failed: {error})")
    if state is InstallState.FAILED:
        return Failed("InstallFailed", f"the {run.vendor.value} reinstall of {run.box_id} failed")
    if state is InstallState.DONE:
        return Complete()
    if state is InstallState.PENDING:
        # Reinstall.unseen_done: the vendor still shows the box as it was before the POST.
        return Continue(delay, "the reinstall to show at the vendor (it still reads as the previous install)")
    seen = ticket.after(state)
    if seen != ticket:
        # Seen running: recorded now, so a resumed wait takes the next `done` as this install's.
        return Continue(
            delay, "the reinstall to finish", {REINSTALL: json.dumps(seen.to_record(), sort_keys=True)}
        )
    return Continue(delay, "the reinstall to finish")


def clearing(run: Run) -> Result:
    _client(run).set_claim(run.box_id, None)
    return Complete()


def detach_waiting(run: Run, attachments: list[Any]) -> Result | None:
    """None when every attachment is gone; else how to go on: wait for those on their way (attaching,
    detaching), fail on one Scaleway has locked."""
    left = [a for a in attachments if not a.gone]
    locked = [a for a in left if a.status == "locked"]
    if locked:
        return Failed(
            "PrivateNetworkLocked",
            f"the attachment of {run.box_label} to Private Network {locked[0].private_network_id} is "
            "locked at Scaleway and cannot be detached",
        )
    if left:
        what = ", ".join(f"{a.private_network_id} ({a.status})" for a in left)
        return Continue(run.poll_delay("detach"), f"the Private Network attachment to go: {what}")
    return None


def release_pn_detaching(run: Run) -> Result:
    """Release, Elastic Metal: the server taken off every Private Network it is attached to before it
    is wiped and returned to the pool. The reinstall wipes pn0 but Scaleway keeps the attachment: a
    pool box would stay on the fleet's network (its VLAN one netplan file away from it)."""
    client = run.get("client")
    attachments = [
        client.detach_private_network(run.box_id, a.private_network_id)
        for a in client.private_networks(run.box_id)
    ]
    waiting = detach_waiting(run, attachments)
    if waiting is not None:
        return waiting
    if attachments:
        names = ", ".join(a.private_network_id for a in attachments)
        run.log(f"{run.machine}: {run.box_label} left Private Network(s) {names}")
    return Complete()


def release_table(vendor: Vendor) -> dict[str, Row]:
    first_install = "RESCUE_BOOT" if vendor is Vendor.ROBOT else "RELEASE_REINSTALL"
    rows = {
        "RELEASE_MARKING": Row(
            "RELEASE_MARKING", marking, "release_marking", first_install, "RELEASE_MARKING"
        ),
        "RELEASE_CLEARING": Row("RELEASE_CLEARING", clearing, "release_clearing", DONE, "RELEASE_CLEARING"),
    }
    if vendor is Vendor.SCALEWAY_EM:
        # The box leaves every Private Network before it is wiped (release_pn_detaching).
        rows["RELEASE_MARKING"] = replace(rows["RELEASE_MARKING"], on_success="RELEASE_PN_DETACHING")
        rows["RELEASE_PN_DETACHING"] = Row(
            "RELEASE_PN_DETACHING",
            release_pn_detaching,
            "release_pn_detaching",
            first_install,
            "RELEASE_PN_DETACHING",
        )
    if vendor is Vendor.ROBOT:
        rows.update(install_rows(then="RELEASE_CLEARING"))
    else:
        rows["RELEASE_REINSTALL"] = Row(
            "RELEASE_REINSTALL", reinstall, "release_reinstall", "RELEASE_WAIT_INSTALL", "RELEASE_REINSTALL"
        )
        rows["RELEASE_WAIT_INSTALL"] = Row(
            "RELEASE_WAIT_INSTALL", wait_install, "release_wait_install", "RELEASE_CLEARING", FAILED
        )
    return rows


# How a wait for the reinstall ends that its ticket can never end otherwise: the vendor said the
# install failed, or it ran past its budget. The next release starts a new reinstall.
REINSTALL_AGAIN = frozenset({"InstallFailed", "Timeout"})
# How a Robot install step pinned to the rescue system ends when that system is gone (the box left
# rescue: another key answers; or its key was never recorded): resuming there would fail the same way
# on every run. The install starts over from arming the rescue system.
RESCUE_AGAIN = frozenset({"HostKeyMismatch", "MissingFact"})
RESCUE_PINNED_STATES = frozenset({"INSTALLIMAGE", "REBOOT"})


def install_resume_state(state: str, error_type: str | None) -> str:
    """Where a Robot install resumes: where it stopped, or from RESCUE_BOOT when it stopped on a
    rescue system that is gone."""
    if state in RESCUE_PINNED_STATES and error_type in RESCUE_AGAIN:
        return "RESCUE_BOOT"
    return state


def _unseen(raw: str | None) -> bool:
    """The recorded ticket names a reinstall never seen running (Reinstall.started_running)."""
    try:
        return raw is not None and not Reinstall.from_record(json.loads(raw)).started_running
    except (ValueError, TypeError, VendorInputError):
        return False


def resume_state(
    table: Mapping[str, Row],
    releasing: bool,
    state: str,
    facts: Mapping[str, str],
    error_type: str | None = None,
) -> str:
    """Where a release starts: where the last one stopped (`releasing` and a state of the table), else
    at the beginning. A wait with no ticket recorded (a record of a release that died before it
    recorded one) starts at RELEASE_REINSTALL, which finds the running install and its ticket; so
    does a wait that ended on a failed or timed-out install, whose ticket would only fail again, and
    one whose reinstall was never seen running: the install may have run and ended while nobody
    looked, its record then reading exactly as before the POST (a second release of the box sends the
    same parameters), and such a wait could never tell. RELEASE_REINSTALL follows the install if it
    still runs, else sends another to a box that is being wiped anyway."""
    if not releasing or state not in table:
        return "RELEASE_MARKING"
    if state == "RELEASE_WAIT_INSTALL" and (
        not facts.get(REINSTALL) or error_type in REINSTALL_AGAIN or _unseen(facts.get(REINSTALL))
    ):
        return "RELEASE_REINSTALL"
    return install_resume_state(state, error_type)
