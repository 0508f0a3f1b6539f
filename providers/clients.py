"""Vendor clients built from a stack's accounts and secrets: the one factory the machine and
failover providers and the in-cluster failover watcher all use. No Pulumi import.

Secret keys are the stack's (ovhApplicationSecret, ovhConsumerKey, dediboxSecretKey, robotPassword,
scalewaySecretKey), so one name means one secret everywhere: in `pulumi config`, in the watcher's
mounted files. Elastic Metal and Apple silicon share scalewaySecretKey: one Scaleway API key.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from providers.errors import VendorConfigError
from providers.retry import (
    DEFAULT_POLL,
    DEFAULT_RETRY,
    DEFAULT_TIMEOUTS,
    HttpTimeouts,
    PollPolicy,
    RetryPolicy,
)
from providers.vendor import Vendor, VendorClient

if TYPE_CHECKING:
    from config.models import Vendors

__all__ = [
    "SECRET_KEYS_BY_VENDOR",
    "ClientTiming",
    "SecretLookup",
    "VendorAccounts",
    "VendorConfigError",
    "vendor_client",
    "vendors_from_config",
]

# Which stack secrets each vendor's API needs.
SECRET_KEYS_BY_VENDOR: dict[Vendor, tuple[str, ...]] = {
    Vendor.OVH: ("ovhApplicationSecret", "ovhConsumerKey"),
    Vendor.DEDIBOX: ("dediboxSecretKey",),
    Vendor.ROBOT: ("robotPassword",),
    Vendor.SCALEWAY_EM: ("scalewaySecretKey",),
    Vendor.APPLESILICON: ("scalewaySecretKey",),
}


@dataclass(frozen=True)
class ClientTiming:
    """Retry, timeout and task-wait settings of the clients built here (tests shorten them).

    `poll` paces every wait for a vendor task (first wait short, backing off to its cap);
    `task_timeout` bounds the waits a client does on its own (an IP move, a failover attach).
    """

    retry: RetryPolicy = DEFAULT_RETRY
    timeouts: HttpTimeouts = DEFAULT_TIMEOUTS
    poll: PollPolicy = DEFAULT_POLL
    task_timeout: float = 600.0


SecretLookup = Callable[[str], str]


def vendor_client(
    vendor: Vendor, vendors: Vendors, secret: SecretLookup, timing: ClientTiming | None = None
) -> VendorClient:
    """A client for `vendor`'s account in `vendors`; `secret(key)` yields a stack secret by key
    (and raises when it is unset)."""
    timing = timing or ClientTiming()
    if vendor is Vendor.OVH:
        from providers.ovh.client import OvhClient

        if vendors.ovh is None:
            raise VendorConfigError("vendors has no ovh account (vendors.ovh)")
        return OvhClient(
            endpoint=vendors.ovh.endpoint,
            application_key=vendors.ovh.application_key,
            application_secret=secret("ovhApplicationSecret"),
            consumer_key=secret("ovhConsumerKey"),
            timeouts=timing.timeouts,
            retry=timing.retry,
            poll=timing.poll,
            task_timeout=timing.task_timeout,
        )
    if vendor is Vendor.DEDIBOX:
        from providers.dedibox.client import DediboxClient

        if vendors.dedibox is None:
            raise VendorConfigError("vendors has no dedibox account (vendors.dedibox)")
        return DediboxClient(
            api_url=vendors.dedibox.api_url,
            secret_key=secret("dediboxSecretKey"),
            project_id=vendors.dedibox.project_id,
            zones=vendors.dedibox.zones,
            timeouts=timing.timeouts,
            retry=timing.retry,
            poll=timing.poll,
            task_timeout=timing.task_timeout,
        )
    if vendor is Vendor.SCALEWAY_EM:
        from providers.scaleway_em.client import ElasticMetalClient

        if vendors.scaleway_em is None:
            raise VendorConfigError("vendors has no Elastic Metal account (vendors.scaleway_em)")
        return ElasticMetalClient(
            api_url=vendors.scaleway_em.api_url,
            access_key=vendors.scaleway_em.access_key,
            secret_key=secret("scalewaySecretKey"),
            project_id=vendors.scaleway_em.project_id,
            zones=vendors.scaleway_em.zones,
            timeouts=timing.timeouts,
            retry=timing.retry,
            poll=timing.poll,
        )
    if vendor is Vendor.APPLESILICON:
        from providers.applesilicon.client import AppleSiliconClient

        if vendors.applesilicon is None:
            raise VendorConfigError("vendors has no Apple silicon account (vendors.applesilicon)")
        return AppleSiliconClient(
            api_url=vendors.applesilicon.api_url,
            access_key=vendors.applesilicon.access_key,
            secret_key=secret("scalewaySecretKey"),
            project_id=vendors.applesilicon.project_id,
            zones=vendors.applesilicon.zones,
            timeouts=timing.timeouts,
            retry=timing.retry,
            poll=timing.poll,
        )
    from providers.robot.client import RobotClient

    if vendors.robot is None:
        raise VendorConfigError("vendors has no robot account (vendors.robot)")
    # Robot failover switches are synchronous: no task to wait for.
    return RobotClient(
        api_url=vendors.robot.api_url,
        username=vendors.robot.username,
        password=secret("robotPassword"),
        timeouts=timing.timeouts,
        retry=timing.retry,
        poll=timing.poll,
    )


def vendors_from_config(config: Any, key: str) -> Vendors:
    """The `vendors` stack key from a dynamic provider's config (structured keys arrive as JSON)."""
    # config.models (pydantic and the stack's models) is imported here, not at the top: a provider
    # process that builds no client (a no-change preview) never pays its 0.2 s of CPU.
    from config.models import Vendors

    raw = config.get(key)
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise VendorConfigError(f"stack config {key} is not JSON") from None
    try:
        return Vendors.model_validate(raw or {})
    except Exception as error:
        raise VendorConfigError(f"stack config {key} is invalid: {error}") from None


@dataclass(frozen=True)
class VendorAccounts:
    """The stack's `vendors` key as configure() received it, validated when a client is first built.

    The program validated the same key with the same model before it registered anything, so waiting
    changes no outcome: a bad key still fails, with the same VendorConfigError, before any vendor call.
    """

    key: str
    raw: Any = field(repr=False)

    @functools.cached_property
    def parsed(self) -> Vendors:
        return vendors_from_config({self.key: self.raw}, self.key)
