"""Where a region's failover IP should point, from what the cluster shows (pure).

Eligible box: its Node is Ready, not terminating (no deletionTimestamp), not cordoned,
has a vendor box id in its providerID, and runs a Ready, non-terminating peer-demux pod.
Cordoned counts as ineligible: cordon is the first step of releasing or draining a box,
so the IP should leave before the demux does.
Placement is providers.vendor.failover_placement, the one rule the deploy-time FailoverIP
provider applies too: keep the current box while it is eligible, else the eligible node with
the lexically lowest name; with no eligible box the IP stays where it is (never moved to
nothing) and the reason is alert-worthy.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum

from providers.vendor import failover_placement

__all__ = [
    "Action",
    "Decision",
    "MoveConfirmer",
    "NodeView",
    "PodView",
    "box_id_from_provider_id",
    "decide",
    "ineligibility",
]

_PROVIDER_ID = {
    # ovh://<dc>/<service name>: the OVH move target is the service name.
    "ovh": re.compile(r"^ovh://[a-z0-9-]+/(?P<box>[A-Za-z0-9.-]+)$"),
    # dedibox://<zone>/<server id>: the mover needs both to find the server.
    "dedibox": re.compile(r"^dedibox://(?P<box>[a-z0-9-]+/[0-9]+)$"),
    # hrobot://<server number>
    "hrobot": re.compile(r"^hrobot://(?P<box>[0-9]+)$"),
    # scaleway://<zone>/<server uuid> (Elastic Metal), applesilicon://<zone>/<server uuid>: box ids
    # of vendors that route no failover IP, read back all the same so a Node of theirs is named.
    "scaleway": re.compile(r"^scaleway://(?P<box>[a-z]{2}-[a-z]{3}-[1-9]/[0-9a-f-]{36})$"),
    "applesilicon": re.compile(r"^applesilicon://(?P<box>[a-z]{2}-[a-z]{3}-[1-9]/[0-9a-f-]{36})$"),
}


def box_id_from_provider_id(provider_id: str) -> str:
    """The vendor box id a Node's providerID names (what the vendor failover API takes)."""
    scheme = provider_id.partition("://")[0]
    pattern = _PROVIDER_ID.get(scheme)
    if pattern is None:
        raise ValueError(
            f"providerID '{provider_id}' has scheme '{scheme}'; expected ovh://, dedibox://, hrobot://, "
            "scaleway:// or applesilicon://"
        )
    m = pattern.match(provider_id)
    if m is None:
        raise ValueError(f"providerID '{provider_id}' is not a well-formed {scheme}:// id")
    return m.group("box")


@dataclass(frozen=True)
class NodeView:
    name: str
    box_id: str | None  # None when the providerID is missing or foreign
    ready: bool
    terminating: bool = False
    unschedulable: bool = False


@dataclass(frozen=True)
class PodView:
    name: str
    node_name: str | None
    ready: bool
    terminating: bool = False


class Action(StrEnum):
    KEEP = "keep"  # the IP is already on an eligible box
    MOVE = "move"  # route the IP to `target`
    STAY = "stay"  # no eligible box: leave the IP where it is and alert


@dataclass(frozen=True)
class Decision:
    action: Action
    target: str | None  # box id the IP should be on; None for STAY
    node: str | None
    reason: str
    # The current box is being drained on purpose (its demux pod terminating, the node cordoned or
    # deleted): that never flaps back, so the move needs no confirming poll and must beat the
    # demux's preStop wait (components/peer_demux.py).
    drain: bool = False


def ineligibility(node: NodeView, demux_pods: list[PodView]) -> str | None:
    """Why `node` may not carry the IP, or None when it may."""
    if not node.ready:
        return "NotReady"
    if node.terminating:
        return "terminating"
    if node.unschedulable:
        return "cordoned"
    if node.box_id is None:
        return "no vendor box id in providerID"
    if not any(p.node_name == node.name and p.ready and not p.terminating for p in demux_pods):
        return "no Ready peer-demux pod"
    return None


def decide(
    current: str | None,
    nodes: list[NodeView],
    demux_pods: list[PodView],
    avoid: Collection[str] = (),
) -> Decision:
    """`current` is the box id the vendor routes the IP to now (None: unrouted). `avoid`: boxes the
    vendor refused the last moves to (an OVH box that is no allowed destination, say); another eligible
    box is chosen before them, and one of them only when no other is eligible."""
    reasons = {n.name: ineligibility(n, demux_pods) for n in nodes}
    # Eligible box id -> its node's name (the placement order). Highest name first, so that if two
    # nodes ever named one box, the lower name is the one kept.
    eligible = {
        n.box_id: n.name
        for n in sorted(nodes, key=lambda n: n.name, reverse=True)
        if reasons[n.name] is None and n.box_id is not None
    }
    preferred = {box: name for box, name in eligible.items() if box not in avoid or box == current}
    target = failover_placement(current, preferred or eligible)
    if target is None:
        why = ", ".join(f"{n}: {r}" for n, r in sorted(reasons.items())) or "pool has no nodes"
        return Decision(Action.STAY, None, None, f"no eligible box in pool ({why}); IP left on {current}")
    node = eligible[target]
    if target == current:
        return Decision(Action.KEEP, current, node, f"current box {current} ({node}) is eligible")
    was = "unrouted" if current is None else f"current box {current} is not eligible"
    drain = any(n.box_id == current and _draining(n, demux_pods) for n in nodes)
    skipped = sorted(box for box in eligible if box not in preferred) if preferred else []
    why = f"{was}; lowest eligible node is {node}"
    if skipped:
        why = (
            f"{was}; lowest eligible node whose box refused no recent move is {node} "
            f"(skipped {', '.join(skipped)})"
        )
    return Decision(Action.MOVE, target, node, why, drain=drain)


def _draining(node: NodeView, demux_pods: list[PodView]) -> bool:
    return (
        node.terminating
        or node.unschedulable
        or any(p.node_name == node.name and p.terminating for p in demux_pods)
    )


class MoveConfirmer:
    """Hysteresis: a move happens only after the same move is decided `required` polls in a row.

    A box whose Ready condition flaps yields move/keep/move/...; the streak never reaches
    `required`, so the IP does not ping-pong. Once moved, "keep the current box while
    eligible" stops it from moving back. It must be given every poll's decision, KEEP and STAY
    too: those are what end a streak (watcher/loop.py).
    """

    def __init__(self, required: int = 2) -> None:
        if required < 1:
            raise ValueError(f"required consecutive polls must be at least 1, got {required}")
        self.required = required
        self._target: str | None = None
        self._streak = 0

    def confirm(self, decision: Decision) -> bool:
        if decision.action is not Action.MOVE:
            self._target, self._streak = None, 0
            return False
        if decision.drain:
            self._target, self._streak = decision.target, self.required
            return True
        if decision.target == self._target:
            self._streak += 1
        else:
            self._target, self._streak = decision.target, 1
        return self._streak >= self.required

    def reset(self) -> None:
        self._target, self._streak = None, 0
