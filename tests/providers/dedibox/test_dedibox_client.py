"""DediboxClient against a recording HTTP server: exact requests, SDK-decoded answers."""

from __future__ import annotations

import pytest

from config.models import Vendor
from providers.dedibox.client import DediboxClient
from providers.dedibox.models import decode_server, install_digest
from providers.errors import (
    AuthError,
    TaskFailedError,
    TaskTimeoutError,
    TransientVendorError,
    VendorError,
    VendorInputError,
)
from providers.retry import PollPolicy, RetryPolicy
from providers.vendor import Box, Claim, InstallState, Reinstall

SECRET = "5f0c1a36-8a54-4a31-9a8b-0e7c3a1e9d21"
PROJECT = "b3f1c2d4-0000-4000-8000-00000000abcd"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDedi fleet@tuist"
ZONE = "fr-par-2"
SERVERS = f"/dedibox/v1/zones/{ZONE}/servers"


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def client(recorder, sleeps) -> DediboxClient:
    return DediboxClient(
        api_url=recorder.url,
        secret_key=SECRET,
        project_id=PROJECT,
        zones=[ZONE],
        retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05),
        poll=PollPolicy(first=0.01, max_interval=0.01),
        task_timeout=2,
        sleep=sleeps.append,
    )


def server_detail(server_id: int = 104523, tags=None, os=True, status="ready") -> dict:
    """Shaped like GET /dedibox/v1/zones/{zone}/servers/{id} answers."""
    return {
        "id": server_id,
        "organization_id": "org-1",
        "project_id": PROJECT,
        "hostname": "sd-104523",
        "rebooted_at": "2026-01-03T10:00:00Z",
        "status": status,
        "abuse_contact": "abuse@example.com",
        "interfaces": [
            {
                "card_id": 1,
                "device_id": 1,
                "mac": "00:08:a2:0c:11:22",
                "type": "public",
                "ips": [
                    {
                        "ip_id": 1,
                        "address": "10.88.1.2",
                        "reverse": "",
                        "version": "ipv4",
                        "cidr": 24,
                        "netmask": "255.255.255.0",
                        "semantic": "private",
                        "gateway": "10.88.1.1",
                        "status": "ready",
                    },
                    {
                        "ip_id": 2,
                        "address": "163.172.10.20",
                        "reverse": "sd-104523.dedibox.fr",
                        "version": "ipv4",
                        "cidr": 24,
                        "netmask": "255.255.255.0",
                        "semantic": "public",
                        "gateway": "163.172.10.1",
                        "status": "ready",
                    },
                ],
            }
        ],
        "zone": ZONE,
        "options": [],
        "has_bmc": False,
        "tags": ["tuist-kura-staging", f"tuist-claim:{'a' * 12}"] if tags is None else tags,
        "is_outsourced": False,
        "ipv6_slaac": False,
        "qinq": False,
        "is_rpnv2_member": False,
        "is_hds": False,
        "created_at": "2025-04-01T00:00:00Z",
        "updated_at": "2026-01-03T10:00:00Z",
        "expired_at": None,
        "offer": {"id": 3321, "name": "Start-1-M-SSD", "catalog": "server", "payment_frequency": "monthly"},
        "location": {"rack": "B12", "room": "S2", "datacenter_name": "DC2"},
        "os": {
            "id": 412,
            "name": "Ubuntu",
            "type": "server",
            "version": "24.04 LTS",
            "arch": "x64",
            "allow_custom_partitioning": True,
            "allow_ssh_keys": True,
            "requires_user": True,
            "requires_admin_password": False,
            "requires_panel_password": False,
            "allowed_filesystems": [],
            "requires_license": False,
            "license_offers": [],
            "display_name": "Ubuntu 24.04",
        }
        if os
        else None,
        "level": None,
        "rescue_os": None,
    }


def test_sdk_decodes_a_real_shaped_server():
    server = decode_server(server_detail())
    assert (server.id, server.hostname, str(server.status)) == (104523, "sd-104523", "ready")
    assert server.location.datacenter_name == "DC2"
    assert server.offer.name == "Start-1-M-SSD"
    assert server.os.version == "24.04 LTS"
    assert [ip.address for i in server.interfaces for ip in i.ips] == ["10.88.1.2", "163.172.10.20"]


def test_a_box_gone_between_the_listing_and_its_read_is_left_out_not_the_whole_account(recorder, client):
    recorder.on("GET", SERVERS, {"total_count": 2, "servers": [{"id": 104523}, {"id": 104524}]})
    recorder.on(
        "GET", f"{SERVERS}/104523", recorder.reply(status=404, body={"type": "not_found", "message": "gone"})
    )
    recorder.on("GET", f"{SERVERS}/104524", server_detail(104524))

    assert [box.id for box in client.list_boxes()] == ["fr-par-2/104524"]


def test_list_boxes_pages_summaries_and_reads_each_detail(recorder, client):
    recorder.on(
        "GET",
        SERVERS,
        {
            "total_count": 2,
            "servers": [{"id": 104523, "datacenter_name": "DC2", "offer_name": "Start-1-M-SSD"}],
        },
        {"total_count": 2, "servers": [{"id": 104524}]},
    )
    recorder.on("GET", f"{SERVERS}/104523", server_detail())
    recorder.on("GET", f"{SERVERS}/104524", server_detail(104524, tags=["tuist-kura-production"], os=False))

    boxes = client.list_boxes()

    assert boxes[0] == Box(
        vendor=Vendor.DEDIBOX,
        id="fr-par-2/104523",
        name="sd-104523",
        datacenter="DC2",
        public_ipv4="163.172.10.20",
        state="ready",
        offer="Start-1-M-SSD",
        marker_field="tuist-kura-staging",
        claim=Claim("a" * 12),
        has_os=True,
        tags=("tuist-kura-staging",),
    )
    assert (boxes[1].id, boxes[1].claim, boxes[1].has_os) == ("fr-par-2/104524", None, False)
    assert recorder.calls() == [
        f"GET {SERVERS}?project_id={PROJECT}&page=1&page_size=100",
        f"GET {SERVERS}?project_id={PROJECT}&page=2&page_size=100",
        f"GET {SERVERS}/104523",
        f"GET {SERVERS}/104524",
    ]
    for recorded in recorder.requests:
        assert recorded.headers["x-auth-token"] == SECRET
    recorder.on("GET", SERVERS, {"total_count": 2, "servers": [{"id": 104523}, {"id": 104524}]})
    assert [b.id for b in client.boxes_with_marker("tuist-kura-production")] == ["fr-par-2/104524"]


def test_set_claim_posts_all_tags(recorder, client):
    recorder.on("GET", f"{SERVERS}/104523", server_detail())
    recorder.on("POST", f"{SERVERS}/104523/tags", server_detail())

    client.set_claim("fr-par-2/104523", Claim("b" * 12, releasing=True))

    # The claim tag an earlier version wrote (tuist-claim:<token>) is replaced by the current form.
    post = recorder.last("POST", f"{SERVERS}/104523/tags")
    assert post.json() == {"tags": ["tuist-kura-staging", f"tuist-releasing-{'b' * 12}"]}
    assert post.headers["content-type"] == "application/json"
    recorder.on(
        "GET", f"{SERVERS}/104523", server_detail(tags=["tuist-kura-staging", f"tuist-claim-{'a' * 12}"])
    )
    client.set_claim("fr-par-2/104523", Claim("a" * 12))  # already so: no write
    assert recorder.calls().count(f"POST {SERVERS}/104523/tags") == 1


def test_set_claim_whose_answer_is_lost_is_written_again(recorder, client, sleeps):
    """The tag list is a whole value: writing it again is safe, so a lost answer is retried."""
    recorder.on("GET", f"{SERVERS}/104523", server_detail(tags=["tuist-kura-staging"]))
    recorder.on(
        "POST", f"{SERVERS}/104523/tags", recorder.reply(status=502, raw=b"bad gateway"), server_detail()
    )
    client.set_claim("fr-par-2/104523", Claim("b" * 12))
    assert recorder.calls().count(f"POST {SERVERS}/104523/tags") == 2


def test_register_ssh_key_is_idempotent_by_key(recorder, client):
    recorder.on(
        "GET",
        "/iam/v1alpha1/ssh-keys",
        {
            "total_count": 1,
            "ssh_keys": [{"id": "key-1", "name": "old-name", "public_key": KEY.replace("fleet@", "x@")}],
        },
    )
    assert client.register_ssh_key("tuist-fleet", KEY + "\n") == "key-1"
    assert recorder.calls() == [f"GET /iam/v1alpha1/ssh-keys?project_id={PROJECT}&page=1&page_size=100"]

    recorder.on("GET", "/iam/v1alpha1/ssh-keys", {"total_count": 0, "ssh_keys": []})
    recorder.on("POST", "/iam/v1alpha1/ssh-keys", {"id": "key-2", "name": "tuist-fleet", "public_key": KEY})
    assert client.register_ssh_key("tuist-fleet", KEY) == "key-2"
    assert recorder.last("POST", "/iam/v1alpha1/ssh-keys").json() == {
        "name": "tuist-fleet",
        "public_key": KEY,
        "project_id": PROJECT,
    }


def test_register_ssh_key_lists_again_when_a_parallel_release_created_it_first(recorder, client):
    listing = "/iam/v1alpha1/ssh-keys"
    recorder.on(
        "GET",
        listing,
        {"total_count": 0, "ssh_keys": []},
        {"total_count": 1, "ssh_keys": [{"id": "key-9", "name": "tuist-fleet", "public_key": KEY}]},
    )
    conflict = {"message": "resource already exists", "resource": "iam_ssh_key", "type": "conflict"}
    recorder.on("POST", listing, recorder.reply(conflict, status=409))

    assert client.register_ssh_key("tuist-fleet", KEY) == "key-9"
    query = f"{listing}?project_id={PROJECT}&page=1&page_size=100"
    assert recorder.calls() == [f"GET {query}", f"POST {listing}", f"GET {query}"]


def test_register_ssh_key_conflict_without_the_key_listed_is_raised(recorder, client):
    listing = "/iam/v1alpha1/ssh-keys"
    recorder.on("GET", listing, {"total_count": 0, "ssh_keys": []})
    conflict = {"message": "resource already exists", "resource": "iam_ssh_key", "type": "conflict"}
    recorder.on("POST", listing, recorder.reply(conflict, status=409))

    with pytest.raises(VendorError, match=r"resource already exists") as caught:
        client.register_ssh_key("tuist-fleet", KEY)
    assert caught.value.status == 409


def serve_install_inputs(recorder) -> None:
    recorder.on(
        "GET",
        f"/dedibox/v1/zones/{ZONE}/os",
        {
            "total_count": 2,
            "os": [
                {
                    "id": 401,
                    "name": "Ubuntu",
                    "version": "22.04 LTS",
                    "allow_ssh_keys": True,
                    "requires_user": True,
                },
                server_detail()["os"],
            ],
        },
    )
    recorder.on(
        "GET", "/iam/v1alpha1/ssh-keys", {"total_count": 1, "ssh_keys": [{"id": "key-1", "public_key": KEY}]}
    )
    # Shaped like the SDK's Partition: a `type` the install's InstallPartition does not take, and
    # whatever else the API may add.
    parts = [
        {
            "type": "primary",
            "file_system": "ext4",
            "raid_level": "raid1",
            "capacity": 1024,
            "connectors": ["sda", "sdb"],
            "mount_point": "/boot",
        },
        {
            "type": "logical",
            "file_system": "swap",
            "raid_level": "no_raid",
            "capacity": 2048,
            "connectors": ["sda"],
            "mount_point": None,
            "label": "swap0",
        },
    ]
    recorder.on("GET", f"{SERVERS}/104523/partitioning/412", {"partitions": parts})


def test_start_reinstall_posts_the_exact_install_body(recorder, client):
    serve_install_inputs(recorder)
    recorder.on(
        "GET", f"{SERVERS}/104523/install", {"os_id": 412, "hostname": "sd-104523", "status": "installed"}
    )
    recorder.on(
        "POST", f"{SERVERS}/104523/install", {"os_id": 412, "hostname": "kura-eu-1", "status": "booting"}
    )

    ticket = client.start_reinstall(
        "fr-par-2/104523",
        hostname="kura-eu-1",
        ssh_public_key=KEY,
        user_login="tuist",
        user_password="s3cret-sudo",
    )

    assert recorder.calls()[:1] == [
        f"GET /dedibox/v1/zones/{ZONE}/os?project_id={PROJECT}&page=1&page_size=100&server_id=104523"
    ]
    # Sent, not seen running yet: the record before the POST is the baseline a stale `installed` matches.
    assert ticket == Reinstall(
        vendor=Vendor.DEDIBOX,
        box_id="fr-par-2/104523",
        started_running=False,
        baseline=install_digest({"os_id": 412, "hostname": "sd-104523", "status": "installed"}),
    )
    post = recorder.last("POST", f"{SERVERS}/104523/install")
    assert post.json() == {
        "os_id": 412,
        "hostname": "kura-eu-1",
        "ssh_key_ids": ["key-1"],
        "user_login": "tuist",
        "user_password": "s3cret-sudo",
        "root_password": "",
        # Exactly InstallPartition's fields, in its order: no `type`, nothing else the answer had.
        "partitions": [
            {
                "file_system": "ext4",
                "raid_level": "raid1",
                "capacity": 1024,
                "connectors": ["sda", "sdb"],
                "mount_point": "/boot",
            },
            {
                "file_system": "swap",
                "raid_level": "no_raid",
                "capacity": 2048,
                "connectors": ["sda"],
                "mount_point": None,
            },
        ],
    }
    assert post.body.decode().count('"type"') == 0


def test_install_partitions_are_exactly_the_sdks_install_partition_fields():
    import dataclasses

    from scaleway.dedibox.v1.types import InstallPartition, Partition

    from providers.dedibox.models import install_partitions

    names = [f.name for f in dataclasses.fields(InstallPartition)]
    assert "type_" in {f.name for f in dataclasses.fields(Partition)} and "type_" not in names
    plan = {
        "partitions": [
            {
                "type": "extended",
                "file_system": "xfs",
                "raid_level": "raid10",
                "capacity": 7,
                "connectors": ["nvme0n1", "nvme1n1"],
                "mount_point": "/data",
            }
        ]
    }
    [sent] = install_partitions(plan)
    assert list(sent) == names
    assert sent == {
        "file_system": "xfs",
        "raid_level": "raid10",
        "capacity": 7,
        "connectors": ["nvme0n1", "nvme1n1"],
        "mount_point": "/data",
    }
    assert install_partitions(None) == [] and install_partitions({"partitions": []}) == []


def test_refused_install_while_one_runs_follows_the_running_one(recorder, client):
    """Dedibox names no error class for "an install runs": the server's own install status says."""
    serve_install_inputs(recorder)
    recorder.on(
        "POST",
        f"{SERVERS}/104523/install",
        recorder.reply(
            status=400,
            body={"type": "invalid_request_error", "message": "server is busy"},
            headers={"x-request-id": "req-91"},
        ),
    )
    recorder.on(
        "GET",
        f"{SERVERS}/104523/install",
        {"os_id": 412, "hostname": "sd-104523", "status": "installed"},
        {"os_id": 412, "hostname": "h", "status": "partitioning"},
    )
    ticket = client.start_reinstall(
        "fr-par-2/104523", hostname="h", ssh_public_key=KEY, user_login="tuist", user_password="pw"
    )
    assert ticket.box_id == "fr-par-2/104523"
    assert recorder.calls().count(f"POST {SERVERS}/104523/install") == 1

    recorder.on("GET", f"{SERVERS}/104523/install", {"os_id": 412, "hostname": "h", "status": "installed"})
    with pytest.raises(VendorError) as plain:
        client.start_reinstall(
            "fr-par-2/104523", hostname="h", ssh_public_key=KEY, user_login="tuist", user_password="pw"
        )
    assert plain.value.request_id == "req-91"
    assert str(plain.value) == (
        "dedibox: POST /dedibox/v1/zones/{zone}/servers/{server_id}/install [fr-par-2/104523] failed "
        "(HTTP 400 invalid_request_error): server is busy (request id req-91)"
    )


def test_start_reinstall_while_an_install_runs_follows_it_without_posting(recorder, client):
    serve_install_inputs(recorder)
    recorder.on(
        "GET", f"{SERVERS}/104523/install", {"os_id": 412, "hostname": "kura-eu-1", "status": "formatting"}
    )
    ticket = client.start_reinstall(
        "fr-par-2/104523", hostname="kura-eu-1", ssh_public_key=KEY, user_login="tuist", user_password="pw"
    )
    assert ticket.started_running
    assert not [c for c in recorder.calls() if c.startswith("POST")]


def test_install_whose_answer_is_lost_is_not_sent_twice(recorder, client):
    """A 502 after Dedibox started the install: the install record changed and runs."""
    serve_install_inputs(recorder)
    recorder.on(
        "GET",
        f"{SERVERS}/104523/install",
        {"os_id": 412, "hostname": "sd-104523", "status": "installed"},
        {"os_id": 412, "hostname": "kura-eu-1", "status": "booting"},
    )
    recorder.on("POST", f"{SERVERS}/104523/install", recorder.reply(status=502, raw=b"bad gateway"))
    ticket = client.start_reinstall(
        "fr-par-2/104523", hostname="kura-eu-1", ssh_public_key=KEY, user_login="tuist", user_password="pw"
    )
    assert ticket.started_running
    assert recorder.calls().count(f"POST {SERVERS}/104523/install") == 1


def test_install_whose_answer_is_lost_is_sent_again_when_the_record_did_not_change(recorder, client):
    serve_install_inputs(recorder)
    before = {"os_id": 412, "hostname": "sd-104523", "status": "installed"}
    recorder.on(
        "GET",
        f"{SERVERS}/104523/install",
        before,
        before,  # read back at once,
        before,  # and again after the retry delay: nothing started, so the POST goes again
        {"os_id": 412, "hostname": "h", "status": "booting"},
    )
    recorder.on(
        "POST",
        f"{SERVERS}/104523/install",
        recorder.reply(status=503, body={"message": "maintenance"}),
        {"os_id": 412, "hostname": "h", "status": "booting"},
    )
    client.start_reinstall(
        "fr-par-2/104523", hostname="h", ssh_public_key=KEY, user_login="tuist", user_password="pw"
    )
    assert recorder.calls().count(f"POST {SERVERS}/104523/install") == 2


def test_start_reinstall_refuses_missing_password_before_any_call(recorder, client):
    with pytest.raises(VendorInputError, match="user_login and user_password are required"):
        client.start_reinstall(
            "fr-par-2/104523", hostname="h", ssh_public_key=KEY, user_login="tuist", user_password=""
        )
    with pytest.raises(VendorInputError, match=r"Dedibox box id 'fr-par-2:1' is not '<zone>/<server id>'"):
        client.get_box("fr-par-2:1")
    assert recorder.calls() == []


@pytest.mark.parametrize(
    ("install", "server", "state"),
    [
        ({"status": "installed"}, None, InstallState.DONE),
        ({"status": "installing"}, None, InstallState.RUNNING),
        ({"status": "configuring_bootloader"}, None, InstallState.RUNNING),
        ({"status": "unknown"}, server_detail(status="error"), InstallState.FAILED),
        ({"status": "unknown"}, server_detail(), InstallState.PENDING),
        (None, server_detail(), InstallState.DONE),
        (None, server_detail(os=False), InstallState.PENDING),
    ],
)
def test_install_state_mapping_with_404_fallback(recorder, client, install, server, state):
    recorder.on(
        "GET",
        f"{SERVERS}/104523/install",
        recorder.reply(status=404, body={"type": "not_found", "message": "no install"})
        if install is None
        else install,
    )
    if server is not None:
        recorder.on("GET", f"{SERVERS}/104523", server)
    assert client.install_state("fr-par-2/104523") is state


@pytest.mark.parametrize(
    ("install", "server", "state"),
    [
        ({"status": "installed"}, None, InstallState.DONE),
        ({"status": "booting"}, None, InstallState.RUNNING),
        ({"status": "unknown"}, server_detail(status="error"), InstallState.FAILED),
        ({"status": "unknown"}, server_detail(status="installing"), InstallState.RUNNING),
        # The record gone mid-install: never DONE because the server still shows its old OS.
        (None, server_detail(), InstallState.RUNNING),
        (None, server_detail(status="error"), InstallState.FAILED),
        (None, server_detail(status="locked"), InstallState.FAILED),
    ],
)
def test_install_state_of_an_install_this_client_started(recorder, client, install, server, state):
    recorder.on(
        "GET",
        f"{SERVERS}/104523/install",
        recorder.reply(status=404, body={"type": "not_found", "message": "no install"})
        if install is None
        else install,
    )
    if server is not None:
        recorder.on("GET", f"{SERVERS}/104523", server)
    ticket = Reinstall(vendor=Vendor.DEDIBOX, box_id="fr-par-2/104523")
    assert client.install_state("fr-par-2/104523", ticket) is state


def test_wait_reinstall_fails_naming_the_state_and_backs_off(recorder, sleeps):
    client = DediboxClient(
        api_url=recorder.url,
        secret_key=SECRET,
        project_id=PROJECT,
        zones=[ZONE],
        poll=PollPolicy(first=0.5, factor=2, max_interval=1.5),
        sleep=sleeps.append,
        clock=lambda: sum(sleeps),
    )
    recorder.on(
        "GET",
        f"{SERVERS}/104523/install",
        {"status": "booting"},
        {"status": "partitioning"},
        {"status": "installing"},
        {"status": "unknown"},
    )
    recorder.on("GET", f"{SERVERS}/104523", server_detail(status="error"))
    with pytest.raises(TaskFailedError, match=r"the install failed \(install unknown, server error\)"):
        client.wait_reinstall(Reinstall(vendor=Vendor.DEDIBOX, box_id="fr-par-2/104523"), timeout=60)
    assert sleeps == [0.5, 1.0, 1.5]


def fip(server_id, status="ready"):
    return {
        "id": 9001,
        "address": "212.83.160.7",
        "status": status,
        "server_id": server_id,
        "server_zone": ZONE,
        "mac": None,
        "type": "unknown_type",
        "reverse": "",
        "ip_version": "ipv4",
        "cidr": 32,
    }


def test_failover_target_and_move_with_exact_attach_body(recorder, client, sleeps):
    fips = f"/dedibox/v1/zones/{ZONE}/failover-ips"
    recorder.on("GET", fips, {"total_count": 1, "failover_ips": [fip(104524)]})
    assert client.failover_target("212.83.160.7") == "fr-par-2/104524"

    recorder.on("POST", f"{fips}/attach", {"failover_ips": [fip(104523, "busy")]})
    recorder.on("GET", f"{fips}/9001", fip(104523, "busy"), fip(104523, "ready"))
    client.move_failover("212.83.160.7", "fr-par-2/104523")

    assert recorder.last("POST", f"{fips}/attach").body == b'{"server_id": 104523, "fips_ids": [9001]}'
    assert recorder.calls()[-3:] == [f"POST {fips}/attach", f"GET {fips}/9001", f"GET {fips}/9001"]
    assert sleeps == [0.01]


def test_failover_move_state_is_the_failover_ips_status(recorder, client):
    fips = f"/dedibox/v1/zones/{ZONE}/failover-ips"
    recorder.on("GET", fips, {"total_count": 1, "failover_ips": [fip(104524)]})
    recorder.on("GET", f"{fips}/9001", fip(104523, "busy"))
    assert client.failover_move_state("212.83.160.7") == "failover IP busy"
    assert recorder.calls()[-1] == f"GET {fips}/9001"


def test_attach_refused_while_the_ip_is_elsewhere_detaches_first(recorder, client):
    """Whether Dedibox moves an IP attached elsewhere on attach is undocumented: a refusal is
    answered with detach, then attach (docs/vendor-behaviour.md)."""
    fips = f"/dedibox/v1/zones/{ZONE}/failover-ips"
    recorder.on("GET", fips, {"total_count": 1, "failover_ips": [fip(104524)]})
    refused = {
        "type": "invalid_request_error",
        "message": "failover ip is attached to server 104524: detach it first",
    }
    recorder.on("POST", f"{fips}/attach", recorder.reply(status=400, body=refused), {})
    recorder.on("POST", f"{fips}/detach", {})
    recorder.on(
        "GET",
        f"{fips}/9001",
        fip(104524),  # after the refusal: still elsewhere
        fip(104524, "busy"),  # detaching
        fip(None),  # detached
        fip(104523, "busy"),
        fip(104523),
    )
    client.move_failover("212.83.160.7", "fr-par-2/104523")
    posts = [(r.path, r.json()) for r in recorder.requests if r.method == "POST"]
    assert posts == [
        (f"{fips}/attach", {"server_id": 104523, "fips_ids": [9001]}),
        (f"{fips}/detach", {"fips_ids": [9001]}),
        (f"{fips}/attach", {"server_id": 104523, "fips_ids": [9001]}),
    ]
    assert recorder.calls() == [
        f"GET {fips}?project_id={PROJECT}&page=1&page_size=100",
        f"POST {fips}/attach",
        f"GET {fips}/9001",
        f"POST {fips}/detach",
        f"GET {fips}/9001",
        f"GET {fips}/9001",
        f"POST {fips}/attach",
        f"GET {fips}/9001",
        f"GET {fips}/9001",
    ]


FIPS = f"/dedibox/v1/zones/{ZONE}/failover-ips"
LIST_FIPS = f"GET {FIPS}?project_id={PROJECT}&page=1&page_size=100"
ATTACHED_ELSEWHERE = {
    "type": "invalid_request_error",
    "message": "failover ip 212.83.160.7 is attached to server 104524: detach it first",
}
SERVER_FULL = {"type": "invalid_request_error", "message": "server 104523 cannot take more failover IPs"}
FIP_BUSY = {"type": "invalid_request_error", "message": "failover ip 212.83.160.7 is busy"}


def posts(recorder) -> list[tuple[str, dict]]:
    return [(r.path.rsplit("/", 1)[1], r.json()) for r in recorder.requests if r.method == "POST"]


def test_an_attach_refused_while_the_ip_is_on_no_server_is_not_answered_with_a_detach(recorder, client):
    """A refusal while the IP is on no server (here the target takes no more failover IPs) has
    nothing to detach: the error is raised as it came, and nothing else is sent."""
    recorder.on("GET", FIPS, {"total_count": 1, "failover_ips": [fip(None)]})
    recorder.on("POST", f"{FIPS}/attach", recorder.reply(status=400, body=SERVER_FULL))
    recorder.on("GET", f"{FIPS}/9001", fip(None))
    with pytest.raises(VendorError) as raised:
        client.move_failover("212.83.160.7", "fr-par-2/104523")
    assert type(raised.value) is VendorError
    assert str(raised.value) == (
        "dedibox: POST /dedibox/v1/zones/{zone}/failover-ips/attach [212.83.160.7] failed (HTTP 400 "
        "invalid_request_error): server 104523 cannot take more failover IPs"
    )
    assert recorder.calls() == [LIST_FIPS, f"POST {FIPS}/attach", f"GET {FIPS}/9001"]


# A refusal whose text names nothing a client could match: what follows it comes from the IP's state.
REFUSED = {"type": "invalid_request_error", "message": "request could not be processed"}


def test_an_attach_refused_while_the_ip_is_busy_waits_for_it_then_attaches_again(recorder, client):
    """Another attach or detach of the IP runs (it reads `busy` after the refusal): the move waits
    until it reads `ready`, then sends the attach again; never a detach."""
    recorder.on("GET", FIPS, {"total_count": 1, "failover_ips": [fip(104524)]})
    recorder.on("POST", f"{FIPS}/attach", recorder.reply(status=400, body=REFUSED), {})
    recorder.on(
        "GET",
        f"{FIPS}/9001",
        fip(104524, "busy"),  # after the refusal: another operation runs
        fip(104524, "busy"),  # waited for...
        fip(None),  # ...it was a detach, now over
        fip(None, "busy"),  # our attach runs
        fip(104523),
    )
    client.move_failover("212.83.160.7", "fr-par-2/104523")
    assert recorder.calls() == [
        LIST_FIPS,
        f"POST {FIPS}/attach",
        f"GET {FIPS}/9001",
        f"GET {FIPS}/9001",
        f"GET {FIPS}/9001",
        f"POST {FIPS}/attach",
        f"GET {FIPS}/9001",
        f"GET {FIPS}/9001",
    ]
    assert posts(recorder) == [("attach", {"server_id": 104523, "fips_ids": [9001]})] * 2


def test_an_attach_refused_while_the_ip_is_busy_going_to_the_target_is_done_when_it_arrives(recorder, client):
    recorder.on("GET", FIPS, {"total_count": 1, "failover_ips": [fip(104524)]})
    recorder.on("POST", f"{FIPS}/attach", recorder.reply(status=400, body=REFUSED))
    recorder.on("GET", f"{FIPS}/9001", fip(104524, "busy"), fip(104523))
    client.move_failover("212.83.160.7", "fr-par-2/104523")
    assert recorder.calls() == [LIST_FIPS, f"POST {FIPS}/attach", f"GET {FIPS}/9001", f"GET {FIPS}/9001"]


def test_an_ip_that_stays_busy_is_waited_for_a_bounded_number_of_times(recorder, client):
    from providers.dedibox.client import BUSY_WAITS

    recorder.on("GET", FIPS, {"total_count": 1, "failover_ips": [fip(104524)]})
    recorder.on("POST", f"{FIPS}/attach", recorder.reply(status=400, body=REFUSED))
    # Each refusal reads busy, each wait ends ready on the old server, and the attach is refused again.
    recorder.on("GET", f"{FIPS}/9001", *[fip(104524, "busy"), fip(104524)] * BUSY_WAITS, fip(104524, "busy"))
    with pytest.raises(VendorError) as raised:
        client.move_failover("212.83.160.7", "fr-par-2/104523")
    assert type(raised.value) is VendorError
    assert str(raised.value).endswith(
        f"request could not be processed; the IP still reads busy after {BUSY_WAITS} waits"
    )
    assert posts(recorder) == [("attach", {"server_id": 104523, "fips_ids": [9001]})] * (BUSY_WAITS + 1)
    assert "POST " + f"{FIPS}/detach" not in recorder.calls()


def test_a_busy_refusal_is_not_retried_on_its_wording(recorder, client, sleeps):
    """Even worded "busy", a 400 is no throttle: it is settled by the IP's state, not resent blindly."""
    recorder.on("GET", FIPS, {"total_count": 1, "failover_ips": [fip(None)]})
    recorder.on("POST", f"{FIPS}/attach", recorder.reply(status=400, body=FIP_BUSY))
    recorder.on("GET", f"{FIPS}/9001", fip(None))  # ready on no server: the refusal is raised
    with pytest.raises(VendorError, match=r"is busy$") as raised:
        client.move_failover("212.83.160.7", "fr-par-2/104523")
    assert not isinstance(raised.value, TransientVendorError)
    assert recorder.calls() == [LIST_FIPS, f"POST {FIPS}/attach", f"GET {FIPS}/9001"]
    assert sleeps == []


def test_an_unrecognisable_refusal_while_the_ip_is_elsewhere_is_detach_then_attach(recorder, client):
    recorder.on("GET", FIPS, {"total_count": 1, "failover_ips": [fip(104524)]})
    recorder.on("POST", f"{FIPS}/attach", recorder.reply(status=400, body=REFUSED), {})
    recorder.on("POST", f"{FIPS}/detach", {})
    recorder.on(
        "GET",
        f"{FIPS}/9001",
        fip(104524),  # after the refusal: ready on another server
        fip(None, "busy"),  # detaching
        fip(None),
        fip(104523),
    )
    client.move_failover("212.83.160.7", "fr-par-2/104523")
    assert recorder.calls() == [
        LIST_FIPS,
        f"POST {FIPS}/attach",
        f"GET {FIPS}/9001",
        f"POST {FIPS}/detach",
        f"GET {FIPS}/9001",
        f"GET {FIPS}/9001",
        f"POST {FIPS}/attach",
        f"GET {FIPS}/9001",
    ]
    assert posts(recorder) == [
        ("attach", {"server_id": 104523, "fips_ids": [9001]}),
        ("detach", {"fips_ids": [9001]}),
        ("attach", {"server_id": 104523, "fips_ids": [9001]}),
    ]


def test_an_attach_refused_with_the_ip_already_on_the_target_is_done(recorder, client):
    """The listing showed it elsewhere; by the refusal it reads ready on the target (someone else's
    move, or an attach that went through): nothing more is sent."""
    recorder.on("GET", FIPS, {"total_count": 1, "failover_ips": [fip(104524)]})
    recorder.on("POST", f"{FIPS}/attach", recorder.reply(status=400, body=REFUSED))
    recorder.on("GET", f"{FIPS}/9001", fip(104523))
    client.move_failover("212.83.160.7", "fr-par-2/104523")
    assert recorder.calls() == [LIST_FIPS, f"POST {FIPS}/attach", f"GET {FIPS}/9001"]


@pytest.mark.parametrize("state", [fip(104524, "locked"), fip(104524, "unknown"), fip(None)])
def test_an_attach_refused_in_any_other_state_is_raised_as_it_came(recorder, client, state):
    recorder.on("GET", FIPS, {"total_count": 1, "failover_ips": [fip(104524)]})
    recorder.on("POST", f"{FIPS}/attach", recorder.reply(status=400, body=REFUSED))
    recorder.on("GET", f"{FIPS}/9001", state)
    with pytest.raises(VendorError) as raised:
        client.move_failover("212.83.160.7", "fr-par-2/104523")
    assert str(raised.value) == (
        "dedibox: POST /dedibox/v1/zones/{zone}/failover-ips/attach [212.83.160.7] failed (HTTP 400 "
        "invalid_request_error): request could not be processed"
    )
    assert recorder.calls() == [LIST_FIPS, f"POST {FIPS}/attach", f"GET {FIPS}/9001"]


def test_a_detach_refused_while_the_ip_is_busy_waits_for_it_then_detaches_again(recorder, client):
    recorder.on("GET", FIPS, {"total_count": 1, "failover_ips": [fip(104524)]})
    recorder.on("POST", f"{FIPS}/attach", recorder.reply(status=400, body=REFUSED), {})
    recorder.on("POST", f"{FIPS}/detach", recorder.reply(status=400, body=REFUSED), {})
    recorder.on(
        "GET",
        f"{FIPS}/9001",
        fip(104524),  # after the attach's refusal: elsewhere
        fip(104524, "busy"),  # after the detach's refusal: another operation runs
        fip(104524),  # it ended with the IP still there
        fip(None),  # detached
        fip(104523),
    )
    client.move_failover("212.83.160.7", "fr-par-2/104523")
    assert recorder.calls() == [
        LIST_FIPS,
        f"POST {FIPS}/attach",
        f"GET {FIPS}/9001",
        f"POST {FIPS}/detach",
        f"GET {FIPS}/9001",
        f"GET {FIPS}/9001",
        f"POST {FIPS}/detach",
        f"GET {FIPS}/9001",
        f"POST {FIPS}/attach",
        f"GET {FIPS}/9001",
    ]


class FakeClock:
    """The client's clock, moved by its own sleeps: every poll of 1 s is 1 s."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def test_a_moves_waits_share_two_task_timeouts(recorder):
    """Busy waits come on top of the detach's and the attach's: all of a move's waits share two task
    timeouts from its start (the watcher's MOVE_BUDGET_SECONDS), each at most one."""
    clock = FakeClock()
    client = DediboxClient(
        api_url=recorder.url,
        secret_key=SECRET,
        project_id=PROJECT,
        zones=[ZONE],
        retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05),
        poll=PollPolicy(first=1, max_interval=1),
        task_timeout=10,
        sleep=clock.sleep,
        clock=clock,
    )
    recorder.on("GET", FIPS, {"total_count": 1, "failover_ips": [fip(104524)]})
    recorder.on(
        "POST",
        f"{FIPS}/attach",
        recorder.reply(status=400, body=REFUSED),
        recorder.reply(status=400, body=REFUSED),
        {},
    )
    recorder.on("POST", f"{FIPS}/detach", {})
    recorder.on(
        "GET",
        f"{FIPS}/9001",
        fip(104524, "busy"),  # t=0, after the first refusal
        *[fip(104524, "busy")] * 9,  # t=0..8: another operation runs
        fip(104524),  # t=9: over, the IP still on 104524
        fip(104524),  # t=9, after the second refusal: ready elsewhere
        *[fip(104524, "busy")] * 3,  # t=9..11: detaching
        fip(None),  # t=12: detached
        fip(None, "busy"),  # t=12..: the attach runs past the move's deadline (t=20)
    )
    with pytest.raises(TaskTimeoutError) as raised:
        client.move_failover("212.83.160.7", "fr-par-2/104523")
    assert str(raised.value).endswith(
        "failover IP still 'busy' on None after 8s; it had been detached from fr-par-2/104524 for the "
        "move; it now reads busy on no server: not put back"
    )
    assert clock.t == 20  # not 12 + 10
    assert posts(recorder) == [
        ("attach", {"server_id": 104523, "fips_ids": [9001]}),
        ("attach", {"server_id": 104523, "fips_ids": [9001]}),
        ("detach", {"fips_ids": [9001]}),
        ("attach", {"server_id": 104523, "fips_ids": [9001]}),
    ]


def test_an_attach_after_the_detach_refused_puts_the_ip_back_where_it_was(recorder, client):
    recorder.on("GET", FIPS, {"total_count": 1, "failover_ips": [fip(104524)]})
    recorder.on(
        "POST",
        f"{FIPS}/attach",
        recorder.reply(status=400, body=ATTACHED_ELSEWHERE),
        recorder.reply(status=400, body=SERVER_FULL),
        {},
    )
    recorder.on("POST", f"{FIPS}/detach", {})
    recorder.on(
        "GET",
        f"{FIPS}/9001",
        fip(104524),  # after the first refusal: elsewhere
        fip(104524, "busy"),  # detaching
        fip(None),  # detached
        fip(None),  # after the second refusal: still unrouted, so it is put back
        fip(104524, "busy"),
        fip(104524),
    )
    with pytest.raises(VendorError) as raised:
        client.move_failover("212.83.160.7", "fr-par-2/104523")
    assert type(raised.value) is VendorError
    assert str(raised.value).endswith(
        "server 104523 cannot take more failover IPs; "
        "it had been detached from fr-par-2/104524 for the move and was put back there"
    )
    assert recorder.calls() == [
        LIST_FIPS,
        f"POST {FIPS}/attach",
        f"GET {FIPS}/9001",
        f"POST {FIPS}/detach",
        f"GET {FIPS}/9001",
        f"GET {FIPS}/9001",
        f"POST {FIPS}/attach",
        f"GET {FIPS}/9001",
        f"POST {FIPS}/attach",
        f"GET {FIPS}/9001",
        f"GET {FIPS}/9001",
    ]
    assert posts(recorder) == [
        ("attach", {"server_id": 104523, "fips_ids": [9001]}),
        ("detach", {"fips_ids": [9001]}),
        ("attach", {"server_id": 104523, "fips_ids": [9001]}),
        ("attach", {"server_id": 104524, "fips_ids": [9001]}),
    ]


def test_an_attach_after_the_detach_that_fails_as_a_task_puts_the_ip_back(recorder, client):
    """The attach was accepted but its operation ended with the IP on no server."""
    recorder.on("GET", FIPS, {"total_count": 1, "failover_ips": [fip(104524)]})
    recorder.on("POST", f"{FIPS}/attach", recorder.reply(status=400, body=ATTACHED_ELSEWHERE), {})
    recorder.on("POST", f"{FIPS}/detach", {})
    recorder.on(
        "GET",
        f"{FIPS}/9001",
        fip(104524),
        fip(None),  # detached
        fip(None, "busy"),  # the attach runs...
        fip(None),  # ...and ends on no server
        fip(None),
        fip(104524),
    )
    with pytest.raises(
        TaskFailedError,
        match=r"ended with the IP on None; it had been detached from "
        r"fr-par-2/104524 for the move and was put back there$",
    ):
        client.move_failover("212.83.160.7", "fr-par-2/104523")
    assert posts(recorder)[-1] == ("attach", {"server_id": 104524, "fips_ids": [9001]})


def test_when_putting_the_ip_back_fails_too_the_error_says_it_may_be_unrouted(recorder, client):
    recorder.on("GET", FIPS, {"total_count": 1, "failover_ips": [fip(104524)]})
    recorder.on(
        "POST",
        f"{FIPS}/attach",
        recorder.reply(status=400, body=ATTACHED_ELSEWHERE),
        recorder.reply(status=400, body=SERVER_FULL),
        recorder.reply(status=400, body={"type": "invalid_request_error", "message": "no"}),
    )
    recorder.on("POST", f"{FIPS}/detach", {})
    recorder.on("GET", f"{FIPS}/9001", fip(104524), fip(None))
    with pytest.raises(
        VendorError,
        match=r"cannot take more failover IPs; it had been detached from "
        r"fr-par-2/104524 for the move; attaching it back failed too, so it may be "
        r"unrouted: .*HTTP 400 invalid_request_error\): no$",
    ):
        client.move_failover("212.83.160.7", "fr-par-2/104523")
    assert [path for path, _ in posts(recorder)] == ["attach", "detach", "attach", "attach"]


def test_an_ip_someone_else_moved_meanwhile_is_not_put_back(recorder, client):
    recorder.on("GET", FIPS, {"total_count": 1, "failover_ips": [fip(104524)]})
    recorder.on(
        "POST",
        f"{FIPS}/attach",
        recorder.reply(status=400, body=ATTACHED_ELSEWHERE),
        recorder.reply(status=400, body=SERVER_FULL),
    )
    recorder.on("POST", f"{FIPS}/detach", {})
    recorder.on("GET", f"{FIPS}/9001", fip(104524), fip(None), fip(104525, "busy"))
    with pytest.raises(VendorError, match=r"it now reads busy on fr-par-2/104525: not put back$"):
        client.move_failover("212.83.160.7", "fr-par-2/104523")
    assert [path for path, _ in posts(recorder)] == ["attach", "detach", "attach"]


def test_attach_whose_answer_is_lost_is_not_sent_twice(recorder, client):
    fips = f"/dedibox/v1/zones/{ZONE}/failover-ips"
    recorder.on("GET", fips, {"total_count": 1, "failover_ips": [fip(104524)]})
    recorder.on("POST", f"{fips}/attach", recorder.reply(status=500, body={"message": "internal error"}))
    recorder.on("GET", f"{fips}/9001", fip(104524, "busy"), fip(104523))
    client.move_failover("212.83.160.7", "fr-par-2/104523")
    assert recorder.calls().count(f"POST {fips}/attach") == 1


def test_an_attach_that_ends_with_the_ip_where_it_was_fails_at_once(recorder, client, sleeps):
    """Busy, then ready on the old server: the attach failed. The caller hears it now, not after the
    task timeout (the watcher retries on its next poll; a deploy fails naming where the IP is)."""
    fips = f"/dedibox/v1/zones/{ZONE}/failover-ips"
    recorder.on("GET", fips, {"total_count": 1, "failover_ips": [fip(104524)]})
    recorder.on("POST", f"{fips}/attach", {"failover_ips": [fip(104523, "busy")]})
    recorder.on("GET", f"{fips}/9001", fip(104524), fip(104524, "busy"), fip(104524))
    with pytest.raises(TaskFailedError, match=r"ended with the IP on fr-par-2/104524"):
        client.move_failover("212.83.160.7", "fr-par-2/104523")
    # Ready where it was before the attach showed busy is not taken for a failure (not started yet).
    assert recorder.calls().count(f"GET {fips}/9001") == 3
    assert sleeps == [0.01, 0.01]


def test_move_is_noop_when_there_and_times_out_when_stuck(recorder, client):
    fips = f"/dedibox/v1/zones/{ZONE}/failover-ips"
    recorder.on("GET", fips, {"total_count": 1, "failover_ips": [fip(104523)]})
    client.move_failover("212.83.160.7", "fr-par-2/104523")
    assert not [c for c in recorder.calls() if c.startswith("POST")]

    recorder.on("GET", fips, {"total_count": 1, "failover_ips": [fip(None)]})
    recorder.on("POST", f"{fips}/attach", {"failover_ips": []})
    recorder.on("GET", f"{fips}/9001", fip(104523, "busy"))
    stuck = DediboxClient(
        api_url=recorder.url,
        secret_key=SECRET,
        project_id=PROJECT,
        zones=[ZONE],
        poll=PollPolicy(first=0.01, max_interval=0.01),
        task_timeout=0.03,
    )
    with pytest.raises(TaskTimeoutError, match=r"failover IP still 'busy' on fr-par-2/104523 after 0s"):
        stuck.move_failover("212.83.160.7", "fr-par-2/104523")


def test_errors_are_typed_retried_and_scrubbed(recorder, client, sleeps):
    recorder.on(
        "GET",
        f"{SERVERS}/104523",
        recorder.reply(status=503, raw=b"upstream down"),
        recorder.reply(
            status=429,
            body={"type": "too_many_requests", "message": "slow down"},
            headers={"Retry-After": "0.03"},
        ),
        server_detail(),
    )
    assert client.get_box("fr-par-2/104523").id == "fr-par-2/104523"
    assert sleeps[1] == 0.03

    recorder.on(
        "GET",
        f"{SERVERS}/104523",
        recorder.reply(
            status=401, body={"type": "denied_authentication", "message": f"invalid token {SECRET}"}
        ),
    )
    with pytest.raises(AuthError) as raised:
        client.get_box("fr-par-2/104523")
    assert SECRET not in str(raised.value)
    assert str(raised.value) == (
        "dedibox: GET /dedibox/v1/zones/{zone}/servers/{server_id} [fr-par-2/104523] failed "
        "(HTTP 401 denied_authentication): invalid token ***"
    )

    recorder.on("GET", f"{SERVERS}/104523", recorder.reply(status=500, body={"message": "boom"}))
    with pytest.raises(TransientVendorError, match=r"HTTP 500\): boom"):
        client.get_box("fr-par-2/104523")


def test_set_marker_field_posts_the_fleet_tags_keeping_the_claim_tag(recorder, client):
    recorder.on("GET", f"{SERVERS}/104523", server_detail(tags=["old", f"tuist-claim-{'a' * 12}"]))
    recorder.on("POST", f"{SERVERS}/104523/tags", server_detail())
    client.set_marker_field("fr-par-2/104523", "keep,tuist-kura-staging")
    assert recorder.last("POST", f"{SERVERS}/104523/tags").json() == {
        "tags": ["keep", "tuist-kura-staging", f"tuist-claim-{'a' * 12}"]
    }
    with pytest.raises(VendorInputError, match="tag 'has space' must consist of"):
        client.set_marker_field("fr-par-2/104523", "has space")


def test_a_secret_pasted_with_its_newline_fails_once_naming_the_config_not_the_secret(recorder, sleeps):
    # requests refuses the header before anything is sent: not transient, nothing to retry or read
    # back, and its message (which quotes the header value) never reaches ours.
    client = DediboxClient(
        api_url=recorder.url,
        secret_key=SECRET + "\n",
        project_id=PROJECT,
        zones=[ZONE],
        retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05),
        sleep=sleeps.append,
    )
    with pytest.raises(VendorError) as raised:
        client.list_box_ids()
    assert not isinstance(raised.value, TransientVendorError)
    assert "the request could not be built (InvalidHeader)" in str(raised.value)
    assert SECRET not in str(raised.value)
    assert (sleeps, recorder.calls()) == ([], [])
