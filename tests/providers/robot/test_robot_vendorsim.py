"""RobotClient against the vendorsim process, with injected faults and rate limits."""

from __future__ import annotations

import pytest

from providers.errors import AuthError, TaskAlreadyExistsError, VendorError
from providers.retry import RetryPolicy
from providers.robot.client import RobotClient
from providers.vendor import Claim, InstallState

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJpselPEwoXIjP2bkKTBeNMrbyt7kCy0a+yHcLfRN+W7 tuist-dev-fleet"
BOX = "2345602"


def make_client(sim, password="dev-robot-password", attempts=12) -> RobotClient:
    return RobotClient(
        api_url=f"{sim.url}/robot",
        username="dev-robot-user",
        password=password,
        retry=RetryPolicy(max_attempts=attempts, base_delay=0.01, max_delay=0.05),
    )


def exercise(client: RobotClient) -> None:
    boxes = {b.id: b for b in client.list_boxes()}
    assert boxes[BOX].marker_field == "tuist-bm-dev-2" and boxes[BOX].public_ipv4 == "127.0.3.52"
    assert boxes["2345604"].claim == Claim("tuist-infra/alice-dev/runners-linux-0")
    assert "2345605" not in {b.id for b in client.boxes_with_marker("tuist-bm-dev-")}
    client.set_claim(BOX, Claim("0123456789ab"))
    assert client.get_box(BOX).name == "tuist-bm-dev-2~c-0123456789ab"
    assert client.failover_target("198.51.100.30") == "2345601"
    client.move_failover("198.51.100.30", BOX)
    assert client.failover_target("198.51.100.30") == BOX
    client.move_failover("198.51.100.30", BOX)
    fingerprint = client.register_ssh_key("tuist-fleet", KEY)
    assert client.register_ssh_key("tuist-fleet", KEY) == fingerprint
    assert client.install_state(BOX) is InstallState.DONE
    client.start_reinstall(BOX, hostname="runner-1", ssh_public_key=KEY, user_login="root", user_password="x")
    client.set_claim(BOX, None)
    assert client.get_box(BOX).name == "tuist-bm-dev-2"


def test_every_method_against_vendorsim(vendorsim):
    exercise(make_client(vendorsim))
    writes = [
        (e["method"], e["path"], e["body"]) for e in vendorsim.admin("GET", "/audit?since=0")["entries"]
    ]
    assert writes[0] == ("POST", f"/robot/server/{BOX}", {"server_name": "tuist-bm-dev-2~c-0123456789ab"})
    assert writes[1] == ("POST", "/robot/failover/198.51.100.30", {"active_server_ip": "127.0.3.52"})
    assert [w[:2] for w in writes[2:]][-3:] == [
        ("POST", f"/robot/boot/{BOX}/rescue"),
        ("POST", f"/robot/reset/{BOX}"),
        ("POST", f"/robot/server/{BOX}"),
    ]
    assert writes[-2][2] == {"type": "hw"}


def test_armed_rescue_reads_running_and_blocks_a_second_reinstall(vendorsim):
    client = make_client(vendorsim)
    fingerprint = client.register_ssh_key("tuist-fleet", KEY)
    info = client.activate_rescue(BOX, fingerprint)
    assert info.active and fingerprint in info.authorized_key_fingerprints
    assert client.install_state(BOX) is InstallState.RUNNING
    with pytest.raises(
        TaskAlreadyExistsError, match=r"robot: GET /boot/\{server-number\}/rescue \[2345602\]"
    ):
        client.start_reinstall(BOX, hostname="r", ssh_public_key=KEY, user_login="root", user_password="x")


def test_wrong_password_is_an_auth_error_tried_once(vendorsim):
    with pytest.raises(AuthError) as raised:
        make_client(vendorsim, password="wrong-pass").get_box(BOX)
    assert raised.value.status == 401 and "wrong-pass" not in str(raised.value)


def test_thirty_percent_transient_errors_every_call_still_succeeds(vendorsim):
    vendorsim.admin("POST", "/faults", json={"vendor": "robot", "error_rate": 0.3, "status": 503, "seed": 5})
    exercise(make_client(vendorsim))


def test_non_transient_injected_error_names_vendor_and_call(vendorsim):
    vendorsim.admin(
        "POST",
        "/faults",
        json={"vendor": "robot", "route": "/robot/reset/*", "error_rate": 1.0, "status": 409},
    )
    with pytest.raises(VendorError) as raised:
        make_client(vendorsim).reset(BOX)
    assert str(raised.value).startswith(f"robot: POST /reset/{{server-number}} [{BOX}] failed (HTTP 409")


def test_rate_limit_403_is_retried_until_success(vendorsim):
    vendorsim.admin("POST", "/faults", json={"vendor": "robot", "error_rate": 0.3, "status": 403, "seed": 3})
    exercise(make_client(vendorsim))
