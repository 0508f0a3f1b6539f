"""`python -m watcher`'s reading of the Lease settings its Deployment gives it."""

from __future__ import annotations

import logging

import pytest

from watcher.__main__ import lease_from_env
from watcher.lease import LeaseSettings


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
