"""Every file under tests/config/bad/ is a valid stack with one mistake (a few for the
multi-problem cases) and the exact lines the loader must print for it."""

from __future__ import annotations

import pytest

from config.loader import ConfigError, load_from_pulumi, load_stack_config, required_secret_keys
from tests.config.stacks import BadCase, corpus, stack_raw
from tests.config.test_loader import use_stack

CASES = corpus()


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize("base", sorted({c.base for c in CASES}))
def test_every_base_is_valid(base: str) -> None:
    # A case proves its mistake only if the stack it starts from loads.
    load_stack_config(stack_raw(base))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_config_reports_exactly_the_expected_lines(case: BadCase) -> None:
    if case.unset_secrets:
        # The stack file itself is fine; the secret is missing from the stack's config.
        cfg = load_stack_config(case.raw)
        secrets = {key: f"set-{key}" for key in required_secret_keys(cfg) if key not in case.unset_secrets}
        use_stack(case.base, case.raw, secrets=secrets)
        with pytest.raises(ConfigError) as err:
            load_from_pulumi()
    else:
        with pytest.raises(ConfigError) as err:
            load_stack_config(case.raw, stack=case.stack)
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
