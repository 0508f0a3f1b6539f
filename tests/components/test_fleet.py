"""BareMetalFleet under Pulumi's mocks: per slot a claim, a machine on the claim's box and its
NodeLabels, with which inputs, options and dependencies, and what the fleet exports. (The resources'
own behaviour is tested against vendorsim in tests/providers.)"""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from components.fleet import BareMetalFleet, BareMetalFleetArgs, claim_props
from config.models import (
    Cluster,
    Environment,
    Fleet,
    Hardware,
    InstallArtifacts,
    NodeAgent,
    PrivateNetwork,
    Taint,
    TaintEffect,
    Vendor,
)
from providers.machine.spec import claim_input_problems, machine_input_problems

CLAIM = "pulumi-python:dynamic/machine:MachineClaim"
MACHINE = "pulumi-python:dynamic/machine:AdoptedMachine"
LABELS = "pulumi-python:dynamic/machine:NodeLabels"


class Recorder(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.inputs: dict[str, dict[str, dict[str, Any]]] = {CLAIM: {}, MACHINE: {}, LABELS: {}}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
        if args.typ == CLAIM:
            self.inputs[CLAIM][args.name] = dict(args.inputs)
            # By slot, not by arrival: registrations are asynchronous and may arrive in any order.
            n = int(args.name.removesuffix("-claim").rsplit("-", 1)[1]) + 1
            box = f"ns{n}"
            return f"ovh:{box}", {
                **args.inputs,
                "box_id": box,
                "box_name": box,
                "datacenter": "bhs6",
                "public_ipv4": f"203.0.113.{n}",
                "provider_id": f"ovh://bhs6/{box}",
                "claim_token": f"{n:012x}",
            }
        if args.typ == MACHINE:
            self.inputs[MACHINE][args.name] = dict(args.inputs)
            return f"ovh:{args.inputs['box_id']}", {
                **args.inputs,
                "node_name": f"kura-ovh-{args.inputs['box_id']}",
            }
        if args.typ == LABELS:
            self.inputs[LABELS][args.name] = dict(args.inputs)
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]] | None]:
        return {}, None


def fleet(**overrides: Any) -> Fleet:
    values: dict[str, Any] = {
        "name": "kura-ovh",
        "vendor": Vendor.OVH,
        "marker": "tuist-kura-staging-ovh",
        "size": 2,
        "node_pool": "kura-ovh",
        "labels": {"tuist.dev/region": "ca-east"},
        "taints": [Taint(key="tuist.dev/kura-cache", value="true", effect=TaintEffect.NO_SCHEDULE)],
        "hardware": Hardware(offer="Advance-1", threads=16, memory_gib=64),
        "datacenter": "bhs",
    }
    values.update(overrides)
    return Fleet(**values)


CLUSTER = Cluster(api_server="https://cp.staging.tuist.dev:6443", runners_controller_image="ghcr.io/t/r:1")


def fleet_args(**overrides: Any) -> BareMetalFleetArgs:
    return BareMetalFleetArgs(fleet=fleet(**overrides), environment=Environment.STAGING, cluster=CLUSTER)


def build(args: BareMetalFleetArgs) -> tuple[Recorder, BareMetalFleet, list[dict[str, Any]]]:
    recorder = Recorder()
    pulumi.runtime.set_mocks(recorder, project="tuist-infra", stack="staging", preview=False)
    holder: dict[str, Any] = {}

    @pulumi.runtime.test
    def run() -> Any:
        component = BareMetalFleet("kura-ovh", args)
        holder["component"] = component
        return component.machine_outputs.apply(lambda rows: holder.__setitem__("rows", rows))

    run()
    return recorder, holder["component"], holder["rows"]


def test_each_slot_is_a_claim_a_machine_on_its_box_and_node_labels() -> None:
    args = fleet_args()
    recorder, _, rows = build(args)
    assert sorted(recorder.inputs[CLAIM]) == ["kura-ovh-0-claim", "kura-ovh-1-claim"]
    assert sorted(recorder.inputs[MACHINE]) == ["kura-ovh-0", "kura-ovh-1"]  # the names state already has
    assert sorted(recorder.inputs[LABELS]) == ["kura-ovh-0-labels", "kura-ovh-1-labels"]
    claim = recorder.inputs[CLAIM]["kura-ovh-0-claim"]
    assert {k: claim.get(k) for k in claim_props(args, project="tuist-infra", stack="staging", slot="x")} == {
        "project": "tuist-infra",
        "stack": "staging",
        # The slot's name: the claim token is the one the machine held before claims were resources.
        "resource_name": "kura-ovh-0",
        "environment": "staging",
        "fleet": "kura-ovh",
        "vendor": "ovh",
        "marker": "tuist-kura-staging-ovh",
        "datacenter_prefix": "bhs",
        "os": "ubuntu_24.04",
        "ssh_user": "ubuntu",
        "ssh_port": 22,
        "api_server": "https://cp.staging.tuist.dev:6443",
        "allow_release": False,
        "allow_production_release": False,
        "install_artifacts": None,
        "excluded_boxes": None,
    }
    assert claim["urn"] == (
        "urn:pulumi:staging::tuist-infra::tuist:fleet:BareMetalFleet$" + CLAIM + "::kura-ovh-0-claim"
    )
    assert claim_input_problems(claim) == []
    machine = recorder.inputs[MACHINE]["kura-ovh-0"]
    # The machine is on its claim's box: the claim's outputs are its inputs.
    assert {k: machine[k] for k in ("box_id", "public_ipv4", "provider_id", "claim_token")} == {
        "box_id": "ns1",
        "public_ipv4": "203.0.113.1",
        "provider_id": "ovh://bhs6/ns1",
        "claim_token": "000000000001",
    }
    assert (machine["resource_name"], machine["labels"], machine["kubernetes_minor"]) == (
        "kura-ovh-0",
        {"tuist.dev/region": "ca-east"},
        "v1.34",
    )
    assert machine_input_problems(machine) == []
    labels = recorder.inputs[LABELS]["kura-ovh-0-labels"]
    assert labels["node_name"] == "kura-ovh-ns1"
    assert labels["labels"] == {
        "node.cluster.x-k8s.io/pool": "kura-ovh",
        "tuist.dev/fleet": "kura-ovh",
        "tuist.dev/region": "ca-east",
    }
    assert labels["taints"] == [{"key": "tuist.dev/kura-cache", "value": "true", "effect": "NoSchedule"}]
    # What each Kura pod requests its region's floor of: the fleet's egress budget (default 1000).
    assert labels["capacity"] == {"tuist.dev/egress-mbps": "1000"}
    assert build(fleet_args(egress_budget_mbps=2500))[0].inputs[LABELS]["kura-ovh-0-labels"]["capacity"] == {
        "tuist.dev/egress-mbps": "2500"
    }
    # The fleet's SSH port reaches every claim and machine (the dev stack's boxes answer on 2222).
    dev = build(fleet_args(ssh_port=2222))[0]
    assert {m["ssh_port"] for kind in (CLAIM, MACHINE) for m in dev.inputs[kind].values()} == {2222}
    assert rows == [
        {
            "name": f"kura-ovh-{i}",
            "vendor": "ovh",
            "box_id": f"ns{i + 1}",
            "datacenter": "bhs6",
            "public_ipv4": f"203.0.113.{i + 1}",
            "provider_id": f"ovh://bhs6/ns{i + 1}",
            "node_name": f"kura-ovh-ns{i + 1}",
        }
        for i in range(2)
    ]


def test_robot_claims_and_machines_carry_the_install_pins() -> None:
    robot = fleet(
        name="runners",
        vendor=Vendor.ROBOT,
        marker="tuist-bm-staging-",
        node_pool="runners",
        labels={},
        taints=[],
        datacenter=None,
        install_artifacts=InstallArtifacts(kata_static_sha256="0" * 64),
    )
    recorder, _, _ = build(BareMetalFleetArgs(fleet=robot, environment=Environment.STAGING, cluster=CLUSTER))
    claim = recorder.inputs[CLAIM]["runners-0-claim"]
    assert claim["install_artifacts"] == robot.artifacts.model_dump()
    assert recorder.inputs[MACHINE]["runners-0"]["install_artifacts"] == robot.artifacts.model_dump()
    assert recorder.inputs[LABELS]["runners-0-labels"]["taints"] == [
        {"key": "tuist.dev/runner-tier", "value": "bare-metal", "effect": "NoSchedule"}
    ]


def test_elastic_metal_machines_carry_the_private_network_and_macs_their_node_agent() -> None:
    em = fleet(
        name="kura-scw",
        vendor=Vendor.SCALEWAY_EM,
        marker="tuist-kura-scw-staging",
        node_pool="kura-scw-fr-par",
        datacenter="fr-par",
        private_network=PrivateNetwork(id="9e700000-0000-4000-8000-000000000001"),
    )
    recorder, _, _ = build(BareMetalFleetArgs(fleet=em, environment=Environment.STAGING, cluster=CLUSTER))
    machine = recorder.inputs[MACHINE]["kura-scw-0"]
    assert (machine["private_network"], machine.get("node_agent")) == (
        "9e700000-0000-4000-8000-000000000001",
        None,
    )
    agent = NodeAgent(url="https://releases.example/tart-kubelet", sha256="a" * 64)
    mac = fleet(
        name="runners-macos",
        vendor=Vendor.APPLESILICON,
        marker="tuist-macos-staging",
        node_pool="runners-macos",
        labels={},
        taints=[],
        datacenter=None,
        node_agent=agent,
    )
    recorder, _, _ = build(BareMetalFleetArgs(fleet=mac, environment=Environment.STAGING, cluster=CLUSTER))
    machine = recorder.inputs[MACHINE]["runners-macos-0"]
    claim = recorder.inputs[CLAIM]["runners-macos-0-claim"]
    assert machine["node_agent"] == {"url": agent.url, "sha256": "a" * 64, "registers_node": True}
    assert recorder.inputs[LABELS]["runners-macos-0-labels"]["capacity"] == {}  # a Mac runs no Kura pod
    # A Mac's fleet defaults: reinstalled with the newest Tahoe, logged into as Scaleway's m1.
    assert (claim["os"], claim["ssh_user"], machine["ssh_user"]) == ("macos-tahoe", "m1", "m1")


def test_a_parked_fleet_adopts_nothing() -> None:
    recorder, component, rows = build(fleet_args(enabled=False))
    assert recorder.inputs == {CLAIM: {}, MACHINE: {}, LABELS: {}}
    assert component.machines == [] and component.claims == [] and rows == []


@pytest.mark.parametrize(
    ("environment", "protected"), [(Environment.PRODUCTION, True), (Environment.CANARY, False)]
)
def test_production_claims_and_machines_are_protected(environment: Environment, protected: bool) -> None:
    marker = f"tuist-kura-{environment.value}-ovh"
    args = BareMetalFleetArgs(
        fleet=fleet(marker=marker), environment=environment, cluster=CLUSTER, allow_production_release=True
    )
    recorder, component, _ = build(args)
    assert [m._protect for m in component.machines] == [protected, protected]
    assert [c._protect for c in component.claims] == [protected, protected]
    assert recorder.inputs[CLAIM]["kura-ovh-1-claim"]["allow_production_release"] is True


def test_a_slot_is_released_before_its_replacement_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    # `pulumi up --replace <claim>` (or a diff that must replace): created first, the new claim would
    # find the old claim's box by the slot's token and the old claim's release would reinstall it.
    import components.fleet as fleet_module

    seen: dict[str, pulumi.ResourceOptions] = {}
    for cls_name in ("MachineClaim", "AdoptedMachine"):
        real = getattr(fleet_module, cls_name)

        def recording(name: str, props: Any, opts: pulumi.ResourceOptions, _real: Any = real) -> Any:
            seen[name] = opts
            return _real(name, props, opts)

        monkeypatch.setattr(fleet_module, cls_name, recording)
    build(fleet_args())
    assert sorted(seen) == ["kura-ovh-0", "kura-ovh-0-claim", "kura-ovh-1", "kura-ovh-1-claim"]
    assert all(opts.delete_before_replace is True for opts in seen.values())
