"""MachineClaimsCRD: registers the MachineClaim CustomResourceDefinition in the stack's cluster, and the
roles that say exactly what the machine providers do there.

Every MachineClaim resource depends on the CRD (components/fleet.py), so the apiserver knows the kind
before the first claim is recorded there, and `pulumi destroy` removes it only after every claim was
released. The manifest itself is providers/machine/crd.py, next to the code that writes the objects.

The roles are for the identity of the stack's `kubeconfig` secret when it is not cluster-admin (the
Kubernetes provider of the same stack applies ClusterRoles and bindings, so a deploy identity usually
is): bind `tuist-infra:machine-provider` (ClusterRole) and `tuist-infra:bootstrap-tokens` (Role in
kube-system) to it and the machine, claim and node-label providers have what they call and nothing
more (docs/machines.md, "The providers' access to the cluster").
"""

from __future__ import annotations

import pulumi

from components import kube as k8s
from components.k8s import MANAGED_BY
from providers.constants import CLAIM_GROUP, CLAIM_PLURAL
from providers.kube import BOOTSTRAP_NAMESPACE
from providers.machine.crd import claim_crd_manifest
from providers.machine.record import MACHINE_PROVIDER_ROLE

BOOTSTRAP_TOKENS_ROLE = "tuist-infra:bootstrap-tokens"

# (api group, resources, verbs): each is a call of providers/machine or providers/kube.py.
MACHINE_PROVIDER_RULES: list[tuple[str, list[str], list[str]]] = [
    # The claim and progress record (providers/machine/record.py): create-once, read, list by label,
    # delete with a resourceVersion precondition; progress moves through the status subresource only.
    (CLAIM_GROUP, [CLAIM_PLURAL], ["create", "get", "list", "delete"]),
    (CLAIM_GROUP, [f"{CLAIM_PLURAL}/status"], ["update"]),
    # Leaving: cordon, relabel (NodeLabels), delete the Node; read (refresh) and list (import).
    ("", ["nodes"], ["get", "list", "patch", "delete"]),
    # NodeLabels: the Node's extended resources (its egress budget) live in its status.
    ("", ["nodes/status"], ["patch"]),
    # Drain: the pods on the Node, evicted through the Eviction API (PodDisruptionBudgets apply).
    ("", ["pods"], ["list"]),
    ("", ["pods/eviction"], ["create"]),
    # The node-local claims of a released box: found through their volumes, then deleted.
    ("", ["persistentvolumes"], ["list"]),
    ("", ["persistentvolumeclaims"], ["delete"]),
]
# The one-hour bootstrap token of each join: a Secret in kube-system, created, never read back.
BOOTSTRAP_TOKEN_RULES: list[tuple[str, list[str], list[str]]] = [("", ["secrets"], ["create"])]


def _rules(rules: list[tuple[str, list[str], list[str]]]) -> list[k8s.rbac.v1.PolicyRuleArgs]:
    return [
        k8s.rbac.v1.PolicyRuleArgs(api_groups=[group], resources=resources, verbs=verbs)
        for group, resources, verbs in rules
    ]


class MachineClaimsCRD(pulumi.ComponentResource):
    crd: k8s.apiextensions.v1.CustomResourceDefinition
    role: k8s.rbac.v1.ClusterRole
    bootstrap_tokens_role: k8s.rbac.v1.Role

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tuist:cluster:MachineClaimsCRD", name, None, opts)
        manifest = claim_crd_manifest()
        child = pulumi.ResourceOptions(parent=self)
        labels = {
            "app.kubernetes.io/managed-by": MANAGED_BY,
            "app.kubernetes.io/component": "machine-provider",
        }
        self.crd = k8s.apiextensions.v1.CustomResourceDefinition(
            "machineclaims",
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            # Deleting a CRD deletes every object of its kind (here: which box each slot holds): the
            # resource going from the program (a rename, a removed component) must leave it in place.
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(retain_on_delete=True)),
        )
        self.role = k8s.rbac.v1.ClusterRole(
            f"{name}-provider",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=MACHINE_PROVIDER_ROLE, labels=labels),
            rules=_rules(MACHINE_PROVIDER_RULES),
            opts=child,
        )
        self.bootstrap_tokens_role = k8s.rbac.v1.Role(
            f"{name}-bootstrap-tokens",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=BOOTSTRAP_TOKENS_ROLE, namespace=BOOTSTRAP_NAMESPACE, labels=labels
            ),
            rules=_rules(BOOTSTRAP_TOKEN_RULES),
            opts=child,
        )
        self.register_outputs(
            {"name": manifest["metadata"]["name"], "roles": [MACHINE_PROVIDER_ROLE, BOOTSTRAP_TOKENS_ROLE]}
        )
