"""Dedibox and IAM routes over real HTTP, raw and through the scaleway SDK."""

from __future__ import annotations

import pytest
from scaleway import Client
from scaleway.dedibox.v1 import DediboxV1API
from scaleway_core.api import ScalewayException

from tests.vendorsim.conftest import Served, dedibox

Z = "/dedibox/v1/zones/fr-par-2"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJpselPEwoXIjP2bkKTBeNMrbyt7kCy0a+yHcLfRN+W7 fleet"


def _project(served: Served) -> str:
    return served.inventory.credentials.dedibox.project_id


def _sdk(served: Served) -> DediboxV1API:
    creds = served.inventory.credentials.dedibox
    client = Client(
        access_key=creds.access_key,
        secret_key=creds.secret_key,
        default_project_id=creds.project_id,
        default_zone="fr-par-2",
        api_url=f"{served.url}/dedibox",
    )
    return DediboxV1API(client)


def _key_id(served: Served) -> str:
    r = dedibox(
        served,
        "POST",
        "/iam/v1alpha1/ssh-keys",
        {"name": "fleet", "public_key": KEY + "\n", "project_id": _project(served)},
    )
    if r.status_code == 409:  # registered earlier in this test
        return str(r.json()["resource_id"])
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


def _install_body(served: Served, **overrides: object) -> dict[str, object]:
    body: dict[str, object] = {
        "os_id": 501,
        "hostname": "sd-200101",
        "user_login": "tuist",
        "user_password": "dev-only-sudo",
        "ssh_key_ids": [_key_id(served)],
    }
    body.update(overrides)
    return body


def test_token_is_required_and_checked(served: Served) -> None:
    r = dedibox(served, "GET", f"{Z}/servers", token="", params={"project_id": _project(served)})
    assert (r.status_code, r.json()) == (
        401,
        {
            "message": "authentication is denied",
            "method": "api_key",
            "reason": "not_found",
            "type": "denied_authentication",
        },
    )
    r = dedibox(
        served,
        "GET",
        f"{Z}/servers",
        token="0c6f1b7a-0000-0000-0000-000000000000",
        params={"project_id": _project(served)},
    )
    assert (r.status_code, r.json()["reason"]) == (401, "invalid_argument")
    assert r.headers["x-request-id"]


def test_server_list_is_paginated_summaries_without_tags(served: Served) -> None:
    r = dedibox(
        served, "GET", f"{Z}/servers", params={"project_id": _project(served), "page": 2, "page_size": 3}
    )
    assert r.status_code == 200
    body = r.json()
    assert body["total_count"] == 7
    assert r.headers["X-Total-Count"] == "7"
    assert [s["id"] for s in body["servers"]] == [200104, 200105, 200106]
    assert all("tags" not in s for s in body["servers"])
    assert body["servers"][0]["datacenter_name"] == "DC5"
    assert body["servers"][0]["offer_name"] == "Start-1-M-SSD"


def test_project_id_is_required_on_lists(served: Served) -> None:
    r = dedibox(served, "GET", f"{Z}/servers")
    assert (r.status_code, r.json()) == (
        400,
        {
            "details": [
                {
                    "argument_name": "project_id",
                    "help_message": "project_id is required",
                    "reason": "required",
                }
            ],
            "message": "invalid argument(s)",
            "type": "invalid_arguments",
        },
    )
    other_project = "8c3e37c3-1b3d-4e2a-9e8f-111111111111"
    assert (
        dedibox(served, "GET", f"{Z}/servers", params={"project_id": other_project}).json()["total_count"]
        == 0
    )
    r = dedibox(served, "GET", "/dedibox/v1/zones/us-east-1/servers", params={"project_id": _project(served)})
    assert r.json()["details"][0]["argument_name"] == "zone"


def test_server_detail_and_tags(served: Served) -> None:
    server = dedibox(served, "GET", f"{Z}/servers/200101").json()
    assert server["tags"] == ["tuist-kura-dev"]
    assert (server["offer"]["name"], server["location"]["datacenter_name"], server["os"]["name"]) == (
        "Start-1-M-SSD",
        "DC5",
        "Ubuntu",
    )
    assert server["interfaces"][0]["ips"][0]["semantic"] == "public"
    assert server["interfaces"][0]["ips"][0]["address"] == "198.18.2.31"
    r = dedibox(
        served, "POST", f"{Z}/servers/200101/tags", {"tags": ["tuist-kura-dev", "tuist-claim-0123456789ab"]}
    )
    assert r.json()["tags"] == ["tuist-kura-dev", "tuist-claim-0123456789ab"]
    assert dedibox(served, "GET", f"{Z}/servers/200101").json()["tags"] == [
        "tuist-kura-dev",
        "tuist-claim-0123456789ab",
    ]
    r = dedibox(served, "POST", f"{Z}/servers/200101/tags", {"tags": "tuist"})
    assert r.json()["details"][0] == {
        "argument_name": "tags",
        "help_message": "tags must be a list of strings",
        "reason": "constraint",
    }
    r = dedibox(served, "GET", f"{Z}/servers/1")
    assert (r.status_code, r.json()) == (
        404,
        {
            "message": "resource is not found",
            "resource": "dedibox_server",
            "resource_id": "1",
            "type": "not_found",
        },
    )


def test_os_list_needs_server_id(served: Served) -> None:
    r = dedibox(served, "GET", f"{Z}/os", params={"server_id": 200101, "project_id": _project(served)})
    assert [(o["id"], o["requires_user"], o["allow_ssh_keys"]) for o in r.json()["os"]] == [
        (501, True, True),
        (502, False, True),
        (503, False, False),
    ]
    assert dedibox(served, "GET", f"{Z}/os").json()["details"][0]["argument_name"] == "server_id"


def test_install_progresses_and_reinstalls_the_box(served: Served) -> None:
    body = _install_body(served)
    r = dedibox(served, "POST", f"{Z}/servers/200101/install", body)
    assert r.status_code == 200, r.text
    assert r.json() == {
        "os_id": 501,
        "hostname": "sd-200101",
        "partitions": [],
        "ssh_key_ids": body["ssh_key_ids"],
        "status": "booting",
        "user_login": "tuist",
        "panel_url": "https://console.online.net/en/server/200101/install",
    }
    assert dedibox(served, "GET", f"{Z}/servers/200101").json()["status"] == "installing"
    statuses = []
    for _ in range(10):
        statuses.append(dedibox(served, "GET", f"{Z}/servers/200101/install").json()["status"])
        served.clock.advance(1.25)
    assert statuses == [
        "booting",
        "setting_up_raid",
        "partitioning",
        "formatting",
        "installing",
        "configuring",
        "configuring_bootloader",
        "rebooting",
        "installed",
        "installed",
    ]
    assert dedibox(served, "GET", f"{Z}/servers/200101").json()["status"] == "ready"
    assert served.farm.reinstalls() == [
        (
            "dedibox-200101",
            {
                "user": "tuist",
                "authorized_key": KEY,
                "sudo_password": "dev-only-sudo",
                "nopasswd_sudo": False,
            },
        )
    ]
    state = served.admin("GET", "state").json()
    assert "dev-only-sudo" not in str(state["dedibox"])


def test_second_install_while_running_is_rejected(served: Served) -> None:
    assert dedibox(served, "POST", f"{Z}/servers/200101/install", _install_body(served)).status_code == 200
    served.clock.advance(3)
    r = dedibox(served, "POST", f"{Z}/servers/200101/install", _install_body(served))
    assert (r.status_code, r.json()) == (
        400,
        {"message": "server 200101 already has an installation in progress", "type": "invalid_request_error"},
    )


@pytest.mark.parametrize(
    ("overrides", "argument", "message"),
    [
        ({"root_password": "s3cret-root"}, "root_password", "root_password must be empty for os Ubuntu"),
        ({"user_password": None}, "user_password", "os Ubuntu requires user_password"),
        ({"user_login": ""}, "user_login", "os Ubuntu requires user_login"),
        (
            {"ssh_key_ids": ["4b7c2a64-0000-4000-8000-000000000000"]},
            "ssh_key_ids",
            "ssh key 4b7c2a64-0000-4000-8000-000000000000 does not exist in IAM",
        ),
        ({"os_id": 999}, "os_id", "os 999 does not exist or is not available for this server"),
        (
            {"os_id": 502, "user_login": None, "user_password": None},
            "root_password",
            "os Debian requires root_password",
        ),
    ],
)
def test_install_body_validation(
    served: Served, overrides: dict[str, object], argument: str, message: str
) -> None:
    r = dedibox(served, "POST", f"{Z}/servers/200101/install", _install_body(served, **overrides))
    assert r.status_code == 400
    assert r.json()["details"][0]["argument_name"] == argument
    assert r.json()["details"][0]["help_message"] == message


def test_install_status_404_before_any_install(served: Served) -> None:
    r = dedibox(served, "GET", f"{Z}/servers/200102/install")
    assert (r.status_code, r.json()["resource"]) == (404, "dedibox_server_install")


def test_failover_attach_is_async(served: Served) -> None:
    fips = dedibox(served, "GET", f"{Z}/failover-ips", params={"project_id": _project(served)}).json()
    assert [(f["id"], f["address"], f["server_id"], f["status"]) for f in fips["failover_ips"]] == [
        (3001, "198.51.100.20", 200101, "ready"),
        (3002, "198.51.100.21", 0, "ready"),
        (3003, "198.51.100.22", 200106, "ready"),
    ]
    r = dedibox(served, "POST", f"{Z}/failover-ips/attach", {"server_id": 200102, "fips_ids": [3001]})
    assert (r.status_code, r.json()) == (200, {})
    fip = dedibox(served, "GET", f"{Z}/failover-ips/3001").json()
    assert (fip["status"], fip["server_id"]) == ("busy", 200101)
    r = dedibox(served, "POST", f"{Z}/failover-ips/attach", {"server_id": 200103, "fips_ids": [3001]})
    assert r.json() == {"message": "failover ip 198.51.100.20 is busy", "type": "invalid_request_error"}
    served.clock.advance(10)
    fip = dedibox(served, "GET", f"{Z}/failover-ips/3001").json()
    assert (fip["status"], fip["server_id"], fip["server_zone"]) == ("ready", 200102, "fr-par-2")


def test_failover_attach_validation(served: Served) -> None:
    r = dedibox(served, "POST", f"{Z}/failover-ips/attach", {"server_id": 200102, "fips_ids": "3001"})
    assert r.json()["details"][0]["argument_name"] == "fips_ids"
    r = dedibox(served, "POST", f"{Z}/failover-ips/attach", {"server_id": 200102, "fips_ids": [9]})
    assert (r.status_code, r.json()["resource"]) == (404, "dedibox_failover_ip")


def test_iam_ssh_keys(served: Served) -> None:
    key_id = _key_id(served)
    listed = dedibox(
        served, "GET", "/iam/v1alpha1/ssh-keys", params={"project_id": _project(served), "name": "fleet"}
    ).json()
    assert [k["id"] for k in listed["ssh_keys"]] == [key_id]
    assert listed["ssh_keys"][0]["public_key"] == KEY
    r = dedibox(
        served,
        "POST",
        "/iam/v1alpha1/ssh-keys",
        {"name": "again", "public_key": KEY, "project_id": _project(served)},
    )
    assert (r.status_code, r.json()["type"], r.json()["resource_id"]) == (409, "conflict", key_id)
    r = dedibox(
        served,
        "POST",
        "/iam/v1alpha1/ssh-keys",
        {"name": "x", "public_key": "nope", "project_id": _project(served)},
    )
    assert r.json()["details"][0]["argument_name"] == "public_key"


def test_scaleway_sdk_runs_unchanged(served: Served) -> None:
    api = _sdk(served)
    servers = api.list_servers_all(project_id=_project(served), page_size=2)
    assert [s.id for s in servers] == [200101, 200102, 200103, 200104, 200105, 200106, 200107]
    server = api.get_server(server_id=200104)
    assert server.tags == ["tuist-kura-dev", "tuist-claim-a1ce00000002"]
    key_id = _key_id(served)
    install = api.install_server(
        server_id=200101,
        os_id=501,
        hostname="sd-200101",
        user_login="tuist",
        user_password="dev-only-sudo",
        ssh_key_ids=[key_id],
    )
    assert install.status == "booting"
    with pytest.raises(ScalewayException) as e:
        api.install_server(
            server_id=200101,
            os_id=501,
            hostname="sd-200101",
            user_login="tuist",
            user_password="dev-only-sudo",
            ssh_key_ids=[key_id],
        )
    assert e.value.status_code == 400
    api.attach_failover_i_ps(server_id=200103, fips_ids=[3002])
    assert api.get_failover_ip(ip_id=3002).status == "busy"


def test_partitioning_answers_the_sdks_partition_with_its_type(served: Served) -> None:
    """GET .../partitioning/{os_id} answers the SDK's Partition (ServerDefaultPartitioning), which
    has a `type` the install's InstallPartition does not."""
    import dataclasses

    from scaleway.dedibox.v1 import marshalling
    from scaleway.dedibox.v1.types import Partition

    from vendorsim.dedibox import INSTALL_PARTITION_KEYS

    r = dedibox(served, "GET", f"{Z}/servers/200101/partitioning/502")
    partitions = r.json()["partitions"]
    sdk_keys = {f.name.rstrip("_") for f in dataclasses.fields(Partition)}
    assert [set(p) for p in partitions] == [sdk_keys] * 3
    assert [p["type"] for p in partitions] == ["primary"] * 3
    decoded = marshalling.unmarshal_ServerDefaultPartitioning(r.json()).partitions
    assert [str(p.type_) for p in decoded] == ["primary"] * 3
    assert set(INSTALL_PARTITION_KEYS) == sdk_keys - {"type"}


def test_install_partition_keys_are_the_sdks_install_partition_fields() -> None:
    import dataclasses

    from scaleway.dedibox.v1.types import InstallPartition

    from vendorsim.dedibox import INSTALL_PARTITION_KEYS

    assert tuple(f.name for f in dataclasses.fields(InstallPartition)) == INSTALL_PARTITION_KEYS


def test_install_refuses_a_partition_with_a_key_install_partition_lacks(served: Served) -> None:
    layout = dedibox(served, "GET", f"{Z}/servers/200101/partitioning/502").json()["partitions"]
    body = _install_body(served, os_id=502, user_login=None, user_password=None, root_password="root-pw-1")
    r = dedibox(served, "POST", f"{Z}/servers/200101/install", {**body, "partitions": layout})
    assert (r.status_code, r.json()) == (
        400,
        {
            "details": [
                {
                    "argument_name": "partitions.0.type",
                    "help_message": "unknown field 'type'; a partition takes file_system, raid_level, "
                    "capacity, connectors, mount_point",
                    "reason": "constraint",
                }
            ],
            "message": "invalid argument(s)",
            "type": "invalid_arguments",
        },
    )
    r = dedibox(served, "POST", f"{Z}/servers/200101/install", {**body, "partitions": ["ext4"]})
    assert (r.status_code, r.json()["details"][0]["argument_name"]) == (400, "partitions")
    assert dedibox(served, "GET", f"{Z}/servers/200101/install").status_code == 404  # nothing started
    stripped = [{k: v for k, v in p.items() if k != "type"} for p in layout]
    r = dedibox(served, "POST", f"{Z}/servers/200101/install", {**body, "partitions": stripped})
    assert r.status_code == 200, r.text
    assert r.json()["partitions"] == stripped
