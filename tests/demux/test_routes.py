"""demux.routes: which Services become routes, the exact map entries, and the static nginx.conf.
Real nginx runs both in tests/integration/test_peer_demux_nginx.py."""

from __future__ import annotations

import re

import pytest

from demux.routes import (
    PeerRoute,
    RouteSettings,
    ServiceView,
    Skipped,
    account_routes,
    render_demux_config,
    render_routes,
)

STAGING = RouteSettings(
    region="us-east", region_host="us-east.staging.kura.tuist.dev", namespace="kura", peer_port=7443
)
ACME = PeerRoute(
    "acme.peer.us-east.staging.kura.tuist.dev", "kura-acme-us-east-peer.kura.svc.cluster.local:7443"
)


def svc(
    name: str,
    *,
    namespace: str = "kura",
    type: str = "ClusterIP",
    ip: str | None = "10.96.4.2",
    ports: tuple[int, ...] = (7443,),
) -> ServiceView:
    return ServiceView(name=name, namespace=namespace, type=type, cluster_ip=ip, ports=ports)


def test_each_account_peer_service_of_the_region_becomes_one_route_sorted_by_host() -> None:
    routes, skipped = account_routes(
        [
            svc("kura-zeta-us-east-peer"),
            svc("kura-acme-us-east-peer"),
            svc("kura-acme-peer"),
            svc("kube-dns"),
        ],
        STAGING,
    )
    assert routes == [
        ACME,
        PeerRoute(
            "zeta.peer.us-east.staging.kura.tuist.dev", "kura-zeta-us-east-peer.kura.svc.cluster.local:7443"
        ),
    ]
    assert skipped == []


def test_another_regions_peer_services_are_not_this_demux_s_business() -> None:
    routes, skipped = account_routes(
        [svc("kura-acme-us-west-peer"), svc("kura-acme-eu-central-peer")], STAGING
    )
    assert (routes, skipped) == ([], [])


def test_an_account_s_peer_host_is_under_the_region_s_peer_wildcard() -> None:
    # *.peer.<region host> (components/dns.py) resolves every account: no record per account.
    production = RouteSettings(
        region="us-east", region_host="us-east.kura.tuist.dev", namespace="kura", peer_port=7443
    )
    routes, _ = account_routes([svc("kura-acme-us-east-peer")], production)
    assert [r.host for r in routes] == ["acme.peer.us-east.kura.tuist.dev"]


def test_backend_uses_the_configured_cluster_domain() -> None:
    settings = RouteSettings(
        region="us-east",
        region_host="us-east.kura.tuist.dev",
        namespace="kura",
        peer_port=7443,
        cluster_domain="k8s.internal",
    )
    routes, _ = account_routes([svc("kura-acme-us-east-peer")], settings)
    assert [r.backend for r in routes] == ["kura-acme-us-east-peer.kura.svc.k8s.internal:7443"]


@pytest.mark.parametrize(
    ("service", "reason"),
    [
        (
            svc("kura-evil-us-east-peer", type="ExternalName", ip=None),
            "an ExternalName Service points outside the cluster",
        ),
        (
            svc("kura-evil-us-east-peer", ip="None"),
            "headless (no cluster IP): the demux routes to a Service, not to pods",
        ),
        (svc("kura-evil-us-east-peer", ports=(443,)), "does not expose the peer port 7443"),
        (svc("kura-evil-us-east-peer", namespace="default"), "not in the Kura namespace 'kura'"),
    ],
)
def test_a_service_that_could_route_elsewhere_is_skipped_with_the_reason(
    service: ServiceView, reason: str
) -> None:
    routes, skipped = account_routes([service, svc("kura-acme-us-east-peer")], STAGING)
    assert routes == [ACME]
    assert skipped == [Skipped(f"{service.namespace}/{service.name}", reason)]


def test_routes_file_is_one_exact_map_entry_per_route() -> None:
    assert render_routes([ACME], STAGING) == (
        "# Routes of the us-east peer demux, written by its route reconciler (python -m demux)\n"
        "# from the account peer Services of namespace kura. Do not edit.\n"
        '"ok:acme.peer.us-east.staging.kura.tuist.dev" '
        "kura-acme-us-east-peer.kura.svc.cluster.local:7443;\n"
    )


def test_no_route_is_an_empty_map_that_closes_everything() -> None:
    assert '"' not in render_routes([], STAGING)


@pytest.mark.parametrize(
    ("route", "message"),
    [
        (
            PeerRoute("peer.acme.dev; include /etc/passwd", ACME.backend),
            "peer route host 'peer.acme.dev; include /etc/passwd' is not a lowercase DNS name",
        ),
        (
            PeerRoute("PEER.acme.dev", ACME.backend),
            "peer route host 'PEER.acme.dev' is not a lowercase DNS name",
        ),
        (
            PeerRoute(ACME.host, "kubernetes.default:443"),
            f"peer route backend 'kubernetes.default:443' for '{ACME.host}' is not "
            "<service>.kura.svc.cluster.local:<port>",
        ),
        (
            PeerRoute(ACME.host, "kubernetes.default.svc.cluster.local:443"),
            f"peer route backend 'kubernetes.default.svc.cluster.local:443' for '{ACME.host}' is not "
            "<service>.kura.svc.cluster.local:<port>",
        ),
        (
            PeerRoute(ACME.host, "evil.example.com.kura.svc.cluster.local:7443"),
            f"peer route backend 'evil.example.com.kura.svc.cluster.local:7443' for '{ACME.host}' is not "
            "<service>.kura.svc.cluster.local:<port>",
        ),
        (
            PeerRoute(ACME.host, "kura-acme-us-east-peer.kura.svc.cluster.local"),
            f"peer route backend 'kura-acme-us-east-peer.kura.svc.cluster.local' for '{ACME.host}' "
            "has no valid port",
        ),
    ],
)
def test_render_refuses_routes_that_could_escape_the_map_or_the_namespace(
    route: PeerRoute, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        render_routes([route], STAGING)


def test_render_refuses_a_repeated_host() -> None:
    with pytest.raises(ValueError, match=re.escape(f"peer routes repeat a host: ['{ACME.host}']")):
        render_routes([ACME, ACME], STAGING)


def test_nginx_conf_is_stream_only_and_includes_the_routes_inside_the_map() -> None:
    assert render_demux_config(
        port=7443, resolver="10.96.0.10", routes_file="/run/kura-peer-demux/routes.map"
    ) == (
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
        "    resolver 10.96.0.10 valid=10s ipv6=off;\n"
        "    resolver_timeout 2s;\n"
        "    map_hash_bucket_size 256;\n"
        "\n"
        "    map $ssl_preread_server_name $kura_peer_sni_shape {\n"
        '        "~^[a-z0-9-]{1,63}(\\.[a-z0-9-]{1,63}){1,126}$" ok;\n'
        "        default bad;\n"
        "    }\n"
        "\n"
        '    map "$kura_peer_sni_shape:$ssl_preread_server_name" $kura_peer_backend {\n'
        '        default "";\n'
        "        include /run/kura-peer-demux/routes.map;\n"
        "    }\n"
        "\n"
        "    server {\n"
        "        listen 7443;\n"
        "        ssl_preread on;\n"
        "        proxy_pass $kura_peer_backend;\n"
        "        proxy_connect_timeout 5s;\n"
        "        proxy_timeout 10m;\n"
        "    }\n"
        "}\n"
    )


def test_settings_survive_the_deployment_environment() -> None:
    assert RouteSettings.from_env(STAGING.to_env()) == STAGING
    domain = RouteSettings(
        region="us-east",
        region_host="us-east.kura.tuist.dev",
        namespace="kura",
        peer_port=7443,
        cluster_domain="k8s",
    )
    assert RouteSettings.from_env(domain.to_env()) == domain


def test_missing_settings_are_named() -> None:
    env = STAGING.to_env()
    del env["REGION"], env["PEER_PORT"]
    with pytest.raises(ValueError, match=re.escape("environment variable(s) REGION, PEER_PORT required")):
        RouteSettings.from_env(env)
