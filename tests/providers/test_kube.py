"""providers/kube.py through the real kubernetes client over real HTTP, against a small in-process API
server that keeps Nodes, Pods, PVs, PVCs and Secrets and records every request. (No kube-apiserver
binary is available to the tests; the fake answers in the API's own shapes and status codes.)"""

from __future__ import annotations

import base64
import datetime as dt
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from providers import kube

CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIBdevtest\n-----END CERTIFICATE-----\n"


@dataclass
class FakeKube:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    pvs: list[dict[str, Any]] = field(default_factory=list)
    pvcs: set[str] = field(default_factory=set)
    secrets: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    busy_pdb: dict[str, int] = field(default_factory=dict)  # pod -> how many evictions answer 429
    url: str = ""

    def kubeconfig(self) -> str:
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": self.url,
                            "certificate-authority-data": base64.b64encode(CA_PEM.encode()).decode(),
                        },
                    }
                ],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
                "users": [{"name": "u", "user": {"token": "kube-admin-token-secret"}}],
            }
        )

    def writes(self) -> list[tuple[str, str, Any]]:
        return [r for r in self.requests if r[0] != "GET"]

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(environ)
        body = json.loads(request.get_data(as_text=True) or "null")
        path = request.full_path.rstrip("?")
        self.requests.append((request.method, path, body))
        status, answer = self.handle(request.method, request.path, request.args, body)
        return Response(json.dumps(answer), status=status, content_type="application/json")(
            environ, start_response
        )

    def handle(self, method: str, path: str, args: Any, body: Any) -> tuple[int, Any]:
        parts = path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
            name = parts[3]
            if name not in self.nodes:
                return 404, {
                    "kind": "Status",
                    "code": 404,
                    "reason": "NotFound",
                    "message": f'nodes "{name}" not found',
                }
            if method == "DELETE":
                del self.nodes[name]
                return 200, {"kind": "Status", "status": "Success"}
            if method == "PATCH":
                node = self.nodes[name]
                labels = node["metadata"].setdefault("labels", {})
                for key, value in ((body.get("metadata") or {}).get("labels") or {}).items():
                    if value is None:
                        labels.pop(key, None)
                    else:
                        labels[key] = value
                node["spec"].update(body.get("spec") or {})
            return 200, self.nodes[name]
        if path == "/api/v1/pods":
            node = args.get("fieldSelector", "").removeprefix("spec.nodeName=")
            items = [p for p in self.pods if p["spec"]["nodeName"] == node]
            return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        if parts[-1] == "eviction" and method == "POST":
            namespace, name = parts[3], parts[5]
            if self.busy_pdb.get(name, 0) > 0:
                self.busy_pdb[name] -= 1
                return 429, {"kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "budget"}
            self.pods = [
                p
                for p in self.pods
                if (p["metadata"]["namespace"], p["metadata"]["name"]) != (namespace, name)
            ]
            return 201, {"kind": "Status", "status": "Success"}
        if path == "/api/v1/persistentvolumes":
            return 200, {
                "kind": "PersistentVolumeList",
                "apiVersion": "v1",
                "metadata": {},
                "items": self.pvs,
            }
        if parts[-2:-1] == ["persistentvolumeclaims"] and method == "DELETE":
            ref = f"{parts[3]}/{parts[5]}"
            if ref not in self.pvcs:
                return 404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": "not found"}
            self.pvcs.discard(ref)
            return 200, {"kind": "Status", "status": "Success"}
        if path == "/api/v1/namespaces/kube-system/secrets" and method == "POST":
            self.secrets[body["metadata"]["name"]] = body
            return 201, body
        return 404, {"kind": "Status", "code": 404, "message": f"no route {method} {path}"}


@pytest.fixture
def cluster() -> Iterator[FakeKube]:
    yield from serve_fake_kube()


def serve_fake_kube() -> Iterator[FakeKube]:
    fake = FakeKube()
    server = make_server("127.0.0.1", 0, fake, threaded=True)
    fake.url = f"http://127.0.0.1:{server.port}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()


def node(
    name: str, *, taints: list[dict[str, str]] | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or []},
    }


def pod(
    namespace: str, name: str, node_name: str, *, owner: str | None = None, mirror: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": namespace, "name": name}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": "x", "uid": "u"}]
    if mirror:
        meta["annotations"] = {kube.MIRROR_POD_ANNOTATION: "abc"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"},
    }


def pv(name: str, storage_class: str, node_name: str, claim: str) -> dict[str, Any]:
    namespace, claim_name = claim.split("/")
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "storageClassName": storage_class,
            "claimRef": {"namespace": namespace, "name": claim_name},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node_name]}
                            ]
                        }
                    ]
                }
            },
        },
    }


def test_bootstrap_token_secret_is_exactly_the_documented_shape(cluster: FakeKube) -> None:
    api = kube.api_client(cluster.kubeconfig())
    token = kube.BootstrapToken(id="abc123", secret="0123456789abcdef")
    now = dt.datetime(2026, 11, 30, 2, 0, tzinfo=dt.UTC)
    kube.create_bootstrap_token(api, token, fleet="kura-ovh", node_name="kura-ovh-ns1", now=now)
    assert cluster.writes() == [
        (
            "POST",
            "/api/v1/namespaces/kube-system/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "labels": {"app.kubernetes.io/managed-by": "tuist-infra", "tuist.dev/fleet": "kura-ovh"},
                    "name": "bootstrap-token-abc123",
                    "namespace": "kube-system",
                },
                "stringData": {
                    "auth-extra-groups": "system:bootstrappers:tuist-kura-ovh",
                    "description": "tuist-infra self-join of kura-ovh-ns1",
                    "expiration": "2026-11-30T03:00:00Z",
                    "token-id": "abc123",
                    "token-secret": "0123456789abcdef",
                    "usage-bootstrap-authentication": "true",
                },
                "type": "bootstrap.kubernetes.io/token",
            },
        )
    ]
    assert "0123456789abcdef" not in repr(token)
    assert token.value == "abc123.0123456789abcdef"


def test_generated_tokens_have_the_bootstrap_format() -> None:
    import re

    values = {kube.BootstrapToken.generate().value for _ in range(20)}
    assert len(values) == 20
    assert all(re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", v) for v in values)


def test_release_cordons_drains_deletes_the_node_and_its_local_claims(cluster: FakeKube) -> None:
    cluster.nodes["n1"] = node("n1")
    cluster.nodes["n2"] = node("n2")
    cluster.pods = [
        pod("kura", "kura-0", "n1", owner="StatefulSet"),
        pod("kube-system", "cilium-x", "n1", owner="DaemonSet"),
        pod("kube-system", "static-n1", "n1", mirror=True),
        pod("kura", "kura-1", "n2", owner="StatefulSet"),
    ]
    cluster.busy_pdb["kura-0"] = 1  # the budget says "not yet" once
    cluster.pvs = [
        pv("pv-a", "scw-local-nvme", "n1", "kura/data-kura-0"),
        pv("pv-b", "local-path", "n1", "kura/cache-kura-0"),
        pv("pv-c", "scw-local-nvme", "n2", "kura/data-kura-1"),
        pv("pv-d", "ssd-network", "n1", "kura/remote"),
    ]
    cluster.pvcs = {"kura/data-kura-0", "kura/cache-kura-0", "kura/data-kura-1", "kura/remote"}
    api = kube.api_client(cluster.kubeconfig())

    assert kube.cordon(api, "n1") is True
    assert kube.drain(api, "n1", timeout=5, poll_interval=0.01) == ["kura/kura-0"]
    assert kube.delete_node(api, "n1") is True
    assert kube.delete_node_local_pvcs(api, "n1") == ["kura/cache-kura-0", "kura/data-kura-0"]

    assert [(m, p) for m, p, _ in cluster.writes()] == [
        ("PATCH", "/api/v1/nodes/n1"),
        ("POST", "/api/v1/namespaces/kura/pods/kura-0/eviction"),  # 429
        ("POST", "/api/v1/namespaces/kura/pods/kura-0/eviction"),
        ("DELETE", "/api/v1/nodes/n1"),
        ("DELETE", "/api/v1/namespaces/kura/persistentvolumeclaims/cache-kura-0"),
        ("DELETE", "/api/v1/namespaces/kura/persistentvolumeclaims/data-kura-0"),
    ]
    assert cluster.writes()[0][2] == {"spec": {"unschedulable": True}}
    assert cluster.writes()[2][2]["metadata"] == {"name": "kura-0", "namespace": "kura"}
    assert ("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", None) in cluster.requests
    assert set(cluster.nodes) == {"n2"}
    assert cluster.pvcs == {"kura/data-kura-1", "kura/remote"}
    # A retried release converges: everything is already gone.
    assert kube.cordon(api, "n1") is False
    assert kube.delete_node(api, "n1") is False
    assert kube.delete_node_local_pvcs(api, "n1") == []


def test_drain_timeout_names_the_pods_left(cluster: FakeKube) -> None:
    cluster.nodes["n1"] = node("n1")
    cluster.pods = [pod("kura", "kura-0", "n1")]
    cluster.busy_pdb["kura-0"] = 10_000
    api = kube.api_client(cluster.kubeconfig())
    with pytest.raises(
        kube.KubeError, match=r"^drain of Node n1 timed out after 0.2s; still running: kura/kura-0$"
    ):
        kube.drain(api, "n1", timeout=0.2, poll_interval=0.02)


def test_relabel_replaces_the_fleets_labels_and_taints_and_keeps_others(cluster: FakeKube) -> None:
    cluster.nodes["n1"] = node(
        "n1",
        labels={"tuist.dev/tier": "silver", "kubernetes.io/hostname": "n1"},
        taints=[
            {"key": "tuist.dev/kura-cache", "value": "true", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        ],
    )
    api = kube.api_client(cluster.kubeconfig())
    assert kube.relabel_node(
        api,
        "n1",
        old_labels={"tuist.dev/tier": "silver"},
        new_labels={"tuist.dev/zone": "a"},
        old_taints=[kube.NodeTaintSpec("tuist.dev/kura-cache", "true", "NoSchedule")],
        new_taints=[kube.NodeTaintSpec("tuist.dev/kura", "", "NoExecute")],
    )
    assert cluster.writes()[-1][2] == {
        "metadata": {"labels": {"tuist.dev/tier": None, "tuist.dev/zone": "a"}},
        "spec": {
            "taints": [
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
                {"key": "tuist.dev/kura", "effect": "NoExecute"},
            ]
        },
    }
    assert cluster.nodes["n1"]["metadata"]["labels"] == {
        "kubernetes.io/hostname": "n1",
        "tuist.dev/zone": "a",
    }
    assert (
        kube.relabel_node(api, "missing", old_labels={}, new_labels={}, old_taints=[], new_taints=[]) is False
    )


def test_kubeconfig_problems_never_quote_it() -> None:
    secret = "not: [valid yaml with token-abc"
    with pytest.raises(kube.KubeconfigError) as caught:
        kube.api_client(secret)
    assert str(caught.value) == "the kubeconfig secret is not YAML"
    with pytest.raises(kube.KubeconfigError, match=r"^the kubeconfig secret has no clusters$"):
        kube.api_client("users: [{name: u, user: {token: sekrit}}]\n")


def test_cluster_ca_comes_from_the_kubeconfig(cluster: FakeKube) -> None:
    assert kube.cluster_ca_pem(cluster.kubeconfig()) == CA_PEM
