"""The inputs of MachineClaim and AdoptedMachine: parsing, checks, and the diff table.

Every input either changes what a later step does (so a change is compared: replace, or an update
that reruns the join, or an update that only records the new value in state because delete reads
state), or is bookkeeping the diff ignores. `CLAIM_INPUTS` and `MACHINE_INPUTS` say which, and why;
docs/machines.md prints the same table and tests/providers/test_machine_spec.py holds it to it.
"""

from __future__ import annotations

import enum
import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from providers.lazy import lazy_module

# The Pulumi SDK is for the diffs, which only the provider process runs; the operator's CLI reads
# this module for node names and checks.
if TYPE_CHECKING:
    import pulumi.dynamic as dyn
    import pulumi.output as pulumi_output
    from pulumi.runtime import rpc
else:
    dyn = lazy_module("pulumi.dynamic")
    pulumi_output = lazy_module("pulumi.output")
    rpc = lazy_module("pulumi.runtime.rpc")

from providers.claims import claim_token
from providers.constants import (
    ENVIRONMENTS,
    FLEET_LABEL,
    MARKER_PATTERN,
    POOL_LABEL,
    PRODUCTION,
    api_server_problem,
)
from providers.machine.errors import MachineInputError
from providers.vendor import Vendor as Vendor
from providers.vendor import marker_problem

ROBOT_LABELS = {"tuist.dev/kata-runtime": "true", "katacontainers.io/kata-runtime": "true"}
ROBOT_TAINT = {"key": "tuist.dev/runner-tier", "value": "bare-metal", "effect": "NoSchedule"}
ROBOT_LOGIN = "root"  # installimage images and the rescue system log in as root with the fleet key
DEFAULT_SSH_PORT = 22  # machines created before ssh_port was an input were dialled here
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# Seconds each state may take; `timeouts` overrides any of them. None is shared between states.
DEFAULT_TIMEOUTS: dict[str, float] = {
    "claiming": 300,
    "rescue_boot": 300,
    "reset": 300,
    "wait_rescue_ssh": 900,
    "installimage": 2700,
    "reboot": 300,
    "wait_new_host_key": 1800,
    "pn_detaching": 600,  # an update off a Private Network: Scaleway detaching the old attachment
    "pn_attaching": 600,  # enabling Elastic Metal's Private Network option, then the attachment
    "pn_vlan": 120,
    "pn_down": 120,  # an update to no Private Network: pn0 and its netplan file removed
    "joining": 300,  # the anchor's 5 min cap on the self-join
    "mac_bootstrap": 300,  # the agent's download, launchd and pf: the self-join's cap
    "node_ready": 300,  # the kubelet's TLS bootstrap, registration and first Ready status
    "cordoning": 60,
    "draining": 600,
    "deleting_node": 60,
    "deleting_local_pvcs": 120,
    "release_marking": 120,
    "release_pn_detaching": 600,  # Elastic Metal: every Private Network attachment detached
    "release_reinstall": 300,
    "release_wait_install": 5400,
    "release_clearing": 120,
    # Not states: one SSH handshake, the pause between SSH connection retries, the poll period.
    "ssh_handshake": 30,
    # The macOS bootstrap's pause between two looks at the node agent's launchd job: an agent that
    # cannot start dies within a second or two, and launchd respawns it no sooner than 5 s later.
    "agent_settle": 3,
    "ssh_retry_delay": 30,
    "poll_interval": 5,
    "retry_delay": 10,  # the first pause before a state is tried again (doubling, at most 300)
}

_ENVIRONMENTS = ENVIRONMENTS
_VENDORS = tuple(v.value for v in Vendor)
_SLUG = re.compile(r"[^a-z0-9-]+")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_MARKER = re.compile(MARKER_PATTERN)
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_MINOR = re.compile(r"^v1\.[0-9]{2}$")
_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_DOMAIN = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")
DEFAULT_CLUSTER_DOMAIN = "cluster.local"


# --- the diff table -----------------------------------------------------------------------------------


class Change(enum.StrEnum):
    REPLACE = "replace"  # another box (or the box released and claimed again)
    REJOIN = "update, rerun the self-join"  # the idempotent join runs again with the new value
    RECORD = "update, state only"  # nothing runs now; a later step (release) reads the new value
    IGNORE = "no change"  # bookkeeping: never read after create, or it cannot change


@dataclass(frozen=True)
class InputRule:
    change: Change
    why: str


CLAIM_INPUTS: dict[str, InputRule] = {
    "vendor": InputRule(Change.REPLACE, "the claim is of a box at another vendor"),
    "fleet": InputRule(Change.REPLACE, "the claim is of a box of another fleet"),
    "marker": InputRule(
        Change.RECORD,
        "new claims take boxes carrying it; update checks the claimed box carries it and refuses, never "
        "releases, one that does not (`--replace` releases it)",
    ),
    "datacenter_prefix": InputRule(
        Change.REPLACE,
        "only when the claimed box's datacenter no longer starts with it; otherwise state only",
    ),
    "excluded_boxes": InputRule(
        Change.REPLACE,
        "only when it names the claimed box (the box leaves the fleet: released, another claimed); "
        "otherwise state only",
    ),
    "environment": InputRule(Change.RECORD, "release reads it (the production guard)"),
    "os": InputRule(Change.RECORD, "release reinstalls the box with it"),
    "ssh_user": InputRule(Change.RECORD, "release reinstalls Dedibox boxes with this login"),
    "ssh_port": InputRule(Change.RECORD, "release dials it (Robot reinstall)"),
    "allow_release": InputRule(Change.RECORD, "release reads it (the production guard)"),
    "allow_production_release": InputRule(Change.RECORD, "release reads it (the production guard)"),
    "api_server": InputRule(
        Change.RECORD, "where the claim is recorded: update writes the cluster-side claim"
    ),
    "timeouts": InputRule(Change.RECORD, "release's state budgets"),
    "install_artifacts": InputRule(Change.RECORD, "a Robot release reinstalls with these pins"),
    "project": InputRule(Change.IGNORE, "identity: the claim keeps the token it was created with"),
    "stack": InputRule(Change.IGNORE, "identity: the claim keeps the token it was created with"),
    "resource_name": InputRule(Change.IGNORE, "identity: the claim keeps the token it was created with"),
    "urn": InputRule(Change.IGNORE, "where progress lines attach; read per call"),
}

MACHINE_INPUTS: dict[str, InputRule] = {
    "box_id": InputRule(Change.REPLACE, "another box: the new one is joined, the old Node deleted"),
    "vendor": InputRule(Change.REPLACE, "another box"),
    "fleet": InputRule(Change.REPLACE, "the Node belongs to another fleet"),
    "public_ipv4": InputRule(Change.REJOIN, "the kubelet's --node-ip"),
    "provider_id": InputRule(Change.REJOIN, "the kubelet's --provider-id"),
    "kubernetes_minor": InputRule(Change.REJOIN, "the kubelet's apt repository must track the control plane"),
    "api_server": InputRule(
        Change.REJOIN,
        "the kubelet's bootstrap kubeconfig names it; the kubelet drops its own and bootstraps anew",
    ),
    "cluster_dns": InputRule(
        Change.REJOIN, "the kubelet's clusterDNS: every pod's resolv.conf names it; the kubelet restarts"
    ),
    "cluster_domain": InputRule(
        Change.REJOIN, "the kubelet's clusterDomain: pods' resolv.conf search it; the kubelet restarts"
    ),
    "private_network": InputRule(
        Change.REJOIN,
        "Elastic Metal: the box leaves the old network (detached, then pn0 replaced or removed), is "
        "attached to the new one and brings its VLAN up as pn0",
    ),
    "node_agent": InputRule(
        Change.REJOIN, "Apple silicon: the bootstrap installs the pinned agent and restarts its launchd job"
    ),
    "ssh_user": InputRule(Change.RECORD, "the next SSH session logs in as it"),
    "ssh_port": InputRule(Change.RECORD, "the next SSH session dials it"),
    "timeouts": InputRule(Change.RECORD, "the state budgets of later steps (leaving the cluster)"),
    "environment": InputRule(
        Change.RECORD, "read by delete (a production machine leaves only if its claim may release)"
    ),
    "install_artifacts": InputRule(
        Change.IGNORE, "the Robot install on adoption only; release uses the claim's"
    ),
    "labels": InputRule(Change.IGNORE, "registration only: later edits are the NodeLabels resource's"),
    "taints": InputRule(Change.IGNORE, "registration only: later edits are the NodeLabels resource's"),
    "node_pool": InputRule(Change.IGNORE, "registration only: later edits are the NodeLabels resource's"),
    "datacenter": InputRule(Change.IGNORE, "informational; follows the box"),
    "box_name": InputRule(Change.IGNORE, "informational; follows the box"),
    "claim_token": InputRule(Change.IGNORE, "follows the claim (a new claim is a new box_id)"),
    "claim_id": InputRule(
        Change.IGNORE,
        "the claim's ID, `<vendor>:<box id>`: known in a preview of the claim's update in place, where "
        "the facts above are not, so the preview keeps the box",
    ),
    "project": InputRule(Change.IGNORE, "identity of the claim; the claim resource owns it"),
    "stack": InputRule(Change.IGNORE, "identity of the claim; the claim resource owns it"),
    "resource_name": InputRule(Change.IGNORE, "identity of the claim; the claim resource owns it"),
    "urn": InputRule(Change.IGNORE, "where progress lines attach; read per call"),
}


def table_diff(
    table: Mapping[str, InputRule], olds: Mapping[str, Any], news: Mapping[str, Any]
) -> dict[Change, list[str]]:
    """Which inputs changed, grouped by what the change does. Unknown values (preview) count as changed."""
    found: dict[Change, list[str]] = {change: [] for change in Change}
    for key, rule in table.items():
        if _changed(key, olds, news):
            found[rule.change].append(key)
    return found


def _changed(key: str, olds: Mapping[str, Any], news: Mapping[str, Any]) -> bool:
    new = news.get(key)
    if unknown(new):
        return True
    return bool(_norm(key, olds.get(key)) != _norm(key, new))


def unknown(value: Any) -> bool:
    """A value the engine does not know yet (a preview): the SDK's Unknown, or its wire sentinel."""
    if isinstance(value, pulumi_output.Unknown) or (isinstance(value, str) and value == rpc.UNKNOWN):
        return True
    if isinstance(value, Mapping):
        return any(unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(unknown(v) for v in value)
    return False


def _norm(key: str, value: Any) -> str | None:
    if key == "ssh_port":
        # State written before ssh_port was an input dialled port 22: the same as an explicit 22.
        value = _port(DEFAULT_SSH_PORT if value is None else value)
    if key == "timeouts" and not value:
        value = None  # {} and absent mean the defaults
    if value is None:
        return None
    return json.dumps(value, sort_keys=True)


def claim_diff(olds: Mapping[str, Any], news: Mapping[str, Any]) -> dyn.DiffResult:
    """MachineClaim: see CLAIM_INPUTS. A datacenter_prefix change replaces only when the claimed box
    no longer matches it."""
    found = table_diff(CLAIM_INPUTS, olds, news)
    replaces = found[Change.REPLACE]
    if "datacenter_prefix" in replaces and not unknown(news.get("datacenter_prefix")):
        prefix = news.get("datacenter_prefix")
        datacenter = str(olds.get("datacenter") or "")
        if not prefix or datacenter.lower().startswith(str(prefix).lower()):
            replaces = [k for k in replaces if k != "datacenter_prefix"]
            found[Change.RECORD].append("datacenter_prefix")
    excluded = news.get("excluded_boxes")
    if "excluded_boxes" in replaces and not unknown(excluded) and olds.get("box_id") not in (excluded or []):
        replaces = [k for k in replaces if k != "excluded_boxes"]
        found[Change.RECORD].append("excluded_boxes")
    if release_unrecorded(olds, news):
        found[Change.RECORD].append("release_allowed")
    changed = bool(replaces or found[Change.RECORD] or found[Change.REJOIN])
    # Boxes are scarce (no spare box waits for a replacement): release first, then claim.
    return dyn.DiffResult(changes=changed, replaces=replaces, delete_before_replace=bool(replaces))


def release_unrecorded(olds: Mapping[str, Any], news: Mapping[str, Any]) -> bool:
    """A production claim whose switches allow its release while its cluster record does not say so
    (a claim made before the record carried them): an update records it, or its machine could never
    leave (release.leave_refusal). Outside production nothing reads the record's switches."""
    keys = ("api_server", "environment", "allow_release", "allow_production_release")
    if any(unknown(news.get(key)) for key in keys) or not news.get("api_server"):
        return False
    allowed = news.get("allow_release") is True and news.get("allow_production_release") is True
    return news.get("environment") == PRODUCTION and allowed and olds.get("release_allowed") is not True


# What AdoptedMachine reads from its MachineClaim's outputs (components/fleet.py).
CLAIM_FACTS = ("box_id", "box_name", "datacenter", "public_ipv4", "provider_id", "claim_token")


# The machine's `state` output as `pulumi refresh` reads it from the box's record when the machine's
# leave stopped halfway (its delete failed: a drain a PodDisruptionBudget held past its budget) and the
# machine is still in the stack: its Node is cordoned and partly drained.
LEAVING = "leaving"


# The machine's `state` output as `pulumi refresh` reads it from the box's record when the machine's
# last join stopped halfway: an update that failed (a rejoin's SSH step; an Elastic Metal move that left
# the old Private Network and never reached the new one). The engine kept the machine's old outputs, so
# a reverted change would otherwise diff as nothing to do while the box is not what they say.
JOINING = "joining"


def unfinished(olds: Mapping[str, Any]) -> bool:
    """A leave or a join that stopped halfway, as the last refresh read it: an update joins the box
    again (and uncordons the Node of a leave, MachineProvider.update); a shrink or a change reverted."""
    return olds.get("state") in (LEAVING, JOINING)


def machine_diff(olds: Mapping[str, Any], news: Mapping[str, Any]) -> dyn.DiffResult:
    """AdoptedMachine: see MACHINE_INPUTS, and a leave or join that stopped halfway (`unfinished`)."""
    found = table_diff(MACHINE_INPUTS, olds, _claim_facts_in_preview(olds, news))
    replaces = found[Change.REPLACE]
    changed = bool(replaces or found[Change.RECORD] or found[Change.REJOIN] or unfinished(olds))
    return dyn.DiffResult(changes=changed, replaces=replaces, delete_before_replace=bool(replaces))


def _claim_facts_in_preview(olds: Mapping[str, Any], news: Mapping[str, Any]) -> Mapping[str, Any]:
    """A preview cannot run a dynamic resource's update (the SDK's provider does not take previews),
    so while its claim is updated in place (a release switch, the OS) every fact the machine reads from
    the claim is unknown, and would preview as another box: a replace, refused in production where
    machines are protected. The claim's ID is known there (an update keeps it) and names its box;
    when it names the machine's own box, those unknown facts are the ones the machine holds."""
    claim_id = news.get("claim_id")
    if not isinstance(claim_id, str) or unknown(claim_id) or not olds.get("box_id"):
        return news
    try:
        held = resource_id(str(olds.get("vendor")), str(olds["box_id"]))
    except ValueError:
        return news
    if claim_id != held:
        return news
    return {**news, **{key: olds.get(key) for key in CLAIM_FACTS if unknown(news.get(key))}}


def diff_table_markdown(table: Mapping[str, InputRule]) -> str:
    """A diff table as docs/machines.md prints it (a test holds the two together)."""
    lines = ["| input | a change does | why |", "|---|---|---|"]
    lines += [f"| `{key}` | {rule.change.value} | {rule.why} |" for key, rule in table.items()]
    return "\n".join(lines)


def rejoin_needed(olds: Mapping[str, Any], news: Mapping[str, Any]) -> list[str]:
    """What makes an update join the box again: changed inputs, and `state` for a leave or a join that
    stopped halfway."""
    changed = table_diff(MACHINE_INPUTS, olds, news)[Change.REJOIN]
    return [*changed, "state"] if unfinished(olds) else changed


# --- parsed inputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timeouts:
    overrides: Mapping[str, float]

    def __call__(self, name: str) -> float:
        return float(self.overrides[name] if name in self.overrides else DEFAULT_TIMEOUTS[name])


@dataclass(frozen=True)
class ClaimSpec:
    """The inputs of one MachineClaim, checked."""

    project: str
    stack: str
    resource_name: str  # the machine slot's name (<fleet>-<i>): the claim token derives from it
    environment: str
    fleet: str
    vendor: Vendor
    marker: str
    datacenter_prefix: str | None
    os: str
    ssh_user: str
    ssh_port: int
    api_server: str | None
    allow_release: bool
    allow_production_release: bool
    timeout: Timeouts
    urn: str | None = None
    excluded_boxes: tuple[str, ...] = ()

    @property
    def token(self) -> str:
        return claim_token(self.project, self.stack, self.resource_name)

    @property
    def production(self) -> bool:
        return self.environment == PRODUCTION

    @property
    def login(self) -> str:
        return ROBOT_LOGIN if self.vendor is Vendor.ROBOT else self.ssh_user


@dataclass(frozen=True)
class MachineSpec:
    """The inputs of one AdoptedMachine, checked: the claim's outputs plus the join's own inputs."""

    project: str
    stack: str
    resource_name: str
    environment: str
    fleet: str
    vendor: Vendor
    box_id: str
    public_ipv4: str
    provider_id: str
    claim_token: str
    node_pool: str
    labels: Mapping[str, str]
    taints: Sequence[Mapping[str, str]]
    ssh_user: str
    ssh_port: int
    kubernetes_minor: str
    api_server: str | None
    timeout: Timeouts
    urn: str | None = None
    # The kubelet's clusterDNS and clusterDomain (config cluster.dns_service_ip and cluster.domain). A
    # machine created before they were inputs has none: its next update rejoins with them.
    cluster_dns: str | None = None
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
    # The Node's name when the state says so: an imported box that was already a node keeps the name it
    # registered with. A machine this program joined is <fleet>-<box id>.
    registered_name: str | None = None
    # Elastic Metal: the Private Network the box is attached to and brings up as VLAN pn0.
    private_network: str | None = None
    # Apple silicon: the node agent's pin {url, sha256, registers_node}.
    node_agent: Mapping[str, Any] | None = None

    @property
    def production(self) -> bool:
        return self.environment == PRODUCTION

    @property
    def is_macos(self) -> bool:
        return self.vendor is Vendor.APPLESILICON

    @property
    def registers_node(self) -> bool:
        """Whether a Node comes of the join: every Linux box's kubelet registers one, a Mac's agent
        unless its pin says it does not (the dev stack's simulated Macs)."""
        if not self.is_macos:
            return True
        return bool((self.node_agent or {}).get("registers_node", True))

    @property
    def login(self) -> str:
        return ROBOT_LOGIN if self.vendor is Vendor.ROBOT else self.ssh_user

    @property
    def node_name(self) -> str:
        return self.registered_name or node_name_for(self.fleet, self.box_id)

    def node_labels(self) -> dict[str, str]:
        return node_labels(self.vendor, self.fleet, self.node_pool, self.labels)

    def node_taints(self) -> list[dict[str, str]]:
        return node_taints(self.vendor, self.taints)


def node_labels(vendor: Vendor, fleet: str, node_pool: str, labels: Mapping[str, str]) -> dict[str, str]:
    """Every label a box of the fleet carries: the fleet's own, the pool and fleet labels, and on Robot
    the Kata runtime labels the runner pods select."""
    result = dict(labels)
    if vendor is Vendor.ROBOT:
        result.update(ROBOT_LABELS)
    result[POOL_LABEL] = node_pool
    result[FLEET_LABEL] = fleet
    return dict(sorted(result.items()))


# The extended resource a box's Node advertises and each Kura pod requests its egress floor of
# (kura-controller's pod_resource_requests): the scheduler then places no more accounts on a box than
# its NIC's budget holds. Nothing else advertises it (in the reference, the CAPI provider did).
EGRESS_MBPS_RESOURCE = "tuist.dev/egress-mbps"


def node_capacity(vendor: Vendor, egress_budget_mbps: int) -> dict[str, str]:
    """The extended resources a box's Node advertises: its egress budget. A Mac runs no Kura pod."""
    if vendor is Vendor.APPLESILICON:
        return {}
    return {EGRESS_MBPS_RESOURCE: str(egress_budget_mbps)}


def node_taints(vendor: Vendor, taints: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """The fleet's taints, and on Robot the runner-tier taint only runner pods tolerate."""
    result = [{"key": t["key"], "value": str(t.get("value") or ""), "effect": t["effect"]} for t in taints]
    if vendor is Vendor.ROBOT and not any(
        (t["key"], t["effect"]) == (ROBOT_TAINT["key"], ROBOT_TAINT["effect"]) for t in result
    ):
        result.append(dict(ROBOT_TAINT))
    return result


def node_name_for(fleet: str, box_id: str) -> str:
    """The Node's name: fleet plus box id, so a replacement on another box never collides."""
    slug = _SLUG.sub("-", f"{fleet}-{box_id}".lower()).strip("-")
    return slug[:63].rstrip("-")


def provider_id_for(vendor: Vendor, box_id: str, datacenter: str) -> str:
    """The foreign providerID: keeps the Hetzner CCM off the node; the failover mover parses it."""
    if vendor is Vendor.OVH:
        return f"ovh://{datacenter.lower()}/{box_id}"
    if vendor is Vendor.DEDIBOX:
        return f"dedibox://{box_id}"  # box id is <zone>/<server id>
    if vendor is Vendor.SCALEWAY_EM:
        from providers.scaleway_em.models import provider_id as em_provider_id

        return em_provider_id(box_id)  # scaleway://<zone>/<server id>
    if vendor is Vendor.APPLESILICON:
        from providers.applesilicon.models import provider_id as mac_provider_id

        return mac_provider_id(box_id)  # applesilicon://<zone>/<server id>
    return f"hrobot://{box_id}"


def resource_id(vendor: Vendor | str, box_id: str) -> str:
    """`<vendor>:<box id>`: what both resources are known by in state, and what read() reads."""
    return f"{Vendor(vendor).value}:{box_id}"


def parse_resource_id(id_: str) -> tuple[Vendor, str]:
    vendor, sep, box_id = id_.partition(":")
    if not sep or vendor not in _VENDORS or not box_id:
        raise MachineInputError(
            f"resource id {id_!r} is not <vendor>:<box id> (vendor one of {', '.join(_VENDORS)})"
        )
    return Vendor(vendor), box_id


# --- checks -------------------------------------------------------------------------------------------

Problems = list[tuple[str, str]]


def _need(
    problems: Problems,
    props: Mapping[str, Any],
    key: str,
    pattern: re.Pattern[str] | None = None,
    what: str = "",
    optional: bool = False,
) -> None:
    value = props.get(key)
    if value is None and optional:
        return
    if not isinstance(value, str) or not value:
        problems.append((key, f"must be a non-empty string, got {_short(value)}"))
    elif value != value.strip():
        problems.append((key, f"{_short(value)} has leading or trailing whitespace"))
    elif pattern is not None and not pattern.match(value):
        problems.append((key, f"{_short(value)} is not {what}"))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _common_problems(props: Mapping[str, Any]) -> Problems:
    problems: Problems = []
    for key in ("project", "stack", "resource_name"):
        _need(problems, props, key)
    _need(problems, props, "fleet", _NAME, "a DNS label")
    if props.get("environment") not in _ENVIRONMENTS:
        problems.append(("environment", f"must be one of {', '.join(_ENVIRONMENTS)}"))
    if props.get("vendor") not in _VENDORS:
        problems.append(("vendor", f"must be one of {', '.join(_VENDORS)}"))
    _need(problems, props, "ssh_user", _USER, "a login name (a-z, 0-9, '_' and '-', at most 32)")
    api_server = props.get("api_server")
    if api_server is not None and (not isinstance(api_server, str) or api_server_problem(api_server)):
        problems.append(("api_server", f"must be https://<host>:<port> or null, got {_short(api_server)}"))
    ssh_port = _port(props.get("ssh_port", DEFAULT_SSH_PORT))
    if not isinstance(ssh_port, int) or isinstance(ssh_port, bool) or not 1 <= ssh_port <= 65535:
        problems.append(("ssh_port", f"must be a TCP port (1-65535), got {_short(ssh_port)}"))
    problems += _timeout_problems(props.get("timeouts", {}))
    return problems


def _timeout_problems(timeouts: Any) -> Problems:
    if timeouts is None:
        return []
    if not isinstance(timeouts, Mapping):
        return [("timeouts", "must be a mapping of state name to seconds")]
    problems: Problems = []
    for name, seconds in timeouts.items():
        if name not in DEFAULT_TIMEOUTS:
            problems.append((f"timeouts.{name}", f"unknown; known: {', '.join(sorted(DEFAULT_TIMEOUTS))}"))
        elif not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds <= 0:
            problems.append((f"timeouts.{name}", "must be a number of seconds > 0"))
    return problems


def claim_input_problems(props: Mapping[str, Any]) -> Problems:
    """(property, reason) for every problem with a MachineClaim's inputs; empty when they are fine."""
    problems = _common_problems(props)
    _need(problems, props, "marker", _MARKER, "a marker (lowercase letters, digits and '-')")
    marker = props.get("marker")
    if props.get("vendor") in _VENDORS and isinstance(marker, str) and _MARKER.match(marker):
        # The vendor field's limits (providers/vendor.py MARKER_LIMITS), as config checks them.
        problem = marker_problem(Vendor(props["vendor"]), marker)
        if problem:
            problems.append(("marker", problem))
    _need(problems, props, "os", re.compile(r"^[a-z0-9][a-z0-9_.-]*$"), "an OS label")
    _need(
        problems,
        props,
        "datacenter_prefix",
        re.compile(r"^[A-Za-z0-9-]+$"),
        "a datacenter prefix",
        optional=True,
    )
    marker, environment = props.get("marker"), props.get("environment")
    if isinstance(marker, str) and isinstance(environment, str) and environment not in marker.split("-"):
        problems.append(("marker", f"{_short(marker)} does not contain the environment name {environment!r}"))
    for key in ("allow_release", "allow_production_release"):
        if not isinstance(props.get(key, False), bool):
            problems.append((key, f"must be true or false, got {_short(props.get(key))}"))
    excluded = props.get("excluded_boxes")
    listed = isinstance(excluded, list) and all(isinstance(b, str) and b for b in excluded)
    if excluded is not None and not unknown(excluded) and not listed:
        problems.append(("excluded_boxes", f"must be a list of box ids, got {_short(excluded)}"))
    return problems


def machine_input_problems(props: Mapping[str, Any]) -> Problems:
    """(property, reason) for every problem with an AdoptedMachine's inputs."""
    problems = _common_problems(props)
    for key in ("box_id", "public_ipv4", "provider_id", "claim_token"):
        value = props.get(key)
        if value is not None and not unknown(value) and not isinstance(value, str):
            problems.append((key, f"must be a string, got {_short(value)}"))
    _need(problems, props, "node_pool", _NAME, "a DNS label")
    _need(problems, props, "kubernetes_minor", _MINOR, "a Kubernetes minor (v1.NN)")
    cluster_dns = props.get("cluster_dns")
    if cluster_dns is not None and not unknown(cluster_dns) and not _ipv4(cluster_dns):
        problems.append(("cluster_dns", f"{_short(cluster_dns)} is not an IPv4 address"))
    _need(problems, props, "cluster_domain", _DOMAIN, "a DNS domain (cluster.local)", optional=True)
    labels = props.get("labels", {})
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        problems.append(("labels", "must be a mapping of label key to string value"))
    taints = props.get("taints", [])
    if not isinstance(taints, list):
        problems.append(("taints", "must be a list of {key, value, effect}"))
    else:
        for i, taint in enumerate(taints):
            if not isinstance(taint, Mapping) or not isinstance(taint.get("key"), str):
                problems.append((f"taints[{i}]", "must be {key, value, effect} with a string key"))
            elif taint.get("effect") not in TAINT_EFFECTS:
                problems.append((f"taints[{i}].effect", f"must be {', '.join(TAINT_EFFECTS)}"))
    problems += _scaleway_problems(props)
    return problems


_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _scaleway_problems(props: Mapping[str, Any]) -> Problems:
    """The Private Network (Elastic Metal only) and the node agent (Apple silicon, required)."""
    problems: Problems = []
    vendor = props.get("vendor")
    network = props.get("private_network")
    if network is not None and not unknown(network):
        if vendor != Vendor.SCALEWAY_EM.value:
            problems.append(
                ("private_network", f"only scaleway_em boxes join a Private Network, not {vendor}")
            )
        elif not isinstance(network, str) or not _UUID.match(network):
            problems.append(("private_network", f"{_short(network)} is not a Private Network id (a UUID)"))
    agent = props.get("node_agent")
    if unknown(agent):
        return problems
    if vendor == Vendor.APPLESILICON.value:
        if not isinstance(agent, Mapping):
            problems.append(("node_agent", "required on applesilicon: {url, sha256, registers_node}"))
        else:
            if not isinstance(agent.get("url"), str) or not re.match(r"^https?://\S+$", agent["url"]):
                problems.append(("node_agent.url", f"{_short(agent.get('url'))} is not an http(s) URL"))
            if not isinstance(agent.get("sha256"), str) or not _SHA256.match(agent["sha256"]):
                problems.append(("node_agent.sha256", "must be 64 lowercase hex digits"))
            if not isinstance(agent.get("registers_node", True), bool):
                problems.append(("node_agent.registers_node", "must be true or false"))
    elif agent is not None:
        problems.append(("node_agent", f"only applesilicon boxes run the macOS node agent, not {vendor}"))
    return problems


def _fail(kind: str, problems: Problems) -> MachineInputError:
    return MachineInputError(f"{kind} inputs: " + "; ".join(f"{key}: {reason}" for key, reason in problems))


def parse_claim(props: Mapping[str, Any]) -> ClaimSpec:
    problems = claim_input_problems(props)
    if problems:
        raise _fail("MachineClaim", problems)
    return ClaimSpec(
        project=props["project"],
        stack=props["stack"],
        resource_name=props["resource_name"],
        environment=props["environment"],
        fleet=props["fleet"],
        vendor=Vendor(props["vendor"]),
        marker=props["marker"],
        datacenter_prefix=props.get("datacenter_prefix"),
        os=props["os"],
        ssh_user=props["ssh_user"],
        ssh_port=int(_port(props.get("ssh_port", DEFAULT_SSH_PORT))),
        api_server=props.get("api_server"),
        allow_release=bool(props.get("allow_release", False)),
        allow_production_release=bool(props.get("allow_production_release", False)),
        timeout=Timeouts(dict(props.get("timeouts") or {})),
        urn=_urn(props.get("urn")),
        excluded_boxes=tuple(props.get("excluded_boxes") or ()),
    )


def parse_machine(props: Mapping[str, Any]) -> MachineSpec:
    problems = machine_input_problems(props)
    for key in ("box_id", "public_ipv4", "provider_id", "claim_token"):
        if not isinstance(props.get(key), str) or not props.get(key):
            problems.append((key, "must come from the machine's claim (a non-empty string)"))
    if problems:
        raise _fail("AdoptedMachine", problems)
    return MachineSpec(
        project=props["project"],
        stack=props["stack"],
        resource_name=props["resource_name"],
        environment=props["environment"],
        fleet=props["fleet"],
        vendor=Vendor(props["vendor"]),
        box_id=props["box_id"],
        public_ipv4=props["public_ipv4"],
        provider_id=props["provider_id"],
        claim_token=props["claim_token"],
        node_pool=props["node_pool"],
        labels=dict(props.get("labels") or {}),
        taints=[
            {"key": t["key"], "value": str(t.get("value") or ""), "effect": t["effect"]}
            for t in props.get("taints") or []
        ],
        ssh_user=props["ssh_user"],
        ssh_port=int(_port(props.get("ssh_port", DEFAULT_SSH_PORT))),
        kubernetes_minor=props["kubernetes_minor"],
        api_server=props.get("api_server"),
        timeout=Timeouts(dict(props.get("timeouts") or {})),
        urn=_urn(props.get("urn")),
        cluster_dns=props.get("cluster_dns"),
        cluster_domain=props.get("cluster_domain") or DEFAULT_CLUSTER_DOMAIN,
        registered_name=props.get("node_name") if isinstance(props.get("node_name"), str) else None,
        private_network=props.get("private_network"),
        node_agent=dict(props["node_agent"]) if isinstance(props.get("node_agent"), Mapping) else None,
    )


def _ipv4(value: Any) -> bool:
    try:
        ipaddress.IPv4Address(value)
    except (ValueError, TypeError):
        return False
    return isinstance(value, str)


def _urn(value: Any) -> str | None:
    return value if isinstance(value, str) and value.startswith("urn:pulumi:") else None


def _port(value: Any) -> Any:
    # Numbers cross the Pulumi engine as floats (2222.0): a whole one is the port it names.
    return int(value) if isinstance(value, float) and value.is_integer() else value
