"""RobotClient against the vendorsim process, with injected faults and rate limits."""

from __future__ import annotations

import pytest

from providers.errors import AuthError, RateLimitError, TaskAlreadyExistsError, VendorError
from providers.retry import PollPolicy, RetryPolicy
from providers.robot.client import RobotClient
from providers.robot.models import RATE_LIMITS
from providers.vendor import Claim, InstallState

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJpselPEwoXIjP2bkKTBeNMrbyt7kCy0a+yHcLfRN+W7 tuist-dev-fleet"
BOX = "2345602"


def make_client(sim, password="dev-robot-password", attempts=12) -> RobotClient:
    return RobotClient(
        api_url=f"{sim.url}/robot",
        username="dev-robot-user",
        password=password,
        retry=RetryPolicy(max_attempts=attempts, base_delay=0.01, max_delay=0.05),
        poll=PollPolicy(first=0.05, max_interval=0.05),
        reset_settle_timeout=1,
    )


def exercise(client: RobotClient) -> None:
    boxes = {b.id: b for b in client.list_boxes()}
    assert boxes[BOX].marker_field == "tuist-bm-dev-2" and boxes[BOX].public_ipv4 == "198.18.3.52"
    assert boxes["2345604"].claim == Claim("a1ce00000003")
    assert "2345605" not in {b.id for b in client.boxes_with_marker("tuist-bm-dev-")}
    client.set_claim(BOX, Claim("0123456789ab"))
    assert client.get_box(BOX).name == "tuist-bm-dev-2--c-0123456789ab"
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
    assert writes[0] == ("POST", f"/robot/server/{BOX}", {"server_name": "tuist-bm-dev-2--c-0123456789ab"})
    assert writes[1] == ("POST", "/robot/failover/198.51.100.30", {"active_server_ip": "198.18.3.52"})
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
    # On reads: a write's failures are the lost-answer tests' (a write is never repeated blindly).
    vendorsim.admin(
        "POST",
        "/faults",
        json={"vendor": "robot", "method": "GET", "error_rate": 0.3, "status": 503, "seed": 5},
    )
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


def writes(sim, path: str) -> list[dict]:
    return [e for e in sim.admin("GET", "/audit?since=0")["entries"] if e["path"] == path]


@pytest.mark.parametrize("fault", [{"status": 500}, {"drop": True}], ids=["500", "dropped"])
def test_every_robot_write_whose_answer_is_lost_is_done_once(vendorsim, fault):
    """Rescue activation, reset, failover route: each carried out, its answer lost; the client reads
    back, and never sends it twice (no double reset). The server name is a whole value and may be
    written again."""
    for route in ("/robot/boot/*/rescue", "/robot/reset/*", "/robot/failover/*", "/robot/server/*"):
        vendorsim.admin(
            "POST",
            "/faults",
            json={
                "vendor": "robot",
                "method": "POST",
                "route": route,
                "error_rate": 1.0,
                "count": 1,
                "answer": "lost",
                **fault,
            },
        )
    client = make_client(vendorsim)
    client.set_claim(BOX, Claim("0123456789ab"))
    assert client.get_box(BOX).claim == Claim("0123456789ab")
    fingerprint = client.register_ssh_key("tuist-fleet", KEY)
    info = client.activate_rescue(BOX, fingerprint)
    assert info.active and info.host_key_fingerprints
    client.reset(BOX)
    client.move_failover("198.51.100.30", BOX)
    assert client.failover_target("198.51.100.30") == BOX
    assert [r["fired"] for r in vendorsim.admin("GET", "/faults")["rules"]] == [1, 1, 1, 1]
    assert len(writes(vendorsim, f"/robot/boot/{BOX}/rescue")) == 1
    assert len(writes(vendorsim, f"/robot/reset/{BOX}")) == 1
    assert len(writes(vendorsim, "/robot/failover/198.51.100.30")) == 1
    box = next(b for b in vendorsim.admin("GET", "/state")["boxes"] if b["key"] == f"robot-{BOX}")
    assert box["state"] == "rescue"


def test_failover_route_to_the_current_server_is_documented_success(vendorsim):
    """A stale read (the watcher moved the IP meanwhile) sends the route to where the IP already
    goes: Robot answers 409 FAILOVER_ALREADY_ROUTED, which is success."""
    client = make_client(vendorsim)
    real = client._failover
    stale = iter([{"active_server_ip": "198.18.3.52"}])
    client._failover = lambda ip: next(stale, None) or real(ip)  # type: ignore[method-assign]
    client.move_failover("198.51.100.30", "2345601")
    assert [w["status"] for w in writes(vendorsim, "/robot/failover/198.51.100.30")] == [409]
    assert client.failover_target("198.51.100.30") == "2345601"


def test_rate_limit_is_a_clear_error_at_the_documented_budget(vendorsim):
    """GET /failover/{ip} allows 100 calls an hour: the 101st is refused with Robot's own body, and
    the client says which budget ran out."""
    client = make_client(vendorsim)
    for _ in range(100):
        client._failover("198.51.100.30")
    with pytest.raises(RateLimitError) as raised:
        client.failover_target("198.51.100.30")
    assert (raised.value.max_request, raised.value.interval) == (100, 3600)
    assert "may call GET /failover/{ip} 100 times per 3600 s" in str(raised.value)


def test_client_budgets_match_what_vendorsim_enforces():
    """The per-hour budgets the client plans with are the ones vendorsim enforces."""
    from vendorsim.robot import DEFAULT_RATE_LIMITS

    client_side = {
        k.replace("{server-number}", "<n>").replace("{ip}", "<ip>"): v for k, v in RATE_LIMITS.items()
    }
    assert client_side == DEFAULT_RATE_LIMITS
