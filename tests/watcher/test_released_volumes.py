"""The released-volume scrubber (watcher/released_volumes.py) against a real control plane: the volumes
are the program's own (components/storage.py rendered under mocks), the claims are bound and released
by kube-controller-manager's real PV controller, and the scrubber acts with the rights
components/volume_scrubber.py gives its ServiceAccount (a token of it, RBAC judged by the API server).
A temporary folder stands for the box's /data/kura-volumes."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from components.storage import LocalVolumes, LocalVolumesArgs
from components.volume_scrubber import VolumeScrubber, VolumeScrubberArgs, scrubber_name
from config.models import Fleet, Hardware, Region, ReleasedVolumes, Vendor
from tests.cluster.k8s_support import apply, can, rendered, sa, service_account_api, suffix
from tests.support.cluster import KubeCluster, wait_until
from watcher.released_volumes import (
    Scrubbable,
    ScrubberLoop,
    ScrubberSettings,
    assess,
    empty_folder,
    release_patch,
)

IMAGE = "ghcr.io/tuist/tuist-infra-watcher@sha256:" + "a" * 64


def region_for(region_id: str, pool: str, decision: ReleasedVolumes) -> Region:
    return Region(
        id=region_id,
        cluster_id=f"{region_id}-1",
        fleet=pool,
        ingress_class=f"kura-{region_id}",
        egress_burst_mbps=500,
        host=f"{region_id}.staging.kura.tuist.dev",
        volumes_per_box=3,
        storage_size_gi=1,
        released_volumes=decision,
    )


def fleet_for(pool: str) -> Fleet:
    return Fleet(
        name=pool,
        vendor=Vendor.OVH,
        marker="tuist-kura-staging-scrub",
        size=1,
        node_pool=pool,
        hardware=Hardware(offer="Advance-1", threads=16, memory_gib=64),
    )


def pv_of(cluster: KubeCluster, name: str) -> dict[str, Any]:
    response = cluster.core.read_persistent_volume(name, _preload_content=False)
    return json.loads(response.data)  # type: ignore[no-any-return]


def phase(cluster: KubeCluster, name: str) -> str:
    return str(pv_of(cluster, name).get("status", {}).get("phase"))


def bind(cluster: KubeCluster, namespace: str, claim: str, volume: str, storage_class: str) -> str:
    """A claim pre-bound to `volume` (the PV controller binds it without a pod); its uid once Bound."""
    cluster.core.create_namespaced_persistent_volume_claim(
        namespace,
        k8s.V1PersistentVolumeClaim(
            metadata=k8s.V1ObjectMeta(name=claim),
            spec=k8s.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteOnce"],
                storage_class_name=storage_class,
                volume_name=volume,
                resources=k8s.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
            ),
        ),
    )
    bound = wait_until(
        f"claim {namespace}/{claim} Bound to {volume}",
        lambda: (
            (c := cluster.core.read_namespaced_persistent_volume_claim(claim, namespace)).status.phase
            == "Bound"
            and c
        ),
        timeout=60,
    )
    return str(bound.metadata.uid)


def release(
    cluster: KubeCluster, namespace: str, claim: str, volume: str, *, as_kura_controller: bool = False
) -> None:
    """Delete the claim: by hand (the volume turns Released), or as kura-controller does, flipping the
    volume to reclaim policy Delete first (the in-tree hostPath deleter refuses a path outside /tmp,
    so the volume turns Failed)."""
    if as_kura_controller:
        cluster.core.patch_persistent_volume(volume, {"spec": {"persistentVolumeReclaimPolicy": "Delete"}})
    cluster.core.delete_namespaced_persistent_volume_claim(claim, namespace)
    left = "Failed" if as_kura_controller else "Released"
    wait_until(f"volume {volume} {left}", lambda: phase(cluster, volume) == left, timeout=60)


def fill(folder: Path) -> None:
    """What a Kura pod leaves: files, a nested folder it cannot write to any more, a symlink."""
    (folder / "sub" / "deeper").mkdir(parents=True)
    (folder / "cache.db").write_text("a claim's data")
    (folder / "sub" / "deeper" / "blob").write_bytes(b"\0" * 4096)
    (folder / "sub" / "deeper").chmod(0o555)
    os.chown(folder / "cache.db", 10001, 10001)


@pytest.fixture
def estate(kube_cluster: KubeCluster, namespace: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A region that scrubs, on one box with three volumes, and a second box of it; the program's
    volumes and the scrubber's RBAC applied; the box's volume root in a temporary folder."""
    tag = suffix()
    node, other = f"scrub-{tag}-0", f"scrub-{tag}-1"
    region = region_for(f"scrub-{tag}", f"kura-scrub-{tag}", ReleasedVolumes.SCRUB)
    volumes: list[str] = []

    def build() -> None:
        vols = LocalVolumes("vols", LocalVolumesArgs(region=region, node_names=[node, other]))
        VolumeScrubber(
            "scrubber",
            VolumeScrubberArgs(
                region=region,
                fleet=fleet_for(region.fleet),
                namespace=namespace,
                image=IMAGE,
                volume_names=vols.names,
            ),
        )

    manifests = rendered(build)
    volumes = sorted(m["metadata"]["name"] for m in manifests if m["kind"] == "PersistentVolume")
    apply(kube_cluster, manifests)
    root = tmp_path / "kura-volumes"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("not the volume's")
    yield {
        "node": node,
        "other": other,
        "region": region,
        "root": root,
        "outside": outside,
        "volumes": volumes,
    }
    for name in volumes:
        try:
            kube_cluster.core.delete_persistent_volume(name)
        except ApiException as error:
            if error.status != 404:
                raise
    for kind, delete in (
        ("ClusterRoleBinding", k8s.RbacAuthorizationV1Api(kube_cluster.api).delete_cluster_role_binding),
        ("ClusterRole", k8s.RbacAuthorizationV1Api(kube_cluster.api).delete_cluster_role),
    ):
        try:
            delete(scrubber_name(region.id))
        except ApiException as error:
            if error.status != 404:
                raise AssertionError(f"could not delete the {kind}") from error


def test_a_released_volume_is_emptied_on_its_box_and_bound_again_by_the_next_claim(
    kube_cluster: KubeCluster, namespace: str, estate: dict[str, Any]
) -> None:
    node, other, region, root = estate["node"], estate["other"], estate["region"], estate["root"]
    scrubbed, kept, in_use = (f"kura-{node}-{i}" for i in range(3))
    elsewhere = f"kura-{other}-0"
    sc = region.storage_class
    uids = {
        v: bind(kube_cluster, namespace, f"claim-{v[-1]}-{v.split('-')[-2]}", v, sc)
        for v in (scrubbed, kept, in_use, elsewhere)
    }
    claims = {v: f"claim-{v[-1]}-{v.split('-')[-2]}" for v in uids}
    for volume in uids:
        (root / volume).mkdir()
        fill(root / volume)
    # A symlink out of the volume, to a folder and to a file: removed, never followed.
    (root / scrubbed / "to-folder").symlink_to(estate["outside"])
    (root / scrubbed / "to-file").symlink_to(estate["outside"] / "precious")
    # An operator turned one volume to `keep` (as the program does for a region that keeps them).
    kube_cluster.core.patch_persistent_volume(
        kept, {"metadata": {"annotations": {"tuist.dev/on-release": "keep"}}}
    )
    release(kube_cluster, namespace, claims[scrubbed], scrubbed, as_kura_controller=True)
    for volume in (kept, elsewhere):
        release(kube_cluster, namespace, claims[volume], volume)

    # The patch is applied only while the volume names the claim whose data went.
    stale = Scrubbable(scrubbed, root / scrubbed, namespace, claims[scrubbed], "not-the-claim-uid")
    with pytest.raises(ApiException) as refused:
        kube_cluster.core.patch_persistent_volume(scrubbed, release_patch(stale, dt.datetime.now(dt.UTC)))
    assert refused.value.status == 422
    assert pv_of(kube_cluster, scrubbed)["spec"]["claimRef"]["uid"] == uids[scrubbed]

    settings = ScrubberSettings(region=region.id, node=node, namespace=namespace, volume_mount=root)
    core = k8s.CoreV1Api(service_account_api(kube_cluster, namespace, scrubber_name(region.id)))
    scrubber = ScrubberLoop(settings, core, clock=lambda: dt.datetime(2026, 12, 3, 22, 0, tzinfo=dt.UTC))
    assert scrubber.scrub_once() == [scrubbed]

    # Emptied, the folder kept; what its symlinks pointed at untouched.
    assert (root / scrubbed).is_dir() and list((root / scrubbed).iterdir()) == []
    assert (estate["outside"] / "precious").read_text() == "not the volume's"
    # The kept volume, the volume still in use and the other box's volume keep their data.
    for volume in (kept, in_use, elsewhere):
        assert (root / volume / "cache.db").read_text() == "a claim's data"
    # The PV controller makes the emptied volume Available, and says whose data went.
    wait_until(
        f"volume {scrubbed} Available", lambda: phase(kube_cluster, scrubbed) == "Available", timeout=60
    )
    handed_back = pv_of(kube_cluster, scrubbed)
    assert "claimRef" not in handed_back["spec"]
    assert handed_back["metadata"]["annotations"]["tuist.dev/scrubbed"] == (
        f"{namespace}/{claims[scrubbed]} (uid {uids[scrubbed]}) at 2026-12-03T22:00:00+00:00"
    )
    assert phase(kube_cluster, kept) == "Released"
    assert phase(kube_cluster, elsewhere) == "Released"
    # kura-controller's flip stays: the next claim deleted leaves it Failed, and it is emptied again.
    assert handed_back["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
    assert phase(kube_cluster, in_use) == "Bound"
    # The box's next claim binds it.
    bind(kube_cluster, namespace, "next-claim", scrubbed, sc)
    # Nothing more to do: a second pass changes nothing.
    assert scrubber.scrub_once() == []
    assert phase(kube_cluster, kept) == "Released"

    # Its rights: patch the region's volumes, by name, and no other volume.
    who = sa(namespace, scrubber_name(region.id))
    assert can(kube_cluster, who, "patch", "persistentvolumes", name=kept)
    assert not can(kube_cluster, who, "patch", "persistentvolumes", name="kura-some-other-box-0")
    assert not can(kube_cluster, who, "delete", "persistentvolumes", name=kept)
    assert not can(kube_cluster, who, "get", "persistentvolumeclaims", namespace="default")


def test_a_pass_cut_between_the_wipe_and_the_patch_empties_it_again_and_hands_it_back(
    kube_cluster: KubeCluster, namespace: str, estate: dict[str, Any]
) -> None:
    node, region, root = estate["node"], estate["region"], estate["root"]
    volume = f"kura-{node}-0"
    bind(kube_cluster, namespace, "claim", volume, region.storage_class)
    (root / volume).mkdir()
    fill(root / volume)
    release(kube_cluster, namespace, "claim", volume)
    settings = ScrubberSettings(region=region.id, node=node, namespace=namespace, volume_mount=root)
    core = k8s.CoreV1Api(kube_cluster.api)

    class CutBeforePatch:
        def __getattr__(self, name: str) -> Any:
            return getattr(core, name)

        def patch_persistent_volume(self, *_: Any, **__: Any) -> Any:
            raise ConnectionResetError("the API server went away")

    assert ScrubberLoop(settings, CutBeforePatch()).scrub_once() == []
    assert list((root / volume).iterdir()) == []
    assert phase(kube_cluster, volume) == "Released"
    # Written again meanwhile (a box's leftovers): the next pass empties it again before handing it back.
    (root / volume / "late").write_text("x")
    assert ScrubberLoop(settings, core).scrub_once() == [volume]
    assert list((root / volume).iterdir()) == []
    wait_until(f"volume {volume} Available", lambda: phase(kube_cluster, volume) == "Available", timeout=60)


# --- what a pass decides, volume by volume (no cluster) ---------------------------------------------

SETTINGS = ScrubberSettings(
    region="eu-central", node="box-0", namespace="kura", volume_mount=Path("/volumes")
)


def volume(**changes: Any) -> dict[str, Any]:
    pv: dict[str, Any] = {
        "metadata": {"name": "kura-box-0-1", "annotations": {"tuist.dev/on-release": "scrub"}},
        "spec": {
            "hostPath": {"path": "/data/kura-volumes/kura-box-0-1", "type": "DirectoryOrCreate"},
            "claimRef": {"namespace": "kura", "name": "data-kura-0", "uid": "u-1"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["box-0"]}
                            ]
                        }
                    ]
                }
            },
        },
        "status": {"phase": "Released"},
    }
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        target = pv
        for key in parents:
            target = target[key]
        target[leaf] = value
    return pv


@pytest.mark.parametrize(
    "changes",
    [{}, {"status__phase": "Failed", "spec__persistentVolumeReclaimPolicy": "Delete"}],
    ids=["released", "failed-to-delete"],
)
def test_a_volume_of_this_box_marked_scrub_that_its_claim_left_is_emptied(changes: dict[str, Any]) -> None:
    assert assess(volume(**changes), SETTINGS) == Scrubbable(
        "kura-box-0-1", Path("/volumes/kura-box-0-1"), "kura", "data-kura-0", "u-1"
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"status__phase": "Bound"},
        {"status__phase": "Available"},
        {"status__phase": "Failed"},  # Retain: not the deleter's failure
        {"status": {}},
        {"spec__nodeAffinity": {}},
        # Another box's, or a volume that could be on two boxes.
        {
            "spec__nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["box-1"]}
                            ]
                        }
                    ]
                }
            }
        },
        {
            "spec__nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": ["box-0", "box-1"],
                                }
                            ]
                        }
                    ]
                }
            }
        },
    ],
)
def test_a_volume_not_released_or_not_only_this_box_s_is_not_this_pass_s_business(
    changes: dict[str, Any],
) -> None:
    assert assess(volume(**changes), SETTINGS) is None


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        (
            {"metadata__annotations": {"tuist.dev/on-release": "keep"}},
            "kept for an operator: tuist.dev/on-release is 'keep'",
        ),
        ({"metadata__annotations": {}}, "kept for an operator: tuist.dev/on-release is not set"),
        (
            {"metadata__annotations": {"tuist.dev/on-release": "Scrub"}},
            "kept for an operator: tuist.dev/on-release is 'Scrub'",
        ),
        (
            {"spec__hostPath": {"path": "/data"}},
            "refused: its path '/data' is not the program's /data/kura-volumes/<volume name>",
        ),
        (
            {"spec__hostPath": {"path": "/data/kura-volumes/kura-box-0-1/.."}},
            "refused: its path '/data/kura-volumes/kura-box-0-1/..' is not the program's "
            "/data/kura-volumes/<volume name>",
        ),
        (
            {"spec__local": {"path": "/data/kura-volumes/kura-box-0-1"}, "spec__hostPath": None},
            "refused: its path None is not the program's /data/kura-volumes/<volume name>",
        ),
        (
            {"spec__claimRef": {"namespace": "other", "name": "x", "uid": "u"}},
            "kept: its claim was in namespace 'other', not Kura's 'kura'",
        ),
    ],
)
def test_a_volume_the_program_did_not_mark_or_place_is_left_and_said_why(
    changes: dict[str, Any], why: str
) -> None:
    assert assess(volume(**changes), SETTINGS) == why


def test_a_volume_name_that_is_not_one_path_segment_is_refused() -> None:
    pv = volume(metadata__name="..")
    pv["spec"]["hostPath"]["path"] = "/data/kura-volumes/.."
    assert str(assess(pv, SETTINGS)).startswith("refused: ")


def test_the_patch_tests_the_claim_then_forgets_it_and_says_whose_data_went() -> None:
    released = Scrubbable("kura-box-0-1", Path("/volumes/kura-box-0-1"), "kura", "data-kura-0", "u-1")
    assert release_patch(released, dt.datetime(2026, 12, 3, 22, 0, 5, tzinfo=dt.UTC)) == [
        {"op": "test", "path": "/spec/claimRef/uid", "value": "u-1"},
        {"op": "remove", "path": "/spec/claimRef"},
        {
            "op": "add",
            "path": "/metadata/annotations/tuist.dev~1scrubbed",
            "value": "kura/data-kura-0 (uid u-1) at 2026-12-03T22:00:05+00:00",
        },
    ]


class RecordingCore:
    """The three calls a pass makes, recorded; the claim answers as given."""

    def __init__(self, pv: dict[str, Any] | list[dict[str, Any]], claim: dict[str, Any] | int) -> None:
        self.pvs = pv if isinstance(pv, list) else [pv]
        self.claim, self.calls = claim, []  # type: ignore[var-annotated]

    def list_persistent_volume(self, **kwargs: Any) -> Any:
        self.calls.append(("list", kwargs))
        return type("R", (), {"data": json.dumps({"items": self.pvs})})()

    def read_namespaced_persistent_volume_claim(self, name: str, namespace: str, **kwargs: Any) -> Any:
        self.calls.append(("read", name, namespace))
        if isinstance(self.claim, int):
            raise ApiException(status=self.claim)
        return type("R", (), {"data": json.dumps(self.claim)})()

    def patch_persistent_volume(self, name: str, body: Any, **kwargs: Any) -> Any:
        self.calls.append(("patch", name, body[0]))


@pytest.mark.parametrize(
    ("claim", "emptied"),
    [
        (404, True),  # gone
        ({"metadata": {"uid": "u-2"}}, True),  # a new claim of the same name
        ({"metadata": {"uid": "u-2"}, "spec": {"volumeName": "kura-box-0-2"}}, True),  # for another volume
        (
            {"metadata": {"uid": "u-2"}, "spec": {"volumeName": "kura-box-0-1"}},
            False,
        ),  # a rebind: the data wanted
        ({"metadata": {"uid": "u-1"}}, False),  # still there (being deleted)
    ],
)
def test_a_volume_is_emptied_only_once_its_claim_is_read_gone(
    tmp_path: Path, claim: Any, emptied: bool
) -> None:
    (tmp_path / "kura-box-0-1").mkdir()
    (tmp_path / "kura-box-0-1" / "data").write_text("x")
    core = RecordingCore(volume(), claim)
    settings = ScrubberSettings(region="eu-central", node="box-0", namespace="kura", volume_mount=tmp_path)
    assert ScrubberLoop(settings, core).scrub_once() == (["kura-box-0-1"] if emptied else [])
    assert core.calls[0] == (
        "list",
        {
            "label_selector": "app.kubernetes.io/part-of=kura,tuist.dev/region=eu-central",
            "_preload_content": False,
            "_request_timeout": (5, 30),
        },
    )
    assert core.calls[1] == ("read", "data-kura-0", "kura")
    patched = [("patch", "kura-box-0-1", {"op": "test", "path": "/spec/claimRef/uid", "value": "u-1"})]
    assert core.calls[2:] == (patched if emptied else [])
    assert (tmp_path / "kura-box-0-1" / "data").exists() is not emptied


def test_a_claim_read_failure_leaves_the_volume_for_the_next_pass(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "kura-box-0-1").mkdir()
    (tmp_path / "kura-box-0-1" / "data").write_text("x")
    settings = ScrubberSettings(region="eu-central", node="box-0", namespace="kura", volume_mount=tmp_path)
    core = RecordingCore(volume(), 403)
    assert ScrubberLoop(settings, core).scrub_once() == []
    assert (tmp_path / "kura-box-0-1" / "data").exists()
    assert [c[0] for c in core.calls] == ["list", "read"]
    assert caplog.messages == ["released volume kura-box-0-1 left for the next pass: the API answered 403"]


def test_a_volume_that_fails_does_not_hold_back_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The first volume's folder was replaced by a symlink: refused, said once, the second emptied.
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "keep").write_text("x")
    (tmp_path / "kura-box-0-1").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "kura-box-0-2").mkdir()
    (tmp_path / "kura-box-0-2" / "data").write_text("x")
    second = volume(metadata__name="kura-box-0-2", spec__hostPath={"path": "/data/kura-volumes/kura-box-0-2"})
    settings = ScrubberSettings(region="eu-central", node="box-0", namespace="kura", volume_mount=tmp_path)
    loop = ScrubberLoop(settings, RecordingCore([volume(), second], 404))
    assert loop.scrub_once() == ["kura-box-0-2"]
    assert (tmp_path / "elsewhere" / "keep").exists()
    assert list((tmp_path / "kura-box-0-2").iterdir()) == []
    assert loop.scrub_once() == ["kura-box-0-2"]  # (the fake still reads it Released)
    said = [m for m in caplog.messages if "kura-box-0-1" in m]
    assert said == [
        f"released volume kura-box-0-1 left for the next pass: NotADirectoryError: {tmp_path}/kura-box-0-1 "
        "is not a directory (a 'l' entry)"
    ]


def test_emptying_a_folder_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "keep").write_text("x")
    (tmp_path / "planted").symlink_to(tmp_path / "real")
    with pytest.raises(NotADirectoryError, match=re.escape(f"{tmp_path / 'planted'} is not a directory")):
        empty_folder(tmp_path / "planted")
    assert (tmp_path / "real" / "keep").exists()
    assert empty_folder(tmp_path / "never-mounted") == 0


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({}, "environment variable(s) REGION, NODE_NAME, KURA_NAMESPACE required"),
        (
            {"REGION": "eu", "NODE_NAME": "b", "KURA_NAMESPACE": "kura", "POLL_SECONDS": "0"},
            "POLL_SECONDS '0' is not",
        ),
        (
            {"REGION": "eu", "NODE_NAME": "b", "KURA_NAMESPACE": "kura", "POLL_SECONDS": "soon"},
            "POLL_SECONDS 'soon'",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_variable(env: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        ScrubberSettings.from_env(env)


def test_settings_round_trip_through_the_daemon_set_s_environment() -> None:
    settings = ScrubberSettings(
        region="eu-central",
        node="box-0",
        namespace="kura",
        volume_mount=Path("/v"),
        heartbeat_file="/run/x/heartbeat",
    )
    assert ScrubberSettings.from_env({**settings.to_env(), "NODE_NAME": "box-0"}) == settings
