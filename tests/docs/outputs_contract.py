"""The published outputs contract (docs/outputs.schema.json) and the runnable examples of docs/outputs.md.

Shared by the fast doc tests here and the end-to-end test on the S3 backend, which runs the
examples against a real stack: an example in the docs that stops working fails a test.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "docs" / "outputs.schema.json"
OUTPUTS_DOC = REPO / "docs" / "outputs.md"

# An example is the fenced block right after `<!-- example: <name> -->`.
_EXAMPLE = re.compile(r"<!-- example: (?P<name>[a-z0-9-]+) -->\s*```[a-z]*\n(?P<code>.*?)```", re.DOTALL)


@cache
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA.read_text())
    return loaded


def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema(), format_checker=jsonschema.FormatChecker())


def schema_errors(outputs: Any) -> list[str]:
    """Every way `outputs` breaks the schema, as '<path>: <message>' lines ([] when it conforms)."""
    return sorted(
        f"{'/'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in validator().iter_errors(outputs)
    )


def examples() -> dict[str, str]:
    found = {m["name"]: m["code"] for m in _EXAMPLE.finditer(OUTPUTS_DOC.read_text())}
    return found
