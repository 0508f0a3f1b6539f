"""Each policy of the pack, called as its analyzer calls it, on the facts it protects.

The same policies run through the real engine in test_pack_engine.py; these pin down the edges
(unknown values in a preview, explicit zeros, ports written in other forms) cheaply.
"""

from __future__ import annotations

from typing import Any

import pytest

from components.peer_demux import demux_config
from config.models import Cluster, Kura
from policy.tuist_policy import advisory, mandatory
from policy.tuist_policy.images import floating_reason
from tests.policy.support import UNKNOWN, check_resource, check_stack, deployment, resource

MACHINE = "pulumi-python:dynamic/machine:AdoptedMachine"
CLAIM = "pulumi-python:dynamic/machine:MachineClaim"
FAILOVER = "pulumi-python:dynamic/failover:FailoverIP"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SERVICE = "kubernetes:core/v1:Service"
RUNNER_POOL = "kubernetes:tuist.dev/v1alpha1:RunnerPool"
RUNTIME_CLASS = "kubernetes:node.k8s.io/v1:RuntimeClass"
DIGEST = "sha256:" + "a" * 64


# --- production machines --------------------------------------------------------------------------


@pytest.mark.parametrize("type_", [MACHINE, CLAIM])
def test_an_unprotected_production_machine_is_refused_whatever_its_kind(type_: str) -> None:
    props = {"environment": "production", "fleet": "kura-us-east"}
    found = check_resource(mandatory.production_machines_protected, type_, props, name="kura-us-east-0")
    assert (
        len(found) == 1 and "kura-us-east-0 (fleet kura-us-east)" in found[0] and "protect=True" in found[0]
    )
    assert not check_resource(mandatory.production_machines_protected, type_, props, protect=True)


def test_the_production_stack_counts_even_when_the_machine_does_not_say_its_environment() -> None:
    found = check_resource(mandatory.production_machines_protected, CLAIM, {"fleet": "f"}, stack="production")
    assert found


def test_machines_outside_production_may_be_unprotected() -> None:
    props = {"environment": "staging", "fleet": "kura-ca-east"}
    assert not check_resource(mandatory.production_machines_protected, MACHINE, props, stack="staging")


# --- images ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "why"),
    [
        ("ghcr.io/tuist/kura-controller:main", "floating tag 'main'"),
        ("ghcr.io/tuist/kura:latest", "floating tag 'latest'"),
        ("ghcr.io/tuist/kura", "no tag"),
        # A registry port is not a tag.
        ("registry.internal:5000/tuist/watcher", "no tag"),
        ("ghcr.io/tuist/kura@sha256:1234", "malformed digest"),
        # Not in the floating list, and still no single release.
        ("nginx:alpine", "names no release"),
        ("nginx:mainline", "names no release"),
        ("ghcr.io/tuist/kura:v1", "names no release"),
    ],
)
def test_floating_images(image: str, why: str) -> None:
    reason = floating_reason(image)
    assert reason is not None and why in reason


@pytest.mark.parametrize(
    "image",
    [
        "nginx:1.27.3-alpine",
        "registry.k8s.io/ingress-nginx/controller:v1.11.3",
        f"ghcr.io/tuist/tuist-infra-watcher@{DIGEST}",
        f"registry.internal:5000/tuist/watcher:0.4.1@{DIGEST}",
    ],
)
def test_pinned_images(image: str) -> None:
    assert floating_reason(image) is None


def test_a_floating_container_image_fails_outside_dev_and_passes_in_dev() -> None:
    props = deployment(
        "kura-controller", {"containers": [{"name": "c", "image": "ghcr.io/tuist/kura-controller:main"}]}
    )
    found = check_resource(mandatory.images_pinned, DEPLOYMENT, props, stack="canary")
    assert found == [
        "Deployment kura-controller: container 'c' 'ghcr.io/tuist/kura-controller:main' uses the floating "
        "tag 'main'; pin a digest (@sha256:...) or an explicit release tag"
    ]
    assert not check_resource(mandatory.images_pinned, DEPLOYMENT, props, stack="dev")


def test_the_kura_runtime_image_in_the_controller_settings_is_checked() -> None:
    props = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kura-controller-eu-central"},
        "data": {"KURA_RUNTIME_IMAGE": "ghcr.io/tuist/kura:latest", "KURA_REGION": "eu-central"},
    }
    found = check_resource(mandatory.images_pinned, CONFIG_MAP, props)
    assert len(found) == 1 and "data.KURA_RUNTIME_IMAGE" in found[0]


def test_the_kura_runtime_image_in_the_controllers_env_is_checked() -> None:
    # kura-controller starts the Kura runtime it names in its env (seed 001: an explicit runtime tag).
    props = deployment(
        "kura-controller",
        {
            "containers": [
                {
                    "name": "controller",
                    "image": "ghcr.io/tuist/kura-controller:0.10.4",
                    "env": [
                        {"name": "KURA_RUNTIME_IMAGE", "value": "ghcr.io/tuist/kura:latest"},
                        {"name": "KURA_REGION", "value": "eu-central"},
                    ],
                }
            ]
        },
    )
    found = check_resource(mandatory.images_pinned, DEPLOYMENT, props, stack="production")
    assert found == [
        "Deployment kura-controller: container 'controller' env KURA_RUNTIME_IMAGE "
        "'ghcr.io/tuist/kura:latest' uses the floating tag 'latest'; "
        "pin a digest (@sha256:...) or an explicit release tag"
    ]


def test_init_containers_and_runner_pool_images_are_checked_and_unknown_images_skipped() -> None:
    props = deployment(
        "w",
        {
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [{"name": "c", "image": UNKNOWN}],
        },
    )
    found = check_resource(mandatory.images_pinned, DEPLOYMENT, props)
    assert len(found) == 1 and "container 'init'" in found[0]
    pool = {"metadata": {"name": "linux"}, "spec": {"image": "ghcr.io/tuist/linux-runner:main"}}
    assert check_resource(mandatory.images_pinned, RUNNER_POOL, pool)


@pytest.mark.parametrize(
    ("type_", "kind", "where"),
    [
        ("kubernetes:core/v1:ReplicationController", "ReplicationController", ("spec", "template", "spec")),
        ("kubernetes:core/v1:PodTemplate", "PodTemplate", ("template", "spec")),
        ("kubernetes:batch/v1:CronJob", "CronJob", ("spec", "jobTemplate", "spec", "template", "spec")),
        ("kubernetes:core/v1:Pod", "Pod", ("spec",)),
    ],
)
def test_every_kind_that_carries_a_pod_template_has_its_images_checked(
    type_: str, kind: str, where: tuple[str, ...]
) -> None:
    props: dict[str, Any] = {"containers": [{"name": "c", "image": "ghcr.io/tuist/kura:latest"}]}
    for key in reversed(where):
        props = {key: props}
    props["metadata"] = {"name": "w"}
    assert check_resource(mandatory.images_pinned, type_, props) == [
        f"{kind} w: container 'c' 'ghcr.io/tuist/kura:latest' uses the floating tag 'latest'; "
        "pin a digest (@sha256:...) or an explicit release tag"
    ]


# --- gateway and load balancers --------------------------------------------------------------------

GATEWAY_ARGS = [
    "/nginx-ingress-controller",
    "--ingress-class=kura-eu-central",
    "--report-node-internal-ip-address=true",
]


def _gateway(host_network: Any, args: list[str]) -> dict[str, Any]:
    container = {
        "name": "controller",
        "image": "registry.k8s.io/ingress-nginx/controller:v1.11.3",
        "args": args,
    }
    return deployment("kura-gateway-eu-central", {"hostNetwork": host_network, "containers": [container]})


def test_the_bare_metal_gateway_passes() -> None:
    assert not check_resource(mandatory.gateway_no_proxy_protocol, DEPLOYMENT, _gateway(True, GATEWAY_ARGS))
    config = {"metadata": {"name": "kura-gateway-eu-central"}, "data": {"use-proxy-protocol": "false"}}
    assert not check_resource(mandatory.gateway_no_proxy_protocol, CONFIG_MAP, config)


def test_a_private_regions_node_port_gateway_passes_and_only_it() -> None:
    from components.gateway import DATA_PLANE_LABEL, NODE_PORT_DATA_PLANE

    assert (DATA_PLANE_LABEL, NODE_PORT_DATA_PLANE) == (
        mandatory.DATA_PLANE_LABEL,
        mandatory.NODE_PORT_DATA_PLANE,
    )
    args = ["/nginx-ingress-controller", "--publish-service=kura/kura-gateway-scw-fr-par-runners"]
    container = {
        "name": "controller",
        "image": "registry.k8s.io/ingress-nginx/controller:v1.11.3",
        "args": args,
    }
    spec = {"containers": [container]}
    labels = {DATA_PLANE_LABEL: NODE_PORT_DATA_PLANE}
    node_port = deployment("kura-gateway-scw-fr-par-runners", spec, labels)
    assert not check_resource(mandatory.gateway_no_proxy_protocol, DEPLOYMENT, node_port)
    public = deployment("kura-gateway-scw-fr-par-runners", spec)
    assert check_resource(mandatory.gateway_no_proxy_protocol, DEPLOYMENT, public)


def test_proxy_protocol_on_is_refused() -> None:
    config = {"metadata": {"name": "kura-gateway-eu-central"}, "data": {"use-proxy-protocol": "true"}}
    found = check_resource(mandatory.gateway_no_proxy_protocol, CONFIG_MAP, config)
    assert len(found) == 1 and "use-proxy-protocol is 'true'" in found[0]


def test_a_gateway_off_the_box_nic_is_refused() -> None:
    args = [a for a in GATEWAY_ARGS if "report-node" not in a] + [
        "--publish-service=kura/kura-gateway-eu-central"
    ]
    found = check_resource(mandatory.gateway_no_proxy_protocol, DEPLOYMENT, _gateway(None, args))
    assert [f.split(": ", 1)[1][:40] for f in found] == [
        "the ingress-nginx gateway is not hostNet",
        "the gateway does not pass --report-node-",
        "the gateway publishes a Service address ",
    ]
    # Not known yet in a preview: not judged.
    assert not check_resource(
        mandatory.gateway_no_proxy_protocol, DEPLOYMENT, _gateway(UNKNOWN, GATEWAY_ARGS)
    )


def test_a_load_balancer_service_is_refused_and_a_cluster_ip_one_is_not() -> None:
    service = {
        "metadata": {"name": "kura-gateway-eu-central", "labels": {"tuist.dev/region": "eu-central"}},
        "spec": {"type": "LoadBalancer"},
    }
    found = check_resource(mandatory.no_load_balancer, SERVICE, service)
    assert (
        len(found) == 1
        and "Service kura-gateway-eu-central in region eu-central is type LoadBalancer" in found[0]
    )
    service["spec"] = {"type": "ClusterIP"}
    assert not check_resource(mandatory.no_load_balancer, SERVICE, service)


def test_a_server_side_apply_patch_is_checked_as_its_kind() -> None:
    # A ServicePatch or DeploymentPatch writes the same fields: a policy keyed on the kind sees it.
    service = {
        "metadata": {"name": "kura-gateway-eu-central", "labels": {"tuist.dev/region": "eu-central"}},
        "spec": {"type": "LoadBalancer"},
    }
    assert len(check_resource(mandatory.no_load_balancer, "kubernetes:core/v1:ServicePatch", service)) == 1
    props = deployment(
        "kura-controller", {"containers": [{"name": "c", "image": "ghcr.io/tuist/kura-controller:main"}]}
    )
    assert check_resource(
        mandatory.images_pinned, "kubernetes:apps/v1:DeploymentPatch", props, stack="canary"
    )


# --- the peer demux --------------------------------------------------------------------------------

DEMUX_LABELS = {"app.kubernetes.io/component": "peer-demux", "app.kubernetes.io/instance": "eu-central"}


def _demux_config(conf: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "kura-peer-demux-eu-central", "labels": DEMUX_LABELS},
        "data": {"nginx.conf": conf},
    }


def test_the_program_s_demux_config_passes() -> None:
    kura = Kura(runtime_image_tag="0.10.5", controller_image="ghcr.io/tuist/kura-controller:1.4.0")
    cluster = Cluster(runners_controller_image="ghcr.io/tuist/runners-controller:1.4.2")
    conf = demux_config(kura, cluster)["nginx.conf"]
    assert not check_resource(mandatory.peer_demux_passthrough, CONFIG_MAP, _demux_config(conf))


TERMINATING = """
stream {
    server {
        listen 7443 ssl;
        ssl_certificate /etc/tls/tls.crt;   # a certificate: this server terminates TLS
        ssl_certificate_key /etc/tls/tls.key;
        proxy_pass kura-acme-eu-central-peer.kura.svc.cluster.local:7443;
    }
}
"""


def test_a_demux_that_terminates_tls_is_refused() -> None:
    found = check_resource(mandatory.peer_demux_passthrough, CONFIG_MAP, _demux_config(TERMINATING))
    assert any("terminates TLS (ssl_certificate, ssl_certificate_key, listen ... ssl)" in f for f in found), (
        found
    )
    assert any("no 'ssl_preread on;'" in f for f in found), found


def test_a_demux_on_another_port_is_refused_however_the_port_is_written() -> None:
    conf = "stream { server { listen [::]:8443; listen 0.0.0.0:7443; ssl_preread on; proxy_pass $b; } }"
    found = check_resource(mandatory.peer_demux_passthrough, CONFIG_MAP, _demux_config(conf))
    assert len(found) == 1 and "listens on 8443, 7443, not 7443" in found[0]
    # A commented-out listen is not a listen.
    conf = "stream { server { # listen 8443;\n listen 7443; ssl_preread on; proxy_pass $b; } }"
    assert not check_resource(mandatory.peer_demux_passthrough, CONFIG_MAP, _demux_config(conf))


def test_the_demux_daemonset_is_host_network_on_7443() -> None:
    def daemonset(host_network: bool, port: int) -> dict[str, Any]:
        spec = {
            "hostNetwork": host_network,
            "containers": [{"name": "nginx", "ports": [{"containerPort": port}]}],
        }
        return {
            "metadata": {"name": "kura-peer-demux-eu-central", "labels": DEMUX_LABELS},
            "spec": {"template": {"spec": spec}},
        }

    assert not check_resource(mandatory.peer_demux_passthrough, DAEMON_SET, daemonset(True, 7443))
    found = check_resource(mandatory.peer_demux_passthrough, DAEMON_SET, daemonset(False, 8443))
    assert len(found) == 2 and "not hostNetwork" in found[0] and "listens on [8443], not 7443" in found[1]


# --- runner pools ----------------------------------------------------------------------------------


def _pool(autoscaling: Any, *, os: str = "linux", runtime_class: str | None = "kata-qemu") -> dict[str, Any]:
    spec: dict[str, Any] = {"os": os, "image": f"ghcr.io/tuist/linux-runner@{DIGEST}"}
    if autoscaling is not None:
        spec["autoscaling"] = autoscaling
    if runtime_class is not None:
        spec["runtimeClass"] = runtime_class
    return {
        "apiVersion": "tuist.dev/v1alpha1",
        "kind": "RunnerPool",
        "metadata": {"name": "linux"},
        "spec": spec,
    }


def test_explicit_autoscaling_passes_zeros_included() -> None:
    scaling = {"enabled": True, "minWarmPoolFloor": 0, "maxReplicas": 8, "scaleDownCooldownSeconds": 0}
    assert not check_resource(mandatory.runner_pool_autoscaling_explicit, RUNNER_POOL, _pool(scaling))
    # Autoscaling off: the other fields mean nothing.
    assert not check_resource(
        mandatory.runner_pool_autoscaling_explicit, RUNNER_POOL, _pool({"enabled": False})
    )


def test_autoscaling_left_to_crd_defaults_is_refused() -> None:
    found = check_resource(
        mandatory.runner_pool_autoscaling_explicit, RUNNER_POOL, _pool({"enabled": True, "maxReplicas": 16})
    )
    assert found == [
        "RunnerPool linux: spec.autoscaling leaves minWarmPoolFloor, scaleDownCooldownSeconds to the CRD "
        "default; write each explicitly (an omitted minWarmPoolFloor comes back as 1)"
    ]
    assert check_resource(mandatory.runner_pool_autoscaling_explicit, RUNNER_POOL, _pool(None))


def test_a_floor_above_the_ceiling_is_refused() -> None:
    scaling = {"enabled": True, "minWarmPoolFloor": 30, "maxReplicas": 14, "scaleDownCooldownSeconds": 300}
    found = check_resource(mandatory.runner_pool_autoscaling_explicit, RUNNER_POOL, _pool(scaling))
    assert found == ["RunnerPool linux: minWarmPoolFloor 30 exceeds maxReplicas 14"]


def _runtime_class(handler: str) -> Any:
    return resource(RUNTIME_CLASS, {"metadata": {"name": "kata-qemu"}, "handler": handler})


def test_linux_pools_run_kata_qemu() -> None:
    assert (
        check_stack(
            mandatory.kata_runner_pools, [resource(RUNNER_POOL, _pool(None)), _runtime_class("kata-qemu")]
        )
        == []
    )
    runc = check_stack(
        mandatory.kata_runner_pools,
        [resource(RUNNER_POOL, _pool(None, runtime_class=None)), _runtime_class("kata-qemu")],
    )
    assert runc == [
        "RunnerPool linux: a Linux pool with runtimeClass None; its pods must be kata-qemu microVMs"
    ]
    assert check_stack(mandatory.kata_runner_pools, [resource(RUNNER_POOL, _pool(None))]) == [
        "Linux runner pools need the kata-qemu RuntimeClass, and the stack declares none"
    ]
    assert check_stack(
        mandatory.kata_runner_pools, [resource(RUNNER_POOL, _pool(None)), _runtime_class("runc")]
    )
    # macOS pools run on Mac minis, not in microVMs.
    darwin = resource(RUNNER_POOL, _pool(None, os="darwin", runtime_class=None))
    assert check_stack(mandatory.kata_runner_pools, [darwin]) == []


@pytest.mark.parametrize(
    "type_", ["kubernetes:tuist.dev/v1beta1:RunnerPool", "kubernetes:tuist.dev/v1alpha1:RunnerPoolPatch"]
)
def test_a_runner_pool_at_another_version_or_as_a_patch_is_held_to_the_same_rules(type_: str) -> None:
    unpinned = {**_pool(None), "spec": {**_pool(None)["spec"], "image": "ghcr.io/tuist/linux-runner:main"}}
    assert check_resource(mandatory.images_pinned, type_, unpinned)
    assert check_resource(mandatory.runner_pool_autoscaling_explicit, type_, _pool(None))
    runc = resource(type_, _pool(None, runtime_class="runc"))
    assert check_stack(mandatory.kata_runner_pools, [runc, _runtime_class("kata-qemu")]) == [
        "RunnerPool linux: a Linux pool with runtimeClass 'runc'; its pods must be kata-qemu microVMs"
    ]
    # Another group's RunnerPool is not ours.
    assert not check_resource(mandatory.images_pinned, "kubernetes:example.com/v1:RunnerPool", unpinned)


# --- failover IPs ----------------------------------------------------------------------------------


def _machine(name: str, fleet: str, vendor: str) -> Any:
    return resource(MACHINE, {"fleet": fleet, "vendor": vendor, "environment": "staging"}, name=name)


def _fip(vendor: str, fleet: str) -> Any:
    return resource(
        FAILOVER, {"vendor": vendor, "fleet": fleet, "address": "198.51.100.20"}, name="kura-peer"
    )


def test_failover_ips_on_their_fleet_s_vendor_pass() -> None:
    stack = [_machine("kura-dedibox-0", "kura-dedibox", "dedibox"), _fip("dedibox", "kura-dedibox")]
    assert check_stack(mandatory.failover_ip_vendors, stack) == []


def test_a_failover_ip_on_a_vendor_that_cannot_route_it_is_refused() -> None:
    found = check_stack(mandatory.failover_ip_vendors, [_fip("scaleway_em", "runners")])
    assert found == [
        "failover IP 198.51.100.20 (kura-peer) is on scaleway_em, which cannot route a failover IP; "
        "only ovh, dedibox, robot can"
    ]


def test_a_failover_ip_for_another_vendor_s_boxes_is_refused() -> None:
    stack = [_machine("kura-dedibox-0", "kura-dedibox", "dedibox"), _fip("ovh", "kura-dedibox")]
    found = check_stack(mandatory.failover_ip_vendors, stack)
    assert len(found) == 1 and "is a ovh IP but fleet kura-dedibox's machines are on dedibox" in found[0]


# --- advisory --------------------------------------------------------------------------------------


def test_a_shrinking_fleet_is_flagged_against_what_the_stack_holds() -> None:
    stack = [_machine("kura-ovh-0", "kura-ovh", "ovh"), _machine("kura-ovh-1", "kura-ovh", "ovh")]
    deployed = {"kura-ovh": ["kura-ovh-0", "kura-ovh-1", "kura-ovh-2"], "parked": ["parked-0"]}
    found = check_stack(advisory.fleet_shrinking, stack, {"deployed_machines": deployed})
    assert found == [
        "fleet kura-ovh shrinks from 3 to 2 machine(s): kura-ovh-2 will be released (drained, then their "
        "boxes reinstalled back to the pool)",
        "fleet parked shrinks from 1 to 0 machine(s): parked-0 will be released (drained, then their boxes "
        "reinstalled back to the pool)",
    ]
    assert (
        check_stack(advisory.fleet_shrinking, stack, {"deployed_machines": {"kura-ovh": ["kura-ovh-0"]}})
        == []
    )
    assert str(check_stack(advisory.fleet_shrinking, stack)).startswith("not applicable")


def test_a_release_in_production_is_flagged() -> None:
    def slot(name: str, **switches: bool) -> list[Any]:
        # The switches are the claim's inputs (components/fleet.py claim_props); the machine has none.
        props = {"fleet": "kura-us-east", "vendor": "ovh", "environment": "production"}
        return [
            resource(CLAIM, {**props, **switches}, name=f"{name}-claim", stack="production", protect=True),
            resource(MACHINE, props, name=name, stack="production", protect=True),
        ]

    stack = [
        *slot("kura-us-east-0", allow_release=True),
        *slot("kura-us-east-1", allow_release=True, allow_production_release=True),
    ]
    found = check_stack(
        advisory.production_release,
        stack,
        {"deployed_machines": {"kura-us-east": ["kura-us-east-0", "kura-us-east-1", "kura-us-east-2"]}},
    )
    assert isinstance(found, list) and len(found) == 2
    assert "kura-us-east-1 (fleet kura-us-east) may be released" in found[0]
    assert "releases production machine(s) kura-us-east-2" in found[1]
    assert str(check_stack(advisory.production_release, [_machine("m", "f", "ovh")])).startswith(
        "not applicable"
    )
