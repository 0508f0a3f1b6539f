"""The Kubernetes side of adopting and releasing a machine, through the kubernetes client.

- A short-lived bootstrap token per machine, written as a `bootstrap.kubernetes.io/token` Secret in
  kube-system: the kubelet trades it for its own certificate (TLS bootstrap), so NodeRestriction
  applies to the node from its first request.
- Release: cordon, drain (evict, DaemonSet and mirror pods left alone), delete the Node (no cloud
  controller reaps a foreign providerID, and a lingering NotReady node wedges `helm --wait`), and
  delete the PVCs bound to node-local volumes on it (StatefulSets wedge in Pending otherwise).
  (Labels and taints after registration: providers/machine/node_labels.py.)

Every call is idempotent: a missing object counts as done, so a retried release converges.
No Pulumi import here. The kubeconfig is a secret: it is parsed, never logged or put in a message.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import secrets
import string
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from providers.lazy import lazy_module

if TYPE_CHECKING:
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    from kubernetes.client.exceptions import ApiException
    from urllib3.util import retry as urllib3_retry
else:
    # Only the provider process talks to a cluster; the program imports this module through them.
    k8s = lazy_module("kubernetes.client")
    k8s_config = lazy_module("kubernetes.config")
    urllib3_retry = lazy_module("urllib3.util.retry")

log = logging.getLogger(__name__)

BOOTSTRAP_NAMESPACE = "kube-system"
BOOTSTRAP_SECRET_TYPE = "bootstrap.kubernetes.io/token"
BOOTSTRAP_TOKEN_TTL = dt.timedelta(hours=1)
# Storage classes whose volumes live on one node's disks and die with its reinstall.
NODE_LOCAL_STORAGE_CLASSES = ("local-path", "scw-local-nvme")
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
REQUEST_TIMEOUT = (10.0, 60.0)  # (connect, read) seconds of every API call that names none
REQUEST_RETRIES = 1  # so a call to a dead API server waits at most two read timeouts
# A pod deleted this long ago on a Node whose kubelet is not reporting is not waited for: no kubelet
# will confirm its end, and the Node's deletion takes it (Cluster API's SkipWaitForDeleteTimeout for
# unreachable Nodes; kubectl drain --skip-wait-for-delete-timeout).
UNREACHABLE_DELETE_WAIT = 5.0
_TOKEN_ALPHABET = string.ascii_lowercase + string.digits


class KubeError(Exception):
    """A Kubernetes call failed; the message names the object and the API's answer."""


class KubeconfigError(KubeError):
    """The kubeconfig secret cannot be used. The message never quotes it."""


@dataclass(frozen=True)
class BootstrapToken:
    """`<id>.<secret>`: the id names the Secret (bootstrap-token-<id>) and is public, the secret
    half is not, so it stays out of repr."""

    id: str
    secret: str = field(repr=False)

    @property
    def value(self) -> str:
        return f"{self.id}.{self.secret}"

    @property
    def secret_name(self) -> str:
        return f"bootstrap-token-{self.id}"

    @staticmethod
    def generate() -> BootstrapToken:
        pick = secrets.choice
        return BootstrapToken(
            id="".join(pick(_TOKEN_ALPHABET) for _ in range(6)),
            secret="".join(pick(_TOKEN_ALPHABET) for _ in range(16)),
        )


# --- clients ----------------------------------------------------------------------------------------


def api_client(kubeconfig: str, *, timeout: tuple[float, float] = REQUEST_TIMEOUT) -> k8s.ApiClient:
    """A client for the cluster the kubeconfig text names (its current context); each of its calls
    that names no `_request_timeout` gets `timeout` (connect, read)."""
    try:
        doc = yaml.safe_load(kubeconfig)
    except yaml.YAMLError:
        raise KubeconfigError("the kubeconfig secret is not YAML") from None
    if not isinstance(doc, dict) or not doc.get("clusters"):
        raise KubeconfigError("the kubeconfig secret has no clusters")
    configuration = k8s.Configuration()
    # urllib3's default retries a timed-out GET three times: four read timeouts per call to a dead
    # API server. One retry keeps the pooled-connection-closed-by-the-server case working.
    configuration.retries = urllib3_retry.Retry(total=REQUEST_RETRIES, backoff_factor=0)
    try:
        client = k8s_config.new_client_from_config_dict(doc, client_configuration=configuration)
    except Exception as error:  # the library raises ConfigException and plain errors alike
        raise KubeconfigError(f"the kubeconfig secret is unusable ({type(error).__name__})") from None
    return _bounded(client, timeout)


def loop_retries() -> urllib3_retry.Retry:
    """The retries of a long-running loop's client (the failover watcher, the public DNS reconciler):
    a connection that was never made is tried once more (its request never reached the API server);
    a read that timed out, an answer cut off, any other error and a 429's or 503's Retry-After are
    not, so a call takes at most two connect timeouts and one read timeout. The loop's next pass (or
    renewal) is its retry. urllib3's default retries a timed-out GET or PUT three times: four read
    timeouts per call."""
    return urllib3_retry.Retry(
        total=1, connect=1, read=0, other=0, respect_retry_after_header=False, backoff_factor=0
    )


def in_cluster_api_client(*, timeout: tuple[float, float]) -> k8s.ApiClient:
    """`api_client`'s sibling for a process running in a pod: the pod's ServiceAccount, with
    `loop_retries`; each call that names no `_request_timeout` gets `timeout` (connect, read)."""
    configuration = k8s.Configuration()
    k8s_config.load_incluster_config(client_configuration=configuration)
    configuration.retries = loop_retries()
    return _bounded(k8s.ApiClient(configuration), timeout)


def _bounded(client: k8s.ApiClient, timeout: tuple[float, float]) -> k8s.ApiClient:
    # The library's default is no timeout at all: a half-open connection to an API server would hang
    # a `pulumi up` (or a loop) for good.
    request = client.request

    def bounded(method: str, url: str, *args: Any, _request_timeout: Any = None, **kwargs: Any) -> Any:
        return request(method, url, *args, _request_timeout=_request_timeout or timeout, **kwargs)

    client.request = bounded
    return client


def cluster_ca_pem(kubeconfig: str) -> str:
    """The PEM CA bundle of the kubeconfig's current cluster (certificate-authority-data)."""
    doc = yaml.safe_load(kubeconfig) or {}
    contexts = {c.get("name"): c.get("context") or {} for c in doc.get("contexts") or []}
    current = contexts.get(doc.get("current-context")) or {}
    clusters = {c.get("name"): c.get("cluster") or {} for c in doc.get("clusters") or []}
    cluster = clusters.get(current.get("cluster")) or next(iter(clusters.values()), {})
    data = cluster.get("certificate-authority-data")
    if not data:
        raise KubeconfigError(
            "the kubeconfig's cluster has no certificate-authority-data: the self-join needs the CA inline"
        )
    try:
        return base64.b64decode(data).decode()
    except ValueError:
        raise KubeconfigError("the kubeconfig's certificate-authority-data is not base64") from None


# --- bootstrap token ----------------------------------------------------------------------------------


def bootstrap_group(fleet: str) -> str:
    """The group a fleet's bootstrap tokens authenticate into (their Secret's auth-extra-groups), and
    the one components/node_bootstrap.py binds: one name for both, so a token is never in a group
    nothing binds. The bootstrap-token authenticator accepts only system:bootstrappers:[a-z0-9:-]+."""
    return f"system:bootstrappers:tuist-{fleet}"


def bootstrap_token_secret(
    token: BootstrapToken, *, fleet: str, node_name: str, now: dt.datetime, ttl: dt.timedelta
) -> k8s.V1Secret:
    """The Secret that makes `token` valid for `ttl`: authentication only (no signing), in the
    fleet's own bootstrappers group so a CSR approver can tell fleets apart."""
    expiration = (now + ttl).astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return k8s.V1Secret(
        api_version="v1",
        kind="Secret",
        metadata=k8s.V1ObjectMeta(
            name=token.secret_name,
            namespace=BOOTSTRAP_NAMESPACE,
            labels={"app.kubernetes.io/managed-by": "tuist-infra", "tuist.dev/fleet": fleet},
        ),
        type=BOOTSTRAP_SECRET_TYPE,
        string_data={
            "description": f"tuist-infra self-join of {node_name}",
            "token-id": token.id,
            "token-secret": token.secret,
            "expiration": expiration,
            "usage-bootstrap-authentication": "true",
            "auth-extra-groups": bootstrap_group(fleet),
        },
    )


def create_bootstrap_token(
    api: k8s.ApiClient,
    token: BootstrapToken,
    *,
    fleet: str,
    node_name: str,
    ttl: dt.timedelta = BOOTSTRAP_TOKEN_TTL,
    now: dt.datetime | None = None,
) -> None:
    body = bootstrap_token_secret(
        token, fleet=fleet, node_name=node_name, now=now or dt.datetime.now(dt.UTC), ttl=ttl
    )
    _call(
        f"create Secret {BOOTSTRAP_NAMESPACE}/{token.secret_name}",
        lambda: k8s.CoreV1Api(api).create_namespaced_secret(BOOTSTRAP_NAMESPACE, body),
    )


# --- node lifecycle -----------------------------------------------------------------------------------


def cordon(api: k8s.ApiClient, node: str) -> bool:
    """Mark the Node unschedulable; False when there is no such Node."""
    return _missing_ok(
        f"cordon Node {node}",
        lambda: k8s.CoreV1Api(api).patch_node(node, {"spec": {"unschedulable": True}}),
    )


def uncordon(api: k8s.ApiClient, node: str) -> bool:
    """Mark the Node schedulable again (a leave that stopped halfway, wanted back); False when there
    is no such Node."""
    return _missing_ok(
        f"uncordon Node {node}",
        lambda: k8s.CoreV1Api(api).patch_node(node, {"spec": {"unschedulable": False}}),
    )


def drain(
    api: k8s.ApiClient,
    node: str,
    *,
    timeout: float,
    poll_interval: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Evict every pod on the Node except DaemonSet and mirror pods, and wait until they are gone.

    A PodDisruptionBudget answering 429 is retried until `timeout`. Returns the evicted pods
    (namespace/name). Raises KubeError naming the pods still there when time runs out. On a Node
    whose kubelet is not reporting (a dead box: the one most in need of replacing), a pod deleted
    UNREACHABLE_DELETE_WAIT ago counts as gone, or the drain would wait on it forever.
    """
    core = k8s.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    evicted: list[str] = []
    while True:
        unreachable = _unreachable(core, node)
        remaining = [
            pod
            for pod in _pods_on(core, node)
            if _evictable(pod) and not (unreachable and _deleted_for(pod) > UNREACHABLE_DELETE_WAIT)
        ]
        if not remaining:
            return evicted
        for pod in remaining:
            ref = f"{pod.metadata.namespace}/{pod.metadata.name}"
            body = k8s.V1Eviction(
                metadata=k8s.V1ObjectMeta(name=pod.metadata.name, namespace=pod.metadata.namespace)
            )
            try:
                core.create_namespaced_pod_eviction(pod.metadata.name, pod.metadata.namespace, body)
                if ref not in evicted:
                    evicted.append(ref)
            except k8s.ApiException as error:
                if error.status == 404:
                    continue
                if error.status == 403 and _namespace_terminating(error):
                    # The namespace controller is deleting the pod already (an eviction there is always
                    # refused): wait for it to go, as kubectl drain does.
                    continue
                if error.status != 429:  # 429: a disruption budget says not yet
                    raise _error(f"evict Pod {ref}", error) from None
        if time.monotonic() >= deadline:
            names = ", ".join(f"{p.metadata.namespace}/{p.metadata.name}" for p in remaining)
            raise KubeError(f"drain of Node {node} timed out after {timeout:g}s; still running: {names}")
        sleep(poll_interval)


def delete_node(api: k8s.ApiClient, node: str) -> bool:
    """Delete the Node; False when it was already gone."""
    return _missing_ok(f"delete Node {node}", lambda: k8s.CoreV1Api(api).delete_node(node))


def node_exists(api: k8s.ApiClient, node: str) -> bool:
    return _missing_ok(f"read Node {node}", lambda: k8s.CoreV1Api(api).read_node(node))


def nodes_with_provider_id(api: k8s.ApiClient, provider_id: str) -> list[str]:
    """The Nodes whose providerID is `provider_id`, by name. A box the program joined is Node
    `<fleet>-<box>`; one imported keeps the name it was joined under (by hand, or by the Cluster API
    provider), which only its providerID ties to the box."""
    nodes = _call("list Nodes", lambda: k8s.CoreV1Api(api).list_node().items)
    return sorted(n.metadata.name for n in nodes if n.spec and n.spec.provider_id == provider_id)


@dataclass(frozen=True)
class NodeStatus:
    provider_id: str | None
    ready: bool
    reason: str  # the Ready condition's reason (KubeletReady, NodeStatusUnknown, ...) or "no Ready condition"


def node_status(api: k8s.ApiClient, node: str) -> NodeStatus | None:
    """The Node's providerID and Ready condition; None when there is no such Node (yet)."""
    try:
        found = k8s.CoreV1Api(api).read_node(node)
    except k8s.ApiException as error:
        if error.status == 404:
            return None
        raise _error(f"read Node {node}", error) from None
    ready = [c for c in (found.status.conditions if found.status else None) or [] if c.type == "Ready"]
    return NodeStatus(
        provider_id=found.spec.provider_id if found.spec else None,
        ready=bool(ready) and ready[0].status == "True",
        reason=(ready[0].reason or ready[0].status) if ready else "no Ready condition",
    )


def delete_node_local_pvcs(
    api: k8s.ApiClient, node: str, classes: Sequence[str] = NODE_LOCAL_STORAGE_CLASSES
) -> list[str]:
    """Delete the PVCs bound to node-local volumes pinned to `node`; returns them (namespace/name)."""
    core = k8s.CoreV1Api(api)
    volumes = _call("list PersistentVolumes", lambda: core.list_persistent_volume().items)
    deleted = []
    for claim in node_local_claims(volumes, node, classes):
        namespace, name = claim.split("/", 1)
        if _delete_claim(core, namespace, name):
            deleted.append(claim)
    return deleted


def node_local_claims(volumes: Iterable[Any], node: str, classes: Sequence[str]) -> list[str]:
    """namespace/name of each claim bound to a volume of `classes` whose node affinity names `node`."""
    claims = []
    for pv in volumes:
        spec = pv.spec
        if spec is None or spec.storage_class_name not in classes or spec.claim_ref is None:
            continue
        if node in _affinity_values(spec.node_affinity):
            claims.append(f"{spec.claim_ref.namespace}/{spec.claim_ref.name}")
    return sorted(claims)


# --- internals ----------------------------------------------------------------------------------------


def _delete_claim(core: k8s.CoreV1Api, namespace: str, name: str) -> bool:
    return _missing_ok(
        f"delete PersistentVolumeClaim {namespace}/{name}",
        lambda: core.delete_namespaced_persistent_volume_claim(name, namespace),
    )


def _pods_on(core: k8s.CoreV1Api, node: str) -> list[Any]:
    return list(
        _call(
            f"list Pods on Node {node}",
            lambda: core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items,
        )
    )


def _evictable(pod: Any) -> bool:
    meta = pod.metadata
    if MIRROR_POD_ANNOTATION in (meta.annotations or {}):
        return False  # a static pod: the kubelet owns it, the API cannot evict it
    if any(owner.kind == "DaemonSet" for owner in meta.owner_references or []):
        return False  # its controller would put it straight back
    phase = pod.status.phase if pod.status else None
    return phase not in ("Succeeded", "Failed")


def _unreachable(core: k8s.CoreV1Api, node: str) -> bool:
    """The Node's kubelet is not reporting: Ready is Unknown (or never set), or the Node is gone."""
    try:
        found = core.read_node(node)
    except k8s.ApiException as error:
        if error.status == 404:
            return True
        raise _error(f"read Node {node}", error) from None
    conditions = found.status.conditions if found.status else None
    ready = next((c.status for c in conditions or [] if c.type == "Ready"), "Unknown")
    return ready not in ("True", "False")


def _deleted_for(pod: Any) -> float:
    """Seconds since the pod's deletion was asked for; -1 when it was not."""
    since: dt.datetime | None = pod.metadata.deletion_timestamp
    if since is None:
        return -1.0
    return (dt.datetime.now(dt.UTC) - since).total_seconds()


def _namespace_terminating(error: ApiException) -> bool:
    try:
        body = yaml.safe_load(error.body or "") or {}
        causes = (body.get("details") or {}).get("causes") or []
    except (yaml.YAMLError, AttributeError):
        return False
    # A StatusCause's type travels as "reason".
    return any(isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes)


def _affinity_values(affinity: Any) -> set[str]:
    values: set[str] = set()
    required = getattr(affinity, "required", None) if affinity else None
    for term in getattr(required, "node_selector_terms", None) or []:
        for expression in term.match_expressions or []:
            if expression.operator == "In":
                values.update(expression.values or [])
    return values


def _call(what: str, operation: Callable[[], Any]) -> Any:
    try:
        return operation()
    except k8s.ApiException as error:
        raise _error(what, error) from None


def _missing_ok(what: str, operation: Callable[[], Any]) -> bool:
    try:
        operation()
    except k8s.ApiException as error:
        if error.status == 404:
            return False
        raise _error(what, error) from None
    return True


def _error(what: str, error: ApiException) -> KubeError:
    reason = error.reason or ""
    message = ""
    body = error.body
    if body:
        try:
            message = str(yaml.safe_load(body).get("message") or "")
        except (yaml.YAMLError, AttributeError):
            message = ""
    detail = message or reason
    return KubeError(f"{what} failed (HTTP {error.status}): {detail[:300]}")
