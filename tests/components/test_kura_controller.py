"""KuraController under Pulumi mocks: the seeds' settings as the Deployment's environment, nothing
more; least-privilege RBAC; a knob change is a pod-template change (the real rollout is proven in
tests/cluster/test_k8s_kura_controller.py); the KuraInstance CRD the controller's informer needs,
kept when it leaves the program and before the controller starts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from components.kura_controller import KuraController, KuraControllerArgs, RegionPlacement, controller_env
from config.models import Cluster, Environment, FailoverIP, Fleet, Kura, Region
from demux.routes import RouteSettings
from tests.support.k8s_schema import ManifestError, ManifestRecorder, collect_manifests, validate_manifest

CRD_NAME = "kurainstances.kura.tuist.dev"


def placements(region: Region, fleet: Fleet, fip: FailoverIP | None) -> list[RegionPlacement]:
    hidden = region.model_copy(update={"id": "ca-east", "cluster_id": "ca-east-1", "exposed": False})
    parked_fleet = fleet.model_copy(update={"name": "dedibox", "enabled": False})
    parked = region.model_copy(update={"id": "eu-central", "cluster_id": "eu-central-1", "fleet": "dedibox"})
    return [
        RegionPlacement(region, fleet, fip),
        RegionPlacement(hidden, fleet, None),
        RegionPlacement(parked, parked_fleet, None),
    ]


def env_of(recorded: ManifestRecorder) -> dict[str, Any]:
    [container] = recorded.find("Deployment", "kura-controller")["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def render(
    region: Region, fleet: Fleet, fip: FailoverIP | None, kura: Kura, cluster: Cluster
) -> ManifestRecorder:
    args = KuraControllerArgs(
        placements=placements(region, fleet, fip), kura=kura, environment=Environment.STAGING, cluster=cluster
    )
    return collect_manifests(lambda: KuraController("kura-controller", args))


@pytest.fixture
def recorded(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura, cluster: Cluster
) -> ManifestRecorder:
    return render(region, fleet, failover_ip, kura, cluster)


def test_the_environment_is_exactly_the_seeds_settings(recorded: ManifestRecorder) -> None:
    assert sorted(env_of(recorded)) == [
        "KURA_BOOTSTRAP_ARTIFACT_CONCURRENCY",
        "KURA_BOOTSTRAP_MAX_CONCURRENT_PEERS",
        "KURA_DISCOVERY_DNS_NAME",
        "KURA_PEER_PORT",
        "KURA_RUNTIME_IMAGE",
        "KURA_TMP_DIR_MAX_BYTES",
        "POD_NAMESPACE",
        "TUIST_KURA_AVAILABLE_REGIONS",
        "TUIST_KURA_PEER_FAILOVER_IPS",
        "TUIST_KURA_REGIONS",
    ]


def test_discovery_is_local_scope_on_the_account_peer_service_and_no_global_name(
    recorded: ManifestRecorder,
) -> None:
    env = env_of(recorded)
    assert env["KURA_DISCOVERY_DNS_NAME"] == "kura-{account}-peer.kura.svc.cluster.local"
    assert [name for name in env if "GLOBAL" in name] == []


def test_discovery_name_follows_the_cluster_domain(
    region: Region, fleet: Fleet, kura: Kura, cluster: Cluster
) -> None:
    other = cluster.model_copy(update={"domain": "k8s.internal"})
    env = controller_env([RegionPlacement(region, fleet, None)], kura, Environment.STAGING, other)
    assert env["KURA_DISCOVERY_DNS_NAME"] == "kura-{account}-peer.kura.svc.k8s.internal"


def test_bootstrap_tmp_budget_and_concurrency_of_seed_001(recorded: ManifestRecorder) -> None:
    env = env_of(recorded)
    assert (
        env["KURA_TMP_DIR_MAX_BYTES"],
        env["KURA_BOOTSTRAP_MAX_CONCURRENT_PEERS"],
        env["KURA_BOOTSTRAP_ARTIFACT_CONCURRENCY"],
    ) == (str(8 * 1024**3), "4", "16")


def test_runtime_image_carries_the_explicit_tag(recorded: ManifestRecorder) -> None:
    assert env_of(recorded)["KURA_RUNTIME_IMAGE"] == "ghcr.io/tuist/kura:0.10.5"


def test_available_regions_leave_out_hidden_and_parked_regions(recorded: ManifestRecorder) -> None:
    assert env_of(recorded)["TUIST_KURA_AVAILABLE_REGIONS"] == "us-east"


def test_peer_failover_ips_name_only_ordered_ips(
    region: Region, fleet: Fleet, parked_ip: FailoverIP, kura: Kura, cluster: Cluster
) -> None:
    assert env_of(render(region, fleet, None, kura, cluster))["TUIST_KURA_PEER_FAILOVER_IPS"] == ""
    routed = FailoverIP(
        name="us-east-peer", vendor=parked_ip.vendor, fleet=parked_ip.fleet, address="203.0.113.7"
    )
    assert (
        env_of(render(region, fleet, routed, kura, cluster))["TUIST_KURA_PEER_FAILOVER_IPS"]
        == "us-east=203.0.113.7"
    )
    assert env_of(render(region, fleet, parked_ip, kura, cluster))["TUIST_KURA_PEER_FAILOVER_IPS"] == ""
    # An ordered IP of a fleet with no machine is routed to no box: not advertised either.
    for empty in (fleet.model_copy(update={"enabled": False}), fleet.model_copy(update={"size": 0})):
        assert env_of(render(region, empty, routed, kura, cluster))["TUIST_KURA_PEER_FAILOVER_IPS"] == ""


def test_each_region_runs_two_replicas_on_its_pool_with_its_storage_and_egress(
    recorded: ManifestRecorder,
) -> None:
    us_east = json.loads(env_of(recorded)["TUIST_KURA_REGIONS"])["us-east"]
    assert us_east["replicas"] == 2
    assert (us_east["storage_class"], us_east["storage_size"]) == ("scw-local-nvme", "50Gi")
    assert us_east["node_selector"] == {"node.cluster.x-k8s.io/pool": "kura-us-east"}
    assert us_east["tolerations"] == [
        {"key": "tuist.dev/kura", "operator": "Equal", "effect": "NoSchedule", "value": "true"},
        {"key": "tuist.dev/bare-metal", "operator": "Exists", "effect": "NoExecute"},
    ]
    assert us_east["pod_resource_requests"] == {"tuist.dev/egress-mbps": "25"}
    assert us_east["pod_annotations"] == {"kubernetes.io/egress-bandwidth": "1500M"}


def test_the_public_peer_service_and_host_are_what_the_demux_routes(
    recorded: ManifestRecorder, region: Region, kura: Kura, cluster: Cluster
) -> None:
    # The controller names each account's peer Service and host from these templates; the demux
    # routes an account's Service only under that name, and that host. They must agree.
    us_east = json.loads(env_of(recorded)["TUIST_KURA_REGIONS"])["us-east"]
    demux = RouteSettings(
        region=region.id,
        region_host=region.host,
        namespace=kura.namespace,
        peer_port=kura.peer_port,
        cluster_domain=cluster.domain,
    )
    service = us_east["public_peer_service"].format(account="acme")
    assert service == demux.service_name("acme")
    assert us_east["public_peer_host"].format(account="acme") == demux.peer_host("acme")
    assert demux.peer_host("acme") == "acme.peer.us-east.staging.kura.tuist.dev"
    assert us_east["mesh_peer_host_network"] is True


def test_a_knob_change_changes_the_pod_template(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura, cluster: Cluster
) -> None:
    def template(k: Kura) -> dict[str, Any]:
        return render(region, fleet, failover_ip, k, cluster).find("Deployment", "kura-controller")["spec"][
            "template"
        ]

    before = template(kura)
    after = template(kura.model_copy(update={"bootstrap_tmp_dir_max_bytes": 4 * 1024**3}))
    assert before != after
    changed = [
        (a["name"], a.get("value"), b.get("value"))
        for a, b in zip(
            before["spec"]["containers"][0]["env"], after["spec"]["containers"][0]["env"], strict=True
        )
        if a != b
    ]
    assert changed == [("KURA_TMP_DIR_MAX_BYTES", str(8 * 1024**3), str(4 * 1024**3))]


def test_role_is_exactly_what_the_controller_needs_to_run_an_account_in_the_kura_namespace(
    recorded: ManifestRecorder,
) -> None:
    # Upstream's KuraInstanceReconciler markers, narrowed to what it touches on the way to an
    # account's StatefulSet with the flags we pass (and the informers it must sync to start).
    role = recorded.find("Role", "kura-controller")
    assert role["metadata"]["namespace"] == "kura"
    write = ["get", "list", "watch", "create", "update", "patch", "delete"]
    assert role["rules"] == [
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": write},
        {"apiGroups": [""], "resources": ["services", "secrets"], "verbs": write},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
        {
            "apiGroups": [""],
            "resources": ["persistentvolumeclaims"],
            "verbs": ["get", "list", "watch", "patch", "delete"],
        },
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "networkpolicies"], "verbs": write},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": write},
        {"apiGroups": ["externaldns.k8s.io"], "resources": ["dnsendpoints"], "verbs": write},
        {"apiGroups": ["cert-manager.io"], "resources": ["certificates"], "verbs": ["get", "delete"]},
        {
            "apiGroups": ["kura.tuist.dev"],
            "resources": ["kurainstances"],
            "verbs": ["get", "list", "watch", "update", "patch"],
        },
        {
            "apiGroups": ["kura.tuist.dev"],
            "resources": ["kurainstances/status"],
            "verbs": ["get", "update", "patch"],
        },
        {"apiGroups": ["kura.tuist.dev"], "resources": ["kurainstances/finalizers"], "verbs": ["update"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["kura-controller.kura.tuist.dev"],
            "verbs": ["get", "update"],
        },
    ]


def test_nothing_that_would_let_upstreams_peer_demux_reconciler_touch_ours(
    recorded: ManifestRecorder,
) -> None:
    # Upstream's PeerDemuxReconciler (always on, no flag) writes and deletes a ConfigMap and a
    # DaemonSet named kura-peer-demux-<region>: components/peer_demux.py's names. Refused, it fails.
    rules = [r for kind in ("Role", "ClusterRole") for m in recorded.of_kind(kind) for r in m["rules"]]
    assert rules
    for rule in rules:
        assert {"configmaps", "daemonsets"} & set(rule["resources"]) == set(), rule
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule


def test_cluster_wide_it_reads_nodes_and_sets_volumes_reclaim_policy(recorded: ManifestRecorder) -> None:
    assert recorded.find("ClusterRole", "kura-controller")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["get", "list", "watch", "patch"]},
    ]
    binding = recorded.find("ClusterRoleBinding", "kura-controller")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kura-controller", "namespace": "kura"}]


def test_two_leader_elected_replicas_with_only_upstreams_flags(
    recorded: ManifestRecorder, kura: Kura
) -> None:
    deployment = recorded.find("Deployment", "kura-controller")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert deployment["spec"]["replicas"] == 2
    assert container["image"] == kura.controller_image
    # Flags its cmd/manager/main.go defines; the Lease name is hardcoded there, in the pod's namespace.
    assert container["args"] == [
        "--leader-elect=true",
        "--watch-namespace=kura",
        "--health-probe-bind-address=:8081",
        "--metrics-bind-address=:8080",
    ]
    assert deployment["spec"]["template"]["spec"].get("automountServiceAccountToken") is not False


def test_it_creates_the_kura_namespace_and_the_failover_watchers_own(recorded: ManifestRecorder) -> None:
    assert [m["metadata"]["name"] for m in recorded.of_kind("Namespace")] == ["kura", "kura-failover"]


def test_every_object_is_schema_valid(recorded: ManifestRecorder) -> None:
    for manifest in recorded.manifests:
        validate_manifest(manifest)


@pytest.mark.parametrize("environment", list(Environment))
def test_the_kura_namespace_is_protected_in_production(
    environment: Environment, region: Region, fleet: Fleet, kura: Kura, cluster: Cluster
) -> None:
    # Deleting it deletes every account's instances and volume claims: every region's cache.
    args = KuraControllerArgs(
        placements=placements(region, fleet, None), kura=kura, environment=environment, cluster=cluster
    )
    options = collect_manifests(lambda: KuraController("kura-controller", args)).options
    assert bool(options["kura-controller-namespace"].protect) is (environment is Environment.PRODUCTION)
    # The watchers and their credentials: nothing to lose.
    assert not options["kura-controller-failover-namespace"].protect


# --- the KuraInstance CRD -------------------------------------------------------------------------


def test_the_kurainstance_crd_is_the_kind_the_server_writes_with_a_permissive_schema(
    recorded: ManifestRecorder,
) -> None:
    # The names are upstream's (the Tuist server writes these, kura-controller watches them); the
    # schema is ours: the four fields nothing works without, and every other field kept as written.
    preserve = {"x-kubernetes-preserve-unknown-fields": True}
    assert recorded.find("CustomResourceDefinition", CRD_NAME) == {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {"app.kubernetes.io/part-of": "kura", "app.kubernetes.io/managed-by": "tuist-infra"},
        },
        "spec": {
            "group": "kura.tuist.dev",
            "scope": "Namespaced",
            "names": {
                "kind": "KuraInstance",
                "listKind": "KuraInstanceList",
                "plural": "kurainstances",
                "singular": "kurainstance",
                "shortNames": ["kura"],
            },
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Region", "type": "string", "jsonPath": ".spec.region"},
                        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                        {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "One account's Kura cache in one region.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": {
                                    "type": "object",
                                    "description": (
                                        "Written by the Tuist server, which owns and validates its fields."
                                    ),
                                    "required": ["accountHandle", "tenantID", "region", "image"],
                                    "properties": {
                                        "accountHandle": {"type": "string", "minLength": 1},
                                        "tenantID": {"type": "string", "minLength": 1},
                                        "region": {"type": "string", "minLength": 1},
                                        "image": {"type": "string", "minLength": 1},
                                    },
                                    **preserve,
                                },
                                "status": {
                                    "type": "object",
                                    "description": (
                                        "Written by kura-controller, through the status subresource."
                                    ),
                                    **preserve,
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


def instance(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kura.tuist.dev/v1alpha1",
        "kind": "KuraInstance",
        "metadata": {"name": "acme-us-east", "namespace": "kura"},
        "spec": spec,
    }


REQUIRED = {"accountHandle": "acme", "tenantID": "acme", "region": "us-east", "image": "ghcr.io/tuist/kura:1"}


def test_an_instance_validates_with_the_servers_other_fields_and_not_without_a_required_one(
    recorded: ManifestRecorder,
) -> None:
    crd = recorded.find("CustomResourceDefinition", CRD_NAME)
    validate_manifest(instance(**REQUIRED, publicHost="acme.us-east.kura.tuist.dev", replicas=2), crds=[crd])
    for field in REQUIRED:
        without = {k: v for k, v in REQUIRED.items() if k != field}
        with pytest.raises(ManifestError, match=f"'{field}' is a required property"):
            validate_manifest(instance(**without), crds=[crd])
        with pytest.raises(ManifestError, match=f"spec.{field}"):
            validate_manifest(instance(**{**REQUIRED, field: ""}), crds=[crd])


def build_controller(
    environment: Environment, region: Region, fleet: Fleet, kura: Kura, cluster: Cluster
) -> tuple[ManifestRecorder, KuraController]:
    args = KuraControllerArgs(
        placements=placements(region, fleet, None), kura=kura, environment=environment, cluster=cluster
    )
    built: list[KuraController] = []
    recorded = collect_manifests(lambda: built.append(KuraController("kura-controller", args)))
    return recorded, built[0]


@pytest.mark.parametrize("environment", list(Environment))
def test_the_crd_is_retained_when_it_leaves_the_program_and_protected_in_production(
    environment: Environment, region: Region, fleet: Fleet, kura: Kura, cluster: Cluster
) -> None:
    # Deleting the CRD deletes every KuraInstance: every account's cache, in every region.
    recorded, _ = build_controller(environment, region, fleet, kura, cluster)
    options = recorded.options["kura-controller-kurainstance-crd"]
    assert options.retain_on_delete is True
    assert bool(options.protect) is (environment is Environment.PRODUCTION)


def test_the_controller_starts_only_after_the_crd_exists(
    region: Region, fleet: Fleet, kura: Kura, cluster: Cluster
) -> None:
    # Its KuraInstance informer must sync at start, or the manager exits.
    recorded, component = build_controller(Environment.STAGING, region, fleet, kura, cluster)
    depends_on = recorded.options["kura-controller-deployment"].depends_on
    assert isinstance(depends_on, list)
    assert any(d is component.crd for d in depends_on)
    assert [m["metadata"]["name"] for m in recorded.of_kind("CustomResourceDefinition")] == [CRD_NAME]
