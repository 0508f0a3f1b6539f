"""The vendor-client factory and the stack's account models for Elastic Metal and Apple silicon: one
Scaleway secret (scalewaySecretKey) for both, an account block per vendor, bad settings named."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from config.models import AppleSiliconAccount, ElasticMetalAccount, Vendor, Vendors
from providers.applesilicon.client import AppleSiliconClient
from providers.clients import SECRET_KEYS_BY_VENDOR, VendorConfigError, vendor_client, vendors_from_config
from providers.scaleway_em.client import ElasticMetalClient

SECRET = "3b0e2f4c-55d6-4c3a-9b1e-7d2f6a8c9e01"
PROJECT = "5c1e0a7d-2b3f-4e8a-9c6d-0f1e2d3c4b5a"


def test_one_scaleway_secret_serves_both_vendors() -> None:
    assert SECRET_KEYS_BY_VENDOR[Vendor.SCALEWAY_EM] == ("scalewaySecretKey",)
    assert SECRET_KEYS_BY_VENDOR[Vendor.APPLESILICON] == ("scalewaySecretKey",)
    assert set(SECRET_KEYS_BY_VENDOR) == set(Vendor)


def test_the_factory_builds_each_client_from_its_account(recorder) -> None:
    asked: list[str] = []

    def secret(key: str) -> str:
        asked.append(key)
        return SECRET

    account = {"api_url": recorder.url, "access_key": "SCWDEVSIMULATOR00001", "project_id": PROJECT}
    # Structured stack keys reach a dynamic provider as JSON text.
    vendors = vendors_from_config(
        {"vendors": json.dumps({"scaleway_em": account, "applesilicon": account})}, "vendors"
    )
    em = vendor_client(Vendor.SCALEWAY_EM, vendors, secret)
    mac = vendor_client(Vendor.APPLESILICON, vendors, secret)
    assert isinstance(em, ElasticMetalClient) and isinstance(mac, AppleSiliconClient)
    assert asked == ["scalewaySecretKey", "scalewaySecretKey"]
    # The accounts' default zones: where each product is sold.
    assert vendors.scaleway_em is not None and vendors.scaleway_em.zones == [
        "fr-par-1",
        "fr-par-2",
        "nl-ams-1",
    ]
    assert vendors.applesilicon is not None and vendors.applesilicon.zones == ["fr-par-1", "fr-par-3"]
    recorder.on("GET", "/apple-silicon/v1alpha1/zones/fr-par-1/servers", {"total_count": 0, "servers": []})
    recorder.on("GET", "/apple-silicon/v1alpha1/zones/fr-par-3/servers", {"total_count": 0, "servers": []})
    assert mac.list_boxes() == []
    assert {r.headers["x-auth-token"] for r in recorder.requests} == {SECRET}


@pytest.mark.parametrize("vendor", [Vendor.SCALEWAY_EM, Vendor.APPLESILICON])
def test_a_missing_account_is_named(vendor: Vendor) -> None:
    with pytest.raises(VendorConfigError, match=f"vendors.{vendor.value}"):
        vendor_client(vendor, Vendors(), lambda key: SECRET)


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"access_key": "AKIAIOSFODNN7EXAMPLE", "project_id": PROJECT}, "access_key"),
        ({"access_key": "SCWDEVSIMULATOR00001", "project_id": "default"}, "project_id"),
        ({"access_key": "SCWDEVSIMULATOR00001", "project_id": PROJECT, "zones": ["par1"]}, "zones.0"),
        ({"access_key": "SCWDEVSIMULATOR00001", "project_id": PROJECT, "zones": []}, "zones"),
        ({"access_key": "SCWDEVSIMULATOR00001", "project_id": PROJECT, "secret_key": SECRET}, "secret_key"),
    ],
)
def test_bad_account_settings_are_named(fields: dict[str, object], where: str) -> None:
    for model in (ElasticMetalAccount, AppleSiliconAccount):
        with pytest.raises(ValidationError) as raised:
            model.model_validate(fields)
        assert [".".join(map(str, e["loc"])) for e in raised.value.errors()] == [where]


@pytest.mark.parametrize("vendor", ["scaleway_em", "applesilicon"])
def test_a_failover_ip_on_these_vendors_is_a_named_input_problem(vendor: str) -> None:
    from providers.failover import input_problems

    props = {"vendor": vendor, "address": "198.51.100.9", "region": "r", "fleet": "f", "candidates": ["x"]}
    assert input_problems(props) == [
        ("vendor", f"{vendor} has no failover IPs this program moves (ovh, dedibox, robot)")
    ]


def test_the_failover_watcher_refuses_these_vendors_by_name(tmp_path) -> None:
    from watcher.mover import MoverConfigError, build_mover

    with pytest.raises(MoverConfigError, match="'applesilicon' has no failover IPs to move"):
        build_mover("applesilicon", account={}, credentials_dir=tmp_path)
