"""OVHcloud API v1 (mounted at /ovh/1.0): dedicated servers, service display names, reinstall
tasks and failover-IP moves, with python-ovh's request signature verified exactly.

Error bodies: authentication failures carry {"errorCode", "httpCode", "message"} (what OVH
sends and what python-ovh maps to InvalidKey / InvalidCredential / BadParametersError);
business errors carry {"class", "message"} (OVH's `Client::...` classes; TaskAlreadyExists is
`Client::BadRequest::TaskAlreadyExists`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import uuid
from typing import Any

from werkzeug.routing import BaseConverter, Map, Rule

from providers.vendor import MARKER_LIMITS, Vendor
from vendorsim.core import Call, Sim, VendorError, iso_offset, public

PREFIX = "/ovh/1.0"
MAX_CLOCK_SKEW_S = 300
REINSTALL = "reinstallServer"
IP_MOVE = "genericMoveFloatingIp"
TASK_PHASES = ["init", "todo", "doing", "done"]
TASK_RUNNING = frozenset({"init", "todo", "doing"})
FILE_SYSTEMS = frozenset(
    {"btrfs", "ext3", "ext4", "fat16", "none", "ntfs", "reiserfs", "swap", "ufs", "xfs", "zfs"}
)
RAID_LEVELS = frozenset({0, 1, 5, 6, 7, 10})
REBOOT = "hardReboot"
# The displayName the simulator accepts: OVH documents no limit; this is the client's assumption.
DISPLAY_NAME_MAX = MARKER_LIMITS[Vendor.OVH].max_length
DISPLAY_NAME = re.compile(MARKER_LIMITS[Vendor.OVH].pattern)

_HTTP_REASONS = {400: "400 Bad Request", 401: "401 Unauthorized", 403: "403 Forbidden"}
_CLASS_FOR_STATUS = {
    400: "Client::BadRequest",
    401: "Client::Unauthorized",
    403: "Client::Forbidden",
    404: "Client::NotFound",
    409: "Client::Conflict",
    429: "Client::TooManyRequests",
    500: "Server::InternalServerError",
    502: "Server::BadGateway",
    503: "Server::ServiceUnavailable",
    504: "Server::GatewayTimeout",
}


class IpBlockConverter(BaseConverter):
    """`{ip}` is the block, URL-escaped (1.2.3.4%2F32); the bare address is accepted too."""

    regex = r"\d{1,3}(?:\.\d{1,3}){3}(?:/\d{1,2})?"
    part_isolating = False


def auth_error(status: int, code: str, message: str) -> VendorError:
    return VendorError(status, {"errorCode": code, "httpCode": _HTTP_REASONS[status], "message": message})


def error(status: int, message: str, cls: str | None = None) -> VendorError:
    return VendorError(
        status,
        {"class": cls or _CLASS_FOR_STATUS.get(status, "Server::InternalServerError"), "message": message},
    )


def invalid_body(message: str) -> VendorError:
    return error(400, "Invalid JSON received" if "JSON" in message else message)


def id_headers() -> dict[str, str]:
    return {"X-OVH-QUERYID": f"CA.ext-1.{uuid.uuid4().hex[:8]}.{uuid.uuid4()}"}


def state(sim: Sim) -> dict[str, Any]:
    return {
        "servers": sim.store.all("ovh_server"),
        "tasks": public(sim.store.all("ovh_task")),
        "ips": sim.store.all("ovh_ip"),
        "ip_tasks": public(sim.store.all("ovh_ip_task")),
    }


def injected_error(status: int) -> Any:
    return {
        "class": _CLASS_FOR_STATUS.get(status, "Server::InternalServerError"),
        "message": "Injected fault" if status != 429 else "Too many requests",
    }


# --- seeding ---------------------------------------------------------------------


def seed(sim: Sim) -> None:
    inv = sim.inventory
    for s in inv.ovh.servers:
        sim.store.put(
            "ovh_server",
            s.service_name,
            {
                "name": s.service_name,
                "serviceId": s.service_id,
                "displayName": s.display_name,
                "datacenter": s.datacenter,
                "commercialRange": s.commercial_range,
                "ip": s.ip,
                "os": s.os,
                "reverse": s.reverse or f"{s.service_name}.",
                "diskGroups": [g.model_dump() for g in s.disk_groups],
                "storage": None,  # the layout of the last reinstall, as the API kept it
                "box": f"ovh-{s.service_name}",
                "created": iso_offset(sim.clock()),
            },
        )
        sim.store.put(
            "box",
            f"ovh-{s.service_name}",
            {
                "key": f"ovh-{s.service_name}",
                "vendor": "ovh",
                "vendor_id": s.service_name,
                "ip": s.ip,
                "ssh_port": s.ssh_port,
                "user": s.ssh_user,
                "authorized_key": inv.prep.fleet_public_key,
                "sudo_password": inv.prep.sudo_password,
                "state": "installed",
                "generation": 0,
            },
        )
    for f in inv.ovh.failover_ips:
        sim.store.put("ovh_ip", f.ip, {"ip": f"{f.ip}/32", "routedTo": f.routed_to})


# --- authentication -------------------------------------------------------------


def signed_url(call: Call) -> str:
    """The URL exactly as the client saw it (scheme, Host header, raw path and query)."""
    env = call.request.environ
    raw = env.get("RAW_URI") or env.get("REQUEST_URI")
    if not raw:
        raw = call.request.full_path.rstrip("?") if not call.request.query_string else call.request.full_path
    host = call.request.headers.get("Host", "")
    return f"{call.request.scheme}://{host}{raw}"


def authenticate(sim: Sim, call: Call) -> None:
    creds = sim.inventory.credentials.ovh
    headers = call.request.headers
    app_key = headers.get("X-Ovh-Application")
    if not app_key or not hmac.compare_digest(app_key, creds.application_key):
        raise auth_error(403, "INVALID_KEY", "Invalid application key")
    consumer = headers.get("X-Ovh-Consumer")
    if not consumer:
        raise auth_error(401, "NOT_CREDENTIAL", "You must login first")
    if not hmac.compare_digest(consumer, creds.consumer_key):
        raise auth_error(403, "INVALID_CREDENTIAL", "This credential does not exist")
    timestamp = headers.get("X-Ovh-Timestamp", "")
    if not timestamp.isdigit() or abs(int(timestamp) - int(sim.clock())) > MAX_CLOCK_SKEW_S:
        raise auth_error(400, "QUERY_TIME_OUT", "Query out of time")
    body = call.request.get_data(as_text=True)
    payload = "+".join(
        [creds.application_secret, consumer, call.request.method.upper(), signed_url(call), body, timestamp]
    )
    expected = "$1$" + hashlib.sha1(payload.encode()).hexdigest()
    if not hmac.compare_digest(headers.get("X-Ovh-Signature", ""), expected):
        raise auth_error(400, "INVALID_SIGNATURE", "Invalid signature")


# --- helpers ----------------------------------------------------------------------


def _server(sim: Sim, service_name: str) -> dict[str, Any]:
    server = sim.store.get("ovh_server", service_name)
    if server is None:
        raise error(404, f"The requested object (serviceName = {service_name}) does not exist")
    return server


def _json_object(call: Call) -> dict[str, Any]:
    if not isinstance(call.body, dict):
        raise error(400, "Invalid JSON body: an object is expected")
    return call.body


def _server_view(s: dict[str, Any]) -> dict[str, Any]:
    region = {
        "bhs": "ca-east-bhs",
        "gra": "eu-west-gra",
        "rbx": "eu-west-rbx",
        "sbg": "eu-west-sbg",
        "vin": "us-east-vin",
        "hil": "us-west-hil",
    }.get(s["datacenter"][:3], "unknown")
    return {
        "availabilityZone": f"{region}-a",
        "bootId": 1,
        "bootScript": None,
        "commercialRange": s["commercialRange"],
        "datacenter": s["datacenter"],
        "efiBootloaderPath": None,
        "groupOffer": None,
        "iam": {
            "id": f"urn:v1:eu:resource:dedicatedServer:{s['name']}",
            "urn": f"urn:v1:eu:resource:dedicatedServer:{s['name']}",
        },
        "ip": s["ip"],
        "linkSpeed": 1000,
        "monitoring": True,
        "name": s["name"],
        "newUpgradeSystem": True,
        "noIntervention": False,
        "os": s["os"],
        "powerState": "poweron",
        "professionalUse": False,
        "rack": "S101A01",
        "region": region,
        "rescueMail": None,
        "rescueSshKey": None,
        "reverse": s["reverse"],
        "rootDevice": None,
        "serverId": s["serviceId"],
        "state": "ok",
        "supportLevel": "pro",
    }


def _task_view(sim: Sim, task: dict[str, Any]) -> dict[str, Any]:
    return {
        "comment": task["comment"],
        "doneDate": task["doneDate"],
        "function": task["function"],
        "lastUpdate": task["lastUpdate"],
        "needSchedule": False,
        "note": None,
        "plannedInterventionId": None,
        "startDate": task["startDate"],
        "status": task["status"],
        "taskId": task["taskId"],
        "ticketReference": None,
    }


def _ip_task_view(task: dict[str, Any]) -> dict[str, Any]:
    return {
        "action": None,
        "comment": task["comment"],
        "destination": {"serviceName": task["to"]},
        "doneDate": task["doneDate"],
        "function": task["function"],
        "ip": task["ip"],
        "lastUpdate": task["lastUpdate"],
        "startDate": task["startDate"],
        "status": task["status"],
        "taskId": task["taskId"],
    }


# --- task progression -------------------------------------------------------------


def settle(sim: Sim) -> None:
    """Move every unfinished task to the phase wall time says it is in; apply finished ones."""
    for task in sim.store.all("ovh_task"):
        if task["status"] not in TASK_RUNNING:
            continue
        status, finished = sim.advance(task, TASK_PHASES, failed="error")
        if status is None:
            continue
        now = iso_offset(sim.clock())
        task.update(status=status, lastUpdate=now)
        if finished:
            task["doneDate"] = now
            if status == "done" and task["function"] == REINSTALL:
                server = _server(sim, task["serviceName"])
                server["os"] = task["params"]["operatingSystem"]
                server["storage"] = task["params"]["storage"]
                sim.store.put("ovh_server", server["name"], server)
                # cloud-init gives the image's default user passwordless sudo, as on a real OVH install.
                sim.reinstall_box(
                    server["box"],
                    user="ubuntu",
                    authorized_key=task["params"]["sshKey"],
                    sudo_password=None,
                    nopasswd_sudo=True,
                )
            elif status != "done":
                task["comment"] = {
                    "customerError": "Reinstallation failed: partitioning incompatible with this hardware",
                    "cancelled": "Reinstallation cancelled",
                }.get(status, "Reinstallation failed")
        sim.store.put("ovh_task", task["taskId"], task)
    for task in sim.store.all("ovh_ip_task"):
        if task["status"] not in TASK_RUNNING:
            continue
        status, finished = sim.advance(task, TASK_PHASES, failed="ovhError")
        if status is None:
            continue
        now = iso_offset(sim.clock())
        task.update(status=status, lastUpdate=now)
        if finished:
            task["doneDate"] = now
            if status == "done":
                ip = sim.store.get("ovh_ip", task["key"])
                assert ip is not None
                ip["routedTo"] = task["to"]
                sim.store.put("ovh_ip", task["key"], ip)
        sim.store.put("ovh_ip_task", task["taskId"], task)


# --- handlers -----------------------------------------------------------------------


def auth_time(sim: Sim, call: Call) -> Any:
    return int(sim.clock())


def list_servers(sim: Sim, call: Call) -> Any:
    return [s["name"] for s in sim.store.all("ovh_server")]


def get_server(sim: Sim, call: Call, svc: str) -> Any:
    return _server_view(_server(sim, svc))


def service_infos(sim: Sim, call: Call, svc: str) -> Any:
    s = _server(sim, svc)
    return {
        "canDeleteAtExpiration": True,
        "contactAdmin": "dev-ovh",
        "contactBilling": "dev-ovh",
        "contactTech": "dev-ovh",
        "creation": s["created"][:10],
        "domain": s["name"],
        "engagedUpTo": None,
        "expiration": "2099-01-01",
        "possibleRenewPeriod": [1, 3, 6, 12],
        "renew": {
            "automatic": True,
            "deleteAtExpiration": False,
            "forced": False,
            "manualPayment": False,
            "period": 1,
        },
        "renewalType": "automaticV2016",
        "serviceId": s["serviceId"],
        "status": "ok",
    }


def _server_by_service_id(sim: Sim, service_id: int) -> dict[str, Any]:
    for s in sim.store.all("ovh_server"):
        if s["serviceId"] == service_id:
            return s
    raise error(404, f"The requested object (serviceId = {service_id}) does not exist")


def get_service(sim: Sim, call: Call, service_id: int) -> Any:
    s = _server_by_service_id(sim, service_id)
    return {
        "serviceId": s["serviceId"],
        "billing": {
            "expirationDate": "2099-01-01T00:00:00+00:00",
            "nextBillingDate": "2099-01-01T00:00:00+00:00",
            "plan": {"code": s["commercialRange"], "invoiceName": s["commercialRange"]},
        },
        "parentServiceId": None,
        "resource": {
            "displayName": s["displayName"],
            "name": s["name"],
            "product": {"description": s["commercialRange"], "name": s["commercialRange"]},
            "resellingProvider": None,
            "state": "active",
        },
        "route": {
            "path": "/dedicated/server/{serviceName}",
            "url": f"/dedicated/server/{s['name']}",
            "vars": [{"key": "serviceName", "value": s["name"]}],
        },
        "tags": [],
    }


def put_service(sim: Sim, call: Call, service_id: int) -> Any:
    """PUT /service/{serviceId} {"resource": {"displayName", "name"}}: the displayName write."""
    body = _json_object(call)
    s = _server_by_service_id(sim, service_id)
    call.box = s["box"]
    resource = body.get("resource")
    if not isinstance(resource, dict):
        raise error(400, "[resource] Property is mandatory and must be an object")
    display_name = resource.get("displayName")
    if not isinstance(display_name, str):
        raise error(400, "[resource.displayName] Property is mandatory and must be a string")
    # OVH publishes no limit; vendorsim enforces the one the client assumes (docs/vendor-behaviour.md).
    if len(display_name) > DISPLAY_NAME_MAX or not DISPLAY_NAME.match(display_name):
        raise error(
            400,
            f"[resource.displayName] Invalid value: at most {DISPLAY_NAME_MAX} characters among "
            "letters, digits, '.', '_' and '-'",
        )
    name = resource.get("name")
    if name is not None and name != s["name"]:
        raise error(400, f"[resource.name] '{name}' does not match service {service_id} ({s['name']})")
    s["displayName"] = display_name
    sim.store.put("ovh_server", s["name"], s)
    return None


def hardware(sim: Sim, call: Call, svc: str) -> Any:
    s = _server(sim, svc)
    groups = [
        {
            "defaultHardwareRaidSize": None,
            "defaultHardwareRaidType": None,
            "description": f"{g['disks']} x {g['size_gb']} GB {g['type']}",
            "diskGroupId": g["id"],
            "diskSize": {"unit": "GB", "value": g["size_gb"]},
            "diskType": g["type"],
            "numberOfDisks": g["disks"],
            "raidController": None,
        }
        for g in s["diskGroups"]
    ]
    return {
        "bootMode": "uefi",
        "coresPerProcessor": 8,
        "defaultHardwareRaidSize": None,
        "defaultHardwareRaidType": None,
        "description": s["commercialRange"],
        "diskGroups": groups,
        "expansionCards": None,
        "formFactor": "1u",
        "memorySize": {"unit": "MB", "value": 65536},
        "motherboard": "S2600",
        "numberOfProcessors": 1,
        "processorArchitecture": "x86_64",
        "processorName": "AMD Ryzen 7 7700",
        "threadsPerProcessor": 16,
        "usbKeys": None,
    }


def compatible_templates(sim: Sim, call: Call, svc: str) -> Any:
    _server(sim, svc)
    return {"ovh": list(sim.inventory.ovh.templates), "personal": list(sim.inventory.ovh.personal_templates)}


_KEY_LINE = re.compile(r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp\d+) [A-Za-z0-9+/=]+( .*)?$")


def _validate_storage(server: dict[str, Any], storage: Any) -> list[dict[str, Any]] | None:
    if storage is None:
        return None
    if not isinstance(storage, list):
        raise error(400, "[storage] Invalid value: an array is expected")
    if not storage:
        return None
    # The API silently keeps only the first storage entry (the incident behind "exactly one
    # storage entry on the largest group"); later entries are dropped without an error.
    first = storage[0]
    if not isinstance(first, dict):
        raise error(400, "[storage[0]] Invalid value: an object is expected")
    group_ids = {g["id"] for g in server["diskGroups"]}
    group_id = first.get("diskGroupId", 0)
    if group_id not in group_ids and group_id != 0:
        raise error(400, f"[storage[0].diskGroupId] Disk group {group_id} does not exist on this server")
    partitioning = first.get("partitioning") or {}
    if not isinstance(partitioning, dict):
        raise error(400, "[storage[0].partitioning] Invalid value: an object is expected")
    layout = partitioning.get("layout") or []
    if not isinstance(layout, list):
        raise error(400, "[storage[0].partitioning.layout] Invalid value: an array is expected")
    kept = []
    for i, part in enumerate(layout):
        where = f"storage[0].partitioning.layout[{i}]"
        if not isinstance(part, dict):
            raise error(400, f"[{where}] Invalid value: an object is expected")
        if part.get("fileSystem") not in FILE_SYSTEMS:
            raise error(400, f"[{where}.fileSystem] Invalid value '{part.get('fileSystem')}'")
        if not isinstance(part.get("mountPoint"), str) or not part["mountPoint"]:
            raise error(400, f"[{where}.mountPoint] Property is mandatory")
        # An absent raidLevel is read as RAID 1, which is why clients always send it.
        raid = part.get("raidLevel", 1)
        if raid not in RAID_LEVELS:
            raise error(400, f"[{where}.raidLevel] Invalid value '{raid}'")
        size = part.get("size", 0)
        if not isinstance(size, int) or size < 0:
            raise error(400, f"[{where}.size] Invalid value '{size}'")
        kept.append(
            {
                "fileSystem": part["fileSystem"],
                "mountPoint": part["mountPoint"],
                "raidLevel": raid,
                "size": size,
            }
        )
    return [
        {"diskGroupId": group_id, "partitioning": {"disks": partitioning.get("disks", 0), "layout": kept}}
    ]


def reinstall(sim: Sim, call: Call, svc: str) -> Any:
    server = _server(sim, svc)
    call.box = server["box"]
    body = _json_object(call)
    os_name = body.get("operatingSystem")
    if not isinstance(os_name, str) or not os_name:
        raise error(400, "[operatingSystem] Property is mandatory")
    compatible = sim.inventory.ovh.templates + sim.inventory.ovh.personal_templates
    if os_name not in compatible:
        raise error(400, f"Operating system '{os_name}' is not compatible with this server")
    customizations = body.get("customizations") or {}
    if not isinstance(customizations, dict):
        raise error(400, "[customizations] Invalid value: an object is expected")
    ssh_key = customizations.get("sshKey")
    if ssh_key is not None:
        if not isinstance(ssh_key, str):
            raise error(400, "[customizations.sshKey] Invalid value: a string is expected")
        # A trailing newline reads as a second (empty) key: the incident behind TrimSpace.
        if len(ssh_key.split("\n")) > 1:
            raise error(400, "only 1 single SSH key can be provided")
        if not _KEY_LINE.match(ssh_key):
            raise error(400, "[customizations.sshKey] Invalid SSH public key")
    storage = _validate_storage(server, body.get("storage"))
    for other in sim.store.all("ovh_task"):
        running = other["serviceName"] == svc and other["function"] == REINSTALL
        if running and other["status"] in TASK_RUNNING:
            if sim.behaviour.get("ovh.reinstall_while_running") == "accept":
                break  # the alternative answer: OVH queues a second reinstall task
            raise error(
                400,
                f"A reinstallation is already in {other['status']}",
                "Client::BadRequest::TaskAlreadyExists",
            )
    now = sim.clock()
    task_id = sim.store.next_id("ovh_task", 600_000_001)
    task = {
        "taskId": task_id,
        "serviceName": svc,
        "function": REINSTALL,
        "status": "init",
        "comment": "Reinstall the server",
        "startDate": iso_offset(now),
        "lastUpdate": iso_offset(now),
        "doneDate": None,
        "created_at": now,
        "fail": sim.faults.take_task_failure(f"ovh.{REINSTALL}"),
        "params": {
            "operatingSystem": os_name,
            "hostname": customizations.get("hostname"),
            "sshKey": ssh_key,
            "storage": storage,
        },
    }
    sim.store.put("ovh_task", task_id, task)
    return _task_view(sim, task)


def list_tasks(sim: Sim, call: Call, svc: str) -> Any:
    _server(sim, svc)
    function, status = call.args.get("function"), call.args.get("status")
    return [
        t["taskId"]
        for t in sorted(sim.store.all("ovh_task"), key=lambda t: t["taskId"])
        if t["serviceName"] == svc and function in (None, t["function"]) and status in (None, t["status"])
    ]


def get_task(sim: Sim, call: Call, svc: str, task_id: int) -> Any:
    _server(sim, svc)
    task = sim.store.get("ovh_task", task_id)
    if task is None or task["serviceName"] != svc:
        raise error(404, f"The requested object (taskId = {task_id}) does not exist")
    if task["status"] in TASK_RUNNING and task["function"] == REINSTALL:
        _flaky_read(sim, f"ovh.{REINSTALL}", task_id)
    return _task_view(sim, task)


def _flaky_read(sim: Sim, kind: str, task_id: int) -> None:
    """OVH answers 404 or 500 for a task in flight now and then (task_read_fault)."""
    status = sim.faults.take_task_read_fault(kind)
    if status == 404:
        raise error(404, f"The requested object (taskId = {task_id}) does not exist")
    if status is not None:
        raise error(500, "Internal server error")


def reboot(sim: Sim, call: Call, svc: str) -> Any:
    """POST /dedicated/server/{svc}/reboot: a hardReboot task (a task that is not an install)."""
    server = _server(sim, svc)
    call.box = server["box"]
    now = sim.clock()
    task_id = sim.store.next_id("ovh_task", 600_000_001)
    task = {
        "taskId": task_id,
        "serviceName": svc,
        "function": REBOOT,
        "status": "init",
        "comment": "Hard reboot",
        "startDate": iso_offset(now),
        "lastUpdate": iso_offset(now),
        "doneDate": None,
        "created_at": now,
        "fail": None,
        "params": {},
    }
    sim.store.put("ovh_task", task_id, task)
    return _task_view(sim, task)


def _ip(sim: Sim, block: str) -> dict[str, Any]:
    address, _, prefix = block.partition("/")
    ip = sim.store.get("ovh_ip", address)
    if ip is None or (prefix and f"{address}/{prefix}" != ip["ip"]):
        raise error(404, f"The requested object (ip = {block}) does not exist")
    return ip


def get_ip(sim: Sim, call: Call, block: str) -> Any:
    ip = _ip(sim, block)
    return {
        "campus": "BHS",
        "canBeTerminated": True,
        "country": "ca",
        "description": None,
        "ip": ip["ip"],
        "isAdditionalIp": True,
        "organisationId": None,
        "regions": ["ca-east-bhs"],
        "rir": "ARIN",
        "routedTo": {"serviceName": ip["routedTo"]},
        "type": "failover",
        "version": 4,
    }


def move_ip(sim: Sim, call: Call, block: str) -> Any:
    ip = _ip(sim, block)
    body = _json_object(call)
    to = body.get("to")
    if not isinstance(to, str) or not to:
        raise error(400, "[to] Property is mandatory")
    target = sim.store.get("ovh_server", to)
    if target is None:
        raise error(400, f"Destination '{to}' is not a valid destination for this IP")
    call.box = target["box"]
    if ip["routedTo"] == to and sim.behaviour.get("ovh.ip_move_to_current") == "reject":
        raise error(400, f"The IP {ip['ip']} is already routed to {to}")
    address = ip["ip"].split("/")[0]
    for other in sim.store.all("ovh_ip_task"):
        if other["key"] == address and other["status"] in TASK_RUNNING:
            raise error(
                400,
                f"A move of {ip['ip']} is already in {other['status']}",
                "Client::BadRequest::TaskAlreadyExists",
            )
    now = sim.clock()
    task_id = sim.store.next_id("ovh_ip_task", 9_000_001)
    task = {
        "taskId": task_id,
        "key": address,
        "ip": ip["ip"],
        "to": to,
        "function": IP_MOVE,
        "status": "init",
        "comment": None,
        "startDate": iso_offset(now),
        "lastUpdate": iso_offset(now),
        "doneDate": None,
        "created_at": now,
        "fail": sim.faults.take_task_failure("ovh.ipMove"),
    }
    sim.store.put("ovh_ip_task", task_id, task)
    return _ip_task_view(task)


def get_ip_task(sim: Sim, call: Call, block: str, task_id: int) -> Any:
    ip = _ip(sim, block)
    task = sim.store.get("ovh_ip_task", task_id)
    if task is None or task["ip"] != ip["ip"]:
        raise error(404, f"The requested object (taskId = {task_id}) does not exist")
    if task["status"] in TASK_RUNNING:
        _flaky_read(sim, "ovh.ipMove", task_id)
    return _ip_task_view(task)


def list_ip_tasks(sim: Sim, call: Call, block: str) -> Any:
    """GET /ip/{ip}/task?function=&status=: the IP's task ids, oldest first."""
    ip = _ip(sim, block)
    function, status = call.args.get("function"), call.args.get("status")
    return [
        t["taskId"]
        for t in sorted(sim.store.all("ovh_ip_task"), key=lambda t: t["taskId"])
        if t["ip"] == ip["ip"] and function in (None, t["function"]) and status in (None, t["status"])
    ]


ROUTES = Map(
    [
        Rule("/auth/time", methods=["GET"], endpoint=auth_time),
        Rule("/dedicated/server", methods=["GET"], endpoint=list_servers),
        Rule("/dedicated/server/<svc>", methods=["GET"], endpoint=get_server),
        Rule("/dedicated/server/<svc>/serviceInfos", methods=["GET"], endpoint=service_infos),
        Rule("/dedicated/server/<svc>/specifications/hardware", methods=["GET"], endpoint=hardware),
        Rule(
            "/dedicated/server/<svc>/install/compatibleTemplates",
            methods=["GET"],
            endpoint=compatible_templates,
        ),
        Rule("/dedicated/server/<svc>/reinstall", methods=["POST"], endpoint=reinstall),
        Rule("/dedicated/server/<svc>/reboot", methods=["POST"], endpoint=reboot),
        Rule("/dedicated/server/<svc>/task", methods=["GET"], endpoint=list_tasks),
        Rule("/dedicated/server/<svc>/task/<int:task_id>", methods=["GET"], endpoint=get_task),
        Rule("/services/<int:service_id>", methods=["GET"], endpoint=get_service),
        Rule("/service/<int:service_id>", methods=["PUT"], endpoint=put_service),
        Rule("/ip/<ipblock:block>", methods=["GET"], endpoint=get_ip),
        Rule("/ip/<ipblock:block>/move", methods=["POST"], endpoint=move_ip),
        Rule("/ip/<ipblock:block>/task", methods=["GET"], endpoint=list_ip_tasks),
        Rule("/ip/<ipblock:block>/task/<int:task_id>", methods=["GET"], endpoint=get_ip_task),
    ],
    converters={"ipblock": IpBlockConverter},
    strict_slashes=False,
)
UNAUTHENTICATED = frozenset({auth_time})


def route_not_found(path: str) -> VendorError:
    return error(404, f"Got an invalid (or empty) URL: {path}")


def bad_method(method: str, path: str) -> VendorError:
    return error(405, f"Method {method} is not allowed on {path}", "Client::MethodNotAllowed")
