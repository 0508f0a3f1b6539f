"""The vendor side of failover: a VendorClient built from an account and its credentials, and the
watcher's `Mover` over it.

Both halves of failover route IPs through this code: the FailoverIP dynamic provider at deploy time
(credentials from the stack config) and the watcher at run time (credentials from the files the
`tuist-failover-vendor-credentials-<region>` Secret mounts). No Pulumi import: the watcher does not
need the SDK.

Credential file names are the stack secret keys (ovhApplicationSecret, ovhConsumerKey,
dediboxSecretKey, robotPassword), so one name means one secret everywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from config.models import DediboxAccount, OvhAccount, RobotAccount, Vendors
from providers.clients import (
    SECRET_KEYS_BY_VENDOR,
    ClientTiming,
    VendorConfigError,
    vendor_client,
)
from providers.retry import HttpTimeouts
from providers.robot.models import min_poll_interval
from providers.vendor import Vendor, VendorClient
from watcher.lease import CALL_MARGIN_SECONDS

__all__ = [
    "ACCOUNT_MODELS",
    "DEFAULT_CREDENTIALS_DIR",
    "ENV_ACCOUNT",
    "ENV_CREDENTIALS_DIR",
    "ENV_VENDOR",
    "MOVER_TIMEOUTS",
    "MOVER_TIMING",
    "SECRET_KEYS_BY_VENDOR",
    "ClientTiming",
    "MoverConfigError",
    "VendorMover",
    "build_mover",
    "check_fits_call_margin",
    "min_poll_seconds",
    "mover_from_env",
    "parse_vendor",
    "read_credential",
    "vendor_client",
]

ACCOUNT_MODELS: dict[Vendor, type[BaseModel]] = {
    Vendor.OVH: OvhAccount,
    Vendor.DEDIBOX: DediboxAccount,
    Vendor.ROBOT: RobotAccount,
}

DEFAULT_CREDENTIALS_DIR = "/etc/tuist-failover"
ENV_VENDOR = "FAILOVER_VENDOR"
# The vendor account's non-secret settings as JSON, in the shape of config.models' account model.
ENV_ACCOUNT = "FAILOVER_VENDOR_ACCOUNT"
ENV_CREDENTIALS_DIR = "FAILOVER_CREDENTIALS_DIR"


# The mover cannot be built: unknown vendor, bad account settings, a missing credential. The same
# class as the client factory's error, so one except clause covers both.
MoverConfigError = VendorConfigError

# Each HTTP request of the mover's clients: 3 s to connect (a lost SYN is sent again after 1 s), 12 s to
# answer, where the clients' default is 10 + 30 s. The failover calls are small JSON reads and writes
# (OVH and Dedibox start a task and answer; Robot answers once its switch is made). Their sum (15 s)
# must stay under the lease's CALL_MARGIN_SECONDS (20 s, watcher/lease.py): a call the lease let start
# with that much of its window left lands before any contender could take over. A write whose answer
# is lost to the read timeout is read back before it is sent again (providers.retry.verified_write).
MOVER_TIMEOUTS = HttpTimeouts(connect=3.0, read=12.0)
MOVER_TIMING = ClientTiming(timeouts=MOVER_TIMEOUTS)


def check_fits_call_margin(timing: ClientTiming) -> None:
    """MoverConfigError unless one HTTP request on `timing` (connect + read timeout) ends within the
    lease's CALL_MARGIN_SECONDS: the fence lets a move's vendor call start only with that much of its
    window left, and a longer call could land after a contender took the lease over and moved."""
    longest = timing.timeouts.connect + timing.timeouts.read
    if not longest < CALL_MARGIN_SECONDS:
        raise MoverConfigError(
            f"the mover's HTTP timeouts ({timing.timeouts.connect:g}s to connect + {timing.timeouts.read:g}s "
            f"to answer = {longest:g}s) must end within the lease's call margin ({CALL_MARGIN_SECONDS:g}s)"
        )


def min_poll_seconds(vendor: Vendor, *, watchers: int = 1) -> float:
    """The shortest poll interval that keeps `watchers` watchers of one account inside half of the
    vendor's documented request budget for the reads one poll makes. Robot: GET /failover/{ip}
    (100 an hour); its server list (GET /server, 200 an hour) is read once and cached by the
    client. OVH and Dedibox publish no per-call budget for these reads."""
    if vendor is Vendor.ROBOT:
        return min_poll_interval("GET /failover/{ip}", pollers=watchers)
    return 0.0


def parse_vendor(vendor: str | Vendor) -> Vendor:
    try:
        return Vendor(vendor)
    except ValueError:
        known = ", ".join(v.value for v in Vendor)
        raise MoverConfigError(f"vendor {vendor!r} is not one of {known}") from None


def read_credential(directory: Path, key: str) -> str:
    """The credential in file `directory/key`, without the trailing newline an `echo` leaves."""
    path = directory / key
    try:
        value = path.read_text(encoding="utf-8").rstrip("\r\n")
    except FileNotFoundError:
        raise MoverConfigError(
            f"credential file {path} is missing: the mounted vendor credentials Secret has no key {key}"
        ) from None
    except OSError as error:
        raise MoverConfigError(f"credential file {path} cannot be read: {error.strerror}") from None
    if not value:
        raise MoverConfigError(f"credential file {path} is empty")
    return value


class VendorMover:
    """The watcher's Mover over one vendor account.

    The credential files are read on every call, so a rotated Secret (kubelet refreshes mounted
    files in place) takes effect without a restart; the client is rebuilt only when they changed.
    Only a digest of the credentials is kept to notice that.
    """

    def __init__(
        self,
        vendor: Vendor,
        vendors: Vendors,
        credentials_dir: Path,
        timing: ClientTiming | None = None,
    ) -> None:
        self.vendor = vendor
        self.credentials_dir = credentials_dir
        self._vendors = vendors
        self._timing = timing or MOVER_TIMING
        check_fits_call_margin(self._timing)
        self._lock = threading.Lock()
        self._cached: tuple[str, VendorClient] | None = None

    def __repr__(self) -> str:
        return f"VendorMover(vendor={self.vendor.value!r}, credentials_dir={str(self.credentials_dir)!r})"

    def _client(self) -> VendorClient:
        keys = SECRET_KEYS_BY_VENDOR[self.vendor]
        values = {key: read_credential(self.credentials_dir, key) for key in keys}
        digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()
        with self._lock:
            if self._cached is None or self._cached[0] != digest:
                client = vendor_client(self.vendor, self._vendors, values.__getitem__, self._timing)
                self._cached = (digest, client)
            return self._cached[1]

    def failover_target(self, ip: str) -> str | None:
        return self._client().failover_target(ip)

    def move_failover(self, ip: str, box_id: str) -> None:
        self._client().move_failover(ip, box_id)


def _account_problems(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in e['loc']) or '<account>'}: {e['msg']}" for e in error.errors()
    )


def build_mover(
    vendor: str | Vendor,
    *,
    account: Mapping[str, Any] | str,
    credentials_dir: Path | str = DEFAULT_CREDENTIALS_DIR,
    timing: ClientTiming | None = None,
    source: str = "account settings",
) -> VendorMover:
    """A VendorMover for `vendor`, whose account settings are `account` (a mapping or JSON text in
    the shape of config.models' account model) and whose secrets are files in `credentials_dir`.
    `source` names where the account came from in error messages."""
    parsed_vendor = parse_vendor(vendor)
    if isinstance(account, str):
        try:
            account = json.loads(account)
        except ValueError:
            raise MoverConfigError(f"{source}: not JSON") from None
    model = ACCOUNT_MODELS.get(parsed_vendor)
    if model is None:
        movable = ", ".join(v.value for v in ACCOUNT_MODELS)
        raise MoverConfigError(f"vendor {parsed_vendor.value!r} has no failover IPs to move (only {movable})")
    try:
        settings = model.model_validate(account)
    except ValidationError as error:
        raise MoverConfigError(
            f"{source}: not a valid {parsed_vendor.value} account: {_account_problems(error)}"
        ) from None
    vendors = Vendors.model_validate({parsed_vendor.value: settings})
    directory = Path(credentials_dir)
    if not directory.is_dir():
        raise MoverConfigError(f"credentials directory {directory} does not exist (is the Secret mounted?)")
    return VendorMover(parsed_vendor, vendors, directory, timing)


def mover_from_env(env: Mapping[str, str] | None = None, timing: ClientTiming | None = None) -> VendorMover:
    """The mover the watcher Deployment configures: FAILOVER_VENDOR, FAILOVER_VENDOR_ACCOUNT and
    FAILOVER_CREDENTIALS_DIR (default /etc/tuist-failover)."""
    env = os.environ if env is None else env
    for name in (ENV_VENDOR, ENV_ACCOUNT):
        if not env.get(name):
            raise MoverConfigError(f"environment variable {name} is required")
    try:
        vendor = parse_vendor(env[ENV_VENDOR])
    except MoverConfigError as error:
        raise MoverConfigError(f"{ENV_VENDOR}: {error}") from None
    return build_mover(
        vendor,
        account=env[ENV_ACCOUNT],
        credentials_dir=env.get(ENV_CREDENTIALS_DIR) or DEFAULT_CREDENTIALS_DIR,
        timing=timing,
        source=ENV_ACCOUNT,
    )
