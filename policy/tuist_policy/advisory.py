"""Advisory policies: changes a human should look at before they go out. A warning, not a failure.

The engine shows a policy only the resources the program registers now, not what the stack holds.
Which machines are deployed comes from the stack's own outputs (the `fleets` contract,
docs/outputs.md): scripts/ci/preview.py reads them with `pulumi stack output` and passes them as
this pack's config (`deployed_machines`, fleet name -> machine names). Without it the comparison is
not applicable and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    StackValidationArgs,
    StackValidationPolicy,
)

from .resources import ADOPTED_MACHINE_TYPE, MACHINE_CLAIM_TYPE, Report, get, stack_of

PRODUCTION = "production"

_BASELINE_SCHEMA = PolicyConfigSchema(
    properties={
        "deployed_machines": {
            "type": "object",
            "description": "fleet name -> names of the machines the stack holds now (its `fleets` output)",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        }
    }
)


def _stack(args: StackValidationArgs) -> str | None:
    return stack_of(args.resources[0].urn) if args.resources else None


def _current_machines(args: StackValidationArgs) -> dict[str, list[str]]:
    fleets: dict[str, list[str]] = {}
    for r in args.resources:
        if r.resource_type == ADOPTED_MACHINE_TYPE:
            fleet = get(r.props, "fleet")
            fleets.setdefault(fleet if isinstance(fleet, str) else "?", []).append(r.name)
    return fleets


def _deployed(args: StackValidationArgs) -> dict[str, list[str]]:
    deployed: Any = (args.get_config() or {}).get("deployed_machines")
    if not isinstance(deployed, Mapping):
        args.not_applicable("no deployed_machines in the policy config (scripts/ci/preview.py passes them)")
    return {str(fleet): [str(n) for n in names] for fleet, names in deployed.items()}


def _fleet_shrinking(args: StackValidationArgs, report: Report) -> None:
    deployed = _deployed(args)
    current = _current_machines(args)
    for fleet in sorted(deployed):
        before, after = deployed[fleet], current.get(fleet, [])
        if len(after) < len(before):
            gone = sorted(set(before) - set(after))
            report(
                f"fleet {fleet} shrinks from {len(before)} to {len(after)} machine(s): "
                f"{', '.join(gone)} will be released (drained, then their boxes reinstalled back to the pool)"
            )


fleet_shrinking = StackValidationPolicy(
    name="fleet-shrinking",
    description=(
        "A fleet loses machines: each released box is drained and reinstalled, and the capacity it "
        "served (a Kura region's box, runner microVM slots) goes with it (seed 000: release reinstalls "
        "the box; seed 003: slots per host are the capacity plan)."
    ),
    validate=_fleet_shrinking,
    enforcement_level=EnforcementLevel.ADVISORY,
    config_schema=_BASELINE_SCHEMA,
)


def _production_release(args: StackValidationArgs, report: Report) -> None:
    if _stack(args) != PRODUCTION:
        args.not_applicable("not the production stack")
    for r in args.resources:
        # The release switches are the claim's inputs (the claim's delete is the release).
        if r.resource_type != MACHINE_CLAIM_TYPE:
            continue
        if get(r.props, "allow_release") is True and get(r.props, "allow_production_release") is True:
            slot = r.name.removesuffix("-claim")
            report(
                f"{slot} (fleet {get(r.props, 'fleet')}) may be released: allow_release and "
                "allow_production_release are both on, so removing it reinstalls a production box",
                r.urn,
            )
    if not isinstance((args.get_config() or {}).get("deployed_machines"), Mapping):
        return
    deployed = _deployed(args)
    current = {name for names in _current_machines(args).values() for name in names}
    gone = sorted(name for names in deployed.values() for name in names if name not in current)
    if gone:
        report(
            f"this update releases production machine(s) {', '.join(gone)}: their boxes are drained and "
            "reinstalled (customers' cache data on them is lost); a human confirms the release first"
        )


production_release = StackValidationPolicy(
    name="production-release",
    description=(
        "A release in production: a machine leaves the production stack, or is armed to (seed 000: a "
        "release reinstalls the box, wiping what it served; it needs both allow_release and "
        "allow_production_release)."
    ),
    validate=_production_release,
    enforcement_level=EnforcementLevel.ADVISORY,
    config_schema=_BASELINE_SCHEMA,
)


ADVISORY = [fleet_shrinking, production_release]
