"""Which box a claim takes, and taking it.

A box belongs to the fleet when it carries the fleet marker (OVH displayName prefix, Dedibox tag,
Robot server_name prefix). Boxes held by anyone else (a claim in the vendor marker, or a record in the
cluster), being released, without an OS (OVH, Dedibox), outside the datacenter prefix or without a
public IPv4 are skipped; the lexically lowest free one is taken.

Taking it, in this order, before anything slow:
1. the record (`ClaimRecord.acquire`): with a cluster, the apiserver creates the MachineClaim object
   for one holder only, which arbitrates between provider processes and between stacks;
2. the vendor marker (`set_claim`), the human-visible mirror, read back: a holder that writes vendor
   markers only (a stack without a cluster) loses nothing to us.
Claim selection is also serialized within the provider process (parallel creates in one `pulumi up`).
A retried create finds its own claim (by token, in the record or the marker) and resumes there.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from providers.constants import ENVIRONMENTS
from providers.machine.errors import NoAdoptableBoxError
from providers.machine.record import ClaimHeldError, ClaimRecord, Holder, Progress
from providers.machine.spec import ClaimSpec, Vendor
from providers.vendor import Box, Claim, VendorClient


@dataclass(frozen=True)
class Selection:
    own: Box | None  # a box already carrying this machine's claim: a retried create resumes there
    candidates: list[Box]  # free boxes of the fleet, lexically lowest id first
    skipped: list[tuple[str, str]]  # (box id, why it is not a candidate)


def skip_reason(
    box: Box,
    *,
    marker: str,
    token: str,
    vendor: Vendor,
    datacenter_prefix: str | None,
    recorded: Holder | None = None,
) -> str | None:
    """Why `box` cannot be adopted by the machine holding `token`; None when it can. `recorded` is
    the holder of the box's cluster-side record, if it has one."""
    if not box.has_marker(marker):
        field_text = box.marker_field or "<empty>"
        if any(env in field_text for env in ENVIRONMENTS):
            return f"marked for another environment or fleet ({field_text!r})"
        return f"not marked for this fleet ({field_text!r})"
    if recorded is not None and recorded.token != token:
        return f"claimed by {recorded}"
    if box.claim is not None:
        if box.claim.releasing:
            owner = "this machine's own, unfinished" if box.claim.token == token else box.claim.token
            return f"releasing (claim {owner})"
        if box.claim.token != token:
            return f"claimed by {box.claim.token}"
    if vendor is not Vendor.ROBOT and not box.has_os:
        # OVH and Dedibox boxes are pre-installed by the operator; Robot boxes are installed on adopt.
        return "no OS installed (prep the box first)"
    if datacenter_prefix and not box.datacenter.lower().startswith(datacenter_prefix.lower()):
        return f"datacenter {box.datacenter!r} does not start with {datacenter_prefix!r}"
    if not box.public_ipv4:
        return "no public IPv4"
    return None


def select_boxes(
    boxes: Sequence[Box],
    *,
    marker: str,
    token: str,
    vendor: Vendor,
    datacenter_prefix: str | None,
    recorded: Mapping[str, Holder] | None = None,
) -> Selection:
    recorded = recorded or {}
    own: Box | None = None
    candidates: list[Box] = []
    skipped: list[tuple[str, str]] = []
    for box in sorted(boxes, key=lambda b: b.id):
        holder = recorded.get(box.id)
        reason = skip_reason(
            box,
            marker=marker,
            token=token,
            vendor=vendor,
            datacenter_prefix=datacenter_prefix,
            recorded=holder,
        )
        if reason is not None:
            skipped.append((box.id, reason))
        elif (box.claim is not None and box.claim.token == token) or (
            holder is not None and holder.token == token
        ):
            own = own or box
        else:
            candidates.append(box)
    return Selection(own=own, candidates=candidates, skipped=skipped)


def no_candidate_message(fleet: str, marker: str, seen: int, skipped: Sequence[tuple[str, str]]) -> str:
    lines = [f"fleet {fleet}: no adoptable box with marker {marker!r} among the {seen} boxes seen"]
    lines += [f"  {box_id}: {reason}" for box_id, reason in skipped]
    return "\n".join(lines)


def holder_of(spec: ClaimSpec) -> Holder:
    return Holder(project=spec.project, stack=spec.stack, resource=spec.resource_name, token=spec.token)


@functools.cache
def _claim_lock() -> threading.Lock:
    """Serializes claim selection in the provider process. Made on first use: a Lock must never be
    reachable from the provider object dill pickles."""
    return threading.Lock()


def claim_box(
    client: VendorClient, record: ClaimRecord, spec: ClaimSpec, log: Callable[[str], None]
) -> tuple[Box, Progress]:
    """Claim a box of the fleet for `spec`: its own claim if it already holds one, else the lexically
    lowest free box. Every claim is recorded, then mirrored to the vendor marker and read back."""
    holder = holder_of(spec)
    with _claim_lock():
        boxes = client.list_boxes()
        selection = select_boxes(
            boxes,
            marker=spec.marker,
            token=spec.token,
            vendor=spec.vendor,
            datacenter_prefix=spec.datacenter_prefix,
            recorded=record.held(spec.vendor.value),
        )
        skipped = list(selection.skipped)
        if selection.own is not None:
            box = selection.own
            progress = record.acquire(_new_progress(spec, box, holder))
            if box.claim != Claim(spec.token):
                client.set_claim(box.id, Claim(spec.token))
            log(f"{spec.resource_name}: resuming on {box.id}, which already carries its claim")
            return box, progress
        for box in selection.candidates:
            try:
                progress = record.acquire(_new_progress(spec, box, holder))
            except ClaimHeldError as held:
                skipped.append((box.id, f"claimed by {held.holder} before this claim was recorded"))
                continue
            try:
                client.set_claim(box.id, Claim(spec.token))
                back = client.get_box(box.id)
            except BaseException:
                # Nothing recorded in state: the record must not outlive this create either. (A marker
                # write that took effect is found again by its token on the next create.)
                record.release(progress)
                raise
            if back.claim == Claim(spec.token):
                log(
                    f"{spec.resource_name}: claimed {spec.vendor.value} box {box.id} "
                    f"({spec.token}, {record.where} record)"
                )
                return back, progress
            # Someone who writes vendor markers only got there first: give the record back.
            record.release(progress)
            holder_text = back.claim.token if back.claim else "nobody (the claim did not stick)"
            skipped.append((box.id, f"claimed by {holder_text} before this claim was read back"))
        raise NoAdoptableBoxError(no_candidate_message(spec.fleet, spec.marker, len(boxes), skipped))


def _new_progress(spec: ClaimSpec, box: Box, holder: Holder) -> Progress:
    return Progress(vendor=spec.vendor.value, box_id=box.id, fleet=spec.fleet, holder=holder, state="CLAIMED")


def claim_named_box(
    client: VendorClient, record: ClaimRecord, spec: ClaimSpec, box_id: str, log: Callable[[str], None]
) -> tuple[Box, Progress]:
    """Claim the box `box_id` for `spec` (an operator's import of a box that is already in use): it must
    carry the fleet marker and be held by nobody else, in the record or the vendor marker."""
    holder = holder_of(spec)
    with _claim_lock():
        box = client.get_box(box_id)
        recorded = record.held(spec.vendor.value).get(box.id)
        reason = skip_reason(
            box,
            marker=spec.marker,
            token=spec.token,
            vendor=spec.vendor,
            datacenter_prefix=spec.datacenter_prefix,
            recorded=recorded,
        )
        if reason is not None:
            raise NoAdoptableBoxError(
                f"fleet {spec.fleet}: {spec.vendor.value} box {box.id} cannot be claimed: {reason}"
            )
        progress = record.acquire(_new_progress(spec, box, holder))
        if box.claim != Claim(spec.token):
            client.set_claim(box.id, Claim(spec.token))
            box = client.get_box(box.id)
            if box.claim != Claim(spec.token):
                record.release(progress)
                raise NoAdoptableBoxError(f"{spec.vendor.value} box {box.id}: the claim did not stick")
        log(f"{spec.resource_name}: claimed {spec.vendor.value} box {box.id} ({spec.token}, {record.where})")
        return box, progress
