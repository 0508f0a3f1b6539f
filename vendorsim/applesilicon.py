"""Scaleway Apple silicon API (apple-silicon/v1alpha1), mounted with Elastic Metal at /scaleway so
the scaleway SDK's api_url is http://127.0.0.1:PORT/scaleway.

Shapes follow the SDK's marshalling (scaleway.applesilicon.v1alpha1); errors are Scaleway's JSON
bodies (see scaleway_common). Facts the simulator holds to, from the API and the reference:

- Only the name is writable among a server's identity fields (`tags` is read-only).
- `sudo_password` comes with a server's GET, PATCH and action answers (terraform-provider-scaleway's
  recorded interactions), not in lists (the reference found it empty on listed, adopted Macs); the
  credentials are also in `vnc_url` (vnc://<user>:<password>@<ip>:59010).
- Apple's licence: a Mac cannot be deleted in its first 24 hours. DELETE before `deletable_at` is
  412 `precondition_failed` ("this server cannot be deleted before <UTC time>").
- POST .../reinstall moves the server to `reinstalling`, then `ready` after --task-seconds with a new
  sudo password; a second one meanwhile is 409 `transient_state`. The Mac comes back with macOS
  (the image's version is what its sw_vers prints), Scaleway's user (`m1`), the project's IAM ssh
  keys and the new sudo password. Under behaviour `applesilicon.reinstall_read_after_post` =
  `previous_once`, the first GET of the Mac after an accepted reinstall still answers its `status`,
  `os` and `updated_at` from before the POST (e.g. `ready`); the reads after it are current.
- Private Networks need the VPC option: PATCH enable_vpc runs `vpc_updating` -> `vpc_enabled`; an
  attachment runs `attaching` -> `attached` and carries its VLAN once attached.
"""

from __future__ import annotations

import datetime as dt
import secrets
import uuid
from typing import Any

from werkzeug.routing import Map, Rule

from vendorsim.core import Call, Reply, Sim, iso, public
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

OWNS = ("/apple-silicon/",)
LEASE_SECONDS = 24 * 3600
REINSTALL_PHASES = ["reinstalling", "ready"]
REBOOT_PHASES = ["rebooting", "ready"]
VPC_PHASES = ["vpc_updating", "vpc_enabled"]
ATTACH_PHASES = ["attaching", "attached"]
VNC_PORT = 59010
SERVERS = "applesilicon_server"
ATTACHMENTS = "applesilicon_attachment"
# Behaviour: the first GET .../servers/{id} after an accepted POST .../servers/{id}/reinstall answers
# these fields as they were before the POST (previous_once) or current (vendorsim/faults.py BEHAVIOURS).
# The list (GET .../servers) is always current.
REINSTALL_READ_AFTER_POST = "applesilicon.reinstall_read_after_post"
REINSTALL_STATE_FIELDS = ("status", "updated_at", "os")


def _account(sim: Sim) -> Any:
    account = sim.inventory.applesilicon
    if account is None:
        raise not_found("apple_silicon_zone", "any")
    return account


def _os_by_id(sim: Sim, os_id: str) -> Any:
    for o in _account(sim).os:
        if o.id == os_id:
            return o
    return None


# hw.model of each server type's Mac mini, as sysctl prints it.
_MODELS = {"M1": "Macmini9,1", "M2": "Mac14,3", "M2 Pro": "Mac14,12", "M4": "Mac16,10", "M4 Pro": "Mac16,11"}


def platform_of(sim: Sim, server_type: str, os: Any) -> dict[str, Any]:
    """What the Mac box's sandbox lays down and reports (vendorsim/macos_disk.py, sandbox/macos)."""
    t = next(t for t in _account(sim).server_types if t.name == server_type)
    chip = t.cpu.removeprefix("Apple ")
    return {
        "os": "macos",
        "name": os.name,
        "version": os.version,
        "build": os.build,
        "model": _MODELS.get(chip, "Mac14,12"),
        "cpu": t.cpu,
        "cores": t.cores,
        "memory_bytes": t.memory_gb * 2**30,
    }


def _password() -> str:
    # Scaleway's look: 12 letters and digits.
    alphabet = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
    return "".join(secrets.choice(alphabet) for _ in range(12))


def state(sim: Sim) -> dict[str, Any]:
    return {"servers": public(sim.store.all(SERVERS)), "private_networks": sim.store.all(ATTACHMENTS)}


# --- seeding ---------------------------------------------------------------------------------------


def seed(sim: Sim) -> None:
    account = sim.inventory.applesilicon
    if account is None:
        return
    creds = sim.inventory.credentials.scaleway
    assert creds is not None  # the inventory requires them with applesilicon
    now = sim.clock()
    for s in account.servers:
        box = f"mac-{s.id}"
        created = now - s.age_hours * 3600
        os = _os_by_id(sim, s.os_id)
        sim.store.put(
            SERVERS,
            s.id,
            {
                "id": s.id,
                "name": s.name,
                "zone": s.zone,
                "type": s.type,
                "ip": s.ip,
                "os_id": s.os_id,
                "ssh_user": s.ssh_user,
                "status": "ready",
                "task": None,  # {"kind", "created_at", "fail"} while reinstalling / rebooting
                "vpc": {"enabled": s.vpc_enabled, "since": created},
                "kext_enabled": s.kext_enabled,
                "deletion_scheduled": False,
                "deleted": False,
                "public_bandwidth_bps": 1_000_000_000,
                "project_id": creds.project_id,
                "organization_id": creds.organization_id,
                "created_at": created,
                "updated_at": created,
                # What the operator's prep knows and the API hides after creation (vnc_url keeps it).
                "secret_sudo_password": sim.inventory.prep.sudo_password,
                "box": box,
            },
        )
        sim.store.put(
            "box",
            box,
            {
                "key": box,
                "vendor": "applesilicon",
                "vendor_id": s.id,
                "ip": s.ip,
                "ssh_port": s.ssh_port,
                "user": s.ssh_user,
                "authorized_key": sim.inventory.prep.fleet_public_key,
                "sudo_password": sim.inventory.prep.sudo_password,
                "state": "installed",
                "generation": 0,
                "platform": platform_of(sim, s.type, os),
            },
        )


# --- views -----------------------------------------------------------------------------------------


def _os_view(os: Any) -> dict[str, Any]:
    return {
        "id": os.id,
        "name": os.name,
        "label": os.label,
        "image_url": f"https://example.invalid/apple-silicon/{os.name}.png",
        "family": os.family,
        "is_beta": os.is_beta,
        "version": os.version,
        "xcode_version": os.xcode_version,
        "release_notes_url": "",
        "description": f"{os.label} with Xcode {os.xcode_version}",
        "tags": [],
        "supported_server_types": [
            {"server_type": t, "fast_delivery_available": False} for t in os.server_types
        ],
        "compatible_server_types": list(os.server_types),
    }


def _server_type_view(t: Any, default_os: Any) -> dict[str, Any]:
    return {
        "name": t.name,
        "stock": t.stock,
        "cpu": {
            "name": t.cpu,
            "core_count": t.cores,
            "frequency": 3_500_000_000,
            "sockets": 1,
            "threads_per_core": 1,
        },
        "disk": {"capacity": t.disk_gb * 10**9, "type": "SSD"},
        "memory": {"capacity": t.memory_gb * 2**30, "type": "LPDDR5"},
        "minimum_lease_duration": "86400s",
        "gpu": {"count": 19},
        "network": {
            "public_bandwidth_bps": t.bandwidths_bps[0],
            "supported_bandwidth": list(t.bandwidths_bps),
            "default_public_bandwidth": t.bandwidths_bps[0],
        },
        "default_os": _os_view(default_os) if default_os is not None else None,
        "npu": {"count": 16},
    }


def _status(sim: Sim, server: dict[str, Any]) -> str:
    task = server["task"]
    if task is None:
        return str(server["status"])
    phases = REINSTALL_PHASES if task["kind"] == "reinstall" else REBOOT_PHASES
    return phases[sim.phase(task["created_at"], phases)[0]]


def _vpc_status(sim: Sim, server: dict[str, Any]) -> str:
    vpc = server["vpc"]
    if not vpc["enabled"]:
        return "vpc_disabled"
    return VPC_PHASES[sim.phase(vpc["since"], VPC_PHASES)[0]]


def _server_view(sim: Sim, server: dict[str, Any], *, listed: bool = False) -> dict[str, Any]:
    os = _os_by_id(sim, server["os_id"])
    password = server["secret_sudo_password"]
    return {
        "id": server["id"],
        "type": server["type"],
        "name": server["name"],
        "project_id": server["project_id"],
        "organization_id": server["organization_id"],
        "ip": server["ip"],
        "vnc_url": f"vnc://{server['ssh_user']}:{password}@{server['ip']}:{VNC_PORT}",
        "ssh_username": server["ssh_user"],
        "sudo_password": "" if listed else password,
        "vnc_port": VNC_PORT,
        "status": _status(sim, server),
        "deletion_scheduled": server["deletion_scheduled"],
        "zone": server["zone"],
        "delivered": True,
        "os": _os_view(os) if os is not None else None,
        "created_at": iso(server["created_at"]),
        "updated_at": iso(server["updated_at"]),
        "deletable_at": iso(server["created_at"] + LEASE_SECONDS),
        "vpc_status": _vpc_status(sim, server),
        "public_bandwidth_bps": server["public_bandwidth_bps"],
        "tags": [],
        "applied_runner_configuration_ids": [],
        "kext_enabled": server["kext_enabled"],
        "commitment": {"type": "duration_24h", "cancelled": False},
        "runner_configuration": None,
    }


def _attachment_view(a: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": a["id"],
        "project_id": a["project_id"],
        "server_id": a["server_id"],
        "private_network_id": a["private_network_id"],
        "status": a["status"],
        "ipam_ip_ids": [a["ipam_ip_id"]],
        "vlan": a["vlan"],
        "created_at": iso(a["created_at"]),
        "updated_at": iso(a["created_at"]),
    }


# --- task progression ----------------------------------------------------------------------------------


def settle(sim: Sim) -> None:
    for server in sim.store.all(SERVERS):
        task = server["task"]
        if task is None:
            continue
        phases = REINSTALL_PHASES if task["kind"] == "reinstall" else REBOOT_PHASES
        if not sim.phase(task["created_at"], phases)[1]:
            continue
        server["task"] = None
        server["updated_at"] = sim.clock()
        if task["fail"]:
            server["status"] = "error"
        elif task["kind"] == "reinstall":
            server.update(status="ready", os_id=task["os_id"], kext_enabled=task["enable_kext"])
            server["secret_sudo_password"] = _password()
            _reinstall_box(sim, server)
        else:
            server["status"] = "ready"
        sim.store.put(SERVERS, server["id"], server)
    for a in sim.store.all(ATTACHMENTS):
        if a["status"] == "attaching" and sim.phase(a["created_at"], ATTACH_PHASES)[1]:
            a["status"] = "attached"
            sim.store.put(ATTACHMENTS, a["id"], a)


def _reinstall_box(sim: Sim, server: dict[str, Any]) -> None:
    # Scaleway puts the project's IAM keys on the Mac when it installs macOS.
    keys = [k for k in sim.store.all("iam_ssh_key") if k["project_id"] == server["project_id"]]
    authorized = "\n".join(k["public_key"] for k in keys) or None
    sim.reinstall_box(
        server["box"],
        user=server["ssh_user"],
        authorized_key=authorized,
        sudo_password=server["secret_sudo_password"],
        platform=platform_of(sim, server["type"], _os_by_id(sim, server["os_id"])),
    )


# --- handlers ----------------------------------------------------------------------------------------


def _server(sim: Sim, zone: str, server_id: str) -> dict[str, Any]:
    zone_of(_account(sim).zones, zone)
    server = sim.store.get(SERVERS, server_id)
    if server is None or server["zone"] != zone or server["deleted"]:
        raise not_found("apple_silicon_server", server_id)
    return server


def list_server_types(sim: Sim, call: Call, zone: str) -> Any:
    account = _account(sim)
    zone_of(account.zones, zone)
    return {"server_types": [_server_type_view(t, _default_os(sim, t.name)) for t in account.server_types]}


def _default_os(sim: Sim, server_type: str) -> Any:
    fits = [o for o in _account(sim).os if server_type in o.server_types and not o.is_beta]
    return max(fits, key=lambda o: [int(p) if p.isdigit() else 0 for p in o.version.split(".")], default=None)


def get_server_type(sim: Sim, call: Call, zone: str, server_type: str) -> Any:
    account = _account(sim)
    zone_of(account.zones, zone)
    for t in account.server_types:
        if t.name == server_type:
            return _server_type_view(t, _default_os(sim, t.name))
    raise not_found("apple_silicon_server_type", server_type)


def list_os(sim: Sim, call: Call, zone: str) -> Any:
    account = _account(sim)
    zone_of(account.zones, zone)
    server_type = call.args.get("server_type")
    name = call.args.get("name")
    systems = [
        o
        for o in account.os
        if (not server_type or server_type in o.server_types) and (not name or o.name.startswith(name))
    ]
    return page(call, [_os_view(o) for o in systems], "os")


def get_os(sim: Sim, call: Call, zone: str, os_id: str) -> Any:
    zone_of(_account(sim).zones, zone)
    os = _os_by_id(sim, os_id)
    if os is None:
        raise not_found("apple_silicon_os", os_id)
    return _os_view(os)


def list_servers(sim: Sim, call: Call, zone: str) -> Any:
    zone_of(_account(sim).zones, zone)
    project = project_filter(call)
    servers = [
        s
        for s in sim.store.all(SERVERS)
        if s["zone"] == zone and not s["deleted"] and (project is None or s["project_id"] == project)
    ]
    return page(call, [_server_view(sim, s, listed=True) for s in order(call, servers)], "servers")


def get_server(sim: Sim, call: Call, zone: str, server_id: str) -> Any:
    server = _server(sim, zone, server_id)
    view = _server_view(sim, server)
    previous = take_previous_answer(sim.store, sim.behaviour, REINSTALL_READ_AFTER_POST, server_id)
    if previous is not None:
        # The first read after an accepted POST .../reinstall, not caught up with it yet: the Mac's
        # status, image and updated_at from before the POST; the other fields are current.
        view.update(previous["body"])
        return view
    if server.get("reinstall_seen") is False:
        # Time runs faster here than for the client: a real reinstall lasts many minutes, and a client
        # polling at most a minute apart reads it in progress at least once. A reinstall the sim
        # finished before any read saw it running answers that read as still reinstalling.
        server["reinstall_seen"] = True
        sim.store.put(SERVERS, server_id, server)
        if server["task"] is None and server["status"] == REINSTALL_PHASES[-1]:
            view["status"] = REINSTALL_PHASES[0]
    return view


def update_server(sim: Sim, call: Call, zone: str, server_id: str) -> Any:
    server = _server(sim, zone, server_id)
    call.box = server["box"]
    body = body_of(call)
    check_types(
        body,
        {
            "name": str,
            "schedule_deletion": bool,
            "enable_vpc": bool,
            "commitment_type": dict,
            "public_bandwidth_bps": int,
            "applied_runner_configurations": dict,
        },
    )
    name = body.get("name")
    if name is not None:
        if not name.strip() or len(name) > 255:
            raise invalid_argument("name", "name must be 1 to 255 characters")
        server["name"] = name
    if body.get("enable_vpc") is not None and body["enable_vpc"] != server["vpc"]["enabled"]:
        if _status(sim, server) != "ready":
            raise transient_state("apple_silicon_server", server_id, _status(sim, server))
        server["vpc"] = {"enabled": body["enable_vpc"], "since": sim.clock()}
    if body.get("schedule_deletion") is not None:
        server["deletion_scheduled"] = body["schedule_deletion"]
    bandwidth = body.get("public_bandwidth_bps")
    if bandwidth:
        supported = next(t for t in _account(sim).server_types if t.name == server["type"]).bandwidths_bps
        if bandwidth not in supported:
            raise invalid_argument("public_bandwidth_bps", f"{bandwidth} is not one of {supported}")
        server["public_bandwidth_bps"] = bandwidth
    server["updated_at"] = sim.clock()
    sim.store.put(SERVERS, server_id, server)
    return _server_view(sim, server)


def reinstall(sim: Sim, call: Call, zone: str, server_id: str) -> Any:
    server = _server(sim, zone, server_id)
    call.box = server["box"]
    body = body_of(call)
    check_types(body, {"enable_kext": bool, "os_id": str})
    if "enable_kext" not in body:
        raise validation_error({"enable_kext": ["required key not provided"]})
    status = _status(sim, server)
    if status != "ready":
        raise transient_state("apple_silicon_server", server_id, status)
    os_id = body.get("os_id") or server["os_id"]
    os = _os_by_id(sim, os_id)
    if os is None:
        raise not_found("apple_silicon_os", os_id)
    if server["type"] not in os.server_types:
        raise invalid_argument("os_id", f"{os.name} does not run on {server['type']}")
    # Accepted: the reinstall-state fields GET .../servers/{id} answered just before, for its first read
    # after this POST under applesilicon.reinstall_read_after_post = previous_once (get_server).
    before = _server_view(sim, server)
    keep_previous_answer(
        sim.store,
        sim.behaviour,
        REINSTALL_READ_AFTER_POST,
        server_id,
        200,
        {k: before[k] for k in REINSTALL_STATE_FIELDS},
    )
    server["task"] = {
        "kind": "reinstall",
        "created_at": sim.clock(),
        "fail": sim.faults.take_task_failure("applesilicon.reinstall"),
        "os_id": os.id,
        "enable_kext": body["enable_kext"],
    }
    server["reinstall_seen"] = False  # get_server: every reinstall is read in progress at least once
    server["updated_at"] = sim.clock()
    sim.store.put(SERVERS, server_id, server)
    return _server_view(sim, server)


def reboot(sim: Sim, call: Call, zone: str, server_id: str) -> Any:
    server = _server(sim, zone, server_id)
    call.box = server["box"]
    status = _status(sim, server)
    if status != "ready":
        raise transient_state("apple_silicon_server", server_id, status)
    server["task"] = {"kind": "reboot", "created_at": sim.clock(), "fail": False}
    sim.store.put(SERVERS, server_id, server)
    return _server_view(sim, server)


def delete_server(sim: Sim, call: Call, zone: str, server_id: str) -> Any:
    server = _server(sim, zone, server_id)
    call.box = server["box"]
    deletable = server["created_at"] + LEASE_SECONDS
    if sim.clock() < deletable:
        when = dt.datetime.fromtimestamp(deletable, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        raise precondition_failed("unknown_precondition", f"this server cannot be deleted before {when}")
    server["deleted"] = True
    sim.store.put(SERVERS, server_id, server)
    return Reply(None, status=204)


def list_attachments(sim: Sim, call: Call, zone: str) -> Any:
    zone_of(_account(sim).zones, zone)
    return attachments_page(sim, call, ATTACHMENTS, zone, _attachment_view)


def get_attachment(sim: Sim, call: Call, zone: str, server_id: str, pn_id: str) -> Any:
    _server(sim, zone, server_id)
    for a in sim.store.all(ATTACHMENTS):
        if a["server_id"] == server_id and a["private_network_id"] == pn_id:
            return _attachment_view(a)
    raise not_found("apple_silicon_private_network", pn_id)


def add_attachment(sim: Sim, call: Call, zone: str, server_id: str) -> Any:
    account = _account(sim)
    server = _server(sim, zone, server_id)
    call.box = server["box"]
    body = body_of(call)
    check_types(body, {"private_network_id": str, "ipam_ip_ids": list})
    pn_id = body.get("private_network_id")
    if not pn_id:
        raise invalid_argument("private_network_id", "private_network_id is required", reason="required")
    pn = private_network(sim, account.private_networks, pn_id, zone)
    if _vpc_status(sim, server) != "vpc_enabled":
        raise precondition_failed("attribute_must_be_set", "the server's VPC option must be enabled first")
    mine = [a for a in sim.store.all(ATTACHMENTS) if a["server_id"] == server_id]
    if any(a["private_network_id"] == pn.id for a in mine):
        raise conflict("apple_silicon_private_network", pn.id)
    attachment = {
        "id": str(uuid.uuid4()),
        "project_id": server["project_id"],
        "server_id": server_id,
        "private_network_id": pn.id,
        "zone": zone,
        "ipam_ip_id": str(uuid.uuid4()),
        "vlan": 2000 + len(mine),
        "status": "attaching",
        "created_at": sim.clock(),
    }
    sim.store.put(ATTACHMENTS, attachment["id"], attachment)
    return _attachment_view(attachment)


_Z = "/apple-silicon/v1alpha1/zones/<zone>"
ROUTES = Map(
    [
        Rule(f"{_Z}/server-types", methods=["GET"], endpoint=list_server_types),
        Rule(f"{_Z}/server-type/<server_type>", methods=["GET"], endpoint=get_server_type),
        Rule(f"{_Z}/os", methods=["GET"], endpoint=list_os),
        Rule(f"{_Z}/os/<os_id>", methods=["GET"], endpoint=get_os),
        Rule(f"{_Z}/servers", methods=["GET"], endpoint=list_servers),
        Rule(f"{_Z}/servers/<server_id>", methods=["GET"], endpoint=get_server),
        Rule(f"{_Z}/servers/<server_id>", methods=["PATCH"], endpoint=update_server),
        Rule(f"{_Z}/servers/<server_id>", methods=["DELETE"], endpoint=delete_server),
        Rule(f"{_Z}/servers/<server_id>/reinstall", methods=["POST"], endpoint=reinstall),
        Rule(f"{_Z}/servers/<server_id>/reboot", methods=["POST"], endpoint=reboot),
        Rule(f"{_Z}/servers/<server_id>/private-networks", methods=["POST"], endpoint=add_attachment),
        Rule(f"{_Z}/servers/<server_id>/private-networks/<pn_id>", methods=["GET"], endpoint=get_attachment),
        Rule(f"{_Z}/server-private-networks", methods=["GET"], endpoint=list_attachments),
    ],
    strict_slashes=False,
)
