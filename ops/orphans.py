"""Claims and state that disagree, each with the exact command that fixes it.

- A vendor claim of this stack (its token is one of this stack's slots) that no MachineClaim in state
  holds: a crash between the claim and the state write, or a resource removed from state by hand. If
  the slot is still in the config, `pulumi up` finds its own claim again (the token is derived from
  the slot, so the create resumes); if not, `tuist-ops unclaim` returns the box to the pool. A claim
  marked releasing (a release cut short) is finished by `tuist-ops unclaim` either way: `pulumi up`
  refuses a box being released, its own claim's too.
- A claim whose token a MachineClaim in state holds, on another box than the one state names for it:
  if that box carries the claim too, this one is a second claim of the slot and `tuist-ops unclaim
  --force` returns it (--force: the token is in state); if not, the state is what is wrong, and
  `pulumi refresh` of that resource drops it, as for a state whose box lost its claim; if that box
  could not be read, `orphans` again once its vendor answers.
- A MachineClaim in state whose box no longer carries its claim (or is gone): `pulumi refresh` of
  that resource drops it (the claim's read() says gone), and the next `pulumi up` claims a box anew.
- A claim token no stack of the project derives (a stack whose file is gone, a hand-written marker):
  shown, with the unclaim command that needs --force.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ops.stack import OpsError, Slot, Stack
from providers.errors import NotFoundError, VendorError
from providers.vendor import Box, Vendor


@dataclass(frozen=True)
class Finding:
    kind: str  # "claim-without-state", "state-without-claim", "unknown-claim", "claim-on-another-box"
    box: str  # <vendor>:<box id>
    detail: str
    fix: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def find_orphans(stack: Stack) -> tuple[list[Finding], list[str]]:
    slots = stack.slots()
    by_token = {s.token: s for s in slots}
    in_config = stack.configured_slots()
    findings: list[Finding] = []
    problems: list[str] = []
    seen_boxes: dict[tuple[str, str], Box] = {}
    unlisted: set[Vendor] = set()
    # Boxes carrying a token state holds for another box: judged once every slot's box is read.
    elsewhere: list[tuple[Box, Slot]] = []
    for vendor in stack.vendors():
        try:
            boxes = stack.client(vendor).list_boxes()
        except (VendorError, OpsError) as error:  # OpsError: the vendor's secret is not in the config
            unchecked = sum(1 for slot in slots if slot.vendor is vendor)
            problems.append(
                f"{vendor.value}: listing boxes failed: {stack.scrub(str(error))}; "
                f"its {unchecked} slot(s) in state were not checked"
            )
            unlisted.add(vendor)
            continue
        for box in boxes:
            seen_boxes[(vendor.value, box.id)] = box
            if box.claim is None:
                continue
            slot_held = by_token.get(box.claim.token)
            if slot_held is not None:
                if (slot_held.vendor, slot_held.box_id) != (vendor, box.id):
                    elsewhere.append((box, slot_held))
                continue
            ref = f"{vendor.value}:{box.id}"
            holder = stack.holder(box.claim.token)
            if holder.stack == stack.name:
                if box.claim.releasing:
                    # A release cut short. `pulumi up` refuses a box being released, its own claim's
                    # too (providers/machine/selection.py), and names unclaim, which finishes it.
                    fix = f"tuist-ops unclaim -s {stack.name} {ref}"
                    if holder.resource in in_config:
                        why = (
                            f"slot {holder.resource} is in the config, but the claim is releasing (a release "
                            "cut short): `pulumi up` refuses it; unclaim finishes the release"
                        )
                    else:
                        why = (
                            f"slot {holder.resource} is no longer in the config; the claim is releasing "
                            "(a release cut short)"
                        )
                elif holder.resource in in_config:
                    fix = f"pulumi up -s {stack.name}"
                    why = f"slot {holder.resource} is in the config: its create finds this claim and resumes"
                else:
                    fix = f"tuist-ops unclaim -s {stack.name} {ref}"
                    why = f"slot {holder.resource} is no longer in the config"
                findings.append(
                    Finding("claim-without-state", ref, f"claimed by {holder}, not in state; {why}", fix)
                )
            elif holder.stack is None:
                findings.append(
                    Finding(
                        "unknown-claim",
                        ref,
                        f"claim token {box.claim.token} names no slot of any stack file in this project",
                        f"tuist-ops unclaim -s {stack.name} {ref} --force",
                    )
                )
    carries: dict[str, bool | None] = {}  # slot urn -> whether the box state names carries its claim
    for slot in slots:
        key = (slot.vendor.value, slot.box_id)
        ref = f"{slot.vendor.value}:{slot.box_id}"
        found: Box | None = seen_boxes.get(key)
        if slot.vendor not in stack.vendors():
            continue
        if slot.vendor in unlisted:
            # Said once above; reading each slot's box from a vendor that just failed would cost each
            # its retries, and Robot's per-server reads share an hourly budget with deploys.
            continue
        if found is None:
            try:
                found = stack.client(slot.vendor).get_box(slot.box_id)
            except NotFoundError:
                found = None
            except VendorError as error:
                problems.append(f"{ref}: reading it failed: {stack.scrub(str(error))}")
                continue
        carries[slot.urn] = found is not None and found.claim is not None and found.claim.token == slot.token
        refresh = f"pulumi refresh -s {stack.name} --yes --target '{slot.urn}'"
        if found is None:
            findings.append(
                Finding("state-without-claim", ref, f"{slot.short_urn}: the box no longer exists", refresh)
            )
        elif found.claim is None or found.claim.token != slot.token:
            now = f"claimed by {stack.holder(found.claim.token)}" if found.claim else "unclaimed"
            findings.append(
                Finding(
                    "state-without-claim",
                    ref,
                    f"{slot.short_urn} holds it in state with claim {slot.token}, but the box is {now}",
                    refresh,
                )
            )
    for box, slot in elsewhere:
        ref = f"{box.vendor.value}:{box.id}"
        named = f"{slot.vendor.value}:{slot.box_id}"
        holder = stack.holder(slot.token)
        detail = f"carries claim {slot.token} of {holder}, but {slot.short_urn} holds {named} in state"
        both = carries.get(slot.urn)
        if both:
            fix = f"tuist-ops unclaim -s {stack.name} {ref} --force"
            detail += ", which carries it too: this box's claim is a second one of the slot"
        elif both is False:
            fix = f"pulumi refresh -s {stack.name} --yes --target '{slot.urn}'"
            detail += (
                ", which does not carry it: the refresh drops the slot from state; then `tuist-ops orphans` "
                "again says what this box needs"
            )
        else:
            # The box state names was not read (its vendor did not answer: said under problems).
            fix = f"tuist-ops orphans -s {stack.name}"
            detail += ", which could not be read: whether it carries the claim too is not known yet"
        findings.append(Finding("claim-on-another-box", ref, detail, fix))
    return findings, problems
