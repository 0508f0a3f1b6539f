"""Inputs of scripts/pn-vlan.sh (an Elastic Metal box's Private Network as VLAN pn0), checked, and
the script rendered with them as a header: up with a VLAN id (`render_pn_vlan_script`), or down,
pn0 and its netplan file removed (`render_pn_down_script`, PN_STATE=down). The sudo password travels
on stdin (runner.run_script)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from providers.ssh.selfjoin import SCRIPTS_DIR, SelfJoinInputError

PN_VLAN_SCRIPT = SCRIPTS_DIR / "pn-vlan.sh"
PN_INTERFACE = "pn0"  # the reference's name for the Private Network's VLAN interface


@dataclass(frozen=True)
class PrivateNetworkParams:
    vlan: int  # the 802.1Q tag Scaleway gave the server's attachment
    interface: str = PN_INTERFACE


def render_pn_vlan_script(params: PrivateNetworkParams) -> str:
    """The script that brings the VLAN up as the interface (PN_STATE defaults to up)."""
    if isinstance(params.vlan, bool) or not isinstance(params.vlan, int) or not 1 <= params.vlan <= 4094:
        raise SelfJoinInputError(f"private network VLAN {params.vlan!r} is not a VLAN id (1-4094)")
    _check_interface(params.interface)
    header = f"PN_VLAN={params.vlan}\nPN_INTERFACE={shlex.quote(params.interface)}\n"
    return _HEADER + header + PN_VLAN_SCRIPT.read_text()


def render_pn_down_script(interface: str = PN_INTERFACE) -> str:
    """The script that takes the Private Network off the box: the netplan file removed, the interface
    deleted (netplan apply alone would leave it up), applied."""
    _check_interface(interface)
    return _HEADER + f"PN_STATE=down\nPN_INTERFACE={shlex.quote(interface)}\n" + PN_VLAN_SCRIPT.read_text()


_HEADER = "# parameters, rendered by providers/ssh/privnet.py\n"


def _check_interface(interface: str) -> None:
    if not interface.isalnum() or len(interface) > 15:
        raise SelfJoinInputError(f"interface {interface!r} is not an interface name")


def pn_vlan_secrets(*, sudo_password: str | None) -> dict[str, str]:
    return {"SUDO_PASSWORD": sudo_password or ""}
