"""components/kube: the typed Kubernetes SDK's classes without its import, held to the SDK itself.

The whole program of every stack file runs under mocks twice, once with the SDK's own typed classes
and once with components/kube's, and the engine must receive the same registrations: tokens, names,
parents, properties (secrets included), property dependencies, provider versions, aliases and
secret outputs. Only where the resource was declared (source position, stack trace) is left out.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes
import pytest
from google.protobuf import json_format
from pulumi.runtime import mocks as sdk_mocks

import components
from components import kube
from components.kube.base import KubeArgs, translate
from tests.support.new_process import run_python
from tests.test_program import ProgramMocks, run_program

REPO = Path(__file__).resolve().parents[2]


def registrations(
    env: str, monkeypatch: pytest.MonkeyPatch, numbers: dict[str, int], *, typed_sdk: bool
) -> dict[tuple[str, str], Any]:
    """(type, name) -> what the engine was asked to register, for `env`'s whole program."""
    seen: dict[tuple[str, str], Any] = {}
    register = sdk_mocks.MockMonitor.RegisterResource

    def recording(self: Any, request: Any) -> Any:
        sent = json_format.MessageToDict(request)
        for where in ("sourcePosition", "stackTrace"):
            sent.pop(where, None)
        # Dependencies are a set the SDK sends in its sets' order, which differs from run to run.
        sent["dependencies"] = sorted(sent.get("dependencies", []))
        for deps in sent.get("propertyDependencies", {}).values():
            deps["urns"] = sorted(deps.get("urns", []))
        key = (request.type, request.name)
        assert key not in seen, f"{key} registered twice"
        # The stack's own resource: registered by the first program a test process runs, only.
        if request.type != "pulumi:pulumi:Stack":
            seen[key] = sent
        return register(self, request)

    with monkeypatch.context() as patch:
        patch.setattr(sdk_mocks.MockMonitor, "RegisterResource", recording)
        if typed_sdk:
            patch.setattr(components, "kube", pulumi_kubernetes)
            for name, module in list(sys.modules.items()):
                if name.startswith("components.") and getattr(module, "k8s", None) is kube:
                    patch.setattr(module, "k8s", pulumi_kubernetes)
        run_program(env, mocks=ProgramMocks(numbers))
    return seen


@pytest.mark.parametrize("env", ["dev", "staging", "canary", "production"])
def test_the_engine_receives_what_the_typed_sdk_sends(env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Boxes numbered by name, not in the order registered (which differs between the two runs).
    first = run_program(env)
    names = sorted([*first.claims, *(m["name"] for m in first.machines)])
    numbers = {name: n for n, name in enumerate(names, start=1)}
    typed = registrations(env, monkeypatch, numbers, typed_sdk=True)
    ours = registrations(env, monkeypatch, numbers, typed_sdk=False)

    kubernetes = [key for key in typed if key[0].startswith("kubernetes:")]
    assert len(kubernetes) > 20
    assert sorted(ours) == sorted(typed)
    differing = [key for key, request in typed.items() if ours[key] != request]
    assert not differing, _first_difference(typed[differing[0]], ours[differing[0]], str(differing[0]))


def _first_difference(want: Any, got: Any, path: str) -> str:
    if isinstance(want, dict) and isinstance(got, dict):
        for key in sorted({*want, *got}):
            if want.get(key) != got.get(key):
                return _first_difference(want.get(key), got.get(key), f"{path}.{key}")
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            if w != g:
                return _first_difference(w, g, f"{path}[{i}]")
    return f"{path}: the typed SDK sends {want!r}, components/kube {got!r}"


def test_the_generated_classes_match_the_installed_sdk() -> None:
    """components/kube/api.py and types.py are what the generator writes from the SDK installed now
    (a new pulumi-kubernetes, or a class newly named in components/, needs a regeneration)."""
    check = [sys.executable, str(REPO / "scripts" / "generate_kube_api.py"), "--check"]
    done = subprocess.run(check, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr


def test_an_args_field_the_sdk_does_not_have_is_refused() -> None:
    with pytest.raises(TypeError, match=r"ContainerArgs: unexpected field\(s\) imagePullPolicy"):
        kube.core.v1.ContainerArgs(name="kura", imagePullPolicy="Always")


def test_a_resource_input_the_sdk_does_not_have_is_refused() -> None:
    with pytest.raises(TypeError, match=r"ConfigMap kura: unexpected input\(s\) value"):
        kube.core.v1.ConfigMap("kura", value={"a": "b"})


def test_fields_take_the_sdks_pulumi_names_and_a_dict_is_translated_by_its_fields_type() -> None:
    port = kube.core.v1.ContainerPortArgs(container_port=7070, host_ip="127.0.0.1", name=None)
    assert port == {"containerPort": 7070, "hostIP": "127.0.0.1"}
    spec = translate(
        {"cluster_ip": "None", "ports": [{"target_port": 80, "port": 80}]}, "core.v1.ServiceSpecArgs"
    )
    assert spec == {"clusterIP": "None", "ports": [{"targetPort": 80, "port": 80}]}
    # Keys that are already Pulumi names, and user maps (labels), are left as they are.
    meta = translate({"labels": {"node_pool": "x"}, "ownerReferences": []}, "meta.v1.ObjectMetaArgs")
    assert meta == {"labels": {"node_pool": "x"}, "ownerReferences": []}
    assert isinstance(kube.core.v1.EnvVarArgs(name="A", value="1"), KubeArgs)


def test_a_missing_required_property_is_refused_as_the_sdk_does() -> None:
    with pytest.raises(TypeError, match="Missing required property 'spec'"):
        kube.apps.v1.Deployment("kura")


def test_the_program_never_loads_the_typed_sdks_modules() -> None:
    """The point of components/kube: a run of the whole program loads none of pulumi_kubernetes's
    group/version modules (the package's lazy placeholders for them are all it sees) but meta/v1,
    which the SDK's own CustomResource reads its metadata's type from (17 ms; core/v1 is 750)."""
    code = (
        "import sys\n"
        "from tests.test_program import run_program\n"
        "run_program('production')\n"
        "print(sorted({m.rsplit('.', 1)[0] for m in sys.modules\n"
        "              if m.startswith('pulumi_kubernetes.') and m.count('.') >= 3}))\n"
    )
    assert run_python(code).strip().splitlines()[-1] == "['pulumi_kubernetes.meta.v1']"


def test_a_dict_an_output_resolves_to_is_translated_by_its_fields_type() -> None:
    async def resolved() -> tuple[Any, bool]:
        spec = translate(pulumi.Output.secret({"cluster_ip": "None"}), "core.v1.ServiceSpecArgs")
        return await spec.future(), await spec.is_secret()

    # A loop of its own, not asyncio.run: that one leaves the thread without a current loop, and a
    # later test of this worker that builds an Output outside any loop then fails.
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(resolved()) == ({"clusterIP": "None"}, True)
    finally:
        loop.close()


def test_a_field_reads_by_its_python_name_as_the_typed_sdks_getter_does() -> None:
    meta = kube.meta.v1.ObjectMetaArgs(name="kura", labels={"a": "b"})
    assert (meta.name, meta.labels, meta.namespace) == ("kura", {"a": "b"}, None)
    port = kube.core.v1.ContainerPortArgs(container_port=7070, host_ip="127.0.0.1")
    assert (port.container_port, port.host_ip) == (7070, "127.0.0.1")
    with pytest.raises(AttributeError, match="ObjectMetaArgs has no field 'nmae'"):
        _ = meta.nmae
