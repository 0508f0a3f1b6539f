"""What an nginx.conf does with TLS and which ports it listens on: enough to judge the peer demux."""

from __future__ import annotations

import re
from dataclasses import dataclass

_COMMENT = re.compile(r"#[^\n]*")
_LISTEN = re.compile(r"\blisten\s+([^;]+);")
_BLOCK = re.compile(r"(?:^|[;{}\s])(http|stream)\s*\{")
# Directives that only a server holding a certificate (terminating TLS) uses.
_TERMINATING = re.compile(r"\b(ssl_certificate|ssl_certificate_key|ssl_client_certificate|proxy_ssl)\b")


@dataclass(frozen=True)
class NginxFacts:
    blocks: frozenset[str]  # top-level contexts present: "http", "stream"
    listen_ports: tuple[int | str, ...]  # each listen's port (a string when it is not a plain port)
    listen_ssl: bool  # some listen carries the ssl parameter
    terminating_directives: tuple[str, ...]
    ssl_preread: bool


def _port(address: str) -> int | str:
    # listen 7443 / 0.0.0.0:7443 / [::]:7443 / unix:/path
    tail = address.rsplit(":", 1)[-1] if not address.startswith("unix:") else address
    return int(tail) if tail.isdigit() else address


def read_nginx(conf: str) -> NginxFacts:
    text = _COMMENT.sub("", conf)
    ports: list[int | str] = []
    ssl = False
    for spec in _LISTEN.findall(text):
        words = spec.split()
        ports.append(_port(words[0]))
        ssl = ssl or "ssl" in words[1:]
    return NginxFacts(
        blocks=frozenset(_BLOCK.findall(text)),
        listen_ports=tuple(ports),
        listen_ssl=ssl,
        terminating_directives=tuple(sorted(set(_TERMINATING.findall(text)))),
        ssl_preread=re.search(r"\bssl_preread\s+on\s*;", text) is not None,
    )
