"""The MachineClaim CustomResourceDefinition (machineclaims.infra.tuist.dev/v1alpha1).

Cluster-scoped, one object per box named `<vendor>-<box id>` (providers/machine/record.py writes
them): spec says whose the box is, status where its state machine stands. The status subresource
keeps the two writers apart: the holder's provider moves status with resourceVersion
compare-and-set; nobody rewrites spec after create.
"""

from __future__ import annotations

from typing import Any

from providers.constants import (
    CLAIM_CRD_NAME,
    CLAIM_GROUP,
    CLAIM_KIND,
    CLAIM_PLURAL,
    CLAIM_VERSION,
    MANAGED_BY,
)
from providers.crd import CrdNames, crd_spec, object_schema
from providers.vendor import Vendor


def _string(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def claim_crd_manifest() -> dict[str, Any]:
    holder = {
        "type": "object",
        "description": "Who holds the box: the Pulumi resource whose claim this is.",
        "required": ["project", "stack", "resource", "token"],
        "properties": {
            "project": _string("Pulumi project."),
            "stack": _string("Pulumi stack."),
            "resource": _string("The machine slot (resource name) the box is held for."),
            "token": _string("Claim token, the one in the vendor marker.", pattern="^[0-9a-f]{12}$"),
        },
    }
    spec = {
        "type": "object",
        "required": ["vendor", "boxId", "fleet", "holder"],
        "properties": {
            "vendor": _string("Vendor of the box.", enum=[v.value for v in Vendor]),
            "boxId": _string("The vendor's id of the box.", minLength=1),
            "fleet": _string("The fleet the box is held for.", minLength=1),
            "holder": holder,
        },
        "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": "spec is immutable: delete the claim to release the box"}
        ],
    }
    status = {
        "type": "object",
        "properties": {
            "phase": _string(
                "Claimed, Adopting, Ready, Leaving or Releasing.",
                enum=["Claimed", "Adopting", "Ready", "Leaving", "Releasing"],
            ),
            "state": _string("The state machine's current state (docs/machines.md)."),
            "errorType": _string("Type of the last error, cleared when a state completes."),
            "errorCount": {"type": "integer", "minimum": 0, "description": "Failures so far."},
            "lastError": _string("The last error's message (no secrets), cut short.", maxLength=2048),
            "attempt": {"type": "integer", "minimum": 0, "description": "Provider runs on this box."},
            "lastTransitionTime": _string("When the state last changed.", format="date-time"),
            "facts": {
                "type": "object",
                "description": "What later states need, e.g. the rescue system's host key.",
                "additionalProperties": {"type": "string"},
            },
            "releaseAllowed": {
                "type": "boolean",
                "description": (
                    "The claim's release switches, as `pulumi up` last recorded them: a production "
                    "machine leaves the cluster only when its box may then be released."
                ),
            },
        },
    }
    columns = [
        {"name": "Vendor", "type": "string", "jsonPath": ".spec.vendor"},
        {"name": "Box", "type": "string", "jsonPath": ".spec.boxId"},
        {"name": "Fleet", "type": "string", "jsonPath": ".spec.fleet"},
        {"name": "Stack", "type": "string", "jsonPath": ".spec.holder.stack"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "State", "type": "string", "jsonPath": ".status.state"},
        {"name": "Errors", "type": "integer", "jsonPath": ".status.errorCount"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    names = CrdNames(CLAIM_GROUP, CLAIM_VERSION, CLAIM_KIND, CLAIM_PLURAL, ["mclaim"], scope="Cluster")
    schema = object_schema(spec, status, "A bare-metal box held by one tuist-infra machine slot.")
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CLAIM_CRD_NAME, "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
        "spec": crd_spec(names, schema, columns),
    }
