"""Load a stack's `tuist-infra:*` config into a StackConfig, or say everything that is wrong.

This is the only module that reads `pulumi.Config`. A bad stack fails here, before
any resource is registered, with one line per problem (`fleets[1].marker: ...`)
in stack-file order; `fail()` prints them and ends the program with the language
host's "already told the user" exit code, so there is no traceback.

Secrets are never part of StackConfig: they are read as pulumi secrets into
`Secrets`, and only their presence is checked, never their value shown.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import yaml
from pydantic import ValidationError

from config.models import Cluster, Environment, FailoverIP, Fleet, StackConfig, Vendor
from config.problems import SECRETS_SECTION, ConfigError, Problem, from_validation_error, ordered_lines
from config.rules import View, build_view, cross_field_problems
from config.text import quote
from providers.lazy import lazy_module

# The Pulumi SDK only for load_from_pulumi (the program): the operator's CLI, the watcher and the
# config tests read stack files and never pay its import (most of a short CLI command's start).
if TYPE_CHECKING:
    import pulumi
    from pulumi.runtime import config as pulumi_runtime_config
else:
    pulumi = lazy_module("pulumi")
    pulumi_runtime_config = lazy_module("pulumi.runtime.config")

# One home for the project name and the secret keys (in the order required_secret_keys reports).
from providers.constants import (
    CLOUDFLARE_API_TOKEN,
    DEDIBOX_SECRET_KEY,
    FLEET_SSH_PRIVATE_KEY,
    FLEET_SUDO_PASSWORD,
    HCLOUD_TOKEN,
    KUBECONFIG,
    OVH_APPLICATION_SECRET,
    OVH_CONSUMER_KEY,
    PROJECT,
    ROBOT_PASSWORD,
    SCALEWAY_SECRET_KEY,
    SECRET_KEYS,
)

__all__ = [
    "PROJECT",
    "SECRET_KEYS",
    "ConfigError",
    "Secrets",
    "fail",
    "load_from_pulumi",
    "load_secrets",
    "load_stack_config",
    "read_stack_file",
    "required_secret_keys",
]


# The language host reads 32 as "the program already showed the user an actionable
# message": it bails without adding "Program exited with non-zero exit code".
EXIT_ALREADY_REPORTED = 32


@dataclass(frozen=True)
class Secrets:
    """The stack's secrets as pulumi secret Outputs; None where the stack does not need one."""

    ovh_application_secret: pulumi.Output[str] | None = None
    ovh_consumer_key: pulumi.Output[str] | None = None
    dedibox_secret_key: pulumi.Output[str] | None = None
    robot_password: pulumi.Output[str] | None = None
    scaleway_secret_key: pulumi.Output[str] | None = None
    fleet_ssh_private_key: pulumi.Output[str] | None = None
    fleet_sudo_password: pulumi.Output[str] | None = None
    kubeconfig: pulumi.Output[str] | None = None
    cloudflare_api_token: pulumi.Output[str] | None = None
    hcloud_token: pulumi.Output[str] | None = None


_SECRET_FIELDS = {
    OVH_APPLICATION_SECRET: "ovh_application_secret",
    OVH_CONSUMER_KEY: "ovh_consumer_key",
    DEDIBOX_SECRET_KEY: "dedibox_secret_key",
    ROBOT_PASSWORD: "robot_password",
    SCALEWAY_SECRET_KEY: "scaleway_secret_key",
    FLEET_SSH_PRIVATE_KEY: "fleet_ssh_private_key",
    FLEET_SUDO_PASSWORD: "fleet_sudo_password",
    KUBECONFIG: "kubeconfig",
    CLOUDFLARE_API_TOKEN: "cloudflare_api_token",
    HCLOUD_TOKEN: "hcloud_token",
}


# --- pure loading -------------------------------------------------------------


def load_stack_config(raw: Mapping[str, Any], *, stack: str | None = None) -> StackConfig:
    """The stack's config keys (prefix stripped) as a StackConfig, or ConfigError with every problem.

    A secret key found here holds its value in plain text, which is itself a problem.
    `stack` fills the `-s <stack>` of the hints, and a stack named staging, canary or production must
    hold that environment (DEPLOYED_STACKS); any other stack name (dev, a test's) is not checked.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError([f"<stack config>: must be a mapping of {PROJECT}:<key> entries"])
    problems = _config_problems(raw, stack)
    if problems:
        raise ConfigError(ordered_lines(problems))
    return StackConfig.model_validate(_without_secrets(raw))


def _without_secrets(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if k not in SECRET_KEYS}


# The stacks named after the environment they deploy: Pulumi.<env>.yaml holds environment: <env>.
DEPLOYED_STACKS = tuple(e.value for e in Environment if e is not Environment.DEV)


def _stack_environment_problem(raw: Mapping[str, Any], stack: str | None) -> Problem | None:
    environment = raw.get("environment")
    if stack not in DEPLOYED_STACKS or environment == stack:
        return None
    if not isinstance(environment, str) or environment not in {e.value for e in Environment}:
        return None  # missing or not an environment: the schema says so
    return Problem(
        ("environment",),
        f"{quote(environment)}, but this is the {stack} stack: the staging, canary and production stacks "
        f"each deploy the environment they are named after; set environment: {stack}",
    )


def _config_problems(raw: Mapping[str, Any], stack: str | None) -> list[Problem]:
    problems = [_plain_text_secret(key, stack) for key in raw if key in SECRET_KEYS]
    config = _without_secrets(raw)
    try:
        StackConfig.model_validate(config)
    except ValidationError as err:
        problems += from_validation_error(err)
    problems += cross_field_problems(config)
    mismatch = _stack_environment_problem(config, stack)
    if mismatch is not None:
        problems.append(mismatch)
    return problems


def _required_secret_keys(view: View) -> list[str]:
    return _secrets_needed(
        [f for _, f in view.fleets],
        [f for _, f in view.failover_ips],
        view.cluster,
        runner_pools=bool(view.runner_pools),
        firewall=bool(view.cluster and view.cluster.control_plane_firewall.enabled),
    )


def _secrets_needed(
    fleets: Sequence[Fleet],
    failover_ips: Sequence[FailoverIP],
    cluster: Cluster | None,
    *,
    firewall: bool,
    runner_pools: bool = False,
) -> list[str]:
    api_server = cluster.api_server if cluster else None
    vendors = {f.vendor for f in fleets} | {f.vendor for f in failover_ips}
    needed: set[str] = set()
    if Vendor.OVH in vendors:
        needed |= {OVH_APPLICATION_SECRET, OVH_CONSUMER_KEY}
    if Vendor.DEDIBOX in vendors:
        needed.add(DEDIBOX_SECRET_KEY)
    if Vendor.ROBOT in vendors:
        needed.add(ROBOT_PASSWORD)
    if vendors & {Vendor.SCALEWAY_EM, Vendor.APPLESILICON}:
        needed.add(SCALEWAY_SECRET_KEY)
    if any(f.enabled for f in fleets):
        needed |= {FLEET_SSH_PRIVATE_KEY, FLEET_SUDO_PASSWORD}
    if api_server is not None:
        needed.add(KUBECONFIG)
    if cluster is not None and cluster.external_dns_provider == "cloudflare":
        needed.add(CLOUDFLARE_API_TOKEN)
    if firewall:
        needed.add(HCLOUD_TOKEN)
    return [key for key in SECRET_KEYS if key in needed]


def required_secret_keys(cfg: StackConfig) -> list[str]:
    """Which `pulumi config set --secret` keys this stack needs, in SECRET_KEYS order.

    OVH keys when any fleet or failover IP is on OVH (likewise Dedibox, Robot; the one Scaleway key
    when any is on Elastic Metal or Apple silicon); the fleet
    SSH key and sudo password once any fleet is enabled; kubeconfig once api_server is set; the
    Tuist server token once a runner pool exists; the Cloudflare token when external-dns publishes
    to Cloudflare; the Hetzner Cloud token once the control plane's firewall is on.
    """
    return _secrets_needed(
        cfg.fleets,
        cfg.failover_ips,
        cfg.cluster,
        firewall=cfg.cluster.control_plane_firewall.enabled,
        runner_pools=bool(cfg.runner_pools),
    )


# libyaml's parser where PyYAML was built with it (its wheels are): the pure-Python one is about ten
# times slower, and tools read every stack file of the project.
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Yaml12Loader(_SafeLoader):  # type: ignore[misc]
    """YAML as Pulumi reads a stack file (YAML 1.2): only true and false are booleans; yes, no, on and
    off stay strings, so `enabled: yes` is refused here as the engine's value would be."""


Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def read_stack_file(path: Path | str) -> dict[str, Any]:
    """A Pulumi.<stack>.yaml's `tuist-infra:*` values, prefix stripped, secure values left out.

    For tools and tests that read a stack without the engine; the program itself reads
    pulumi.Config. Plain-text values of secret keys are kept, so the loader flags them.
    """
    try:
        doc = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=Yaml12Loader) or {}
    except yaml.YAMLError as error:  # a merge conflict left in it, a tab: named, with where
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or type(error).__name__
        raise ConfigError([f"{path}: not valid YAML{where}: {problem}"]) from None
    if not isinstance(doc, Mapping):
        raise ConfigError([f"{path}: must be a mapping with a 'config' key"])
    entries = doc.get("config") or {}
    if not isinstance(entries, Mapping):
        raise ConfigError([f"{path}: config: must be a mapping"])
    raw: dict[str, Any] = {}
    for full_key, value in entries.items():
        namespace, _, key = str(full_key).rpartition(":")
        if namespace not in ("", PROJECT):
            continue
        if isinstance(value, Mapping) and set(value) == {"secure"}:
            continue
        raw[key] = value
    return raw


# --- pulumi -------------------------------------------------------------------


def _set_secret_hint(key: str, stack: str | None) -> str:
    return f"pulumi config set --secret {key} ... -s {stack or '<stack>'}"


def _plain_text_secret(key: str, stack: str | None) -> Problem:
    hint = _set_secret_hint(key, stack)
    return Problem((SECRETS_SECTION, key), f"stored in plain text; re-set it with {hint}")


def _project_keys() -> list[str]:
    """Every `tuist-infra:` key the stack sets, secret or not, in the order pulumi passed them."""
    seen: dict[str, None] = {}
    for full_key in [*pulumi_runtime_config.CONFIG.get(), *pulumi_runtime_config.get_config_env()]:
        namespace, _, key = full_key.partition(":")
        if namespace == PROJECT:
            seen.setdefault(key, None)
    return list(seen)


def _read_value(config: pulumi.Config, key: str) -> Any:
    if key == "environment":
        return config.get(key)
    try:
        return config.get_object(key)
    except Exception:  # not JSON: hand pydantic the plain string to judge
        return config.get(key)


def _secret_problems(config: pulumi.Config, required: Sequence[str], stack: str) -> list[Problem]:
    problems = []
    for key in SECRET_KEYS:
        # Presence only: the value is compared with None and "" and never kept or shown.
        present = config.get(key) not in (None, "")
        plain = present and not pulumi_runtime_config.is_config_secret(config.full_key(key))
        if plain:
            problems.append(_plain_text_secret(key, stack))
        elif key in required and not present:
            problems.append(Problem((SECRETS_SECTION, key), f"not set ({_set_secret_hint(key, stack)})"))
    return problems


def load_from_pulumi() -> tuple[StackConfig, Secrets]:
    """The running stack's config and secrets; ConfigError lists every problem, secrets included."""
    config = pulumi.Config(PROJECT)
    raw: dict[str, Any] = {}
    for key in [*StackConfig.model_fields, *_project_keys()]:
        if key in SECRET_KEYS or key in raw:
            continue
        value = _read_value(config, key)
        if value is not None:
            raw[key] = value
    stack = pulumi.get_stack()
    problems = _config_problems(raw, stack)
    problems += _secret_problems(config, _required_secret_keys(build_view(raw)), stack)
    if problems:
        raise ConfigError(ordered_lines(problems))
    cfg = StackConfig.model_validate(raw)
    return cfg, load_secrets(cfg)


def load_secrets(cfg: StackConfig) -> Secrets:
    """Required secrets through require_secret, the rest through get_secret (None when unset)."""
    config = pulumi.Config(PROJECT)
    required = set(required_secret_keys(cfg))
    values = {
        field: config.require_secret(key) if key in required else config.get_secret(key)
        for key, field in _SECRET_FIELDS.items()
    }
    return Secrets(**values)


def fail(problems: Sequence[str]) -> NoReturn:
    """Print the problems to stderr and end the program with exit code 32, no traceback."""
    count = len(problems)
    lines = [f"error: the {PROJECT} stack config has {count} problem{'' if count == 1 else 's'}:"]
    lines += [f"  {line}" for line in problems]
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
    raise SystemExit(EXIT_ALREADY_REPORTED)
