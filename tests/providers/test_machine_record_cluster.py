"""The cluster-side claim record against the session's real kube-apiserver (tests/support/cluster.py):
the MachineClaim CRD as the program registers it, create-once arbitration, status compare-and-set,
the immutable spec, guarded deletes, and two provider processes of two stacks claiming from one fleet
without ever holding a box twice (issue 10 point 6).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from providers.constants import CLAIM_GROUP, CLAIM_PLURAL, CLAIM_VERSION
from providers.machine.errors import AmbiguousNodeError, ClaimLostError
from providers.machine.record import ClaimHeldError, Holder, KubeClaimRecord, Progress
from tests.providers.test_machine_support import (
    REPO,
    Sim,
    claim_props,
    claims_in_state,
    resource_id,
    running_sim,
)
from tests.support.cluster import KubeCluster, wait_until

A = Holder("tuist-infra", "dev", "kura-dedibox-0", "0123456789ab")
B = Holder("tuist-infra", "bob-dev", "kura-dedibox-0", "fedcba987654")


@pytest.fixture
def crd(machine_claims_crd: KubeCluster) -> KubeCluster:
    """The CRD registered as components/claims_crd.py registers it, Established."""
    return machine_claims_crd


@pytest.fixture
def record(crd: KubeCluster) -> Iterator[KubeClaimRecord]:
    yield KubeClaimRecord(crd.api)
    objects = k8s.CustomObjectsApi(crd.api)
    for item in objects.list_cluster_custom_object(CLAIM_GROUP, CLAIM_VERSION, CLAIM_PLURAL)["items"]:
        objects.delete_cluster_custom_object(
            CLAIM_GROUP, CLAIM_VERSION, CLAIM_PLURAL, item["metadata"]["name"]
        )


def test_one_holder_per_box_and_the_holder_resumes(record: KubeClaimRecord) -> None:
    mine = record.acquire(Progress("dedibox", "fr-par-2/200101", "kura-dedibox", A, state="CLAIMED"))
    assert (mine.name, mine.phase, mine.state) == ("dedibox-fr-par-2-200101", "Claimed", "CLAIMED")
    assert record.acquire(Progress("dedibox", "fr-par-2/200101", "kura-dedibox", A)).version == mine.version
    with pytest.raises(ClaimHeldError, match=r"claimed by tuist-infra/dev/kura-dedibox-0 \(0123456789ab\)"):
        record.acquire(Progress("dedibox", "fr-par-2/200101", "kura-dedibox", B))
    assert record.held("dedibox") == {"fr-par-2/200101": A}
    assert record.held("ovh") == {}
    found = record.find_own(A.token)
    assert found is not None and found.box_id == "fr-par-2/200101"


def test_elastic_metal_and_mac_boxes_are_recorded_under_names_the_apiserver_takes(
    record: KubeClaimRecord,
) -> None:
    em = record.acquire(
        Progress(
            "scaleway_em", "fr-par-2/e1000000-0000-4000-8000-000000000001", "kura-scw", A, state="CLAIMED"
        )
    )
    mac = record.acquire(
        Progress("applesilicon", "fr-par-3/a5000000-0000-4000-8000-000000000001", "runners-macos", A)
    )
    assert em.name == "scaleway-em-fr-par-2-e1000000-0000-4000-8000-000000000001"
    assert mac.name == "applesilicon-fr-par-3-a5000000-0000-4000-8000-000000000001"
    assert record.held("scaleway_em") == {"fr-par-2/e1000000-0000-4000-8000-000000000001": A}
    assert record.held("applesilicon") == {"fr-par-3/a5000000-0000-4000-8000-000000000001": A}


def test_status_moves_by_compare_and_set_and_the_spec_never_changes(
    record: KubeClaimRecord, crd: KubeCluster
) -> None:
    first = record.acquire(Progress("robot", "2345601", "runners-linux", A, state="CLAIMED"))
    moved = record.save(
        replace(
            first,
            phase="Adopting",
            state="INSTALLIMAGE",
            error_type="SshUnreachable",
            error_count=2,
            last_error="ssh handshake timed out",
            attempt=3,
            last_transition="2026-05-01T12:00:00Z",
            facts={"rescue_host_key": "SHA256:abc"},
        )
    )
    again = record.get("robot", "2345601")
    assert again == moved
    assert (again.state, again.error_count, again.attempt, again.facts) == (
        "INSTALLIMAGE",
        2,
        3,
        {"rescue_host_key": "SHA256:abc"},
    )
    with pytest.raises(ClaimLostError, match="changed or went away"):
        record.save(replace(first, state="JOINING"))  # written from a stale read
    objects = k8s.CustomObjectsApi(crd.api)
    body = objects.get_cluster_custom_object(CLAIM_GROUP, CLAIM_VERSION, CLAIM_PLURAL, moved.name)
    body["spec"]["holder"]["token"] = B.token
    with pytest.raises(ApiException) as refused:
        objects.replace_cluster_custom_object(CLAIM_GROUP, CLAIM_VERSION, CLAIM_PLURAL, moved.name, body)
    assert refused.value.status == 422 and "spec is immutable" in str(refused.value.body)
    with pytest.raises(ClaimLostError, match="not deleted"):
        record.release(first)
    record.release(moved)
    assert record.get("robot", "2345601") is None
    record.release(moved)  # gone already: done


CLAIMS_IN_A_PROCESS = """
import json, sys, threading
from pulumi.dynamic import ConfigureRequest
from pulumi.dynamic.config import Config
from providers.machine.provider import ClaimProvider
data = json.load(sys.stdin)
provider = ClaimProvider()
provider.configure(ConfigureRequest(Config(data["config"], "tuist-infra")))
results = {}
def claim(props):
    try:
        results[props["resource_name"]] = provider.create(props).outs["box_id"]
    except Exception as error:
        results[props["resource_name"]] = type(error).__name__
threads = [threading.Thread(target=claim, args=(p,)) for p in data["props"]]
[t.start() for t in threads]
[t.join() for t in threads]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def sim_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    yield from running_sim(tmp_path_factory.mktemp("record-sim"))


@pytest.fixture
def sim(sim_process: Sim) -> Sim:
    sim_process.admin("POST", "reset")
    return sim_process


def test_the_release_switches_survive_the_apiservers_schema(record: KubeClaimRecord) -> None:
    """status.releaseAllowed is in the CRD's schema: the apiserver keeps it (an unknown field would be
    pruned, and a production machine could then never leave)."""
    mine = record.acquire(Progress("ovh", "ns3001.ip-1-2-3.eu", "kura-ovh", A, state="CLAIMED"))
    assert mine.release_allowed is False
    saved = record.save(replace(mine, release_allowed=True))
    again = record.get("ovh", "ns3001.ip-1-2-3.eu")
    assert saved.release_allowed is True and again is not None and again.release_allowed is True
    record.save(replace(again, phase="Leaving", state="CORDONING"))
    moved = record.get("ovh", "ns3001.ip-1-2-3.eu")
    assert moved is not None and (moved.state, moved.release_allowed) == ("CORDONING", True)


def test_two_processes_of_two_stacks_never_hold_one_box_twice(
    sim: Sim, crd: KubeCluster, record: KubeClaimRecord
) -> None:
    """Issue 10 point 6: both list the same three free boxes at once; the apiserver lets one holder
    record each box, the loser moves on, and every box ends with one holder in the record and the same
    one in its vendor marker."""
    config = {**sim.stack_config(), "tuist-infra:kubeconfig": crd.kubeconfig.read_text()}
    api = {"api_server": crd.api_server}
    children = []
    for stack in ("alice-dev", "bob-dev"):
        props = [claim_props("kura-dedibox", i, stack=stack, **api) for i in range(3)]
        child = subprocess.Popen(
            [sys.executable, "-c", CLAIMS_IN_A_PROCESS],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        children.append((stack, child, json.dumps({"config": config, "props": props})))
    results = {}
    for stack, child, payload in children:
        out, err = child.communicate(payload, timeout=300)
        assert child.returncode == 0, err[-3000:]
        results[stack] = json.loads(out)
    won = [box for per_stack in results.values() for box in per_stack.values() if "/" in box]
    assert sorted(won) == ["fr-par-2/200101", "fr-par-2/200102", "fr-par-2/200103"], results
    held = record.held("dedibox")
    markers = claims_in_state(sim.state())
    for box, holder in held.items():
        assert markers[box] == f"tuist-kura-dev,tuist-claim-{holder.token}", (box, holder, markers[box])
    assert set(held) == set(won)


def test_a_slot_with_a_cluster_records_its_progress_there_and_destroy_removes_it(
    sim: Sim, crd: KubeCluster, record: KubeClaimRecord, fleet_rbac: Callable[[str], None]
) -> None:
    fleet_rbac("kura-dedibox")  # the box's kubelet joins for real: the machine waits for its Node
    kubeconfig = crd.kubeconfig.read_text()
    claims, machines = sim.claims(kubeconfig=kubeconfig), sim.machines(kubeconfig=kubeconfig)
    claim, machine = sim.adopt(
        "kura-dedibox", 5, claims=claims, machines=machines, claim={"api_server": crd.api_server}
    )
    assert claim["record"] == "cluster"
    progress = record.get("dedibox", claim["box_id"])
    assert progress is not None
    assert (progress.phase, progress.state, progress.attempt) == ("Ready", "READY", 1)
    assert progress.holder == Holder("tuist-infra", "dev", "kura-dedibox-5", claim["claim_token"])
    assert progress.facts["pin"] == machine["host_key_fingerprint"]
    # The bootstrap token the join used is a real Secret of the cluster.
    secrets = (
        k8s.CoreV1Api(crd.api)
        .list_namespaced_secret("kube-system", field_selector="type=bootstrap.kubernetes.io/token")
        .items
    )
    # Other tests' tokens share kube-system (one cluster per session), some with no labels at all.
    assert any((s.metadata.labels or {}).get("tuist.dev/fleet") == "kura-dedibox" for s in secrets)
    sim.destroy(claim, machine, claims=claims, machines=machines)
    assert record.get("dedibox", claim["box_id"]) is None
    assert claims_in_state(sim.state())[claim["box_id"]] == "tuist-kura-dev"


def test_a_claim_deleted_without_its_machine_leaves_the_cluster_before_the_wipe(
    sim: Sim, crd: KubeCluster, record: KubeClaimRecord, fleet_rbac: Callable[[str], None]
) -> None:
    """The machine is not in state (its create failed after the kubelet registered, or the pending
    create was cleared by hand), so only the claim is destroyed: its Node must not stay behind, Ready
    or not, pointing at a wiped disk."""
    fleet_rbac("kura-dedibox")
    kubeconfig = crd.kubeconfig.read_text()
    claims, machines = sim.claims(kubeconfig=kubeconfig), sim.machines(kubeconfig=kubeconfig)
    claim, machine = sim.adopt(
        "kura-dedibox", 6, claims=claims, machines=machines, claim={"api_server": crd.api_server}
    )
    node = machine["node_name"]
    assert node in {n.metadata.name for n in crd.core.list_node().items}
    sim.destroy(claim, None, claims=claims, machines=machines)  # the claim alone
    assert node not in {n.metadata.name for n in crd.core.list_node().items}
    assert record.get("dedibox", claim["box_id"]) is None
    assert claims_in_state(sim.state())[claim["box_id"]] == "tuist-kura-dev"


def test_a_claim_deleted_alone_finds_an_imported_boxs_node_by_its_provider_id(
    sim: Sim, crd: KubeCluster, record: KubeClaimRecord, fleet_rbac: Callable[[str], None]
) -> None:
    """An imported box keeps the Node name it was joined under (by hand, or by the Cluster API provider),
    not the program's `<fleet>-<box>`: only its providerID ties the two. Its claim deleted alone leaves
    that Node before the wipe; two Nodes with the box's providerID stop the release, wiping nothing."""
    fleet_rbac("kura-dedibox")
    claims = sim.claims(kubeconfig=crd.kubeconfig.read_text())
    claim = claims.create(claim_props("kura-dedibox", 7, api_server=crd.api_server)).outs
    assert claim is not None
    box, provider_id = claim["box_id"], claim["provider_id"]
    for name in ("capi-kura-md-0-x7k2p", "capi-kura-md-0-old"):
        crd.core.create_node({"metadata": {"name": name}, "spec": {"providerID": provider_id}})

    with pytest.raises(AmbiguousNodeError, match="Nodes capi-kura-md-0-old, capi-kura-md-0-x7k2p all carry"):
        claims.delete(resource_id(claim), claim)
    assert claims_in_state(sim.state())[box] == f"tuist-kura-dev,tuist-claim-{claim['claim_token']}"
    held = record.get("dedibox", box)
    assert held is not None and held.holder.token == claim["claim_token"]

    crd.core.delete_node("capi-kura-md-0-old")  # the operator removes the stale one, and runs again
    claims.delete(resource_id(claim), claim)
    assert "capi-kura-md-0-x7k2p" not in {n.metadata.name for n in crd.core.list_node().items}
    assert record.get("dedibox", box) is None
    assert claims_in_state(sim.state())[box] == "tuist-kura-dev"


# --- the identity the providers need ---------------------------------------------------------------------


def service_account_kubeconfig(cluster: KubeCluster, namespace: str, name: str) -> str:
    """A kubeconfig that is the ServiceAccount: what an operator would put in the stack's secret."""
    request = k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    token = cluster.core.create_namespaced_service_account_token(name, namespace, request).status.token
    ca = base64.b64encode(cluster.ca_pem.encode()).decode()
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "c", "cluster": {"server": cluster.api_server, "certificate-authority-data": ca}}
            ],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": name}}],
            "current-context": "c",
            "users": [{"name": name, "user": {"token": token}}],
        }
    )


def test_the_providers_do_their_whole_job_with_exactly_the_roles_the_program_defines(
    sim: Sim, crd: KubeCluster, record: KubeClaimRecord, fleet_rbac: Callable[[str], None]
) -> None:
    """A deploy identity bound only to tuist-infra:machine-provider and, in kube-system,
    tuist-infra:bootstrap-tokens (components/claims_crd.py; docs/machines.md tells operators to bind
    them): claim, join, relabel, refresh, leave and release all go through, and it may do nothing
    near that."""
    from components.claims_crd import BOOTSTRAP_TOKENS_ROLE, MACHINE_PROVIDER_ROLE, MachineClaimsCRD
    from providers import kube
    from providers.machine.node_labels import advertise, relabel
    from tests.cluster.k8s_support import apply, can, rendered

    apply(
        crd,
        [
            m
            for m in rendered(lambda: MachineClaimsCRD("machine-claims"))
            if m["kind"] != "CustomResourceDefinition"
        ],
    )
    namespace = crd.namespace("deploy")
    crd.core.create_namespaced_service_account(namespace, {"metadata": {"name": "deployer"}})
    subject = [{"kind": "ServiceAccount", "name": "deployer", "namespace": namespace}]
    rbac = k8s.RbacAuthorizationV1Api(crd.api)
    binding = f"deployer-{namespace}"
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": MACHINE_PROVIDER_ROLE,
            },
            "subjects": subject,
        }
    )
    rbac.create_namespaced_role_binding(
        "kube-system",
        {
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": BOOTSTRAP_TOKENS_ROLE,
            },
            "subjects": subject,
        },
    )
    fleet_rbac("kura-ovh")  # the node bootstrap bindings (the stack applies them, not this identity)
    user = f"system:serviceaccount:{namespace}:deployer"
    wait_until(
        "the authorizer to see the bindings",
        lambda: (
            can(crd, user, "list", "machineclaims", group=CLAIM_GROUP)
            and can(crd, user, "create", "secrets", namespace="kube-system")
        ),
    )
    kubeconfig = service_account_kubeconfig(crd, namespace, "deployer")
    try:
        claims, machines = sim.claims(kubeconfig=kubeconfig), sim.machines(kubeconfig=kubeconfig)
        claim, machine = sim.adopt(
            "kura-ovh", 0, claims=claims, machines=machines, claim={"api_server": crd.api_server}
        )
        assert claim["record"] == "cluster" and machine["node_registered"] is True
        node = machine["node_name"]
        api = kube.api_client(kubeconfig)
        # NodeLabels' edit, and what refresh and import read.
        assert relabel(
            api, node, old_labels={}, new_labels={"tuist.dev/tier": "gold"}, old_taints=[], new_taints=[]
        )
        assert crd.core.read_node(node).metadata.labels["tuist.dev/tier"] == "gold"
        # NodeLabels' extended resources (the egress budget), through the status subresource.
        assert advertise(api, node, old={}, new={"tuist.dev/egress-mbps": "1000"})
        assert crd.core.read_node(node).status.allocatable["tuist.dev/egress-mbps"] == "1k"
        assert machines.read(f"ovh:{machine['box_id']}", machine).id == f"ovh:{machine['box_id']}"
        assert claims.read(f"ovh:{claim['box_id']}", claim).id == f"ovh:{claim['box_id']}"
        k8s.CoreV1Api(api).list_node()
        sim.destroy(claim, machine, claims=claims, machines=machines)
        assert node not in {n.metadata.name for n in crd.core.list_node().items}
        assert record.get("ovh", claim["box_id"]) is None

        never = [
            ("get", "secrets", "kube-system", "", None),  # it writes bootstrap tokens, never reads them
            ("list", "secrets", "kube-system", "", None),
            ("create", "secrets", "default", "", None),
            ("update", "machineclaims", None, CLAIM_GROUP, None),  # spec is write-once
            ("patch", "machineclaims", None, CLAIM_GROUP, None),
            ("create", "pods", "default", "", None),
            ("delete", "persistentvolumes", None, "", None),
            ("update", "nodes", None, "", "status"),
            ("delete", "namespaces", None, "", None),
            ("create", "clusterrolebindings", None, "rbac.authorization.k8s.io", None),
        ]
        allowed = [
            c for c in never if can(crd, user, c[0], c[1], namespace=c[2], group=c[3], subresource=c[4])
        ]
        assert not allowed, allowed
    finally:
        rbac.delete_cluster_role_binding(binding)
        rbac.delete_namespaced_role_binding(binding, "kube-system")
        crd.delete_namespace(namespace)
