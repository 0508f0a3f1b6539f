"""The stack the operator's CLI works on: its config and secrets exactly as the program reads them, its
state, its vendor clients and its cluster.

Config and secrets come from the Pulumi CLI (`pulumi config --show-secrets --json -s STACK`, decrypted
by the stack's own secrets provider: the passphrase or KMS the operator already uses for `pulumi up`),
and are parsed by the program's own loader (config/loader.py). There is no second credentials file.
Secret values live only in `Stack.settings` (kept out of repr); every message the CLI prints passes
through `Stack.scrub`.

State comes from `pulumi stack export -s STACK` (secret outputs stay ciphertext there: the CLI reads
only box ids and claim tokens, which are not secret).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from config.loader import load_stack_config, read_stack_file
from config.models import Fleet, StackConfig
from config.problems import ConfigError
from providers.claims import claim_token
from providers.clients import ClientTiming, vendor_client
from providers.constants import KUBECONFIG, PROJECT, SECRET_KEYS
from providers.errors import VendorConfigError, scrub
from providers.machine.errors import NotConfiguredError
from providers.machine.settings import Settings, settings_from_config
from providers.retry import PollPolicy, RetryPolicy
from providers.vendor import Vendor, VendorClient

CLAIM_TYPE = "pulumi-python:dynamic/machine:MachineClaim"
MACHINE_TYPE = "pulumi-python:dynamic/machine:AdoptedMachine"
FAILOVER_TYPE = "pulumi-python:dynamic/failover:FailoverIP"
# Slots past a fleet's size are still looked for when decoding claim tokens: a fleet that shrank may
# have left claims of its old slots behind (that is what `orphans` is for).
EXTRA_SLOTS = 16

# An operator waits on a terminal: fewer, shorter retries than a deploy, so a dead API is said soon.
CLI_TIMING = ClientTiming(
    retry=RetryPolicy(max_attempts=4, max_delay=5.0, base_delay=0.5),
    poll=PollPolicy(first=1.0, factor=1.5, max_interval=10.0),
    task_timeout=900.0,
)


class OpsError(Exception):
    """What the CLI tells the operator on one line before it exits non-zero. Never holds a secret."""


class StackSource(Protocol):
    """Where a stack's config and state come from: the Pulumi CLI, or (tests) a fixed mapping."""

    name: str

    def config(self) -> Mapping[str, Any]:
        """`tuist-infra:<key>` -> value, secrets decrypted, structured values as objects."""
        ...

    def resources(self) -> list[Mapping[str, Any]]:
        """The stack's resources as `pulumi stack export` lists them."""
        ...

    def close(self) -> None:
        """Stop whatever the source still has running (the CLI is done with the stack)."""
        ...


PROJECT_FILE = "Pulumi.yaml"


def find_project_dir(start: Path | None = None) -> Path:
    """The project's root as the Pulumi CLI finds it: the nearest of `start` (the working directory)
    and its ancestors that holds Pulumi.yaml. Its stack files (Pulumi.<stack>.yaml) are beside it."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / PROJECT_FILE).is_file():
            return directory
    raise OpsError(
        f"no {PROJECT_FILE} in {here} or any directory above it: run tuist-ops inside the project "
        "(the repository's checkout)"
    )


# How long one read of the stack through the Pulumi CLI may take (a slow S3 or KMS), in seconds.
CLI_READ_TIMEOUT = 300
KUBE_TIMEOUT = 5.0  # seconds per cluster call: an unreachable cluster is said, not waited for


class PulumiStack:
    """The stack through the Pulumi CLI on PATH, in `cwd` (the project directory).

    The state export starts beside the config read: the two are separate CLI runs of about half a
    second each, and most commands need both, so the operator waits for one."""

    def __init__(self, name: str, cwd: Path | None = None, pulumi: str = "pulumi") -> None:
        self.name = name
        self.cwd = cwd or Path.cwd()
        self.pulumi = pulumi
        self._resources: list[Mapping[str, Any]] | None = None
        self._export: subprocess.Popen[str] | None = None

    def _start(self, *args: str) -> subprocess.Popen[str]:
        command = [self.pulumi, *args, "-s", self.name, "--non-interactive"]
        try:
            return subprocess.Popen(
                command, cwd=self.cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        except FileNotFoundError:
            raise OpsError(
                f"the Pulumi CLI ({self.pulumi}) is not on PATH: `source scripts/env.sh` first"
            ) from None

    def _finish(self, what: str, running: subprocess.Popen[str]) -> str:
        try:
            stdout, stderr = running.communicate(timeout=CLI_READ_TIMEOUT)
        except subprocess.TimeoutExpired:
            running.kill()
            running.communicate()
            raise OpsError(f"pulumi {what} -s {self.name} did not answer in {CLI_READ_TIMEOUT} s") from None
        if running.returncode != 0:
            # Pulumi's own errors name no secret; keep the first line that says what went wrong.
            lines = [line.strip() for line in stderr.splitlines() if line.strip()]
            why = next(
                (line for line in lines if line.lower().startswith("error")), lines[0] if lines else ""
            )
            raise OpsError(f"pulumi {what} -s {self.name} failed: {why or f'exit {running.returncode}'}")
        return stdout

    def config(self) -> Mapping[str, Any]:
        if self._resources is None and self._export is None:
            self._export = self._start("stack", "export")
        try:
            raw = json.loads(self._finish("config", self._start("config", "--show-secrets", "--json")))
        except BaseException:
            self.close()
            raise
        values: dict[str, Any] = {}
        for key, entry in raw.items():
            if isinstance(entry, Mapping):
                values[key] = _config_value(key, entry)
        return values

    def resources(self) -> list[Mapping[str, Any]]:
        if self._resources is None:
            running, self._export = self._export or self._start("stack", "export"), None
            exported = json.loads(self._finish("stack export", running))
            self._resources = list((exported.get("deployment") or {}).get("resources") or [])
        return self._resources

    def close(self) -> None:
        """An export started early and never read (a command that needs no state) is stopped."""
        running, self._export = self._export, None
        if running is not None:
            running.kill()
            running.communicate()


def _config_value(key: str, entry: Mapping[str, Any]) -> Any:
    """A value as the program's loader reads it (config/loader.py `_read_value`): `environment` as
    text; structured values as objects (`objectValue`; a bare `false` comes as text and is parsed);
    secrets exactly as stored."""
    if "objectValue" in entry:
        return entry["objectValue"]
    value = entry.get("value")
    if entry.get("secret") or key.endswith(":environment") or not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


@dataclass
class StaticStack:
    """A stack given as data (tests; a stack whose config was read elsewhere)."""

    name: str
    values: Mapping[str, Any] = field(repr=False)
    state: list[Mapping[str, Any]] = field(default_factory=list)

    def config(self) -> Mapping[str, Any]:
        return self.values

    def resources(self) -> list[Mapping[str, Any]]:
        return self.state

    def close(self) -> None:
        return None


class _ConfigView:
    """What settings_from_config reads: `get("tuist-infra:<key>")`, structured values as JSON text."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = values

    def get(self, key: str) -> Any:
        value = self._values.get(key)
        return json.dumps(value) if isinstance(value, (dict, list)) else value


@dataclass(frozen=True)
class Slot:
    """A MachineClaim of the stack's state: which box its outputs say it holds, with which token."""

    urn: str
    resource: str  # the slot's name (<fleet>-<i>): what the claim token derives from
    fleet: str
    vendor: Vendor
    box_id: str
    token: str

    @property
    def short_urn(self) -> str:
        return self.urn.rsplit("::", 1)[-1]


@dataclass(frozen=True)
class Holder:
    """Who a claim token names, as far as it can be told: a stack and a slot, or nobody known."""

    token: str
    stack: str | None = None
    resource: str | None = None
    fleet: str | None = None  # the fleet whose slot `resource` is

    def __str__(self) -> str:
        if self.stack is None:
            return f"unknown ({self.token})"
        return f"{self.stack}/{self.resource}"


@dataclass
class Stack:
    """One stack: typed config, the secrets (in `settings`, never printed), state, and clients."""

    name: str
    cfg: StackConfig
    settings: Settings = field(repr=False)
    source: StackSource = field(repr=False)
    timing: ClientTiming = CLI_TIMING
    project_dir: Path = field(default_factory=find_project_dir)
    _clients: dict[Vendor, VendorClient] = field(default_factory=dict, repr=False)
    _state_tokens: dict[str, Holder] | None = field(default=None, repr=False)
    _project_stacks: dict[str, Mapping[str, Any]] | None = field(default=None, repr=False)
    # Where a command says what it could not read but went on without (the CLI's stderr).
    warn: Callable[[str], None] = field(default=lambda _line: None, repr=False)

    # --- secrets ------------------------------------------------------------------------------------

    def secret_values(self) -> list[str]:
        values = list(self.settings.secret_values())
        # A key's body is secret too, line by line.
        for value in list(values):
            values += [line for line in value.splitlines() if len(line) > 20 and "-----" not in line]
        return values

    def scrub(self, text: str) -> str:
        return scrub(text, self.secret_values(), limit=None)

    # --- vendors ------------------------------------------------------------------------------------

    def vendors(self) -> list[Vendor]:
        """The vendors of the stack: those with an account in `vendors`, in Vendor order."""
        accounts = self.cfg.vendors
        return [v for v in Vendor if getattr(accounts, v.value) is not None]

    def client(self, vendor: Vendor) -> VendorClient:
        if vendor not in self._clients:
            self._clients[vendor] = self.new_client(vendor)
        return self._clients[vendor]

    def new_client(self, vendor: Vendor) -> VendorClient:
        """A client of its own (its own HTTP session), for a thread reading beside a call in flight."""
        try:
            return vendor_client(
                vendor,
                self.settings.vendors,
                lambda key: self.settings.secret(key, why=f"the {vendor.value} API needs it"),
                self.timing,
            )
        except (VendorConfigError, NotConfiguredError) as error:
            raise OpsError(f"stack {self.name}: {error}") from None

    def fleets_of(self, vendor: Vendor) -> list[Fleet]:
        return [f for f in self.cfg.fleets if f.vendor is vendor]

    def fleet(self, name: str) -> Fleet:
        for fleet in self.cfg.fleets:
            if fleet.name == name:
                return fleet
        known = ", ".join(f.name for f in self.cfg.fleets) or "none"
        raise OpsError(f"stack {self.name} has no fleet {name!r} (fleets: {known})")

    # --- state --------------------------------------------------------------------------------------

    def slots(self) -> list[Slot]:
        """Every MachineClaim in the stack's state that holds a box."""
        slots = []
        for resource in self.source.resources():
            if resource.get("type") != CLAIM_TYPE:
                continue
            outputs = resource.get("outputs") or {}
            inputs = resource.get("inputs") or {}
            box_id, token = outputs.get("box_id"), outputs.get("claim_token")
            if not isinstance(box_id, str) or not isinstance(token, str) or not box_id:
                continue
            try:
                vendor = Vendor(str(outputs.get("vendor") or inputs.get("vendor")))
            except ValueError:
                continue
            slots.append(
                Slot(
                    urn=str(resource.get("urn")),
                    resource=str(inputs.get("resource_name") or outputs.get("resource_name") or ""),
                    fleet=str(inputs.get("fleet") or outputs.get("fleet") or ""),
                    vendor=vendor,
                    box_id=box_id,
                    token=token,
                )
            )
        return slots

    def urns_of_type(self, type_: str) -> list[str]:
        return [str(r.get("urn")) for r in self.source.resources() if r.get("type") == type_]

    # --- claim tokens -------------------------------------------------------------------------------

    def holders(self) -> dict[str, Holder]:
        """token -> holder for every slot any stack of this project has or may have had: this stack's
        state, and every fleet slot (and EXTRA_SLOTS past its size) of every Pulumi.<stack>.yaml in the
        project's root (`project_dir`). A claim token is a hash of project/stack/slot, so this is how
        it is read back."""
        if self._state_tokens is None:
            known: dict[str, Holder] = {}
            stacks: dict[str, Sequence[Mapping[str, Any]]] = {self.name: self._fleet_dicts(self.cfg)}
            for other, raw in self.project_stacks().items():
                if other not in stacks:
                    stacks[other] = [f for f in raw.get("fleets") or [] if isinstance(f, Mapping)]
            for stack, fleets in stacks.items():
                for fleet in fleets:
                    name, size = str(fleet.get("name") or ""), fleet.get("size")
                    count = (size if isinstance(size, int) else 0) + EXTRA_SLOTS
                    for index in range(count):
                        resource = f"{name}-{index}"
                        token = claim_token(PROJECT, stack, resource)
                        known[token] = Holder(token, stack, resource, name)
            for slot in self.slots():
                known[slot.token] = Holder(slot.token, self.name, slot.resource, slot.fleet)
            self._state_tokens = known
        return self._state_tokens

    def project_stacks(self) -> dict[str, Mapping[str, Any]]:
        """stack -> its Pulumi.<stack>.yaml's values, for every stack file of the project that reads
        as one (an unreadable file is left out). Read once per command: an inventory asks for every
        box, and parsing the project's stack files per box was most of its time."""
        if self._project_stacks is None:
            stacks: dict[str, Mapping[str, Any]] = {}
            for path in sorted(self.project_dir.glob("Pulumi.*.yaml")):
                try:
                    stacks[path.name[len("Pulumi.") : -len(".yaml")]] = read_stack_file(path)
                except (ConfigError, OSError, ValueError) as error:
                    problem = "; ".join(error.problems) if isinstance(error, ConfigError) else str(error)
                    self.warn(
                        f"{path.name} skipped ({problem}): claims of its stack read as unknown, and "
                        "its markers as no other environment's"
                    )
            self._project_stacks = stacks
        return self._project_stacks

    def holder(self, token: str) -> Holder:
        return self.holders().get(token, Holder(token))

    def configured_slots(self) -> set[str]:
        """The slots this stack's config has now (`<fleet>-<i>` below each enabled fleet's size): a
        claim of one that state does not hold is one its next `pulumi up` resumes."""
        return {f"{f.name}-{i}" for f in self.cfg.fleets if f.enabled for i in range(f.size)}

    @staticmethod
    def _fleet_dicts(cfg: StackConfig) -> list[Mapping[str, Any]]:
        return [{"name": f.name, "size": f.size} for f in cfg.fleets]

    def other_environment_markers(self, vendor: Vendor) -> dict[str, str]:
        """marker -> stack of every `vendor` fleet marker of the project's other stacks whose
        environment is not this one's: a box carrying one belongs to another environment."""
        markers: dict[str, str] = {}
        for other, raw in self.project_stacks().items():
            if other == self.name or raw.get("environment") == self.cfg.environment.value:
                continue
            for fleet in raw.get("fleets") or []:
                if (
                    isinstance(fleet, Mapping)
                    and fleet.get("vendor") == vendor.value
                    and isinstance(fleet.get("marker"), str)
                ):
                    markers[fleet["marker"]] = other
        return markers

    # --- cluster ------------------------------------------------------------------------------------

    def kube_api(self) -> Any | None:
        """A kubernetes ApiClient for the stack's cluster, or None when the stack has none. Its calls
        give up after KUBE_TIMEOUT: an unreachable cluster is said, not waited on."""
        if not self.cfg.cluster.api_server or not self.settings.secrets.get(KUBECONFIG):
            return None
        return self.settings.kube_api(timeout=(KUBE_TIMEOUT, KUBE_TIMEOUT))


def open_stack(
    source: StackSource, *, timing: ClientTiming = CLI_TIMING, project_dir: Path | None = None
) -> Stack:
    """The stack's config parsed by the program's loader; one OpsError naming every problem.
    `project_dir` defaults to the project holding the working directory (find_project_dir), found
    before the config is read: the Pulumi CLI's own error for a directory outside it says less."""
    project_dir = project_dir or find_project_dir()
    raw = source.config()
    prefix = f"{PROJECT}:"
    plain = {
        key[len(prefix) :]: value
        for key, value in raw.items()
        if key.startswith(prefix) and key[len(prefix) :] not in SECRET_KEYS
    }
    try:
        cfg = load_stack_config(plain, stack=source.name)
    except ConfigError as error:
        raise OpsError(f"stack {source.name}: its config has problems: {'; '.join(error.problems)}") from None
    settings = settings_from_config(_ConfigView(raw))
    return Stack(
        name=source.name,
        cfg=cfg,
        settings=settings,
        source=source,
        timing=timing,
        # Where the Pulumi CLI finds the project from where it runs (searching upward); so does this.
        project_dir=project_dir,
    )


def first_line(text: str) -> str:
    lines = [line for line in str(text).splitlines() if line.strip()]
    return lines[0].strip() if lines else ""
