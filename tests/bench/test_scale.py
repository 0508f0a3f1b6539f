"""bench/scale.py grows every stack file into a config the program accepts, N times the size."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.scale import GROWN, grow
from config.loader import load_stack_config, read_stack_file

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("env", ["dev", "staging", "canary", "production"])
def test_a_grown_stack_file_is_a_valid_config_of_n_times_everything(env: str) -> None:
    raw = read_stack_file(REPO / f"Pulumi.{env}.yaml")
    grown = grow(raw, 3)
    load_stack_config(grown)  # raises, naming every problem, if a copy breaks a rule
    for key in GROWN:
        assert len(grown.get(key) or []) == 3 * len(raw.get(key) or []), key
    # Copy 1 keeps the original names: a grown stack's first copy is the stack itself.
    assert grown["regions"][: len(raw["regions"])] == raw["regions"]


def test_a_stack_grows_by_at_least_one() -> None:
    with pytest.raises(ValueError, match="times must be at least 1, not 0"):
        grow({}, 0)
