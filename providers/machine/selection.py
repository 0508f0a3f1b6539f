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
Within one provider process the fleet's boxes are listed once and handed out one per claim
(`CandidatePools`): a claim costs O(1) vendor calls (the chosen box is read again, claimed and read
back), not a listing of the account, and no lock is held across a vendor call.
A retried create finds its own claim (by token, in the record or the marker) and resumes there. A
record of its own on a box gone at the vendor, or on one it cannot adopt whose marker does not carry
its claim (a create that died between the record and the marker write), is released and another box
claimed; the box's marker is left as it is. A record that says the box was adopted (Adopting, Ready,
Leaving) is kept and the claim refused instead: that box may still be a Node.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from providers.constants import ENVIRONMENTS
from providers.errors import NotFoundError
from providers.machine.errors import BoxStillListedError, NoAdoptableBoxError
from providers.machine.record import ClaimHeldError, ClaimRecord, Holder, Phase, Progress
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
    excluded: Collection[str] = (),
) -> str | None:
    """Why `box` cannot be adopted by the machine holding `token`; None when it can. `recorded` is
    the holder of the box's cluster-side record, if it has one; `excluded`, the fleet's
    excluded_boxes."""
    if box.id in excluded:
        return "in the fleet's excluded_boxes"
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
    """Serializes claim_named_box in the provider process. Made on first use: a Lock must never be
    reachable from the provider object dill pickles."""
    return threading.Lock()


PoolKey = tuple[str, str, str, str]  # vendor, fleet, marker, datacenter prefix


@dataclass
class _Pool:
    """One fleet's boxes as one listing of the account saw them."""

    generation: int
    free: list[Box]  # candidates nobody in this process has taken yet, lexically lowest id first
    claimed: dict[str, Box]  # claim token -> the box its marker names (a retried create resumes there)
    boxes: list[Box]  # the whole listing, for the message of a claim that finds nothing


class CandidatePools:
    """The fleets' candidate boxes, listed once per provider process and handed out one box per claim.

    Listing an account reads every box (Dedibox: a call per server, OVH: three), so a claim that
    listed the account for itself cost O(account) calls and a fleet O(N x account). Here the first
    claim of a vendor lists its account (outside any lock that other claims need: claims at other
    vendors go on, claims at the same vendor wait for that one listing and share it), and each claim
    then takes its fleet's next box under a short lock and revalidates only that box with the vendor
    before it claims it (the record and the marker's read-back still arbitrate between processes and
    stacks). A claim that runs out of candidates lists the account again, once, before it gives up:
    a box freed since the listing is not missed.

    Lives on the configured provider instance (Settings), never pickled.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[PoolKey, _Pool] = {}
        self._listed: dict[str, tuple[int, list[Box]]] = {}  # vendor -> (generation, every box)
        self._listing: dict[str, threading.Event] = {}  # vendor -> set when its listing ends
        self._generation = 0

    def pool(self, key: PoolKey, list_boxes: Callable[[], Sequence[Box]], *, newer_than: int = 0) -> _Pool:
        """The fleet's pool from a listing newer than `newer_than`, listing the account if there is
        none (one listing per vendor at a time: the others wait for it and share it)."""
        vendor = key[0]
        while True:
            with self._lock:
                pool = self._pools.get(key)
                if pool is not None and pool.generation > newer_than:
                    return pool
                listed = self._listed.get(vendor)
                if listed is not None and listed[0] > newer_than:
                    pool = self._pools[key] = _new_pool(key, listed[1], listed[0])
                    return pool
                listing = self._listing.get(vendor)
                mine = listing is None
                if listing is None:
                    listing = self._listing[vendor] = threading.Event()
            if not mine:
                # Another claim lists the account; if its listing fails, the loop lists again.
                listing.wait()
                continue
            try:
                boxes = list(list_boxes())
                with self._lock:
                    self._generation += 1
                    self._listed[vendor] = (self._generation, boxes)
            finally:
                with self._lock:
                    del self._listing[vendor]
                listing.set()

    def take(self, pool: _Pool, exclude: Mapping[str, Holder]) -> Box | None:
        """The next free box of `pool` not recorded for anyone (`exclude`), removed from the pool."""
        with self._lock:
            while pool.free:
                box = pool.free.pop(0)
                if box.id not in exclude:
                    return box
            return None


def _new_pool(key: PoolKey, boxes: Sequence[Box], generation: int) -> _Pool:
    vendor, _fleet, marker, prefix = key
    free: list[Box] = []
    claimed: dict[str, Box] = {}
    for box in sorted(boxes, key=lambda b: b.id):
        if box.has_marker(marker) and box.claim is not None and not box.claim.releasing:
            claimed.setdefault(box.claim.token, box)
        # No token is ours yet: every claimed box is skipped here, its own holder finds it in `claimed`.
        reason = skip_reason(
            box, marker=marker, token="", vendor=Vendor(vendor), datacenter_prefix=prefix or None
        )
        if reason is None:
            free.append(box)
    return _Pool(generation=generation, free=free, claimed=claimed, boxes=list(boxes))


def claim_box(
    client: VendorClient,
    record: ClaimRecord,
    spec: ClaimSpec,
    log: Callable[[str], None],
    pools: CandidatePools | None = None,
    *,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Box, Progress]:
    """Claim a box of the fleet for `spec`: its own claim if it already holds one, else the lexically
    lowest free box. Every claim is recorded, then mirrored to the vendor marker and read back.

    `pools` is the process's candidate cache (CandidatePools); without one the account is listed for
    this claim alone. No lock is held across a vendor or cluster call. Past `deadline` (by `clock`: the
    state's `claiming` budget) no further candidate is tried; each vendor call has its own timeout."""
    pools = pools or CandidatePools()
    holder = holder_of(spec)
    key: PoolKey = (spec.vendor.value, spec.fleet, spec.marker, spec.datacenter_prefix or "")
    recorded = record.held(spec.vendor.value)
    pool = pools.pool(key, client.list_boxes)
    # This claim's own boxes: those its token holds a record of, then the one its marker names (a create
    # that died after the marker write, in a process whose record is gone).
    own_ids = [box_id for box_id, held in recorded.items() if held.token == spec.token]
    if spec.token in pool.claimed and pool.claimed[spec.token].id not in own_ids:
        own_ids.append(pool.claimed[spec.token].id)
    skipped: list[tuple[str, str]] = []
    for own_id in own_ids:
        resumed = _resume_own(client, record, spec, holder, own_id, recorded.get(own_id), log, skipped)
        if resumed is not None:
            return resumed
    relisted = False
    while True:
        if deadline is not None and clock() > deadline:
            raise NoAdoptableBoxError(
                f"{spec.resource_name}: no box of fleet {spec.fleet} claimed within the claiming budget "
                f"({len(skipped)} tried and skipped: "
                + (", ".join(f"{box_id}: {why}" for box_id, why in skipped) or "none")
                + "); the next `pulumi up` tries again"
            )
        candidate = pools.take(pool, recorded)
        if candidate is None:
            if relisted:
                raise NoAdoptableBoxError(_nothing_left(spec, pool, recorded, skipped))
            # Out of candidates: list once more (another claim may have listed since: that one counts).
            pool = pools.pool(key, client.list_boxes, newer_than=pool.generation)
            recorded = record.held(spec.vendor.value)
            relisted = True
            continue
        # The listing may be old: the box's marker is read again before anything is written.
        box = client.get_box(candidate.id)
        reason = _reason(box, spec, recorded.get(box.id))
        if reason is not None:
            skipped.append((box.id, reason))
            continue
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


def confirm_gone(client: VendorClient, vendor: Vendor, box_id: str, not_found: NotFoundError) -> None:
    """Returns when `box_id`, which the vendor just answered 404 for, is really gone: not in the
    account's listing either. Else raises BoxStillListedError. A box taken as gone is let go of (its
    record deleted, its state dropped) while it still carries this slot's marker: if it is there after
    all, no later run finds it again. One 404 does not prove that (a wrong zone or endpoint, a vendor's
    passing fault); the listing costs calls only on this rare path."""
    if box_id in client.list_box_ids():
        raise BoxStillListedError(
            f"{vendor.value} answered 404 for box {box_id} ({not_found.call}), but its account still lists "
            "it: the box is not taken as gone and its claim is kept; run again, and if this repeats check "
            "the vendor's endpoint and zones in the stack config"
        ) from not_found


def _resume_own(
    client: VendorClient,
    record: ClaimRecord,
    spec: ClaimSpec,
    holder: Holder,
    box_id: str,
    recorded: Holder | None,
    log: Callable[[str], None],
    skipped: list[tuple[str, str]],
) -> tuple[Box, Progress] | None:
    """Resume this claim on `box_id`, a box its record or its marker names. None when the box is gone
    at the vendor, or cannot be adopted and its marker does not carry this claim: this claim's record
    of it is then deleted (it would keep every other claimer off the box, and this token would hold two
    records), the box's marker left as it is, and the box added to `skipped`."""
    try:
        box = client.get_box(box_id)
    except NotFoundError as error:
        confirm_gone(client, spec.vendor, box_id, error)
        _let_go_own_record(record, spec, box_id, f"it no longer exists at {spec.vendor.value}", log)
        skipped.append((box_id, f"no longer exists at {spec.vendor.value}"))
        return None
    reason = _reason(box, spec, recorded)
    if reason is None:
        progress = record.acquire(_new_progress(spec, box, holder))
        if box.claim != Claim(spec.token):
            client.set_claim(box.id, Claim(spec.token))
        log(f"{spec.resource_name}: resuming on {box.id}, which already carries its claim")
        return box, progress
    if box.claim is not None and box.claim.token == spec.token:
        # The box carries this slot's claim and cannot be adopted (its own release unfinished, the
        # fleet excluded it). A second box would carry the same claim, and nothing would find the
        # first again: the operator returns it first.
        raise NoAdoptableBoxError(
            f"{spec.resource_name}: its claim is on {spec.vendor.value} box {box.id}, which cannot be "
            f"adopted: {reason}; claiming another box would leave that one claimed. Return it first "
            f"(`tuist-ops unclaim -s {spec.stack} {spec.vendor.value}:{box.id}`), then run this again"
        )
    # The marker names nobody or another holder (a create that died between the record and the marker
    # write, a marker edited by hand): the box is left alone at the vendor, only this claim's record of
    # it goes.
    why = f"it cannot be adopted ({reason}) and its marker does not carry this claim"
    _let_go_own_record(record, spec, box.id, why, log)
    skipped.append((box.id, reason))
    return None


def _let_go_own_record(
    record: ClaimRecord, spec: ClaimSpec, box_id: str, why: str, log: Callable[[str], None]
) -> None:
    """Delete this claim's record of `box_id`, if it holds one (another holder's record is theirs). A
    record that says the box was adopted under this claim is kept and the claim refused: the box may
    still be a Node, which a second box would leave found by nothing."""
    held = record.get(spec.vendor.value, box_id)
    if held is None or held.holder.token != spec.token:
        return
    if held.phase in (Phase.ADOPTING, Phase.READY, Phase.LEAVING):
        raise NoAdoptableBoxError(
            f"{spec.resource_name}: its {record.where} record {held.name} says {spec.vendor.value} box "
            f"{box_id} was adopted under this claim ({held.phase}, state {held.state or 'none'}), but "
            f"{why}; claiming another box would leave that one, perhaps still a Node, found by nothing. "
            f"Once it is out of the cluster, delete the record (MachineClaim {held.name}), then run this "
            "again"
        )
    record.release(held)
    log(
        f"{spec.resource_name}: this claim's {record.where} record is on {spec.vendor.value} box {box_id}, "
        f"but {why}: the record is released (the box itself is left as it is); claiming another box"
    )


def _nothing_left(
    spec: ClaimSpec, pool: _Pool, recorded: Mapping[str, Holder], tried: Sequence[tuple[str, str]]
) -> str:
    """Why no box of the last listing could be claimed: each box's reason as that listing and the
    record show it, then the boxes this claim tried and lost meanwhile."""
    listed = select_boxes(
        pool.boxes,
        marker=spec.marker,
        token=spec.token,
        vendor=spec.vendor,
        datacenter_prefix=spec.datacenter_prefix,
        recorded=recorded,
    ).skipped
    named = {box_id for box_id, _ in listed}
    skipped = [*listed, *((box_id, why) for box_id, why in tried if box_id not in named)]
    return no_candidate_message(spec.fleet, spec.marker, len(pool.boxes), skipped)


def _reason(box: Box, spec: ClaimSpec, recorded: Holder | None) -> str | None:
    return skip_reason(
        box,
        marker=spec.marker,
        token=spec.token,
        vendor=spec.vendor,
        datacenter_prefix=spec.datacenter_prefix,
        recorded=recorded,
        excluded=spec.excluded_boxes,
    )


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
            excluded=spec.excluded_boxes,
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
