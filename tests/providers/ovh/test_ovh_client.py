"""OvhClient against a recording HTTP server: the exact signed request, the parsed result."""

from __future__ import annotations

import hashlib

import pytest

from config.models import Vendor
from providers.errors import (
    AuthError,
    NotFoundError,
    TaskAlreadyExistsError,
    TaskFailedError,
    TaskTimeoutError,
    TransientVendorError,
    VendorError,
    VendorInputError,
)
from providers.ovh.client import OvhClient
from providers.retry import PollPolicy, RetryPolicy
from providers.vendor import Box, Claim, InstallState, Reinstall

SVC = "ns3001234.ip-51-38-1.eu"
AS = "app-secret-0b9f"
CK = "consumer-key-77aa"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk fleet@tuist"


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def client(recorder, sleeps) -> OvhClient:
    recorder.on("GET", "/1.0/auth/time", 1_700_000_000)
    return OvhClient(
        endpoint=f"{recorder.url}/1.0",
        application_key="app-key-1",
        application_secret=AS,
        consumer_key=CK,
        retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05),
        poll=PollPolicy(first=0.01, max_interval=0.01),
        task_timeout=2,
        sleep=sleeps.append,
    )


def server_body(**overrides):
    body = {
        "name": SVC,
        "ip": "51.38.1.10",
        "datacenter": "bhs8",
        "state": "ok",
        "commercialRange": "Advance-3-2024",
        "os": "ubuntu2404-server_64",
        "reverse": "ns3001234.ip-51-38-1.eu.",
    }
    return {**body, **overrides}


def serve_box(recorder, display_name: str) -> None:
    recorder.on("GET", f"/1.0/dedicated/server/{SVC}", server_body())
    recorder.on("GET", f"/1.0/dedicated/server/{SVC}/serviceInfos", {"serviceId": 4242, "status": "ok"})
    recorder.on(
        "GET",
        "/1.0/services/4242",
        {"serviceId": 4242, "resource": {"displayName": display_name, "name": SVC}},
    )


def assert_signed(recorder, recorded) -> None:
    """The signature OVH recomputes: $1$ + sha1(AS+CK+METHOD+full URL+body+timestamp)."""
    url = recorder.url + recorded.target
    raw = "+".join(
        [AS, CK, recorded.method, url, recorded.body.decode(), recorded.headers["x-ovh-timestamp"]]
    )
    assert recorded.headers["x-ovh-signature"] == "$1$" + hashlib.sha1(raw.encode()).hexdigest()
    assert recorded.headers["x-ovh-application"] == "app-key-1"
    assert recorded.headers["x-ovh-consumer"] == CK


def test_list_boxes_reads_server_service_and_display_name(recorder, client):
    recorder.on("GET", "/1.0/dedicated/server", [SVC])
    serve_box(recorder, "tuist-kura-staging-bhs claim:0123456789ab")

    boxes = client.list_boxes()

    assert boxes == [
        Box(
            vendor=Vendor.OVH,
            id=SVC,
            name=SVC,
            datacenter="bhs8",
            public_ipv4="51.38.1.10",
            state="ok",
            offer="Advance-3-2024",
            marker_field="tuist-kura-staging-bhs",
            claim=Claim(token="0123456789ab", releasing=False),
            has_os=True,
        )
    ]
    assert recorder.calls() == [
        "GET /1.0/auth/time",
        "GET /1.0/dedicated/server",
        f"GET /1.0/dedicated/server/{SVC}",
        f"GET /1.0/dedicated/server/{SVC}/serviceInfos",
        "GET /1.0/services/4242",
    ]
    assert "x-ovh-signature" not in recorder.requests[0].headers  # /auth/time is unsigned


def test_a_box_gone_between_the_listing_and_its_read_is_left_out_not_the_whole_account(recorder, client):
    recorder.on("GET", "/1.0/dedicated/server", ["gone.ip-1.net", SVC])
    recorder.on(
        "GET",
        "/1.0/dedicated/server/gone.ip-1.net",
        recorder.reply(
            status=404, body={"class": "Client::NotFound", "message": "This service does not exist"}
        ),
    )
    serve_box(recorder, "tuist-kura-staging-bhs")

    assert [box.id for box in client.list_boxes()] == [SVC]
    for recorded in recorder.requests[1:]:
        assert_signed(recorder, recorded)
        assert recorded.body == b""


def test_boxes_with_marker_filters_by_display_name_prefix(recorder, client):
    recorder.on("GET", "/1.0/dedicated/server", [SVC])
    serve_box(recorder, "tuist-kura-production-bhs")
    assert client.boxes_with_marker("tuist-kura-staging") == []
    assert [b.id for b in client.boxes_with_marker("tuist-kura-production")] == [SVC]


def test_box_without_os_and_display_name(recorder, client):
    recorder.on("GET", f"/1.0/dedicated/server/{SVC}", server_body(os="none_64", ip=None))
    recorder.on("GET", f"/1.0/dedicated/server/{SVC}/serviceInfos", {"serviceId": 4242})
    recorder.on("GET", "/1.0/services/4242", {"serviceId": 4242, "resource": {"name": SVC}})
    box = client.get_box(SVC)
    assert (box.has_os, box.public_ipv4, box.marker_field, box.claim) == (False, None, "", None)


def test_set_claim_puts_display_name_keeping_fleet_marker(recorder, client):
    # A claim in the form an earlier version wrote is read, and rewritten in the current one.
    serve_box(recorder, "tuist-kura-staging-bhs claim:0123456789ab")
    recorder.on("PUT", "/1.0/service/4242", recorder.reply(status=200, body=None))

    client.set_claim(SVC, Claim(token="0123456789ab", releasing=True))

    put = recorder.last("PUT", "/1.0/service/4242")
    assert put.body == (
        b'{"resource":{"displayName":"tuist-kura-staging-bhs--r-0123456789ab",'
        b'"name":"ns3001234.ip-51-38-1.eu"}}'
    )
    assert put.headers["content-type"] == "application/json"
    assert_signed(recorder, put)


def test_set_claim_none_frees_and_same_claim_writes_nothing(recorder, client):
    serve_box(recorder, "tuist-kura-staging-bhs--c-0123456789ab")
    recorder.on("PUT", "/1.0/service/4242", recorder.reply(status=200))
    client.set_claim(SVC, Claim(token="0123456789ab"))
    assert not [c for c in recorder.calls() if c.startswith("PUT")]
    client.set_claim(SVC, None)
    assert recorder.last("PUT", "/1.0/service/4242").json() == {
        "resource": {"displayName": "tuist-kura-staging-bhs", "name": SVC}
    }


def serve_install_inputs(recorder) -> None:
    # The operator's prep reinstall, long done.
    recorder.on(
        "GET",
        f"/1.0/dedicated/server/{SVC}/task/880",
        {"taskId": 880, "function": "reinstallServer", "status": "done"},
    )
    recorder.on(
        "GET",
        f"/1.0/dedicated/server/{SVC}/install/compatibleTemplates",
        {"ovh": ["debian12_64", "ubuntu2204-server_64", "ubuntu2404-server_64"], "personal": []},
    )
    recorder.on(
        "GET",
        f"/1.0/dedicated/server/{SVC}/specifications/hardware",
        {
            "diskGroups": [
                {
                    "diskGroupId": 1,
                    "numberOfDisks": 2,
                    "diskSize": {"unit": "GB", "value": 512},
                    "diskType": "NVME",
                },
                {
                    "diskGroupId": 2,
                    "numberOfDisks": 4,
                    "diskSize": {"unit": "TB", "value": 1.92},
                    "diskType": "NVME",
                },
            ]
        },
    )


def test_set_claim_refuses_a_display_name_the_limit_cannot_hold(recorder, client):
    serve_box(recorder, "tuist-kura-staging-bhs-with-a-very-long-operator-name")  # 45 characters
    with pytest.raises(
        VendorInputError, match=r"at most 50, so the box's name before the claim may be at most 34"
    ):
        client.set_claim(SVC, Claim(token="0123456789ab"))
    assert not [c for c in recorder.calls() if c.startswith("PUT")]


def test_start_reinstall_posts_template_trimmed_key_and_one_storage_entry(recorder, client):
    serve_install_inputs(recorder)
    recorder.on("GET", f"/1.0/dedicated/server/{SVC}/task", [880])
    recorder.on(
        "POST",
        f"/1.0/dedicated/server/{SVC}/reinstall",
        {"taskId": 991, "function": "reinstallServer", "status": "init"},
    )

    ticket = client.start_reinstall(
        SVC, hostname="kura-bhs-1", ssh_public_key=KEY + "\n", user_login="ubuntu", user_password="pw"
    )

    assert ticket == Reinstall(vendor=Vendor.OVH, box_id=SVC, task_id="991")
    assert f"GET /1.0/dedicated/server/{SVC}/task?function=reinstallServer" in recorder.calls()

    post = recorder.last("POST", f"/1.0/dedicated/server/{SVC}/reinstall")
    assert post.json() == {
        "operatingSystem": "ubuntu2404-server_64",
        "customizations": {"hostname": "kura-bhs-1", "sshKey": KEY},
        "storage": [
            {
                "diskGroupId": 2,
                "partitioning": {
                    "disks": 4,
                    "layout": [
                        {"fileSystem": "ext4", "mountPoint": "/boot", "raidLevel": 10, "size": 1024},
                        {"fileSystem": "ext4", "mountPoint": "/", "raidLevel": 10, "size": 65536},
                        {"fileSystem": "xfs", "mountPoint": "/data", "raidLevel": 10, "size": 0},
                    ],
                },
            }
        ],
    }
    assert b"pw" not in post.body
    assert_signed(recorder, post)


def test_start_reinstall_task_already_exists_is_typed(recorder, client):
    serve_install_inputs(recorder)
    recorder.on("GET", f"/1.0/dedicated/server/{SVC}/task", [])
    recorder.on(
        "POST",
        f"/1.0/dedicated/server/{SVC}/reinstall",
        recorder.reply(
            status=400,
            body={"class": "Client::BadRequest::TaskAlreadyExists", "message": "A task is already running"},
            headers={"X-OVH-QUERYID": "EU.ext-3.6512.abc"},
        ),
    )
    with pytest.raises(TaskAlreadyExistsError) as raised:
        client.start_reinstall(SVC, hostname="h", ssh_public_key=KEY, user_login="u", user_password="p")
    error = raised.value
    assert (error.vendor, error.call, error.status, error.code, error.request_id) == (
        "ovh",
        "POST /dedicated/server/{svc}/reinstall",
        400,
        "Client::BadRequest::TaskAlreadyExists",
        "EU.ext-3.6512.abc",
    )
    assert str(error) == (
        "ovh: POST /dedicated/server/{svc}/reinstall [ns3001234.ip-51-38-1.eu] failed (HTTP 400 "
        "Client::BadRequest::TaskAlreadyExists): A task is already running (request id EU.ext-3.6512.abc)"
    )
    # A non-transient error is not retried.
    assert recorder.calls().count(f"POST /1.0/dedicated/server/{SVC}/reinstall") == 1


def test_start_reinstall_follows_a_running_reinstall_without_posting(recorder, client):
    """Whatever OVH answers a second reinstall (TaskAlreadyExists, or a second queued wipe), the
    client never asks: the running one is the release's."""
    serve_install_inputs(recorder)
    recorder.on("GET", f"/1.0/dedicated/server/{SVC}/task", [990, 880])
    recorder.on(
        "GET",
        f"/1.0/dedicated/server/{SVC}/task/990",
        {"taskId": 990, "function": "reinstallServer", "status": "doing"},
    )
    ticket = client.start_reinstall(SVC, hostname="h", ssh_public_key=KEY, user_login="u", user_password="p")
    assert ticket.task_id == "990"
    assert not [c for c in recorder.calls() if c.startswith("POST")]


@pytest.mark.parametrize("status", [404, 500])
def test_start_reinstall_posts_when_the_newest_task_cannot_be_read(recorder, client, status):
    """The newest reinstall task is most often the prep one, long done (and OVH purges old tasks):
    unreadable, it must not stand in for the release's wipe, or the release would follow it to its
    `done` and hand the box back unwiped. A second wipe is the safe side of the doubt."""
    serve_install_inputs(recorder)
    recorder.on("GET", f"/1.0/dedicated/server/{SVC}/task", [880])
    recorder.on(
        "GET", f"/1.0/dedicated/server/{SVC}/task/880", recorder.reply(status=status, body={"message": "x"})
    )
    recorder.on(
        "POST",
        f"/1.0/dedicated/server/{SVC}/reinstall",
        {"taskId": 991, "function": "reinstallServer", "status": "init"},
    )
    ticket = client.start_reinstall(SVC, hostname="h", ssh_public_key=KEY, user_login="u", user_password="p")
    assert ticket.task_id == "991"
    assert recorder.calls().count(f"POST /1.0/dedicated/server/{SVC}/reinstall") == 1


def test_start_reinstall_refused_while_one_runs_follows_the_running_one(recorder, client):
    serve_install_inputs(recorder)
    # Another release started one between our read and our POST.
    recorder.on("GET", f"/1.0/dedicated/server/{SVC}/task", [880], [990, 880])
    recorder.on(
        "GET",
        f"/1.0/dedicated/server/{SVC}/task/990",
        {"taskId": 990, "function": "reinstallServer", "status": "doing"},
    )
    recorder.on(
        "POST",
        f"/1.0/dedicated/server/{SVC}/reinstall",
        recorder.reply(
            status=400,
            body={
                "class": "Client::BadRequest::TaskAlreadyExists",
                "message": "A reinstallation is already in doing",
            },
        ),
    )
    ticket = client.start_reinstall(SVC, hostname="h", ssh_public_key=KEY, user_login="u", user_password="p")
    assert ticket.task_id == "990"
    assert recorder.calls().count(f"POST /1.0/dedicated/server/{SVC}/reinstall") == 1


def test_start_reinstall_whose_answer_is_lost_is_not_sent_twice(recorder, client):
    """A 502 after OVH created the task: the new reinstall task in the list is the answer."""
    serve_install_inputs(recorder)
    recorder.on("GET", f"/1.0/dedicated/server/{SVC}/task", [880], [880, 991])
    recorder.on(
        "POST", f"/1.0/dedicated/server/{SVC}/reinstall", recorder.reply(status=502, raw=b"Bad gateway")
    )

    ticket = client.start_reinstall(SVC, hostname="h", ssh_public_key=KEY, user_login="u", user_password="p")

    assert ticket.task_id == "991"
    assert recorder.calls().count(f"POST /1.0/dedicated/server/{SVC}/reinstall") == 1


def test_start_reinstall_sent_again_only_when_the_read_back_shows_nothing_started(recorder, client):
    serve_install_inputs(recorder)
    # Before the POST; read back at once and again after the retry delay; after the second POST.
    recorder.on("GET", f"/1.0/dedicated/server/{SVC}/task", [880], [880], [880], [880, 992])
    recorder.on(
        "POST",
        f"/1.0/dedicated/server/{SVC}/reinstall",
        recorder.reply(status=503, body={"message": "Service unavailable"}),
        {"taskId": 992, "function": "reinstallServer", "status": "init"},
    )
    ticket = client.start_reinstall(SVC, hostname="h", ssh_public_key=KEY, user_login="u", user_password="p")
    assert ticket.task_id == "992"
    assert recorder.calls().count(f"POST /1.0/dedicated/server/{SVC}/reinstall") == 2


def test_start_reinstall_refuses_two_keys_and_unknown_os(recorder, client):
    with pytest.raises(VendorInputError, match="single key on one line"):
        client.start_reinstall(
            SVC, hostname="h", ssh_public_key=KEY + "\n" + KEY, user_login="u", user_password="p"
        )
    serve_install_inputs(recorder)
    with pytest.raises(VendorInputError, match=r"no OVH template matches OS 'rocky_9' on ns3001234"):
        client.start_reinstall(
            SVC, hostname="h", ssh_public_key=KEY, user_login="u", user_password="p", os_label="rocky_9"
        )
    assert not [c for c in recorder.calls() if c.startswith("POST")]


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ("done", InstallState.DONE),
        ("doing", InstallState.RUNNING),
        ("todo", InstallState.RUNNING),
        ("init", InstallState.RUNNING),
        ("error", InstallState.FAILED),
        ("cancelled", InstallState.FAILED),
        ("customerError", InstallState.FAILED),
        ("ovhError", InstallState.FAILED),
    ],
)
def test_install_state_reads_the_tickets_own_task(recorder, client, status, state):
    recorder.on(
        "GET",
        f"/1.0/dedicated/server/{SVC}/task/57",
        {"taskId": 57, "function": "reinstallServer", "status": status},
    )
    assert client.install_state(SVC, Reinstall(vendor=Vendor.OVH, box_id=SVC, task_id="57")) is state
    assert recorder.calls()[1:] == [f"GET /1.0/dedicated/server/{SVC}/task/57"]


@pytest.mark.parametrize("status", [404, 500])
def test_an_unreadable_reinstall_task_reads_running_only_for_its_own_ticket(recorder, client, status):
    """OVH answers 404 or 500 for tasks in flight now and then. With the ticket of the install it
    follows (a release's), that reads RUNNING: an older, finished reinstall (the prep one) must never
    stand in for it, or a release ends while the box is still being wiped. Without a ticket nothing
    says the newest task is in flight (it may have ended long ago), so it is an error, never RUNNING:
    prep would promise to follow it, and start_reinstall, reading the same task as not running, would
    then wipe the box anew."""
    recorder.on("GET", f"/1.0/dedicated/server/{SVC}/task", [31, 57])
    recorder.on(
        "GET", f"/1.0/dedicated/server/{SVC}/task/57", recorder.reply(status=status, body={"message": "gone"})
    )
    recorder.on(
        "GET",
        f"/1.0/dedicated/server/{SVC}/task/31",
        {"taskId": 31, "function": "reinstallServer", "status": "done"},
    )

    assert (
        client.install_state(SVC, Reinstall(vendor=Vendor.OVH, box_id=SVC, task_id="57"))
        is InstallState.RUNNING
    )
    with pytest.raises(VendorError) as raised:
        client.install_state(SVC)
    # A plain VendorError: not a NotFoundError (the box is there) nor one to wait out as transient.
    assert type(raised.value) is VendorError
    assert (raised.value.status, raised.value.subject) == (status, SVC)
    assert str(raised.value) == (
        f"ovh: GET /dedicated/server/{{svc}}/task/{{taskId}} [{SVC}] failed (HTTP {status}): the newest "
        "reinstall task, 57, did not answer: whether an install runs cannot be told"
    )
    assert f"GET /1.0/dedicated/server/{SVC}/task/31" not in recorder.calls()


def test_wait_reinstall_sees_its_task_through_404s_with_backoff(recorder, sleeps):
    client = OvhClient(
        endpoint=f"{recorder.url}/1.0",
        application_key="app-key-1",
        application_secret=AS,
        consumer_key=CK,
        retry=RetryPolicy(max_attempts=1),
        poll=PollPolicy(first=1, factor=2, max_interval=5),
        sleep=sleeps.append,
        clock=lambda: sum(sleeps),
    )
    recorder.on("GET", "/1.0/auth/time", 1_700_000_000)
    gone = recorder.reply(
        status=404, body={"class": "Client::NotFound", "message": "The requested object does not exist"}
    )
    recorder.on(
        "GET",
        f"/1.0/dedicated/server/{SVC}/task/57",
        {"taskId": 57, "status": "todo"},
        gone,
        recorder.reply(status=500, body={"message": "Internal server error"}),
        {"taskId": 57, "status": "doing"},
        {"taskId": 57, "status": "done"},
    )
    client.wait_reinstall(Reinstall(vendor=Vendor.OVH, box_id=SVC, task_id="57"), timeout=60)
    # Starts short and backs off to the cap.
    assert sleeps == [1, 2, 4, 5]


@pytest.mark.parametrize("status", ["customerError", "ovhError", "cancelled", "error"])
def test_wait_reinstall_names_the_failure_status(recorder, client, status):
    recorder.on(
        "GET",
        f"/1.0/dedicated/server/{SVC}/task/57",
        {"taskId": 57, "function": "reinstallServer", "status": status},
    )
    with pytest.raises(TaskFailedError, match=rf"reinstall task 57 ended {status}") as raised:
        client.wait_reinstall(Reinstall(vendor=Vendor.OVH, box_id=SVC, task_id="57"), timeout=5)
    assert raised.value.code == status


def test_wait_reinstall_times_out_with_the_last_status(recorder, sleeps):
    clock = iter(range(0, 1000, 10))
    client = OvhClient(
        endpoint=f"{recorder.url}/1.0",
        application_key="app-key-1",
        application_secret=AS,
        consumer_key=CK,
        poll=PollPolicy(first=1, max_interval=10),
        sleep=sleeps.append,
        clock=lambda: float(next(clock)),
    )
    recorder.on("GET", "/1.0/auth/time", 1_700_000_000)
    recorder.on("GET", f"/1.0/dedicated/server/{SVC}/task/57", {"taskId": 57, "status": "doing"})
    with pytest.raises(TaskTimeoutError, match=r"reinstall task 57 not done after 30s \(last seen: doing\)"):
        client.wait_reinstall(Reinstall(vendor=Vendor.OVH, box_id=SVC, task_id="57"), timeout=30)


def test_install_state_pending_without_task(recorder, client):
    recorder.on("GET", f"/1.0/dedicated/server/{SVC}/task", [])
    assert client.install_state(SVC) is InstallState.PENDING
    assert recorder.calls()[1:] == [f"GET /1.0/dedicated/server/{SVC}/task?function=reinstallServer"]


def test_failover_target_escapes_the_block(recorder, client):
    recorder.on(
        "GET", "/1.0/ip/198.51.100.7%2F32", {"ip": "198.51.100.7/32", "routedTo": {"serviceName": SVC}}
    )
    assert client.failover_target("198.51.100.7") == SVC
    recorder.on(
        "GET", "/1.0/ip/198.51.100.7%2F32", {"ip": "198.51.100.7/32", "routedTo": {"serviceName": None}}
    )
    assert client.failover_target("198.51.100.7/32") is None
    assert_signed(recorder, recorder.requests[-1])


def test_move_failover_posts_and_waits_for_the_ip_task(recorder, client, sleeps):
    recorder.on(
        "GET",
        "/1.0/ip/198.51.100.7%2F32",
        {"routedTo": {"serviceName": "ns-other.eu"}},
        {"routedTo": {"serviceName": SVC}},
    )
    recorder.on("GET", "/1.0/ip/198.51.100.7%2F32/task", [70])
    recorder.on(
        "POST",
        "/1.0/ip/198.51.100.7%2F32/move",
        {"taskId": 77, "status": "init", "function": "genericMoveFloatingIp"},
    )
    recorder.on(
        "GET",
        "/1.0/ip/198.51.100.7%2F32/task/77",
        {"taskId": 77, "status": "todo"},
        {"taskId": 77, "status": "doing"},
        {"taskId": 77, "status": "done"},
    )

    client.move_failover("198.51.100.7", SVC)

    post = recorder.last("POST", "/1.0/ip/198.51.100.7%2F32/move")
    assert post.body == b'{"to":"ns3001234.ip-51-38-1.eu"}'
    assert_signed(recorder, post)
    assert recorder.calls().count("GET /1.0/ip/198.51.100.7%2F32/task/77") == 3
    assert recorder.calls().count("POST /1.0/ip/198.51.100.7%2F32/move") == 1
    assert sleeps == [0.01, 0.01]


def test_failover_move_state_reads_the_newest_move_task(recorder, client):
    recorder.on("GET", "/1.0/ip/198.51.100.7%2F32/task", [], [77, 70])
    recorder.on(
        "GET",
        "/1.0/ip/198.51.100.7%2F32/task/77",
        {"taskId": 77, "status": "doing"},
        recorder.reply(status=404, body={"message": "task not found"}),
    )
    assert client.failover_move_state("198.51.100.7") is None
    assert client.failover_move_state("198.51.100.7") == "move task 77: doing"
    assert client.failover_move_state("198.51.100.7") == "move task 77: no answer (404)"
    assert recorder.calls()[1:] == [
        "GET /1.0/ip/198.51.100.7%2F32/task?function=genericMoveFloatingIp",
        "GET /1.0/ip/198.51.100.7%2F32/task?function=genericMoveFloatingIp",
        "GET /1.0/ip/198.51.100.7%2F32/task/77",
        "GET /1.0/ip/198.51.100.7%2F32/task?function=genericMoveFloatingIp",
        "GET /1.0/ip/198.51.100.7%2F32/task/77",
    ]


def test_move_failover_whose_answer_is_lost_is_not_sent_twice(recorder, client):
    """The move went through, the answer did not: OVH routes the IP to the box; no second move."""
    recorder.on(
        "GET",
        "/1.0/ip/198.51.100.7%2F32",
        {"routedTo": {"serviceName": "ns-other.eu"}},
        {"routedTo": {"serviceName": SVC}},
    )
    recorder.on("GET", "/1.0/ip/198.51.100.7%2F32/task", [70])
    recorder.on(
        "POST",
        "/1.0/ip/198.51.100.7%2F32/move",
        recorder.reply(status=504, body={"message": "Gateway timeout"}),
    )
    client.move_failover("198.51.100.7", SVC)
    assert recorder.calls().count("POST /1.0/ip/198.51.100.7%2F32/move") == 1


def test_move_failover_refused_because_it_is_there_already_is_success(recorder, client):
    """OVH's answer to moving an IP where it is routed is undocumented: a refusal is settled by
    reading where the IP is (docs/vendor-behaviour.md)."""
    recorder.on(
        "GET",
        "/1.0/ip/198.51.100.7%2F32",
        {"routedTo": {"serviceName": "ns-other.eu"}},
        {"routedTo": {"serviceName": SVC}},
    )
    recorder.on("GET", "/1.0/ip/198.51.100.7%2F32/task", [])
    recorder.on(
        "POST",
        "/1.0/ip/198.51.100.7%2F32/move",
        recorder.reply(status=400, body={"class": "Client::BadRequest", "message": "already routed"}),
    )
    client.move_failover("198.51.100.7", SVC)
    assert recorder.calls().count("POST /1.0/ip/198.51.100.7%2F32/move") == 1


def test_move_failover_refused_while_another_move_runs_follows_it(recorder, client):
    """OVH runs one move of an IP at a time: a deploy's move while the watcher's runs is refused.
    The running move (older than this call) is followed; it took the IP where this one would."""
    recorder.on(
        "GET",
        "/1.0/ip/198.51.100.7%2F32",
        {"routedTo": {"serviceName": "ns-other.eu"}},
        {"routedTo": {"serviceName": "ns-other.eu"}},
        {"routedTo": {"serviceName": SVC}},
    )
    recorder.on("GET", "/1.0/ip/198.51.100.7%2F32/task", [41])
    recorder.on(
        "POST",
        "/1.0/ip/198.51.100.7%2F32/move",
        recorder.reply(
            status=409,
            body={"class": "Client::Conflict::TaskAlreadyExists", "message": "a task already runs"},
        ),
    )
    recorder.on(
        "GET",
        "/1.0/ip/198.51.100.7%2F32/task/41",
        {"taskId": 41, "status": "doing"},
        {"taskId": 41, "status": "doing"},
        {"taskId": 41, "status": "done"},
    )
    client.move_failover("198.51.100.7", SVC)
    assert recorder.calls().count("POST /1.0/ip/198.51.100.7%2F32/move") == 1
    assert recorder.calls().count("GET /1.0/ip/198.51.100.7%2F32/task/41") == 3


def test_move_failover_after_another_move_that_went_elsewhere_moves_once_more(recorder, client):
    recorder.on(
        "GET",
        "/1.0/ip/198.51.100.7%2F32",
        {"routedTo": {"serviceName": "ns-other.eu"}},
        {"routedTo": {"serviceName": "ns-other.eu"}},
        {"routedTo": {"serviceName": "ns-third.eu"}},  # where the other move took it
        {"routedTo": {"serviceName": "ns-third.eu"}},
        {"routedTo": {"serviceName": SVC}},
    )
    recorder.on("GET", "/1.0/ip/198.51.100.7%2F32/task", [41], [41], [41], [42, 41])
    recorder.on(
        "POST",
        "/1.0/ip/198.51.100.7%2F32/move",
        recorder.reply(
            status=409,
            body={"class": "Client::Conflict::TaskAlreadyExists", "message": "a task already runs"},
        ),
        {"taskId": 42, "status": "init", "function": "genericMoveFloatingIp"},
    )
    recorder.on(
        "GET", "/1.0/ip/198.51.100.7%2F32/task/41", {"taskId": 41, "status": "doing"}, {"status": "done"}
    )
    recorder.on("GET", "/1.0/ip/198.51.100.7%2F32/task/42", {"taskId": 42, "status": "done"})
    client.move_failover("198.51.100.7", SVC)
    assert recorder.calls().count("POST /1.0/ip/198.51.100.7%2F32/move") == 2
    assert recorder.calls().count("GET /1.0/ip/198.51.100.7%2F32/task/42") == 1


def test_move_failover_is_a_noop_when_already_routed(recorder, client):
    recorder.on("GET", "/1.0/ip/198.51.100.7%2F32", {"routedTo": {"serviceName": SVC}})
    client.move_failover("198.51.100.7", SVC)
    assert not [c for c in recorder.calls() if c.startswith("POST")]


def test_move_failover_task_failure_and_timeout(recorder, client):
    recorder.on("GET", "/1.0/ip/198.51.100.7%2F32", {"routedTo": {"serviceName": "ns-other.eu"}})
    recorder.on("GET", "/1.0/ip/198.51.100.7%2F32/task", [])
    recorder.on("POST", "/1.0/ip/198.51.100.7%2F32/move", {"taskId": 78})
    recorder.on(
        "GET",
        "/1.0/ip/198.51.100.7%2F32/task/78",
        {"taskId": 78, "status": "ovhError", "comment": "nexthop down"},
    )
    with pytest.raises(TaskFailedError, match=r"IP move task 78 ended ovhError: nexthop down"):
        client.move_failover("198.51.100.7", SVC)

    slow = OvhClient(
        endpoint=f"{recorder.url}/1.0",
        application_key="k",
        application_secret=AS,
        consumer_key=CK,
        poll=PollPolicy(first=0.01, max_interval=0.01),
        task_timeout=0.05,
    )
    recorder.on("GET", "/1.0/ip/198.51.100.7%2F32/task/78", {"taskId": 78, "status": "doing"})
    with pytest.raises(TaskTimeoutError, match=r"IP move task 78 still 'doing' after 0s"):
        slow.move_failover("198.51.100.7", SVC)


def test_transient_errors_are_retried_honouring_retry_after(recorder, client, sleeps):
    recorder.on(
        "GET",
        "/1.0/dedicated/server",
        recorder.reply(status=429, body={"message": "Too many requests"}, headers={"Retry-After": "0.02"}),
        recorder.reply(status=502, raw=b"<html>Bad gateway</html>"),
        [SVC],
    )
    recorder.on("GET", f"/1.0/dedicated/server/{SVC}", server_body())
    recorder.on("GET", f"/1.0/dedicated/server/{SVC}/serviceInfos", {"serviceId": 4242})
    recorder.on("GET", "/1.0/services/4242", {"resource": {"displayName": "tuist-kura-staging"}})

    assert [b.id for b in client.list_boxes()] == [SVC]
    assert recorder.calls().count("GET /1.0/dedicated/server") == 3
    assert sleeps[0] == 0.02  # Retry-After followed
    assert 0 < sleeps[1] <= 0.05  # capped jittered backoff


def test_transient_error_surfaces_after_the_attempt_bound(recorder, client):
    recorder.on("GET", "/1.0/dedicated/server", recorder.reply(status=503, body={"message": "Maintenance"}))
    with pytest.raises(TransientVendorError) as raised:
        client.list_boxes()
    assert str(raised.value) == "ovh: GET /dedicated/server failed (HTTP 503): Maintenance"
    assert recorder.calls().count("GET /1.0/dedicated/server") == 3


def test_auth_and_not_found_are_typed_and_never_echo_secrets(recorder, client):
    recorder.on(
        "GET",
        "/1.0/dedicated/server",
        recorder.reply(
            status=403,
            body={"errorCode": "INVALID_CREDENTIAL", "message": f"This credential {CK} is not valid"},
        ),
    )
    with pytest.raises(AuthError) as raised:
        client.list_boxes()
    assert raised.value.code == "INVALID_CREDENTIAL"
    assert CK not in str(raised.value) and AS not in str(raised.value)
    assert "This credential *** is not valid" in str(raised.value)
    assert recorder.calls().count("GET /1.0/dedicated/server") == 1

    recorder.on(
        "GET",
        f"/1.0/dedicated/server/{SVC}",
        recorder.reply(status=404, body={"class": "Client::NotFound", "message": "not found"}),
    )
    with pytest.raises(NotFoundError, match=r"HTTP 404 Client::NotFound\): not found"):
        client.get_box(SVC)


def test_connection_refused_is_transient(sleeps):
    dead = OvhClient(
        endpoint="http://127.0.0.1:9/1.0",
        application_key="k",
        application_secret=AS,
        consumer_key=CK,
        retry=RetryPolicy(max_attempts=2, base_delay=0, max_delay=0),
        sleep=sleeps.append,
    )
    with pytest.raises(TransientVendorError, match=r"connection failed: ConnectionError"):
        dead.list_boxes()
    assert len(sleeps) == 1


def test_bad_input_is_refused_before_any_call(recorder, client):
    with pytest.raises(VendorInputError, match=r"OVH box id '../me' is not a service name"):
        client.get_box("../me")
    with pytest.raises(VendorInputError, match=r"OVH failover IP 'nope' is not an IP address or block"):
        client.failover_target("nope")
    with pytest.raises(VendorInputError, match=r"OVH endpoint 'ovh-mars' is neither a known key"):
        OvhClient(endpoint="ovh-mars", application_key="k", application_secret="s", consumer_key="c")
    with pytest.raises(VendorInputError, match="OvhClient: consumer_key is empty"):
        OvhClient(endpoint="ovh-eu", application_key="k", application_secret="s", consumer_key="")
    assert recorder.calls() == []


def test_register_ssh_key_needs_no_call(recorder, client):
    assert client.register_ssh_key("fleet", KEY) is None
    assert recorder.calls() == []


def test_set_marker_field_puts_the_new_marker_keeping_the_claim(recorder, client):
    serve_box(recorder, "ns3001234--c-0123456789ab")
    recorder.on("PUT", "/1.0/service/4242", recorder.reply(status=200))
    client.set_marker_field(SVC, "tuist-kura-staging-ns3001234")
    assert recorder.last("PUT", "/1.0/service/4242").json() == {
        "resource": {"displayName": "tuist-kura-staging-ns3001234--c-0123456789ab", "name": SVC}
    }
    serve_box(recorder, "tuist-kura-staging-ns3001234")
    before = len(recorder.calls())
    client.set_marker_field(SVC, "tuist-kura-staging-ns3001234")  # already so: no write
    assert not [c for c in recorder.calls()[before:] if c.startswith("PUT")]
