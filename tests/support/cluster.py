"""A real Kubernetes control plane for tests: scripts/cluster.sh in a temporary directory.

Fixtures (register them with `from tests.support.cluster import *` in a conftest, or
`pytest_plugins = ["tests.support.cluster"]` at the root, so a session starts one cluster; under
pytest-xdist each worker is a session of its own):

- `kube_cluster` (session): a `KubeCluster` -- kubeconfig path, admin ApiClient, API server URL, CA
  PEM, `kubectl(...)`, `namespace()` for a fresh namespace -- stopped at the end of the session.
- `namespace` (function): a fresh namespace for one test, deleted afterwards.
- `kubelets` (function): `kubelets.start(name, ...)` starts a kubelet stand-in on the host (its
  own root dir, bootstrap kubeconfig, KubeletConfiguration and /proc files, as a box would give
  it); every one is stopped after the test.
- `fleet_rbac` (session): `fleet_rbac(fleet)` applies exactly what components/node_bootstrap.py
  renders for the fleet, so its kubelets may TLS-bootstrap with the program's own RBAC.
- `join` (function): `join(name, fleet=..., **stand-in options)` makes a bootstrap token the way the
  program does (providers/kube.py) and starts a stand-in with it; waits for the Node to be Ready.
- `machine_claims_crd` (session): the MachineClaim CRD the program registers, Established.

Node IPs are in the box network (198.18.0.0/15, tests/support/netns.py): the apiserver refuses
loopback addresses in EndpointSlices, as it would a Service's endpoints on these nodes.

Nothing here waits on a fixed sleep: every wait polls the API with a deadline and says what it
waited for when it gives up.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO / "scripts" / "cluster.sh"
TOOLCHAIN_BIN = REPO / ".toolchain" / "bin"
KUBELET_STANDIN = TOOLCHAIN_BIN / "kubelet-standin"
# scripts/cluster.sh's service CIDR puts the cluster DNS Service here, as kubeadm does.
CLUSTER_DNS = "10.96.0.10"
# The file whose presence fails a container's readiness probe (scripts/toolchain/kube/kubelet-standin).
UNREADY_MARKER = "unready"

T = TypeVar("T")

__all__ = [
    "CLUSTER_DNS",
    "KubeCluster",
    "Kubelet",
    "Kubelets",
    "apply_node_bootstrap",
    "crd_established",
    "fleet_rbac",
    "join",
    "kube_cluster",
    "kubelets",
    "machine_claims_crd",
    "namespace",
    "node_bootstrap_manifests",
    "node_ready",
    "unready_marker",
    "wait_until",
]


class ClusterError(RuntimeError):
    """The control plane could not be started or stopped; the message carries the script's output."""


def wait_until(what: str, probe: Callable[[], T | None], *, timeout: float = 60, interval: float = 0.25) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = probe()
            if value:
                return value
        except ApiException as error:
            last_error = error
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error.status} {last_error.reason})" if last_error else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


@dataclass
class KubeCluster:
    dir: Path
    kubeconfig: Path
    api_server: str  # https://127.0.0.1:<port>
    ca_pem: str
    api: k8s.ApiClient  # system:masters
    _namespaces: list[str] = field(default_factory=list)

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api)

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """kubectl with the admin kubeconfig (e.g. `auth can-i ... --as ...`)."""
        return subprocess.run(
            [str(TOOLCHAIN_BIN / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            check=check,
            input=input,
            timeout=60,
        )

    def namespace(self, prefix: str = "t") -> str:
        """A fresh namespace, deleted when the session's cluster stops (or by the `namespace` fixture)."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
        self._namespaces.append(name)
        return name

    def delete_namespace(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.core.delete_namespace(name)

    def user_api(self, kubeconfig: Path) -> k8s.ApiClient:
        """An ApiClient with another identity (a node's kubeconfig, say)."""
        return k8s_config.new_client_from_config(config_file=str(kubeconfig))


def start_cluster(directory: Path, *extra: str) -> KubeCluster:
    result = subprocess.run(
        ["bash", str(CLUSTER_SH), "start", "--dir", str(directory), *extra],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        subprocess.run(
            ["bash", str(CLUSTER_SH), "stop", "--dir", str(directory)], capture_output=True, check=False
        )
        raise ClusterError(
            f"scripts/cluster.sh start failed ({result.returncode}):\n{result.stdout}{result.stderr}"
        )
    kubeconfig = directory / "admin.kubeconfig"
    doc = yaml.safe_load(kubeconfig.read_text())
    cluster = doc["clusters"][0]["cluster"]
    return KubeCluster(
        dir=directory,
        kubeconfig=kubeconfig,
        api_server=cluster["server"],
        ca_pem=base64.b64decode(cluster["certificate-authority-data"]).decode(),
        api=k8s_config.new_client_from_config(config_file=str(kubeconfig)),
    )


def stop_cluster(directory: Path) -> None:
    result = subprocess.run(
        ["bash", str(CLUSTER_SH), "stop", "--dir", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise ClusterError(f"scripts/cluster.sh stop failed:\n{result.stdout}{result.stderr}")


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    directory = tmp_path_factory.mktemp("cluster")
    cluster = start_cluster(directory)
    try:
        yield cluster
    finally:
        stop_cluster(directory)


@pytest.fixture
def namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    name = kube_cluster.namespace()
    yield name
    kube_cluster.delete_namespace(name)


# --- kubelet stand-ins on the host ------------------------------------------------------------------


def unready_marker(root_dir: Path, pod_uid: str, container: str) -> Path:
    """The file that fails `container`'s readiness probe while it exists (under the kubelet root dir)."""
    return root_dir / "pods" / pod_uid / "containers" / container / UNREADY_MARKER


@dataclass
class Kubelet:
    name: str
    dir: Path
    node_ip: str
    process: subprocess.Popen[bytes]

    @property
    def root_dir(self) -> Path:
        return self.dir / "root"

    @property
    def kubeconfig(self) -> Path:
        """The node's own kubeconfig, written by the TLS bootstrap."""
        return self.dir / "kubeconfig"

    @property
    def log(self) -> str:
        return (self.dir / "kubelet.log").read_text(errors="replace")

    def set_ready(self, pod: k8s.V1Pod, container: str, ready: bool) -> None:
        """Make `container`'s readiness probe pass or fail from its next period on."""
        marker = unready_marker(self.root_dir, pod.metadata.uid, container)
        if ready:
            marker.unlink(missing_ok=True)
        else:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM, as systemd stops a kubelet: it stops posting status; the Node goes NotReady later."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)


_NODE_IPS = iter(range(200 * 254))


def next_node_ip() -> str:
    """A node address of its own in 198.19.0-199.x, never repeated in a session (the box network's
    upper half: vendorsim's boxes in tests take /24s of 198.18.0.0/16)."""
    n = next(_NODE_IPS)
    return f"198.19.{n // 254}.{n % 254 + 1}"


class Kubelets:
    """Starts kubelet stand-ins against a cluster; `stop_all` at the end of a test."""

    def __init__(self, cluster: KubeCluster, workdir: Path) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.started: list[Kubelet] = []

    def bootstrap_kubeconfig(self, token: str) -> str:
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "cluster",
                        "cluster": {
                            "server": self.cluster.api_server,
                            "certificate-authority-data": base64.b64encode(
                                self.cluster.ca_pem.encode()
                            ).decode(),
                        },
                    }
                ],
                "contexts": [{"name": "bootstrap", "context": {"cluster": "cluster", "user": "bootstrap"}}],
                "current-context": "bootstrap",
                "users": [{"name": "bootstrap", "user": {"token": token}}],
            }
        )

    def start(
        self,
        name: str,
        token: str,
        *,
        node_ip: str | None = None,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[str] = (),
        provider_id: str | None = None,
        threads: int = 8,
        memory_bytes: int = 32 * 2**30,
        config: Mapping[str, Any] | None = None,
    ) -> Kubelet:
        """A stand-in with the real kubelet's flags: the bootstrap kubeconfig holds `token`."""
        directory = self.workdir / name
        (directory / "proc").mkdir(parents=True, exist_ok=True)
        (directory / "proc" / "cpuinfo").write_text(
            "".join(f"processor\t: {i}\nmodel name\t: simulated\n\n" for i in range(threads))
        )
        (directory / "proc" / "meminfo").write_text(f"MemTotal:       {memory_bytes // 1024} kB\n")
        bootstrap = directory / "bootstrap-kubeconfig"
        bootstrap.write_text(self.bootstrap_kubeconfig(token))
        bootstrap.chmod(0o600)
        kubelet_config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "clusterDNS": [CLUSTER_DNS],
            "clusterDomain": "cluster.local",
            "rotateCertificates": True,
            **(config or {}),
        }
        (directory / "config.yaml").write_text(yaml.safe_dump(kubelet_config))
        if node_ip is None:
            node_ip = next_node_ip()
        argv = [
            str(KUBELET_STANDIN),
            f"--bootstrap-kubeconfig={bootstrap}",
            f"--kubeconfig={directory / 'kubeconfig'}",
            f"--config={directory / 'config.yaml'}",
            f"--cert-dir={directory / 'pki'}",
            f"--root-dir={directory / 'root'}",
            f"--sim-proc-dir={directory / 'proc'}",
            f"--hostname-override={name}",
            f"--node-ip={node_ip}",
        ]
        if labels:
            argv.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in labels.items()))
        if taints:
            argv.append("--register-with-taints=" + ",".join(taints))
        if provider_id:
            argv.append(f"--provider-id={provider_id}")
        if not KUBELET_STANDIN.exists():
            raise ClusterError(f"{KUBELET_STANDIN} is missing: run scripts/bootstrap.sh")
        with open(directory / "kubelet.log", "ab") as log:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        kubelet = Kubelet(name=name, dir=directory, node_ip=node_ip, process=process)
        self.started.append(kubelet)
        return kubelet

    def stop_all(self) -> None:
        for kubelet in self.started:
            kubelet.stop()


@pytest.fixture
def kubelets(kube_cluster: KubeCluster, tmp_path: Path) -> Iterator[Kubelets]:
    runner = Kubelets(kube_cluster, tmp_path)
    try:
        yield runner
    finally:
        runner.stop_all()
        # Their Nodes go too, so the next test's scheduler never picks a node nobody runs.
        for kubelet in runner.started:
            with contextlib.suppress(ApiException):
                kube_cluster.core.delete_node(kubelet.name)


# --- the program's own RBAC for joining -------------------------------------------------------------


def node_bootstrap_manifests(fleets: Sequence[str]) -> list[dict[str, Any]]:
    """What components/node_bootstrap.py registers for `fleets`, rendered under Pulumi mocks."""
    import pulumi
    import pulumi_kubernetes

    from components.node_bootstrap import NodeBootstrap, NodeBootstrapArgs
    from tests.support.k8s_schema import collect_manifests

    def build() -> None:
        provider = pulumi_kubernetes.Provider("cluster", render_yaml_to_directory="/nonexistent-render-dir")
        NodeBootstrap(
            "node-bootstrap",
            NodeBootstrapArgs(fleets=list(fleets)),
            opts=pulumi.ResourceOptions(providers=[provider]),
        )

    return collect_manifests(build).manifests


def apply_node_bootstrap(cluster: KubeCluster, fleets: Sequence[str]) -> None:
    """Apply exactly those objects to the cluster, so a fleet's kubelets may TLS-bootstrap."""
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(node_bootstrap_manifests(fleets)))


@pytest.fixture(scope="session")
def fleet_rbac(kube_cluster: KubeCluster) -> Callable[[str], None]:
    applied: set[str] = set()

    def apply(fleet: str) -> None:
        if fleet not in applied:
            apply_node_bootstrap(kube_cluster, [fleet])
            applied.add(fleet)

    return apply


def node_ready(cluster: KubeCluster, name: str) -> k8s.V1Node | None:
    """The Node when it exists and is Ready, else None."""
    try:
        node = cluster.core.read_node(name)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    ready = [c for c in node.status.conditions or [] if c.type == "Ready"]
    return node if ready and ready[0].status == "True" else None


def crd_established(cluster: KubeCluster, name: str, *, timeout: float = 120) -> None:
    """Wait until the CRD `name` is Established. Polled through the API, not `kubectl wait`: right
    after an apply the API server's cache may not show the CRD yet, and `kubectl wait` on a name it
    cannot find fails at once (seen on a loaded machine: NotFound, so the whole module errored)."""
    extensions = k8s.ApiextensionsV1Api(cluster.api)

    def established() -> bool:
        # A 404 (not in the cache yet) is an ApiException, which wait_until polls through. Raw JSON:
        # the client's model may refuse a new CRD's partial status.
        response = extensions.read_custom_resource_definition(name, _preload_content=False)
        conditions = json.loads(response.data).get("status", {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    wait_until(f"the CRD {name} to be Established", established, timeout=timeout)


@pytest.fixture
def join(
    kube_cluster: KubeCluster,
    kubelets: Kubelets,
    fleet_rbac: Callable[[str], None],
) -> Iterator[Callable[..., Kubelet]]:
    """join(name, fleet="cluster-tests", rbac=True, wait=True, **standin options) -> Kubelet."""
    from providers.kube import BootstrapToken, create_bootstrap_token

    def start(
        name: str, *, fleet: str = "cluster-tests", rbac: bool = True, wait: bool = True, **options: Any
    ) -> Kubelet:
        if rbac:
            fleet_rbac(fleet)
        token = BootstrapToken.generate()
        create_bootstrap_token(
            kube_cluster.api, token, fleet=fleet, node_name=name, ttl=dt.timedelta(minutes=30)
        )
        kubelet = kubelets.start(name, token.value, **options)
        if wait:
            wait_until(f"node {name} Ready", lambda: node_ready(kube_cluster, name), timeout=90)
        return kubelet

    yield start


@pytest.fixture(scope="session")
def machine_claims_crd(kube_cluster: KubeCluster) -> KubeCluster:
    """The MachineClaim CRD as components/claims_crd.py registers it, Established. Kept for the
    session (deleting a CRD is asynchronous; a later test would meet it Terminating)."""
    from providers.machine.crd import claim_crd_manifest

    manifest = claim_crd_manifest()
    kube_cluster.kubectl(
        "apply",
        "--server-side",
        "--field-manager=pulumi-kubernetes",
        "-f",
        "-",
        input=yaml.safe_dump(manifest),
    )
    crd_established(kube_cluster, manifest["metadata"]["name"])
    return kube_cluster
