"""Which SNI goes where: account peer Services in, nginx map entries out (pure).

A region's demux routes `<handle>.peer.<region host>` (e.g. `acme.peer.us-east.kura.tuist.dev`,
covered by the region's `*.peer.<region host>` wildcard record, anchor 4.4, so an account needs no
DNS record of its own) to `kura-<handle>-<region>-peer.<kura namespace>.svc.<cluster domain>:<peer
port>`, for every account peer Service kura-controller created in the Kura namespace.

Which account a Service belongs to comes from the labels kura-controller puts on it
(`tuist.dev/account`, `app.kubernetes.io/managed-by=kura-controller`), never from its name: handles
and region ids both contain dashes, so `kura-acme-us-east-peer` reads as account `acme` of region
`us-east` or account `acme-us` of a region `east`. The name must then be exactly the one
kura-controller is told for that account and this region, which settles the region (a
`tuist.dev/region` label, where kura-controller sets one, must agree) and tells the peer Service
apart from the account's other Services (its cache Service carries the same labels and the peer
port). The only hosts that can ever match are ones built here from a Service that
exists; the backend is always that Service in that namespace. A Service that could send a
connection anywhere else (ExternalName, headless, no peer port), or whose labels and name disagree,
or whose account another Service also claims, is skipped, with the reason.

The nginx.conf is static (`render_demux_config`) and includes the routes file
(`render_routes`), so a new account is a ConfigMap update and a graceful reload, never a roll.
See docs/peer-demux.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ACCOUNT_LABEL",
    "KURA_CONTROLLER",
    "KURA_PUBLIC_ZONE",
    "MANAGED_BY_LABEL",
    "REGION_LABEL",
    "ROUTES_KEY",
    "PeerRoute",
    "RouteSettings",
    "ServiceView",
    "Skipped",
    "account_routes",
    "render_demux_config",
    "render_routes",
    "service_view",
]

KURA_PUBLIC_ZONE = "kura.tuist.dev"
# The key of the routes ConfigMap the reconciler writes and the demux pods mount.
ROUTES_KEY = "routes.map"

# The labels kura-controller puts on an account peer Service (docs/peer-demux.md: where each is
# verified, and what is assumed).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
KURA_CONTROLLER = "kura-controller"
ACCOUNT_LABEL = "tuist.dev/account"
REGION_LABEL = "tuist.dev/region"

_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# Every SNI the map looks up is first checked against this shape in nginx itself: only an already
# lowercase, DNS-shaped name is tagged "ok" (nginx lowercases map keys and lookups, so an upper-case
# SNI would otherwise match a route).
SNI_SHAPE = r"~^[a-z0-9-]{1,63}(\.[a-z0-9-]{1,63}){1,126}$"


def _is_dns_name(name: str) -> bool:
    return 0 < len(name) <= 253 and all(_DNS_LABEL.match(label) for label in name.split("."))


@dataclass(frozen=True)
class RouteSettings:
    """What one region's demux needs to know to route: the reconciler's environment."""

    region: str
    region_host: str  # e.g. us-east.staging.kura.tuist.dev
    namespace: str  # the Kura namespace: the only place a backend can live
    peer_port: int
    cluster_domain: str = "cluster.local"

    ENV = {
        "region": "REGION",
        "region_host": "REGION_HOST",
        "namespace": "KURA_NAMESPACE",
        "peer_port": "PEER_PORT",
        "cluster_domain": "CLUSTER_DOMAIN",
    }

    def service_name(self, handle: str) -> str:
        return f"kura-{handle}-{self.region}-peer"

    def service_selector(self) -> str:
        """The label selector of kura-controller's account Services: all the reconciler lists and
        watches. Not the region: the version of kura-controller read puts no region label on the
        peer Service (docs/peer-demux.md), so the name check settles it."""
        return f"{MANAGED_BY_LABEL}={KURA_CONTROLLER},{ACCOUNT_LABEL}"

    def named_like_a_peer_service(self, service_name: str) -> bool:
        # Only decides whether a name/label mismatch is worth a warning; nothing is read from it.
        return service_name.startswith("kura-") and service_name.endswith(f"-{self.region}-peer")

    def peer_host(self, handle: str) -> str:
        return f"{handle}.peer.{self.region_host}"

    def backend(self, service_name: str) -> str:
        return f"{service_name}.{self.namespace}.svc.{self.cluster_domain}:{self.peer_port}"

    def to_env(self) -> dict[str, str]:
        return {env: str(getattr(self, field)) for field, env in self.ENV.items()}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RouteSettings:
        env = os.environ if env is None else env
        missing = [name for name in cls.ENV.values() if not env.get(name)]
        if missing:
            raise ValueError(f"environment variable(s) {', '.join(missing)} required")
        port = env[cls.ENV["peer_port"]]
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"PEER_PORT '{port}' is not a TCP port")
        return cls(
            region=env["REGION"],
            region_host=env["REGION_HOST"],
            namespace=env["KURA_NAMESPACE"],
            peer_port=int(port),
            cluster_domain=env["CLUSTER_DOMAIN"],
        )


@dataclass(frozen=True)
class ServiceView:
    """The parts of a Service that decide whether and where it can be routed."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    type: str  # ClusterIP, NodePort, LoadBalancer, ExternalName
    cluster_ip: str | None  # "None" for a headless Service
    ports: tuple[int, ...]


def service_view(service: Any) -> ServiceView:
    """A kubernetes V1Service as the router sees it."""
    spec = service.spec
    return ServiceView(
        name=service.metadata.name,
        namespace=service.metadata.namespace,
        labels=dict(service.metadata.labels or {}),
        type=(spec.type if spec else None) or "ClusterIP",
        cluster_ip=spec.cluster_ip if spec else None,
        ports=tuple(p.port for p in (spec.ports or []) if p.port) if spec else (),
    )


@dataclass(frozen=True)
class PeerRoute:
    """One SNI host and the `<service>.<ns>.svc.<domain>:<port>` it is passed to."""

    host: str
    backend: str


@dataclass(frozen=True)
class Skipped:
    service: str
    reason: str


def account_routes(
    services: Iterable[ServiceView], settings: RouteSettings
) -> tuple[list[PeerRoute], list[Skipped]]:
    """The routes of every account peer Service of this region, sorted by host, and why any
    Service kura-controller labelled as one of this region's peer Services was left out. Other
    regions' Services and an account's other Services are not mentioned."""
    claims: dict[str, list[ServiceView]] = {}
    skipped: list[Skipped] = []
    for svc in sorted(services, key=lambda s: (s.namespace, s.name)):
        if not _of_this_region(svc, settings):
            continue
        handle = svc.labels.get(ACCOUNT_LABEL, "")
        if svc.name != settings.service_name(handle) and not settings.named_like_a_peer_service(svc.name):
            continue  # the account's cache or headless Service: same labels, not its peer Service
        why = _outside(svc, settings) or _not_a_peer_service(svc, settings, handle)
        if why:
            skipped.append(Skipped(_ref(svc), why))
        else:
            claims.setdefault(handle, []).append(svc)
    routes: list[PeerRoute] = []
    for handle, claimants in sorted(claims.items()):
        if len(claimants) > 1:
            # Never route to a guess: the account waits until all but one are gone.
            refs = ", ".join(_ref(c) for c in claimants)
            why = f"{len(claimants)} Services claim account '{handle}' of region {settings.region}: {refs}"
            skipped.extend(Skipped(_ref(c), why) for c in claimants)
            continue
        svc = claimants[0]
        why = _unroutable(svc, settings, handle)
        if why:
            skipped.append(Skipped(_ref(svc), why))
            continue
        routes.append(PeerRoute(settings.peer_host(handle), settings.backend(svc.name)))
    return sorted(routes, key=lambda r: r.host), skipped


def _ref(svc: ServiceView) -> str:
    return f"{svc.namespace}/{svc.name}"


def _of_this_region(svc: ServiceView, settings: RouteSettings) -> bool:
    # The list is already selected by managed-by; a Service handed in any other way is checked too. A
    # region label is optional (kura-controller may set none on the peer Service); one that names
    # another region wins over the name.
    labels = svc.labels
    region = labels.get(REGION_LABEL, settings.region)
    return labels.get(MANAGED_BY_LABEL) == KURA_CONTROLLER and region == settings.region


def _not_a_peer_service(svc: ServiceView, settings: RouteSettings, handle: str) -> str | None:
    if not handle:
        return f"has no {ACCOUNT_LABEL} label"
    if not _DNS_LABEL.match(handle):
        return f"its {ACCOUNT_LABEL} label '{handle}' is not a DNS label"
    expected = settings.service_name(handle)
    if svc.name != expected:
        return (
            f"labelled for account '{handle}' of region {settings.region}, whose peer Service is "
            f"{expected}, not {svc.name}"
        )
    return None


def _outside(svc: ServiceView, settings: RouteSettings) -> str | None:
    if svc.namespace != settings.namespace:
        return f"not in the Kura namespace '{settings.namespace}'"
    return None


def _unroutable(svc: ServiceView, settings: RouteSettings, handle: str) -> str | None:
    if svc.type == "ExternalName":
        # Its cluster DNS name is a CNAME to anywhere: routing it would leave the cluster.
        return "an ExternalName Service points outside the cluster"
    if not svc.cluster_ip or svc.cluster_ip == "None":
        return "headless (no cluster IP): the demux routes to a Service, not to pods"
    if settings.peer_port not in svc.ports:
        return f"does not expose the peer port {settings.peer_port}"
    host = settings.peer_host(handle)
    if len(host) > 253:
        return f"the peer host '{host}' is longer than 253 characters"
    return None


def _check_route(route: PeerRoute, settings: RouteSettings) -> None:
    # The routes file is nginx config text: refuse anything that could end a map entry or address
    # something outside the Kura namespace before it reaches nginx.
    if not _is_dns_name(route.host):
        raise ValueError(f"peer route host '{route.host}' is not a lowercase DNS name")
    service, _, port = route.backend.rpartition(":")
    if not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"peer route backend '{route.backend}' for '{route.host}' has no valid port")
    domain = f".{settings.namespace}.svc.{settings.cluster_domain}"
    name = service.removesuffix(domain)
    if name == service or not _DNS_LABEL.match(name) or not _is_dns_name(service):
        raise ValueError(
            f"peer route backend '{route.backend}' for '{route.host}' is not <service>{domain}:<port>"
        )


def render_routes(routes: Iterable[PeerRoute], settings: RouteSettings) -> str:
    """The routes file: one `"ok:<host>" <backend>;` map entry per route, sorted. Pure."""
    ordered = sorted(routes, key=lambda r: r.host)
    hosts = [r.host for r in ordered]
    repeated = sorted({h for h in hosts if hosts.count(h) > 1})
    if repeated:
        raise ValueError(f"peer routes repeat a host: {repeated}")
    for route in ordered:
        _check_route(route, settings)
    header = (
        f"# Routes of the {settings.region} peer demux, written by its route reconciler (python -m demux)\n"
        f"# from the account peer Services of namespace {settings.namespace}. Do not edit.\n"
    )
    return header + "".join(f'"ok:{r.host}" {r.backend};\n' for r in ordered)


def render_demux_config(*, port: int, resolver: str, routes_file: str) -> str:
    """The demux's whole nginx.conf (stream only): SNI-shape check, the routes map (from
    `routes_file`), TLS passed through untouched. Pure; the same inputs give the same bytes."""
    return (
        "# Generated by tuist-infra (demux/routes.py). Do not edit.\n"
        "worker_processes auto;\n"
        "pid /tmp/nginx.pid;\n"
        "error_log /dev/stderr warn;\n"
        "\n"
        "events {\n"
        "    worker_connections 4096;\n"
        "}\n"
        "\n"
        "stream {\n"
        # Backends are looked up per connection, so a missing Service fails only its own
        # connections instead of keeping nginx from starting.
        f"    resolver {resolver} valid=10s ipv6=off;\n"
        "    resolver_timeout 2s;\n"
        # Keys are "ok:" + a host of up to 253 bytes; nginx's default bucket (64) refuses to start
        # with ordinary peer hosts.
        "    map_hash_bucket_size 256;\n"
        "\n"
        "    map $ssl_preread_server_name $kura_peer_sni_shape {\n"
        f'        "{SNI_SHAPE}" ok;\n'
        "        default bad;\n"
        "    }\n"
        "\n"
        '    map "$kura_peer_sni_shape:$ssl_preread_server_name" $kura_peer_backend {\n'
        '        default "";\n'
        f"        include {routes_file};\n"
        "    }\n"
        "\n"
        "    server {\n"
        f"        listen {port};\n"
        "        ssl_preread on;\n"
        "        proxy_pass $kura_peer_backend;\n"
        "        proxy_connect_timeout 5s;\n"
        "        proxy_timeout 10m;\n"
        "    }\n"
        "}\n"
    )
