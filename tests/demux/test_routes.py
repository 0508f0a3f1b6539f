"""demux.routes: which Services become routes (by kura-controller's labels, never by reading a name),
the exact map entries, and the static nginx.conf. Real nginx runs both in
tests/integration/test_peer_demux_nginx.py."""

from __future__ import annotations

import re
from typing import Any

import pytest
from kubernetes import client as k8s

from demux.routes import (
    PeerRoute,
    RouteSettings,
    ServiceView,
    Skipped,
    account_routes,
    render_demux_config,
    render_routes,
    service_view,
)

STAGING = RouteSettings(
    region="us-east", region_host="us-east.staging.kura.tuist.dev", namespace="kura", peer_port=7443
)
ACME = PeerRoute(
    "acme.peer.us-east.staging.kura.tuist.dev", "kura-acme-us-east-peer.kura.svc.cluster.local:7443"
)


def labels(
    handle: str | None, region: str | None = "us-east", managed_by: str | None = "kura-controller"
) -> dict[str, str]:
    """What kura-controller puts on an account's Services (None leaves a label out)."""
    given = {
        "app.kubernetes.io/managed-by": managed_by,
        "tuist.dev/account": handle,
        "tuist.dev/region": region,
    }
    return {key: value for key, value in given.items() if value is not None}


def svc(
    name: str,
    labelled: dict[str, str],
    *,
    namespace: str = "kura",
    type: str = "ClusterIP",
    ip: str | None = "10.96.4.2",
    ports: tuple[int, ...] = (7443,),
) -> ServiceView:
    return ServiceView(name=name, namespace=namespace, labels=labelled, type=type, cluster_ip=ip, ports=ports)


def peer(handle: str, region: str = "us-east", **kwargs: Any) -> ServiceView:
    """An account peer Service as kura-controller makes it: its name and its labels agree."""
    return svc(f"kura-{handle}-{region}-peer", labels(handle, region), **kwargs)


def test_each_account_peer_service_of_the_region_becomes_one_route_sorted_by_host() -> None:
    routes, skipped = account_routes([peer("zeta"), peer("acme"), svc("kube-dns", {})], STAGING)
    assert routes == [
        ACME,
        PeerRoute(
            "zeta.peer.us-east.staging.kura.tuist.dev", "kura-zeta-us-east-peer.kura.svc.cluster.local:7443"
        ),
    ]
    assert skipped == []


def test_another_regions_peer_services_are_not_this_demux_s_business() -> None:
    routes, skipped = account_routes([peer("acme", "us-west"), peer("acme", "eu-central")], STAGING)
    assert (routes, skipped) == ([], [])


def test_a_name_that_reads_as_this_region_routes_nothing_when_the_labels_say_another() -> None:
    # kura-acme-us-east-peer is also account acme-us's peer Service of a region "east": a name
    # cannot say which; the labels do. The us-east demux leaves it alone.
    routes, skipped = account_routes([svc("kura-acme-us-east-peer", labels("acme-us", "east"))], STAGING)
    assert (routes, skipped) == ([], [])


def test_the_same_name_routes_the_labelled_account_in_the_labelled_region() -> None:
    east = RouteSettings(
        region="east", region_host="east.staging.kura.tuist.dev", namespace="kura", peer_port=7443
    )
    routes, skipped = account_routes([svc("kura-acme-us-east-peer", labels("acme-us", "east"))], east)
    assert routes == [
        PeerRoute(
            "acme-us.peer.east.staging.kura.tuist.dev", "kura-acme-us-east-peer.kura.svc.cluster.local:7443"
        )
    ]
    assert skipped == []


def test_eu_central_s_peer_services_are_read_from_their_labels_too() -> None:
    eu_central = RouteSettings(
        region="eu-central", region_host="eu-central.staging.kura.tuist.dev", namespace="kura", peer_port=7443
    )
    name = "kura-acme-eu-central-peer"  # account acme of eu-central, or account acme-eu of "central"
    assert account_routes([svc(name, labels("acme-eu", "central"))], eu_central) == ([], [])
    routes, skipped = account_routes([svc(name, labels("acme", "eu-central"))], eu_central)
    assert routes == [
        PeerRoute("acme.peer.eu-central.staging.kura.tuist.dev", f"{name}.kura.svc.cluster.local:7443")
    ]
    assert skipped == []


def test_the_handle_comes_from_the_label_and_the_name_must_agree() -> None:
    # Named like account acme's peer Service, labelled as account acme-us's: neither is routed.
    routes, skipped = account_routes([svc("kura-acme-us-east-peer", labels("acme-us"))], STAGING)
    assert routes == []
    assert skipped == [
        Skipped(
            "kura/kura-acme-us-east-peer",
            "labelled for account 'acme-us' of region us-east, whose peer Service is "
            "kura-acme-us-us-east-peer, not kura-acme-us-east-peer",
        )
    ]


def test_the_account_s_other_services_with_the_same_labels_are_not_its_peer_service() -> None:
    # kura-controller labels an instance's cache and headless Services alike, and the cache
    # Service exposes the peer port too: only the one with the peer Service's name routes.
    cache = svc("kura-acme-us-east-1", labels("acme"), ports=(4000, 7443))
    headless = svc("kura-acme-us-east-1-headless", labels("acme"), ip="None", ports=(4000, 7443))
    routes, skipped = account_routes([cache, headless, peer("acme")], STAGING)
    assert (routes, skipped) == ([ACME], [])


@pytest.mark.parametrize(
    "labelled",
    [
        {},
        labels("acme", managed_by=None),
        labels("acme", managed_by="helm"),
        labels("acme", region="us-west"),
    ],
)
def test_a_service_kura_controller_did_not_label_for_this_region_never_routes(
    labelled: dict[str, str],
) -> None:
    routes, skipped = account_routes([svc("kura-acme-us-east-peer", labelled)], STAGING)
    assert (routes, skipped) == ([], [])


@pytest.mark.parametrize(
    ("service", "reason"),
    [
        (svc("kura-acme-us-east-peer", labels(None)), "has no tuist.dev/account label"),
        # Label values Kubernetes takes that are no DNS label, hence no host.
        (
            svc("kura-acme-us-east-peer", labels("Acme")),
            "its tuist.dev/account label 'Acme' is not a DNS label",
        ),
        (
            svc("kura-acme-co-us-east-peer", labels("acme_co")),
            "its tuist.dev/account label 'acme_co' is not a DNS label",
        ),
    ],
)
def test_a_peer_service_without_a_usable_account_label_is_skipped_with_the_reason(
    service: ServiceView, reason: str
) -> None:
    routes, skipped = account_routes([service, peer("zeta")], STAGING)
    assert [r.host for r in routes] == ["zeta.peer.us-east.staging.kura.tuist.dev"]
    assert skipped == [Skipped(f"kura/{service.name}", reason)]


def test_a_peer_service_with_no_region_label_is_placed_by_its_name() -> None:
    """The kura-controller version read labels the peer Service with its account but no region
    (docs/peer-demux.md): the name kura-controller is given for that account and region decides."""
    ours = svc("kura-acme-us-east-peer", labels("acme", region=None))
    # Account acme-us's peer Service of a region "east" has that same name: not us-east's.
    theirs = svc("kura-acme-us-east-peer", labels("acme-us", region=None), ip="10.96.4.9")
    elsewhere = svc("kura-acme-eu-central-peer", labels("acme", region=None), ip="10.96.4.8")
    assert account_routes([ours, elsewhere], STAGING) == ([ACME], [])
    routes, skipped = account_routes([theirs], STAGING)
    assert routes == []
    assert skipped == [
        Skipped(
            "kura/kura-acme-us-east-peer",
            "labelled for account 'acme-us' of region us-east, whose peer Service is "
            "kura-acme-us-us-east-peer, not kura-acme-us-east-peer",
        )
    ]


def test_two_services_claiming_one_account_route_neither() -> None:
    # The reconciler keeps one view per name, so only a caller handing in two can get here; the
    # rule holds anyway: never route an account to a guess.
    first, second = peer("acme"), peer("acme", ip="10.96.4.3")
    routes, skipped = account_routes([first, second, peer("zeta")], STAGING)
    assert [r.host for r in routes] == ["zeta.peer.us-east.staging.kura.tuist.dev"]
    why = (
        "2 Services claim account 'acme' of region us-east: "
        "kura/kura-acme-us-east-peer, kura/kura-acme-us-east-peer"
    )
    assert skipped == [Skipped("kura/kura-acme-us-east-peer", why)] * 2


def test_the_selector_is_kura_controller_s_account_services() -> None:
    assert STAGING.service_selector() == ("app.kubernetes.io/managed-by=kura-controller,tuist.dev/account")


def test_service_view_reads_the_labels_of_a_kubernetes_service() -> None:
    service = k8s.V1Service(
        metadata=k8s.V1ObjectMeta(name="kura-acme-us-east-peer", namespace="kura", labels=labels("acme")),
        spec=k8s.V1ServiceSpec(
            type="ClusterIP", cluster_ip="10.96.4.2", ports=[k8s.V1ServicePort(name="peer", port=7443)]
        ),
    )
    assert service_view(service) == peer("acme")
    unlabelled = k8s.V1Service(metadata=k8s.V1ObjectMeta(name="kube-dns", namespace="kura"))
    assert service_view(unlabelled).labels == {}


def test_an_account_s_peer_host_is_under_the_region_s_peer_wildcard() -> None:
    # *.peer.<region host> (components/dns.py) resolves every account: no record per account.
    production = RouteSettings(
        region="us-east", region_host="us-east.kura.tuist.dev", namespace="kura", peer_port=7443
    )
    routes, _ = account_routes([peer("acme")], production)
    assert [r.host for r in routes] == ["acme.peer.us-east.kura.tuist.dev"]


def test_backend_uses_the_configured_cluster_domain() -> None:
    settings = RouteSettings(
        region="us-east",
        region_host="us-east.kura.tuist.dev",
        namespace="kura",
        peer_port=7443,
        cluster_domain="k8s.internal",
    )
    routes, _ = account_routes([peer("acme")], settings)
    assert [r.backend for r in routes] == ["kura-acme-us-east-peer.kura.svc.k8s.internal:7443"]


@pytest.mark.parametrize(
    ("service", "reason"),
    [
        (
            peer("evil", type="ExternalName", ip=None),
            "an ExternalName Service points outside the cluster",
        ),
        (
            peer("evil", ip="None"),
            "headless (no cluster IP): the demux routes to a Service, not to pods",
        ),
        (peer("evil", ports=(443,)), "does not expose the peer port 7443"),
        (peer("evil", namespace="default"), "not in the Kura namespace 'kura'"),
    ],
)
def test_a_service_that_could_route_elsewhere_is_skipped_with_the_reason(
    service: ServiceView, reason: str
) -> None:
    routes, skipped = account_routes([service, peer("acme")], STAGING)
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
