"""Fixtures for the vendor client tests.

`recorder`: a tiny HTTP server on 127.0.0.1 that answers canned, real-shaped JSON per route and
records every request exactly as it arrived (method, raw path, query, headers, body).

`vendorsim`: the project's vendor simulator as a real process on a free port (see vendorsim/).

`fast_machine_clients` (autouse): the vendor clients the machine providers build in this process
retry and poll as in production, only sooner.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Recorded:
    method: str
    path: str  # raw, still percent-encoded, without the query
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased names
    body: bytes
    target: str  # path?query exactly as sent

    def json(self) -> Any:
        return json.loads(self.body)

    def form(self) -> list[tuple[str, str]]:
        from urllib.parse import parse_qsl

        return parse_qsl(self.body.decode(), keep_blank_values=True)


@dataclass
class Canned:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None


class RecordingServer:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._routes: dict[tuple[str, str], list[Canned]] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                split = urlsplit(self.path)
                recorded = Recorded(
                    method=self.command,
                    path=split.path,
                    query=parse_qs(split.query, keep_blank_values=True),
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                    target=self.path,
                )
                canned = server._answer(recorded)
                payload = (
                    canned.raw
                    if canned.raw is not None
                    else (b"" if canned.body is None else json.dumps(canned.body).encode())
                )
                self.send_response(canned.status)
                if canned.raw is None and canned.body is not None:
                    self.send_header("Content-Type", "application/json")
                for name, value in canned.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @staticmethod
    def reply(
        body: Any = None, status: int = 200, headers: dict[str, str] | None = None, raw: bytes | None = None
    ) -> Canned:
        return Canned(status=status, body=body, headers=headers or {}, raw=raw)

    def on(self, method: str, path: str, *answers: Canned | Any) -> None:
        """Answer `method path` (path with query if the route needs one) with `answers` in turn;
        the last one repeats. A bare value is a 200 JSON body."""
        canned = [a if isinstance(a, Canned) else Canned(body=a) for a in answers]
        with self._lock:
            self._routes[(method, path)] = canned

    def _answer(self, recorded: Recorded) -> Canned:
        with self._lock:
            self.requests.append(recorded)
            queue = self._routes.get((recorded.method, recorded.target)) or self._routes.get(
                (recorded.method, recorded.path)
            )
            if not queue:
                return Canned(
                    status=599, body={"message": f"no canned answer for {recorded.method} {recorded.target}"}
                )
            return queue.pop(0) if len(queue) > 1 else queue[0]

    def calls(self) -> list[str]:
        return [f"{r.method} {r.target}" for r in self.requests]

    def last(self, method: str, path: str) -> Recorded:
        matches = [r for r in self.requests if r.method == method and r.path == path]
        assert matches, f"no {method} {path} in {self.calls()}"
        return matches[-1]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture(autouse=True)
def fast_machine_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine providers' vendor clients (providers/machine/settings.py) with the production number
    of attempts, but retries after hundredths of a second instead of half a second and more, and task
    polls from 50 ms: a test under injected 5xx faults, or waiting on a simulated task, does not sleep
    through production's pacing. Provider processes the engine starts keep the defaults."""
    from providers.machine import settings
    from providers.retry import DEFAULT_RETRY, PollPolicy, RetryPolicy

    monkeypatch.setattr(
        settings,
        "CLIENT_TIMING",
        settings.ClientTiming(
            retry=RetryPolicy(max_attempts=DEFAULT_RETRY.max_attempts, base_delay=0.02, max_delay=0.2),
            poll=PollPolicy(first=0.05, max_interval=0.5),
        ),
    )


@pytest.fixture
def recorder() -> Iterator[RecordingServer]:
    server = RecordingServer()
    try:
        yield server
    finally:
        server.close()


# --- vendorsim ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Vendorsim:
    url: str
    process: subprocess.Popen[bytes]

    def admin(self, method: str, path: str, **kwargs: Any) -> Any:
        response = requests.request(method, f"{self.url}/_admin{path}", timeout=10, **kwargs)
        response.raise_for_status()
        return response.json() if response.content else None


def start_vendorsim(inventory: Path, tmp_path: Path) -> Vendorsim:
    port = _free_port()
    log = (tmp_path / "vendorsim.log").open("wb")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vendorsim",
            "--inventory",
            str(inventory),
            "--port",
            str(port),
            "--state",
            str(tmp_path / "state"),
            "--task-seconds",
            "0.3",
            "--reset",
            "--no-ssh",
        ],
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"vendorsim exited {process.returncode}: {(tmp_path / 'vendorsim.log').read_text()}"
            )
        try:
            requests.get(f"{url}/_admin/state", timeout=1)
            return Vendorsim(url=url, process=process)
        except requests.RequestException:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("vendorsim did not answer within 20s")


def stop_vendorsim(sim: Vendorsim) -> None:
    sim.process.terminate()
    try:
        sim.process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        sim.process.kill()
        sim.process.wait()


DEV_INVENTORY = REPO / "vendorsim" / "inventory.dev.yaml"


@pytest.fixture(scope="module")
def vendorsim_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vendorsim]:
    """One simulator per test module (starting it costs more than resetting it)."""
    if not (REPO / "vendorsim" / "__main__.py").exists():
        raise RuntimeError("vendorsim/__main__.py is missing: the simulator has not landed")
    sim = start_vendorsim(DEV_INVENTORY, tmp_path_factory.mktemp("vendorsim"))
    try:
        yield sim
    finally:
        stop_vendorsim(sim)


@pytest.fixture
def vendorsim(vendorsim_process: Vendorsim) -> Vendorsim:
    """The module's simulator, reseeded from the inventory with no faults."""
    vendorsim_process.admin("POST", "/reset")
    return vendorsim_process


def writes_since(sim: Vendorsim, since: int) -> list[dict[str, Any]]:
    return list(sim.admin("GET", f"/audit?since={since}")["entries"])
