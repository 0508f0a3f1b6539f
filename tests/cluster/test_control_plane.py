"""The control plane of scripts/cluster.sh: built from k8s.io/kubernetes v1.34.2, configured as a
production cluster is for joining nodes, and started and stopped cleanly."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

from kubernetes import client as k8s

from tests.support.cluster import CLUSTER_SH, KubeCluster, start_cluster, stop_cluster, wait_until


def test_the_api_server_serves_v1_34_2_on_loopback(kube_cluster: KubeCluster):
    assert kube_cluster.api_server.startswith("https://127.0.0.1:")
    assert kube_cluster.kubectl("get", "--raw", "/readyz").stdout == "ok"
    version = k8s.VersionApi(kube_cluster.api).get_code()
    assert (version.git_version, version.major, version.minor) == ("v1.34.2", "1", "34")


def test_authorization_is_node_then_rbac(kube_cluster: KubeCluster):
    node = ("--as=system:node:some-node", "--as-group=system:nodes")
    # The Node authorizer lets a node register itself; RBAC binds nothing to system:nodes.
    assert (
        kube_cluster.kubectl("auth", "can-i", "create", "nodes", *node, check=False).stdout.strip() == "yes"
    )
    # A secret no pod of the node mounts: the Node authorizer refuses, and no RBAC role allows it.
    denied = kube_cluster.kubectl("auth", "can-i", "get", "secrets/x", "-n", "default", *node, check=False)
    assert denied.stdout.strip() == "no - no relationship found between node 'some-node' and this object"
    sa = kube_cluster.kubectl(
        "auth", "can-i", "list", "pods", "--as=system:serviceaccount:default:default", check=False
    )
    assert sa.stdout.strip() == "no"


def test_the_api_server_prefers_a_kubelets_internal_ip(kube_cluster: KubeCluster):
    # Seed 001: logs and exec on nodes with no ExternalIP and an unresolvable hostname.
    pid = (kube_cluster.dir / "pids" / "kube-apiserver.pid").read_text().strip()
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname" in argv
    assert b"--authorization-mode=Node,RBAC" in argv and b"--enable-admission-plugins=NodeRestriction" in argv


def test_the_bootstrapsigner_signs_cluster_info_for_a_signing_token(kube_cluster: KubeCluster):
    core = kube_cluster.core
    core.create_namespaced_secret(
        "kube-system",
        k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name="bootstrap-token-sign01"),
            type="bootstrap.kubernetes.io/token",
            string_data={
                "token-id": "sign01",
                "token-secret": "0123456789abcdef",
                "usage-bootstrap-signing": "true",
            },
        ),
    )
    info = wait_until(
        "cluster-info signed for token sign01",
        lambda: (
            "jws-kubeconfig-sign01"
            in (core.read_namespaced_config_map("cluster-info", "kube-public").data or {})
        ),
        timeout=30,
    )
    assert info


def test_the_tokencleaner_deletes_expired_bootstrap_tokens(kube_cluster: KubeCluster):
    expired = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    core = kube_cluster.core
    core.create_namespaced_secret(
        "kube-system",
        k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name="bootstrap-token-old001"),
            type="bootstrap.kubernetes.io/token",
            string_data={"token-id": "old001", "token-secret": "0123456789abcdef", "expiration": expired},
        ),
    )

    def gone() -> bool:
        try:
            core.read_namespaced_secret("bootstrap-token-old001", "kube-system")
        except k8s.ApiException as error:
            return error.status == 404
        return False

    wait_until("the expired token's Secret to be deleted", gone, timeout=30)


def test_a_second_cluster_runs_beside_the_first_and_stop_leaves_nothing(
    kube_cluster: KubeCluster, tmp_path: Path
):
    second = start_cluster(tmp_path / "second")
    try:
        assert second.api_server != kube_cluster.api_server
        assert second.kubectl("get", "--raw", "/readyz").stdout == "ok"
        status = subprocess.run(
            ["bash", str(CLUSTER_SH), "status", "--dir", str(second.dir)],
            capture_output=True,
            text=True,
            check=True,
        )
        for component in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            assert f"{component} " in status.stdout and "running (pid" in status.stdout
        pids = [int(p.read_text()) for p in (second.dir / "pids").glob("*.pid")]
        assert len(pids) == 4
    finally:
        stop_cluster(second.dir)
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists(), f"pid {pid} outlived scripts/cluster.sh stop"
    stopped = subprocess.run(
        ["bash", str(CLUSTER_SH), "status", "--dir", str(second.dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert stopped.returncode == 1 and "kube-apiserver             stopped" in stopped.stdout
    # The first cluster never noticed.
    assert kube_cluster.kubectl("get", "--raw", "/readyz").stdout == "ok"
