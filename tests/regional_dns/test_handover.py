"""The public records change hands without a gap, with the real engine and the Kubernetes provider
against the real control plane.

A stack deployed before the reconciler holds a DNSEndpoint whose records the program wrote (static
box addresses). The first `pulumi up` of today's program (components/dns.py: no spec, spec ignored)
must leave those records in place whether or not the reconciler has run yet, and every later up,
with an update of the object or without, must leave the reconciler's records alone.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from components.dns import regional_dns_name
from components.external_dns import DNSENDPOINT_GROUP
from regional_dns.reconciler import KubeView, Outcome, RegionalDns, Settings
from regional_dns.records import NodeAddress, NodeView, PodView
from tests.cluster.k8s_support import install_crd_fixture
from tests.support.cluster import KubeCluster
from tests.support.pulumi_home import REPO, cli_env

pytestmark = pytest.mark.e2e

REGION, HOST = "xx-handover", "xx-handover.staging.kura.tuist.dev"
NAME = regional_dns_name(REGION)
STATIC = ["203.0.113.9", "203.0.113.10"]  # what the program once published: every box, healthy or not

# The project: stage "old" is the program as it was (DnsRecords wrote the boxes' addresses into the
# public DNSEndpoint), stage "new" today's components/dns.py. MARK, when set, annotates the object, so
# that an up updates it (a label or annotation changed in a later release).
PROGRAM = """
import os

import pulumi
import pulumi_kubernetes as k8s

from components.dns import DnsRecords, DnsRecordsArgs
from components.k8s import metadata, region_labels

REGION, HOST, NAMESPACE = "{region}", "{host}", os.environ["HANDOVER_NAMESPACE"]
provider = k8s.Provider("cluster", kubeconfig=open(os.environ["HANDOVER_KUBECONFIG"]).read())
on_cluster = pulumi.ResourceOptions(providers=[provider])


def mark(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
    if args.type_ != "kubernetes:externaldns.k8s.io/v1alpha1:DNSEndpoint" or not os.environ.get("MARK"):
        return None
    meta = args.props["metadata"]
    marked = k8s.meta.v1.ObjectMetaArgs(
        name=meta.name,
        namespace=meta.namespace,
        labels=meta.labels,
        annotations={{"tuist.dev/mark": os.environ["MARK"]}},
    )
    return pulumi.ResourceTransformationResult({{**args.props, "metadata": marked}}, args.opts)


pulumi.runtime.register_stack_transformation(mark)


class OldDnsRecords(pulumi.ComponentResource):
    def __init__(self, name: str, opts: pulumi.ResourceOptions) -> None:
        super().__init__("tuist:dns:DnsRecords", name, None, opts)
        labels = region_labels(name="kura-dns", component="dns", region=REGION)
        k8s.apiextensions.CustomResource(
            f"{{name}}-public",
            api_version="externaldns.k8s.io/v1alpha1",
            kind="DNSEndpoint",
            metadata=metadata("kura-regional-" + REGION + "-dns", NAMESPACE, labels),
            spec={{"endpoints": [
                {{"dnsName": "*." + HOST, "recordType": "A", "recordTTL": 60, "targets": {static}}}
            ]}},
            opts=pulumi.ResourceOptions(parent=self),
        )


if os.environ["HANDOVER_STAGE"] == "old":
    OldDnsRecords("dns", on_cluster)
else:
    args = DnsRecordsArgs(region_id=REGION, host=HOST, namespace=NAMESPACE, failover_address=None)
    DnsRecords("dns", args, on_cluster)
"""


class Healthy(KubeView):
    """The real write path (server-side apply as the reconciler's field manager) over a fixed view of
    two healthy boxes: what this test is about is who owns the records, not how they are chosen."""

    def observe(self) -> tuple[list[NodeView], list[PodView]]:
        nodes = [
            NodeView(name=n, ready=True, addresses=(NodeAddress("InternalIP", ip),))
            for n, ip in (("box-a", "198.51.100.1"), ("box-b", "198.51.100.2"))
        ]
        return nodes, [PodView(name=f"gw-{n.name}", node_name=n.name, ready=True) for n in nodes]


def wildcard(targets: list[str]) -> list[dict[str, Any]]:
    return [{"dnsName": f"*.{HOST}", "recordType": "A", "recordTTL": 60, "targets": targets}]


def test_the_records_change_hands_without_a_gap(kube_cluster: KubeCluster, tmp_path: Path) -> None:
    pulumi_cli = REPO / ".toolchain" / "bin" / "pulumi"
    if not pulumi_cli.exists():
        pytest.fail("the Pulumi CLI is not built: run `bash scripts/bootstrap.sh`")
    install_crd_fixture(kube_cluster, "dnsendpoint.yaml")
    namespace = kube_cluster.namespace("handover")
    custom = k8s.CustomObjectsApi(kube_cluster.api)

    def live() -> dict[str, Any]:
        return custom.get_namespaced_custom_object(
            DNSENDPOINT_GROUP, "v1alpha1", namespace, "dnsendpoints", NAME
        )

    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        f"name: handover\nruntime:\n  name: python\n  options:\n    virtualenv: {REPO / '.venv'}\n"
    )
    (project / "__main__.py").write_text(
        textwrap.dedent(PROGRAM).format(region=REGION, host=HOST, static=json.dumps(STATIC))
    )
    # Every run goes through scripts/private-tmp.sh, as the project's scripts run pulumi; the last
    # preview does not, and shows what it is for: the plugin's copy of the kubeconfig stays behind.
    outer_tmp = tmp_path / "tmpdir"
    outer_tmp.mkdir()
    env = cli_env(
        tmp_path,
        passphrase="test-only",
        PYTHONPATH=str(REPO),
        HANDOVER_NAMESPACE=namespace,
        HANDOVER_KUBECONFIG=str(kube_cluster.kubeconfig),
        TMPDIR=str(outer_tmp),
    )

    def pulumi(*args: str, stage: str = "new", mark: str = "", private: bool = True) -> str:
        command = [str(pulumi_cli), *args, "--non-interactive"]
        if private:
            command = ["bash", str(REPO / "scripts" / "private-tmp.sh"), *command]
        proc = subprocess.run(
            command,
            cwd=project,
            env={**env, "HANDOVER_STAGE": stage, "MARK": mark},
            text=True,
            capture_output=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
        if private:
            assert sorted(p.name for p in outer_tmp.iterdir()) == [], args
        return proc.stdout

    pulumi("stack", "init", "organization/handover/dev")
    pulumi("up", "--yes", "--skip-preview", stage="old")
    assert live()["spec"] == {"endpoints": wildcard(STATIC)}

    # Today's program, before the reconciler's first pass: nothing to update, the records stay.
    pulumi("up", "--yes", "--skip-preview")
    assert live()["spec"] == {"endpoints": wildcard(STATIC)}
    # An update of the object while the program's manager still owns the records: they stay too.
    pulumi("up", "--yes", "--skip-preview", mark="1")
    assert (live()["metadata"]["annotations"], live()["spec"]) == (
        {"tuist.dev/mark": "1"},
        {"endpoints": wildcard(STATIC)},
    )

    settings = Settings(
        region=REGION, host=HOST, namespace=namespace, gateway="unused", node_pool="unused", dnsendpoint=NAME
    )
    reconciler = RegionalDns(settings, Healthy(settings, None, None, custom))
    assert reconciler.reconcile_once().outcome is Outcome.WRITTEN
    mine = {"endpoints": wildcard(["198.51.100.1", "198.51.100.2"])}
    assert live()["spec"] == mine

    # The reconciler's records through an update of the object, a no-change up and a preview.
    pulumi("up", "--yes", "--skip-preview", mark="2")
    assert (live()["metadata"]["annotations"], live()["spec"]) == ({"tuist.dev/mark": "2"}, mine)
    pulumi("up", "--yes", "--skip-preview", mark="2")
    assert live()["spec"] == mine
    preview = pulumi("preview", "--diff", mark="2", private=False)
    assert "dns-public" not in preview, preview
    # Without private-tmp.sh: the kubeconfig the program gave the provider, client key included, is
    # left in TMPDIR (pulumi-kubernetes writeKubeconfigToFile). Should a release stop doing that, this
    # fails, and private-tmp.sh may go.
    left = [p for p in outer_tmp.iterdir() if p.name.startswith("kubeconfig")]
    assert len(left) == 1, sorted(p.name for p in outer_tmp.iterdir())
    assert "client-key-data" in left[0].read_text()
