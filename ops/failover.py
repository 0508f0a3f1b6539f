"""Where each region's failover IP is routed, which boxes of its fleet may carry it and why not, and a
manual move through the program's own mover.

Eligibility is the watcher's (watcher/decision.py `ineligibility`: Node Ready, not terminating, not
cordoned, a vendor box id in its providerID, a Ready peer-demux pod of the region on it), read from
the stack's cluster with the watcher's own listers. Without a reachable cluster it falls back to the
deploy-time rule (providers/failover.py: a box the fleet adopted, per the stack's state) and says so;
a move then needs --force when the stack has a cluster (whether the box may carry the IP is unchecked).
The move is `providers.failover.route` with the one target as the only candidate: the code path the
FailoverIP resource takes at deploy time, over the same vendor client the watcher's mover builds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from config.models import FailoverIP, Region
from ops.stack import KUBE_TIMEOUT, OpsError, Stack
from providers.errors import VendorError
from providers.vendor import Vendor, failover_placement
from watcher.decision import ineligibility
from watcher.loop import WatcherSettings, kube_listers


@dataclass
class Candidate:
    box: str
    node: str | None
    eligible: bool
    why_not: str | None


@dataclass
class RegionRoute:
    region: str
    ip_name: str
    address: str | None
    vendor: str
    fleet: str
    routed_to: str | None = None
    placement: str | None = None  # where the placement rule puts it now (None: no eligible box)
    source: str = ""  # "cluster" or "state (cluster: <status>)"
    candidates: list[Candidate] = field(default_factory=list)
    problem: str | None = None
    # The stack's cluster as this read found it ("ok", "none", "unreachable: <why>"); not in the JSON.
    cluster: str = field(default="", repr=False)

    def as_json(self) -> dict[str, Any]:
        doc = asdict(self)
        del doc["cluster"]
        return doc


def _regions(stack: Stack) -> list[tuple[Region, FailoverIP]]:
    pairs = []
    for region in stack.cfg.regions:
        if region.failover_ip:
            pairs.append((region, stack.cfg.failover_ip(region.failover_ip)))
    return pairs


def status(stack: Stack, only: str | None = None) -> list[RegionRoute]:
    pairs = _regions(stack)
    if only is not None:
        pairs = [(r, ip) for r, ip in pairs if r.id == only]
        if not pairs:
            known = ", ".join(r.id for r, _ in _regions(stack)) or "none"
            raise OpsError(f"stack {stack.name} has no region {only!r} with a failover IP (regions: {known})")
    routes = []
    api, kube_status = _kube(stack)
    for region, ip in pairs:
        fleet = stack.fleet(ip.fleet)
        out = RegionRoute(region.id, ip.name, ip.address, ip.vendor.value, fleet.name)
        routes.append(out)
        if ip.address is None:
            out.problem = "parked: no address ordered yet"
            continue
        try:
            out.routed_to = stack.client(ip.vendor).failover_target(ip.address)
        except VendorError as error:
            out.problem = f"reading the route failed: {stack.scrub(str(error))}"
        eligible: dict[str, str] = {}
        if api is not None:
            out.source = "cluster"
            settings = WatcherSettings(
                ip.address, region.id, fleet.node_pool, namespace=stack.cfg.kura.namespace
            )
            from kubernetes import client as k8s

            core = k8s.CoreV1Api(api)
            # Shorter than the watcher's own: an unreachable cluster is said, not waited on.
            list_nodes, list_pods = kube_listers(core, settings, (KUBE_TIMEOUT, KUBE_TIMEOUT))
            try:
                nodes, pods = list_nodes(), list_pods()
            except Exception as error:
                api, kube_status = None, f"unreachable: {type(error).__name__}"
            else:
                for node in sorted(nodes, key=lambda n: n.name):
                    why = ineligibility(node, pods)
                    out.candidates.append(Candidate(node.box_id or "?", node.name, why is None, why))
                    if why is None and node.box_id:
                        eligible[node.box_id] = node.name
        out.cluster = kube_status
        if api is None:
            out.source = f"state (cluster {kube_status}: eligibility is the deploy-time rule)"
            adopted = sorted(s.box_id for s in stack.slots() if s.fleet == fleet.name)
            for box in adopted:
                out.candidates.append(Candidate(box, None, True, None))
                eligible[box] = box
        if out.problem is None:
            out.placement = failover_placement(out.routed_to, eligible)
    return routes


def _kube(stack: Stack) -> tuple[Any | None, str]:
    try:
        api = stack.kube_api()
    except Exception as error:
        return None, f"unreachable: {stack.scrub(type(error).__name__)}"
    if api is None and stack.cfg.cluster.api_server:
        return None, "unreachable: no kubeconfig in the stack's secrets"
    return (api, "ok") if api is not None else (None, "none")


@dataclass
class MovePlan:
    route: RegionRoute
    target: str
    forced_past: str | None  # why the target is not eligible, when --force moves it anyway
    # Why eligibility was not checked (the stack's cluster did not answer), when --force moves it anyway.
    unchecked: str | None = None


def plan_move(stack: Stack, region: str, box: str, *, force: bool) -> MovePlan:
    (current,) = status(stack, region)
    if current.problem:
        raise OpsError(f"region {region}: {current.problem}")
    if current.vendor == Vendor.DEDIBOX.value and "/" not in box:
        raise OpsError(f"{box}: a Dedibox box id is <zone>/<server id>")
    known = {c.box: c for c in current.candidates}
    candidate = known.get(box)
    if candidate is None:
        boxes = ", ".join(sorted(known)) or "none"
        raise OpsError(
            f"refusing to move {current.address} to {box}: it is not a box of fleet {current.fleet} "
            f"(its boxes: {boxes})"
        )
    # The deploy-time rule (a box the fleet adopted) says nothing of a Node that is NotReady, cordoned or
    # has no Ready peer-demux pod: a stack with a cluster moves on the watcher's rule, or with --force.
    unchecked = None
    if stack.cfg.cluster.api_server and current.source != "cluster":
        unchecked = f"the cluster did not answer ({current.cluster})"
        if not force:
            raise OpsError(
                f"refusing to move {current.address} to {box}: {unchecked}, so whether {box} may carry it "
                f"(Node Ready, not cordoned, a Ready peer-demux pod of region {current.region}) could not "
                "be checked; rerun once the cluster answers, or --force moves it anyway"
            )
    if not candidate.eligible and not force:
        raise OpsError(
            f"refusing to move {current.address} to {box}: not eligible ({candidate.why_not}); "
            "--force moves it anyway"
        )
    return MovePlan(current, box, None if candidate.eligible else candidate.why_not, unchecked)


def run_move(stack: Stack, plan: MovePlan) -> str:
    # The program's own mover; its module also holds the dynamic provider, hence the Pulumi SDK,
    # which only a move needs (every other command starts without it).
    from providers.failover import FailoverError, FailoverSpec, route

    r = plan.route
    assert r.address is not None
    spec = FailoverSpec(Vendor(r.vendor), r.address, r.region, r.fleet, (plan.target,))
    try:
        return route(stack.client(Vendor(r.vendor)), spec)
    except FailoverError as error:
        raise OpsError(stack.scrub(str(error))) from None
