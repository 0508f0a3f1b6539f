"""NodeBootstrap under Pulumi mocks: the bindings TLS bootstrap needs, for each fleet's group only.

tests/cluster/test_node_bootstrap_rbac.py applies exactly these objects to a real control plane
and shows a kubelet joins with them and never gets a certificate without them.
"""

from __future__ import annotations

import datetime as dt

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.node_bootstrap import NodeBootstrap, NodeBootstrapArgs, bootstrap_group
from providers.kube import BootstrapToken, bootstrap_token_secret
from tests.support.k8s_schema import ManifestRecorder, collect_manifests, validate_manifest


def render(fleets: list[str]) -> ManifestRecorder:
    def build() -> None:
        cluster = k8s.Provider("cluster", render_yaml_to_directory="/nonexistent-render-dir")
        NodeBootstrap(
            "node-bootstrap",
            NodeBootstrapArgs(fleets=fleets),
            opts=pulumi.ResourceOptions(providers=[cluster]),
        )

    return collect_manifests(build)


def bindings_by_role(rendered: ManifestRecorder) -> dict[str, list[list[tuple[str, str, str]]]]:
    """roleRef name -> the subjects of each binding to it, as (apiGroup, kind, name)."""
    by_role: dict[str, list[list[tuple[str, str, str]]]] = {}
    for binding in rendered.of_kind("ClusterRoleBinding"):
        assert binding["roleRef"]["kind"] == "ClusterRole"
        subjects = [(s.get("apiGroup", ""), s["kind"], s["name"]) for s in binding["subjects"]]
        by_role.setdefault(binding["roleRef"]["name"], []).append(subjects)
    return {role: sorted(subjects) for role, subjects in by_role.items()}


def group(name: str) -> tuple[str, str, str]:
    return ("rbac.authorization.k8s.io", "Group", name)


def test_each_fleets_bootstrap_group_may_create_csrs_and_have_them_auto_approved():
    by_role = bindings_by_role(render(["robot-linux", "ovh-us-east"]))
    per_fleet = [
        [group("system:bootstrappers:tuist-ovh-us-east")],
        [group("system:bootstrappers:tuist-robot-linux")],
    ]
    assert by_role["system:node-bootstrapper"] == per_fleet
    assert by_role["system:certificates.k8s.io:certificatesigningrequests:nodeclient"] == per_fleet


def test_joined_nodes_may_renew_their_own_client_certificates_once():
    by_role = bindings_by_role(render(["ovh-us-east", "robot-linux"]))
    assert by_role["system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"] == [
        [group("system:nodes")]
    ]


def test_nothing_is_granted_to_every_bootstrap_token():
    # system:bootstrappers holds every bootstrap token (kubeadm's too): binding it would let any
    # token of any fleet, or of another tool, get a node certificate approved.
    rendered = render(["ovh-us-east"])
    subjects = [s for b in rendered.of_kind("ClusterRoleBinding") for s in b["subjects"]]
    assert {s["name"] for s in subjects} == {"system:bootstrappers:tuist-ovh-us-east", "system:nodes"}
    assert not rendered.of_kind("ClusterRole") and not rendered.of_kind("Role")
    assert {b["roleRef"]["name"] for b in rendered.of_kind("ClusterRoleBinding")} == {
        "system:node-bootstrapper",
        "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
    }


def test_the_group_bound_is_the_one_the_fleets_token_secret_authenticates_into():
    secret = bootstrap_token_secret(
        BootstrapToken("abcdef", "0123456789abcdef"),
        fleet="ovh-us-east",
        node_name="kura-us-east-1",
        now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        ttl=dt.timedelta(hours=1),
    )
    assert secret.string_data["auth-extra-groups"] == bootstrap_group("ovh-us-east")
    # The bootstrap-token authenticator only honours extra groups of this form.
    assert bootstrap_group("ovh-us-east").startswith("system:bootstrappers:")


def test_every_object_is_a_valid_cluster_role_binding():
    for manifest in render(["ovh-us-east"]).manifests:
        validate_manifest(manifest)


def test_no_fleet_binds_nothing():
    assert render([]).manifests == []


@pytest.mark.parametrize(
    ("fleets", "message"),
    [
        (["Bad_Fleet"], "node bootstrap node-bootstrap: fleet names must be DNS labels, got ['Bad_Fleet']"),
        (["a", "a"], "node bootstrap node-bootstrap: fleets listed twice: a"),
    ],
)
def test_bad_fleet_names_are_refused(fleets: list[str], message: str):
    with pytest.raises(Exception) as err:
        render(fleets)
    assert message in str(err.value)


@pytest.mark.parametrize("stack", ["dev", "staging", "production"])
def test_every_join_waits_for_its_fleets_bootstrap_bindings(stack: str) -> None:
    # kube-controller-manager's CSR approver never looks at a CSR again once it could not approve it:
    # a kubelet whose CSR came before these bindings would never join. The whole program, as the
    # engine sees its registrations.
    from tests.components.test_control_plane_firewall import BoxAddresses, run_program
    from tests.config.stacks import stack_raw

    run = run_program(stack, stack_raw(stack), BoxAddresses())
    bindings = {
        r.name: r.urn
        for r in run.monitor.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding")
        if r.name.startswith("node-bootstrap-")
    }
    machines = run.monitor.of_type("pulumi-python:dynamic/machine:AdoptedMachine")
    assert machines
    for machine in machines:
        fleet = machine.name.rsplit("-", 1)[0]
        own = {
            bindings[f"node-bootstrap-{fleet}-bootstrapper"],
            bindings[f"node-bootstrap-{fleet}-autoapprove"],
        }
        assert own <= set(machine.dependencies), (machine.name, machine.dependencies)
