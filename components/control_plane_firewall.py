"""ControlPlaneFirewall: the door of a control plane on Hetzner Cloud for the boxes outside it.

The adopted boxes (OVH, Dedibox, Robot, Elastic Metal) are not on the control plane's network ("the
nodes are excluded from the Hetzner LB and aren't hcloud"): each reaches the API server over the
internet. One Hetzner Cloud firewall per stack, applied to the control-plane servers by label
selector, admits each box's public IPv4 as a /32 on 6443, and the operator sources the stack file
lists. One firewall, not one per box: Hetzner applies at most five firewalls to a server, label
selectors included. One rule per fleet (its boxes' /32s) and one for the operators, in a fixed
order: a box added or removed changes one rule.

Order. The firewall takes every claim's public_ipv4 (a claim records its box before anything slow
happens) and every AdoptedMachine depends on it (__main__.py), so a box is admitted before its join
starts. A slot removed from the config is released at the end of the update (its machine leaves the
cluster, then its claim reinstalls the box), after the firewall's new rules were applied. So the
sources are this run's claims plus the machines of the stack's last outputs, read through a
StackReference to the stack itself: a leaving box keeps its /32 through the update that releases it
(its fleet's rule says so in its description) and loses it on the next deploy.

Only 6443, only inbound. A joining box needs nothing else from the control-plane servers:
- the kubelet's TLS bootstrap, its Node heartbeats and watches, and the node agents (kube-proxy,
  Cilium's agent) all talk to the API server on 6443;
- the API server dials the kubelet (10250: logs, exec, port-forward) itself, without konnectivity
  (seed 001 fixes exec/logs with the kubelet's address type, so no agent dials 8132); Hetzner's
  firewalls are stateful, so the replies of a connection the control plane opened pass without a
  rule;
- etcd (2379-2380), the scheduler and the controller manager are the control plane's own.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_hcloud as hcloud

from config.models import ControlPlaneFirewallConfig, Environment
from providers.constants import MANAGED_BY

__all__ = [
    "API_SERVER_PORT",
    "Box",
    "ControlPlaneFirewall",
    "ControlPlaneFirewallArgs",
    "door_warnings",
    "firewall_rules",
    "leaving_boxes",
    "own_stack_name",
]

FIREWALL_TYPE = "tuist:cluster:ControlPlaneFirewall"
API_SERVER_PORT = "6443"


@dataclass(frozen=True)
class Box:
    """One fleet slot's box, as its claim recorded it."""

    fleet: str
    slot: str  # the slot's name, e.g. kura-dedibox-0 (components/fleet.machine_name)
    public_ipv4: pulumi.Input[str]


@dataclass(frozen=True)
class ControlPlaneFirewallArgs:
    settings: ControlPlaneFirewallConfig
    environment: Environment
    # The stack secret hcloudToken, a pulumi secret: only the explicit provider below reads it.
    token: pulumi.Input[str] | None
    boxes: Sequence[Box]


@dataclass(frozen=True)
class _Admitted:
    fleet: str
    slot: str
    address: str
    leaving: bool


def own_stack_name() -> str:
    """The fully qualified name of the running stack (on a DIY backend the organization is the
    literal `organization`: docs/backends.md)."""
    return f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"


def _slot_order(slot: str) -> tuple[str, int, str]:
    # kura-ovh-10 after kura-ovh-9: slots sort by fleet, then index.
    match = re.fullmatch(r"(.*)-(\d+)", slot)
    return (match[1], int(match[2]), slot) if match else (slot, -1, slot)


def _address(slot: str, value: Any) -> str:
    try:
        return str(ipaddress.IPv4Address(value))
    except (ipaddress.AddressValueError, ValueError, TypeError):
        raise ValueError(
            f"control-plane firewall: slot {slot} reported public_ipv4 {value!r}, not an IPv4 address; "
            "its box cannot be admitted, so its join would never reach the API server"
        ) from None


def leaving_boxes(last_fleets: Any, current_slots: set[str]) -> list[tuple[str, str, str]]:
    """(fleet, slot, address) of every machine of the stack's last outputs (the `fleets` output,
    docs/outputs.md) whose slot is not in this run: the boxes this update releases. Absent or
    malformed outputs (a new stack, an older contract) list nothing."""
    found: list[tuple[str, str, str]] = []
    if not isinstance(last_fleets, Mapping):
        return found
    for fleet, entry in last_fleets.items():
        machines = entry.get("machines") if isinstance(entry, Mapping) else None
        for machine in machines if isinstance(machines, list) else []:
            if not isinstance(machine, Mapping):
                continue
            slot, address = machine.get("name"), machine.get("public_ipv4")
            if not isinstance(slot, str) or slot in current_slots:
                continue
            try:
                found.append((str(fleet), slot, str(ipaddress.IPv4Address(address))))
            except (ipaddress.AddressValueError, ValueError):
                continue  # never admitted under a bad address either
    return found


def firewall_rules(
    operator_sources: Sequence[str],
    current: Sequence[tuple[str, str, Any]],
    leaving: Sequence[tuple[str, str, str]] = (),
) -> list[hcloud.FirewallRuleArgsDict]:
    """The firewall's inbound rules: the operators' first, then one per fleet (by name) with its
    boxes' /32s in slot order. `current` is (fleet, slot, public_ipv4) of this run's claims."""
    admitted: dict[str, _Admitted] = {}
    for fleet, slot, value in current:
        address = _address(slot, value)
        if address in admitted:
            # Two slots on one box is the double claim the claim provider exists to prevent.
            raise ValueError(
                f"control-plane firewall: slots {admitted[address].slot} and {slot} both hold the box at "
                f"{address}; refusing to admit it twice"
            )
        admitted[address] = _Admitted(fleet, slot, address, leaving=False)
    for fleet, slot, address in leaving:
        # A box released from one slot and claimed by another in this run keeps its current slot.
        admitted.setdefault(address, _Admitted(fleet, slot, address, leaving=True))
    rules: list[hcloud.FirewallRuleArgsDict] = []
    if operator_sources:
        description = "operators: cluster.control_plane_firewall.operator_sources"
        rules.append(_rule(list(operator_sources), description))
    by_fleet: dict[str, list[_Admitted]] = {}
    for box in admitted.values():
        by_fleet.setdefault(box.fleet, []).append(box)
    for fleet in sorted(by_fleet):
        boxes = sorted(by_fleet[fleet], key=lambda b: _slot_order(b.slot))
        description = f"fleet {fleet}: adopted boxes"
        if leavers := [b.slot for b in boxes if b.leaving]:
            # Visible in the preview of the update that releases them, and in the Hetzner console.
            description += f"; leaving: {', '.join(leavers)} (removed on the next deploy)"
        rules.append(_rule([f"{b.address}/32" for b in boxes], description[:255]))
    return rules


def door_warnings(selector: str, servers: Sequence[Any], own_firewalls: Sequence[Any]) -> list[str]:
    """What the preview should say when the firewall would guard nothing, or close more than the
    door: a server with a firewall drops every inbound public packet no firewall of its admits, and
    Hetzner adds up the rules of all the firewalls applied to it."""
    if not servers:
        return [
            f"control-plane firewall: the label selector {selector!r} matches no server of the Hetzner "
            "project, so the firewall guards nothing"
        ]
    ours = {firewall.id for firewall in own_firewalls}
    bare = sorted(server.name for server in servers if not set(server.firewall_ids) - ours)
    if not bare:
        return []
    return [
        f"control-plane firewall: {', '.join(bare)} carry no other firewall, so with this one they drop "
        "every inbound packet on their public interfaces but 6443 from the admitted boxes and operator "
        "sources: etcd peers, SSH and a load balancer's health checks included, unless those travel a "
        "private network (docs/control-plane-firewall.md)"
    ]


def _rule(sources: list[str], description: str) -> hcloud.FirewallRuleArgsDict:
    return {
        "direction": "in",
        "protocol": "tcp",
        "port": API_SERVER_PORT,
        "source_ips": sources,
        "description": description,
    }


class ControlPlaneFirewall(pulumi.ComponentResource):
    firewall: hcloud.Firewall
    rules: pulumi.Output[list[hcloud.FirewallRuleArgsDict]]
    warnings: pulumi.Output[list[str]]

    def __init__(
        self, name: str, args: ControlPlaneFirewallArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(FIREWALL_TYPE, name, None, opts)
        settings = args.settings
        if not settings.enabled or settings.label_selector is None or args.token is None:
            # config/ refuses such a stack first (cluster.control_plane_firewall, secrets.hcloudToken).
            raise ValueError("ControlPlaneFirewall needs enabled, a selector and hcloudToken")
        child = pulumi.ResourceOptions(parent=self)
        # An explicit provider: the token comes from the stack secret and nowhere else (no HCLOUD_TOKEN
        # from whoever runs the deploy), and stays a secret in state.
        provider = hcloud.Provider(f"{name}-hcloud", token=pulumi.Output.secret(args.token), opts=child)
        last = pulumi.StackReference(f"{name}-last-outputs", stack_name=own_stack_name(), opts=child)
        slots = {box.slot for box in args.boxes}
        current = pulumi.Output.all(*[box.public_ipv4 for box in args.boxes]).apply(
            lambda addresses: [(b.fleet, b.slot, a) for b, a in zip(args.boxes, addresses, strict=True)]
        )
        operators = list(settings.operator_sources)
        self.rules = pulumi.Output.all(current, last.get_output("fleets")).apply(
            lambda both: firewall_rules(operators, both[0], leaving_boxes(both[1], slots))
        )
        self.firewall = hcloud.Firewall(
            # Autonamed (tuist-<env>-control-plane-<suffix>): a new selector replaces the firewall,
            # and Hetzner firewall names are unique, so the new one must not wait for the old name.
            f"tuist-{args.environment.value}-control-plane",
            apply_tos=[hcloud.FirewallApplyToArgs(label_selector=settings.label_selector)],
            labels={"managed-by": MANAGED_BY, "tuist.dev/environment": args.environment.value},
            rules=self.rules,
            opts=pulumi.ResourceOptions(parent=self, provider=provider),
        )
        # Read-only checks for the preview: the servers the selector names, and this stack's firewalls.
        invoke = pulumi.InvokeOutputOptions(provider=provider, parent=self)
        labels = f"managed-by={MANAGED_BY},tuist.dev/environment={args.environment.value}"
        selector = settings.label_selector
        self.warnings = pulumi.Output.all(
            hcloud.get_servers_output(with_selector=selector, opts=invoke),
            hcloud.get_firewalls_output(with_selector=labels, opts=invoke),
        ).apply(lambda found: door_warnings(selector, found[0].servers or [], found[1].firewalls or []))
        self.warnings.apply(self._warn)
        self.register_outputs({"id": self.firewall.id, "rules": self.rules, "warnings": self.warnings})

    def _warn(self, lines: list[str]) -> None:
        for line in lines:
            pulumi.log.warn(line, resource=self)

    @property
    def ready(self) -> pulumi.Output[pulumi.Resource]:
        """The firewall, for a machine's depends_on: its join waits for the rules admitting its box."""
        return pulumi.Output.from_input(self.firewall)
