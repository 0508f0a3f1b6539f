"""AdoptedMachine: one bare-metal box of a fleet, claimed at its vendor and joined to the cluster.

create = claim + join. The fleet's boxes are the vendor's boxes carrying its marker (OVH displayName
prefix, Dedibox tag, Robot server_name prefix); boxes claimed by anyone else are skipped; the lexically
lowest free one is claimed on the vendor side with a token derived from project/stack/resource name,
and the claim is read back before anything slow happens. A retried create finds its own claim and
carries on there. OVH and Dedibox boxes are pre-installed by the operator and self-join over SSH;
Robot boxes are installed on adoption (providers/robot_install.py) because Kata is baked into the OS.

delete = release. Drain and delete the Node (when there is a cluster), mark the claim `releasing`,
reinstall the box with the fleet key, then clear the claim and keep the fleet marker. No box is ever
cancelled: no code path here calls a cancel or terminate route.

The provider object holds no state of its own: it is pickled into every resource's `__provider`,
so credentials reach it only through `configure()` (the stack config, decrypted, in the provider
process) and vendor / Kubernetes clients are built per call.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi.dynamic as dyn
from pulumi.dynamic.dynamic import PROVIDER_KEY

from config.models import Environment, Fleet, InstallArtifacts, Vendor, Vendors
from providers import kube
from providers.claims import claim_token
from providers.clients import VendorConfigError, vendor_client, vendors_from_config
from providers.errors import NotFoundError, TaskAlreadyExistsError, VendorError
from providers.ssh.robot_install import ArtifactPins
from providers.ssh.runner import HostKeyMismatchError, RunResult, SshTarget, load_private_key, run_script
from providers.ssh.runner import scrub as scrub_text
from providers.ssh.selfjoin import (
    NodeTaint,
    SelfJoinParams,
    render_self_join_script,
    self_join_secrets,
)
from providers.vendor import Box, Claim, InstallState, VendorClient

log = logging.getLogger(__name__)

PROJECT = "tuist-infra"
# Stack config keys configure() reads (see docs/machines.md).
CONFIG_VENDORS = "vendors"
CONFIG_FLEETS = "fleets"  # read for the Robot fleets' install_artifacts pins
SECRET_CONFIG_KEYS = (
    "ovhApplicationSecret",
    "ovhConsumerKey",
    "dediboxSecretKey",
    "robotPassword",
    "fleetSshPrivateKey",
    "fleetSudoPassword",
    "kubeconfig",
)

POOL_LABEL = "node.cluster.x-k8s.io/pool"
FLEET_LABEL = "tuist.dev/fleet"
ROBOT_LABELS = {"tuist.dev/kata-runtime": "true", "katacontainers.io/kata-runtime": "true"}
ROBOT_TAINT = {"key": "tuist.dev/runner-tier", "value": "bare-metal", "effect": "NoSchedule"}
ROBOT_LOGIN = "root"  # installimage images and the rescue system log in as root with the fleet key

# The dev stack has no cluster: the join still runs in full, against this placeholder endpoint.
DEV_API_SERVER = "https://cluster.dev.invalid:6443"

# Seconds each state may take (inputs.timeouts overrides any of them).
DEFAULT_TIMEOUTS: dict[str, float] = {
    "claiming": 300,
    "joining": 300,  # the anchor's 5 min cap on the self-join
    "ssh_handshake": 30,
    "ssh_retry_delay": 30,
    "rescue_boot": 300,
    "reset": 300,
    "wait_rescue_ssh": 900,
    "installimage": 2700,
    "reboot": 300,
    "wait_new_host_key": 1800,
    "drain": 600,
    "release_install": 5400,
    "poll_interval": 5,
}

REPLACE_KEYS = ("vendor", "fleet", "marker")
# Labels and taints change the node in place; the release switches only change what delete may do,
# but delete reads them from state, so they must reach it through an update.
# The SSH port only changes where the next SSH session dials: an update that records it, no rejoin.
UPDATE_KEYS = ("labels", "taints", "node_pool", "allow_release", "allow_production_release", "ssh_port")
JOIN_KEYS = ("labels", "taints", "node_pool")

DEFAULT_SSH_PORT = 22  # machines created before ssh_port was an input were dialled here

_ENVIRONMENTS = tuple(e.value for e in Environment)
_SLUG = re.compile(r"[^a-z0-9-]+")


# --- errors -------------------------------------------------------------------------------------------


class MachineError(Exception):
    """Base of the errors this provider raises; messages never carry a secret."""


class MachineInputError(MachineError):
    """An input is missing or malformed; the message names it."""


class NotConfiguredError(MachineError):
    """A credential or the vendor account this machine needs is not in the stack config."""


class NoAdoptableBoxError(MachineError):
    """No box of the fleet can be claimed."""


class ReleaseRefusedError(MachineError):
    """A production machine was asked to release its box without the switches that allow it."""


class MachineStepError(MachineError):
    """A state of the machine's state machine failed: names the state, the box and the time spent."""

    def __init__(self, machine: str, state: str, box: str, elapsed: float, cause: str) -> None:
        self.machine, self.state, self.box, self.elapsed, self.cause = machine, state, box, elapsed, cause
        Exception.__init__(self, f"{machine}: {state} failed on {box} after {elapsed:.1f}s: {cause}")


class MachineHostKeyMismatchError(MachineStepError, HostKeyMismatchError):
    """The box answered with a host key other than its pin, and nothing here reinstalled it."""

    def __init__(self, machine: str, state: str, box: str, elapsed: float, cause: str) -> None:
        MachineStepError.__init__(self, machine, state, box, elapsed, cause)


# --- inputs -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MachineSpec:
    """The inputs of one AdoptedMachine, checked."""

    project: str
    stack: str
    resource_name: str
    environment: str
    fleet: str
    vendor: Vendor
    marker: str
    node_pool: str
    labels: Mapping[str, str]
    taints: Sequence[Mapping[str, str]]
    datacenter_prefix: str | None
    ssh_user: str
    ssh_port: int
    os: str
    kubernetes_minor: str
    api_server: str | None
    allow_release: bool
    allow_production_release: bool
    timeouts: Mapping[str, float]

    @property
    def token(self) -> str:
        return claim_token(self.project, self.stack, self.resource_name)

    @property
    def production(self) -> bool:
        return self.environment == Environment.PRODUCTION.value

    def timeout(self, name: str) -> float:
        return float(self.timeouts.get(name, DEFAULT_TIMEOUTS[name]))

    def node_labels(self) -> dict[str, str]:
        labels = dict(self.labels)
        if self.vendor is Vendor.ROBOT:
            labels.update(ROBOT_LABELS)
        labels[POOL_LABEL] = self.node_pool
        labels[FLEET_LABEL] = self.fleet
        return labels

    def node_taints(self) -> list[dict[str, str]]:
        taints = [dict(t) for t in self.taints]
        if self.vendor is Vendor.ROBOT and not any(
            (t["key"], t["effect"]) == (ROBOT_TAINT["key"], ROBOT_TAINT["effect"]) for t in taints
        ):
            taints.append(dict(ROBOT_TAINT))
        return taints


def input_problems(props: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(property, reason) for every problem with the inputs; empty when they are fine."""
    problems: list[tuple[str, str]] = []

    def need_str(key: str, optional: bool = False) -> None:
        value = props.get(key)
        if value is None and optional:
            return
        if not isinstance(value, str) or not value:
            problems.append((key, f"must be a non-empty string, got {value!r}"))

    for key in ("project", "stack", "resource_name", "fleet", "marker", "node_pool", "ssh_user", "os"):
        need_str(key)
    need_str("kubernetes_minor")
    need_str("datacenter_prefix", optional=True)
    if props.get("environment") not in _ENVIRONMENTS:
        problems.append(("environment", f"must be one of {', '.join(_ENVIRONMENTS)}"))
    if props.get("vendor") not in {v.value for v in Vendor}:
        problems.append(("vendor", f"must be one of {', '.join(v.value for v in Vendor)}"))
    marker = props.get("marker")
    environment = props.get("environment")
    if isinstance(marker, str) and isinstance(environment, str) and environment not in marker:
        problems.append(("marker", f"{marker!r} does not contain the environment name {environment!r}"))
    api_server = props.get("api_server")
    if api_server is not None and (not isinstance(api_server, str) or not api_server.startswith("https://")):
        problems.append(("api_server", f"must be https://<host>:<port> or null, got {api_server!r}"))
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
            elif taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                problems.append((f"taints[{i}].effect", "must be NoSchedule, PreferNoSchedule or NoExecute"))
    ssh_port = _port(props.get("ssh_port", DEFAULT_SSH_PORT))
    if not isinstance(ssh_port, int) or isinstance(ssh_port, bool) or not 1 <= ssh_port <= 65535:
        problems.append(("ssh_port", f"must be a TCP port (1-65535), got {ssh_port!r}"))
    for key in ("allow_release", "allow_production_release"):
        if not isinstance(props.get(key, False), bool):
            problems.append((key, "must be a boolean"))
    timeouts = props.get("timeouts", {})
    if not isinstance(timeouts, Mapping):
        problems.append(("timeouts", "must be a mapping of state name to seconds"))
    else:
        for name, seconds in timeouts.items():
            if name not in DEFAULT_TIMEOUTS:
                problems.append(
                    (f"timeouts.{name}", f"unknown; known: {', '.join(sorted(DEFAULT_TIMEOUTS))}")
                )
            elif not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds <= 0:
                problems.append((f"timeouts.{name}", "must be a number of seconds > 0"))
    return problems


def parse_spec(props: Mapping[str, Any]) -> MachineSpec:
    problems = input_problems(props)
    if problems:
        raise MachineInputError(
            "AdoptedMachine inputs: " + "; ".join(f"{key}: {reason}" for key, reason in problems)
        )
    return MachineSpec(
        project=props["project"],
        stack=props["stack"],
        resource_name=props["resource_name"],
        environment=props["environment"],
        fleet=props["fleet"],
        vendor=Vendor(props["vendor"]),
        marker=props["marker"],
        node_pool=props["node_pool"],
        labels=dict(props.get("labels") or {}),
        taints=[
            {"key": t["key"], "value": str(t.get("value") or ""), "effect": t["effect"]}
            for t in props.get("taints") or []
        ],
        datacenter_prefix=props.get("datacenter_prefix"),
        ssh_user=props["ssh_user"],
        ssh_port=int(_port(props.get("ssh_port", DEFAULT_SSH_PORT))),
        os=props["os"],
        kubernetes_minor=props["kubernetes_minor"],
        api_server=props.get("api_server"),
        allow_release=bool(props.get("allow_release", False)),
        allow_production_release=bool(props.get("allow_production_release", False)),
        timeouts=dict(props.get("timeouts") or {}),
    )


# --- candidate selection (pure) -----------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    own: Box | None  # a box already carrying this machine's claim: a retried create resumes there
    candidates: list[Box]  # free boxes of the fleet, lexically lowest id first
    skipped: list[tuple[str, str]]  # (box id, why it is not a candidate)


def skip_reason(
    box: Box, *, marker: str, token: str, vendor: Vendor, datacenter_prefix: str | None
) -> str | None:
    """Why `box` cannot be adopted by the machine holding `token`; None when it can."""
    if not box.has_marker(marker):
        field_text = box.marker_field or "<empty>"
        others = [env for env in _ENVIRONMENTS if env in field_text]
        if others:
            return f"marked for another environment or fleet ({field_text!r})"
        return f"not marked for this fleet ({field_text!r})"
    if box.claim is not None:
        if box.claim.releasing:
            owner = "this machine's own, unfinished" if box.claim.token == token else box.claim.token
            return f"releasing (claim {owner})"
        if box.claim.token != token:
            return f"claimed by {box.claim.token}"
    if vendor is not Vendor.ROBOT and not box.has_os:
        # OVH and Dedibox boxes are pre-installed by the operator; Robot boxes are installed on adopt.
        return "no OS installed (prep the box first)"
    if datacenter_prefix and not box.datacenter.lower().startswith(datacenter_prefix.lower()):
        return f"datacenter {box.datacenter!r} does not start with {datacenter_prefix!r}"
    if not box.public_ipv4:
        return "no public IPv4"
    return None


def select_boxes(
    boxes: Sequence[Box], *, marker: str, token: str, vendor: Vendor, datacenter_prefix: str | None
) -> Selection:
    own: Box | None = None
    candidates: list[Box] = []
    skipped: list[tuple[str, str]] = []
    for box in sorted(boxes, key=lambda b: b.id):
        reason = skip_reason(
            box, marker=marker, token=token, vendor=vendor, datacenter_prefix=datacenter_prefix
        )
        if reason is not None:
            skipped.append((box.id, reason))
        elif box.claim is not None and box.claim.token == token:
            own = own or box
        else:
            candidates.append(box)
    return Selection(own=own, candidates=candidates, skipped=skipped)


def no_candidate_message(fleet: str, marker: str, seen: int, skipped: Sequence[tuple[str, str]]) -> str:
    lines = [f"fleet {fleet}: no adoptable box with marker {marker!r} among the {seen} boxes seen"]
    lines += [f"  {box_id}: {reason}" for box_id, reason in skipped]
    return "\n".join(lines)


def node_name_for(fleet: str, box_id: str) -> str:
    """The Node's name: fleet plus box id, so a replacement on another box never collides."""
    slug = _SLUG.sub("-", f"{fleet}-{box_id}".lower()).strip("-")
    return slug[:63].rstrip("-")


def provider_id_for(box: Box) -> str:
    """The foreign providerID: keeps the Hetzner CCM off the node; the failover mover parses it."""
    if box.vendor is Vendor.OVH:
        return f"ovh://{box.datacenter.lower()}/{box.id}"
    if box.vendor is Vendor.DEDIBOX:
        return f"dedibox://{box.id}"  # box id is <zone>/<server id>
    return f"hrobot://{box.id}"


# --- the state machine --------------------------------------------------------------------------------


def progress(message: str) -> None:
    """Log a progress line: to the engine (ephemeral, so a long adoption shows where it is) and to
    the Python log."""
    log.info(message)
    with contextlib.suppress(Exception):
        pulumi.log.info(message, ephemeral=True)


@dataclass
class StepClock:
    """One state's budget."""

    state: str
    timeout: float
    started: float = field(default_factory=time.monotonic)

    def remaining(self) -> float:
        return max(0.0, self.timeout - (time.monotonic() - self.started))

    def expired(self) -> bool:
        return self.remaining() <= 0


class Steps:
    """Runs named states with a timeout each; a failure names the state, the box and the time."""

    def __init__(self, machine: str, box: str, secrets: Sequence[str]) -> None:
        self.machine, self.box, self._secrets = machine, box, [s for s in secrets if s]
        self.started = time.monotonic()

    @contextlib.contextmanager
    def state(self, state: str, timeout: float) -> Iterator[StepClock]:
        clock = StepClock(state, timeout)
        progress(f"{self.machine}: {state} on {self.box} (budget {timeout:g}s)")
        try:
            yield clock
        except MachineError:
            raise
        except Exception as error:
            elapsed = time.monotonic() - clock.started
            cause = scrub_text(f"{type(error).__name__}: {error}", self._secrets)
            kind = (
                MachineHostKeyMismatchError if isinstance(error, HostKeyMismatchError) else MachineStepError
            )
            raise kind(self.machine, state, self.box, elapsed, cause) from None
        progress(f"{self.machine}: {state} on {self.box} done after {time.monotonic() - clock.started:.1f}s")

    def poll(
        self,
        clock: StepClock,
        check: Callable[[], bool],
        interval: float,
        what: str,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Call `check` until it answers True or the state's budget is spent."""
        while not check():
            if clock.expired():
                raise TimeoutError(f"{what}: not reached within {clock.timeout:g}s")
            sleep(min(interval, max(clock.remaining(), 0.01)))


@functools.cache
def _claim_lock() -> threading.Lock:
    """Serializes claim selection in the provider process. Made on first use: a Lock must never be
    reachable from the provider object dill pickles."""
    return threading.Lock()


def fleet_key_name(public_key: str) -> str:
    """The name the fleet key is registered under at a vendor: stable, and no secret in it."""
    return "tuist-" + hashlib.sha256(public_key.strip().encode()).hexdigest()[:12]


# --- settings from configure() ------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """What configure() read from the stack config. Secret fields stay out of repr."""

    vendors: Vendors
    secrets: Mapping[str, str] = field(repr=False)
    # fleet name -> its install_artifacts (the defaults when a fleet sets none); no secret in them.
    install_artifacts: Mapping[str, InstallArtifacts] = field(default_factory=dict)

    def artifact_pins(self, spec: MachineSpec) -> ArtifactPins:
        """The pins a Robot install of `spec`'s fleet downloads with; refuses while Kata is unpinned."""
        artifacts = self.install_artifacts.get(spec.fleet, InstallArtifacts())
        if artifacts.kata_static_sha256 is None:
            kata_file = artifacts.kata_static_url.rsplit("/", 1)[-1]
            raise MachineInputError(
                f"{spec.resource_name}: refusing to install a robot box: "
                f"{PROJECT}:fleets[name={spec.fleet}].install_artifacts.kata_static_sha256: required: "
                f"pin the sha256 of {kata_file} before a Robot box can be installed"
            )
        return ArtifactPins(
            runc_url=artifacts.runc_url,
            runc_sha256=artifacts.runc_sha256,
            containerd_url=artifacts.containerd_url,
            containerd_sha256=artifacts.containerd_sha256,
            kata_static_url=artifacts.kata_static_url,
            kata_static_sha256=artifacts.kata_static_sha256,
        )

    def secret(self, key: str, *, why: str) -> str:
        value = self.secrets.get(key)
        if not value:
            raise NotConfiguredError(
                f"stack secret {PROJECT}:{key} is not set; {why} (pulumi config set --secret {key} ...)"
            )
        return value

    def secret_values(self) -> list[str]:
        return [v for v in self.secrets.values() if v]

    @property
    def fleet_private_key(self) -> str:
        return self.secret("fleetSshPrivateKey", why="machines log in to their boxes with the fleet key")

    @property
    def fleet_public_key(self) -> str:
        key = load_private_key(self.fleet_private_key)
        return f"{key.get_name()} {key.get_base64()}"

    @property
    def sudo_password(self) -> str:
        return self.secret("fleetSudoPassword", why="the self-join and the Dedibox reinstall need it")

    def vendor_client(self, vendor: Vendor) -> VendorClient:
        try:
            return vendor_client(
                vendor, self.vendors, lambda key: self.secret(key, why=f"the {vendor.value} API needs it")
            )
        except VendorConfigError as error:
            raise NotConfiguredError(f"stack config {PROJECT}:{error}") from None

    def kube_api(self) -> Any:
        return kube.api_client(self.secret("kubeconfig", why="the machine has a cluster to join and leave"))


def settings_from_config(config: Any) -> Settings:
    """Settings from a pulumi.dynamic.Config (or anything with get(key))."""
    try:
        vendors = vendors_from_config(config, f"{PROJECT}:{CONFIG_VENDORS}")
    except VendorConfigError as error:
        raise NotConfiguredError(str(error)) from None
    secrets = {key: str(config.get(f"{PROJECT}:{key}") or "") for key in SECRET_CONFIG_KEYS}
    return Settings(vendors=vendors, secrets=secrets, install_artifacts=_install_artifacts(config))


def _install_artifacts(config: Any) -> dict[str, InstallArtifacts]:
    """Each fleet's pins from the stack config. The program validated the whole config before any
    resource was registered, so a fleet that does not parse here is left out (its install refuses)."""
    raw = config.get(f"{PROJECT}:{CONFIG_FLEETS}")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise NotConfiguredError(f"stack config {PROJECT}:{CONFIG_FLEETS} is not JSON") from None
    pins: dict[str, InstallArtifacts] = {}
    for item in raw if isinstance(raw, list) else []:
        try:
            fleet = Fleet.model_validate(item)
        except Exception:
            continue
        pins[fleet.name] = fleet.artifacts
    return pins


# --- SSH endpoints ------------------------------------------------------------------------------------


def ssh_target(spec: MachineSpec, box: Box, user: str) -> SshTarget:
    """Where the box answers SSH: its public IPv4 at the fleet's SSH port, in every environment (each
    vendorsim box listens on a loopback address of its own, which its simulated API reports)."""
    if not box.public_ipv4:
        raise MachineError(f"{box.vendor.value} box {box.id} has no public IPv4 to reach over SSH")
    return SshTarget(box.public_ipv4, spec.ssh_port, user)


# --- dev placeholder CA -------------------------------------------------------------------------------


@functools.cache
def dev_placeholder_ca() -> str:
    """A fixed self-signed CA for the dev stack's join (no cluster exists to trust). Derived from a
    public seed, so it is the same every run and the join stays idempotent; it signs nothing."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.x509.oid import NameOID

    key = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"tuist-infra dev placeholder CA").digest())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tuist-infra dev placeholder CA")])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
        .not_valid_after(dt.datetime(2036, 1, 1, tzinfo=dt.UTC))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, None)
    )
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


# --- the provider -------------------------------------------------------------------------------------


class MachineProvider(dyn.ResourceProvider):
    """The dynamic provider behind AdoptedMachine. See the module docstring."""

    # Nothing secret is captured (the instance holds nothing), so __provider need not be a secret.
    serialize_as_secret_always = False

    def __getstate__(self) -> dict[str, Any]:
        # Belt and braces: even a configured instance pickles without its settings.
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        return None

    def configure(self, req: dyn.ConfigureRequest) -> None:
        self._settings = settings_from_config(req.config)

    def _config(self) -> Settings:
        settings: Settings | None = getattr(self, "_settings", None)
        if settings is None:
            raise NotConfiguredError("the machine provider was not configured with the stack config")
        return settings

    # --- check / diff ---------------------------------------------------------------------------------

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        failures = [dyn.CheckFailure(key, reason) for key, reason in input_problems(news)]
        return dyn.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        return machine_diff(olds, news)

    # --- create -----------------------------------------------------------------------------------------

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        spec = parse_spec(props)
        settings = self._config()
        client = settings.vendor_client(spec.vendor)
        secrets = settings.secret_values()
        steps = Steps(spec.resource_name, f"{spec.vendor.value} fleet {spec.fleet}", secrets)
        # Refuse before any vendor write: an install without its pins must not leave a claim behind.
        pins = settings.artifact_pins(spec) if spec.vendor is Vendor.ROBOT else None
        with steps.state("CLAIMING", spec.timeout("claiming")):
            box = claim_box(client, spec)
        steps.box = f"{spec.vendor.value} box {box.id}"
        node_name = node_name_for(spec.fleet, box.id)
        pin: str | None = None
        if spec.vendor is Vendor.ROBOT:
            from providers import robot_install

            assert pins is not None
            pin = robot_install.install(
                client,
                settings,
                spec,
                box,
                steps,
                hostname=node_name,
                target=lambda: self._target(spec, box),
                pins=pins,
            )
        result, registered = join(settings, spec, box, steps, self._target(spec, box), node_name, pin)
        outs = machine_outputs(props, spec, box, node_name, result.host_key_fingerprint, registered)
        progress(f"{spec.resource_name}: ready on {steps.box} as node {node_name}")
        return dyn.CreateResult(id_=f"{spec.vendor.value}:{box.id}", outs=outs)

    def _target(self, spec: MachineSpec, box: Box) -> SshTarget:
        user = ROBOT_LOGIN if spec.vendor is Vendor.ROBOT else spec.ssh_user
        return ssh_target(spec, box, user)

    # --- update -----------------------------------------------------------------------------------------

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        spec = parse_spec(news)
        old_spec = parse_spec(olds)
        settings = self._config()
        outs = {**olds, **{k: v for k, v in news.items() if k != PROVIDER_KEY}}
        outs.pop(PROVIDER_KEY, None)
        if not any(olds.get(k) != news.get(k) for k in JOIN_KEYS):
            return dyn.UpdateResult(outs=outs)
        client = settings.vendor_client(spec.vendor)
        box_id = str(olds["box_id"])
        steps = Steps(spec.resource_name, f"{spec.vendor.value} box {box_id}", settings.secret_values())
        with steps.state("READING", spec.timeout("claiming")):
            box = client.get_box(box_id)
        node_name = str(olds["node_name"])
        pin = str(olds["host_key_fingerprint"])
        result, registered = join(settings, spec, box, steps, self._target(spec, box), node_name, pin)
        if spec.api_server:
            with steps.state("RELABELING", spec.timeout("joining")):
                kube.relabel_node(
                    settings.kube_api(),
                    node_name,
                    old_labels=old_spec.node_labels(),
                    new_labels=spec.node_labels(),
                    old_taints=[kube.NodeTaintSpec(**t) for t in old_spec.node_taints()],
                    new_taints=[kube.NodeTaintSpec(**t) for t in spec.node_taints()],
                )
        outs.update(host_key_fingerprint=result.host_key_fingerprint, node_registered=registered)
        return dyn.UpdateResult(outs=outs)

    # --- read -------------------------------------------------------------------------------------------

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        """Re-derive the box from the vendor; a box no longer claimed by this machine reads as gone."""
        spec = parse_spec(props)
        client = self._config().vendor_client(spec.vendor)
        try:
            box = client.get_box(str(props["box_id"]))
        except NotFoundError:
            return dyn.ReadResult(id_="", outs={})
        if box.claim is None or box.claim.token != spec.token:
            progress(f"{spec.resource_name}: {box.vendor.value} box {box.id} is no longer claimed by it")
            return dyn.ReadResult(id_="", outs={})
        outs = {k: v for k, v in props.items() if k != PROVIDER_KEY}
        outs.update(
            box_id=box.id,
            name=box.name,
            datacenter=box.datacenter,
            public_ipv4=box.public_ipv4,
            provider_id=provider_id_for(box),
            state="releasing" if box.claim.releasing else "ready",
        )
        return dyn.ReadResult(id_=id_, outs=outs)

    # --- delete = release -------------------------------------------------------------------------------

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        spec = parse_spec(props)
        refuse_release_message = release_refusal(spec)
        if refuse_release_message:
            raise ReleaseRefusedError(refuse_release_message)
        settings = self._config()
        if spec.vendor is Vendor.ROBOT:
            settings.artifact_pins(spec)  # a release reinstalls: refuse before draining anything
        box_id = str(props["box_id"])
        node_name = str(props["node_name"])
        steps = Steps(spec.resource_name, f"{spec.vendor.value} box {box_id}", settings.secret_values())
        if spec.api_server:
            api = settings.kube_api()
            with steps.state("CORDONING", spec.timeout("drain")):
                kube.cordon(api, node_name)
            with steps.state("DRAINING", spec.timeout("drain")) as clock:
                kube.drain(api, node_name, timeout=clock.timeout)
            with steps.state("DELETING_NODE", spec.timeout("drain")):
                kube.delete_node(api, node_name)
            with steps.state("DELETING_LOCAL_PVCS", spec.timeout("drain")):
                kube.delete_node_local_pvcs(api, node_name)
        client = settings.vendor_client(spec.vendor)
        with steps.state("RELEASE_MARKING", spec.timeout("claiming")):
            try:
                box = client.get_box(box_id)
            except NotFoundError:
                gone = f"{box_id} no longer exists at {spec.vendor.value}"
                progress(f"{spec.resource_name}: {gone}; nothing to release")
                return
            if box.claim is None or box.claim.token != spec.token:
                holder = box.claim.token if box.claim else "nobody"
                progress(f"{spec.resource_name}: {box_id} is held by {holder}, not this machine; left alone")
                return
            client.set_claim(box.id, Claim(spec.token, releasing=True))
        reinstall_for_release(client, settings, spec, box, steps, self._target)
        with steps.state("RELEASE_CLEARING", spec.timeout("claiming")):
            client.set_claim(box.id, None)
        progress(f"{spec.resource_name}: {box_id} returned to the {spec.fleet} pool")


# --- create / delete helpers --------------------------------------------------------------------------


def claim_box(client: VendorClient, spec: MachineSpec) -> Box:
    """Claim a box of the fleet for `spec`: its own claim if it already holds one, else the lexically
    lowest free box. Serialized in this process; every claim is read back before it counts."""
    token = spec.token
    with _claim_lock():
        boxes = client.list_boxes()
        selection = select_boxes(
            boxes,
            marker=spec.marker,
            token=token,
            vendor=spec.vendor,
            datacenter_prefix=spec.datacenter_prefix,
        )
        skipped = list(selection.skipped)
        if selection.own is not None:
            progress(f"{spec.resource_name}: resuming on {selection.own.id}, which already carries its claim")
            return selection.own
        for box in selection.candidates:
            client.set_claim(box.id, Claim(token))
            back = client.get_box(box.id)
            if back.claim == Claim(token):
                progress(f"{spec.resource_name}: claimed {spec.vendor.value} box {box.id} ({token})")
                return back
            holder = back.claim.token if back.claim else "nobody (the claim did not stick)"
            skipped.append((box.id, f"claimed by {holder} before this claim was read back"))
        raise NoAdoptableBoxError(no_candidate_message(spec.fleet, spec.marker, len(boxes), skipped))


def join(
    settings: Settings,
    spec: MachineSpec,
    box: Box,
    steps: Steps,
    target: SshTarget,
    node_name: str,
    pin: str | None,
) -> tuple[RunResult, bool]:
    """Run the self-join on the box. Returns the run and whether a bootstrap Secret was written (a
    cluster exists, so the node registers itself)."""
    if not box.public_ipv4:
        raise MachineError(f"{box.vendor.value} box {box.id} has no public IPv4 for --node-ip")
    token = kube.BootstrapToken.generate()
    registered = False
    if spec.api_server:
        kubeconfig = settings.secret("kubeconfig", why="the machine joins a cluster")
        with steps.state("BOOTSTRAP_TOKEN", spec.timeout("claiming")):
            kube.create_bootstrap_token(settings.kube_api(), token, fleet=spec.fleet, node_name=node_name)
            ca_pem = kube.cluster_ca_pem(kubeconfig)
        api_server = spec.api_server
        registered = True
    else:
        ca_pem, api_server = dev_placeholder_ca(), DEV_API_SERVER
    params = SelfJoinParams(
        node_name=node_name,
        node_ip=box.public_ipv4,
        provider_id=provider_id_for(box),
        labels=spec.node_labels(),
        api_server=api_server,
        ca_bundle_pem=ca_pem,
        kubernetes_minor=spec.kubernetes_minor,
        taints=tuple(NodeTaint(**t) for t in spec.node_taints()),
        containerd_source="preinstalled" if spec.vendor is Vendor.ROBOT else "apt",
    )
    script = render_self_join_script(params)
    sudo_password = settings.sudo_password if target.user != "root" else None
    with steps.state("JOINING", spec.timeout("joining")) as clock:
        result = run_script(
            target,
            script,
            private_key=settings.fleet_private_key,
            env_secrets=self_join_secrets(sudo_password=sudo_password, bootstrap_token=token.value),
            expected_host_key=pin,
            handshake_timeout=spec.timeout("ssh_handshake"),
            step_timeout=clock.timeout,
            retries=3,
            retry_delay=spec.timeout("ssh_retry_delay"),
            step="self-join",
        )
    return result, registered


def release_refusal(spec: MachineSpec) -> str | None:
    """Why a production release is refused, naming exactly the switch(es) to set; None if allowed."""
    if not spec.production:
        return None
    missing = []
    if not spec.allow_release:
        missing.append(f"fleets[name={spec.fleet}].allow_release: true")
    if not spec.allow_production_release:
        missing.append("allow_production_release: true")
    if not missing:
        return None
    return (
        f"{spec.resource_name}: refusing to release production box (fleet {spec.fleet}): releasing "
        f"reinstalls it. To allow it set {' and '.join(missing)} in Pulumi.production.yaml, run "
        "`pulumi up` so the machine records it, then unprotect and delete (config forbids "
        "allow_release on production Kura fleets)"
    )


def reinstall_for_release(
    client: VendorClient,
    settings: Settings,
    spec: MachineSpec,
    box: Box,
    steps: Steps,
    target: Callable[[MachineSpec, Box], SshTarget],
) -> None:
    """Reinstall the box with the fleet key so it returns to the pool clean, and wait until it has."""
    hostname = node_name_for(spec.fleet, box.id)
    interval = spec.timeout("poll_interval")
    if spec.vendor is Vendor.ROBOT:
        from providers import robot_install

        robot_install.install(
            client,
            settings,
            spec,
            box,
            steps,
            hostname=hostname,
            target=lambda: target(spec, box),
            pins=settings.artifact_pins(spec),
        )
        return
    seen_running = False
    with steps.state("RELEASE_REINSTALL", spec.timeout("release_install")):
        try:
            client.start_reinstall(
                box.id,
                hostname=hostname,
                ssh_public_key=settings.fleet_public_key,
                user_login=spec.ssh_user,
                user_password=settings.sudo_password,
                os_label=spec.os,
            )
        except TaskAlreadyExistsError:
            # An install already runs (a retried release, or OVH still busy): that is the one we want.
            if client.install_state(box.id) is not InstallState.RUNNING:
                raise
            seen_running = True
    with steps.state("RELEASE_WAIT_INSTALL", spec.timeout("release_install")) as clock:

        def finished() -> bool:
            nonlocal seen_running
            state = client.install_state(box.id)
            if state is InstallState.FAILED:
                raise VendorError(
                    vendor=spec.vendor.value,
                    call="install status",
                    subject=box.id,
                    message="the install failed",
                )
            if state is InstallState.RUNNING:
                seen_running = True
            # Dedibox reads DONE for an old install too: only a DONE after RUNNING is ours.
            return state is InstallState.DONE and (seen_running or spec.vendor is Vendor.OVH)

        steps.poll(clock, finished, interval, "the reinstall to finish")


def machine_outputs(
    props: Mapping[str, Any],
    spec: MachineSpec,
    box: Box,
    node_name: str,
    host_key_fingerprint: str,
    registered: bool,
) -> dict[str, Any]:
    outs = {k: v for k, v in props.items() if k != PROVIDER_KEY}
    outs.update(
        box_id=box.id,
        name=box.name,
        datacenter=box.datacenter,
        public_ipv4=box.public_ipv4,
        provider_id=provider_id_for(box),
        node_name=node_name,
        host_key_fingerprint=host_key_fingerprint,
        state="ready",
        claim_token=spec.token,
        node_registered=registered,
    )
    return outs


def machine_diff(olds: Mapping[str, Any], news: Mapping[str, Any]) -> dyn.DiffResult:
    """vendor / fleet / marker -> replace (another box); labels, taints, pool, the release switches and
    ssh_port -> update in place; anything else, outputs and __provider included -> no change."""
    replaces = [key for key in REPLACE_KEYS if olds.get(key) != news.get(key)]
    updates = [key for key in UPDATE_KEYS if _norm(_input(olds, key)) != _norm(_input(news, key))]
    if replaces:
        # Boxes are scarce (no spare box waits for a replacement): release first, then claim.
        return dyn.DiffResult(changes=True, replaces=replaces, delete_before_replace=True)
    return dyn.DiffResult(changes=bool(updates), replaces=[], delete_before_replace=False)


def _input(props: Mapping[str, Any], key: str) -> Any:
    # State written before ssh_port was an input dialled port 22: the same as an explicit 22.
    return _port(props.get(key, DEFAULT_SSH_PORT)) if key == "ssh_port" else props.get(key)


def _port(value: Any) -> Any:
    # Numbers cross the Pulumi engine as floats (2222.0): a whole one is the port it names.
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _norm(value: Any) -> Any:
    if value is None:
        return None
    return json.dumps(value, sort_keys=True)


# --- the resource -------------------------------------------------------------------------------------


class AdoptedMachine(dyn.Resource, module="machine", name="AdoptedMachine"):
    """One adopted box. Inputs: see MachineSpec / docs/machines.md. Outputs add box_id, name,
    datacenter, public_ipv4, provider_id, node_name, host_key_fingerprint, state, claim_token and
    node_registered."""

    box_id: pulumi.Output[str]
    name: pulumi.Output[str]
    datacenter: pulumi.Output[str]
    public_ipv4: pulumi.Output[str]
    provider_id: pulumi.Output[str]
    node_name: pulumi.Output[str]
    host_key_fingerprint: pulumi.Output[str]
    state: pulumi.Output[str]
    claim_token: pulumi.Output[str]
    node_registered: pulumi.Output[bool]
    vendor: pulumi.Output[str]

    def __init__(
        self, name: str, props: Mapping[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        outputs = {
            key: None
            for key in (
                "box_id",
                "name",
                "datacenter",
                "public_ipv4",
                "provider_id",
                "node_name",
                "host_key_fingerprint",
                "state",
                "claim_token",
                "node_registered",
            )
        }
        super().__init__(MachineProvider(), name, {**outputs, **props, "resource_name": name}, opts)
