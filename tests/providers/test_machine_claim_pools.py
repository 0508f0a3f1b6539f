"""Claims from the process's candidate pools (providers/machine/selection.py): the account listed once
and outside any lock other claims wait on, one box revalidated per claim, and two provider processes
that share a claim record never taking the same box. Against a fake vendor with the real marker
semantics (a marker write replaces the whole field: the last writer wins, as on every vendor)."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from providers.errors import NotFoundError
from providers.machine.errors import BoxStillListedError, NoAdoptableBoxError
from providers.machine.record import Phase, ProcessClaimRecord, Progress
from providers.machine.selection import CandidatePools, claim_box, holder_of
from providers.machine.spec import ClaimSpec, parse_claim
from providers.vendor import Box, Claim, Vendor
from tests.providers.test_machine_support import claim_props

GUARD = 30  # seconds: a deadlock guard on waits, never a timing assertion


class FakeVendor:
    """OVH-shaped boxes in memory; counts every call; `list_boxes` can be held open."""

    def __init__(
        self, vendor: Vendor, marker: str, free: int, others: int = 0, datacenter: str = "bhs6"
    ) -> None:
        self.vendor = vendor
        self.lock = threading.Lock()
        self.boxes = {
            f"ns{i:03d}": Box(
                vendor=vendor,
                id=f"ns{i:03d}",
                name=f"ns{i:03d}",
                datacenter=datacenter,
                public_ipv4=f"203.0.113.{i}",
                state="ok",
                offer="Advance-1",
                marker_field=f"{marker}-{i}" if i < free else f"tuist-kura-staging-ovh-{i}",
                claim=None,
                has_os=True,
            )
            for i in range(free + others)
        }
        self.calls: Counter[str] = Counter()
        self.answer_404: set[str] = set()  # boxes whose read answers 404 though the account lists them
        self.writes: list[tuple[str, Claim | None]] = []  # every marker write, in order
        self.listing_started = threading.Event()
        self.listing_may_end = threading.Event()
        self.listing_may_end.set()

    def list_boxes(self) -> list[Box]:
        self.calls["list_boxes"] += 1
        self.listing_started.set()
        assert self.listing_may_end.wait(GUARD)
        with self.lock:
            return list(self.boxes.values())

    def list_box_ids(self) -> list[str]:
        with self.lock:
            self.calls["list_box_ids"] += 1
            return list(self.boxes)

    def get_box(self, box_id: str) -> Box:
        with self.lock:
            self.calls["get_box"] += 1
            if box_id not in self.boxes or box_id in self.answer_404:
                raise NotFoundError(vendor=self.vendor.value, call="GET /server", message="not found")
            return self.boxes[box_id]

    def set_claim(self, box_id: str, claim: Claim | None) -> None:
        with self.lock:
            self.calls["set_claim"] += 1
            self.writes.append((box_id, claim))
            self.boxes[box_id] = replace(self.boxes[box_id], claim=claim)


def spec(fleet: str, index: int, stack: str = "dev") -> ClaimSpec:
    return parse_claim(claim_props(fleet, index, stack=stack))


def claim(vendor: FakeVendor, record: ProcessClaimRecord, pools: CandidatePools, s: ClaimSpec) -> Box:
    box, _ = claim_box(vendor, record, s, lambda _line: None, pools)  # type: ignore[arg-type]
    return box


def test_a_fleet_lists_the_account_once_and_each_claim_costs_three_calls() -> None:
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=8, others=30)
    record, pools = ProcessClaimRecord({}), CandidatePools()
    with ThreadPoolExecutor(max_workers=8) as pool:
        boxes = list(pool.map(lambda i: claim(ovh, record, pools, spec("kura-ovh", i)), range(8)))
    assert sorted(b.id for b in boxes) == [f"ns{i:03d}" for i in range(8)]
    # One listing for the whole fleet; per box: the chosen box read again, the marker, its read-back.
    assert ovh.calls == Counter(list_boxes=1, get_box=16, set_claim=8)


def test_the_listing_holds_no_lock_other_vendors_claims_wait_on() -> None:
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=2)
    dedibox = FakeVendor(Vendor.DEDIBOX, "tuist-kura-dev", free=1, datacenter="DC5")
    dedibox.boxes = {k: replace(b, tags=("tuist-kura-dev",)) for k, b in dedibox.boxes.items()}
    record, pools = ProcessClaimRecord({}), CandidatePools()
    ovh.listing_may_end.clear()
    with ThreadPoolExecutor(max_workers=4) as pool:
        first = pool.submit(claim, ovh, record, pools, spec("kura-ovh", 0))
        assert ovh.listing_started.wait(GUARD)
        second = pool.submit(claim, ovh, record, pools, spec("kura-ovh", 1))
        # While OVH's listing is still open, a Dedibox claim in the same process runs to its end.
        other = pool.submit(claim, dedibox, record, pools, spec("kura-dedibox", 0)).result(GUARD)
        assert other.claim == Claim(spec("kura-dedibox", 0).token)
        assert not first.done() and not second.done()
        ovh.listing_may_end.set()
        assert {first.result(GUARD).id, second.result(GUARD).id} == {"ns000", "ns001"}
    # The second OVH claim waited for the first one's listing and shared it.
    assert ovh.calls["list_boxes"] == 1


def test_two_processes_sharing_the_record_never_take_the_same_box() -> None:
    # Two provider processes of one `pulumi up` (or two stacks): each its own pools, one cluster record
    # (the shared store stands for the apiserver, which creates a MachineClaim for one holder only).
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=10, others=5)
    cluster: dict[str, Progress] = {}
    processes = [(ProcessClaimRecord(cluster), CandidatePools()) for _ in range(2)]
    start = threading.Barrier(16, timeout=GUARD)

    def one(i: int) -> str | None:
        record, pools = processes[i % 2]
        s = spec("kura-ovh", i, stack="dev" if i % 2 else "other")
        start.wait()
        try:
            return claim(ovh, record, pools, s).id
        except NoAdoptableBoxError:
            return None

    with ThreadPoolExecutor(max_workers=16) as pool:
        taken = list(pool.map(one, range(16)))
    won = [box_id for box_id in taken if box_id is not None]
    assert len(won) == 10 and len(set(won)) == 10  # every box once, the six others told there is none
    assert {p.box_id for p in cluster.values()} == set(won)
    # Each box's marker names the holder its record names.
    for progress in cluster.values():
        assert ovh.boxes[progress.box_id].claim == Claim(progress.holder.token)


def test_a_claim_that_runs_out_lists_again_once_and_finds_a_box_freed_meanwhile() -> None:
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=2)
    record, pools = ProcessClaimRecord({}), CandidatePools()
    claim(ovh, record, pools, spec("kura-ovh", 0))
    claim(ovh, record, pools, spec("kura-ovh", 1))
    # Another stack releases ns001's claim and its record (the pool saw it as taken).
    record.release(record.get("ovh", "ns001"))  # type: ignore[arg-type]
    ovh.set_claim("ns001", None)
    assert claim(ovh, record, pools, spec("kura-ovh", 2)).id == "ns001"
    assert ovh.calls["list_boxes"] == 2
    with pytest.raises(NoAdoptableBoxError) as caught:
        claim(ovh, record, pools, spec("kura-ovh", 3))
    assert ovh.calls["list_boxes"] == 3  # one more listing before giving up, not one per box
    assert str(caught.value).splitlines()[0] == (
        "fleet kura-ovh: no adoptable box with marker 'tuist-kura-dev-ovh' among the 2 boxes seen"
    )


def test_a_box_claimed_since_the_listing_is_revalidated_and_skipped() -> None:
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=2)
    record, pools = ProcessClaimRecord({}), CandidatePools()
    claim(ovh, record, pools, spec("kura-ovh", 0))  # lists: ns001 is free then
    ovh.set_claim("ns001", Claim("fedcba987654"))  # a stack without a cluster marks it meanwhile
    with pytest.raises(NoAdoptableBoxError) as caught:
        claim(ovh, record, pools, spec("kura-ovh", 1))
    assert "ns001: claimed by fedcba987654" in str(caught.value)
    assert ovh.boxes["ns001"].claim == Claim("fedcba987654")  # never overwritten


def test_a_retried_create_resumes_on_the_box_its_marker_names() -> None:
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=3)
    mine = spec("kura-ovh", 0)
    ovh.set_claim("ns002", Claim(mine.token))  # a create that died after its marker write
    # A new process: nothing in its record, the marker in the listing.
    assert claim(ovh, ProcessClaimRecord({}), CandidatePools(), mine).id == "ns002"


def test_a_box_the_fleet_excludes_is_never_claimed() -> None:
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=3)
    leaving = replace(spec("kura-ovh", 0), excluded_boxes=("ns000",))
    assert claim(ovh, ProcessClaimRecord({}), CandidatePools(), leaving).id == "ns001"
    assert ovh.boxes["ns000"].claim is None


def test_a_slot_whose_claim_is_on_a_box_it_cannot_adopt_claims_no_second_box() -> None:
    """Its own release unfinished (state edited by hand), or the fleet excluding it: a second box with
    the same claim would leave the first claimed, found by nothing."""
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=3)
    mine = spec("kura-ovh", 0)
    ovh.set_claim("ns001", Claim(mine.token, releasing=True))
    record = ProcessClaimRecord({})
    record.acquire(Progress("ovh", "ns001", "kura-ovh", holder_of(mine), state="RELEASE_REINSTALL"))
    writes = ovh.calls["set_claim"]
    with pytest.raises(NoAdoptableBoxError) as caught:
        claim(ovh, record, CandidatePools(), mine)
    assert str(caught.value) == (
        "kura-ovh-0: its claim is on ovh box ns001, which cannot be adopted: releasing (claim this "
        "machine's own, unfinished); claiming another box would leave that one claimed. Return it first "
        "(`tuist-ops unclaim -s dev ovh:ns001`), then run this again"
    )
    assert ovh.calls["set_claim"] == writes


def test_a_claim_tries_no_further_candidate_past_its_claiming_budget() -> None:
    """The claiming budget bounds the candidate loop (each vendor call has its own timeout): a fleet
    whose every box another writer keeps taking does not claim forever."""
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=3)
    taken = ovh.set_claim

    def someone_else_writes_after_us(box_id: str, claim_: Claim | None) -> None:
        taken(box_id, Claim("fedcba987654"))  # the last writer wins: ours never sticks

    ovh.set_claim = someone_else_writes_after_us  # type: ignore[method-assign]
    now = [0.0]

    def clock() -> float:
        now[0] += 10  # each look at the clock: ten seconds of vendor calls
        return now[0]

    with pytest.raises(NoAdoptableBoxError) as refused:
        claim_box(
            ovh, ProcessClaimRecord({}), spec("kura-ovh", 0), lambda _line: None, deadline=25, clock=clock
        )  # type: ignore[arg-type]
    message = str(refused.value)
    assert message.startswith(
        "kura-ovh-0: no box of fleet kura-ovh claimed within the claiming budget (2 tried"
    )
    assert message.endswith("); the next `pulumi up` tries again")
    assert ovh.calls["set_claim"] == 2  # two candidates, then the budget: the third was never tried


def _claim_logged(vendor: FakeVendor, record: ProcessClaimRecord, s: ClaimSpec) -> tuple[Box, list[str]]:
    lines: list[str] = []
    box, _ = claim_box(vendor, record, s, lines.append, CandidatePools())  # type: ignore[arg-type]
    return box, lines


def test_a_record_of_its_own_on_an_unmarked_box_it_cannot_adopt_is_released_and_another_box_claimed() -> None:
    """A create that died between the record and the marker write, and the fleet has excluded that box
    since: the record alone must not keep the box from every other claim, nor give the token two."""
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=3)
    mine = replace(spec("kura-ovh", 0), excluded_boxes=("ns000",))
    record = ProcessClaimRecord({})
    record.acquire(Progress("ovh", "ns000", "kura-ovh", holder_of(mine)))
    box, lines = _claim_logged(ovh, record, mine)
    assert box.id == "ns001"
    assert ovh.writes == [("ns001", Claim(mine.token))]  # ns000's marker never written
    assert ovh.boxes["ns000"].claim is None
    assert record.get("ovh", "ns000") is None
    assert record.held("ovh") == {"ns001": holder_of(mine)}
    assert lines[0] == (
        "kura-ovh-0: this claim's process record is on ovh box ns000, but it cannot be adopted (in the "
        "fleet's excluded_boxes) and its marker does not carry this claim: the record is released (the box "
        "itself is left as it is); claiming another box"
    )
    # Nothing keeps ns000 from a slot that may take it.
    other = spec("kura-ovh", 1)
    assert claim(ovh, record, CandidatePools(), other).id == "ns000"


def test_a_record_of_its_own_on_a_box_another_holder_marked_is_released_and_that_marker_left_alone() -> None:
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=3)
    ovh.boxes["ns000"] = replace(ovh.boxes["ns000"], claim=Claim("fedcba987654"))  # a marker-only stack
    mine = spec("kura-ovh", 0)
    record = ProcessClaimRecord({})
    record.acquire(Progress("ovh", "ns000", "kura-ovh", holder_of(mine)))
    box, lines = _claim_logged(ovh, record, mine)
    assert box.id == "ns001"
    assert ovh.writes == [("ns001", Claim(mine.token))]
    assert ovh.boxes["ns000"].claim == Claim("fedcba987654")
    assert record.held("ovh") == {"ns001": holder_of(mine)}
    assert "cannot be adopted (claimed by fedcba987654)" in lines[0]


def test_a_record_of_its_own_on_a_box_gone_at_the_vendor_is_released_and_another_box_claimed() -> None:
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=2)
    mine = spec("kura-ovh", 0)
    record = ProcessClaimRecord({})
    record.acquire(Progress("ovh", "ns099", "kura-ovh", holder_of(mine)))
    box, lines = _claim_logged(ovh, record, mine)
    assert box.id == "ns000"
    assert ovh.writes == [("ns000", Claim(mine.token))]
    assert record.held("ovh") == {"ns000": holder_of(mine)}
    assert lines[0] == (
        "kura-ovh-0: this claim's process record is on ovh box ns099, but it no longer exists at ovh: the "
        "record is released (the box itself is left as it is); claiming another box"
    )


def test_a_404_for_a_box_the_account_still_lists_keeps_the_record_and_claims_nothing_else() -> None:
    """One 404 (a wrong zone, the vendor's passing fault) is not proof: the box still carries this slot's
    marker, and taking it as gone would leave it held by nobody that any later run finds."""
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=2)
    mine = spec("kura-ovh", 0)
    ovh.boxes["ns000"] = replace(ovh.boxes["ns000"], claim=Claim(mine.token))
    record = ProcessClaimRecord({})
    record.acquire(Progress("ovh", "ns000", "kura-ovh", holder_of(mine)))
    ovh.answer_404.add("ns000")
    with pytest.raises(BoxStillListedError) as raised:
        _claim_logged(ovh, record, mine)
    assert str(raised.value) == (
        "ovh answered 404 for box ns000 (GET /server), but its account still lists it: the box is not "
        "taken as gone and its claim is kept; run again, and if this repeats check the vendor's endpoint "
        "and zones in the stack config"
    )
    assert ovh.writes == [] and record.held("ovh") == {"ns000": holder_of(mine)}
    ovh.answer_404.clear()  # the next run reads it, and resumes on it
    box, _ = _claim_logged(ovh, record, mine)
    assert box.id == "ns000" and record.held("ovh") == {"ns000": holder_of(mine)}


def test_a_stale_record_of_its_own_is_released_and_the_box_its_marker_names_resumed() -> None:
    """Two boxes name the token (a record left on one, the marker on the other): the claim resumes on
    the marked box, claims no third and holds one record."""
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=3)
    mine = replace(spec("kura-ovh", 0), excluded_boxes=("ns000",))
    ovh.boxes["ns002"] = replace(ovh.boxes["ns002"], claim=Claim(mine.token))
    record = ProcessClaimRecord({})
    record.acquire(Progress("ovh", "ns000", "kura-ovh", holder_of(mine)))
    box, _ = _claim_logged(ovh, record, mine)
    assert box.id == "ns002"
    assert ovh.writes == []
    assert record.held("ovh") == {"ns002": holder_of(mine)}


def test_another_holders_record_of_the_box_its_marker_named_is_left_alone() -> None:
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=3)
    mine, theirs = spec("kura-ovh", 0), spec("kura-ovh", 1, stack="other")
    ovh.boxes["ns001"] = replace(ovh.boxes["ns001"], claim=Claim(mine.token))
    record, pools = ProcessClaimRecord({}), CandidatePools()
    pools.pool(("ovh", "kura-ovh", mine.marker, mine.datacenter_prefix or ""), ovh.list_boxes)
    # After the listing, ns001 went to another holder (returned by hand, claimed again).
    ovh.boxes["ns001"] = replace(ovh.boxes["ns001"], claim=Claim(theirs.token))
    record.acquire(Progress("ovh", "ns001", "kura-ovh", holder_of(theirs)))
    box, _ = claim_box(ovh, record, mine, lambda _line: None, pools)  # type: ignore[arg-type]
    assert box.id == "ns000"
    assert ovh.writes == [("ns000", Claim(mine.token))]
    assert ovh.boxes["ns001"].claim == Claim(theirs.token)
    assert record.held("ovh") == {"ns000": holder_of(mine), "ns001": holder_of(theirs)}


def test_a_box_carrying_its_own_claim_that_it_cannot_adopt_still_refuses_and_keeps_its_record() -> None:
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=3)
    mine = replace(spec("kura-ovh", 0), excluded_boxes=("ns000",))
    ovh.boxes["ns000"] = replace(ovh.boxes["ns000"], claim=Claim(mine.token))
    record = ProcessClaimRecord({})
    held = record.acquire(Progress("ovh", "ns000", "kura-ovh", holder_of(mine)))
    with pytest.raises(NoAdoptableBoxError) as caught:
        claim(ovh, record, CandidatePools(), mine)
    assert str(caught.value) == (
        "kura-ovh-0: its claim is on ovh box ns000, which cannot be adopted: in the fleet's "
        "excluded_boxes; claiming another box would leave that one claimed. Return it first "
        "(`tuist-ops unclaim -s dev ovh:ns000`), then run this again"
    )
    assert ovh.writes == []
    assert record.get("ovh", "ns000") == held


def test_a_record_saying_its_unmarked_box_was_adopted_is_kept_and_the_claim_refused() -> None:
    """The box may still be a Node: a second box would leave it found by nothing."""
    ovh = FakeVendor(Vendor.OVH, "tuist-kura-dev-ovh", free=3)
    mine = replace(spec("kura-ovh", 0), excluded_boxes=("ns000",))
    record = ProcessClaimRecord({})
    held = record.acquire(
        Progress("ovh", "ns000", "kura-ovh", holder_of(mine), phase=Phase.READY, state="READY")
    )
    with pytest.raises(NoAdoptableBoxError) as caught:
        claim(ovh, record, CandidatePools(), mine)
    assert str(caught.value) == (
        "kura-ovh-0: its process record ovh-ns000 says ovh box ns000 was adopted under this claim (Ready, "
        "state READY), but it cannot be adopted (in the fleet's excluded_boxes) and its marker does not "
        "carry this claim; claiming another box would leave that one, perhaps still a Node, found by "
        "nothing. Once it is out of the cluster, delete the record (MachineClaim ovh-ns000), then run this "
        "again"
    )
    assert ovh.writes == []
    assert record.get("ovh", "ns000") == held
