"""VolumeScrubber under Pulumi mocks: the DaemonSet that runs `python -m watcher.released_volumes` on
every box of a region whose `released_volumes` is `scrub`, and RBAC that lets it patch that region's
volumes only. What the loop does with a real PV controller, and with its own ServiceAccount's
rights, is tests/watcher/test_released_volumes.py."""

from __future__ import annotations

from typing import Any

from components.kura_region import KuraRegion
from components.volume_scrubber import VolumeScrubber, VolumeScrubberArgs
from config.models import Cluster, FailoverIP, Fleet, Kura, Region, ReleasedVolumes
from tests.components.conftest import WATCHER_IMAGE
from tests.components.test_kura_region import region_args
from tests.support.k8s_schema import ManifestRecorder, collect_manifests, validate_manifest

NAME = "kura-released-volumes-us-east"
LABELS = {
    "app.kubernetes.io/name": "kura-released-volumes",
    "app.kubernetes.io/component": "released-volumes",
    "app.kubernetes.io/instance": "us-east",
    "app.kubernetes.io/managed-by": "tuist-infra",
    "tuist.dev/region": "us-east",
}
VOLUMES = ["kura-ns1001.ip-203-0-113.net-0", "kura-ns1001.ip-203-0-113.net-1"]


def render(region: Region, fleet: Fleet, volume_names: list[str] = VOLUMES) -> ManifestRecorder:
    args = VolumeScrubberArgs(
        region=region, fleet=fleet, namespace="kura", image=WATCHER_IMAGE, volume_names=volume_names
    )
    return collect_manifests(lambda: VolumeScrubber("scrubber", args))


def meta(namespace: str | None) -> dict[str, Any]:
    return {"name": NAME, "labels": LABELS, **({"namespace": namespace} if namespace else {})}


def test_it_runs_on_every_box_of_the_pool_with_only_the_volume_folder_mounted(
    region: Region, fleet: Fleet
) -> None:
    assert render(region, fleet).find("DaemonSet", NAME) == {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": meta("kura"),
        "spec": {
            "selector": {"matchLabels": LABELS},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {
                    "serviceAccountName": NAME,
                    "nodeSelector": {"node.cluster.x-k8s.io/pool": "kura-us-east"},
                    "tolerations": [
                        {
                            "key": "tuist.dev/kura",
                            "operator": "Equal",
                            "value": "true",
                            "effect": "NoSchedule",
                        },
                        {"key": "tuist.dev/bare-metal", "operator": "Exists", "effect": "NoExecute"},
                    ],
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "volumes": [
                        {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
                        {
                            "name": "volumes",
                            "hostPath": {"path": "/data/kura-volumes", "type": "DirectoryOrCreate"},
                        },
                    ],
                    "containers": [
                        {
                            "name": "scrubber",
                            "image": WATCHER_IMAGE,
                            "command": ["python", "-m", "watcher.released_volumes"],
                            "env": [
                                {
                                    "name": "NODE_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                },
                                {"name": "REGION", "value": "us-east"},
                                {"name": "KURA_NAMESPACE", "value": "kura"},
                                {"name": "VOLUME_MOUNT", "value": "/volumes"},
                                {"name": "POLL_SECONDS", "value": "30"},
                                {"name": "HEARTBEAT_FILE", "value": "/run/released-volumes/heartbeat"},
                            ],
                            "volumeMounts": [
                                {"name": "run", "mountPath": "/run/released-volumes"},
                                {"name": "volumes", "mountPath": "/volumes"},
                            ],
                            "livenessProbe": {
                                "exec": {
                                    "command": [
                                        "/bin/sh",
                                        "-c",
                                        '[ "$(date +%s)" -le "$(cat /run/released-volumes/heartbeat)" ]',
                                    ]
                                },
                                "initialDelaySeconds": 30,
                                "periodSeconds": 30,
                                "failureThreshold": 2,
                            },
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "32Mi"},
                                "limits": {"memory": "128Mi"},
                            },
                            "securityContext": {
                                "runAsUser": 0,
                                "runAsNonRoot": False,
                                "readOnlyRootFilesystem": True,
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"], "add": ["DAC_OVERRIDE", "FOWNER"]},
                            },
                        }
                    ],
                },
            },
        },
    }


def test_it_may_patch_the_region_s_volumes_by_name_and_read_claims_in_the_kura_namespace(
    region: Region, fleet: Fleet
) -> None:
    recorded = render(region, fleet)
    assert recorded.find("ClusterRole", NAME)["rules"] == [
        {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["persistentvolumes"], "resourceNames": VOLUMES, "verbs": ["patch"]},
    ]
    assert recorded.find("Role", NAME) == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta("kura"),
        "rules": [{"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get"]}],
    }
    subject = [{"kind": "ServiceAccount", "name": NAME, "namespace": "kura"}]
    assert recorded.find("ClusterRoleBinding", NAME)["subjects"] == subject
    assert recorded.find("RoleBinding", NAME)["subjects"] == subject
    assert sorted((m["kind"], m["metadata"].get("namespace")) for m in recorded.manifests) == [
        ("ClusterRole", None),
        ("ClusterRoleBinding", None),
        ("DaemonSet", "kura"),
        ("Role", "kura"),
        ("RoleBinding", "kura"),
        ("ServiceAccount", "kura"),
    ]
    for manifest in recorded.manifests:
        validate_manifest(manifest)


def test_with_no_volume_it_may_patch_none(region: Region, fleet: Fleet) -> None:
    # RBAC reads an empty resourceNames as every name: the rule goes instead.
    rules = render(region, fleet, volume_names=[]).find("ClusterRole", NAME)["rules"]
    assert rules == [{"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["list"]}]


def test_the_pod_starts_only_once_it_may_act(region: Region, fleet: Fleet) -> None:
    recorded = render(region, fleet)
    waits = recorded.options["scrubber-daemonset"].depends_on
    assert {r._name for r in waits} == {"scrubber-clusterrolebinding", "scrubber-rolebinding"}  # type: ignore[union-attr]


def test_a_region_runs_it_only_when_its_config_says_scrub(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura, cluster: Cluster
) -> None:
    kept = collect_manifests(
        lambda: KuraRegion("us-east", region_args(region, fleet, failover_ip, kura, cluster))
    )
    assert [m for m in kept.manifests if m["metadata"].get("name") == NAME] == []

    scrubbing = region.model_copy(update={"released_volumes": ReleasedVolumes.SCRUB})
    args = region_args(scrubbing, fleet, failover_ip, kura, cluster)
    recorded = collect_manifests(lambda: KuraRegion("us-east", args))
    # It may patch exactly the volumes the region's boxes got.
    volumes = sorted(pv["metadata"]["name"] for pv in recorded.of_kind("PersistentVolume"))
    assert len(volumes) == 8
    assert recorded.find("ClusterRole", NAME)["rules"][1]["resourceNames"] == volumes
    assert recorded.find("DaemonSet", NAME)["metadata"]["namespace"] == kura.namespace
