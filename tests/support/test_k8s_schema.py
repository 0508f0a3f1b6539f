from __future__ import annotations

import re
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from tests.support.k8s_schema import ManifestError, collect_manifests, load_crds, validate_manifest


def config_map(**extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "kura"}, **extra}


def dns_endpoint(endpoint: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "externaldns.k8s.io/v1alpha1",
        "kind": "DNSEndpoint",
        "metadata": {"name": "kura-regional-us-east-dns", "namespace": "kura"},
        "spec": {"endpoints": [endpoint]},
    }


def test_valid_builtin_passes() -> None:
    validate_manifest(config_map(data={"a": "b"}))


def test_builtin_unknown_field_is_rejected_strictly() -> None:
    with pytest.raises(ManifestError, match=re.escape("v1 ConfigMap kura/x: <root>: Additional properties")):
        validate_manifest(config_map(datum={"a": "b"}))


def test_builtin_wrong_type_names_the_field() -> None:
    with pytest.raises(
        ManifestError, match=re.escape("v1 ConfigMap kura/x: data.a: 1 is not of type 'string'")
    ):
        validate_manifest(config_map(data={"a": 1}))


def test_dnsendpoint_from_fixture_crd_passes() -> None:
    validate_manifest(
        dns_endpoint(
            {"dnsName": "peer.x.dev", "recordType": "A", "recordTTL": 60, "targets": ["203.0.113.7"]}
        )
    )


def test_dnsendpoint_bad_ttl_type_is_rejected() -> None:
    with pytest.raises(
        ManifestError,
        match=re.escape(
            "externaldns.k8s.io/v1alpha1 DNSEndpoint kura/kura-regional-us-east-dns: "
            "spec.endpoints.0.recordTTL: '60' is not of type 'integer'"
        ),
    ):
        validate_manifest(dns_endpoint({"dnsName": "peer.x.dev", "recordTTL": "60"}))


def test_dnsendpoint_undeclared_field_is_rejected() -> None:
    with pytest.raises(
        ManifestError, match=re.escape("spec.endpoints.0: Additional properties are not allowed")
    ):
        validate_manifest(dns_endpoint({"dnsName": "peer.x.dev", "ttl": 60}))


def test_custom_kind_without_crd_is_an_error() -> None:
    with pytest.raises(
        ManifestError, match=re.escape("example.com/v1 Widget ns/w: no built-in schema and no CRD")
    ):
        validate_manifest(
            {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "ns"}}
        )


WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "names": {"kind": "Widget", "plural": "widgets"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {"size": {"type": "integer", "minimum": 0}},
                            }
                        },
                    }
                },
            }
        ],
    },
}


def test_crd_passed_in_is_used() -> None:
    widget = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 0},
    }
    validate_manifest(widget, crds=[WIDGET_CRD])
    with pytest.raises(ManifestError, match=re.escape("example.com/v1 Widget w: spec.size: -1 is less than")):
        validate_manifest({**widget, "spec": {"size": -1}}, crds=[WIDGET_CRD])


def test_custom_kind_name_must_be_a_dns_subdomain() -> None:
    with pytest.raises(ManifestError, match=re.escape("metadata.name 'Bad_Name' is not a DNS subdomain")):
        validate_manifest(
            {
                "apiVersion": "example.com/v1",
                "kind": "Widget",
                "metadata": {"name": "Bad_Name"},
                "spec": {"size": 1},
            },
            crds=[WIDGET_CRD],
        )


def test_every_fixture_file_is_loaded() -> None:
    assert ("externaldns.k8s.io", "v1alpha1", "DNSEndpoint") in load_crds()


def test_recorder_turns_inputs_into_camelcase_manifests_with_ints() -> None:
    def build() -> Any:
        svc = k8s.core.v1.Service(
            "svc",
            metadata=k8s.meta.v1.ObjectMetaArgs(name="s", namespace="kura"),
            spec=k8s.core.v1.ServiceSpecArgs(
                external_traffic_policy="Local",
                type="LoadBalancer",
                ports=[k8s.core.v1.ServicePortArgs(port=443)],
            ),
        )
        return pulumi.Output.all(svc.id)

    recorded = collect_manifests(build)

    assert recorded.manifests == [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "s", "namespace": "kura"},
            "spec": {"externalTrafficPolicy": "Local", "type": "LoadBalancer", "ports": [{"port": 443}]},
        }
    ]
    validate_manifest(recorded.manifests[0])
