"""The loader's contract: every problem at once, in file order; the pulumi.Config path with
secrets checked by presence only; fail() ends the program with code 32 and no traceback."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi.runtime.sync_await import _sync_await

from config.loader import SECRET_KEYS, ConfigError, load_from_pulumi, load_stack_config, read_stack_file
from config.models import StackConfig
from config.problems import Problem, format_loc, ordered_lines
from tests.config.stacks import REPO, stack_raw, with_robot_regions

SECRET_VALUES = {key: f"value-of-{key}-do-not-print" for key in SECRET_KEYS}


def test_three_problems_are_all_reported_in_file_order() -> None:
    raw = copy.deepcopy(stack_raw("production"))
    raw["kura"]["runtime_image_tag"] = "latest"  # last in the file
    raw["regions"][2]["fleet"] = "kura-x"
    raw["fleets"][0]["marker"] = "tuist-kura-prod"  # first in the file
    with pytest.raises(ConfigError) as err:
        load_stack_config(raw)
    assert err.value.problems == [
        "fleets[0].marker: 'tuist-kura-prod' does not contain the environment name 'production' "
        "(the marker is the environment boundary at the vendor)",
        "regions[2].fleet: unknown fleet 'kura-x' "
        "(known: kura-dedibox, kura-us-east, kura-us-west, runners-linux)",
        "kura.runtime_image_tag: 'latest' is a floating tag; pin a release (e.g. 0.10.5) outside dev",
    ]
    assert str(err.value).startswith("3 config problems:\n")


def test_schema_and_cross_field_problems_come_out_together() -> None:
    raw = copy.deepcopy(stack_raw("staging"))
    raw["fleets"][0]["taints"][0]["effect"] = "Never"
    raw["regions"][1]["host"] = "ca-east.kura.tuist.dev"
    with pytest.raises(ConfigError) as err:
        load_stack_config(raw)
    assert err.value.problems == [
        "fleets[0].taints[0].effect: must be one of: NoSchedule, PreferNoSchedule, NoExecute (got 'Never')",
        "regions[1].host: 'ca-east.kura.tuist.dev' should be 'ca-east.staging.kura.tuist.dev' "
        "(<region>.<env>.kura.tuist.dev outside production)",
    ]


def test_paths_format_indexes_fields_and_dict_keys() -> None:
    assert format_loc(("fleets", 1, "taints", 0, "effect")) == "fleets[1].taints[0].effect"
    assert format_loc(("fleets", 0, "labels", "tuist.dev/x", "[key]")) == "fleets[0].labels['tuist.dev/x']"
    assert format_loc(("vendors", "ovh", "endpoint")) == "vendors.ovh.endpoint"
    assert format_loc(("secrets", "kubeconfig")) == "secrets.kubeconfig"


def test_problems_sort_by_model_field_order_then_index() -> None:
    lines = ordered_lines(
        [
            Problem(("secrets", "robotPassword"), "s"),
            Problem(("cluster", "api_server"), "c"),
            Problem(("regions", 10, "host"), "r10"),
            Problem(("regions", 2, "host"), "r2"),
            Problem(("environment",), "e"),
            Problem(("regions", 2, "fleet"), "r2f"),
        ]
    )
    assert lines == [
        "environment: e",
        "regions[2].fleet: r2f",
        "regions[2].host: r2",
        "regions[10].host: r10",
        "cluster.api_server: c",
        "secrets.robotPassword: s",
    ]


def test_not_a_mapping() -> None:
    with pytest.raises(ConfigError) as err:
        load_stack_config(["environment", "staging"])  # type: ignore[arg-type]
    assert err.value.problems == ["<stack config>: must be a mapping of tuist-infra:<key> entries"]


# --- through pulumi.Config ----------------------------------------------------


class _Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        return args.name, dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        return {}, []


def use_stack(
    stack: str,
    raw: dict[str, Any],
    secrets: dict[str, str] | None = None,
    plain: dict[str, str] | None = None,
) -> None:
    """Config as the language host hands it over: strings, structured values as JSON."""
    pulumi.runtime.set_mocks(_Mocks(), project="tuist-infra", stack=stack, preview=False)
    config = {f"tuist-infra:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
    config["kubernetes:context"] = "ignored-other-namespace"
    for key, value in {**(secrets or {}), **(plain or {})}.items():
        config[f"tuist-infra:{key}"] = value
    pulumi.runtime.set_all_config(config, [f"tuist-infra:{k}" for k in secrets or {}])


def test_load_from_pulumi_matches_the_stack_file_path() -> None:
    use_stack("production", stack_raw("production"), secrets=SECRET_VALUES)
    cfg, secrets = load_from_pulumi()
    assert cfg == load_stack_config(stack_raw("production"))
    for field in ("ovh_consumer_key", "robot_password", "fleet_sudo_password", "kubeconfig"):
        out = getattr(secrets, field)
        assert isinstance(out, pulumi.Output)
        assert _sync_await(out.is_secret()) is True
    assert _sync_await(secrets.kubeconfig.future()) == SECRET_VALUES["kubeconfig"]


def test_dev_rendering_manifests_reads_no_kubeconfig() -> None:
    dev_secrets = {k: v for k, v in SECRET_VALUES.items() if k != "kubeconfig"}
    raw = stack_raw("dev")
    # The dev stack's other mode: manifests written to a folder for reading, no cluster at all.
    raw["cluster"] = {**{k: v for k, v in raw["cluster"].items() if k != "api_server"}, "render_dir": "r"}
    use_stack("dev", raw, secrets=dev_secrets)
    cfg, secrets = load_from_pulumi()
    assert cfg.cluster.api_server is None
    assert secrets.kubeconfig is None


def test_missing_and_plain_text_secrets_are_problems_without_their_values() -> None:
    unset = ("ovhConsumerKey", "kubeconfig", "robotPassword")
    present = {k: v for k, v in SECRET_VALUES.items() if k not in unset}
    use_stack("staging", stack_raw("staging"), secrets=present, plain={"robotPassword": "plain-robot-pw"})
    with pytest.raises(ConfigError) as err:
        load_from_pulumi()
    assert err.value.problems == [
        "secrets.ovhConsumerKey: not set (pulumi config set --secret ovhConsumerKey ... -s staging)",
        "secrets.robotPassword: stored in plain text; "
        "re-set it with pulumi config set --secret robotPassword ... -s staging",
        "secrets.kubeconfig: not set (pulumi config set --secret kubeconfig ... -s staging)",
    ]
    text = str(err.value)
    assert "plain-robot-pw" not in text
    assert not any(value in text for value in SECRET_VALUES.values())


def test_config_and_secret_problems_and_unknown_keys_are_reported_together() -> None:
    raw = copy.deepcopy(stack_raw("canary"))
    raw["regionz"] = []
    raw["allow_production_release"] = "maybe"
    secrets = {k: v for k, v in SECRET_VALUES.items() if k != "fleetSudoPassword"}
    use_stack("canary", raw, secrets=secrets)
    with pytest.raises(ConfigError) as err:
        load_from_pulumi()
    assert err.value.problems == [
        "allow_production_release: must be true or false (got 'maybe')",
        "regionz: unknown config key (did you mean 'regions'?)",
        "secrets.fleetSudoPassword: not set (pulumi config set --secret fleetSudoPassword ... -s canary)",
    ]


# --- fail() -------------------------------------------------------------------


def _run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_fail_prints_the_lines_and_exits_32_without_a_traceback() -> None:
    result = _run("""
        from config.loader import fail
        fail(["fleets[0].marker: bad", "kura.runtime_image_tag: floating"])
        print("not reached")
    """)
    assert result.returncode == 32
    assert result.stdout == ""
    assert result.stderr == (
        "error: the tuist-infra stack config has 2 problems:\n"
        "  fleets[0].marker: bad\n"
        "  kura.runtime_image_tag: floating\n"
    )


def test_fail_inside_the_pulumi_program_runner_exits_32_without_a_traceback() -> None:
    # As pulumi-language-python-exec runs __main__: config from PULUMI_CONFIG, the program
    # inside run_pulumi_func (which catches BaseException, drains RPCs, re-raises) on the
    # runtime's event loop. run_in_stack itself would add a second root Stack under mocks.
    raw = copy.deepcopy(stack_raw("staging"))
    raw["fleets"][0]["marker"] = "tuist-kura-stg"
    config = {f"tuist-infra:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
    config.update({f"tuist-infra:{k}": v for k, v in SECRET_VALUES.items()})
    result = _run(
        """
        import asyncio
        import pulumi
        from pulumi.runtime import config as rc
        from config.loader import ConfigError, fail, load_from_pulumi

        class Mocks(pulumi.runtime.Mocks):
            def new_resource(self, args):
                return args.name, dict(args.inputs)
            def call(self, args):
                return {}, []

        pulumi.runtime.set_mocks(Mocks(), project="tuist-infra", stack="staging", preview=True)
        rc.set_all_config(rc.get_config_env(), rc.get_config_secret_keys_env())

        def program():
            try:
                load_from_pulumi()
            except ConfigError as err:
                fail(err.problems)

        from pulumi.runtime.stack import run_pulumi_func

        asyncio.get_event_loop().run_until_complete(run_pulumi_func(program))
        print("not reached")
        """,
        env={
            "PULUMI_CONFIG": json.dumps(config),
            "PULUMI_CONFIG_SECRET_KEYS": json.dumps([f"tuist-infra:{k}" for k in SECRET_VALUES]),
        },
    )
    assert result.returncode == 32, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        "error: the tuist-infra stack config has 1 problem:\n"
        "  fleets[0].marker: 'tuist-kura-stg' does not contain the environment name 'staging' "
        "(the marker is the environment boundary at the vendor)\n"
    )
    assert not any(value in result.stderr for value in SECRET_VALUES.values())


def test_get_object_falls_back_to_the_plain_string_for_pydantic_to_judge() -> None:
    raw = copy.deepcopy(stack_raw("staging"))
    raw["fleets"] = "kura-dedibox"  # a plain string where a list belongs: not JSON
    use_stack("staging", raw, secrets=SECRET_VALUES)
    with pytest.raises(ConfigError) as err:
        load_from_pulumi()
    assert err.value.problems[0] == "fleets: must be a list (got 'kura-dedibox')"
    assert isinstance(load_stack_config(stack_raw("staging")), StackConfig)


def test_stack_files_are_read_as_yaml_1_2_like_pulumi_reads_them(tmp_path: Path) -> None:
    """yes / no / on / off are strings in YAML 1.2 (Pulumi's reading): a switch written `yes` must be
    refused, not read as true the way YAML 1.1 would."""
    stack = tmp_path / "Pulumi.x.yaml"
    stack.write_text("config:\n  tuist-infra:allow_production_release: yes\n  tuist-infra:a: true\n")
    assert read_stack_file(stack) == {"allow_production_release": "yes", "a": True}


def test_the_environment_names_have_one_spelling() -> None:
    from config.models import Environment
    from providers.constants import ENVIRONMENTS

    assert tuple(e.value for e in Environment) == ENVIRONMENTS


def test_a_stack_file_that_is_not_yaml_is_one_problem_naming_the_file_and_line(tmp_path: Path) -> None:
    stack = tmp_path / "Pulumi.conflicted.yaml"
    stack.write_text("config:\n  tuist-infra:a: 1\n<<<<<<< HEAD\n  tuist-infra:b: 2\n")
    with pytest.raises(ConfigError) as raised:
        read_stack_file(stack)
    (problem,) = raised.value.problems
    assert problem.startswith(f"{stack}: not valid YAML (line 4, column "), problem


def test_the_config_refuses_the_floating_tags_the_policy_pack_refuses() -> None:
    from config.rules import FLOATING_TAGS
    from policy.tuist_policy.images import FLOATING_TAGS as POLICY_FLOATING_TAGS

    assert FLOATING_TAGS == POLICY_FLOATING_TAGS
    from config.rules import RELEASE_TAG, image_pin_problem
    from policy.tuist_policy.images import RELEASE_TAG as POLICY_RELEASE_TAG
    from policy.tuist_policy.images import floating_reason

    assert RELEASE_TAG.pattern == POLICY_RELEASE_TAG.pattern
    # Tags that may move under the same name: refused by both, naming the tag.
    for tag in ("alpine", "mainline", "lts", "v1", "1.27", "latest-amd64", "canary"):
        image = f"nginx:{tag}"
        assert (image_pin_problem(image) is None, floating_reason(image) is None) == (False, False), tag
    # One release, or one commit: accepted by both.
    for tag in ("0.10.5", "v1.13.3", "1.27.3-alpine", "2.1.0+build.7", "sha-0123abc"):
        image = f"nginx:{tag}"
        assert (image_pin_problem(image), floating_reason(image)) == (None, None), tag


def test_the_name_limits_the_config_checks_are_the_components_names() -> None:
    from components.external_dns import dns_namespace
    from components.failover_watcher import failover_namespace
    from components.gateway import gateway_name
    from config.rules import DNS_LABEL_MAX, DNS_NAMESPACE_SUFFIX, NAMESPACE_SUFFIX, REGION_SERVICE_PREFIX

    assert failover_namespace("kura") == "kura" + NAMESPACE_SUFFIX
    assert dns_namespace("kura") == "kura" + DNS_NAMESPACE_SUFFIX
    assert gateway_name("eu-central") == REGION_SERVICE_PREFIX + "eu-central"
    assert DNS_LABEL_MAX == 63


def test_a_robot_account_s_watcher_count_covers_at_least_the_stack_s_own() -> None:
    raw = with_robot_regions(stack_raw("dev"), 2)
    raw["vendors"]["robot"]["failover_watchers"] = 1
    with pytest.raises(ConfigError) as err:
        load_stack_config(raw, stack="dev")
    assert err.value.problems == [
        "vendors.robot.failover_watchers: 1 is fewer than this stack's own Robot failover watchers "
        "(2: eu-fsn0, eu-fsn1); count every stack's on this account"
    ]
    raw["vendors"]["robot"]["failover_watchers"] = 2
    load_stack_config(raw, stack="dev")


def test_a_service_network_in_the_shared_range_is_a_cluster_dns_address() -> None:
    # kops' default service network is 100.64.0.0/13: not RFC 1918, not global either.
    raw = stack_raw("staging")
    raw["cluster"]["dns_service_ip"] = "100.64.0.10"
    assert load_stack_config(raw, stack="staging").cluster.dns_service_ip == "100.64.0.10"
