"""bench/preview.py's SDK floors: the one beside the program's evaluation is the SDK as shipped, the
other the SDK with the program's own trims (components/sdk.py), each in a process of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def floor(*args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.preview", "_floor", "--resources", "40", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(("args", "trimmed"), [((), False), (("--trimmed",), True)])
def test_the_floor_is_the_sdk_as_shipped_or_with_the_programs_trims(
    args: tuple[str, ...], trimmed: bool
) -> None:
    result = floor(*args)
    assert result["trimmed"] is trimmed
    assert isinstance(result["evaluate_cpu_s"], float) and result["evaluate_cpu_s"] > 0
