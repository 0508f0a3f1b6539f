"""What config checks against facts of the program and the policy pack, held equal to them here, and
the valid configs next to each refused one (tests/config/bad/ has the refused ones)."""

from __future__ import annotations

import copy
import re
from decimal import Decimal
from typing import Annotated, Any, get_args, get_origin

import pytest
from pydantic import BaseModel
from pydantic.types import Strict

from config.loader import ConfigError, load_from_pulumi, load_stack_config, required_secret_keys
from config.models import Fleet, StackConfig, Vendor
from config.rules import AUTOSCALING_FIELDS, BOX_ID_SHAPES, program_node_labels
from policy.tuist_policy import mandatory
from providers.constants import FLEET_LABEL, POOL_LABEL
from tests.config.stacks import REAL_STACKS, stack_path, stack_raw
from tests.config.test_loader import SECRET_VALUES, use_stack


def _fleet(vendor: Vendor) -> Fleet:
    return Fleet.model_validate(
        {
            "name": f"f-{vendor.value.replace('_', '-')}",
            "vendor": vendor.value,
            "marker": "tuist-x-staging",
            "size": 1,
            "node_pool": "pool-a",
            "hardware": {"offer": "X", "threads": 8, "memory_gib": 16},
        }
    )


@pytest.mark.parametrize("vendor", list(Vendor))
def test_the_labels_config_reserves_are_the_ones_the_program_sets(vendor: Vendor) -> None:
    from providers.machine.spec import node_labels

    fleet = _fleet(vendor)
    program = node_labels(vendor, fleet.name, fleet.node_pool, {})
    assert {key: value for key, (value, _) in program_node_labels(fleet).items()} == program


def test_a_fleet_label_equal_to_what_the_program_sets_is_accepted() -> None:
    raw = copy.deepcopy(stack_raw("staging"))
    raw["fleets"][0]["labels"] = {POOL_LABEL: "kura-dedibox", FLEET_LABEL: "kura-dedibox", "tuist.dev/x": "y"}
    cfg = load_stack_config(raw)
    assert cfg.fleets[0].labels[POOL_LABEL] == "kura-dedibox"
    # The Robot stacks list the Kata labels with the program's value: valid as written.
    assert cfg.fleet("runners-linux").labels == {
        "tuist.dev/kata-runtime": "true",
        "katacontainers.io/kata-runtime": "true",
    }


# A box id of each vendor as its client builds it, and the provider's own check of that shape.
BOX_IDS = {
    Vendor.OVH: "ns1001.ip-203-0-113.net",
    Vendor.DEDIBOX: "fr-par-2/200101",
    Vendor.ROBOT: "2345601",
    Vendor.SCALEWAY_EM: "fr-par-2/e1000000-0000-4000-8000-000000000001",
    Vendor.APPLESILICON: "fr-par-3/a5000000-0000-4000-8000-000000000001",
}


def _provider_accepts(vendor: Vendor, box_id: str) -> None:
    if vendor is Vendor.OVH:
        from providers.ovh.models import check_service_name

        check_service_name(box_id)
    elif vendor is Vendor.DEDIBOX:
        from providers.dedibox.models import parse_box_id as dedibox_box_id

        dedibox_box_id(box_id)
    elif vendor is Vendor.ROBOT:
        from providers.robot.models import check_server_number

        check_server_number(box_id)
    elif vendor is Vendor.SCALEWAY_EM:
        from providers.scaleway_em.models import parse_box_id as em_box_id

        em_box_id(box_id)
    else:
        from providers.applesilicon.models import parse_box_id as mac_box_id

        mac_box_id(box_id)


@pytest.mark.parametrize("vendor", list(Vendor))
def test_the_box_id_shapes_accept_what_the_providers_accept_and_their_examples(vendor: Vendor) -> None:
    shape, example = BOX_ID_SHAPES[vendor]
    written = re.search(r"e\.g\. (\S+)$", example)
    assert written is not None
    for box_id in (BOX_IDS[vendor], written.group(1)):
        assert shape.match(box_id), box_id
        _provider_accepts(vendor, box_id)
    # Another vendor's id is refused, but where the shapes coincide: Elastic Metal and Apple silicon
    # ids are both <zone>/<uuid>, and a Robot server number is also a well-formed OVH service name.
    alike = {frozenset({Vendor.SCALEWAY_EM, Vendor.APPLESILICON}), frozenset({Vendor.OVH, Vendor.ROBOT})}
    for other, box_id in BOX_IDS.items():
        if other is not vendor and frozenset({vendor, other}) not in alike:
            assert not shape.match(box_id), (vendor, box_id)
    assert not BOX_ID_SHAPES[Vendor.ROBOT][0].match(BOX_IDS[Vendor.OVH])


def test_each_fleet_may_exclude_its_vendor_s_box_ids() -> None:
    raw = copy.deepcopy(stack_raw("dev"))
    for fleet in raw["fleets"]:
        fleet["excluded_boxes"] = [BOX_IDS[Vendor(fleet["vendor"])]]
    cfg = load_stack_config(raw)
    assert {f.vendor: f.excluded_boxes for f in cfg.fleets} == {v: [b] for v, b in BOX_IDS.items()}


def test_config_requires_the_autoscaling_fields_the_policy_pack_requires() -> None:
    def camel(name: str) -> str:
        head, *rest = name.split("_")
        return head + "".join(word.title() for word in rest)

    assert tuple(camel(f) for f in AUTOSCALING_FIELDS) == mandatory.AUTOSCALING_FIELDS


def test_a_pool_with_autoscaling_off_may_leave_the_fields_out() -> None:
    raw = copy.deepcopy(stack_raw("staging"))
    raw["runner_pools"][0]["autoscaling"] = {"enabled": False}
    pool = load_stack_config(raw).runner_pools[0]
    assert (pool.autoscaling.enabled, pool.autoscaling.max_replicas) == (False, None)


@pytest.mark.parametrize("price", [0, 57, 109.99, "9999999999.99", 9999999999.99])
def test_prices_in_whole_cents_up_to_the_bound_load_exactly(price: Any) -> None:
    raw = copy.deepcopy(stack_raw("staging"))
    raw["fleets"][2]["pricing"] = {"monthly_eur": price}
    pricing = load_stack_config(raw).fleet("runners-linux").pricing
    assert pricing is not None and pricing.monthly_eur == Decimal(str(price))


def test_a_price_that_is_not_a_number_is_refused() -> None:
    raw = copy.deepcopy(stack_raw("staging"))
    raw["fleets"][2]["pricing"] = {"monthly_eur": True, "setup_eur": float("nan")}
    with pytest.raises(ConfigError) as err:
        load_stack_config(raw)
    assert err.value.problems == [
        "fleets[2].pricing.monthly_eur: must be a number (got true)",
        "fleets[2].pricing.setup_eur: must be a finite number (got NaN)",
    ]


def _loose_int(annotation: Any) -> bool:
    """Whether a type holds an int that pydantic would coerce (true -> 1, "22" -> 22)."""
    if get_origin(annotation) is Annotated:
        base, *meta = get_args(annotation)
        if base is int:
            return not any(isinstance(m, Strict) and m.strict for m in meta)
        return _loose_int(base)
    if annotation is int:
        return True
    return any(_loose_int(arg) for arg in get_args(annotation))


def _models(model: type[BaseModel], seen: set[type[BaseModel]]) -> set[type[BaseModel]]:
    seen.add(model)
    for info in model.model_fields.values():
        stack = [info.annotation]
        while stack:
            tp = stack.pop()
            if isinstance(tp, type) and issubclass(tp, BaseModel) and tp not in seen:
                _models(tp, seen)
            stack.extend(get_args(tp))
    return seen


def test_every_count_and_port_is_a_strict_int() -> None:
    loose = []
    for model in _models(StackConfig, set()):
        for name, info in model.model_fields.items():
            if info.annotation is int:
                strict = any(isinstance(m, Strict) and m.strict for m in info.metadata)
                if not strict:
                    loose.append(f"{model.__name__}.{name}")
            elif _loose_int(info.annotation):
                loose.append(f"{model.__name__}.{name}")
    assert loose == []


def test_the_stack_name_is_checked_only_for_the_deployed_stacks() -> None:
    staging = stack_raw("staging")
    for stack in (None, "dev", "ci", "bench-ovh-n16"):
        load_stack_config(staging, stack=stack)
    load_stack_config(stack_raw("dev"), stack="ci")
    # Through the program's own path, where the stack is pulumi's.
    use_stack("production", stack_raw("canary"), secrets=SECRET_VALUES)
    with pytest.raises(ConfigError) as err:
        load_from_pulumi()
    assert err.value.problems == [
        "environment: 'canary', but this is the production stack: the staging, canary and production "
        "stacks each deploy the environment they are named after; set environment: production"
    ]


@pytest.mark.parametrize("name", REAL_STACKS)
def test_the_stack_file_header_names_every_secret_the_stack_needs(name: str) -> None:
    text = stack_path(name).read_text()
    header = text.split("\nconfig:", 1)[0]
    named = set(re.findall(r"[a-zA-Z]+", header))
    missing = [key for key in required_secret_keys(load_stack_config(stack_raw(name))) if key not in named]
    assert missing == []
