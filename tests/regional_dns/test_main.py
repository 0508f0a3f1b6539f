"""`python -m regional_dns`'s client to its cluster: a timed-out call is not sent again, so a pass
keeps within its budget."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client as k8s

import regional_dns.__main__ as dns_main
from regional_dns.reconciler import CALL_SECONDS, KUBE_TIMEOUT, PASS_BUDGET_SECONDS
from tests.watcher.test_main import assert_each_timed_out_call_is_sent_once, assert_loop_retries, in_cluster


def test_the_reconcilers_client_sends_a_timed_out_call_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    in_cluster(monkeypatch, tmp_path)
    api = dns_main.kube_api()
    assert api.configuration.host == "https://10.96.0.1:443"
    assert_loop_retries(api)
    assert_each_timed_out_call_is_sent_once(
        api, [lambda: k8s.CoreV1Api(api).list_node(_request_timeout=(2, 0.2))]
    )


def test_a_pass_fits_its_budget() -> None:
    """Four reads and a write, each at most 5 + 5 + 30 s on that client (urllib3's default retries
    would make one up to 4 x 35 s)."""
    assert KUBE_TIMEOUT == (5, 30)
    assert CALL_SECONDS == 40
    assert PASS_BUDGET_SECONDS == 5 * CALL_SECONDS + 20 == 220
