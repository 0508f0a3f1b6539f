"""RunnerPools under Pulumi mocks: one invariant per test, every object schema-checked."""

from __future__ import annotations

import copy
import re
import tomllib
from decimal import Decimal
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from components.runner_pool import (
    KATA_GUEST_BASE_MEMORY_MIB,
    KATA_GUEST_BASE_VCPUS,
    KATA_HOST_OVERHEAD_MIB,
    KATA_POD_OVERHEAD,
    runner_pool_manifest,
    runner_pool_spec,
)
from components.runners import RunnerPools, RunnerPoolsArgs
from config.loader import load_stack_config
from config.models import Autoscaling, Cluster, Fleet, Hardware, Pricing, RunnerOS, RunnerPool, Taint, Vendor
from tests.support.k8s_schema import ManifestError, ManifestRecorder, collect_manifests, validate_manifest

REPO = Path(__file__).resolve().parents[2]
RUNNER_IMAGE = "ghcr.io/tuist/linux-runner@sha256:" + "a" * 64
MAC_IMAGE = "ghcr.io/tuist/macos-runner@sha256:" + "b" * 64
CONTROLLER_IMAGE = "ghcr.io/tuist/runners-controller:1.4.2"


# --- rendering under mocks -----------------------------------------------------------


def render(args: RunnerPoolsArgs) -> ManifestRecorder:
    def build() -> None:
        cluster = k8s.Provider("cluster", render_yaml_to_directory="/nonexistent-render-dir")
        RunnerPools("runners", args, opts=pulumi.ResourceOptions(providers=[cluster]))

    return collect_manifests(build)


def pool_object(rendered: ManifestRecorder, name: str) -> dict[str, Any]:
    return rendered.find("RunnerPool", name)


def the(rendered: ManifestRecorder, kind: str) -> dict[str, Any]:
    (manifest,) = rendered.of_kind(kind)
    return manifest


# --- config ------------------------------------------------------------------------


def robot_fleet() -> Fleet:
    return Fleet(
        name="runners-linux",
        vendor=Vendor.ROBOT,
        marker="tuist-bm-staging-",
        size=1,
        node_pool="runners-linux-pool",
        taints=[Taint(key="tuist.dev/runner-tier", value="bare-metal", effect="NoSchedule")],
        hardware=Hardware(offer="AX42-U", threads=16, memory_gib=64),
        pricing=Pricing(monthly_eur=Decimal("57"), setup_eur=Decimal("234")),
    )


def mac_fleet() -> Fleet:
    return Fleet(
        name="runners-macos",
        vendor=Vendor.OVH,
        marker="tuist-staging-mac-",
        size=3,
        node_pool="runners-macos",
        hardware=Hardware(offer="Mac-mini-M4", threads=10, memory_gib=16),
    )


def linux_pool(**autoscaling: Any) -> RunnerPool:
    return RunnerPool(
        name="linux-default",
        os=RunnerOS.LINUX,
        fleet="runners-linux",
        dispatch_label="tuist-linux",
        image=RUNNER_IMAGE,
        pod_cpu_milli=1000,
        pod_memory_mb=4096,
        autoscaling=Autoscaling(**autoscaling),
    )


def mac_pool() -> RunnerPool:
    return RunnerPool(
        name="macos-default",
        os=RunnerOS.DARWIN,
        fleet="runners-macos",
        dispatch_label="tuist-macos",
        image=MAC_IMAGE,
        pod_cpu_milli=8000,
        pod_memory_mb=14336,
    )


ZERO_AUTOSCALING = {"min_warm_pool_floor": 0, "max_replicas": 0, "scale_down_cooldown_seconds": 0}


def stack_args(*pools: RunnerPool) -> RunnerPoolsArgs:
    return RunnerPoolsArgs(
        pools=list(pools) or [linux_pool(**ZERO_AUTOSCALING), mac_pool()],
        fleets=[robot_fleet(), mac_fleet()],
        cluster=Cluster(runners_namespace="tuist-runners", runners_controller_image=CONTROLLER_IMAGE),
    )


@pytest.fixture(scope="module")
def rendered() -> ManifestRecorder:
    return render(stack_args())


# --- validation ----------------------------------------------------------------------


def crd_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    spec_version = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return spec_version["schema"]["openAPIV3Schema"]


def validate(manifest: dict[str, Any], rendered: ManifestRecorder) -> None:
    """Built-ins against Kubernetes 1.34, RunnerPool against the CRD we render,
    CiliumNodeConfig against the CRD Cilium publishes (scripts/cluster-platform)."""
    validate_manifest(manifest, "1.34", crds=[the(rendered, "CustomResourceDefinition")])


def test_every_object_is_valid_against_its_schema(rendered: ManifestRecorder) -> None:
    kinds = sorted(m["kind"] for m in rendered.manifests)
    assert kinds == [
        "CiliumNodeConfig",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "Deployment",
        "Namespace",
        "Role",
        "RoleBinding",
        "RunnerPool",
        "RunnerPool",
        "RuntimeClass",
        "ServiceAccount",
    ]
    for manifest in rendered.manifests:
        validate(manifest, rendered)


def test_the_validator_rejects_a_runner_pool_without_runner_labels(rendered: ManifestRecorder) -> None:
    broken = copy.deepcopy(pool_object(rendered, "linux-default"))
    broken["spec"]["runnerLabels"] = []
    with pytest.raises(ManifestError) as err:
        validate(broken, rendered)
    assert str(err.value) == (
        "tuist.dev/v1alpha1 RunnerPool tuist-runners/linux-default: spec.runnerLabels: [] should be non-empty"
    )


def test_the_validator_rejects_a_runner_image_pinned_by_tag(rendered: ManifestRecorder) -> None:
    broken = copy.deepcopy(pool_object(rendered, "linux-default"))
    broken["spec"]["image"] = "ghcr.io/tuist/linux-runner:2.334.0"
    with pytest.raises(ManifestError) as err:
        validate(broken, rendered)
    assert str(err.value) == (
        "tuist.dev/v1alpha1 RunnerPool tuist-runners/linux-default: spec.image:"
        " 'ghcr.io/tuist/linux-runner:2.334.0' does not match '^[a-z0-9.\\\\-/:_]+@sha256:[0-9a-f]{64}$'"
    )


def test_the_validator_rejects_an_unknown_runner_pool_field(rendered: ManifestRecorder) -> None:
    broken = copy.deepcopy(pool_object(rendered, "linux-default"))
    broken["spec"]["autoscaling"]["minWarmPool"] = 0
    with pytest.raises(ManifestError) as err:
        validate(broken, rendered)
    assert str(err.value) == (
        "tuist.dev/v1alpha1 RunnerPool tuist-runners/linux-default: spec.autoscaling:"
        " Additional properties are not allowed ('minWarmPool' was unexpected)"
    )


def test_the_validator_rejects_a_cilium_override_without_a_node_selector(rendered: ManifestRecorder) -> None:
    broken = copy.deepcopy(the(rendered, "CiliumNodeConfig"))
    del broken["spec"]["nodeSelector"]
    with pytest.raises(ManifestError) as err:
        validate(broken, rendered)
    assert str(err.value) == (
        "cilium.io/v2 CiliumNodeConfig kube-system/kata-bare-metal:"
        " spec: 'nodeSelector' is a required property"
    )


class ProviderRecorder(ManifestRecorder):
    def __init__(self) -> None:
        super().__init__()
        self.provider_of: dict[str, str | None] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
        if args.typ.startswith("kubernetes:") and args.custom:
            self.provider_of[f"{args.typ}::{args.name}"] = args.provider
        return super().new_resource(args)


def stack_file_args(env: str) -> RunnerPoolsArgs:
    raw = yaml.safe_load((REPO / f"Pulumi.{env}.yaml").read_text())["config"]
    cfg = load_stack_config({key.removeprefix("tuist-infra:"): value for key, value in raw.items()})
    return RunnerPoolsArgs(
        pools=cfg.runner_pools,
        fleets=cfg.fleets,
        cluster=cfg.cluster,
    )


@pytest.mark.parametrize("env", ["staging", "canary", "production"])
def test_each_stack_files_runner_objects_are_valid(env: str) -> None:
    out = render(stack_file_args(env))
    assert len(out.of_kind("RunnerPool")) >= 1
    for manifest in out.manifests:
        validate(manifest, out)


def test_every_kubernetes_object_goes_through_the_callers_provider() -> None:
    recorder = ProviderRecorder()
    pulumi.runtime.set_mocks(recorder, project="tuist-infra", stack="test", preview=False)

    @pulumi.runtime.test
    def build() -> None:
        cluster = k8s.Provider("cluster", render_yaml_to_directory="/nonexistent-render-dir")
        RunnerPools("runners", stack_args(), opts=pulumi.ResourceOptions(providers=[cluster]))

    build()
    assert len(recorder.provider_of) == 12
    assert set(recorder.provider_of.values()) == {
        "urn:pulumi:test::tuist-infra::pulumi:pulumi:Stack$pulumi:providers:kubernetes::cluster::cluster-id"
    }


def test_components_use_project_type_tokens(rendered: ManifestRecorder) -> None:
    assert sorted(rendered.components) == [
        ("tuist:runner_pool:RunnerPool", "runners-linux-default"),
        ("tuist:runner_pool:RunnerPool", "runners-macos-default"),
        ("tuist:runners:KataRuntime", "runners-kata"),
        ("tuist:runners:RunnerPools", "runners"),
        ("tuist:runners:RunnersController", "runners-controller"),
    ]


# --- the RunnerPool CRD ----------------------------------------------------------------


def test_crd_identity(rendered: ManifestRecorder) -> None:
    crd = the(rendered, "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "runnerpools.tuist.dev"
    assert crd["spec"]["group"] == "tuist.dev"
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"] == {
        "kind": "RunnerPool",
        "listKind": "RunnerPoolList",
        "plural": "runnerpools",
        "singular": "runnerpool",
        "shortNames": ["rpool"],
    }
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


def test_crd_requires_runner_labels_with_at_least_one_item(rendered: ManifestRecorder) -> None:
    spec = crd_schema(the(rendered, "CustomResourceDefinition"), "v1alpha1")["properties"]["spec"]
    assert spec["required"] == ["image", "fleetSelector", "dispatchLabel", "runnerLabels"]
    assert spec["properties"]["runnerLabels"]["minItems"] == 1


def test_crd_defaults_match_the_reference(rendered: ManifestRecorder) -> None:
    spec = crd_schema(the(rendered, "CustomResourceDefinition"), "v1alpha1")["properties"]["spec"]
    props = spec["properties"]
    autoscaling = props["autoscaling"]["properties"]
    defaults = {
        "replicas": props["replicas"].get("default"),
        "os": props["os"].get("default"),
        "podCPUMilli": props["podCPUMilli"].get("default"),
        "podMemoryMB": props["podMemoryMB"].get("default"),
        "minWarmPoolFloor": autoscaling["minWarmPoolFloor"].get("default"),
        "maxReplicas": autoscaling["maxReplicas"].get("default"),
        "scaleDownCooldownSeconds": autoscaling["scaleDownCooldownSeconds"].get("default"),
    }
    assert defaults == {
        "replicas": 0,
        "os": "darwin",
        "podCPUMilli": 8000,
        "podMemoryMB": 14336,
        "minWarmPoolFloor": 1,
        "maxReplicas": None,
        "scaleDownCooldownSeconds": 300,
    }
    assert props["os"]["enum"] == ["darwin", "linux"]


def test_crd_status_fields(rendered: ManifestRecorder) -> None:
    status = crd_schema(the(rendered, "CustomResourceDefinition"), "v1alpha1")["properties"]["status"]
    assert sorted(status["properties"]) == [
        "imageRolledAt",
        "lastReconcile",
        "lastScaleDownAt",
        "observedImage",
        "observedReplicas",
    ]


# --- explicit zeros are sent (the apiserver keeping them: tests/cluster/test_k8s_runners.py) --------


def assert_autoscaling_zeros(pool_object: dict[str, Any]) -> None:
    autoscaling = pool_object["spec"]["autoscaling"]
    for field in ("minWarmPoolFloor", "maxReplicas", "scaleDownCooldownSeconds"):
        assert field in autoscaling, f"{field} omitted"
        assert autoscaling[field] is not None, f"{field} is None"
        assert autoscaling[field] == 0, f"{field} is {autoscaling[field]}"


def test_rendered_pool_carries_literal_zeros(rendered: ManifestRecorder) -> None:
    assert_autoscaling_zeros(pool_object(rendered, "linux-default"))


def test_pure_manifest_carries_literal_integer_zeros() -> None:
    autoscaling = runner_pool_manifest(linux_pool(**ZERO_AUTOSCALING), robot_fleet(), "tuist-runners")[
        "spec"
    ]["autoscaling"]
    assert autoscaling == {
        "enabled": True,
        "minWarmPoolFloor": 0,
        "maxReplicas": 0,
        "scaleDownCooldownSeconds": 0,
    }
    assert all(type(v) is int for k, v in autoscaling.items() if k != "enabled")


def test_linux_pool_runs_as_kata_microvms_on_the_runner_tier(rendered: ManifestRecorder) -> None:
    spec = pool_object(rendered, "linux-default")["spec"]
    assert spec["runnerLabels"] == ["self-hosted", "Linux", "X64"]
    assert spec["os"] == "linux"
    assert spec["runtimeClass"] == "kata-qemu"
    assert spec["nodeSelector"] == {
        "katacontainers.io/kata-runtime": "true",
        "node.cluster.x-k8s.io/pool": "runners-linux-pool",
    }
    assert spec["tolerations"] == [
        {"key": "tuist.dev/runner-tier", "operator": "Equal", "value": "bare-metal", "effect": "NoSchedule"}
    ]


def test_a_runner_fleet_with_a_taint_of_its_own_still_runs_its_pods() -> None:
    # The Nodes carry the fleet's taints and the runner tier's; the pods tolerate each exactly.
    fleet = robot_fleet()
    fleet = fleet.model_copy(
        update={
            "taints": [
                *fleet.taints,
                Taint(key="tuist.dev/dedicated", value="ci", effect="NoSchedule"),
                Taint(key="tuist.dev/draining", effect="NoExecute"),
            ]
        }
    )
    spec = runner_pool_spec(linux_pool(**ZERO_AUTOSCALING), fleet)
    assert spec["tolerations"] == [
        {"key": "tuist.dev/runner-tier", "operator": "Equal", "value": "bare-metal", "effect": "NoSchedule"},
        {"key": "tuist.dev/dedicated", "operator": "Equal", "value": "ci", "effect": "NoSchedule"},
        {"key": "tuist.dev/draining", "operator": "Exists", "effect": "NoExecute"},
    ]


def test_linux_pool_takes_fleet_image_and_size_from_config(rendered: ManifestRecorder) -> None:
    pool = pool_object(rendered, "linux-default")
    assert pool["metadata"]["namespace"] == "tuist-runners"
    assert pool["metadata"]["labels"]["tuist.dev/fleet"] == "runners-linux"
    spec = pool["spec"]
    assert (spec["fleetSelector"], spec["dispatchLabel"], spec["image"]) == (
        "runners-linux",
        "tuist-linux",
        RUNNER_IMAGE,
    )
    assert (spec["podCPUMilli"], spec["podMemoryMB"]) == (1000, 4096)


def test_macos_pool_has_mac_labels_and_no_kata_scheduling(rendered: ManifestRecorder) -> None:
    spec = pool_object(rendered, "macos-default")["spec"]
    assert spec["runnerLabels"] == ["self-hosted", "macOS", "ARM64"]
    assert spec["os"] == "darwin"
    assert spec["fleetSelector"] == "runners-macos"
    assert {"runtimeClass", "nodeSelector", "tolerations"} & set(spec) == set()


def test_pools_leave_replicas_to_the_autoscaler(rendered: ManifestRecorder) -> None:
    assert all("replicas" not in pool["spec"] for pool in rendered.of_kind("RunnerPool"))


def test_explicit_autoscaling_values_are_rendered_as_configured() -> None:
    pool = linux_pool(
        enabled=False, min_warm_pool_floor=30, max_replicas=120, scale_down_cooldown_seconds=600
    )
    out = render(stack_args(pool))
    assert pool_object(out, "linux-default")["spec"]["autoscaling"] == {
        "enabled": False,
        "minWarmPoolFloor": 30,
        "maxReplicas": 120,
        "scaleDownCooldownSeconds": 600,
    }


def test_a_pool_on_an_unknown_fleet_is_refused() -> None:
    stray = linux_pool().model_copy(update={"fleet": "runners-arm"})
    with pytest.raises(ValueError) as err:
        render(stack_args(stray))
    assert str(err.value) == "runner_pools[0].fleet: 'runners-arm' is not a configured fleet"


# --- runners-controller -------------------------------------------------------------------


def wildcards(rules: list[dict[str, Any]]) -> list[str]:
    return [
        f"rules[{i}].{field}"
        for i, rule in enumerate(rules)
        for field in ("apiGroups", "resources", "verbs", "resourceNames")
        if any("*" in entry for entry in rule.get(field, []))
    ]


def test_the_controller_starts_only_after_the_crd_and_the_runtime_class_exist() -> None:
    # Its RunnerPool informer must sync at start, or the manager exits; its Linux runner pods name
    # the kata runtime class, which admission checks.
    components: list[RunnerPools] = []

    def build() -> None:
        cluster = k8s.Provider("cluster", render_yaml_to_directory="/nonexistent-render-dir")
        components.append(
            RunnerPools("runners", stack_args(), opts=pulumi.ResourceOptions(providers=[cluster]))
        )

    recorded = collect_manifests(build)
    (pools,) = components
    depends_on = recorded.options["runners-controller-deployment"].depends_on
    assert isinstance(depends_on, list)
    assert any(d is pools.crd for d in depends_on)
    assert any(d is pools.kata.runtime_class for d in depends_on)


def test_controller_role_has_no_wildcards(rendered: ManifestRecorder) -> None:
    assert wildcards(the(rendered, "Role")["rules"]) == []


def test_the_wildcard_check_finds_a_wildcard() -> None:
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
        {"apiGroups": ["*"], "verbs": ["*"]},
    ]
    assert wildcards(rules) == ["rules[1].apiGroups", "rules[1].verbs"]


def test_controller_role_is_exactly_upstreams_markers_in_its_namespace(rendered: ManifestRecorder) -> None:
    # tuist/tuist infra/runners-controller/controllers/*.go +kubebuilder:rbac, namespaced part; pods/log
    # is left out (upstream reads logs only with --sessions-url, which is not passed).
    role = the(rendered, "Role")
    assert role["metadata"]["namespace"] == "tuist-runners"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["get", "list", "watch", "create", "patch", "delete"],
        },
        {
            "apiGroups": [""],
            "resources": ["serviceaccounts"],
            "verbs": ["get", "list", "watch", "create", "delete"],
        },
        {
            "apiGroups": ["tuist.dev"],
            "resources": ["runnerpools"],
            "verbs": ["get", "list", "watch", "update", "patch"],
        },
        {
            "apiGroups": ["tuist.dev"],
            "resources": ["runnerpools/status"],
            "verbs": ["get", "update", "patch"],
        },
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["runners-controller.tuist.dev"],
            "verbs": ["get", "update"],
        },
    ]


def test_cluster_wide_the_controller_only_reads_nodes(rendered: ManifestRecorder) -> None:
    # Upstream watches Nodes (the drain of a cordoned node) and lists the fleet's: its informer must
    # sync. Its marker's `patch` (the node reservation taint) is not granted.
    assert the(rendered, "ClusterRole")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    ]
    binding = the(rendered, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "runners-controller",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "runners-controller", "namespace": "tuist-runners"}
    ]
    rules = [*the(rendered, "Role")["rules"], *the(rendered, "ClusterRole")["rules"]]
    assert all("secrets" not in rule["resources"] for rule in rules)


def test_role_binding_binds_the_controller_service_account(rendered: ManifestRecorder) -> None:
    binding = the(rendered, "RoleBinding")
    sa = the(rendered, "ServiceAccount")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": the(rendered, "Role")["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "tuist-runners"}
    ]


def test_controller_namespace_comes_from_config() -> None:
    args = stack_args()
    cluster = Cluster(runners_namespace="ci-runners", runners_controller_image=CONTROLLER_IMAGE)
    out = render(RunnerPoolsArgs(pools=args.pools, fleets=args.fleets, cluster=cluster))
    placed = sorted((m["kind"], m["metadata"].get("namespace")) for m in out.manifests)
    assert placed == [
        ("CiliumNodeConfig", "kube-system"),
        ("ClusterRole", None),
        ("ClusterRoleBinding", None),
        ("CustomResourceDefinition", None),
        ("Deployment", "ci-runners"),
        ("Namespace", None),
        ("Role", "ci-runners"),
        ("RoleBinding", "ci-runners"),
        ("RunnerPool", "ci-runners"),
        ("RunnerPool", "ci-runners"),
        ("RuntimeClass", None),
        ("ServiceAccount", "ci-runners"),
    ]
    assert the(out, "Namespace")["metadata"]["name"] == "ci-runners"
    (container,) = the(out, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "--namespace=ci-runners"
    assert the(out, "ClusterRoleBinding")["subjects"][0]["namespace"] == "ci-runners"


def test_controller_deployment_runs_the_configured_image_with_only_upstreams_flags(
    rendered: ManifestRecorder,
) -> None:
    deployment = the(rendered, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == CONTROLLER_IMAGE
    # Flags its cmd/manager/main.go defines; leader election is always on there, not a flag.
    assert container["args"] == [
        "--namespace=tuist-runners",
        "--health-probe-bind-address=:8081",
        "--metrics-bind-address=:8080",
    ]
    assert pod["serviceAccountName"] == the(rendered, "ServiceAccount")["metadata"]["name"]
    # Its token is how the Tuist server knows it (TokenReview): mounted, never turned off.
    assert pod["automountServiceAccountToken"] is True
    assert "automountServiceAccountToken" not in the(rendered, "ServiceAccount")
    assert container["resources"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"memory": "256Mi"},
    }


def test_controller_runs_non_root_read_only_without_escalation(rendered: ManifestRecorder) -> None:
    pod = the(rendered, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


# --- Kata runtime and Cilium --------------------------------------------------------------


def test_runtime_class_is_kata_qemu_with_the_slot_sized_overhead(rendered: ManifestRecorder) -> None:
    runtime_class = the(rendered, "RuntimeClass")
    assert runtime_class["metadata"]["name"] == "kata-qemu"
    assert runtime_class["handler"] == "kata-qemu"
    # The 256 MiB guest the pre-bake sizes plus 64 MiB of QEMU, virtiofsd and shim (seed 003:
    # ~45-50 MiB of VMM per pod).
    assert runtime_class["overhead"] == {"podFixed": {"cpu": "50m", "memory": "320Mi"}}


def prebake_kata_dropin() -> dict[str, Any]:
    """The Kata drop-in the Robot post-install script writes, parsed as Kata reads it (TOML)."""
    script = (REPO / "providers/ssh/scripts/robot-postinstall.sh").read_text()
    match = re.search(r"config\.d/50-tuist-runner-slot\.toml <<'TOML'\n(.*?)\nTOML\n", script, re.S)
    assert match, "robot-postinstall.sh no longer writes the runner-slot Kata drop-in"
    return tomllib.loads(match.group(1))


def test_the_prebaked_guest_is_the_size_the_runtime_class_charges_for() -> None:
    dropin = prebake_kata_dropin()
    assert dropin["hypervisor"]["qemu"]["default_memory"] == KATA_GUEST_BASE_MEMORY_MIB
    assert dropin["hypervisor"]["qemu"]["default_vcpus"] == KATA_GUEST_BASE_VCPUS
    # Every Kata process in the pod's cgroup: the overhead is what the host really pays.
    assert dropin["runtime"]["sandbox_cgroup_only"] is True
    assert KATA_POD_OVERHEAD["memory"] == f"{KATA_GUEST_BASE_MEMORY_MIB + KATA_HOST_OVERHEAD_MIB}Mi"


def test_the_guest_base_is_not_below_kata_s_floor() -> None:
    # virtcontainers MinHypervisorMemory: a smaller default_memory is silently replaced by 2048 MiB,
    # and the host would then commit 1.8 GiB per pod more than the RuntimeClass charges.
    assert prebake_kata_dropin()["hypervisor"]["qemu"]["default_memory"] >= 256


def test_runtime_class_schedules_only_onto_kata_runner_hosts(rendered: ManifestRecorder) -> None:
    assert the(rendered, "RuntimeClass")["scheduling"] == {
        "nodeSelector": {"katacontainers.io/kata-runtime": "true"},
        "tolerations": [
            {
                "key": "tuist.dev/runner-tier",
                "operator": "Equal",
                "value": "bare-metal",
                "effect": "NoSchedule",
            }
        ],
    }


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """LabelSelector semantics for matchLabels (the override uses nothing else)."""
    assert set(selector) <= {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def test_cilium_override_selects_only_kata_nodes(rendered: ManifestRecorder) -> None:
    override = the(rendered, "CiliumNodeConfig")
    assert override["apiVersion"] == "cilium.io/v2"
    assert override["metadata"] == {"name": "kata-bare-metal", "namespace": "kube-system"}
    selector = override["spec"]["nodeSelector"]
    assert selector == {"matchLabels": {"tuist.dev/kata-runtime": "true"}}
    kata_node = {"tuist.dev/kata-runtime": "true", "katacontainers.io/kata-runtime": "true"}
    cloud_worker = {"node.kubernetes.io/instance-type": "cpx41"}
    kura_box = {"node.cluster.x-k8s.io/pool": "kura-ovh", "tuist.dev/kata-runtime": "false"}
    assert [selects(selector, n) for n in (kata_node, cloud_worker, kura_box)] == [True, False, False]


def test_cilium_override_shrinks_and_caps_bpf_maps(rendered: ManifestRecorder) -> None:
    assert the(rendered, "CiliumNodeConfig")["spec"]["defaults"] == {
        "bpf-map-dynamic-size-ratio": "0.0005",
        "bpf-ct-global-tcp-max": "524288",
        "bpf-ct-global-any-max": "262144",
        "bpf-nat-global-max": "524288",
    }


# --- the Tuist server --------------------------------------------------------------------------


def server_args(url: str = "https://staging.tuist.dev") -> RunnerPoolsArgs:
    args = stack_args()
    cluster = args.cluster.model_copy(update={"tuist_server_url": url})
    return RunnerPoolsArgs(pools=args.pools, fleets=args.fleets, cluster=cluster)


def controller_container(out: ManifestRecorder) -> dict[str, Any]:
    (container,) = the(out, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def test_the_controller_is_told_the_servers_dispatch_and_scaling_signal_urls() -> None:
    out = render(server_args())
    assert controller_container(out)["env"] == [
        {
            "name": "TUIST_RUNNER_DISPATCH_URL",
            "value": "https://staging.tuist.dev/api/internal/runners/dispatch",
        },
        {
            "name": "TUIST_SCALING_SIGNALS_URL",
            "value": "https://staging.tuist.dev/api/internal/runners/desired_replicas",
        },
    ]
    assert the(out, "Deployment")["spec"]["replicas"] == 2


def test_a_trailing_slash_on_the_server_url_is_not_doubled() -> None:
    env = controller_container(render(server_args(url="https://staging.tuist.dev/")))["env"]
    assert [e["value"] for e in env] == [
        "https://staging.tuist.dev/api/internal/runners/dispatch",
        "https://staging.tuist.dev/api/internal/runners/desired_replicas",
    ]


def test_no_static_token_reaches_the_cluster() -> None:
    # Upstream authenticates with its ServiceAccount token (TokenReview on the server): no Secret,
    # and the pod template has no token hash to roll on.
    out = render(server_args())
    assert out.of_kind("Secret") == []
    assert "annotations" not in the(out, "Deployment")["spec"]["template"]["metadata"]
    assert the(out, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"] is True


def test_without_a_server_the_controller_is_not_run(rendered: ManifestRecorder) -> None:
    # Upstream exits 1 without a dispatch URL: zero replicas rather than a crash loop.
    deployment = the(rendered, "Deployment")
    assert deployment["spec"]["replicas"] == 0
    assert "env" not in deployment["spec"]["template"]["spec"]["containers"][0]
