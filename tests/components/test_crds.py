"""The program's CustomResourceDefinitions stay in the cluster when their Pulumi resource goes.

Deleting a CRD deletes every object of its kind: the MachineClaims (which box each slot holds), the
DNSEndpoints (the regions' public records), the RunnerPools. A rename or a removed component must
not do that, so each CRD is `retain_on_delete`.
"""

from __future__ import annotations

from components.claims_crd import MachineClaimsCRD
from config.models import Cluster
from tests.components.test_external_dns import render as render_external_dns
from tests.components.test_runners import render as render_runners
from tests.components.test_runners import stack_args
from tests.support.k8s_schema import collect_manifests


def test_every_crd_of_the_program_is_retained_when_its_resource_is_deleted(cluster: Cluster) -> None:
    claims = collect_manifests(lambda: MachineClaimsCRD("machine-claims"))
    assert claims.options["machineclaims"].retain_on_delete is True
    dns = render_external_dns(cluster)
    assert dns.options["external-dns-dnsendpoint-crd"].retain_on_delete is True
    runners = render_runners(stack_args())
    [crd] = [name for name in runners.options if name.endswith("-crd")]
    assert runners.options[crd].retain_on_delete is True
