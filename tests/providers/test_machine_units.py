"""The machine providers' pure parts: candidate filtering and skip reasons, the release guard, and what
the provider objects pickle into state. (The diff table and input checks: test_machine_spec.py.)"""

from __future__ import annotations

import base64
import functools
import json
import logging
import pickle
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
from pulumi.dynamic import ConfigureRequest
from pulumi.dynamic.config import Config
from pulumi.dynamic.dynamic import serialize_provider

from config.models import Vendor
from providers import kube
from providers.claims import claim_token
from providers.machine import provider as machine_provider
from providers.machine.errors import (
    MachineStepError,
    MarkerChangeError,
    NotConfiguredError,
    ReleaseRefusedError,
    ReleaseUnfinishedError,
    UnrecordedNodeError,
)
from providers.machine.node_labels import NodeLabelsProvider
from providers.machine.provider import ClaimProvider, MachineProvider
from providers.machine.record import Holder, ProcessClaimRecord, Progress
from providers.machine.release import install_resume_state, release_refusal
from providers.machine.selection import CandidatePools, no_candidate_message, select_boxes, skip_reason
from providers.machine.settings import DEV_API_SERVER, dev_placeholder_ca
from providers.machine.spec import machine_diff, parse_claim
from providers.vendor import Box, Claim
from tests.providers.test_machine_support import claim_props, machine_props
from tests.support.new_process import run_python

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


def test_a_box_recorded_for_another_holder_is_skipped_and_our_record_is_our_own() -> None:
    bob = Holder("tuist-infra", "bob-dev", "kura-ovh-0", "fedcba987654")
    me = Holder("tuist-infra", "dev", "kura-ovh-0", TOKEN)
    boxes = [box("ns1", "tuist-kura-dev-ovh-1"), box("ns2", "tuist-kura-dev-ovh-2")]
    picked = select_boxes(
        boxes,
        marker="tuist-kura-dev-ovh",
        token=TOKEN,
        vendor=Vendor.OVH,
        datacenter_prefix=None,
        recorded={"ns1": bob, "ns2": me},
    )
    assert picked.skipped == [("ns1", "claimed by tuist-infra/bob-dev/kura-ovh-0 (fedcba987654)")]
    # Recorded for us though the marker write never happened (a create killed in between): resume.
    assert picked.own is not None and picked.own.id == "ns2" and picked.candidates == []


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


def test_release_guard_names_exactly_the_missing_switches() -> None:
    prod = claim_props("kura-ovh", 0, environment="production", marker="tuist-kura-production-ovh")
    assert release_refusal(parse_claim(claim_props("kura-ovh", 0))) is None
    message = release_refusal(parse_claim({**prod, "allow_release": True}))
    assert message is not None and "set allow_production_release: true in Pulumi.production.yaml" in message
    message = release_refusal(parse_claim({**prod, "allow_production_release": True}))
    assert message is not None and "set fleets[name=kura-ovh].allow_release: true in" in message
    assert (
        release_refusal(parse_claim({**prod, "allow_release": True, "allow_production_release": True}))
        is None
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


PROVIDERS = [ClaimProvider, MachineProvider, NodeLabelsProvider]


@pytest.mark.parametrize("kind", PROVIDERS, ids=[k.__name__ for k in PROVIDERS])
def test_the_providers_pickle_by_reference_with_nothing_in_them(kind: type) -> None:
    first = serialize_provider(kind())
    assert first == serialize_provider(kind())
    configured = kind()
    configured.configure(ConfigureRequest(Config(SECRET_CONFIG, "tuist-infra")))
    # Even a configured instance pickles without what configure() read.
    assert serialize_provider(configured) == first
    raw = base64.b64decode(first)
    assert b"providers.machine" in raw and kind.__name__.encode() in raw
    for value in SECRET_CONFIG.values():
        assert value.encode() not in raw
    assert len(raw) < 200  # a reference to the class, not its code
    assert kind.serialize_as_secret_always is False
    restored = pickle.loads(raw)
    assert type(restored) is kind and not hasattr(restored, "_settings")


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


@pytest.mark.parametrize(
    ("vendors", "message"),
    [
        ("{not json", "stack config tuist-infra:vendors is not JSON"),
        (json.dumps({"ovh": {"endpoint": "ovh-mars"}}), "stack config tuist-infra:vendors is invalid: "),
    ],
)
def test_a_bad_vendors_key_fails_the_first_client_before_any_vendor_call(vendors: str, message: str) -> None:
    provider = MachineProvider()
    config = {**SECRET_CONFIG, "tuist-infra:vendors": vendors}
    provider.configure(ConfigureRequest(Config(config, "tuist-infra")))
    settings = provider._config()
    for _ in range(2):  # the second build fails the same way: nothing half-parsed is kept
        with pytest.raises(NotConfiguredError) as caught:
            settings.vendor_client(Vendor.OVH)
        assert str(caught.value).startswith(message)
        assert "app-secret-value-123" not in str(caught.value)


def test_a_provider_process_that_builds_no_client_never_imports_the_config_models() -> None:
    """A no-change preview configures the machine and failover providers and diffs every resource;
    pydantic and the stack's config models, about 0.2 s of its CPU, load with the first client."""
    code = (
        "import json, sys\n"
        "from pulumi.dynamic import ConfigureRequest\n"
        "from pulumi.dynamic.config import Config\n"
        "from providers.clients import SECRET_KEYS_BY_VENDOR\n"
        "from providers.failover import FailoverIPProvider\n"
        "from providers.machine.provider import ClaimProvider\n"
        "from providers.vendor import Vendor\n"
        "from tests.providers.test_failover_units import OLDS\n"
        "from tests.providers.test_machine_support import claim_props\n"
        f"request = ConfigureRequest(Config({SECRET_CONFIG!r}, 'tuist-infra'))\n"
        "claims, failover = ClaimProvider(), FailoverIPProvider()\n"
        "claims.configure(request)\n"
        "failover.configure(request)\n"
        "props = claim_props('kura-ovh', 0)\n"
        "assert not claims.diff('ovh:ns1', props, claims.check(props, props).inputs).changes\n"
        "assert not failover.diff(OLDS['address'], OLDS, failover.check(OLDS, OLDS).inputs).changes\n"
        "loaded = lambda: sorted(m for m in ('config.models', 'pydantic') if m in sys.modules)\n"
        "print(loaded())\n"
        "claims._config().vendor_client(Vendor.OVH)\n"
        "print(loaded())\n"
    )
    assert run_python(code).splitlines() == ["[]", "['config.models', 'pydantic']"]


def test_the_provider_pickle_is_the_same_in_another_process() -> None:
    code = (
        "from pulumi.dynamic.dynamic import serialize_provider\n"
        "from providers.machine.provider import MachineProvider\n"
        "print(serialize_provider(MachineProvider()))\n"
    )
    assert run_python(code).strip() == serialize_provider(MachineProvider())


def test_a_release_switch_change_updates_the_claim_in_state_only() -> None:
    provider = ClaimProvider()
    provider.configure(ConfigureRequest(Config(SECRET_CONFIG, "tuist-infra")))
    olds = {**claim_props("kura-ovh", 0), "box_id": "ns1", "claim_token": TOKEN, "record": "process"}
    news = {**claim_props("kura-ovh", 0), "allow_release": True, "__provider": "p"}
    # No vendor, SSH or cluster call happens (none is reachable from this test).
    outs = provider.update("ovh:ns1", olds, news).outs
    assert outs == {**olds, "allow_release": True}


def test_an_unconfigured_provider_says_so() -> None:
    with pytest.raises(NotConfiguredError, match="was not configured with the stack config"):
        ClaimProvider().create(claim_props("kura-ovh", 0))


def test_dev_placeholder_ca_is_stable_and_a_ca() -> None:
    from cryptography import x509

    pem = dev_placeholder_ca()
    cert = x509.load_pem_x509_certificate(pem.encode())
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert dev_placeholder_ca.__wrapped__() == pem  # deterministic, not just cached
    assert DEV_API_SERVER.endswith(".invalid:6443")


def test_node_labels_advertise_on_the_next_up_what_a_node_not_yet_registered_missed() -> None:
    """NodeLabels created before its Node registered could not advertise the Node's extended resources
    (no kubelet flag sets them): its next diff is a change until they are, with a cluster only."""
    provider = NodeLabelsProvider()
    props = {
        "node_name": "kura-ovh-ns1",
        "labels": {"node.cluster.x-k8s.io/pool": "kura-ovh"},
        "taints": [],
        "capacity": {"tuist.dev/egress-mbps": "1000"},
        "api_server": "https://cp.staging.tuist.dev:6443",
    }
    assert provider.diff("kura-ovh-ns1", {**props, "applied": True}, props).changes is False
    assert provider.diff("kura-ovh-ns1", {**props, "applied": False}, props).changes is True
    # A Mac advertises nothing, and without a cluster there is no Node: nothing to catch up on.
    mac = {**props, "capacity": {}}
    assert provider.diff("kura-ovh-ns1", {**mac, "applied": False}, mac).changes is False
    rendered = {**props, "api_server": None}
    assert provider.diff("kura-ovh-ns1", {**rendered, "applied": False}, rendered).changes is False
    # A new budget is an in-place edit of the Node.
    raised = {**props, "capacity": {"tuist.dev/egress-mbps": "2500"}}
    diff = provider.diff("kura-ovh-ns1", {**props, "applied": True}, raised)
    assert (diff.changes, diff.replaces) == (True, [])


# --- where a machine's create starts, from the box's record ------------------------------------------------

ROBOT_MACHINE = {
    "project": "tuist-infra",
    "stack": "dev",
    "resource_name": "runners-0",
    "environment": "staging",
    "fleet": "runners",
    "vendor": "robot",
    "box_id": "2345601",
    "public_ipv4": "198.18.3.1",
    "provider_id": "hrobot://2345601",
    "claim_token": "0123456789ab",
    "node_pool": "runners",
    "ssh_user": "root",
    "kubernetes_minor": "v1.34",
    "api_server": None,
    "install_artifacts": {
        "runc_url": "https://x/a",
        "runc_sha256": "a" * 64,
        "containerd_url": "https://x/b",
        "containerd_sha256": "b" * 64,
        "kata_static_url": "https://x/c",
        "kata_static_sha256": "c" * 64,
    },
}


ROBOT_HOLDER = Holder("tuist-infra", "dev", "runners-0", TOKEN)


# --- test doubles: the settings, vendor client and flow runner the providers call ------------------------


class Stop(Exception):
    """Raised by a fake where the test has seen what it looks at: nothing after it runs."""


class _Drained(Exception):
    """Raised where the leave would reach the cluster: the machine's delete got past its guard."""


def held_record(
    holder: Holder = ROBOT_HOLDER,
    *,
    vendor: str = "robot",
    box_id: str = "2345601",
    fleet: str = "runners",
    **fields: Any,
) -> tuple[ProcessClaimRecord, Progress]:
    """A claim record of its own holding one box (ROBOT_MACHINE's by default) with `fields` (phase,
    state, facts, ...), and that box's progress as recorded."""
    record = ProcessClaimRecord({})
    return record, record.acquire(Progress(vendor, box_id, fleet, holder, **fields))


class FakeClient:
    """A vendor client over `boxes`: reads are recorded (`reads`), claim writes are recorded (`writes`)
    and change the box's marker, unless `refuse_writes` says why none may happen. A reinstall stops."""

    def __init__(self, *boxes: Box, refuse_writes: str = "") -> None:
        self.boxes = {b.id: b for b in boxes}
        self.refuse_writes = refuse_writes
        self.reads: list[str] = []
        self.writes: list[Claim | None] = []

    def list_boxes(self) -> list[Box]:
        return list(self.boxes.values())

    def get_box(self, box_id: str) -> Box:
        self.reads.append(box_id)
        return self.boxes[box_id]

    def set_claim(self, box_id: str, claim: Claim | None) -> None:
        if self.refuse_writes:
            raise AssertionError(self.refuse_writes)
        self.writes.append(claim)
        self.boxes[box_id] = replace(self.boxes[box_id], claim=claim)

    def start_reinstall(self, *_args: object, **_kwargs: object) -> object:
        raise Stop


@dataclass
class FakeSettings:
    """What the providers read of providers.machine.settings.Settings: every claim_record() is `record`,
    every vendor_client() is `client`, and kube_api() is `kube` (raised when it is an exception; a test
    without a cluster fails there). No secret is set."""

    record: ProcessClaimRecord
    client: Any = field(default_factory=object)
    kube: Any = None
    pools: CandidatePools = field(default_factory=CandidatePools)
    fleet_public_key: str = "ssh-ed25519 AAAAkey"
    sudo_password: str = "x"

    def claim_record(self, _api_server: object) -> ProcessClaimRecord:
        return self.record

    def vendor_client(self, _vendor: object) -> Any:
        return self.client

    def kube_api(self, *_timeout: object) -> Any:
        if self.kube is None:
            raise AssertionError("this test has no cluster")
        if isinstance(self.kube, BaseException) or (
            isinstance(self.kube, type) and issubclass(self.kube, BaseException)
        ):
            raise self.kube
        return self.kube

    def secret_values(self) -> list[str]:
        return []


P = TypeVar("P", ClaimProvider, MachineProvider)


def configured(kind: type[P], settings: FakeSettings) -> P:
    """A provider as configure() leaves it, with the fake settings."""
    provider = kind()
    provider._settings = settings  # type: ignore[assignment]
    return provider


@dataclass
class FakeRunner:
    """Stands in for the flow's Runner (providers.machine.fsm) once installed: records the state each
    flow is started at (`started`), then stops there (raises Stop) or, given `completes_with`,
    completes at once with those facts."""

    completes_with: dict[str, str] | None = None
    started: list[str] = field(default_factory=list)

    def installed(self, monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
        monkeypatch.setattr(machine_provider, "Runner", self)
        return self

    def __call__(self, _table: object, run: Any, _record: object, progress: Progress, _phase: str) -> Any:
        return SimpleNamespace(start=functools.partial(self._start, run, progress))

    def _start(self, run: Any, progress: Progress, first: str) -> Progress:
        self.started.append(first)
        if self.completes_with is None:
            raise Stop
        run.facts.update(self.completes_with)
        return progress


def _create_from_record(
    monkeypatch: pytest.MonkeyPatch,
    phase: str,
    state: str,
    facts: dict[str, str],
    error_type: str | None = None,
) -> str:
    """The state MachineProvider.create starts the flow at, given the box's record."""
    record, _ = held_record(phase=phase, state=state, facts=facts, error_type=error_type)
    runner = FakeRunner().installed(monkeypatch)
    with pytest.raises(Stop):
        configured(MachineProvider, FakeSettings(record)).create(dict(ROBOT_MACHINE))
    return runner.started[0]


def test_a_machine_whose_adoption_ended_before_ready_was_saved_joins_again_and_never_reinstalls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The flow saves (Adopting, DONE), then the provider saves READY: a provider killed between the
    two left an installed, joined Robot box, which a full install would wipe under its workloads."""
    pinned = {"pin": "SHA256:x", "installed_host_key": "SHA256:x"}
    assert _create_from_record(monkeypatch, "Adopting", "DONE", pinned) == "JOINING"
    assert _create_from_record(monkeypatch, "Ready", "READY", pinned) == "JOINING"
    # A record with no pin never joined: it is installed from the start.
    assert _create_from_record(monkeypatch, "Adopting", "DONE", {}) == "RESCUE_BOOT"


def test_a_robot_box_whose_record_was_lost_is_never_installed_under_its_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Robot box is wiped by its install. A record that says nothing of one (lost: the MachineClaim CRD
    recreated) is not proof the box runs nothing: a Node carrying its providerID says it does."""
    record = ProcessClaimRecord({})
    looked_up: list[str] = []

    def nodes(_api: object, provider_id: str) -> list[str]:
        looked_up.append(provider_id)
        return ["capi-runners-md-0-x7k2p"]

    monkeypatch.setattr(kube, "nodes_with_provider_id", nodes)
    runner = FakeRunner().installed(monkeypatch)
    props = {**ROBOT_MACHINE, "api_server": "https://cp.staging.tuist.dev:6443"}
    provider = configured(MachineProvider, FakeSettings(record, kube="api"))
    with pytest.raises(UnrecordedNodeError) as refused:
        provider.create(dict(props))
    assert str(refused.value) == (
        "runners-0: robot box 2345601 is already Node capi-runners-md-0-x7k2p (providerID hrobot://2345601), "
        "but its claim's record says nothing of an install: it is not installed again under that Node. If "
        "the Node is this box's, import the machine (docs/machines.md, \"Importing a box that is already a "
        'node"); if it is stale, `kubectl delete node capi-runners-md-0-x7k2p` and run again'
    )
    assert looked_up == ["hrobot://2345601"] and runner.started == []
    # No such Node: the box is installed from the start, as every new Robot box is.
    monkeypatch.setattr(kube, "nodes_with_provider_id", lambda _api, _id: [])
    with pytest.raises(Stop):
        provider.create(dict(props))
    assert runner.started == ["RESCUE_BOOT"]


def test_a_machine_never_joins_a_box_whose_release_did_not_finish(monkeypatch: pytest.MonkeyPatch) -> None:
    """A destroy's release died waiting for the reinstall, and the slot is wanted again (a revert): the
    box may be mid-wipe. The create refuses, runs nothing, and says how to finish the release."""
    with pytest.raises(ReleaseUnfinishedError) as refused:
        _create_from_record(monkeypatch, "Releasing", "RELEASE_WAIT_INSTALL", {"reinstall": "{}"})
    assert str(refused.value) == (
        "runners-0: the release of robot box 2345601 stopped at RELEASE_WAIT_INSTALL (no error recorded) and "
        "has not finished; finish it first: `pulumi destroy --target` the claim (its URN: `tuist-ops urn -s "
        "STACK robot:2345601`), then `pulumi up` claims a box for this slot again"
    )


def test_deleting_a_slot_whose_box_another_slot_holds_now_leaves_the_box_and_its_record_alone() -> None:
    """An operator unclaimed the box (`tuist-ops unclaim --force`) and another slot claimed it: the old
    slot's delete leaves box and record alone, every run, instead of failing on the other's record."""
    props = claim_props("kura-ovh", 0)
    mine = claim_token("tuist-infra", props["stack"], "kura-ovh-0")
    theirs = Holder("tuist-infra", props["stack"], "kura-ovh-1", "fedcba987654")
    record, _ = held_record(theirs, vendor="ovh", box_id="ns1.ip-1-2-3.eu", fleet="kura-ovh")
    client = FakeClient(
        box("ns1.ip-1-2-3.eu", "tuist-kura-dev", claim=Claim("fedcba987654")),
        refuse_writes="the box is another slot's: nothing may be written",
    )
    provider = configured(ClaimProvider, FakeSettings(record, client))
    for _ in range(2):
        provider.delete("ovh:ns1.ip-1-2-3.eu", {**props, "claim_token": mine})
    assert client.reads == ["ns1.ip-1-2-3.eu"] * 2
    held = record.get("ovh", "ns1.ip-1-2-3.eu")
    assert held is not None and held.holder == theirs


def test_a_renamed_fleet_marker_keeps_each_claim_whose_box_carries_it_and_refuses_one_that_does_not() -> None:
    """The fleet's marker edited in the stack file: an update in place, never a release (a reinstall
    that wipes the box). The update reads the box: carrying the new marker, the claim records it; not
    carrying it, the update fails naming the two ways on, and nothing is written."""
    olds = {**claim_props("kura-ovh", 0), "box_id": "ns1.ip-1-2-3.eu", "claim_token": "0123456789ab"}
    news = {**claim_props("kura-ovh", 0), "marker": "tuist-kura-dev-ovh-b"}
    diff = ClaimProvider().diff("ovh:ns1.ip-1-2-3.eu", olds, news)
    assert (diff.changes, diff.replaces) == (True, [])

    unmarked = FakeClient(
        box("ns1.ip-1-2-3.eu", "tuist-kura-dev-ovh-ns1", claim=Claim("0123456789ab")),
        refuse_writes="a box without the new marker: nothing may be written",
    )
    provider = configured(ClaimProvider, FakeSettings(ProcessClaimRecord({}), unmarked))
    with pytest.raises(MarkerChangeError) as refused:
        provider.update("ovh:ns1.ip-1-2-3.eu", olds, news)
    assert str(refused.value) == (
        "kura-ovh-0: ovh box ns1.ip-1-2-3.eu does not carry the fleet's new marker "
        "'tuist-kura-dev-ovh-b' (it reads 'tuist-kura-dev-ovh-ns1'); its claim is kept and nothing was "
        "written. Mark it (`tuist-ops mark -s dev ovh:ns1.ip-1-2-3.eu --fleet kura-ovh`, or at the vendor) "
        "and run `pulumi up` again; or give the box up: `pulumi up --replace` its claim (`tuist-ops urn -s "
        "dev ovh:ns1.ip-1-2-3.eu`) releases it, reinstalled, and claims a box that carries the marker"
    )
    assert unmarked.reads == ["ns1.ip-1-2-3.eu"]

    marked = FakeClient(
        box("ns1.ip-1-2-3.eu", "tuist-kura-dev-ovh-b-ns1", claim=Claim("0123456789ab")),
        refuse_writes="a re-marked box: the update only records the marker",
    )
    provider = configured(ClaimProvider, FakeSettings(ProcessClaimRecord({}), marked))
    updated = provider.update("ovh:ns1.ip-1-2-3.eu", olds, news).outs
    assert updated is not None and updated["marker"] == "tuist-kura-dev-ovh-b"
    assert updated["claim_token"] == "0123456789ab"
    # Any other change reads nothing at the vendor.
    provider.update("ovh:ns1.ip-1-2-3.eu", olds, {**olds, "os": "debian_12"})
    assert marked.reads == ["ns1.ip-1-2-3.eu"]


def test_a_machine_whose_box_another_slot_holds_now_leaves_that_slots_node_alone() -> None:
    theirs = Holder("tuist-infra", "dev", "runners-1", "fedcba987654")
    record, _ = held_record(theirs)
    nothing = AssertionError("another slot's Node: nothing may be cordoned, drained or deleted")
    provider = configured(MachineProvider, FakeSettings(record, kube=nothing))
    provider.delete("robot:2345601", {**ROBOT_MACHINE, "api_server": "https://cp.staging.tuist.dev:6443"})
    held = record.get("robot", "2345601")
    assert held is not None and held.holder == theirs


def test_a_production_machine_leaves_the_cluster_only_when_its_claims_record_allows_the_release() -> None:
    """Leaving drains the Node and deletes it and its local claims (Kura's data); the claim's release
    after it would be refused without the switches. The machine reads them from the box's record,
    where the claim wrote them, and refuses before the drain."""
    holder = Holder("tuist-infra", "production", "runners-0", "0123456789ab")
    record, held = held_record(holder, phase="Ready", state="READY")
    provider = configured(MachineProvider, FakeSettings(record, kube=_Drained))
    production = {
        **ROBOT_MACHINE,
        "stack": "production",
        "environment": "production",
        "api_server": "https://cp.tuist.dev:6443",
    }
    with pytest.raises(ReleaseRefusedError) as refused:
        provider.delete("robot:2345601", production)
    assert str(refused.value) == (
        "runners-0: refusing to leave the cluster: production box 2345601 (fleet runners) may not be "
        "released after it (MachineClaim robot-2345601 has no status.releaseAllowed). To allow it set "
        "fleets[name=runners].allow_release: true and allow_production_release: true in "
        "Pulumi.production.yaml, run `pulumi up` so the claim records it, then `pulumi state unprotect` "
        "the machine and remove it"
    )
    assert record.get("robot", "2345601") == held  # nothing moved
    with pytest.raises(_Drained):
        provider.delete("robot:2345601", {**ROBOT_MACHINE, "api_server": "https://cp.tuist.dev:6443"})
    record.save(replace(held, release_allowed=True))
    with pytest.raises(_Drained):
        provider.delete("robot:2345601", production)


def test_a_claim_update_records_its_release_switches_in_the_boxs_record() -> None:
    record = ProcessClaimRecord({})
    provider = configured(ClaimProvider, FakeSettings(record))
    prod = claim_props(
        "kura-ovh",
        0,
        stack="production",
        environment="production",
        marker="tuist-kura-production-ovh",
        api_server="https://cp.tuist.dev:6443",
    )
    olds = {**prod, "box_id": "ns3001.ip-1-2-3.eu", "claim_token": "0123456789ab", "record": "cluster"}
    armed = {**prod, "allow_release": True, "allow_production_release": True}
    outs = provider.update("ovh:ns3001.ip-1-2-3.eu", olds, armed).outs
    held = record.get("ovh", "ns3001.ip-1-2-3.eu")
    assert held is not None and held.release_allowed is True
    assert held.holder == Holder("tuist-infra", "production", "kura-ovh-0", "0123456789ab")
    assert outs is not None and outs["release_allowed"] is True
    disarmed = provider.update("ovh:ns3001.ip-1-2-3.eu", {**olds, **outs}, {**armed, "allow_release": False})
    assert disarmed.outs is not None and disarmed.outs["release_allowed"] is False
    again = record.get("ovh", "ns3001.ip-1-2-3.eu")
    assert again is not None and again.release_allowed is False


def test_a_robot_install_stopped_on_a_rescue_system_that_is_gone_starts_over_from_arming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """INSTALLIMAGE is pinned to the rescue system's key: a box that left rescue (another key answers)
    or a record without that key would fail there on every later run. Other stops resume where they
    were (a timeout in installimage runs it again in the same rescue system)."""
    rescue = {"host_key_before": "SHA256:old", "rescue_host_key": "SHA256:rescue"}
    assert (
        _create_from_record(monkeypatch, "Adopting", "INSTALLIMAGE", rescue, "HostKeyMismatch")
        == "RESCUE_BOOT"
    )
    assert _create_from_record(monkeypatch, "Adopting", "INSTALLIMAGE", {}, "MissingFact") == "RESCUE_BOOT"
    assert _create_from_record(monkeypatch, "Adopting", "INSTALLIMAGE", rescue, "Timeout") == "INSTALLIMAGE"
    assert install_resume_state("WAIT_RESCUE_SSH", "HostKeyMismatch") == "WAIT_RESCUE_SSH"  # a stranger: stop


@pytest.mark.parametrize(
    ("phase", "state"), [("Ready", "READY"), ("Adopting", "DONE"), ("Adopting", "JOINING")]
)
def test_a_claim_created_again_over_its_own_adopted_box_keeps_its_record_and_the_machine_never_reinstalls(
    monkeypatch: pytest.MonkeyPatch, phase: str, state: str
) -> None:
    """The claim left the state while its Robot box stayed adopted: a refresh that no longer found the
    marker's claim suffix (an edit in Robot's UI), a claim removed by hand, or the migration that adds a
    claim to each machine. Creating the claim again finds the box by its record and keeps what the
    record says: reset to CLAIMED, the machine's next create would install the box again under its
    workloads."""
    props = claim_props("runners-linux", 0, install_artifacts=ROBOT_MACHINE["install_artifacts"])
    spec = parse_claim(props)
    holder = Holder(spec.project, spec.stack, spec.resource_name, spec.token)
    pin = {"pin": "SHA256:live", "installed_host_key": "SHA256:live"}
    record, _ = held_record(holder, fleet="runners-linux", phase=phase, state=state, facts=pin)
    # The claim suffix is gone from the server name.
    client = FakeClient(box("2345601", "tuist-bm-dev-1", vendor=Vendor.ROBOT, datacenter="FSN1-DC1"))
    settings = FakeSettings(record, client)
    outs = configured(ClaimProvider, settings).create(props).outs
    assert client.writes == [Claim(spec.token)]  # the marker is written back
    kept = record.get("robot", "2345601")
    assert kept is not None
    assert (kept.phase, kept.state, dict(kept.facts)) == (phase, state, pin)

    runner = FakeRunner().installed(monkeypatch)
    with pytest.raises(Stop):
        configured(MachineProvider, settings).create(machine_props("runners-linux", 0, outs))
    # An adoption that had joined rejoins; one stopped at JOINING resumes there. Never RESCUE_BOOT.
    assert runner.started == ["JOINING"]


def test_a_release_marks_the_box_with_the_token_it_carries_not_one_from_todays_inputs() -> None:
    """After `pulumi stack rename` and any claim update, the claim's inputs name the new stack, whose
    token differs from the one the box carries (`claim_token`, kept from the create). The release marks
    the box releasing under the token it carries: under another, the next delete would take the box for
    someone else's and leave it marked releasing for ever, held by nobody."""
    props = claim_props("kura-ovh", 0, stack="renamed", allow_release=True)
    carried = "0123456789ab"
    assert parse_claim(props).token != carried
    client = FakeClient(box("ns1.ip-1-2-3.eu", "tuist-kura-dev-ovh", claim=Claim(carried)))
    provider = configured(ClaimProvider, FakeSettings(ProcessClaimRecord({}), client))
    with pytest.raises(MachineStepError, match="RELEASE_REINSTALL failed"):  # after the marking
        provider.delete("ovh:ns1.ip-1-2-3.eu", {**props, "claim_token": carried})
    assert client.writes == [Claim(carried, releasing=True)]


def test_a_machine_whose_leave_stopped_halfway_joins_again_and_never_reinstalls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its delete failed in the drain and the machine then left the state (a refresh after the Node
    was deleted, a state edit): the record says Leaving. The box is installed and ours: it joins again."""
    pinned = {"pin": "SHA256:x", "installed_host_key": "SHA256:x"}
    assert _create_from_record(monkeypatch, "Leaving", "DRAINING", pinned) == "JOINING"
    assert _create_from_record(monkeypatch, "Leaving", "DELETING_NODE", pinned) == "JOINING"
    assert _create_from_record(monkeypatch, "Leaving", "DRAINING", {}) == "RESCUE_BOOT"


def _leaving_world(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[tuple[str, str]], list[str]]:
    """A Robot machine in a cluster whose record says its leave stopped at DRAINING; kube calls and the
    states the flow was started at are recorded, and the flow completes at once."""
    record, _ = held_record(phase="Leaving", state="DRAINING", facts={"pin": "SHA256:x"})
    kube_calls: list[tuple[str, str]] = []
    runner = FakeRunner(completes_with={"pin": "SHA256:x"}).installed(monkeypatch)
    client = FakeClient(box("2345601", "tuist-bm-dev-1", vendor=Vendor.ROBOT, claim=Claim("0123456789ab")))
    monkeypatch.setattr(kube, "uncordon", lambda _api, node: kube_calls.append(("uncordon", node)) or True)
    monkeypatch.setattr(kube, "node_exists", lambda _api, node: kube_calls.append(("exists", node)) or True)
    provider = configured(MachineProvider, FakeSettings(record, client, kube="api"))
    return (provider, record), kube_calls, runner.started


def test_a_refresh_shows_an_update_that_stopped_halfway_and_the_next_update_joins_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A machine's update failed in its rejoin (the record says Adopting at JOINING) and the change that
    started it was reverted: the stack's inputs equal its outputs again, so only the refresh's `state:
    joining` tells the next `pulumi up` the box never finished joining."""
    caplog.set_level(logging.INFO)
    record, _ = held_record(
        phase="Adopting", state="JOINING", error_type="SshStepError", facts={"pin": "SHA256:x"}
    )
    runner = FakeRunner(completes_with={"pin": "SHA256:x"}).installed(monkeypatch)
    client = FakeClient(box("2345601", "tuist-bm-dev-1", vendor=Vendor.ROBOT, claim=Claim("0123456789ab")))
    monkeypatch.setattr(kube, "node_exists", lambda _api, _node: True)
    provider = configured(MachineProvider, FakeSettings(record, client, kube="api"))
    props = {
        **ROBOT_MACHINE,
        "api_server": "https://cp.staging.tuist.dev:6443",
        "host_key_fingerprint": "SHA256:x",
        "state": "ready",
    }
    assert not machine_diff(props, props).changes  # without the refresh: nothing to do

    read = provider.read("robot:2345601", props)
    assert read.outs is not None and read.outs["state"] == "joining"
    assert "runners-0: its last join stopped at JOINING (SshStepError): `pulumi up` joins it again" in (
        caplog.text
    )
    olds = {**props, **read.outs}
    assert machine_diff(olds, props).changes
    updated = provider.update("robot:2345601", olds, props)
    assert runner.started == ["JOINING"]  # joined again, never RESCUE_BOOT
    assert updated.outs is not None and updated.outs["state"] == "ready"
    saved = record.get("robot", "2345601")
    assert saved is not None and (saved.phase, saved.state) == ("Ready", "READY")
    again = provider.read("robot:2345601", props)
    assert again.outs is not None and again.outs["state"] == "ready"


def test_a_refresh_keeps_the_address_a_machine_joined_with_so_a_new_one_shows_as_a_rejoin(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The vendor gives the box another address. The refresh reads it into the claim, and so into the
    machine's inputs; the machine keeps the one its kubelet advertises (--node-ip), so the next `pulumi
    up` rejoins it at the new one rather than seeing inputs equal to outputs."""
    caplog.set_level(logging.INFO)
    record, _ = held_record(phase="Ready", state="READY", facts={"pin": "SHA256:x"})
    runner = FakeRunner(completes_with={"pin": "SHA256:x"}).installed(monkeypatch)
    moved = box(
        "2345601", "tuist-bm-dev-1", vendor=Vendor.ROBOT, claim=Claim("0123456789ab"), ip="198.18.3.77"
    )
    provider = configured(MachineProvider, FakeSettings(record, FakeClient(moved)))
    props = {**ROBOT_MACHINE, "host_key_fingerprint": "SHA256:x", "state": "ready"}

    read = provider.read("robot:2345601", props)
    assert read.outs is not None and read.outs["public_ipv4"] == "198.18.3.1"
    assert (
        "runners-0: robot now gives box 2345601 the address 198.18.3.77; it joined as 198.18.3.1 (its "
        "kubelet's --node-ip): `pulumi up` rejoins it at the new one"
    ) in caplog.text
    news = {**props, "public_ipv4": "198.18.3.77"}  # from the claim, which the same refresh read
    diff = machine_diff(read.outs, news)
    assert diff.changes and diff.replaces == []
    provider.update("robot:2345601", read.outs, news)
    assert runner.started == ["JOINING"]


def test_a_refresh_shows_a_leave_that_stopped_halfway_and_the_next_update_rejoins_and_uncordons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (provider, record), kube_calls, started = _leaving_world(monkeypatch)
    props = {
        **ROBOT_MACHINE,
        "api_server": "https://cp.staging.tuist.dev:6443",
        "host_key_fingerprint": "SHA256:x",
    }
    node = "runners-2345601"
    read = provider.read("robot:2345601", props)
    assert read.outs is not None and read.outs["state"] == "leaving"
    assert kube_calls == [("exists", node)]

    olds = {**props, **read.outs}
    news = {k: v for k, v in props.items() if k != "host_key_fingerprint"}
    updated = provider.update("robot:2345601", olds, news)
    assert started == ["JOINING"]  # joined again, never RESCUE_BOOT
    assert kube_calls[1:] == [("uncordon", node)]
    assert updated.outs is not None and updated.outs["state"] == "ready"
    saved = record.get("robot", "2345601")
    assert saved is not None and (saved.phase, saved.state) == ("Ready", "READY")
    # Read again: nothing is leaving any more.
    again = provider.read("robot:2345601", props)
    assert again.outs is not None and again.outs["state"] == "ready"
