"""What the operator does to one box: prep it (Ubuntu with the fleet key and the sudo password the
self-join expects, reachable, /data checked), mark / unmark it with the fleet marker, and unclaim a
box whose claim no stack holds any more (reinstall-to-pool, as a release does).

Each command first reads everything and refuses (one line, nothing written) a box that is unknown,
claimed, or another environment's; `dry_run` stops after printing the plan. Every write is one the
vendor clients make idempotent (a whole-value PUT / POST of the marker field; a reinstall that
follows an install already running), so a run cut short is finished by running it again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from urllib3.exceptions import HTTPError as TransportError

from config.models import Environment, Fleet
from ops.estate import BoxRef, BoxState, Nodes, classify, foreign_marker, get_box, marker_of
from ops.stack import OpsError, Stack
from ops.waiting import Poll, wait_for
from providers.errors import VendorError, VendorInputError
from providers.machine.errors import ClaimLostError
from providers.machine.record import KubeClaimRecord, Progress
from providers.machine.spec import node_name_for
from providers.ssh.runner import (
    RemoteCommandError,
    SshAuthError,
    SshError,
    SshTarget,
    run_script,
)
from providers.vendor import (
    MARKER_LIMITS,
    TAG_MARKED_VENDORS,
    Box,
    Claim,
    InstallState,
    Reinstall,
    Vendor,
    marker_writer,
)

VERIFY_SCRIPT = Path(__file__).parent / "scripts" / "verify-box.sh"
PREP_VENDORS = (Vendor.OVH, Vendor.DEDIBOX)  # seed 000's prep tasks; Robot boxes are installed on adoption
REINSTALL_TIMEOUT = 5400.0  # as the release's wait (providers/machine/spec.py release_wait_install)
SSH_UP_TIMEOUT = 600.0  # a reinstalled box's sshd answering with the new key

Say = Callable[[str], None]
T = TypeVar("T")


def pick_fleet(stack: Stack, vendor: Vendor, name: str | None) -> Fleet:
    if name is not None:
        fleet = stack.fleet(name)
        if fleet.vendor is not vendor:
            raise OpsError(f"fleet {name} is a {fleet.vendor.value} fleet, the box is {vendor.value}")
        return fleet
    fleets = stack.fleets_of(vendor)
    if len(fleets) != 1:
        names = ", ".join(f.name for f in fleets) or "none"
        raise OpsError(
            f"stack {stack.name} has {len(fleets)} {vendor.value} fleets ({names}): name one with --fleet"
        )
    return fleets[0]


def refuse_unless_free(stack: Stack, ref: BoxRef, box: Box, doing: str, *, own_claim: bool = False) -> None:
    """One line and no write for a claimed, releasing or other environment's box (`own_claim`: a claim
    the caller checked is its own to act under)."""
    if box.claim is not None and not own_claim:
        holder = stack.holder(box.claim.token)
        kind = "being released by" if box.claim.releasing else "claimed by"
        raise OpsError(f"refusing to {doing} {ref}: it is {kind} {holder}")
    foreign = foreign_marker(stack, box)
    if foreign:
        raise OpsError(f"refusing to {doing} {ref}: it belongs to another environment ({foreign})")


def refuse_if_node(ref: BoxRef, box: Box, nodes: Nodes, doing: str) -> None:
    """One line and no write for a box that is still a Node of the stack's cluster, and for any box
    while the cluster does not answer (whether it is a Node cannot be told). The Node is looked up by
    the vendor's own id of the box (`box.id`, as get_box read it), not the id as typed: Robot answers
    for `02345607` with server 2345607, and its Node names `hrobot://2345607`. Ids compare whatever
    their case (Nodes.of): the OVH client keeps a service name as it was given, a providerID may write
    it otherwise."""
    if not (nodes.known or nodes.status == "no cluster"):
        raise OpsError(
            f"refusing to {doing} {ref}: cannot tell whether it is still a Node (cluster {nodes.status}); "
            "rerun once the cluster answers"
        )
    node = nodes.of(box)
    if node is not None:
        raise OpsError(
            f"refusing to {doing} {ref}: it is still Node {node.name}; drain and delete it first "
            f"(kubectl drain {node.name} --ignore-daemonsets --delete-emptydir-data && "
            f"kubectl delete node {node.name})"
        )


# --- prep -----------------------------------------------------------------------------------------------


@dataclass
class Probe:
    """What the fleet key finds on the box over SSH."""

    reachable: bool
    key_accepted: bool
    facts: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    host_key: str | None = None

    @property
    def sudo_ok(self) -> bool:
        return self.facts.get("sudo") in ("nopasswd", "password")

    @property
    def sudo_refused(self) -> bool:
        """The check ran and sudo refused the fleet sudo password. A check that failed (a box without
        bash, say) or printed no `sudo=` line tells nothing about sudo: neither this nor sudo_ok."""
        return self.facts.get("sudo") == "refused"


def probe(stack: Stack, box: Box, fleet: Fleet, *, retries: int = 1, retry_delay: float = 5.0) -> Probe:
    if not box.public_ipv4:
        return Probe(False, False, problem="the vendor reports no public IPv4")
    target = SshTarget(box.public_ipv4, fleet.ssh_port, fleet.ssh_user)
    try:
        result = run_script(
            target,
            VERIFY_SCRIPT,
            private_key=stack.settings.fleet_private_key,
            env_secrets={"SUDO_PASSWORD": stack.settings.sudo_password},
            # Nothing is pinned before adoption: prep trusts the key it first sees (the machine
            # provider pins it when it adopts the box).
            expected_host_key=None,
            handshake_timeout=10,
            step_timeout=60,
            retries=retries,
            retry_delay=retry_delay,
            step="prep check",
        )
    except SshAuthError:
        return Probe(True, False, problem=f"{target} refuses the fleet key")
    except RemoteCommandError as error:
        said = [line.strip() for line in stack.scrub(error.output_tail).splitlines() if line.strip()]
        last = f": {said[-1]}" if said else ""
        return Probe(True, True, problem=f"the check failed on {target} (exit {error.exit_status}{last})")
    except SshError as error:
        return Probe(False, False, problem=stack.scrub(str(error)).splitlines()[0])
    facts = dict(
        line.split("=", 1)
        for line in result.output_tail.splitlines()
        if "=" in line and " " not in line.split("=")[0]
    )
    return Probe(True, True, facts=facts, host_key=result.host_key_fingerprint)


@dataclass
class PrepPlan:
    ref: BoxRef
    box: Box
    fleet: Fleet
    before: Probe
    reinstall_reasons: list[str]
    # An install runs at the vendor already (a prep cut short): run_prep only waits for it, and never
    # starts one of its own.
    following: bool = False

    @property
    def reinstall(self) -> bool:
        return bool(self.reinstall_reasons)


def plan_prep(stack: Stack, ref: BoxRef, fleet_name: str | None, *, force_reinstall: bool) -> PrepPlan:
    if ref.vendor not in PREP_VENDORS:
        raise OpsError(
            f"{ref}: prep is for {' and '.join(v.value for v in PREP_VENDORS)} boxes; the program installs "
            f"{ref.vendor.value} boxes itself when it adopts them: mark it with `tuist-ops mark`"
        )
    fleet = pick_fleet(stack, ref.vendor, fleet_name)
    box = get_box(stack, ref)
    refuse_unless_free(stack, ref, box, "prep")
    # The vendor first: an install that runs already (a prep cut short) is followed, not probed
    # around or started a second time; and the box is probed only once no install runs.
    try:
        running = stack.client(ref.vendor).install_state(box.id) is InstallState.RUNNING
    except VendorError as error:
        # Never guess either way: "none runs" would start a second install on a box mid-install
        # (which refuses the fleet key), and "one runs" (OVH's newest task answering 404 or 500,
        # which may be one that ended long ago) would promise to follow an install there may be none
        # of.
        raise OpsError(
            f"{ref}: cannot tell whether an install runs at {ref.vendor.value} "
            f"({stack.scrub(str(error)).splitlines()[0]}); rerun in a minute"
        ) from None
    if running:
        return PrepPlan(
            ref,
            box,
            fleet,
            Probe(False, False, problem="reinstalling"),
            ["a reinstall runs at the vendor: following it"],
            following=True,
        )
    # Read again: an install that ended between the first read and the state above (a prep cut
    # short, rerun) had left that read saying "no OS", which would have started a second install.
    box = get_box(stack, ref)
    before = probe(stack, box, fleet) if box.has_os else Probe(False, False, problem="no OS installed")
    reasons = []
    if force_reinstall:
        reasons.append("--reinstall was given")
    if not box.has_os:
        reasons.append("the vendor reports no OS installed")
    elif before.reachable and not before.key_accepted:
        reasons.append("the box does not accept the fleet key")
    elif before.sudo_refused:
        reasons.append(f"{fleet.ssh_user} cannot sudo with the fleet sudo password")
    elif before.key_accepted and not before.sudo_ok and not force_reinstall:
        # The key logs in but the check told nothing about sudo: a wipe is not planned on a guess.
        why = before.problem or "the check printed no sudo= line"
        raise OpsError(
            f"{ref}: {why}, so whether {fleet.ssh_user} can sudo with the fleet sudo password is unknown; "
            "fix what stops the check and rerun, or reinstall the box with --reinstall"
        )
    elif not before.reachable and not force_reinstall:
        raise OpsError(
            f"{ref}: unreachable over SSH ({before.problem}); check the box at {ref.vendor.value} "
            "(is it up?), or reinstall it with --reinstall"
        )
    if reasons:
        # A reinstall wipes the box: never one that is still a Node of the cluster (as unclaim).
        refuse_if_node(ref, box, Nodes(stack), "reinstall")
    return PrepPlan(ref, box, fleet, before, reasons)


def describe_prep(stack: Stack, plan: PrepPlan) -> list[str]:
    box, fleet = plan.box, plan.fleet
    lines = [
        f"prep {plan.ref} for fleet {fleet.name} ({box.public_ipv4}:{fleet.ssh_port}, login {fleet.ssh_user})"
    ]
    if plan.following:
        lines.append("  follow the reinstall that runs at the vendor (no new one is started)")
        lines.append("  then wait for SSH with the fleet key and check sudo and /data again")
    elif plan.reinstall:
        lines.append(
            f"  reinstall {fleet.os} with the fleet key and the fleet sudo password "
            f"(hostname {node_name_for(fleet.name, box.id)}): {'; '.join(plan.reinstall_reasons)}"
        )
        lines.append("  then wait for SSH with the fleet key and check sudo and /data again")
    else:
        lines.append(
            f"  no reinstall: the fleet key logs in and sudo works ({plan.before.facts.get('sudo')}); "
            f"/data: {plan.before.facts.get('data', 'unknown')}"
        )
    return lines


def run_prep(stack: Stack, plan: PrepPlan, console: Console, say: Say) -> Probe:
    box, fleet, ref = plan.box, plan.fleet, plan.ref
    resume = f"rerun `tuist-ops prep -s {stack.name} {ref}` to follow it"
    if plan.reinstall:
        client = stack.client(ref.vendor)
        ticket: Reinstall | None = None
        if plan.following:
            # Only waited for: start_reinstall reads the vendor's tasks afresh, and one that does not
            # answer there reads as none running, so it would start the second install the plan
            # promised not to. Without a ticket, the wait reads the box's newest install.
            say(f"{ref}: following the reinstall that runs at the vendor")
        else:
            # The plan's read is an SSH probe old: a `pulumi up` may have claimed the box since.
            refuse_unless_free(stack, ref, get_box(stack, ref), "reinstall")
            try:
                ticket = client.start_reinstall(
                    box.id,
                    hostname=node_name_for(fleet.name, box.id),
                    ssh_public_key=stack.settings.fleet_public_key,
                    user_login=fleet.ssh_user,
                    user_password=stack.settings.sudo_password,
                    os_label=fleet.os,
                )
            except (VendorError, VendorInputError) as error:
                raise OpsError(f"{ref}: starting the reinstall failed: {stack.scrub(str(error))}") from None
            say(f"{ref}: reinstall started{f' (task {ticket.task_id})' if ticket.task_id else ''}")

        def installing() -> Poll:
            nonlocal ticket
            try:
                state = client.install_state(box.id, ticket)
            except VendorError as error:
                return Poll(f"running (last read failed: {stack.scrub(str(error))[:80]})")
            if ticket is not None:
                ticket = ticket.after(state)
            if state is InstallState.FAILED:
                return Poll(
                    "failed", failed=f"the {ref.vendor.value} reinstall failed; see the vendor's console"
                )
            return Poll(state.value, done=state is InstallState.DONE)

        wait_for(console, f"reinstall {ref}", installing, timeout=REINSTALL_TIMEOUT, resume_hint=resume)

        def ssh_up() -> Poll:
            seen = probe(stack, box, fleet)
            if seen.key_accepted:
                return Poll("ssh answers with the fleet key", done=True)
            return Poll(f"waiting for ssh ({seen.problem})")

        wait_for(console, f"ssh on {ref}", ssh_up, timeout=SSH_UP_TIMEOUT, interval=1.0, resume_hint=resume)
    after = probe(stack, box, fleet, retries=3, retry_delay=2.0)
    if not after.key_accepted:
        raise OpsError(f"{ref}: after prep the fleet key still does not log in: {after.problem}")
    if not after.sudo_ok and not after.sudo_refused:
        raise OpsError(
            f"{ref}: after prep {after.problem or 'the check printed no sudo= line'}, so whether "
            f"{fleet.ssh_user} can sudo with the fleet sudo password is unknown"
        )
    if not after.sudo_ok:
        raise OpsError(
            f"{ref}: {fleet.ssh_user} cannot sudo with the fleet sudo password; the self-join would fail "
            f"(rerun with --reinstall)"
        )
    data = after.facts.get("data", "missing")
    if data != "separate":
        say(
            f"{ref}: warning: /data is not a disk of its own ({data}); the kubelet and containerd keep "
            "their data on / (the self-join allows it, Kura's volumes then share the system disk)"
        )
    say(f"{ref}: ready (ssh {after.host_key}, sudo {after.facts.get('sudo')}, /data {data})")
    return after


# --- mark / unmark --------------------------------------------------------------------------------------


def _short_name(box: Box) -> str:
    if box.vendor is Vendor.OVH:
        return box.id.split(".", 1)[0]
    if box.vendor is Vendor.APPLESILICON:
        return box.id.rsplit("-", 1)[-1]  # the server id's last group: the zone and whole id are too long
    return box.id.replace("/", "-")


def marked_value(box: Box, fleet: Fleet) -> str:
    """The marker field once the box carries the fleet's marker."""
    if box.vendor in TAG_MARKED_VENDORS:
        tags = [t for t in box.marker_field.split(",") if t]
        return ",".join([*tags, fleet.marker])
    limit = MARKER_LIMITS[box.vendor]
    joiner = "" if fleet.marker.endswith("-") else "-"
    value = f"{fleet.marker}{joiner}{_short_name(box)}"
    # The name keeps room for a claim; if the box's id does not fit, the marker alone does.
    if len(value) > limit.marker_max_length or limit.value_problem(value):
        return fleet.marker
    return value


def unmarked_value(box: Box, fleet: Fleet) -> str:
    if box.vendor in TAG_MARKED_VENDORS:
        return ",".join(t for t in box.marker_field.split(",") if t and t != fleet.marker)
    # OVH's own default displayName is the service name; Robot's server_name becomes the number.
    # An Apple silicon name is a hostname label: the zone and the server id, joined by '-'.
    return box.id.replace("/", "-") if box.vendor is Vendor.APPLESILICON else box.id


@dataclass
class MarkPlan:
    ref: BoxRef
    box: Box
    fleet: Fleet | None  # None: an unmark of a box that carries no fleet marker of the stack
    current: str
    wanted: str

    @property
    def changes(self) -> bool:
        return self.current != self.wanted


def plan_mark(stack: Stack, ref: BoxRef, fleet_name: str | None, *, unmark: bool) -> MarkPlan:
    if unmark:
        return _plan_unmark(stack, ref, fleet_name)
    fleet = pick_fleet(stack, ref.vendor, fleet_name)
    box = get_box(stack, ref)
    refuse_unless_free(stack, ref, box, "mark", own_claim=held_by_fleet(stack, box, fleet))
    _refuse_unless_writable(stack, ref)
    carrying = marker_of(box, stack.cfg.fleets)
    if carrying is not None and carrying.name == fleet.name:
        return MarkPlan(ref, box, fleet, box.marker_field, box.marker_field)
    if carrying is not None:
        raise OpsError(f"refusing to mark {ref} for {fleet.name}: it carries fleet {carrying.name}'s marker")
    if classify(stack, box) is BoxState.NO_OS:
        raise OpsError(
            f"refusing to mark {ref}: it has no OS; run `tuist-ops prep -s {stack.name} {ref}` first"
        )
    return MarkPlan(ref, box, fleet, box.marker_field, marked_value(box, fleet))


def held_by_fleet(stack: Stack, box: Box, fleet: Fleet) -> bool:
    """Whether a slot of `fleet` in this stack holds the box (not releasing it). Such a box may be
    marked: the fleet's marker was renamed in the stack file, and the boxes it holds take the new one
    while keeping their claims (a claim's update refuses a box without it, and never releases one)."""
    if box.claim is None or box.claim.releasing:
        return False
    holder = stack.holder(box.claim.token)
    return holder.stack == stack.name and holder.fleet == fleet.name


def _plan_unmark(stack: Stack, ref: BoxRef, fleet_name: str | None) -> MarkPlan:
    """The fleet is the one whose marker the box carries: a stack with several fleets of the vendor
    (production's two OVH regions) needs no --fleet. A --fleet naming another fleet than the box's is
    refused (a typo must not read as "nothing to do" and leave the box marked for a deploy to adopt);
    "nothing to do" is only for a box that carries no fleet marker of the stack."""
    named = pick_fleet(stack, ref.vendor, fleet_name) if fleet_name is not None else None
    box = get_box(stack, ref)
    refuse_unless_free(stack, ref, box, "unmark")
    _refuse_unless_writable(stack, ref)
    carrying = marker_of(box, stack.cfg.fleets)
    if carrying is None:
        return MarkPlan(ref, box, named, box.marker_field, box.marker_field)
    if named is not None and named.name != carrying.name:
        raise OpsError(
            f"refusing to unmark {ref}: it carries fleet {carrying.name}'s marker {carrying.marker!r}, "
            f"not that of fleet {named.name} given by --fleet ({named.marker!r}); rerun with "
            f"--fleet {carrying.name} (or without --fleet) to remove the marker it carries"
        )
    return MarkPlan(ref, box, carrying, box.marker_field, unmarked_value(box, carrying))


def _refuse_unless_writable(stack: Stack, ref: BoxRef) -> None:
    try:
        marker_writer(stack.client(ref.vendor))
    except VendorInputError:
        raise OpsError(f"{ref}: marking {ref.vendor.value} boxes is not supported by this CLI yet") from None


def describe_mark(stack: Stack, plan: MarkPlan, *, unmark: bool) -> str:
    field_name = MARKER_LIMITS[plan.ref.vendor].field_name.split(" (")[0]
    if not plan.changes:
        if unmark or plan.fleet is None:
            return (
                f"{plan.ref}: carries no fleet marker of stack {stack.name} "
                f"({field_name} {plan.current!r}): nothing to do"
            )
        fleet = plan.fleet
        return f"{plan.ref}: already carries fleet {fleet.name}'s marker {fleet.marker!r}: nothing to do"
    return f"{plan.ref}: {field_name} {plan.current!r} -> {plan.wanted!r}"


def run_mark(stack: Stack, plan: MarkPlan) -> None:
    if not plan.changes:
        return
    try:
        marker_writer(stack.client(plan.ref.vendor)).set_marker_field(plan.box.id, plan.wanted)
    except (VendorError, VendorInputError) as error:
        raise OpsError(f"{plan.ref}: writing the marker failed: {stack.scrub(str(error))}") from None


# --- unclaim ------------------------------------------------------------------------------------------


@dataclass
class UnclaimPlan:
    ref: BoxRef
    box: Box
    claim: Claim
    fleet: Fleet | None
    reinstall: bool
    record: Progress | None  # the cluster's MachineClaim record of the box, which names this claim
    # Why the plan needed --force (the state holds the claim's token, or no stack is known for it);
    # None: it did not, and a rerun (the resume hint) goes without it.
    forced_past: str | None = None


def plan_unclaim(stack: Stack, ref: BoxRef, *, reinstall: bool, force: bool, nodes: Nodes) -> UnclaimPlan:
    box = get_box(stack, ref)
    if box.claim is None:
        raise OpsError(f"{ref}: carries no claim; nothing to unclaim")
    holder = stack.holder(box.claim.token)
    in_state = [s for s in stack.slots() if s.token == box.claim.token]
    if in_state and not force:
        raise OpsError(
            f"refusing to unclaim {ref}: its holder {holder} is in stack {stack.name}'s state "
            f"({in_state[0].short_urn}); `pulumi up`/`pulumi destroy` releases it (or --force)"
        )
    # Not even with --force: the other stack's state and its release decide about its box.
    if holder.stack not in (None, stack.name):
        raise OpsError(
            f"refusing to unclaim {ref}: it is held by stack {holder.stack} ({holder.resource}); "
            f"run this against -s {holder.stack}"
        )
    if holder.stack is None and not force:
        raise OpsError(
            f"refusing to unclaim {ref}: its claim token {box.claim.token} names no slot of this project's "
            "stacks; if you know nobody holds it, rerun with --force"
        )
    # A claim of a slot the config has and the state does not hold (yet: a create under way, or a
    # state write lost) is one the next `pulumi up` resumes; wiping it would pull the box from under
    # that up. A releasing one is a release cut short, which unclaim finishes.
    resumable = (
        holder.stack == stack.name
        and not in_state
        and not box.claim.releasing
        and holder.resource in stack.configured_slots()
    )
    if resumable and not force:
        raise OpsError(
            f"refusing to unclaim {ref}: its holder {holder} is a slot of stack {stack.name}'s config that "
            "its state does not hold: `pulumi up` resumes that claim (`tuist-ops orphans` says so); to "
            "give the box up instead, rerun with --force"
        )
    foreign = foreign_marker(stack, box)
    if foreign:
        raise OpsError(f"refusing to unclaim {ref}: it belongs to another environment ({foreign})")
    # Robot's reinstall is the rescue system and installimage the machine provider drives over SSH,
    # not a vendor call; OVH, Dedibox, Elastic Metal and Apple silicon reinstall through their APIs
    # (their adoption installs nothing: a box put back unwiped would stay so).
    if reinstall and ref.vendor is Vendor.ROBOT:
        raise OpsError(
            f"{ref}: {ref.vendor.value} boxes are reinstalled through a rescue system the program drives; "
            "rerun with --no-reinstall and let the next adoption install it"
        )
    fleet = marker_of(box, stack.cfg.fleets)
    if reinstall and fleet is None:
        raise OpsError(
            f"{ref}: carries no fleet marker of stack {stack.name}: cannot tell which fleet's OS and login"
        )
    if stack.cfg.environment is Environment.PRODUCTION:
        # The switches a production release needs (providers/machine/release.py), whether it wipes the
        # box (a reinstall) or puts it back unwiped (--no-reinstall: the next adoption gets the previous
        # holder's data). A box carrying no fleet marker of the stack (--no-reinstall only: a reinstall
        # needs the fleet) has no fleet switch to ask for.
        missing = []
        if fleet is not None and not fleet.allow_release:
            missing.append(f"fleets[name={fleet.name}].allow_release: true")
        if not stack.cfg.allow_production_release:
            missing.append("allow_production_release: true")
        of_fleet = f" (fleet {fleet.name})" if fleet is not None else ""
        if reinstall:
            doing = f"reinstall production box {ref}{of_fleet}"
        else:
            doing = f"put production box {ref}{of_fleet} back in the pool unwiped (--no-reinstall)"
        if missing:
            raise OpsError(
                f"refusing to {doing}: set {' and '.join(missing)} in Pulumi.{stack.name}.yaml first, "
                "as a release needs"
            )
    # After what the config alone decides: the switches are the first thing to set in production.
    refuse_if_node(ref, box, nodes, "unclaim")
    record = _record_of(stack, ref, box, nodes)
    if record is not None and record.holder.token != box.claim.token:
        raise OpsError(
            f"refusing to unclaim {ref}: the cluster's MachineClaim {record.name} names holder "
            f"{record.holder}, not the box's claim {box.claim.token}; find out which is right first"
        )
    forced_past = None
    if in_state:
        forced_past = f"its holder is in stack {stack.name}'s state ({in_state[0].short_urn})"
    elif holder.stack is None:
        forced_past = f"its claim token {box.claim.token} names no slot of this project's stacks"
    elif resumable:
        forced_past = f"its holder {holder} is a slot of stack {stack.name}'s config"
    return UnclaimPlan(ref, box, box.claim, fleet, reinstall, record, forced_past)


def describe_unclaim(stack: Stack, plan: UnclaimPlan) -> list[str]:
    holder = stack.holder(plan.claim.token)
    lines = [f"unclaim {plan.ref} (claim {plan.claim.token}, holder {holder})"]
    lines.append("  1. mark the claim releasing (nobody adopts a box being wiped)")
    if plan.reinstall and plan.fleet is not None:
        lines.append(f"  2. reinstall {plan.fleet.os} with the fleet key and wait for it")
    else:
        lines.append("  2. no reinstall (--no-reinstall)")
    if plan.record is not None:
        lines.append(f"  3. delete its cluster record (MachineClaim {plan.record.name})")
    lines.append("  4. remove the claim from the marker (the fleet marker stays)")
    return lines


def run_unclaim(stack: Stack, plan: UnclaimPlan, console: Console, say: Say) -> None:
    """Each step is resumable: the releasing claim is what a rerun sees (so it continues here), the
    reinstall follows an install already running, and clearing writes the whole marker value.

    The resume hint repeats what the plan needed: --force only when it needed --force. Otherwise a
    rerun goes without it, so that it still refuses a claim a `pulumi up` has meanwhile put back in
    the stack's state."""
    ref, client = plan.ref, stack.client(plan.ref.vendor)
    flags = " --no-reinstall" * (not plan.reinstall) + " --force" * (plan.forced_past is not None)
    resume = f"rerun `tuist-ops unclaim -s {stack.name} {ref}{flags}` to finish"
    # The plan was read before the question, which may have waited on a person: a claim that changed
    # meanwhile (another holder, or cleared) is not the one shown, and nothing is written over it.
    now = get_box(stack, ref).claim
    if now is None or now.token != plan.claim.token:
        became = now.token if now else "none"
        raise OpsError(
            f"{ref}: its claim changed since the plan ({plan.claim.token} -> {became}); nothing was "
            "changed: run unclaim again to see the new plan"
        )
    try:
        client.set_claim(plan.box.id, Claim(plan.claim.token, releasing=True))
        say(f"{ref}: claim {plan.claim.token} marked releasing")
        if plan.reinstall and plan.fleet is not None:
            fleet = plan.fleet
            ticket = client.start_reinstall(
                plan.box.id,
                hostname=node_name_for(fleet.name, plan.box.id),
                ssh_public_key=stack.settings.fleet_public_key,
                user_login=fleet.ssh_user,
                user_password=stack.settings.sudo_password,
                os_label=fleet.os,
            )

            def installing() -> Poll:
                nonlocal ticket
                state = client.install_state(plan.box.id, ticket)
                ticket = ticket.after(state)
                if state is InstallState.FAILED:
                    return Poll("failed", failed="the reinstall failed; see the vendor's console")
                return Poll(state.value, done=state is InstallState.DONE)

            wait_for(console, f"reinstall {ref}", installing, timeout=REINSTALL_TIMEOUT, resume_hint=resume)
        # The record goes before the claim: a record left behind keeps every claim off the box, and a
        # rerun finds the box through its claim.
        record = plan.record
        if record is not None:
            _cluster_call(stack, ref, "deleting", lambda: _claim_records(stack).release(record), resume)
            say(f"{ref}: cluster record {record.name} deleted")
        client.set_claim(plan.box.id, None)
    except (VendorError, VendorInputError) as error:
        raise OpsError(f"{ref}: {stack.scrub(str(error))}; {resume}") from None
    say(f"{ref}: back in the pool (claim removed)")


def _claim_records(stack: Stack) -> KubeClaimRecord:
    return KubeClaimRecord(stack.kube_api())


def _record_of(stack: Stack, ref: BoxRef, box: Box, nodes: Nodes) -> Progress | None:
    """The box's record, by the vendor's own id of the box (as the machine provider keys it)."""
    if not nodes.known:  # no cluster: no record
        return None
    return _cluster_call(
        stack, ref, "reading", lambda: _claim_records(stack).get(box.vendor.value, box.id), None
    )


def _cluster_call(stack: Stack, ref: BoxRef, doing: str, call: Callable[[], T], resume: str | None) -> T:
    """One line for a cluster that refuses or does not answer (the kubernetes client raises urllib3's
    errors as they are), never a traceback."""
    try:
        return call()
    except ClaimLostError as error:
        problem = stack.scrub(str(error))
    except (TransportError, OSError) as error:  # named by type: their text carries addresses
        problem = f"the cluster did not answer ({type(error).__name__})"
    raise OpsError(
        f"{ref}: {doing} its MachineClaim record failed: {problem}" + (f"; {resume}" if resume else "")
    )


# --- host key ---------------------------------------------------------------------------------------------


@dataclass
class HostKeyCheck:
    ref: BoxRef
    address: str
    seen: str | None
    pinned: dict[str, str]  # machine (short urn) -> the pin its state holds
    problem: str | None = None

    @property
    def matches(self) -> bool:
        return self.seen is not None and all(pin == self.seen for pin in self.pinned.values())


def check_host_key(stack: Stack, ref: BoxRef) -> HostKeyCheck:
    """The host key the box answers with now (a key exchange only: nothing logs in) against the pin
    each AdoptedMachine of the stack's state holds for it."""
    from ops.stack import MACHINE_TYPE
    from providers.ssh.runner import fetch_host_key

    box = get_box(stack, ref)
    fleet = marker_of(box, stack.cfg.fleets) or pick_fleet(stack, ref.vendor, None)
    pinned = {}
    for resource in stack.source.resources():
        outputs = resource.get("outputs") or {}
        if resource.get("type") == MACHINE_TYPE and outputs.get("box_id") == box.id:
            pin = outputs.get("host_key_fingerprint")
            if isinstance(pin, str) and pin:
                pinned[str(resource.get("urn")).rsplit("::", 1)[-1]] = pin
    if not box.public_ipv4:
        return HostKeyCheck(ref, "", None, pinned, problem="the vendor reports no public IPv4")
    target = SshTarget(box.public_ipv4, fleet.ssh_port, fleet.ssh_user)
    try:
        seen = fetch_host_key(target, timeout=10)
    except SshError as error:
        return HostKeyCheck(
            ref, f"{target.host}:{target.port}", None, pinned, problem=stack.scrub(str(error))
        )
    return HostKeyCheck(ref, f"{target.host}:{target.port}", seen, pinned)
