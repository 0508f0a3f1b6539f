"""Mandatory policies: the invariants the seeds paid for in incidents. A violation fails the preview.

Each policy's description names where the invariant comes from (seed 000: the bare-metal CAPI
provider and Kura regions; seed 001: the Kura bootstrap and InternalIP fix; seed 003: Linux runners
on Robot with Kata; "anchor" is /work/shared/reference/tuist-anchor.md, the digest of the public
implementation). The checks state those facts themselves (7443, kata-qemu, "false"), on purpose
not importing the program's constants: a policy that read the program's own values could not
catch the program getting them wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import (
    PolicyConfigSchema,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from .images import floating_reason
from .nginx import read_nginx
from .resources import (
    BOX_HOLDING_TYPES,
    FAILOVER_TYPE_PREFIX,
    MACHINE_TYPE_PREFIX,
    UNKNOWN,
    Report,
    container_args,
    containers,
    get,
    is_runner_pool,
    items,
    known,
    kubernetes_object,
    pod_spec,
    stack_of,
)

# The one stack allowed floating image tags: the embedded dev stack (vendorsim, rendered manifests).
DEV_STACKS = frozenset({"dev"})
PRODUCTION = "production"

PEER_PORT = 7443
KATA_RUNTIME_CLASS = "kata-qemu"
RUNTIME_CLASS_TYPE = "kubernetes:node.k8s.io/v1:RuntimeClass"
AUTOSCALING_FIELDS = ("minWarmPoolFloor", "maxReplicas", "scaleDownCooldownSeconds")
# Vendors whose API routes a failover IP to one of the account's boxes: OVH POST /ip/{ip}/move,
# Dedibox POST failover-ips/attach, Robot POST /failover/{ip} (reference/vendor-apis.md).
ROUTABLE_VENDORS = ("ovh", "dedibox", "robot")
# The label the program puts on a private region's node_port gateway (components/gateway.py; the pack
# imports nothing of the program, so tests/policy holds the two together).
DATA_PLANE_LABEL = "tuist.dev/data-plane"
NODE_PORT_DATA_PLANE = "node-port"


def is_production_machine(args: ResourceValidationArgs) -> bool:
    environment = known(lambda: args.props.get("environment"))
    return environment == PRODUCTION or stack_of(args.urn) == PRODUCTION


# --- production machines ------------------------------------------------------------------------


def _machines_protected(args: ResourceValidationArgs, report: Report) -> None:
    if args.resource_type not in BOX_HOLDING_TYPES or not is_production_machine(args):
        return
    if not args.opts.protect:
        fleet = known(lambda: args.props.get("fleet"))
        report(
            f"{args.name} (fleet {fleet}) is a production machine without protect=True: removing it from "
            "the program, or a change that replaces it (vendor, fleet, an excluded box), would release its "
            "box, which reinstalls it and wipes /data. Set protect=True; a release is an explicit "
            "`pulumi state unprotect` plus allow_release and allow_production_release."
        )


production_machines_protected = ResourceValidationPolicy(
    name="production-machines-protected",
    description=(
        "Adopted production machines are protected, so no update deletes one, by a removal or by a "
        "replace (seed 000: boxes are monthly contracts never cancelled, and a released box is "
        "reinstalled back to its pool, which wipes it; DESIGN: production machines are protect-ed). "
        "The engine refuses to delete or replace a protected resource."
    ),
    validate=_machines_protected,
    remediation_steps="Register production machines with protect=True (components/fleet.py).",
)


# --- images ---------------------------------------------------------------------------------------


def _image_problems(args: ResourceValidationArgs) -> list[str]:
    obj = kubernetes_object(args.resource_type, args.props)
    if obj is None:
        return []
    found: list[tuple[str, Any]] = []
    spec = pod_spec(obj)
    for container in containers(spec):
        name = get(container, "name")
        found.append((f"container '{name}'", get(container, "image")))
        # kura-controller starts the Kura runtime from its env (KURA_RUNTIME_IMAGE): the same rule.
        for env in items(get(container, "env")):
            key = get(env, "name")
            if isinstance(key, str) and key.endswith("_IMAGE"):
                found.append((f"container '{name}' env {key}", get(env, "value")))
    if is_runner_pool(args.resource_type):
        found.append(("spec.image", get(obj.props, "spec", "image")))
    if obj.kind == "ConfigMap":
        # Settings a controller reads from a ConfigMap name images the same way.
        data = get(obj.props, "data")
        if isinstance(data, Mapping):
            for key in sorted(data):
                if key.endswith("_IMAGE"):
                    found.append((f"data.{key}", get(data, key)))
    return [
        f"{obj.title}: {where} {reason}"
        for where, image in found
        if isinstance(image, str) and (reason := floating_reason(image))
    ]


def _images_pinned(args: ResourceValidationArgs, report: Report) -> None:
    if stack_of(args.urn) in DEV_STACKS:
        return
    for problem in _image_problems(args):
        report(f"{problem}; pin a digest (@sha256:...) or an explicit release tag")


images_pinned = ResourceValidationPolicy(
    name="images-pinned",
    description=(
        "Every image (Kura runtime, gateway, demux, failover watcher, controllers, runner pools) is "
        "pinned by digest or an explicit version, never a floating tag, outside the dev stack (seed 001: "
        "new pods that rolled onto a new kura tag hit the bootstrap incident, and a deploy must name "
        "an explicit kura_runtime_image_tag once its image is published; seed 003: runner images are "
        "digest-pinned)."
    ),
    validate=_images_pinned,
)


# --- the bare-metal gateway -----------------------------------------------------------------------


def _is_ingress_nginx(container: Any) -> bool:
    image = get(container, "image")
    words = container_args(container)
    return (isinstance(image, str) and "ingress-nginx/controller" in image) or any(
        "nginx-ingress-controller" in w for w in words
    )


def _gateway_no_proxy_protocol(args: ResourceValidationArgs, report: Report) -> None:
    obj = kubernetes_object(args.resource_type, args.props)
    if obj is None:
        return
    if obj.kind == "ConfigMap":
        value = get(obj.props, "data", "use-proxy-protocol")
        if value is not None and value is not UNKNOWN and str(value).lower() != "false":
            report(
                f"{obj.title}: use-proxy-protocol is {value!r}; on bare metal no load balancer prepends a "
                'PROXY header, so it must be "false" or nginx rejects every connection'
            )
        return
    spec = pod_spec(obj)
    controllers = [c for c in containers(spec) if c is not UNKNOWN and _is_ingress_nginx(c)]
    if not controllers:
        return
    if obj.labels.get(DATA_PLANE_LABEL) == NODE_PORT_DATA_PLANE:
        # A private region's gateway (the reference's scw-fr-par-runners): its clients are the runners
        # on the Private Network, reaching it on a NodePort the program fences with a NetworkPolicy;
        # no public address is published for it. Only the PROXY-protocol rule above applies.
        return
    host_network = get(spec, "hostNetwork")
    if host_network is not UNKNOWN and host_network is not True:
        report(
            f"{obj.title}: the ingress-nginx gateway is not hostNetwork; on bare metal it binds :80/:443 "
            "on the box NIC (there is no load balancer in front of it)"
        )
    for container in controllers:
        words = container_args(container)
        if "--report-node-internal-ip-address=true" not in words:
            report(
                f"{obj.title}: the gateway does not pass --report-node-internal-ip-address=true, so "
                "external-dns would publish an address nobody outside the cluster can reach"
            )
        if any(w.startswith("--publish-service") for w in words):
            report(f"{obj.title}: the gateway publishes a Service address (--publish-service), not the box's")


gateway_no_proxy_protocol = ResourceValidationPolicy(
    name="bare-metal-gateway-no-proxy-protocol",
    description=(
        "The bare-metal regional gateway runs on the box NIC (hostNetwork, reporting the node's "
        'address) with use-proxy-protocol "false" (seed 000: with the shared PROXY-protocol setting '
        "and no load balancer, nginx mangled every connection, HTTP 000 on :80/:443, found in "
        "staging validation)."
    ),
    validate=_gateway_no_proxy_protocol,
)


def _no_load_balancer(args: ResourceValidationArgs, report: Report) -> None:
    obj = kubernetes_object(args.resource_type, args.props)
    if obj is None or obj.kind != "Service":
        return
    if get(obj.props, "spec", "type") == "LoadBalancer":
        region = obj.labels.get("tuist.dev/region")
        where = f" in region {region}" if region else ""
        report(
            f"{obj.title}{where} is type LoadBalancer; the program's regions run on bare-metal boxes that "
            "no cloud load balancer fronts, so it would never get an address. Serve on the box "
            "(hostNetwork gateway, ClusterIP Service) instead."
        )


no_load_balancer = ResourceValidationPolicy(
    name="no-load-balancer-on-bare-metal",
    description=(
        "No Service of type LoadBalancer: every region this program runs is on bare metal, where none "
        "gets an address (seed 000: the peer plane stuck 0/1 dialing a type: LoadBalancer endpoint; "
        "serving is hostNetwork on the box NIC and peers route pod to pod or through the SNI demux)."
    ),
    validate=_no_load_balancer,
)


# --- the SNI peer demux ---------------------------------------------------------------------------


def _is_peer_demux(labels: Mapping[str, Any]) -> bool:
    return labels.get("app.kubernetes.io/component") == "peer-demux"


def _demux_config_problems(title: str, conf: str) -> list[str]:
    facts = read_nginx(conf)
    problems: list[str] = []
    if facts.terminating_directives or facts.listen_ssl or "http" in facts.blocks:
        what = [*facts.terminating_directives]
        if facts.listen_ssl:
            what.append("listen ... ssl")
        if "http" in facts.blocks:
            what.append("an http {} block")
        problems.append(
            f"{title}: the demux terminates TLS ({', '.join(what)}); it must pass TLS through untouched "
            "(stream + ssl_preread), the peer plane is mTLS end to end"
        )
    if not facts.ssl_preread:
        problems.append(
            f"{title}: no 'ssl_preread on;', so the demux cannot route by SNI without terminating TLS"
        )
    other = [p for p in facts.listen_ports if p != PEER_PORT]
    if other or not facts.listen_ports:
        shown = ", ".join(str(p) for p in facts.listen_ports) or "nothing"
        problems.append(f"{title}: the demux listens on {shown}, not {PEER_PORT} (the public peer port)")
    return problems


def _peer_demux(args: ResourceValidationArgs, report: Report) -> None:
    obj = kubernetes_object(args.resource_type, args.props)
    if obj is None or not _is_peer_demux(obj.labels):
        return
    if obj.kind == "ConfigMap":
        data = get(obj.props, "data")
        if isinstance(data, Mapping):
            for key in sorted(data):
                conf = get(data, key)
                if key.endswith(".conf") and isinstance(conf, str):
                    for problem in _demux_config_problems(f"{obj.title} {key}", conf):
                        report(problem)
        return
    spec = pod_spec(obj)
    if spec is None:
        return
    host_network = get(spec, "hostNetwork")
    if host_network is not UNKNOWN and host_network is not True:
        report(f"{obj.title}: the demux is not hostNetwork; it must answer on each box's :{PEER_PORT}")
    ports = [
        get(port, "containerPort")
        for container in containers(spec)
        for port in items(get(container, "ports"))
    ]
    known_ports = [p for p in ports if p is not UNKNOWN]
    if known_ports and any(int(p) != PEER_PORT for p in known_ports):
        report(f"{obj.title}: the demux listens on {sorted(int(p) for p in known_ports)}, not {PEER_PORT}")


peer_demux_passthrough = ResourceValidationPolicy(
    name="peer-demux-sni-passthrough-7443",
    description=(
        "The peer demux is a hostNetwork nginx stream server on :7443 that routes by SNI (ssl_preread) "
        "and never terminates TLS (seed 000: the public peer endpoint is :7443 and 'the peer plane is "
        "already mTLS, so nothing terminates TLS')."
    ),
    validate=_peer_demux,
)


# --- runner pools -----------------------------------------------------------------------------------


def _autoscaling_explicit(args: ResourceValidationArgs, report: Report) -> None:
    if not is_runner_pool(args.resource_type):
        return
    name = get(args.props, "metadata", "name")
    scaling = get(args.props, "spec", "autoscaling")
    if scaling is UNKNOWN:
        return
    if not isinstance(scaling, Mapping):
        report(
            f"RunnerPool {name}: spec.autoscaling is missing; write enabled, "
            f"{', '.join(AUTOSCALING_FIELDS)}"
        )
        return
    enabled = get(scaling, "enabled")
    if not isinstance(enabled, bool) and enabled is not UNKNOWN:
        report(f"RunnerPool {name}: spec.autoscaling.enabled is not written out (got {enabled!r})")
    if enabled is False:
        return
    missing = [field for field in AUTOSCALING_FIELDS if get(scaling, field) is None]
    if missing:
        report(
            f"RunnerPool {name}: spec.autoscaling leaves {', '.join(missing)} to the CRD default; write "
            "each explicitly (an omitted minWarmPoolFloor comes back as 1)"
        )
    floor, ceiling = get(scaling, "minWarmPoolFloor"), get(scaling, "maxReplicas")
    if (
        isinstance(floor, int | float)
        and isinstance(ceiling, int | float)
        and ceiling > 0
        and floor > ceiling
    ):
        report(f"RunnerPool {name}: minWarmPoolFloor {floor:g} exceeds maxReplicas {ceiling:g}")


runner_pool_autoscaling_explicit = ResourceValidationPolicy(
    name="runner-pool-autoscaling-explicit",
    description=(
        "Every RunnerPool writes its autoscaling fields out (enabled, minWarmPoolFloor, maxReplicas, "
        "scaleDownCooldownSeconds), zeros included (seed 003: the per-environment floor and max are "
        "the capacity plan; anchor 7: an omitted floor of 0 came back as the default 1 and left three "
        "macOS pools each holding an unrequested Mac mini)."
    ),
    validate=_autoscaling_explicit,
)


def _kata_pools(args: StackValidationArgs, report: Report) -> None:
    runtime_classes = {
        get(r.props, "metadata", "name"): r for r in args.resources if r.resource_type == RUNTIME_CLASS_TYPE
    }
    linux_pools = [
        r
        for r in args.resources
        if is_runner_pool(r.resource_type) and get(r.props, "spec", "os") == "linux"
    ]
    for pool in linux_pools:
        name = get(pool.props, "metadata", "name")
        runtime_class = get(pool.props, "spec", "runtimeClass")
        if runtime_class is UNKNOWN:
            continue
        if runtime_class != KATA_RUNTIME_CLASS:
            report(
                f"RunnerPool {name}: a Linux pool with runtimeClass {runtime_class!r}; its pods must be "
                f"{KATA_RUNTIME_CLASS} microVMs",
                pool.urn,
            )
    if not linux_pools:
        return
    kata = runtime_classes.get(KATA_RUNTIME_CLASS)
    if kata is None:
        report(f"Linux runner pools need the {KATA_RUNTIME_CLASS} RuntimeClass, and the stack declares none")
    elif (handler := get(kata.props, "handler")) not in (KATA_RUNTIME_CLASS, UNKNOWN):
        report(
            f"RuntimeClass {KATA_RUNTIME_CLASS}: handler {handler!r}; containerd's kata runtime is "
            f"registered as {KATA_RUNTIME_CLASS}",
            kata.urn,
        )


kata_runner_pools = StackValidationPolicy(
    name="kata-runner-pools",
    description=(
        "Every Linux runner pool runs its pods as kata-qemu microVMs, through a kata-qemu RuntimeClass "
        "(seed 003: customer code runs beside a privileged docker:dind sidecar, so tenant kernels must "
        "not be shared; kata-qemu over kata-fc, baked into the Robot install)."
    ),
    validate=_kata_pools,
)


# --- failover IPs -----------------------------------------------------------------------------------


def _failover_vendors(args: StackValidationArgs, report: Report) -> None:
    config = args.get_config() or {}
    routable = tuple(config.get("routable_vendors") or ROUTABLE_VENDORS)
    machine_vendors: dict[str, set[str]] = {}
    for r in args.resources:
        if r.resource_type.startswith(MACHINE_TYPE_PREFIX):
            fleet, vendor = get(r.props, "fleet"), get(r.props, "vendor")
            if isinstance(fleet, str) and isinstance(vendor, str):
                machine_vendors.setdefault(fleet, set()).add(vendor)
    for r in args.resources:
        if not r.resource_type.startswith(FAILOVER_TYPE_PREFIX):
            continue
        vendor, fleet, address = get(r.props, "vendor"), get(r.props, "fleet"), get(r.props, "address")
        if vendor is UNKNOWN:
            continue
        if vendor not in routable:
            report(
                f"failover IP {address} ({r.name}) is on {vendor}, which cannot route a failover IP; "
                f"only {', '.join(routable)} can",
                r.urn,
            )
            continue
        others = sorted(machine_vendors.get(fleet, set()) - {vendor})
        if others:
            report(
                f"failover IP {address} ({r.name}) is a {vendor} IP but fleet {fleet}'s machines are on "
                f"{', '.join(others)}; a vendor routes its IPs only to its own boxes",
                r.urn,
            )


failover_ip_vendors = StackValidationPolicy(
    name="failover-ip-routable-vendor",
    description=(
        "Failover IPs only on vendors that can route them (OVH /ip/{ip}/move, Dedibox "
        "failover-ips/attach, Robot /failover/{ip}), and only for fleets on the same vendor (seed 000: "
        "the per-region failover IP the provider keeps on a healthy box; anchor 4.1: a FailoverIP "
        "names its vendor and moves within it)."
    ),
    validate=_failover_vendors,
    config_schema=PolicyConfigSchema(
        properties={"routable_vendors": {"type": "array", "items": {"type": "string"}}},
    ),
)


MANDATORY = [
    production_machines_protected,
    images_pinned,
    gateway_no_proxy_protocol,
    no_load_balancer,
    peer_demux_passthrough,
    runner_pool_autoscaling_explicit,
    kata_runner_pools,
    failover_ip_vendors,
]
