"""external-dns under Pulumi mocks: the crd source over the Kura namespace, the narrowest RBAC that
lets it read DNSEndpoints, and the Cloudflare token as a mounted secret file. Real authorization is
checked in tests/cluster/test_k8s_external_dns.py."""

from __future__ import annotations

import hashlib

import pulumi
import yaml

from components.external_dns import DNSENDPOINT_CRD, ExternalDns, ExternalDnsArgs
from config.models import Cluster, Environment
from tests.support.k8s_schema import CRD_DIR, ManifestRecorder, collect_manifests, validate_manifest


def render(cluster: Cluster, token: str | None = "cf-token-value") -> ManifestRecorder:
    args = ExternalDnsArgs(
        namespace="kura",
        cluster=cluster,
        environment=Environment.STAGING,
        cloudflare_api_token=pulumi.Output.secret(token) if token else None,
    )
    return collect_manifests(lambda: ExternalDns("external-dns", args))


def test_it_reads_dnsendpoints_of_the_kura_namespace_and_syncs_only_its_own_records(cluster: Cluster) -> None:
    [container] = render(cluster).find("Deployment", "external-dns")["spec"]["template"]["spec"]["containers"]
    assert container["args"] == [
        "--source=crd",
        "--crd-source-apiversion=externaldns.k8s.io/v1alpha1",
        "--crd-source-kind=DNSEndpoint",
        "--namespace=kura",
        "--domain-filter=kura.tuist.dev",
        "--managed-record-types=A",
        "--policy=sync",
        "--registry=txt",
        "--txt-owner-id=tuist-infra-staging",
        "--events",
        "--interval=1m",
        "--provider=cloudflare",
    ]
    assert container["image"] == cluster.external_dns_image
    assert "@sha256:" in container["image"]


def test_rbac_is_a_role_reading_dnsendpoints_and_updating_their_status(cluster: Cluster) -> None:
    recorded = render(cluster)
    role = recorded.find("Role", "external-dns")
    assert role["metadata"]["namespace"] == "kura"
    assert role["rules"] == [
        {
            "apiGroups": ["externaldns.k8s.io"],
            "resources": ["dnsendpoints"],
            "verbs": ["get", "list", "watch"],
        },
        {"apiGroups": ["externaldns.k8s.io"], "resources": ["dnsendpoints/status"], "verbs": ["update"]},
    ]
    assert recorded.of_kind("ClusterRole") == []


def test_the_cloudflare_token_is_a_file_from_a_secret_never_an_env_value(cluster: Cluster) -> None:
    recorded = render(cluster)
    pod = recorded.find("Deployment", "external-dns")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["env"] == [
        {"name": "CF_API_TOKEN", "value": "file:/etc/external-dns/cloudflare/apiToken"}
    ]
    assert pod["volumes"] == [
        {"name": "cloudflare", "secret": {"secretName": "external-dns-cloudflare", "defaultMode": 0o440}}
    ]
    # Out of the Kura namespace, whose gateways (ingress-nginx) read every Secret; it reads the
    # DNSEndpoints there through a Role bound to its account.
    assert recorded.find("Secret", "external-dns-cloudflare")["metadata"]["namespace"] == "kura-dns"
    assert recorded.find("Deployment", "external-dns")["metadata"]["namespace"] == "kura-dns"
    assert [m["metadata"]["name"] for m in recorded.of_kind("Namespace")] == ["kura-dns"]
    binding = recorded.find("RoleBinding", "external-dns")
    assert binding["metadata"]["namespace"] == "kura"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "external-dns", "namespace": "kura-dns"}
    ]
    registered = recorded.registered[("Secret", "external-dns-cloudflare")]["stringData"]
    assert registered == {
        "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
        "value": {"apiToken": "cf-token-value"},
    }


def test_dev_keeps_records_in_memory_and_needs_no_token(cluster: Cluster) -> None:
    dev = cluster.model_copy(update={"external_dns_provider": "inmemory"})
    recorded = render(dev, token=None)
    [container] = recorded.find("Deployment", "external-dns")["spec"]["template"]["spec"]["containers"]
    assert container["args"][-2:] == ["--provider=inmemory", "--inmemory-zone=kura.tuist.dev"]
    assert recorded.of_kind("Secret") == []


def test_every_object_is_schema_valid(cluster: Cluster) -> None:
    for manifest in render(cluster).manifests:
        validate_manifest(manifest)


def test_it_installs_the_dnsendpoint_crd_external_dns_reads(cluster: Cluster) -> None:
    recorded = render(cluster)
    crd = recorded.find("CustomResourceDefinition", "dnsendpoints.externaldns.k8s.io")
    assert crd["spec"]["group"] == "externaldns.k8s.io"
    [version] = crd["spec"]["versions"]
    assert (version["name"], version["subresources"]) == ("v1alpha1", {"status": {}})


def test_the_installed_crd_is_the_published_one_the_tests_validate_against() -> None:
    # One definition: what the program installs is the fixture every DNSEndpoint is checked against.
    fixture = [d for d in yaml.safe_load_all((CRD_DIR / "dnsendpoint.yaml").read_text()) if d]
    assert fixture == [yaml.safe_load(DNSENDPOINT_CRD.read_text())]


def test_a_replacement_goes_after_the_old_one_is_gone(cluster: Cluster) -> None:
    # One writer of the zone at a time, also while an up moves it to another namespace.
    assert render(cluster).options["external-dns-deployment"].delete_before_replace


TOKEN_HASH = "tuist.dev/cloudflare-token-hash"


def token_hash(cluster: Cluster, token: str) -> str:
    template = render(cluster, token).find("Deployment", "external-dns")["spec"]["template"]
    return str(template["metadata"]["annotations"][TOKEN_HASH])


def test_the_pod_template_carries_the_sha256_of_the_token_never_the_token(cluster: Cluster) -> None:
    # external-dns reads the token file only at start: the template has to change with it.
    annotation = token_hash(cluster, "cf-token-value")
    assert annotation == hashlib.sha256(b"cf-token-value").hexdigest()
    assert "cf-token-value" not in annotation


def test_a_rotated_token_changes_the_pod_template_and_the_same_token_does_not(cluster: Cluster) -> None:
    first = token_hash(cluster, "cf-token-value")
    assert token_hash(cluster, "rotated-cf-token-value") != first
    assert token_hash(cluster, "cf-token-value") == first


def test_the_token_hash_does_not_make_the_deployment_secret(cluster: Cluster) -> None:
    # A hash of a high-entropy token reveals nothing; a secret in the template would mask the whole
    # spec in every diff.
    registered = render(cluster).registered[("Deployment", "external-dns")]
    assert "1b47061264138c4ac30d75fd1eb44270" not in repr(registered)
    assert "cf-token-value" not in repr(registered)


def test_without_a_token_there_is_no_token_hash(cluster: Cluster) -> None:
    dev = cluster.model_copy(update={"external_dns_provider": "inmemory"})
    template = render(dev, token=None).find("Deployment", "external-dns")["spec"]["template"]
    assert "annotations" not in template["metadata"]
