"""Claims and state that disagree, each with the exact command that fixes it.

- A vendor claim of this stack (its token is one of this stack's slots) that no MachineClaim in state
  holds: a crash between the claim and the state write, or a resource removed from state by hand. If
  the slot is still in the config, `pulumi up` finds its own claim again (the token is derived from
  the slot, so the create resumes); if not, `tuist-ops unclaim` returns the box to the pool.
- A MachineClaim in state whose box no longer carries its claim (or is gone): `pulumi refresh` of
  that resource drops it (the claim's read() says gone), and the next `pulumi up` claims a box anew.
- A claim token no stack of the project derives (a stack whose file is gone, a hand-written marker):
  shown, with the unclaim command that needs --force.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ops.stack import OpsError, Stack
from providers.errors import NotFoundError, VendorError
from providers.vendor import Box, Vendor


@dataclass(frozen=True)
class Finding:
    kind: str  # "claim-without-state", "state-without-claim", "unknown-claim"
    box: str  # <vendor>:<box id>
    detail: str
    fix: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def find_orphans(stack: Stack) -> tuple[list[Finding], list[str]]:
    slots = stack.slots()
    by_token = {s.token: s for s in slots}
    in_config = {f"{f.name}-{i}" for f in stack.cfg.fleets if f.enabled for i in range(f.size)}
    findings: list[Finding] = []
    problems: list[str] = []
    seen_boxes: dict[tuple[str, str], Box] = {}
    unlisted: set[Vendor] = set()
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
            if box.claim is None or box.claim.token in by_token:
                continue
            ref = f"{vendor.value}:{box.id}"
            holder = stack.holder(box.claim.token)
            if holder.stack == stack.name:
                if holder.resource in in_config:
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
    return findings, problems
