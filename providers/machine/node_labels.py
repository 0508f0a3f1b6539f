"""NodeLabels: a machine's Node labels, taints and extended resources after registration, as a
resource of their own.

The kubelet registers the Node with the fleet's labels and taints (AdoptedMachine's join: nothing may
schedule onto a box before its taints exist). Every later edit flows through this resource, so a label
edit previews as a label edit and no machine output becomes unknown.

Only what the program set is touched: a label this resource set and the fleet no longer has is
removed; labels and taints others put on the Node (controllers, operators) stay. The Node's taints
are one list in the API (no merge key), so they are read, edited and written back with the Node's
resourceVersion as a precondition: a controller's taint (not-ready, unreachable) added in between
makes the write fail with 409 and the edit is done again on the fresh Node.

The Node's extended resources (`capacity`: the fleet's egress budget, which every Kura pod requests
its floor of) exist only in the Node's status: no kubelet flag sets them, so they are patched there
once the Node is registered, and again on every update. The kubelet keeps an extended resource it
does not manage across its status updates and copies it to allocatable. A Node registered again (its
kubelet started on an empty state directory, or the Node was deleted and the machine joined again)
has none of them and only the labels and taints it registered with, while this resource's inputs did
not change: its `read` compares the Node with what it applied, so a refresh shows the update and the
next `pulumi up` applies the sets again.

Without a cluster (the dev stack) the resource only records the sets. delete leaves the Node alone:
the machine's delete deletes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi.dynamic as dyn
from pulumi.dynamic.dynamic import PROVIDER_KEY

from providers.dynamic_resource import DynamicResource
from providers.machine import engine_link
from providers.machine.errors import MachineError
from providers.machine.provider import _Stateless
from providers.machine.spec import TAINT_EFFECTS, Change, InputRule, table_diff, unknown

NODE_LABELS_INPUTS: dict[str, InputRule] = {
    "node_name": InputRule(Change.REPLACE, "another Node"),
    "labels": InputRule(Change.REJOIN, "the Node's labels are edited in place"),
    "taints": InputRule(Change.REJOIN, "the Node's taints are edited in place"),
    "capacity": InputRule(Change.REJOIN, "the Node's extended resources are edited in place"),
    "api_server": InputRule(Change.RECORD, "where the Node is"),
    "resource_name": InputRule(Change.IGNORE, "names the resource in progress lines"),
    "urn": InputRule(Change.IGNORE, "where progress lines attach"),
}
ATTEMPTS = 5


class NodeLabelsError(MachineError):
    """The Node could not be relabelled; the message names it."""


def problems(props: Mapping[str, Any]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if not isinstance(props.get("node_name"), str) and not unknown(props.get("node_name")):
        found.append(("node_name", "must be a string"))
    labels = props.get("labels")
    if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
        found.append(("labels", "must be a mapping of label key to string value"))
    taints = props.get("taints")
    if not isinstance(taints, list) or not all(
        isinstance(t, Mapping) and t.get("effect") in TAINT_EFFECTS and isinstance(t.get("key"), str)
        for t in taints
    ):
        found.append(
            ("taints", f"must be a list of {{key, value, effect}} (effect one of {', '.join(TAINT_EFFECTS)})")
        )
    capacity = props.get("capacity", {})
    if not isinstance(capacity, Mapping) or not all(
        isinstance(k, str) and "/" in k and isinstance(v, str) and v.isdigit() for k, v in capacity.items()
    ):
        found.append(("capacity", "must be a mapping of extended resource name (domain/name) to a count"))
    return found


def advertise(api: Any, node: str, *, old: Mapping[str, str], new: Mapping[str, str]) -> bool:
    """Set the Node's extended resources to `new` (those of `old` it no longer has are removed);
    False when there is no such Node (yet). Capacity and allocatable both: the scheduler reads
    allocatable, which the kubelet otherwise fills in only at its next status update."""
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    if not old and not new:
        return True
    wanted: dict[str, str | None] = {key: None for key in old if key not in new}
    wanted.update(new)
    try:
        k8s.CoreV1Api(api).patch_node_status(node, {"status": {"capacity": wanted, "allocatable": wanted}})
    except ApiException as error:
        if error.status == 404:
            return False
        raise NodeLabelsError(f"patch the status of Node {node} failed (HTTP {error.status})") from None
    return True


def drift(
    api: Any,
    node: str,
    *,
    labels: Mapping[str, str],
    taints: Sequence[Mapping[str, Any]],
    capacity: Mapping[str, str],
) -> list[str] | None:
    """What of these sets the Node does not carry (a label, a taint, an extended resource in its
    capacity); None when there is no such Node. A Node registered again (its kubelet started on an
    empty state directory, or the Node was deleted and the machine joined again) carries the labels and
    taints it registered with, and none of the extended resources."""
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException
    from kubernetes.utils import parse_quantity

    try:
        current = k8s.CoreV1Api(api).read_node(node)
    except ApiException as error:
        if error.status == 404:
            return None
        raise NodeLabelsError(f"read Node {node} failed (HTTP {error.status})") from None
    has_labels = current.metadata.labels or {}
    has_taints = {(t.key, t.effect, t.value or "") for t in current.spec.taints or []}
    has_capacity = (current.status.capacity if current.status else None) or {}
    missing = [f"label {key}={value}" for key, value in labels.items() if has_labels.get(key) != value]
    missing += [
        f"taint {t['key']}:{t['effect']}"
        for t in taints
        if (t["key"], t["effect"], t.get("value") or "") not in has_taints
    ]
    missing += [
        f"extended resource {key}={count}"
        for key, count in capacity.items()
        if key not in has_capacity or parse_quantity(has_capacity[key]) != parse_quantity(count)
    ]
    return missing


def taint_dict(taint: Mapping[str, Any]) -> dict[str, Any]:
    body = {"key": taint["key"], "effect": taint["effect"]}
    if taint.get("value"):
        body["value"] = taint["value"]
    return body


def relabel(
    api: Any,
    node: str,
    *,
    old_labels: Mapping[str, str],
    new_labels: Mapping[str, str],
    old_taints: Sequence[Mapping[str, Any]],
    new_taints: Sequence[Mapping[str, Any]],
) -> bool:
    """Bring the Node from the old sets to the new ones; False when there is no such Node (yet)."""
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    core = k8s.CoreV1Api(api)
    managed = {(t["key"], t["effect"]) for t in [*old_taints, *new_taints]}
    for _ in range(ATTEMPTS):
        try:
            current = core.read_node(node)
        except ApiException as error:
            if error.status == 404:
                return False
            raise NodeLabelsError(f"read Node {node} failed (HTTP {error.status})") from None
        labels: dict[str, str | None] = {key: None for key in old_labels if key not in new_labels}
        labels.update(new_labels)
        kept = [
            api.sanitize_for_serialization(t)
            for t in (current.spec.taints or [])
            if (t.key, t.effect) not in managed
        ]
        patch = {
            "metadata": {"labels": labels, "resourceVersion": current.metadata.resource_version},
            "spec": {"taints": kept + [taint_dict(t) for t in new_taints]},
        }
        try:
            core.patch_node(node, patch)
            return True
        except ApiException as error:
            if error.status == 404:
                return False
            if error.status != 409:  # 409: the Node changed since it was read; edit it again
                raise NodeLabelsError(f"patch Node {node} failed (HTTP {error.status})") from None
    raise NodeLabelsError(f"Node {node} kept changing under {ATTEMPTS} relabel attempts")


class NodeLabelsProvider(_Stateless):
    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        return dyn.CheckResult(news, [dyn.CheckFailure(k, r) for k, r in problems(news)])

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        found = table_diff(NODE_LABELS_INPUTS, olds, news)
        replaces = found[Change.REPLACE]
        changed = bool(replaces or found[Change.REJOIN] or found[Change.RECORD])
        # A Node that was not registered when its extended resources were due gets them on the next up,
        # and so does one a refresh found without some of its sets (registered again: `read`).
        unapplied = olds.get("applied") is False and bool(olds.get("drift") or news.get("capacity"))
        changed = changed or (bool(news.get("api_server")) and unapplied)
        return dyn.DiffResult(changes=changed, replaces=replaces, delete_before_replace=False)

    def _apply(
        self,
        props: dict[str, Any],
        old_labels: Mapping[str, str],
        old_taints: Sequence[Any],
        old_capacity: Mapping[str, str],
    ) -> bool:
        if not props.get("api_server"):
            return False
        api, node = self._config().kube_api(), str(props["node_name"])
        applied = relabel(
            api,
            node,
            old_labels=old_labels,
            new_labels=props["labels"],
            old_taints=old_taints,
            new_taints=props["taints"],
        ) and advertise(api, node, old=old_capacity, new=props.get("capacity") or {})
        engine_link.progress(
            f"{props.get('resource_name')}: Node {props['node_name']} "
            + (
                "relabelled"
                if applied
                else "not registered yet: it registers with these labels; the next up advertises its "
                "extended resources"
            ),
            props.get("urn"),
        )
        return applied

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        applied = self._apply(props, {}, [], {})
        outs = {k: v for k, v in props.items() if k != PROVIDER_KEY}
        return dyn.CreateResult(id_=str(props["node_name"]), outs={**outs, "applied": applied})

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        applied = self._apply(
            news, olds.get("labels") or {}, olds.get("taints") or [], olds.get("capacity") or {}
        )
        outs = {k: v for k, v in news.items() if k != PROVIDER_KEY}
        return dyn.UpdateResult(outs={**outs, "applied": applied})

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        """What is in state, unless the Node lacks part of it: then `applied` is False and the next `pulumi
        up` applies the sets again (diff). A Node that is not registered is the machine's to find (its
        read drops it; its create joins it again): an extended resource is still due once it registers."""
        outs = {k: v for k, v in props.items() if k not in (PROVIDER_KEY, "drift")}
        if not props.get("api_server"):
            return dyn.ReadResult(id_=id_, outs=outs)
        node = str(props["node_name"])
        missing = drift(
            self._config().kube_api(),
            node,
            labels=props.get("labels") or {},
            taints=props.get("taints") or [],
            capacity=props.get("capacity") or {},
        )
        if missing is None:
            return dyn.ReadResult(id_=id_, outs={**outs, "applied": False})
        if missing:
            engine_link.progress(
                f"{props.get('resource_name')}: Node {node} lacks {', '.join(missing)} (registered again?): "
                "`pulumi up` applies its labels, taints and extended resources again",
                props.get("urn"),
                ephemeral=False,
                warning=True,
            )
            return dyn.ReadResult(id_=id_, outs={**outs, "applied": False, "drift": True})
        return dyn.ReadResult(id_=id_, outs={**outs, "applied": True})

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None  # the Node goes with the machine's delete


class NodeLabels(DynamicResource, module="machine", name="NodeLabels"):
    """The labels, taints and extended resources of one machine's Node after registration."""

    applied: pulumi.Output[bool]

    def __init__(
        self, name: str, props: Mapping[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(NodeLabelsProvider(), name, {"applied": None, **props, "resource_name": name}, opts)
