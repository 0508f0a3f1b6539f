"""components/node_bootstrap.py on the real control plane: with only its bindings a fresh bootstrap
token joins; without them the kubelet never gets a certificate."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client as k8s

from providers.kube import BootstrapToken, create_bootstrap_token
from tests.support.cluster import KubeCluster, Kubelet, Kubelets, node_bootstrap_manifests, wait_until


def start_with_fresh_token(
    cluster: KubeCluster, kubelets: Kubelets, name: str, fleet: str
) -> tuple[Kubelet, BootstrapToken]:
    token = BootstrapToken.generate()
    create_bootstrap_token(cluster.api, token, fleet=fleet, node_name=name, ttl=dt.timedelta(minutes=30))
    return kubelets.start(name, token.value), token


def csrs_by(cluster: KubeCluster, token: BootstrapToken) -> list[k8s.V1CertificateSigningRequest]:
    items = k8s.CertificatesV1Api(cluster.api).list_certificate_signing_request().items
    return [c for c in items if c.spec.username == f"system:bootstrap:{token.id}"]


def no_node(cluster: KubeCluster, name: str) -> bool:
    try:
        cluster.core.read_node(name)
    except k8s.ApiException as error:
        return error.status == 404
    return False


def test_with_the_components_bindings_a_fresh_token_joins(
    kube_cluster: KubeCluster, kubelets: Kubelets, fleet_rbac: Callable[[str], None]
):
    fleet_rbac("rbac-joins")
    kubelet, token = start_with_fresh_token(kube_cluster, kubelets, "rbac-joins-1", "rbac-joins")
    wait_until("node rbac-joins-1", lambda: not no_node(kube_cluster, "rbac-joins-1"), timeout=60)
    (csr,) = csrs_by(kube_cluster, token)
    assert "system:bootstrappers:tuist-rbac-joins" in csr.spec.groups
    assert [(c.type, c.reason) for c in csr.status.conditions] == [("Approved", "AutoApproved")]
    assert kubelet.running()


def test_without_bindings_the_token_cannot_even_ask_for_a_certificate(
    kube_cluster: KubeCluster, kubelets: Kubelets
):
    kubelet, token = start_with_fresh_token(kube_cluster, kubelets, "rbac-none-1", "rbac-none")
    # The kubelet's bootstrap fails on the forbidden CSR and exits, as a real one does (systemd
    # restarts it); no certificate, no Node.
    wait_until("the kubelet to give up", lambda: not kubelet.running(), timeout=60)
    assert "certificatesigningrequests.certificates.k8s.io is forbidden" in kubelet.log
    assert csrs_by(kube_cluster, token) == []
    assert no_node(kube_cluster, "rbac-none-1")


def test_with_only_the_bootstrapper_binding_the_csr_is_never_approved(
    kube_cluster: KubeCluster, kubelets: Kubelets
):
    only_create = [
        m
        for m in node_bootstrap_manifests(["rbac-half"])
        if m["roleRef"]["name"] == "system:node-bootstrapper"  # type: ignore[index]
    ]
    kube_cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(only_create))
    kubelet, token = start_with_fresh_token(kube_cluster, kubelets, "rbac-half-1", "rbac-half")
    (csr,) = wait_until("the kubelet's CSR", lambda: csrs_by(kube_cluster, token), timeout=60)
    # The approver decides within a second of a CSR's creation (the approved one above did):
    # watch for several times that.
    time.sleep(8)
    (csr,) = csrs_by(kube_cluster, token)
    assert not csr.status.conditions and not csr.status.certificate
    assert kubelet.running() and no_node(kube_cluster, "rbac-half-1")


def test_only_nodes_themselves_may_renew_a_node_client_certificate(
    kube_cluster: KubeCluster, fleet_rbac: Callable[[str], None]
):
    fleet_rbac("rbac-joins")

    def can_i(subresource: str, *identity: str) -> str:
        result = kube_cluster.kubectl(
            "auth",
            "can-i",
            "create",
            "certificatesigningrequests.certificates.k8s.io",
            f"--subresource={subresource}",
            *identity,
            check=False,
        )
        return result.stdout.strip()

    node = ("--as=system:node:rbac-joins-1", "--as-group=system:nodes")
    bootstrapper = (
        "--as=system:bootstrap:abcdef",
        "--as-group=system:bootstrappers",
        "--as-group=system:bootstrappers:tuist-rbac-joins",
    )
    other_tool = (
        "--as=system:bootstrap:zzzzzz",
        "--as-group=system:bootstrappers",
        "--as-group=system:bootstrappers:kubeadm:default-node-token",
    )
    assert can_i("selfnodeclient", *node) == "yes"
    assert can_i("nodeclient", *node) == "no"
    assert can_i("nodeclient", *bootstrapper) == "yes"
    assert can_i("selfnodeclient", *bootstrapper) == "no"
    assert can_i("nodeclient", *other_tool) == "no"


def test_a_node_renews_its_client_certificate_with_its_own_identity(
    kube_cluster: KubeCluster, kubelets: Kubelets, fleet_rbac: Callable[[str], None]
):
    """rotateCertificates: a kubelet whose certificate nears its end asks for a new one as
    system:node:<name>; the selfnodeclient binding gets it approved, and the kubelet goes on with it."""
    fleet_rbac("rbac-joins")
    kubelet, _ = start_with_fresh_token(kube_cluster, kubelets, "renewing-1", "rbac-joins")
    wait_until("node renewing-1", lambda: not no_node(kube_cluster, "renewing-1"), timeout=60)
    kubelet.stop()
    # Its certificate, re-issued by the cluster CA to end in two minutes: past the manager's
    # rotation deadline (70-90% of the lifetime), so it renews as soon as it starts.
    ca_key = serialization.load_pem_private_key((kube_cluster.dir / "pki" / "ca.key").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate((kube_cluster.dir / "pki" / "ca.crt").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                    x509.NameAttribute(NameOID.COMMON_NAME, "system:node:renewing-1"),
                ]
            )
        )
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=10))
        .not_valid_after(now + dt.timedelta(minutes=2))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    pki = kubelet.dir / "pki"
    short = pki / "kubelet-client-short.pem"
    short.write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    (pki / "kubelet-client-current.pem").unlink()
    (pki / "kubelet-client-current.pem").symlink_to(short)

    restarted = kubelets.start("renewing-1", "aaaaaa.bbbbbbbbbbbbbbbb", node_ip=kubelet.node_ip)

    def renewal() -> k8s.V1CertificateSigningRequest | None:
        items = k8s.CertificatesV1Api(kube_cluster.api).list_certificate_signing_request().items
        mine = [c for c in items if c.spec.username == "system:node:renewing-1"]
        return next((c for c in mine if c.status.certificate), None)

    csr = wait_until("the node's own renewal CSR to be signed", renewal, timeout=60)
    assert csr.spec.signer_name == "kubernetes.io/kube-apiserver-client-kubelet"
    assert [(c.type, c.reason) for c in csr.status.conditions] == [("Approved", "AutoApproved")]

    def renewed() -> bool:
        current = x509.load_pem_x509_certificate((pki / "kubelet-client-current.pem").read_bytes())
        return current.not_valid_after_utc - now > dt.timedelta(days=300)

    wait_until("the kubelet to store its renewed certificate", renewed, timeout=30)
    # And it goes on posting with the new one.
    lease_api = k8s.CoordinationV1Api(kube_cluster.api)
    renewed_at = lease_api.read_namespaced_lease("renewing-1", "kube-node-lease").spec.renew_time
    wait_until(
        "a lease renewal after the rotation",
        lambda: lease_api.read_namespaced_lease("renewing-1", "kube-node-lease").spec.renew_time > renewed_at,
        timeout=30,
    )
    assert restarted.running()
