"""`python -m watcher`'s reading of the Lease settings its Deployment gives it, and the client it
builds to its cluster."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import urllib3
from urllib3.util.retry import Retry

import watcher.__main__ as watcher_main
from watcher.__main__ import lease_from_env
from watcher.lease import LeaseSettings
from watcher.loop import KUBE_TIMEOUT as LOOP_KUBE_TIMEOUT
from watcher.loop import POLL_BUDGET_SECONDS


def test_the_lease_is_named_by_the_deployment_and_held_as_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEASE_NAME", "kura-failover-watcher-us-east")
    monkeypatch.setenv("LEASE_NAMESPACE", "kura-failover")
    monkeypatch.setenv("POD_NAME", "kura-failover-watcher-us-east-5d9c7-x2x4q")
    assert lease_from_env() == LeaseSettings(
        namespace="kura-failover",
        name="kura-failover-watcher-us-east",
        identity="kura-failover-watcher-us-east-5d9c7-x2x4q",
    )


def test_a_deployment_from_before_the_lease_runs_without_it_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The image is re-pinned apart from the program: a new image may meet an old Deployment.
    monkeypatch.delenv("LEASE_NAME", raising=False)
    with caplog.at_level(logging.WARNING, logger="watcher"):
        assert lease_from_env() is None
    assert "LEASE_NAME is not set: moving the IP without the region's lease" in caplog.text


def test_a_named_lease_without_its_namespace_stops_the_watcher(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEASE_NAME", "kura-failover-watcher-us-east")
    monkeypatch.delenv("LEASE_NAMESPACE", raising=False)
    with pytest.raises(SystemExit, match="environment variable LEASE_NAMESPACE is required"):
        lease_from_env()


def in_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What a pod has: the apiserver's Service in the environment, its ServiceAccount's token and CA
    mounted (no cluster answers: the clients are only built)."""
    from kubernetes.config import incluster_config

    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("a-service-account-token")
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")


def assert_loop_retries(api: Any) -> None:
    """The client retries a connection that was never made, once, and nothing else: not a read that
    timed out, not an answer cut off, not a Retry-After wait (providers.kube.loop_retries)."""
    for retries in (api.configuration.retries, api.rest_client.pool_manager.connection_pool_kw["retries"]):
        assert isinstance(retries, Retry)
        assert (retries.total, retries.connect, retries.read, retries.other) == (1, 1, 0, 0)
        assert (retries.respect_retry_after_header, retries.backoff_factor) == (False, 0)


class SilentApiServer:
    """Accepts connections and reads what is sent, never answers: a hung API server."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.accepted = 0
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


def assert_each_timed_out_call_is_sent_once(api: Any, calls: list[Callable[[], Any]]) -> None:
    """Against a server that never answers: each call fails on its read timeout at once, over one
    connection of its own (not sent again)."""
    server = SilentApiServer()
    try:
        # Plain HTTP to the silent server; the in-cluster token refresh would set the Service's
        # address back before each call.
        api.configuration.refresh_api_key_hook = None
        api.configuration.host = server.url
        for call in calls:
            started = time.monotonic()
            with pytest.raises(urllib3.exceptions.MaxRetryError, match="Read timed out"):
                call()
            # A resend is what server.accepted counts; this only says no call waits for more than
            # its timeouts (a loaded machine may add a second or two).
            assert time.monotonic() - started < 5.0
        assert server.accepted == len(calls)
    finally:
        server.close()


def test_the_watchers_client_sends_a_timed_out_lease_call_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """urllib3's default sends a timed-out GET or PUT three more times: one Lease call with (2, 5) s
    could take 28 s, a renewal longer than the Lease. The watcher's takes one read timeout."""
    from kubernetes import client as k8s

    in_cluster(monkeypatch, tmp_path)
    api = watcher_main.kube_api()
    assert api.configuration.host == "https://10.96.0.1:443"
    assert_loop_retries(api)
    leases = k8s.CoordinationV1Api(api)
    assert_each_timed_out_call_is_sent_once(
        api,
        [
            lambda: leases.read_namespaced_lease("l", "n", _request_timeout=(2, 0.2)),
            lambda: leases.replace_namespaced_lease("l", "n", {}, _request_timeout=(2, 0.2)),
        ],
    )


def test_a_polls_kubernetes_calls_fit_its_budget() -> None:
    """Each list takes at most 5 + 5 + 30 s on the watcher's client: the two of a poll, 80 s."""
    assert 2 * (2 * LOOP_KUBE_TIMEOUT[0] + LOOP_KUBE_TIMEOUT[1]) == 80 <= POLL_BUDGET_SECONDS == 120
