"""One CustomResourceDefinition shape for the kinds the program installs (MachineClaim, RunnerPool,
KuraInstance): a single served and stored version with a status subresource, and a structural
schema of spec and status. No Pulumi import: the providers write objects of these kinds too."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CrdNames:
    group: str
    version: str
    kind: str
    plural: str
    short_names: Sequence[str] = ()
    scope: str = "Namespaced"  # or "Cluster"


def object_schema(
    spec: Mapping[str, Any], status: Mapping[str, Any], description: str = ""
) -> dict[str, Any]:
    """The openAPIV3Schema of an object whose spec is required and status is the controller's."""
    schema: dict[str, Any] = {"type": "object"}
    if description:
        schema["description"] = description
    schema["required"] = ["spec"]
    schema["properties"] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": dict(spec),
        "status": dict(status),
    }
    return schema


def crd_spec(
    names: CrdNames, schema: Mapping[str, Any], columns: Sequence[Mapping[str, str]]
) -> dict[str, Any]:
    """The CustomResourceDefinition spec, in the apiserver's (camelCase) shape."""
    return {
        "group": names.group,
        "scope": names.scope,
        "names": {
            "kind": names.kind,
            "listKind": f"{names.kind}List",
            "plural": names.plural,
            "singular": names.kind.lower(),
            "shortNames": list(names.short_names),
        },
        "versions": [
            {
                "name": names.version,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [dict(c) for c in columns],
                "schema": {"openAPIV3Schema": dict(schema)},
            }
        ],
    }
