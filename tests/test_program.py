"""The whole program (`__main__.py`) under Pulumi's mocks, once per stack file.

Every Kubernetes object of every stack validates against the Kubernetes 1.34 OpenAPI schema and,
for custom kinds, against the CRD it belongs to (RunnerPool: the CRD the program itself renders;
DNSEndpoint and CiliumNodeConfig: tests/fixtures/crds). The dynamic resources are not executed
under mocks; they answer with outputs shaped like the real providers' so the wiring after them
(failover candidates, public IPs, outputs) runs too.
"""

from __future__ import annotations

import functools
import json
import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from pulumi.runtime import resource as sdk_resource
from pulumi.runtime import resource_cycle_breaker
from pulumi.runtime import rpc as sdk_rpc
from pulumi.runtime import stack as sdk_stack

import components.sdk
from config.loader import required_secret_keys
from config.models import StackConfig, Vendor
from providers.machine.spec import node_name_for, provider_id_for
from tests.support.k8s_schema import ManifestRecorder, validate_manifest
from watcher.decision import box_id_from_provider_id

REPO = Path(__file__).resolve().parents[1]
PROJECT = "tuist-infra"


class ProgramMocks(ManifestRecorder):
    def __init__(self, numbers: dict[str, int] | None = None) -> None:
        super().__init__()
        # A claim's or machine's number (its box, its address): given by name, or else the order
        # registered, which can change from run to run (the SDK registers as inputs resolve).
        self.numbers = numbers
        self.claims: list[str] = []
        self.machines: list[dict[str, Any]] = []
        self.failover: list[dict[str, Any]] = []
        self.providers: dict[str, dict[str, Any]] = {}  # name -> inputs of each provider resource

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
        inputs = dict(args.inputs)
        if args.typ.startswith("pulumi:providers:"):
            self.providers[args.name] = inputs
        if args.typ == "pulumi-python:dynamic/machine:MachineClaim":
            # A claim records its box (and the address the control plane's firewall admits) first.
            n = self._number(args.name, self.claims) + 9
            self.claims.append(args.name)
            outs = {**inputs, "box_id": f"box-{args.name}", "public_ipv4": f"198.51.100.{n}"}
            return f"{args.name}-id", outs
        if args.typ == "pulumi:pulumi:StackReference":
            # The stack itself, before its first update: no outputs yet.
            return inputs["name"], {**inputs, "outputs": {}, "secret_output_names": []}
        if args.typ == "pulumi-python:dynamic/machine:AdoptedMachine":
            # A box as each vendor names it, and the providerID and Node name the machine provider
            # derives from it (providers/machine.py), so the wiring after the machines sees real shapes.
            n = self._number(args.name, self.machines)
            vendor = Vendor(inputs["vendor"])
            box_id, datacenter = {
                Vendor.OVH: (f"ns10{n:02d}.ip-203-0-113.net", "bhs6"),
                Vendor.DEDIBOX: (f"fr-par-2/2001{n:02d}", "DC5"),
                Vendor.ROBOT: (f"23456{n:02d}", "FSN1-DC14"),
                Vendor.SCALEWAY_EM: (f"fr-par-2/e1000000-0000-4000-8000-0000000000{n:02d}", "fr-par-2"),
                Vendor.APPLESILICON: (f"fr-par-3/a5000000-0000-4000-8000-0000000000{n:02d}", "fr-par-3"),
            }[vendor]
            outs = {
                **inputs,
                "box_id": box_id,
                "name": args.name,
                "datacenter": datacenter,
                "public_ipv4": f"203.0.113.{n + 10}",
                "provider_id": provider_id_for(vendor, box_id, datacenter),
                "node_name": node_name_for(inputs["fleet"], box_id),
            }
            self.machines.append(outs)
            return f"{args.name}-id", outs
        if args.typ == "pulumi-python:dynamic/failover:FailoverIP":
            candidates = sorted(inputs.get("candidates") or [])
            outs = {**inputs, "routed_to": candidates[0] if candidates else None}
            self.failover.append(outs)
            return f"{args.name}-id", outs
        return super().new_resource(args)

    def _number(self, name: str, registered: list[Any]) -> int:
        return self.numbers[name] if self.numbers is not None else len(registered) + 1

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]]]:
        # The control plane's firewall reads the Hetzner project (its preview warnings): an empty one.
        return {}, []


def _stack(env: str) -> tuple[dict[str, Any], StackConfig]:
    raw = yaml.safe_load((REPO / f"Pulumi.{env}.yaml").read_text())["config"]
    plain = {k: v for k, v in raw.items() if not (isinstance(v, dict) and "secure" in v)}
    from config.loader import load_stack_config

    cfg = load_stack_config({k.removeprefix(f"{PROJECT}:"): v for k, v in plain.items()})
    return plain, cfg


# The SDK's own, taken at collection (before any test runs the program, which replaces them for its
# whole process: here, for every later test of the worker).
SDK_DEBUG_LINE = pulumi.log.debug
SDK_STACK_TRACE = sdk_resource._get_stack_trace
SDK_DECLARE_DEPENDENCY = sdk_rpc.declare_dependency
SDK_WAIT_FOR_RPCS = sdk_stack.wait_for_rpcs


def run_program(
    env: str, edit: Callable[[dict[str, Any]], None] | None = None, mocks: ProgramMocks | None = None
) -> ProgramMocks:
    """The program on `env`'s stack file; `edit` changes its config (keys without the project) first."""
    plain, cfg = _stack(env)
    if edit is not None:
        from config.loader import load_stack_config

        bare = {k.removeprefix(f"{PROJECT}:"): v for k, v in plain.items()}
        edit(bare)
        plain = {f"{PROJECT}:{k}": v for k, v in bare.items()}
        cfg = load_stack_config(bare)
    config = {k: v if isinstance(v, str) else json.dumps(v) for k, v in plain.items()}
    # The operator's secrets, as stand-ins: the program only passes them on as secret Outputs.
    secret_keys = [f"{PROJECT}:{key}" for key in required_secret_keys(cfg)]
    config.update({key: f"stand-in-{key.split(':')[1]}" for key in secret_keys})
    pulumi.runtime.set_all_config(config, secret_keys)
    mocks = mocks or ProgramMocks()
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=env, preview=False)

    @pulumi.runtime.test  # type: ignore[misc]
    def run() -> None:
        runpy.run_path(str(REPO / "__main__.py"), run_name="__main__")

    try:
        run()
    finally:
        setattr(pulumi.log, "debug", SDK_DEBUG_LINE)  # noqa: B010
        setattr(sdk_resource, "_get_stack_trace", SDK_STACK_TRACE)  # noqa: B010
        setattr(sdk_rpc, "declare_dependency", SDK_DECLARE_DEPENDENCY)  # noqa: B010
        setattr(sdk_stack, "wait_for_rpcs", SDK_WAIT_FOR_RPCS)  # noqa: B010
    return mocks


@functools.cache
def program_of(env: str) -> ProgramMocks:
    """The program's run for `env`, once per session: it is deterministic, and the tests here only read
    what it registered. (Callers that capture side effects of a run use run_program.)"""
    return run_program(env)


@pytest.mark.parametrize("env", ["dev", "staging", "canary", "production"])
def test_every_kubernetes_object_of_the_stack_is_schema_valid(env: str) -> None:
    mocks = program_of(env)
    crds = mocks.of_kind("CustomResourceDefinition")
    assert mocks.manifests and crds
    for manifest in mocks.manifests:
        validate_manifest(manifest, "1.34", crds=crds)


@pytest.mark.parametrize("env", ["dev", "staging", "canary", "production"])
def test_the_program_adopts_exactly_the_enabled_fleets_sizes(env: str) -> None:
    _, cfg = _stack(env)
    mocks = program_of(env)
    expected = sum(f.size for f in cfg.fleets if f.enabled)
    assert len(mocks.machines) == expected


@pytest.mark.parametrize("env", ["dev", "staging", "canary", "production"])
def test_the_failover_watcher_reads_back_every_box_the_program_routes_to(env: str) -> None:
    # The failover IP is routed to machine box ids; the watcher finds the box of a Node from its
    # providerID (hrobot://, ovh://, dedibox://). Both must name the same box.
    mocks = program_of(env)
    for machine in mocks.machines:
        assert box_id_from_provider_id(machine["provider_id"]) == machine["box_id"], machine["provider_id"]


@pytest.mark.parametrize("env", ["dev", "staging", "canary", "production"])
def test_kura_volumes_are_pinned_to_the_adopted_boxes_of_their_region(env: str) -> None:
    _, cfg = _stack(env)
    mocks = program_of(env)
    nodes_by_fleet: dict[str, set[str]] = {}
    for m in mocks.machines:
        nodes_by_fleet.setdefault(m["fleet"], set()).add(m["node_name"])
    for region in cfg.regions:
        pvs = [
            pv
            for pv in mocks.of_kind("PersistentVolume")
            if pv["metadata"]["labels"]["tuist.dev/region"] == region.id
        ]
        fleet = cfg.fleet(region.fleet)
        assert len(pvs) == (fleet.size if fleet.enabled else 0) * region.volumes_per_box
        for pv in pvs:
            [term] = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
            assert set(term["matchExpressions"][0]["values"]) <= nodes_by_fleet[region.fleet]


def test_the_sdks_debug_lines_reach_the_engine_only_under_tuist_sdk_debug(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pulumi.runtime.proto import engine_pb2

    monkeypatch.setattr(pulumi.log, "debug", SDK_DEBUG_LINE)
    severities: list[int] = []
    monkeypatch.setattr(pulumi.log, "_log", lambda _engine, severity, *_rest: severities.append(severity))

    def debug_lines(switch: str | None) -> int:
        if switch is None:
            monkeypatch.delenv("TUIST_SDK_DEBUG", raising=False)
        else:
            monkeypatch.setenv("TUIST_SDK_DEBUG", switch)
        severities.clear()
        run_program("dev")
        return severities.count(engine_pb2.DEBUG)

    asked = debug_lines("1")
    # Several per resource when asked; otherwise only the few the SDK sends before the program runs.
    assert asked > 200
    assert debug_lines(None) <= 5


def test_each_resource_records_the_line_that_declares_it_as_the_sdk_finds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The program replaces the SDK's stack trace by its first frame (components/sdk.py): for every
    resource of the dev stack that frame is the SDK's own first frame, and nothing else is sent."""
    ours = components.sdk.declaring_line
    pairs: list[tuple[Any, Any]] = []

    def side_by_side() -> Any:
        kept = ours()
        pairs.append((SDK_STACK_TRACE(), kept))
        return kept

    monkeypatch.setattr(components.sdk, "declaring_line", side_by_side)
    run_program("dev")

    assert len(pairs) > 100
    for sdk, kept in pairs:
        assert len(sdk.frames) > 1
        assert list(kept.frames) == [sdk.frames[0]]
        declared_in = Path(kept.frames[0].pc.uri.removeprefix("file://"))
        assert declared_in.is_file() and kept.frames[0].pc.line > 0


@pytest.mark.parametrize("env", ["dev", "production"])
def test_the_cycle_check_answers_as_the_sdks_for_every_edge_and_walks_far_less(
    env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """components/sdk.py's declare_dependency, beside the SDK's own check, on every dependency edge
    the program declares: the same answer each time; the SDK's walk, most of which is skipped."""
    ours = components.sdk.declare_dependency
    answers: list[tuple[bool, bool]] = []
    walked = {"sdk": 0, "ours": 0}
    walk = resource_cycle_breaker._with_transitive_deps

    def counted(from_resource: Any, to_resource: Any, side: str) -> bool:
        seen: set[Any] = set()
        found = any(x is to_resource for x in walk(from_resource, seen))
        walked[side] += len(seen)
        return found

    def our_walk(from_resource: Any, to_resource: Any) -> bool:
        return counted(from_resource, to_resource, "ours")

    def side_by_side(from_resource: Any, to_resource: Any) -> bool:
        # The SDK's answer first: ours records the edge when it accepts it.
        sdk_accepts = not counted(to_resource, from_resource, "sdk")
        accepted = ours(from_resource, to_resource)
        answers.append((sdk_accepts, accepted))
        return accepted

    monkeypatch.setattr(resource_cycle_breaker, "_reachable", our_walk)
    monkeypatch.setattr(components.sdk, "declare_dependency", side_by_side)
    run_program(env)

    assert len(answers) > 300
    assert all(sdk == kept for sdk, kept in answers)
    # How much is skipped depends on the order the edges arrive in (9x to 160x less seen): at least 4x.
    assert walked["ours"] * 4 < walked["sdk"], walked


def test_the_cycle_check_still_refuses_an_edge_that_closes_a_cycle() -> None:
    class Node:
        pass

    a, b, c, d = Node(), Node(), Node(), Node()
    declare = components.sdk.declare_dependency
    assert declare(a, b) and declare(b, c)
    assert not declare(c, a)  # c -> a -> b -> c
    assert not declare(c, b)
    assert not declare(d, d)
    assert declare(c, d) and declare(a, d)
    assert resource_cycle_breaker._deps(a) == {b, d}
    assert resource_cycle_breaker._deps(c) == {d}


@pytest.mark.parametrize("env", ["staging", "canary", "production"])
def test_the_cluster_is_named_so_a_new_kubeconfig_for_it_replaces_nothing(env: str) -> None:
    # Without a clusterIdentifier the Kubernetes provider takes a new CA bundle or API address in the
    # kubeconfig for a new cluster and replaces every object of the stack (tests/e2e shows it does not
    # with one). The identifier is the environment's unless config names the cluster.
    assert program_of(env).providers["cluster"]["clusterIdentifier"] == env

    def name_it(config: dict[str, Any]) -> None:
        config["cluster"]["identifier"] = f"{env}-2"

    assert run_program(env, name_it).providers["cluster"]["clusterIdentifier"] == f"{env}-2"


def test_a_failover_ip_of_a_fleet_with_no_machine_is_not_routed() -> None:
    # Parked (or size 0): no box to route to. A FailoverIP with no candidate would stop every up.
    _, cfg = _stack("dev")
    ordered = {f.name for f in cfg.failover_ips if f.address}
    routed = {r.id: r for r in cfg.regions if r.failover_ip in ordered}
    region = next(iter(routed.values()))

    def park(config: dict[str, Any]) -> None:
        for fleet in config["fleets"]:
            if fleet["name"] == region.fleet:
                fleet["enabled"] = False
        for other in config["regions"]:
            if other["id"] == region.id:
                other["exposed"] = False  # config requires it of a parked fleet's region

    mocks = run_program("dev", park)
    assert sorted(f["region"] for f in mocks.failover) == sorted(set(routed) - {region.id})
    assert sorted(f["region"] for f in program_of("dev").failover) == sorted(routed)
