"""Calling the pack's validate functions the way its analyzer server does.

Properties go through pulumi_policy's own unknown-checking proxy (read-only Sequence / Mapping
wrappers that raise on values a preview cannot know), so the policies see exactly what the engine
gives them. The engine-level tests (test_pack_engine.py) run the same policies through `pulumi`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.policy import _NotApplicableError
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy

PROJECT = "tuist-infra"
UNKNOWN = UNKNOWN_STRING_VALUE  # what the engine sends for a value the preview cannot know


def urn(stack: str, type_: str, name: str) -> str:
    return f"urn:pulumi:{stack}::{PROJECT}::{type_}::{name}"


def options(*, protect: bool = False) -> PolicyResourceOptions:
    return PolicyResourceOptions(protect, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], None)


def resource(
    type_: str, props: Mapping[str, Any], *, name: str = "r", stack: str = "staging", protect: bool = False
) -> PolicyResource:
    return PolicyResource(
        type_,
        unknown_checking_proxy(dict(props)),
        urn(stack, type_, name),
        name,
        options(protect=protect),
        None,
        None,
        [],
        {},
    )


def check_resource(
    policy: ResourceValidationPolicy,
    type_: str,
    props: Mapping[str, Any],
    *,
    name: str = "r",
    stack: str = "staging",
    protect: bool = False,
) -> list[str]:
    """The violations `policy` reports for one resource."""
    found: list[str] = []
    args = ResourceValidationArgs(
        type_,
        unknown_checking_proxy(dict(props)),
        urn(stack, type_, name),
        name,
        options(protect=protect),
        None,
    )
    policy.validate(args, lambda message, _urn=None: found.append(message))
    return found


def check_stack(
    policy: StackValidationPolicy, resources: list[PolicyResource], config: Mapping[str, Any] | None = None
) -> list[str] | str:
    """The violations `policy` reports for a stack, or the reason it says it does not apply."""
    found: list[str] = []
    args = StackValidationArgs(resources, dict(config) if config is not None else None)
    try:
        policy.validate(args, lambda message, _urn=None: found.append(message))
    except _NotApplicableError as e:
        return f"not applicable: {e.reason}"
    return found


def deployment(
    name: str, pod_spec: Mapping[str, Any], labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "kura", "labels": dict(labels or {})},
        "spec": {"template": {"spec": dict(pod_spec)}},
    }
