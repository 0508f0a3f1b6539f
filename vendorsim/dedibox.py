"""Scaleway Dedibox API (dedibox/v1) plus the IAM SSH keys it installs with, mounted at
/dedibox so a client's api_url is http://127.0.0.1:PORT/dedibox.

Shapes follow the scaleway SDK's marshalling (scaleway.dedibox.v1, scaleway.iam.v1alpha1);
errors use Scaleway's JSON shapes ({"message", "type", ...}).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import uuid
from typing import Any

from werkzeug.routing import Map, Rule

from providers.vendor import MARKER_LIMITS, Vendor
from vendorsim.core import Call, Reply, Sim, VendorError, iso, public
from vendorsim.faults import keep_previous_answer, take_previous_answer

PREFIX = "/dedibox"
INSTALL_PHASES = [
    "booting",
    "setting_up_raid",
    "partitioning",
    "formatting",
    "installing",
    "configuring",
    "configuring_bootloader",
    "rebooting",
    "installed",
]
INSTALL_RUNNING = frozenset(INSTALL_PHASES[:-1])
ATTACH_PHASES = ["busy", "ready"]
MAX_PAGE_SIZE = 100
# Dedibox publishes no tag limit: vendorsim enforces the one the client assumes (one table for both).
TAG_MAX = MARKER_LIMITS[Vendor.DEDIBOX].max_length
TAG = re.compile(MARKER_LIMITS[Vendor.DEDIBOX].pattern)
TOTAL_COUNT_HEADER = "X-Total-Count"
# Behaviour: the first GET .../install after an accepted POST .../install answers the state from
# before the POST (previous_once) or the current one (vendorsim/faults.py BEHAVIOURS).
INSTALL_READ_AFTER_POST = "dedibox.install_read_after_post"
# The fields of a partition POST .../install takes: the SDK's InstallPartition. GET
# .../partitioning/{os_id} answers the SDK's Partition, which has a `type` besides these; an install
# partition with any other key is refused (tests/vendorsim/test_dedibox.py pins both to the SDK).
INSTALL_PARTITION_KEYS = ("file_system", "raid_level", "capacity", "connectors", "mount_point")


def invalid_argument(name: str, help_message: str, reason: str = "constraint") -> VendorError:
    return VendorError(
        400,
        {
            "details": [{"argument_name": name, "help_message": help_message, "reason": reason}],
            "message": "invalid argument(s)",
            "type": "invalid_arguments",
        },
    )


def not_found(resource: str, resource_id: Any) -> VendorError:
    return VendorError(
        404,
        {
            "message": "resource is not found",
            "resource": resource,
            "resource_id": str(resource_id),
            "type": "not_found",
        },
    )


def invalid_request(message: str) -> VendorError:
    return VendorError(400, {"message": message, "type": "invalid_request_error"})


def invalid_body(message: str) -> VendorError:
    return invalid_request(message)


def id_headers() -> dict[str, str]:
    return {"x-request-id": str(uuid.uuid4())}


def state(sim: Sim) -> dict[str, Any]:
    return {
        "servers": sim.store.all("dedibox_server"),
        "installs": public(sim.store.all("dedibox_install")),
        "failover_ips": sim.store.all("dedibox_fip"),
        "ssh_keys": sim.store.all("iam_ssh_key"),
    }


def injected_error(status: int) -> Any:
    if status == 429:
        return {"message": "too many requests", "type": "too_many_requests"}
    if status >= 500:
        return {"message": "internal error", "type": "internal_error"}
    return {"message": "injected fault", "type": "invalid_request_error"}


# --- seeding ---------------------------------------------------------------------


def seed(sim: Sim) -> None:
    inv = sim.inventory
    creds = inv.credentials.dedibox
    for s in inv.dedibox.servers:
        sim.store.put(
            "dedibox_server",
            s.id,
            {
                "id": s.id,
                "hostname": s.hostname,
                "zone": s.zone,
                "datacenter": s.datacenter,
                "offer": s.offer,
                "offer_id": s.offer_id,
                "ip": s.ip,
                "tags": list(s.tags),
                "os_id": s.os_id,
                "status": "ready",
                "project_id": creds.project_id,
                "organization_id": creds.organization_id,
                "created_at": iso(sim.clock()),
                "box": f"dedibox-{s.id}",
            },
        )
        sim.store.put(
            "box",
            f"dedibox-{s.id}",
            {
                "key": f"dedibox-{s.id}",
                "vendor": "dedibox",
                "vendor_id": s.id,
                "ip": s.ip,
                "ssh_port": s.ssh_port,
                "user": s.ssh_user,
                "authorized_key": inv.prep.fleet_public_key,
                "sudo_password": inv.prep.sudo_password,
                "state": "installed",
                "generation": 0,
            },
        )
    for f in inv.dedibox.failover_ips:
        sim.store.put(
            "dedibox_fip",
            f.id,
            {"id": f.id, "address": f.address, "zone": f.zone, "server_id": f.server_id, "attach": None},
        )


# --- authentication -------------------------------------------------------------


def authenticate(sim: Sim, call: Call) -> None:
    token = call.request.headers.get("X-Auth-Token")
    if not token:
        raise VendorError(
            401,
            {
                "message": "authentication is denied",
                "method": "api_key",
                "reason": "not_found",
                "type": "denied_authentication",
            },
        )
    if not hmac.compare_digest(token, sim.inventory.credentials.dedibox.secret_key):
        raise VendorError(
            401,
            {
                "message": "authentication is denied",
                "method": "api_key",
                "reason": "invalid_argument",
                "type": "denied_authentication",
            },
        )


# --- helpers ----------------------------------------------------------------------


def _zone(sim: Sim, zone: str) -> str:
    if zone not in sim.inventory.dedibox.zones:
        raise invalid_argument("zone", f"zone '{zone}' is not one of {sim.inventory.dedibox.zones}")
    return zone


def _project(sim: Sim, call: Call, *, required: bool) -> str | None:
    project = call.args.get("project_id")
    if project is None and isinstance(call.body, dict):
        project = call.body.get("project_id")
    if project is None:
        if required:
            raise invalid_argument("project_id", "project_id is required", reason="required")
        return None
    try:
        uuid.UUID(project)
    except ValueError:
        raise invalid_argument("project_id", f"'{project}' is not a UUID", reason="syntax") from None
    return str(project)


def _int_arg(call: Call, name: str, default: int, *, maximum: int | None = None) -> int:
    raw = call.args.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) < 1 or (maximum is not None and int(raw) > maximum):
        limit = f" and at most {maximum}" if maximum else ""
        raise invalid_argument(name, f"{name} must be an integer of at least 1{limit}", reason="constraint")
    return int(raw)


def _server(sim: Sim, zone: str, server_id: int) -> dict[str, Any]:
    _zone(sim, zone)
    server = sim.store.get("dedibox_server", server_id)
    if server is None or server["zone"] != zone:
        raise not_found("dedibox_server", server_id)
    return server


def _os(sim: Sim, os_id: int) -> dict[str, Any] | None:
    for o in sim.inventory.dedibox.os:
        if o.id == os_id:
            return _os_view(o.model_dump())
    return None


def _os_view(o: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": o["id"],
        "name": o["name"],
        "type": o["type"],
        "version": o["version"],
        "arch": o["arch"],
        "allow_custom_partitioning": o["allow_custom_partitioning"],
        "allow_ssh_keys": o["allow_ssh_keys"],
        "requires_user": o["requires_user"],
        "requires_admin_password": o["requires_admin_password"],
        "requires_panel_password": o["requires_panel_password"],
        "allowed_filesystems": ["ext4", "xfs", "swap"],
        "requires_license": False,
        "license_offers": [],
        "display_name": f"{o['name']} {o['version']}",
        "password_regex": "^.{8,64}$",
        "hostname_max_length": 63,
        "max_partitions": o["max_partitions"],
        "panel_password_regex": None,
        "requires_valid_hostname": True,
        "hostname_regex": "^[a-z0-9.-]+$",
        "released_at": "2024-04-25T00:00:00Z",
    }


def _offer(server: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": server["offer_id"],
        "name": server["offer"],
        "catalog": "server",
        "payment_frequency": "monthly",
        "pricing": {"currency_code": "EUR", "units": 15, "nanos": 990000000},
        "offer_id": server["offer_id"],
        "server_info": {
            "bandwidth": 250000000,
            "stock": "available",
            "commercial_range": server["offer"],
            "cpus": [],
            "connectivity": 1000000000,
            "rpn_version": 2,
            "onetime_fees": None,
            "disks": [],
            "memories": [],
            "persistent_memories": [],
            "raid_controllers": [],
            "available_options": [],
        },
    }


def _summary_view(server: dict[str, Any]) -> dict[str, Any]:
    # A summary carries no tags: the client has to GET each candidate to read its marker.
    return {
        "id": server["id"],
        "datacenter_name": server["datacenter"],
        "organization_id": server["organization_id"],
        "project_id": server["project_id"],
        "hostname": server["hostname"],
        "created_at": server["created_at"],
        "updated_at": server["created_at"],
        "expired_at": "2099-01-01T00:00:00Z",
        "offer_id": server["offer_id"],
        "offer_name": server["offer"],
        "status": server["status"],
        "zone": server["zone"],
        "is_outsourced": False,
        "qinq": False,
        "is_hds": False,
        "os_id": server["os_id"] or 0,
        "level": {"offer_id": 1, "level": "basic"},
        "rpn_version": 2,
    }


def _server_view(sim: Sim, server: dict[str, Any]) -> dict[str, Any]:
    os = _os(sim, server["os_id"]) if server["os_id"] else None
    return {
        "id": server["id"],
        "organization_id": server["organization_id"],
        "project_id": server["project_id"],
        "hostname": server["hostname"],
        "status": server["status"],
        "abuse_contact": "abuse@example.invalid",
        "zone": server["zone"],
        "has_bmc": False,
        "tags": list(server["tags"]),
        "is_outsourced": False,
        "ipv6_slaac": False,
        "qinq": False,
        "is_rpnv2_member": False,
        "is_hds": False,
        "created_at": server["created_at"],
        "updated_at": server["created_at"],
        "expired_at": "2099-01-01T00:00:00Z",
        "offer": _offer(server),
        "location": {"rack": "A1", "room": "s45", "datacenter_name": server["datacenter"]},
        "os": os,
        "level": {"offer_id": 1, "level": "basic"},
        "rescue_os": None,
        "options": [],
        "interfaces": [
            {
                "card_id": 1,
                "device_id": 1,
                "mac": _mac(server["id"]),
                "type": "public",
                "ips": [
                    {
                        "ip_id": server["id"],
                        "address": server["ip"],
                        "reverse": f"{server['hostname']}.",
                        "version": "ipv4",
                        "cidr": 24,
                        "netmask": "255.255.255.0",
                        "semantic": "public",
                        "gateway": server["ip"].rsplit(".", 1)[0] + ".1",
                        "status": "ready",
                    }
                ],
            }
        ],
    }


def _mac(n: int) -> str:
    raw = n.to_bytes(4, "big")
    return "00:08:a2:" + ":".join(f"{b:02x}" for b in raw[1:])


def _install_view(install: dict[str, Any]) -> dict[str, Any]:
    return {
        "os_id": install["os_id"],
        "hostname": install["hostname"],
        "partitions": install["partitions"],
        "ssh_key_ids": install["ssh_key_ids"],
        "status": install["status"],
        "user_login": install["user_login"],
        "panel_url": install["panel_url"],
    }


def _fip_view(fip: dict[str, Any]) -> dict[str, Any]:
    status = "busy" if fip["attach"] is not None else "ready"
    return {
        "id": fip["id"],
        "address": fip["address"],
        "reverse": f"fip-{fip['id']}.example.invalid.",
        "ip_version": "ipv4",
        "cidr": 32,
        "netmask": "255.255.255.255",
        "gateway_ip": "62.210.0.1",
        "status": status,
        "type": "unknown_type",
        "mac": _mac(fip["server_id"]) if fip["server_id"] else None,
        "server_id": fip["server_id"] or 0,
        "block": None,
        "server_zone": fip["zone"] if fip["server_id"] else None,
    }


def _ssh_key_view(key: dict[str, Any]) -> dict[str, Any]:
    return {
        k: key[k]
        for k in (
            "id",
            "name",
            "public_key",
            "fingerprint",
            "organization_id",
            "project_id",
            "disabled",
            "created_at",
            "updated_at",
        )
    }


_PUBLIC_KEY = re.compile(r"^(ssh-(ed25519|rsa)|ecdsa-sha2-nistp\d+) ([A-Za-z0-9+/=]+)( .*)?$")


def _fingerprint(public_key: str) -> str:
    m = _PUBLIC_KEY.match(public_key)
    assert m is not None
    digest = base64.b64encode(hashlib.sha256(base64.b64decode(m.group(3))).digest()).decode().rstrip("=")
    comment = (m.group(4) or "").strip()
    bits = 256 if m.group(1) == "ssh-ed25519" else 2048
    return f"{bits} SHA256:{digest} {comment} ({m.group(1)})".replace("  ", " ")


# --- task progression ---------------------------------------------------------------


def settle(sim: Sim) -> None:
    for install in sim.store.all("dedibox_install"):
        if install["status"] not in INSTALL_RUNNING:
            continue
        # ServerInstallStatus has no error value: a failed install reads "unknown", the server "error".
        status, finished = sim.advance(install, INSTALL_PHASES, failed="unknown")
        if status is None:
            continue
        install["status"] = status
        if finished:
            server = sim.store.get("dedibox_server", install["server_id"])
            assert server is not None
            if status == "installed":
                server.update(status="ready", os_id=install["os_id"], hostname=install["hostname"])
                keys = [sim.store.get("iam_ssh_key", k) for k in install["ssh_key_ids"]]
                authorized = "\n".join(k["public_key"] for k in keys if k is not None) or None
                sim.reinstall_box(
                    server["box"],
                    user=install["user_login"] or "root",
                    authorized_key=authorized,
                    sudo_password=install["secret_user_password"],
                )
            else:
                server["status"] = "error"
            sim.store.put("dedibox_server", server["id"], server)
            if status == "missing":
                # The other failure seen: the install record is gone, the server in error.
                sim.store.delete("dedibox_install", install["server_id"])
                continue
        sim.store.put("dedibox_install", install["server_id"], install)
    for fip in sim.store.all("dedibox_fip"):
        attach = fip["attach"]
        if attach is None:
            continue
        _, finished = sim.phase(attach["created_at"], ATTACH_PHASES)
        if not finished:
            continue
        if not attach["fail"]:
            # server_id None: a detach.
            fip["server_id"] = attach["server_id"]
        fip["attach"] = None
        sim.store.put("dedibox_fip", fip["id"], fip)


# --- handlers -----------------------------------------------------------------------


def list_servers(sim: Sim, call: Call, zone: str) -> Any:
    _zone(sim, zone)
    project = _project(sim, call, required=True)
    page = _int_arg(call, "page", 1)
    page_size = _int_arg(call, "page_size", 20, maximum=MAX_PAGE_SIZE)
    search = call.args.get("search")
    servers = [
        s
        for s in sim.store.all("dedibox_server")
        if s["zone"] == zone and s["project_id"] == project and (not search or search in s["hostname"])
    ]
    order = call.args.get("order_by", "created_at_asc")
    if order not in ("created_at_asc", "created_at_desc"):
        raise invalid_argument("order_by", f"'{order}' is not one of created_at_asc, created_at_desc")
    servers.sort(key=lambda s: s["id"], reverse=order.endswith("desc"))
    start = (page - 1) * page_size
    return {
        "total_count": len(servers),
        "servers": [_summary_view(s) for s in servers[start : start + page_size]],
    }


def get_server(sim: Sim, call: Call, zone: str, server_id: int) -> Any:
    return _server_view(sim, _server(sim, zone, server_id))


def update_tags(sim: Sim, call: Call, zone: str, server_id: int) -> Any:
    server = _server(sim, zone, server_id)
    call.box = server["box"]
    body = call.body if isinstance(call.body, dict) else {}
    tags = body.get("tags")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise invalid_argument(
            "tags", "tags must be a list of strings", reason="required" if tags is None else "constraint"
        )
    bad = [t for t in tags if len(t) > TAG_MAX or not TAG.match(t)]
    if bad:
        raise invalid_argument(
            "tags",
            f"each tag must be at most {TAG_MAX} characters of letters, digits, '.', '_', '-': {bad[0]!r}",
        )
    server["tags"] = tags
    sim.store.put("dedibox_server", server_id, server)
    return _server_view(sim, server)


def list_os(sim: Sim, call: Call, zone: str) -> Any:
    _zone(sim, zone)
    _project(sim, call, required=False)
    raw = call.args.get("server_id")
    if raw is None:
        raise invalid_argument("server_id", "server_id is required", reason="required")
    if not raw.isdigit():
        raise invalid_argument("server_id", f"'{raw}' is not an integer", reason="syntax")
    _server(sim, zone, int(raw))
    page = _int_arg(call, "page", 1)
    page_size = _int_arg(call, "page_size", 20, maximum=MAX_PAGE_SIZE)
    os_list = [_os_view(o.model_dump()) for o in sim.inventory.dedibox.os]
    start = (page - 1) * page_size
    return {"total_count": len(os_list), "os": os_list[start : start + page_size]}


def install(sim: Sim, call: Call, zone: str, server_id: int) -> Any:
    server = _server(sim, zone, server_id)
    call.box = server["box"]
    body = call.body if isinstance(call.body, dict) else None
    if body is None:
        raise invalid_request("request body must be a JSON object")
    os_id = body.get("os_id")
    if not isinstance(os_id, int) or isinstance(os_id, bool):
        raise invalid_argument("os_id", "os_id is required and must be an integer", reason="required")
    os = _os(sim, os_id)
    if os is None:
        raise invalid_argument("os_id", f"os {os_id} does not exist or is not available for this server")
    hostname = body.get("hostname")
    if not isinstance(hostname, str) or not re.match(r"^[a-z0-9.-]{1,63}$", hostname):
        raise invalid_argument("hostname", "hostname is required: lowercase letters, digits, '.' and '-'")
    user_login, user_password = body.get("user_login"), body.get("user_password")
    root_password = body.get("root_password")
    if os["requires_user"]:
        if not user_login:
            raise invalid_argument("user_login", f"os {os['name']} requires user_login", reason="required")
        if not user_password:
            raise invalid_argument(
                "user_password", f"os {os['name']} requires user_password", reason="required"
            )
        if root_password:
            raise invalid_argument("root_password", f"root_password must be empty for os {os['name']}")
    elif not root_password:
        raise invalid_argument("root_password", f"os {os['name']} requires root_password", reason="required")
    if os["requires_panel_password"] and not body.get("panel_password"):
        raise invalid_argument(
            "panel_password", f"os {os['name']} requires panel_password", reason="required"
        )
    ssh_key_ids = body.get("ssh_key_ids", [])
    if not isinstance(ssh_key_ids, list) or not all(isinstance(k, str) for k in ssh_key_ids):
        raise invalid_argument("ssh_key_ids", "ssh_key_ids must be a list of IAM SSH key ids")
    if ssh_key_ids and not os["allow_ssh_keys"]:
        raise invalid_argument("ssh_key_ids", f"os {os['name']} does not accept ssh keys")
    for key_id in ssh_key_ids:
        if sim.store.get("iam_ssh_key", key_id) is None:
            raise invalid_argument("ssh_key_ids", f"ssh key {key_id} does not exist in IAM")
    partitions = body.get("partitions")
    if partitions is not None and not os["allow_custom_partitioning"]:
        raise invalid_argument("partitions", f"os {os['name']} does not allow custom partitioning")
    _check_install_partitions(partitions)
    current = sim.store.get("dedibox_install", server_id)
    if current is not None and current["status"] in INSTALL_RUNNING:
        # Dedibox has no error class for this; clients read the install status instead.
        raise invalid_request(f"server {server_id} already has an installation in progress")
    new = {
        "server_id": server_id,
        "os_id": os_id,
        "hostname": hostname,
        "partitions": partitions or [],
        "ssh_key_ids": ssh_key_ids,
        "status": "booting",
        "user_login": user_login if os["requires_user"] else None,
        "panel_url": f"https://console.online.net/en/server/{server_id}/install",
        "created_at": sim.clock(),
        "fail": sim.faults.take_task_failure("dedibox.install"),
        "seen_running": False,  # get_install: every install is read in progress at least once
        # Kept only to set the box's sudo password when the install completes; never returned.
        "secret_user_password": user_password if os["requires_user"] else None,
    }
    # Accepted: what GET .../install answered just before, for its first read after this POST under
    # dedibox.install_read_after_post = previous_once (get_install).
    previous = _install_answer(current, server_id)
    keep_previous_answer(sim.store, sim.behaviour, INSTALL_READ_AFTER_POST, server_id, *previous)
    sim.store.put("dedibox_install", server_id, new)
    server["status"] = "installing"
    sim.store.put("dedibox_server", server_id, server)
    return _install_view(new)


def _check_install_partitions(partitions: Any) -> None:
    """`partitions` of POST .../install: a list of InstallPartition objects, no other key (a `type`
    copied from the partitioning answer's Partition is refused)."""
    if partitions is None:
        return
    if not isinstance(partitions, list) or not all(isinstance(p, dict) for p in partitions):
        raise invalid_argument("partitions", "partitions must be a list of objects")
    for index, partition in enumerate(partitions):
        unknown = sorted(set(partition) - set(INSTALL_PARTITION_KEYS))
        if unknown:
            raise invalid_argument(
                f"partitions.{index}.{unknown[0]}",
                f"unknown field {unknown[0]!r}; a partition takes {', '.join(INSTALL_PARTITION_KEYS)}",
            )


def _install_answer(install: dict[str, Any] | None, server_id: int) -> tuple[int, Any]:
    """(status, body) of GET .../install for this install record (None: there is none, 404)."""
    if install is None:
        missing = not_found("dedibox_server_install", server_id)
        return missing.status, missing.body
    return 200, _install_view(install)


def get_install(sim: Sim, call: Call, zone: str, server_id: int) -> Any:
    _server(sim, zone, server_id)
    previous = take_previous_answer(sim.store, sim.behaviour, INSTALL_READ_AFTER_POST, server_id)
    if previous is not None:
        # The first read after an accepted POST .../install, not caught up with it yet: the record
        # from before the POST, or its 404 (a Reply, not a VendorError, so that this read's taking of
        # the kept answer is committed).
        return Reply(previous["body"], status=previous["status"])
    current = sim.store.get("dedibox_install", server_id)
    if current is None:
        raise not_found("dedibox_server_install", server_id)
    if current.get("seen_running") is False:
        # Time runs faster here than for the client: a real install lasts 10 to 30 minutes, and a
        # client polling at most a minute apart reads it in progress at least once. An install the
        # sim finished before any read saw it running answers that read with its last running phase.
        current["seen_running"] = True
        sim.store.put("dedibox_install", server_id, current)
        if current["status"] == INSTALL_PHASES[-1]:
            return _install_view({**current, "status": INSTALL_PHASES[-2]})
    return _install_view(current)


def list_fips(sim: Sim, call: Call, zone: str) -> Any:
    _zone(sim, zone)
    _project(sim, call, required=True)
    only_available = call.args.get("only_available") == "true"
    fips = [f for f in sim.store.all("dedibox_fip") if f["zone"] == zone]
    if only_available:
        fips = [f for f in fips if not f["server_id"]]
    fips.sort(key=lambda f: f["id"])
    page = _int_arg(call, "page", 1)
    page_size = _int_arg(call, "page_size", 20, maximum=MAX_PAGE_SIZE)
    start = (page - 1) * page_size
    return {"total_count": len(fips), "failover_ips": [_fip_view(f) for f in fips[start : start + page_size]]}


def get_fip(sim: Sim, call: Call, zone: str, ip_id: int) -> Any:
    _zone(sim, zone)
    fip = sim.store.get("dedibox_fip", ip_id)
    if fip is None or fip["zone"] != zone:
        raise not_found("dedibox_failover_ip", ip_id)
    return _fip_view(fip)


def attach_fips(sim: Sim, call: Call, zone: str) -> Any:
    _zone(sim, zone)
    body = call.body if isinstance(call.body, dict) else {}
    server_id, fips_ids = body.get("server_id"), body.get("fips_ids")
    if not isinstance(server_id, int) or isinstance(server_id, bool):
        raise invalid_argument("server_id", "server_id is required and must be an integer", reason="required")
    if not isinstance(fips_ids, list) or not fips_ids or not all(isinstance(i, int) for i in fips_ids):
        raise invalid_argument("fips_ids", "fips_ids must be a non-empty list of integers", reason="required")
    server = _server(sim, zone, server_id)
    call.box = server["box"]
    fips = []
    for ip_id in fips_ids:
        fip = sim.store.get("dedibox_fip", ip_id)
        if fip is None or fip["zone"] != zone:
            raise not_found("dedibox_failover_ip", ip_id)
        if fip["attach"] is not None:
            raise invalid_request(f"failover ip {fip['address']} is busy")
        elsewhere = fip["server_id"] and fip["server_id"] != server_id
        if elsewhere and sim.behaviour.get("dedibox.attach_when_attached") == "reject":
            raise invalid_request(
                f"failover ip {fip['address']} is attached to server {fip['server_id']}: detach it first"
            )
        fips.append(fip)
    now = sim.clock()
    for fip in fips:
        fip["attach"] = {
            "server_id": server_id,
            "created_at": now,
            "fail": sim.faults.take_task_failure("dedibox.failoverAttach"),
        }
        sim.store.put("dedibox_fip", fip["id"], fip)
    return {}


def detach_fips(sim: Sim, call: Call, zone: str) -> Any:
    """POST failover-ips/detach {"fips_ids"}: each IP goes `busy`, then `ready` on no server."""
    _zone(sim, zone)
    body = call.body if isinstance(call.body, dict) else {}
    fips_ids = body.get("fips_ids")
    if not isinstance(fips_ids, list) or not fips_ids or not all(isinstance(i, int) for i in fips_ids):
        raise invalid_argument("fips_ids", "fips_ids must be a non-empty list of integers", reason="required")
    fips = []
    for ip_id in fips_ids:
        fip = sim.store.get("dedibox_fip", ip_id)
        if fip is None or fip["zone"] != zone:
            raise not_found("dedibox_failover_ip", ip_id)
        if fip["attach"] is not None:
            raise invalid_request(f"failover ip {fip['address']} is busy")
        fips.append(fip)
    now = sim.clock()
    for fip in fips:
        if fip["server_id"]:
            server = sim.store.get("dedibox_server", fip["server_id"])
            call.box = server["box"] if server else None
            fip["attach"] = {"server_id": None, "created_at": now, "fail": None}
            sim.store.put("dedibox_fip", fip["id"], fip)
    return {}


def partitioning(sim: Sim, call: Call, zone: str, server_id: int, os_id: int) -> Any:
    """GET servers/{id}/partitioning/{os_id}: the default layout of that OS on that server; 400 for
    an OS without custom partitioning (the client sends `partitions` only when it allows them)."""
    _server(sim, zone, server_id)
    os = _os(sim, os_id)
    if os is None:
        raise not_found("dedibox_os", os_id)
    if not os["allow_custom_partitioning"]:
        raise invalid_request(f"os {os['name']} does not allow custom partitioning")
    # The SDK's Partition: a `type` (PartitionType) besides what an install partition takes.
    return {
        "partitions": [
            {
                "type": "primary",
                "file_system": "efi",
                "raid_level": "no_raid",
                "capacity": 536870912,
                "connectors": ["sda"],
                "mount_point": "/boot/efi",
            },
            {
                "type": "primary",
                "file_system": "swap",
                "raid_level": "no_raid",
                "capacity": 4294967296,
                "connectors": ["sda"],
                "mount_point": None,
            },
            {
                "type": "primary",
                "file_system": "ext4",
                "raid_level": "no_raid",
                "capacity": 0,
                "connectors": ["sda"],
                "mount_point": "/",
            },
        ]
    }


def list_ssh_keys(sim: Sim, call: Call) -> Any:
    project = _project(sim, call, required=False)
    name = call.args.get("name")
    page = _int_arg(call, "page", 1)
    page_size = _int_arg(call, "page_size", 20, maximum=MAX_PAGE_SIZE)
    keys = [
        k
        for k in sim.store.all("iam_ssh_key")
        if (project is None or k["project_id"] == project) and (not name or name in k["name"])
    ]
    keys.sort(key=lambda k: k["created_at"] + k["id"])
    start = (page - 1) * page_size
    return {"total_count": len(keys), "ssh_keys": [_ssh_key_view(k) for k in keys[start : start + page_size]]}


def create_ssh_key(sim: Sim, call: Call) -> Any:
    body = call.body if isinstance(call.body, dict) else {}
    project = _project(sim, call, required=True)
    name, public_key = body.get("name", ""), body.get("public_key")
    if not isinstance(public_key, str) or not _PUBLIC_KEY.match(public_key.strip()):
        raise invalid_argument("public_key", "public_key must be an OpenSSH public key", reason="syntax")
    public_key = public_key.strip()
    # A key is unique within its project: the same key may be registered in every project of the
    # organization (terraform-provider-scaleway#3084 does so per project; #713 shows the 409 within one).
    for existing in sim.store.all("iam_ssh_key"):
        if existing["project_id"] == project and existing["public_key"].split()[:2] == public_key.split()[:2]:
            raise VendorError(
                409,
                {
                    "message": "resource already exists",
                    "resource": "iam_ssh_key",
                    "resource_id": existing["id"],
                    "type": "conflict",
                },
            )
    now = iso(sim.clock())
    key_id = str(uuid.uuid4())
    key = {
        "id": key_id,
        "name": name or f"key-{sim.store.next_id('iam_key_name', 1)}",
        "public_key": public_key,
        "fingerprint": _fingerprint(public_key),
        "organization_id": sim.inventory.credentials.dedibox.organization_id,
        "project_id": project,
        "disabled": False,
        "created_at": now,
        "updated_at": now,
    }
    sim.store.put("iam_ssh_key", key_id, key)
    return _ssh_key_view(key)


def get_ssh_key(sim: Sim, call: Call, key_id: str) -> Any:
    key = sim.store.get("iam_ssh_key", key_id)
    if key is None:
        raise not_found("iam_ssh_key", key_id)
    return _ssh_key_view(key)


_Z = "/dedibox/v1/zones/<zone>"
ROUTES = Map(
    [
        Rule(f"{_Z}/servers", methods=["GET"], endpoint=list_servers),
        Rule(f"{_Z}/servers/<int:server_id>", methods=["GET"], endpoint=get_server),
        Rule(f"{_Z}/servers/<int:server_id>/tags", methods=["POST"], endpoint=update_tags),
        Rule(f"{_Z}/servers/<int:server_id>/install", methods=["GET"], endpoint=get_install),
        Rule(f"{_Z}/servers/<int:server_id>/install", methods=["POST"], endpoint=install),
        Rule(f"{_Z}/os", methods=["GET"], endpoint=list_os),
        Rule(f"{_Z}/failover-ips", methods=["GET"], endpoint=list_fips),
        Rule(f"{_Z}/failover-ips/attach", methods=["POST"], endpoint=attach_fips),
        Rule(f"{_Z}/failover-ips/detach", methods=["POST"], endpoint=detach_fips),
        Rule(
            f"{_Z}/servers/<int:server_id>/partitioning/<int:os_id>", methods=["GET"], endpoint=partitioning
        ),
        Rule(f"{_Z}/failover-ips/<int:ip_id>", methods=["GET"], endpoint=get_fip),
        Rule("/iam/v1alpha1/ssh-keys", methods=["GET"], endpoint=list_ssh_keys),
        Rule("/iam/v1alpha1/ssh-keys", methods=["POST"], endpoint=create_ssh_key),
        Rule("/iam/v1alpha1/ssh-keys/<key_id>", methods=["GET"], endpoint=get_ssh_key),
    ],
    strict_slashes=False,
)


def route_not_found(path: str) -> VendorError:
    return VendorError(404, {"message": f"no route for {path}", "type": "not_found"})


def bad_method(method: str, path: str) -> VendorError:
    return VendorError(
        405, {"message": f"method {method} is not allowed on {path}", "type": "invalid_request_error"}
    )
