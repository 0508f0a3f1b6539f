"""Scaleway Elastic Metal API (baremetal/v1) and the IAM ssh keys it installs with, mounted at
/scaleway so the scaleway SDK's api_url is http://127.0.0.1:PORT/scaleway.

Shapes follow the SDK's marshalling (scaleway.baremetal.v1); errors are Scaleway's JSON bodies
({"message", "type", ...}; see scaleway_common). The IAM routes are Dedibox's (one organization,
one IAM): keys are kept per project.

Install: POST .../install answers the server with `install.status` `to_install`, which runs
`installing` and ends `completed` (or `error`) after --task-seconds; the server status stays
`ready`. Under behaviour `scaleway_em.install_read_after_post` = `previous_once`, the first GET of
the server after an accepted install still answers its `install`, `status`, `updated_at` and
`ping_status` from before the POST; the reads after it (and every list) are current. A second
install while one runs is 409 `transient_state`. On `completed` the box is
reinstalled: the OS's login user (`ubuntu`), the IAM keys named in `ssh_key_ids`, the password when
one was given, and cloud-init's passwordless sudo for the user, as on every Ubuntu cloud image.
Private Networks need the server's Private Network option enabled first (POST .../options/{id},
`option_status_enabling` then `option_status_enable`); an attachment runs `attaching` -> `attached`
and carries its VLAN from the start (each of a server's attachments gets the next VLAN of that server,
from 1000, never one an earlier attachment had). DELETE .../servers/{id}/private-networks/{pn id}
answers 204 with no body, as Scaleway's does (terraform-provider-scaleway's recorded
interactions, baremetal testdata server-add-another-private-network), and the attachment lists as
`detaching` until --task-seconds later it is gone; a network the server is not attached to is 404
`not_found`, an attachment still `attaching` or already `detaching` is 409 `transient_state`.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from werkzeug.routing import Map, Rule

from providers.vendor import MARKER_LIMITS, Vendor
from vendorsim import dedibox
from vendorsim.core import Call, Reply, Sim, VendorError, iso, public
from vendorsim.dedibox import (
    TOTAL_COUNT_HEADER,
    bad_method,
    id_headers,
    injected_error,
    invalid_argument,
    invalid_body,
    not_found,
    route_not_found,
)
from vendorsim.faults import keep_previous_answer, take_previous_answer
from vendorsim.scaleway_common import (
    PREFIX,
    attachments_page,
    authenticate,
    body_of,
    check_types,
    conflict,
    order,
    page,
    precondition_failed,
    private_network,
    project_filter,
    transient_state,
    validation_error,
    zone_of,
)

__all__ = [
    "OWNS",
    "PREFIX",
    "ROUTES",
    "TOTAL_COUNT_HEADER",
    "authenticate",
    "bad_method",
    "id_headers",
    "injected_error",
    "invalid_body",
    "route_not_found",
    "seed",
    "settle",
    "state",
]

# The API paths this module answers under the shared /scaleway mount (app.py dispatches on them).
OWNS = ("/baremetal/", "/iam/")
INSTALL_PHASES = ["to_install", "installing", "completed"]
INSTALL_RUNNING = frozenset(INSTALL_PHASES[:-1])
OPTION_PHASES = ["option_status_enabling", "option_status_enable"]
ATTACH_PHASES = ["attaching", "attached"]
DETACH_PHASES = ["detaching", "detached"]  # the last one is never shown: the attachment is gone
_HOSTNAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$")
SERVERS = "scaleway_em_server"
# Scaleway publishes no tag limit: vendorsim enforces the one the client assumes (one table for both).
TAG_MAX = MARKER_LIMITS[Vendor.SCALEWAY_EM].max_length
TAG = re.compile(MARKER_LIMITS[Vendor.SCALEWAY_EM].pattern)
ATTACHMENTS = "scaleway_em_attachment"
# Behaviour: the first GET .../servers/{id} after an accepted POST .../servers/{id}/install answers
# these fields as they were before the POST (previous_once) or current (vendorsim/faults.py BEHAVIOURS).
# The list (GET .../servers) is always current.
INSTALL_READ_AFTER_POST = "scaleway_em.install_read_after_post"
INSTALL_STATE_FIELDS = ("install", "status", "updated_at", "ping_status")


def _account(sim: Sim) -> Any:
    account = sim.inventory.scaleway_em
    if account is None:
        raise not_found("baremetal_zone", "any")
    return account


def _creds(sim: Sim) -> Any:
    creds = sim.inventory.credentials.scaleway
    assert creds is not None  # the inventory requires them with scaleway_em
    return creds


def state(sim: Sim) -> dict[str, Any]:
    return {"servers": public(sim.store.all(SERVERS)), "private_networks": sim.store.all(ATTACHMENTS)}


# --- seeding ---------------------------------------------------------------------------------------


def seed(sim: Sim) -> None:
    account = sim.inventory.scaleway_em
    if account is None:
        return
    creds = _creds(sim)
    now = sim.clock()
    for s in account.servers:
        box = f"em-{s.id}"
        offer = _offer_named(account, s.offer)
        options = []
        if s.private_network_option and offer.private_network_option_id:
            options.append({"id": offer.private_network_option_id, "created_at": now - 3600, "fail": False})
        install = None
        if s.os_id is not None:
            # What the operator's prep left: an install through the console, finished.
            install = {
                "os_id": s.os_id,
                "hostname": s.name,
                "ssh_key_ids": [],
                "status": "completed",
                "user": s.ssh_user,
                "created_at": now - 3600,
                "fail": False,
            }
        sim.store.put(
            SERVERS,
            s.id,
            {
                "id": s.id,
                "name": s.name,
                "zone": s.zone,
                "offer": s.offer,
                "ip": s.ip,
                "tags": list(s.tags),
                "status": s.status,
                "project_id": creds.project_id,
                "organization_id": creds.organization_id,
                "created_at": iso(now),
                "updated_at": iso(now),
                "install": install,
                "options": options,
                "deleted": None,
                "box": box,
            },
        )
        sim.store.put(
            "box",
            box,
            {
                "key": box,
                "vendor": "scaleway_em",
                "vendor_id": s.id,
                "ip": s.ip,
                "ssh_port": s.ssh_port,
                "user": s.ssh_user,
                "authorized_key": sim.inventory.prep.fleet_public_key,
                "sudo_password": sim.inventory.prep.sudo_password,
                "state": "installed" if s.os_id else "bare",
                "generation": 0,
            },
        )


# --- views -----------------------------------------------------------------------------------------


def _offer_named(account: Any, name: str) -> Any:
    for offer in account.offers:
        if offer.name == name:
            return offer
    raise not_found("baremetal_offer", name)


def _money(eur: float) -> dict[str, Any]:
    units = int(eur)
    return {"currency_code": "EUR", "units": units, "nanos": round((eur - units) * 1e9)}


def _pn_option(offer: Any) -> dict[str, Any]:
    return {
        "id": offer.private_network_option_id,
        "name": "Private Network",
        "manageable": True,
        "private_network": {"bandwidth_in_bps": 0},
    }


def _offer_view(offer: Any, zone: str) -> dict[str, Any]:
    options = []
    if offer.private_network_option_id:
        options.append(
            {
                **_pn_option(offer),
                "enabled": False,
                "subscription_period": "monthly",
                "price": _money(0),
                "os_id": None,
            }
        )
    return {
        "id": offer.id,
        "name": offer.name,
        "stock": "available",
        "bandwidth": offer.bandwidth_mbps * 1_000_000,
        "max_bandwidth": offer.bandwidth_mbps * 1_000_000,
        "commercial_range": offer.name.split("-")[1].lower() if "-" in offer.name else offer.name,
        "disks": [{"capacity": d.capacity_gb * 10**9, "type": d.type} for d in offer.disks],
        "enable": True,
        "cpus": [
            {
                "name": offer.cpu,
                "core_count": offer.cores,
                "thread_count": offer.cores * 2,
                "frequency": 3600,
                "benchmark": "",
            }
        ],
        "memories": [
            {
                "capacity": offer.memory_gb * 2**30,
                "type": "DDR4",
                "frequency": 2666,
                "is_ecc": True,
                "ecc_type": "standard",
            }
        ],
        "quota_name": "baremetal_servers",
        "persistent_memories": [],
        "raid_controllers": [],
        "incompatible_os_ids": list(offer.incompatible_os_ids),
        "subscription_period": "monthly",
        "operation_path": f"/baremetal/v1/zones/{zone}/offers/{offer.id}",
        "options": options,
        "private_bandwidth": offer.bandwidth_mbps * 1_000_000,
        "shared_bandwidth": False,
        "tags": [],
        "gpus": [],
        "zone": zone,
        "price_per_hour": None,
        "price_per_month": _money(offer.price_per_month_eur),
        "fee": _money(0),
        "monthly_offer_id": None,
    }


def _os_view(os: Any, zone: str, offer: Any | None = None) -> dict[str, Any]:
    allowed = offer is None or os.id not in offer.incompatible_os_ids
    return {
        "id": os.id,
        "name": os.name,
        "version": os.version,
        "logo_url": f"https://example.invalid/os/{os.name.lower()}.png",
        "enabled": os.enabled,
        "license_required": False,
        "allowed": allowed,
        "custom_partitioning_supported": True,
        "cloud_init_supported": True,
        "zone": zone,
        "ssh": {"editable": True, "required": True, "default_value": None},
        "user": {"editable": os.user_editable, "required": False, "default_value": os.user_default},
        "password": {
            "editable": os.password_editable,
            "required": os.password_required,
            "default_value": None,
        },
        "service_user": None,
        "service_password": None,
        "cloud_init_version": "24.1",
    }


def _install_view(install: dict[str, Any] | None) -> dict[str, Any] | None:
    if install is None:
        return None
    return {
        "os_id": install["os_id"],
        "hostname": install["hostname"],
        "ssh_key_ids": install["ssh_key_ids"],
        "status": install["status"],
        "user": install["user"],
        "service_user": "",
        "service_url": "",
        "partitioning_schema": None,
    }


def _server_view(sim: Sim, server: dict[str, Any]) -> dict[str, Any]:
    account = _account(sim)
    offer = _offer_named(account, server["offer"])
    options = []
    for option in server["options"]:
        done = sim.phase(option["created_at"], OPTION_PHASES)[1]
        options.append(
            {
                **_pn_option(offer),
                "status": "option_status_enable" if done else "option_status_enabling",
                "expires_at": None,
            }
        )
    ip_id = str(uuid.uuid5(uuid.NAMESPACE_URL, server["id"]))
    installing = server["install"] is not None and server["install"]["status"] in INSTALL_RUNNING
    return {
        "id": server["id"],
        "organization_id": server["organization_id"],
        "project_id": server["project_id"],
        "name": server["name"],
        "description": "",
        "status": "deleting" if server["deleted"] else server["status"],
        "offer_id": offer.id,
        "offer_name": offer.name,
        "updated_at": server["updated_at"],
        "created_at": server["created_at"],
        "tags": list(server["tags"]),
        "ips": [
            {
                "id": ip_id,
                "address": server["ip"],
                "reverse": f"{server['id']}.{server['zone']}.baremetal.scw.cloud",
                "version": "IPv4",
                "reverse_status": "active",
                "reverse_status_message": "",
            }
        ],
        "domain": f"{server['id']}.{server['zone']}.baremetal.scw.cloud",
        "boot_type": "normal",
        "zone": server["zone"],
        "ping_status": "ping_status_unknown" if installing else "ping_status_up",
        "options": options,
        "protected": False,
        "install": _install_view(server["install"]),
        "rescue_server": None,
        "user_data": None,
    }


def _attachment_view(a: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": a["id"],
        "project_id": a["project_id"],
        "server_id": a["server_id"],
        "private_network_id": a["private_network_id"],
        # Scaleway assigns the VLAN with the attachment, before it reads attached.
        "vlan": a["vlan"],
        "status": a["status"],
        "created_at": a["created"],
        "updated_at": a.get("updated", a["created"]),
    }


# --- task progression ----------------------------------------------------------------------------------


def settle(sim: Sim) -> None:
    for server in sim.store.all(SERVERS):
        install = server["install"]
        changed = False
        if install is not None and install["status"] in INSTALL_RUNNING:
            status, finished = sim.advance(install, INSTALL_PHASES, failed="error")
            if status is not None:
                install["status"] = status
                changed = True
                if finished and status == "completed":
                    _install_box(sim, server, install)
        deleted = server["deleted"]
        if deleted is not None and server["status"] != "gone" and sim.phase(deleted, ["deleting", "gone"])[1]:
            # Kept as a tombstone (the store has no delete): every route answers 404 for it.
            server["status"] = "gone"
            changed = True
        if changed:
            server["updated_at"] = iso(sim.clock())
            sim.store.put(SERVERS, server["id"], server)
    for a in sim.store.all(ATTACHMENTS):
        if a["status"] == "attaching" and sim.phase(a["created_at"], ATTACH_PHASES)[1]:
            a["status"] = "attached"
            sim.store.put(ATTACHMENTS, a["id"], a)
        elif a["status"] == "detaching" and sim.phase(a["detaching_at"], DETACH_PHASES)[1]:
            sim.store.delete(ATTACHMENTS, a["id"])


def _install_box(sim: Sim, server: dict[str, Any], install: dict[str, Any]) -> None:
    keys = [sim.store.get("iam_ssh_key", k) for k in install["ssh_key_ids"]]
    authorized = "\n".join(k["public_key"] for k in keys if k is not None) or None
    sim.reinstall_box(
        server["box"],
        user=install["user"],
        authorized_key=authorized,
        sudo_password=server.get("secret_install_password"),
        # cloud-init's default user on an Ubuntu image: passwordless sudo.
        nopasswd_sudo=True,
    )


# --- handlers ----------------------------------------------------------------------------------------


def _server(sim: Sim, zone: str, server_id: str) -> dict[str, Any]:
    zone_of(_account(sim).zones, zone)
    server = sim.store.get(SERVERS, server_id)
    if server is None or server["zone"] != zone or server["status"] == "gone":
        # What Elastic Metal answers for an unknown server: no type, no resource.
        raise VendorError(404, {"message": "Not Found"})
    return server


def list_servers(sim: Sim, call: Call, zone: str) -> Any:
    zone_of(_account(sim).zones, zone)
    project = project_filter(call)
    tags = call.args.getlist("tags")
    statuses = call.args.getlist("status")
    name = call.args.get("name")
    servers = [
        s
        for s in sim.store.all(SERVERS)
        if s["zone"] == zone
        and s["status"] != "gone"
        and (project is None or s["project_id"] == project)
        # Every tag asked for must be on the server.
        and all(t in s["tags"] for t in tags)
        and (not statuses or s["status"] in statuses)
        and (not name or name in s["name"])
    ]
    return page(call, [_server_view(sim, s) for s in order(call, servers)], "servers")


def get_server(sim: Sim, call: Call, zone: str, server_id: str) -> Any:
    server = _server(sim, zone, server_id)
    view = _server_view(sim, server)
    previous = take_previous_answer(sim.store, sim.behaviour, INSTALL_READ_AFTER_POST, server_id)
    if previous is not None:
        # The first read after an accepted POST .../install, not caught up with it yet: the install
        # state from before the POST; the other fields (name, tags, ...) are current.
        view.update(previous["body"])
        return view
    install = server["install"]
    if install is not None and install.get("seen_running") is False:
        # Time runs faster here than for the client: a real install lasts many minutes, and a client
        # polling at most a minute apart reads it in progress at least once. An install the sim
        # finished before any read saw it running answers that read as still installing.
        install["seen_running"] = True
        sim.store.put(SERVERS, server_id, server)
        if install["status"] == INSTALL_PHASES[-1]:
            return _server_view(sim, {**server, "install": {**install, "status": INSTALL_PHASES[-2]}})
    return view


def update_server(sim: Sim, call: Call, zone: str, server_id: str) -> Any:
    server = _server(sim, zone, server_id)
    call.box = server["box"]
    body = body_of(call)
    check_types(
        body,
        {"name": str, "description": str, "tags": list, "protected": bool, "user_data": str},
    )
    tags = body.get("tags")
    if tags is not None and not all(isinstance(t, str) for t in tags):
        raise validation_error({"tags": ["must be a list of strings"]})
    bad = [t for t in tags or [] if len(t) > TAG_MAX or not TAG.match(t)]
    if bad:
        raise invalid_argument(
            "tags",
            f"each tag must be at most {TAG_MAX} characters of letters, digits, '.', '_', '-': {bad[0]!r}",
        )
    if body.get("name") is not None:
        if not body["name"] or len(body["name"]) > 255:
            raise invalid_argument("name", "name must be 1 to 255 characters")
        server["name"] = body["name"]
    if tags is not None:
        # The whole list is replaced, as the API documents.
        server["tags"] = list(tags)
    server["updated_at"] = iso(sim.clock())
    sim.store.put(SERVERS, server_id, server)
    return _server_view(sim, server)


def list_os(sim: Sim, call: Call, zone: str) -> Any:
    account = _account(sim)
    zone_of(account.zones, zone)
    offer_id = call.args.get("offer_id")
    offer = None
    if offer_id is not None:
        offer = next((o for o in account.offers if o.id == offer_id), None)
        if offer is None:
            raise not_found("baremetal_offer", offer_id)
    return page(call, [_os_view(o, zone, offer) for o in account.os], "os")


def get_os(sim: Sim, call: Call, zone: str, os_id: str) -> Any:
    account = _account(sim)
    zone_of(account.zones, zone)
    for o in account.os:
        if o.id == os_id:
            return _os_view(o, zone)
    raise not_found("baremetal_os", os_id)


def list_offers(sim: Sim, call: Call, zone: str) -> Any:
    account = _account(sim)
    zone_of(account.zones, zone)
    name = call.args.get("name")
    offers = [o for o in account.offers if not name or o.name == name]
    return page(call, [_offer_view(o, zone) for o in offers], "offers")


def get_offer(sim: Sim, call: Call, zone: str, offer_id: str) -> Any:
    account = _account(sim)
    zone_of(account.zones, zone)
    for o in account.offers:
        if o.id == offer_id:
            return _offer_view(o, zone)
    raise not_found("baremetal_offer", offer_id)


def list_options(sim: Sim, call: Call, zone: str) -> Any:
    account = _account(sim)
    zone_of(account.zones, zone)
    offer_id = call.args.get("offer_id")
    offers = [o for o in account.offers if offer_id is None or o.id == offer_id]
    seen: dict[str, Any] = {}
    for o in offers:
        if o.private_network_option_id:
            seen.setdefault(o.private_network_option_id, _pn_option(o))
    return page(call, list(seen.values()), "options")


def add_option(sim: Sim, call: Call, zone: str, server_id: str, option_id: str) -> Any:
    server = _server(sim, zone, server_id)
    call.box = server["box"]
    check_types(body_of(call), {"expires_at": str})
    offer = _offer_named(_account(sim), server["offer"])
    if option_id != offer.private_network_option_id:
        raise not_found("baremetal_option", option_id)
    if any(o["id"] == option_id for o in server["options"]):
        raise conflict("baremetal_server_option", option_id)
    server["options"].append({"id": option_id, "created_at": sim.clock(), "fail": False})
    sim.store.put(SERVERS, server_id, server)
    return _server_view(sim, server)


def install(sim: Sim, call: Call, zone: str, server_id: str) -> Any:
    account = _account(sim)
    server = _server(sim, zone, server_id)
    call.box = server["box"]
    body = body_of(call)
    check_types(
        body,
        {
            "os_id": str,
            "hostname": str,
            "ssh_key_ids": list,
            "user": str,
            "password": str,
            "service_user": str,
            "service_password": str,
            "partitioning_schema": dict,
            "user_data": dict,
        },
    )
    os = next((o for o in account.os if o.id == body.get("os_id")), None)
    if os is None:
        raise invalid_argument(
            "os_id", "os_id is required" if not body.get("os_id") else f"os {body['os_id']} does not exist"
        )
    offer = _offer_named(account, server["offer"])
    if os.id in offer.incompatible_os_ids or not os.enabled:
        raise invalid_argument(
            "os_id", f"os {os.name} {os.version} cannot be installed on offer {offer.name}"
        )
    hostname = body.get("hostname")
    if not hostname or not _HOSTNAME.match(hostname):
        raise invalid_argument("hostname", "hostname is required: lowercase letters, digits, '.' and '-'")
    ssh_key_ids = body.get("ssh_key_ids")
    if not ssh_key_ids:
        raise invalid_argument("ssh_key_ids", "at least one ssh key is required", reason="required")
    for key_id in ssh_key_ids:
        key = sim.store.get("iam_ssh_key", key_id) if isinstance(key_id, str) else None
        if key is None or key["project_id"] != server["project_id"]:
            raise invalid_argument("ssh_key_ids", f"ssh key {key_id} does not exist in the server's project")
    user = body.get("user")
    if user is not None and not os.user_editable:
        raise invalid_argument("user", f"the user of {os.name} cannot be set")
    password = body.get("password")
    if password is not None and not os.password_editable:
        raise invalid_argument("password", f"the password of {os.name} cannot be set")
    if os.password_required and not password:
        raise invalid_argument("password", f"{os.name} requires a password", reason="required")
    if server["status"] != "ready":
        raise transient_state("baremetal_server", server_id, server["status"])
    current = server["install"]
    if current is not None and current["status"] in INSTALL_RUNNING:
        raise transient_state("baremetal_server", server_id, "installing")
    # Accepted: the install-state fields GET .../servers/{id} answered just before, for its first read
    # after this POST under scaleway_em.install_read_after_post = previous_once (get_server).
    before = _server_view(sim, server)
    keep_previous_answer(
        sim.store,
        sim.behaviour,
        INSTALL_READ_AFTER_POST,
        server_id,
        200,
        {k: before[k] for k in INSTALL_STATE_FIELDS},
    )
    server["install"] = {
        "os_id": os.id,
        "hostname": hostname,
        "ssh_key_ids": list(ssh_key_ids),
        "status": "to_install",
        "user": user or os.user_default,
        "created_at": sim.clock(),
        "fail": sim.faults.take_task_failure("scaleway_em.install"),
        "seen_running": False,  # get_server: every install is read in progress at least once
    }
    # Kept only to set the box's password when the install completes; never returned or shown.
    server["secret_install_password"] = password
    server["updated_at"] = iso(sim.clock())
    sim.store.put(SERVERS, server_id, server)
    return _server_view(sim, server)


def delete_server(sim: Sim, call: Call, zone: str, server_id: str) -> Any:
    server = _server(sim, zone, server_id)
    call.box = server["box"]
    if server["deleted"] is None:
        server["deleted"] = sim.clock()
        sim.store.put(SERVERS, server_id, server)
    return _server_view(sim, server)


def list_attachments(sim: Sim, call: Call, zone: str) -> Any:
    zone_of(_account(sim).zones, zone)
    return attachments_page(sim, call, ATTACHMENTS, zone, _attachment_view)


def add_attachment(sim: Sim, call: Call, zone: str, server_id: str) -> Any:
    account = _account(sim)
    server = _server(sim, zone, server_id)
    call.box = server["box"]
    body = body_of(call)
    check_types(body, {"private_network_id": str})
    pn_id = body.get("private_network_id")
    if not pn_id:
        raise invalid_argument("private_network_id", "private_network_id is required", reason="required")
    pn = private_network(sim, account.private_networks, pn_id, zone)
    enabled = any(sim.phase(o["created_at"], OPTION_PHASES)[1] for o in server["options"])
    if not enabled:
        raise precondition_failed(
            "attribute_must_be_set", "the server's Private Network option must be enabled first"
        )
    mine = [a for a in sim.store.all(ATTACHMENTS) if a["server_id"] == server_id]
    if any(a["private_network_id"] == pn.id for a in mine):
        raise conflict("baremetal_private_network", pn.id)
    now = sim.clock()
    attachment = {
        "id": str(uuid.uuid4()),
        "project_id": server["project_id"],
        "server_id": server_id,
        "private_network_id": pn.id,
        "zone": zone,
        # VLAN tags are per server: the first attachment gets 1000, the next 1001, ... (a detached
        # attachment's VLAN is not handed out again).
        "vlan": sim.store.next_id(f"{ATTACHMENTS}_vlan:{server_id}", 1000),
        "status": "attaching",
        "created_at": now,
        "created": iso(now),
    }
    sim.store.put(ATTACHMENTS, attachment["id"], attachment)
    return _attachment_view(attachment)


def delete_attachment(sim: Sim, call: Call, zone: str, server_id: str, private_network_id: str) -> Any:
    """BaremetalV1PrivateNetworkAPI.delete_server_private_network: 204, no body; the attachment reads
    `detaching` until it is gone (settle)."""
    server = _server(sim, zone, server_id)
    call.box = server["box"]
    found = [
        a
        for a in sim.store.all(ATTACHMENTS)
        if a["server_id"] == server_id and a["private_network_id"] == private_network_id
    ]
    if not found:
        raise not_found("baremetal_private_network", private_network_id)
    (attachment,) = found
    if attachment["status"] in ("attaching", "detaching"):
        raise transient_state("baremetal_private_network", attachment["id"], attachment["status"])
    now = sim.clock()
    attachment.update(status="detaching", detaching_at=now, updated=iso(now))
    sim.store.put(ATTACHMENTS, attachment["id"], attachment)
    return Reply(None, 204)


_Z = "/baremetal/v1/zones/<zone>"
ROUTES = Map(
    [
        Rule(f"{_Z}/servers", methods=["GET"], endpoint=list_servers),
        Rule(f"{_Z}/servers/<server_id>", methods=["GET"], endpoint=get_server),
        Rule(f"{_Z}/servers/<server_id>", methods=["PATCH"], endpoint=update_server),
        Rule(f"{_Z}/servers/<server_id>", methods=["DELETE"], endpoint=delete_server),
        Rule(f"{_Z}/servers/<server_id>/install", methods=["POST"], endpoint=install),
        Rule(f"{_Z}/servers/<server_id>/options/<option_id>", methods=["POST"], endpoint=add_option),
        Rule(f"{_Z}/servers/<server_id>/private-networks", methods=["POST"], endpoint=add_attachment),
        Rule(
            f"{_Z}/servers/<server_id>/private-networks/<private_network_id>",
            methods=["DELETE"],
            endpoint=delete_attachment,
        ),
        Rule(f"{_Z}/server-private-networks", methods=["GET"], endpoint=list_attachments),
        Rule(f"{_Z}/os", methods=["GET"], endpoint=list_os),
        Rule(f"{_Z}/os/<os_id>", methods=["GET"], endpoint=get_os),
        Rule(f"{_Z}/offers", methods=["GET"], endpoint=list_offers),
        Rule(f"{_Z}/offers/<offer_id>", methods=["GET"], endpoint=get_offer),
        Rule(f"{_Z}/options", methods=["GET"], endpoint=list_options),
        Rule("/iam/v1alpha1/ssh-keys", methods=["GET"], endpoint=dedibox.list_ssh_keys),
        Rule("/iam/v1alpha1/ssh-keys", methods=["POST"], endpoint=dedibox.create_ssh_key),
        Rule("/iam/v1alpha1/ssh-keys/<key_id>", methods=["GET"], endpoint=dedibox.get_ssh_key),
    ],
    strict_slashes=False,
)
