"""The watcher loop against a local Kubernetes API (real HTTP through the kubernetes
client) and a recording Mover."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client

from providers.errors import RateLimitError
from watcher.decision import Action
from watcher.loop import FailoverWatcher, WatcherSettings, kube_listers

IP = "203.0.113.7"
SETTINGS = WatcherSettings(
    ip=IP, region="us-east", node_pool="kura-us-east", namespace="kura", poll_seconds=0.01
)


def k8s_node(name: str, provider_id: str, *, ready: bool = True, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"providerID": provider_id},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def k8s_pod(name: str, node: str, *, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "kura"},
        "spec": {"nodeName": node, "containers": [{"name": "nginx"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


@dataclass
class FakeApi:
    """What the local API server serves; and every request it got (path, query)."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    fail: bool = False
    requests: list[tuple[str, dict[str, list[str]]]] = field(default_factory=list)


@pytest.fixture
def api() -> Iterator[tuple[FakeApi, client.CoreV1Api]]:
    state = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            state.requests.append((url.path, parse_qs(url.query)))
            if state.fail:
                self.send_response(500)
                self.end_headers()
                return
            if url.path == "/api/v1/nodes":
                body = {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": state.nodes}
            elif url.path == "/api/v1/namespaces/kura/pods":
                body = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": state.pods}
            else:
                self.send_response(404)
                self.end_headers()
                return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    config = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    config.retries = 0
    with client.ApiClient(config) as api_client:
        yield state, client.CoreV1Api(api_client)
    server.shutdown()
    server.server_close()


@dataclass
class RecordingMover:
    route: str | None
    calls: list[tuple[str, ...]] = field(default_factory=list)
    fail_moves: int = 0

    def failover_target(self, ip: str) -> str | None:
        self.calls.append(("failover_target", ip))
        return self.route

    def move_failover(self, ip: str, box_id: str) -> None:
        self.calls.append(("move_failover", ip, box_id))
        if self.fail_moves:
            self.fail_moves -= 1
            raise RuntimeError("vendor said 503")
        self.route = box_id


def two_boxes(state: FakeApi, *, a_ready: bool = True) -> None:
    state.nodes = [
        k8s_node("kura-a", "ovh://bhs/ns1.ip-1.net", ready=a_ready),
        k8s_node("kura-b", "ovh://bhs/ns2.ip-2.net"),
    ]
    state.pods = [k8s_pod("demux-a", "kura-a"), k8s_pod("demux-b", "kura-b")]


def watcher(api: client.CoreV1Api, mover: RecordingMover) -> FailoverWatcher:
    list_nodes, list_pods = kube_listers(api, SETTINGS)
    return FailoverWatcher(SETTINGS, list_nodes, list_pods, mover)


def test_poll_asks_for_the_pool_nodes_and_the_region_demux_pods(
    api: tuple[FakeApi, client.CoreV1Api],
) -> None:
    state, core = api
    two_boxes(state)
    watcher(core, RecordingMover("ns1.ip-1.net")).poll_once()
    assert state.requests == [
        ("/api/v1/nodes", {"labelSelector": ["node.cluster.x-k8s.io/pool=kura-us-east"]}),
        (
            "/api/v1/namespaces/kura/pods",
            {"labelSelector": ["app.kubernetes.io/component=peer-demux,app.kubernetes.io/instance=us-east"]},
        ),
    ]


def test_healthy_current_box_is_kept_without_a_move(api: tuple[FakeApi, client.CoreV1Api]) -> None:
    state, core = api
    two_boxes(state)
    mover = RecordingMover("ns2.ip-2.net")
    w = watcher(core, mover)
    assert [w.poll_once().action for _ in range(3)] == [Action.KEEP] * 3  # type: ignore[union-attr]
    assert mover.calls == [("failover_target", IP)] * 3


def test_dead_box_is_left_after_two_polls(api: tuple[FakeApi, client.CoreV1Api]) -> None:
    state, core = api
    two_boxes(state, a_ready=False)
    mover = RecordingMover("ns1.ip-1.net")
    w = watcher(core, mover)
    w.poll_once()
    w.poll_once()
    w.poll_once()
    assert mover.calls == [
        ("failover_target", IP),
        ("failover_target", IP),
        ("move_failover", IP, "ns2.ip-2.net"),
        ("failover_target", IP),
    ]


def test_terminating_node_from_the_api_is_not_eligible(api: tuple[FakeApi, client.CoreV1Api]) -> None:
    state, core = api
    two_boxes(state)
    state.nodes[0] = k8s_node("kura-a", "ovh://bhs/ns1.ip-1.net", deleting=True)
    decision = watcher(core, RecordingMover("ns1.ip-1.net")).poll_once()
    assert decision is not None
    assert (decision.action, decision.target) == (Action.MOVE, "ns2.ip-2.net")


def test_api_failure_keeps_the_route(
    api: tuple[FakeApi, client.CoreV1Api], caplog: pytest.LogCaptureFixture
) -> None:
    state, core = api
    state.fail = True
    mover = RecordingMover("ns1.ip-1.net")
    with caplog.at_level(logging.WARNING, logger="watcher"):
        assert watcher(core, mover).poll_once() is None
    assert mover.calls == []
    assert (
        caplog.records[0]
        .getMessage()
        .startswith(f"failover {IP}: read failed, keeping the current route: (500)")
    )


def test_no_eligible_box_stays_and_alerts(
    api: tuple[FakeApi, client.CoreV1Api], caplog: pytest.LogCaptureFixture
) -> None:
    state, core = api
    two_boxes(state)
    state.pods = [k8s_pod("demux-a", "kura-a", ready=False)]
    mover = RecordingMover("ns1.ip-1.net")
    with caplog.at_level(logging.ERROR, logger="watcher"):
        decision = watcher(core, mover).poll_once()
    assert decision is not None and decision.action is Action.STAY
    assert [r.getMessage() for r in caplog.records] == [
        f"failover {IP}: ALERT stay: no eligible box in pool (kura-a: no Ready peer-demux pod, "
        "kura-b: no Ready peer-demux pod); IP left on ns1.ip-1.net"
    ]
    assert mover.calls == [("failover_target", IP)]


def test_failed_move_is_retried_on_the_next_poll(api: tuple[FakeApi, client.CoreV1Api]) -> None:
    state, core = api
    two_boxes(state, a_ready=False)
    mover = RecordingMover("ns1.ip-1.net", fail_moves=1)
    w = watcher(core, mover)
    for _ in range(3):
        w.poll_once()
    assert [c for c in mover.calls if c[0] == "move_failover"] == [
        ("move_failover", IP, "ns2.ip-2.net"),
        ("move_failover", IP, "ns2.ip-2.net"),
    ]
    assert mover.route == "ns2.ip-2.net"


def test_foreign_provider_id_is_logged_and_ineligible(
    api: tuple[FakeApi, client.CoreV1Api], caplog: pytest.LogCaptureFixture
) -> None:
    state, core = api
    two_boxes(state)
    state.nodes[1] = k8s_node("kura-b", "hcloud://99")
    with caplog.at_level(logging.WARNING, logger="watcher"):
        decision = watcher(core, RecordingMover("ns2.ip-2.net")).poll_once()
    assert decision is not None and (decision.action, decision.target) == (Action.MOVE, "ns1.ip-1.net")
    assert caplog.records[0].getMessage() == (
        "node kura-b: providerID 'hcloud://99' has scheme 'hcloud'; "
        "expected ovh://, dedibox:// or hrobot://; "
        "it cannot carry the failover IP"
    )


def test_run_polls_until_stopped(api: tuple[FakeApi, client.CoreV1Api]) -> None:
    state, core = api
    two_boxes(state)
    stop = threading.Event()

    class StopAfterThree(RecordingMover):
        def failover_target(self, ip: str) -> str | None:
            if len(self.calls) == 2:
                stop.set()
            return super().failover_target(ip)

    mover = StopAfterThree("ns1.ip-1.net")
    thread = threading.Thread(target=watcher(core, mover).run, args=(stop,))
    thread.start()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert mover.calls == [("failover_target", IP)] * 3


@dataclass
class RateLimitedMover(RecordingMover):
    """A mover whose vendor's hourly budget ran out (Robot's 403 RATE_LIMIT_EXCEEDED)."""

    def failover_target(self, ip: str) -> str | None:
        self.calls.append(("failover_target", ip))
        raise RateLimitError(
            vendor="robot",
            call="GET /failover/{ip}",
            subject=ip,
            status=403,
            code="RATE_LIMIT_EXCEEDED",
            message="Rate limit exceeded",
            max_request=100,
            interval=3600,
        )


def test_a_spent_request_budget_keeps_the_route_alerts_and_pauses(
    api: tuple[FakeApi, client.CoreV1Api], caplog: pytest.LogCaptureFixture
) -> None:
    state, core = api
    two_boxes(state, a_ready=False)
    mover = RateLimitedMover("ns1.ip-1.net")
    w = watcher(core, mover)
    with caplog.at_level(logging.ERROR, logger="watcher"):
        assert w.poll_once() is None
    assert [c[0] for c in mover.calls] == ["failover_target"]
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"failover {IP}: ALERT vendor request budget spent, keeping the current route: ")
    assert "may call GET /failover/{ip} 100 times per 3600 s" in line
    # The next read waits out the pause, not the poll interval.
    assert w.next_wait() == SETTINGS.rate_limited_pause_seconds
    mover.__class__ = RecordingMover
    w.poll_once()
    assert w.next_wait() == SETTINGS.poll_seconds


def test_robot_watcher_polls_no_faster_than_half_the_budget_allows(monkeypatch: pytest.MonkeyPatch) -> None:
    import watcher.__main__ as watcher_main

    for key, value in {
        "FAILOVER_IP": IP,
        "FAILOVER_VENDOR": "robot",
        "REGION": "us-east",
        "NODE_POOL": "kura-us-east",
        "POLL_SECONDS": "30",
    }.items():
        monkeypatch.setenv(key, value)
    assert watcher_main.settings_from_env().poll_seconds == 72.0
    monkeypatch.setenv("ROBOT_FAILOVER_WATCHERS", "2")
    assert watcher_main.settings_from_env().poll_seconds == 144.0
    monkeypatch.setenv("FAILOVER_VENDOR", "ovh")
    assert watcher_main.settings_from_env().poll_seconds == 30.0
    monkeypatch.setenv("POLL_SECONDS", "soon")
    with pytest.raises(SystemExit, match=r"POLL_SECONDS='soon' is not a number"):
        watcher_main.settings_from_env()
