"""Schema validation of the manifests our components create, and a Pulumi mock that
records them.

Built-in kinds are checked against the strict schemas shipped by `kubernetes-validate`
(unknown fields rejected). Custom kinds are checked against the openAPIV3Schema of a
CRD: every *.yaml under tests/fixtures/crds/ is loaded, and CRD objects (dicts, e.g. the
RunnerPool CRD a component creates) can be passed in. CRD schemas are made strict too:
an object without `x-kubernetes-preserve-unknown-fields` rejects properties it does not
declare, as the apiserver would prune them silently.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pulumi
import yaml

__all__ = [
    "CRD_DIR",
    "PLATFORM_CRD_DIR",
    "ManifestError",
    "ManifestRecorder",
    "collect_manifests",
    "load_crds",
    "validate_manifest",
]

CRD_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "crds"
# The CRDs the clusters' platform installs before the program runs (Cilium's), as published.
PLATFORM_CRD_DIR = Path(__file__).resolve().parents[2] / "scripts" / "cluster-platform"
_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class ManifestError(AssertionError):
    """A manifest does not match its schema; the message names the object and the field."""


def load_crds(extra: Iterable[dict[str, Any]] = ()) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(group, version, kind) -> openAPIV3Schema, from tests/fixtures/crds/*.yaml, the platform's CRDs
    (scripts/cluster-platform) and `extra`."""
    crds = [*_crd_files(), *extra]
    schemas: dict[tuple[str, str, str], dict[str, Any]] = {}
    for crd in crds:
        if crd.get("kind") != "CustomResourceDefinition":
            raise ValueError(f"not a CustomResourceDefinition: {crd.get('kind')} {crd.get('metadata', {})}")
        spec = crd["spec"]
        for version in spec["versions"]:
            schemas[(spec["group"], version["name"], spec["names"]["kind"])] = version["schema"][
                "openAPIV3Schema"
            ]
    return schemas


@functools.cache
def _crd_files() -> tuple[dict[str, Any], ...]:
    """The CRDs of tests/fixtures/crds and scripts/cluster-platform, parsed once per session: the
    platform's are large, and parsing them for every manifest validated was most of a stack's check."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crds: list[dict[str, Any]] = []
    for path in [*sorted(CRD_DIR.glob("*.yaml")), *sorted(PLATFORM_CRD_DIR.glob("*.yaml"))]:
        crds.extend(d for d in yaml.load_all(path.read_text(), Loader=loader) if d)
    return tuple(crds)


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """Reject undeclared fields wherever the CRD declares properties and keeps no unknowns."""
    schema = copy.deepcopy(schema)
    # The apiserver always accepts the object envelope, declared or not.
    envelope = {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}}
    schema["properties"] = {**envelope, **schema.get("properties", {})}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def _where(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('apiVersion')} {obj.get('kind')} {ns}{meta.get('name')}"


def validate_manifest(
    obj: dict[str, Any], k8s_version: str = "1.34", crds: Iterable[dict[str, Any]] = ()
) -> None:
    """Raise ManifestError unless `obj` is valid for its kind (built-in or CRD)."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise ManifestError(f"manifest has no apiVersion/kind: {obj!r:.200}")
    group, _, version = api_version.rpartition("/")
    custom = load_crds(crds).get((group, version, kind))
    if custom is not None:
        name = (obj.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not _DNS_SUBDOMAIN.match(name):
            raise ManifestError(f"{_where(obj)}: metadata.name {name!r} is not a DNS subdomain")
        try:
            jsonschema.validate(obj, _strict(custom))
        except jsonschema.ValidationError as exc:
            path = ".".join(str(p) for p in exc.absolute_path) or "<root>"
            raise ManifestError(f"{_where(obj)}: {path}: {exc.message}") from None
        return
    try:
        kubernetes_validate.validate(obj, k8s_version, strict=True)
    except kubernetes_validate.SchemaNotFoundError as exc:
        raise ManifestError(f"{_where(obj)}: no built-in schema and no CRD: {exc.message}") from None
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.absolute_path) or "<root>"
        raise ManifestError(f"{_where(obj)}: {path}: {exc.message}") from None


def _api_version(type_token: str) -> tuple[str, str]:
    """`kubernetes:apps/v1:Deployment` -> ("apps/v1", "Deployment"); core/v1 -> "v1"."""
    _, group_version, kind = type_token.split(":")
    return (group_version.removeprefix("core/"), kind)


# The Pulumi wire marker a secret value is wrapped in (pulumi.runtime.rpc).
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
_SIG_KEY = "4dabf18193072939515e22adb298388d"


def _ints(value: Any) -> Any:
    # The mock monitor carries numbers as protobuf doubles: 7443 arrives as 7443.0,
    # and secrets wrapped in their signature object: unwrap them to the plain value.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict) and value.get(_SIG_KEY) == _SECRET_SIG:
        return _ints(value.get("value"))
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


class ManifestRecorder(pulumi.runtime.Mocks):
    """Records every Kubernetes resource registered, as the manifest dict it would apply.

    pulumi_kubernetes already sends camelCase inputs with apiVersion and kind; the
    recorder fills those from the type token when absent and turns integral floats back
    into ints. Components are recorded separately (`components`: type token -> names).
    """

    def __init__(self) -> None:
        self.manifests: list[dict[str, Any]] = []
        self.components: list[tuple[str, str]] = []
        # Pulumi resource name -> the provider reference it was registered with.
        self.providers: dict[str, str | None] = {}
        self.registered: dict[tuple[str, str | None], dict[str, Any]] = {}
        # Pulumi resource name -> the options it was registered with (the mocks see no options;
        # a stack transformation, which runs in the program's process, does).
        self.options: dict[str, pulumi.ResourceOptions] = {}

    def record_options(self, args: pulumi.ResourceTransformationArgs) -> None:
        self.options[args.name] = args.opts

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
        if args.typ.startswith("kubernetes:") and args.custom:
            api_version, kind = _api_version(args.typ)
            manifest = {"apiVersion": api_version, "kind": kind, **_ints(dict(args.inputs))}
            self.manifests.append(manifest)
            # As registered, secret markers included, for tests of what is sent as a secret.
            self.registered[(kind, manifest.get("metadata", {}).get("name"))] = dict(args.inputs)
            self.providers[args.name] = args.provider
        elif not args.custom:
            self.components.append((args.typ, args.name))
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]] | None]:
        return {}, None

    def find(self, kind: str, name: str) -> dict[str, Any]:
        """The one recorded manifest of `kind` with metadata.name `name`."""
        found = [m for m in self.manifests if m["kind"] == kind and m.get("metadata", {}).get("name") == name]
        if len(found) != 1:
            have = sorted(f"{m['kind']}/{m.get('metadata', {}).get('name')}" for m in self.manifests)
            raise AssertionError(f"expected one {kind}/{name}, found {len(found)}; recorded: {have}")
        return found[0]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.manifests if m["kind"] == kind]


def collect_manifests(
    build: Callable[[], Any], *, project: str = "tuist-infra", stack: str = "test"
) -> ManifestRecorder:
    """Run `build` (which registers resources) under Pulumi mocks; return what it registered.

    Anything `build` returns (e.g. a component's Outputs) is awaited, so assertions on it
    can be made in `build` itself via `.apply`.
    """
    recorder = ManifestRecorder()
    pulumi.runtime.set_mocks(recorder, project=project, stack=stack, preview=False)

    @pulumi.runtime.test  # type: ignore[misc]
    def run() -> Any:
        pulumi.runtime.register_stack_transformation(recorder.record_options)
        return build()

    run()
    return recorder
