"""regional_dns.reconciler against a recorded API: what one pass reads, when it writes, and that a
failed read never changes the records. The real control plane runs it in tests/regional_dns/test_loop.py."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from regional_dns.reconciler import (
    FIELD_MANAGER,
    KUBE_TIMEOUT,
    KubeView,
    Outcome,
    Pass,
    RegionalDns,
    Settings,
    label_selector,
    node_view,
)
from regional_dns.records import NodeAddress, NodeView

HOST = "us-east.staging.kura.tuist.dev"
SETTINGS = Settings(
    region="us-east",
    host=HOST,
    namespace="kura",
    gateway="kura-gateway-us-east",
    node_pool="kura-us-east",
    dnsendpoint="kura-regional-us-east-dns",
)
SELECTOR = {"app.kubernetes.io/component": "gateway", "app.kubernetes.io/instance": "us-east"}
A, B = "198.51.100.1", "198.51.100.2"


def wildcard(*targets: str) -> list[dict[str, Any]]:
    return [{"dnsName": f"*.{HOST}", "recordType": "A", "recordTTL": 60, "targets": list(targets)}]


def v1_node(
    name: str, address: str, *, ready: bool = True, cordoned: bool = False, status: str | None = None
) -> k8s.V1Node:
    """`status` sets the Ready condition's status as it is ("Unknown"); else `ready` does."""
    return k8s.V1Node(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1NodeSpec(unschedulable=cordoned or None),
        status=k8s.V1NodeStatus(
            conditions=[k8s.V1NodeCondition(type="Ready", status=status or ("True" if ready else "False"))],
            addresses=[
                k8s.V1NodeAddress(type="InternalIP", address=address),
                k8s.V1NodeAddress(type="Hostname", address=name),
            ],
        ),
    )


def v1_pod(name: str, node: str, *, ready: bool = True) -> k8s.V1Pod:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, labels=SELECTOR),
        spec=k8s.V1PodSpec(node_name=node, containers=[]),
        status=k8s.V1PodStatus(
            conditions=[k8s.V1PodCondition(type="Ready", status="True" if ready else "False")]
        ),
    )


class RecordedApi:
    """CoreV1Api, AppsV1Api and CustomObjectsApi as the reconciler uses them, in one object."""

    def __init__(self) -> None:
        self.nodes = [v1_node("a", A), v1_node("b", B)]
        self.pods = [v1_pod("gw-a", "a"), v1_pod("gw-b", "b")]
        self.deployment: k8s.V1Deployment | None = k8s.V1Deployment(
            spec=k8s.V1DeploymentSpec(
                selector=k8s.V1LabelSelector(match_labels=SELECTOR), template=k8s.V1PodTemplateSpec()
            )
        )
        self.stored: dict[str, Any] = {"metadata": {"name": SETTINGS.dnsendpoint}}
        self.fail: str | None = None  # the call that raises
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.calls.append((name, args, kwargs))
        if self.fail == name:
            raise k8s.ApiException(status=500, reason="etcdserver: request timed out")

    def read_namespaced_deployment(self, *args: Any, **kwargs: Any) -> k8s.V1Deployment:
        self._call("read_namespaced_deployment", args, kwargs)
        if self.deployment is None:
            raise k8s.ApiException(status=404, reason="Not Found")
        return self.deployment

    def list_namespaced_pod(self, *args: Any, **kwargs: Any) -> k8s.V1PodList:
        self._call("list_namespaced_pod", args, kwargs)
        return k8s.V1PodList(items=self.pods)

    def list_node(self, *args: Any, **kwargs: Any) -> k8s.V1NodeList:
        self._call("list_node", args, kwargs)
        return k8s.V1NodeList(items=self.nodes)

    def get_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self._call("get_namespaced_custom_object", args, kwargs)
        return self.stored

    def patch_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> None:
        self._call("patch_namespaced_custom_object", args, kwargs)
        self.stored = {**self.stored, "spec": args[-1]["spec"]}

    def writes(self) -> list[list[dict[str, Any]]]:
        return [c[1][-1]["spec"]["endpoints"] for c in self.calls if c[0] == "patch_namespaced_custom_object"]


@pytest.fixture
def api() -> RecordedApi:
    return RecordedApi()


def reconciler(api: RecordedApi) -> RegionalDns:
    return RegionalDns(SETTINGS, KubeView(SETTINGS, api, api, api))


def test_one_pass_reads_the_gateways_selector_pods_pool_nodes_and_the_dnsendpoint(api: RecordedApi) -> None:
    reconciler(api).reconcile_once()
    endpoint = ("externaldns.k8s.io", "v1alpha1", "kura", "dnsendpoints", "kura-regional-us-east-dns")
    timeout = {"_request_timeout": KUBE_TIMEOUT}
    assert api.calls[:4] == [
        ("read_namespaced_deployment", ("kura-gateway-us-east", "kura"), timeout),
        (
            "list_namespaced_pod",
            ("kura",),
            {
                "label_selector": "app.kubernetes.io/component=gateway,app.kubernetes.io/instance=us-east",
                **timeout,
            },
        ),
        ("list_node", (), {"label_selector": "node.cluster.x-k8s.io/pool=kura-us-east", **timeout}),
        ("get_namespaced_custom_object", endpoint, timeout),
    ]


def test_the_write_is_a_forced_server_side_apply_of_spec_endpoints_alone(api: RecordedApi) -> None:
    assert reconciler(api).reconcile_once() == Pass(Outcome.WRITTEN, wildcard(A, B))
    [write] = [c for c in api.calls if c[0] == "patch_namespaced_custom_object"]
    assert write == (
        "patch_namespaced_custom_object",
        (
            "externaldns.k8s.io",
            "v1alpha1",
            "kura",
            "dnsendpoints",
            "kura-regional-us-east-dns",
            {
                "apiVersion": "externaldns.k8s.io/v1alpha1",
                "kind": "DNSEndpoint",
                "metadata": {"name": "kura-regional-us-east-dns", "namespace": "kura"},
                "spec": {"endpoints": wildcard(A, B)},
            },
        ),
        {
            "field_manager": FIELD_MANAGER,
            "force": True,
            "_content_type": "application/apply-patch+yaml",
            "_request_timeout": KUBE_TIMEOUT,
        },
    )


def test_the_first_pass_writes_even_unchanged_records_then_only_changes(api: RecordedApi) -> None:
    # The program wrote these once: the first apply makes them the reconciler's (field manager).
    api.stored["spec"] = {"endpoints": wildcard(A, B)}
    running = reconciler(api)
    assert [running.reconcile_once().outcome for _ in range(3)] == [
        Outcome.WRITTEN,
        Outcome.UNCHANGED,
        Outcome.UNCHANGED,
    ]
    api.pods = [v1_pod("gw-a", "a", ready=False), v1_pod("gw-b", "b")]
    assert running.reconcile_once() == Pass(Outcome.WRITTEN, wildcard(B))
    assert api.writes() == [wildcard(A, B), wildcard(B)]


def test_records_edited_by_hand_are_written_back(api: RecordedApi) -> None:
    running = reconciler(api)
    running.reconcile_once()
    api.stored["spec"] = {"endpoints": wildcard("203.0.113.66")}
    assert running.reconcile_once().outcome is Outcome.WRITTEN
    assert api.stored["spec"] == {"endpoints": wildcard(A, B)}


@pytest.mark.parametrize(
    "failing",
    ["read_namespaced_deployment", "list_namespaced_pod", "list_node", "get_namespaced_custom_object"],
)
def test_any_failed_read_keeps_the_records(
    api: RecordedApi, failing: str, caplog: pytest.LogCaptureFixture
) -> None:
    running = reconciler(api)
    running.reconcile_once()
    api.pods, api.fail = [], failing
    with caplog.at_level(logging.WARNING, logger="regional_dns"):
        assert running.reconcile_once() == Pass(Outcome.KEPT, None)
    assert api.writes() == [wildcard(A, B)]
    assert [r.getMessage() for r in caplog.records] == [
        "region us-east: read failed, keeping the public records as they are: "
        "(500)\nReason: etcdserver: request timed out\n"
    ]


def test_a_missing_gateway_deployment_keeps_the_records(api: RecordedApi) -> None:
    api.stored["spec"] = {"endpoints": wildcard(A)}
    api.deployment = None
    assert reconciler(api).reconcile_once() == Pass(Outcome.KEPT, None)
    assert api.writes() == []
    assert api.stored["spec"] == {"endpoints": wildcard(A)}


def test_an_observed_empty_healthy_set_withdraws_the_wildcard_and_alerts(
    api: RecordedApi, caplog: pytest.LogCaptureFixture
) -> None:
    api.nodes = [v1_node("a", A, cordoned=True), v1_node("b", B, ready=False)]
    with caplog.at_level(logging.ERROR, logger="regional_dns"):
        assert reconciler(api).reconcile_once() == Pass(Outcome.WRITTEN, [])
    assert api.stored["spec"] == {"endpoints": []}
    assert [r.getMessage() for r in caplog.records] == [
        f"region us-east: ALERT no gateway serves: *.{HOST} withdrawn "
        "(left out: gw-a on a: node a cordoned; gw-b on b: node b NotReady)"
    ]


def test_a_node_whose_ready_condition_reads_unknown_is_not_ready_and_says_so() -> None:
    assert node_view(v1_node("a", A, status="Unknown")) == NodeView(
        name="a",
        ready=False,
        ready_unknown=True,
        addresses=(NodeAddress("InternalIP", A), NodeAddress("Hostname", "a")),
    )
    assert node_view(v1_node("b", B, ready=False)).ready_unknown is False
    assert node_view(v1_node("c", B)).ready_unknown is False


def test_a_pass_in_which_every_node_reads_unknown_keeps_the_records(
    api: RecordedApi, caplog: pytest.LogCaptureFixture
) -> None:
    """The control plane lost every kubelet at once (an apiserver restart, a firewall mistake): the
    Nodes read Unknown and their gateway pods not Ready, while the gateways serve on. The read
    succeeded, and tells nothing: the records stay, as after a failed read."""
    running = reconciler(api)
    assert running.reconcile_once() == Pass(Outcome.WRITTEN, wildcard(A, B))
    api.nodes = [v1_node("a", A, status="Unknown"), v1_node("b", B, status="Unknown")]
    api.pods = [v1_pod("gw-a", "a", ready=False), v1_pod("gw-b", "b", ready=False)]
    with caplog.at_level(logging.WARNING, logger="regional_dns"):
        assert running.reconcile_once() == Pass(Outcome.KEPT, None)
    assert [r.getMessage() for r in caplog.records] == [
        "region us-east: every Node of pool kura-us-east reads Ready Unknown (the control plane hears "
        "no kubelet: a, b), keeping the public records as they are"
    ]
    assert api.writes() == [wildcard(A, B)]
    assert api.stored["spec"] == {"endpoints": wildcard(A, B)}
    # The kubelets are heard again: the pool is judged as it reads.
    api.nodes = [v1_node("a", A), v1_node("b", B)]
    api.pods = [v1_pod("gw-a", "a"), v1_pod("gw-b", "b")]
    assert running.reconcile_once() == Pass(Outcome.UNCHANGED, wildcard(A, B))


def test_a_first_pass_in_which_every_node_reads_unknown_writes_nothing(api: RecordedApi) -> None:
    api.stored["spec"] = {"endpoints": wildcard(A)}
    api.nodes = [v1_node("a", A, status="Unknown")]
    api.pods = [v1_pod("gw-a", "a", ready=False)]
    assert reconciler(api).reconcile_once() == Pass(Outcome.KEPT, None)
    assert api.writes() == []
    assert api.stored["spec"] == {"endpoints": wildcard(A)}


@pytest.mark.parametrize(
    ("b_status", "b_pod_ready", "expected"),
    [
        # b's kubelet is heard: a's silence is a's, and a is left out.
        ("True", True, Pass(Outcome.WRITTEN, wildcard(B))),
        # b's kubelet says NotReady: the pool is judged, and nothing serves.
        ("False", False, Pass(Outcome.WRITTEN, [])),
    ],
    ids=["one Ready=True", "one Ready=False"],
)
def test_one_node_reading_true_or_false_has_the_pool_judged_as_it_reads(
    api: RecordedApi, b_status: str, b_pod_ready: bool, expected: Pass
) -> None:
    running = reconciler(api)
    running.reconcile_once()
    api.nodes = [v1_node("a", A, status="Unknown"), v1_node("b", B, status=b_status)]
    api.pods = [v1_pod("gw-a", "a", ready=False), v1_pod("gw-b", "b", ready=b_pod_ready)]
    assert running.reconcile_once() == expected
    assert api.writes() == [wildcard(A, B), expected.endpoints]


def test_a_pool_with_no_node_is_judged_not_kept(api: RecordedApi) -> None:
    running = reconciler(api)
    running.reconcile_once()
    api.nodes, api.pods = [], []
    assert running.reconcile_once() == Pass(Outcome.WRITTEN, [])


def test_a_failed_write_is_retried_on_the_next_pass(api: RecordedApi) -> None:
    running = reconciler(api)
    api.fail = "patch_namespaced_custom_object"
    assert running.reconcile_once() == Pass(Outcome.KEPT, wildcard(A, B))
    api.fail = None
    assert running.reconcile_once() == Pass(Outcome.WRITTEN, wildcard(A, B))


def test_run_passes_until_stopped_and_keeps_its_heartbeat(api: RecordedApi, tmp_path: Path) -> None:
    beat = tmp_path / "heartbeat"
    settings = Settings(**{**SETTINGS.__dict__, "refresh_seconds": 0.01, "heartbeat_file": str(beat)})
    stop = threading.Event()

    class StopAfterThree(RecordedApi):
        def list_node(self, *args: Any, **kwargs: Any) -> k8s.V1NodeList:
            if sum(c[0] == "list_node" for c in self.calls) == 2:
                stop.set()
            return super().list_node(*args, **kwargs)

    recorded = StopAfterThree()
    running = RegionalDns(settings, KubeView(settings, recorded, recorded, recorded))
    started = time.time()
    thread = threading.Thread(target=running.run, args=(stop,))
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert sum(c[0] == "list_node" for c in recorded.calls) == 3
    # The last promise: the next pass's wait plus one pass's budget from now.
    assert int(started) + 220 <= int(beat.read_text()) <= time.time() + 221


def test_label_selector_of_match_labels_and_expressions() -> None:
    selector = k8s.V1LabelSelector(
        match_labels={"b": "2", "a": "1"},
        match_expressions=[
            k8s.V1LabelSelectorRequirement(key="tier", operator="In", values=["x", "y"]),
            k8s.V1LabelSelectorRequirement(key="zone", operator="NotIn", values=["z"]),
            k8s.V1LabelSelectorRequirement(key="has", operator="Exists"),
            k8s.V1LabelSelectorRequirement(key="gone", operator="DoesNotExist"),
        ],
    )
    assert label_selector(selector) == "a=1,b=2,tier in (x,y),zone notin (z),has,!gone"


def test_an_empty_selector_is_a_failed_read_not_every_pod() -> None:
    with pytest.raises(ValueError, match="the gateway Deployment's selector is empty"):
        label_selector(k8s.V1LabelSelector())


def test_settings_travel_through_the_environment() -> None:
    settings = Settings(**{**SETTINGS.__dict__, "heartbeat_file": "/run/regional-dns/heartbeat"})
    assert settings.to_env() == {
        "REGION": "us-east",
        "REGION_HOST": HOST,
        "KURA_NAMESPACE": "kura",
        "GATEWAY_DEPLOYMENT": "kura-gateway-us-east",
        "NODE_POOL": "kura-us-east",
        "DNSENDPOINT": "kura-regional-us-east-dns",
        "REFRESH_SECONDS": "30",
        "HEARTBEAT_FILE": "/run/regional-dns/heartbeat",
    }
    assert Settings.from_env(settings.to_env()) == settings


def test_missing_or_bad_settings_are_named() -> None:
    with pytest.raises(
        ValueError, match=r"^environment variable\(s\) GATEWAY_DEPLOYMENT, DNSENDPOINT required$"
    ):
        Settings.from_env(
            {k: v for k, v in SETTINGS.to_env().items() if k not in ("GATEWAY_DEPLOYMENT", "DNSENDPOINT")}
        )
    with pytest.raises(ValueError, match="REFRESH_SECONDS 'soon' is not a positive number of seconds"):
        Settings.from_env({**SETTINGS.to_env(), "REFRESH_SECONDS": "soon"})
