"""The failover placement rule and its hysteresis, table-driven."""

from __future__ import annotations

import re

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


def run_polls(
    observations: list[tuple[list[NodeView], list[PodView]]], current: str, required: int = 2
) -> list[str]:
    """Feed polls through decide + MoveConfirmer the way the loop does; return the route after each."""
    confirmer = MoveConfirmer(required)
    route, history = current, []
    for nodes, pods in observations:
        d = decide(route, nodes, pods)
        if confirmer.confirm(d) and d.target is not None:
            route = d.target
            confirmer.reset()
        history.append(route)
    return history


UP = ([node("a"), node("b")], [demux("a"), demux("b")])
A_DOWN = ([node("a", ready=False), node("b")], [demux("a"), demux("b")])
B_DOWN = ([node("a"), node("b", ready=False)], [demux("a"), demux("b")])


def test_flapping_current_box_never_moves() -> None:
    assert run_polls([A_DOWN, UP, A_DOWN, UP, A_DOWN, UP], "box-a") == ["box-a"] * 6


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
