"""Inputs of scripts/self-join.sh, checked, and the script rendered with them as a header.

The non-secret parameters travel as shell assignments prepended to the script (quoted, and checked
here so a bad label fails in `pulumi preview`, not on the box as a kubelet that refuses to start). The
secrets travel separately, on stdin, through `self_join_secrets` and runner.run_script.
"""

from __future__ import annotations

import base64
import ipaddress
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from providers.constants import api_server_problem

SCRIPTS_DIR = Path(__file__).resolve().parent / "scripts"
SELF_JOIN_SCRIPT = SCRIPTS_DIR / "self-join.sh"

_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_PROVIDER_ID = re.compile(r"^(ovh|dedibox|hrobot|scaleway|applesilicon)://[A-Za-z0-9._/-]+$")
_MINOR = re.compile(r"^v1\.[0-9]{2}$")
_DOMAIN = re.compile(
    r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
)
_BOOTSTRAP_TOKEN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# The kubelet may set only these labels in the kubernetes.io / k8s.io namespaces (NodeRestriction).
_KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
_KUBELET_LABELS = (
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
)


class SelfJoinInputError(ValueError):
    """A self-join parameter is malformed; the message names it (never a secret's value)."""


@dataclass(frozen=True)
class NodeTaint:
    key: str
    value: str
    effect: str

    def render(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True)
class SelfJoinParams:
    node_name: str
    node_ip: str  # the box's public IPv4: the node reports it as InternalIP
    provider_id: str  # ovh://<dc>/<svc>, dedibox://<zone>/<id>, hrobot://<n>
    labels: Mapping[str, str]
    api_server: str  # https://host:6443
    ca_bundle_pem: str
    kubernetes_minor: str = "v1.34"
    taints: Sequence[NodeTaint] = field(default_factory=tuple)
    # The kubelet's clusterDNS (the cluster DNS Service's ClusterIP) and clusterDomain: without
    # clusterDNS, ClusterFirst pods on the node fall back to the host's resolv.conf and cannot
    # resolve Services.
    cluster_dns: str | None = None
    cluster_domain: str = "cluster.local"
    # "preinstalled" on Robot boxes, whose post-install baked in containerd 2.x with Kata.
    containerd_source: Literal["apt", "preinstalled"] = "apt"


def check_node_identity(params: SelfJoinParams) -> None:
    """The checks every node's parameters pass, Linux or macOS (macos.py reuses them)."""
    _check(params)


def _check(params: SelfJoinParams) -> None:
    if not _NODE_NAME.match(params.node_name):
        raise SelfJoinInputError(f"node_name {params.node_name!r} is not a DNS subdomain")
    try:
        ipaddress.IPv4Address(params.node_ip)
    except ValueError:
        raise SelfJoinInputError(f"node_ip {params.node_ip!r} is not an IPv4 address") from None
    if not _PROVIDER_ID.match(params.provider_id):
        raise SelfJoinInputError(
            f"provider_id {params.provider_id!r} is not <ovh|dedibox|hrobot|scaleway|applesilicon>://<path>"
        )
    if not params.labels:
        raise SelfJoinInputError("labels is empty: a node needs at least its pool label")
    for key, value in params.labels.items():
        if not _LABEL_KEY.match(key):
            raise SelfJoinInputError(f"labels: {key!r} is not a Kubernetes label key")
        if not _LABEL_VALUE.match(value):
            raise SelfJoinInputError(f"labels[{key!r}]: {value!r} is not a Kubernetes label value")
        prefix = key.split("/", 1)[0] if "/" in key else ""
        restricted = prefix in ("kubernetes.io", "k8s.io") or prefix.endswith((".kubernetes.io", ".k8s.io"))
        allowed = key in _KUBELET_LABELS or any(
            prefix == ns or prefix.endswith("." + ns) for ns in _KUBELET_LABEL_NAMESPACES
        )
        if restricted and not allowed:
            raise SelfJoinInputError(
                f"labels: {key!r} is in a namespace the kubelet may not set on itself (NodeRestriction)"
            )
    for i, taint in enumerate(params.taints):
        if not _LABEL_KEY.match(taint.key) or not _LABEL_VALUE.match(taint.value):
            raise SelfJoinInputError(f"taints[{i}]: {taint.key!r}={taint.value!r} is not a valid taint")
        if taint.effect not in _TAINT_EFFECTS:
            raise SelfJoinInputError(f"taints[{i}].effect {taint.effect!r} is not one of {_TAINT_EFFECTS}")
    if not _MINOR.match(params.kubernetes_minor):
        raise SelfJoinInputError(f"kubernetes_minor {params.kubernetes_minor!r} is not like v1.34")
    api_server_issue = api_server_problem(params.api_server)
    if api_server_issue is not None:
        raise SelfJoinInputError(f"api_server {params.api_server!r} {api_server_issue}")
    if "-----BEGIN CERTIFICATE-----" not in params.ca_bundle_pem:
        raise SelfJoinInputError("ca_bundle_pem holds no PEM certificate")
    if params.cluster_dns is not None:
        try:
            ipaddress.ip_address(params.cluster_dns)
        except ValueError:
            raise SelfJoinInputError(f"cluster_dns {params.cluster_dns!r} is not an IP address") from None
    if not _DOMAIN.match(params.cluster_domain):
        raise SelfJoinInputError(f"cluster_domain {params.cluster_domain!r} is not a DNS domain")
    if params.containerd_source not in ("apt", "preinstalled"):
        raise SelfJoinInputError(f"containerd_source {params.containerd_source!r} is not apt or preinstalled")


def render_self_join_script(params: SelfJoinParams) -> str:
    """scripts/self-join.sh with the parameters as a header of quoted assignments."""
    _check(params)
    values = {
        "NODE_NAME": params.node_name,
        "NODE_IP": params.node_ip,
        "PROVIDER_ID": params.provider_id,
        "NODE_LABELS": ",".join(f"{k}={v}" for k, v in sorted(params.labels.items())),
        "NODE_TAINTS": ",".join(t.render() for t in params.taints),
        "K8S_MINOR": params.kubernetes_minor,
        "API_SERVER": params.api_server,
        "CA_BUNDLE_B64": base64.b64encode(params.ca_bundle_pem.encode()).decode(),
        "CLUSTER_DNS": params.cluster_dns or "",
        "CLUSTER_DOMAIN": params.cluster_domain,
        "CONTAINERD_SOURCE": params.containerd_source,
    }
    header = "".join(f"{name}={shlex.quote(value)}\n" for name, value in values.items())
    return "# parameters, rendered by providers/ssh/selfjoin.py\n" + header + SELF_JOIN_SCRIPT.read_text()


def self_join_secrets(*, sudo_password: str | None, bootstrap_token: str) -> dict[str, str]:
    """The secrets self-join.sh reads from stdin, in the order it reads them."""
    if not _BOOTSTRAP_TOKEN.match(bootstrap_token):
        raise SelfJoinInputError("bootstrap_token is not a bootstrap token (<6 chars>.<16 chars>, a-z0-9)")
    return {"SUDO_PASSWORD": sudo_password or "", "BOOTSTRAP_TOKEN": bootstrap_token}
