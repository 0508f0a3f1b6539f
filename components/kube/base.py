"""What the program's Kubernetes objects are built from, without importing the typed SDK.

pulumi_kubernetes's typed classes cost about 1.2 s of CPU to import (core/v1 alone is 38,000
lines of input types), in every run of the program: a no-change preview of the dev stack spent
more on that import than the engine previewing an empty program spends in all. The program names
80 of those classes; `api.py` and `types.py` describe exactly those (and the 167 input types they
reach) from the pinned SDK's own metadata, and these two bases rebuild what the typed classes send
the engine:

- an `...Args` is a dict of the Pulumi (camelCase) names, None fields left out, a dict given for a
  typed field translated by that field's type, as the SDK's serializer does;
- a resource sends the same token, properties (constants such as apiVersion and kind, outputs such
  as status left unset), provider version, aliases and secret outputs as the typed class.

tests/components/test_kube.py holds the two to the same requests for every stack's whole program,
and `api.py` and `types.py` to the installed SDK (regenerate: scripts/generate_kube_api.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import pulumi

from components.kube.types import PLUGIN_VERSION, TYPES

__all__ = ["KubeArgs", "KubeResource", "translate"]


def _camel(py_name: str) -> str:
    head, *rest = py_name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def translate(value: Any, type_key: str | None) -> Any:
    """`value` as the SDK serializes it for a field of input type `type_key`: a dict's Python
    names become Pulumi names (other keys kept), recursively by the fields' own types."""
    if type_key is None or isinstance(value, KubeArgs):
        return value
    if isinstance(value, pulumi.Output):
        # The SDK translates what an Output resolves to; so does this (deps and secrecy kept).
        return value.apply(lambda resolved: translate(resolved, type_key))
    if isinstance(value, Mapping):
        fields, irregular, nested, _ = TYPES[type_key]
        out = {}
        for key in value:
            name = irregular.get(key) or (_camel(key) if key in fields else key)
            out[name] = translate(value[key], nested.get(name))
        return out
    if isinstance(value, list | tuple):
        return [translate(item, type_key) for item in value]
    return value


class KubeArgs(dict[str, Any]):
    """A typed SDK input type's value: its fields under their Pulumi names."""

    TYPE: ClassVar[str]

    def __init__(self, **fields: Any) -> None:
        names, irregular, nested, required = TYPES[self.TYPE]
        unknown = sorted(set(fields) - set(names))
        if unknown:
            raise TypeError(f"{type(self).__name__}: unexpected field(s) {', '.join(unknown)}")
        super().__init__()
        for key, value in fields.items():
            if value is None and key not in required:
                continue
            name = irregular.get(key) or _camel(key)
            self[name] = translate(value, nested.get(name))

    def __getattr__(self, py_name: str) -> Any:
        """A field by its Python name, as the typed class's getter reads it (None when unset): a
        transformation may read `args.props["metadata"].name`."""
        names, irregular, _, _ = TYPES[self.TYPE]
        if py_name not in names:
            raise AttributeError(f"{type(self).__name__} has no field {py_name!r}")
        return self.get(irregular.get(py_name) or _camel(py_name))


class KubeResource(pulumi.CustomResource):
    """A typed SDK resource class's registration, from its description in api.py."""

    TOKEN: ClassVar[str]
    # (Python name, Pulumi name, input type of the field or None), in the typed class's order.
    PROPS: ClassVar[tuple[tuple[str, str, str | None], ...]]
    CONSTANTS: ClassVar[Mapping[str, str]] = {}
    OUTPUTS_ONLY: ClassVar[frozenset[str]] = frozenset()
    SECRET: ClassVar[frozenset[str]] = frozenset()
    REQUIRED: ClassVar[frozenset[str]] = frozenset()
    ALIASES: ClassVar[tuple[str, ...]] = ()
    SECRET_OUTPUTS: ClassVar[tuple[str, ...]] = ()

    metadata: pulumi.Output[Any]

    def __init__(self, resource_name: str, opts: pulumi.ResourceOptions | None = None, **inputs: Any) -> None:
        # As the typed class: apiVersion and kind are its own whatever is passed; status is output only.
        settable = {py for py, _, _ in self.PROPS} - self.OUTPUTS_ONLY
        unknown = sorted(set(inputs) - settable)
        if unknown:
            raise TypeError(
                f"{type(self).__name__} {resource_name}: unexpected input(s) {', '.join(unknown)}"
            )
        opts = pulumi.ResourceOptions.merge(pulumi.ResourceOptions(version=PLUGIN_VERSION), opts)
        props: dict[str, Any] = {}
        for py, name, type_key in self.PROPS:
            if py in self.CONSTANTS:
                props[name] = self.CONSTANTS[py]
                continue
            value = inputs.get(py)
            if value is None and py in self.REQUIRED and not opts.urn:
                raise TypeError(f"Missing required property '{py}'")
            if value is not None and py in self.SECRET:
                value = pulumi.Output.secret(value)
            props[name] = translate(value, type_key)
        if self.ALIASES:
            aliases = [pulumi.Alias(type_=token) for token in self.ALIASES]
            opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(aliases=aliases))
        if self.SECRET_OUTPUTS:
            secret_outputs = list(self.SECRET_OUTPUTS)
            opts = pulumi.ResourceOptions.merge(
                opts, pulumi.ResourceOptions(additional_secret_outputs=secret_outputs)
            )
        super().__init__(self.TOKEN, resource_name, props, opts)
