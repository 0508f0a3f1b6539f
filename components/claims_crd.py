"""MachineClaimsCRD: registers the MachineClaim CustomResourceDefinition in the stack's cluster.

Every MachineClaim resource depends on it (components/fleet.py), so the apiserver knows the kind before
the first claim is recorded there, and `pulumi destroy` removes it only after every claim was released.
The manifest itself is providers/machine/crd.py, next to the code that writes the objects.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from providers.machine.crd import claim_crd_manifest


class MachineClaimsCRD(pulumi.ComponentResource):
    crd: k8s.apiextensions.v1.CustomResourceDefinition

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tuist:cluster:MachineClaimsCRD", name, None, opts)
        manifest = claim_crd_manifest()
        self.crd = k8s.apiextensions.v1.CustomResourceDefinition(
            "machineclaims",
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"name": manifest["metadata"]["name"]})
