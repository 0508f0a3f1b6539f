"""AppleSiliconClient against a recording HTTP server: the exact requests, and Scaleway's answers (bodies
shaped as the API's recorded ones: vnc_port 59010, ssh_username m1, sudo_password sometimes empty)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from config.models import Vendor
from providers.applesilicon.client import AppleSiliconClient
from providers.applesilicon.models import compose_name, parse_name, provider_id
from providers.errors import ConflictError, TransientVendorError, VendorInputError
from providers.retry import RetryPolicy
from providers.vendor import Box, Claim, InstallState, Reinstall

SECRET = "3b0e2f4c-55d6-4c3a-9b1e-7d2f6a8c9e01"
PROJECT = "5c1e0a7d-2b3f-4e8a-9c6d-0f1e2d3c4b5a"
SID = "58c331e7-b247-4cda-8f47-f56391969262"
BOX = f"fr-par-3/{SID}"
SERVER = f"/apple-silicon/v1alpha1/zones/fr-par-3/servers/{SID}"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM7HUxRyQtB2rnlhQUcbDGCZcTJg7OvoznOiyC9W6IxH fleet@tuist"
KEY_ID = "b8c7dd23-fcb2-49eb-87e7-008643d4d91e"
PN = "07e5a37e-bdb4-450a-9268-fc39716cadf2"


@pytest.fixture
def client(recorder) -> AppleSiliconClient:
    return AppleSiliconClient(
        api_url=recorder.url,
        access_key="SCWDEVSIMULATOR00001",
        secret_key=SECRET,
        project_id=PROJECT,
        zones=["fr-par-3"],
        retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05),
        sleep=lambda _: None,
    )


def os_entry(name: str, version: str, family: str, *, beta: bool = False, types: list[str] | None = None):
    return {
        "compatible_server_types": types or ["M2-M", "M2-L", "M4-S"],
        "description": "",
        "family": family,
        "id": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
        "image_url": "",
        "is_beta": beta,
        "label": name,
        "name": name,
        "release_notes_url": "",
        "supported_server_types": [],
        "tags": ["macos", "apple", "apple-license"],
        "version": version,
        "xcode_version": "26",
    }


TAHOE = os_entry("macos-tahoe-26.0", "26.0", "Tahoe")


def server(
    *,
    name: str = "tuist-macos-dev-1",
    status: str = "ready",
    sudo_password: str = "RDB9x4Xg8TeX",
    vnc_url: str = "vnc://m1:RDB9x4Xg8TeX@62.210.195.27:59010",
    vpc_status: str = "vpc_disabled",
    zone: str = "fr-par-3",
    sid: str = SID,
) -> dict[str, Any]:
    """Shaped like a recorded GET /apple-silicon/v1alpha1/zones/{zone}/servers/{id} answer."""
    return {
        "applied_runner_configuration_ids": [],
        "commitment": {"cancelled": False, "type": "duration_24h"},
        "created_at": "2025-08-26T16:25:03.873005Z",
        "deletable_at": "2025-08-27T16:25:03.873005Z",
        "deletion_scheduled": False,
        "delivered": True,
        "id": sid,
        "ip": "62.210.195.27",
        "kext_enabled": True,
        "name": name,
        "organization_id": PROJECT,
        "os": TAHOE,
        "project_id": PROJECT,
        "public_bandwidth_bps": 1000000000,
        "runner_configuration": None,
        "ssh_username": "m1",
        "status": status,
        "sudo_password": sudo_password,
        "tags": [],
        "type": "M2-L",
        "updated_at": "2025-08-26T16:25:07.280616Z",
        "vnc_port": 59010,
        "vnc_url": vnc_url,
        "vpc_status": vpc_status,
        "zone": zone,
    }


# --- names carry the marker and the claim ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("claim", "name"),
    [
        (None, "tuist-macos-dev-1"),
        (Claim("0123456789ab"), "tuist-macos-dev-1--c-0123456789ab"),
        (Claim("0123456789ab", releasing=True), "tuist-macos-dev-1--r-0123456789ab"),
    ],
)
def test_claims_round_trip_through_the_name(claim: Claim | None, name: str) -> None:
    assert compose_name("tuist-macos-dev-1", claim) == name
    assert parse_name(name) == ("tuist-macos-dev-1", claim)


def test_names_stay_within_the_limits() -> None:
    assert len(compose_name("m" * 47, Claim("0123456789ab"))) == 63
    with pytest.raises(VendorInputError, match="the box's name before the claim may be at most 47"):
        compose_name("m" * 48, Claim("0123456789ab"))
    with pytest.raises(VendorInputError, match="lowercase letters"):
        compose_name("Tuist Mac", None)
    with pytest.raises(VendorInputError, match="already ends in a claim"):
        compose_name("tuist-macos-dev-1--c-5a1ce0de0001", None)
    with pytest.raises(VendorInputError, match="12 lowercase hex"):
        compose_name("tuist-macos-dev-1", Claim("alice/dev"))


def test_a_hand_written_claim_suffix_still_reads_as_claimed() -> None:
    assert parse_name("tuist-macos-dev-4--c-somebody") == ("tuist-macos-dev-4", Claim("somebody"))


# --- boxes ----------------------------------------------------------------------------------------------


def test_list_boxes_reads_every_zone(recorder) -> None:
    client = AppleSiliconClient(
        api_url=recorder.url,
        access_key="SCWDEVSIMULATOR00001",
        secret_key=SECRET,
        project_id=PROJECT,
        zones=["fr-par-1", "fr-par-3"],
    )
    other = "26326b0c-817a-4f6f-abd8-64d00137f4e0"
    recorder.on(
        "GET",
        "/apple-silicon/v1alpha1/zones/fr-par-1/servers",
        {"total_count": 1, "servers": [server(zone="fr-par-1", sid=other, name="as-quirky-hopper")]},
    )
    recorder.on(
        "GET", "/apple-silicon/v1alpha1/zones/fr-par-3/servers", {"total_count": 1, "servers": [server()]}
    )
    assert [b.id for b in client.list_boxes()] == [f"fr-par-1/{other}", BOX]
    assert recorder.calls() == [
        f"GET /apple-silicon/v1alpha1/zones/fr-par-1/servers?page=1&page_size=100&project_id={PROJECT}",
        f"GET /apple-silicon/v1alpha1/zones/fr-par-3/servers?page=1&page_size=100&project_id={PROJECT}",
    ]
    assert [b.id for b in client.boxes_with_marker("tuist-macos-dev")] == [BOX]


def test_a_server_reads_as_a_box(recorder, client) -> None:
    recorder.on("GET", SERVER, server(name="tuist-macos-dev-1--r-0123456789ab"))
    assert client.get_box(BOX) == Box(
        vendor=Vendor.APPLESILICON,
        id=BOX,
        name="tuist-macos-dev-1--r-0123456789ab",
        datacenter="fr-par-3",
        public_ipv4="62.210.195.27",
        state="ready",
        offer="M2-L",
        marker_field="tuist-macos-dev-1",
        claim=Claim("0123456789ab", releasing=True),
        has_os=True,
    )
    assert provider_id(BOX) == f"applesilicon://fr-par-3/{SID}"


def test_set_claim_renames_the_server(recorder, client) -> None:
    recorder.on("GET", SERVER, server())
    recorder.on("PATCH", SERVER, server(name="tuist-macos-dev-1--c-0123456789ab"))
    client.set_claim(BOX, Claim("0123456789ab"))
    patch = recorder.last("PATCH", SERVER)
    # Only the name: enable_vpc, schedule_deletion and the bandwidth stay as they are.
    assert patch.json() == {"name": "tuist-macos-dev-1--c-0123456789ab"}
    recorder.on("GET", SERVER, server(name="tuist-macos-dev-1--c-0123456789ab"))
    client.set_claim(BOX, None)
    assert recorder.last("PATCH", SERVER).json() == {"name": "tuist-macos-dev-1"}


def test_set_claim_that_would_not_fit_writes_nothing(recorder, client) -> None:
    recorder.on("GET", SERVER, server(name="a-very-long-fleet-marker-that-somebody-chose-here-x"))
    with pytest.raises(VendorInputError):
        client.set_claim(BOX, Claim("0123456789ab"))
    assert recorder.calls() == [f"GET {SERVER}"]


# --- login ----------------------------------------------------------------------------------------------


def test_login_reads_the_sudo_password_or_falls_back_to_the_vnc_url(recorder, client) -> None:
    recorder.on(
        "GET",
        SERVER,
        server(),
        server(sudo_password="", vnc_url="vnc://m1:p%40ss%3Aword@62.210.195.27:59010"),
    )
    first = client.login(BOX)
    assert (first.user, first.sudo_password) == ("m1", "RDB9x4Xg8TeX")
    assert "RDB9x4Xg8TeX" not in repr(first)
    assert client.login(BOX).sudo_password == "p@ss:word"


# --- reinstall ------------------------------------------------------------------------------------------


def _reinstallable(recorder, systems: list[dict[str, Any]]) -> None:
    recorder.on("GET", SERVER, server())
    recorder.on(
        "GET", "/apple-silicon/v1alpha1/zones/fr-par-3/os", {"total_count": len(systems), "os": systems}
    )
    recorder.on("GET", "/iam/v1alpha1/ssh-keys", {"total_count": 0, "ssh_keys": []})
    recorder.on(
        "POST",
        "/iam/v1alpha1/ssh-keys",
        {"id": KEY_ID, "name": "k", "public_key": KEY, "project_id": PROJECT},
    )
    recorder.on("POST", f"{SERVER}/reinstall", server(status="reinstalling"))


SYSTEMS = [
    os_entry("macos-sequoia-15.6", "15.6.1", "Sequoia"),
    TAHOE,
    os_entry("macos-tahoe-26.1", "26.1", "Tahoe"),
    os_entry("macos-tahoe-26.2", "26.2", "Tahoe", beta=True),
    os_entry("macos-tahoe-26.3", "26.3", "Tahoe", types=["M4-S"]),
]


def test_a_family_pin_reinstalls_the_newest_published_image_of_it(recorder, client) -> None:
    _reinstallable(recorder, SYSTEMS)
    client.start_reinstall(
        BOX,
        hostname="ignored",
        ssh_public_key=KEY,
        user_login="m1",
        user_password="ignored",
        os_label="tahoe",
    )
    assert recorder.calls() == [
        f"GET {SERVER}",
        "GET /apple-silicon/v1alpha1/zones/fr-par-3/os?page=1&page_size=100&server_type=M2-L",
        f"GET /iam/v1alpha1/ssh-keys?page=1&page_size=100&project_id={PROJECT}",
        "POST /iam/v1alpha1/ssh-keys",
        f"GET {SERVER}",  # no reinstall runs already: one is started
        f"POST {SERVER}/reinstall",
    ]
    # 26.1: not the beta 26.2, not 26.3 (published for M4-S only); kernel extensions kept as they were.
    assert recorder.last("POST", f"{SERVER}/reinstall").json() == {
        "enable_kext": True,
        "os_id": SYSTEMS[2]["id"],
    }


def test_an_exact_image_pin_is_honoured_or_refused(recorder, client) -> None:
    _reinstallable(recorder, SYSTEMS)
    client.start_reinstall(
        BOX,
        hostname="h",
        ssh_public_key=KEY,
        user_login="m1",
        user_password="",
        os_label="macos-sequoia-15.6",
    )
    assert recorder.last("POST", f"{SERVER}/reinstall").json()["os_id"] == SYSTEMS[0]["id"]
    with pytest.raises(
        VendorInputError, match=re.escape("no Apple silicon image 'macos-tahoe-26.4' for M2-L")
    ):
        client.start_reinstall(
            BOX,
            hostname="h",
            ssh_public_key=KEY,
            user_login="m1",
            user_password="",
            os_label="macos-tahoe-26.4",
        )


def test_the_fleet_user_must_be_the_macs(recorder, client) -> None:
    _reinstallable(recorder, SYSTEMS)
    with pytest.raises(VendorInputError, match="logs in as 'm1', not 'ubuntu'"):
        client.start_reinstall(BOX, hostname="h", ssh_public_key=KEY, user_login="ubuntu", user_password="")
    assert recorder.calls() == [f"GET {SERVER}"]


PREP_CALLS = [
    f"GET {SERVER}",
    "GET /apple-silicon/v1alpha1/zones/fr-par-3/os?page=1&page_size=100&server_type=M2-L",
    f"GET /iam/v1alpha1/ssh-keys?page=1&page_size=100&project_id={PROJECT}",
    "POST /iam/v1alpha1/ssh-keys",
]


def test_a_reinstall_already_running_is_followed_not_started_again(recorder, client) -> None:
    _reinstallable(recorder, SYSTEMS)
    recorder.on("GET", SERVER, server(), server(status="reinstalling"))
    ticket = client.start_reinstall(BOX, hostname="h", ssh_public_key=KEY, user_login="m1", user_password="")
    assert ticket == Reinstall(vendor=Vendor.APPLESILICON, box_id=BOX)
    assert recorder.calls() == [*PREP_CALLS, f"GET {SERVER}"]  # `reinstalling`: followed, no POST
    recorder.on("GET", SERVER, server(status="reinstalling"), server(status="ready"))
    assert client.install_state(BOX, ticket) is InstallState.RUNNING
    assert client.install_state(BOX, ticket) is InstallState.DONE


def _start(client: AppleSiliconClient) -> Reinstall:
    return client.start_reinstall(BOX, hostname="h", ssh_public_key=KEY, user_login="m1", user_password="")


@pytest.mark.parametrize("status", ["rebooting", "starting", "busy", "updating", "locking", "unlocking"])
def test_a_mac_busy_with_something_else_is_not_followed_but_waited_for(recorder, client, status) -> None:
    """An operator rebooted a hung Mac from the console, then took it out of the fleet: its
    `rebooting` is no reinstall. Following it would end the release at the next `ready` with the
    previous holder's data on the Mac; nothing is sent, and the release state retries."""
    _reinstallable(recorder, SYSTEMS)
    recorder.on("GET", SERVER, server(status=status))
    with pytest.raises(TransientVendorError, match=f"the Mac is {status}, not reinstalling") as raised:
        _start(client)
    assert raised.value.maybe_applied is False
    assert recorder.calls() == [f"GET {SERVER}"]  # no fleet key, no POST .../reinstall
    assert client.install_state(BOX) is InstallState.PENDING  # not RUNNING: no reinstall runs


def test_a_rebooting_mac_is_reinstalled_once_ready_and_done_only_after_that(recorder, client) -> None:
    _reinstallable(recorder, SYSTEMS)
    recorder.on("GET", SERVER, server(status="rebooting"))
    with pytest.raises(TransientVendorError):
        _start(client)
    assert recorder.calls() == [f"GET {SERVER}"]
    # The release state retries: the Mac is `ready` now, the reinstall is sent.
    recorder.on("GET", SERVER, server(status="ready"))
    ticket = _start(client)
    assert ticket.started_running is False and ticket.baseline is not None
    assert ticket == Reinstall(
        vendor=Vendor.APPLESILICON, box_id=BOX, started_running=False, baseline=ticket.baseline
    )
    assert recorder.calls()[1:] == [*PREP_CALLS, f"GET {SERVER}", f"POST {SERVER}/reinstall"]
    # Followed: DONE only once the reinstall it started has run.
    # A first read just after the POST still shows the Mac as it was: not this reinstall's `ready`.
    recorder.on(
        "GET", SERVER, server(), server(status="reinstalling"), server(status="reinstalling"), server()
    )
    states = []
    for _ in range(4):
        states.append(client.install_state(BOX, ticket))
        ticket = ticket.after(states[-1])  # as every waiter carries it
    assert states == [InstallState.PENDING, InstallState.RUNNING, InstallState.RUNNING, InstallState.DONE]


def test_a_mac_that_starts_rebooting_after_the_first_read_is_still_not_followed(recorder, client) -> None:
    # ready when start_reinstall reads it, rebooting when the decisive read comes: no POST either.
    _reinstallable(recorder, SYSTEMS)
    recorder.on("GET", SERVER, server(), server(status="rebooting"))
    with pytest.raises(TransientVendorError, match="the Mac is rebooting"):
        _start(client)
    assert recorder.calls() == [*PREP_CALLS, f"GET {SERVER}"]


def _refused(current_state: str) -> Any:
    return {
        "current_state": current_state,
        "message": "resource is in a transient state",
        "resource": "apple_silicon_server",
        "resource_id": SID,
        "type": "transient_state",
    }


def test_a_409_while_a_reinstall_runs_is_that_reinstalls_ticket(recorder, client) -> None:
    _reinstallable(recorder, SYSTEMS)
    recorder.on("GET", SERVER, server(), server(), server(status="reinstalling"))
    recorder.on("POST", f"{SERVER}/reinstall", recorder.reply(_refused("reinstalling"), status=409))
    ticket = _start(client)
    assert ticket.box_id == BOX
    assert recorder.calls() == [*PREP_CALLS, f"GET {SERVER}", f"POST {SERVER}/reinstall", f"GET {SERVER}"]


def test_a_409_while_the_mac_reboots_is_retried_later_not_followed(recorder, client) -> None:
    _reinstallable(recorder, SYSTEMS)
    recorder.on("GET", SERVER, server(), server(), server(status="rebooting"))
    recorder.on("POST", f"{SERVER}/reinstall", recorder.reply(_refused("rebooting"), status=409))
    with pytest.raises(TransientVendorError, match="the Mac is rebooting") as raised:
        _start(client)
    assert raised.value.maybe_applied is False
    assert recorder.calls() == [*PREP_CALLS, f"GET {SERVER}", f"POST {SERVER}/reinstall", f"GET {SERVER}"]


def test_a_409_with_the_mac_ready_again_is_the_refusal(recorder, client) -> None:
    _reinstallable(recorder, SYSTEMS)
    recorder.on("POST", f"{SERVER}/reinstall", recorder.reply(_refused("rebooting"), status=409))
    with pytest.raises(ConflictError):
        _start(client)
    assert recorder.calls().count(f"POST {SERVER}/reinstall") == 1


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ("reinstalling", InstallState.RUNNING),
        # A Mac busy with something else runs no reinstall.
        ("starting", InstallState.PENDING),
        ("rebooting", InstallState.PENDING),
        ("busy", InstallState.PENDING),
        ("updating", InstallState.PENDING),
        ("ready", InstallState.DONE),
        ("error", InstallState.FAILED),
        ("locked", InstallState.PENDING),
    ],
)
def test_install_state_reads_the_server_status(recorder, client, status: str, state: InstallState) -> None:
    recorder.on("GET", SERVER, server(status=status))
    assert client.install_state(BOX) is state


# --- VPC ------------------------------------------------------------------------------------------------


def test_attach_switches_the_vpc_on_first_then_attaches(recorder, client) -> None:
    recorder.on("GET", SERVER, server(vpc_status="vpc_disabled"))
    recorder.on("PATCH", SERVER, server(vpc_status="vpc_updating"))
    assert client.attach_private_network(BOX, PN).status == "vpc_updating"
    assert recorder.last("PATCH", SERVER).json() == {"enable_vpc": True}
    recorder.on("GET", SERVER, server(vpc_status="vpc_enabled"))
    listing = "/apple-silicon/v1alpha1/zones/fr-par-3/server-private-networks"
    recorder.on("GET", listing, {"total_count": 0, "server_private_networks": []})
    recorder.on(
        "POST",
        f"{SERVER}/private-networks",
        {
            "id": "2847d06d-9fdc-4300-8b10-0180981fc89b",
            "project_id": PROJECT,
            "server_id": SID,
            "private_network_id": PN,
            "status": "attaching",
            "ipam_ip_ids": ["8a6d075f-ec0c-4fc6-b61f-afe832f02f59"],
            "vlan": 2730,
            "created_at": "2025-08-26T16:30:00Z",
            "updated_at": "2025-08-26T16:30:00Z",
        },
    )
    attached = client.attach_private_network(BOX, PN)
    assert (attached.status, attached.vlan, attached.ready) == ("attaching", 2730, False)
    assert recorder.last("POST", f"{SERVER}/private-networks").json() == {"private_network_id": PN}


def test_failover_is_refused_clearly(client) -> None:
    with pytest.raises(VendorInputError, match="no movable IP"):
        client.move_failover("198.51.100.9", BOX)


def test_the_client_offers_no_way_to_delete_a_server(client) -> None:
    assert not [name for name in dir(client) if "delete" in name.lower() or "terminate" in name.lower()]
