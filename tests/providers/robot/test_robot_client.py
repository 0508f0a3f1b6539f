"""RobotClient against a recording HTTP server: form bodies, basic auth, Robot's error envelope."""

from __future__ import annotations

import base64
import hashlib

import pytest

from config.models import Vendor
from providers.errors import (
    AuthError,
    NotFoundError,
    OutcomeUnknownError,
    RateLimitError,
    TaskAlreadyExistsError,
    TransientVendorError,
    VendorError,
    VendorInputError,
)
from providers.retry import PollPolicy, RetryPolicy
from providers.robot.client import RobotClient
from providers.robot.models import RescueInfo, rescue_from
from providers.vendor import Box, Claim, InstallState, Reinstall, host_key_matches

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
    recorder.on("POST", "/server/321", server(name="tuist-bm-canary-1--r-0123456789ab"))

    client.set_claim("321", Claim("0123456789ab", releasing=True))

    post = recorder.last("POST", "/server/321")
    assert post.headers["content-type"] == "application/x-www-form-urlencoded"
    assert post.body == b"server_name=tuist-bm-canary-1--r-0123456789ab"


def test_a_claim_an_earlier_version_wrote_is_read_and_rewritten(recorder, client):
    recorder.on("GET", "/server/321", server(name="tuist-bm-canary-1~c-0123456789ab"))
    recorder.on("POST", "/server/321", server(name="tuist-bm-canary-1"))
    assert client.get_box("321").claim == Claim("0123456789ab")
    client.set_claim("321", None)
    assert recorder.last("POST", "/server/321").body == b"server_name=tuist-bm-canary-1"


def test_server_name_write_whose_answer_is_lost_is_written_again(recorder, client):
    """A server name is a whole value: a second write is safe."""
    recorder.on("GET", "/server/321", server())
    recorder.on("POST", "/server/321", recorder.reply(status=500, raw=b"oops"), server(name="x"))
    client.set_claim("321", Claim("0123456789ab"))
    assert recorder.calls().count("POST /server/321") == 2


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


ARMED = {
    "rescue": {
        "server_ip": "136.243.1.21",
        "server_ipv6_net": "2a01:4f8:1::",
        "server_number": 321,
        "os": "linux",
        "arch": 64,
        "active": True,
        "password": "rescue-root-pw",
        "authorized_key": [{"key": {"name": "fleet", "fingerprint": FP, "type": "ED25519", "size": 256}}],
        "host_key": [
            {
                "key": {
                    "key_type": "ED25519",
                    "fingerprint": "SHA256:N8Wq0cZ1TqAH3wJ8n5mPZkqKzqH2gYz5R6sJmJdQm9E",
                }
            }
        ],
    }
}
UNARMED = {"rescue": {"server_number": 321, "os": ["linux", "vkvm"], "active": False, "host_key": []}}


def test_activate_rescue_returns_the_host_keys_to_pin_and_reset(recorder, client):
    recorder.on("POST", "/boot/321/rescue", ARMED)
    recorder.on("GET", "/boot/321/rescue", ARMED)
    recorder.on("POST", "/reset/321", {"reset": {"server_ip": "136.243.1.21", "type": "hw"}})

    info = client.activate_rescue("321", FP)
    client.reset("321")

    assert info == RescueInfo(
        "321",
        "136.243.1.21",
        True,
        (FP,),
        ("SHA256:N8Wq0cZ1TqAH3wJ8n5mPZkqKzqH2gYz5R6sJmJdQm9E",),
        password="rescue-root-pw",
    )
    assert "rescue-root-pw" not in repr(info)
    assert recorder.last("POST", "/boot/321/rescue").form() == [("os", "linux"), ("authorized_key", FP)]
    assert recorder.last("POST", "/reset/321").body == b"type=hw"
    with pytest.raises(VendorInputError, match=r"kind 'kick' is not one of sw, hw, man, power, power_long"):
        client.reset("321", "kick")


@pytest.mark.parametrize(
    "item",
    [
        {"key": {"key_type": "ED25519", "fingerprint": "SHA256:abc+/def"}},
        {"fingerprint": "SHA256:abc+/def="},
        "ED25519 256 SHA256:abc+/def root@rescue",
        "SHA256:abc+/def",
    ],
)
def test_host_key_items_are_read_in_any_documented_looking_shape(item):
    """Robot does not document a host_key item's shape: every plausible one yields the fingerprint."""
    assert rescue_from({"rescue": {"active": True, "host_key": [item]}}).host_key_fingerprints == (
        "SHA256:abc+/def",
    )


def test_host_key_matches_either_fingerprint_form():
    blob = b"\x00\x00\x00\x0bssh-ed25519" + bytes(36)
    sha = "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    md5 = hashlib.md5(blob).hexdigest()
    md5_form = "MD5:" + ":".join(md5[i : i + 2] for i in range(0, 32, 2))
    assert host_key_matches([sha], blob) and host_key_matches([md5_form], blob)
    assert rescue_from({"rescue": {"host_key": [md5_form[4:]]}}).host_key_fingerprints == (md5_form,)
    assert not host_key_matches(["SHA256:other"], blob)


def test_activate_rescue_replaces_one_armed_with_another_key(recorder, client):
    other = {"rescue": {**ARMED["rescue"], "authorized_key": [{"key": {"fingerprint": "ff:ff"}}]}}
    recorder.on(
        "POST",
        "/boot/321/rescue",
        recorder.reply(status=409, body=robot_error(409, "BOOT_ALREADY_ENABLED", "already active")),
        ARMED,
    )
    recorder.on("GET", "/boot/321/rescue", other)
    recorder.on("DELETE", "/boot/321/rescue", UNARMED)
    assert client.activate_rescue("321", FP).active
    assert recorder.calls() == [
        "POST /boot/321/rescue",
        "GET /boot/321/rescue",
        "DELETE /boot/321/rescue",
        "POST /boot/321/rescue",
    ]


def test_activate_rescue_whose_answer_is_lost_is_read_back(recorder, client):
    recorder.on(
        "POST", "/boot/321/rescue", recorder.reply(status=500, body=robot_error(500, "INTERNAL_ERROR", "x"))
    )
    recorder.on("GET", "/boot/321/rescue", ARMED)
    info = client.activate_rescue("321", FP)
    assert info.host_key_fingerprints and info.password == "rescue-root-pw"
    assert recorder.calls().count("POST /boot/321/rescue") == 1


def test_reset_whose_answer_is_lost_is_not_sent_twice_when_the_rescue_boot_was_consumed(recorder, client):
    """Issue 12.3: a read timeout on a reset used to send a second reset. An armed rescue boot that
    is gone afterwards proves the first one happened."""
    recorder.on("GET", "/boot/321/rescue", ARMED, UNARMED)
    recorder.on("POST", "/reset/321", recorder.reply(status=500, body=robot_error(500, "RESET_FAILED", "x")))
    client.reset("321")
    assert recorder.calls().count("POST /reset/321") == 1


def test_reset_whose_answer_is_lost_waits_for_the_rescue_boot_to_be_consumed(recorder, sleeps):
    client = RobotClient(
        api_url=recorder.url,
        username="#ws+tuist",
        password=PASSWORD,
        retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05),
        poll=PollPolicy(first=5, max_interval=20),
        reset_settle_timeout=120,
        sleep=sleeps.append,
        clock=lambda: sum(sleeps),
    )
    # Armed before, still armed while the box boots, consumed when the rescue system is up.
    recorder.on("GET", "/boot/321/rescue", ARMED, ARMED, ARMED, UNARMED)
    recorder.on("POST", "/reset/321", recorder.reply(status=504, raw=b"gateway timeout"))
    client.reset("321")
    assert recorder.calls().count("POST /reset/321") == 1
    assert sleeps == [5, 10]

    sleeps.clear()
    recorder.on("GET", "/boot/321/rescue", ARMED)
    with pytest.raises(OutcomeUnknownError):
        client.reset("321")
    assert recorder.calls().count("POST /reset/321") == 2
    assert sum(sleeps) == 120


def test_reset_whose_answer_is_lost_without_proof_is_never_repeated(recorder, client):
    recorder.on("GET", "/boot/321/rescue", UNARMED)
    recorder.on("POST", "/reset/321", recorder.reply(status=502, raw=b"bad gateway"))
    with pytest.raises(OutcomeUnknownError, match="the reset may have happened and is not sent again"):
        client.reset("321")
    assert recorder.calls().count("POST /reset/321") == 1
    # The caller's own proof (the box answers with a new host key) settles it.
    client.reset("321", verify=lambda: True)
    assert recorder.calls().count("POST /reset/321") == 2


def test_reset_refused_before_it_reached_robot_is_sent_again(recorder, client, sleeps):
    recorder.on("GET", "/boot/321/rescue", UNARMED)
    recorder.on(
        "POST",
        "/reset/321",
        recorder.reply(status=429, body={"error": {"status": 429, "code": "TOO_MANY", "message": "slow"}}),
        {"reset": {"type": "hw"}},
    )
    client.reset("321")
    assert recorder.calls().count("POST /reset/321") == 2


def test_start_reinstall_arms_rescue_with_fleet_key_then_hw_resets(recorder, client):
    recorder.on("GET", "/boot/321/rescue", UNARMED, UNARMED, ARMED)
    recorder.on("GET", "/key", [{"key": {"name": "fleet", "fingerprint": FP, "data": KEY}}])
    recorder.on("POST", "/boot/321/rescue", ARMED)
    recorder.on("POST", "/reset/321", {"reset": {"type": "hw"}})

    ticket = client.start_reinstall(
        "321", hostname="runner-1", ssh_public_key=KEY, user_login="u", user_password="p"
    )

    assert ticket == Reinstall(vendor=Vendor.ROBOT, box_id="321")
    assert recorder.calls() == [
        "GET /boot/321/rescue",
        "GET /key",
        "POST /boot/321/rescue",
        "GET /boot/321/rescue",
        "POST /reset/321",
    ]
    assert (
        recorder.last("POST", "/boot/321/rescue").body
        == f"os=linux&authorized_key={FP.replace(':', '%3A')}".encode()
    )

    recorder.on("GET", "/boot/321/rescue", ARMED)
    with pytest.raises(TaskAlreadyExistsError, match="a rescue boot is already armed"):
        client.start_reinstall(
            "321", hostname="runner-1", ssh_public_key=KEY, user_login="u", user_password="p"
        )


@pytest.mark.parametrize(("active", "state"), [(True, InstallState.RUNNING), (False, InstallState.DONE)])
def test_install_state_reads_the_rescue_flag(recorder, client, active, state):
    recorder.on("GET", "/boot/321/rescue", {"rescue": {"server_number": 321, "active": active}})
    assert client.install_state("321") is state


@pytest.mark.parametrize(
    ("active", "target"),
    [
        ("136.243.1.22", "322"),
        # A server cancelled while it carried the IP (or another account's): the target is its address,
        # no box of the fleet, so the watcher and the deploy move the IP (tests/watcher/test_decision.py)
        # instead of failing every read.
        ("136.243.9.99", "136.243.9.99"),
    ],
)
def test_failover_target_and_move(recorder, client, active, target):
    failover = {
        "failover": {
            "ip": "78.46.1.9",
            "netmask": "255.255.255.255",
            "server_ip": "136.243.1.21",
            "server_number": 321,
            "active_server_ip": active,
        }
    }
    recorder.on("GET", "/failover/78.46.1.9", failover)
    recorder.on("GET", "/server", [server(), server(322, ip="136.243.1.22")])
    assert client.failover_target("78.46.1.9") == target
    if target == "322":
        # The server list (200 calls an hour) is read once: main IPs do not move between servers.
        assert client.failover_target("78.46.1.9") == "322"
        assert recorder.calls().count("GET /server") == 1

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
    # Another switch runs: ours was refused, not carried out, so it is tried again, then surfaces.
    with pytest.raises(TransientVendorError, match=r"HTTP 409 FAILOVER_LOCKED\): switch in progress"):
        client.move_failover("78.46.1.9", "321")
    assert recorder.calls().count("POST /failover/78.46.1.9") == 1 + 3


@pytest.mark.parametrize("status", [400, 403, 409, 500])
def test_already_routed_is_known_by_its_code_on_any_status(recorder, client, sleeps, status):
    """Robot documents FAILOVER_ALREADY_ROUTED as a 409; the code, not the status, says the IP goes
    to that server already. A recorded 400 (or a 403, 500) carrying it is success: not retried, not
    read as a refused credential or a lost answer."""
    recorder.on("GET", "/server/321", server())
    recorder.on(
        "GET", "/failover/78.46.1.9", {"failover": {"ip": "78.46.1.9", "active_server_ip": "136.243.1.22"}}
    )
    recorder.on(
        "POST",
        "/failover/78.46.1.9",
        recorder.reply(
            status=status,
            body=robot_error(status, "FAILOVER_ALREADY_ROUTED", "The failover ip is already routed"),
        ),
    )
    client.move_failover("78.46.1.9", "321")
    assert recorder.calls() == ["GET /server/321", "GET /failover/78.46.1.9", "POST /failover/78.46.1.9"]
    assert recorder.last("POST", "/failover/78.46.1.9").form() == [("active_server_ip", "136.243.1.21")]
    assert sleeps == []


def test_other_refusals_of_a_switch_are_still_raised(recorder, client):
    recorder.on("GET", "/server/321", server())
    recorder.on("GET", "/failover/78.46.1.9", {"failover": {"ip": "78.46.1.9", "active_server_ip": None}})
    recorder.on(
        "POST",
        "/failover/78.46.1.9",
        recorder.reply(status=400, body=robot_error(400, "INVALID_INPUT", "invalid input")),
    )
    with pytest.raises(VendorError, match=r"HTTP 400 INVALID_INPUT\): invalid input$"):
        client.move_failover("78.46.1.9", "321")


def test_failover_route_whose_answer_is_lost_is_read_back(recorder, client):
    recorder.on("GET", "/server/321", server())
    recorder.on(
        "GET",
        "/failover/78.46.1.9",
        {"failover": {"ip": "78.46.1.9", "active_server_ip": "136.243.1.22"}},
        {"failover": {"ip": "78.46.1.9", "active_server_ip": "136.243.1.21"}},
    )
    recorder.on(
        "POST",
        "/failover/78.46.1.9",
        recorder.reply(status=500, body=robot_error(500, "FAILOVER_FAILED", "x")),
    )
    client.move_failover("78.46.1.9", "321")
    assert recorder.calls().count("POST /failover/78.46.1.9") == 1


def test_rate_limit_is_a_clear_error_and_not_retried(recorder, client, sleeps):
    """Robot's budgets refill over an hour: retrying burns nothing but time. The error says which
    budget ran out and what to do."""
    recorder.on(
        "GET",
        "/server/321",
        recorder.reply(
            status=403,
            body=robot_error(
                403, "RATE_LIMIT_EXCEEDED", "Rate limit exceeded", max_request=200, interval=3600
            ),
        ),
    )
    with pytest.raises(RateLimitError) as raised:
        client.get_box("321")
    assert (raised.value.max_request, raised.value.interval) == (200, 3600)
    assert str(raised.value) == (
        "robot: GET /server/{server-number} [321] failed (HTTP 403 RATE_LIMIT_EXCEEDED): Rate limit "
        "exceeded: this account may call GET /server/{server-number} 200 times per 3600 s; wait for the "
        "budget to refill (Robot counts per web-service user), then run again"
    )
    assert sleeps == [] and recorder.calls().count("GET /server/321") == 1


def test_auth_is_not_retried_and_never_echoes_the_password(recorder, client, sleeps):
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
    assert recorder.calls().count("GET /server/321") == 1

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


def test_set_marker_field_posts_the_new_name_keeping_the_claim(recorder, client):
    recorder.on("GET", "/server/321", server(name="old--c-0123456789ab"))
    recorder.on("POST", "/server/321", server(name="tuist-bm-canary-321--c-0123456789ab"))
    client.set_marker_field("321", "tuist-bm-canary-321")
    assert recorder.last("POST", "/server/321").body == b"server_name=tuist-bm-canary-321--c-0123456789ab"
