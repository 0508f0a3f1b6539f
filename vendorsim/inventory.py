"""The inventory file: which accounts, boxes and failover IPs the simulator starts with.

It seeds the SQLite state on first start (or with --reset). The schema is documented in
vendorsim/README.md; a bad file fails with one line per problem naming the YAML path.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from vendorsim.scaleway_inventory import AppleSiliconAccount, ElasticMetalAccount, ScalewayCredentials


class InventoryError(ValueError):
    pass


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _ipv4(v: str) -> str:
    try:
        return str(ipaddress.IPv4Address(v))
    except ValueError:
        raise ValueError(f"'{v}' is not an IPv4 address") from None


def _ssh_public_key(v: str) -> str:
    parts = v.strip().split()
    if len(parts) < 2 or not parts[0].startswith(("ssh-", "ecdsa-")):
        raise ValueError("is not an OpenSSH public key ('<type> <base64> [comment]')")
    return v.strip()


# --- hardware -------------------------------------------------------------------


class BoxHardware(_Strict):
    """What a box's /proc shows (vendorsim/boxes.py): the kubelet's capacity on it."""

    threads: int = Field(gt=0)
    memory_gib: int = Field(gt=0)


# Each offer's CPU threads and memory, from the vendors' product pages. A server of another offer
# lists its `hardware`.
OFFER_HARDWARE: dict[str, BoxHardware] = {
    "AX42-U": BoxHardware(threads=16, memory_gib=64),  # Hetzner: Ryzen 7 PRO 8700GE, 8 cores
    "AX162-R": BoxHardware(threads=96, memory_gib=256),  # Hetzner: EPYC 9454P, 48 cores
    "Advance-1-2024": BoxHardware(threads=12, memory_gib=32),  # OVH: EPYC 4244P, 6 cores
    "Start-1-M-SSD": BoxHardware(threads=8, memory_gib=16),  # Dedibox: Atom C2750, 8 cores
}


def _offer_hardware(offer: str, hardware: BoxHardware | None, field: str) -> BoxHardware:
    if hardware is not None:
        return hardware
    if offer not in OFFER_HARDWARE:
        raise ValueError(
            f"hardware: {field} '{offer}' has no known threads and memory "
            f"(known: {', '.join(OFFER_HARDWARE)}); list them as hardware: {{threads, memory_gib}}"
        )
    return OFFER_HARDWARE[offer]


# --- credentials ----------------------------------------------------------------


class OvhCredentials(_Strict):
    application_key: str = Field(min_length=1)
    application_secret: str = Field(min_length=1)
    consumer_key: str = Field(min_length=1)


class DediboxCredentials(_Strict):
    access_key: str = Field(min_length=1)
    secret_key: str = Field(min_length=1)
    project_id: str = Field(min_length=1)
    organization_id: str = Field(min_length=1)


class RobotCredentials(_Strict):
    username: str = Field(min_length=1)
    password: str = Field(min_length=1)


class Credentials(_Strict):
    ovh: OvhCredentials
    dedibox: DediboxCredentials
    robot: RobotCredentials
    scaleway: ScalewayCredentials | None = None  # Elastic Metal and Apple silicon


class Prep(_Strict):
    """What the operator's prep step left on every preinstalled box (dev only)."""

    fleet_public_key: str
    sudo_password: str = Field(min_length=1)

    _key = field_validator("fleet_public_key")(_ssh_public_key)


# --- OVH ------------------------------------------------------------------------


class OvhDiskGroup(_Strict):
    id: int = Field(ge=1)
    disks: int = Field(ge=0)
    size_gb: int = Field(gt=0)
    type: str = "NVME"


class OvhServer(_Strict):
    service_name: str = Field(min_length=1)
    service_id: int = Field(gt=0)
    display_name: str
    datacenter: str = Field(min_length=1)
    commercial_range: str = Field(min_length=1)
    ip: str
    os: str
    reverse: str | None = None
    disk_groups: list[OvhDiskGroup] = Field(min_length=1)
    ssh_port: int = Field(gt=1024, lt=65536)
    ssh_user: str = "ubuntu"
    # Threads and memory; default: the commercial range's (OFFER_HARDWARE).
    hardware: BoxHardware | None = None

    _ip = field_validator("ip")(_ipv4)

    @model_validator(mode="after")
    def _known_hardware(self) -> OvhServer:
        _offer_hardware(self.commercial_range, self.hardware, "commercial_range")
        return self

    @property
    def box_hardware(self) -> BoxHardware:
        return _offer_hardware(self.commercial_range, self.hardware, "commercial_range")


class OvhFailoverIP(_Strict):
    ip: str
    routed_to: str | None = None

    _ip = field_validator("ip")(_ipv4)


class OvhAccount(_Strict):
    templates: list[str] = Field(min_length=1)
    personal_templates: list[str] = Field(default_factory=list)
    servers: list[OvhServer] = Field(default_factory=list)
    failover_ips: list[OvhFailoverIP] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> OvhAccount:
        names = [s.service_name for s in self.servers]
        problems = [f"servers: service_name '{n}' appears twice" for n in _dupes(names)]
        problems += [
            f"servers: service_id {i} appears twice" for i in _dupes([s.service_id for s in self.servers])
        ]
        for i, s in enumerate(self.servers):
            if s.os not in self.templates + self.personal_templates:
                problems.append(f"servers[{i}].os: '{s.os}' is not in templates")
        for i, f in enumerate(self.failover_ips):
            if f.routed_to is not None and f.routed_to not in names:
                problems.append(f"failover_ips[{i}].routed_to: no server named '{f.routed_to}'")
        if problems:
            raise ValueError("; ".join(problems))
        return self


# --- Dedibox --------------------------------------------------------------------


class DediboxOS(_Strict):
    id: int = Field(gt=0)
    name: str
    version: str
    type: str = "server"
    arch: str = "64bits"
    requires_user: bool = False
    requires_admin_password: bool = False
    requires_panel_password: bool = False
    allow_ssh_keys: bool = True
    allow_custom_partitioning: bool = False
    max_partitions: int = 0


class DediboxServer(_Strict):
    id: int = Field(gt=0)
    hostname: str = Field(min_length=1)
    zone: str
    datacenter: str = Field(min_length=1)
    offer: str = Field(min_length=1)
    offer_id: int = 1
    ip: str
    tags: list[str] = Field(default_factory=list)
    os_id: int | None
    ssh_port: int = Field(gt=1024, lt=65536)
    ssh_user: str = "ubuntu"
    # Threads and memory; default: the offer's (OFFER_HARDWARE).
    hardware: BoxHardware | None = None

    _ip = field_validator("ip")(_ipv4)

    @model_validator(mode="after")
    def _known_hardware(self) -> DediboxServer:
        _offer_hardware(self.offer, self.hardware, "offer")
        return self

    @property
    def box_hardware(self) -> BoxHardware:
        return _offer_hardware(self.offer, self.hardware, "offer")


class DediboxFailoverIP(_Strict):
    id: int = Field(gt=0)
    address: str
    zone: str
    server_id: int | None = None

    _ip = field_validator("address")(_ipv4)


class DediboxAccount(_Strict):
    zones: list[str] = Field(min_length=1)
    os: list[DediboxOS] = Field(min_length=1)
    servers: list[DediboxServer] = Field(default_factory=list)
    failover_ips: list[DediboxFailoverIP] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> DediboxAccount:
        ids = {s.id for s in self.servers}
        os_ids = {o.id for o in self.os}
        problems = [f"servers: id {i} appears twice" for i in _dupes([s.id for s in self.servers])]
        problems += [f"failover_ips: id {i} appears twice" for i in _dupes([f.id for f in self.failover_ips])]
        for i, s in enumerate(self.servers):
            if s.zone not in self.zones:
                problems.append(f"servers[{i}].zone: '{s.zone}' is not one of zones {self.zones}")
            if s.os_id is not None and s.os_id not in os_ids:
                problems.append(f"servers[{i}].os_id: no os with id {s.os_id}")
        for i, f in enumerate(self.failover_ips):
            if f.zone not in self.zones:
                problems.append(f"failover_ips[{i}].zone: '{f.zone}' is not one of zones {self.zones}")
            if f.server_id is not None and f.server_id not in ids:
                problems.append(f"failover_ips[{i}].server_id: no server with id {f.server_id}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


# --- Robot ----------------------------------------------------------------------


class RobotDisk(_Strict):
    name: str = Field(pattern=r"^(nvme[0-9]+n[0-9]+|sd[a-z]+)$")
    size: int = Field(gt=0)  # bytes, as lsblk --bytes prints them


# What each product ships with when the inventory lists no disks (Hetzner's product pages).
PRODUCT_DISKS: dict[str, tuple[RobotDisk, ...]] = {
    "AX42-U": (RobotDisk(name="nvme0n1", size=512110190592), RobotDisk(name="nvme1n1", size=512110190592)),
    "AX162-R": (
        RobotDisk(name="nvme0n1", size=1920383410176),
        RobotDisk(name="nvme1n1", size=1920383410176),
    ),
}


class RobotServer(_Strict):
    number: int = Field(gt=0)
    server_name: str
    product: str = Field(min_length=1)
    dc: str = Field(min_length=1)
    ip: str
    ssh_port: int = Field(gt=1024, lt=65536)
    ssh_user: str = "root"
    # The disks lsblk lists in the rescue system; default: the product's (PRODUCT_DISKS).
    disks: list[RobotDisk] | None = None
    # Threads and memory; default: the product's (OFFER_HARDWARE).
    hardware: BoxHardware | None = None

    _ip = field_validator("ip")(_ipv4)

    @model_validator(mode="after")
    def _has_disks(self) -> RobotServer:
        if self.disks is None and self.product not in PRODUCT_DISKS:
            raise ValueError(
                f"disks: product '{self.product}' has no default disks "
                f"(known: {', '.join(PRODUCT_DISKS)}); list them"
            )
        if self.disks is not None:
            if not self.disks:
                raise ValueError("disks: a server needs at least one disk")
            if _dupes([d.name for d in self.disks]):
                raise ValueError(
                    f"disks: disk names appear twice: {', '.join(_dupes([d.name for d in self.disks]))}"
                )
        return self

    @model_validator(mode="after")
    def _known_hardware(self) -> RobotServer:
        _offer_hardware(self.product, self.hardware, "product")
        return self

    @property
    def hardware_disks(self) -> tuple[RobotDisk, ...]:
        return tuple(self.disks) if self.disks is not None else PRODUCT_DISKS[self.product]

    @property
    def box_hardware(self) -> BoxHardware:
        return _offer_hardware(self.product, self.hardware, "product")


class RobotFailoverIP(_Strict):
    ip: str
    server_number: int
    active_server_ip: str | None = None

    _ip = field_validator("ip")(_ipv4)


class RobotAccount(_Strict):
    servers: list[RobotServer] = Field(default_factory=list)
    failover_ips: list[RobotFailoverIP] = Field(default_factory=list)
    # "METHOD /route" -> max requests per hour; defaults follow the documented limits.
    rate_limits: dict[str, int] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _references(self) -> RobotAccount:
        numbers = {s.number for s in self.servers}
        ips = {s.ip for s in self.servers}
        problems = [f"servers: number {n} appears twice" for n in _dupes([s.number for s in self.servers])]
        for i, f in enumerate(self.failover_ips):
            if f.server_number not in numbers:
                problems.append(f"failover_ips[{i}].server_number: no server {f.server_number}")
            if f.active_server_ip is not None and f.active_server_ip not in ips:
                problems.append(f"failover_ips[{i}].active_server_ip: no server has IP {f.active_server_ip}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class Inventory(_Strict):
    credentials: Credentials
    prep: Prep
    ovh: OvhAccount
    dedibox: DediboxAccount
    robot: RobotAccount
    scaleway_em: ElasticMetalAccount | None = None
    applesilicon: AppleSiliconAccount | None = None
    # Faults active from the start (the shape of POST /_admin/faults); none in the dev inventory.
    faults: list[dict[str, Any]] = Field(default_factory=list)
    # Vendor behaviours the documentation leaves open (vendorsim/faults.py BEHAVIOURS): name -> value.
    behaviour: dict[str, str] = Field(default_factory=dict)

    @field_validator("faults")
    @classmethod
    def _faults(cls, faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from vendorsim.faults import Faults, FaultSpecError

        problems = []
        for i, spec in enumerate(faults):
            try:
                Faults().add(dict(spec))
            except FaultSpecError as e:
                problems.append(f"[{i}]: {e}")
        if problems:
            raise ValueError("; ".join(problems))
        return faults

    @field_validator("behaviour")
    @classmethod
    def _behaviour(cls, behaviour: dict[str, str]) -> dict[str, str]:
        from vendorsim.faults import Behaviour, FaultSpecError

        try:
            Behaviour(dict(behaviour))
        except FaultSpecError as e:
            raise ValueError(str(e)) from None
        return behaviour

    @model_validator(mode="after")
    def _scaleway_credentials(self) -> Inventory:
        scaleway = self.credentials.scaleway
        if (self.scaleway_em or self.applesilicon) and scaleway is None:
            raise ValueError("credentials.scaleway: required by scaleway_em / applesilicon")
        if scaleway is not None and scaleway.organization_id != self.credentials.dedibox.organization_id:
            # One Scaleway organization, one IAM: the ssh keys both mounts serve are the same store.
            raise ValueError("credentials.scaleway.organization_id: must be the Dedibox organization's")
        return self

    @model_validator(mode="after")
    def _unique_ips(self) -> Inventory:
        # Each box's sshd listens on its own IP (ListenAddress), so boxes may share an ssh_port and
        # unique IPs are all it takes for every SSH endpoint to be unique.
        problems = []
        ips = [s.ip for s in self.ovh.servers] + [s.ip for s in self.dedibox.servers]
        ips += [s.ip for s in self.robot.servers]
        ips += [f.ip for f in self.ovh.failover_ips] + [f.address for f in self.dedibox.failover_ips]
        ips += [f.ip for f in self.robot.failover_ips]
        ips += [s.ip for s in self.scaleway_em.servers] if self.scaleway_em else []
        ips += [s.ip for s in self.applesilicon.servers] if self.applesilicon else []
        problems += [f"ip {ip} is used twice" for ip in _dupes(ips)]
        if problems:
            raise ValueError("; ".join(problems))
        return self


def box_hardware(inventory: Inventory) -> dict[str, BoxHardware]:
    """Box key (as the vendor modules name boxes) -> its threads and memory, for every box.

    Elastic Metal boxes have their offer's: two threads per core (every offer's CPU runs SMT) and its
    memory. Macs have their server type's: Apple silicon has no SMT, so one thread per core."""
    found = {f"ovh-{s.service_name}": s.box_hardware for s in inventory.ovh.servers}
    found.update({f"dedibox-{s.id}": s.box_hardware for s in inventory.dedibox.servers})
    found.update({f"robot-{s.number}": s.box_hardware for s in inventory.robot.servers})
    if inventory.scaleway_em is not None:
        offers = {o.name: o for o in inventory.scaleway_em.offers}
        found.update(
            {
                f"em-{s.id}": BoxHardware(
                    threads=offers[s.offer].cores * 2, memory_gib=offers[s.offer].memory_gb
                )
                for s in inventory.scaleway_em.servers
            }
        )
    if inventory.applesilicon is not None:
        types = {t.name: t for t in inventory.applesilicon.server_types}
        found.update(
            {
                f"mac-{s.id}": BoxHardware(threads=types[s.type].cores, memory_gib=types[s.type].memory_gb)
                for s in inventory.applesilicon.servers
            }
        )
    return found


def _dupes(values: list[Any]) -> list[Any]:
    seen: set[Any] = set()
    dupes = []
    for v in values:
        if v in seen and v not in dupes:
            dupes.append(v)
        seen.add(v)
    return dupes


def load_inventory(path: Path) -> Inventory:
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise InventoryError(f"inventory {path}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise InventoryError(f"inventory {path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise InventoryError(f"inventory {path}: the top level must be a mapping")
    try:
        return Inventory.model_validate(raw)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".")
            msg = err["msg"].removeprefix("Value error, ")
            lines.append(f"  {where or '(top level)'}: {msg}")
        raise InventoryError(f"inventory {path} is invalid:\n" + "\n".join(lines)) from None
