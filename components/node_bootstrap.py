"""NodeBootstrap: the RBAC a cluster needs before a fleet's boxes can TLS-bootstrap their kubelets.

A self-joined kubelet authenticates with its machine's bootstrap token, whose Secret puts it in the
fleet's own group `system:bootstrappers:tuist-<fleet>` (providers/kube.py). With Node,RBAC
authorization nothing lets that group act until it is bound:

- `system:node-bootstrapper` lets it create (and read back) its CertificateSigningRequest;
- `system:certificates.k8s.io:certificatesigningrequests:nodeclient` is what kube-controller-manager's
  csrapproving controller checks (a SubjectAccessReview on the requester) before it auto-approves a
  `kubernetes.io/kube-apiserver-client-kubelet` CSR;
- `...:selfnodeclient`, bound to `system:nodes`, lets a joined kubelet renew its own client
  certificate (rotateCertificates) with its node identity.

Nothing broader: no binding to `system:bootstrappers` as a whole, so a token of one fleet (or one
made by kubeadm) is judged by its own bindings. The csrapproving controller does not retry a CSR
it could not approve, so these bindings must exist before any box of the fleet joins: depend on
`bindings`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi

from components import kube as k8s
from components.k8s import MANAGED_BY
from providers.kube import bootstrap_group

__all__ = [
    "NODE_BOOTSTRAPPER_ROLE",
    "NODE_CLIENT_APPROVAL_ROLE",
    "NODE_RENEWAL_ROLE",
    "NodeBootstrap",
    "NodeBootstrapArgs",
    "bootstrap_group",
]

NODE_BOOTSTRAPPER_ROLE = "system:node-bootstrapper"
NODE_CLIENT_APPROVAL_ROLE = "system:certificates.k8s.io:certificatesigningrequests:nodeclient"
NODE_RENEWAL_ROLE = "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"
NODES_GROUP = "system:nodes"
_RBAC = "rbac.authorization.k8s.io"
_FLEET = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class NodeBootstrapArgs:
    fleets: Sequence[str]  # the fleets whose boxes self-join this cluster


class NodeBootstrap(pulumi.ComponentResource):
    bindings: list[k8s.rbac.v1.ClusterRoleBinding]
    # Per fleet, the bindings its boxes' joins wait for: its group's two and the renewal binding. Not
    # every fleet's: a join depending on every binding of every fleet is a dependency per fleet per
    # machine, which grows with the square of the stack.
    by_fleet: dict[str, list[k8s.rbac.v1.ClusterRoleBinding]]

    def __init__(
        self, name: str, args: NodeBootstrapArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tuist:node_bootstrap:NodeBootstrap", name, None, opts)
        fleets = list(args.fleets)
        bad = [f for f in fleets if not isinstance(f, str) or not _FLEET.match(f)]
        if bad:
            raise ValueError(f"node bootstrap {name}: fleet names must be DNS labels, got {bad!r}")
        dupes = sorted({f for f in fleets if fleets.count(f) > 1})
        if dupes:
            raise ValueError(f"node bootstrap {name}: fleets listed twice: {', '.join(dupes)}")
        child = pulumi.ResourceOptions(parent=self)
        labels = {"app.kubernetes.io/managed-by": MANAGED_BY, "app.kubernetes.io/component": "node-bootstrap"}

        def binding(
            resource_name: str, binding_name: str, role: str, group: str
        ) -> k8s.rbac.v1.ClusterRoleBinding:
            return k8s.rbac.v1.ClusterRoleBinding(
                resource_name,
                metadata=k8s.meta.v1.ObjectMetaArgs(name=binding_name, labels=labels),
                role_ref=k8s.rbac.v1.RoleRefArgs(api_group=_RBAC, kind="ClusterRole", name=role),
                subjects=[k8s.rbac.v1.SubjectArgs(api_group=_RBAC, kind="Group", name=group)],
                opts=child,
            )

        self.bindings = []
        own: dict[str, list[k8s.rbac.v1.ClusterRoleBinding]] = {}
        for fleet in sorted(fleets):
            group = bootstrap_group(fleet)
            own[fleet] = [
                binding(
                    f"{name}-{fleet}-bootstrapper",
                    f"tuist:node-bootstrapper:{fleet}",
                    NODE_BOOTSTRAPPER_ROLE,
                    group,
                ),
                binding(
                    f"{name}-{fleet}-autoapprove",
                    f"tuist:node-autoapprove-bootstrap:{fleet}",
                    NODE_CLIENT_APPROVAL_ROLE,
                    group,
                ),
            ]
            self.bindings += own[fleet]
        if fleets:
            self.bindings.append(
                binding(
                    f"{name}-renewal",
                    "tuist:node-autoapprove-certificate-rotation",
                    NODE_RENEWAL_ROLE,
                    NODES_GROUP,
                )
            )
        self.by_fleet = {fleet: [*pair, *self.bindings[-1:]] for fleet, pair in own.items()}
        self.register_outputs({"bindings": [b.metadata.apply(lambda m: m["name"]) for b in self.bindings]})
