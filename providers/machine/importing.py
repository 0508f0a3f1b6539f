"""Bring a box that is already in use (a node the Cluster API provider of the seeds joined, or one
joined by hand) under a stack as one fleet slot: claim, machine and NodeLabels, without reinstalling
or re-joining it.

Pulumi 3.260 cannot import a Python dynamic resource by id alone: `pulumi import <type> <name> <id>` and
the `import_` resource option call the provider's Read with no properties, and the dynamic provider
process fails to find which provider to run (KeyError '__provider'). What works is an import file
whose resources carry their inputs and outputs: the engine then records them as given (no Read) and
runs Check and Diff against the inputs. This module writes that file, after it has checked the box and
claimed it (a box in a stack is a claimed box), read what the outputs must say from the vendor, the
box's SSH host key and (with a cluster) the Node that has the box's providerID.

    pulumi config --show-secrets --json -s <stack> > /dev/shm/<stack>.json   # the provider's config
    python -m providers.machine.importing --stack <stack> --fleet <fleet> --slot <n> --box <box id> \\
        --config /dev/shm/<stack>.json --out import.json
    pulumi import --file import.json --generate-code=false --yes -s <stack>
    # then raise the fleet's size to n+1 in Pulumi.<stack>.yaml; `pulumi preview` shows no change.

docs/machines.md has the procedure. The written file holds no secret.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from pulumi.dynamic.config import Config

from providers.constants import PROJECT
from providers.dynamic_resource import serialize_provider
from providers.machine.errors import MachineError
from providers.machine.node_labels import NodeLabelsProvider
from providers.machine.provider import ClaimProvider, MachineProvider, _outputs
from providers.machine.record import Phase
from providers.machine.release import release_refusal
from providers.machine.selection import claim_named_box
from providers.machine.settings import Settings, settings_from_config
from providers.machine.spec import node_name_for, parse_claim, provider_id_for, resource_id
from providers.ssh.runner import SshTarget, fetch_host_key

FLEET_TYPE = "tuist:fleet:BareMetalFleet"
TYPES = {
    "claim": "pulumi-python:dynamic/machine:MachineClaim",
    "machine": "pulumi-python:dynamic/machine:AdoptedMachine",
    "labels": "pulumi-python:dynamic/machine:NodeLabels",
}


class NotImportableError(MachineError):
    """The box cannot be imported; the message says why."""


def provider_config(shown: Mapping[str, Any]) -> dict[str, str]:
    """`pulumi config --show-secrets --json` as the dynamic provider's configure() receives it."""
    return {key: str(entry["value"]) for key, entry in shown.items() if "value" in entry}


def slot_resources(
    *,
    settings: Settings,
    stack: str,
    claim_inputs: dict[str, Any],
    machine_inputs: dict[str, Any],
    label_inputs: dict[str, Any],
    slot: str,
    box_id: str,
    node_name: str | None = None,
    log: Any = print,
) -> dict[str, Any]:
    """Claim `box_id` for the slot and return the import file for its three resources."""
    fleet_urn = f"urn:pulumi:{stack}::{PROJECT}::{FLEET_TYPE}::fleet-{claim_inputs['fleet']}"
    names = {"claim": f"{slot}-claim", "machine": slot, "labels": f"{slot}-labels"}

    def urn(kind: str) -> str:
        return f"urn:pulumi:{stack}::{PROJECT}::{FLEET_TYPE}${TYPES[kind]}::{names[kind]}"

    claim_in = {**claim_inputs, "urn": urn("claim")}
    spec = parse_claim(claim_in)
    client = settings.vendor_client(spec.vendor)
    record = settings.claim_record(spec.api_server)
    box, progress = claim_named_box(client, record, spec, box_id, log)
    if not box.public_ipv4:
        raise NotImportableError(f"{box.id} has no public IPv4")
    provider_id = provider_id_for(box.vendor, box.id, box.datacenter)
    node = (
        node_name
        or _registered_node(settings, spec.api_server, provider_id)
        or node_name_for(spec.fleet, box.id)
    )
    pin = fetch_host_key(SshTarget(box.public_ipv4, spec.ssh_port, spec.login))
    allowed = release_refusal(spec) is None
    record.save(
        replace(progress, phase=Phase.READY, state="READY", facts={"pin": pin}, release_allowed=allowed)
    )

    claim_out = ClaimProvider._outs(claim_in, spec, box, record, release_allowed=allowed)
    machine_in = {
        **machine_inputs,
        "resource_name": slot,
        "urn": urn("machine"),
        **{
            key: claim_out[key]
            for key in ("box_id", "box_name", "datacenter", "public_ipv4", "provider_id", "claim_token")
        },
    }
    machine_out = _outputs(
        machine_in,
        node_name=node,
        host_key_fingerprint=pin,
        node_registered=bool(spec.api_server),
        state="ready",
    )
    labels_in = {**label_inputs, "node_name": node, "resource_name": names["labels"], "urn": urn("labels")}
    labels_out = {**labels_in, "applied": False}
    providers = {
        "claim": serialize_provider(ClaimProvider()),
        "machine": serialize_provider(MachineProvider()),
        "labels": serialize_provider(NodeLabelsProvider()),
    }
    ids = {
        "claim": resource_id(box.vendor, box.id),
        "machine": resource_id(box.vendor, box.id),
        "labels": node,
    }
    resources = []
    for kind, inputs, outputs in (
        ("claim", claim_in, claim_out),
        ("machine", machine_in, machine_out),
        ("labels", labels_in, labels_out),
    ):
        resources.append(
            {
                "type": TYPES[kind],
                "name": names[kind],
                "id": ids[kind],
                "parent": "fleet",
                "inputs": {**_clean(inputs), "__provider": providers[kind]},
                "outputs": {**_clean(outputs), "__provider": providers[kind]},
            }
        )
    return {"nameTable": {"fleet": fleet_urn}, "resources": resources}


def _clean(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def _registered_node(settings: Settings, api_server: str | None, provider_id: str) -> str | None:
    """The Node that already carries the box's providerID (a box the Cluster API provider joined)."""
    if not api_server:
        return None
    from kubernetes import client as k8s

    nodes = k8s.CoreV1Api(settings.kube_api()).list_node().items
    names = [n.metadata.name for n in nodes if (n.spec and n.spec.provider_id) == provider_id]
    if len(names) > 1:
        raise NotImportableError(f"{len(names)} Nodes carry providerID {provider_id}: {', '.join(names)}")
    return names[0] if names else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m providers.machine.importing", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--stack", required=True)
    parser.add_argument("--fleet", required=True)
    parser.add_argument(
        "--slot", required=True, type=int, help="the slot index: the fleet's size before the import"
    )
    parser.add_argument(
        "--box", required=True, help="the vendor's box id (OVH service name, <zone>/<id>, number)"
    )
    parser.add_argument(
        "--config", required=True, type=Path, help="`pulumi config --show-secrets --json` output"
    )
    parser.add_argument("--node-name", help="the box's Node name, when no cluster can be asked")
    parser.add_argument("--out", type=Path, default=Path("import.json"))
    parser.add_argument("--stack-file", type=Path, help="default: Pulumi.<stack>.yaml")
    args = parser.parse_args(argv)

    from components.fleet import BareMetalFleetArgs, claim_props, label_props, machine_name, machine_props
    from config.loader import ConfigError, load_stack_config, read_stack_file

    try:
        cfg = load_stack_config(
            read_stack_file(args.stack_file or Path(f"Pulumi.{args.stack}.yaml")), stack=args.stack
        )
    except ConfigError as error:
        sys.stderr.write(f"{error}\n")
        return 2
    fleet = next((f for f in cfg.fleets if f.name == args.fleet), None)
    if fleet is None:
        sys.stderr.write(f"no fleet {args.fleet!r} in Pulumi.{args.stack}.yaml\n")
        return 2
    fleet_args = BareMetalFleetArgs(
        fleet=fleet,
        environment=cfg.environment,
        cluster=cfg.cluster,
        allow_production_release=cfg.allow_production_release,
    )
    slot = machine_name(fleet.name, args.slot)
    settings = settings_from_config(Config(provider_config(json.loads(args.config.read_text())), PROJECT))
    try:
        document = slot_resources(
            settings=settings,
            stack=args.stack,
            claim_inputs=claim_props(fleet_args, project=PROJECT, stack=args.stack, slot=slot),
            machine_inputs={**machine_props(fleet_args, project=PROJECT, stack=args.stack)},
            label_inputs=label_props(fleet_args),
            slot=slot,
            box_id=args.box,
            node_name=args.node_name,
            log=lambda line: sys.stderr.write(line + "\n"),
        )
    except Exception as error:  # one line for the operator; nothing was recorded in state
        sys.stderr.write(f"cannot import {args.box}: {type(error).__name__}: {error}\n")
        return 1
    args.out.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    sys.stderr.write(
        f"wrote {args.out}; now: "
        f"pulumi import --file {args.out} --generate-code=false --yes -s {args.stack}\n"
        f"then set fleets[name={fleet.name}].size to at least {args.slot + 1} in Pulumi.{args.stack}.yaml\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
