"""The demux as it runs in its pod: real nginx (stream + ssl_preread) under demux/nginx-reload.sh,
with the nginx.conf the program renders and routes the reconciler renders from account peer
Services. Real TLS handshakes are routed by SNI to the right account's backend, everything else is
closed, and new routes arrive by a graceful reload that keeps established connections.

Only loopback addresses are rewritten (listen, resolver, each backend, the pid and routes paths,
plus the load_module line Debian's dynamic stream module needs); the first test asserts that.
"""

from __future__ import annotations

import datetime
import difflib
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client as k8s

from components.peer_demux import RELOAD_SCRIPT, ROUTES_FILE, demux_config, route_settings
from config.models import Cluster, Environment, Kura, Region
from demux.reconciler import RouteReconciler

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
STREAM_MODULE = Path("/usr/lib/nginx/modules/ngx_stream_module.so")
ACCOUNTS = ["acme", "globex", "initech"]
REGION = Region(
    id="us-east",
    cluster_id="us-east-1",
    fleet="ovh-us-east",
    ingress_class="kura-us-east",
    egress_burst_mbps=1500,
    host="us-east.staging.kura.tuist.dev",
)
KURA = Kura(runtime_image_tag="0.10.5", controller_image="ghcr.io/tuist/kura-controller:1.0.0")
CLUSTER = Cluster(runners_controller_image="ghcr.io/tuist/runners-controller:1.0.0")
SETTINGS = route_settings(REGION, KURA, Environment.STAGING, CLUSTER)


def host(handle: str) -> str:
    return f"{handle}.peer.us-east.staging.kura.tuist.dev"


def peer_service(
    handle: str,
    *,
    type: str = "ClusterIP",
    cluster_ip: str = "10.96.7.1",
    account: str | None = None,
    region: str = "us-east",
) -> k8s.V1Service:
    """An account peer Service as kura-controller creates it in the Kura namespace, with its labels
    (`account`/`region` label it as another account's or region's than its name reads)."""
    return k8s.V1Service(
        metadata=k8s.V1ObjectMeta(
            name=f"kura-{handle}-us-east-peer",
            namespace="kura",
            labels={
                "app.kubernetes.io/managed-by": "kura-controller",
                "tuist.dev/account": account or handle,
                "tuist.dev/region": region,
            },
        ),
        spec=k8s.V1ServiceSpec(
            type=type,
            cluster_ip=cluster_ip if type != "ExternalName" else None,
            external_name="attacker.example.com" if type == "ExternalName" else None,
            ports=[k8s.V1ServicePort(name="peer", port=7443)],
        ),
    )


def reconciled_routes(services: list[k8s.V1Service]) -> str:
    """The routes text the reconciler writes for these Services (its ConfigMap's data)."""
    reconciler = RouteReconciler(SETTINGS, core_v1=None, configmap="kura-peer-demux-routes-us-east")
    for service in services:
        reconciler.on_event("ADDED", service)
    return reconciler.desired()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def self_signed(common_name: str, dns_name: str) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(dns_name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


@dataclass
class Backend:
    """An account's peer endpoint: its own certificate; greets with its name, then echoes lines."""

    name: str
    cert_der: bytes
    sock: socket.socket
    context: ssl.SSLContext
    handshakes: list[str] = field(default_factory=list)

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        try:
            with self.context.wrap_socket(conn, server_side=True) as tls:
                self.handshakes.append(self.name)
                tls.sendall(self.name.encode() + b"\n")
                buffer = b""
                while chunk := tls.recv(1024):
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        tls.sendall(self.name.encode() + b":" + line + b"\n")
        except (OSError, ssl.SSLError):
            pass


def start_backends(tmp: Path) -> dict[str, Backend]:
    backends = {}
    for handle in ACCOUNTS:
        cert_pem, key_pem = self_signed(handle, f"kura-{handle}-us-east-peer.kura.svc.cluster.local")
        (tmp / f"{handle}.crt").write_bytes(cert_pem)
        (tmp / f"{handle}.key").write_bytes(key_pem)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tmp / f"{handle}.crt", tmp / f"{handle}.key")
        sock = socket.create_server(("127.0.0.1", 0))
        backend = Backend(handle, ssl.PEM_cert_to_DER_cert(cert_pem.decode()), sock, ctx)
        threading.Thread(target=backend.serve, daemon=True).start()
        backends[handle] = backend
    return backends


@dataclass
class Demux:
    port: int
    tmp: Path
    backends: dict[str, Backend]
    process: subprocess.Popen[str]
    original: str
    rewritten: str
    log: list[str] = field(default_factory=list)

    @property
    def mounted_routes(self) -> Path:
        return self.tmp / "mount" / "routes.map"

    @property
    def running_routes(self) -> Path:
        return self.tmp / "run" / "routes.map"

    def nginx_pid(self) -> int:
        # start_demux returned only once nginx had written this file.
        return int((self.tmp / "nginx.pid").read_text())

    def publish(self, routes: str) -> None:
        """What the kubelet does when the reconciler's ConfigMap changes: swap in the new file."""
        staged = self.mounted_routes.with_suffix(".new")
        staged.write_text(self.loopback_routes(routes))
        os.replace(staged, self.mounted_routes)

    def loopback_routes(self, routes: str) -> str:
        def to_loopback(m: re.Match[str]) -> str:
            handle = (
                m.group(2).removeprefix("kura-").removesuffix("-us-east-peer.kura.svc.cluster.local:7443")
            )
            return f"{m.group(1)}127.0.0.1:{self.backends[handle].sock.getsockname()[1]};"

        return re.sub(r'^("ok:[^"]+" )(\S+);$', to_loopback, routes, flags=re.M)

    def wait_for_log(self, needle: str, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while not any(needle in line for line in self.log):
            if time.monotonic() > deadline:
                raise AssertionError(f"no log line with {needle!r} within {timeout}s: {self.log}")
            time.sleep(0.05)


def rewrite(conf: str, tmp: Path, port: int) -> str:
    """Point the config at loopback and the scratch dir: listen, resolver, pid and include only."""
    out = []
    for line in conf.splitlines():
        if line == "        listen 7443;":
            line = f"        listen 127.0.0.1:{port};"
        elif line.startswith("    resolver "):
            line = re.sub(r"resolver \S+", "resolver 127.0.0.1", line)
        elif line == "pid /tmp/nginx.pid;":
            line = f"pid {tmp}/nginx.pid;"
        elif line == f"        include {ROUTES_FILE};":
            line = f"        include {tmp}/run/routes.map;"
        out.append(line)
    load = f"load_module {STREAM_MODULE};" if STREAM_MODULE.exists() else None
    return "\n".join(([load] if load else []) + out) + "\n"


def start_demux(tmp: Path, routes: str) -> Demux:
    port = free_port()
    backends = start_backends(tmp)
    original = demux_config(KURA, CLUSTER)["nginx.conf"]
    rewritten = rewrite(original, tmp, port)
    (tmp / "nginx.conf").write_text(rewritten)
    (tmp / "mount").mkdir()
    (tmp / "run").mkdir()
    (tmp / "logs").mkdir()
    env = {
        **os.environ,
        "NGINX_BIN": NGINX,
        "NGINX_CONF": str(tmp / "nginx.conf"),
        "NGINX_ARGS": f"-p {tmp}/ -e {tmp}/error.log",
        "ROUTES_SOURCE": str(tmp / "mount" / "routes.map"),
        "ROUTES_FILE": str(tmp / "run" / "routes.map"),
        "RELOAD_INTERVAL_SECONDS": "0.2",
    }
    demux = Demux(port, tmp, backends, None, original, rewritten)  # type: ignore[arg-type]
    demux.publish(routes)
    demux.process = subprocess.Popen(
        ["/bin/sh", str(RELOAD_SCRIPT)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )

    def read_log() -> None:
        assert demux.process.stderr is not None
        for line in demux.process.stderr:
            demux.log.append(line.rstrip("\n"))

    threading.Thread(target=read_log, daemon=True).start()
    # Ready once this demux's own nginx has written its pid (it does so after binding its port) and
    # the port answers: the port alone can answer for another process that held it a moment before.
    pid_file = tmp / "nginx.pid"
    deadline = time.monotonic() + 10
    while True:
        if demux.process.poll() is not None:
            raise AssertionError(f"the demux exited {demux.process.returncode}: {demux.log}")
        try:
            if not (pid_file.exists() and pid_file.read_text().strip()):
                raise ConnectionRefusedError("nginx has not written its pid yet")
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return demux
        except OSError:
            if time.monotonic() > deadline:
                stop_demux(demux)
                raise
            time.sleep(0.05)


def stop_demux(demux: Demux) -> None:
    if demux.process.poll() is None:
        os.killpg(demux.process.pid, signal.SIGTERM)
        try:
            demux.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(demux.process.pid, signal.SIGKILL)
            demux.process.wait(timeout=5)
    for b in demux.backends.values():
        b.sock.close()


@pytest.fixture(scope="module")
def demux(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demux]:
    running = start_demux(
        tmp_path_factory.mktemp("demux"), reconciled_routes([peer_service(h) for h in ACCOUNTS])
    )
    yield running
    stop_demux(running)


@pytest.fixture
def fresh_demux(tmp_path: Path) -> Iterator[Callable[[list[str]], Demux]]:
    started: list[Demux] = []

    def start(handles: list[str]) -> Demux:
        started.append(start_demux(tmp_path, reconciled_routes([peer_service(h) for h in handles])))
        return started[-1]

    yield start
    for d in started:
        stop_demux(d)


def connect(port: int, sni: str | bytes | None) -> ssl.SSLSocket:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    # bytes skip Python's IDNA check, so SNI values it would refuse still go on the wire.
    return ctx.wrap_socket(raw, server_hostname=sni)  # type: ignore[arg-type]


def handshake(port: int, sni: str | bytes | None) -> tuple[bytes, bytes]:
    """TLS handshake through the demux; returns the peer's certificate and first line."""
    with connect(port, sni) as tls:
        cert = tls.getpeercert(binary_form=True)
        assert cert is not None
        return cert, tls.recv(64)


def eventually(probe: Callable[[], bytes], timeout: float = 5) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return probe()
        except (ssl.SSLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def roundtrip(tls: ssl.SSLSocket, text: str) -> bytes:
    tls.sendall(text.encode() + b"\n")
    return tls.recv(64)


def test_rewrite_changes_only_listen_resolver_pid_and_include_lines(demux: Demux) -> None:
    lines = difflib.ndiff(demux.original.splitlines(), demux.rewritten.splitlines())
    diff = [d for d in lines if d[:2] in ("- ", "+ ")]
    assert [d[2:] for d in diff if d.startswith("- ")] == [
        "pid /tmp/nginx.pid;",
        f"    resolver {CLUSTER.dns_service_ip} valid=10s ipv6=off;",
        "        include /run/kura-peer-demux/routes.map;",
        "        listen 7443;",
    ]
    added = [re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", d[2:]) for d in diff if d.startswith("+ ")]
    assert added == [
        f"load_module {STREAM_MODULE};",
        f"pid {demux.tmp}/nginx.pid;",
        "    resolver 127.0.0.1 valid=10s ipv6=off;",
        f"        include {demux.tmp}/run/routes.map;",
        "        listen 127.0.0.1:PORT;",
    ]


def test_the_routes_nginx_runs_are_the_reconciler_s_with_loopback_backends(demux: Demux) -> None:
    expected = demux.loopback_routes(reconciled_routes([peer_service(h) for h in ACCOUNTS]))
    assert demux.running_routes.read_text() == expected
    assert [line.split('"')[1] for line in expected.splitlines() if line.startswith('"')] == [
        f"ok:{host(h)}" for h in ACCOUNTS
    ]


@pytest.mark.parametrize("handle", ACCOUNTS)
def test_each_account_sni_reaches_its_own_backend_and_certificate(demux: Demux, handle: str) -> None:
    backend = demux.backends[handle]
    before = {b.name: len(b.handshakes) for b in demux.backends.values()}

    cert, line = handshake(demux.port, host(handle))

    assert cert == backend.cert_der
    assert line == f"{handle}\n".encode()
    after = {b.name: len(b.handshakes) for b in demux.backends.values()}
    assert after == {name: count + (name == handle) for name, count in before.items()}


HOSTILE_SNI: list[tuple[str, str | bytes | None]] = [
    ("no SNI at all", None),
    ("bare regional peer host", "peer.us-east.staging.kura.tuist.dev"),
    ("kubernetes.default", "kubernetes.default"),
    ("apiserver service name", "kubernetes.default.svc.cluster.local"),
    ("peer service in another namespace", "kura-acme-us-east-peer.default.svc.cluster.local"),
    ("the backend service name itself", "kura-acme-us-east-peer.kura.svc.cluster.local"),
    ("extra leading label", "x.acme.peer.us-east.staging.kura.tuist.dev"),
    ("extra trailing labels", "acme.peer.us-east.staging.kura.tuist.dev.evil.example"),
    ("double dot", b"acme..peer.us-east.staging.kura.tuist.dev"),
    ("trailing dot", "acme.peer.us-east.staging.kura.tuist.dev."),
    ("uppercase", "ACME.PEER.US-EAST.STAGING.KURA.TUIST.DEV"),
    ("mixed case", "Acme.peer.us-east.staging.kura.tuist.dev"),
    ("label over 63", b"a" * 64 + b".peer.us-east.staging.kura.tuist.dev"),
    ("unicode lookalike", "\u00e1cme.peer.us-east.staging.kura.tuist.dev"),
    ("other environment", "acme.peer.us-east.kura.tuist.dev"),
    ("other region", "acme.peer.us-west.staging.kura.tuist.dev"),
    ("unknown account", "hooli.peer.us-east.staging.kura.tuist.dev"),
]


@pytest.mark.parametrize(("case", "sni"), HOSTILE_SNI, ids=[c for c, _ in HOSTILE_SNI])
def test_unknown_and_hostile_sni_is_closed_and_reaches_no_backend(
    demux: Demux, case: str, sni: str | bytes | None
) -> None:
    before = sum(len(b.handshakes) for b in demux.backends.values())

    with pytest.raises((ssl.SSLError, ConnectionError)):
        handshake(demux.port, sni)

    assert sum(len(b.handshakes) for b in demux.backends.values()) == before, case


def test_an_external_name_service_never_becomes_a_route(fresh_demux: Callable[[list[str]], Demux]) -> None:
    d = fresh_demux(["acme"])
    d.publish(reconciled_routes([peer_service("acme"), peer_service("globex", type="ExternalName")]))
    time.sleep(1)  # five reload intervals: nothing may change
    with pytest.raises((ssl.SSLError, ConnectionError)):
        handshake(d.port, host("globex"))
    assert d.backends["globex"].handshakes == []


def test_a_service_labelled_as_another_account_s_never_routes_the_account_its_name_reads_as(
    fresh_demux: Callable[[list[str]], Demux],
) -> None:
    # kura-globex-us-east-peer is also account globex-us's name in a region "east"; its labels say so.
    d = fresh_demux(["acme"])
    d.publish(
        reconciled_routes([peer_service("acme"), peer_service("globex", account="globex-us", region="east")])
    )
    time.sleep(1)  # five reload intervals: nothing may change
    with pytest.raises((ssl.SSLError, ConnectionError)):
        handshake(d.port, host("globex"))
    assert d.backends["globex"].handshakes == []
    assert handshake(d.port, host("acme"))[1] == b"acme\n"


def test_a_new_account_arrives_by_a_graceful_reload_that_keeps_open_connections(
    fresh_demux: Callable[[list[str]], Demux],
) -> None:
    d = fresh_demux(["acme"])
    master = d.nginx_pid()
    with pytest.raises((ssl.SSLError, ConnectionError)):
        handshake(d.port, host("globex"))
    with connect(d.port, host("acme")) as established:
        assert established.recv(64) == b"acme\n"
        assert roundtrip(established, "before") == b"acme:before\n"

        d.publish(reconciled_routes([peer_service("acme"), peer_service("globex")]))
        d.wait_for_log("reloaded with 2 route(s)")

        # The connection opened before the reload is still proxied, by the old worker.
        assert roundtrip(established, "after") == b"acme:after\n"
        # New connections reach the new workers once the old ones have stopped accepting.
        assert eventually(lambda: handshake(d.port, host("globex"))[1]) == b"globex\n"
        assert roundtrip(established, "still") == b"acme:still\n"
    # A reload, not a restart: the same master took the new routes.
    assert d.nginx_pid() == master


def test_a_changed_static_config_waits_for_the_pods_roll_and_a_routes_reload_does_not_take_it(
    fresh_demux: Callable[[list[str]], Demux],
) -> None:
    # The kubelet swaps a changed ConfigMap into the mount of every running pod; a reload for new
    # routes must keep the config the pod started with (only a new pod, rolled one box at a time,
    # takes the new one). Here the new config is one nginx refuses outright.
    d = fresh_demux(["acme"])
    (d.tmp / "nginx.conf").write_text("this is not nginx configuration;\n")

    d.publish(reconciled_routes([peer_service("acme"), peer_service("globex")]))
    d.wait_for_log("reloaded with 2 route(s)")

    assert eventually(lambda: handshake(d.port, host("globex"))[1]) == b"globex\n"
    assert not [line for line in d.log if "refusing new routes" in line], d.log


def test_routes_nginx_refuses_are_never_installed(fresh_demux: Callable[[list[str]], Demux]) -> None:
    d = fresh_demux(["acme"])
    good = d.running_routes.read_text()
    # Not what the reconciler writes, but what a corrupted ConfigMap could hold.
    d.mounted_routes.write_text('"ok:globex.peer.us-east.staging.kura.tuist.dev" ;\n')
    d.wait_for_log("refusing new routes")
    assert d.running_routes.read_text() == good
    _, line = handshake(d.port, host("acme"))
    assert line == b"acme\n"


def test_sigterm_drains_gracefully_open_connections_finish(fresh_demux: Callable[[list[str]], Demux]) -> None:
    d = fresh_demux(["acme"])
    with connect(d.port, host("acme")) as established:
        assert established.recv(64) == b"acme\n"
        # The runtime signals the container's PID 1, the script; nginx hears it from the script.
        os.kill(d.process.pid, signal.SIGTERM)
        d.wait_for_log("stopping nginx gracefully")
        # nginx stops accepting at once ...
        deadline = time.monotonic() + 5
        while True:
            try:
                socket.create_connection(("127.0.0.1", d.port), timeout=0.2).close()
            except OSError:
                break
            assert time.monotonic() < deadline, "nginx still accepts after SIGTERM"
            time.sleep(0.05)
        # ... and the open connection keeps working until it is closed.
        assert roundtrip(established, "draining") == b"acme:draining\n"
        assert d.process.poll() is None
    assert d.process.wait(timeout=10) == 0
