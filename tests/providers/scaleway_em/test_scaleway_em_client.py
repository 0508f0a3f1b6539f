"""ElasticMetalClient against a recording HTTP server: the exact requests the SDK-driven client sends,
and how it reads Scaleway's answers (bodies shaped as the API's recorded ones)."""

from __future__ import annotations

import re
import socket
from typing import Any

import pytest

from config.models import Vendor
from providers.errors import (
    AuthError,
    ConflictError,
    NotFoundError,
    TaskFailedError,
    TransientVendorError,
    VendorError,
    VendorInputError,
)
from providers.retry import HttpTimeouts, PollPolicy, RetryPolicy
from providers.scaleway_em.client import ElasticMetalClient
from providers.scaleway_em.models import provider_id
from providers.vendor import Box, Claim, InstallState, Reinstall
from tests.providers.conftest import RecordingServer

SECRET = "3b0e2f4c-55d6-4c3a-9b1e-7d2f6a8c9e01"
ACCESS = "SCWDEVSIMULATOR00001"
PROJECT = "5c1e0a7d-2b3f-4e8a-9c6d-0f1e2d3c4b5a"
SID = "6e388d4e-65fa-4b34-8ec8-f86113150255"
BOX = f"fr-par-2/{SID}"
SERVER = f"/baremetal/v1/zones/fr-par-2/servers/{SID}"
OFFER = "ddb09834-8680-4339-b5e3-19ca5205fa1f"
UBUNTU = "96e5f0f2-d216-4de2-8a15-68730d877885"
PN = "da01bdf8-ebd9-40e8-8929-6ef88e626cd8"
PN_OPTION = "cd4158d7-2d65-49be-8803-c4b8ab6f760c"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7HUxRyQtB2rnlhQUcbDGCZcTJg7OvoznOiyC9W6IxH fleet@tuist"
KEY_ID = "b8c7dd23-fcb2-49eb-87e7-008643d4d91e"


@pytest.fixture
def sleeps() -> list[float]:
    return []


def make(url: str, sleeps: list[float], **kw: Any) -> ElasticMetalClient:
    args: dict[str, Any] = {
        "api_url": url,
        "access_key": ACCESS,
        "secret_key": SECRET,
        "project_id": PROJECT,
        "zones": ["fr-par-2"],
        "retry": RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05),
        "sleep": sleeps.append,
    }
    args.update(kw)
    return ElasticMetalClient(**args)


@pytest.fixture
def client(recorder, sleeps) -> ElasticMetalClient:
    return make(recorder.url, sleeps)


def server(
    *,
    sid: str = SID,
    tags: list[str] | None = None,
    install: str | None = "completed",
    status: str = "ready",
    options: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Shaped like a recorded GET /baremetal/v1/zones/fr-par-2/servers/{id} answer."""
    return {
        "boot_type": "normal",
        "created_at": "2025-12-09T16:00:10.321970Z",
        "description": "",
        "domain": f"{sid}.fr-par-2.baremetal.scw.cloud",
        "id": sid,
        "install": None
        if install is None
        else {
            "hostname": "",
            "os_id": UBUNTU,
            "partitioning_schema": None,
            "service_url": "",
            "service_user": "",
            "ssh_key_ids": [KEY_ID],
            "status": install,
            "user": "ubuntu",
        },
        "ips": [
            {
                "address": "2001:bc8:1201:a22:b683:51ff:fe0f:6bbc",
                "id": "b19018e8-c8dc-420c-bc19-3db916e6555a",
                "reverse": "",
                "reverse_status": "active",
                "reverse_status_message": "",
                "version": "IPv6",
            },
            {
                "address": "195.154.100.192",
                "id": "25763161-4b22-4fbf-a93f-d989f982fb54",
                "reverse": "",
                "reverse_status": "active",
                "reverse_status_message": "",
                "version": "IPv4",
            },
        ],
        "name": "tuist-scw-dev-1",
        "offer_id": OFFER,
        "offer_name": "EM-I215E-NVME",
        "options": options or [],
        "organization_id": PROJECT,
        "ping_status": "ping_status_up",
        "project_id": PROJECT,
        "protected": False,
        "rescue_server": None,
        "status": status,
        "tags": ["tuist-kura-scw-dev"] if tags is None else tags,
        "updated_at": "2025-12-09T16:00:27.200803Z",
        "user_data": None,
        "zone": "fr-par-2",
    }


def os_entry(
    *, os_id: str = UBUNTU, name: str = "Ubuntu", version: str = "24.04 LTS (Noble Numbat)", **fields: Any
):
    return {
        "id": os_id,
        "name": name,
        "version": version,
        "logo_url": "",
        "enabled": True,
        "license_required": False,
        "allowed": True,
        "custom_partitioning_supported": True,
        "cloud_init_supported": True,
        "zone": "fr-par-2",
        "ssh": {"editable": True, "required": True, "default_value": None},
        "user": fields.get("user", {"editable": False, "required": False, "default_value": "ubuntu"}),
        "password": fields.get("password", {"editable": True, "required": False, "default_value": None}),
        "service_user": None,
        "service_password": None,
    }


# --- construction -------------------------------------------------------------------------------------


def test_a_malformed_secret_is_refused_without_echoing_it(recorder, sleeps) -> None:
    with pytest.raises(VendorInputError) as raised:
        make(recorder.url, sleeps, secret_key="hunter2-not-a-uuid")
    assert "hunter2" not in str(raised.value) and "not a UUID" in str(raised.value)
    with pytest.raises(VendorInputError, match="SCW"):
        make(recorder.url, sleeps, access_key="AKIA0000")
    with pytest.raises(VendorInputError, match="trailing slash"):
        make(recorder.url + "/", sleeps)
    assert recorder.requests == []


# --- boxes ----------------------------------------------------------------------------------------------


def test_list_boxes_walks_the_pages_with_the_project_filter(recorder, client) -> None:
    page1 = {
        "total_count": 101,
        "servers": [server(sid=f"00000000-0000-4000-8000-{n:012d}") for n in range(100)],
    }
    page2 = {"total_count": 101, "servers": [server()]}
    recorder.on(
        "GET", "/baremetal/v1/zones/fr-par-2/servers?page=1&page_size=100&project_id=" + PROJECT, page1
    )
    recorder.on(
        "GET", "/baremetal/v1/zones/fr-par-2/servers?page=2&page_size=100&project_id=" + PROJECT, page2
    )
    boxes = client.list_boxes()
    assert len(boxes) == 101 and boxes[-1].id == BOX
    assert recorder.calls() == [
        f"GET /baremetal/v1/zones/fr-par-2/servers?page=1&page_size=100&project_id={PROJECT}",
        f"GET /baremetal/v1/zones/fr-par-2/servers?page=2&page_size=100&project_id={PROJECT}",
    ]
    sent = recorder.requests[0].headers
    assert sent["x-auth-token"] == SECRET and sent["accept"] == "application/json"
    assert sent["user-agent"].startswith("scaleway-sdk-python/")


def test_list_box_ids_is_one_call_per_zone_and_page(recorder) -> None:
    client = make(recorder.url, [], zones=["fr-par-2", "nl-ams-1"])
    recorder.on("GET", "/baremetal/v1/zones/fr-par-2/servers", {"total_count": 1, "servers": [server()]})
    other = server(sid="00000000-0000-4000-8000-000000000007")
    recorder.on(
        "GET",
        "/baremetal/v1/zones/nl-ams-1/servers",
        {"total_count": 1, "servers": [{**other, "zone": "nl-ams-1"}]},
    )
    assert client.list_box_ids() == [BOX, "nl-ams-1/00000000-0000-4000-8000-000000000007"]
    assert recorder.calls() == [
        f"GET /baremetal/v1/zones/fr-par-2/servers?page=1&page_size=100&project_id={PROJECT}",
        f"GET /baremetal/v1/zones/nl-ams-1/servers?page=1&page_size=100&project_id={PROJECT}",
    ]


def test_the_fleet_is_filtered_by_tag_on_the_api_side(recorder, client) -> None:
    recorder.on("GET", "/baremetal/v1/zones/fr-par-2/servers", {"total_count": 1, "servers": [server()]})
    assert [b.id for b in client.boxes_with_marker("tuist-kura-scw-dev")] == [BOX]
    assert recorder.requests[0].query["tags"] == ["tuist-kura-scw-dev"]


def test_a_server_reads_as_a_box(recorder, client) -> None:
    recorder.on("GET", SERVER, server(tags=["tuist-kura-scw-dev", "team-x", "tuist-releasing:0123456789ab"]))
    assert client.get_box(BOX) == Box(
        vendor=Vendor.SCALEWAY_EM,
        id=BOX,
        name="tuist-scw-dev-1",
        datacenter="fr-par-2",
        public_ipv4="195.154.100.192",  # the IPv4, though the IPv6 is listed first
        state="ready",
        offer="EM-I215E-NVME",
        marker_field="tuist-kura-scw-dev,team-x",
        claim=Claim("0123456789ab", releasing=True),
        has_os=True,
        tags=("tuist-kura-scw-dev", "team-x"),
    )
    assert provider_id(BOX) == f"scaleway://fr-par-2/{SID}"


def test_a_server_never_installed_has_no_os(recorder, client) -> None:
    recorder.on("GET", SERVER, server(install=None))
    box = client.get_box(BOX)
    assert not box.has_os and client.install_state(BOX) is InstallState.PENDING


@pytest.mark.parametrize("bad", ["fr-par-2", f"fr-par-2/{SID[:8]}", f"par/{SID}", SID])
def test_malformed_box_ids_are_refused_before_any_call(recorder, client, bad: str) -> None:
    with pytest.raises(VendorInputError, match="Elastic Metal box id"):
        client.get_box(bad)
    assert recorder.requests == []


# --- claims ---------------------------------------------------------------------------------------------


def test_set_claim_patches_the_whole_tag_list(recorder, client) -> None:
    recorder.on("GET", SERVER, server(tags=["team-x", "tuist-kura-scw-dev"]))
    recorder.on("PATCH", SERVER, server())
    client.set_claim(BOX, Claim("0123456789ab"))
    patch = recorder.last("PATCH", SERVER)
    assert patch.json() == {"tags": ["team-x", "tuist-kura-scw-dev", "tuist-claim-0123456789ab"]}
    assert patch.headers["content-type"] == "application/json; charset=utf-8"


def test_set_claim_swaps_and_clears_claim_tags(recorder, client) -> None:
    # The claim tag an earlier version wrote (`tuist-claim:<token>`) is read, and replaced.
    recorder.on("GET", SERVER, server(tags=["tuist-kura-scw-dev", "tuist-claim:0123456789ab"]))
    recorder.on("PATCH", SERVER, server())
    client.set_claim(BOX, Claim("0123456789ab", releasing=True))
    assert recorder.last("PATCH", SERVER).json() == {
        "tags": ["tuist-kura-scw-dev", "tuist-releasing-0123456789ab"]
    }
    client.set_claim(BOX, None)
    assert recorder.last("PATCH", SERVER).json() == {"tags": ["tuist-kura-scw-dev"]}


def test_set_claim_writes_nothing_when_the_claim_is_there(recorder, client) -> None:
    recorder.on("GET", SERVER, server(tags=["tuist-kura-scw-dev", "tuist-claim-0123456789ab"]))
    client.set_claim(BOX, Claim("0123456789ab"))
    assert recorder.calls() == [f"GET {SERVER}"]


def test_set_marker_field_writes_the_fleet_tags_and_keeps_the_claim_tag(recorder, client) -> None:
    recorder.on("GET", SERVER, server(tags=["tuist-kura-scw-dev", "tuist-claim-0123456789ab"]))
    recorder.on("PATCH", SERVER, server())
    client.set_marker_field(BOX, "tuist-kura-scw-dev,tuist-kura-scw-dev-b")
    assert recorder.last("PATCH", SERVER).json() == {
        "tags": ["tuist-kura-scw-dev", "tuist-kura-scw-dev-b", "tuist-claim-0123456789ab"]
    }


def test_set_marker_field_writes_nothing_when_the_tags_are_there(recorder, client) -> None:
    recorder.on("GET", SERVER, server(tags=["tuist-kura-scw-dev", "tuist-claim-0123456789ab"]))
    client.set_marker_field(BOX, "tuist-kura-scw-dev")
    assert recorder.calls() == [f"GET {SERVER}"]


def test_set_marker_field_refuses_a_tag_scaleway_would_not_take_before_any_write(recorder, client) -> None:
    recorder.on("GET", SERVER, server(tags=[]))
    with pytest.raises(VendorInputError, match=f"Elastic Metal server {BOX}: tag 'has space'"):
        client.set_marker_field(BOX, "has space")
    assert recorder.calls() == [f"GET {SERVER}"]


# --- reinstall ------------------------------------------------------------------------------------------


def _catalogue(recorder, *, keys: list[dict[str, Any]] | None = None, **os_fields: Any) -> None:
    recorder.on("GET", SERVER, server())
    recorder.on(
        "GET",
        "/baremetal/v1/zones/fr-par-2/os",
        {
            "total_count": 2,
            "os": [
                os_entry(
                    os_id="a5cec64e-d7b0-4c6e-a819-60139d30a76c", name="Windows", version="2025 standard"
                ),
                os_entry(**os_fields),
            ],
        },
    )
    recorder.on("GET", "/iam/v1alpha1/ssh-keys", {"total_count": len(keys or []), "ssh_keys": keys or []})
    recorder.on(
        "POST",
        "/iam/v1alpha1/ssh-keys",
        {"id": KEY_ID, "name": "k", "public_key": KEY, "project_id": PROJECT, "organization_id": PROJECT},
    )


def test_start_reinstall_sends_the_os_the_fleet_key_and_the_password(recorder, client) -> None:
    _catalogue(recorder)
    recorder.on("POST", f"{SERVER}/install", server(install="to_install"))
    ticket = client.start_reinstall(
        BOX, hostname="kura-scw-1", ssh_public_key=KEY + "\n", user_login="ubuntu", user_password="Sudo-Pw-7"
    )
    assert ticket.started_running is False and ticket.baseline  # sent; a stale `completed` matches it
    assert ticket == Reinstall(
        vendor=Vendor.SCALEWAY_EM, box_id=BOX, task_id=None, started_running=False, baseline=ticket.baseline
    )
    assert recorder.calls() == [
        f"GET {SERVER}",
        f"GET /baremetal/v1/zones/fr-par-2/os?offer_id={OFFER}&page=1&page_size=100",
        f"GET /iam/v1alpha1/ssh-keys?page=1&page_size=100&project_id={PROJECT}",
        "POST /iam/v1alpha1/ssh-keys",
        f"GET {SERVER}",  # no install runs already: one is started
        f"POST {SERVER}/install",
    ]
    registered = recorder.last("POST", "/iam/v1alpha1/ssh-keys").json()
    assert registered == {"public_key": KEY, "name": registered["name"], "project_id": PROJECT}
    assert registered["name"].startswith("tuist-")
    # The login user of Ubuntu on Elastic Metal is fixed (`ubuntu`): it is not sent.
    assert recorder.last("POST", f"{SERVER}/install").json() == {
        "os_id": UBUNTU,
        "hostname": "kura-scw-1",
        "ssh_key_ids": [KEY_ID],
        "password": "Sudo-Pw-7",
    }


def test_an_already_registered_key_is_reused_whatever_its_comment(recorder, client) -> None:
    known = {
        "id": KEY_ID,
        "name": "old",
        "public_key": KEY.rsplit(" ", 1)[0] + " someone@else",
        "project_id": PROJECT,
    }
    _catalogue(recorder, keys=[known])
    recorder.on("POST", f"{SERVER}/install", server(install="to_install"))
    client.start_reinstall(BOX, hostname="h", ssh_public_key=KEY, user_login="ubuntu", user_password="p")
    assert "POST /iam/v1alpha1/ssh-keys" not in recorder.calls()


def test_an_os_with_an_editable_user_gets_the_fleets_user(recorder, client) -> None:
    _catalogue(recorder, user={"editable": True, "required": True, "default_value": None}, password=None)
    recorder.on("POST", f"{SERVER}/install", server(install="to_install"))
    client.start_reinstall(BOX, hostname="h", ssh_public_key=KEY, user_login="tuist", user_password="p")
    body = recorder.last("POST", f"{SERVER}/install").json()
    assert body["user"] == "tuist" and "password" not in body


def test_a_fleet_user_the_os_would_not_create_is_refused(recorder, client) -> None:
    _catalogue(recorder)
    with pytest.raises(VendorInputError, match="logs in as 'ubuntu', not 'tuist'"):
        client.start_reinstall(BOX, hostname="h", ssh_public_key=KEY, user_login="tuist", user_password="p")
    assert not any(c.startswith("POST") for c in recorder.calls())


def test_an_unknown_os_label_names_what_is_offered(recorder, client) -> None:
    _catalogue(recorder)
    with pytest.raises(VendorInputError, match=re.escape("offered: Windows 2025 standard, Ubuntu 24.04")):
        client.start_reinstall(
            BOX,
            hostname="h",
            ssh_public_key=KEY,
            user_login="ubuntu",
            user_password="p",
            os_label="debian_12",
        )


def test_an_install_already_running_is_followed_not_started_again(recorder, client) -> None:
    _catalogue(recorder)
    recorder.on("GET", SERVER, server(), server(install="installing"))
    ticket = client.start_reinstall(
        BOX, hostname="h", ssh_public_key=KEY, user_login="ubuntu", user_password="p"
    )
    assert ticket.box_id == BOX and ticket.started_running
    assert f"POST {SERVER}/install" not in recorder.calls()


def test_a_409_while_an_install_runs_is_that_installs_ticket(recorder, client) -> None:
    _catalogue(recorder)
    # Free when read before the POST; a parallel release started one in between.
    recorder.on("GET", SERVER, server(), server(), server(install="installing"))
    busy = {
        "current_state": "installing",
        "message": "resource is in a transient state",
        "resource": "baremetal_server",
        "resource_id": SID,
        "type": "transient_state",
    }
    recorder.on("POST", f"{SERVER}/install", recorder.reply(busy, status=409))
    ticket = client.start_reinstall(
        BOX, hostname="h", ssh_public_key=KEY, user_login="ubuntu", user_password="Sudo-Pw-7"
    )
    assert ticket.box_id == BOX
    assert recorder.calls().count(f"POST {SERVER}/install") == 1  # a 409 is not retried


def test_a_409_with_nothing_running_surfaces_as_a_conflict(recorder, client) -> None:
    _catalogue(recorder)
    busy = {
        "current_state": "locked",
        "message": "resource is in a transient state",
        "type": "transient_state",
    }
    recorder.on("POST", f"{SERVER}/install", recorder.reply(busy, status=409))
    with pytest.raises(ConflictError) as raised:
        client.start_reinstall(
            BOX, hostname="h", ssh_public_key=KEY, user_login="ubuntu", user_password="Sudo-Pw-7"
        )
    assert (raised.value.status, raised.value.code) == (409, "transient_state")
    assert "current state locked" in str(raised.value) and "Sudo-Pw-7" not in str(raised.value)


def test_a_lost_install_answer_is_read_back_and_never_sent_twice(recorder, client, sleeps) -> None:
    _catalogue(recorder)
    # The POST was carried out, but its answer was a 502: the server shows the new install running.
    recorder.on("GET", SERVER, server(), server(), server(install="to_install"))
    recorder.on("POST", f"{SERVER}/install", recorder.reply(raw=b"<html>Bad Gateway</html>", status=502))
    ticket = client.start_reinstall(
        BOX, hostname="h", ssh_public_key=KEY, user_login="ubuntu", user_password="p"
    )
    assert ticket.box_id == BOX
    assert recorder.calls().count(f"POST {SERVER}/install") == 1


def test_a_lost_install_answer_that_started_nothing_is_sent_again(recorder, client, sleeps) -> None:
    _catalogue(recorder)
    # The read-back shows the install record as it was: the 502 came before Scaleway acted.
    recorder.on("GET", SERVER, server())
    recorder.on(
        "POST",
        f"{SERVER}/install",
        recorder.reply(raw=b"<html>Bad Gateway</html>", status=502),
        server(install="to_install"),
    )
    client.start_reinstall(BOX, hostname="h", ssh_public_key=KEY, user_login="ubuntu", user_password="p")
    assert recorder.calls().count(f"POST {SERVER}/install") == 2


def test_wait_reinstall_follows_the_install_to_completed(recorder, sleeps) -> None:
    client = make(recorder.url, sleeps, poll=PollPolicy(first=1, factor=2, max_interval=4))
    recorder.on("GET", SERVER, server(install="to_install"), server(install="installing"), server())
    client.wait_reinstall(Reinstall(vendor=Vendor.SCALEWAY_EM, box_id=BOX), timeout=60)
    assert recorder.calls() == [f"GET {SERVER}"] * 3 and sleeps == [1, 2]


def test_wait_reinstall_names_a_failed_install(recorder, client) -> None:
    recorder.on("GET", SERVER, server(install="error"))
    with pytest.raises(TaskFailedError, match="the Elastic Metal reinstall failed"):
        client.wait_reinstall(Reinstall(vendor=Vendor.SCALEWAY_EM, box_id=BOX), timeout=60)


def test_a_refused_install_with_nothing_running_surfaces(recorder, client) -> None:
    _catalogue(recorder)
    refused = {
        "details": [{"argument_name": "hostname", "reason": "constraint", "help_message": "too long"}],
        "message": "invalid argument(s)",
        "type": "invalid_arguments",
    }
    recorder.on("POST", f"{SERVER}/install", recorder.reply(refused, status=400))
    with pytest.raises(VendorError) as raised:
        client.start_reinstall(BOX, hostname="h", ssh_public_key=KEY, user_login="ubuntu", user_password="p")
    assert str(raised.value) == (
        "scaleway_em: POST /baremetal/v1/zones/{zone}/servers/{server_id}/install "
        f"[{BOX}] failed (HTTP 400 invalid_arguments): invalid argument(s) (hostname: too long)"
    )


@pytest.mark.parametrize(
    ("install", "status", "state"),
    [
        ("to_install", "ready", InstallState.RUNNING),
        ("installing", "ready", InstallState.RUNNING),
        ("completed", "ready", InstallState.DONE),
        ("error", "ready", InstallState.FAILED),
        ("completed", "error", InstallState.FAILED),
        ("unknown", "ready", InstallState.PENDING),
    ],
)
def test_install_state_reads_the_install_status(recorder, client, install, status, state) -> None:
    recorder.on("GET", SERVER, server(install=install, status=status))
    assert client.install_state(BOX) is state


# --- private networks -----------------------------------------------------------------------------------

PN_OPTION_ON_SERVER = {
    "expires_at": None,
    "id": PN_OPTION,
    "manageable": True,
    "name": "Private Network",
    "private_network": {"bandwidth_in_bps": 0},
}


def test_attach_adds_the_private_network_option_first(recorder, client) -> None:
    recorder.on("GET", SERVER, server())
    options = {
        "total_count": 2,
        "options": [
            {
                "id": "9ce714f1-ed03-4e3b-8c69-d46957ab0ebb",
                "manageable": True,
                "name": "Public Bandwidth 1Gbps",
                "public_bandwidth": {"bandwidth_in_bps": 1000000000},
            },
            {k: v for k, v in PN_OPTION_ON_SERVER.items() if k != "expires_at"},
        ],
    }
    recorder.on("GET", "/baremetal/v1/zones/fr-par-2/options", options)
    recorder.on("POST", f"{SERVER}/options/{PN_OPTION}", server())
    attachment = client.attach_private_network(BOX, PN)
    assert (attachment.status, attachment.vlan, attachment.ready) == ("option_enabling", None, False)
    assert recorder.calls()[1:] == [
        f"GET /baremetal/v1/zones/fr-par-2/options?offer_id={OFFER}&page=1&page_size=100",
        f"POST {SERVER}/options/{PN_OPTION}",
    ]
    assert recorder.last("POST", f"{SERVER}/options/{PN_OPTION}").json() == {}


def test_attach_waits_while_the_option_is_enabling(recorder, client) -> None:
    recorder.on("GET", SERVER, server(options=[{**PN_OPTION_ON_SERVER, "status": "option_status_enabling"}]))
    assert client.attach_private_network(BOX, PN).ready is False
    assert recorder.calls() == [f"GET {SERVER}"]


def test_attach_posts_once_then_reads_the_vlan(recorder, client) -> None:
    recorder.on("GET", SERVER, server(options=[{**PN_OPTION_ON_SERVER, "status": "option_status_enable"}]))
    attachment = {
        "created_at": "2025-12-09T16:06:26.769814Z",
        "id": "2847d06d-9fdc-4300-8b10-0180981fc89b",
        "private_network_id": PN,
        "project_id": PROJECT,
        "server_id": SID,
        "status": "attaching",
        "updated_at": "2025-12-09T16:06:26.769814Z",
        "vlan": 2730,
    }
    listing = "/baremetal/v1/zones/fr-par-2/server-private-networks"
    recorder.on(
        "GET",
        listing,
        {"total_count": 0, "server_private_networks": []},
        {"total_count": 1, "server_private_networks": [{**attachment, "status": "attached"}]},
    )
    recorder.on("POST", f"{SERVER}/private-networks", attachment)
    first = client.attach_private_network(BOX, PN)
    assert (first.status, first.vlan, first.ready) == ("attaching", 2730, False)
    assert recorder.last("POST", f"{SERVER}/private-networks").json() == {"private_network_id": PN}
    assert recorder.last("GET", listing).query == {
        "page": ["1"],
        "page_size": ["100"],
        "project_id": [PROJECT],
        "server_id": [SID],
    }
    second = client.attach_private_network(BOX, PN)
    assert (second.status, second.vlan, second.ready) == ("attached", 2730, True)
    assert recorder.calls().count(f"POST {SERVER}/private-networks") == 1


LISTING = "/baremetal/v1/zones/fr-par-2/server-private-networks"
DETACH = f"{SERVER}/private-networks/{PN}"
OTHER_PN = "0f0ac501-6037-4d2f-9042-69985486c21a"


def attachments(*entries: tuple[str, str, int]) -> dict[str, Any]:
    """The server's attachments as Scaleway lists them: (private network, status, vlan) each."""
    return {
        "total_count": len(entries),
        "server_private_networks": [
            {
                "created_at": "2025-12-09T16:06:26.769814Z",
                "id": f"2847d06d-9fdc-4300-8b10-0180981fc8{i:02d}",
                "ipam_ip_ids": [],
                "private_network_id": pn,
                "project_id": PROJECT,
                "server_id": SID,
                "status": status,
                "updated_at": "2025-12-09T16:06:26.769814Z",
                "vlan": vlan,
            }
            for i, (pn, status, vlan) in enumerate(entries)
        ],
    }


def routes(recorder) -> list[str]:
    return [f"{r.method} {r.path}" for r in recorder.requests]


# Scaleway answers the DELETE 204 with no body (terraform-provider-scaleway's recorded interactions).
GONE = RecordingServer.reply(status=204, raw=b"")


def test_detach_deletes_an_attached_network_once_then_reads_it_going(recorder, client) -> None:
    recorder.on(
        "GET",
        LISTING,
        attachments((PN, "attached", 2730), (OTHER_PN, "attached", 1782)),
        attachments((PN, "detaching", 2730), (OTHER_PN, "attached", 1782)),
        attachments((OTHER_PN, "attached", 1782)),
    )
    recorder.on("DELETE", DETACH, GONE)
    first = client.detach_private_network(BOX, PN)
    assert (first.status, first.vlan, first.gone) == ("detaching", 2730, False)
    assert routes(recorder) == [f"GET {LISTING}", f"DELETE {DETACH}"]
    assert recorder.last("GET", LISTING).query == {
        "page": ["1"],
        "page_size": ["100"],
        "project_id": [PROJECT],
        "server_id": [SID],
    }
    assert recorder.last("DELETE", DETACH).body == b"{}"  # as the SDK sends every request without one
    second = client.detach_private_network(BOX, PN)
    assert (second.status, second.gone) == ("detaching", False)
    third = client.detach_private_network(BOX, PN)
    assert (third.status, third.gone) == ("detached", True)
    # The other network is not touched; one DELETE in all.
    assert routes(recorder) == [f"GET {LISTING}", f"DELETE {DETACH}", f"GET {LISTING}", f"GET {LISTING}"]


def test_detach_from_a_network_the_server_is_not_on_writes_nothing(recorder, client) -> None:
    recorder.on("GET", LISTING, attachments((OTHER_PN, "attached", 1782)))
    assert client.detach_private_network(BOX, PN).gone
    assert routes(recorder) == [f"GET {LISTING}"]


@pytest.mark.parametrize("status", ["attaching", "detaching", "locked"])
def test_detach_sends_no_delete_while_the_attachment_is_not_attached(recorder, client, status) -> None:
    recorder.on("GET", LISTING, attachments((PN, status, 2730)))
    assert client.detach_private_network(BOX, PN).status == status
    assert routes(recorder) == [f"GET {LISTING}"]


def test_an_attachment_in_error_is_detached(recorder, client) -> None:
    recorder.on("GET", LISTING, attachments((PN, "error", 2730)))
    recorder.on("DELETE", DETACH, GONE)
    assert client.detach_private_network(BOX, PN).status == "detaching"
    assert routes(recorder) == [f"GET {LISTING}", f"DELETE {DETACH}"]


def test_a_lost_detach_answer_is_read_back_and_never_sent_twice(recorder, client, sleeps) -> None:
    # The DELETE was carried out, but its answer was a 502: the list shows the attachment detaching.
    recorder.on("GET", LISTING, attachments((PN, "attached", 2730)), attachments((PN, "detaching", 2730)))
    recorder.on("DELETE", DETACH, recorder.reply(raw=b"<html>Bad Gateway</html>", status=502))
    assert client.detach_private_network(BOX, PN).status == "detaching"
    assert routes(recorder) == [f"GET {LISTING}", f"DELETE {DETACH}", f"GET {LISTING}"]


def test_a_lost_detach_answer_read_back_as_gone_is_done(recorder, client, sleeps) -> None:
    recorder.on("GET", LISTING, attachments((PN, "attached", 2730)), attachments())
    recorder.on("DELETE", DETACH, recorder.reply(raw=b"<html>Bad Gateway</html>", status=502))
    assert client.detach_private_network(BOX, PN).gone
    assert recorder.calls().count(f"DELETE {DETACH}") == 1


def test_a_lost_detach_answer_that_took_nothing_is_sent_again(recorder, client, sleeps) -> None:
    # The read-back shows the attachment still attached, twice (verified_write reads again after a
    # pause before it sends anything again): the 502 came before Scaleway acted.
    recorder.on("GET", LISTING, attachments((PN, "attached", 2730)))
    recorder.on("DELETE", DETACH, recorder.reply(raw=b"<html>Bad Gateway</html>", status=502), GONE)
    assert client.detach_private_network(BOX, PN).status == "detaching"
    assert routes(recorder) == [
        f"GET {LISTING}",
        f"DELETE {DETACH}",
        f"GET {LISTING}",
        f"GET {LISTING}",
        f"DELETE {DETACH}",
    ]
    assert len(sleeps) == 1


def test_a_404_to_the_delete_is_read_back(recorder, client) -> None:
    # Another run detached it between the list and the DELETE: Scaleway's 404, then the list says so.
    not_found = {
        "message": "resource is not found",
        "resource": "baremetal_private_network",
        "resource_id": PN,
        "type": "not_found",
    }
    recorder.on("GET", LISTING, attachments((PN, "attached", 2730)), attachments())
    recorder.on("DELETE", DETACH, recorder.reply(not_found, status=404))
    assert client.detach_private_network(BOX, PN).gone


def test_a_404_with_the_attachment_still_attached_surfaces(recorder, client) -> None:
    recorder.on("GET", LISTING, attachments((PN, "attached", 2730)))
    recorder.on("DELETE", DETACH, recorder.reply({"message": "Not Found"}, status=404))
    with pytest.raises(NotFoundError):
        client.detach_private_network(BOX, PN)


def test_private_networks_lists_every_attachment(recorder, client) -> None:
    recorder.on("GET", LISTING, attachments((PN, "attached", 2730), (OTHER_PN, "detaching", 1782)))
    found = client.private_networks(BOX)
    assert [(a.private_network_id, a.status, a.vlan) for a in found] == [
        (PN, "attached", 2730),
        (OTHER_PN, "detaching", 1782),
    ]
    assert routes(recorder) == [f"GET {LISTING}"]
    with pytest.raises(VendorInputError):
        client.detach_private_network(BOX, "")


# --- errors and retries ---------------------------------------------------------------------------------


def test_a_rejected_key_is_an_auth_error_and_not_retried(recorder, client, sleeps) -> None:
    denied = {
        "message": "authentication is denied",
        "method": "api_key",
        "reason": "not_found",
        "type": "denied_authentication",
    }
    recorder.on("GET", SERVER, recorder.reply(denied, status=401))
    with pytest.raises(AuthError):
        client.get_box(BOX)
    assert len(recorder.requests) == 1 and sleeps == []


def test_a_missing_server_is_not_found(recorder, client) -> None:
    recorder.on("GET", SERVER, recorder.reply({"message": "Not Found"}, status=404))
    with pytest.raises(NotFoundError) as raised:
        client.get_box(BOX)
    assert (raised.value.code, raised.value.message) == (None, "Not Found")


def test_5xx_and_429_are_retried_honouring_retry_after(recorder, sleeps) -> None:
    client = make(recorder.url, sleeps, retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=10))
    recorder.on(
        "GET",
        SERVER,
        recorder.reply(
            {"message": "too many requests", "type": "too_many_requests"}, 429, {"Retry-After": "7"}
        ),
        recorder.reply(raw=b"<html>Bad Gateway</html>", status=502),
        server(),
    )
    assert client.get_box(BOX).id == BOX
    assert len(recorder.requests) == 3 and sleeps[0] == 7


def test_a_non_json_error_is_still_typed_and_retried_to_exhaustion(recorder, client) -> None:
    recorder.on("GET", SERVER, recorder.reply(raw=b"<html>upstream</html>", status=503))
    with pytest.raises(TransientVendorError) as raised:
        client.get_box(BOX)
    assert raised.value.status == 503 and len(recorder.requests) == 3


def test_a_secret_echoed_back_is_scrubbed(recorder, client) -> None:
    recorder.on(
        "GET",
        SERVER,
        recorder.reply({"message": f"bad token {SECRET}", "type": "invalid_request_error"}, 400),
    )
    with pytest.raises(VendorError) as raised:
        client.get_box(BOX)
    assert SECRET not in str(raised.value) and "***" in str(raised.value)


def test_a_silent_peer_times_out_instead_of_hanging(sleeps) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        client = make(
            f"http://127.0.0.1:{silent.getsockname()[1]}",
            sleeps,
            timeouts=HttpTimeouts(connect=0.5, read=0.3),
            retry=RetryPolicy(max_attempts=1),
        )
        with pytest.raises(TransientVendorError) as raised:
            client.get_box(BOX)
    assert raised.value.status is None and "connection failed: ReadTimeout" in str(raised.value)


def test_conflicts_are_typed(recorder, client) -> None:
    recorder.on("GET", SERVER, server(tags=["tuist-kura-scw-dev"]))
    recorder.on(
        "PATCH", SERVER, recorder.reply({"message": "resource already exists", "type": "conflict"}, 409)
    )
    with pytest.raises(ConflictError):
        client.set_claim(BOX, Claim("0123456789ab"))


def test_failover_is_refused_clearly(client) -> None:
    with pytest.raises(VendorInputError, match="flexible IPs"):
        client.failover_target("198.51.100.9")
    with pytest.raises(VendorInputError, match="flexible IPs"):
        client.move_failover("198.51.100.9", BOX)


def test_the_client_offers_no_way_to_delete_a_server(client) -> None:
    assert not [name for name in dir(client) if "delete" in name.lower() or "terminate" in name.lower()]


def test_an_answer_of_another_shape_is_a_vendor_error(recorder, client) -> None:
    recorder.on("GET", SERVER, ["not", "a", "server"])
    with pytest.raises(VendorError, match="answer has an unexpected shape: Unmarshalling the type 'Server'"):
        client.get_box(BOX)
    recorder.on("GET", SERVER, recorder.reply(raw=b"<html>maintenance</html>", status=200))
    with pytest.raises(VendorError, match="answer is not JSON"):
        client.get_box(BOX)
