"""The macOS bootstrap and the Private Network VLAN scripts as rendered: parameters checked before
anything reaches a box, secrets never in the header, and the files the scripts ship with."""

from __future__ import annotations

import base64
import shlex

import pytest

from providers.ssh.macos import (
    SSHGUARD_REARM,
    SSHGUARD_RULES,
    MacBootstrapParams,
    NodeAgentPin,
    macos_bootstrap_secrets,
    render_macos_bootstrap_script,
)
from providers.ssh.privnet import PrivateNetworkParams, pn_vlan_secrets, render_pn_vlan_script
from providers.ssh.selfjoin import NodeTaint, SelfJoinInputError

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
PIN = NodeAgentPin(url="https://releases.example/tart-kubelet", sha256="a" * 64)


def params(**overrides: object) -> MacBootstrapParams:
    values: dict[str, object] = {
        "node_name": "runners-macos-fr-par-3-a5",
        "node_ip": "203.0.113.71",
        "provider_id": "applesilicon://fr-par-3/a5000000-0000-4000-8000-000000000001",
        "labels": {"tuist.dev/fleet": "runners-macos", "node.cluster.x-k8s.io/pool": "runners-macos"},
        "agent": PIN,
        "taints": (NodeTaint("tuist.dev/runner-tier", "mac", "NoSchedule"),),
        "api_server": "https://k8s.example:6443",
        "ca_bundle_pem": CA,
        "cluster_dns": "10.96.0.10",
    }
    values.update(overrides)
    return MacBootstrapParams(**values)  # type: ignore[arg-type]


def header(script: str) -> dict[str, str]:
    lines = script.split("\n")
    assert lines[0] == "# parameters, rendered by providers/ssh/macos.py"
    found = {}
    for line in lines[1:]:
        if not line or line.startswith("#"):
            break
        name, _, value = line.partition("=")
        (found[name],) = shlex.split(value) or [""]
    return found


def test_the_header_carries_the_nodes_identity_the_pin_and_the_guard_files() -> None:
    values = header(render_macos_bootstrap_script(params()))
    assert values["NODE_LABELS"] == "node.cluster.x-k8s.io/pool=runners-macos,tuist.dev/fleet=runners-macos"
    assert values["NODE_TAINTS"] == "tuist.dev/runner-tier=mac:NoSchedule"
    assert (values["AGENT_URL"], values["AGENT_SHA256"]) == (PIN.url, "a" * 64)
    assert (values["REGISTERS_NODE"], values["API_SERVER"]) == ("true", "https://k8s.example:6443")
    assert base64.b64decode(values["CA_BUNDLE_B64"]).decode() == CA
    assert base64.b64decode(values["SSHGUARD_PF_B64"]) == SSHGUARD_RULES.read_bytes()
    assert base64.b64decode(values["SSHGUARD_REARM_B64"]) == SSHGUARD_REARM.read_bytes()
    assert values["AGENT_SETTLE_SECONDS"] == "3"
    assert "BOOTSTRAP_TOKEN" not in values and "SUDO_PASSWORD" not in values


def test_the_agent_settle_time_is_rendered_as_a_plain_decimal_for_sleep() -> None:
    for seconds, rendered in ((0.1, "0.1"), (2.5, "2.5"), (10, "10"), (60.0, "60")):
        values = header(render_macos_bootstrap_script(params(agent_settle_seconds=seconds)))
        assert values["AGENT_SETTLE_SECONDS"] == rendered


def test_an_agent_that_registers_no_node_gets_no_cluster() -> None:
    values = header(
        render_macos_bootstrap_script(params(agent=NodeAgentPin(PIN.url, PIN.sha256, registers_node=False)))
    )
    assert (values["REGISTERS_NODE"], values["API_SERVER"], values["CA_BUNDLE_B64"]) == ("false", "", "")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"provider_id": "tart://x"}, "provider_id 'tart://x' is not"),
        ({"agent": NodeAgentPin("ftp://x/y", "a" * 64)}, "node agent url 'ftp://x/y' is not an http(s) URL"),
        ({"agent": NodeAgentPin(PIN.url, "A" * 64)}, "node agent sha256 is not 64 lowercase hex digits"),
        ({"api_server": None}, "a node agent that registers a Node needs the cluster's api_server and CA"),
        ({"labels": {"kubernetes.io/role": "mac"}}, "a namespace the kubelet may not set"),
        ({"ssh_port": 0}, "ssh_port 0 is not a TCP port"),
        ({"agent_settle_seconds": 0}, "agent_settle_seconds 0 is not a number of seconds in (0, 60]"),
        ({"agent_settle_seconds": 61}, "agent_settle_seconds 61 is not a number of seconds in (0, 60]"),
        ({"agent_settle_seconds": True}, "agent_settle_seconds True is not a number of seconds in (0, 60]"),
        ({"agent_settle_seconds": "3"}, "agent_settle_seconds '3' is not a number of seconds in (0, 60]"),
    ],
)
def test_bad_parameters_fail_before_any_box_is_touched(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(SelfJoinInputError) as caught:
        render_macos_bootstrap_script(params(**overrides))
    assert message in str(caught.value)


def test_the_secrets_travel_on_stdin_in_the_order_the_script_reads_them() -> None:
    assert list(macos_bootstrap_secrets(sudo_password="pw", bootstrap_token=None)) == [
        "SUDO_PASSWORD",
        "BOOTSTRAP_TOKEN",
    ]
    assert macos_bootstrap_secrets(sudo_password=None, bootstrap_token="abcdef.0123456789abcdef") == {
        "SUDO_PASSWORD": "",
        "BOOTSTRAP_TOKEN": "abcdef.0123456789abcdef",
    }
    with pytest.raises(SelfJoinInputError):
        macos_bootstrap_secrets(sudo_password="pw", bootstrap_token="not-a-token")


def test_the_pf_anchor_guards_the_port_with_static_self() -> None:
    rules = SSHGUARD_RULES.read_text()
    assert "overload <sshguard> flush global" in rules
    assert "to self port __SSH_PORT__" in rules
    rule_lines = [line for line in rules.splitlines() if line and not line.startswith("#")]
    assert not [line for line in rule_lines if "(self)" in line]


def test_the_vlan_script_takes_a_vlan_id_only() -> None:
    script = render_pn_vlan_script(PrivateNetworkParams(vlan=42))
    assert script.startswith(
        "# parameters, rendered by providers/ssh/privnet.py\nPN_VLAN=42\nPN_INTERFACE=pn0\n"
    )
    for bad in (0, 4095, True):
        with pytest.raises(SelfJoinInputError):
            render_pn_vlan_script(PrivateNetworkParams(vlan=bad))  # type: ignore[arg-type]
    assert pn_vlan_secrets(sudo_password=None) == {"SUDO_PASSWORD": ""}
