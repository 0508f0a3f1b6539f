"""RobotClient against a recording HTTP server: form bodies, basic auth, Robot's error envelope."""

from __future__ import annotations

import base64

import pytest

from config.models import Vendor
from providers.errors import (
    AuthError,
    ConflictError,
    NotFoundError,
    TaskAlreadyExistsError,
    TransientVendorError,
    VendorInputError,
)
from providers.retry import RetryPolicy
from providers.robot.client import RobotClient
from providers.robot.models import RescueInfo
from providers.vendor import Box, Claim, InstallState

PASSWORD = "robot-pass-9a7"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIRobot fleet@tuist"
FP = "b6:2c:3c:55:e2:11:7e:9b:e0:aa:71:55:fe:86:5e:37"


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def client(recorder, sleeps) -> RobotClient:
    return RobotClient(
        api_url=recorder.url,
        username="#ws+tuist",
        password=PASSWORD,
        retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05),
        sleep=sleeps.append,
    )


def server(number=321, name="tuist-bm-canary-1", ip="136.243.1.21"):
    return {
        "server": {
            "server_ip": ip,
            "server_ipv6_net": "2a01:4f8:1::",
            "server_number": number,
            "server_name": name,
            "product": "AX42-U",
            "dc": "FSN1-DC14",
            "traffic": "unlimited",
            "status": "ready",
            "cancelled": False,
            "paid_until": "2026-12-31",
            "ip": [ip],
            "subnet": [],
        }
    }


def robot_error(status, code, message, **extra):
    return {"error": {"status": status, "code": code, "message": message, **extra}}


def test_list_boxes_with_basic_auth(recorder, client):
    recorder.on("GET", "/server", [server(), server(322, "tuist-bm-canary-2~c-0123456789ab", "136.243.1.22")])

    boxes = client.list_boxes()

    assert boxes[0] == Box(
        vendor=Vendor.ROBOT,
        id="321",
        name="tuist-bm-canary-1",
        datacenter="FSN1-DC14",
        public_ipv4="136.243.1.21",
        state="ready",
        offer="AX42-U",
        marker_field="tuist-bm-canary-1",
        claim=None,
        has_os=False,
    )
    assert (boxes[1].marker_field, boxes[1].claim) == ("tuist-bm-canary-2", Claim("0123456789ab"))
    auth = recorder.requests[0].headers["authorization"]
    assert auth == "Basic " + base64.b64encode(f"#ws+tuist:{PASSWORD}".encode()).decode()
    assert [b.id for b in client.boxes_with_marker("tuist-bm-canary-")] == ["321", "322"]
    assert client.boxes_with_marker("tuist-bm-production-") == []


def test_empty_account_lists_no_boxes(recorder, client):
    recorder.on(
        "GET",
        "/server",
        recorder.reply(status=404, body=robot_error(404, "SERVER_NOT_FOUND", "No server found")),
    )
    assert client.list_boxes() == []


def test_set_claim_posts_form_server_name(recorder, client):
    recorder.on("GET", "/server/321", server())
    recorder.on("POST", "/server/321", server(name="tuist-bm-canary-1~r-0123456789ab"))

    client.set_claim("321", Claim("0123456789ab", releasing=True))

    post = recorder.last("POST", "/server/321")
    assert post.headers["content-type"] == "application/x-www-form-urlencoded"
    assert post.body == b"server_name=tuist-bm-canary-1~r-0123456789ab"


def test_register_ssh_key_finds_or_posts(recorder, client):
    recorder.on(
        "GET", "/key", recorder.reply(status=404, body=robot_error(404, "NOT_FOUND", "No keys found"))
    )
    recorder.on(
        "POST",
        "/key",
        recorder.reply(
            status=201,
            body={"key": {"name": "fleet", "fingerprint": FP, "type": "ED25519", "size": 256, "data": KEY}},
        ),
    )
    assert client.register_ssh_key("fleet", KEY + "\n") == FP
    assert recorder.last("POST", "/key").form() == [("name", "fleet"), ("data", KEY)]

    recorder.on(
        "GET", "/key", [{"key": {"name": "other", "fingerprint": FP, "data": KEY.replace("fleet@", "ops@")}}]
    )
    assert client.register_ssh_key("fleet", KEY) == FP
    assert recorder.calls().count("POST /key") == 1


def test_activate_rescue_and_reset(recorder, client):
    rescue = {
        "rescue": {
            "server_ip": "136.243.1.21",
            "server_ipv6_net": "2a01:4f8:1::",
            "server_number": 321,
            "os": "linux",
            "arch": 64,
            "active": True,
            "password": "rescue-root-pw",
            "authorized_key": [{"key": {"name": "fleet", "fingerprint": FP, "type": "ED25519", "size": 256}}],
            "host_key": [],
        }
    }
    recorder.on("POST", "/boot/321/rescue", rescue)
    recorder.on("POST", "/reset/321", {"reset": {"server_ip": "136.243.1.21", "type": "hw"}})

    info = client.activate_rescue("321", FP)
    client.reset("321")

    assert info == RescueInfo("321", "136.243.1.21", True, (FP,), (), password="rescue-root-pw")
    assert "rescue-root-pw" not in repr(info)
    assert recorder.last("POST", "/boot/321/rescue").form() == [("os", "linux"), ("authorized_key", FP)]
    assert recorder.last("POST", "/reset/321").body == b"type=hw"
    with pytest.raises(VendorInputError, match=r"kind 'kick' is not one of sw, hw, man, power, power_long"):
        client.reset("321", "kick")


def test_activate_rescue_replaces_an_armed_one(recorder, client):
    recorder.on(
        "POST",
        "/boot/321/rescue",
        recorder.reply(status=409, body=robot_error(409, "BOOT_ALREADY_ENABLED", "already active")),
        {"rescue": {"server_number": 321, "active": True, "authorized_key": [], "host_key": []}},
    )
    recorder.on("DELETE", "/boot/321/rescue", {"rescue": {"server_number": 321, "active": False}})
    client.activate_rescue("321", FP)
    assert recorder.calls() == ["POST /boot/321/rescue", "DELETE /boot/321/rescue", "POST /boot/321/rescue"]


def test_start_reinstall_arms_rescue_with_fleet_key_then_hw_resets(recorder, client):
    recorder.on(
        "GET", "/boot/321/rescue", {"rescue": {"server_number": 321, "os": ["linux"], "active": False}}
    )
    recorder.on("GET", "/key", [{"key": {"name": "fleet", "fingerprint": FP, "data": KEY}}])
    recorder.on("POST", "/boot/321/rescue", {"rescue": {"server_number": 321, "active": True}})
    recorder.on("POST", "/reset/321", {"reset": {"type": "hw"}})

    client.start_reinstall("321", hostname="runner-1", ssh_public_key=KEY, user_login="u", user_password="p")

    assert recorder.calls() == [
        "GET /boot/321/rescue",
        "GET /key",
        "POST /boot/321/rescue",
        "POST /reset/321",
    ]
    assert (
        recorder.last("POST", "/boot/321/rescue").body
        == f"os=linux&authorized_key={FP.replace(':', '%3A')}".encode()
    )

    recorder.on("GET", "/boot/321/rescue", {"rescue": {"server_number": 321, "os": "linux", "active": True}})
    with pytest.raises(TaskAlreadyExistsError, match="a rescue boot is already armed"):
        client.start_reinstall(
            "321", hostname="runner-1", ssh_public_key=KEY, user_login="u", user_password="p"
        )


@pytest.mark.parametrize(("active", "state"), [(True, InstallState.RUNNING), (False, InstallState.DONE)])
def test_install_state_reads_the_rescue_flag(recorder, client, active, state):
    recorder.on("GET", "/boot/321/rescue", {"rescue": {"server_number": 321, "active": active}})
    assert client.install_state("321") is state


def test_failover_target_and_move(recorder, client):
    failover = {
        "failover": {
            "ip": "78.46.1.9",
            "netmask": "255.255.255.255",
            "server_ip": "136.243.1.21",
            "server_number": 321,
            "active_server_ip": "136.243.1.22",
        }
    }
    recorder.on("GET", "/failover/78.46.1.9", failover)
    recorder.on("GET", "/server", [server(), server(322, ip="136.243.1.22")])
    assert client.failover_target("78.46.1.9") == "322"

    recorder.on("GET", "/server/321", server())
    recorder.on(
        "POST",
        "/failover/78.46.1.9",
        {"failover": {**failover["failover"], "active_server_ip": "136.243.1.21"}},
    )
    client.move_failover("78.46.1.9", "321")
    assert recorder.last("POST", "/failover/78.46.1.9").body == b"active_server_ip=136.243.1.21"


def test_move_already_routed_is_success_and_noop(recorder, client):
    recorder.on("GET", "/server/321", server())
    recorder.on(
        "GET", "/failover/78.46.1.9", {"failover": {"ip": "78.46.1.9", "active_server_ip": "136.243.1.22"}}
    )
    recorder.on(
        "POST",
        "/failover/78.46.1.9",
        recorder.reply(status=409, body=robot_error(409, "FAILOVER_ALREADY_ROUTED", "already routed")),
    )
    client.move_failover("78.46.1.9", "321")

    recorder.on(
        "GET", "/failover/78.46.1.9", {"failover": {"ip": "78.46.1.9", "active_server_ip": "136.243.1.21"}}
    )
    client.move_failover("78.46.1.9", "321")
    assert recorder.calls().count("POST /failover/78.46.1.9") == 1

    recorder.on("GET", "/failover/78.46.1.9", {"failover": {"ip": "78.46.1.9", "active_server_ip": None}})
    recorder.on(
        "POST",
        "/failover/78.46.1.9",
        recorder.reply(status=409, body=robot_error(409, "FAILOVER_LOCKED", "switch in progress")),
    )
    with pytest.raises(ConflictError, match=r"HTTP 409 FAILOVER_LOCKED\): switch in progress"):
        client.move_failover("78.46.1.9", "321")


def test_rate_limit_is_transient_and_auth_is_not_retried(recorder, client, sleeps):
    recorder.on(
        "GET",
        "/server/321",
        recorder.reply(
            status=403,
            body=robot_error(
                403, "RATE_LIMIT_EXCEEDED", "Rate limit exceeded", max_request=200, interval=3600
            ),
        ),
        server(),
    )
    assert client.get_box("321").id == "321"
    assert len(sleeps) == 1

    recorder.on(
        "GET",
        "/server/321",
        recorder.reply(status=401, body=robot_error(401, "UNAUTHORIZED", f"bad {PASSWORD}")),
    )
    with pytest.raises(AuthError) as raised:
        client.get_box("321")
    assert (
        str(raised.value)
        == "robot: GET /server/{server-number} [321] failed (HTTP 401 UNAUTHORIZED): bad ***"
    )
    assert raised.value.request_id is None
    assert recorder.calls().count("GET /server/321") == 3  # 403, 200, then one 401 only

    recorder.on(
        "GET",
        "/server/321",
        recorder.reply(status=404, body=robot_error(404, "SERVER_NOT_FOUND", "Server not found")),
    )
    with pytest.raises(NotFoundError):
        client.get_box("321")
    recorder.on("GET", "/server/321", recorder.reply(status=503, raw=b"maintenance"))
    with pytest.raises(TransientVendorError, match=r"HTTP 503\)"):
        client.get_box("321")


def test_bad_ids_are_refused(recorder, client):
    with pytest.raises(VendorInputError, match=r"Robot box id '321/x' is not a server number"):
        client.get_box("321/x")
    with pytest.raises(VendorInputError, match=r"Robot failover IP '78.46.1' is not an IP address"):
        client.failover_target("78.46.1")
    assert recorder.calls() == []
