"""FailoverIP: a region's failover IP routed to one box of the region's fleet, at deploy time.

Placement (reference/tuist-anchor.md 4.1): keep the box the vendor routes the IP to while it is still
eligible (one of `candidates`, the box ids of the fleet's adopted machines), else move it to the
lexically lowest candidate. With no candidate the IP is never moved: the deploy fails and says so.
Moving an IP that is already where it should be writes nothing. The vendor calls are the clients':
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

from config.models import Vendors
from providers.clients import (
    SECRET_KEYS_BY_VENDOR,
    ClientTiming,
    VendorConfigError,
    vendor_client,
    vendors_from_config,
)
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
INPUT_KEYS = ("vendor", "address", "region", "fleet", "candidates")

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
    )


# --- placement ----------------------------------------------------------------------------------------


def placement(current: str | None, candidates: Sequence[str]) -> str | None:
    """Where the IP should be (providers.vendor.failover_placement, the rule the watcher applies
    too): `current` while it is a candidate, else the lexically lowest candidate; None when there
    is none (the caller must not move the IP then). At deploy time a box is eligible when the
    fleet adopted it, and boxes are ordered by id."""
    return failover_placement(current, {box: box for box in candidates})


def route(client: VendorClient, spec: FailoverSpec) -> str:
    """Route the IP per `placement`; returns the box it ends up on. Writes only when it moves."""
    try:
        current = client.failover_target(spec.address)
    except VendorError as error:
        raise FailoverMoveError(f"{spec.where}: reading its route failed: {error}", error) from None
    target = placement(current, spec.candidates)
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
    log.info("%s: moved from %s to %s", spec.where, current or "unrouted", target)
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

    vendors: Vendors
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
    try:
        vendors = vendors_from_config(config, VENDORS_KEY)
    except VendorConfigError as error:
        raise NotConfiguredError(str(error)) from None
    keys = [key for vendor_keys in SECRET_KEYS_BY_VENDOR.values() for key in vendor_keys]
    secrets = {key: str(config.get(f"{PROJECT}:{key}") or "") for key in keys}
    return Credentials(vendors=vendors, secrets=secrets)


def _outputs(spec: FailoverSpec, routed_to: str | None) -> dict[str, Any]:
    # The inputs go back into the outputs: diff compares against the old outputs only.
    return {
        "vendor": spec.vendor.value,
        "address": spec.address,
        "region": spec.region,
        "fleet": spec.fleet,
        "candidates": list(spec.candidates),
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
            return vendor_client(vendor, credentials.vendors, credentials.secret, CLIENT_TIMING)
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

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        spec = parse_spec(props)
        routed_to = route(self._client(spec.vendor), spec)
        return dyn.CreateResult(id_=spec.address, outs=_outputs(spec, routed_to))

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        spec = parse_spec(news)
        routed_to = route(self._client(spec.vendor), spec)
        return dyn.UpdateResult(outs=_outputs(spec, routed_to))

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
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "vendor": vendor,
            "address": address,
            "region": region,
            "fleet": fleet,
            "candidates": candidates,
            "routed_to": None,
        }
        super().__init__(FailoverIPProvider(), name, props, opts)
