"""FailoverIP: a region's failover IP routed to one box of the region's fleet, at deploy time.

Placement (reference/tuist-anchor.md 4.1): keep the box the vendor routes the IP to while it is still
eligible, else move it to the eligible box ranked lowest. With no candidate the IP is never moved:
the deploy fails and says so. Moving an IP that is already where it should be writes nothing.

Eligible is the watcher's rule whenever the stack's cluster answers (watcher/decision.py
`ineligibility`: a Ready, uncordoned Node of the fleet's pool carrying a Ready peer-demux pod of the
region), read with the watcher's own listers and ranked by Node name as the watcher ranks: a deploy
and the watcher, deciding on the same cluster, pick the same box, so a deploy never routes the IP to
a box the watcher then moves it off. Without a cluster (no kubeconfig, unreachable, or none of the
candidates eligible yet, as on the up that creates the region's demux) the deploy-time rule stands:
one of `candidates` (the box ids of the fleet's adopted machines), the lexically lowest id first; the
watcher corrects it once the cluster has an eligible box. The vendor calls are the clients':
OVH POST /ip/{ip}/move + IP task polling, Dedibox failover-ips/attach, Robot POST /failover/{ip}.

The runtime half (move the IP off a box whose node or demux died) is the watcher (watcher/), which
builds its clients with the same `providers.clients.vendor_client`.

The provider object holds nothing: dill pickles it into every resource's `__provider`, so
credentials reach it only through `configure()` (the stack config, decrypted, in the provider
process) and a vendor client is built per call.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi.dynamic as dyn
from pulumi.dynamic.dynamic import PROVIDER_KEY
from pulumi.output import Unknown
from pulumi.runtime.rpc import UNKNOWN

from providers.clients import (
    SECRET_KEYS_BY_VENDOR,
    ClientTiming,
    VendorAccounts,
    VendorConfigError,
    vendor_client,
)
from providers.constants import KUBECONFIG
from providers.dedibox.models import parse_box_id
from providers.dynamic_resource import DynamicResource
from providers.errors import ConfigError, InfraError, InputError, VendorError, VendorInputError
from providers.ovh.models import check_service_name
from providers.robot.models import check_server_number
from providers.vendor import Vendor, VendorClient, failover_placement

__all__ = [
    "CLIENT_TIMING",
    "FailoverError",
    "FailoverIPProvider",
    "FailoverIPResource",
    "FailoverInputError",
    "FailoverMoveError",
    "FailoverSpec",
    "NoEligibleBoxError",
    "NotConfiguredError",
    "failover_diff",
    "input_problems",
    "parse_spec",
    "placement",
    "route",
]

log = logging.getLogger(__name__)

PROJECT = "tuist-infra"
VENDORS_KEY = f"{PROJECT}:vendors"
REPLACE_KEYS = ("vendor", "address")  # another IP (or account): another resource
UPDATE_KEYS = ("candidates",)  # the fleet changed: placement runs again, and may or may not move
# node_pool and namespace say where the eligibility rule reads the cluster (the fleet's Node pool, the
# demux's namespace): not the placement itself, so a change of them alone moves nothing.

# (connect, read) seconds of the deploy's cluster reads: an unreachable cluster is a fallback, not a wait.
CLUSTER_READ_TIMEOUT = (5.0, 15.0)
NO_CLUSTER = "the stack has no cluster"

# Client retry / task-wait settings; module-level (not on the provider, which must hold nothing) so
# tests can shorten them.
CLIENT_TIMING = ClientTiming()

_BOX_ID_CHECKS = {
    Vendor.OVH: check_service_name,
    Vendor.DEDIBOX: parse_box_id,
    Vendor.ROBOT: check_server_number,
}


# --- errors -------------------------------------------------------------------------------------------


class FailoverError(InfraError):
    """Base of the FailoverIP provider's own errors."""


class FailoverInputError(FailoverError, InputError):
    """The resource's inputs are malformed."""


class NotConfiguredError(FailoverError, ConfigError):
    """The stack config lacks the vendor account or a secret the call needs."""


class NoEligibleBoxError(FailoverError):
    """The region's fleet has no box the IP may go to; nothing was moved."""


class FailoverMoveError(FailoverError):
    """Reading or moving the IP failed at the vendor. `cause` is the client's typed VendorError."""

    def __init__(self, message: str, cause: VendorError) -> None:
        self.cause = cause
        super().__init__(message)


# --- inputs -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FailoverSpec:
    vendor: Vendor
    address: str
    region: str
    fleet: str
    candidates: tuple[str, ...]
    node_pool: str | None = None  # None: no cluster eligibility (the deploy-time rule alone)
    namespace: str | None = None

    @property
    def where(self) -> str:
        return f"failover IP {self.address} (region {self.region}, fleet {self.fleet})"


def _unknown(value: Any) -> bool:
    """A value a preview cannot know yet: the wire marker, or the SDK's Unknown it is decoded into
    (the candidates of a fleet that is still to be adopted arrive this way)."""
    if isinstance(value, list):
        return any(_unknown(v) for v in value)
    return isinstance(value, Unknown) or (isinstance(value, str) and value == UNKNOWN)


def input_problems(props: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(property, reason) for every malformed input; unknown values (preview) are not judged."""
    problems: list[tuple[str, str]] = []
    vendor: Vendor | None = None
    raw_vendor = props.get("vendor")
    if not _unknown(raw_vendor):
        try:
            vendor = Vendor(str(raw_vendor))
        except ValueError:
            known = ", ".join(v.value for v in Vendor)
            problems.append(("vendor", f"{raw_vendor!r} is not one of {known}"))
        if vendor is not None and vendor not in _BOX_ID_CHECKS:
            movable = ", ".join(v.value for v in _BOX_ID_CHECKS)
            problems.append(("vendor", f"{vendor.value} has no failover IPs this program moves ({movable})"))
            vendor = None
    address = props.get("address")
    if not _unknown(address):
        try:
            ipaddress.IPv4Address(address)
        except ValueError:
            problems.append(("address", f"{address!r} is not an IPv4 address"))
    for key in ("region", "fleet"):
        value = props.get(key)
        if not _unknown(value) and (not isinstance(value, str) or not value):
            problems.append((key, f"must be a non-empty string, got {value!r}"))
    for key in ("node_pool", "namespace"):
        value = props.get(key)
        if value is not None and not _unknown(value) and (not isinstance(value, str) or not value):
            problems.append((key, f"must be a non-empty string when set, got {value!r}"))
    if (props.get("node_pool") is None) != (props.get("namespace") is None):
        problems.append(("node_pool", "node_pool and namespace are set together (where eligibility is read)"))
    candidates = props.get("candidates")
    if _unknown(candidates):
        return problems
    if not isinstance(candidates, list):
        problems.append(("candidates", f"must be a list of box ids, got {candidates!r}"))
        return problems
    for index, box_id in enumerate(candidates):
        if not isinstance(box_id, str) or not box_id:
            problems.append(("candidates", f"candidates[{index}]: {box_id!r} is not a box id"))
        elif vendor is not None:
            try:
                _BOX_ID_CHECKS[vendor](box_id)
            except VendorInputError as error:
                problems.append(("candidates", f"candidates[{index}]: {error}"))
    duplicates = sorted({b for b in candidates if isinstance(b, str) and candidates.count(b) > 1})
    if duplicates:
        problems.append(("candidates", f"box ids listed more than once: {', '.join(duplicates)}"))
    return problems


def parse_spec(props: Mapping[str, Any]) -> FailoverSpec:
    problems = input_problems(props)
    if problems:
        raise FailoverInputError(
            "FailoverIP inputs are invalid: " + "; ".join(f"{key}: {why}" for key, why in problems)
        )
    return FailoverSpec(
        vendor=Vendor(props["vendor"]),
        address=str(props["address"]),
        region=str(props["region"]),
        fleet=str(props["fleet"]),
        candidates=tuple(sorted(props["candidates"])),
        node_pool=props.get("node_pool"),
        namespace=props.get("namespace"),
    )


# --- placement ----------------------------------------------------------------------------------------


def placement(
    current: str | None, candidates: Sequence[str], eligible: Mapping[str, str] | None = None
) -> str | None:
    """Where the IP should be (providers.vendor.failover_placement, the rule the watcher applies
    too): `current` while it is eligible, else the eligible box ranked lowest; None when there is
    none (the caller must not move the IP then).

    `eligible` is what the cluster says (candidate box id -> its Node's name, the watcher's ranking);
    None or empty (no cluster, or nothing eligible in it yet): every candidate, ranked by box id."""
    if eligible:
        return failover_placement(current, {box: eligible[box] for box in candidates if box in eligible})
    return failover_placement(current, {box: box for box in candidates})


def cluster_eligibility(kubeconfig: str | None, spec: FailoverSpec) -> tuple[dict[str, str] | None, str]:
    """The candidates the watcher would route the IP to (box id -> Node name), read from the stack's
    cluster with the watcher's listers, and a phrase saying where eligibility came from. None when
    the cluster cannot be asked; its error is named by type only (its text may carry the server)."""
    if not kubeconfig or spec.node_pool is None or spec.namespace is None:
        return None, NO_CLUSTER
    # The watcher's modules pull in the Kubernetes client: only a create or update that runs
    # placement needs them, never a preview.
    from kubernetes import client as k8s

    from providers import kube
    from watcher.decision import ineligibility
    from watcher.loop import WatcherSettings, kube_listers

    settings = WatcherSettings(spec.address, spec.region, spec.node_pool, namespace=spec.namespace)
    try:
        core = k8s.CoreV1Api(kube.api_client(kubeconfig, timeout=CLUSTER_READ_TIMEOUT))
        list_nodes, list_pods = kube_listers(core, settings, CLUSTER_READ_TIMEOUT)
        nodes, pods = list_nodes(), list_pods()
    except Exception as error:  # any failure to read is a fallback, said in the log
        return None, f"the cluster did not answer ({type(error).__name__})"
    wanted = set(spec.candidates)
    eligible = {
        node.box_id: node.name
        for node in nodes
        if node.box_id in wanted and ineligibility(node, pods) is None
    }
    return eligible, "the cluster"


def route(
    client: VendorClient,
    spec: FailoverSpec,
    eligible: Mapping[str, str] | None = None,
    source: str = "the deploy-time rule",
) -> str:
    """Route the IP per `placement`; returns the box it ends up on. Writes only when it moves.
    `eligible` and `source`: what cluster_eligibility returned (None: the deploy-time rule alone)."""
    try:
        current = client.failover_target(spec.address)
    except VendorError as error:
        raise FailoverMoveError(f"{spec.where}: reading its route failed: {error}", error) from None
    if eligible is not None and not eligible:
        log.warning(
            "%s: no candidate is eligible in %s yet (a Ready, uncordoned Node with a Ready peer-demux "
            "pod of the region); placing it by the deploy-time rule, and the watcher moves it once one is",
            spec.where,
            source,
        )
    target = placement(current, spec.candidates, eligible)
    if target is None:
        left = f"it stays on {current}" if current else "it stays unrouted"
        raise NoEligibleBoxError(
            f"{spec.where}: no eligible box (the fleet has no adopted machine); {left} and nothing was moved"
        )
    if target == current:
        log.info("%s: already on %s", spec.where, current)
        return target
    try:
        client.move_failover(spec.address, target)
    except VendorError as error:
        raise FailoverMoveError(
            f"{spec.where}: moving it from {current or 'unrouted'} to {target} failed: {error}; "
            "the next pulumi up reads the route again and retries",
            error,
        ) from None
    ruled = f"eligible per {source}" if eligible else "by the deploy-time rule"
    log.info("%s: moved from %s to %s (%s)", spec.where, current or "unrouted", target, ruled)
    return target


# --- diff ---------------------------------------------------------------------------------------------


def _candidates(props: Mapping[str, Any]) -> Any:
    value = props.get("candidates")
    if _unknown(value):
        return UNKNOWN
    return sorted(value) if isinstance(value, list) else value


def failover_diff(olds: Mapping[str, Any], news: Mapping[str, Any]) -> dyn.DiffResult:
    """vendor or address -> replace; candidates -> update (placement runs again); so does a route
    (as the last refresh read it) off every candidate: unrouted, or on a box outside the fleet. Nothing
    else (region, fleet, other outputs and __provider) is a change."""
    replaces = [key for key in REPLACE_KEYS if olds.get(key) != news.get(key)]
    if replaces:
        # Create-before-delete is safe: delete leaves the old IP where it is.
        return dyn.DiffResult(changes=True, replaces=replaces, delete_before_replace=False)
    new_candidates = _candidates(news)
    # The watcher moves the IP among the candidates only: off them, nothing but an up brings it back.
    # With no candidate there is nowhere to bring it, and placement would only refuse.
    off_candidates = (
        isinstance(new_candidates, list)
        and bool(new_candidates)
        and olds.get("routed_to") not in new_candidates
    )
    changed = new_candidates == UNKNOWN or _candidates(olds) != new_candidates or off_candidates
    return dyn.DiffResult(
        changes=changed, replaces=[], stables=list(REPLACE_KEYS), delete_before_replace=False
    )


# --- settings from configure() ------------------------------------------------------------------------


@dataclass(frozen=True)
class Credentials:
    """The vendor accounts and secrets configure() read. Secrets stay out of repr."""

    accounts: VendorAccounts  # the stack's `vendors`, validated when a client is first built
    secrets: Mapping[str, str] = field(repr=False)

    def secret(self, key: str) -> str:
        value = self.secrets.get(key)
        if not value:
            raise NotConfiguredError(
                f"stack secret {PROJECT}:{key} is not set; the failover API needs it "
                f"(pulumi config set --secret {key} ...)"
            )
        return value


def credentials_from_config(config: Any) -> Credentials:
    """From a pulumi.dynamic.Config: structured keys arrive as JSON text, secrets decrypted."""
    keys = [key for vendor_keys in SECRET_KEYS_BY_VENDOR.values() for key in vendor_keys]
    keys.append(KUBECONFIG)  # optional: where the cluster's eligibility is read from
    secrets = {key: str(config.get(f"{PROJECT}:{key}") or "") for key in keys}
    return Credentials(accounts=VendorAccounts(VENDORS_KEY, config.get(VENDORS_KEY)), secrets=secrets)


def _outputs(spec: FailoverSpec, routed_to: str | None) -> dict[str, Any]:
    # The inputs go back into the outputs: diff compares against the old outputs only.
    return {
        "vendor": spec.vendor.value,
        "address": spec.address,
        "region": spec.region,
        "fleet": spec.fleet,
        "candidates": list(spec.candidates),
        "node_pool": spec.node_pool,
        "namespace": spec.namespace,
        "routed_to": routed_to,
    }


# --- the provider -------------------------------------------------------------------------------------


class FailoverIPProvider(dyn.ResourceProvider):
    """The dynamic provider behind FailoverIPResource. See the module docstring."""

    # Nothing secret is captured (the instance holds nothing), so __provider need not be a secret.
    serialize_as_secret_always = False

    def __getstate__(self) -> dict[str, Any]:
        # configure() runs in the provider process after unpickling; even a configured instance
        # pickles as nothing.
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        return None

    def configure(self, req: dyn.ConfigureRequest) -> None:
        self._credentials = credentials_from_config(req.config)

    def _client(self, vendor: Vendor) -> VendorClient:
        credentials: Credentials | None = getattr(self, "_credentials", None)
        if credentials is None:
            raise NotConfiguredError("the failover provider was not configured with the stack config")
        try:
            vendors = credentials.accounts.parsed
        except VendorConfigError as error:
            raise NotConfiguredError(str(error)) from None
        try:
            return vendor_client(vendor, vendors, credentials.secret, CLIENT_TIMING)
        except VendorConfigError as error:
            raise NotConfiguredError(f"stack config {VENDORS_KEY}: {error}") from None

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        failures = [dyn.CheckFailure(key, reason) for key, reason in input_problems(news)]
        inputs = dict(news)
        if not failures and isinstance(news.get("candidates"), list) and not _unknown(news["candidates"]):
            inputs["candidates"] = sorted(news["candidates"])
        return dyn.CheckResult(inputs, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        return failover_diff(olds, news)

    def _route(self, spec: FailoverSpec) -> str:
        client = self._client(spec.vendor)
        credentials: Credentials = self._credentials
        eligible, source = cluster_eligibility(credentials.secrets.get(KUBECONFIG), spec)
        if eligible is None:
            # No kubeconfig is the dev stack's normal; a cluster that did not answer is worth a look.
            say = log.info if source == NO_CLUSTER else log.warning
            say("%s: eligibility is the deploy-time rule (%s)", spec.where, source)
        return route(client, spec, eligible, source)

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        spec = parse_spec(props)
        return dyn.CreateResult(id_=spec.address, outs=_outputs(spec, self._route(spec)))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        spec = parse_spec(news)
        return dyn.UpdateResult(outs=_outputs(spec, self._route(spec)))

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        """Refresh: where the vendor routes the IP now (the watcher may have moved it)."""
        if not props.get("vendor") or not props.get("address"):
            raise FailoverInputError(
                f"FailoverIP {id_}: read needs the resource's state (vendor, address); "
                "importing a failover IP by id alone is not supported"
            )
        spec = parse_spec(props)
        try:
            current = self._client(spec.vendor).failover_target(spec.address)
        except VendorError as error:
            raise FailoverMoveError(f"{spec.where}: reading its route failed: {error}", error) from None
        outs = {k: v for k, v in props.items() if k != PROVIDER_KEY}
        outs["routed_to"] = current
        return dyn.ReadResult(id_=id_, outs=outs)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        # An IP is never unrouted by a deploy. Deleting the resource (the region parked or removed,
        # an address replaced) must not cut peer traffic DNS still sends to the IP, and no vendor can
        # "unroute" without dropping it: the IP stays on its box until an operator moves or
        # terminates it at the vendor. No vendor call is made.
        log.info("failover IP %s: removed from the stack, left where it is routed", props.get("address"))


# --- the resource -------------------------------------------------------------------------------------


class FailoverIPResource(DynamicResource, module="failover", name="FailoverIP"):
    """One routed failover IP. Outputs: vendor, address, region, fleet, candidates, routed_to (the
    box id the vendor routes the IP to)."""

    vendor: pulumi.Output[str]
    address: pulumi.Output[str]
    region: pulumi.Output[str]
    fleet: pulumi.Output[str]
    candidates: pulumi.Output[list[str]]
    routed_to: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        vendor: pulumi.Input[str],
        address: pulumi.Input[str],
        region: pulumi.Input[str],
        fleet: pulumi.Input[str],
        candidates: pulumi.Input[Sequence[pulumi.Input[str]]],
        node_pool: pulumi.Input[str] | None = None,
        namespace: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "vendor": vendor,
            "address": address,
            "region": region,
            "fleet": fleet,
            "candidates": candidates,
            "node_pool": node_pool,
            "namespace": namespace,
            "routed_to": None,
        }
        super().__init__(FailoverIPProvider(), name, props, opts)
