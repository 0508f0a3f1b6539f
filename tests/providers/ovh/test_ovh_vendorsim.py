"""OvhClient against the vendorsim process: real signatures, real tasks, injected faults."""

from __future__ import annotations

import pytest

from providers.errors import AuthError, TaskFailedError, VendorError
from providers.ovh.client import OvhClient
from providers.retry import PollPolicy, RetryPolicy
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
        poll=PollPolicy(first=0.05, max_interval=0.05),
        task_timeout=10,
    )


def exercise(client: OvhClient, sim) -> None:
    """Every client method once, in the order an adopt + move + release would use them."""
    boxes = {b.id: b for b in client.list_boxes()}
    assert boxes[SVC].marker_field == "tuist-kura-dev-ovh-2" and boxes[SVC].claim is None
    assert [b.id for b in client.boxes_with_marker("tuist-kura-dev-")] == sorted(
        b.id for b in boxes.values() if b.marker_field.startswith("tuist-kura-dev-")
    )
    assert boxes["ns1004.ip-203-0-113.net"].claim == Claim("a1ce00000001")
    client.set_claim(SVC, Claim("0123456789ab"))
    assert client.get_box(SVC).claim == Claim("0123456789ab")
    assert client.failover_target("198.51.100.10") == "ns1001.ip-203-0-113.net"
    client.move_failover("198.51.100.10", SVC)
    assert client.failover_target("198.51.100.10") == SVC
    assert client.install_state(SVC) is InstallState.PENDING
    client.set_claim(SVC, Claim("0123456789ab", releasing=True))
    ticket = client.start_reinstall(
        SVC, hostname="kura-1", ssh_public_key=KEY + "\n", user_login="ubuntu", user_password="x"
    )
    assert client.install_state(SVC, ticket) in (InstallState.RUNNING, InstallState.DONE)
    client.wait_reinstall(ticket, timeout=10)
    assert client.install_state(SVC, ticket) is InstallState.DONE
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
        {"resource": {"displayName": "tuist-kura-dev-ovh-2--c-0123456789ab", "name": SVC}},
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


def reinstall_posts(sim) -> list[dict]:
    return [e for e in sim.admin("GET", "/audit?since=0")["entries"] if e["path"].endswith("/reinstall")]


@pytest.mark.parametrize("behaviour", ["task_already_exists", "accept"])
def test_a_second_reinstall_while_one_runs_follows_it(vendorsim, behaviour):
    """OVH documents its answer to a reinstall while one runs only for the legacy route; under
    either answer (TaskAlreadyExists, or a second task queued) the box is wiped once."""
    vendorsim.admin("POST", "/behaviour", json={"ovh.reinstall_while_running": behaviour})
    vendorsim.admin("POST", "/timings", json={"task_seconds": 3})  # still running when read, however loaded
    client = make_client(vendorsim)
    first = client.start_reinstall(
        SVC, hostname="kura-1", ssh_public_key=KEY, user_login="ubuntu", user_password="x"
    )
    second = client.start_reinstall(
        SVC, hostname="kura-1", ssh_public_key=KEY, user_login="ubuntu", user_password="x"
    )
    assert second == first
    assert client.install_state(SVC) is InstallState.RUNNING
    assert len(reinstall_posts(vendorsim)) == 1


@pytest.mark.parametrize(
    "fault",
    [
        {"answer": "lost", "status": 502},
        {"answer": "lost", "drop": True},
    ],
    ids=["502-after-the-effect", "connection-dropped-after-the-effect"],
)
def test_reinstall_whose_answer_is_lost_wipes_the_box_once(vendorsim, fault):
    vendorsim.admin(
        "POST",
        "/faults",
        json={
            "vendor": "ovh",
            "route": "/ovh/1.0/dedicated/server/*/reinstall",
            "method": "POST",
            "error_rate": 1.0,
            "count": 1,
            **fault,
        },
    )
    client = make_client(vendorsim)
    ticket = client.start_reinstall(
        SVC, hostname="kura-1", ssh_public_key=KEY, user_login="ubuntu", user_password="x"
    )
    assert vendorsim.admin("GET", "/faults")["rules"][0]["fired"] == 1
    tasks = [t for t in vendorsim.admin("GET", "/state")["ovh"]["tasks"] if t["serviceName"] == SVC]
    assert [str(t["taskId"]) for t in tasks] == [ticket.task_id]
    assert len(reinstall_posts(vendorsim)) == 1
    client.wait_reinstall(ticket, timeout=10)


def test_release_waits_out_404s_on_its_own_task_and_never_ends_on_the_prep_reinstall(vendorsim):
    """Issue 17.1: an earlier, finished reinstall must not stand in for the one a release started,
    even while OVH answers 404 for the running one."""
    client = make_client(vendorsim)
    prep = client.start_reinstall(
        SVC, hostname="prep", ssh_public_key=KEY, user_login="ubuntu", user_password="x"
    )
    client.wait_reinstall(prep, timeout=10)
    vendorsim.admin("POST", "/timings", json={"task_seconds": 3})  # still running when read, however loaded
    vendorsim.admin(
        "POST",
        "/faults",
        json={"task_read_fault": {"kind": "ovh.reinstallServer", "status": 404, "count": 3}},
    )
    ticket = client.start_reinstall(
        SVC, hostname="kura-1", ssh_public_key=KEY, user_login="ubuntu", user_password="x"
    )
    assert ticket != prep
    # The running task 404s: with its ticket it reads running, not the prep reinstall's done; without
    # one, whether an install runs cannot be told (an error, never the prep reinstall's done either).
    with pytest.raises(VendorError, match=r"the newest reinstall task, \d+, did not answer"):
        client.install_state(SVC)
    assert client.install_state(SVC, ticket) is InstallState.RUNNING
    client.wait_reinstall(ticket, timeout=10)
    assert vendorsim.admin("GET", "/faults")["task_read_faults"] == {}
    task = next(
        t for t in vendorsim.admin("GET", "/state")["ovh"]["tasks"] if str(t["taskId"]) == ticket.task_id
    )
    assert task["status"] == "done"


@pytest.mark.parametrize("status", ["customerError", "ovhError", "cancelled", "error"])
def test_a_failed_reinstall_names_ovhs_status(vendorsim, status):
    vendorsim.admin(
        "POST",
        "/faults",
        json={"task_failure": {"kind": "ovh.reinstallServer", "count": 1, "status": status}},
    )
    client = make_client(vendorsim)
    ticket = client.start_reinstall(
        SVC, hostname="kura-1", ssh_public_key=KEY, user_login="ubuntu", user_password="x"
    )
    with pytest.raises(TaskFailedError) as raised:
        client.wait_reinstall(ticket, timeout=10)
    assert raised.value.code == status
    assert client.install_state(SVC, ticket) is InstallState.FAILED


def test_a_reboot_task_is_no_reinstall(vendorsim):
    """Only the reinstall function counts: a newer hardReboot task neither ends nor starts one."""
    vendorsim.admin("POST", "/timings", json={"task_seconds": 3})  # still running when read, however loaded
    client = make_client(vendorsim)
    ticket = client.start_reinstall(
        SVC, hostname="kura-1", ssh_public_key=KEY, user_login="ubuntu", user_password="x"
    )
    client._call("POST", "/dedicated/server/{svc}/reboot", f"/dedicated/server/{SVC}/reboot", subject=SVC)
    assert client.install_state(SVC) is InstallState.RUNNING
    client.wait_reinstall(ticket, timeout=10)
    assert client.install_state(SVC) is InstallState.DONE


@pytest.mark.parametrize("fault", [{"status": 502}, {"drop": True}], ids=["502", "dropped"])
def test_ip_move_whose_answer_is_lost_moves_once(vendorsim, fault):
    vendorsim.admin(
        "POST",
        "/faults",
        json={
            "vendor": "ovh",
            "route": "/ovh/1.0/ip/*/move",
            "error_rate": 1.0,
            "count": 1,
            "answer": "lost",
            **fault,
        },
    )
    client = make_client(vendorsim)
    client.move_failover("198.51.100.10", SVC)
    assert client.failover_target("198.51.100.10") == SVC
    moves = [e for e in vendorsim.admin("GET", "/audit?since=0")["entries"] if e["path"].endswith("/move")]
    assert len(moves) == 1


@pytest.mark.parametrize("behaviour", ["reject", "accept"])
def test_ip_move_to_where_it_already_is_is_success_under_either_answer(vendorsim, behaviour):
    """Someone else moved the IP between our read and our POST (a stale read): whether OVH refuses
    the move or runs a no-op task, the move succeeds and the IP stays on the box."""
    vendorsim.admin("POST", "/behaviour", json={"ovh.ip_move_to_current": behaviour})
    client = make_client(vendorsim)
    make_client(vendorsim).move_failover("198.51.100.10", SVC)
    reads = iter(["ns1001.ip-203-0-113.net"])
    real = client.failover_target
    client.failover_target = lambda ip: next(reads, None) or real(ip)  # type: ignore[method-assign]
    client.move_failover("198.51.100.10", SVC)
    assert real("198.51.100.10") == SVC
    moves = [e for e in vendorsim.admin("GET", "/audit?since=0")["entries"] if e["path"].endswith("/move")]
    # The second POST reached OVH and got the behaviour's answer.
    assert [m["status"] for m in moves] == [200, 400 if behaviour == "reject" else 200]


@pytest.mark.parametrize("status", [404, 500])
def test_ip_move_task_reads_that_fail_in_flight_are_waited_out(vendorsim, status):
    vendorsim.admin(
        "POST", "/faults", json={"task_read_fault": {"kind": "ovh.ipMove", "status": status, "count": 2}}
    )
    client = make_client(vendorsim, attempts=1)
    client.move_failover("198.51.100.10", SVC)
    assert client.failover_target("198.51.100.10") == SVC


def test_display_name_write_whose_answer_is_lost_converges(vendorsim):
    vendorsim.admin(
        "POST",
        "/faults",
        json={
            "vendor": "ovh",
            "route": "/ovh/1.0/service/*",
            "method": "PUT",
            "error_rate": 1.0,
            "count": 1,
            "answer": "lost",
            "status": 503,
        },
    )
    client = make_client(vendorsim)
    client.set_claim(SVC, Claim("0123456789ab"))
    assert client.get_box(SVC).claim == Claim("0123456789ab")


def test_vendorsim_refuses_a_display_name_outside_the_assumed_limits(vendorsim):
    client = make_client(vendorsim)
    for bad in ("tuist-kura-dev-ovh-2 claim:0123456789ab", "x" * 51):
        with pytest.raises(VendorError) as raised:
            client._call(
                "PUT",
                "/service/{serviceId}",
                "/service/10001002",
                body={"resource": {"displayName": bad, "name": SVC}},
            )
        assert raised.value.status == 400


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
