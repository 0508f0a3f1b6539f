"""The control plane's Hetzner Cloud firewall (components/control_plane_firewall.py).

The hcloud resource plugin cannot be built here (the Go module proxy refuses pulumi-hcloud's
provider module), so the real stacks install it in CI (scripts/ci/setup.sh) and the component is
exercised here under Pulumi's mocks, through the whole program (`__main__.py`) and each real stack
file: which rules, which /32 sources, what every join waits for, what a removed box does to the
rules across the deploys that release it, and where the Hetzner token goes. The one mechanism the
release order rests on, a stack reading its own last outputs during its update, runs on the real
engine and a DIY backend at the end.
"""

from __future__ import annotations

import json
import logging
import runpy
import subprocess
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pulumi
import pytest
from google.protobuf import json_format
from pulumi.runtime import mocks as pulumi_mocks

from components.control_plane_firewall import firewall_rules, leaving_boxes
from components.fleet import machine_name
from config.loader import load_stack_config, required_secret_keys
from config.models import StackConfig
from tests.config.stacks import REAL_STACKS, stack_raw
from tests.support.pulumi_home import cli_env

REPO = Path(__file__).resolve().parents[2]
PROJECT = "tuist-infra"
CLAIM = "pulumi-python:dynamic/machine:MachineClaim"
MACHINE = "pulumi-python:dynamic/machine:AdoptedMachine"
FIREWALL = "hcloud:index/firewall:Firewall"
HCLOUD_PROVIDER = "pulumi:providers:hcloud"
STACK_REFERENCE = "pulumi:pulumi:StackReference"
TOKEN = "hcloud-token-value-never-shown-f3a9c1"
# How Pulumi marks a secret on the wire (sdk/go/common/resource/sig).
SECRET_SIG = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270"}


class BoxAddresses:
    """A public IPv4 per slot, the same in every run (a box keeps its address across deploys)."""

    def __init__(self) -> None:
        self.by_slot: dict[str, str] = {}

    def of(self, slot: str) -> str:
        return self.by_slot.setdefault(slot, f"203.0.113.{len(self.by_slot) + 10}")


def hcloud_server(name: str, labels: dict[str, str], firewall_ids: list[int]) -> dict[str, Any]:
    """A server as hcloud's getServers data source returns it."""
    return {
        "id": abs(hash(name)) % 10**6, "name": name, "labels": labels, "firewallIds": firewall_ids,
        "backupWindow": "", "backups": False, "datacenter": "fsn1-dc14", "deleteProtection": False,
        "image": "ubuntu-24.04", "ipv4Address": "49.12.0.1", "ipv6Address": "2a01:4f8::1",
        "ipv6Network": "2a01:4f8::/64", "iso": "", "location": "fsn1", "primaryDiskSize": 80,
        "rebuildProtection": False, "rescue": "", "serverType": "cpx31", "status": "running",
    }


@dataclass
class HetznerProject:
    """What the hcloud data sources answer: the servers and firewalls of the project."""

    servers: list[dict[str, Any]] = field(default_factory=list)
    firewalls: list[dict[str, Any]] = field(default_factory=list)

    @staticmethod
    def control_planes(stack: str, firewall_ids: list[int]) -> HetznerProject:
        labels = {f"caph-cluster-tuist-{stack}": "owned", "machine_type": "control_plane"}
        worker = {f"caph-cluster-tuist-{stack}": "owned", "machine_type": "worker"}
        servers = [hcloud_server(f"tuist-{stack}-control-plane-{i}", labels, firewall_ids) for i in range(3)]
        servers.append(hcloud_server(f"tuist-{stack}-worker-0", worker, firewall_ids))
        return HetznerProject(servers=servers)

    def select(self, selector: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # Enough of Hetzner's selector language for the stack files: key=value requirements.
        wanted = dict(requirement.split("=", 1) for requirement in selector.split(","))
        return [item for item in items if all(item["labels"].get(k) == v for k, v in wanted.items())]


class Mocks(pulumi.runtime.Mocks):
    def __init__(
        self, addresses: BoxAddresses, last_outputs: dict[str, Any], project: HetznerProject
    ) -> None:
        self.addresses = addresses
        self.last_outputs = last_outputs
        self.project = project
        self.calls: list[pulumi.runtime.MockCallArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
        inputs = dict(args.inputs)
        if args.typ == CLAIM:
            slot, vendor = inputs["resource_name"], inputs["vendor"]
            box = f"box-{slot}"
            return box, {
                **inputs,
                "box_id": box,
                "box_name": box,
                "datacenter": "dc1",
                "public_ipv4": self.addresses.of(slot),
                "provider_id": f"{vendor}://dc1/{box}",
                "node_name": box,
                "claim_token": "0" * 12,
                "record": "cluster",
                "state": "CLAIMED",
            }
        if args.typ == MACHINE:
            # The machine reports its claim's box, as the real provider does.
            return inputs["box_id"], {
                **inputs,
                "node_name": inputs["box_id"],
                "host_key_fingerprint": "SHA256:x",
                "node_registered": True,
                "state": "JOINED",
            }
        if args.typ == STACK_REFERENCE:
            return inputs["name"], {**inputs, "outputs": self.last_outputs, "secret_output_names": []}
        return f"{args.name}-id", inputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]]]:
        self.calls.append(args)
        selector = args.args.get("withSelector", "")
        if args.token == "hcloud:index/getServers:getServers":
            return {"id": "servers", "servers": self.project.select(selector, self.project.servers)}, []
        if args.token == "hcloud:index/getFirewalls:getFirewalls":
            return {"id": "firewalls", "firewalls": self.project.select(selector, self.project.firewalls)}, []
        raise AssertionError(f"unexpected invoke {args.token}")


@dataclass
class Registration:
    type: str
    name: str
    urn: str
    provider: str
    dependencies: list[str]
    property_dependencies: dict[str, list[str]]
    inputs: dict[str, Any]  # as sent, secrets still wrapped in their signature


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The mock monitor, keeping every request as the engine would receive it."""

    def __init__(self, mocks: Mocks) -> None:
        super().__init__(mocks)
        self.registrations: list[Registration] = []
        self.outputs: list[dict[str, Any]] = []

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        self._record(request, response.urn, request.object)
        return response

    def ReadResource(self, request: Any) -> Any:
        # A StackReference is read, not registered.
        response = super().ReadResource(request)
        self._record(request, response.urn, request.properties)
        return response

    def _record(self, request: Any, urn: str, properties: Any) -> None:
        by_property = getattr(request, "propertyDependencies", {})
        self.registrations.append(
            Registration(
                type=request.type,
                name=request.name,
                urn=urn,
                provider=request.provider,
                dependencies=list(request.dependencies),
                property_dependencies={k: list(v.urns) for k, v in by_property.items()},
                inputs=json_format.MessageToDict(properties),
            )
        )

    def RegisterResourceOutputs(self, request: Any) -> Any:
        self.outputs.append(json_format.MessageToDict(request.outputs))
        return super().RegisterResourceOutputs(request)

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.registrations if r.type == type_]

    def one(self, type_: str) -> Registration:
        (found,) = self.of_type(type_)
        return found


class Warnings(logging.Handler):
    """The engine's log, as the mocks route it: what `pulumi preview` would print as warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@dataclass
class Run:
    monitor: RecordingMonitor
    warnings: list[str]
    exported: dict[str, Any] = field(default_factory=dict)

    @property
    def firewall(self) -> Registration:
        return self.monitor.one(FIREWALL)

    @property
    def rules(self) -> list[dict[str, Any]]:
        rules: list[dict[str, Any]] = self.firewall.inputs["rules"]
        return rules


def run_program(
    stack: str,
    raw: dict[str, Any],
    addresses: BoxAddresses,
    last_outputs: dict[str, Any] | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
    project: HetznerProject | None = None,
) -> Run:
    """__main__.py under mocks with `raw` as the stack config and stand-ins for its secrets."""
    cfg = load_stack_config(raw)
    config = {f"{PROJECT}:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
    secret_keys = [f"{PROJECT}:{key}" for key in required_secret_keys(cfg)]
    config.update({key: f"stand-in-{key.split(':')[1]}" for key in secret_keys})
    if f"{PROJECT}:hcloudToken" in config:
        config[f"{PROJECT}:hcloudToken"] = TOKEN
    pulumi.runtime.set_all_config(config, secret_keys)
    # By default the control plane's servers already carry a cluster firewall of their own (id 7).
    hetzner = project or HetznerProject.control_planes(stack, firewall_ids=[7])
    monitor = RecordingMonitor(Mocks(addresses, last_outputs or {}, hetzner))
    logger = logging.getLogger(f"tests.control_plane_firewall.{id(monitor)}")
    logger.propagate = False
    logger.addHandler(warnings := Warnings())
    pulumi.runtime.set_mocks(
        monitor.mocks, project=PROJECT, stack=stack, preview=True, monitor=monitor, logger=logger
    )
    run = Run(monitor, warnings.lines)
    exported: dict[str, Any] = {}
    patch = monkeypatch or pytest.MonkeyPatch()
    patch.setattr(pulumi, "export", lambda key, value: exported.__setitem__(key, value))

    @pulumi.runtime.test  # type: ignore[misc]
    def program() -> Any:
        runpy.run_path(str(REPO / "__main__.py"), run_name="__main__")
        return pulumi.Output.from_input(exported).apply(run.exported.update)

    try:
        program()
    finally:
        if monkeypatch is None:
            patch.undo()
    return run


def slots(cfg: StackConfig) -> Iterator[tuple[str, str]]:
    for fleet in cfg.fleets:
        for i in range(fleet.size if fleet.enabled else 0):
            yield fleet.name, machine_name(fleet.name, i)


def box_rule(fleet: str, sources: list[str], leaving: str = "") -> dict[str, Any]:
    description = f"fleet {fleet}: adopted boxes" + (
        f"; leaving: {leaving} (removed on the next deploy)" if leaving else ""
    )
    return {
        "direction": "in",
        "protocol": "tcp",
        "port": "6443",
        "sourceIps": sources,
        "description": description,
    }


# --- the real stacks ----------------------------------------------------------



def door_warnings(run: Any) -> list[str]:
    """The firewall's own warnings (the real stacks' previews also warn about their unpinned Kata)."""
    return [w for w in run.warnings if w.startswith("control-plane firewall")]

def test_staging_admits_its_three_boxes_each_as_a_32_on_6443_and_nothing_else() -> None:
    addresses = BoxAddresses()
    run = run_program("staging", stack_raw("staging"), addresses)
    # Staging adopts one box per fleet; the stack lists no operator source.
    assert run.rules == [
        box_rule("kura-ca-east", [f"{addresses.of('kura-ca-east-0')}/32"]),
        box_rule("kura-dedibox", [f"{addresses.of('kura-dedibox-0')}/32"]),
        box_rule("runners-linux", [f"{addresses.of('runners-linux-0')}/32"]),
    ]
    assert run.firewall.inputs["applyTos"] == [
        {"labelSelector": "caph-cluster-tuist-staging=owned,machine_type=control_plane"}
    ]
    assert run.firewall.inputs["labels"] == {"managed-by": "tuist-infra", "tuist.dev/environment": "staging"}


@pytest.mark.parametrize("stack", REAL_STACKS)
def test_every_real_stack_admits_exactly_its_adopted_boxes(stack: str) -> None:
    addresses = BoxAddresses()
    cfg = load_stack_config(stack_raw(stack))
    run = run_program(stack, stack_raw(stack), addresses)
    by_fleet: dict[str, list[str]] = {}
    for fleet, slot in slots(cfg):
        by_fleet.setdefault(fleet, []).append(f"{addresses.of(slot)}/32")
    assert run.rules == [box_rule(fleet, by_fleet[fleet]) for fleet in sorted(by_fleet)]
    sources = [source for rule in run.rules for source in rule["sourceIps"]]
    # Exactly the claims' boxes, each once, none wider than a /32.
    assert sorted(sources) == sorted(f"{addresses.of(slot)}/32" for _, slot in slots(cfg))
    assert all(source.endswith("/32") for source in sources)
    assert {(r["direction"], r["protocol"], r["port"]) for r in run.rules} == {("in", "tcp", "6443")}
    selector = cfg.cluster.control_plane_firewall.label_selector
    assert selector == f"caph-cluster-tuist-{stack}=owned,machine_type=control_plane"
    assert run.firewall.inputs["applyTos"] == [{"labelSelector": selector}]


def test_operator_sources_come_first_in_one_rule_of_their_own() -> None:
    raw = stack_raw("production")
    raw["cluster"]["control_plane_firewall"]["operator_sources"] = ["9.9.9.9/32", "2620:fe::/64"]
    run = run_program("production", raw, BoxAddresses())
    assert run.rules[0] == {
        "direction": "in",
        "protocol": "tcp",
        "port": "6443",
        "sourceIps": ["9.9.9.9/32", "2620:fe::/64"],
        "description": "operators: cluster.control_plane_firewall.operator_sources",
    }
    assert all(rule["description"].startswith("fleet ") for rule in run.rules[1:])


@pytest.mark.parametrize("stack", REAL_STACKS)
def test_every_join_waits_for_the_firewall_which_waits_for_every_claim(stack: str) -> None:
    run = run_program(stack, stack_raw(stack), BoxAddresses())
    firewall = run.firewall
    claims = run.monitor.of_type(CLAIM)
    machines = run.monitor.of_type(MACHINE)
    assert machines and len(machines) == len(claims)
    for machine in machines:
        # The join (the machine's create) starts only once the rules admitting its box are applied.
        assert firewall.urn in machine.dependencies, machine.name
    # The rules are built from every claim's address (and the stack's last outputs), so the
    # firewall waits for every claim...
    last_outputs = run.monitor.one(STACK_REFERENCE).urn
    assert set(firewall.property_dependencies["rules"]) == {claim.urn for claim in claims} | {last_outputs}
    # ...and no claim waits for the firewall: a box is recorded before anything slow.
    assert all(firewall.urn not in claim.dependencies for claim in claims)
    order = [r.urn for r in run.monitor.registrations]
    assert all(order.index(firewall.urn) < order.index(m.urn) for m in machines)


def test_the_dev_stack_has_no_firewall_and_its_joins_wait_for_none() -> None:
    run = run_program("dev", stack_raw("dev"), BoxAddresses())
    hcloud = [r for r in run.monitor.registrations if r.type.startswith(("hcloud:", HCLOUD_PROVIDER))]
    assert not hcloud
    assert not run.monitor.of_type(STACK_REFERENCE)
    claims = {c.urn for c in run.monitor.of_type(CLAIM)}
    # ... and the node bootstrap RBAC (components/node_bootstrap.py), which every join waits for.
    bindings = {
        b.urn
        for b in run.monitor.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding")
        if "node-bootstrap" in b.urn
    }
    machines = run.monitor.of_type(MACHINE)
    assert machines and all(set(machine.dependencies) <= claims | bindings for machine in machines)


@pytest.mark.parametrize("stack", [*REAL_STACKS, "dev"])
def test_the_firewall_is_on_exactly_where_the_control_plane_is_on_hetzner_cloud(stack: str) -> None:
    cfg = load_stack_config(stack_raw(stack))
    assert cfg.cluster.control_plane_firewall.enabled is (stack != "dev")
    assert ("hcloudToken" in required_secret_keys(cfg)) is (stack != "dev")


def test_a_control_plane_with_its_own_cluster_firewall_previews_without_warnings() -> None:
    run = run_program("staging", stack_raw("staging"), BoxAddresses())
    assert door_warnings(run) == []
    # The preview read the project through the explicit provider: the servers of the selector and
    # this stack's own firewalls (by the labels it puts on them).
    selectors = sorted(call.args["withSelector"] for call in run.monitor.mocks.calls)
    assert selectors == [
        "caph-cluster-tuist-staging=owned,machine_type=control_plane",
        "managed-by=tuist-infra,tuist.dev/environment=staging",
    ]


def test_the_preview_warns_when_the_door_would_close_everything_else() -> None:
    # The control-plane servers carry no firewall but this stack's own (id 42): once it applies, it is
    # the only thing that admits anything on their public interfaces.
    project = HetznerProject.control_planes("production", firewall_ids=[42])
    project.firewalls = [{"id": 42, "name": "tuist-production-control-plane-1a2b3c4", "labels": {
        "managed-by": "tuist-infra", "tuist.dev/environment": "production"}}]
    run = run_program("production", stack_raw("production"), BoxAddresses(), project=project)
    assert door_warnings(run) == [
        "control-plane firewall: tuist-production-control-plane-0, tuist-production-control-plane-1, "
        "tuist-production-control-plane-2 carry no other firewall, so with this one they drop every inbound "
        "packet on their public interfaces but 6443 from the admitted boxes and operator sources: etcd "
        "peers, SSH and a load balancer's health checks included, unless those travel a private network "
        "(docs/control-plane-firewall.md)"
    ]


def test_the_preview_warns_when_the_selector_names_no_server() -> None:
    raw = stack_raw("canary")
    raw["cluster"]["control_plane_firewall"]["label_selector"] = "caph-cluster-tuist-canray=owned"
    run = run_program("canary", raw, BoxAddresses())
    assert door_warnings(run) == [
        "control-plane firewall: the label selector 'caph-cluster-tuist-canray=owned' matches no server "
        "of the Hetzner project, so the firewall guards nothing"
    ]


# --- a box removed ------------------------------------------------------------


def test_a_removed_box_keeps_its_32_through_its_release_then_one_rule_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    addresses = BoxAddresses()
    before = stack_raw("production")
    after = stack_raw("production")
    runners = next(f for f in after["fleets"] if f["name"] == "runners-linux")
    assert runners["size"] == 2
    runners["size"] = 1  # production gives back its second AX162-R: slot runners-linux-1 goes
    after["runner_pools"][0]["autoscaling"]["max_replicas"] = 62  # what one AX162-R holds

    first = run_program("production", before, addresses, monkeypatch=monkeypatch)
    # The update that removes the slot releases the box at its end, after the firewall's update:
    # the stack's last outputs still list the machine, so its /32 stays, marked as leaving.
    releasing = run_program("production", after, addresses, first.exported, monkeypatch=monkeypatch)
    # The next deploy reads outputs that no longer list it.
    next_deploy = run_program("production", after, addresses, releasing.exported, monkeypatch=monkeypatch)
    # The outputs resolved, as the engine records them.
    assert "runners-linux-1" in json.dumps(first.exported["fleets"])
    assert "runners-linux-1" not in json.dumps(releasing.exported["fleets"])

    gone = f"{addresses.of('runners-linux-1')}/32"
    kept = f"{addresses.of('runners-linux-0')}/32"
    changed = [(a, b) for a, b in zip(first.rules, releasing.rules, strict=True) if a != b]
    assert changed == [
        (box_rule("runners-linux", [kept, gone]), box_rule("runners-linux", [kept, gone], "runners-linux-1"))
    ]
    changed = [(a, b) for a, b in zip(first.rules, next_deploy.rules, strict=True) if a != b]
    assert changed == [(box_rule("runners-linux", [kept, gone]), box_rule("runners-linux", [kept]))]
    # The other rules stay, in their place.
    assert [r["description"] for r in first.rules] == [r["description"] for r in next_deploy.rules]


def test_a_removed_fleet_keeps_its_rule_until_its_boxes_are_released(monkeypatch: pytest.MonkeyPatch) -> None:
    addresses = BoxAddresses()
    before = stack_raw("staging")
    after = stack_raw("staging")
    next(f for f in after["fleets"] if f["name"] == "kura-ca-east")["enabled"] = False
    after["regions"] = [dict(r, exposed=False) if r["id"] == "ca-east" else r for r in after["regions"]]
    first = run_program("staging", before, addresses, monkeypatch=monkeypatch)
    releasing = run_program("staging", after, addresses, first.exported, monkeypatch=monkeypatch)
    next_deploy = run_program("staging", after, addresses, releasing.exported, monkeypatch=monkeypatch)
    box = f"{addresses.of('kura-ca-east-0')}/32"
    assert releasing.rules[0] == box_rule("kura-ca-east", [box], "kura-ca-east-0")
    assert releasing.rules[1:] == first.rules[1:]
    assert next_deploy.rules == first.rules[1:]


# --- the token ------------------------------------------------------------------


def test_the_token_reaches_only_the_explicit_provider_and_as_a_secret() -> None:
    run = run_program("canary", stack_raw("canary"), BoxAddresses())
    provider = run.monitor.one(HCLOUD_PROVIDER)
    assert provider.inputs["token"] == {**SECRET_SIG, "value": TOKEN}
    # The firewall is managed through that provider, not a default one reading HCLOUD_TOKEN.
    assert run.firewall.provider == f"{provider.urn}::{provider.name}-id"
    others = [r for r in run.monitor.registrations if r is not provider]
    assert TOKEN not in json.dumps([r.inputs for r in others])
    assert TOKEN not in json.dumps(run.monitor.outputs)  # every component's registered outputs
    assert TOKEN not in json.dumps(run.exported, default=str)  # the stack outputs


# --- the rules, piece by piece ------------------------------------------------------------


def test_slots_sort_by_index_and_a_box_is_never_admitted_twice() -> None:
    current = [("f", f"f-{i}", f"198.51.100.{i}") for i in (10, 9, 2)]
    (rule,) = firewall_rules([], current)
    assert rule["source_ips"] == ["198.51.100.2/32", "198.51.100.9/32", "198.51.100.10/32"]
    with pytest.raises(ValueError, match=r"slots f-0 and g-0 both hold the box at 198\.51\.100\.1;"):
        firewall_rules([], [("f", "f-0", "198.51.100.1"), ("g", "g-0", "198.51.100.1")])
    # A box released from one slot and claimed by another in the same run keeps its new slot.
    (rule,) = firewall_rules([], [("f", "f-1", "198.51.100.1")], [("f", "f-0", "198.51.100.1")])
    assert (rule["source_ips"], rule["description"]) == (["198.51.100.1/32"], "fleet f: adopted boxes")


@pytest.mark.parametrize("address", [None, "", "2001:db8::1", "198.51.100.1/32", "box-1"])
def test_a_claim_without_an_ipv4_stops_the_update_naming_its_slot(address: Any) -> None:
    with pytest.raises(ValueError, match=r"slot kura-ovh-3 reported public_ipv4 .* not an IPv4 address"):
        firewall_rules([], [("kura-ovh", "kura-ovh-3", address)])


@pytest.mark.parametrize(
    "last",
    [None, {}, [], "x", {"f": None}, {"f": {"machines": None}}, {"f": {"machines": [None, {"name": 3}]}}],
)
def test_outputs_of_a_new_stack_or_an_older_contract_list_no_leaving_box(last: Any) -> None:
    assert leaving_boxes(last, set()) == []


def test_leaving_boxes_are_the_last_machines_whose_slot_is_gone() -> None:
    last = {
        "kura-ovh": {"machines": [{"name": "kura-ovh-0", "public_ipv4": "198.51.100.4"},
                                  {"name": "kura-ovh-1", "public_ipv4": "198.51.100.5"},
                                  {"name": "kura-ovh-2", "public_ipv4": "not-an-address"}]},
    }
    assert leaving_boxes(last, {"kura-ovh-0"}) == [("kura-ovh", "kura-ovh-1", "198.51.100.5")]


# --- the plugin ------------------------------------------------------------------------


def test_ci_installs_the_hcloud_plugin_the_sdk_asks_for() -> None:
    # The engine loads the resource plugin named in the SDK's pulumi-plugin.json; CI installs exactly it.
    plugin = json.loads(resources.files("pulumi_hcloud").joinpath("pulumi-plugin.json").read_text())
    setup = (REPO / "scripts" / "ci" / "setup.sh").read_text()
    assert f"pulumi plugin install resource hcloud v{plugin['version']}" in setup


# --- the real engine: a stack reads its own last outputs during its update ----------------------------


@pytest.mark.e2e
def test_a_stack_reads_its_own_last_outputs_during_its_update(tmp_path: Path) -> None:
    """What keeps a leaving box's /32 through its release: on a DIY backend, a StackReference to the
    stack itself returns the outputs of its last update while the next one runs."""
    pulumi_cli = REPO / ".toolchain" / "bin" / "pulumi"
    if not pulumi_cli.exists():
        pytest.fail("the Pulumi CLI is not built: run `bash scripts/bootstrap.sh`")
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        f"name: selfref\nruntime:\n  name: python\n  options:\n    virtualenv: {REPO / '.venv'}\n"
    )
    (project / "__main__.py").write_text(
        textwrap.dedent(
            """
            import json, os
            import pulumi
            from components.control_plane_firewall import leaving_boxes, own_stack_name

            slots = json.loads(os.environ["SELFREF_SLOTS"])
            last = pulumi.StackReference("last-outputs", stack_name=own_stack_name())
            pulumi.export("fleets", {"kura": {"machines": [
                {"name": name, "public_ipv4": address} for name, address in slots.items()]}})
            pulumi.export("leaving", last.get_output("fleets").apply(lambda f: leaving_boxes(f, set(slots))))
            """
        )
    )
    env = cli_env(tmp_path, passphrase="test-only", PYTHONPATH=str(REPO))

    def pulumi_cmd(*args: str, slots: dict[str, str] | None = None) -> str:
        proc = subprocess.run(
            [str(pulumi_cli), *args, "--non-interactive"],
            cwd=project, env={**env, "SELFREF_SLOTS": json.dumps(slots or {})},
            text=True, capture_output=True, timeout=300, check=False,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    def up(slots: dict[str, str]) -> Any:
        pulumi_cmd("up", "--yes", "--skip-preview", slots=slots)
        return json.loads(pulumi_cmd("stack", "output", "leaving", "--json"))

    pulumi_cmd("stack", "init", "organization/selfref/staging")
    assert up({"kura-0": "198.51.100.1", "kura-1": "198.51.100.2"}) == []
    assert up({"kura-0": "198.51.100.1"}) == [["kura", "kura-1", "198.51.100.2"]]
    assert up({"kura-0": "198.51.100.1"}) == []
