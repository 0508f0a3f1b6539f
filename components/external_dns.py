"""external-dns with the `crd` source: it reads the regions' DNSEndpoint objects (components/dns.py)
and publishes them (seed 000: "external-dns gains the crd source").

It runs, with its Cloudflare token, in `<kura namespace>-dns`, out of the Kura namespace whose
gateways read every Secret. It reads the DNSEndpoints of the Kura namespace only (`--namespace`), so
its RBAC is a Role there: read DNSEndpoints, write their status (external-dns records the generation
it has published with an update of the status subresource). Nothing else: the crd
source needs no Services, Nodes or Ingresses. The policy is `sync` with the TXT registry, so a
withdrawn record (a parked failover IP, a removed region, a public wildcard with no serving gateway:
regional_dns/) is deleted, and only records this stack
owns (`--txt-owner-id`) are ever touched.

The DNSEndpoint CRD comes with it (external-dns reads DNSEndpoints but does not install their CRD),
exactly as the release it runs publishes it.

Providers: `cloudflare` (the kura.tuist.dev zone; the token is the stack secret cloudflareApiToken,
delivered as a Secret mounted as a file, never an environment value) or, in dev, `inmemory`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import yaml

from components import kube as k8s
from components.k8s import MANAGED_BY, child_options, secret_hash
from config.models import Cluster, Environment
from demux.routes import KURA_PUBLIC_ZONE

__all__ = [
    "DNSENDPOINT_CRD",
    "DNSENDPOINT_GROUP",
    "EXTERNAL_DNS_NAME",
    "ExternalDns",
    "ExternalDnsArgs",
    "external_dns_args",
    "external_dns_rules",
]

EXTERNAL_DNS_NAME = "external-dns"
# The DNSEndpoint CRD as the external-dns release the program runs publishes it (v0.20.0,
# config/crd/standard/): external-dns reads the objects but does not install their CRD.
DNSENDPOINT_CRD = Path(__file__).resolve().parent / "crds" / "dnsendpoints.externaldns.k8s.io.yaml"
DNSENDPOINT_GROUP = "externaldns.k8s.io"
TOKEN_SECRET = "external-dns-cloudflare"
TOKEN_KEY = "apiToken"
TOKEN_DIR = "/etc/external-dns/cloudflare"
# On the pod template: the sha256 of the token (components.k8s.secret_hash). external-dns reads the
# file only at start (the kubelet updates the mounted file, but it never looks again); a rotated
# token changes the template, so the pod is recreated with it.
TOKEN_HASH_ANNOTATION = "tuist.dev/cloudflare-token-hash"
LABELS = {
    "app.kubernetes.io/name": EXTERNAL_DNS_NAME,
    "app.kubernetes.io/component": "dns",
    "app.kubernetes.io/part-of": "kura",
    "app.kubernetes.io/managed-by": MANAGED_BY,
}


def external_dns_args(namespace: str, cluster: Cluster, environment: Environment) -> list[str]:
    args = [
        "--source=crd",
        f"--crd-source-apiversion={DNSENDPOINT_GROUP}/v1alpha1",
        "--crd-source-kind=DNSEndpoint",
        f"--namespace={namespace}",
        f"--domain-filter={KURA_PUBLIC_ZONE}",
        "--managed-record-types=A",
        "--policy=sync",
        "--registry=txt",
        f"--txt-owner-id=tuist-infra-{environment.value}",
        # Publish at once on a DNSEndpoint change; the interval is the resync.
        "--events",
        "--interval=1m",
        f"--provider={cluster.external_dns_provider}",
    ]
    if cluster.external_dns_provider == "inmemory":
        args.append(f"--inmemory-zone={KURA_PUBLIC_ZONE}")
    return args


def dnsendpoint_crd() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(DNSENDPOINT_CRD.read_text())
    return crd


def external_dns_rules() -> list[k8s.rbac.v1.PolicyRuleArgs]:
    rule = k8s.rbac.v1.PolicyRuleArgs
    return [
        rule(api_groups=[DNSENDPOINT_GROUP], resources=["dnsendpoints"], verbs=["get", "list", "watch"]),
        # source/crd.go: UpdateStatus is a PUT of the status subresource.
        rule(api_groups=[DNSENDPOINT_GROUP], resources=["dnsendpoints/status"], verbs=["update"]),
    ]


def dns_namespace(kura_namespace: str) -> str:
    """Where external-dns and its Cloudflare token live: not the Kura namespace, whose gateways
    (ingress-nginx, facing the internet) read every Secret there."""
    return f"{kura_namespace}-dns"


@dataclass(frozen=True)
class ExternalDnsArgs:
    namespace: str  # the Kura namespace: the DNSEndpoints it reads
    cluster: Cluster
    environment: Environment
    # The stack secret cloudflareApiToken; required with the cloudflare provider.
    cloudflare_api_token: pulumi.Input[str] | None = None


class ExternalDns(pulumi.ComponentResource):
    """Its namespace (dns_namespace()), ServiceAccount, Role + RoleBinding in the Kura namespace, the
    token Secret (cloudflare) and the Deployment."""

    def __init__(self, name: str, args: ExternalDnsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tuist:external_dns:ExternalDns", name, None, opts)
        ns, cluster = args.namespace, args.cluster
        cloudflare = cluster.external_dns_provider == "cloudflare"
        token = args.cloudflare_api_token
        if cloudflare and token is None:
            raise ValueError(
                "external-dns publishes to Cloudflare but the cloudflareApiToken secret was not passed"
            )
        meta = k8s.meta.v1.ObjectMetaArgs
        home = dns_namespace(ns)
        named = meta(name=EXTERNAL_DNS_NAME, namespace=home, labels=LABELS)
        reads = meta(name=EXTERNAL_DNS_NAME, namespace=ns, labels=LABELS)
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata=meta(name=home, labels=LABELS),
            opts=child_options(self, opts),
        )
        child = child_options(self, opts, depends_on=[self.namespace])

        crd = dnsendpoint_crd()
        self.crd = k8s.apiextensions.v1.CustomResourceDefinition(
            f"{name}-dnsendpoint-crd",
            metadata=meta(name=crd["metadata"]["name"], annotations=crd["metadata"].get("annotations")),
            spec=crd["spec"],
            # Deleting a CRD deletes every object of its kind: the resource going from the program
            # (a rename, a removed component) must leave it in the cluster.
            opts=child_options(self, opts, retain_on_delete=True),
        )

        self.service_account = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata=named, opts=child)
        self.role = k8s.rbac.v1.Role(f"{name}-role", metadata=reads, rules=external_dns_rules(), opts=child)
        self.role_binding = k8s.rbac.v1.RoleBinding(
            f"{name}-rolebinding",
            metadata=reads,
            role_ref=k8s.rbac.v1.RoleRefArgs(
                api_group="rbac.authorization.k8s.io", kind="Role", name=EXTERNAL_DNS_NAME
            ),
            subjects=[k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=EXTERNAL_DNS_NAME, namespace=home)],
            opts=child,
        )
        env: list[k8s.core.v1.EnvVarArgs] = []
        volumes: list[k8s.core.v1.VolumeArgs] = []
        mounts: list[k8s.core.v1.VolumeMountArgs] = []
        annotations: dict[str, pulumi.Input[str]] | None = None
        deps: list[pulumi.Resource] = [self.role_binding]
        if cloudflare and token is not None:
            self.token = k8s.core.v1.Secret(
                f"{name}-cloudflare",
                metadata=meta(name=TOKEN_SECRET, namespace=home, labels=LABELS),
                type="Opaque",
                # Output.secret, whatever the caller passed: encrypted in state, masked in diffs.
                string_data={TOKEN_KEY: pulumi.Output.secret(token)},
                opts=child,
            )
            deps.append(self.token)
            annotations = {TOKEN_HASH_ANNOTATION: secret_hash(token)}
            # external-dns reads CF_API_TOKEN from a file when it starts with "file:": the token
            # stays out of the environment (kubectl describe, crash dumps, child processes).
            env.append(k8s.core.v1.EnvVarArgs(name="CF_API_TOKEN", value=f"file:{TOKEN_DIR}/{TOKEN_KEY}"))
            volumes.append(
                k8s.core.v1.VolumeArgs(
                    name="cloudflare",
                    secret=k8s.core.v1.SecretVolumeSourceArgs(secret_name=TOKEN_SECRET, default_mode=0o440),
                )
            )
            mounts.append(
                k8s.core.v1.VolumeMountArgs(name="cloudflare", mount_path=TOKEN_DIR, read_only=True)
            )
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=named,
            spec=k8s.apps.v1.DeploymentSpecArgs(
                replicas=1,
                # One writer of the zone at a time.
                strategy=k8s.apps.v1.DeploymentStrategyArgs(type="Recreate"),
                selector=k8s.meta.v1.LabelSelectorArgs(
                    match_labels={"app.kubernetes.io/name": EXTERNAL_DNS_NAME}
                ),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=meta(labels=LABELS, annotations=annotations),
                    spec=k8s.core.v1.PodSpecArgs(
                        service_account_name=EXTERNAL_DNS_NAME,
                        volumes=volumes or None,
                        security_context=k8s.core.v1.PodSecurityContextArgs(
                            run_as_non_root=True,
                            run_as_user=65534,
                            fs_group=65534,
                            seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"),
                        ),
                        containers=[
                            k8s.core.v1.ContainerArgs(
                                name="external-dns",
                                image=cluster.external_dns_image,
                                args=external_dns_args(ns, cluster, args.environment),
                                env=env or None,
                                volume_mounts=mounts or None,
                                ports=[
                                    k8s.core.v1.ContainerPortArgs(
                                        name="http", container_port=7979, protocol="TCP"
                                    )
                                ],
                                liveness_probe=k8s.core.v1.ProbeArgs(
                                    http_get=k8s.core.v1.HTTPGetActionArgs(path="/healthz", port="http"),
                                    period_seconds=10,
                                ),
                                readiness_probe=k8s.core.v1.ProbeArgs(
                                    http_get=k8s.core.v1.HTTPGetActionArgs(path="/healthz", port="http"),
                                    period_seconds=10,
                                ),
                                resources=k8s.core.v1.ResourceRequirementsArgs(
                                    requests={"cpu": "10m", "memory": "64Mi"}, limits={"memory": "128Mi"}
                                ),
                                security_context=k8s.core.v1.SecurityContextArgs(
                                    allow_privilege_escalation=False,
                                    read_only_root_filesystem=True,
                                    capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"]),
                                ),
                            )
                        ],
                    ),
                ),
            ),
            # One writer of the zone at a time, also while an up moves it to its namespace.
            opts=child_options(self, opts, depends_on=[self.namespace, *deps], delete_before_replace=True),
        )
        self.register_outputs(
            {"provider": cluster.external_dns_provider, "namespace": home, "crd": crd["metadata"]["name"]}
        )
