"""demux.reconciler against a recorded API: it lists and watches only kura-controller's account
Services of its region (by label), and writes the routes their labels give. The real control plane
runs it in tests/cluster/test_k8s_peer_demux.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from kubernetes import client as k8s

from demux.reconciler import FIELD_MANAGER, RouteReconciler
from demux.routes import ROUTES_KEY, RouteSettings

SETTINGS = RouteSettings(
    region="us-east", region_host="us-east.staging.kura.tuist.dev", namespace="kura", peer_port=7443
)
SELECTOR = "app.kubernetes.io/managed-by=kura-controller,tuist.dev/account"
HEADER = (
    "# Routes of the us-east peer demux, written by its route reconciler (python -m demux)\n"
    "# from the account peer Services of namespace kura. Do not edit.\n"
)


def peer_service(name: str, handle: str, region: str = "us-east") -> k8s.V1Service:
    return k8s.V1Service(
        metadata=k8s.V1ObjectMeta(
            name=name,
            namespace="kura",
            labels={
                "app.kubernetes.io/managed-by": "kura-controller",
                "tuist.dev/account": handle,
                "tuist.dev/region": region,
            },
        ),
        spec=k8s.V1ServiceSpec(
            type="ClusterIP", cluster_ip="10.96.4.2", ports=[k8s.V1ServicePort(name="peer", port=7443)]
        ),
    )


class RecordedCore:
    """CoreV1Api as the reconciler uses it: what it was asked, and what it wrote."""

    def __init__(self, services: list[k8s.V1Service]) -> None:
        self.services = services
        self.lists: list[tuple[str, dict[str, Any]]] = []
        self.patched: list[tuple[str, str, str]] = []
        self.written: list[str] = []

    def list_namespaced_service(self, namespace: str, **kwargs: Any) -> k8s.V1ServiceList:
        self.lists.append((namespace, kwargs))
        return k8s.V1ServiceList(metadata=k8s.V1ListMeta(resource_version="7"), items=self.services)

    def patch_namespaced_config_map(
        self, name: str, namespace: str, body: dict[str, Any], **kwargs: Any
    ) -> None:
        self.patched.append((name, namespace, kwargs["field_manager"]))
        self.written.append(body["data"][ROUTES_KEY])


class OneWatch:
    """A watch that delivers these events, then asks the reconciler to stop."""

    def __init__(self, events: list[tuple[str, k8s.V1Service]], stop: threading.Event) -> None:
        self.events, self.stop_event = events, stop
        self.calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def stream(self, func: Any, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.calls.append((func, args, kwargs))
        for i, (kind, service) in enumerate(self.events):
            if i == len(self.events) - 1:
                self.stop_event.set()
            yield {"type": kind, "object": service}

    def stop(self) -> None:
        pass


def run_once(core: RecordedCore, events: list[tuple[str, k8s.V1Service]]) -> OneWatch:
    stop = threading.Event()
    watch = OneWatch(events, stop)
    reconciler = RouteReconciler(
        SETTINGS, core, "kura-peer-demux-routes-us-east", backoff_seconds=0.1, watch_factory=lambda: watch
    )
    # In a thread with a deadline: a failing call is retried forever by design.
    thread = threading.Thread(target=reconciler.run, args=(stop,), daemon=True)
    thread.start()
    thread.join(timeout=5)
    stop.set()
    thread.join(timeout=5)
    return watch


def route_line(handle: str, service: str) -> str:
    return f'"ok:{handle}.peer.us-east.staging.kura.tuist.dev" {service}.kura.svc.cluster.local:7443;\n'


def test_it_lists_and_watches_only_kura_controller_s_account_services_of_its_region() -> None:
    core = RecordedCore([peer_service("kura-acme-us-east-peer", "acme")])
    watch = run_once(core, [("ADDED", peer_service("kura-globex-us-east-peer", "globex"))])
    assert core.lists == [("kura", {"label_selector": SELECTOR})]
    assert watch.calls == [
        (
            core.list_namespaced_service,
            ("kura",),
            {"label_selector": SELECTOR, "resource_version": "7", "timeout_seconds": 300},
        )
    ]


def test_routes_follow_the_labels_of_what_it_lists_and_watches() -> None:
    core = RecordedCore([peer_service("kura-acme-us-east-peer", "acme")])
    run_once(
        core,
        [
            ("ADDED", peer_service("kura-globex-us-east-peer", "globex")),
            # Relabelled to another region: whatever its name reads as, it is not this demux's.
            ("MODIFIED", peer_service("kura-acme-us-east-peer", "acme-us", region="east")),
        ],
    )
    assert set(core.patched) == {("kura-peer-demux-routes-us-east", "kura", FIELD_MANAGER)}
    assert core.written == [
        HEADER + route_line("acme", "kura-acme-us-east-peer"),
        HEADER
        + route_line("acme", "kura-acme-us-east-peer")
        + route_line("globex", "kura-globex-us-east-peer"),
        HEADER + route_line("globex", "kura-globex-us-east-peer"),
    ]


def test_a_resync_writes_the_routes_again_though_this_process_wrote_them_last() -> None:
    """The routes ConfigMap can lose its data behind the reconciler's back (an up that replaced it, an
    edit); the next relist (every resync) writes them again rather than trusting its memory."""
    core = RecordedCore([peer_service("kura-acme-us-east-peer", "acme")])
    reconciler = RouteReconciler(SETTINGS, core, "kura-peer-demux-routes-us-east")
    reconciler.relist()
    assert reconciler.apply() is True
    assert reconciler.apply() is False  # between resyncs: nothing changed, nothing written
    reconciler.relist()
    assert reconciler.apply() is True
    assert core.written == [HEADER + route_line("acme", "kura-acme-us-east-peer")] * 2
