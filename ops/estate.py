"""The estate as the operator sees it: every box of the stack's vendor accounts, what it is (free,
claimed, releasing, no OS, foreign, unmarked), who holds it, and its Node.

Read-only: nothing here writes to a vendor or the cluster.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from config.models import Fleet
from ops.stack import Holder, OpsError, Stack
from providers.constants import ENVIRONMENTS
from providers.errors import NotFoundError, VendorError, VendorInputError
from providers.vendor import Box, Vendor
from watcher.decision import box_id_from_provider_id

_SCHEME_VENDOR = {
    "ovh": Vendor.OVH,
    "dedibox": Vendor.DEDIBOX,
    "hrobot": Vendor.ROBOT,
    "scaleway": Vendor.SCALEWAY_EM,
    "applesilicon": Vendor.APPLESILICON,
}


class BoxState(enum.StrEnum):
    FREE = "free"  # carries a fleet marker of this stack, unclaimed, has an OS (or is Robot)
    CLAIMED = "claimed"
    RELEASING = "releasing"
    NO_OS = "no OS"
    FOREIGN = "foreign"  # carries another environment's marker
    UNMARKED = "unmarked"  # in the account, no fleet's marker


@dataclass(frozen=True)
class BoxRef:
    vendor: Vendor
    box_id: str

    def __str__(self) -> str:
        return f"{self.vendor.value}:{self.box_id}"


def box_ref(vendor: Vendor, box_id: str) -> BoxRef:
    """The box as the CLI names it. An OVH id is a service name, a DNS name, which OVH writes in lower
    case: `ovh:NS1007.IP-...` as typed would reach the vendor client as it is, which keeps it as the
    box's id (`Box.id`), and the Node guard would not find the Node (`ovh://<dc>/ns1007.ip-...`)."""
    return BoxRef(vendor, box_id.lower() if vendor is Vendor.OVH else box_id)


def parse_box(stack: Stack, text: str, fleet: Fleet | None = None) -> BoxRef:
    """`[<vendor>:]<box id>`; without a vendor, the fleet's, else the one vendor of the stack whose id
    shape it has (OVH service names, Dedibox <zone>/<id>, Robot server numbers). OVH ids are lower-cased
    (box_ref)."""
    vendor_text, sep, box_id = text.partition(":")
    if sep and vendor_text in {v.value for v in Vendor}:
        vendor = Vendor(vendor_text)
        if vendor not in stack.vendors():
            raise OpsError(
                f"{text}: stack {stack.name} has no {vendor.value} account (vendors.{vendor.value})"
            )
        return box_ref(vendor, box_id)
    if fleet is not None:
        return box_ref(fleet.vendor, text)
    shapes = {
        Vendor.OVH: re.compile(r"^[a-z0-9][a-z0-9.-]*\.[a-z]+$", re.IGNORECASE),
        Vendor.DEDIBOX: re.compile(r"^[a-z]{2}-[a-z]{3}-[0-9]/[0-9]+$"),
        Vendor.ROBOT: re.compile(r"^[0-9]+$"),
    }
    matches = [v for v in stack.vendors() if v in shapes and shapes[v].match(text)]
    if len(matches) != 1:
        vendors = ", ".join(v.value for v in stack.vendors())
        raise OpsError(
            f"{text}: cannot tell the vendor from the id; write <vendor>:{text} (one of {vendors})"
        )
    return box_ref(matches[0], text)


def get_box(stack: Stack, ref: BoxRef) -> Box:
    """The box, or one line saying it is not in the account."""
    try:
        return stack.client(ref.vendor).get_box(ref.box_id)
    except NotFoundError:
        raise OpsError(f"{ref}: no such box in stack {stack.name}'s {ref.vendor.value} account") from None
    except VendorInputError as error:
        raise OpsError(f"{ref}: {error}") from None


def marker_of(box: Box, fleets: Iterable[Fleet]) -> Fleet | None:
    """The fleet of `fleets` whose marker the box carries (the longest marker wins a prefix tie)."""
    carried = [f for f in fleets if f.vendor is box.vendor and box.has_marker(f.marker)]
    return max(carried, key=lambda f: len(f.marker)) if carried else None


def foreign_marker(stack: Stack, box: Box) -> str | None:
    """Why the box belongs to another environment, or None: it carries a fleet marker of another
    environment's stack file, or a `tuist-` marker naming another environment."""
    markers = stack.other_environment_markers(box.vendor)
    for marker in sorted(markers, key=len, reverse=True):
        if marker and box.has_marker(marker):
            return f"carries stack {markers[marker]}'s marker {marker!r}"
    words = set(re.split(r"[-_.,]", box.marker_field.lower()))
    if box.marker_field.lower().startswith("tuist-") or any(t.startswith("tuist-") for t in box.tags):
        for env in ENVIRONMENTS:
            if env != stack.cfg.environment.value and env in words:
                return f"its marker {box.marker_field!r} names the {env} environment"
    return None


def classify(stack: Stack, box: Box) -> BoxState:
    if box.claim is not None:
        return BoxState.RELEASING if box.claim.releasing else BoxState.CLAIMED
    if foreign_marker(stack, box):
        return BoxState.FOREIGN
    if marker_of(box, stack.cfg.fleets) is None:
        return BoxState.UNMARKED
    # Robot reports no OS (its boxes are installed on adoption): never "no OS".
    if not box.has_os and box.vendor is not Vendor.ROBOT:
        return BoxState.NO_OS
    return BoxState.FREE


# --- nodes ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeInfo:
    name: str
    ready: bool
    cordoned: bool


class Nodes:
    """The stack's cluster's Nodes by box. `status`: "ok", "no cluster" or "unreachable: <why>".

    Keyed by (vendor, box id in lower case) and looked up with `of`: a box id that reaches here in
    another case than its Node's providerID (an OVH service name typed in capitals) still finds its
    Node; the Node guard (ops/boxes.py refuse_if_node) must never miss one."""

    def __init__(self, stack: Stack) -> None:
        self.by_box: dict[tuple[Vendor, str], NodeInfo] = {}
        self.status = "no cluster"
        self.items: list[Any] = []
        try:
            api = stack.kube_api()
        except Exception as error:  # a kubeconfig that does not parse: the cluster is unknown
            self.status = f"unreachable: {stack.scrub(str(error))}"
            return
        if api is None:
            if stack.cfg.cluster.api_server:
                # A cluster without the secret to read it: whether a box is a Node cannot be told,
                # which the Node guard refuses on; never "no cluster", which it lets through.
                self.status = "unreachable: no kubeconfig in the stack's secrets"
            return
        from kubernetes import client as k8s

        try:
            self.items = k8s.CoreV1Api(api).list_node().items  # bounded: Stack.kube_api
        except Exception as error:
            self.status = f"unreachable: {stack.scrub(type(error).__name__)}"
            return
        self.status = "ok"
        for node in self.items:
            provider_id = node.spec.provider_id if node.spec else None
            vendor = _SCHEME_VENDOR.get(str(provider_id or "").partition("://")[0])
            if vendor is None:
                continue
            try:
                box_id = box_id_from_provider_id(str(provider_id))
            except ValueError:
                continue
            conditions = node.status.conditions if node.status else None
            ready = any(c.type == "Ready" and c.status == "True" for c in conditions or [])
            self.by_box[(vendor, box_id.lower())] = NodeInfo(
                node.metadata.name, ready, bool(node.spec and node.spec.unschedulable)
            )

    def of(self, box: Box) -> NodeInfo | None:
        """The box's Node, by the vendor's own id of the box, whatever its case."""
        return self.by_box.get((box.vendor, box.id.lower()))

    @property
    def known(self) -> bool:
        return self.status == "ok"


# --- inventory ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    box: str
    vendor: str
    datacenter: str
    public_ipv4: str | None
    fleet: str | None
    marker: str
    holder: str | None
    holder_stack: str | None
    holder_resource: str | None
    claim_token: str | None
    state: str
    node: str | None
    node_ready: str  # "yes", "no", "unknown" (cluster unreachable), "-" (no node / no cluster)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def inventory(stack: Stack, vendors: Iterable[Vendor] | None = None) -> tuple[list[Row], Nodes, list[str]]:
    """One row per box of each vendor account of the stack; problems reading a vendor are returned as
    lines (the other vendors still show)."""
    nodes = Nodes(stack)
    rows: list[Row] = []
    problems: list[str] = []
    for vendor in vendors or stack.vendors():
        try:
            boxes = stack.client(vendor).list_boxes()
        except (VendorError, OpsError) as error:  # OpsError: the vendor's secret is not in the config
            problems.append(f"{vendor.value}: listing boxes failed: {stack.scrub(str(error))}")
            continue
        for box in sorted(boxes, key=lambda b: b.id):
            rows.append(row_of(stack, box, nodes))
    return rows, nodes, problems


def row_of(stack: Stack, box: Box, nodes: Nodes) -> Row:
    holder: Holder | None = stack.holder(box.claim.token) if box.claim else None
    fleet = marker_of(box, stack.cfg.fleets)
    node = nodes.of(box)
    if node is not None:
        ready = "yes" if node.ready else "no"
    elif nodes.known or nodes.status == "no cluster":
        ready = "-"
    else:
        ready = "unknown"
    return Row(
        box=box.id,
        vendor=box.vendor.value,
        datacenter=box.datacenter,
        public_ipv4=box.public_ipv4,
        fleet=fleet.name if fleet else None,
        marker=box.marker_field,
        holder=str(holder) if holder else None,
        holder_stack=holder.stack if holder else None,
        holder_resource=holder.resource if holder else None,
        claim_token=box.claim.token if box.claim else None,
        state=classify(stack, box).value,
        node=node.name if node else None,
        node_ready=ready,
    )
