"""Hetzner Robot routes over real HTTP: basic auth, form bodies, wrapped JSON, limits."""

from __future__ import annotations

import base64
import hashlib
from urllib.parse import urlencode

from tests.vendorsim.conftest import Served, md5_fingerprint, robot

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJpselPEwoXIjP2bkKTBeNMrbyt7kCy0a+yHcLfRN+W7 fleet"
N = 2345601


def _fingerprint_of_pem(pem: str) -> str:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_ssh_private_key(pem.encode(), password=None)
    blob = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    digest = hashlib.sha256(base64.b64decode(blob.split()[1])).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _add_key(served: Served) -> str:
    r = robot(served, "POST", "/key", {"name": "fleet", "data": KEY})
    assert r.status_code == 201, r.text
    return str(r.json()["key"]["fingerprint"])


def test_bad_credentials_are_401_unauthorized(served: Served) -> None:
    r = robot(served, "GET", "/server", auth=("dev-robot-user", "wrong"))
    assert (r.status_code, r.json()) == (
        401,
        {"error": {"status": 401, "code": "UNAUTHORIZED", "message": "Unauthorized"}},
    )


WRONG = ("dev-robot-user", "wrong")
UNAUTHORIZED = (401, {"error": {"status": 401, "code": "UNAUTHORIZED", "message": "Unauthorized"}})


def _blocked(seconds: int) -> tuple[int, dict[str, object]]:
    message = f"IP 127.0.0.1 is blocked after 3 failed login attempts; try again in {seconds} s"
    return 403, {"error": {"status": 403, "code": "BLOCKED", "message": message}}


def _answer(served: Served, auth: tuple[str, str] | None = None) -> tuple[int, object]:
    r = robot(served, "GET", "/server", auth=auth)
    return r.status_code, r.json()


def test_three_failed_logins_block_the_ip_for_ten_minutes(served: Served) -> None:
    """ "The IP from which you attempt to access will be blocked for 10 minutes after 3 failed login
    attempts" (Robot's documentation): while blocked, right credentials are refused too (403
    BLOCKED, vendorsim's choice: the answer is undocumented), and a try counts for nothing."""
    assert [_answer(served, WRONG) for _ in range(3)] == [UNAUTHORIZED] * 3
    assert _answer(served) == _blocked(600)
    served.clock.advance(300)
    assert _answer(served, WRONG) == _blocked(300)  # not counted, the block not extended
    served.clock.advance(299.5)
    assert _answer(served) == _blocked(1)
    served.clock.advance(0.5)  # ten minutes after the third failure
    status, servers = _answer(served)
    assert status == 200 and len(servers) > 0  # type: ignore[arg-type]
    # The count started over: one failure is a 401 again, not a block.
    assert _answer(served, WRONG) == UNAUTHORIZED
    assert _answer(served)[0] == 200


def test_a_successful_login_starts_the_count_over(served: Served) -> None:
    assert [_answer(served, WRONG) for _ in range(2)] == [UNAUTHORIZED] * 2
    assert _answer(served)[0] == 200
    assert [_answer(served, WRONG) for _ in range(2)] == [UNAUTHORIZED] * 2
    assert _answer(served)[0] == 200
    state = served.admin("GET", "state").json()["robot"]["logins"]
    assert state == []


def test_a_block_is_counted_in_the_state_and_cleared_by_the_admin_reset(served: Served) -> None:
    for _ in range(3):
        _answer(served, WRONG)
    now = served.clock()
    assert served.admin("GET", "state").json()["robot"]["logins"] == [
        {"source": "127.0.0.1", "failures": 3, "blocked_until": now + 600}
    ]
    assert _answer(served)[0] == 403
    assert served.admin("POST", "reset").status_code == 200
    assert served.admin("GET", "state").json()["robot"]["logins"] == []
    assert _answer(served)[0] == 200


def test_a_blocked_ip_spends_no_request_budget(served: Served) -> None:
    for _ in range(3):
        _answer(served, WRONG)
    for _ in range(5):
        assert _answer(served)[0] == 403
    assert "GET /server" not in served.admin("GET", "state").json()["robot"]["requests_this_hour"]


def test_server_list_and_detail_are_wrapped(served: Served) -> None:
    servers = robot(served, "GET", "/server").json()
    assert [s["server"]["server_name"] for s in servers][:3] == [
        "tuist-bm-dev-1",
        "tuist-bm-dev-2",
        "tuist-bm-dev-3",
    ]
    assert servers[0]["server"]["product"] == "AX42-U"
    detail = robot(served, "GET", f"/server/{N}").json()["server"]
    assert (detail["server_ip"], detail["server_number"], detail["rescue"], detail["reset"]) == (
        "198.18.3.51",
        N,
        True,
        True,
    )
    r = robot(served, "GET", "/server/1")
    assert (r.status_code, r.json()) == (
        404,
        {"error": {"status": 404, "code": "SERVER_NOT_FOUND", "message": "Server with id 1 not found"}},
    )


def test_rename_server_is_form_encoded(served: Served) -> None:
    r = robot(served, "POST", f"/server/{N}", {"server_name": "tuist-bm-dev-1--c-0123456789ab"})
    assert r.json()["server"]["server_name"] == "tuist-bm-dev-1--c-0123456789ab"
    assert (
        robot(served, "GET", f"/server/{N}").json()["server"]["server_name"]
        == "tuist-bm-dev-1--c-0123456789ab"
    )
    r = robot(served, "POST", f"/server/{N}", {})
    assert (r.status_code, r.json()) == (
        400,
        {
            "error": {
                "status": 400,
                "code": "INVALID_INPUT",
                "message": "invalid input",
                "missing": ["server_name"],
                "invalid": [],
            }
        },
    )
    import requests

    creds = served.inventory.credentials.robot
    r = requests.post(
        f"{served.url}/robot/server/{N}",
        json={"server_name": "x"},
        auth=(creds.username, creds.password),
        timeout=5,
    )
    assert (r.status_code, r.json()["error"]["code"]) == (400, "INVALID_INPUT")


def test_keys(served: Served) -> None:
    r = robot(served, "GET", "/key")
    assert (r.status_code, r.json()["error"]["code"]) == (404, "NOT_FOUND")
    fingerprint = _add_key(served)
    assert fingerprint == md5_fingerprint(KEY)
    keys = robot(served, "GET", "/key").json()
    assert keys[0]["key"]["name"] == "fleet"
    assert (keys[0]["key"]["type"], keys[0]["key"]["size"], keys[0]["key"]["data"]) == ("ED25519", 256, KEY)
    r = robot(served, "POST", "/key", {"name": "again", "data": KEY})
    assert (r.status_code, r.json()) == (
        409,
        {"error": {"status": 409, "code": "KEY_ALREADY_EXISTS", "message": "The key already exists"}},
    )
    r = robot(served, "POST", "/key", {"name": "bad", "data": "not a key"})
    assert r.json()["error"]["invalid"] == ["data"]


def test_rescue_then_reset_boots_rescue_then_installed(served: Served) -> None:
    fingerprint = _add_key(served)
    inactive = robot(served, "GET", f"/boot/{N}/rescue").json()["rescue"]
    assert (inactive["active"], inactive["os"], inactive["arch"], inactive["password"]) == (
        False,
        ["linux", "vkvm"],
        [64],
        None,
    )
    body = urlencode([("os", "linux"), ("authorized_key", fingerprint)])
    creds = served.inventory.credentials.robot
    import requests

    r = requests.post(
        f"{served.url}/robot/boot/{N}/rescue",
        data=body,
        auth=(creds.username, creds.password),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        timeout=5,
    )
    active = r.json()["rescue"]
    assert (active["active"], active["os"], active["arch"]) == (True, "linux", 64)
    assert active["authorized_key"] == [
        {"key": {"name": "fleet", "fingerprint": fingerprint, "type": "ED25519", "size": 256}}
    ]
    assert isinstance(active["password"], str) and len(active["password"]) >= 12
    # The activation announces the rescue system's host key, so the session can be pinned to it.
    [announced] = active["host_key"]
    assert announced["key"]["key_type"] == "ED25519"
    assert announced["key"]["fingerprint"].startswith("SHA256:")
    assert robot(served, "GET", f"/boot/{N}/rescue").json()["rescue"]["host_key"] == [announced]
    r = robot(served, "POST", f"/boot/{N}/rescue", {"os": "linux"})
    assert (r.status_code, r.json()["error"]["code"]) == (409, "BOOT_ALREADY_ENABLED")
    assert served.farm.reinstalls() == []

    assert robot(served, "GET", f"/reset/{N}").json()["reset"]["type"] == ["sw", "hw", "man"]
    r = robot(served, "POST", f"/reset/{N}", {"type": "hw"})
    assert r.json() == {
        "reset": {
            "server_ip": "198.18.3.51",
            "server_ipv6_net": r.json()["reset"]["server_ipv6_net"],
            "server_number": N,
            "type": "hw",
        }
    }
    # Rescue boots a fresh system with the rescue keys and leaves the disk alone: no reinstall.
    assert served.farm.reinstalls() == []
    [(box_key, booted)] = _farm_calls(served, "boot_rescue")
    assert (box_key, booted["authorized_key"]) == (f"robot-{N}", KEY)
    # ... and it boots with the host key the activation announced.
    assert _fingerprint_of_pem(booted["host_key_pem"]) == announced["key"]["fingerprint"]
    box = next(b for b in served.admin("GET", "state").json()["boxes"] if b["key"] == f"robot-{N}")
    assert box["state"] == "rescue"
    # The rescue config was consumed by that boot; the next reset boots the OS on the disk, the old one
    # since installimage did not run: same host key, same generation.
    assert robot(served, "GET", f"/boot/{N}/rescue").json()["rescue"]["active"] is False
    robot(served, "POST", f"/reset/{N}", {"type": "hw"})
    box = next(b for b in served.admin("GET", "state").json()["boxes"] if b["key"] == f"robot-{N}")
    assert (box["state"], box["generation"]) == ("installed", 0)
    assert _farm_calls(served, "reboot") == [(f"robot-{N}", {"new_host_key": False})]


def test_reset_out_of_rescue_after_installimage_boots_the_new_os(served: Served) -> None:
    fingerprint = _add_key(served)
    robot(served, "POST", f"/boot/{N}/rescue", {"os": "linux", "authorized_key": fingerprint})
    robot(served, "POST", f"/reset/{N}", {"type": "hw"})
    served.farm.installed.add(f"robot-{N}")  # what the box's installimage leaves in its rescue system

    robot(served, "POST", f"/reset/{N}", {"type": "hw"})

    assert _farm_calls(served, "reboot") == [(f"robot-{N}", {"new_host_key": True})]
    box = next(b for b in served.admin("GET", "state").json()["boxes"] if b["key"] == f"robot-{N}")
    assert (box["state"], box["generation"], box["user"], box["authorized_key"]) == (
        "installed",
        1,
        "root",
        KEY,
    )


def _farm_calls(served: Served, op: str) -> list[tuple[str, dict[str, object]]]:
    return [(key, kw) for name, key, kw in served.farm.calls if name == op]


def test_rescue_validation_and_deactivate(served: Served) -> None:
    r = robot(served, "POST", f"/boot/{N}/rescue", {"os": "linux", "authorized_key": "00:11"})
    assert r.json()["error"]["invalid"] == ["authorized_key"]
    r = robot(served, "POST", f"/boot/{N}/rescue", {})
    assert r.json()["error"]["missing"] == ["os"]
    robot(served, "POST", f"/boot/{N}/rescue", {"os": "linux"})
    assert robot(served, "DELETE", f"/boot/{N}/rescue").json()["rescue"]["active"] is False
    r = robot(served, "POST", f"/reset/{N}", {"type": "power-cycle"})
    assert r.json()["error"]["invalid"] == ["type"]


def test_failover_routing(served: Served) -> None:
    listed = robot(served, "GET", "/failover").json()
    assert listed[0] == {
        "failover": {
            "ip": "198.51.100.30",
            "netmask": "255.255.255.255",
            "server_ip": "198.18.3.51",
            "server_ipv6_net": listed[0]["failover"]["server_ipv6_net"],
            "server_number": N,
            "active_server_ip": "198.18.3.51",
        }
    }
    r = robot(served, "POST", "/failover/198.51.100.30", {"active_server_ip": "198.18.3.51"})
    assert (r.status_code, r.json()["error"]["code"]) == (409, "FAILOVER_ALREADY_ROUTED")
    r = robot(served, "POST", "/failover/198.51.100.30", {"active_server_ip": "198.18.3.52"})
    assert r.json()["failover"]["active_server_ip"] == "198.18.3.52"
    routed = robot(served, "GET", "/failover/198.51.100.30").json()["failover"]["active_server_ip"]
    assert routed == "198.18.3.52"
    r = robot(served, "POST", "/failover/198.51.100.30", {"active_server_ip": "192.0.2.9"})
    assert (r.status_code, r.json()["error"]["code"]) == (404, "FAILOVER_NEW_SERVER_NOT_FOUND")
    assert robot(served, "DELETE", "/failover/198.51.100.30").json()["failover"]["active_server_ip"] is None


def test_rate_limit_is_403_with_max_request_and_interval(served: Served) -> None:
    for _ in range(50):
        assert (
            robot(served, "POST", "/failover/198.51.100.31", {"active_server_ip": "192.0.2.9"}).status_code
            == 404
        )
    r = robot(served, "POST", "/failover/198.51.100.31", {"active_server_ip": "198.18.3.52"})
    assert (r.status_code, r.json()) == (
        403,
        {
            "error": {
                "status": 403,
                "code": "RATE_LIMIT_EXCEEDED",
                "message": "Rate limit exceeded",
                "max_request": 50,
                "interval": 3600,
            }
        },
    )
    served.clock.advance(3600)
    r = robot(served, "POST", "/failover/198.51.100.31", {"active_server_ip": "198.18.3.52"})
    assert r.status_code == 200
