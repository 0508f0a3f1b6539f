"""docs/outputs.md, docs/outputs.schema.json and components/outputs.py tell one story.

The program's outputs, built by components/outputs.py under Pulumi's mocks for every stack file,
conform to the published schema; the schema refuses documents that break the contract (so it is
not vacuous); the page documents every field the schema has; the page's examples are there and
parse. The examples run against a real stack in tests/e2e/test_s3_backend.py.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pulumi
import pytest

import components.outputs as outputs_module
from tests.docs.outputs_contract import OUTPUTS_DOC, examples, schema, schema_errors
from tests.test_program import run_program


def program_outputs(env: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    resolved: list[dict[str, Any]] = []

    def capture(outputs: dict[str, Any]) -> None:
        pulumi.Output.from_input(dict(outputs)).apply(resolved.append)

    monkeypatch.setattr(outputs_module, "export_outputs", capture)
    run_program(env)
    assert len(resolved) == 1, "the program should export its outputs once"
    return resolved[0]


@pytest.fixture(scope="module")
def production_outputs() -> dict[str, Any]:
    with pytest.MonkeyPatch.context() as mp:
        return program_outputs("production", mp)


@pytest.mark.parametrize("env", ["dev", "staging", "canary", "production"])
def test_each_stack_s_outputs_conform_to_the_published_schema(
    env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = program_outputs(env, monkeypatch)
    assert outputs["environment"] == env
    assert schema_errors(outputs) == []


def test_the_schema_version_is_the_program_s() -> None:
    # Bumping one without the other would publish a schema for outputs nobody produces.
    assert schema()["properties"]["outputs_version"]["const"] == outputs_module.OUTPUTS_VERSION


def _broken(outputs: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(outputs)
    target = doc
    for step in path[:-1]:
        target = target[step]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "error"),
    [
        (("outputs_version",), 2, "outputs_version: 1 was expected"),
        (("capacity",), KeyError, "<root>: 'capacity' is a required property"),
        (
            ("secrets",),
            {"robotPassword": "x"},
            "Additional properties are not allowed ('secrets' was unexpected)",
        ),
        (("regions", "us-east", "failover_ip"), "198.51.100.999", "regions/us-east/failover_ip"),
        (
            ("fleets", "kura-us-east", "machines", 0, "provider_id"),
            KeyError,
            "'provider_id' is a required property",
        ),
        # Money is an exact decimal string, never a float.
        (("capacity", "total", "monthly_eur"), 847.0, "capacity/total/monthly_eur: 847.0 is not of type"),
        (("capacity", "total", "monthly_eur"), "847", "capacity/total/monthly_eur: '847' does not match"),
        (("environment",), "prod", "environment: 'prod' is not one of"),
    ],
)
def test_the_schema_refuses_documents_that_break_the_contract(
    production_outputs: dict[str, Any], path: tuple[Any, ...], value: Any, error: str
) -> None:
    errors = schema_errors(_broken(production_outputs, path, value))
    assert any(error in e for e in errors), errors


def _documented_keys() -> set[str]:
    # Every `name` written in the page's tables (a key column, or a cell listing a row's fields).
    keys: set[str] = set()
    for line in OUTPUTS_DOC.read_text().splitlines():
        if line.startswith("| `"):
            keys.update(re.findall(r"`([a-z_0-9]+)", line))
    return keys


def test_the_page_documents_every_field_of_the_schema() -> None:
    defs = schema()["$defs"]
    capacity = defs["capacity"]["properties"]
    fields = {
        *schema()["properties"],
        *defs["region"]["properties"],
        *defs["fleet"]["properties"],
        *defs["machine"]["properties"],
        *capacity["fleets"]["additionalProperties"]["properties"],
        *capacity["runner_pools"]["additionalProperties"]["properties"],
        *capacity["total"]["properties"],
    }
    missing = sorted(fields - _documented_keys())
    assert missing == [], f"docs/outputs.md does not document {missing}"


def test_the_page_has_its_two_runnable_examples() -> None:
    found = examples()
    assert sorted(found) == ["consumer-program", "consumer-script"]
    for name, code in found.items():
        compile(code, f"docs/outputs.md:{name}", "exec")
    assert "pulumi.StackReference" in found["consumer-program"]
    assert "import pulumi" not in found["consumer-script"], "the plain script must not need the Pulumi SDK"
