"""providers/kube.py (and the NodeLabels relabel) against the real control plane of the session
(tests/support/cluster.py): bootstrap tokens the apiserver's authenticator accepts, and a release as
the machine provider runs it: cordon, drain through the Eviction API with a PodDisruptionBudget that
blocks and then allows, delete the Node, delete the claims of its node-local volumes. Nodes are
kubelet stand-ins that joined through TLS bootstrap; their pods run and terminate as a kubelet's do.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from providers import kube
from providers.machine.node_labels import NodeLabelsProvider, advertise, relabel
from providers.machine.record import ProcessClaimRecord
from tests.providers.test_machine_units import FakeSettings, configured
from tests.support.cluster import KubeCluster, Kubelet, node_ready, wait_until

FLEET = "kube-tests"


@pytest.fixture
def api(kube_cluster: KubeCluster) -> k8s.ApiClient:
    """The provider's client, built the way it builds it: from the kubeconfig secret's text."""
    return kube.api_client(kube_cluster.kubeconfig.read_text())


def token_client(cluster: KubeCluster, token: str) -> k8s.ApiClient:
    configuration = k8s.Configuration()
    configuration.host = cluster.api_server
    ca = cluster.dir / "ca-for-tokens.crt"
    ca.write_text(cluster.ca_pem)
    configuration.ssl_ca_cert = str(ca)
    configuration.api_key = {"BearerToken": token}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    return k8s.ApiClient(configuration)


def who_am_i(cluster: KubeCluster, token: str) -> tuple[str, list[str]]:
    review = k8s.AuthenticationV1Api(token_client(cluster, token)).create_self_subject_review(
        k8s.V1SelfSubjectReview()
    )
    info = review.status.user_info
    return info.username, sorted(info.groups)


# --- bootstrap tokens ---------------------------------------------------------------------------------


def test_a_bootstrap_token_authenticates_into_its_fleets_group_only_until_it_expires(
    kube_cluster: KubeCluster, api: k8s.ApiClient
) -> None:
    token = kube.BootstrapToken.generate()
    kube.create_bootstrap_token(api, token, fleet=FLEET, node_name="kube-tests-n1")
    secret = kube_cluster.core.read_namespaced_secret(token.secret_name, "kube-system")
    data = {k: base64.b64decode(v).decode() for k, v in secret.data.items()}
    assert secret.type == "bootstrap.kubernetes.io/token"
    assert secret.metadata.labels == {"app.kubernetes.io/managed-by": "tuist-infra", "tuist.dev/fleet": FLEET}
    # Authentication only: never a signing token for cluster-info.
    assert sorted(data) == [
        "auth-extra-groups",
        "description",
        "expiration",
        "token-id",
        "token-secret",
        "usage-bootstrap-authentication",
    ]
    expires = dt.datetime.strptime(data["expiration"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    assert abs((expires - dt.datetime.now(dt.UTC)) - dt.timedelta(hours=1)) < dt.timedelta(minutes=1)
    assert token.secret not in repr(token)

    # The apiserver's bootstrap-token authenticator: the box is system:bootstrap:<id>, in its fleet's
    # group (the one components/node_bootstrap.py binds), and in no other fleet's.
    user, groups = who_am_i(kube_cluster, token.value)
    assert user == f"system:bootstrap:{token.id}"
    assert groups == sorted(["system:authenticated", "system:bootstrappers", kube.bootstrap_group(FLEET)])
    assert kube.bootstrap_group(FLEET) == "system:bootstrappers:tuist-kube-tests"

    # An expired token (its Secret written an hour and a minute ago) authenticates nobody.
    stale = kube.BootstrapToken.generate()
    kube.create_bootstrap_token(
        api,
        stale,
        fleet=FLEET,
        node_name="kube-tests-n2",
        now=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=61),
    )
    with pytest.raises(k8s.ApiException) as refused:
        who_am_i(kube_cluster, stale.value)
    assert refused.value.status == 401


def test_generated_tokens_have_the_bootstrap_format() -> None:
    values = {kube.BootstrapToken.generate().value for _ in range(20)}
    assert len(values) == 20
    assert all(re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", v) for v in values)


def test_a_second_token_for_the_same_id_is_refused_not_overwritten(api: k8s.ApiClient) -> None:
    token = kube.BootstrapToken.generate()
    kube.create_bootstrap_token(api, token, fleet=FLEET, node_name="kube-tests-n3")
    with pytest.raises(
        kube.KubeError, match=rf"^create Secret kube-system/{token.secret_name} failed \(HTTP 409\)"
    ):
        kube.create_bootstrap_token(api, token, fleet=FLEET, node_name="kube-tests-n3")


# --- release: cordon, drain, delete ---------------------------------------------------------------------


def pod(name: str, node: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}],
            "containers": [{"name": "app", "image": "ghcr.io/tuist/kura:0.10.5"}],
        },
    }


def ready(cluster: KubeCluster, namespace: str, name: str) -> bool:
    try:
        found = cluster.core.read_namespaced_pod(name, namespace)
    except k8s.ApiException:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in found.status.conditions or [])


def gone(cluster: KubeCluster, namespace: str, name: str) -> bool:
    try:
        cluster.core.read_namespaced_pod(name, namespace)
    except k8s.ApiException as error:
        return error.status == 404
    return False


def local_volume(name: str, storage_class: str, node: str, namespace: str, claim: str) -> dict[str, Any]:
    """A node-local PersistentVolume pre-bound to `claim`, as a local provisioner leaves it."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "50Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "local": {"path": "/data/kura"},
            "claimRef": {"namespace": namespace, "name": claim},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                }
            },
        },
    }


def claim(name: str, storage_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": "50Gi"}},
        },
    }


@pytest.fixture
def two_nodes(join: Callable[..., Kubelet]) -> Iterator[tuple[str, str]]:
    join("kube-leaving-1", fleet=FLEET)
    join("kube-staying-1", fleet=FLEET)
    yield "kube-leaving-1", "kube-staying-1"


def test_release_cordons_drains_through_a_budget_and_deletes_the_node_and_its_local_claims(
    kube_cluster: KubeCluster,
    api: k8s.ApiClient,
    namespace: str,
    two_nodes: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    leaving, staying = two_nodes
    core, apps, policy = kube_cluster.core, k8s.AppsV1Api(kube_cluster.api), k8s.PolicyV1Api(kube_cluster.api)
    # Kura's one copy on the leaving box, guarded by a budget that wants one Ready at all times.
    core.create_namespaced_pod(namespace, pod("kura-0", leaving, {"app": "kura"}))
    policy.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "kura"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "kura"}}},
        },
    )
    # A DaemonSet's pod on the box: its controller would put it straight back, so drain leaves it.
    apps.create_namespaced_daemon_set(
        namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "demux"},
            "spec": {
                "selector": {"matchLabels": {"app": "demux"}},
                "template": {
                    "metadata": {"labels": {"app": "demux"}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": leaving},
                        "containers": [{"name": "nginx", "image": "nginx:1.27"}],
                    },
                },
            },
        },
    )
    # Its node-local claims (and ones that must stay: another node's, and a network volume's).
    for pv, storage_class, node, pvc in (
        ("kube-pv-a", "scw-local-nvme", leaving, "data-kura-0"),
        ("kube-pv-b", "local-path", leaving, "cache-kura-0"),
        ("kube-pv-c", "scw-local-nvme", staying, "data-kura-1"),
        ("kube-pv-d", "ssd-network", leaving, "remote"),
    ):
        core.create_persistent_volume(local_volume(f"{pv}-{namespace}", storage_class, node, namespace, pvc))
        core.create_namespaced_persistent_volume_claim(namespace, claim(pvc, storage_class))
    wait_until("kura-0 Ready", lambda: ready(kube_cluster, namespace, "kura-0"))
    wait_until(
        "the DaemonSet's pod Ready",
        lambda: any(
            ready(kube_cluster, namespace, p.metadata.name)
            for p in core.list_namespaced_pod(namespace, label_selector="app=demux").items
        ),
    )
    wait_until(
        "every claim Bound",
        lambda: all(
            c.status.phase == "Bound" for c in core.list_namespaced_persistent_volume_claim(namespace).items
        ),
    )
    wait_until(
        "the budget to count kura-0",
        lambda: policy.read_namespaced_pod_disruption_budget("kura", namespace).status.current_healthy == 1,
    )

    assert kube.cordon(api, leaving) is True
    assert core.read_node(leaving).spec.unschedulable is True
    # What a leave wanted back does (MachineProvider.update): schedulable again. Then on with the leave.
    assert kube.uncordon(api, leaving) is True
    assert not core.read_node(leaving).spec.unschedulable  # false is left out
    assert kube.cordon(api, leaving) is True

    # While the budget says no, drain keeps asking; a copy on the other box lets it go.
    evictions: list[str] = []
    original = k8s.CoreV1Api.create_namespaced_pod_eviction

    def counted(self: k8s.CoreV1Api, name: str, *args: Any, **kwargs: Any) -> Any:
        evictions.append(name)
        return original(self, name, *args, **kwargs)

    monkeypatch.setattr(k8s.CoreV1Api, "create_namespaced_pod_eviction", counted)

    def replacement_after_two_refusals() -> None:
        deadline = time.monotonic() + 60
        while len(evictions) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        core.create_namespaced_pod(namespace, pod("kura-1", staying, {"app": "kura"}))

    helper = threading.Thread(target=replacement_after_two_refusals)
    helper.start()
    try:
        evicted = kube.drain(api, leaving, timeout=120, poll_interval=0.5)
    finally:
        helper.join()
    assert evicted == [f"{namespace}/kura-0"]
    assert len(evictions) >= 3, "the budget never refused an eviction: the test proves nothing"
    assert gone(kube_cluster, namespace, "kura-0")
    left = [
        p.metadata.name
        for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={leaving}").items
    ]
    assert len(left) == 1 and left[0].startswith("demux-"), left

    assert kube.delete_node(api, leaving) is True
    wait_until(f"Node {leaving} gone", lambda: not kube.node_exists(api, leaving))
    deleted = kube.delete_node_local_pvcs(api, leaving)
    assert deleted == [f"{namespace}/cache-kura-0", f"{namespace}/data-kura-0"]
    wait_until(
        "the two claims gone",
        lambda: (
            {c.metadata.name for c in core.list_namespaced_persistent_volume_claim(namespace).items}
            == {"data-kura-1", "remote"}
        ),
    )

    # A retried release converges: everything is already gone.
    assert kube.cordon(api, leaving) is False
    assert kube.uncordon(api, leaving) is False
    assert kube.delete_node(api, leaving) is False
    assert kube.delete_node_local_pvcs(api, leaving) == []
    for pv in ("kube-pv-a", "kube-pv-b", "kube-pv-c", "kube-pv-d"):
        core.delete_persistent_volume(f"{pv}-{namespace}")


def test_drain_timeout_names_the_pods_the_budget_keeps(
    kube_cluster: KubeCluster, api: k8s.ApiClient, namespace: str, join: Callable[..., Kubelet]
) -> None:
    join("kube-stuck-1", fleet=FLEET)
    kube_cluster.core.create_namespaced_pod(namespace, pod("kura-0", "kube-stuck-1", {"app": "kura"}))
    policy = k8s.PolicyV1Api(kube_cluster.api)
    policy.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "kura"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "kura"}}},
        },
    )
    wait_until(
        "the budget to count kura-0",
        lambda: policy.read_namespaced_pod_disruption_budget("kura", namespace).status.current_healthy == 1,
    )
    with pytest.raises(
        kube.KubeError,
        match=rf"^drain of Node kube-stuck-1 timed out after 3s; still running: {namespace}/kura-0$",
    ):
        kube.drain(api, "kube-stuck-1", timeout=3, poll_interval=0.5)
    assert ready(kube_cluster, namespace, "kura-0")


@contextlib.contextmanager
def node_without_kubelet(
    cluster: KubeCluster, namespace: str, name: str, ready: str, reason: str
) -> Iterator[k8s.CoreV1Api]:
    """A Node object with no kubelet behind it (its Ready condition as given) running pod kura-0:
    nothing will ever confirm that pod's end once it is evicted."""
    core = cluster.core
    core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=name)))
    try:
        condition = {"type": "Ready", "status": ready, "reason": reason}
        core.patch_node_status(name, {"status": {"conditions": [condition]}})
        core.create_namespaced_pod(namespace, pod("kura-0", name, {"app": "kura"}))
        yield core
    finally:
        core.delete_namespaced_pod("kura-0", namespace, grace_period_seconds=0)
        core.delete_node(name)


def test_drain_of_a_dead_node_stops_waiting_for_pods_no_kubelet_will_ever_confirm(
    kube_cluster: KubeCluster, api: k8s.ApiClient, namespace: str
) -> None:
    # A box that died: its Node is there, its kubelet stopped reporting (Ready Unknown), its pods
    # stay Terminating once evicted. Without a cut-off the drain times out on every `pulumi up`, and
    # the dead box is never released.
    with node_without_kubelet(kube_cluster, namespace, "kube-dead-1", "Unknown", "Lost") as core:
        evicted = kube.drain(api, "kube-dead-1", timeout=60, poll_interval=0.5)

        assert evicted == [f"{namespace}/kura-0"]
        left = core.read_namespaced_pod("kura-0", namespace)
        assert left.metadata.deletion_timestamp is not None  # Terminating, as on a real dead box


def test_a_drain_waits_for_a_terminating_pod_while_the_kubelet_still_reports(
    kube_cluster: KubeCluster, api: k8s.ApiClient, namespace: str
) -> None:
    # The same pod on a Node whose kubelet reports (Ready True): its end will be confirmed, so it is
    # waited for, as before.
    waited = rf"timed out after 8s; still running: {namespace}/kura-0$"
    with (
        node_without_kubelet(kube_cluster, namespace, "kube-alive-1", "True", "KubeletReady"),
        pytest.raises(kube.KubeError, match=waited),
    ):
        kube.drain(api, "kube-alive-1", timeout=8, poll_interval=0.5)


def test_relabel_moves_the_fleets_labels_and_taints_and_keeps_everyone_elses(
    kube_cluster: KubeCluster, api: k8s.ApiClient, join: Callable[..., Kubelet]
) -> None:
    join(
        "kube-relabel-1",
        fleet=FLEET,
        labels={"tuist.dev/tier": "silver", "node.cluster.x-k8s.io/pool": "kura-ovh"},
        taints=["tuist.dev/kura-cache=true:NoSchedule"],
    )
    # Someone else's label and taint (an operator's), and a cordon.
    node = kube_cluster.core.read_node("kube-relabel-1")
    others = [*(node.spec.taints or []), {"key": "example.com/maintenance", "effect": "NoSchedule"}]
    kube_cluster.core.patch_node(
        "kube-relabel-1", {"metadata": {"labels": {"example.com/rack": "r1"}}, "spec": {"taints": others}}
    )
    assert kube.cordon(api, "kube-relabel-1")

    assert relabel(
        api,
        "kube-relabel-1",
        old_labels={"tuist.dev/tier": "silver", "node.cluster.x-k8s.io/pool": "kura-ovh"},
        new_labels={"tuist.dev/zone": "a", "node.cluster.x-k8s.io/pool": "kura-ovh"},
        old_taints=[{"key": "tuist.dev/kura-cache", "value": "true", "effect": "NoSchedule"}],
        new_taints=[{"key": "tuist.dev/kura", "value": "", "effect": "NoExecute"}],
    )
    node = kube_cluster.core.read_node("kube-relabel-1")
    labels = node.metadata.labels
    assert "tuist.dev/tier" not in labels
    assert (labels["tuist.dev/zone"], labels["example.com/rack"]) == ("a", "r1")
    assert labels["kubernetes.io/hostname"] == "kube-relabel-1"  # the kubelet's own
    taints = sorted((t.key, t.value, t.effect) for t in node.spec.taints)
    assert ("tuist.dev/kura-cache", "true", "NoSchedule") not in taints
    assert ("tuist.dev/kura", None, "NoExecute") in taints
    assert ("example.com/maintenance", None, "NoSchedule") in taints
    assert node.spec.unschedulable is True
    # A Node that is not there (yet): nothing to do, and said so.
    assert relabel(api, "kube-missing-1", old_labels={}, new_labels={}, old_taints=[], new_taints=[]) is False


def test_advertise_gives_the_node_its_egress_budget_the_kubelet_keeps_and_the_scheduler_counts(
    kube_cluster: KubeCluster, api: k8s.ApiClient, join: Callable[..., Kubelet]
) -> None:
    """Kura pods request their region's egress floor of tuist.dev/egress-mbps: without a Node that
    advertises it, every one of them stays Pending."""
    join("kube-egress-1", fleet=FLEET, labels={"node.cluster.x-k8s.io/pool": "kura-ovh"})
    egress = "tuist.dev/egress-mbps"
    assert advertise(api, "kube-egress-1", old={}, new={egress: "1000"})
    node = kube_cluster.core.read_node("kube-egress-1")
    # (The apiserver keeps quantities in canonical form: 1000 is "1k".)
    assert (node.status.capacity[egress], node.status.allocatable[egress]) == ("1k", "1k")
    # The kubelet's next status post keeps it (it manages cpu, memory, pods; not this): make it post by
    # marking the Node's Ready condition as the node controller would, and wait for its answer.
    kube_cluster.core.patch_node_status(
        "kube-egress-1",
        {"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]}},
    )
    wait_until("the kubelet's status post", lambda: node_ready(kube_cluster, "kube-egress-1"), timeout=90)
    assert kube_cluster.core.read_node("kube-egress-1").status.allocatable[egress] == "1k"

    # The scheduler places pods against it: 600 + 600 does not fit in 1000.
    namespace = kube_cluster.namespace("egress")

    def pod(name: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "kube-egress-1"},
                "containers": [
                    {
                        "name": "c",
                        "image": "kura:test",
                        "resources": {"requests": {egress: "600"}, "limits": {egress: "600"}},
                    }
                ],
            },
        }

    kube_cluster.core.create_namespaced_pod(namespace, pod("first"))
    wait_until(
        "the first pod bound",
        lambda: kube_cluster.core.read_namespaced_pod("first", namespace).spec.node_name,
    )
    kube_cluster.core.create_namespaced_pod(namespace, pod("second"))

    def unschedulable() -> str | None:
        status = kube_cluster.core.read_namespaced_pod("second", namespace).status
        return next((c.message for c in status.conditions or [] if c.reason == "Unschedulable"), None)

    message = wait_until("the second pod refused", unschedulable)
    assert f"Insufficient {egress}" in str(message)
    assert kube_cluster.core.read_namespaced_pod("second", namespace).spec.node_name is None

    # A budget the fleet no longer has is taken back; a Node that is not there (yet) is said so.
    assert advertise(api, "kube-egress-1", old={egress: "1000"}, new={})
    assert egress not in (kube_cluster.core.read_node("kube-egress-1").status.capacity or {})
    assert advertise(api, "kube-missing-1", old={}, new={egress: "1000"}) is False
    kube_cluster.delete_namespace(namespace)


def test_a_refresh_finds_a_node_registered_again_without_its_sets_and_the_next_up_applies_them(
    kube_cluster: KubeCluster,
    api: k8s.ApiClient,
    join: Callable[..., Kubelet],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Node deleted and registered again (the machine joined again after a refresh dropped it, or its
    kubelet started on an empty state directory) carries what it registered with and no extended
    resources: NodeLabels' inputs did not change, so only its refresh can see it."""
    caplog.set_level(logging.INFO)
    egress, pool = "tuist.dev/egress-mbps", "node.cluster.x-k8s.io/pool"
    join(
        "kube-again-1",
        fleet=FLEET,
        labels={pool: "kura-ovh"},
        taints=["tuist.dev/kura-cache=true:NoSchedule"],
    )
    provider = configured(NodeLabelsProvider, FakeSettings(ProcessClaimRecord({}), kube=api))
    props = {
        "node_name": "kube-again-1",
        "labels": {pool: "kura-ovh", "tuist.dev/zone": "a"},
        "taints": [{"key": "tuist.dev/kura-cache", "value": "true", "effect": "NoSchedule"}],
        "capacity": {egress: "1000"},
        "api_server": kube_cluster.api_server,
        "resource_name": "kura-ovh-0-labels",
        "urn": None,
    }
    created = provider.create(props).outs
    assert created is not None and created["applied"] is True
    read = provider.read("kube-again-1", created)
    assert read.outs == created and not provider.diff("kube-again-1", read.outs, props).changes

    # What registering again leaves: the registration's labels and taints, no extended resource.
    assert advertise(api, "kube-again-1", old={egress: "1000"}, new={})
    kube_cluster.core.patch_node("kube-again-1", {"metadata": {"labels": {"tuist.dev/zone": None}}})
    read = provider.read("kube-again-1", created)
    assert read.outs is not None and (read.outs["applied"], read.outs["drift"]) == (False, True)
    assert (
        "kura-ovh-0-labels: Node kube-again-1 lacks label tuist.dev/zone=a, extended resource "
        f"{egress}=1000 (registered again?): `pulumi up` applies its labels, taints and extended "
        "resources again"
    ) in caplog.text
    diff = provider.diff("kube-again-1", read.outs, props)
    assert (diff.changes, diff.replaces) == (True, [])
    updated = provider.update("kube-again-1", read.outs, props).outs
    assert updated is not None and updated["applied"] is True and "drift" not in updated
    node = kube_cluster.core.read_node("kube-again-1")
    assert (node.metadata.labels["tuist.dev/zone"], node.status.capacity[egress]) == ("a", "1k")
    assert provider.read("kube-again-1", updated).outs == updated

    # No Node at all is the machine's to find: its extended resources are due once it registers, and a
    # Mac, which advertises none (and whose agent may register no Node), has nothing to catch up on.
    gone = provider.read("kube-missing-2", {**created, "node_name": "kube-missing-2"}).outs
    assert gone is not None and gone["applied"] is False and "drift" not in gone
    assert provider.diff("kube-missing-2", gone, {**props, "node_name": "kube-missing-2"}).changes
    mac = {**props, "node_name": "kube-missing-2", "capacity": {}}
    assert not provider.diff("kube-missing-2", {**gone, "capacity": {}}, mac).changes


# --- the kubeconfig secret ------------------------------------------------------------------------------


def test_kubeconfig_problems_never_quote_it() -> None:
    secret = "not: [valid yaml with token-abc"
    with pytest.raises(kube.KubeconfigError) as caught:
        kube.api_client(secret)
    assert str(caught.value) == "the kubeconfig secret is not YAML"
    with pytest.raises(kube.KubeconfigError, match=r"^the kubeconfig secret has no clusters$"):
        kube.api_client("users: [{name: u, user: {token: sekrit}}]\n")


def test_a_call_to_an_api_server_that_never_answers_times_out_after_one_retry() -> None:
    # A server that accepts and never answers (a half-open connection to a dead API server). The
    # client's default is to wait forever; urllib3's default retries would wait four read timeouts.
    import socket
    import threading

    accepted: list[socket.socket] = []
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        silent.settimeout(0.2)

        def accept() -> None:
            while True:
                try:
                    accepted.append(silent.accept()[0])
                except TimeoutError:
                    continue
                except OSError:
                    return

        threading.Thread(target=accept, daemon=True).start()
        server = f"http://127.0.0.1:{silent.getsockname()[1]}"
        kubeconfig = yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
        api = kube.api_client(kubeconfig, timeout=(1.0, 0.5))
        # Unbounded, this never returns (and the test's own timeout fails it).
        with pytest.raises(Exception) as raised:
            k8s.CoreV1Api(api).list_node()
        silent.close()
    for connection in accepted:
        connection.close()
    assert len(accepted) == 1 + kube.REQUEST_RETRIES == 2
    error = raised.value
    assert type(error).__module__.startswith("urllib3."), error
    from providers.machine.fsm import Error, classify

    # Worth retrying, as any other transport trouble is.
    assert classify(error) == Error("KubeUnreachable", f"{type(error).__name__}: {error}")


def test_the_join_trusts_the_ca_the_kubeconfig_names(kube_cluster: KubeCluster) -> None:
    text = kube_cluster.kubeconfig.read_text()
    assert kube.cluster_ca_pem(text) == kube_cluster.ca_pem
    doc = yaml.safe_load(text)
    del doc["clusters"][0]["cluster"]["certificate-authority-data"]
    with pytest.raises(kube.KubeconfigError, match="has no certificate-authority-data"):
        kube.cluster_ca_pem(yaml.safe_dump(doc))
