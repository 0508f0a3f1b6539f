"""Typed stack config: the one shape every component and provider reads.

A stack file's `tuist-infra:*` keys map onto `StackConfig` (see config/loader.py).
Secret values never appear here: they are read separately as pulumi secrets
(`config.loader.Secrets`), and the models only name which secret keys exist.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from config.text import quote
from providers.constants import MARKER_PATTERN
from providers.vendor import Vendor as Vendor  # re-exported: config.models is where callers find it

# --- domain types -------------------------------------------------------------

_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_DNS_NAME = re.compile(
    r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$"
)
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_DIGEST_IMAGE = re.compile(r"^[a-z0-9.\-/:_]+@sha256:[0-9a-f]{64}$")


def _dns_label(v: str) -> str:
    if not _DNS_LABEL.match(v):
        raise ValueError(f"{quote(v)} is not a DNS label (lowercase letters, digits and '-', at most 63)")
    return v


def _dns_name(v: str) -> str:
    if not _DNS_NAME.match(v):
        raise ValueError(f"{quote(v)} is not a DNS name")
    return v


def _label_key(v: str) -> str:
    prefix, _, _name = v.rpartition("/")
    if not _LABEL_KEY.match(v) or len(prefix) > 253:
        raise ValueError(
            f"{quote(v)} is not a Kubernetes label key ([prefix/]name: a DNS prefix of at most 253, a name "
            "of at most 63 letters, digits, '-', '_' or '.')"
        )
    return v


def _pattern(pattern: str, what: str) -> AfterValidator:
    compiled = re.compile(pattern)

    def check(v: str) -> str:
        if not compiled.match(v):
            raise ValueError(f"{quote(v)} is not {what}")
        return v

    return AfterValidator(check)


def _ipv4(v: str) -> str:
    try:
        ip = ipaddress.IPv4Address(v)
    except ValueError:
        raise ValueError(f"{quote(v)} is not an IPv4 address") from None
    return str(ip)


def _service_ipv4(v: str) -> str:
    # A ClusterIP: every kubelet's clusterDNS and the demux's resolver. A public, loopback or
    # link-local address there breaks every in-cluster lookup.
    ip = ipaddress.IPv4Address(_ipv4(v))
    # Not global: RFC 1918 and the shared range 100.64.0.0/10 (kops' default service network) pass.
    if (
        ip.is_global
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    ):
        raise ValueError(
            f"{quote(v)} is not a private address of the cluster's service network (e.g. 10.96.0.10)"
        )
    return str(ip)


def _digest_image(v: str) -> str:
    if not _DIGEST_IMAGE.match(v):
        raise ValueError(f"{quote(v)} is not pinned by digest (expected <repo>@sha256:<64 hex>)")
    return v


def _ipv4_cidr(v: str) -> str:
    try:
        network = ipaddress.IPv4Network(v, strict=True)
    except ValueError:
        raise ValueError(f"{quote(v)} is not an IPv4 network (e.g. 172.16.0.0/22, no host bits)") from None
    return str(network)


DnsLabel = Annotated[str, AfterValidator(_dns_label)]
IPv4Cidr = Annotated[str, AfterValidator(_ipv4_cidr)]
# A fleet marker: its longest form per vendor is a cross-field rule (providers/vendor.py MARKER_LIMITS).
Marker = Annotated[
    str,
    Field(min_length=3, max_length=63),
    _pattern(MARKER_PATTERN, "a marker (lowercase letters, digits and '-')"),
]
# A login the vendors' installers and Linux accept (useradd's portable set).
LoginName = Annotated[
    str, _pattern(r"^[a-z_][a-z0-9_-]{0,31}$", "a login name (a-z, 0-9, '_', '-'; at most 32)")
]
OsLabel = Annotated[str, _pattern(r"^[a-z0-9][a-z0-9_.-]{0,63}$", "an OS label (e.g. ubuntu_24.04)")]
Datacenter = Annotated[
    str, _pattern(r"^[A-Za-z0-9][A-Za-z0-9-]{0,15}$", "a datacenter (e.g. bhs, DC5, FSN1)")
]
DnsName = Annotated[str, AfterValidator(_dns_name)]
# A vendor's box id as tuist-ops prints it without the vendor: an OVH service name, a Dedibox
# <zone>/<server id>, a Robot server number, an Elastic Metal / Mac <zone>/<uuid>.
BoxId = Annotated[
    str, _pattern(r"^[A-Za-z0-9][A-Za-z0-9./-]{0,127}$", "a box id (e.g. ns1001.ip-203-0-113.net)")
]
LabelKey = Annotated[str, AfterValidator(_label_key)]
IPv4 = Annotated[str, AfterValidator(_ipv4)]
ServiceIPv4 = Annotated[str, AfterValidator(_service_ipv4)]
DigestImage = Annotated[str, AfterValidator(_digest_image)]
# A repository alone, lower case (the OCI distribution spec): the tag is set apart, so a tag or digest
# here would make `<repo>:<tag>:<tag>`, which no runtime can pull.
_REPO_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
ImageRepository = Annotated[
    str,
    _pattern(
        rf"^[a-z0-9.-]+(?::[0-9]+)?(?:/{_REPO_PART})+$",
        "an image repository without tag or digest (e.g. ghcr.io/tuist/kura)",
    ),
]


class Strict(BaseModel):
    """Every config model: unknown keys refused, frozen, and no string with surrounding whitespace
    (' kura-ovh' would be a different fleet, marker or account than the one meant)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_surrounding_whitespace(cls, value: object, info: ValidationInfo) -> object:
        if _holds_a_model(cls.model_fields[info.field_name or ""].annotation):
            return value  # that model checks its own fields, and names them
        items: list[object]
        if isinstance(value, dict):
            items = [*value.keys(), *value.values()]
        elif isinstance(value, list):
            items = list(value)
        else:
            items = [value]
        for item in items:
            if isinstance(item, str) and item != item.strip():
                raise ValueError(f"{quote(item)} has leading or trailing whitespace")
        return value


def _holds_a_model(annotation: object) -> bool:
    """Whether a field's type is, or contains, a config model (list[Fleet], Vendors | None, ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_holds_a_model(arg) for arg in get_args(annotation))


# --- enums --------------------------------------------------------------------


class Environment(StrEnum):
    DEV = "dev"
    STAGING = "staging"
    CANARY = "canary"
    PRODUCTION = "production"


class GatewayMode(StrEnum):
    HOST_NETWORK = "host_network"
    # A private region's data plane (the reference's `data_plane: :node_port`): the gateway answers on
    # a NodePort of every box, to the region's client_cidrs only (its runners, over the Private Network).
    NODE_PORT = "node_port"
    # A cloud VM behind a load balancer (a LoadBalancer Service, PROXY protocol on). Never deployable
    # here: every fleet is bare metal, and the policy pack's mandatory policies refuse what it renders
    # (Region refuses it, naming why); kept so the components still say what it would be.
    LOAD_BALANCER = "load_balancer"


class ReleasedVolumes(StrEnum):
    """What becomes of a local volume's data once its claim is deleted (components/storage.py)."""

    # Left Released, data and all, for an operator (docs/runbook.md): Kubernetes' Retain.
    KEEP = "keep"
    # Emptied on its box and made Available again (watcher/released_volumes.py).
    SCRUB = "scrub"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class RunnerOS(StrEnum):
    LINUX = "linux"
    DARWIN = "darwin"


# --- vendors ------------------------------------------------------------------


class OvhAccount(Strict):
    """OVH API account. Secrets: ovhApplicationSecret, ovhConsumerKey."""

    # A python-ovh endpoint key (ovh-eu, ovh-ca, ovh-us) or an http(s) URL ending
    # in /1.0 (vendorsim).
    endpoint: str
    application_key: str = Field(min_length=1)


# A Scaleway zone as the scaleway SDK checks it (scaleway_core is_zone), lower case as the API answers.
SCW_ZONE = r"^[a-z]{2}-[a-z]{3}-[1-9]$"
_UUID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


def _uuid(v: str) -> str:
    if not re.match(_UUID, v):
        raise ValueError(f"{quote(v)} is not a UUID (8-4-4-4-12 lowercase hex digits)")
    return v


Uuid = Annotated[str, AfterValidator(_uuid)]
ScalewayZone = Annotated[str, _pattern(SCW_ZONE, "a Scaleway zone (e.g. fr-par-2)")]


class DediboxAccount(Strict):
    """Scaleway Dedibox API account (default project). Secret: dediboxSecretKey."""

    api_url: str = "https://api.scaleway.com"
    # The organisation's default project: a Scaleway project id, as the other Scaleway accounts'.
    project_id: Uuid
    zones: list[ScalewayZone] = Field(
        default_factory=lambda: ["fr-par-1", "fr-par-2", "nl-ams-1"], min_length=1
    )


class RobotAccount(Strict):
    """Hetzner Robot web-service user. Secret: robotPassword."""

    api_url: str = "https://robot-ws.your-server.de"
    username: str = Field(min_length=1)
    # The failover watchers of every stack that polls Robot IPs with this account: they share its
    # hourly GET /failover/{ip} budget, so each reads its route that much less often. Default: this
    # stack's own. tests/config holds each stack file's at least the sum over the stack files.
    failover_watchers: StrictInt | None = Field(default=None, ge=1)


class ScalewayAccount(Strict):
    """A Scaleway project reached through the scaleway SDK. Secret: scalewaySecretKey (one API key
    for Elastic Metal and Apple silicon)."""

    api_url: str = "https://api.scaleway.com"
    # Not a secret (the key's public identifier), but the SDK refuses to run without it.
    access_key: str = Field(pattern=r"^SCW[A-Z0-9]{17}$")
    project_id: Uuid


class ElasticMetalAccount(ScalewayAccount):
    zones: list[ScalewayZone] = Field(
        default_factory=lambda: ["fr-par-1", "fr-par-2", "nl-ams-1"], min_length=1
    )


class AppleSiliconAccount(ScalewayAccount):
    zones: list[ScalewayZone] = Field(default_factory=lambda: ["fr-par-1", "fr-par-3"], min_length=1)


class Vendors(Strict):
    ovh: OvhAccount | None = None
    dedibox: DediboxAccount | None = None
    robot: RobotAccount | None = None
    scaleway_em: ElasticMetalAccount | None = None
    applesilicon: AppleSiliconAccount | None = None


# --- fleets -------------------------------------------------------------------


class Taint(Strict):
    key: LabelKey
    value: str = ""
    effect: TaintEffect


# The largest price a box is given: euros and cents, 10 digits before the point, so every sum the
# outputs make of it (components/outputs.py, in cents) stays exact.
MAX_PRICE_EUR = Decimal("9999999999.99")
_CENT = Decimal("0.01")


def _price(v: Decimal) -> Decimal:
    if v > MAX_PRICE_EUR:
        raise ValueError(f"{quote(v)} is more than any box costs (at most {MAX_PRICE_EUR} EUR)")
    if v != v.quantize(_CENT):
        raise ValueError(f"{quote(v)} is finer than a cent; write euros with at most 2 decimals")
    return v


# A price in EUR: 0 or more, whole cents, at most MAX_PRICE_EUR. Numbers only (a bool is refused).
PriceEur = Annotated[Decimal, Field(ge=0, allow_inf_nan=False), AfterValidator(_price)]


class Pricing(Strict):
    """Per-box prices in EUR, from the vendor's offer (seed 003 gives the AX numbers)."""

    monthly_eur: PriceEur
    setup_eur: PriceEur = Decimal(0)


class Hardware(Strict):
    """What one box of the fleet's offer has; sizes runner slots (1 vCPU / 4 GiB)."""

    offer: str = Field(min_length=1)  # e.g. AX42-U, AX162-R, Start-1-M-SSD, Advance-1
    threads: StrictInt = Field(gt=0)
    memory_gib: StrictInt = Field(gt=0)


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _sha256(v: str) -> str:
    if not _SHA256.match(v):
        raise ValueError(f"{quote(v)} is not a sha256 (64 lowercase hex digits)")
    return v


def _artifact_url(v: str) -> str:
    if not re.match(r"^https?://[^\s/]+/\S+$", v):
        raise ValueError(f"{quote(v)} is not an http(s) URL of a file")
    return v


Sha256 = Annotated[str, AfterValidator(_sha256)]
ArtifactUrl = Annotated[str, AfterValidator(_artifact_url)]


class InstallArtifacts(Strict):
    """What a Robot box's post-install script downloads, each checked against its sha256 before use.

    The Kata sum has no default: nobody has read it off the release page yet, and the machine
    provider refuses to install a Robot box until it is pinned (the script fails closed too).
    """

    runc_url: ArtifactUrl = "https://github.com/opencontainers/runc/releases/download/v1.2.5/runc.amd64"
    runc_sha256: Sha256 = "fbd851fce6a8e0d67a9d184ea544c2abf67c9fd29b80fcc1adf67dfe9eb036a1"
    # Ubuntu's containerd 1.7 cannot parse the `version = 3` config syntax: containerd 2.x from upstream.
    containerd_url: ArtifactUrl = "https://github.com/containerd/containerd/releases/download/v2.2.3/containerd-2.2.3-linux-amd64.tar.gz"
    containerd_sha256: Sha256 = "ca26ef5138f17b847bbeeec36d4bf5e002b54d25858197a870c125d57f44d32f"
    kata_static_url: ArtifactUrl = (
        "https://github.com/kata-containers/kata-containers/releases/download/3.30.0/"
        "kata-static-3.30.0-amd64.tar.zst"
    )
    kata_static_sha256: Sha256 | None = None


class PrivateNetwork(Strict):
    """A VPC Private Network the operator created in the fleet's region. Each Elastic Metal box of
    the fleet is attached to it (its Private Network option enabled first) and brings it up as the
    tagged VLAN `pn0` (providers/ssh/scripts/pn-vlan.sh), addressed by the network's DHCP."""

    id: Uuid


class NodeAgent(Strict):
    """The Mac's node agent (the reference's tart-kubelet: a kubelet for macOS that runs each pod as
    a Tart VM). The bootstrap downloads it, checks its sha256, and runs it under launchd.

    `registers_node`: the agent registers the Mac as a Node with a bootstrap token, and adoption
    waits for that Node to be Ready. Only the dev stack turns it off: vendorsim's Macs keep launchd
    jobs without running them (vendorsim/sandbox/macos/README.md), so no Node would ever come."""

    url: ArtifactUrl
    sha256: Sha256
    registers_node: StrictBool = True


# What a fleet on these vendors defaults to where Linux defaults would be wrong.
_MAC_DEFAULTS = {"os": "macos-tahoe", "ssh_user": "m1"}


class Fleet(Strict):
    name: DnsLabel
    vendor: Vendor
    # Per-box adoption marker at the vendor: OVH displayName prefix, Dedibox tag,
    # Robot server_name prefix. It is the environment boundary.
    marker: Marker
    size: StrictInt = Field(ge=0)
    # Parked fleets exist in config and outputs but adopt nothing.
    enabled: StrictBool = True
    node_pool: DnsLabel
    labels: dict[LabelKey, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    hardware: Hardware
    pricing: Pricing | None = None
    datacenter: Datacenter | None = None  # OVH prefix match (bhs matches bhs6), Dedibox DC name
    os: OsLabel = "ubuntu_24.04"
    ssh_user: LoginName = "ubuntu"
    # Apple silicon fleets default to macos-tahoe (a family: its newest image) and Scaleway's m1.
    # Where every box of the fleet answers SSH on its public IPv4 (vendorsim's boxes: 2222).
    ssh_port: StrictInt = Field(default=22, ge=1, le=65535)
    # Releasing a box reinstalls it. Production Kura fleets may never allow it.
    allow_release: StrictBool = False
    # Box ids this fleet lets go (docs/runbook.md: rotate a box out): a slot holding one is released
    # (reinstalled) and claims another box in the same up; no claim takes one.
    excluded_boxes: list[BoxId] = Field(default_factory=list)
    # The egress each box's Node advertises as `tuist.dev/egress-mbps` (Mbit/s); every Kura pod requests
    # its region's floor of it, so no box takes more accounts than its NIC holds. 1000: the public
    # bandwidth OVH, Dedibox and Hetzner guarantee their boxes by default; raise it for a faster link.
    egress_budget_mbps: StrictInt = Field(default=1000, gt=0)
    # Robot fleets only (their boxes are installed by the program); None: the defaults.
    install_artifacts: InstallArtifacts | None = None
    # Elastic Metal fleets only: the Private Network every box joins as VLAN pn0.
    private_network: PrivateNetwork | None = None
    # Apple silicon fleets only (required there): the node agent each Mac runs under launchd.
    node_agent: NodeAgent | None = None

    @model_validator(mode="before")
    @classmethod
    def _vendor_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("vendor") == Vendor.APPLESILICON.value:
            return {**_MAC_DEFAULTS, **data}
        return data

    @property
    def artifacts(self) -> InstallArtifacts:
        return self.install_artifacts or InstallArtifacts()

    @property
    def is_macos(self) -> bool:
        return self.vendor is Vendor.APPLESILICON

    @property
    def machine_slots(self) -> int:
        """How many machines the fleet holds now: its size, none while parked."""
        return self.size if self.enabled else 0


# --- failover IPs -------------------------------------------------------------


class FailoverIP(Strict):
    name: DnsLabel
    vendor: Vendor
    fleet: str
    # None while parked: the IP has not been ordered yet.
    address: IPv4 | None = None

    @property
    def parked(self) -> bool:
        return self.address is None


# --- Kura regions -------------------------------------------------------------


# The Kubernetes API server's default service-node-port-range (its --service-node-port-range).
NODE_PORT_MIN, NODE_PORT_MAX = 30000, 32767


def _node_port(v: int) -> int:
    if not NODE_PORT_MIN <= v <= NODE_PORT_MAX:
        raise ValueError(
            f"{v} is outside the API server's node port range, {NODE_PORT_MIN}-{NODE_PORT_MAX}: "
            "it would refuse the Service"
        )
    return v


NodePort = Annotated[StrictInt, AfterValidator(_node_port)]


class NodePorts(Strict):
    """A node_port region's gateway ports on every node of the cluster, pinned: the runners are
    configured with them (the stack outputs say them), so they never follow a port the API server
    picked, which would change whenever the Service is made again."""

    http: NodePort = 30080
    https: NodePort = 30443


class Region(Strict):
    id: DnsLabel  # us-east, eu-central, ...
    cluster_id: DnsLabel  # us-east-1, ...
    fleet: str
    gateway: GatewayMode = GatewayMode.HOST_NETWORK
    ingress_class: DnsLabel
    replicas: StrictInt = Field(default=2, ge=1)
    storage_class: DnsLabel = "scw-local-nvme"
    storage_size_gi: StrictInt = Field(default=50, gt=0)
    egress_floor_mbps: StrictInt = Field(default=25, gt=0)
    egress_burst_mbps: StrictInt = Field(gt=0)
    # Local volumes (each storage_size_gi, on /data) pre-created per box for Kura's claims:
    # an account's instance takes one per replica (components/storage.py).
    volumes_per_box: StrictInt = Field(default=4, ge=1)
    # A volume whose claim is deleted: `keep` leaves it Released with its data (the box has a volume
    # fewer until an operator acts), `scrub` empties it and hands it back (the region's Kura data is
    # a cache: a deleted claim's is not needed again).
    released_volumes: ReleasedVolumes = ReleasedVolumes.KEEP
    # Public host of the region, e.g. eu-central.staging.kura.tuist.dev; the peer
    # plane is peer.<host> and *.peer.<host>.
    host: DnsName
    failover_ip: str | None = None  # name of a failover_ips entry
    exposed: StrictBool = True
    # A private region (the reference's scw-fr-par-runners) serves the runners of this stack only:
    # Kura never offers it to accounts, and no public DNS record points at it.
    private: StrictBool = False
    # node_port regions: the networks the gateway admits (the runners' Private Network range).
    client_cidrs: list[IPv4Cidr] = Field(default_factory=list)
    # node_port regions: the gateway's ports (default 30080 and 30443; see gateway_node_ports).
    node_ports: NodePorts | None = None
    # Which runners the region's cache serves (the reference's runner_platforms); informational for
    # kura-controller, empty for public regions.
    runner_platforms: list[RunnerOS] = Field(default_factory=list)

    @property
    def gateway_node_ports(self) -> NodePorts | None:
        """The ports a node_port region's gateway answers on (its node_ports, or the defaults); None
        for a host_network region."""
        if self.gateway is not GatewayMode.NODE_PORT:
            return None
        return self.node_ports or NodePorts()

    @field_validator("gateway")
    @classmethod
    def _deployable_gateway(cls, mode: GatewayMode) -> GatewayMode:
        if mode is GatewayMode.LOAD_BALANCER:
            raise ValueError(
                "'load_balancer' cannot deploy: a region's boxes are bare metal, which no cloud load "
                "balancer fronts, and the policy pack's mandatory policies refuse its LoadBalancer Service, "
                "PROXY protocol and off-host gateway; use host_network (or node_port for a private region)"
            )
        return mode


# The peer demux's roll timings outside dev (docs/peer-demux.md, "A roll keeps the peer plane").
# Seed 000's public peer endpoint: every Kura node dials it, and the demux listens there.
PEER_PORT = 7443
DEMUX_DRAIN_SECONDS = 60
DEMUX_MIN_READY_SECONDS = 30
# The gateway's outside dev (components/gateway.py): the public wildcard's reconciler pass (30 s),
# external-dns publishing it (30 s) and the record's TTL (60 s); a test holds them to regional_dns.
GATEWAY_DRAIN_SECONDS = 120
GATEWAY_MIN_READY_SECONDS = 120


class Kura(Strict):
    # Removed keys, with what replaced them (config/problems.py prints this instead of "unknown").
    REMOVED_FIELDS: ClassVar[dict[str, str]] = {
        "accounts": "removed: the peer demux now routes every account peer Service it finds in the "
        "Kura namespace (docs/peer-demux.md); delete this key",
    }

    namespace: DnsLabel = "kura"
    # Explicit runtime image tag; floating tags (latest, main) only in dev.
    runtime_image: ImageRepository = "ghcr.io/tuist/kura"
    runtime_image_tag: str = Field(min_length=1)
    controller_image: str = Field(min_length=1)
    peer_port: StrictInt = PEER_PORT
    bootstrap_tmp_dir_max_bytes: StrictInt = Field(default=8 * 1024**3, gt=0)
    bootstrap_max_concurrent_peers: StrictInt = Field(default=4, gt=0)
    bootstrap_artifact_concurrency: StrictInt = Field(default=16, gt=0)
    # The runtime failover watcher (watcher/); required once a region's failover IP is ordered.
    # The same image runs the peer demux's route reconciler (`python -m demux`) and the public DNS
    # reconciler (`python -m regional_dns`).
    failover_watcher_image: str | None = None
    # The regional gateway: ingress-nginx with the CVE-2025-1974 (IngressNightmare) fix.
    gateway_image: DigestImage = (
        "registry.k8s.io/ingress-nginx/controller:v1.13.3"
        "@sha256:1b044f6dcac3afbb59e05d98463f1dec6f3d3fb99940bc12ca5d80270358e3bd"
    )
    # The SNI demux: stock nginx with the stream and ssl_preread modules (anchor 4.2).
    demux_image: DigestImage = (
        "nginx:1.27.3-alpine@sha256:814a8e88df978ade80e584cc5b333144b9372a8e3c98872d07137dbf3b44d0e4"
    )
    # How long a stopping demux pod keeps serving (its preStop sleep): the failover IP must leave
    # the box within it, and a vendor's move takes up to a minute. Below the default only in dev,
    # whose simulated moves take a second (config/rules.py).
    demux_drain_seconds: StrictInt = Field(default=DEMUX_DRAIN_SECONDS, gt=0)
    # How long a new demux pod stays Ready before the next box's pod goes (minReadySeconds):
    # several watcher polls, so its box is eligible again before its neighbour drains.
    demux_min_ready_seconds: StrictInt = Field(default=DEMUX_MIN_READY_SECONDS, gt=0)
    # How long a stopping gateway keeps serving (its preStop sleep) and a new one stays Ready before
    # the next box's goes (minReadySeconds): the public wildcard must have moved, resolvers' caches
    # included. Below the defaults only in dev, whose DNS is in memory.
    gateway_drain_seconds: StrictInt = Field(default=GATEWAY_DRAIN_SECONDS, gt=0)
    gateway_min_ready_seconds: StrictInt = Field(default=GATEWAY_MIN_READY_SECONDS, gt=0)


# --- runners ------------------------------------------------------------------


class Autoscaling(Strict):
    # An explicit 0 must survive to the object. None leaves the field to the CRD default, which only a
    # pool with enabled: false may do: config/rules.py requires all three while autoscaling is on, as
    # the policy pack's runner-pool-autoscaling-explicit does.
    enabled: StrictBool = True
    min_warm_pool_floor: StrictInt | None = Field(default=None, ge=0)
    max_replicas: StrictInt | None = Field(default=None, ge=0)
    scale_down_cooldown_seconds: StrictInt | None = Field(default=None, ge=0)


# A macOS runner pod is a Tart VM of the reference's standard size: the RunnerPool CRD's own defaults
# (tuist-anchor.md section 6.1), which a darwin pool takes where config leaves them out.
DARWIN_POD_DEFAULTS = {"pod_cpu_milli": 8000, "pod_memory_mb": 14336}


class RunnerPool(Strict):
    name: DnsLabel
    os: RunnerOS
    fleet: str  # the fleet its pods run on (Robot fleet for Linux)
    dispatch_label: str = Field(min_length=1)
    image: DigestImage
    # What each runner pod requests. The defaults fill one slot of seed 003 (1 vCPU / 4 GiB)
    # with the kata-qemu pod overhead on top: 15 pods on an AX42-U, 62 on an AX162-R, past the
    # kernel and the kubelet's reservations
    # (components/capacity.py).
    # A darwin pool defaults to DARWIN_POD_DEFAULTS instead (one macOS VM, at most two per Mac).
    pod_cpu_milli: StrictInt = Field(default=900, gt=0)
    pod_memory_mb: StrictInt = Field(default=3744, gt=0)
    autoscaling: Autoscaling = Field(default_factory=Autoscaling)

    @model_validator(mode="before")
    @classmethod
    def _os_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("os") == RunnerOS.DARWIN.value:
            return {**DARWIN_POD_DEFAULTS, **data}
        return data


# --- cluster ------------------------------------------------------------------

_SELECTOR_KEY = r"(?:[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_SELECTOR_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"
# Hetzner Cloud's label selector requirements: key=value (or ==), key!=value, key, !key,
# key in (a,b), key notin (a,b); a selector is requirements joined by ','.
_SELECTOR_POSITIVE = re.compile(
    rf"^(?:{_SELECTOR_KEY}\s*==?\s*{_SELECTOR_VALUE}|{_SELECTOR_KEY}"
    rf"|{_SELECTOR_KEY}\s+in\s+\(\s*{_SELECTOR_VALUE}(?:\s*,\s*{_SELECTOR_VALUE})*\s*\))$"
)
_SELECTOR_NEGATIVE = re.compile(
    rf"^(?:{_SELECTOR_KEY}\s*!=\s*{_SELECTOR_VALUE}|!\s*{_SELECTOR_KEY}"
    rf"|{_SELECTOR_KEY}\s+notin\s+\(\s*{_SELECTOR_VALUE}(?:\s*,\s*{_SELECTOR_VALUE})*\s*\))$"
)


def _label_selector(v: str) -> str:
    if not v:
        raise ValueError("must not be empty: it names the control-plane servers the firewall applies to")
    requirements = [r.strip() for r in re.split(r",(?![^()]*\))", v)]
    if not all(_SELECTOR_POSITIVE.match(r) or _SELECTOR_NEGATIVE.match(r) for r in requirements):
        raise ValueError(
            f"{quote(v)} is not a Hetzner label selector (key=value, key!=value, key, !key, "
            "key in (a,b), key notin (a,b), joined by ',')"
        )
    if not any(_SELECTOR_POSITIVE.match(r) for r in requirements):
        raise ValueError(
            f"{quote(v)} only excludes servers, so it selects every other server of the project; "
            "name the control plane with key=value, key or key in (...)"
        )
    return v


def _operator_source(v: str) -> str:
    """One operator machine: an IPv4 /32, or an IPv6 /64 (a host's SLAAC and privacy addresses
    rotate inside its /64, so /64 is the narrowest prefix that keeps naming one machine)."""
    try:
        network = ipaddress.ip_network(v, strict=False)
    except ValueError:
        raise ValueError(f"{quote(v)} is not an IPv4 or IPv6 CIDR (e.g. 203.0.113.7/32)") from None
    if "/" not in v:
        raise ValueError(f"{quote(v)} has no prefix length; write '{network}'")
    widest = 32 if network.version == 4 else 64
    if network.prefixlen < widest:
        raise ValueError(
            f"{quote(v)} is wider than /{widest}; an operator source is one machine (IPv4 /32, IPv6 /64), "
            "so list each address"
        )
    if ipaddress.ip_address(v.split("/")[0]) != network.network_address:
        raise ValueError(f"{quote(v)} has host bits set; write '{network}'")
    if str(network) != v:  # Hetzner answers the canonical form: anything else is a diff on every preview
        raise ValueError(f"{quote(v)} is not written canonically; write '{network}'")
    if not network.is_global:
        raise ValueError(
            f"{quote(v)} is not a public address; a Hetzner Cloud firewall filters the servers' public "
            "interfaces, where it never arrives"
        )
    return v


LabelSelector = Annotated[str, AfterValidator(_label_selector)]
OperatorSource = Annotated[str, AfterValidator(_operator_source)]


class ControlPlaneFirewallConfig(Strict):
    """The control plane's Hetzner Cloud firewall (components/control_plane_firewall.py): on in stacks
    whose control plane runs on Hetzner Cloud. Secret: hcloudToken."""

    enabled: StrictBool = False
    # The control-plane servers' Hetzner labels
    # (caph labels its servers caph-cluster-<cluster>=owned,machine_type=control_plane).
    label_selector: LabelSelector | None = None
    # Who else reaches 6443 on the servers' public addresses: operators, a fixed-egress CI runner, the
    # management cluster. Each adopted box is admitted by the program, never listed here.
    operator_sources: list[OperatorSource] = Field(default_factory=list)


class Cluster(Strict):
    # Kubernetes minor for the apt keyring; must track the control plane.
    kubernetes_minor: Literal["v1.33", "v1.34", "v1.35"] = "v1.34"
    api_server: str | None = None  # https://host:6443; None: no cluster yet (dev)
    # Where the dev stack renders manifests instead of applying them.
    render_dir: str | None = None
    runners_namespace: DnsLabel = "tuist-runners"
    runners_controller_image: str = Field(min_length=1)
    # The Tuist server the runners-controller asks for dispatch and desired replicas (seed 003); it
    # authenticates with its ServiceAccount token (TokenReview). Required once a runner pool exists.
    tuist_server_url: str | None = None
    # What every kubelet gets as clusterDNS and clusterDomain (the self-join writes them); the
    # defaults match kubeadm's and scripts/cluster.sh's service CIDR 10.96.0.0/16.
    dns_service_ip: ServiceIPv4 = "10.96.0.10"
    domain: DnsName = "cluster.local"
    # external-dns publishes the regions' DNSEndpoints: cloudflare (the kura.tuist.dev zone;
    # secret cloudflareApiToken) or, in dev only, its in-memory provider.
    external_dns_provider: Literal["cloudflare", "inmemory"] = "cloudflare"
    external_dns_image: DigestImage = (
        "registry.k8s.io/external-dns/external-dns:v0.20.0"
        "@sha256:ddc7f4212ed09a21024deb1f470a05240837712e74e4b9f6d1f2632ff10672e7"
    )
    control_plane_firewall: ControlPlaneFirewallConfig = Field(default_factory=ControlPlaneFirewallConfig)
    # Which cluster the stack's Kubernetes objects live in, as the Kubernetes provider's
    # clusterIdentifier (default: the environment's name). Without it the provider guesses from the
    # kubeconfig, and a new CA bundle or API address reads as a new cluster: every object of the
    # stack replaced, the Kura namespace and its volume claims deleted. Change it only to move the
    # stack to another cluster (docs/runbook.md "Rotate the cluster's CA or move its API address").
    identifier: DnsLabel | None = None


def robot_failover_regions(regions: Sequence[Region], failover_ips: Sequence[FailoverIP]) -> list[str]:
    """The regions whose failover IP is an ordered Robot IP: each runs a watcher polling Robot."""
    by_name = {fip.name: fip for fip in failover_ips}
    return [
        region.id
        for region in regions
        if region.failover_ip in by_name
        and by_name[region.failover_ip].vendor is Vendor.ROBOT
        and not by_name[region.failover_ip].parked
    ]


# --- the stack ----------------------------------------------------------------


class StackConfig(Strict):
    environment: Environment
    vendors: Vendors
    fleets: list[Fleet] = Field(default_factory=list)
    failover_ips: list[FailoverIP] = Field(default_factory=list)
    regions: list[Region] = Field(default_factory=list)
    runner_pools: list[RunnerPool] = Field(default_factory=list)
    kura: Kura
    cluster: Cluster
    # Production release of Kura boxes needs this switch as well as allow_release.
    allow_production_release: StrictBool = False

    @property
    def cluster_identifier(self) -> str:
        """The Kubernetes provider's clusterIdentifier (Cluster.identifier)."""
        return self.cluster.identifier or self.environment.value

    def fleet(self, name: str) -> Fleet:
        return next(f for f in self.fleets if f.name == name)

    def failover_ip(self, name: str) -> FailoverIP:
        return next(f for f in self.failover_ips if f.name == name)
