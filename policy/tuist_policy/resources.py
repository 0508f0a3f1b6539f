"""Reading the resources the engine hands a policy: stack, kind, labels, pod specs, images.

Properties arrive as the resource's inputs, wrapped so that touching a value the preview cannot know
yet raises `UnknownValueError`. Every reader here turns that into `UNKNOWN`, so one unknown field
(a DNS target that waits on a machine's IP) skips that check instead of aborting the whole policy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pulumi_policy.proxy import UnknownValueError

T = TypeVar("T")

# report(message) or report(message, urn): pulumi_policy's ReportViolation, whose urn is optional.
Report = Callable[..., None]


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()

# Type tokens of the program's Python dynamic resources: `pulumi-python:dynamic/<module>:<Name>`.
# Policies match the module prefix, so a new machine kind (e.g. a MachineClaim beside AdoptedMachine)
# is covered as soon as it lives in the same module.
MACHINE_TYPE_PREFIX = "pulumi-python:dynamic/machine:"
# One per fleet slot: the box's join. Counting machines counts these (a slot also has a claim and labels).
ADOPTED_MACHINE_TYPE = MACHINE_TYPE_PREFIX + "AdoptedMachine"
# Deleting either releases or unjoins a box; NodeLabels only edits a Node's labels and taints.
MACHINE_CLAIM_TYPE = MACHINE_TYPE_PREFIX + "MachineClaim"
BOX_HOLDING_TYPES = (MACHINE_CLAIM_TYPE, ADOPTED_MACHINE_TYPE)
FAILOVER_TYPE_PREFIX = "pulumi-python:dynamic/failover:"

# Kinds whose pods come from spec.template (a CronJob's from its job template's; a Pod is one, a
# PodTemplate holds one at .template).
WORKLOAD_KINDS = frozenset(
    {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "ReplicationController", "Job", "CronJob", "Pod"}
)
RUNNER_POOL_GROUP = "tuist.dev"


def known(read: Callable[[], T]) -> T | Any:
    """read(), or UNKNOWN when the preview does not know the value yet."""
    try:
        return read()
    except UnknownValueError:
        return UNKNOWN


def get(value: Any, *path: str | int) -> Any:
    """value[path[0]][path[1]]...; None where a step is missing, UNKNOWN where it is not known yet."""
    try:
        for step in path:
            if value is None or value is UNKNOWN:
                return value
            if isinstance(step, int):
                if not is_list(value) or step >= len(value):
                    return None
                value = value[step]
            else:
                if not isinstance(value, Mapping):
                    return None
                value = value.get(step)
        return value
    except UnknownValueError:
        return UNKNOWN


def is_list(value: Any) -> bool:
    # The engine's lists arrive as read-only Sequence proxies, not `list`.
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def items(value: Any) -> list[Any]:
    """The elements of a known list (each UNKNOWN where the preview does not know it); [] otherwise."""
    if not is_list(value):
        return []
    return [known(lambda i=i: value[i]) for i in range(len(value))]  # type: ignore[misc]


def stack_of(urn: str) -> str:
    """The stack of a URN: `urn:pulumi:<stack>::<project>::<type>::<name>`."""
    head = urn.split("::", 1)[0]
    return head.rsplit(":", 1)[-1]


def is_kubernetes(resource_type: str) -> bool:
    return resource_type.startswith("kubernetes:")


def is_runner_pool(resource_type: str) -> bool:
    """A RunnerPool of any tuist.dev version (`kubernetes:tuist.dev/v1alpha1:RunnerPool`), or its patch:
    a pool the CRD serves at another version is still a pool."""
    group_version = resource_type.split(":")[1] if resource_type.count(":") == 2 else ""
    return (
        is_kubernetes(resource_type)
        and group_version.split("/")[0] == RUNNER_POOL_GROUP
        and kind_of(resource_type) == "RunnerPool"
    )


def kind_of(resource_type: str) -> str:
    """`kubernetes:apps/v1:Deployment` -> `Deployment` (custom resources too). A server-side-apply
    patch resource (`DeploymentPatch`) is the same kind to every policy: it writes the same fields."""
    kind = resource_type.rsplit(":", 1)[-1]
    if resource_type.startswith("kubernetes:") and kind.endswith("Patch") and len(kind) > len("Patch"):
        return kind.removesuffix("Patch")
    return kind


@dataclass(frozen=True)
class Object:
    """A Kubernetes object as a policy sees it: its kind, name, labels and raw props."""

    kind: str
    name: str
    labels: Mapping[str, Any]
    props: Any

    @property
    def title(self) -> str:
        return f"{self.kind} {self.name}"


def kubernetes_object(resource_type: str, props: Any) -> Object | None:
    if not is_kubernetes(resource_type):
        return None
    labels = get(props, "metadata", "labels")
    name = get(props, "metadata", "name")
    return Object(
        kind=kind_of(resource_type),
        name=name if isinstance(name, str) else "<unnamed>",
        labels=labels if isinstance(labels, Mapping) else {},
        props=props,
    )


def pod_spec(obj: Object) -> Any:
    """The pod spec of a workload (CronJob: its job template's; PodTemplate: its template's), None for
    other kinds."""
    if obj.kind == "Pod":
        return get(obj.props, "spec")
    if obj.kind == "PodTemplate":
        return get(obj.props, "template", "spec")
    if obj.kind == "CronJob":
        return get(obj.props, "spec", "jobTemplate", "spec", "template", "spec")
    if obj.kind in WORKLOAD_KINDS:
        return get(obj.props, "spec", "template", "spec")
    return None


def containers(spec: Any) -> Iterator[Any]:
    """Every container and init container of a pod spec whose list is known."""
    for key in ("initContainers", "containers"):
        yield from items(get(spec, key))


def container_args(container: Any) -> list[str]:
    words: list[str] = []
    for key in ("command", "args"):
        words.extend(w for w in items(get(container, key)) if isinstance(w, str))
    return words
