"""What the Kubernetes-half tests share: the objects a component renders (under Pulumi's mocks, as
the whole-program test collects them) applied to the real control plane with server-side apply,
identities of ServiceAccounts (a token from the TokenRequest API), and access reviews."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import yaml
from kubernetes import client as k8s

from tests.support.cluster import KubeCluster, crd_established
from tests.support.k8s_schema import CRD_DIR, PLATFORM_CRD_DIR, collect_manifests

__all__ = [
    "apply",
    "can",
    "install_crd_fixture",
    "rendered",
    "service_account_api",
    "suffix",
]


def suffix() -> str:
    return uuid.uuid4().hex[:6]


def rendered(build: Callable[[], Any]) -> list[dict[str, Any]]:
    """The manifests `build` registers, as the program would send them."""
    return collect_manifests(build).manifests


def apply(
    cluster: KubeCluster, manifests: Iterable[dict[str, Any]], *, kinds: Iterable[str] | None = None
) -> None:
    """Server-side apply, namespaces and CRDs first and established (as Pulumi orders them by
    dependency); kubectl's own message when the apiserver refuses something."""
    wanted = set(kinds) if kinds is not None else None
    docs = [m for m in manifests if wanted is None or m["kind"] in wanted]
    first = [m for m in docs if m["kind"] in ("Namespace", "CustomResourceDefinition")]
    rest = [m for m in docs if m not in first]
    for batch in (first, rest):
        if not batch:
            continue
        result = cluster.kubectl(
            "apply",
            "--server-side",
            "--field-manager=pulumi-kubernetes",
            "-f",
            "-",
            input=yaml.safe_dump_all(batch),
            check=False,
        )
        assert result.returncode == 0, f"kubectl apply refused:\n{result.stderr}{result.stdout}"
        for crd in (m for m in batch if m["kind"] == "CustomResourceDefinition"):
            name = crd["metadata"]["name"]
            crd_established(cluster, name)


def install_crd_fixture(cluster: KubeCluster, name: str) -> None:
    """An upstream CRD as published: from tests/fixtures/crds, or scripts/cluster-platform (what the
    clusters' platform, Cilium, installs)."""
    path = CRD_DIR / name if (CRD_DIR / name).exists() else PLATFORM_CRD_DIR / name
    apply(cluster, [d for d in yaml.safe_load_all(path.read_text()) if d])


def service_account_api(cluster: KubeCluster, namespace: str, name: str) -> k8s.ApiClient:
    """An ApiClient that is the ServiceAccount (a short-lived token, as a projected one in a pod)."""
    request = k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    token = cluster.core.create_namespaced_service_account_token(name, namespace, request).status.token
    configuration = k8s.Configuration()
    configuration.host = cluster.api_server
    ca = cluster.dir / f"ca-{suffix()}.crt"
    ca.write_text(cluster.ca_pem)
    configuration.ssl_ca_cert = str(ca)
    configuration.api_key = {"BearerToken": token}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    return k8s.ApiClient(configuration)


def can(
    cluster: KubeCluster,
    user: str,
    verb: str,
    resource: str,
    *,
    namespace: str | None = None,
    group: str = "",
    subresource: str | None = None,
    name: str | None = None,
) -> bool:
    """A SubjectAccessReview: what the real RBAC authorizer says `user` may do."""
    groups = (
        ["system:serviceaccounts", f"system:serviceaccounts:{user.split(':')[2]}"]
        if user.startswith("system:serviceaccount:")
        else []
    )
    review = k8s.V1SubjectAccessReview(
        spec=k8s.V1SubjectAccessReviewSpec(
            user=user,
            groups=[*groups, "system:authenticated"],
            resource_attributes=k8s.V1ResourceAttributes(
                verb=verb,
                resource=resource,
                group=group,
                namespace=namespace,
                subresource=subresource,
                name=name,
            ),
        )
    )
    result = k8s.AuthorizationV1Api(cluster.api).create_subject_access_review(review)
    return bool(result.status.allowed)


def sa(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
