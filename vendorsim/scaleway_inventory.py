"""Inventory sections for the Scaleway Elastic Metal and Apple silicon simulators.

Kept apart from inventory.py, which imports them: vendorsim.scaleway_em and vendorsim.applesilicon
import vendorsim.core, which imports the inventory, so the models cannot live there.
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_ZONE = re.compile(r"^[a-z]{2}-[a-z]{3}-[1-9]$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _uuid(v: str) -> str:
    try:
        return str(uuid.UUID(v))
    except ValueError:
        raise ValueError(f"'{v}' is not a UUID") from None


def _ipv4(v: str) -> str:
    try:
        return str(ipaddress.IPv4Address(v))
    except ValueError:
        raise ValueError(f"'{v}' is not an IPv4 address") from None


def _zone(v: str) -> str:
    if not _ZONE.match(v):
        raise ValueError(f"'{v}' is not a Scaleway zone (e.g. fr-par-2)")
    return v


def dupes(values: list[Any]) -> list[Any]:
    seen: set[Any] = set()
    found: list[Any] = []
    for v in values:
        if v in seen and v not in found:
            found.append(v)
        seen.add(v)
    return found


class ScalewayCredentials(_Strict):
    """One API key of one organization, scoped to the project holding Elastic Metal and Macs."""

    access_key: str = Field(pattern=r"^SCW[A-Z0-9]{17}$")
    secret_key: str
    project_id: str
    organization_id: str

    _ids = field_validator("secret_key", "project_id", "organization_id")(_uuid)


class PrivateNetwork(_Strict):
    """A VPC Private Network the operator created (the simulator does not serve the VPC API)."""

    id: str
    name: str = Field(min_length=1)
    region: str = Field(pattern=r"^[a-z]{2}-[a-z]{3}$")

    _id = field_validator("id")(_uuid)


# --- Elastic Metal ------------------------------------------------------------------------------


class EmDisk(_Strict):
    capacity_gb: int = Field(gt=0)
    type: str = "NVMe"


class EmOffer(_Strict):
    id: str
    name: str = Field(min_length=1)
    cpu: str = "AMD Ryzen PRO 3600"
    cores: int = Field(default=6, gt=0)
    memory_gb: int = Field(default=64, gt=0)
    disks: list[EmDisk] = Field(min_length=1)
    bandwidth_mbps: int = Field(default=1000, gt=0)
    price_per_month_eur: float = Field(default=99.99, ge=0)
    # The option that carries Private Network traffic, when the offer has one.
    private_network_option_id: str | None = None
    incompatible_os_ids: list[str] = Field(default_factory=list)

    _ids = field_validator("id")(_uuid)


class EmOS(_Strict):
    id: str
    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    # OSOSField settings: the login user is fixed unless user_editable; the password optional.
    user_default: str = "ubuntu"
    user_editable: bool = False
    password_editable: bool = True
    password_required: bool = False
    enabled: bool = True

    _id = field_validator("id")(_uuid)


class EmServer(_Strict):
    id: str
    name: str = Field(min_length=1)
    zone: str
    offer: str  # offer name
    ip: str
    tags: list[str] = Field(default_factory=list)
    os_id: str | None  # the OS the operator's prep installed; None: delivered bare
    status: str = "ready"
    ssh_port: int = Field(gt=1024, lt=65536)
    ssh_user: str = "ubuntu"
    private_network_option: bool = False  # the Private Network option already enabled

    _id = field_validator("id")(_uuid)
    _ip = field_validator("ip")(_ipv4)
    _z = field_validator("zone")(_zone)


class ElasticMetalAccount(_Strict):
    zones: list[str] = Field(min_length=1)
    offers: list[EmOffer] = Field(min_length=1)
    os: list[EmOS] = Field(min_length=1)
    private_networks: list[PrivateNetwork] = Field(default_factory=list)
    servers: list[EmServer] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> ElasticMetalAccount:
        problems = [f"servers: id {i} appears twice" for i in dupes([s.id for s in self.servers])]
        problems += [f"offers: name {n} appears twice" for n in dupes([o.name for o in self.offers])]
        offers = {o.name for o in self.offers}
        os_ids = {o.id for o in self.os}
        for i, s in enumerate(self.servers):
            if s.zone not in self.zones:
                problems.append(f"servers[{i}].zone: '{s.zone}' is not one of zones {self.zones}")
            if s.offer not in offers:
                problems.append(f"servers[{i}].offer: no offer named '{s.offer}'")
            if s.os_id is not None and s.os_id not in os_ids:
                problems.append(f"servers[{i}].os_id: no os with id {s.os_id}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


# --- Apple silicon ------------------------------------------------------------------------------


class MacServerType(_Strict):
    name: str = Field(min_length=1)  # M2-L, M4-S, ...
    cpu: str = "Apple M2 Pro"
    cores: int = Field(default=12, gt=0)
    memory_gb: int = Field(default=32, gt=0)
    disk_gb: int = Field(default=512, gt=0)
    stock: str = "high_stock"
    bandwidths_bps: list[int] = Field(default_factory=lambda: [1_000_000_000])


class MacOS(_Strict):
    id: str
    name: str = Field(min_length=1)  # macos-tahoe-26.0
    label: str = Field(min_length=1)  # macOS Tahoe 26.0
    family: str = Field(min_length=1)  # Tahoe
    version: str = Field(min_length=1)  # 26.0
    build: str = Field(min_length=1)  # 25A354, what sw_vers prints as BuildVersion
    xcode_version: str = "26.0"
    server_types: list[str] = Field(min_length=1)
    is_beta: bool = False

    _id = field_validator("id")(_uuid)


class MacServer(_Strict):
    id: str
    name: str = Field(min_length=1)
    zone: str
    type: str
    ip: str
    os_id: str
    ssh_port: int = Field(gt=1024, lt=65536)
    ssh_user: str = "m1"
    # Hours since the order: Apple's licence forbids deleting a Mac in its first 24.
    age_hours: float = Field(default=0, ge=0)
    vpc_enabled: bool = False
    kext_enabled: bool = False

    _id = field_validator("id")(_uuid)
    _ip = field_validator("ip")(_ipv4)
    _z = field_validator("zone")(_zone)


class AppleSiliconAccount(_Strict):
    zones: list[str] = Field(min_length=1)
    server_types: list[MacServerType] = Field(min_length=1)
    os: list[MacOS] = Field(min_length=1)
    private_networks: list[PrivateNetwork] = Field(default_factory=list)
    servers: list[MacServer] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> AppleSiliconAccount:
        problems = [f"servers: id {i} appears twice" for i in dupes([s.id for s in self.servers])]
        types = {t.name for t in self.server_types}
        systems = {o.id: o for o in self.os}
        for i, o in enumerate(self.os):
            for t in o.server_types:
                if t not in types:
                    problems.append(f"os[{i}].server_types: no server type '{t}'")
        for i, s in enumerate(self.servers):
            if s.zone not in self.zones:
                problems.append(f"servers[{i}].zone: '{s.zone}' is not one of zones {self.zones}")
            if s.type not in types:
                problems.append(f"servers[{i}].type: no server type '{s.type}'")
            if s.os_id not in systems:
                problems.append(f"servers[{i}].os_id: no os with id {s.os_id}")
            elif s.type not in systems[s.os_id].server_types:
                problems.append(f"servers[{i}].os_id: {systems[s.os_id].name} does not run on {s.type}")
        if problems:
            raise ValueError("; ".join(problems))
        return self
