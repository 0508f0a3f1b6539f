"""Shared by the machine provider tests: a vendorsim subprocess with real SSH boxes, each on an address
of its own in the box network (a /24 of 198.18.0.0/15 per simulator; tests/support/netns.py) at one
shared port, its own fleet key and
sudo password, and ClaimProvider / MachineProvider instances configured the way the dynamic provider
process configures them (a pulumi.dynamic Config holding the decrypted stack config).

No tests here; the test_machine_*.py files import it.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import requests
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pulumi.dynamic import ConfigureRequest
from pulumi.dynamic.config import Config

from providers.machine import record as claim_records
from providers.machine.provider import ClaimProvider, MachineProvider, _Stateless

REPO = Path(__file__).resolve().parents[2]
DEV_INVENTORY = REPO / "vendorsim" / "inventory.dev.yaml"
PROJECT = "tuist-infra"
STACK = "dev"
P = TypeVar("P", bound=_Stateless)

FLEETS: dict[str, dict[str, Any]] = {
    "kura-ovh": {
        "vendor": "ovh",
        "marker": "tuist-kura-dev-ovh",
        "node_pool": "kura-ovh",
        "taints": [{"key": "tuist.dev/kura-cache", "value": "true", "effect": "NoSchedule"}],
        "datacenter_prefix": "bhs",
    },
    "kura-dedibox": {
        "vendor": "dedibox",
        "marker": "tuist-kura-dev",
        "node_pool": "kura-dedibox",
        "taints": [{"key": "tuist.dev/kura-cache", "value": "true", "effect": "NoSchedule"}],
        "datacenter_prefix": "DC5",
    },
    "runners-linux": {
        "vendor": "robot",
        "marker": "tuist-bm-dev-",
        "node_pool": "runners-linux",
        "taints": [],
    },
    "kura-scw": {
        "vendor": "scaleway_em",
        "marker": "tuist-kura-scw-dev",
        "node_pool": "kura-scw-fr-par",
        "taints": [{"key": "tuist.dev/runner-cache", "value": "", "effect": "NoSchedule"}],
        "datacenter_prefix": "fr-par",
    },
    "runners-macos": {
        "vendor": "applesilicon",
        "marker": "tuist-macos-dev",
        "node_pool": "runners-macos",
        "taints": [],
        "os": "macos-tahoe",
        "ssh_user": "m1",
    },
}

# The Elastic Metal dev fleet's Private Network (vendorsim/inventory.dev.yaml).
PRIVATE_NETWORK = "9e700000-0000-4000-8000-000000000001"

FAST_TIMEOUTS = {
    "ssh_retry_delay": 0.2,
    "retry_delay": 0.05,
    "poll_interval": 0.05,
    "agent_settle": 0.1,  # vendorsim's launchd shows a crash loop at every look, however soon
    "joining": 60,
    "release_wait_install": 30,
    "wait_rescue_ssh": 30,
    "wait_new_host_key": 30,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# The SSH port of every simulated box this test process starts (and of machine_props): boxes tell
# apart by address, as real ones do. Free on 127.0.0.1 means no wildcard listener holds it either.
SIM_SSH_PORT = free_port()
_USED_RANGES: set[str] = set()


def fresh_box_range() -> str:
    """A /24 prefix of the box network's lower half (198.18.0.0/16) no other simulator of this process
    uses, clear of 198.18.0.x (lo's own address) and of the dev inventory's 198.18.1-9.x. (Kubelet
    stand-ins on the host report addresses of the upper half, tests/support/cluster.py.)"""
    while (prefix := f"198.18.{10 + secrets.randbelow(246)}") in _USED_RANGES:
        pass
    _USED_RANGES.add(prefix)
    return prefix


def move_boxes(doc: dict[str, Any], prefix: str, ssh_port: int) -> None:
    """Put every box of an inventory document on `prefix`.<its last octet>:`ssh_port` (the dev
    inventory's last octets are unique across vendors), keeping references to box IPs in step."""

    def moved(ip: str) -> str:
        return f"{prefix}.{ip.rsplit('.', 1)[1]}"

    for vendor in ("ovh", "dedibox", "robot", "scaleway_em", "applesilicon"):
        for server in (doc.get(vendor) or {}).get("servers", []):
            server["ip"] = moved(server["ip"])
            server["ssh_port"] = ssh_port
    for failover in doc["robot"]["failover_ips"]:
        if failover.get("active_server_ip"):
            failover["active_server_ip"] = moved(failover["active_server_ip"])


@dataclass(frozen=True)
class FleetKey:
    private: str
    public: str


def new_fleet_key() -> FleetKey:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
        + " tuist-test-fleet"
    )
    return FleetKey(private, public)


@dataclass
class Sim:
    url: str
    state_dir: Path
    process: subprocess.Popen[bytes]
    inventory: dict[str, Any]
    key: FleetKey
    sudo_password: str
    box_range: str  # 198.<18|19>.<c>: the boxes' public IPv4s are box_range.<last octet of the dev inventory>

    def ip(self, last_octet: int) -> str:
        """A box's public IPv4 (and SSH address) in this run, by its last octet in the dev inventory."""
        return f"{self.box_range}.{last_octet}"

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        response = requests.request(method, f"{self.url}/_admin/{path}", json=body, timeout=30)
        # vendorsim says what it refused (a fault spec missing error_rate, ...): show it, not just the status.
        assert response.ok, f"{method} /_admin/{path}: {response.status_code} {response.text.strip()}"
        return response.json()

    def reset(self) -> Sim:
        """The inventory as loaded, and no process-memory claim record of earlier tests (it went with
        their boxes): what each test of a module-scoped simulator starts from."""
        self.admin("POST", "reset")
        claim_records._PROCESS_STORE.clear()
        return self

    def state(self) -> dict[str, Any]:
        return dict(self.admin("GET", "state"))

    def audit(self, since: int = 0) -> list[dict[str, Any]]:
        return list(self.admin("GET", f"audit?since={since}")["entries"])

    def last_audit_id(self) -> int:
        entries = self.audit()
        return int(entries[-1]["id"]) if entries else 0

    def box(self, key: str) -> dict[str, Any]:
        return next(b for b in self.state()["boxes"] if b["key"] == key)

    def box_root(self, key: str) -> Path:
        # The installed system of the box (vendorsim/boxes.py: <box>/system/root; rescue is apart).
        return self.state_dir / "boxes" / key / "system" / "root"

    def calls(self, key: str) -> list[str]:
        path = self.box_root(key) / "var/log/sim-calls.log"
        return path.read_text().splitlines() if path.exists() else []

    def stack_config(self) -> dict[str, Any]:
        creds = self.inventory["credentials"]
        vendors = {
            "ovh": {"endpoint": f"{self.url}/ovh/1.0", "application_key": creds["ovh"]["application_key"]},
            "dedibox": {
                "api_url": f"{self.url}/dedibox",
                "project_id": creds["dedibox"]["project_id"],
                "zones": ["fr-par-2"],
            },
            "robot": {"api_url": f"{self.url}/robot", "username": creds["robot"]["username"]},
            "scaleway_em": {
                "api_url": f"{self.url}/scaleway",
                "access_key": creds["scaleway"]["access_key"],
                "project_id": creds["scaleway"]["project_id"],
                "zones": ["fr-par-1", "fr-par-2", "nl-ams-1"],
            },
            "applesilicon": {
                "api_url": f"{self.url}/scaleway",
                "access_key": creds["scaleway"]["access_key"],
                "project_id": creds["scaleway"]["project_id"],
                "zones": ["fr-par-1", "fr-par-3"],
            },
        }
        return {
            f"{PROJECT}:environment": "dev",
            # Structured keys reach configure() as JSON strings.
            f"{PROJECT}:vendors": json.dumps(vendors),
            f"{PROJECT}:ovhApplicationSecret": creds["ovh"]["application_secret"],
            f"{PROJECT}:ovhConsumerKey": creds["ovh"]["consumer_key"],
            f"{PROJECT}:dediboxSecretKey": creds["dedibox"]["secret_key"],
            f"{PROJECT}:robotPassword": creds["robot"]["password"],
            f"{PROJECT}:scalewaySecretKey": creds["scaleway"]["secret_key"],
            f"{PROJECT}:fleetSshPrivateKey": self.key.private,
            f"{PROJECT}:fleetSudoPassword": self.sudo_password,
        }

    def secret_values(self) -> list[str]:
        creds = self.inventory["credentials"]
        return [
            creds["ovh"]["application_secret"],
            creds["ovh"]["consumer_key"],
            creds["dedibox"]["secret_key"],
            creds["robot"]["password"],
            creds["scaleway"]["secret_key"],
            self.key.private,
            # A key's body is secret too: any long line of it in an output would be a leak.
            *[line for line in self.key.private.splitlines() if len(line) > 20 and "-----" not in line],
            self.sudo_password,
        ]

    def _configured(self, provider: P, overrides: dict[str, Any]) -> P:
        raw = {**self.stack_config(), **{f"{PROJECT}:{k}": v for k, v in overrides.items()}}
        provider.configure(ConfigureRequest(Config(raw_config=raw, project_name=PROJECT)))
        return provider

    def claims(self, **overrides: Any) -> ClaimProvider:
        """A configured ClaimProvider (the stack config with `overrides` on top)."""
        return self._configured(ClaimProvider(), overrides)

    def machines(self, **overrides: Any) -> MachineProvider:
        """A configured MachineProvider (the stack config with `overrides` on top)."""
        return self._configured(MachineProvider(), overrides)

    def pins(self) -> dict[str, str]:
        """The dev stack's Robot install pins (Pulumi.dev.yaml), pointing at this simulator."""
        doc = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())
        (robot,) = [f for f in doc["config"][f"{PROJECT}:fleets"] if f["vendor"] == "robot"]
        pins: dict[str, str] = dict(robot["install_artifacts"])
        for key, value in pins.items():
            if key.endswith("_url"):
                pins[key] = self.url + "/artifacts/" + value.rsplit("/artifacts/", 1)[1]
        return pins

    def adopt(
        self,
        fleet: str,
        index: int,
        *,
        claims: ClaimProvider | None = None,
        machines: MachineProvider | None = None,
        claim: dict[str, Any] | None = None,
        machine: dict[str, Any] | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """What the engine does for one slot: create its claim, then its machine from the claim's
        outputs. Returns (claim outputs, machine outputs)."""
        claim_outs = (claims or self.claims()).create(claim_props(fleet, index, **(claim or {}))).outs
        assert claim_outs is not None
        machine_outs = (
            (machines or self.machines())
            .create(machine_props(fleet, index, claim_outs, **(machine or {})))
            .outs
        )
        assert machine_outs is not None
        return claim_outs, machine_outs

    def destroy(
        self,
        claim_outs: dict[str, Any],
        machine_outs: dict[str, Any] | None,
        *,
        claims: ClaimProvider | None = None,
        machines: MachineProvider | None = None,
    ) -> None:
        """What `pulumi destroy` does for one slot: the machine leaves (if it was created), then the
        claim releases."""
        if machine_outs is not None:
            (machines or self.machines()).delete(resource_id(machine_outs), machine_outs)
        (claims or self.claims()).delete(resource_id(claim_outs), claim_outs)

    def faults(self, spec: dict[str, Any]) -> None:
        self.admin("POST", "faults", spec)

    def clear_faults(self) -> None:
        self.admin("DELETE", "faults")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_sim(tmp: Path, *, task_seconds: float = 0.2) -> Sim:
    """A vendorsim on a free port whose boxes answer SSH on their own addresses in a fresh loopback range
    at SIM_SSH_PORT, seeded with a fresh fleet key and sudo password (so no test depends on build/ and
    every secret is unique to the run)."""
    doc = yaml.safe_load(DEV_INVENTORY.read_text())
    key = new_fleet_key()
    sudo_password = "sudo-" + secrets.token_hex(12)
    doc["prep"] = {"fleet_public_key": key.public, "sudo_password": sudo_password}
    box_range = fresh_box_range()
    move_boxes(doc, box_range, SIM_SSH_PORT)
    inventory = tmp / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(doc))
    while (port := free_port()) == SIM_SSH_PORT:
        pass
    state = tmp / "state"
    log = (tmp / "vendorsim.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vendorsim",
            "--inventory",
            str(inventory),
            "--state",
            str(state),
            "--port",
            str(port),
            "--task-seconds",
            str(task_seconds),
            "--reset",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError(
                f"vendorsim exited {process.returncode}:\n{(tmp / 'vendorsim.log').read_text()}"
            )
        try:
            requests.get(f"{url}/_admin/state", timeout=1).raise_for_status()
            break
        except requests.RequestException:
            if time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("vendorsim did not answer within 60s") from None
            time.sleep(0.1)
    return Sim(url, state, process, doc, key, sudo_password, box_range)


def running_sim(tmp: Path) -> Iterator[Sim]:
    sim = start_sim(tmp)
    try:
        yield sim
    finally:
        sim.stop()


def resource_id(outs: dict[str, Any]) -> str:
    return f"{outs['vendor']}:{outs['box_id']}"


def claim_props(
    fleet: str, index: int, *, stack: str = STACK, environment: str = "dev", **overrides: Any
) -> dict[str, Any]:
    """A MachineClaim's inputs as components/fleet.py builds them for the dev fleets."""
    spec = FLEETS[fleet]
    props: dict[str, Any] = {
        "project": PROJECT,
        "stack": stack,
        "resource_name": f"{fleet}-{index}",
        "environment": environment,
        "fleet": fleet,
        "vendor": spec["vendor"],
        "marker": spec["marker"],
        "datacenter_prefix": spec.get("datacenter_prefix"),
        "os": spec.get("os", "ubuntu_24.04"),
        "ssh_user": spec.get("ssh_user", "ubuntu"),
        "ssh_port": SIM_SSH_PORT,
        "api_server": None,
        "allow_release": False,
        "allow_production_release": False,
        "install_artifacts": None,
        "timeouts": dict(FAST_TIMEOUTS),
    }
    props.update(overrides)
    return props


def machine_props(fleet: str, index: int, claim_outs: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """An AdoptedMachine's inputs: the fleet's, and the claim's outputs, as components/fleet.py wires them."""
    spec = FLEETS[fleet]
    props: dict[str, Any] = {
        "project": PROJECT,
        "stack": claim_outs.get("stack", STACK),
        "resource_name": f"{fleet}-{index}",
        "environment": claim_outs.get("environment", "dev"),
        "fleet": fleet,
        "vendor": spec["vendor"],
        "node_pool": spec["node_pool"],
        "labels": {},
        "taints": list(spec["taints"]),
        "ssh_user": spec.get("ssh_user", "ubuntu"),
        "ssh_port": SIM_SSH_PORT,
        "kubernetes_minor": "v1.34",
        "api_server": claim_outs.get("api_server"),
        "cluster_dns": "10.96.0.10",
        "cluster_domain": "cluster.local",
        "install_artifacts": claim_outs.get("install_artifacts"),
        "timeouts": dict(FAST_TIMEOUTS),
        **{
            key: claim_outs.get(key)
            for key in (
                "box_id",
                "box_name",
                "datacenter",
                "public_ipv4",
                "provider_id",
                "claim_token",
            )
        },
    }
    props.update(overrides)
    return props


def claims_in_state(state: dict[str, Any]) -> dict[str, str]:
    """box id -> the full vendor marker field, for every box of the simulator."""
    fields: dict[str, str] = {}
    for server in state["ovh"]["servers"]:
        fields[server["name"]] = str(server.get("displayName") or server.get("display_name") or "")
    for server in state["dedibox"]["servers"]:
        fields[f"{server['zone']}/{server['id']}"] = ",".join(server.get("tags") or [])
    for server in state["robot"]["servers"]:
        fields[str(server["number"])] = str(server["server_name"])
    for server in state["scaleway_em"]["servers"]:
        fields[f"{server['zone']}/{server['id']}"] = ",".join(server.get("tags") or [])
    for server in state["applesilicon"]["servers"]:
        fields[f"{server['zone']}/{server['id']}"] = str(server["name"])
    return fields
