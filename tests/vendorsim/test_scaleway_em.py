"""Elastic Metal (baremetal/v1) and its IAM ssh keys under /scaleway, route by route: raw HTTP for the
exact answers, and the scaleway SDK as it ships for what a client sees.

Real answers these follow (terraform-provider-scaleway's recorded interactions, baremetal testdata):
an unknown server is 404 `{"message": "Not Found"}`; the server stays `ready` while `install.status`
runs `to_install` -> `installing` -> `completed`; a Private Network attachment carries its VLAN while
still `attaching`; the Private Network option reads `option_status_enabling` first.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from scaleway import Client
from scaleway.baremetal.v1 import BaremetalV1API, BaremetalV1PrivateNetworkAPI
from scaleway.baremetal.v1 import marshalling as baremetal_m
from scaleway.iam.v1alpha1 import IamV1Alpha1API
from scaleway_core.api import ScalewayException, ValidationError

from tests.vendorsim.conftest import Served
from tests.vendorsim.test_contract import CONTRACT, _kept_fields, shape_differences

Z = "/baremetal/v1/zones/fr-par-2"
DEV1 = "e1000000-0000-4000-8000-000000000001"
DEV2 = "e1000000-0000-4000-8000-000000000002"  # Private Network option already enabled
DEV3 = "e1000000-0000-4000-8000-000000000003"  # offer EM-B220E-NVME: no Proxmox, no PN option
UBUNTU = "05000000-0000-4000-8000-000000000001"
DEBIAN = "05000000-0000-4000-8000-000000000002"
PROXMOX = "05000000-0000-4000-8000-000000000003"
PN_PAR = "9e700000-0000-4000-8000-000000000001"
PN_AMS = "9e700000-0000-4000-8000-000000000002"
PN_OPTION = "0b700000-0000-4000-8000-000000000001"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJpselPEwoXIjP2bkKTBeNMrbyt7kCy0a+yHcLfRN+W7 fleet"


def scw(
    served: Served,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = None,
    params: Any = None,
) -> requests.Response:
    creds = served.inventory.credentials.scaleway
    assert creds is not None
    secret = creds.secret_key if token is None else token
    return requests.request(
        method,
        f"{served.url}/scaleway{path}",
        json=body,
        params=params,
        headers={"X-Auth-Token": secret} if secret else {},
        timeout=5,
    )


def project(served: Served) -> str:
    creds = served.inventory.credentials.scaleway
    assert creds is not None
    return creds.project_id


def sdk_client(served: Served) -> Client:
    creds = served.inventory.credentials.scaleway
    assert creds is not None
    return Client(
        access_key=creds.access_key,
        secret_key=creds.secret_key,
        default_project_id=creds.project_id,
        default_zone="fr-par-2",
        api_url=f"{served.url}/scaleway",
    )


def key_id(served: Served, public_key: str = KEY, project_id: str | None = None) -> str:
    r = scw(
        served,
        "POST",
        "/iam/v1alpha1/ssh-keys",
        {"name": "fleet", "public_key": public_key, "project_id": project_id or project(served)},
    )
    if r.status_code == 409:
        return str(r.json()["resource_id"])
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


# --- auth -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("", "invalid_argument"),  # no X-Auth-Token at all
        ("not-a-uuid", "invalid_argument"),  # the SDK refuses such a key before sending it
        ("00000000-0000-4000-8000-000000000000", "not_found"),  # well formed, unknown
    ],
)
def test_x_auth_token_is_checked(served: Served, token: str, reason: str) -> None:
    r = scw(served, "GET", f"{Z}/servers", token=token)
    assert (r.status_code, r.json()) == (
        401,
        {
            "message": "authentication is denied",
            "method": "api_key",
            "reason": reason,
            "type": "denied_authentication",
        },
    )
    assert r.headers["x-request-id"]


def test_the_dedibox_key_opens_nothing_here(served: Served) -> None:
    r = scw(served, "GET", f"{Z}/servers", token=served.inventory.credentials.dedibox.secret_key)
    assert r.status_code == 401 and r.json()["reason"] == "not_found"


def test_paths_of_other_scaleway_apis_are_not_served(served: Served) -> None:
    r = scw(served, "GET", "/instance/v1/zones/fr-par-2/servers")
    assert r.status_code == 404 and "no simulated vendor" in r.json()["message"]


# --- servers ----------------------------------------------------------------------------------------


def test_server_list_pages_with_total_count(served: Served) -> None:
    first = scw(served, "GET", f"{Z}/servers", params={"page_size": 2, "project_id": project(served)})
    assert first.status_code == 200
    assert first.json()["total_count"] == 5 and first.headers["X-Total-Count"] == "5"
    assert [s["id"] for s in first.json()["servers"]] == [DEV1, DEV2]
    third = scw(served, "GET", f"{Z}/servers", params={"page": 3, "page_size": 2})
    assert [s["name"] for s in third.json()["servers"]] == ["tuist-scw-staging-1"]
    assert scw(served, "GET", f"{Z}/servers", params={"page": 4, "page_size": 2}).json()["servers"] == []


@pytest.mark.parametrize(
    ("params", "argument"),
    [({"page_size": 101}, "page_size"), ({"page": 0}, "page"), ({"project_id": "p"}, "project_id")],
)
def test_bad_list_arguments_are_invalid_arguments(
    served: Served, params: dict[str, Any], argument: str
) -> None:
    r = scw(served, "GET", f"{Z}/servers", params=params)
    assert r.status_code == 400
    assert r.json()["type"] == "invalid_arguments"
    assert [d["argument_name"] for d in r.json()["details"]] == [argument]


def test_servers_are_filtered_by_every_tag_asked_for(served: Served) -> None:
    def names(tags: list[str]) -> list[str]:
        return [
            s["name"] for s in scw(served, "GET", f"{Z}/servers", params={"tags": tags}).json()["servers"]
        ]

    assert names(["tuist-kura-scw-dev"]) == [f"tuist-scw-dev-{n}" for n in (1, 2, 3, 4)]
    assert names(["tuist-kura-scw-dev", "tuist-claim-5a1ce0de0001"]) == ["tuist-scw-dev-4"]
    assert names(["tuist-kura-scw-prod"]) == []  # a tag, not a prefix


def test_unknown_server_is_elastic_metals_bare_404(served: Served) -> None:
    r = scw(served, "GET", f"{Z}/servers/{DEV1.replace('e1', 'f1')}")
    assert (r.status_code, r.json()) == (404, {"message": "Not Found"})
    # A server of another zone is not found in this one.
    r = scw(served, "GET", f"/baremetal/v1/zones/fr-par-1/servers/{DEV1}")
    assert r.status_code == 404


def test_server_detail_decodes_with_the_sdk(served: Served) -> None:
    server = BaremetalV1API(sdk_client(served)).get_server(server_id=DEV1)
    assert (server.name, server.status, server.offer_name, server.tags) == (
        "tuist-scw-dev-1",
        "ready",
        "EM-A610R-NVME",
        ["tuist-kura-scw-dev"],
    )
    assert [str(ip.address) for ip in server.ips] == ["198.18.4.61"]
    assert server.install is not None and (server.install.status, server.install.user) == (
        "completed",
        "ubuntu",
    )


def test_patch_replaces_the_whole_tag_list(served: Served) -> None:
    r = scw(
        served, "PATCH", f"{Z}/servers/{DEV1}", {"tags": ["tuist-kura-scw-dev", "tuist-claim-0123456789ab"]}
    )
    assert r.status_code == 200 and r.json()["tags"] == ["tuist-kura-scw-dev", "tuist-claim-0123456789ab"]
    r = scw(served, "PATCH", f"{Z}/servers/{DEV1}", {"name": "renamed"})
    assert r.json()["tags"] == ["tuist-kura-scw-dev", "tuist-claim-0123456789ab"]  # null: left as is
    assert r.json()["name"] == "renamed"
    entries = served.admin("GET", "audit").json()["entries"]
    assert [(e["vendor"], e["method"], e["box"]) for e in entries] == [
        ("scaleway_em", "PATCH", f"em-{DEV1}")
    ] * 2


def test_a_body_of_the_wrong_types_is_the_sdks_validation_error(served: Served) -> None:
    r = scw(served, "PATCH", f"{Z}/servers/{DEV1}", {"tags": "tuist-kura-scw-dev", "colour": "red"})
    assert (r.status_code, r.json()) == (
        400,
        {
            "fields": {"tags": ["must be of type list"], "colour": ["unknown field"]},
            "message": "Validation Error",
            "type": "invalid_request_error",
        },
    )
    api = BaremetalV1API(sdk_client(served))
    with pytest.raises(ValidationError) as raised:
        api._throw_on_error(api._request("PATCH", f"{Z}/servers/{DEV1}", body={"tags": [1]}))
    assert raised.value.errors == {"tags": ["must be a list of strings"]}


# --- catalogue ----------------------------------------------------------------------------------------


def test_offers_and_options(served: Served) -> None:
    api = BaremetalV1API(sdk_client(served))
    offers = {o.name: o for o in api.list_offers_all()}
    assert set(offers) == {"EM-A610R-NVME", "EM-B220E-NVME"}
    a610 = offers["EM-A610R-NVME"]
    assert (a610.price_per_month.currency_code, a610.price_per_month.units) == ("EUR", 109)
    assert [d.capacity for d in a610.disks] == [1024 * 10**9] * 2
    assert api.get_offer(offer_id=a610.id).name == "EM-A610R-NVME"
    assert [o.id for o in api.list_options_all(offer_id=a610.id)] == [PN_OPTION]
    assert api.list_options_all(offer_id=offers["EM-B220E-NVME"].id) == []


def test_os_list_says_which_os_the_offer_allows(served: Served) -> None:
    api = BaremetalV1API(sdk_client(served))
    b220 = next(o for o in api.list_offers_all() if o.name == "EM-B220E-NVME")
    allowed = {o.name: o.allowed for o in api.list_os_all(offer_id=b220.id)}
    assert allowed == {"Ubuntu": True, "Debian": True, "Proxmox VE": False}
    ubuntu = api.get_os(os_id=UBUNTU)
    assert ubuntu.user is not None and (ubuntu.user.editable, ubuntu.user.default_value) == (False, "ubuntu")
    assert (
        scw(served, "GET", f"{Z}/os", params={"offer_id": "0ffe0000-0000-4000-8000-00000000dead"}).status_code
        == 404
    )


# --- install ------------------------------------------------------------------------------------------


def test_install_runs_async_and_reinstalls_the_box(served: Served) -> None:
    kid = key_id(served)
    body = {"os_id": UBUNTU, "hostname": "kura-scw-1", "ssh_key_ids": [kid], "password": "Fleet-Sudo-9"}
    r = scw(served, "POST", f"{Z}/servers/{DEV1}/install", body)
    assert r.status_code == 200
    assert (r.json()["status"], r.json()["install"]["status"]) == ("ready", "to_install")
    assert "password" not in r.json()["install"] and r.json()["ping_status"] == "ping_status_unknown"
    served.clock.advance(6)
    assert scw(served, "GET", f"{Z}/servers/{DEV1}").json()["install"]["status"] == "installing"
    assert served.farm.reinstalls() == []
    served.clock.advance(5)
    install = scw(served, "GET", f"{Z}/servers/{DEV1}").json()["install"]
    assert (install["status"], install["hostname"], install["ssh_key_ids"]) == (
        "completed",
        "kura-scw-1",
        [kid],
    )
    assert served.farm.reinstalls() == [
        (
            f"em-{DEV1}",
            {"user": "ubuntu", "authorized_key": KEY, "sudo_password": "Fleet-Sudo-9", "nopasswd_sudo": True},
        )
    ]
    audit = served.admin("GET", "audit").json()["entries"][-1]
    assert audit["body"]["password"] == "<redacted>"
    assert "Fleet-Sudo-9" not in served.admin("GET", "state").text


def test_a_second_install_while_one_runs_is_a_transient_state(served: Served) -> None:
    body = {"os_id": UBUNTU, "hostname": "kura-scw-1", "ssh_key_ids": [key_id(served)]}
    assert scw(served, "POST", f"{Z}/servers/{DEV1}/install", body).status_code == 200
    served.clock.advance(6)
    r = scw(served, "POST", f"{Z}/servers/{DEV1}/install", body)
    assert (r.status_code, r.json()) == (
        409,
        {
            "current_state": "installing",
            "message": "resource is in a transient state",
            "resource": "baremetal_server",
            "resource_id": DEV1,
            "type": "transient_state",
        },
    )
    served.clock.advance(5)
    assert scw(served, "POST", f"{Z}/servers/{DEV1}/install", body).status_code == 200


@pytest.mark.parametrize(
    ("overrides", "argument"),
    [
        ({"os_id": None}, "os_id"),
        ({"os_id": "05000000-0000-4000-8000-00000000dead"}, "os_id"),
        ({"os_id": PROXMOX}, "os_id"),  # EM-B220E-NVME does not take Proxmox
        ({"hostname": "Not_A_Hostname"}, "hostname"),
        ({"ssh_key_ids": []}, "ssh_key_ids"),
        ({"ssh_key_ids": ["9b6c0eb6-0000-4000-8000-000000000000"]}, "ssh_key_ids"),
        ({"user": "tuist"}, "user"),  # Ubuntu's login user is fixed
    ],
)
def test_install_arguments_are_checked(served: Served, overrides: dict[str, Any], argument: str) -> None:
    body = {"os_id": UBUNTU, "hostname": "kura-scw-3", "ssh_key_ids": [key_id(served)], **overrides}
    r = scw(served, "POST", f"{Z}/servers/{DEV3}/install", body)
    assert r.status_code == 400, r.text
    assert r.json()["type"] == "invalid_arguments"
    assert [d["argument_name"] for d in r.json()["details"]] == [argument]
    assert scw(served, "GET", f"{Z}/servers/{DEV3}").json()["install"]["status"] == "completed"


def test_an_ssh_key_of_another_project_is_refused(served: Served) -> None:
    dedibox_key = key_id(
        served, KEY.replace("W7 fleet", "W7 other"), served.inventory.credentials.dedibox.project_id
    )
    body = {"os_id": UBUNTU, "hostname": "h", "ssh_key_ids": [dedibox_key]}
    r = scw(served, "POST", f"{Z}/servers/{DEV1}/install", body)
    assert r.status_code == 400 and r.json()["details"][0]["argument_name"] == "ssh_key_ids"


def test_an_install_fault_ends_in_error_and_leaves_the_box(served: Served) -> None:
    served.admin("POST", "faults", {"task_failure": {"kind": "scaleway_em.install", "count": 1}})
    body = {"os_id": UBUNTU, "hostname": "kura-scw-1", "ssh_key_ids": [key_id(served)]}
    assert scw(served, "POST", f"{Z}/servers/{DEV1}/install", body).status_code == 200
    served.clock.advance(11)
    assert scw(served, "GET", f"{Z}/servers/{DEV1}").json()["install"]["status"] == "error"
    assert served.farm.reinstalls() == []


# --- private networks ---------------------------------------------------------------------------------


def test_private_network_needs_the_option_then_attaches_with_a_vlan(served: Served) -> None:
    attach = f"{Z}/servers/{DEV1}/private-networks"
    r = scw(served, "POST", attach, {"private_network_id": PN_PAR})
    assert (r.status_code, r.json()["type"], r.json()["precondition"]) == (
        412,
        "precondition_failed",
        "attribute_must_be_set",
    )
    r = scw(served, "POST", f"{Z}/servers/{DEV1}/options/{PN_OPTION}", {})
    assert r.status_code == 200
    assert [(o["name"], o["status"]) for o in r.json()["options"]] == [
        ("Private Network", "option_status_enabling")
    ]
    assert scw(served, "POST", attach, {"private_network_id": PN_PAR}).status_code == 412
    served.clock.advance(10)
    r = scw(served, "POST", attach, {"private_network_id": PN_PAR})
    assert r.status_code == 200
    assert (r.json()["status"], r.json()["vlan"]) == ("attaching", 1000)
    assert scw(served, "POST", attach, {"private_network_id": PN_PAR}).json()["type"] == "conflict"
    served.clock.advance(10)
    listed = BaremetalV1PrivateNetworkAPI(sdk_client(served)).list_server_private_networks_all(server_id=DEV1)
    assert [(a.private_network_id, a.status, a.vlan) for a in listed] == [(PN_PAR, "attached", 1000)]


def test_private_network_must_exist_in_the_servers_region(served: Served) -> None:
    attach = f"{Z}/servers/{DEV2}/private-networks"
    assert scw(served, "POST", attach, {"private_network_id": PN_AMS}).json()["type"] == "invalid_arguments"
    unknown = scw(served, "POST", attach, {"private_network_id": PN_PAR.replace("9e7", "9e8")})
    assert (unknown.status_code, unknown.json()["resource"]) == (404, "private_network")
    assert scw(served, "POST", f"{Z}/servers/{DEV3}/options/{PN_OPTION}", {}).status_code == 404


def test_a_private_network_is_detached_with_a_204_then_gone(served: Served) -> None:
    """DELETE .../servers/{id}/private-networks/{pn}: 204 with no body, as Scaleway answers it
    (terraform-provider-scaleway's recorded interactions); the attachment lists as `detaching`, then
    is gone; audited as every write, with the box it touched."""
    attach = f"{Z}/servers/{DEV2}/private-networks"
    assert scw(served, "POST", attach, {"private_network_id": PN_PAR}).status_code == 200
    served.clock.advance(10)
    since = served.admin("GET", "audit").json()["entries"][-1]["id"]

    r = scw(served, "DELETE", f"{attach}/{PN_PAR}")
    assert (r.status_code, r.content) == (204, b"")
    listed = scw(served, "GET", f"{Z}/server-private-networks", params={"server_id": DEV2}).json()
    assert [(a["private_network_id"], a["status"], a["vlan"]) for a in listed["server_private_networks"]] == [
        (PN_PAR, "detaching", 1000)
    ]
    # While it detaches, another DELETE is refused as Scaleway refuses writes to a resource in a
    # transient state.
    again = scw(served, "DELETE", f"{attach}/{PN_PAR}")
    assert (again.status_code, again.json()["type"], again.json()["current_state"]) == (
        409,
        "transient_state",
        "detaching",
    )
    served.clock.advance(10)
    pn = BaremetalV1PrivateNetworkAPI(sdk_client(served))
    assert pn.list_server_private_networks_all(server_id=DEV2) == []
    # Gone: a DELETE now is Scaleway's 404.
    gone = scw(served, "DELETE", f"{attach}/{PN_PAR}")
    assert (gone.status_code, gone.json()) == (
        404,
        {
            "message": "resource is not found",
            "resource": "baremetal_private_network",
            "resource_id": PN_PAR,
            "type": "not_found",
        },
    )
    entries = served.admin("GET", f"audit?since={since}").json()["entries"]
    assert [(e["method"], e["path"], e["status"], e["box"]) for e in entries] == [
        ("DELETE", f"/scaleway{attach}/{PN_PAR}", status, f"em-{DEV2}") for status in (204, 409, 404)
    ]
    # Attached again, the server's next VLAN: never one an earlier attachment had.
    assert scw(served, "POST", attach, {"private_network_id": PN_PAR}).json()["vlan"] == 1001


def test_the_sdk_detaches_and_an_attaching_attachment_is_not_detached(served: Served) -> None:
    pn = BaremetalV1PrivateNetworkAPI(sdk_client(served))
    pn.add_server_private_network(server_id=DEV2, private_network_id=PN_PAR)
    # Still attaching: 409 transient_state, the attachment as it was.
    with pytest.raises(ScalewayException) as refused:
        pn.delete_server_private_network(server_id=DEV2, private_network_id=PN_PAR)
    assert (refused.value.status_code, refused.value.response.json()["current_state"]) == (409, "attaching")
    served.clock.advance(10)
    assert pn.delete_server_private_network(server_id=DEV2, private_network_id=PN_PAR) is None
    assert [a.status for a in pn.list_server_private_networks_all(server_id=DEV2)] == ["detaching"]


def test_detaching_what_is_not_there_is_404(served: Served) -> None:
    # A network the server is not on: Scaleway's standard not_found, naming it.
    r = scw(served, "DELETE", f"{Z}/servers/{DEV1}/private-networks/{PN_PAR}")
    assert (r.status_code, r.json()["type"], r.json()["resource_id"]) == (404, "not_found", PN_PAR)
    # An unknown server: Elastic Metal's bare 404, as for any route of it.
    unknown = DEV1.replace("e1000000", "e1000009")
    r = scw(served, "DELETE", f"{Z}/servers/{unknown}/private-networks/{PN_PAR}")
    assert (r.status_code, r.json()) == (404, {"message": "Not Found"})


# --- delete: served faithfully, never called by the program -------------------------------------------


def test_delete_is_served_and_audited(served: Served) -> None:
    r = scw(served, "DELETE", f"{Z}/servers/{DEV3}")
    assert (r.status_code, r.json()["status"]) == (200, "deleting")
    served.clock.advance(11)
    assert scw(served, "GET", f"{Z}/servers/{DEV3}").status_code == 404
    entries = served.admin("GET", "audit").json()["entries"]
    assert [(e["method"], e["path"]) for e in entries] == [("DELETE", f"/scaleway{Z}/servers/{DEV3}")]


# --- faults, IAM, the SDK unchanged -----------------------------------------------------------------------


def test_injected_errors_use_scaleways_shape(served: Served) -> None:
    served.admin("POST", "faults", {"vendor": "scaleway_em", "error_rate": 1, "status": 503})
    r = scw(served, "GET", f"{Z}/servers")
    assert (r.status_code, r.json()) == (503, {"message": "internal error", "type": "internal_error"})
    # Apple silicon shares the mount, not the fault.
    assert scw(served, "GET", "/apple-silicon/v1alpha1/zones/fr-par-3/servers").status_code == 200


def test_iam_keys_are_one_store_with_dedibox_and_kept_per_project(served: Served) -> None:
    kid = key_id(served)
    assert key_id(served) == kid  # 409 on the same key material names the existing one
    keys = scw(served, "GET", "/iam/v1alpha1/ssh-keys", params={"project_id": project(served)}).json()
    assert [k["id"] for k in keys["ssh_keys"]] == [kid]
    other = served.inventory.credentials.dedibox.project_id
    assert scw(served, "GET", "/iam/v1alpha1/ssh-keys", params={"project_id": other}).json()["ssh_keys"] == []
    # The same key registers in another project of the organization (a key is unique per project only:
    # terraform-provider-scaleway#3084 registers one key in every project), under an id of its own.
    body = {"name": "fleet", "public_key": KEY, "project_id": other}
    r = scw(served, "POST", "/iam/v1alpha1/ssh-keys", body)
    assert r.status_code == 200, r.text
    assert r.json()["id"] != kid and r.json()["project_id"] == other
    again = scw(served, "POST", "/iam/v1alpha1/ssh-keys", body)
    assert (again.status_code, again.json()["resource_id"]) == (409, r.json()["id"])


@pytest.mark.parametrize("bad", ["tuist-claim:0123456789ab", "t" * 65])
def test_a_tag_outside_the_assumed_limits_is_refused(served: Served, bad: str) -> None:
    # Scaleway documents no tag limit; vendorsim holds the client to the one it assumes
    # (providers/vendor.py MARKER_LIMITS), so a claim encoding outside it fails here first.
    r = scw(served, "PATCH", f"{Z}/servers/{DEV1}", {"tags": ["tuist-kura-scw-dev", bad]})
    assert r.status_code == 400 and r.json()["type"] == "invalid_arguments"
    assert [d["argument_name"] for d in r.json()["details"]] == ["tags"]
    assert served.admin("GET", "audit").json()["entries"][-1]["status"] == 400


def test_the_scaleway_sdk_runs_unchanged(served: Served) -> None:
    client = sdk_client(served)
    api, iam = BaremetalV1API(client), IamV1Alpha1API(client)
    # Pages of 2 walked by the SDK's own helper, which stops on a short page.
    servers = api.list_servers_all(zone="fr-par-2", page_size=2)
    assert len(servers) == 5 and servers[0].id == DEV1
    tagged = api.list_servers_all(zone="fr-par-2", tags=["tuist-kura-scw-dev"])
    assert [s.name for s in tagged] == [f"tuist-scw-dev-{n}" for n in (1, 2, 3, 4)]
    updated = api.update_server(server_id=DEV2, tags=["tuist-kura-scw-dev", "tuist-claim-0123456789ab"])
    assert updated.tags[-1] == "tuist-claim-0123456789ab"
    kid = iam.create_ssh_key(public_key=KEY, name="fleet", project_id=client.default_project_id).id
    server = api.install_server(server_id=DEV2, os_id=DEBIAN, hostname="kura-scw-2", ssh_key_ids=[kid])
    assert server.install is not None and server.install.status == "to_install"
    served.clock.advance(11)
    # Finished before any read saw it running: read in progress once (vendorsim/scaleway_em.py get_server).
    assert [api.get_server(server_id=DEV2).install.status for _ in range(2)] == ["installing", "completed"]
    assert served.farm.reinstalls()[-1][1]["user"] == "debian"
    with pytest.raises(ScalewayException) as raised:
        api.get_server(server_id="e1000000-0000-4000-8000-00000000dead")
    assert raised.value.status_code == 404


# --- contract: the shapes Scaleway answers with ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "path", "unmarshal"),
    [
        ("server", f"{Z}/servers/{DEV2}", baremetal_m.unmarshal_Server),
        ("list_options", f"{Z}/options", baremetal_m.unmarshal_ListOptionsResponse),
    ],
)
def test_answers_have_the_recorded_shape(served: Served, name: str, path: str, unmarshal: Any) -> None:
    """contract/scaleway_em/*.json hold Elastic Metal answers as terraform-provider-scaleway recorded
    them (values replaced): vendorsim's answer has the same keys and JSON types, and decodes through
    the SDK keeping every field the recorded one sets."""
    doc = json.loads((CONTRACT / "scaleway_em" / f"{name}.json").read_text())
    body = scw(served, "GET", path).json()
    assert shape_differences(doc, body) == []
    assert _kept_fields(unmarshal(doc), unmarshal(body)) == []
