"""Every file under tests/config/bad/ is a valid stack with one mistake (a few for the
multi-problem cases) and the exact lines the loader must print for it."""

from __future__ import annotations

import pytest

from config.loader import ConfigError, load_stack_config
from tests.config.stacks import BadCase, corpus, stack_raw

CASES = corpus()


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize("base", sorted({c.base for c in CASES}))
def test_every_base_is_valid(base: str) -> None:
    # A case proves its mistake only if the stack it starts from loads.
    load_stack_config(stack_raw(base))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_config_reports_exactly_the_expected_lines(case: BadCase) -> None:
    with pytest.raises(ConfigError) as err:
        load_stack_config(case.raw)
    assert err.value.problems == case.expected, case.why


def test_secret_values_are_never_echoed() -> None:
    by_name = {c.name: c for c in CASES}
    for name, value in [
        ("49-secret-in-plain-text", "hunter2-not-a-real-password"),
        ("50-secret-pasted-into-a-field", "s3cr3t-value-never-printed"),
    ]:
        with pytest.raises(ConfigError) as err:
            load_stack_config(by_name[name].raw)
        assert value not in str(err.value)
        assert all(value not in line for line in err.value.problems)
