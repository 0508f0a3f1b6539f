"""Local storage under Pulumi mocks: the node-local StorageClass and each box's volumes. The claim
binding on a fleet node and going with the release is proven on the real control plane
(tests/cluster/test_k8s_storage.py)."""

from __future__ import annotations

import re

import pytest

from components.storage import LocalStorageClass, LocalStorageClassArgs, LocalVolumes, LocalVolumesArgs
from config.models import Region, ReleasedVolumes
from providers.kube import NODE_LOCAL_STORAGE_CLASSES, node_local_claims
from tests.support.k8s_schema import ManifestRecorder, collect_manifests, validate_manifest

NODES = ("ns1001.ip-203-0-113.net", "ns1002.ip-203-0-113.net")


def volumes(region: Region, nodes: tuple[str, ...] = NODES) -> ManifestRecorder:
    return collect_manifests(
        lambda: LocalVolumes("vols", LocalVolumesArgs(region=region, node_names=list(nodes)))
    )


def test_the_storage_class_waits_for_the_consumer_and_provisions_nothing() -> None:
    recorded = collect_manifests(
        lambda: LocalStorageClass("sc", LocalStorageClassArgs(name="scw-local-nvme"))
    )
    sc = recorded.find("StorageClass", "scw-local-nvme")
    # The scheduler picks the box (from the Kura pod's pool selector) and a free volume on it together.
    assert (sc["provisioner"], sc["volumeBindingMode"]) == (
        "kubernetes.io/no-provisioner",
        "WaitForFirstConsumer",
    )
    assert sc["reclaimPolicy"] == "Retain"
    validate_manifest(sc)


def test_a_class_the_release_would_not_clean_up_is_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("storage class 'hcloud-volumes' is not one the release")):
        collect_manifests(lambda: LocalStorageClass("sc", LocalStorageClassArgs(name="hcloud-volumes")))


def test_each_box_gets_volumes_per_box_kura_sized_volumes_of_the_region_class(region: Region) -> None:
    recorded = volumes(region)
    pvs = recorded.of_kind("PersistentVolume")
    assert len(pvs) == len(NODES) * region.volumes_per_box
    for pv in pvs:
        spec = pv["spec"]
        assert spec["capacity"] == {"storage": "50Gi"}
        assert spec["storageClassName"] == region.storage_class == "scw-local-nvme"
        assert spec["accessModes"] == ["ReadWriteOnce"]
        assert spec["persistentVolumeReclaimPolicy"] == "Retain"
        validate_manifest(pv)


def test_a_volume_lives_on_its_box_s_data_disk(region: Region) -> None:
    pv = volumes(region).find("PersistentVolume", "kura-ns1001.ip-203-0-113.net-0")
    assert pv["spec"]["hostPath"] == {
        "path": "/data/kura-volumes/kura-ns1001.ip-203-0-113.net-0",
        "type": "DirectoryOrCreate",
    }
    assert pv["spec"]["nodeAffinity"] == {
        "required": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/hostname",
                            "operator": "In",
                            "values": ["ns1001.ip-203-0-113.net"],
                        }
                    ]
                }
            ]
        }
    }


def test_the_release_finds_the_claims_of_these_volumes(region: Region) -> None:
    # providers/kube.py deletes the claims bound to node-local volumes of a released box: the names
    # and the affinity the volumes carry are what it looks for.
    from kubernetes.client import ApiClient

    pv = volumes(region).find("PersistentVolume", "kura-ns1001.ip-203-0-113.net-0")
    pv["spec"]["claimRef"] = {"namespace": "kura", "name": "data-kura-acme-us-east-0"}
    obj = ApiClient()._ApiClient__deserialize(pv, "V1PersistentVolume")  # type: ignore[attr-defined]
    assert region.storage_class in NODE_LOCAL_STORAGE_CLASSES
    assert node_local_claims([obj], "ns1001.ip-203-0-113.net", NODE_LOCAL_STORAGE_CLASSES) == [
        "kura/data-kura-acme-us-east-0"
    ]
    assert node_local_claims([obj], "ns1002.ip-203-0-113.net", NODE_LOCAL_STORAGE_CLASSES) == []


def test_a_volume_skips_pulumi_s_delete_wait(region: Region) -> None:
    # Bound volumes outlive their delete until the release deletes the claim (pv-protection).
    pv = volumes(region).find("PersistentVolume", "kura-ns1001.ip-203-0-113.net-0")
    assert pv["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"


@pytest.mark.parametrize("decision", ["keep", "scrub"])
def test_each_volume_says_what_becomes_of_its_data_once_its_claim_goes(region: Region, decision: str) -> None:
    # The region's decision, on the volume the scrubber on its box reads (watcher/released_volumes.py);
    # the reclaim policy stays Retain either way: Kubernetes never deletes a local volume's data.
    chosen = region.model_copy(update={"released_volumes": ReleasedVolumes(decision)})
    for pv in volumes(chosen).of_kind("PersistentVolume"):
        assert pv["metadata"]["annotations"] == {
            "pulumi.com/skipAwait": "true",
            "tuist.dev/on-release": decision,
        }
        assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"


def test_the_reclaim_policy_is_set_once_and_then_left_to_kura_controller(region: Region) -> None:
    # kura-controller patches a volume to Delete before it deletes the claim, and owns the field from
    # then on: an apply of Retain over it is a server-side apply conflict that would fail every later
    # up touching the volume (switching released_volumes to scrub rewrites every volume's annotation).
    recorded = volumes(region)
    pvs = recorded.of_kind("PersistentVolume")
    assert pvs
    for index in range(len(pvs)):
        options = recorded.options[f"vols-{index // region.volumes_per_box}-{index % region.volumes_per_box}"]
        assert options.ignore_changes == ["spec.persistentVolumeReclaimPolicy"]


def test_a_region_keeps_released_volumes_unless_its_config_says_scrub(region: Region) -> None:
    assert region.released_volumes is ReleasedVolumes.KEEP


def test_no_box_no_volume(region: Region) -> None:
    assert volumes(region, ()).of_kind("PersistentVolume") == []
