"""vendorsim's fault and behaviour knobs, and the routes the vendor clients read back through:
each knob does what it says to the vendor's state, seen over real HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests
import yaml

from tests.vendorsim.conftest import DEV_INVENTORY, Served, dedibox, ovh_signed, robot
from vendorsim.inventory import InventoryError, load_inventory

SVC = "ns1001.ip-203-0-113.net"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJpselPEwoXIjP2bkKTBeNMrbyt7kCy0a+yHcLfRN+W7 fleet"
IP = quote("198.51.100.10/32", safe="")
Z = "/dedibox/v1/zones/fr-par-2"


def _reinstall(served: Served) -> requests.Response:
    body = {"operatingSystem": "debian12_64", "customizations": {"hostname": "h", "sshKey": KEY}}
    return ovh_signed(served, "POST", f"/dedicated/server/{SVC}/reinstall", body)


def _ovh_tasks(served: Served) -> list[dict[str, Any]]:
    return [t for t in served.admin("GET", "state").json()["ovh"]["tasks"] if t["serviceName"] == SVC]


# --- the answer lost after the effect --------------------------------------------------------------


def test_lost_answer_carries_the_request_out_then_answers_the_error(served: Served) -> None:
    spec = {"vendor": "ovh", "route": "/ovh/1.0/dedicated/server/*/reinstall", "error_rate": 1.0}
    rule = served.admin("POST", "faults", {**spec, "status": 502, "answer": "lost", "count": 1}).json()[
        "rule"
    ]
    assert (rule["answer"], rule["count"], rule["fired"]) == ("lost", 1, 0)

    r = _reinstall(served)
    assert (r.status_code, r.json()["class"]) == (502, "Server::BadGateway")
    # ... yet the task exists, and the audit shows the write as carried out.
    [task] = _ovh_tasks(served)
    assert task["function"] == "reinstallServer"
    [entry] = served.admin("GET", "audit").json()["entries"]
    assert (entry["path"], entry["status"]) == (f"/ovh/1.0/dedicated/server/{SVC}/reinstall", 200)
    # count 1: the next request is answered.
    assert served.admin("GET", "faults").json()["rules"][0]["fired"] == 1
    r = _reinstall(served)
    assert r.json()["class"] == "Client::BadRequest::TaskAlreadyExists"


def test_fault_before_the_handler_leaves_no_effect(served: Served) -> None:
    r = served.admin(
        "POST", "faults", {"vendor": "ovh", "route": "/ovh/*/reinstall", "error_rate": 1.0, "status": 503}
    )
    assert r.status_code == 201
    assert _reinstall(served).status_code == 503
    assert _ovh_tasks(served) == []
    assert served.admin("GET", "audit").json()["entries"] == []


def test_dropped_connection_after_the_effect(served: Served) -> None:
    served.admin(
        "POST",
        "faults",
        {
            "vendor": "robot",
            "route": "/robot/server/*",
            "method": "POST",
            "error_rate": 1.0,
            "answer": "lost",
            "drop": True,
        },
    )
    with pytest.raises(requests.ConnectionError):
        robot(served, "POST", "/server/2345601", {"server_name": "tuist-bm-dev-1--c-0123456789ab"})
    assert (
        robot(served, "GET", "/server/2345601").json()["server"]["server_name"]
        == "tuist-bm-dev-1--c-0123456789ab"
    )


def test_a_lost_answer_on_a_refused_request_is_the_refusal(served: Served) -> None:
    """Only a request that was carried out loses its answer: a refusal comes through as itself."""
    r = served.admin(
        "POST", "faults", {"vendor": "ovh", "route": "/ovh/*/reinstall", "error_rate": 1.0, "answer": "lost"}
    )
    assert r.status_code == 201
    body = {"operatingSystem": "windows", "customizations": {"hostname": "h"}}
    r = ovh_signed(served, "POST", f"/dedicated/server/{SVC}/reinstall", body)
    assert r.status_code == 400 and "is not compatible" in r.json()["message"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"error_rate": 1, "answer": "after"}, "answer: must be 'before'"),
        ({"error_rate": 1, "drop": "yes"}, "drop: must be true or false"),
        ({"error_rate": 1, "count": 0}, "count: must be an integer >= 1"),
        ({"task_failure": {"kind": "ovh.reinstallServer", "count": 1, "status": "oops"}}, "is not one of"),
        ({"task_failure": {"kind": "ovh.nope", "count": 1}}, "task_failure.kind"),
        (
            {"task_read_fault": {"kind": "ovh.reinstallServer", "count": 1, "status": 418}},
            "must be 404 or 500",
        ),
    ],
)
def test_bad_specs_name_the_field(served: Served, spec: dict[str, Any], message: str) -> None:
    r = served.admin("POST", "faults", spec)
    assert r.status_code == 400 and message in r.json()["error"]


# --- task statuses, flaky task reads ------------------------------------------------------------------


@pytest.mark.parametrize("status", ["customerError", "ovhError", "cancelled", "error"])
def test_an_ovh_reinstall_fails_with_the_status_asked_for(served: Served, status: str) -> None:
    served.admin(
        "POST", "faults", {"task_failure": {"kind": "ovh.reinstallServer", "count": 1, "status": status}}
    )
    task_id = _reinstall(served).json()["taskId"]
    served.clock.advance(11)
    task = ovh_signed(served, "GET", f"/dedicated/server/{SVC}/task/{task_id}").json()
    assert task["status"] == status and task["doneDate"]
    assert served.farm.reinstalls() == []


def test_in_flight_task_reads_answer_404_then_500_then_the_task(served: Served) -> None:
    task_id = _reinstall(served).json()["taskId"]
    served.admin(
        "POST", "faults", {"task_read_fault": {"kind": "ovh.reinstallServer", "count": 1, "status": 404}}
    )
    served.admin(
        "POST", "faults", {"task_read_fault": {"kind": "ovh.reinstallServer", "count": 1, "status": 500}}
    )
    path = f"/dedicated/server/{SVC}/task/{task_id}"
    first, second, third = (ovh_signed(served, "GET", path) for _ in range(3))
    assert (first.status_code, first.json()["class"]) == (404, "Client::NotFound")
    assert f"taskId = {task_id}" in first.json()["message"]
    assert second.status_code == 500
    assert third.json()["status"] in ("init", "todo", "doing")
    # A finished task is never answered 404 by this knob.
    served.admin(
        "POST", "faults", {"task_read_fault": {"kind": "ovh.reinstallServer", "count": 1, "status": 404}}
    )
    served.clock.advance(11)
    assert ovh_signed(served, "GET", path).json()["status"] == "done"


def test_a_reboot_task_is_listed_apart_from_reinstalls(served: Served) -> None:
    reboot = ovh_signed(served, "POST", f"/dedicated/server/{SVC}/reboot").json()
    assert reboot["function"] == "hardReboot"
    reinstall = _reinstall(served).json()
    listed = ovh_signed(served, "GET", f"/dedicated/server/{SVC}/task?function=reinstallServer").json()
    assert listed == [reinstall["taskId"]]
    everything = ovh_signed(served, "GET", f"/dedicated/server/{SVC}/task").json()
    assert everything == sorted([reboot["taskId"], reinstall["taskId"]])


def test_ip_task_list_filters_by_function_and_status(served: Served) -> None:
    task = ovh_signed(served, "POST", f"/ip/{IP}/move", {"to": "ns1002.ip-203-0-113.net"}).json()
    assert ovh_signed(served, "GET", f"/ip/{IP}/task?function=genericMoveFloatingIp").json() == [
        task["taskId"]
    ]
    assert ovh_signed(served, "GET", f"/ip/{IP}/task?status=done").json() == []


# --- behaviours the vendors leave undocumented ---------------------------------------------------------


def test_behaviours_are_listed_set_and_reset(served: Served) -> None:
    described = served.admin("GET", "behaviour").json()
    assert described["ovh.ip_move_to_current"] == {"value": "reject", "values": ["reject", "accept"]}
    r = served.admin("POST", "behaviour", {"ovh.ip_move_to_current": "accept"})
    assert r.json()["ovh.ip_move_to_current"]["value"] == "accept"
    bad = served.admin("POST", "behaviour", {"ovh.ip_move_to_current": "maybe"})
    assert bad.status_code == 400 and "is not one of ['reject', 'accept']" in bad.json()["error"]
    served.admin("POST", "reset")
    assert served.admin("GET", "behaviour").json()["ovh.ip_move_to_current"]["value"] == "reject"


def test_task_timings_are_set_refused_when_not_a_duration_and_reset(served: Served) -> None:
    started = served.sim.task_seconds
    assert served.admin("POST", "timings", {"task_seconds": 4}).json() == {"task_seconds": 4.0}
    assert served.sim.task_seconds == 4.0
    for bad in ({"task_seconds": -1}, {"task_seconds": "5"}, {"task_seconds": True}, [5]):
        refused = served.admin("POST", "timings", bad)
        assert (refused.status_code, refused.json()) == (
            400,
            {"error": "timings: task_seconds must be a number >= 0"},
        ), bad
    assert served.sim.task_seconds == 4.0
    served.admin("POST", "reset")
    assert served.sim.task_seconds == started


def test_ovh_move_to_the_current_service_under_each_behaviour(served: Served) -> None:
    assert ovh_signed(served, "POST", f"/ip/{IP}/move", {"to": SVC}).status_code == 400
    served.admin("POST", "behaviour", {"ovh.ip_move_to_current": "accept"})
    task = ovh_signed(served, "POST", f"/ip/{IP}/move", {"to": SVC}).json()
    served.clock.advance(11)
    assert ovh_signed(served, "GET", f"/ip/{IP}/task/{task['taskId']}").json()["status"] == "done"
    assert ovh_signed(served, "GET", f"/ip/{IP}").json()["routedTo"] == {"serviceName": SVC}


def test_ovh_second_reinstall_under_accept_queues_a_second_task(served: Served) -> None:
    served.admin("POST", "behaviour", {"ovh.reinstall_while_running": "accept"})
    _reinstall(served)
    assert _reinstall(served).status_code == 200
    assert len(_ovh_tasks(served)) == 2


def test_dedibox_attach_of_an_ip_attached_elsewhere_under_each_behaviour(served: Served) -> None:
    r = dedibox(served, "POST", f"{Z}/failover-ips/attach", {"server_id": 200102, "fips_ids": [3001]})
    assert r.status_code == 200
    served.clock.advance(11)
    served.admin("POST", "behaviour", {"dedibox.attach_when_attached": "reject"})
    r = dedibox(served, "POST", f"{Z}/failover-ips/attach", {"server_id": 200103, "fips_ids": [3001]})
    assert (r.status_code, r.json()["type"]) == (400, "invalid_request_error")
    assert "attached to server 200102: detach it first" in r.json()["message"]
    assert dedibox(served, "POST", f"{Z}/failover-ips/detach", {"fips_ids": [3001]}).status_code == 200
    assert dedibox(served, "GET", f"{Z}/failover-ips/3001").json()["status"] == "busy"
    served.clock.advance(11)
    detached = dedibox(served, "GET", f"{Z}/failover-ips/3001").json()
    assert (detached["status"], detached["server_id"]) == ("ready", 0)
    assert dedibox(served, "POST", f"{Z}/failover-ips/attach", {"server_id": 200103, "fips_ids": [3001]}).ok


def test_inventory_faults_and_behaviour_apply_from_the_start(tmp_path: Path) -> None:
    raw = yaml.safe_load(DEV_INVENTORY.read_text())
    raw["behaviour"] = {"dedibox.attach_when_attached": "reject"}
    raw["faults"] = [{"task_read_fault": {"kind": "ovh.ipMove", "count": 2, "status": 404}}]
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(raw))
    inventory = load_inventory(path)
    assert inventory.behaviour == {"dedibox.attach_when_attached": "reject"}
    raw["behaviour"] = {"ovh.nope": "x"}
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InventoryError, match=r"behaviour: behaviour 'ovh.nope' is unknown"):
        load_inventory(path)


# --- limits the clients stay inside ----------------------------------------------------------------------


def test_marker_fields_refuse_values_outside_the_limits(served: Served) -> None:
    service = f"/service/{10001001}"
    for name in ("x" * 51, "tuist-kura-dev-ovh-1 claim:abc"):
        r = ovh_signed(served, "PUT", service, {"resource": {"displayName": name, "name": SVC}})
        assert (r.status_code, r.json()["class"]) == (400, "Client::BadRequest")
    assert ovh_signed(served, "PUT", service, {"resource": {"displayName": "x" * 50, "name": SVC}}).ok
    r = dedibox(served, "POST", f"{Z}/servers/200101/tags", {"tags": ["tuist-claim:abc"]})
    assert r.json()["details"][0]["argument_name"] == "tags"
    for name in ("t" * 101, "tuist-bm-dev-1~c-abc"):
        r = robot(served, "POST", "/server/2345601", {"server_name": name})
        assert r.json()["error"] == {
            "status": 400,
            "code": "INVALID_INPUT",
            "message": "invalid input",
            "missing": [],
            "invalid": ["server_name"],
        }
    assert robot(served, "POST", "/server/2345601", {"server_name": "t" * 100}).ok


# --- Dedibox routes the client reads back through ---------------------------------------------------------


def test_dedibox_partitioning_route(served: Served) -> None:
    r = dedibox(served, "GET", f"{Z}/servers/200101/partitioning/502")
    assert [p["mount_point"] for p in r.json()["partitions"]] == ["/boot/efi", None, "/"]
    r = dedibox(served, "GET", f"{Z}/servers/200101/partitioning/501")
    assert (r.status_code, r.json()["type"]) == (400, "invalid_request_error")
    assert dedibox(served, "GET", f"{Z}/servers/200101/partitioning/999").status_code == 404


def test_a_dedibox_install_failing_with_its_record_gone(served: Served) -> None:
    served.admin(
        "POST", "faults", {"task_failure": {"kind": "dedibox.install", "count": 1, "status": "missing"}}
    )
    body = {"os_id": 502, "hostname": "sd-200107", "root_password": "Root-Pass-1234"}
    assert dedibox(served, "POST", f"{Z}/servers/200107/install", body).ok
    served.clock.advance(11)
    assert dedibox(served, "GET", f"{Z}/servers/200107/install").status_code == 404
    assert dedibox(served, "GET", f"{Z}/servers/200107").json()["status"] == "error"


# --- Robot budgets ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "limit"),
    [
        ("GET", "/failover/198.51.100.30", 100),
        ("GET", "/server/2345601", 200),
        ("GET", "/boot/2345601/rescue", 500),
    ],
)
def test_robot_read_budgets_are_enforced(served: Served, method: str, path: str, limit: int) -> None:
    for _ in range(limit):
        assert robot(served, method, path).ok
    r = robot(served, method, path)
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "RATE_LIMIT_EXCEEDED"
    assert (r.json()["error"]["max_request"], r.json()["error"]["interval"]) == (limit, 3600)
    assert served.admin("GET", "state").json()["robot"]["requests_this_hour"] != {}
