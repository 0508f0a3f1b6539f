"""OvhClient against the vendorsim process: real signatures, real tasks, injected faults."""

from __future__ import annotations

import pytest

from providers.errors import AuthError, TaskAlreadyExistsError
from providers.ovh.client import OvhClient
from providers.retry import RetryPolicy
from providers.vendor import Claim, InstallState

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJpselPEwoXIjP2bkKTBeNMrbyt7kCy0a+yHcLfRN+W7 tuist-dev-fleet"
SVC = "ns1002.ip-203-0-113.net"


def make_client(sim, secret="dev-ovh-application-secret", attempts=12) -> OvhClient:
    return OvhClient(
        endpoint=f"{sim.url}/ovh/1.0",
        application_key="dev-ovh-application-key",
        application_secret=secret,
        consumer_key="dev-ovh-consumer-key",
        retry=RetryPolicy(max_attempts=attempts, base_delay=0.01, max_delay=0.05),
        task_poll_interval=0.05,
        task_timeout=10,
    )


def exercise(client: OvhClient, sim) -> None:
    """Every client method once, in the order an adopt + move + release would use them."""
    boxes = {b.id: b for b in client.list_boxes()}
    assert boxes[SVC].marker_field == "tuist-kura-dev-ovh-2" and boxes[SVC].claim is None
    assert [b.id for b in client.boxes_with_marker("tuist-kura-dev-")] == sorted(
        b.id for b in boxes.values() if b.marker_field.startswith("tuist-kura-dev-")
    )
    assert boxes["ns1004.ip-203-0-113.net"].claim == Claim("tuist-infra/alice-dev/kura-us-east-0")
    client.set_claim(SVC, Claim("0123456789ab"))
    assert client.get_box(SVC).claim == Claim("0123456789ab")
    assert client.failover_target("198.51.100.10") == "ns1001.ip-203-0-113.net"
    client.move_failover("198.51.100.10", SVC)
    assert client.failover_target("198.51.100.10") == SVC
    assert client.install_state(SVC) is InstallState.PENDING
    client.set_claim(SVC, Claim("0123456789ab", releasing=True))
    client.start_reinstall(
        SVC, hostname="kura-1", ssh_public_key=KEY + "\n", user_login="ubuntu", user_password="x"
    )
    assert client.install_state(SVC) in (InstallState.RUNNING, InstallState.DONE)
    client.set_claim(SVC, None)
    assert client.get_box(SVC).marker_field == "tuist-kura-dev-ovh-2"


def test_every_method_against_vendorsim(vendorsim):
    exercise(make_client(vendorsim), vendorsim)
    writes = [
        (e["method"], e["path"], e["body"]) for e in vendorsim.admin("GET", "/audit?since=0")["entries"]
    ]
    assert writes[0] == (
        "PUT",
        "/ovh/1.0/service/10001002",
        {"resource": {"displayName": "tuist-kura-dev-ovh-2 claim:0123456789ab", "name": SVC}},
    )
    assert writes[1] == ("POST", "/ovh/1.0/ip/198.51.100.10%2F32/move", {"to": SVC})
    reinstall = next(w for w in writes if w[1].endswith("/reinstall"))
    assert reinstall[2]["customizations"] == {"hostname": "kura-1", "sshKey": KEY}
    assert [s["diskGroupId"] for s in reinstall[2]["storage"]] == [2]
    assert reinstall[2]["storage"][0]["partitioning"]["layout"][2] == {
        "fileSystem": "xfs",
        "mountPoint": "/data",
        "raidLevel": 10,
        "size": 0,
    }


def test_second_reinstall_is_task_already_exists(vendorsim):
    client = make_client(vendorsim)
    client.start_reinstall(SVC, hostname="kura-1", ssh_public_key=KEY, user_login="ubuntu", user_password="x")
    with pytest.raises(TaskAlreadyExistsError) as raised:
        client.start_reinstall(
            SVC, hostname="kura-1", ssh_public_key=KEY, user_login="ubuntu", user_password="x"
        )
    assert (raised.value.vendor, raised.value.call) == ("ovh", "POST /dedicated/server/{svc}/reinstall")
    assert client.install_state(SVC) is InstallState.RUNNING


def test_wrong_secret_is_an_auth_error(vendorsim):
    with pytest.raises(AuthError) as raised:
        make_client(vendorsim, secret="not-the-secret").list_boxes()
    assert (raised.value.status, raised.value.code) == (400, "INVALID_SIGNATURE")
    assert "not-the-secret" not in str(raised.value)


def test_thirty_percent_transient_errors_every_call_still_succeeds(vendorsim):
    vendorsim.admin("POST", "/faults", json={"vendor": "ovh", "error_rate": 0.3, "status": 503, "seed": 7})
    exercise(make_client(vendorsim), vendorsim)


def test_non_transient_injected_error_names_vendor_and_call(vendorsim):
    vendorsim.admin(
        "POST",
        "/faults",
        json={
            "vendor": "ovh",
            "route": "/ovh/1.0/dedicated/server/*/serviceInfos",
            "error_rate": 1.0,
            "status": 400,
        },
    )
    with pytest.raises(Exception) as raised:
        make_client(vendorsim).get_box(SVC)
    assert str(raised.value).startswith(
        f"ovh: GET /dedicated/server/{{svc}}/serviceInfos [{SVC}] failed (HTTP 400"
    )
