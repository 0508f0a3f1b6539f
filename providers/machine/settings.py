"""What a provider's configure() reads from the stack config, and the clients built from it per call.

The provider objects hold nothing (they are pickled into state); the engine calls configure() once
per process with the decrypted stack config, and these Settings live on the configured instance
only, never in state.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from providers import kube
from providers.clients import ClientTiming, VendorAccounts, VendorConfigError, vendor_client
from providers.constants import (
    FLEET_SSH_PRIVATE_KEY,
    FLEET_SUDO_PASSWORD,
    KUBECONFIG,
    PROJECT,
    SECRET_KEYS,
)
from providers.machine.errors import NotConfiguredError
from providers.machine.record import ClaimRecord, KubeClaimRecord, ProcessClaimRecord
from providers.machine.selection import CandidatePools
from providers.machine.spec import Vendor
from providers.ssh.runner import load_private_key
from providers.vendor import VendorClient

CONFIG_VENDORS = "vendors"

# The dev stack has no cluster: the join still runs in full, against this placeholder endpoint.
DEV_API_SERVER = "https://cluster.dev.invalid:6443"

# Retry and poll pacing of the vendor clients the machine providers build (as providers/failover.py's).
# The provider process the engine starts always runs with these defaults; tests that drive the
# providers in their own process shorten the waits (never the attempts) by replacing it.
CLIENT_TIMING = ClientTiming()


@dataclass(frozen=True)
class Settings:
    """The vendor accounts and the stack secrets. Secret fields stay out of repr."""

    accounts: VendorAccounts  # the stack's `vendors`, validated when a client is first built
    secrets: Mapping[str, str] = field(repr=False)
    # The fleets' candidate boxes, listed once per provider process (providers/machine/selection.py).
    pools: CandidatePools = field(default_factory=CandidatePools, repr=False, compare=False)

    @property
    def vendors(self) -> Any:
        """config.models.Vendors."""
        try:
            return self.accounts.parsed
        except VendorConfigError as error:
            raise NotConfiguredError(str(error)) from None

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
        return self.secret(FLEET_SSH_PRIVATE_KEY, why="machines log in to their boxes with the fleet key")

    @property
    def fleet_public_key(self) -> str:
        key = load_private_key(self.fleet_private_key)
        return f"{key.get_name()} {key.get_base64()}"

    @property
    def sudo_password(self) -> str:
        return self.secret(FLEET_SUDO_PASSWORD, why="the self-join and the Dedibox reinstall need it")

    def vendor_client(self, vendor: Vendor) -> VendorClient:
        try:
            return vendor_client(
                vendor,
                self.vendors,
                lambda key: self.secret(key, why=f"the {vendor.value} API needs it"),
                CLIENT_TIMING,
            )
        except VendorConfigError as error:
            raise NotConfiguredError(f"stack config {PROJECT}:{error}") from None

    def kube_api(self, timeout: tuple[float, float] = kube.REQUEST_TIMEOUT) -> Any:
        kubeconfig = self.secret(KUBECONFIG, why="the machine has a cluster to join and leave")
        return kube.api_client(kubeconfig, timeout=timeout)

    def claim_record(self, api_server: str | None) -> ClaimRecord:
        """The cluster's MachineClaim objects when the stack has a cluster, else this process's memory."""
        if api_server:
            return KubeClaimRecord(self.kube_api())
        return ProcessClaimRecord()


def settings_from_config(config: Any) -> Settings:
    """Settings from a pulumi.dynamic.Config (or anything with get(key))."""
    vendors_key = f"{PROJECT}:{CONFIG_VENDORS}"
    secrets = {key: str(config.get(f"{PROJECT}:{key}") or "") for key in SECRET_KEYS}
    return Settings(accounts=VendorAccounts(vendors_key, config.get(vendors_key)), secrets=secrets)


@functools.cache
def dev_placeholder_ca() -> str:
    """A fixed self-signed CA for the dev stack's join (no cluster exists to trust). Derived from a
    public seed, so it is the same every run and the join stays idempotent; it signs nothing."""
    import datetime as dt

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
