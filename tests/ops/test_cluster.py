"""`tuist-ops inventory` and `failover` with the stack's cluster: Node names and Ready from the real
control plane of the session (tests/support/cluster.py), eligibility by the watcher's own rule, and an
unreachable cluster said as such ("unknown"), never waited on."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from ops.cli import Context, app
from ops.stack import StaticStack
from tests.ops.conftest import FAST, Ops, claim_resource, dev_config, error_line
from tests.ops.test_failover import adopted
from tests.providers.test_machine_support import PROJECT, REPO, Sim, claim_props
from tests.support.cluster import KubeCluster, wait_until

IP = "198.51.100.10"


class ClusterOps(Ops):
    """Ops whose stack has the session's cluster: api_server and its admin kubeconfig secret."""

    overrides: dict[str, Any]

    def __call__(self, *args: str) -> Any:
        from typer.testing import CliRunner

        values = dev_config(self.sim, self.key)
        values.update(self.overrides)
        context = Context(
            source=lambda name: StaticStack(name, values, self.state),
            timing=FAST,
            project_dir=REPO,
            width=240,
        )
        return CliRunner().invoke(app, list(args), obj=context)


def with_cluster(ops: ClusterOps, cluster: KubeCluster, api_server: str, pool: str, namespace: str) -> None:
    values = dev_config(ops.sim)
    cfg = dict(values[f"{PROJECT}:cluster"])
    cfg.pop("render_dir", None)
    fleets = [dict(f) for f in values[f"{PROJECT}:fleets"]]
    for fleet in fleets:
        if fleet["name"] == "kura-ovh":
            fleet["node_pool"] = pool  # the session's cluster is shared: this test's pool is its own
    kura = {**values[f"{PROJECT}:kura"], "namespace": namespace}
    ops.overrides = {
        f"{PROJECT}:cluster": {**cfg, "api_server": api_server},
        f"{PROJECT}:fleets": fleets,
        f"{PROJECT}:kura": kura,
        f"{PROJECT}:kubeconfig": cluster.kubeconfig.read_text(),
    }


@pytest.fixture
def nodes(kube_cluster: KubeCluster) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        kube_cluster.core.delete_node(name)


def make_node(
    cluster: KubeCluster, name: str, box: str, pool: str, *, cordoned: bool, provider_id: str | None = None
) -> None:
    core = cluster.core
    core.create_node(
        k8s.V1Node(
            metadata=k8s.V1ObjectMeta(name=name, labels={"node.cluster.x-k8s.io/pool": pool}),
            spec=k8s.V1NodeSpec(provider_id=provider_id or f"ovh://bhs6/{box}", unschedulable=cordoned),
        )
    )
    core.patch_node_status(
        name, {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}
    )


def make_demux(cluster: KubeCluster, namespace: str, node: str, region: str) -> None:
    core = cluster.core
    name = f"peer-demux-{node}"[:63]
    # The namespace's default ServiceAccount comes from the controller manager, a moment after it.
    wait_until("the default ServiceAccount", lambda: _service_account(core, namespace))
    core.create_namespaced_pod(
        namespace,
        k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(
                name=name,
                labels={"app.kubernetes.io/component": "peer-demux", "app.kubernetes.io/instance": region},
            ),
            spec=k8s.V1PodSpec(node_name=node, containers=[k8s.V1Container(name="nginx", image="nginx")]),
        ),
    )
    core.patch_namespaced_pod_status(
        name, namespace, {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    )


def test_nodes_and_the_watchers_eligibility_come_from_the_cluster(
    sim: Sim, kube_cluster: KubeCluster, namespace: str, nodes: list[str]
) -> None:
    pool = f"ops-{uuid.uuid4().hex[:8]}"
    ops = ClusterOps(sim)
    with_cluster(ops, kube_cluster, kube_cluster.api_server, pool, namespace)
    boxes = []
    for index in range(2):
        outs = sim.claims().create(claim_props("kura-ovh", index)).outs
        assert outs
        ops.state.append(
            claim_resource(f"kura-ovh-{index}", "kura-ovh", "ovh", outs["box_id"], outs["claim_token"])
        )
        boxes.append(outs["box_id"])
    names = [f"{pool}-{i}" for i in range(2)]
    for name, box, cordoned in zip(names, boxes, (False, True), strict=True):
        make_node(kube_cluster, name, box, pool, cordoned=cordoned)
        nodes.append(name)
        make_demux(kube_cluster, namespace, name, "ca-east")

    doc = ops.json("inventory", "-s", "dev", "--vendor", "ovh")
    rows = {r["box"]: r for r in doc["boxes"]}
    assert doc["cluster"] == "ok"
    assert [(rows[b]["node"], rows[b]["node_ready"]) for b in boxes] == [(names[0], "yes"), (names[1], "yes")]
    assert rows["ns1007.ip-203-0-113.net"]["node_ready"] == "-"

    (route,) = ops.json("failover", "status", "-s", "dev", "ca-east")["regions"]
    assert route["source"] == "cluster"
    assert [(c["box"], c["node"], c["eligible"], c["why_not"]) for c in route["candidates"]] == [
        (boxes[0], names[0], True, None),
        (boxes[1], names[1], False, "cordoned"),
    ]
    since = sim.last_audit_id()
    assert error_line(ops("failover", "move", "-s", "dev", "ca-east", boxes[1])) == (
        f"error: refusing to move {IP} to {boxes[1]}: not eligible (cordoned); --force moves it anyway"
    )
    assert sim.audit(since) == []
    forced = ops("failover", "move", "-s", "dev", "ca-east", boxes[1], "--force")
    assert forced.exit_code == 0, forced.output
    assert "(not eligible: cordoned; --force)" in forced.stderr
    assert [(e["method"], e["path"]) for e in sim.audit(since)] == [("POST", f"/ovh/1.0/ip/{IP}%2F32/move")]


def test_an_unreachable_cluster_reads_unknown_and_nothing_waits(sim: Sim, kube_cluster: KubeCluster) -> None:
    ops = ClusterOps(sim)
    # The session's admin kubeconfig, aimed at a port nothing listens on.
    with_cluster(ops, kube_cluster, "https://127.0.0.1:1", "kura-ovh", "kura")
    text = kube_cluster.kubeconfig.read_text().replace(kube_cluster.api_server, "https://127.0.0.1:1")
    ops.overrides[f"{PROJECT}:kubeconfig"] = text
    result = ops("inventory", "-s", "dev", "--vendor", "ovh", "--json")
    assert result.exit_code == 0, result.output
    assert "warning: cluster unreachable" in result.stderr
    doc = json.loads(result.stdout)
    assert doc["cluster"].startswith("unreachable: ")
    assert {r["node_ready"] for r in doc["boxes"]} == {"unknown"}
    (route,) = ops.json("failover", "status", "-s", "dev", "ca-east")["regions"]
    assert route["source"].startswith("state (cluster unreachable: ")
    # Whether a box is still a Node cannot be told: unclaim wipes nothing.
    orphan = sim.claims().create(claim_props("kura-ovh", 7)).outs
    assert orphan
    since = sim.last_audit_id()
    assert error_line(ops("unclaim", "-s", "dev", f"ovh:{orphan['box_id']}")).startswith(
        f"error: refusing to unclaim ovh:{orphan['box_id']}: cannot tell whether it is still a Node "
        "(cluster unreachable: "
    )
    assert sim.audit(since) == []


def test_unclaim_deletes_the_cluster_record_before_the_claim_and_refuses_one_naming_another_holder(
    sim: Sim, machine_claims_crd: KubeCluster
) -> None:
    from providers.machine.record import Holder, KubeClaimRecord, Progress, record_name

    ops = ClusterOps(sim)
    with_cluster(ops, machine_claims_crd, machine_claims_crd.api_server, "kura-ovh", "kura")
    records = KubeClaimRecord(machine_claims_crd.api)
    orphan = sim.claims().create(claim_props("kura-ovh", 7)).outs
    other = sim.claims().create(claim_props("kura-ovh", 8)).outs
    assert orphan and other
    mine = Holder(PROJECT, "dev", "kura-ovh-7", orphan["claim_token"])
    records.acquire(Progress("ovh", orphan["box_id"], "kura-ovh", mine, state="JOINING"))
    # A record naming a holder the box's claim does not: which is right is the operator's call.
    stranger = Holder(PROJECT, "dev", "kura-ovh-9", "5ca1ab1e0000")
    records.acquire(Progress("ovh", other["box_id"], "kura-ovh", stranger, state="JOINING"))
    try:
        since = sim.last_audit_id()
        assert error_line(ops("unclaim", "-s", "dev", f"ovh:{other['box_id']}", "--no-reinstall")) == (
            f"error: refusing to unclaim ovh:{other['box_id']}: the cluster's MachineClaim "
            f"{record_name('ovh', other['box_id'])} names holder {stranger}, not the box's claim "
            f"{other['claim_token']}; find out which is right first"
        )
        assert sim.audit(since) == []

        done = ops("unclaim", "-s", "dev", f"ovh:{orphan['box_id']}", "--no-reinstall")

        assert done.exit_code == 0, done.output
        assert records.get("ovh", orphan["box_id"]) is None
        said = done.stderr
        assert said.index("cluster record") < said.index("back in the pool (claim removed)"), said
    finally:
        for box in (orphan["box_id"], other["box_id"]):
            left = records.get("ovh", box)
            if left is not None:
                records.release(left)


def test_prep_refuses_to_reinstall_a_box_that_is_still_a_node(
    sim: Sim, kube_cluster: KubeCluster, nodes: list[str]
) -> None:
    """A reinstall wipes the box: never one that is still a Node (as unclaim refuses), dry run or not.
    A prep that reinstalls nothing only looks at the box, and still runs."""
    pool = f"ops-{uuid.uuid4().hex[:8]}"
    ops = ClusterOps(sim)
    with_cluster(ops, kube_cluster, kube_cluster.api_server, pool, "kura")
    box, name = "ns1001.ip-203-0-113.net", f"{pool}-0"
    make_node(kube_cluster, name, box, pool, cordoned=False)
    nodes.append(name)
    since = sim.last_audit_id()

    for dry_run in (["--dry-run"], []):
        assert error_line(ops("prep", "-s", "dev", f"ovh:{box}", "--reinstall", *dry_run)) == (
            f"error: refusing to reinstall ovh:{box}: it is still Node {name}; drain and delete it first "
            f"(kubectl drain {name} --ignore-daemonsets --delete-emptydir-data && kubectl delete node {name})"
        )
    assert sim.audit(since) == []
    checked = ops("prep", "-s", "dev", f"ovh:{box}")
    assert checked.exit_code == 0, checked.output
    assert "no reinstall: the fleet key logs in and sudo works" in checked.stderr
    assert sim.audit(since) == []


def test_unclaim_looks_a_robot_box_typed_with_leading_zeros_up_by_its_server_number(
    sim: Sim, machine_claims_crd: KubeCluster, nodes: list[str]
) -> None:
    """`robot:02345604` is server 2345604 to Robot; its Node (`hrobot://2345604`) and its cluster
    record are found under that number, and both refusals hold."""
    from providers.machine.record import Holder, KubeClaimRecord, Progress, record_name

    pool = f"ops-{uuid.uuid4().hex[:8]}"
    ops = ClusterOps(sim)
    with_cluster(ops, machine_claims_crd, machine_claims_crd.api_server, pool, "kura")
    name = f"{pool}-0"
    make_node(machine_claims_crd, name, "2345604", pool, cordoned=False, provider_id="hrobot://2345604")
    nodes.append(name)
    since = sim.last_audit_id()

    assert error_line(ops("unclaim", "-s", "dev", "robot:02345604", "--force", "--no-reinstall")) == (
        f"error: refusing to unclaim robot:02345604: it is still Node {name}; drain and delete it first "
        f"(kubectl drain {name} --ignore-daemonsets --delete-emptydir-data && kubectl delete node {name})"
    )
    machine_claims_crd.core.delete_node(name)
    nodes.remove(name)
    records = KubeClaimRecord(machine_claims_crd.api)
    stranger = Holder(PROJECT, "dev", "runners-linux-9", "5ca1ab1e0000")
    records.acquire(Progress("robot", "2345604", "runners-linux", stranger, state="JOINING"))
    try:
        assert error_line(ops("unclaim", "-s", "dev", "robot:02345604", "--force", "--no-reinstall")) == (
            f"error: refusing to unclaim robot:02345604: the cluster's MachineClaim "
            f"{record_name('robot', '2345604')} names holder {stranger}, not the box's claim "
            "a1ce00000003; find out which is right first"
        )
    finally:
        left = records.get("robot", "2345604")
        if left is not None:
            records.release(left)
    assert sim.audit(since) == []


def _service_account(core: k8s.CoreV1Api, namespace: str) -> bool | None:
    try:
        core.read_namespaced_service_account("default", namespace)
    except k8s.ApiException:
        return None
    return True


@pytest.mark.parametrize("how", ["nodes-unlisted", "kubeconfig-unreadable"])
def test_a_move_while_the_stacks_cluster_does_not_answer_needs_force(
    sim: Sim, kube_cluster: KubeCluster, how: str
) -> None:
    """The stack has a cluster, but its Nodes could not be listed (the apiserver does not answer) or
    no client could be built (the kubeconfig does not parse): every adopted box reads eligible by the
    deploy-time rule, which knows nothing of a NotReady or cordoned Node. The move refuses, saying
    the cluster did not answer, and writes nothing; --force moves it, and says eligibility was not
    checked."""
    ops = ClusterOps(sim)
    with_cluster(ops, kube_cluster, "https://127.0.0.1:1", "kura-ovh", "kura")
    if how == "nodes-unlisted":
        text = kube_cluster.kubeconfig.read_text().replace(kube_cluster.api_server, "https://127.0.0.1:1")
        status = "unreachable: MaxRetryError"
    else:
        text = "this: [is not a kubeconfig"
        status = "unreachable: KubeconfigError"
    ops.overrides[f"{PROJECT}:kubeconfig"] = text
    boxes = adopted(sim, ops, 2)
    (route,) = ops.json("failover", "status", "-s", "dev", "ca-east")["regions"]
    assert route["source"] == f"state (cluster {status}: eligibility is the deploy-time rule)"
    assert [(c["box"], c["eligible"]) for c in route["candidates"]] == [(boxes[0], True), (boxes[1], True)]
    since = sim.last_audit_id()

    for dry_run in (["--dry-run"], []):
        assert error_line(ops("failover", "move", "-s", "dev", "ca-east", boxes[1], *dry_run)) == (
            f"error: refusing to move {IP} to {boxes[1]}: the cluster did not answer ({status}), so whether "
            f"{boxes[1]} may carry it (Node Ready, not cordoned, a Ready peer-demux pod of region ca-east) "
            "could not be checked; rerun once the cluster answers, or --force moves it anyway"
        )
    assert sim.audit(since) == []

    forced = ops("failover", "move", "-s", "dev", "ca-east", boxes[1], "--force")

    assert forced.exit_code == 0, forced.output
    assert (
        f"region ca-east: move {IP} from {boxes[0]} to {boxes[1]} (eligibility not checked: the cluster "
        f"did not answer ({status}); --force)"
    ) in forced.stderr.splitlines()
    assert f"region ca-east: {IP} now routes to {boxes[1]}" in forced.stderr
    assert [(e["method"], e["path"], e["body"]) for e in sim.audit(since)] == [
        ("POST", f"/ovh/1.0/ip/{IP}%2F32/move", {"to": boxes[1]})
    ]


def test_a_box_id_in_another_case_than_its_nodes_still_finds_the_node(
    sim: Sim, kube_cluster: KubeCluster, nodes: list[str]
) -> None:
    """An OVH service name typed in capitals is the box in lower case (as OVH and the Node's providerID
    write it): prep and unclaim refuse a box that is still a Node, naming it in lower case. And a
    Node whose providerID has the name in capitals is found for the box all the same."""
    pool = f"ops-{uuid.uuid4().hex[:8]}"
    ops = ClusterOps(sim)
    with_cluster(ops, kube_cluster, kube_cluster.api_server, pool, "kura")
    orphan = sim.claims().create(claim_props("kura-ovh", 7)).outs
    assert orphan
    box = orphan["box_id"]
    name, shouting = f"{pool}-0", f"{pool}-1"
    make_node(kube_cluster, name, box, pool, cordoned=False)
    nodes.append(name)
    free = "ns1002.ip-203-0-113.net" if box != "ns1002.ip-203-0-113.net" else "ns1003.ip-203-0-113.net"
    make_node(kube_cluster, shouting, free.upper(), pool, cordoned=False)
    nodes.append(shouting)
    since = sim.last_audit_id()

    def still_node(doing: str, ref: str, node: str) -> str:
        return (
            f"error: refusing to {doing} {ref}: it is still Node {node}; drain and delete it first "
            f"(kubectl drain {node} --ignore-daemonsets --delete-emptydir-data && kubectl delete node {node})"
        )

    assert error_line(ops("unclaim", "-s", "dev", f"ovh:{box.upper()}")) == still_node(
        "unclaim", f"ovh:{box}", name
    )
    assert error_line(ops("unclaim", "-s", "dev", f"ovh:{box.upper()}", "--no-reinstall")) == still_node(
        "unclaim", f"ovh:{box}", name
    )
    assert error_line(ops("prep", "-s", "dev", box.upper(), "--fleet", "kura-ovh")) == (
        f"error: refusing to prep ovh:{box}: it is claimed by dev/kura-ovh-7"
    )
    assert error_line(ops("prep", "-s", "dev", f"ovh:{free}", "--reinstall")) == still_node(
        "reinstall", f"ovh:{free}", shouting
    )
    assert error_line(ops("prep", "-s", "dev", free.upper(), "--reinstall", "--dry-run")) == still_node(
        "reinstall", f"ovh:{free}", shouting
    )
    rows = {r["box"]: r for r in ops.json("inventory", "-s", "dev", "--vendor", "ovh")["boxes"]}
    assert (rows[box]["node"], rows[free]["node"]) == (name, shouting)
    assert sim.audit(since) == []
