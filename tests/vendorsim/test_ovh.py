"""OVH routes over real HTTP, signed independently here and through python-ovh itself."""

from __future__ import annotations

import hashlib
from urllib.parse import quote

import ovh
import pytest
import requests

from tests.vendorsim.conftest import Served, ovh_signed

SVC = "ns1001.ip-203-0-113.net"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJpselPEwoXIjP2bkKTBeNMrbyt7kCy0a+yHcLfRN+W7 fleet"
STORAGE = [
    {
        "diskGroupId": 1,
        "partitioning": {
            "disks": 2,
            "layout": [
                {"fileSystem": "ext4", "mountPoint": "/boot", "raidLevel": 1, "size": 1024},
                {"fileSystem": "xfs", "mountPoint": "/data", "raidLevel": 1, "size": 0},
            ],
        },
    }
]
IP = quote("198.51.100.10/32", safe="")


def _python_ovh(served: Served, secret: str | None = None) -> ovh.Client:
    ovh.client.ENDPOINTS["vendorsim-test"] = f"{served.url}/ovh/1.0"
    creds = served.inventory.credentials.ovh
    return ovh.Client(
        endpoint="vendorsim-test",
        application_key=creds.application_key,
        application_secret=secret or creds.application_secret,
        consumer_key=creds.consumer_key,
    )


# --- authentication -----------------------------------------------------------------


def test_auth_time_is_unauthenticated_integer_epoch(served: Served) -> None:
    r = requests.get(f"{served.url}/ovh/1.0/auth/time", timeout=5)
    assert r.status_code == 200
    assert r.json() == 1_800_000_000
    assert r.headers["X-OVH-QUERYID"]


def test_good_signature_with_query_string_is_accepted(served: Served) -> None:
    r = ovh_signed(served, "GET", f"/dedicated/server/{SVC}/task?function=reinstallServer")
    assert r.status_code == 200, r.text
    assert r.json() == []


def test_wrong_signature_is_rejected_with_ovh_body(served: Served) -> None:
    r = ovh_signed(served, "GET", "/dedicated/server", secret="not-the-secret")
    assert r.status_code == 400
    assert r.json() == {
        "errorCode": "INVALID_SIGNATURE",
        "httpCode": "400 Bad Request",
        "message": "Invalid signature",
    }
    assert r.headers["X-OVH-QUERYID"]


def test_signature_covers_the_exact_body_bytes(served: Served) -> None:
    # Signed over exactly the bytes sent (with spaces): accepted.
    r = ovh_signed(served, "POST", f"/ip/{IP}/move", raw_body='{"to": "ns1002.ip-203-0-113.net"}')
    assert r.status_code == 200, r.text
    # Signed over the compact form but sent with spaces: rejected.
    creds = served.inventory.credentials.ovh
    ts = str(int(served.clock()))
    url = f"{served.url}/ovh/1.0/ip/{quote('198.51.100.11/32', safe='')}/move"
    signed_over = '{"to":"ns1003.ip-203-0-113.net"}'
    sig = hashlib.sha1(
        "+".join([creds.application_secret, creds.consumer_key, "POST", url, signed_over, ts]).encode()
    ).hexdigest()
    r = requests.post(
        url,
        data='{"to": "ns1003.ip-203-0-113.net"}',
        timeout=5,
        headers={
            "X-Ovh-Application": creds.application_key,
            "X-Ovh-Consumer": creds.consumer_key,
            "X-Ovh-Timestamp": ts,
            "X-Ovh-Signature": "$1$" + sig,
            "Content-Type": "application/json",
        },
    )
    assert (r.status_code, r.json()["errorCode"]) == (400, "INVALID_SIGNATURE")


def test_stale_timestamp_is_rejected(served: Served) -> None:
    r = ovh_signed(served, "GET", "/dedicated/server", timestamp=int(served.clock()) - 301)
    assert r.status_code == 400
    assert r.json() == {
        "errorCode": "QUERY_TIME_OUT",
        "httpCode": "400 Bad Request",
        "message": "Query out of time",
    }
    assert (
        ovh_signed(served, "GET", "/dedicated/server", timestamp=int(served.clock()) - 300).status_code == 200
    )


def test_unknown_application_key(served: Served) -> None:
    r = ovh_signed(served, "GET", "/dedicated/server", app_key="someone-else")
    assert r.status_code == 403
    assert r.json() == {
        "errorCode": "INVALID_KEY",
        "httpCode": "403 Forbidden",
        "message": "Invalid application key",
    }


def test_unknown_consumer_key(served: Served) -> None:
    r = ovh_signed(served, "GET", "/dedicated/server", consumer="revoked-consumer")
    assert r.status_code == 403
    assert r.json() == {
        "errorCode": "INVALID_CREDENTIAL",
        "httpCode": "403 Forbidden",
        "message": "This credential does not exist",
    }


def test_python_ovh_maps_errors_to_its_exceptions(served: Served) -> None:
    client = _python_ovh(served)
    assert client.get("/dedicated/server")[0] == SVC
    with pytest.raises(ovh.exceptions.ResourceNotFoundError, match="serviceName = nope"):
        client.get("/dedicated/server/nope")
    with pytest.raises(ovh.exceptions.BadParametersError, match="Invalid signature"):
        _python_ovh(served, secret="wrong").get("/dedicated/server")
    ovh.client.ENDPOINTS["vendorsim-test"] = f"{served.url}/ovh/1.0"
    bad = ovh.Client(
        endpoint="vendorsim-test", application_key="nope", application_secret="x", consumer_key="y"
    )
    with pytest.raises(ovh.exceptions.InvalidKey):
        bad.get("/dedicated/server")


# --- servers, services, display names ---------------------------------------------------


def test_server_detail_and_service_display_name_round_trip(served: Served) -> None:
    server = ovh_signed(served, "GET", f"/dedicated/server/{SVC}").json()
    assert (
        server["name"],
        server["datacenter"],
        server["ip"],
        server["state"],
        server["commercialRange"],
    ) == (SVC, "bhs6", "198.18.1.11", "ok", "Advance-1-2024")
    service_id = ovh_signed(served, "GET", f"/dedicated/server/{SVC}/serviceInfos").json()["serviceId"]
    assert service_id == 10001001
    service = ovh_signed(served, "GET", f"/services/{service_id}").json()
    assert service["resource"]["displayName"] == "tuist-kura-dev-ovh-1"
    assert service["resource"]["name"] == SVC

    claimed = "tuist-kura-dev-ovh-1--c-0123456789ab"
    r = ovh_signed(
        served, "PUT", f"/service/{service_id}", {"resource": {"displayName": claimed, "name": SVC}}
    )
    assert (r.status_code, r.json()) == (200, None)
    assert ovh_signed(served, "GET", f"/services/{service_id}").json()["resource"]["displayName"] == claimed
    entry = served.admin("GET", "audit").json()["entries"][-1]
    assert (entry["method"], entry["path"], entry["box"]) == (
        "PUT",
        f"/ovh/1.0/service/{service_id}",
        f"ovh-{SVC}",
    )


def test_display_name_write_errors(served: Served) -> None:
    r = ovh_signed(served, "PUT", "/service/10001001", {"displayName": "x"})
    assert (r.status_code, r.json()) == (
        400,
        {"class": "Client::BadRequest", "message": "[resource] Property is mandatory and must be an object"},
    )
    r = ovh_signed(served, "PUT", "/service/10001001", {"resource": {"displayName": "x", "name": "ns9"}})
    assert (
        r.json()["message"]
        == "[resource.name] 'ns9' does not match service 10001001 (ns1001.ip-203-0-113.net)"
    )
    r = ovh_signed(served, "PUT", "/service/42", {"resource": {"displayName": "x"}})
    assert (r.status_code, r.json()["class"]) == (404, "Client::NotFound")
    # The plural route is read-only; writing there is the wrong route.
    assert (
        ovh_signed(served, "PUT", "/services/10001001", {"resource": {"displayName": "x"}}).status_code == 405
    )


def test_hardware_and_templates(served: Served) -> None:
    hw = ovh_signed(served, "GET", "/dedicated/server/ns1002.ip-203-0-113.net/specifications/hardware").json()
    assert [
        (g["diskGroupId"], g["numberOfDisks"], g["diskSize"], g["diskType"]) for g in hw["diskGroups"]
    ] == [(1, 2, {"unit": "GB", "value": 512}, "SSD"), (2, 4, {"unit": "GB", "value": 1920}, "NVME")]
    templates = ovh_signed(served, "GET", f"/dedicated/server/{SVC}/install/compatibleTemplates").json()
    assert templates == {"ovh": ["ubuntu2404-server_64", "debian12_64", "byolinux_64"], "personal": []}


# --- reinstall ----------------------------------------------------------------------------


def _reinstall(served: Served, **overrides: object) -> object:
    body = {
        "operatingSystem": "ubuntu2404-server_64",
        "customizations": {"hostname": "kura-0", "sshKey": KEY},
        "storage": STORAGE,
    }
    body.update(overrides)
    return ovh_signed(served, "POST", f"/dedicated/server/{SVC}/reinstall", body)


def test_reinstall_task_progresses_and_reinstalls_the_box(served: Served) -> None:
    r = _reinstall(served)
    assert r.status_code == 200, r.text
    task = r.json()
    assert (task["function"], task["status"]) == ("reinstallServer", "init")
    seen = []
    for _ in range(4):
        seen.append(
            ovh_signed(served, "GET", f"/dedicated/server/{SVC}/task/{task['taskId']}").json()["status"]
        )
        served.clock.advance(3.4)
    assert seen == ["init", "todo", "doing", "done"]
    assert served.farm.reinstalls() == [
        # cloud-init's passwordless sudo for ubuntu, and no sudo password.
        (
            f"ovh-{SVC}",
            {"user": "ubuntu", "authorized_key": KEY, "sudo_password": None, "nopasswd_sudo": True},
        )
    ]
    ids = ovh_signed(served, "GET", f"/dedicated/server/{SVC}/task?function=reinstallServer").json()
    assert ids == [task["taskId"]]
    assert ovh_signed(served, "GET", f"/dedicated/server/{SVC}/task?function=hardReboot").json() == []
    state = served.admin("GET", "state").json()
    server = next(s for s in state["ovh"]["servers"] if s["name"] == SVC)
    assert server["storage"][0]["partitioning"]["layout"][1] == {
        "fileSystem": "xfs",
        "mountPoint": "/data",
        "raidLevel": 1,
        "size": 0,
    }


def test_second_reinstall_while_running_is_task_already_exists(served: Served) -> None:
    assert _reinstall(served).status_code == 200
    served.clock.advance(7)
    r = _reinstall(served)
    assert r.status_code == 400
    assert r.json() == {
        "class": "Client::BadRequest::TaskAlreadyExists",
        "message": "A reinstallation is already in doing",
    }
    served.clock.advance(3)
    assert _reinstall(served).status_code == 200


def test_trailing_newline_on_ssh_key_is_a_second_key(served: Served) -> None:
    r = _reinstall(served, customizations={"hostname": "kura-0", "sshKey": KEY + "\n"})
    assert (r.status_code, r.json()) == (
        400,
        {"class": "Client::BadRequest", "message": "only 1 single SSH key can be provided"},
    )


def test_reinstall_rejects_incompatible_os_and_bad_layout(served: Served) -> None:
    r = _reinstall(served, operatingSystem="win2022core-std_64")
    assert r.json()["message"] == "Operating system 'win2022core-std_64' is not compatible with this server"
    r = ovh_signed(served, "POST", f"/dedicated/server/{SVC}/reinstall", {"customizations": {}})
    assert r.json()["message"] == "[operatingSystem] Property is mandatory"
    bad = [{"diskGroupId": 7, "partitioning": {"layout": []}}]
    r = _reinstall(served, storage=bad)
    assert r.json()["message"] == "[storage[0].diskGroupId] Disk group 7 does not exist on this server"
    bad = [{"diskGroupId": 1, "partitioning": {"layout": [{"fileSystem": "vfat", "mountPoint": "/"}]}}]
    r = _reinstall(served, storage=bad)
    assert r.json()["message"] == "[storage[0].partitioning.layout[0].fileSystem] Invalid value 'vfat'"


def test_extra_storage_entries_are_silently_dropped(served: Served) -> None:
    second = {
        "diskGroupId": 1,
        "partitioning": {
            "disks": 2,
            "layout": [{"fileSystem": "ext4", "mountPoint": "/srv", "raidLevel": 1, "size": 0}],
        },
    }
    only_root = [
        {
            "diskGroupId": 1,
            "partitioning": {"disks": 2, "layout": [{"fileSystem": "ext4", "mountPoint": "/", "size": 0}]},
        },
        second,
    ]
    assert _reinstall(served, storage=only_root).status_code == 200
    served.clock.advance(10)
    state = served.admin("GET", "state").json()
    server = next(s for s in state["ovh"]["servers"] if s["name"] == SVC)
    # Only the first entry survives, and an absent raidLevel reads as RAID 1.
    assert server["storage"] == [
        {
            "diskGroupId": 1,
            "partitioning": {
                "disks": 2,
                "layout": [{"fileSystem": "ext4", "mountPoint": "/", "raidLevel": 1, "size": 0}],
            },
        }
    ]


def test_failed_task_reads_error_and_leaves_box_alone(served: Served) -> None:
    assert served.admin("POST", "faults", {"task_failure": {"kind": "ovh.reinstallServer", "count": 1}}).ok
    task = _reinstall(served).json()
    served.clock.advance(10)
    got = ovh_signed(served, "GET", f"/dedicated/server/{SVC}/task/{task['taskId']}").json()
    assert (got["status"], got["comment"]) == ("error", "Reinstallation failed")
    assert served.farm.reinstalls() == []


def test_unknown_task_and_server(served: Served) -> None:
    r = ovh_signed(served, "GET", f"/dedicated/server/{SVC}/task/1")
    assert (r.status_code, r.json()) == (
        404,
        {"class": "Client::NotFound", "message": "The requested object (taskId = 1) does not exist"},
    )
    assert ovh_signed(served, "GET", "/dedicated/server/ns404/serviceInfos").status_code == 404
    r = ovh_signed(served, "GET", "/no/such/route")
    assert (r.status_code, r.json()["class"]) == (404, "Client::NotFound")


# --- failover IPs -----------------------------------------------------------------------


def test_ip_move_task_routes_the_ip(served: Served) -> None:
    assert ovh_signed(served, "GET", f"/ip/{IP}").json()["routedTo"] == {"serviceName": SVC}
    # The bare address is accepted too.
    assert ovh_signed(served, "GET", "/ip/198.51.100.10").json()["ip"] == "198.51.100.10/32"
    task = ovh_signed(served, "POST", f"/ip/{IP}/move", {"to": "ns1002.ip-203-0-113.net"}).json()
    assert (task["function"], task["status"], task["destination"]) == (
        "genericMoveFloatingIp",
        "init",
        {"serviceName": "ns1002.ip-203-0-113.net"},
    )
    assert ovh_signed(served, "GET", f"/ip/{IP}").json()["routedTo"] == {"serviceName": SVC}
    served.clock.advance(10)
    done = ovh_signed(served, "GET", f"/ip/{IP}/task/{task['taskId']}").json()
    assert done["status"] == "done"
    assert ovh_signed(served, "GET", f"/ip/{IP}").json()["routedTo"] == {
        "serviceName": "ns1002.ip-203-0-113.net"
    }


def test_ip_move_errors(served: Served) -> None:
    r = ovh_signed(served, "POST", f"/ip/{IP}/move", {"to": SVC})
    assert (r.status_code, r.json()["message"]) == (
        400,
        f"The IP 198.51.100.10/32 is already routed to {SVC}",
    )
    r = ovh_signed(served, "POST", f"/ip/{IP}/move", {"to": "ns-elsewhere"})
    assert r.json()["message"] == "Destination 'ns-elsewhere' is not a valid destination for this IP"
    assert ovh_signed(served, "POST", f"/ip/{IP}/move", {"to": "ns1002.ip-203-0-113.net"}).status_code == 200
    r = ovh_signed(served, "POST", f"/ip/{IP}/move", {"to": "ns1003.ip-203-0-113.net"})
    assert (r.status_code, r.json()["class"]) == (400, "Client::BadRequest::TaskAlreadyExists")
    r = ovh_signed(served, "GET", f"/ip/{quote('192.0.2.1/32', safe='')}")
    assert (r.status_code, r.json()["message"]) == (
        404,
        "The requested object (ip = 192.0.2.1/32) does not exist",
    )


def test_ip_move_task_failure(served: Served) -> None:
    served.admin("POST", "faults", {"task_failure": {"kind": "ovh.ipMove", "count": 1}})
    task = ovh_signed(served, "POST", f"/ip/{IP}/move", {"to": "ns1002.ip-203-0-113.net"}).json()
    served.clock.advance(10)
    assert ovh_signed(served, "GET", f"/ip/{IP}/task/{task['taskId']}").json()["status"] == "ovhError"
    assert ovh_signed(served, "GET", f"/ip/{IP}").json()["routedTo"] == {"serviceName": SVC}
