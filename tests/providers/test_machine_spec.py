"""The diff table (issue 12 point 1): for every input of MachineClaim and AdoptedMachine, what a change
does and why, stated here independently of providers/machine/spec.py, and held to the code; and the
input checks.

The why column is the contract: an input that create, update or release reads is compared (replace, an
update that reruns the join, or an update that records it because release reads state), never silently
dropped. A label edit is not the machine's (the NodeLabels resource carries it), so it previews small.
"""

from __future__ import annotations

from typing import Any

import pytest
from pulumi.output import Unknown
from pulumi.runtime import rpc

from providers.machine.spec import (
    CLAIM_FACTS,
    CLAIM_INPUTS,
    DEFAULT_TIMEOUTS,
    MACHINE_INPUTS,
    Change,
    Vendor,
    claim_diff,
    claim_input_problems,
    diff_table_markdown,
    machine_diff,
    machine_input_problems,
    node_labels,
    node_name_for,
    node_taints,
    parse_claim,
    parse_machine,
    parse_resource_id,
    provider_id_for,
    rejoin_needed,
)
from tests.providers.test_machine_support import claim_props, machine_props

# input -> (what a change must do, why), for a claimed and joined OVH box.
CLAIM_TABLE: dict[str, tuple[str, Any, str]] = {
    # input: (expected kind, new value, why)
    "vendor": ("replace", "dedibox", "a box at another vendor"),
    "fleet": ("replace", "kura-ovh-b", "a box of another fleet"),
    "marker": ("update", "tuist-kura-dev-ovh-b", "the update checks the box carries it; never a release"),
    "datacenter_prefix": ("replace", "gra", "the claimed box (bhs6) is outside the new datacenter"),
    "excluded_boxes": ("replace", ["ns1"], "the claimed box leaves the fleet: released, another claimed"),
    "environment": ("update", "staging", "release reads it: the production guard"),
    "os": ("update", "debian_12", "release reinstalls with it: a later release must use the new one"),
    "ssh_user": ("update", "debian", "release reinstalls Dedibox boxes with this login"),
    "ssh_port": ("update", 2200, "a Robot release dials it"),
    "allow_release": ("update", True, "release reads it"),
    "allow_production_release": ("update", True, "release reads it"),
    "api_server": ("update", "https://cp.dev.invalid:6443", "the claim is now recorded in the cluster"),
    "timeouts": ("update", {"release_wait_install": 10}, "release's budgets"),
    "install_artifacts": ("update", {"kata_static_sha256": "0" * 64}, "a Robot release reinstalls with them"),
    "project": ("none", "other", "the claim keeps the token it was created with"),
    "stack": ("none", "other", "the claim keeps the token it was created with"),
    "resource_name": ("none", "kura-ovh-9", "the claim keeps the token it was created with"),
    "urn": ("none", "urn:pulumi:dev::tuist-infra::x::y", "bookkeeping"),
}

MACHINE_TABLE: dict[str, tuple[str, Any, str]] = {
    "box_id": ("replace", "ns2", "another box: a new Node; the old one is deleted"),
    "vendor": ("replace", "dedibox", "another box"),
    "fleet": ("replace", "kura-ovh-b", "a Node of another fleet"),
    "public_ipv4": ("rejoin", "203.0.113.99", "the kubelet's --node-ip"),
    "provider_id": ("rejoin", "ovh://gra1/ns1", "the kubelet's --provider-id"),
    "kubernetes_minor": ("rejoin", "v1.35", "the kubelet's apt repository tracks the control plane"),
    "api_server": ("rejoin", "https://cp.dev.invalid:6443", "the kubelet's bootstrap kubeconfig"),
    "cluster_dns": ("rejoin", "10.96.0.53", "the kubelet hands pods another nameserver"),
    "cluster_domain": ("rejoin", "cluster.example", "the kubelet hands pods other search domains"),
    "private_network": (
        "rejoin",
        "9e700000-0000-4000-8000-000000000001",
        "Elastic Metal: the box is attached and brings pn0 up again",
    ),
    "node_agent": (
        "rejoin",
        {"url": "https://example.invalid/tart-kubelet", "sha256": "1" * 64, "registers_node": True},
        "Apple silicon: the agent is installed again and its launchd job restarted",
    ),
    "ssh_user": ("update", "debian", "the next SSH session logs in as it"),
    "ssh_port": ("update", 2200, "the next SSH session dials it"),
    "timeouts": ("update", {"draining": 10}, "leaving the cluster's budgets"),
    "environment": ("update", "staging", "read by delete"),
    "labels": ("none", {"tuist.dev/tier": "gold"}, "registration only: NodeLabels edits the Node"),
    "taints": ("none", [], "registration only: NodeLabels edits the Node"),
    "node_pool": ("none", "kura-ovh-b", "registration only: NodeLabels edits the Node"),
    "install_artifacts": ("none", {"kata_static_sha256": "0" * 64}, "the adoption's install is done"),
    "datacenter": ("none", "gra1", "informational"),
    "box_name": ("none", "other", "informational"),
    "claim_token": ("none", "fedcba987654", "a new claim is a new box_id"),
    "claim_id": ("none", "ovh:ns2", "read only to see a preview through (box_id says another box)"),
    "project": ("none", "other", "the claim owns the identity"),
    "stack": ("none", "other", "the claim owns the identity"),
    "resource_name": ("none", "x", "the claim owns the identity"),
    "urn": ("none", "urn:pulumi:dev::tuist-infra::x::y", "bookkeeping"),
}

CLAIM_OUTS = {"box_id": "ns1", "datacenter": "bhs6", "claim_token": "0123456789ab", "__provider": "p"}


def claimed() -> dict[str, Any]:
    return {**claim_props("kura-ovh", 0), **CLAIM_OUTS}


def joined() -> dict[str, Any]:
    claim = {**claimed(), "public_ipv4": "203.0.113.9", "provider_id": "ovh://bhs6/ns1", "box_name": "ns1"}
    return {**machine_props("kura-ovh", 0, claim), "host_key_fingerprint": "SHA256:x", "__provider": "p"}


def kind(result: Any, rejoin: list[str]) -> str:
    if result.replaces:
        return "replace"
    if not result.changes:
        return "none"
    return "rejoin" if rejoin else "update"


def test_the_tables_name_every_input_the_code_compares() -> None:
    assert set(CLAIM_TABLE) == set(CLAIM_INPUTS)
    assert set(MACHINE_TABLE) == set(MACHINE_INPUTS)
    # ... and every input the fleet passes is in the table (nothing reaches a provider unstated).
    from components.fleet import claim_props as fleet_claim_props
    from components.fleet import machine_props as fleet_machine_props
    from tests.components.test_fleet import fleet_args

    args = fleet_args()
    assert set(fleet_claim_props(args, project="p", stack="s", slot="x")) | {"urn"} <= set(CLAIM_INPUTS)
    from_claim = {*CLAIM_FACTS, "claim_id", "urn"}
    extra = {"resource_name", "timeouts"}  # the resource's own name; budgets (tests shorten them)
    assert set(fleet_machine_props(args, project="p", stack="s")) | from_claim | extra == set(MACHINE_INPUTS)


@pytest.mark.parametrize("key", list(CLAIM_TABLE))
def test_claim_diff(key: str) -> None:
    expected, value, why = CLAIM_TABLE[key]
    result = claim_diff(claimed(), {**claim_props("kura-ovh", 0), key: value})
    assert kind(result, []) == expected, why
    assert result.delete_before_replace is (expected == "replace")  # boxes are scarce: release first
    if expected == "replace":
        assert result.replaces == [key]
    assert CLAIM_INPUTS[key].change.value.startswith(
        {"replace": "replace", "update": "update, state only", "none": "no change"}[expected]
    )


@pytest.mark.parametrize("key", list(MACHINE_TABLE))
def test_machine_diff(key: str) -> None:
    expected, value, why = MACHINE_TABLE[key]
    olds = joined()
    news = {k: v for k, v in olds.items() if k not in ("host_key_fingerprint", "__provider")}
    news[key] = value
    result = machine_diff(olds, news)
    assert kind(result, rejoin_needed(olds, news)) == expected, why


def test_a_narrower_or_wider_datacenter_prefix_the_box_still_matches_is_recorded_not_replaced() -> None:
    for prefix in ("BHS6", "b", None):
        result = claim_diff(claimed(), {**claim_props("kura-ovh", 0), "datacenter_prefix": prefix})
        assert (result.changes, result.replaces) == (True, []), prefix


def test_excluding_another_box_is_recorded_and_excluding_the_claimed_one_replaces_the_claim() -> None:
    for excluded in (["ns2"], []):
        result = claim_diff(claimed(), {**claim_props("kura-ovh", 0), "excluded_boxes": excluded})
        assert (result.changes, result.replaces) == (True, []), excluded
    # Absent (claims made before the key) and None are the same: no change.
    assert claim_diff(claimed(), {**claim_props("kura-ovh", 0), "excluded_boxes": None}).changes is False
    result = claim_diff(claimed(), {**claim_props("kura-ovh", 0), "excluded_boxes": ["ns2", "ns1"]})
    assert (result.replaces, result.delete_before_replace) == (["excluded_boxes"], True)
    assert claim_input_problems({**claim_props("kura-ovh", 0), "excluded_boxes": "ns1"}) == [
        ("excluded_boxes", "must be a list of box ids, got 'ns1'")
    ]


def test_unknown_values_in_a_preview_count_as_changes() -> None:
    """A slot whose claim is being replaced: the machine's box_id is unknown in the preview."""
    olds = joined()
    news = {**olds, "box_id": rpc.UNKNOWN}
    assert machine_diff(olds, news).replaces == ["box_id"]
    # As the dynamic provider process hands them over (the SDK's Unknown), and in the checks too.
    news = {**olds, "box_id": Unknown(), "public_ipv4": Unknown()}
    assert machine_diff(olds, news).replaces == ["box_id"]
    assert machine_input_problems(news) == []
    assert claim_diff(
        claimed(), {**claim_props("kura-ovh", 0), "datacenter_prefix": rpc.UNKNOWN}
    ).replaces == ["datacenter_prefix"]
    unknown_marker = claim_diff(claimed(), {**claim_props("kura-ovh", 0), "marker": rpc.UNKNOWN})
    assert (unknown_marker.changes, unknown_marker.replaces) == (True, [])  # an update: it checks the box


def test_a_preview_of_the_claims_update_in_place_keeps_the_machine_on_its_box() -> None:
    """The claim updated in place (a release switch): the preview cannot run its update, so every fact
    the machine reads from it is unknown; its ID is known and names the machine's box."""
    olds = joined()
    facts = {key: Unknown() for key in ("box_id", "box_name", "datacenter", "public_ipv4", "provider_id")}
    news = {**olds, **facts, "claim_token": Unknown(), "claim_id": f"ovh:{olds['box_id']}"}
    assert (machine_diff(olds, news).changes, machine_diff(olds, news).replaces) == (False, [])
    # A claim ID naming another box, or none known (the claim is replaced): another box, as before.
    assert machine_diff(olds, {**news, "claim_id": "ovh:ns2"}).replaces == ["box_id"]
    assert machine_diff(olds, {**news, "claim_id": Unknown()}).replaces == ["box_id"]
    assert machine_diff(olds, {**news, "claim_id": rpc.UNKNOWN}).replaces == ["box_id"]
    # Only unknowns are read from the old state: a known fact that changed is still a change.
    assert machine_diff(olds, {**news, "public_ipv4": "203.0.113.99"}).changes is True


def test_nothing_changed_is_no_change_whatever_the_order_or_number_type() -> None:
    olds = joined()
    news = {**olds, "labels": {}, "ssh_port": float(olds["ssh_port"])}
    assert machine_diff(olds, news).changes is False
    assert claim_diff(claimed(), claim_props("kura-ovh", 0)).changes is False
    # State written before ssh_port was an input dialled port 22.
    legacy = {k: v for k, v in claimed().items() if k != "ssh_port"}
    assert claim_diff(legacy, claim_props("kura-ovh", 0, ssh_port=22)).changes is False
    assert claim_diff(legacy, claim_props("kura-ovh", 0, ssh_port=2222.0)).changes is True


# --- checks ---------------------------------------------------------------------------------------------


def test_claim_checks_report_each_bad_input_by_name() -> None:
    props = claim_props(
        "kura-ovh",
        0,
        vendor="hetzner",
        marker="tuist-kura-ovh",
        timeouts={"joining": 0, "forever": 1},
        api_server="http://x:6443",
        allow_release="yes",
        ssh_port=0,
        ssh_user=" ubuntu",
        os="Ubuntu 24.04",
    )
    assert claim_input_problems(props) == [
        ("vendor", "must be one of ovh, dedibox, robot, scaleway_em, applesilicon"),
        ("ssh_user", "' ubuntu' has leading or trailing whitespace"),
        ("api_server", "must be https://<host>:<port> or null, got 'http://x:6443'"),
        ("ssh_port", "must be a TCP port (1-65535), got 0"),
        ("timeouts.joining", "must be a number of seconds > 0"),
        ("timeouts.forever", "unknown; known: " + ", ".join(sorted(DEFAULT_TIMEOUTS))),
        ("os", "'Ubuntu 24.04' is not an OS label"),
        ("marker", "'tuist-kura-ovh' does not contain the environment name 'dev'"),
        ("allow_release", "must be true or false, got 'yes'"),
    ]
    assert claim_input_problems(claim_props("kura-ovh", 0)) == []
    # What the self-join would refuse at join time, after the claim: refused here, before it.
    for url in ("https://cp:6443/", "https://cp:99999", "https://[::1]:6443", "https://..:6443"):
        assert claim_input_problems(claim_props("kura-ovh", 0, api_server=url)) == [
            ("api_server", f"must be https://<host>:<port> or null, got '{url}'")
        ]
    with pytest.raises(Exception, match=r"^MachineClaim inputs: vendor: must be one of"):
        parse_claim(props)


def test_a_long_bad_value_is_quoted_cut_short() -> None:
    problems = claim_input_problems(claim_props("kura-ovh", 0, marker="x" * 10_000))
    assert problems == [
        ("marker", "is 10000 characters long; ovh markers take at most 34 (a claim adds 16)"),
        ("marker", "'" + "x" * 56 + "... does not contain the environment name 'dev'"),
    ]


def test_machine_checks_need_the_claims_outputs() -> None:
    props = machine_props("kura-ovh", 0, {})
    assert machine_input_problems(props) == []  # the preview: the claim's outputs are not known yet
    with pytest.raises(Exception, match="box_id: must come from the machine's claim"):
        parse_machine(props)
    bad = machine_props(
        "kura-ovh",
        0,
        {},
        kubernetes_minor="1.34",
        taints=[{"key": "a", "effect": "Never"}],
        cluster_dns="10.96.0.300",
        cluster_domain="Cluster.Local.",
    )
    assert machine_input_problems(bad) == [
        ("kubernetes_minor", "'1.34' is not a Kubernetes minor (v1.NN)"),
        ("cluster_dns", "'10.96.0.300' is not an IPv4 address"),
        ("cluster_domain", "'Cluster.Local.' is not a DNS domain (cluster.local)"),
        ("taints[0].effect", "must be NoSchedule, PreferNoSchedule, NoExecute"),
    ]


# --- names ------------------------------------------------------------------------------------------------


def test_node_names_provider_ids_and_resource_ids() -> None:
    assert node_name_for("kura-ovh", "ns1001.ip-203-0-113.net") == "kura-ovh-ns1001-ip-203-0-113-net"
    assert node_name_for("kura-dedibox", "fr-par-2/200101") == "kura-dedibox-fr-par-2-200101"
    assert len(node_name_for("f" * 40, "x" * 40)) == 63
    assert provider_id_for(Vendor.OVH, "ns1", "BHS6") == "ovh://bhs6/ns1"
    assert provider_id_for(Vendor.DEDIBOX, "fr-par-2/200101", "DC5") == "dedibox://fr-par-2/200101"
    assert provider_id_for(Vendor.ROBOT, "2345601", "FSN1") == "hrobot://2345601"
    em = "fr-par-2/e1000000-0000-4000-8000-000000000001"
    mac = "fr-par-3/a5000000-0000-4000-8000-000000000001"
    assert provider_id_for(Vendor.SCALEWAY_EM, em, "fr-par-2") == f"scaleway://{em}"
    assert provider_id_for(Vendor.APPLESILICON, mac, "fr-par-3") == f"applesilicon://{mac}"
    assert parse_resource_id(f"applesilicon:{mac}") == (Vendor.APPLESILICON, mac)
    assert parse_resource_id("dedibox:fr-par-2/200101") == (Vendor.DEDIBOX, "fr-par-2/200101")
    with pytest.raises(Exception, match="is not <vendor>:<box id>"):
        parse_resource_id("hetzner:1")


def test_robot_nodes_carry_the_kata_labels_and_the_runner_taint_once() -> None:
    assert node_labels(Vendor.ROBOT, "runners", "runners-linux", {"a": "b"}) == {
        "a": "b",
        "katacontainers.io/kata-runtime": "true",
        "node.cluster.x-k8s.io/pool": "runners-linux",
        "tuist.dev/fleet": "runners",
        "tuist.dev/kata-runtime": "true",
    }
    taint = {"key": "tuist.dev/runner-tier", "value": "bare-metal", "effect": "NoSchedule"}
    assert node_taints(Vendor.ROBOT, []) == [taint]
    assert node_taints(Vendor.ROBOT, [taint]) == [taint]
    assert node_taints(Vendor.OVH, []) == []
    assert Change.REJOIN.value == "update, rerun the self-join"


def test_docs_print_the_tables_the_code_uses() -> None:
    from providers.machine.node_labels import NODE_LABELS_INPUTS
    from providers.machine.states import markdown_table
    from tests.providers.test_machine_support import REPO

    text = (REPO / "docs" / "machines.md").read_text()
    for table in (CLAIM_INPUTS, MACHINE_INPUTS, NODE_LABELS_INPUTS):
        assert diff_table_markdown(table) in text
    assert markdown_table() in text


# --- Elastic Metal and Apple silicon inputs ----------------------------------------------------------------

AGENT = {"url": "https://releases.example/tart-kubelet", "sha256": "a" * 64, "registers_node": True}


def test_a_mac_machine_needs_its_node_agent_and_a_linux_one_may_not_have_one() -> None:
    mac = {**joined(), "vendor": "applesilicon", "node_agent": None}
    assert (
        "node_agent",
        "required on applesilicon: {url, sha256, registers_node}",
    ) in machine_input_problems(mac)
    bad = {**mac, "node_agent": {**AGENT, "sha256": "x", "url": "ftp://x", "registers_node": "yes"}}
    assert [p for p in machine_input_problems(bad) if p[0].startswith("node_agent")] == [
        ("node_agent.url", "'ftp://x' is not an http(s) URL"),
        ("node_agent.sha256", "must be 64 lowercase hex digits"),
        ("node_agent.registers_node", "must be true or false"),
    ]
    assert (
        "node_agent",
        "only applesilicon boxes run the macOS node agent, not ovh",
    ) in machine_input_problems({**joined(), "node_agent": AGENT})
    spec = parse_machine({**mac, "node_agent": {**AGENT, "registers_node": False}})
    assert (spec.is_macos, spec.registers_node) == (True, False)
    assert parse_machine(joined()).registers_node is True  # every Linux kubelet registers its Node


def test_a_private_network_is_an_elastic_metal_uuid() -> None:
    em = {**joined(), "vendor": "scaleway_em"}
    assert parse_machine(
        {**em, "private_network": "9e700000-0000-4000-8000-000000000001"}
    ).private_network == ("9e700000-0000-4000-8000-000000000001")
    assert ("private_network", "'pn0' is not a Private Network id (a UUID)") in machine_input_problems(
        {**em, "private_network": "pn0"}
    )
    assert (
        "private_network",
        "only scaleway_em boxes join a Private Network, not ovh",
    ) in machine_input_problems({**joined(), "private_network": "9e700000-0000-4000-8000-000000000001"})


def test_a_production_claim_whose_record_does_not_say_its_switches_allow_release_updates() -> None:
    """A claim made before the record carried the switches: its machine could never leave, so the
    claim updates (recording them) even though no input changed. Nowhere else."""
    prod = claim_props(
        "kura-ovh",
        0,
        environment="production",
        marker="tuist-kura-production-ovh",
        api_server="https://cp.tuist.dev:6443",
        allow_release=True,
        allow_production_release=True,
    )
    olds = {**prod, "box_id": "ns3001.ip-1-2-3.eu"}
    diff = claim_diff(olds, prod)
    assert (diff.changes, diff.replaces) == (True, [])
    assert claim_diff({**olds, "release_allowed": True}, prod).changes is False
    disarmed = {**prod, "allow_production_release": False}
    assert claim_diff({**olds, **disarmed}, disarmed).changes is False
    staging = {
        **prod,
        "environment": "staging",
        "marker": "tuist-kura-staging-ovh",
        "allow_production_release": False,
    }
    assert claim_diff({**olds, **staging}, staging).changes is False
    no_cluster = {**prod, "api_server": None}
    assert claim_diff({**olds, **no_cluster}, no_cluster).changes is False


@pytest.mark.parametrize("state", ["leaving", "joining"])
def test_a_machine_whose_leave_or_join_stopped_halfway_is_joined_again_by_the_next_update(state: str) -> None:
    """`pulumi refresh` reads `state: leaving` from the box's record when the machine's delete failed
    halfway and the machine is still in the stack (the shrink reverted), and `state: joining` when its
    last update failed halfway (the change perhaps reverted since): with no input changed, the diff is
    an update that joins the box again (and uncordons a leaving Node), never a replace."""
    olds = {**joined(), "state": state}
    news = {k: v for k, v in joined().items() if k not in ("host_key_fingerprint", "__provider")}
    result = machine_diff(olds, news)
    assert (result.changes, result.replaces) == (True, [])
    assert rejoin_needed(olds, news) == ["state"]
    assert rejoin_needed({**olds, "state": "ready"}, news) == []
    assert machine_diff({**olds, "state": "ready"}, news).changes is False
