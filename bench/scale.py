"""Stack configs of N times a real stack's size: every fleet, failover IP, region and runner pool
repeated N times under names of their own (copy 1 keeps the original names), so the program
registers N times the resources and every uniqueness rule of config/rules.py still holds.

    grow(read_stack_file("Pulumi.production.yaml"), 30)   # the raw `tuist-infra:*` values, x30
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

GROWN = ("fleets", "failover_ips", "regions", "runner_pools")


def _tag(copy_no: int) -> Callable[[str], str]:
    """`name` for copy 1, `name-kN` after it (a suffix: region ids must not end in another's id)."""
    return (lambda name: name) if copy_no == 1 else (lambda name: f"{name}-k{copy_no}")


def _marker(marker: str, copy_no: int) -> str:
    # Robot markers are name prefixes: another copy's marker must not start with this one, so the copy
    # number goes in after the first word (tuist-bm-production- -> tuist-k2-bm-production-).
    if copy_no == 1:
        return marker
    head, _, rest = marker.partition("-")
    return f"{head}-k{copy_no}-{rest}"


def _host(host: str, copy_no: int) -> str:
    if copy_no == 1:
        return host
    first, _, rest = host.partition(".")
    return f"{first}-k{copy_no}.{rest}"


def _copy(raw: Mapping[str, Any], copy_no: int) -> dict[str, list[dict[str, Any]]]:
    t = _tag(copy_no)
    fleets = []
    for fleet in raw.get("fleets") or []:
        f = copy.deepcopy(dict(fleet))
        f["name"], f["node_pool"] = t(f["name"]), t(f["node_pool"])
        f["marker"] = _marker(f["marker"], copy_no)
        fleets.append(f)
    ips = []
    for ip in raw.get("failover_ips") or []:
        i = copy.deepcopy(dict(ip))
        i["name"], i["fleet"] = t(i["name"]), t(i["fleet"])
        i.pop("address", None)  # parked: one address cannot be routed to two regions
        ips.append(i)
    regions = []
    for region in raw.get("regions") or []:
        r = copy.deepcopy(dict(region))
        for key in ("id", "fleet", "ingress_class"):
            r[key] = t(r[key])
        if r["cluster_id"].startswith(region["id"]):
            # <region id>-<number>: us-east-1 -> us-east-k2-1.
            r["cluster_id"] = r["id"] + r["cluster_id"].removeprefix(region["id"])
        elif copy_no > 1:
            # A private region named <cluster_id>-<what it serves> (scw-fr-par-runners of cluster
            # scw-fr-par): a copy takes the plain form, scw-fr-par-runners-k2-1.
            r["cluster_id"] = f"{r['id']}-1"
        if r.get("failover_ip"):
            r["failover_ip"] = t(r["failover_ip"])
        r["host"] = _host(r["host"], copy_no)
        regions.append(r)
    pools = []
    for pool in raw.get("runner_pools") or []:
        p = copy.deepcopy(dict(pool))
        p["name"], p["fleet"] = t(p["name"]), t(p["fleet"])
        pools.append(p)
    return {"fleets": fleets, "failover_ips": ips, "regions": regions, "runner_pools": pools}


def grow(raw: Mapping[str, Any], times: int) -> dict[str, Any]:
    """`raw` (a stack's `tuist-infra:*` values, prefix stripped) with its fleets, failover IPs, regions
    and runner pools repeated `times` times."""
    if times < 1:
        raise ValueError(f"times must be at least 1, not {times}")
    grown = {key: value for key, value in copy.deepcopy(dict(raw)).items() if key not in GROWN}
    copies = [_copy(raw, n) for n in range(1, times + 1)]
    for key in GROWN:
        if raw.get(key) is not None:
            grown[key] = [item for c in copies for item in c[key]]
    _own_node_ports(grown.get("regions") or [])
    return grown


def _own_node_ports(regions: list[dict[str, Any]]) -> None:
    """A NodePort is open on every node of the stack's one cluster: a copy of a node_port region whose
    ports an earlier region has gets free ones (the first copy keeps the original's)."""
    from config.models import NODE_PORT_MAX, NODE_PORT_MIN, GatewayMode, NodePorts

    def ports(region: dict[str, Any]) -> set[int]:
        return set(NodePorts(**region.get("node_ports", {})).model_dump().values())

    node_port = [r for r in regions if r.get("gateway") == GatewayMode.NODE_PORT.value]
    taken = set().union(*map(ports, node_port))
    free = (p for p in range(NODE_PORT_MIN, NODE_PORT_MAX + 1) if p not in taken)
    seen: set[int] = set()
    for region in node_port:
        if ports(region) & seen:
            region["node_ports"] = {"http": next(free), "https": next(free)}
        seen |= ports(region)


def machines(raw: Mapping[str, Any]) -> int:
    return sum(int(f.get("size", 0)) for f in raw.get("fleets") or [] if f.get("enabled", True))
