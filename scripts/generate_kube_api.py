"""Write components/kube/types.py and api.py from the installed pulumi_kubernetes.

    .venv/bin/python scripts/generate_kube_api.py          # rewrite both files
    .venv/bin/python scripts/generate_kube_api.py --check  # exit 1 if either is stale (the tests run this)

The program's sources name the classes (`k8s.<group>.<version>.<Class>` in components/ and
__main__.py); this reads each one's metadata from the typed SDK, the only place the SDK is
imported: an input type's fields, their Pulumi names where they are not the plain camelCase of
the Python name (hostIP, openAPIV3Schema, $ref), the input types of its fields (to translate a
dict given for one) and its required fields; a resource's token, properties, constants, outputs,
secret properties, aliases and secret outputs, read from its `_internal_init`.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import re
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HERE = REPO / "components" / "kube"
# Names the program uses that stay the SDK's own classes (components/kube/__init__.py).
KEPT = {("apiextensions", "CustomResource")}
_USE = re.compile(r"\bk8s\.([a-z0-9_]+(?:\.[a-z0-9_]+)*)\.([A-Z][A-Za-z0-9]+)\b")


def used_names() -> set[tuple[str, ...]]:
    sources = [REPO / "__main__.py", *sorted((REPO / "components").rglob("*.py"))]
    found: set[tuple[str, ...]] = set()
    for source in sources:
        if HERE in source.parents:
            continue
        found.update(m.groups() for m in _USE.finditer(source.read_text()))
    return found - KEPT


def _key(cls: type) -> str:
    """'core.v1.ContainerArgs' for pulumi_kubernetes.core.v1._inputs.ContainerArgs."""
    module = cls.__module__.removeprefix("pulumi_kubernetes.").split(".")
    return ".".join([*[m for m in module if not m.startswith("_") and m != cls.__name__], cls.__name__])


def _input_types_in(hint: Any, types: Any) -> list[type]:
    """The input types a field's hint names (Input[...] repeats the same one several times)."""
    if isinstance(hint, type) and types.is_input_type(hint):
        return [hint]
    found: list[type] = [t for arg in typing.get_args(hint) for t in _input_types_in(arg, types)]
    return list(dict.fromkeys(found))


# components/kube/base.py's rule, written again: the generator must not import the package whose
# files it writes (a stale or broken api.py would stop the run that repairs it).
def _camel(py_name: str) -> str:
    head, *rest = py_name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _describe_input(
    cls: type, types: Any
) -> tuple[list[str], dict[str, str], dict[str, str], list[str], list[type]]:
    names: dict[str, str] = types.input_type_py_to_pulumi_names(cls)
    nested: dict[str, str] = {}
    reached: list[type] = []
    for pulumi_name, hint in types.input_type_types(cls).items():
        found = _input_types_in(hint, types)
        if len(found) > 1:
            raise SystemExit(f"{_key(cls)}.{pulumi_name}: more than one input type ({found})")
        if found:
            nested[pulumi_name] = _key(found[0])
            reached.append(found[0])
    params = inspect.signature(cls.__init__).parameters.values()  # type: ignore[misc]
    required = [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty]
    irregular = {py: name for py, name in names.items() if _camel(py) != name}
    return sorted(names), irregular, nested, sorted(required), reached


_ASSIGN = re.compile(r'__props__\.__dict__\["(\w+)"\] = (.+)$', re.M)
_REQUIRED = re.compile(r"raise TypeError\(\"Missing required property '(\w+)'\"\)")
_TOKEN = re.compile(r"__init__\(\s*'([^']+)',\s*resource_name,")
_ALIAS = re.compile(r'pulumi\.Alias\(type_="([^"]+)"\)')
_SECRET_OUTPUTS = re.compile(r"additional_secret_outputs=\[([^\]]*)\]")


def _describe_resource(cls: type, types: Any) -> tuple[dict[str, Any], list[type]]:
    source = inspect.getsource(cls._internal_init)  # type: ignore[attr-defined]
    init_args = getattr(sys.modules[cls.__module__], f"{cls.__name__}InitArgs")
    names: dict[str, str] = types.input_type_py_to_pulumi_names(init_args)
    hints = types.input_type_types(init_args)
    props, constants, outputs_only, secret, reached = [], {}, [], [], []
    for py, expr in _ASSIGN.findall(source):
        name = names.get(py) or _camel(py)  # an output (status) is not among the inputs
        found = _input_types_in(hints.get(name), types)
        props.append((py, name, _key(found[0]) if found else None))
        reached.extend(found)
        if re.fullmatch(r"'[^']*'", expr):
            constants[py] = expr.strip("'")
        elif expr == "None":
            outputs_only.append(py)
        elif expr == f"None if {py} is None else pulumi.Output.secret({py})":
            secret.append(py)
        elif expr != py:
            raise SystemExit(f"{_key(cls)}: no rule for `{py} = {expr}` (scripts/generate_kube_api.py)")
    token = _TOKEN.search(source)
    if token is None:
        raise SystemExit(f"{_key(cls)}: no resource token in its _internal_init")
    secret_outputs = _SECRET_OUTPUTS.search(source)
    described = {
        "token": token.group(1),
        "props": props,
        "constants": constants,
        "outputs_only": outputs_only,
        "secret": secret,
        "required": _REQUIRED.findall(source),
        "aliases": _ALIAS.findall(source),
        "secret_outputs": json.loads(f"[{secret_outputs.group(1)}]") if secret_outputs else [],
    }
    return described, reached


def render() -> dict[str, str]:
    """The two files' text, from the installed SDK."""
    import pulumi
    from pulumi import _types as types

    sdk = importlib.import_module("pulumi_kubernetes")
    version = json.loads((Path(str(sdk.__file__)).parent / "pulumi-plugin.json").read_text())["version"]
    args_types: dict[str, tuple[Any, ...]] = {}
    resources: dict[str, dict[str, Any]] = {}
    todo: list[type] = []
    for path, name in sorted(used_names()):
        cls = getattr(importlib.import_module(f"pulumi_kubernetes.{path}"), name)
        if isinstance(cls, type) and issubclass(cls, pulumi.CustomResource):
            resources[f"{path}.{name}"], reached = _describe_resource(cls, types)
            todo.extend(reached)
        elif isinstance(cls, type) and types.is_input_type(cls):
            todo.append(cls)
        else:
            raise SystemExit(f"k8s.{path}.{name}: neither a resource nor an input type")
    while todo:
        cls = todo.pop()
        if _key(cls) in args_types:
            continue
        *described, reached = _describe_input(cls, types)
        args_types[_key(cls)] = tuple(described)
        todo.extend(reached)
    header = f'"""Generated by scripts/generate_kube_api.py from pulumi-kubernetes {version}."""\n\n'
    lines = [header, "from __future__ import annotations\n\n"]
    lines.append(f'PLUGIN_VERSION = "{version}"\n\n')
    lines.append("# input type -> (Python names, Pulumi names that are not their camelCase, input types of\n")
    lines.append("# fields by Pulumi name, required Python names)\n")
    lines.append(
        "TYPES: dict[str, tuple[frozenset[str], dict[str, str], dict[str, str], frozenset[str]]] = {\n"
    )
    for key in sorted(args_types):
        fields, irregular, nested, required = args_types[key]
        lines.append(
            f'    "{key}": (frozenset({fields!r}), {irregular!r}, {nested!r}, frozenset({required!r})),\n'
        )
    lines.append("}\n")
    types_text = "".join(lines).replace("frozenset([])", "frozenset()")

    tree: dict[str, dict[str, list[str]]] = {path: {} for path, _ in KEPT}
    for key in sorted({*resources, *(k for k in args_types if tuple(k.rsplit(".", 1)) in used_names())}):
        path, name = key.rsplit(".", 1)
        group, version_name = path.split(".")
        tree.setdefault(group, {}).setdefault(version_name, []).append(name)
    out = [header, "from __future__ import annotations\n\n", "from typing import TypeAlias\n\n"]
    for path, name in sorted(KEPT):
        out.append(f"from pulumi_kubernetes.{path} import {name} as _{name}\n\n")
    out.append("from components.kube.base import KubeArgs, KubeResource\n\n")
    for group in sorted(tree):
        out.append(f"\nclass {group}:\n")
        for path, name in sorted(KEPT):
            if path == group:
                out.append(f"    {name}: TypeAlias = _{name}  # the SDK's own\n\n")
        for version_name in sorted(tree[group]):
            out.append(f"    class {version_name}:\n")
            for name in tree[group][version_name]:
                key = f"{group}.{version_name}.{name}"
                if key in resources:
                    r = resources[key]
                    out.append(f"        class {name}(KubeResource):\n")
                    out.append(f'            TOKEN = "{r["token"]}"\n')
                    out.append(f"            PROPS = {tuple(r['props'])!r}\n")
                    for attr, value in (
                        ("CONSTANTS", r["constants"] or None),
                        ("OUTPUTS_ONLY", _frozen(r["outputs_only"])),
                        ("SECRET", _frozen(r["secret"])),
                        ("REQUIRED", _frozen(r["required"])),
                        ("ALIASES", tuple(r["aliases"]) or None),
                        ("SECRET_OUTPUTS", tuple(r["secret_outputs"]) or None),
                    ):
                        if value:
                            out.append(f"            {attr} = {value}\n")
                else:
                    out.append(f"        class {name}(KubeArgs):\n")
                    out.append(f'            TYPE = "{key}"\n')
                out.append("\n")
    api_text = "".join(out).rstrip("\n") + "\n"
    return {"types.py": _formatted(types_text), "api.py": _formatted(api_text)}


def _formatted(text: str) -> str:
    """`text` as `ruff format` leaves it (the project's formatter), so a format run changes nothing."""
    ruff = [sys.executable, "-m", "ruff", "format", "--config", str(REPO / "pyproject.toml"), "-"]
    return subprocess.run(ruff, input=text, text=True, capture_output=True, check=True).stdout


def _frozen(names: list[str]) -> str | None:
    return f"frozenset({sorted(names)!r})" if names else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated file is stale")
    args = parser.parse_args()
    stale = []
    for name, text in render().items():
        path = HERE / name
        if path.exists() and path.read_text() == text:
            continue
        stale.append(name)
        if not args.check:
            path.write_text(text)
    if args.check and stale:
        raise SystemExit(
            f"components/kube/{', '.join(stale)} stale: run .venv/bin/python scripts/generate_kube_api.py"
        )
    print("components/kube: " + (f"rewrote {', '.join(stale)}" if stale else "up to date"))


if __name__ == "__main__":
    main()
