"""Hetzner Robot web service (mounted at /robot): HTTP basic auth, form-encoded POST bodies,
JSON responses wrapped as {"server": {...}}, {"error": {status, code, message}} errors and the
documented per-endpoint hourly limits (403 RATE_LIMIT_EXCEEDED).

Robot is synchronous: a rescue activation takes effect at the next reset; a reset with rescue
active boots the box's SSH into a fresh "rescue" system (disk kept), a reset without it boots the OS
on the disk: the one installimage just laid down (new host key, root with the rescue keys), or the
old one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from typing import Any

from werkzeug.routing import Map, Rule

from providers.vendor import MARKER_LIMITS, Vendor
from vendorsim.core import Call, Reply, Sim, VendorError, iso, public

PREFIX = "/robot"
RATE_WINDOW_S = 3600
# Documented limits (requests per hour and web-service user), keyed "METHOD /route" (Robot's
# web-service documentation, as the hrobot-py OpenAPI spec mirrors it).
DEFAULT_RATE_LIMITS = {
    "GET /server": 200,
    "GET /server/<n>": 200,
    "POST /server/<n>": 200,
    "GET /key": 500,
    "POST /key": 200,
    "GET /boot/<n>/rescue": 500,
    "POST /boot/<n>/rescue": 500,
    "DELETE /boot/<n>/rescue": 500,
    "GET /reset/<n>": 500,
    "POST /reset/<n>": 50,
    "GET /failover": 100,
    "GET /failover/<ip>": 100,
    "POST /failover/<ip>": 50,
    "DELETE /failover/<ip>": 50,
}
# server_name: Robot took it from 50 to 100 characters; its character set is undocumented, and
# vendorsim enforces the one the client assumes (docs/vendor-behaviour.md).
SERVER_NAME_MAX = MARKER_LIMITS[Vendor.ROBOT].max_length
SERVER_NAME = re.compile(f"({MARKER_LIMITS[Vendor.ROBOT].pattern})|^$")  # Robot takes an empty name
RESET_TYPES = ["sw", "hw", "man"]
BODY = "form"
# "The IP from which you attempt to access will be blocked for 10 minutes after 3 failed login
# attempts" (Robot's web-service documentation, "Authentication error"). Kept per source IP in the
# store (a reseed, POST /_admin/reset, clears it), counted in the sim's clock.
LOGIN_FAILURES_BEFORE_BLOCK = 3
LOGIN_BLOCK_SECONDS = 600
LOGINS = "robot_login"
# What a blocked IP is answered is undocumented: vendorsim's choice, 403 BLOCKED, whatever the
# credentials (docs/vendor-behaviour.md section 5).
BLOCKED = "BLOCKED"


def error(status: int, code: str, message: str, **extra: Any) -> VendorError:
    return VendorError(status, {"error": {"status": status, "code": code, "message": message, **extra}})


def invalid_body(message: str) -> VendorError:
    return error(400, "INVALID_INPUT", message, missing=[], invalid=[])


def state(sim: Sim) -> dict[str, Any]:
    now = sim.clock()
    return {
        "servers": public(sim.store.all("robot_server")),
        "keys": sim.store.all("robot_key"),
        "failover_ips": sim.store.all("robot_failover"),
        # Failed logins in a row and blocks, per source IP.
        "logins": sim.store.all(LOGINS),
        # Requests counted against each hourly limit in the current window, per "METHOD /route".
        "requests_this_hour": {
            route: len([t for t in hits if now - t < RATE_WINDOW_S])
            for (_, route), hits in sorted(sim.robot_hits.items())
        },
    }


def injected_error(status: int) -> Any:
    code = {
        403: "RATE_LIMIT_EXCEEDED",
        404: "NOT_FOUND",
        409: "CONFLICT",
        429: "RATE_LIMIT_EXCEEDED",
        503: "MAINTENANCE",
    }.get(status, "INTERNAL_ERROR")
    body: dict[str, Any] = {"status": status, "code": code, "message": "Injected fault"}
    if code == "RATE_LIMIT_EXCEEDED":
        body.update(message="Rate limit exceeded", max_request=200, interval=RATE_WINDOW_S)
    return {"error": body}


# --- seeding ---------------------------------------------------------------------


def seed(sim: Sim) -> None:
    inv = sim.inventory
    for s in inv.robot.servers:
        sim.store.put(
            "robot_server",
            s.number,
            {
                "number": s.number,
                "server_name": s.server_name,
                "product": s.product,
                "dc": s.dc,
                "ip": s.ip,
                "rescue": None,
                "box": f"robot-{s.number}",
            },
        )
        sim.store.put(
            "box",
            f"robot-{s.number}",
            {
                "key": f"robot-{s.number}",
                "vendor": "robot",
                "vendor_id": s.number,
                "ip": s.ip,
                "ssh_port": s.ssh_port,
                "user": s.ssh_user,
                "authorized_key": inv.prep.fleet_public_key,
                "sudo_password": inv.prep.sudo_password,
                "state": "installed",
                "generation": 0,
                "disks": [{"name": d.name, "size": d.size} for d in s.hardware_disks],
            },
        )
    for f in inv.robot.failover_ips:
        sim.store.put(
            "robot_failover",
            f.ip,
            {"ip": f.ip, "server_number": f.server_number, "active_server_ip": f.active_server_ip},
        )


# --- authentication and limits ------------------------------------------------------


def authenticate(sim: Sim, call: Call) -> None:
    """HTTP basic auth of the web-service user, and Robot's block: the third failed login in a row
    from an IP blocks that IP for LOGIN_BLOCK_SECONDS, during which every request from it is
    refused (403 BLOCKED), right credentials or not, and counts for nothing; a login that succeeds
    outside a block starts the count over.

    The login record is committed here, before the error is raised: the request's rollback must not
    undo a counted failure (nor a success's reset of the count)."""
    creds = sim.inventory.credentials.robot
    source = call.request.remote_addr or "unknown"
    now = sim.clock()
    record = sim.store.get(LOGINS, source)
    if record is not None and record["blocked_until"] is not None:
        if now < record["blocked_until"]:
            raise error(
                403,
                BLOCKED,
                f"IP {source} is blocked after {LOGIN_FAILURES_BEFORE_BLOCK} failed login attempts; "
                f"try again in {max(1, int(record['blocked_until'] - now + 0.999))} s",
            )
        record = None  # the block ran out: the count starts over
        sim.store.delete(LOGINS, source)
        sim.store.commit()
    auth = call.request.authorization
    if (
        auth is None
        or auth.type != "basic"
        or not hmac.compare_digest(auth.username or "", creds.username)
        or not hmac.compare_digest(auth.password or "", creds.password)
    ):
        failures = (record["failures"] if record is not None else 0) + 1
        blocked_until = now + LOGIN_BLOCK_SECONDS if failures >= LOGIN_FAILURES_BEFORE_BLOCK else None
        sim.store.put(
            LOGINS, source, {"source": source, "failures": failures, "blocked_until": blocked_until}
        )
        sim.store.commit()
        raise VendorError(
            401,
            {"error": {"status": 401, "code": "UNAUTHORIZED", "message": "Unauthorized"}},
            {"WWW-Authenticate": 'Basic realm="Webservice"'},
        )
    if record is not None:
        sim.store.delete(LOGINS, source)
        sim.store.commit()


def check_rate_limit(sim: Sim, call: Call, rule: str) -> None:
    limits = {**DEFAULT_RATE_LIMITS, **sim.inventory.robot.rate_limits}
    key = f"{call.request.method} {rule}"
    limit = limits.get(key)
    if limit is None:
        return
    now = sim.clock()
    hits = [
        t
        for t in sim.robot_hits.get((sim.inventory.credentials.robot.username, key), [])
        if now - t < RATE_WINDOW_S
    ]
    if len(hits) >= limit:
        sim.robot_hits[(sim.inventory.credentials.robot.username, key)] = hits
        raise error(
            403, "RATE_LIMIT_EXCEEDED", "Rate limit exceeded", max_request=limit, interval=RATE_WINDOW_S
        )
    hits.append(now)
    sim.robot_hits[(sim.inventory.credentials.robot.username, key)] = hits


# --- helpers ----------------------------------------------------------------------


def _server(sim: Sim, number: int) -> dict[str, Any]:
    server = sim.store.get("robot_server", number)
    if server is None:
        raise error(404, "SERVER_NOT_FOUND", f"Server with id {number} not found")
    return server


def _ipv6_net(server: dict[str, Any]) -> str:
    return f"2a01:4f8:{server['number'] % 0xFFFF:x}::"


def _summary(server: dict[str, Any], failovers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "server_ip": server["ip"],
        "server_ipv6_net": _ipv6_net(server),
        "server_number": server["number"],
        "server_name": server["server_name"],
        "product": server["product"],
        "dc": server["dc"],
        "traffic": "unlimited",
        "status": "ready",
        "cancelled": False,
        "paid_until": "2099-01-01",
        "ip": [server["ip"], *[f["ip"] for f in failovers if f["server_number"] == server["number"]]],
        "subnet": [{"ip": _ipv6_net(server), "mask": "64"}],
    }


def _detail(sim: Sim, server: dict[str, Any]) -> dict[str, Any]:
    return {
        **_summary(server, sim.store.all("robot_failover")),
        "reset": True,
        "rescue": True,
        "vnc": True,
        "windows": False,
        "plesk": False,
        "cpanel": False,
        "wol": True,
        "hot_swap": False,
        "linked_storagebox": None,
    }


def _form(call: Call, name: str) -> str | None:
    values = call.form.get(name)
    return values[-1] if values else None


def _missing(*names: str) -> VendorError:
    return error(400, "INVALID_INPUT", "invalid input", missing=list(names), invalid=[])


def _invalid(*names: str) -> VendorError:
    return error(400, "INVALID_INPUT", "invalid input", missing=[], invalid=list(names))


_KEY = re.compile(r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp(\d+)) ([A-Za-z0-9+/=]+)( .*)?$")


def _md5_fingerprint(blob: bytes) -> str:
    digest = hashlib.md5(blob, usedforsecurity=False).hexdigest()
    return ":".join(digest[i : i + 2] for i in range(0, 32, 2))


def _new_host_key(comment: str) -> tuple[str, str]:
    """A fresh ed25519 host key: (OpenSSH private key PEM, public key line)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return pem, f"{public.decode()} {comment}"


def _sha256_fingerprint(public_line: str) -> str:
    blob = base64.b64decode(public_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _key_view(key: dict[str, Any]) -> dict[str, Any]:
    return {k: key[k] for k in ("name", "fingerprint", "type", "size", "data", "created_at")}


def _rescue_view(sim: Sim, server: dict[str, Any]) -> dict[str, Any]:
    rescue = server["rescue"]
    base = {
        "server_ip": server["ip"],
        "server_ipv6_net": _ipv6_net(server),
        "server_number": server["number"],
    }
    if rescue is None:
        # Inactive: os/arch list the options (arrays); active: the chosen values (scalars).
        return {
            **base,
            "os": ["linux", "vkvm"],
            "arch": [64],
            "active": False,
            "password": None,
            "authorized_key": [],
            "host_key": [],
            "boot_time": None,
        }
    keys = [sim.store.get("robot_key", fp) for fp in rescue["authorized_key"]]
    return {
        **base,
        "os": rescue["os"],
        "arch": 64,
        "active": True,
        "password": rescue["password"],
        "authorized_key": [
            {"key": {k: key[k] for k in ("name", "fingerprint", "type", "size")}}
            for key in keys
            if key is not None
        ],
        # The item shape is undocumented (docs/vendor-behaviour.md): the authorized_key one.
        "host_key": [{"key": dict(item)} for item in rescue.get("host_key") or []],
        "boot_time": None,
    }


def _failover(sim: Sim, ip: str) -> dict[str, Any]:
    fo = sim.store.get("robot_failover", ip)
    if fo is None:
        raise error(404, "NOT_FOUND", f"Failover IP {ip} not found")
    return fo


def _failover_view(sim: Sim, fo: dict[str, Any]) -> dict[str, Any]:
    owner = _server(sim, fo["server_number"])
    return {
        "ip": fo["ip"],
        "netmask": "255.255.255.255",
        "server_ip": owner["ip"],
        "server_ipv6_net": _ipv6_net(owner),
        "server_number": owner["number"],
        "active_server_ip": fo["active_server_ip"],
    }


# --- handlers -----------------------------------------------------------------------


def list_servers(sim: Sim, call: Call) -> Any:
    servers = sim.store.all("robot_server")
    if not servers:
        raise error(404, "SERVER_NOT_FOUND", "No servers found")
    failovers = sim.store.all("robot_failover")
    return [{"server": _summary(s, failovers)} for s in sorted(servers, key=lambda s: s["number"])]


def get_server(sim: Sim, call: Call, n: int) -> Any:
    return {"server": _detail(sim, _server(sim, n))}


def update_server(sim: Sim, call: Call, n: int) -> Any:
    server = _server(sim, n)
    call.box = server["box"]
    name = _form(call, "server_name")
    if name is None:
        raise _missing("server_name")
    if len(name) > SERVER_NAME_MAX or not SERVER_NAME.match(name):
        raise _invalid("server_name")
    server["server_name"] = name
    sim.store.put("robot_server", n, server)
    return {"server": _detail(sim, server)}


def list_keys(sim: Sim, call: Call) -> Any:
    keys = sim.store.all("robot_key")
    if not keys:
        raise error(404, "NOT_FOUND", "No keys found")
    return [{"key": _key_view(k)} for k in sorted(keys, key=lambda k: k["created_at"] + k["fingerprint"])]


def get_key(sim: Sim, call: Call, fingerprint: str) -> Any:
    key = sim.store.get("robot_key", fingerprint)
    if key is None:
        raise error(404, "NOT_FOUND", f"Key {fingerprint} not found")
    return {"key": _key_view(key)}


def create_key(sim: Sim, call: Call) -> Any:
    name, data = _form(call, "name"), _form(call, "data")
    missing = [f for f, v in (("name", name), ("data", data)) if not v]
    if missing:
        raise _missing(*missing)
    assert name is not None and data is not None
    m = _KEY.match(data.strip())
    if m is None:
        raise _invalid("data")
    try:
        blob = base64.b64decode(m.group(4), validate=True)
    except ValueError:
        raise _invalid("data") from None
    fingerprint = _md5_fingerprint(blob)
    if sim.store.get("robot_key", fingerprint) is not None:
        raise error(409, "KEY_ALREADY_EXISTS", "The key already exists")
    kind = m.group(1)
    key_type, size = (
        ("ED25519", 256)
        if kind == "ssh-ed25519"
        else (
            ("ECDSA", int(m.group(3)))
            if kind.startswith("ecdsa")
            else ("RSA", 4096 if len(blob) > 400 else 2048)
        )
    )
    key = {
        "name": name,
        "fingerprint": fingerprint,
        "type": key_type,
        "size": size,
        "data": data.strip(),
        "created_at": iso(sim.clock()).replace("T", " ").rstrip("Z"),
    }
    sim.store.put("robot_key", fingerprint, key)
    return Reply({"key": _key_view(key)}, status=201)


def get_rescue(sim: Sim, call: Call, n: int) -> Any:
    return {"rescue": _rescue_view(sim, _server(sim, n))}


def activate_rescue(sim: Sim, call: Call, n: int) -> Any:
    server = _server(sim, n)
    call.box = server["box"]
    os = _form(call, "os")
    if os is None:
        raise _missing("os")
    if os not in ("linux", "vkvm"):
        raise _invalid("os")
    arch = _form(call, "arch")
    if arch is not None and arch not in ("64", "32"):
        raise _invalid("arch")
    fingerprints = call.form.get("authorized_key", []) + call.form.get("authorized_key[]", [])
    for fp in fingerprints:
        if sim.store.get("robot_key", fp) is None:
            raise _invalid("authorized_key")
    if server["rescue"] is not None:
        raise error(409, "BOOT_ALREADY_ENABLED", "A boot option is already active")
    # The rescue system's host key is made now, so the activation can announce it (host_key) and
    # a client can pin the rescue session to it; the reset boots the rescue system with it.
    pem, public_line = _new_host_key(f"rescue@{server['box']}")
    server["rescue"] = {
        "os": os,
        "authorized_key": fingerprints,
        "password": secrets.token_urlsafe(9),
        "host_key": [{"key_type": "ED25519", "fingerprint": _sha256_fingerprint(public_line)}],
    }
    server["secret_rescue_host_key"] = pem
    sim.store.put("robot_server", n, server)
    return {"rescue": _rescue_view(sim, server)}


def deactivate_rescue(sim: Sim, call: Call, n: int) -> Any:
    server = _server(sim, n)
    call.box = server["box"]
    server["rescue"] = None
    server.pop("secret_rescue_host_key", None)
    sim.store.put("robot_server", n, server)
    return {"rescue": _rescue_view(sim, server)}


def get_reset(sim: Sim, call: Call, n: int) -> Any:
    server = _server(sim, n)
    return {
        "reset": {
            "server_ip": server["ip"],
            "server_ipv6_net": _ipv6_net(server),
            "server_number": n,
            "type": list(RESET_TYPES),
            "operating_status": "not supported",
        }
    }


def reset(sim: Sim, call: Call, n: int) -> Any:
    server = _server(sim, n)
    call.box = server["box"]
    kind = _form(call, "type")
    if kind is None:
        raise _missing("type")
    if kind not in RESET_TYPES:
        raise _invalid("type")
    rescue = server["rescue"]
    if rescue is not None:
        keys = [sim.store.get("robot_key", fp) for fp in rescue["authorized_key"]]
        authorized = "\n".join(k["data"] for k in keys if k is not None) or None
        # The rescue system logs in as root with the chosen keys (or the generated password); the
        # box's disk is left alone until installimage formats it.
        box = sim.store.get("box", server["box"])
        if box is not None:
            box["rescue_key"] = authorized
            sim.store.put("box", server["box"], box)
        sim.boot_rescue(
            server["box"], authorized_key=authorized, host_key_pem=server.pop("secret_rescue_host_key", None)
        )
        server["rescue"] = None  # a rescue boot config is consumed by the boot it causes
        sim.store.put("robot_server", n, server)
    else:
        sim.reboot_box(server["box"])
    return {
        "reset": {
            "server_ip": server["ip"],
            "server_ipv6_net": _ipv6_net(server),
            "server_number": n,
            "type": kind,
        }
    }


def list_failovers(sim: Sim, call: Call) -> Any:
    failovers = sim.store.all("robot_failover")
    if not failovers:
        raise error(404, "NOT_FOUND", "No failover IPs found")
    return [{"failover": _failover_view(sim, f)} for f in failovers]


def get_failover(sim: Sim, call: Call, ip: str) -> Any:
    return {"failover": _failover_view(sim, _failover(sim, ip))}


def route_failover(sim: Sim, call: Call, ip: str) -> Any:
    fo = _failover(sim, ip)
    target = _form(call, "active_server_ip")
    if target is None:
        raise _missing("active_server_ip")
    server = next((s for s in sim.store.all("robot_server") if s["ip"] == target), None)
    if server is None:
        raise error(404, "FAILOVER_NEW_SERVER_NOT_FOUND", f"Server with ip {target} not found")
    call.box = server["box"]
    if fo["active_server_ip"] == target:
        raise error(409, "FAILOVER_ALREADY_ROUTED", f"The failover ip is already routed to {target}")
    fo["active_server_ip"] = target
    sim.store.put("robot_failover", ip, fo)
    return {"failover": _failover_view(sim, fo)}


def unroute_failover(sim: Sim, call: Call, ip: str) -> Any:
    fo = _failover(sim, ip)
    fo["active_server_ip"] = None
    sim.store.put("robot_failover", ip, fo)
    return {"failover": _failover_view(sim, fo)}


ROUTES = Map(
    [
        Rule("/server", methods=["GET"], endpoint=list_servers),
        Rule("/server/<int:n>", methods=["GET"], endpoint=get_server),
        Rule("/server/<int:n>", methods=["POST"], endpoint=update_server),
        Rule("/key", methods=["GET"], endpoint=list_keys),
        Rule("/key", methods=["POST"], endpoint=create_key),
        Rule("/key/<fingerprint>", methods=["GET"], endpoint=get_key),
        Rule("/boot/<int:n>/rescue", methods=["GET"], endpoint=get_rescue),
        Rule("/boot/<int:n>/rescue", methods=["POST"], endpoint=activate_rescue),
        Rule("/boot/<int:n>/rescue", methods=["DELETE"], endpoint=deactivate_rescue),
        Rule("/reset/<int:n>", methods=["GET"], endpoint=get_reset),
        Rule("/reset/<int:n>", methods=["POST"], endpoint=reset),
        Rule("/failover", methods=["GET"], endpoint=list_failovers),
        Rule("/failover/<ip>", methods=["GET"], endpoint=get_failover),
        Rule("/failover/<ip>", methods=["POST"], endpoint=route_failover),
        Rule("/failover/<ip>", methods=["DELETE"], endpoint=unroute_failover),
    ],
    strict_slashes=False,
)


def route_not_found(path: str) -> VendorError:
    return error(404, "NOT_FOUND", f"Not found: {path}")


def bad_method(method: str, path: str) -> VendorError:
    return error(405, "METHOD_NOT_ALLOWED", f"Method {method} not allowed on {path}")
