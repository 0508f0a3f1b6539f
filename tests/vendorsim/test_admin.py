"""/_admin, faults, audit redaction, and the CLI: persistence across a restart, bad inventory."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.vendorsim.conftest import DEV_INVENTORY, Served, dedibox, ovh_signed, robot

ROOT = Path(__file__).resolve().parents[2]
Z = "/dedibox/v1/zones/fr-par-2"


def test_error_rate_is_deterministic_with_a_seed(served: Served) -> None:
    def run() -> list[int]:
        served.admin("DELETE", "faults")
        r = served.admin("POST", "faults", {"vendor": "robot", "error_rate": 0.5, "status": 500, "seed": 7})
        assert r.status_code == 201
        return [robot(served, "GET", "/server/2345601").status_code for _ in range(12)]

    first, second = run(), run()
    assert first == second
    assert set(first) == {200, 500}
    r = robot(served, "GET", "/server/2345601")
    if r.status_code == 500:
        assert r.json() == {"error": {"status": 500, "code": "INTERNAL_ERROR", "message": "Injected fault"}}
    # Other vendors are untouched by a robot rule.
    assert all(ovh_signed(served, "GET", "/dedicated/server").status_code == 200 for _ in range(5))


def test_429_with_retry_after_on_a_route(served: Served) -> None:
    served.admin(
        "POST",
        "faults",
        {"route": "/dedibox/dedibox/v1/zones/*/servers", "error_rate": 1.0, "status": 429, "retry_after": 3},
    )
    r = dedibox(
        served, "GET", f"{Z}/servers", params={"project_id": served.inventory.credentials.dedibox.project_id}
    )
    assert (r.status_code, r.headers["Retry-After"]) == (429, "3")
    assert r.json() == {"message": "too many requests", "type": "too_many_requests"}
    assert dedibox(served, "GET", f"{Z}/servers/200101").status_code == 200
    served.admin("DELETE", "faults")
    assert (
        dedibox(
            served,
            "GET",
            f"{Z}/servers",
            params={"project_id": served.inventory.credentials.dedibox.project_id},
        ).status_code
        == 200
    )


def test_ovh_injected_error_shape(served: Served) -> None:
    served.admin("POST", "faults", {"vendor": "ovh", "method": "GET", "error_rate": 1.0, "status": 503})
    r = ovh_signed(served, "GET", "/dedicated/server")
    assert (r.status_code, r.json()) == (
        503,
        {"class": "Server::ServiceUnavailable", "message": "Injected fault"},
    )
    assert r.headers["X-OVH-QUERYID"]


def test_latency(served: Served) -> None:
    served.admin("POST", "faults", {"vendor": "robot", "latency_ms": 300})
    start = time.monotonic()
    assert robot(served, "GET", "/server").status_code == 200
    assert time.monotonic() - start >= 0.3
    start = time.monotonic()
    ovh_signed(served, "GET", "/dedicated/server")
    assert time.monotonic() - start < 0.3


def test_bad_fault_specs_name_the_field(served: Served) -> None:
    r = served.admin("POST", "faults", {"error_rate": 2})
    assert (r.status_code, r.json()) == (
        400,
        {"error": "fault spec: error_rate: must be a number between 0 and 1"},
    )
    r = served.admin("POST", "faults", {"vendor": "aws", "error_rate": 1})
    assert r.json() == {
        "error": "fault spec: vendor: 'aws' is not one of "
        "['ovh', 'dedibox', 'robot', 'scaleway_em', 'applesilicon']"
    }
    r = served.admin("POST", "faults", {"rate": 1})
    assert r.json()["error"].startswith("fault spec: unknown field(s) ['rate']")


def test_task_failure_for_dedibox_install(served: Served) -> None:
    served.admin("POST", "faults", {"task_failure": {"kind": "dedibox.install", "count": 1}})
    body = {"os_id": 502, "hostname": "sd-200107", "root_password": "Root-Pass-1234"}
    assert dedibox(served, "POST", f"{Z}/servers/200107/install", body).status_code == 200
    served.clock.advance(10)
    assert dedibox(served, "GET", f"{Z}/servers/200107/install").json()["status"] == "unknown"
    assert dedibox(served, "GET", f"{Z}/servers/200107").json()["status"] == "error"
    assert served.farm.reinstalls() == []
    # Only the next one failed.
    assert dedibox(served, "POST", f"{Z}/servers/200107/install", body).status_code == 200
    served.clock.advance(10)
    reads = [dedibox(served, "GET", f"{Z}/servers/200107/install").json()["status"] for _ in range(2)]
    assert reads == ["rebooting", "installed"]  # finished before any read: read in progress once


def test_audit_redacts_secrets_and_names_the_box(served: Served) -> None:
    body = {"os_id": 502, "hostname": "sd-200107", "root_password": "Root-Pass-1234"}
    dedibox(served, "POST", f"{Z}/servers/200107/install", body)
    robot(served, "POST", "/server/2345602", {"server_name": "tuist-bm-dev-2--c-0123456789ab"})
    ovh_signed(served, "GET", "/dedicated/server")  # reads are not audited
    entries = served.admin("GET", "audit").json()["entries"]
    assert [(e["vendor"], e["method"], e["path"], e["status"], e["box"]) for e in entries] == [
        ("dedibox", "POST", f"/dedibox{Z}/servers/200107/install", 200, "dedibox-200107"),
        ("robot", "POST", "/robot/server/2345602", 200, "robot-2345602"),
    ]
    assert entries[0]["body"] == {"os_id": 502, "hostname": "sd-200107", "root_password": "<redacted>"}
    assert entries[1]["body"] == {"server_name": "tuist-bm-dev-2--c-0123456789ab"}
    assert "Root-Pass-1234" not in requests.get(f"{served.url}/_admin/state", timeout=5).text
    later = served.admin("GET", f"audit?since={entries[0]['id']}").json()["entries"]
    assert [e["id"] for e in later] == [entries[1]["id"]]


def test_state_and_reset(served: Served) -> None:
    state = served.admin("GET", "state").json()
    assert len(state["ovh"]["servers"]) == 7 and len(state["boxes"]) == 35
    # Every box answers SSH on its own IP (the one its vendor API reports) at the one dev port.
    assert {b["ssh_port"] for b in state["boxes"]} == {2222}
    boxes = {b["key"]: b["ip"] for b in state["boxes"]}
    assert len(set(boxes.values())) == 35
    assert (boxes["ovh-ns1001.ip-203-0-113.net"], boxes["dedibox-200101"], boxes["robot-2345601"]) == (
        "198.18.1.11",
        "198.18.2.31",
        "198.18.3.51",
    )
    assert all(b["sudo_password"] == "<redacted>" for b in state["boxes"])
    robot(served, "POST", "/server/2345602", {"server_name": "renamed"})
    assert served.admin("POST", "reset").json() == {"reset": True}
    assert robot(served, "GET", "/server/2345602").json()["server"]["server_name"] == "tuist-bm-dev-2"
    assert served.admin("GET", "audit").json()["entries"] == []
    assert len(served.farm.reinstalls()) == 35
    # The reset restarted each box's sshd on the box's own IP.
    ensured = {c[1]: c[2]["ssh_host"] for c in served.farm.calls if c[0] == "ensure"}
    assert ensured == boxes


def _start(state: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vendorsim",
            "--inventory",
            str(DEV_INVENTORY),
            "--port",
            "0",
            "--state",
            str(state),
            "--no-ssh",
            "--task-seconds",
            "0.2",
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("vendorsim listening on "), (line, proc.stderr.read() if proc.stderr else "")
    return proc, line.split()[-1]


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    assert proc.wait(timeout=10) == 0


def test_cli_state_persists_across_restart_and_tasks_advance_by_wall_time(tmp_path: Path) -> None:
    creds = ("dev-robot-user", "dev-robot-password")
    proc, url = _start(tmp_path)
    try:
        r = requests.post(
            f"{url}/robot/server/2345603",
            data={"server_name": "tuist-bm-dev-3--c-0123456789ab"},
            auth=creds,
            timeout=5,
        )
        assert r.status_code == 200
        token = {"X-Auth-Token": "f24d2ad3-cea4-48c1-a6bd-1b0d15fb94c3"}
        r = requests.post(
            f"{url}/dedibox{Z}/failover-ips/attach",
            json={"server_id": 200102, "fips_ids": [3002]},
            headers=token,
            timeout=5,
        )
        assert r.status_code == 200
        assert (
            requests.get(f"{url}/dedibox{Z}/failover-ips/3002", headers=token, timeout=5).json()["status"]
            == "busy"
        )
    finally:
        _stop(proc)
    time.sleep(0.25)
    proc, url = _start(tmp_path)
    try:
        server = requests.get(f"{url}/robot/server/2345603", auth=creds, timeout=5).json()["server"]
        assert server["server_name"] == "tuist-bm-dev-3--c-0123456789ab"
        fip = requests.get(f"{url}/dedibox{Z}/failover-ips/3002", headers=token, timeout=5).json()
        assert (fip["status"], fip["server_id"]) == ("ready", 200102)
    finally:
        _stop(proc)
    proc, url = _start(tmp_path, "--reset")
    try:
        server = requests.get(f"{url}/robot/server/2345603", auth=creds, timeout=5).json()["server"]
        assert server["server_name"] == "tuist-bm-dev-3"
    finally:
        _stop(proc)


def test_cli_rejects_a_bad_inventory_naming_the_path(tmp_path: Path) -> None:
    bad = tmp_path / "inventory.yaml"
    bad.write_text(DEV_INVENTORY.read_text().replace("ip: 198.18.1.12,", "ip: 203.0.113.999,", 1))
    result = subprocess.run(
        [sys.executable, "-m", "vendorsim", "--inventory", str(bad), "--no-ssh", "--state", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert f"vendorsim: inventory {bad} is invalid:" in result.stderr
    assert "  ovh.servers[1].ip: '203.0.113.999' is not an IPv4 address" in result.stderr


def test_inventory_cross_checks(tmp_path: Path) -> None:
    from vendorsim.inventory import InventoryError, load_inventory

    bad = tmp_path / "inventory.yaml"
    bad.write_text(DEV_INVENTORY.read_text().replace("ip: 198.18.2.33,", "ip: 198.18.2.31,", 1))
    with pytest.raises(InventoryError) as e:
        load_inventory(bad)
    assert "ip 198.18.2.31 is used twice" in str(e.value)


def test_a_state_seeded_before_boxes_had_ips_asks_for_a_reseed(served: Served) -> None:
    # A box record as older vendorsims stored it: no IP to listen on, so no sshd can start for it.
    box = served.sim.store.get("box", "robot-2345601")
    assert box is not None
    del box["ip"]
    served.sim.store.put("box", "robot-2345601", box)
    with pytest.raises(RuntimeError) as e:
        served.sim.start_boxes()
    assert str(e.value) == "vendorsim state has no IP for box robot-2345601: restart with --reset"


def test_cli_rejects_a_box_cpu_budget_it_cannot_set_and_starts_nothing(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "vendorsim",
            "--inventory",
            str(DEV_INVENTORY),
            "--box-cpus",
            "0.001",
            "--state",
            str(tmp_path / "state"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert result.stderr == "vendorsim: --box-cpus: a CPU budget must be at least 0.01 CPUs, not 0.001\n"
    assert not (tmp_path / "state").exists()
