"""Inputs of scripts/macos/macos-bootstrap.sh, checked, and the script rendered with them as a header.

The Mac's counterpart of selfjoin.py: the node agent's pin, the Node's identity (name, address,
providerID, labels, taints) and, when the agent registers a Node, the cluster it joins. The pf anchor
and its re-arm script ride along base64-encoded; the sudo password and the bootstrap token travel on
stdin (runner.run_script), never in the header.
"""

from __future__ import annotations

import base64
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from providers.ssh.selfjoin import (
    SCRIPTS_DIR,
    NodeTaint,
    SelfJoinInputError,
    SelfJoinParams,
    check_node_identity,
)

MACOS_DIR = SCRIPTS_DIR / "macos"
MACOS_BOOTSTRAP_SCRIPT = MACOS_DIR / "macos-bootstrap.sh"
SSHGUARD_RULES = MACOS_DIR / "sshguard.pf"
SSHGUARD_REARM = MACOS_DIR / "sshguard-rearm.sh"
AGENT_LABEL = "dev.tuist.node-agent"
GUARD_LABEL = "dev.tuist.sshguard"
GUARD_ANCHOR = "com.apple/tuist.sshguard"

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_URL = re.compile(r"^https?://[^\s/]+/\S+$")
_BOOTSTRAP_TOKEN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")


@dataclass(frozen=True)
class NodeAgentPin:
    url: str
    sha256: str
    registers_node: bool = True


@dataclass(frozen=True)
class MacBootstrapParams:
    node_name: str
    node_ip: str
    provider_id: str  # applesilicon://<zone>/<server id>
    labels: dict[str, str]
    agent: NodeAgentPin
    ssh_port: int = 22
    taints: tuple[NodeTaint, ...] = field(default_factory=tuple)
    # The cluster the agent registers with; both None when it registers no Node.
    api_server: str | None = None
    ca_bundle_pem: str | None = None
    cluster_dns: str | None = None
    cluster_domain: str = "cluster.local"
    # The pause between the script's two looks at the agent's launchd job: a crash-looping agent
    # shows a new pid (or none) at the second. The machine's `agent_settle` timeout (spec.py).
    agent_settle_seconds: float = 3


def _check(params: MacBootstrapParams) -> None:
    # The Node's identity obeys the kubelet's rules, whichever agent registers it.
    check_node_identity(
        SelfJoinParams(
            node_name=params.node_name,
            node_ip=params.node_ip,
            provider_id=params.provider_id,
            labels=params.labels,
            api_server=params.api_server or "https://unused",
            ca_bundle_pem=params.ca_bundle_pem or "-----BEGIN CERTIFICATE-----",
            taints=params.taints,
            cluster_dns=params.cluster_dns,
            cluster_domain=params.cluster_domain,
        )
    )
    if not _URL.match(params.agent.url):
        raise SelfJoinInputError(f"node agent url {params.agent.url!r} is not an http(s) URL of a file")
    if not _SHA256.match(params.agent.sha256):
        raise SelfJoinInputError("node agent sha256 is not 64 lowercase hex digits")
    if params.agent.registers_node and (not params.api_server or not params.ca_bundle_pem):
        raise SelfJoinInputError("a node agent that registers a Node needs the cluster's api_server and CA")
    if not 1 <= params.ssh_port <= 65535:
        raise SelfJoinInputError(f"ssh_port {params.ssh_port!r} is not a TCP port")
    settle = params.agent_settle_seconds
    if isinstance(settle, bool) or not isinstance(settle, int | float) or not 0 < settle <= 60:
        raise SelfJoinInputError(f"agent_settle_seconds {settle!r} is not a number of seconds in (0, 60]")


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def render_macos_bootstrap_script(params: MacBootstrapParams) -> str:
    """scripts/macos/macos-bootstrap.sh with the parameters as a header of quoted assignments."""
    _check(params)
    registers = params.agent.registers_node
    values = {
        "NODE_NAME": params.node_name,
        "NODE_IP": params.node_ip,
        "PROVIDER_ID": params.provider_id,
        "NODE_LABELS": ",".join(f"{k}={v}" for k, v in sorted(params.labels.items())),
        "NODE_TAINTS": ",".join(t.render() for t in params.taints),
        "AGENT_URL": params.agent.url,
        "AGENT_SHA256": params.agent.sha256,
        "REGISTERS_NODE": "true" if registers else "false",
        "API_SERVER": (params.api_server or "") if registers else "",
        "CA_BUNDLE_B64": base64.b64encode((params.ca_bundle_pem or "").encode()).decode()
        if registers
        else "",
        "CLUSTER_DNS": params.cluster_dns or "",
        "CLUSTER_DOMAIN": params.cluster_domain,
        "SSH_PORT": str(params.ssh_port),
        "SSHGUARD_PF_B64": _b64(SSHGUARD_RULES),
        "SSHGUARD_REARM_B64": _b64(SSHGUARD_REARM),
        # Plain decimals, as sleep(1) takes them (never 1e-05).
        "AGENT_SETTLE_SECONDS": f"{params.agent_settle_seconds:.3f}".rstrip("0").rstrip("."),
    }
    header = "".join(f"{name}={shlex.quote(value)}\n" for name, value in values.items())
    return "# parameters, rendered by providers/ssh/macos.py\n" + header + MACOS_BOOTSTRAP_SCRIPT.read_text()


def macos_bootstrap_secrets(*, sudo_password: str | None, bootstrap_token: str | None) -> dict[str, str]:
    """The secrets macos-bootstrap.sh reads from stdin, in the order it reads them."""
    if bootstrap_token is not None and not _BOOTSTRAP_TOKEN.match(bootstrap_token):
        raise SelfJoinInputError("bootstrap_token is not a bootstrap token (<6 chars>.<16 chars>, a-z0-9)")
    return {"SUDO_PASSWORD": sudo_password or "", "BOOTSTRAP_TOKEN": bootstrap_token or ""}
