"""The failover placement rule and its hysteresis, table-driven."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

import pytest

from watcher.decision import (
    Action,
    Decision,
    MoveConfirmer,
    NodeView,
    PodView,
    box_id_from_provider_id,
    decide,
)
from watcher.loop import FailoverWatcher, WatcherSettings


def node(name: str, box: str | None = None, *, ready: bool = True, **kw: bool) -> NodeView:
    return NodeView(name=name, box_id=box if box is not None else f"box-{name}", ready=ready, **kw)


def demux(node_name: str, *, ready: bool = True, terminating: bool = False) -> PodView:
    return PodView(name=f"demux-{node_name}", node_name=node_name, ready=ready, terminating=terminating)


MOVE_OFF_A = "current box box-a is not eligible; lowest eligible node is b"
CASES: list[tuple[str, str | None, list[NodeView], list[PodView], Decision]] = [
    (
        "current eligible stays put even when not the lowest",
        "box-b",
        [node("a"), node("b")],
        [demux("a"), demux("b")],
        Decision(Action.KEEP, "box-b", "b", "current box box-b (b) is eligible"),
    ),
    (
        "current gone moves to the lowest eligible",
        "box-gone",
        [node("c"), node("b")],
        [demux("b"), demux("c")],
        Decision(
            Action.MOVE, "box-b", "b", "current box box-gone is not eligible; lowest eligible node is b"
        ),
    ),
    (
        "unrouted ip is routed to the lowest eligible",
        None,
        [node("b"), node("a")],
        [demux("a"), demux("b")],
        Decision(Action.MOVE, "box-a", "a", "unrouted; lowest eligible node is a"),
    ),
    (
        "current not ready moves",
        "box-a",
        [node("a", ready=False), node("b")],
        [demux("a"), demux("b")],
        Decision(Action.MOVE, "box-b", "b", "current box box-a is not eligible; lowest eligible node is b"),
    ),
    (
        "current demux rolling (terminating) moves",
        "box-a",
        [node("a"), node("b")],
        [demux("a", terminating=True), demux("b")],
        Decision(Action.MOVE, "box-b", "b", MOVE_OFF_A, drain=True),
    ),
    (
        "current cordoned moves",
        "box-a",
        [node("a", unschedulable=True), node("b")],
        [demux("a"), demux("b")],
        Decision(Action.MOVE, "box-b", "b", MOVE_OFF_A, drain=True),
    ),
    (
        "demux pod on another node does not make a node eligible",
        "box-a",
        [node("a"), node("b")],
        [demux("b"), demux("b", ready=False)],
        Decision(Action.MOVE, "box-b", "b", "current box box-a is not eligible; lowest eligible node is b"),
    ),
    (
        "none eligible stays where it is, with every reason",
        "box-a",
        [
            node("a", ready=False),
            node("b", terminating=True),
            node("c"),
            NodeView("d", None, True),
            node("e", unschedulable=True),
        ],
        [demux("c", ready=False), demux("d")],
        Decision(
            Action.STAY,
            None,
            None,
            "no eligible box in pool (a: NotReady, b: terminating, c: no Ready peer-demux pod, "
            "d: no vendor box id in providerID, e: cordoned); IP left on box-a",
        ),
    ),
    (
        "empty pool stays",
        "box-a",
        [],
        [],
        Decision(Action.STAY, None, None, "no eligible box in pool (pool has no nodes); IP left on box-a"),
    ),
]


@pytest.mark.parametrize(("case", "current", "nodes", "pods", "expected"), CASES, ids=[c[0] for c in CASES])
def test_decide(
    case: str, current: str | None, nodes: list[NodeView], pods: list[PodView], expected: Decision
) -> None:
    assert decide(current, nodes, pods) == expected, case


IP = "203.0.113.7"
Observation = tuple[list[NodeView], list[PodView]]


@dataclass
class Routes:
    """The vendor as the loop sees it: where the IP routes, moved by the loop's own calls."""

    route: str | None
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def failover_target(self, ip: str) -> str | None:
        self.calls.append(("failover_target", ip))
        return self.route

    def move_failover(self, ip: str, box_id: str) -> None:
        self.calls.append(("move_failover", ip, box_id))
        self.route = box_id


def run_polls(
    observations: list[Observation], current: str, required: int = 2, mover: Routes | None = None
) -> list[str | None]:
    """Feed polls through the watcher's own loop (FailoverWatcher.poll_once: decide, confirm, move),
    each poll's Kubernetes reads answering the next observation; return the route after each."""
    mover = mover or Routes(current)
    polls = iter(observations)
    seen: list[Observation] = []

    def list_nodes() -> list[NodeView]:
        seen.append(next(polls))
        return seen[-1][0]

    settings = WatcherSettings(ip=IP, region="r", node_pool="p", confirm_polls=required)
    loop = FailoverWatcher(settings, list_nodes, lambda: seen[-1][1], mover)
    history = []
    for _ in observations:
        assert loop.poll_once() is not None
        history.append(mover.route)
    return history


UP = ([node("a"), node("b")], [demux("a"), demux("b")])
A_DOWN = ([node("a", ready=False), node("b")], [demux("a"), demux("b")])
B_DOWN = ([node("a"), node("b", ready=False)], [demux("a"), demux("b")])
ALL_DOWN = ([node("a", ready=False), node("b", ready=False)], [demux("a"), demux("b")])


def test_an_ip_routed_outside_the_fleet_moves_to_an_eligible_box() -> None:
    """Robot reads a target outside the account as its address (providers/robot/client.py), OVH as
    another service's name: no box of the pool, so the IP moves as if it were on an ineligible one."""
    nodes = [NodeView("bm-321", "321", ready=True)]
    pods = [PodView("demux-a", "bm-321", ready=True)]
    decision = decide("136.243.9.99", nodes, pods)
    assert (decision.action, decision.target, decision.reason) == (
        Action.MOVE,
        "321",
        "current box 136.243.9.99 is not eligible; lowest eligible node is bm-321",
    )


def test_a_box_that_refused_the_last_move_comes_after_every_other_eligible_box() -> None:
    """A vendor may refuse one box for good (OVH: not an allowed destination of the IP): the next try
    goes to another eligible box, and to that one again only when no other is eligible."""
    nodes = [
        NodeView("bm-a", "a", ready=False),
        NodeView("bm-b", "b", ready=True),
        NodeView("bm-c", "c", ready=True),
    ]
    pods = [PodView("demux-b", "bm-b", ready=True), PodView("demux-c", "bm-c", ready=True)]
    assert decide("a", nodes, pods).target == "b"
    moved_on = decide("a", nodes, pods, avoid={"b"})
    assert (moved_on.action, moved_on.target, moved_on.reason) == (
        Action.MOVE,
        "c",
        "current box a is not eligible; lowest eligible node whose box refused no recent move is bm-c "
        "(skipped b)",
    )
    assert decide("a", nodes, pods, avoid={"b", "c"}).target == "b"  # none other: the lowest again
    assert decide("a", nodes[:2], pods, avoid={"b"}).target == "b"
    # The box the IP is on stays while eligible, whatever failed on the way there.
    kept = decide("b", nodes, pods, avoid={"b"})
    assert (kept.action, kept.target) == (Action.KEEP, "b")


def test_flapping_current_box_never_moves() -> None:
    assert run_polls([A_DOWN, UP, A_DOWN, UP, A_DOWN, UP], "box-a") == ["box-a"] * 6


@pytest.mark.parametrize("ready_polls", [1, 100])
def test_single_unready_polls_apart_never_move_the_ip(
    ready_polls: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A demux blip, any number of healthy polls, another blip: two unready polls, but not in a row."""
    mover = Routes("box-a")
    with caplog.at_level(logging.INFO, logger="watcher"):
        history = run_polls([A_DOWN, *[UP] * ready_polls, A_DOWN], "box-a", mover=mover)
    assert history == ["box-a"] * (ready_polls + 2)
    assert mover.calls == [("failover_target", IP)] * (ready_polls + 2)
    pending = f"failover {IP}: move to box-b pending confirmation (2 polls needed): {MOVE_OFF_A}"
    keep = f"failover {IP}: keep: current box box-a (a) is eligible"
    assert caplog.messages == [pending, *[keep] * ready_polls, pending]


def test_a_poll_with_no_eligible_box_restarts_the_confirmation() -> None:
    assert run_polls([A_DOWN, ALL_DOWN, A_DOWN], "box-a") == ["box-a"] * 3
    assert run_polls([A_DOWN, ALL_DOWN, A_DOWN, A_DOWN], "box-a") == ["box-a"] * 3 + ["box-b"]


def test_confirm_polls_counts_unready_polls_in_a_row() -> None:
    down_up_down = [A_DOWN, A_DOWN, UP, A_DOWN, A_DOWN]
    assert run_polls(down_up_down, "box-a", required=3) == ["box-a"] * 5
    assert run_polls([*down_up_down, A_DOWN], "box-a", required=3) == ["box-a"] * 5 + ["box-b"]


def test_a_box_down_for_two_polls_moves_once_and_does_not_come_back() -> None:
    assert run_polls([A_DOWN, A_DOWN, UP, A_DOWN, UP, UP], "box-a") == [
        "box-a",
        "box-b",
        "box-b",
        "box-b",
        "box-b",
        "box-b",
    ]


def test_both_boxes_flapping_in_turn_does_not_ping_pong() -> None:
    assert run_polls([A_DOWN, A_DOWN, B_DOWN, A_DOWN, B_DOWN, A_DOWN], "box-a") == [
        "box-a",
        "box-b",
        "box-b",
        "box-b",
        "box-b",
        "box-b",
    ]


def test_a_rolling_demux_moves_the_ip_on_the_first_poll() -> None:
    # The demux's preStop drain is the time there is: a terminating pod never comes back, so waiting
    # for a second poll only shortens the window (config/models.py DEMUX_DRAIN_SECONDS).
    rolling = ([node("a"), node("b")], [demux("a", terminating=True), demux("b")])
    assert run_polls([rolling], "box-a", required=3) == ["box-b"]


def test_a_not_ready_box_still_needs_its_confirming_polls() -> None:
    assert run_polls([A_DOWN], "box-a", required=2) == ["box-a"]


def test_confirmation_restarts_after_a_decision_that_is_no_move() -> None:
    confirmer = MoveConfirmer(2)
    to_b = Decision(Action.MOVE, "box-b", "b", "")
    keep = Decision(Action.KEEP, "box-a", "a", "")
    stay = Decision(Action.STAY, None, None, "")
    assert [confirmer.confirm(d) for d in (to_b, keep, to_b, stay, to_b, to_b)] == [
        False,
        False,
        False,
        False,
        False,
        True,
    ]


def test_confirmation_restarts_when_the_target_changes() -> None:
    confirmer = MoveConfirmer(2)
    to_b = Decision(Action.MOVE, "box-b", "b", "")
    to_c = Decision(Action.MOVE, "box-c", "c", "")
    assert [confirmer.confirm(d) for d in (to_b, to_c, to_c)] == [False, False, True]


def test_required_polls_must_be_positive() -> None:
    with pytest.raises(ValueError, match=re.escape("required consecutive polls must be at least 1, got 0")):
        MoveConfirmer(0)


@pytest.mark.parametrize(
    ("provider_id", "box"),
    [
        ("ovh://bhs/ns1234567.ip-51-79-1.net", "ns1234567.ip-51-79-1.net"),
        ("dedibox://fr-par-2/104233", "fr-par-2/104233"),
        ("hrobot://2411378", "2411378"),
    ],
)
def test_box_id_from_provider_id(provider_id: str, box: str) -> None:
    assert box_id_from_provider_id(provider_id) == box


@pytest.mark.parametrize(
    ("provider_id", "message"),
    [
        (
            "hcloud://123",
            "providerID 'hcloud://123' has scheme 'hcloud'; expected ovh://, dedibox://, hrobot://, "
            "scaleway:// or applesilicon://",
        ),
        ("ovh://bhs", "providerID 'ovh://bhs' is not a well-formed ovh:// id"),
        ("dedibox://fr-par-2/abc", "providerID 'dedibox://fr-par-2/abc' is not a well-formed dedibox:// id"),
        ("hrobot://12/34", "providerID 'hrobot://12/34' is not a well-formed hrobot:// id"),
        (
            "",
            "providerID '' has scheme ''; expected ovh://, dedibox://, hrobot://, scaleway:// or applesilicon://",
        ),
        (
            "scaleway://fr-par-2/e1",
            "providerID 'scaleway://fr-par-2/e1' is not a well-formed scaleway:// id",
        ),
    ],
)
def test_bad_provider_ids_are_named(provider_id: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        box_id_from_provider_id(provider_id)
