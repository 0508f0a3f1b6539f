"""Cross-field rules: what one well-formed field cannot know on its own.

Each rule reads a `View` of the stack, built item by item: a fleet, failover IP,
region, runner pool, vendor account, `kura` or `cluster` that fails its own schema
is left out (pydantic already reported it), and names found on broken items still
count as existing, so one typo gives one problem, not a cascade.

Host rule (tuist-anchor.md section 4.4): the public zone is kura.tuist.dev and
the environment suffix is empty in production, so a region's host is
`<region>.kura.tuist.dev` in production and `<region>.<env>.kura.tuist.dev`
in every other environment (dev included).
"""

from __future__ import annotations

import ipaddress
import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, StrictBool, TypeAdapter, ValidationError

from config.models import (
    DEMUX_DRAIN_SECONDS,
    DEMUX_MIN_READY_SECONDS,
    GATEWAY_DRAIN_SECONDS,
    GATEWAY_MIN_READY_SECONDS,
    PEER_PORT,
    SCW_ZONE,
    AppleSiliconAccount,
    Cluster,
    ControlPlaneFirewallConfig,
    DediboxAccount,
    ElasticMetalAccount,
    Environment,
    FailoverIP,
    Fleet,
    GatewayMode,
    Kura,
    OvhAccount,
    Region,
    RobotAccount,
    RunnerOS,
    RunnerPool,
    StackConfig,
    TaintEffect,
    Vendor,
    robot_failover_regions,
)
from config.problems import Loc, Problem
from config.text import quote
from providers.constants import FLEET_LABEL, POOL_LABEL, api_server_problem
from providers.kube import NODE_LOCAL_STORAGE_CLASSES
from providers.vendor import FAILOVER_IP_VENDORS, MARKER_LIMITS, marker_problem

KURA_ZONE = "kura.tuist.dev"
# The policy pack refuses the same tags (policy/tuist_policy/images.py; a test holds them equal).
FLOATING_TAGS = frozenset({"latest", "main", "master", "edge", "nightly", "stable", "dev", "head"})
# A tag that names one release (policy/tuist_policy/images.py's, which a test holds equal): a full
# version or a commit's; alpine, mainline, v1 and the like may move under the same name.
RELEASE_TAG = re.compile(r"v?\d+\.\d+\.\d+([-+._][0-9A-Za-z._+-]+)?|sha-[0-9a-f]{7,40}")
OVH_ENDPOINT_KEYS = ("ovh-eu", "ovh-ca", "ovh-us")
# OVHcloud US is a separate company with its own API (ovh-us) and sells only these sites.
OVH_US_DATACENTERS = ("vin", "hil")
# Vendors whose marker is matched as a name prefix (OVH displayName, Robot server_name, Apple silicon
# name); Dedibox and Elastic Metal markers are tags, matched whole.
PREFIX_MARKER_VENDORS = frozenset(vendor for vendor, limit in MARKER_LIMITS.items() if not limit.is_tag)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_CLUSTER_ID = re.compile(r"^(?P<region>.+)-[0-9]+$")

M = TypeVar("M", bound=BaseModel)


@dataclass
class View:
    """The parts of a stack that are well-formed on their own."""

    raw: Mapping[str, Any]
    environment: Environment | None = None
    accounts: dict[Vendor, BaseModel] = field(default_factory=dict)
    present_accounts: set[Vendor] = field(default_factory=set)
    # vendors itself is malformed: which accounts exist is unknown, so nothing is "missing".
    vendors_unknown: bool = False
    fleets: list[tuple[int, Fleet]] = field(default_factory=list)
    fleet_names: set[str] = field(default_factory=set)  # includes broken fleets
    # fleets is not a list, or holds an entry without a name: which fleets exist is unknown, so no
    # reference to one is "unknown" (the malformed entry is the one problem).
    fleets_unknown: bool = False
    failover_ips: list[tuple[int, FailoverIP]] = field(default_factory=list)
    failover_ip_names: set[str] = field(default_factory=set)  # includes broken entries
    failover_ips_unknown: bool = False  # as fleets_unknown
    regions: list[tuple[int, Region]] = field(default_factory=list)
    raw_regions: list[Any] = field(default_factory=list)
    # regions is not a list, or holds an entry that is not a mapping: which failover IPs the regions
    # use is unknown.
    regions_unknown: bool = False
    # The failover IP names regions name (broken regions included), and whether some region names one
    # that does not exist or names it with a value that is not a name (then which IP it meant is unknown).
    used_failover_ips: set[str] = field(default_factory=set)
    dangling_failover_ip: bool = False
    runner_pools: list[tuple[int, RunnerPool]] = field(default_factory=list)
    kura: Kura | None = None
    cluster: Cluster | None = None
    allow_production_release: bool | None = None

    def fleet(self, name: str) -> Fleet | None:
        return next((f for _, f in self.fleets if f.name == name), None)

    def failover_ip(self, name: str) -> FailoverIP | None:
        return next((f for _, f in self.failover_ips if f.name == name), None)


def _items(raw: Any, model: type[M]) -> tuple[list[tuple[int, M]], set[str]]:
    if not isinstance(raw, list):
        return [], set()
    valid: list[tuple[int, M]] = []
    names: set[str] = set()
    for i, item in enumerate(raw):
        if isinstance(item, Mapping) and isinstance(item.get("name"), str):
            names.add(item["name"])
        try:
            valid.append((i, model.model_validate(item)))
        except ValidationError:
            continue
    return valid, names


def _names_unknown(raw: Any) -> bool:
    """Whether a list of named items is malformed where names come from: not a list, or an item
    without a string name."""
    if raw is None:
        return False
    if not isinstance(raw, list):
        return True
    return any(not (isinstance(item, Mapping) and isinstance(item.get("name"), str)) for item in raw)


def _one(raw: Any, model: type[M]) -> M | None:
    try:
        return model.model_validate(raw)
    except ValidationError:
        return None


def build_view(raw: Mapping[str, Any]) -> View:
    view = View(raw=raw)
    try:
        view.environment = Environment(str(raw.get("environment")))
    except ValueError:
        view.environment = None
    vendors = raw.get("vendors")
    view.vendors_unknown = vendors is not None and not isinstance(vendors, Mapping)
    if isinstance(vendors, Mapping):
        account_models: dict[Vendor, type[BaseModel]] = {
            Vendor.OVH: OvhAccount,
            Vendor.DEDIBOX: DediboxAccount,
            Vendor.ROBOT: RobotAccount,
            Vendor.SCALEWAY_EM: ElasticMetalAccount,
            Vendor.APPLESILICON: AppleSiliconAccount,
        }
        for vendor, model in account_models.items():
            if vendors.get(vendor.value) is None:
                continue
            view.present_accounts.add(vendor)
            account = _one(vendors[vendor.value], model)
            if account is not None:
                view.accounts[vendor] = account
    view.fleets, view.fleet_names = _items(raw.get("fleets"), Fleet)
    view.fleets_unknown = _names_unknown(raw.get("fleets"))
    view.failover_ips, view.failover_ip_names = _items(raw.get("failover_ips"), FailoverIP)
    view.failover_ips_unknown = _names_unknown(raw.get("failover_ips"))
    view.regions, _ = _items(raw.get("regions"), Region)
    regions_raw = raw.get("regions")
    view.raw_regions = list(regions_raw) if isinstance(regions_raw, list) else []
    view.regions_unknown = regions_raw is not None and (
        not isinstance(regions_raw, list) or not all(isinstance(r, Mapping) for r in regions_raw)
    )
    for region_raw in view.raw_regions:
        named = region_raw.get("failover_ip") if isinstance(region_raw, Mapping) else None
        if isinstance(named, str):
            view.used_failover_ips.add(named)
            view.dangling_failover_ip |= named not in view.failover_ip_names
        elif named is not None:
            view.dangling_failover_ip = True
        elif isinstance(region_raw, Mapping) and "failover_ip" not in region_raw:
            # A host_network region must say (region_rules): until it does, it may mean any of them.
            gateway = region_raw.get("gateway", GatewayMode.HOST_NETWORK.value)
            view.dangling_failover_ip |= gateway == GatewayMode.HOST_NETWORK.value
    view.runner_pools, _ = _items(raw.get("runner_pools"), RunnerPool)
    view.kura = _one(raw.get("kura"), Kura)
    view.cluster = _one(raw.get("cluster"), Cluster)
    try:
        view.allow_production_release = TypeAdapter(StrictBool).validate_python(
            raw.get("allow_production_release", False)
        )
    except ValidationError:
        view.allow_production_release = None
    return view


# --- helpers ------------------------------------------------------------------


def _known(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "none"


def _duplicates(
    items: Sequence[tuple[int, Any]], value: Callable[[Any], Any]
) -> Iterator[tuple[int, Any, int]]:
    """(index, value, index of the first item with that value) for every repeat."""
    first: dict[Any, int] = {}
    for i, item in items:
        v = value(item)
        if v is None:
            continue
        if v in first:
            yield i, v, first[v]
        else:
            first[v] = i


def _tokens(marker: str) -> list[str]:
    return [t for t in re.split(r"[^a-z0-9]+", marker.lower()) if t]


def _is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def image_pin_problem(image: str) -> str | None:
    """Why an image reference would not deploy the same bits twice, or None."""
    if "@" in image:
        digest = image.split("@", 1)[1]
        if re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            return None
        return f"{quote(image)} has a malformed digest (expected @sha256:<64 hex>)"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"{quote(image)} has no tag; pin a release tag or a digest outside dev"
    tag = last.rsplit(":", 1)[1]
    if tag.strip().lower() in FLOATING_TAGS or not tag.strip():
        return f"{quote(image)} uses the floating tag {quote(tag)}; pin a release tag or a digest outside dev"
    if not RELEASE_TAG.fullmatch(tag):
        return (
            f"{quote(image)} uses the tag {quote(tag)}, which names no release (x.y.z, or sha-<commit>); "
            "pin a release tag or a digest outside dev"
        )
    return None


def expected_host(region_id: str, environment: Environment) -> str:
    if environment is Environment.PRODUCTION:
        return f"{region_id}.{KURA_ZONE}"
    return f"{region_id}.{environment.value}.{KURA_ZONE}"


# --- rules --------------------------------------------------------------------


def _vendor_url_problem(url: str, env: Environment, what: str) -> str | None:
    loopback = _is_loopback(url)
    scheme = urlsplit(url).scheme
    if env is Environment.DEV:
        if not (loopback and scheme in ("http", "https")):
            return (
                f"{quote(url)} is not a loopback URL; the dev stack talks only to the local simulator "
                "(http://127.0.0.1:<port>/...)"
            )
        return None
    if loopback:
        return f"{quote(url)} is a loopback URL (the dev simulator); {env.value} must use the real {what}"
    if scheme != "https":
        return f"{quote(url)} must be an https:// URL"
    return None


def vendor_rules(view: View) -> Iterator[Problem]:
    env = view.environment
    if env is None:
        return
    ovh = view.accounts.get(Vendor.OVH)
    if isinstance(ovh, OvhAccount):
        loc: Loc = ("vendors", "ovh", "endpoint")
        endpoint = ovh.endpoint
        if env is not Environment.DEV and endpoint in OVH_ENDPOINT_KEYS:
            pass
        elif env is not Environment.DEV and "://" not in endpoint:
            yield Problem(
                loc,
                f"{quote(endpoint)} is not an OVH endpoint ({', '.join(OVH_ENDPOINT_KEYS)}, "
                "or an https:// URL ending in /1.0)",
            )
        else:
            problem = _vendor_url_problem(endpoint, env, "OVH API")
            if problem:
                yield Problem(loc, problem)
            elif not endpoint.rstrip("/").endswith("/1.0"):
                yield Problem(loc, f"{quote(endpoint)} must end in /1.0 (the OVH API version)")
    for vendor, account in view.accounts.items():
        if isinstance(account, DediboxAccount | RobotAccount | ElasticMetalAccount | AppleSiliconAccount):
            what = _API_NAMES[vendor]
            problem = _vendor_url_problem(account.api_url, env, what)
            if problem:
                yield Problem(("vendors", vendor.value, "api_url"), problem)
    robot = view.accounts.get(Vendor.ROBOT)
    if isinstance(robot, RobotAccount) and robot.failover_watchers is not None:
        own = robot_failover_regions([r for _, r in view.regions], [f for _, f in view.failover_ips])
        if robot.failover_watchers < len(own):
            yield Problem(
                ("vendors", "robot", "failover_watchers"),
                f"{robot.failover_watchers} is fewer than this stack's own Robot failover watchers "
                f"({len(own)}: {', '.join(own)}); count every stack's on this account",
            )


def robot_account_problems(stacks: Mapping[str, StackConfig]) -> list[str]:
    """Across stack files: the Robot failover watchers of all stacks on one Robot account share its
    hourly request budget, so each stack's vendors.robot.failover_watchers (default its own count)
    must be at least their sum, or its watchers read routes faster than the account allows and stall
    on its rate limit."""
    by_account: dict[tuple[str, str], dict[str, list[str]]] = {}
    for name, cfg in stacks.items():
        if cfg.vendors.robot is not None:
            account = (cfg.vendors.robot.api_url, cfg.vendors.robot.username)
            by_account.setdefault(account, {})[name] = robot_failover_regions(cfg.regions, cfg.failover_ips)
    problems = []
    for (_, user), regions_by_stack in sorted(by_account.items()):
        total = sum(len(own) for own in regions_by_stack.values())
        polling = ", ".join(f"{stack}: {len(own)}" for stack, own in sorted(regions_by_stack.items()) if own)
        for name, own in sorted(regions_by_stack.items()):
            robot = stacks[name].vendors.robot
            assert robot is not None
            counted = robot.failover_watchers or len(own)
            if own and counted < total:
                problems.append(
                    f"{name}: vendors.robot.failover_watchers is {counted}, but {total} watchers poll "
                    f"Robot account {user!r} ({polling}); set it to {total}"
                )
    return problems


_API_NAMES = {
    Vendor.DEDIBOX: "Scaleway Dedibox API",
    Vendor.ROBOT: "Hetzner Robot API",
    Vendor.SCALEWAY_EM: "Scaleway API",
    Vendor.APPLESILICON: "Scaleway API",
}


def fleet_rules(view: View) -> Iterator[Problem]:
    env = view.environment
    fleets = view.fleets
    for i, name, j in _duplicates(fleets, lambda f: f.name):
        yield Problem(("fleets", i, "name"), f"duplicate fleet name {quote(name)} (also fleets[{j}])")
    for i, fleet in fleets:
        if fleet.vendor not in view.present_accounts and not view.vendors_unknown:
            yield Problem(
                ("fleets", i, "vendor"),
                f"no {fleet.vendor.value} account under vendors (add vendors.{fleet.vendor.value})",
            )
        if env is not None:
            tokens = _tokens(fleet.marker)
            if env.value not in tokens:
                yield Problem(
                    ("fleets", i, "marker"),
                    f"{quote(fleet.marker)} does not contain the environment name {quote(env.value)} "
                    "(the marker is the environment boundary at the vendor)",
                )
            others = [e.value for e in Environment if e is not env and e.value in tokens]
            if others:
                yield Problem(
                    ("fleets", i, "marker"),
                    f"{quote(fleet.marker)} also names environment {quote(others[0])}; "
                    "a marker names only its own environment",
                )
    for i, fleet in fleets:
        # What the vendor's marker field takes, with room for the claim (providers/vendor.py MARKER_LIMITS).
        problem = marker_problem(fleet.vendor, fleet.marker)
        if problem:
            yield Problem(("fleets", i, "marker"), f"{quote(fleet.marker)} {problem}")
    for i, marker, j in _duplicates(fleets, lambda f: f.marker):
        yield Problem(
            ("fleets", i, "marker"),
            f"duplicate marker {quote(marker)} (also fleets[{j}]); both fleets would claim the same boxes",
        )
    for a, (i, fleet) in enumerate(fleets):
        for j, other in fleets[:a]:
            if (
                fleet.vendor is other.vendor
                and fleet.vendor in PREFIX_MARKER_VENDORS
                and fleet.marker != other.marker
                and (fleet.marker.startswith(other.marker) or other.marker.startswith(fleet.marker))
            ):
                short, long_ = sorted((fleet.marker, other.marker), key=len)
                yield Problem(
                    ("fleets", i, "marker"),
                    f"{quote(short)} is a prefix of {quote(long_)} (fleets[{j}]); "
                    f"{fleet.vendor.value} markers match name prefixes, "
                    "so both fleets would claim the same boxes",
                )
    for i, pool, j in _duplicates(fleets, lambda f: f.node_pool):
        yield Problem(("fleets", i, "node_pool"), f"duplicate node pool {quote(pool)} (also fleets[{j}])")
    for i, fleet in fleets:
        program = program_node_labels(fleet)
        for key, value in fleet.labels.items():
            if not _LABEL_VALUE.match(value):
                yield Problem(("fleets", i, "labels", key), _label_value_problem(value))
            elif key in program and value != program[key][0]:
                want, what = program[key]
                yield Problem(
                    ("fleets", i, "labels", key),
                    f"{quote(value)} would be overwritten: the program sets this label to {quote(want)} "
                    f"on every box of the fleet ({what}); remove it",
                )
        for t, taint in enumerate(fleet.taints):
            if not _LABEL_VALUE.match(taint.value):
                yield Problem(("fleets", i, "taints", t, "value"), _label_value_problem(taint.value))
        indexed = list(enumerate(fleet.taints))
        for t, (key, effect), first in _duplicates(indexed, lambda tt: (tt.key, tt.effect)):
            yield Problem(
                ("fleets", i, "taints", t),
                f"duplicate taint {key}:{effect.value} (also taints[{first}])",
            )
    yield from _excluded_box_rules(view)
    yield from _datacenter_rules(view)
    yield from _ovh_datacenter_rules(view)
    yield from _release_rules(view)
    yield from _install_artifact_rules(view)
    yield from _scaleway_fleet_rules(view)


# The labels the program itself puts on every Node of a fleet (providers/machine/spec.py node_labels,
# which config does not import: it pulls in the SSH runner; a test holds the two equal).
ROBOT_NODE_LABELS = {"tuist.dev/kata-runtime": "true", "katacontainers.io/kata-runtime": "true"}


def program_node_labels(fleet: Fleet) -> dict[str, tuple[str, str]]:
    """Label key -> (the value the program sets, what it is) for every Node of the fleet."""
    labels = {
        POOL_LABEL: (fleet.node_pool, "its node_pool"),
        FLEET_LABEL: (fleet.name, "its name"),
    }
    if fleet.vendor is Vendor.ROBOT:
        for key, value in ROBOT_NODE_LABELS.items():
            labels[key] = (value, "the Kata runtime label of every Robot box, which runner pods select")
    return labels


# A box id as each vendor's client builds it (providers/*/models.py): exclusions match ids exactly, so
# any other shape excludes nothing. Server numbers are written as the vendor's integers (no leading 0).
_ZONE_PART = SCW_ZONE.removeprefix("^").removesuffix("$")
_UUID_PART = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
BOX_ID_SHAPES: dict[Vendor, tuple[re.Pattern[str], str]] = {
    # providers/ovh/models.py check_service_name
    Vendor.OVH: (re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$"), "a service name, e.g. ns1001.ip-203-0-113.net"),
    # providers/dedibox/models.py parse_box_id, in a zone vendors.dedibox.zones can name
    Vendor.DEDIBOX: (
        re.compile(rf"^{_ZONE_PART}/[1-9][0-9]*$"),
        "<zone>/<server id>, e.g. fr-par-2/104523",
    ),
    # providers/robot/models.py check_server_number
    Vendor.ROBOT: (re.compile(r"^[1-9][0-9]*$"), "a server number, e.g. 2345601"),
    # providers/scaleway_sdk.py parse_box_id, the uuid as the API writes it (lower case)
    Vendor.SCALEWAY_EM: (
        re.compile(rf"^{_ZONE_PART}/{_UUID_PART}$"),
        "<zone>/<server uuid>, e.g. fr-par-2/e1000000-0000-4000-8000-000000000001",
    ),
    Vendor.APPLESILICON: (
        re.compile(rf"^{_ZONE_PART}/{_UUID_PART}$"),
        "<zone>/<server uuid>, e.g. fr-par-3/a5000000-0000-4000-8000-000000000001",
    ),
}


def _excluded_box_rules(view: View) -> Iterator[Problem]:
    for i, fleet in view.fleets:
        shape, example = BOX_ID_SHAPES[fleet.vendor]
        indexed = list(enumerate(fleet.excluded_boxes))
        for k, box in indexed:
            if not shape.match(box):
                yield Problem(
                    ("fleets", i, "excluded_boxes", k),
                    f"{quote(box)} is not a box id of {fleet.vendor.value} ({example}); exclusions match box "
                    "ids exactly, so it would exclude nothing",
                )
        for k, box, first in _duplicates(indexed, lambda b: b):
            yield Problem(
                ("fleets", i, "excluded_boxes", k),
                f"duplicate box id {quote(box)} (also excluded_boxes[{first}])",
            )


# A Scaleway zone or the start of one (fr-par, fr-par-2): how an Elastic Metal or Mac box's datacenter
# reads, and never how an OVH (bhs6), Dedibox (DC5) or Robot (FSN1-DC14) one does.
_ZONE_LIKE = re.compile(r"^[a-z]{2}-[a-z]{3}(-[0-9]*)?$", re.IGNORECASE)
_DATACENTER_EXAMPLES = {Vendor.OVH: "bhs6", Vendor.DEDIBOX: "DC5", Vendor.ROBOT: "FSN1-DC14"}
_ZONE_VENDORS = {Vendor.SCALEWAY_EM: "an Elastic Metal", Vendor.APPLESILICON: "an Apple silicon"}


def _datacenter_rules(view: View) -> Iterator[Problem]:
    """A fleet's datacenter is a case-insensitive prefix of its boxes' datacenter (providers/machine/
    selection.py): only what no box of the vendor can ever start with is refused."""
    for i, fleet in view.fleets:
        dc = fleet.datacenter
        if not dc:
            continue
        where = ("fleets", i, "datacenter")
        if fleet.vendor in _ZONE_VENDORS:
            account = view.accounts.get(fleet.vendor)
            zones: list[str] = list(getattr(account, "zones", None) or [])
            if zones and not any(zone.lower().startswith(dc.lower()) for zone in zones):
                yield Problem(
                    where,
                    f"{quote(dc)} does not begin any zone vendors.{fleet.vendor.value}.zones scans "
                    f"({', '.join(zones)}); {_ZONE_VENDORS[fleet.vendor]} box's datacenter is its zone, "
                    "so no box would match",
                )
        elif _ZONE_LIKE.match(dc):
            yield Problem(
                where,
                f"{quote(dc)} is a Scaleway zone; a {fleet.vendor.value} box's datacenter is named like "
                f"{_DATACENTER_EXAMPLES[fleet.vendor]} (matched as a prefix), so no box would match",
            )


# macOS families Scaleway publishes images of; an Apple silicon fleet's `os` names one (or an image).
MACOS_FAMILIES = ("tahoe", "sequoia", "sonoma", "ventura")


def _is_macos_label(label: str) -> bool:
    return label.startswith("macos") or label in MACOS_FAMILIES


def _scaleway_fleet_rules(view: View) -> Iterator[Problem]:
    """Private Networks (Elastic Metal) and the macOS node agent (Apple silicon): each only where its
    vendor has it; a Mac's OS is macOS and a Linux box's is not."""
    env = view.environment
    for i, fleet in view.fleets:
        if fleet.private_network is not None and fleet.vendor is not Vendor.SCALEWAY_EM:
            yield Problem(
                ("fleets", i, "private_network"),
                "only scaleway_em fleets bring up a Private Network VLAN on their boxes, "
                f"not {fleet.vendor.value}",
            )
        if fleet.vendor is not Vendor.APPLESILICON:
            if fleet.node_agent is not None:
                yield Problem(
                    ("fleets", i, "node_agent"),
                    "only applesilicon fleets run the macOS node agent; "
                    f"{fleet.vendor.value} boxes self-join as Linux nodes",
                )
            if _is_macos_label(fleet.os):
                yield Problem(
                    ("fleets", i, "os"),
                    f"{quote(fleet.os)} is macOS; {fleet.vendor.value} boxes run Linux (e.g. ubuntu_24.04)",
                )
            continue
        if not _is_macos_label(fleet.os):
            yield Problem(
                ("fleets", i, "os"),
                f"{quote(fleet.os)} is not a macOS image or family; a released Mac is reinstalled with it "
                f"(e.g. macos-tahoe, or an image such as macos-tahoe-26.0)",
            )
        agent = fleet.node_agent
        if agent is None:
            if fleet.enabled:
                yield Problem(
                    ("fleets", i, "node_agent"),
                    "required for an applesilicon fleet: the macOS node agent (url and sha256) each Mac "
                    "runs under launchd",
                )
            continue
        if env not in (None, Environment.DEV):
            if not agent.url.startswith("https://"):
                yield Problem(
                    ("fleets", i, "node_agent", "url"),
                    f"{quote(agent.url)} must be an https:// URL outside dev",
                )
            if not agent.registers_node:
                yield Problem(
                    ("fleets", i, "node_agent", "registers_node"),
                    f"must be true in {env.value}: a Mac that registers no Node runs no runner; only the "
                    "dev stack's simulated Macs run without one",
                )


def _install_artifact_rules(view: View) -> Iterator[Problem]:
    """Pins are read at install time (the machine provider refuses an unpinned Kata then); here only
    where they may be set and where they may come from."""
    env = view.environment
    for i, fleet in view.fleets:
        artifacts = fleet.install_artifacts
        if artifacts is None:
            continue
        if fleet.vendor is not Vendor.ROBOT:
            yield Problem(
                ("fleets", i, "install_artifacts"),
                f"only robot fleets install their boxes; {fleet.vendor.value} boxes come pre-installed",
            )
            continue
        if env in (None, Environment.DEV):
            continue
        for attr in ("runc_url", "containerd_url", "kata_static_url"):
            url = getattr(artifacts, attr)
            if not url.startswith("https://"):
                yield Problem(
                    ("fleets", i, "install_artifacts", attr),
                    f"{quote(url)} must be an https:// URL outside dev",
                )


def _label_value_problem(value: str) -> str:
    return (
        f"{quote(value)} is not a Kubernetes label value (at most 63 letters, digits, '-', '_' or '.', "
        "beginning and ending with a letter or digit)"
    )


def _ovh_datacenter_rules(view: View) -> Iterator[Problem]:
    ovh = view.accounts.get(Vendor.OVH)
    if not isinstance(ovh, OvhAccount) or ovh.endpoint not in OVH_ENDPOINT_KEYS:
        return
    for i, fleet in view.fleets:
        if fleet.vendor is not Vendor.OVH or not fleet.datacenter:
            continue
        us_site = fleet.datacenter.lower().startswith(OVH_US_DATACENTERS)
        if us_site and ovh.endpoint != "ovh-us":
            yield Problem(
                ("fleets", i, "datacenter"),
                f"{quote(fleet.datacenter)} is an OVHcloud US datacenter, reachable only through the ovh-us "
                f"endpoint (vendors.ovh.endpoint is {quote(ovh.endpoint)})",
            )
        elif not us_site and ovh.endpoint == "ovh-us":
            yield Problem(
                ("fleets", i, "datacenter"),
                f"{quote(fleet.datacenter)} is not an OVHcloud US datacenter, but vendors.ovh.endpoint is "
                f"'ovh-us' (OVHcloud US has only {' and '.join(OVH_US_DATACENTERS)})",
            )


def _release_rules(view: View) -> Iterator[Problem]:
    # Release, reinstall and re-claim is the normal cycle in canary and production too (seed 000);
    # production only asks for both switches, so a single edit never reinstalls a production box.
    if view.environment is not Environment.PRODUCTION or view.allow_production_release is not False:
        return
    for i, fleet in view.fleets:
        if not fleet.allow_release:
            continue
        served = [r.id for _, r in view.regions if r.fleet == fleet.name]
        what = (
            f"Kura fleet {quote(fleet.name)} (region {', '.join(served)}; its cache is wiped)"
            if served
            else f"fleet {quote(fleet.name)}"
        )
        yield Problem(
            ("fleets", i, "allow_release"),
            f"releasing a box of production {what} reinstalls it: also set allow_production_release: true "
            "in Pulumi.production.yaml, then `pulumi state unprotect` the machine before removing it",
        )


def _address(fip: FailoverIP) -> str | None:
    return fip.address


def failover_ip_rules(view: View) -> Iterator[Problem]:
    ips = view.failover_ips
    for i, name, j in _duplicates(ips, lambda f: f.name):
        yield Problem(
            ("failover_ips", i, "name"), f"duplicate failover IP name {quote(name)} (also failover_ips[{j}])"
        )
    for i, address, j in _duplicates(ips, _address):
        yield Problem(("failover_ips", i, "address"), f"duplicate address {address} (also failover_ips[{j}])")
    known = [f.name for _, f in view.fleets]
    for i, fip in ips:
        if fip.vendor not in FAILOVER_IP_VENDORS:
            movable = ", ".join(v.value for v in FAILOVER_IP_VENDORS)
            yield Problem(
                ("failover_ips", i, "vendor"),
                f"{quote(fip.vendor.value)} has no failover IP this program routes (only {movable})",
            )
            continue
        if fip.vendor not in view.present_accounts and not view.vendors_unknown:
            yield Problem(
                ("failover_ips", i, "vendor"),
                f"no {fip.vendor.value} account under vendors (add vendors.{fip.vendor.value})",
            )
        fleet = view.fleet(fip.fleet)
        if fleet is None and fip.fleet not in view.fleet_names and not view.fleets_unknown:
            yield Problem(
                ("failover_ips", i, "fleet"), f"unknown fleet {quote(fip.fleet)} (known: {_known(known)})"
            )
        elif fleet is not None and fleet.vendor is not fip.vendor:
            yield Problem(
                ("failover_ips", i, "vendor"),
                f"{quote(fip.vendor.value)} but fleet {quote(fleet.name)} is on {fleet.vendor.value}; "
                "a failover IP routes only to boxes of its own vendor",
            )
        if (
            fip.address is not None
            and view.environment not in (None, Environment.DEV)
            and not ipaddress.IPv4Address(fip.address).is_global
        ):
            yield Problem(("failover_ips", i, "address"), f"{fip.address} is not a public address")
    # A region naming another fleet's IP may have meant the one left unused: its problem is the one.
    misrouted = any(
        (named := view.failover_ip(region.failover_ip)) is not None and named.fleet != region.fleet
        for _, region in view.regions
        if region.failover_ip is not None
    )
    if view.regions_unknown or view.dangling_failover_ip or misrouted:
        return  # which IP a region meant is unknown: that region's problem is the one to report
    for i, fip in ips:
        if fip.vendor in FAILOVER_IP_VENDORS and fip.name not in view.used_failover_ips:
            yield Problem(
                ("failover_ips", i),
                f"{quote(fip.name)} is not used by any region, so the program routes it nowhere; name it in "
                "a host_network region's failover_ip, or remove it",
            )


def region_rules(view: View) -> Iterator[Problem]:
    env = view.environment
    regions = view.regions
    yield from _node_port_clashes(regions)
    for attr, what in (
        ("id", "region id"),
        ("cluster_id", "cluster id"),
        ("host", "host"),
        ("ingress_class", "ingress class"),
    ):
        for i, value, j in _duplicates(regions, operator.attrgetter(attr)):
            yield Problem(("regions", i, attr), f"duplicate {what} {quote(value)} (also regions[{j}])")
    for i, region in regions:
        for j, shorter in regions:
            if region.id.endswith(f"-{shorter.id}"):
                # Peer Services share the Kura namespace: account a of us-east and account a-us of
                # east would both need kura-a-us-east-peer, and the second could never exist.
                yield Problem(
                    ("regions", i, "id"),
                    f"{quote(region.id)} ends with '-{shorter.id}' (regions[{j}]): the peer Service "
                    f"kura-<account>-{region.id}-peer can also name a peer Service of {shorter.id}",
                )
    fleets = [f.name for _, f in view.fleets]
    fips = [f.name for _, f in view.failover_ips]
    region_fleets: dict[str, tuple[int, str]] = {}
    used_fips: dict[str, tuple[int, str]] = {}
    for i, region in regions:
        raw = view.raw_regions[i] if i < len(view.raw_regions) else {}
        if len(REGION_SERVICE_PREFIX) + len(region.id) > DNS_LABEL_MAX:
            yield Problem(
                ("regions", i, "id"),
                f"{len(region.id)} characters: at most {DNS_LABEL_MAX - len(REGION_SERVICE_PREFIX)}, so that "
                f"its gateway Service ({REGION_SERVICE_PREFIX}<id>) stays a DNS label",
            )
        m = _CLUSTER_ID.match(region.cluster_id)
        # A private region is named after what it serves on its cluster (scw-fr-par-runners on scw-fr-par).
        private_name = region.private and region.id.startswith(f"{region.cluster_id}-")
        if (m is None or m.group("region") != region.id) and not private_name:
            yield Problem(
                ("regions", i, "cluster_id"),
                f"{quote(region.cluster_id)} should be the region id and a number, e.g. '{region.id}-1'"
                + (
                    " (a private region may also be named <cluster_id>-<what it serves>)"
                    if region.private
                    else ""
                ),
            )
        yield from _private_region_rules(i, region, raw)
        fleet = view.fleet(region.fleet)
        if fleet is None and region.fleet not in view.fleet_names and not view.fleets_unknown:
            yield Problem(
                ("regions", i, "fleet"), f"unknown fleet {quote(region.fleet)} (known: {_known(fleets)})"
            )
        if fleet is not None and fleet.is_macos:
            # The Macs' node agent runs each pod as a VM: nothing there binds the box's ports or /data.
            yield Problem(
                ("regions", i, "fleet"),
                f"fleet {quote(fleet.name)} is {fleet.vendor.value} (macOS); a Kura region runs on Linux "
                "boxes (its gateway and demux bind the box's ports, its volumes live on the box's /data)",
            )
        # Every region's demux binds the peer port on each box of its fleet, and its local volumes are
        # named per box (components/storage.py): two regions on one fleet collide in any gateway mode.
        if region.fleet in region_fleets:
            j, other = region_fleets[region.fleet]
            yield Problem(
                ("regions", i, "fleet"),
                f"fleet {quote(region.fleet)} already serves regions[{j}] ({other}); a region needs boxes "
                "of its own (its demux binds the peer port on each, its local volumes are named after "
                "them, a host_network gateway binds ports 80 and 443)",
            )
        else:
            region_fleets[region.fleet] = (i, region.id)
        # (A load_balancer region never gets here: Region refuses the mode.)
        if (
            region.gateway is GatewayMode.HOST_NETWORK
            and isinstance(raw, Mapping)
            and "failover_ip" not in raw
        ):
            yield Problem(
                ("regions", i, "failover_ip"),
                "required for a host_network region (name a failover_ips entry, or null to run without one)",
            )
        if region.failover_ip is not None:
            fip = view.failover_ip(region.failover_ip)
            if (
                fip is None
                and region.failover_ip not in view.failover_ip_names
                and not view.failover_ips_unknown
            ):
                yield Problem(
                    ("regions", i, "failover_ip"),
                    f"unknown failover IP {quote(region.failover_ip)} (known: {_known(fips)})",
                )
            elif fip is not None and fip.fleet != region.fleet and region.fleet in view.fleet_names:
                yield Problem(
                    ("regions", i, "failover_ip"),
                    f"{quote(fip.name)} routes to fleet {quote(fip.fleet)}, "
                    f"not the region's fleet {quote(region.fleet)}",
                )
            if region.failover_ip in used_fips:
                j, other = used_fips[region.failover_ip]
                yield Problem(
                    ("regions", i, "failover_ip"),
                    f"{quote(region.failover_ip)} is already used by regions[{j}] ({other})",
                )
            else:
                used_fips[region.failover_ip] = (i, region.id)
        if region.storage_class not in NODE_LOCAL_STORAGE_CLASSES:
            yield Problem(
                ("regions", i, "storage_class"),
                f"'{region.storage_class}' is not a node-local class the release of a box cleans up "
                f"(one of: {', '.join(NODE_LOCAL_STORAGE_CLASSES)}); Kura's claims live on the box's /data",
            )
        if region.egress_floor_mbps > region.egress_burst_mbps:
            yield Problem(
                ("regions", i, "egress_floor_mbps"),
                f"{region.egress_floor_mbps} exceeds egress_burst_mbps {region.egress_burst_mbps}",
            )
        if fleet is not None and region.egress_floor_mbps > fleet.egress_budget_mbps:
            yield Problem(
                ("regions", i, "egress_floor_mbps"),
                f"{region.egress_floor_mbps} exceeds the egress_budget_mbps {fleet.egress_budget_mbps} of "
                f"fleet {quote(fleet.name)}: no box of it could take one account's pod",
            )
        if env is not None:
            want = expected_host(region.id, env)
            if region.host != want:
                rule = (
                    f"<region>.{KURA_ZONE} in production"
                    if env is Environment.PRODUCTION
                    else f"<region>.<env>.{KURA_ZONE} outside production"
                )
                yield Problem(
                    ("regions", i, "host"), f"{quote(region.host)} should be {quote(want)} ({rule})"
                )
        if region.exposed and fleet is not None and (not fleet.enabled or fleet.size == 0):
            why = "is parked (enabled: false)" if not fleet.enabled else "has size 0"
            yield Problem(
                ("regions", i, "exposed"),
                f"fleet {quote(fleet.name)} {why}, so the region has no boxes; "
                "set exposed: false until the fleet has boxes",
            )


def _node_port_clashes(regions: list[tuple[int, Region]]) -> Iterator[Problem]:
    """A NodePort is open on every node of the cluster, and a stack is one cluster: no two node_port
    regions may share a port (the second's Service would be refused, mid-update)."""
    taken: dict[int, tuple[int, str]] = {}
    for i, region in regions:
        ports = region.gateway_node_ports
        if ports is None:
            continue
        for name, port in (("http", ports.http), ("https", ports.https)):
            if port in taken and taken[port][0] != i:  # within one region: _private_region_rules
                j, other = taken[port]
                given = region.node_ports is not None
                yield Problem(
                    ("regions", i, "node_ports", name) if given else ("regions", i, "node_ports"),
                    f"{port} is already regions[{j}]'s {other} node port (a node port is open on every node "
                    "of the cluster)" + ("" if given else "; give this region node_ports of its own"),
                )
            else:
                taken.setdefault(port, (i, name))


def _private_region_rules(i: int, region: Region, raw: Any) -> Iterator[Problem]:
    """node_port regions admit their client networks only; private regions have no public entry."""
    if region.gateway is GatewayMode.NODE_PORT:
        if not region.client_cidrs:
            yield Problem(
                ("regions", i, "client_cidrs"),
                "required for a node_port region: the networks its gateway admits (e.g. the runners' "
                "Private Network, 172.16.0.0/22)",
            )
        if not region.private:
            yield Problem(
                ("regions", i, "private"),
                "a node_port region is reached over its client networks only; set private: true",
            )
        for k, cidr in enumerate(region.client_cidrs):
            # The NetworkPolicy built from these is the gateway's only admission: a public range on a
            # box with a public address opens the private cache to the internet.
            if ipaddress.IPv4Network(cidr).is_global or cidr.endswith("/0"):
                yield Problem(
                    ("regions", i, "client_cidrs", k),
                    f"{quote(cidr)} admits public addresses; a private region admits its clients' private "
                    "networks only (e.g. the runners' Private Network, 172.16.0.0/22)",
                )
    elif region.client_cidrs:
        yield Problem(
            ("regions", i, "client_cidrs"),
            f"only node_port regions admit by client network; a {region.gateway.value} region is public",
        )
    if region.node_ports is not None and region.gateway is not GatewayMode.NODE_PORT:
        yield Problem(
            ("regions", i, "node_ports"),
            f"only node_port regions answer on node ports; a {region.gateway.value} region's gateway binds "
            "ports 80 and 443 of its boxes",
        )
    ports = region.gateway_node_ports
    if ports is not None and ports.http == ports.https:
        yield Problem(
            ("regions", i, "node_ports", "https"), f"{ports.https} is the http port too; use another"
        )
    if region.private and region.failover_ip is not None:
        yield Problem(
            ("regions", i, "failover_ip"),
            "a private region has no public entry point; remove it (or set it to null)",
        )


# What an enabled pool writes out (the RunnerPool's minWarmPoolFloor, maxReplicas,
# scaleDownCooldownSeconds: policy/tuist_policy/mandatory.py AUTOSCALING_FIELDS).
AUTOSCALING_FIELDS = ("min_warm_pool_floor", "max_replicas", "scale_down_cooldown_seconds")


def runner_pool_rules(view: View) -> Iterator[Problem]:
    pools = view.runner_pools
    for i, name, j in _duplicates(pools, lambda p: p.name):
        yield Problem(
            ("runner_pools", i, "name"), f"duplicate runner pool name {quote(name)} (also runner_pools[{j}])"
        )
    for i, (fleet_name, label), j in _duplicates(pools, lambda p: (p.fleet, p.dispatch_label)):
        yield Problem(
            ("runner_pools", i, "dispatch_label"),
            f"{quote(label)} is already used by runner_pools[{j}] on fleet {quote(fleet_name)} "
            "(dispatch labels are unique per fleet)",
        )
    known = [f.name for _, f in view.fleets]
    for i, pool in pools:
        fleet = view.fleet(pool.fleet)
        if fleet is None:
            if pool.fleet not in view.fleet_names and not view.fleets_unknown:
                yield Problem(
                    ("runner_pools", i, "fleet"),
                    f"unknown fleet {quote(pool.fleet)} (known: {_known(known)})",
                )
        else:
            if pool.os is RunnerOS.LINUX and fleet.vendor is not Vendor.ROBOT:
                yield Problem(
                    ("runner_pools", i, "fleet"),
                    f"linux pools run Kata microVMs on Hetzner Robot boxes, but fleet {quote(fleet.name)} "
                    f"is on {fleet.vendor.value}",
                )
            if pool.os is RunnerOS.DARWIN and fleet.vendor is not Vendor.APPLESILICON:
                yield Problem(
                    ("runner_pools", i, "fleet"),
                    f"darwin pools run macOS VMs on Apple silicon Macs, but fleet {quote(fleet.name)} "
                    f"is on {fleet.vendor.value}",
                )
            served = [r.id for _, r in view.regions if r.fleet == fleet.name]
            if served:
                yield Problem(
                    ("runner_pools", i, "fleet"),
                    f"fleet {quote(fleet.name)} serves Kura region {', '.join(served)}; "
                    "runners need a fleet of their own",
                )
        scaling = pool.autoscaling
        if scaling.enabled:
            for attr in AUTOSCALING_FIELDS:
                if getattr(scaling, attr) is None:
                    yield Problem(
                        ("runner_pools", i, "autoscaling", attr),
                        "required while autoscaling is enabled: write it out (0 included); the policy "
                        "pack's runner-pool-autoscaling-explicit refuses a RunnerPool that leaves it to "
                        "the CRD default",
                    )
        floor, ceiling = scaling.min_warm_pool_floor, scaling.max_replicas
        if scaling.enabled and ceiling == 0 and floor:
            # The runners controller reads maxReplicas <= 0 as "autoscaling off" and leaves replicas
            # alone (tuist-anchor.md 6.1), as the CRD's description says: the floor would never apply.
            yield Problem(
                ("runner_pools", i, "autoscaling", "max_replicas"),
                f"0 turns the autoscaler off (the runners controller leaves replicas alone), so the "
                f"min_warm_pool_floor of {floor} never applies; set max_replicas to at least {floor}, "
                "or enabled: false",
            )
        elif floor is not None and ceiling and floor > ceiling:
            yield Problem(
                ("runner_pools", i, "autoscaling", "min_warm_pool_floor"),
                f"{floor} exceeds max_replicas {ceiling}",
            )


# Namespaces Kubernetes itself owns: deleting the Kura namespace's objects there, or its protection,
# would touch the cluster's own.
RESERVED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# The longest names the program derives, which must stay DNS labels (63): the watchers' namespace
# `<namespace>-failover` (components/failover_watcher.py) and the gateway Service
# `kura-gateway-<region id>` (components/gateway.py); a test holds these to the components.
NAMESPACE_SUFFIX = "-failover"
DNS_NAMESPACE_SUFFIX = "-dns"
REGION_SERVICE_PREFIX = "kura-gateway-"
DNS_LABEL_MAX = 63


def _kura_namespace_rules(namespace: str, cluster: Cluster | None) -> Iterator[Problem]:
    where = ("kura", "namespace")
    if namespace in RESERVED_NAMESPACES:
        yield Problem(where, f"{quote(namespace)} belongs to Kubernetes; name a namespace of Kura's own")
    if cluster is not None:
        # The program declares each of these Namespaces; one taken twice fails the up with
        # AlreadyExists, and the runners' pods must never share the vendor or DNS credentials'.
        kura_owned = {
            namespace: "kura.namespace",
            f"{namespace}{DNS_NAMESPACE_SUFFIX}": "the regional DNS namespace (kura.namespace + '-dns')",
            f"{namespace}{NAMESPACE_SUFFIX}": (
                "the failover watchers' namespace (kura.namespace + '-failover')"
            ),
        }
        runners = cluster.runners_namespace
        if runners in kura_owned:
            yield Problem(
                ("cluster", "runners_namespace"),
                f"{quote(runners)} is {kura_owned[runners]}; the runners need a namespace of their own",
            )
    if len(namespace) + len(NAMESPACE_SUFFIX) > DNS_LABEL_MAX:
        yield Problem(
            where,
            f"{len(namespace)} characters: at most {DNS_LABEL_MAX - len(NAMESPACE_SUFFIX)}, so that "
            f"the failover watchers' namespace ({namespace[:20]}...{NAMESPACE_SUFFIX}) stays a DNS label",
        )


def kura_rules(view: View) -> Iterator[Problem]:
    kura = view.kura
    if kura is None:
        return
    env = view.environment
    if env not in (None, Environment.DEV):
        tag = kura.runtime_image_tag
        if tag.strip().lower() in FLOATING_TAGS or not tag.strip() or not RELEASE_TAG.fullmatch(tag):
            yield Problem(
                ("kura", "runtime_image_tag"),
                f"{quote(tag)} is a floating tag; pin a release (e.g. 0.10.5) outside dev",
            )
        problem = image_pin_problem(kura.controller_image)
        if problem:
            yield Problem(("kura", "controller_image"), problem)
    region_ids = [r.id for _, r in view.regions]
    if region_ids and not kura.failover_watcher_image:
        yield Problem(
            ("kura", "failover_watcher_image"),
            f"required: it runs the peer demux route reconciler of {', '.join(region_ids)} (python -m demux) "
            "and the failover watcher that keeps each routed failover IP on a healthy box",
        )
    elif kura.failover_watcher_image and env not in (None, Environment.DEV):
        problem = image_pin_problem(kura.failover_watcher_image)
        if problem:
            yield Problem(("kura", "failover_watcher_image"), problem)
    yield from _kura_namespace_rules(kura.namespace, view.cluster)
    if kura.peer_port != PEER_PORT:
        # Seed 000's public peer endpoint, which self-hosted Kura nodes dial and the policy pack
        # holds the demux to (peer-demux-sni-passthrough-7443).
        yield Problem(
            ("kura", "peer_port"),
            f"{kura.peer_port}: the peer plane answers on {PEER_PORT} (seed 000's public peer endpoint, "
            "which every Kura node dials); leave peer_port out",
        )
    if env not in (None, Environment.DEV):
        floors = (
            (
                "demux_drain_seconds",
                kura.demux_drain_seconds,
                DEMUX_DRAIN_SECONDS,
                "a vendor's failover IP move takes up to a minute, and the IP must leave a stopping "
                "demux's box first",
            ),
            (
                "demux_min_ready_seconds",
                kura.demux_min_ready_seconds,
                DEMUX_MIN_READY_SECONDS,
                "a rolled box must be eligible for the failover IP again before its neighbour drains",
            ),
            (
                "gateway_drain_seconds",
                kura.gateway_drain_seconds,
                GATEWAY_DRAIN_SECONDS,
                "the region's public wildcard must leave a stopping gateway's box, resolvers' caches "
                "included, before it stops accepting",
            ),
            (
                "gateway_min_ready_seconds",
                kura.gateway_min_ready_seconds,
                GATEWAY_MIN_READY_SECONDS,
                "a rolled box's gateway must be in the published wildcard before its neighbour's stops",
            ),
        )
        for key, value, floor, why in floors:
            if value < floor:
                yield Problem(("kura", key), f"{value} is below {floor} s, allowed in dev only: {why}")


def cluster_rules(view: View) -> Iterator[Problem]:
    cluster = view.cluster
    env = view.environment
    if cluster is None or env is None:
        return
    if cluster.api_server is not None:
        url = cluster.api_server
        if (problem := api_server_problem(url)) is not None:
            yield Problem(("cluster", "api_server"), f"{quote(url)} {problem}")
        elif env is Environment.DEV:
            if not _is_loopback(url):
                yield Problem(
                    ("cluster", "api_server"),
                    f"{quote(url)} is not a loopback URL; the dev stack never reaches a real cluster",
                )
        elif _is_loopback(url):
            yield Problem(
                ("cluster", "api_server"),
                f"{quote(url)} is a loopback URL; {env.value} needs its real cluster",
            )
    elif env is not Environment.DEV:
        yield Problem(("cluster", "api_server"), f"required in {env.value} (the cluster the fleets join)")
    if cluster.runners_namespace in RESERVED_NAMESPACES:
        yield Problem(
            ("cluster", "runners_namespace"),
            f"{quote(cluster.runners_namespace)} belongs to Kubernetes; name a namespace of the runners' own",
        )
    if cluster.render_dir is not None:
        if env is not Environment.DEV:
            yield Problem(
                ("cluster", "render_dir"),
                "only the dev stack renders manifests to a directory; remove it",
            )
        elif cluster.api_server is not None:
            yield Problem(
                ("cluster", "render_dir"), "set together with api_server; a dev stack uses one of them"
            )
    elif env is Environment.DEV and cluster.api_server is None:
        yield Problem(
            ("cluster",),
            "set api_server (a cluster to apply to) or render_dir (write the manifests there instead)",
        )
    if env is not Environment.DEV:
        problem = image_pin_problem(cluster.runners_controller_image)
        if problem:
            yield Problem(("cluster", "runners_controller_image"), problem)
        if cluster.external_dns_provider == "inmemory":
            yield Problem(
                ("cluster", "external_dns_provider"),
                f"'inmemory' publishes nothing; {env.value} publishes the {KURA_ZONE} zone with 'cloudflare'",
            )
    if cluster.tuist_server_url is not None:
        url = cluster.tuist_server_url
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            yield Problem(("cluster", "tuist_server_url"), f"{quote(url)} is not an http(s) URL")
        elif env is not Environment.DEV and (parts.scheme != "https" or _is_loopback(url)):
            yield Problem(
                ("cluster", "tuist_server_url"),
                f"{quote(url)} must be the Tuist server's https:// URL in {env.value}",
            )
    elif view.runner_pools:
        yield Problem(
            ("cluster", "tuist_server_url"),
            "required: the runners-controller asks the Tuist server for dispatch and desired replicas "
            "of the runner pools",
        )
    yield from _control_plane_firewall_rules(cluster.control_plane_firewall, env)


def _control_plane_firewall_rules(door: ControlPlaneFirewallConfig, env: Environment) -> Iterator[Problem]:
    loc: Loc = ("cluster", "control_plane_firewall")
    if door.enabled and env is Environment.DEV:
        yield Problem(
            (*loc, "enabled"),
            "the dev stack's control plane is the local one, not on Hetzner Cloud; leave the firewall off",
        )
    elif door.enabled and door.label_selector is None:
        yield Problem(
            (*loc, "label_selector"),
            "required when enabled: the Hetzner labels of the control-plane servers "
            "(e.g. caph-cluster-<cluster>=owned,machine_type=control_plane)",
        )
    for i, source, j in _duplicates(list(enumerate(door.operator_sources)), lambda s: s):
        yield Problem(
            (*loc, "operator_sources", i), f"duplicate source {quote(source)} (also operator_sources[{j}])"
        )


def switch_rules(view: View) -> Iterator[Problem]:
    env = view.environment
    if view.allow_production_release and env not in (None, Environment.PRODUCTION):
        yield Problem(("allow_production_release",), "only applies to production; remove it")


RULES: tuple[Callable[[View], Iterator[Problem]], ...] = (
    vendor_rules,
    fleet_rules,
    failover_ip_rules,
    region_rules,
    runner_pool_rules,
    kura_rules,
    cluster_rules,
    switch_rules,
)


def cross_field_problems(raw: Mapping[str, Any]) -> list[Problem]:
    view = build_view(raw)
    return [problem for rule in RULES for problem in rule(view)]


def install_warnings(cfg: StackConfig) -> list[str]:
    """What a preview should say but not refuse.

    An enabled Robot fleet whose Kata is not pinned: its boxes adopted already are unaffected (the pin
    is read only by an install), but the claim of any box the fleet must still install refuses before
    any vendor write, so the up would stop there after applying the rest; a config error would block
    every other change of the stack instead.

    A region outside dev whose routed failover IP has a single box to go to: when that box fails, the
    watcher has nowhere to move the IP and the region's peer plane is down until it is back. A config
    error would force a second box the operator may not have ordered yet.

    A fleet taint with effect NoExecute: added, or its value changed, it evicts every pod of the pool
    lacking the new toleration at once, while the same up is still rolling the templates that carry
    it (nothing orders the Nodes' taints before the workloads). Legitimate for a fleet that runs
    nothing else, so said, not refused."""
    warnings = [
        f"fleets[name={fleet.name}].install_artifacts.kata_static_sha256 is not pinned: any Robot box "
        f"this fleet must still install is refused (the claim stops the up there, before any vendor "
        f"write); pin the sha256 of {fleet.artifacts.kata_static_url.rsplit('/', 1)[-1]}"
        for fleet in cfg.fleets
        if fleet.vendor is Vendor.ROBOT
        and fleet.enabled
        and fleet.size
        and not fleet.artifacts.kata_static_sha256
    ]
    warnings += [
        f"fleets[name={fleet.name}].taints[key={taint.key}]: NoExecute evicts at once every pod on the "
        "fleet's boxes that lacks its toleration; added or changed in one up with the workloads, it takes "
        "down a region's gateways, demux and Kura pods together (docs/runbook.md \"Changing a fleet's "
        "node_pool or taints\"); prefer NoSchedule"
        for fleet in cfg.fleets
        for taint in fleet.taints
        if taint.effect is TaintEffect.NO_EXECUTE
    ]
    if cfg.environment is Environment.DEV:
        return warnings
    fleets = {fleet.name: fleet for fleet in cfg.fleets}
    for region in cfg.regions:
        fleet = fleets.get(region.fleet)
        if region.failover_ip is None or fleet is None or not fleet.enabled or fleet.size != 1:
            continue
        if cfg.failover_ip(region.failover_ip).address is None:
            continue  # parked: nothing is routed yet
        warnings.append(
            f"regions[id={region.id}]: its failover IP {region.failover_ip} has one box to go to "
            f"(fleets[name={fleet.name}].size: 1): when that box fails, the watcher has nowhere to move "
            "it and the region's peer plane is down until the box is back; grow the fleet to 2"
        )
    return warnings
