"""`tuist-ops failover` against vendorsim: where each region's IP routes, which boxes may carry it, and a
manual move through the program's own mover (providers.failover.route), refusing ineligible targets.

These run with no cluster (the dev stack rendered): eligibility is then the deploy-time rule (a box the
fleet adopted, per state). The watcher's rule against a real cluster: tests/e2e/test_runbook.py."""

from __future__ import annotations

import re

from tests.ops.conftest import Ops, claim_resource, dev_config, error_line
from tests.providers.test_machine_support import PROJECT, FleetKey, Sim, claim_props

IP = "198.51.100.10"


def with_api_server(sim: Sim, key: FleetKey | None) -> dict[str, object]:
    """The dev config with a cluster (api_server) but no kubeconfig secret to reach it."""
    values = dev_config(sim, key)
    cluster = {k: v for k, v in dict(values[f"{PROJECT}:cluster"]).items() if k != "render_dir"}
    values[f"{PROJECT}:cluster"] = {**cluster, "api_server": "https://127.0.0.1:6443"}
    return values


def adopted(sim: Sim, ops: Ops, count: int) -> list[str]:
    boxes = []
    for index in range(count):
        outs = sim.claims().create(claim_props("kura-ovh", index)).outs
        assert outs
        ops.state.append(
            claim_resource(f"kura-ovh-{index}", "kura-ovh", "ovh", outs["box_id"], outs["claim_token"])
        )
        boxes.append(outs["box_id"])
    return boxes


def test_status_names_the_route_and_each_adopted_box(sim: Sim, ops: Ops) -> None:
    boxes = adopted(sim, ops, 2)
    regions = {r["region"]: r for r in ops.json("failover", "status", "-s", "dev")["regions"]}
    ca = regions["ca-east"]
    assert (ca["address"], ca["vendor"], ca["routed_to"], ca["placement"]) == (IP, "ovh", boxes[0], boxes[0])
    assert [(c["box"], c["eligible"]) for c in ca["candidates"]] == [(boxes[0], True), (boxes[1], True)]
    assert ca["source"].startswith("state (cluster none")
    eu = regions["eu-central"]
    # No dedibox machine in state: nothing may carry the IP, and it stays where it is.
    assert (eu["routed_to"], eu["candidates"], eu["placement"]) == ("fr-par-2/200101", [], None)
    table = ops("failover", "status", "-s", "dev", "eu-central")
    assert "no eligible box: the IP stays where it is" in table.stdout


def test_move_routes_the_ip_with_the_programs_mover_and_is_idempotent(sim: Sim, ops: Ops) -> None:
    boxes = adopted(sim, ops, 2)
    since = sim.last_audit_id()
    dry = ops("failover", "move", "-s", "dev", "ca-east", boxes[1], "--dry-run")
    assert dry.exit_code == 0 and sim.audit(since) == []

    result = ops("failover", "move", "-s", "dev", "ca-east", boxes[1])

    assert result.exit_code == 0, result.output
    assert f"region ca-east: {IP} now routes to {boxes[1]}" in result.stderr
    # The progress line's last word is the vendor's: OVH's move task and where the IP routes.
    line = " ".join(result.stderr.split())
    last = rf"moving {IP} to {boxes[1]}: done \(move task \d+: done; routed to {boxes[1]}\)"
    assert re.search(last, line), line
    again = ops("failover", "move", "-s", "dev", "ca-east", boxes[1])
    assert "already routes to" in again.stderr
    assert len(sim.audit(since)) == 1


def test_move_refuses_a_box_outside_the_fleet_and_an_unknown_region(sim: Sim, ops: Ops) -> None:
    boxes = adopted(sim, ops, 1)
    since = sim.last_audit_id()
    assert error_line(ops("failover", "move", "-s", "dev", "ca-east", "ns1005.ip-203-0-113.net")) == (
        f"error: refusing to move {IP} to ns1005.ip-203-0-113.net: it is not a box of fleet kura-ovh "
        f"(its boxes: {boxes[0]})"
    )
    assert error_line(ops("failover", "move", "-s", "dev", "us-west", boxes[0])) == (
        "error: stack dev has no region 'us-west' with a failover IP (regions: eu-central, ca-east)"
    )
    assert sim.audit(since) == []


def test_a_stack_with_a_cluster_but_no_kubeconfig_moves_only_with_force(sim: Sim) -> None:
    """api_server set, the kubeconfig secret missing: no client, so eligibility is the deploy-time
    rule; the move refuses without --force (the cluster could not be asked) and writes nothing."""
    ops = Ops(sim, config=with_api_server)
    boxes = adopted(sim, ops, 2)
    status = "unreachable: no kubeconfig in the stack's secrets"
    (route,) = ops.json("failover", "status", "-s", "dev", "ca-east")["regions"]
    assert route["source"] == f"state (cluster {status}: eligibility is the deploy-time rule)"
    since = sim.last_audit_id()
    assert error_line(ops("failover", "move", "-s", "dev", "ca-east", boxes[1])) == (
        f"error: refusing to move {IP} to {boxes[1]}: the cluster did not answer ({status}), so whether "
        f"{boxes[1]} may carry it (Node Ready, not cordoned, a Ready peer-demux pod of region ca-east) "
        "could not be checked; rerun once the cluster answers, or --force moves it anyway"
    )
    assert sim.audit(since) == []


def test_a_stack_with_a_cluster_but_no_kubeconfig_wipes_no_box_it_cannot_check(sim: Sim) -> None:
    """The Node guard: api_server set, the kubeconfig secret missing. Whether the box is still a Node
    cannot be told, so unclaim refuses, as for an unreachable cluster, and writes nothing."""
    from tests.providers.test_machine_support import claim_props

    ops = Ops(sim, config=with_api_server)
    orphan = sim.claims().create(claim_props("kura-ovh", 7)).outs
    assert orphan
    since = sim.last_audit_id()
    assert error_line(ops("unclaim", "-s", "dev", f"ovh:{orphan['box_id']}")) == (
        f"error: refusing to unclaim ovh:{orphan['box_id']}: cannot tell whether it is still a Node "
        "(cluster unreachable: no kubeconfig in the stack's secrets); rerun once the cluster answers"
    )
    assert sim.audit(since) == []
