"""A vendorsim served in-process on a free loopback port, with a clock the test moves."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from werkzeug.serving import make_server

from vendorsim.app import App
from vendorsim.core import Sim
from vendorsim.inventory import Inventory, load_inventory

DEV_INVENTORY = Path(__file__).resolve().parents[2] / "vendorsim" / "inventory.dev.yaml"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class RecordingFarm:
    """Stands in for vendorsim.boxes.BoxFarm (tested on its own) and records what it was asked."""

    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    installed: set[str] = field(default_factory=set)

    def ensure(self, box_key: str, **kw: Any) -> Any:
        self.calls.append(("ensure", box_key, kw))
        return None

    def reinstall(self, box_key: str, **kw: Any) -> Any:
        self.calls.append(("reinstall", box_key, kw))
        return None

    def boot_rescue(self, box_key: str, **kw: Any) -> Any:
        self.calls.append(("boot_rescue", box_key, kw))
        return None

    def reboot(self, box_key: str, **kw: Any) -> Any:
        self.calls.append(("reboot", box_key, kw))
        return None

    def installed_in_rescue(self, box_key: str) -> bool:
        # Which boxes ran installimage in their rescue system: tests set it.
        return box_key in self.installed

    def stop_all(self) -> None:
        self.calls.append(("stop_all", "", {}))

    def reinstalls(self) -> list[tuple[str, dict[str, Any]]]:
        return [(key, kw) for op, key, kw in self.calls if op == "reinstall"]


@dataclass
class Served:
    sim: Sim
    url: str
    clock: FakeClock
    farm: RecordingFarm
    inventory: Inventory

    def admin(self, method: str, path: str, body: Any = None) -> requests.Response:
        return requests.request(method, f"{self.url}/_admin/{path}", json=body, timeout=5)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    inventory = load_inventory(DEV_INVENTORY)
    clock = FakeClock()
    farm = RecordingFarm()
    sim = Sim(inventory, tmp_path, task_seconds=10, farm=farm, clock=clock)
    server = make_server("127.0.0.1", 0, App(sim), threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield Served(sim, f"http://127.0.0.1:{server.port}", clock, farm, inventory)
    finally:
        server.shutdown()
        server.server_close()
        sim.store.close()


# --- independent request signing (not vendorsim's code) -------------------------------


def ovh_signed(
    served: Served,
    method: str,
    path: str,
    body: Any = None,
    *,
    secret: str | None = None,
    consumer: str | None = None,
    app_key: str | None = None,
    timestamp: int | None = None,
    raw_body: str | None = None,
) -> requests.Response:
    creds = served.inventory.credentials.ovh
    url = f"{served.url}/ovh/1.0{path}"
    data = (
        raw_body
        if raw_body is not None
        else ("" if body is None else json.dumps(body, separators=(",", ":")))
    )
    ts = str(int(served.clock()) if timestamp is None else timestamp)
    consumer = creds.consumer_key if consumer is None else consumer
    to_sign = "+".join([secret or creds.application_secret, consumer, method, url, data, ts])
    headers = {
        "X-Ovh-Application": creds.application_key if app_key is None else app_key,
        "X-Ovh-Consumer": consumer,
        "X-Ovh-Timestamp": ts,
        "X-Ovh-Signature": "$1$" + hashlib.sha1(to_sign.encode()).hexdigest(),
    }
    if data:
        headers["Content-Type"] = "application/json"
    return requests.request(method, url, data=data.encode() if data else None, headers=headers, timeout=5)


def dedibox(
    served: Served,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = None,
    params: dict[str, Any] | None = None,
) -> requests.Response:
    secret = served.inventory.credentials.dedibox.secret_key if token is None else token
    return requests.request(
        method,
        f"{served.url}/dedibox{path}",
        json=body,
        params=params,
        headers={"X-Auth-Token": secret} if secret else {},
        timeout=5,
    )


def robot(
    served: Served, method: str, path: str, data: Any = None, *, auth: tuple[str, str] | None = None
) -> requests.Response:
    creds = served.inventory.credentials.robot
    return requests.request(
        method,
        f"{served.url}/robot{path}",
        data=data,
        auth=auth or (creds.username, creds.password),
        timeout=5,
    )


def md5_fingerprint(public_key: str) -> str:
    digest = hashlib.md5(base64.b64decode(public_key.split()[1])).hexdigest()
    return ":".join(digest[i : i + 2] for i in range(0, 32, 2))


def wait_until(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)
