"""DnsReconciler under Pulumi mocks: the Deployment that runs `python -m regional_dns` beside
external-dns, and RBAC that lets it read the region's Nodes and gateway and apply its one DNSEndpoint.
Real authorization is checked in tests/regional_dns/test_loop.py and tests/cluster/test_program_rbac.py."""

from __future__ import annotations

from typing import Any

from components.dns_reconciler import DnsReconciler, DnsReconcilerArgs
from config.models import Fleet, Region
from tests.components.conftest import WATCHER_IMAGE
from tests.support.k8s_schema import ManifestRecorder, collect_manifests, validate_manifest

NAME = "kura-regional-dns-us-east"
LABELS = {
    "app.kubernetes.io/name": "kura-regional-dns",
    "app.kubernetes.io/component": "regional-dns",
    "app.kubernetes.io/instance": "us-east",
    "app.kubernetes.io/managed-by": "tuist-infra",
    "tuist.dev/region": "us-east",
}
SUBJECT = [{"kind": "ServiceAccount", "name": NAME, "namespace": "kura-dns"}]


def render(region: Region, fleet: Fleet) -> ManifestRecorder:
    args = DnsReconcilerArgs(region=region, fleet=fleet, namespace="kura", image=WATCHER_IMAGE)
    return collect_manifests(lambda: DnsReconciler("dns-reconciler", args))


def meta(namespace: str | None) -> dict[str, Any]:
    return {"name": NAME, "labels": LABELS, **({"namespace": namespace} if namespace else {})}


def test_it_runs_beside_external_dns_with_the_regions_settings(region: Region, fleet: Fleet) -> None:
    assert render(region, fleet).find("Deployment", NAME) == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta("kura-dns"),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": LABELS},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {
                    "serviceAccountName": NAME,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "volumes": [{"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}],
                    "affinity": {
                        "nodeAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "weight": 100,
                                    "preference": {
                                        "matchExpressions": [
                                            {
                                                "key": "node.cluster.x-k8s.io/pool",
                                                "operator": "NotIn",
                                                "values": ["kura-us-east"],
                                            }
                                        ]
                                    },
                                }
                            ]
                        }
                    },
                    "containers": [
                        {
                            "name": "reconciler",
                            "image": WATCHER_IMAGE,
                            "command": ["python", "-m", "regional_dns"],
                            "env": [
                                {"name": "REGION", "value": "us-east"},
                                {"name": "REGION_HOST", "value": "us-east.staging.kura.tuist.dev"},
                                {"name": "KURA_NAMESPACE", "value": "kura"},
                                {"name": "GATEWAY_DEPLOYMENT", "value": "kura-gateway-us-east"},
                                {"name": "NODE_POOL", "value": "kura-us-east"},
                                {"name": "DNSENDPOINT", "value": "kura-regional-us-east-dns"},
                                {"name": "REFRESH_SECONDS", "value": "30"},
                                {"name": "HEARTBEAT_FILE", "value": "/run/regional-dns/heartbeat"},
                            ],
                            "volumeMounts": [{"name": "run", "mountPath": "/run/regional-dns"}],
                            "livenessProbe": {
                                "exec": {
                                    "command": [
                                        "/bin/sh",
                                        "-c",
                                        '[ "$(date +%s)" -le "$(cat /run/regional-dns/heartbeat)" ]',
                                    ]
                                },
                                "initialDelaySeconds": 30,
                                "periodSeconds": 30,
                                "failureThreshold": 2,
                            },
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "64Mi"},
                                "limits": {"memory": "128Mi"},
                            },
                            "securityContext": {
                                "runAsNonRoot": True,
                                "runAsUser": 65532,
                                "readOnlyRootFilesystem": True,
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }


def test_its_role_reads_the_gateway_and_applies_its_one_dnsendpoint(region: Region, fleet: Fleet) -> None:
    recorded = render(region, fleet)
    assert recorded.find("Role", NAME) == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta("kura"),
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            {
                "apiGroups": ["apps"],
                "resources": ["deployments"],
                "resourceNames": ["kura-gateway-us-east"],
                "verbs": ["get"],
            },
            {
                "apiGroups": ["externaldns.k8s.io"],
                "resources": ["dnsendpoints"],
                "resourceNames": ["kura-regional-us-east-dns"],
                "verbs": ["get", "patch"],
            },
        ],
    }
    assert recorded.find("RoleBinding", NAME) == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta("kura"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
        "subjects": SUBJECT,
    }


def test_its_cluster_role_lists_nodes_and_nothing_else(region: Region, fleet: Fleet) -> None:
    recorded = render(region, fleet)
    assert recorded.find("ClusterRole", NAME) == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta(None),
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}],
    }
    assert recorded.find("ClusterRoleBinding", NAME) == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": meta(None),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
        "subjects": SUBJECT,
    }
    assert recorded.find("ServiceAccount", NAME)["metadata"] == meta("kura-dns")


def test_it_is_all_it_makes_and_every_object_is_valid(region: Region, fleet: Fleet) -> None:
    recorded = render(region, fleet)
    assert sorted((m["kind"], m["metadata"].get("namespace")) for m in recorded.manifests) == [
        ("ClusterRole", None),
        ("ClusterRoleBinding", None),
        ("Deployment", "kura-dns"),
        ("Role", "kura"),
        ("RoleBinding", "kura"),
        ("ServiceAccount", "kura-dns"),
    ]
    for manifest in recorded.manifests:
        validate_manifest(manifest)


def test_a_new_reconciler_starts_only_after_the_old_one_is_gone(region: Region, fleet: Fleet) -> None:
    assert render(region, fleet).options["dns-reconciler-deployment"].delete_before_replace is True
