"""The generated demux config, run by a real nginx (stream + ssl_preread), routes real
TLS handshakes by SNI to the right account's backend and closes everything else.

Only listen, resolver and backend addresses are rewritten to loopback (plus the
load_module line Debian's dynamic stream module needs); the test asserts that.
"""

from __future__ import annotations

import datetime
import difflib
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from components.peer_demux import peer_routes, render_demux_config
from config.models import Environment, Kura, Region

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
KURA = Kura(
    runtime_image_tag="0.10.5", controller_image="ghcr.io/tuist/kura-controller:1.0.0", accounts=ACCOUNTS
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def loopback_rewrite(conf: str, listen_port: int, backend_ports: dict[str, int]) -> str:
    """Point the config at loopback: listen, resolver and each backend address, nothing else."""
    out = []
    for line in conf.splitlines():
        if re.fullmatch(r"        listen \d+;", line):
            line = f"        listen 127.0.0.1:{listen_port};"
        elif line.startswith("    resolver "):
            line = re.sub(r"resolver \S+", "resolver 127.0.0.1", line)
        else:
            m = re.fullmatch(r'(        "ok:[^"]+" )(\S+);', line)
            if m:
                line = f"{m.group(1)}127.0.0.1:{backend_ports[m.group(2)]};"
        out.append(line)
    load = f"load_module {STREAM_MODULE};" if STREAM_MODULE.exists() else None
    return "\n".join(([load] if load else []) + out) + "\n"


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
    """A per-account TLS server with its own certificate; counts the handshakes it completes."""

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
            try:
                with self.context.wrap_socket(conn, server_side=True) as tls:
                    self.handshakes.append(self.name)
                    tls.sendall(self.name.encode() + b"\n")
            except (OSError, ssl.SSLError):
                pass


@dataclass
class Demux:
    port: int
    backends: dict[str, Backend]
    original: str
    rewritten: str


@pytest.fixture(scope="module")
def demux(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demux]:
    tmp = tmp_path_factory.mktemp("demux")
    routes = peer_routes(REGION, KURA, Environment.STAGING)
    backends: dict[str, Backend] = {}
    backend_ports: dict[str, int] = {}
    for route in routes:
        handle = route.host.split(".")[1].removesuffix("-us-east-1-staging")
        cert_pem, key_pem = self_signed(handle, route.backend.rpartition(":")[0])
        (tmp / f"{handle}.crt").write_bytes(cert_pem)
        (tmp / f"{handle}.key").write_bytes(key_pem)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(tmp / f"{handle}.crt", tmp / f"{handle}.key")
        sock = socket.create_server(("127.0.0.1", 0))
        backend = Backend(handle, ssl.PEM_cert_to_DER_cert(cert_pem.decode()), sock, ctx)
        threading.Thread(target=backend.serve, daemon=True).start()
        backends[route.host] = backend
        backend_ports[route.backend] = sock.getsockname()[1]

    original = render_demux_config(routes, port=KURA.peer_port)
    port = free_port()
    rewritten = loopback_rewrite(original, port, backend_ports)
    conf = tmp / "nginx.conf"
    conf.write_text(rewritten)
    proc = subprocess.Popen(
        [NGINX, "-c", str(conf), "-p", str(tmp), "-e", str(tmp / "error.log"), "-g", "daemon off;"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 10
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"nginx exited {proc.returncode}: {proc.stdout.read().decode()}")  # type: ignore[union-attr]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)
    yield Demux(port, backends, original, rewritten)
    proc.terminate()
    proc.wait(timeout=10)
    for b in backends.values():
        b.sock.close()


def handshake(port: int, sni: str | bytes | None) -> tuple[bytes, bytes]:
    """TLS handshake through the demux; returns the peer's certificate and first line."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    # bytes skip Python's IDNA check, so SNI values it would refuse still go on the wire.
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname=sni) as tls,  # type: ignore[arg-type]
    ):
        cert = tls.getpeercert(binary_form=True)
        assert cert is not None
        return cert, tls.recv(64)


def test_rewrite_changes_only_listen_resolver_and_backend_lines(demux: Demux) -> None:
    lines = difflib.ndiff(demux.original.splitlines(), demux.rewritten.splitlines())
    diff = [d for d in lines if d[:2] in ("- ", "+ ")]
    removed = [d[2:] for d in diff if d.startswith("- ")]
    added = [d[2:] for d in diff if d.startswith("+ ")]
    assert removed == [
        "    resolver kube-dns.kube-system.svc.cluster.local valid=10s ipv6=off;",
        '        "ok:peer.acme-us-east-1-staging.kura.tuist.dev" '
        "kura-acme-us-east-peer.kura.svc.cluster.local:7443;",
        '        "ok:peer.globex-us-east-1-staging.kura.tuist.dev" '
        "kura-globex-us-east-peer.kura.svc.cluster.local:7443;",
        '        "ok:peer.initech-us-east-1-staging.kura.tuist.dev" '
        "kura-initech-us-east-peer.kura.svc.cluster.local:7443;",
        "        listen 7443;",
    ]
    assert added[0] == f"load_module {STREAM_MODULE};"
    assert [re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", a) for a in added[1:]] == [
        "    resolver 127.0.0.1 valid=10s ipv6=off;",
        '        "ok:peer.acme-us-east-1-staging.kura.tuist.dev" 127.0.0.1:PORT;',
        '        "ok:peer.globex-us-east-1-staging.kura.tuist.dev" 127.0.0.1:PORT;',
        '        "ok:peer.initech-us-east-1-staging.kura.tuist.dev" 127.0.0.1:PORT;',
        "        listen 127.0.0.1:PORT;",
    ]


@pytest.mark.parametrize("handle", ACCOUNTS)
def test_each_account_sni_reaches_its_own_backend_and_certificate(demux: Demux, handle: str) -> None:
    host = f"peer.{handle}-us-east-1-staging.kura.tuist.dev"
    backend = demux.backends[host]
    before = {b.name: len(b.handshakes) for b in demux.backends.values()}

    cert, line = handshake(demux.port, host)

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
    ("extra leading label", "x.peer.acme-us-east-1-staging.kura.tuist.dev"),
    ("extra trailing labels", "peer.acme-us-east-1-staging.kura.tuist.dev.evil.example"),
    ("double dot", b"peer..acme-us-east-1-staging.kura.tuist.dev"),
    ("trailing dot", "peer.acme-us-east-1-staging.kura.tuist.dev."),
    ("uppercase", "PEER.ACME-US-EAST-1-STAGING.KURA.TUIST.DEV"),
    ("mixed case", "peer.Acme-us-east-1-staging.kura.tuist.dev"),
    ("label over 63", b"peer." + b"a" * 64 + b".kura.tuist.dev"),
    ("unicode lookalike", "peer.\u00e1cme-us-east-1-staging.kura.tuist.dev"),
    ("other environment", "peer.acme-us-east-1.kura.tuist.dev"),
    ("unknown account", "peer.hooli-us-east-1-staging.kura.tuist.dev"),
]


@pytest.mark.parametrize(("case", "sni"), HOSTILE_SNI, ids=[c for c, _ in HOSTILE_SNI])
def test_unknown_and_hostile_sni_is_closed_and_reaches_no_backend(
    demux: Demux, case: str, sni: str | bytes | None
) -> None:
    before = sum(len(b.handshakes) for b in demux.backends.values())

    with pytest.raises((ssl.SSLError, ConnectionError)):
        handshake(demux.port, sni)

    assert sum(len(b.handshakes) for b in demux.backends.values()) == before, case
