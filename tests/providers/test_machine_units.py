"""The machine provider's pure parts: candidate filtering and skip reasons, names, the diff table,
input checks, the release guard, and what the provider object pickles into state."""

from __future__ import annotations

import base64
import json
import pickle
import subprocess
import sys

import pytest
from pulumi.dynamic import ConfigureRequest
from pulumi.dynamic.config import Config
from pulumi.dynamic.dynamic import serialize_provider

from config.models import Vendor
from providers.machine import (
    DEV_API_SERVER,
    MachineError,
    MachineInputError,
    MachineProvider,
    NotConfiguredError,
    dev_placeholder_ca,
    input_problems,
    machine_diff,
    no_candidate_message,
    node_name_for,
    parse_spec,
    provider_id_for,
    release_refusal,
    select_boxes,
    skip_reason,
    ssh_target,
)
from providers.ssh.runner import SshTarget
from providers.vendor import Box, Claim
from tests.providers.test_machine_support import REPO, machine_props

TOKEN = "0123456789ab"


def box(
    id_: str,
    marker_field: str,
    *,
    vendor: Vendor = Vendor.OVH,
    claim: Claim | None = None,
    has_os: bool = True,
    datacenter: str = "bhs6",
    ip: str | None = "203.0.113.9",
    tags: tuple[str, ...] = (),
) -> Box:
    return Box(
        vendor=vendor,
        id=id_,
        name=id_,
        datacenter=datacenter,
        public_ipv4=ip,
        state="ok",
        offer="Advance-1",
        marker_field=marker_field,
        claim=claim,
        has_os=has_os,
        tags=tags,
    )


def reason(b: Box, *, vendor: Vendor = Vendor.OVH, prefix: str | None = "bhs") -> str | None:
    return skip_reason(b, marker="tuist-kura-dev-ovh", token=TOKEN, vendor=vendor, datacenter_prefix=prefix)


# --- candidates -----------------------------------------------------------------------------------------


def test_skip_reasons_name_each_case() -> None:
    assert reason(box("a", "tuist-kura-dev-ovh-1")) is None
    assert reason(box("a", "tuist-kura-staging-ovh-1")) == (
        "marked for another environment or fleet ('tuist-kura-staging-ovh-1')"
    )
    assert reason(box("a", "ns1.example.net")) == "not marked for this fleet ('ns1.example.net')"
    assert reason(box("a", "")) == "not marked for this fleet ('<empty>')"
    assert reason(box("a", "tuist-kura-dev-ovh-1", claim=Claim("fedcba987654"))) == "claimed by fedcba987654"
    assert reason(box("a", "tuist-kura-dev-ovh-1", claim=Claim("fedcba987654", releasing=True))) == (
        "releasing (claim fedcba987654)"
    )
    assert reason(box("a", "tuist-kura-dev-ovh-1", claim=Claim(TOKEN, releasing=True))) == (
        "releasing (claim this machine's own, unfinished)"
    )
    assert reason(box("a", "tuist-kura-dev-ovh-1", has_os=False)) == "no OS installed (prep the box first)"
    assert reason(box("a", "tuist-kura-dev-ovh-1", datacenter="gra3")) == (
        "datacenter 'gra3' does not start with 'bhs'"
    )
    assert reason(box("a", "tuist-kura-dev-ovh-1", datacenter="BHS8")) is None  # prefix, any case
    assert reason(box("a", "tuist-kura-dev-ovh-1", ip=None)) == "no public IPv4"
    # Our own live claim is not a reason to skip: a retried create resumes there.
    assert reason(box("a", "tuist-kura-dev-ovh-1", claim=Claim(TOKEN))) is None


def test_robot_boxes_need_no_os_because_they_are_installed_on_adopt() -> None:
    robot = box("2345601", "tuist-kura-dev-ovh-1", vendor=Vendor.ROBOT, has_os=False)
    assert reason(robot, vendor=Vendor.ROBOT, prefix=None) is None


def test_selection_is_lexical_and_prefers_the_own_claim() -> None:
    boxes = [
        box("ns3", "tuist-kura-dev-ovh-3"),
        box("ns1", "tuist-kura-dev-ovh-1", claim=Claim("fedcba987654")),
        box("ns2", "tuist-kura-dev-ovh-2"),
        box("ns0", "tuist-kura-prod-ovh-0"),
    ]
    picked = select_boxes(
        boxes, marker="tuist-kura-dev-ovh", token=TOKEN, vendor=Vendor.OVH, datacenter_prefix=None
    )
    assert picked.own is None
    assert [b.id for b in picked.candidates] == ["ns2", "ns3"]
    assert picked.skipped == [
        ("ns0", "not marked for this fleet ('tuist-kura-prod-ovh-0')"),
        ("ns1", "claimed by fedcba987654"),
    ]
    mine = [*boxes, box("ns4", "tuist-kura-dev-ovh-4", claim=Claim(TOKEN))]
    again = select_boxes(
        mine, marker="tuist-kura-dev-ovh", token=TOKEN, vendor=Vendor.OVH, datacenter_prefix=None
    )
    assert again.own is not None and again.own.id == "ns4"


def test_dedibox_marker_is_a_tag() -> None:
    tagged = box("fr-par-2/1", "tuist-kura-dev", vendor=Vendor.DEDIBOX, tags=("tuist-kura-dev",))
    other = box("fr-par-2/2", "tuist-kura-devx", vendor=Vendor.DEDIBOX, tags=("tuist-kura-devx",))
    picked = select_boxes(
        [tagged, other], marker="tuist-kura-dev", token=TOKEN, vendor=Vendor.DEDIBOX, datacenter_prefix=None
    )
    assert [b.id for b in picked.candidates] == ["fr-par-2/1"]


def test_no_candidate_message_lists_every_box() -> None:
    assert no_candidate_message(
        "kura-ovh", "tuist-kura-dev-ovh", 2, [("a", "claimed by x"), ("b", "no public IPv4")]
    ) == (
        "fleet kura-ovh: no adoptable box with marker 'tuist-kura-dev-ovh' among the 2 boxes seen\n"
        "  a: claimed by x\n"
        "  b: no public IPv4"
    )


# --- names ------------------------------------------------------------------------------------------------


def test_node_names_and_provider_ids() -> None:
    assert node_name_for("kura-ovh", "ns1001.ip-203-0-113.net") == "kura-ovh-ns1001-ip-203-0-113-net"
    assert node_name_for("kura-dedibox", "fr-par-2/200101") == "kura-dedibox-fr-par-2-200101"
    assert len(node_name_for("f" * 40, "x" * 40)) == 63
    assert provider_id_for(box("ns1", "m", datacenter="BHS6")) == "ovh://bhs6/ns1"
    assert provider_id_for(box("fr-par-2/200101", "m", vendor=Vendor.DEDIBOX)) == "dedibox://fr-par-2/200101"
    assert provider_id_for(box("2345601", "m", vendor=Vendor.ROBOT)) == "hrobot://2345601"


# --- diff -------------------------------------------------------------------------------------------------

OUTPUTS = {
    "box_id": "ns1",
    "host_key_fingerprint": "SHA256:x",
    "node_name": "n",
    "state": "ready",
    "__provider": "old",
}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"vendor": "dedibox"}, ("replace", ["vendor"])),
        ({"fleet": "kura-ovh-2"}, ("replace", ["fleet"])),
        ({"marker": "tuist-kura-dev-ovh-b"}, ("replace", ["marker"])),
        ({"vendor": "robot", "marker": "tuist-bm-dev-"}, ("replace", ["vendor", "marker"])),
        ({"labels": {"tuist.dev/tier": "gold"}}, ("update", [])),
        ({"taints": []}, ("update", [])),
        ({"node_pool": "kura-ovh-b"}, ("update", [])),
        ({"allow_release": True}, ("update", [])),
        ({"allow_production_release": True}, ("update", [])),
        ({"ssh_port": 2200}, ("update", [])),
        ({"datacenter_prefix": "gra"}, ("none", [])),
        ({"ssh_user": "debian"}, ("none", [])),
        ({"kubernetes_minor": "v1.35"}, ("none", [])),
        ({"timeouts": {"joining": 10}}, ("none", [])),
        ({"__provider": "new"}, ("none", [])),
        ({"box_id": "ns2", "host_key_fingerprint": "SHA256:y"}, ("none", [])),
        ({}, ("none", [])),
    ],
)
def test_diff_table(change: dict[str, object], expected: tuple[str, list[str]]) -> None:
    olds = {**machine_props("kura-ovh", 0), **OUTPUTS}
    news = {**machine_props("kura-ovh", 0), "__provider": "old", **change}
    result = machine_diff(olds, news)
    kind = "replace" if result.replaces else ("update" if result.changes else "none")
    assert (kind, result.replaces) == expected
    assert result.delete_before_replace is bool(result.replaces)


def test_state_from_before_ssh_port_was_an_input_means_port_22() -> None:
    olds = {k: v for k, v in machine_props("kura-ovh", 0).items() if k != "ssh_port"}
    assert machine_diff(olds, machine_props("kura-ovh", 0, ssh_port=22)).changes is False
    assert parse_spec(olds).ssh_port == 22
    moved = machine_diff(olds, machine_props("kura-ovh", 0, ssh_port=2222))
    assert (moved.changes, moved.replaces) == (True, [])
    # The engine hands numbers over as floats.
    assert machine_diff(olds, machine_props("kura-ovh", 0, ssh_port=22.0)).changes is False
    assert input_problems(machine_props("kura-ovh", 0, ssh_port=2222.0)) == []
    assert parse_spec(machine_props("kura-ovh", 0, ssh_port=2222.0)).ssh_port == 2222
    assert input_problems(machine_props("kura-ovh", 0, ssh_port=22.5)) == [
        ("ssh_port", "must be a TCP port (1-65535), got 22.5")
    ]


def test_diff_is_none_for_equal_labels_in_another_order() -> None:
    olds = machine_props("kura-ovh", 0, labels={"a": "1", "b": "2"})
    news = machine_props("kura-ovh", 0, labels={"b": "2", "a": "1"})
    assert machine_diff(olds, news).changes is False


# --- inputs -----------------------------------------------------------------------------------------------


def test_check_reports_each_bad_input_by_name() -> None:
    props = machine_props(
        "kura-ovh",
        0,
        vendor="hetzner",
        marker="tuist-kura-ovh",
        taints=[{"key": "a", "effect": "Sometimes"}],
        timeouts={"joining": 0, "forever": 1},
        api_server="http://x:6443",
        allow_release="yes",
        ssh_port=0,
    )
    failures = MachineProvider().check({}, props).failures
    assert [(f.property, f.reason) for f in failures] == [
        ("vendor", "must be one of ovh, dedibox, robot, scaleway_em, applesilicon"),
        ("marker", "'tuist-kura-ovh' does not contain the environment name 'dev'"),
        ("api_server", "must be https://<host>:<port> or null, got 'http://x:6443'"),
        ("taints[0].effect", "must be NoSchedule, PreferNoSchedule or NoExecute"),
        ("ssh_port", "must be a TCP port (1-65535), got 0"),
        ("allow_release", "must be a boolean"),
        ("timeouts.joining", "must be a number of seconds > 0"),
        (
            "timeouts.forever",
            "unknown; known: claiming, drain, installimage, joining, poll_interval, reboot, release_install, "
            "rescue_boot, reset, ssh_handshake, ssh_retry_delay, wait_new_host_key, wait_rescue_ssh",
        ),
    ]
    with pytest.raises(MachineInputError, match=r"^AdoptedMachine inputs: vendor: must be one of"):
        parse_spec(props)
    assert input_problems(machine_props("kura-ovh", 0)) == []


def test_release_guard_names_exactly_the_missing_switches() -> None:
    prod = machine_props("kura-ovh", 0, environment="production", marker="tuist-kura-production-ovh")
    assert release_refusal(parse_spec(machine_props("kura-ovh", 0))) is None
    message = release_refusal(parse_spec({**prod, "allow_release": True}))
    assert message is not None and "set allow_production_release: true in Pulumi.production.yaml" in message
    message = release_refusal(parse_spec({**prod, "allow_production_release": True}))
    assert message is not None and "set fleets[name=kura-ovh].allow_release: true in" in message
    assert (
        release_refusal(parse_spec({**prod, "allow_release": True, "allow_production_release": True})) is None
    )


# --- what goes into state --------------------------------------------------------------------------------

SECRET_CONFIG = {
    "tuist-infra:vendors": json.dumps(
        {"ovh": {"endpoint": "ovh-eu", "application_key": "ak"}, "robot": {"username": "u"}}
    ),
    "tuist-infra:ovhApplicationSecret": "app-secret-value-123",
    "tuist-infra:ovhConsumerKey": "consumer-key-value-456",
    "tuist-infra:robotPassword": "robot-password-789",
    "tuist-infra:fleetSudoPassword": "sudo-password-000",
}


def test_the_provider_pickles_by_reference_with_nothing_in_it() -> None:
    first = serialize_provider(MachineProvider())
    assert first == serialize_provider(MachineProvider())
    configured = MachineProvider()
    configured.configure(ConfigureRequest(Config(SECRET_CONFIG, "tuist-infra")))
    # Even a configured instance pickles without what configure() read.
    assert serialize_provider(configured) == first
    raw = base64.b64decode(first)
    assert b"providers.machine" in raw and b"MachineProvider" in raw
    for value in SECRET_CONFIG.values():
        assert value.encode() not in raw
    assert len(raw) < 200  # a reference to the class, not its code
    assert MachineProvider.serialize_as_secret_always is False
    restored = pickle.loads(raw)
    assert type(restored) is MachineProvider and not hasattr(restored, "_settings")


def test_configure_reads_vendors_json_and_secrets_and_reprs_no_secret() -> None:
    provider = MachineProvider()
    provider.configure(ConfigureRequest(Config(SECRET_CONFIG, "tuist-infra")))
    settings = provider._config()
    assert settings.vendors.ovh is not None and settings.vendors.ovh.application_key == "ak"
    assert settings.vendors.dedibox is None
    for value in SECRET_CONFIG.values():
        assert value not in repr(settings)
    with pytest.raises(NotConfiguredError) as caught:
        _ = settings.fleet_private_key
    assert str(caught.value) == (
        "stack secret tuist-infra:fleetSshPrivateKey is not set; machines log in to their boxes with the "
        "fleet key (pulumi config set --secret fleetSshPrivateKey ...)"
    )
    with pytest.raises(
        NotConfiguredError,
        match=r"^stack config tuist-infra:vendors has no dedibox account \(vendors\.dedibox\)$",
    ):
        settings.vendor_client(Vendor.DEDIBOX)


def test_the_provider_pickle_is_the_same_in_another_process() -> None:
    code = (
        "from pulumi.dynamic.dynamic import serialize_provider\n"
        "from providers.machine import MachineProvider\n"
        "print(serialize_provider(MachineProvider()))\n"
    )
    other = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert other == serialize_provider(MachineProvider())


def test_a_release_switch_change_updates_state_only() -> None:
    provider = MachineProvider()
    provider.configure(ConfigureRequest(Config(SECRET_CONFIG, "tuist-infra")))
    olds = {
        **machine_props("kura-ovh", 0),
        "box_id": "ns1",
        "host_key_fingerprint": "SHA256:x",
        "node_name": "n",
    }
    news = {**machine_props("kura-ovh", 0), "allow_release": True, "__provider": "p"}
    # No vendor, SSH or cluster call happens (none is reachable from this test).
    outs = provider.update("ovh:ns1", olds, news).outs
    assert outs == {**olds, "allow_release": True}


def test_an_ssh_port_change_updates_state_only() -> None:
    provider = MachineProvider()
    provider.configure(ConfigureRequest(Config(SECRET_CONFIG, "tuist-infra")))
    olds = {**machine_props("kura-ovh", 0, ssh_port=22), "box_id": "ns1", "node_name": "n"}
    news = {**machine_props("kura-ovh", 0, ssh_port=2222), "__provider": "p"}
    # Nothing is reachable from this test: a rejoin would fail, so passing proves there was none.
    assert provider.update("ovh:ns1", olds, news).outs == {**olds, "ssh_port": 2222}


# --- where SSH dials --------------------------------------------------------------------------------------


@pytest.mark.parametrize("environment", ["dev", "staging", "production"])
def test_ssh_dials_the_public_ipv4_at_the_fleet_port_in_every_environment(environment: str) -> None:
    spec = parse_spec(
        machine_props(
            "kura-ovh", 0, environment=environment, marker=f"tuist-kura-{environment}-ovh", ssh_port=2222
        )
    )
    assert ssh_target(spec, box("ns1", "x", ip="127.0.1.11"), "ubuntu") == SshTarget(
        "127.0.1.11", 2222, "ubuntu"
    )
    with pytest.raises(MachineError, match=r"^ovh box ns2 has no public IPv4 to reach over SSH$"):
        ssh_target(spec, box("ns2", "x", ip=None), "ubuntu")


def test_an_unconfigured_provider_says_so() -> None:
    with pytest.raises(NotConfiguredError, match="was not configured with the stack config"):
        MachineProvider().create(machine_props("kura-ovh", 0))


def test_dev_placeholder_ca_is_stable_and_a_ca() -> None:
    from cryptography import x509

    pem = dev_placeholder_ca()
    cert = x509.load_pem_x509_certificate(pem.encode())
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert dev_placeholder_ca.__wrapped__() == pem  # deterministic, not just cached
    assert DEV_API_SERVER.endswith(".invalid:6443")
