"""PeerDemux under Pulumi mocks: the DaemonSet that rolls one box at a time and drains before it
stops, the static config that rolls it, and the route reconciler with its least-privilege RBAC."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from components.peer_demux import (
    DEMUX_CONNECTION_DRAIN_SECONDS,
    FAILOVER_ADDRESS_SCRIPT,
    RELOAD_SCRIPT,
    PeerDemux,
    PeerDemuxArgs,
)
from config.models import DEMUX_DRAIN_SECONDS, Cluster, Environment, Fleet, Kura, Region, Vendor
from tests.components.conftest import WATCHER_IMAGE
from tests.support.k8s_schema import ManifestRecorder, collect_manifests, validate_manifest


def render(
    region: Region, fleet: Fleet, kura: Kura, cluster: Cluster, failover_address: str | None = None
) -> ManifestRecorder:
    def build() -> None:
        PeerDemux(
            "demux",
            PeerDemuxArgs(
                region=region,
                fleet=fleet,
                kura=kura,
                environment=Environment.STAGING,
                cluster=cluster,
                reconciler_image=WATCHER_IMAGE,
                failover_address=failover_address,
            ),
        )

    return collect_manifests(build)


@pytest.fixture
def recorded(region: Region, fleet: Fleet, kura: Kura, cluster: Cluster) -> ManifestRecorder:
    return render(region, fleet, kura, cluster)


def pod_spec(recorded: ManifestRecorder) -> dict[str, Any]:
    spec: dict[str, Any] = recorded.find("DaemonSet", "kura-peer-demux-us-east")["spec"]["template"]["spec"]
    return spec


def test_a_roll_replaces_one_box_at_a_time_and_waits_for_readiness(recorded: ManifestRecorder) -> None:
    spec = recorded.find("DaemonSet", "kura-peer-demux-us-east")["spec"]
    # No surge: the new pod needs the old one's hostNetwork :7443. A new pod must stay Ready for a
    # while (the failover watcher sees it, its box is eligible again) before the next box drains.
    assert spec["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    }
    assert spec["minReadySeconds"] == 30


def test_a_stopping_pod_keeps_serving_while_the_failover_ip_leaves(recorded: ManifestRecorder) -> None:
    spec = pod_spec(recorded)
    [container] = spec["containers"]
    # The watcher polls every 5 s and moves at once off a terminating pod; the vendor move is done
    # well within the preStop sleep, and nginx then drains open connections until the grace ends.
    assert container["lifecycle"] == {"preStop": {"sleep": {"seconds": DEMUX_DRAIN_SECONDS}}}
    assert DEMUX_DRAIN_SECONDS >= 60
    assert spec["terminationGracePeriodSeconds"] == DEMUX_DRAIN_SECONDS + DEMUX_CONNECTION_DRAIN_SECONDS


def test_the_stack_sets_the_drain_and_the_proving_time(
    region: Region, fleet: Fleet, kura: Kura, cluster: Cluster
) -> None:
    # The dev stack's simulated failover moves take a second (config/rules.py allows it only there).
    quick = kura.model_copy(update={"demux_drain_seconds": 10, "demux_min_ready_seconds": 8})
    daemon_set = render(region, fleet, quick, cluster).find("DaemonSet", "kura-peer-demux-us-east")["spec"]
    spec = daemon_set["template"]["spec"]
    assert daemon_set["minReadySeconds"] == 8
    assert spec["containers"][0]["lifecycle"] == {"preStop": {"sleep": {"seconds": 10}}}
    assert spec["terminationGracePeriodSeconds"] == 10 + DEMUX_CONNECTION_DRAIN_SECONDS


@pytest.mark.parametrize(
    ("size", "enabled", "drain", "min_ready", "timeout"),
    [
        # Per box: the grace (60 s preStop + 60 s drain), 60 s to start, minReadySeconds 30; then
        # Pulumi's own 600 s on top. Four boxes take up to 840 s, past Pulumi's default wait.
        (2, True, 60, 30, 2 * (120 + 60 + 30) + 600),
        (4, True, 60, 30, 4 * 210 + 600),
        # The dev stack's quick drain.
        (3, True, 10, 8, 3 * (70 + 60 + 8) + 600),
        # A parked fleet has no box to roll: Pulumi's default.
        (2, False, 60, 30, 600),
    ],
)
def test_pulumi_waits_for_a_roll_of_the_whole_fleet(
    region: Region,
    fleet: Fleet,
    kura: Kura,
    cluster: Cluster,
    size: int,
    enabled: bool,
    drain: int,
    min_ready: int,
    timeout: int,
) -> None:
    sized = fleet.model_copy(update={"size": size, "enabled": enabled})
    timed = kura.model_copy(update={"demux_drain_seconds": drain, "demux_min_ready_seconds": min_ready})
    daemon_set = render(region, sized, timed, cluster).find("DaemonSet", "kura-peer-demux-us-east")
    assert daemon_set["metadata"]["annotations"] == {"pulumi.com/timeoutSeconds": str(timeout)}


def test_the_daemonset_selector_never_changes(recorded: ManifestRecorder) -> None:
    # spec.selector is immutable: a changed one would replace the DaemonSet on the next up.
    labels = {
        "app.kubernetes.io/name": "kura-peer-demux",
        "app.kubernetes.io/component": "peer-demux",
        "app.kubernetes.io/instance": "us-east",
        "app.kubernetes.io/managed-by": "tuist-infra",
        "tuist.dev/region": "us-east",
    }
    daemon_set = recorded.find("DaemonSet", "kura-peer-demux-us-east")["spec"]
    assert daemon_set["selector"] == {"matchLabels": labels}
    assert daemon_set["template"]["metadata"]["labels"] == labels


def test_daemonset_is_hostnetwork_nginx_on_7443_pinned_by_digest(
    recorded: ManifestRecorder, kura: Kura
) -> None:
    spec = pod_spec(recorded)
    assert (spec["hostNetwork"], spec["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    [container] = spec["containers"]
    assert container["image"] == kura.demux_image
    assert "@sha256:" in container["image"]
    assert container["ports"] == [{"name": "peer", "containerPort": 7443, "protocol": "TCP"}]
    assert container["readinessProbe"] == {
        "tcpSocket": {"port": 7443},
        "initialDelaySeconds": 5,
        "periodSeconds": 10,
    }


def test_every_box_of_the_pool_takes_the_failover_ip_and_is_ready_only_answering_on_it(
    region: Region, fleet: Fleet, kura: Kura, cluster: Cluster
) -> None:
    # The vendor routes the IP to whichever box the watcher picks; that box's kernel must own it.
    spec = pod_spec(render(region, fleet, kura, cluster, failover_address="198.51.100.10"))
    [init] = spec["initContainers"]
    assert (init["name"], init["image"]) == ("failover-address", kura.demux_image)
    assert init["command"] == ["/bin/sh", "/etc/kura-peer-demux/config/failover-address.sh", "198.51.100.10"]
    assert init["volumeMounts"] == [
        {"name": "config", "mountPath": "/etc/kura-peer-demux/config", "readOnly": True}
    ]
    assert init["securityContext"] == {"capabilities": {"add": ["NET_ADMIN"]}}
    assert spec["containers"][0]["readinessProbe"]["tcpSocket"] == {"port": 7443, "host": "198.51.100.10"}


def test_without_a_failover_ip_the_init_container_only_removes_the_one_a_box_kept(
    recorded: ManifestRecorder,
) -> None:
    # The region's IP removed (or not ordered yet): the boxes drop the address they were given.
    spec = pod_spec(recorded)
    [init] = spec["initContainers"]
    assert init["command"] == ["/bin/sh", "/etc/kura-peer-demux/config/failover-address.sh"]
    assert spec["containers"][0]["readinessProbe"]["tcpSocket"] == {"port": 7443}


def test_nginx_runs_under_the_reload_script_with_the_routes_mounted_as_a_directory(
    recorded: ManifestRecorder,
) -> None:
    spec = pod_spec(recorded)
    [container] = spec["containers"]
    assert container["command"] == ["/bin/sh", "/etc/kura-peer-demux/config/nginx-reload.sh"]
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "NGINX_CONF": "/etc/kura-peer-demux/config/nginx.conf",
        "ROUTES_SOURCE": "/etc/kura-peer-demux/routes/routes.map",
        "ROUTES_FILE": "/run/kura-peer-demux/routes.map",
    }
    # No subPath anywhere: the kubelet only updates a ConfigMap mounted as a whole directory.
    assert all("subPath" not in m for m in container["volumeMounts"])
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["routes"]["configMap"] == {"name": "kura-peer-demux-routes-us-east", "optional": True}
    assert volumes["config"]["configMap"] == {"name": "kura-peer-demux-us-east"}


def test_the_config_includes_the_file_the_script_installs_and_resolves_through_cluster_dns(
    recorded: ManifestRecorder, cluster: Cluster
) -> None:
    data = recorded.find("ConfigMap", "kura-peer-demux-us-east")["data"]
    assert "        include /run/kura-peer-demux/routes.map;\n" in data["nginx.conf"]
    assert f"    resolver {cluster.dns_service_ip} valid=10s ipv6=off;\n" in data["nginx.conf"]
    assert data["nginx-reload.sh"] == RELOAD_SCRIPT.read_text()
    assert data["failover-address.sh"] == FAILOVER_ADDRESS_SCRIPT.read_text()


def test_pod_template_hash_covers_the_config_and_the_script(recorded: ManifestRecorder) -> None:
    data = recorded.find("ConfigMap", "kura-peer-demux-us-east")["data"]
    template = recorded.find("DaemonSet", "kura-peer-demux-us-east")["spec"]["template"]
    digest = hashlib.sha256("".join(f"{k}\0{data[k]}\0" for k in sorted(data)).encode()).hexdigest()
    assert template["metadata"]["annotations"] == {"tuist.dev/peer-demux-config-hash": digest}


def test_new_accounts_never_roll_the_daemonset(recorded: ManifestRecorder) -> None:
    # Routes live only in the reconciler's ConfigMap, which the program creates empty; nothing
    # about them is in the pod template.
    routes = recorded.find("ConfigMap", "kura-peer-demux-routes-us-east")
    assert "data" not in routes
    assert "routes.map" not in str(
        recorded.find("DaemonSet", "kura-peer-demux-us-east")["spec"]["template"]["metadata"]
    )


def test_a_changed_resolver_rolls_the_daemonset(
    region: Region, fleet: Fleet, kura: Kura, cluster: Cluster
) -> None:
    def digest(c: Cluster) -> str:
        ds = render(region, fleet, kura, c).find("DaemonSet", "kura-peer-demux-us-east")
        return str(ds["spec"]["template"]["metadata"]["annotations"]["tuist.dev/peer-demux-config-hash"])

    assert digest(cluster) != digest(cluster.model_copy(update={"dns_service_ip": "10.43.0.10"}))


def test_daemonset_labels_are_the_watcher_selector_and_the_reconciler_is_not_a_demux(
    recorded: ManifestRecorder,
) -> None:
    ds = recorded.find("DaemonSet", "kura-peer-demux-us-east")
    assert ds["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "peer-demux"
    assert ds["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/instance"] == "us-east"
    reconciler = recorded.find("Deployment", "kura-peer-demux-routes-us-east")
    # The failover watcher counts pods with component=peer-demux as demux pods.
    assert (
        reconciler["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
        == "peer-demux-routes"
    )


def test_daemonset_runs_on_the_region_pool_tolerating_its_taints(recorded: ManifestRecorder) -> None:
    spec = pod_spec(recorded)
    assert spec["nodeSelector"] == {"node.cluster.x-k8s.io/pool": "kura-us-east"}
    assert spec["tolerations"] == [
        {"key": "tuist.dev/kura", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
        {"key": "tuist.dev/bare-metal", "operator": "Exists", "effect": "NoExecute"},
    ]


def test_on_a_robot_pool_it_also_tolerates_the_runner_tier_taint_the_machines_add(
    region: Region, fleet: Fleet, kura: Kura, cluster: Cluster
) -> None:
    # providers/machine/spec.py node_taints: every Robot Node registers with it, whatever the config.
    robot = fleet.model_copy(update={"vendor": Vendor.ROBOT})
    spec = pod_spec(render(region, robot, kura, cluster))
    assert spec["tolerations"][-1] == {
        "key": "tuist.dev/runner-tier",
        "operator": "Equal",
        "value": "bare-metal",
        "effect": "NoSchedule",
    }
    assert len(spec["tolerations"]) == 3


def test_the_reconciler_runs_python_m_demux_for_its_region(recorded: ManifestRecorder) -> None:
    deployment = recorded.find("Deployment", "kura-peer-demux-routes-us-east")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert (container["image"], container["command"]) == (WATCHER_IMAGE, ["python", "-m", "demux"])
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "REGION": "us-east",
        "REGION_HOST": "us-east.staging.kura.tuist.dev",
        "KURA_NAMESPACE": "kura",
        "PEER_PORT": "7443",
        "CLUSTER_DOMAIN": "cluster.local",
        "ROUTES_CONFIGMAP": "kura-peer-demux-routes-us-east",
    }


def test_the_reconciler_reads_services_and_writes_only_its_configmap(recorded: ManifestRecorder) -> None:
    role = recorded.find("Role", "kura-peer-demux-routes-us-east")
    assert role["metadata"]["namespace"] == "kura"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["services"], "verbs": ["list", "watch"]},
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["kura-peer-demux-routes-us-east"],
            "verbs": ["get", "patch"],
        },
    ]
    assert recorded.of_kind("ClusterRole") == []


def test_every_demux_object_is_schema_valid(recorded: ManifestRecorder) -> None:
    assert sorted(m["kind"] for m in recorded.manifests) == [
        "ConfigMap",
        "ConfigMap",
        "DaemonSet",
        "Deployment",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]
    for manifest in recorded.manifests:
        validate_manifest(manifest)


def test_the_daemonset_with_a_failover_address_is_schema_valid(
    region: Region, fleet: Fleet, kura: Kura, cluster: Cluster
) -> None:
    validate_manifest(
        render(region, fleet, kura, cluster, failover_address="198.51.100.10").find(
            "DaemonSet", "kura-peer-demux-us-east"
        )
    )
