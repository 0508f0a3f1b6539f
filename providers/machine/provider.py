"""The dynamic providers of MachineClaim and AdoptedMachine.

MachineClaim    create = select + claim (recorded in state before anything slow);
                delete = release (reinstall back to the pool, then clear the claim);
                read   = the box behind the resource id, still claimed by this holder, or gone.
AdoptedMachine  create = (Robot: install) + join, resuming at the state the claim's record holds;
                update = rerun the join when an input the kubelet reads changed, else state only;
                delete = leave the cluster (cordon, drain, delete the Node and its node-local PVCs);
                read   = the box behind the id, still this holder's, and (with a cluster) its Node.

The provider objects hold nothing: they are pickled into every resource's `__provider`, so
credentials reach them only through `configure()` and clients are built per call.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pulumi.dynamic as dyn
from pulumi.dynamic.dynamic import PROVIDER_KEY

from providers import kube
from providers.errors import NotFoundError
from providers.machine import engine_link
from providers.machine.errors import (
    AmbiguousNodeError,
    ClaimLostError,
    MachineInputError,
    MarkerChangeError,
    NotConfiguredError,
    ReleaseRefusedError,
    ReleaseUnfinishedError,
    UnrecordedNodeError,
)
from providers.machine.fsm import DONE, Clock, Run, Runner, SystemClock
from providers.machine.record import ClaimHeldError, ClaimRecord, Holder, Phase, Progress
from providers.machine.release import (
    install_resume_state,
    leave_refusal,
    release_refusal,
    release_table,
    resume_state,
)
from providers.machine.robot_install import INSTALL_STATES
from providers.machine.selection import claim_box, confirm_gone
from providers.machine.settings import Settings, settings_from_config
from providers.machine.spec import (
    JOINING,
    LEAVING,
    ClaimSpec,
    MachineSpec,
    Vendor,
    claim_diff,
    claim_input_problems,
    machine_diff,
    machine_input_problems,
    node_name_for,
    parse_claim,
    parse_machine,
    parse_resource_id,
    provider_id_for,
    rejoin_needed,
    resource_id,
)
from providers.machine.states import (
    OLD_PRIVATE_NETWORK,
    PIN,
    REGISTERED,
    adopt_start,
    adopt_table,
    join_start,
    leave_table,
    rejoin_table,
)
from providers.ssh.robot_install import ArtifactPins
from providers.ssh.runner import SshTarget
from providers.vendor import ON_NETWORK, Box, private_network_reader

CLAIM_OUTPUTS = (
    "box_id",
    "box_name",
    "datacenter",
    "public_ipv4",
    "provider_id",
    "node_name",
    "claim_token",
    "record",
    "state",
    "release_allowed",
)
MACHINE_OUTPUTS = ("node_name", "host_key_fingerprint", "node_registered", "state")


class _Stateless(dyn.ResourceProvider):
    # Nothing secret is captured (the instance holds nothing), so __provider need not be a secret.
    serialize_as_secret_always = False
    # Tests inject a fake clock on a configured instance; it is never pickled (see __getstate__).
    clock: Clock = SystemClock()

    def __getstate__(self) -> dict[str, Any]:
        # Even a configured instance pickles without its settings: state holds a class reference only.
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        return None

    def configure(self, req: dyn.ConfigureRequest) -> None:
        self._settings = settings_from_config(req.config)
        # Run by the engine: serve more than the SDK's four calls at once, and if the engine goes away,
        # hang up SSH and exit (engine_link).
        engine_link.serve_wide()
        engine_link.watch_engine()

    def _config(self) -> Settings:
        settings: Settings | None = getattr(self, "_settings", None)
        if settings is None:
            raise NotConfiguredError("the machine provider was not configured with the stack config")
        return settings

    def _run(
        self,
        name: str,
        vendor: Vendor,
        box_id: str,
        inputs: ClaimSpec | MachineSpec,
        urn: str | None,
        **extra: Any,
    ) -> Run:
        settings = self._config()
        return Run(
            machine=name,
            vendor=vendor,
            box_id=box_id,
            box_label=f"{vendor.value} box {box_id}",
            timeout=inputs.timeout,
            clock=self.clock,
            log=lambda message: engine_link.progress(message, urn),
            secrets=settings.secret_values(),
            extra={"settings": settings, **extra},
        )


def _outputs(props: dict[str, Any], **values: Any) -> dict[str, Any]:
    outs = {k: v for k, v in props.items() if k != PROVIDER_KEY}
    outs.update(values)
    return outs


def _record_release_switches(record: ClaimRecord, progress: Progress, allowed: bool) -> bool:
    """Write `allowed` into the box's record (made if missing); returns what the record then says. A
    record written meanwhile (a machine's state moved on) is read again: the switches are a fact of
    their own, not a state of the run."""
    for _ in range(3):
        held = record.acquire(progress)
        if held.release_allowed == allowed:
            return allowed
        try:
            return record.save(replace(held, release_allowed=allowed)).release_allowed
        except ClaimLostError:
            continue
    raise ClaimLostError(
        f"{progress.name}: the claim record kept changing while its release switches were recorded"
    )


def artifact_pins(spec: ClaimSpec | MachineSpec, props: dict[str, Any], resource: str) -> ArtifactPins:
    """The pins a Robot install of the fleet downloads with; refuses (before any vendor write) while
    Kata is unpinned."""
    pins = props.get("install_artifacts") or {}
    if not isinstance(pins, dict) or not pins.get("kata_static_sha256"):
        kata = str(pins.get("kata_static_url") or "kata-static") if isinstance(pins, dict) else "kata-static"
        raise MachineInputError(
            f"{resource}: refusing to install a robot box: "
            f"tuist-infra:fleets[name={spec.fleet}].install_artifacts.kata_static_sha256: required: "
            f"pin the sha256 of {kata.rsplit('/', 1)[-1]} before a Robot box can be installed"
        )
    try:
        return ArtifactPins(
            **{
                key: str(pins[key])
                for key in (
                    "runc_url",
                    "runc_sha256",
                    "containerd_url",
                    "containerd_sha256",
                    "kata_static_url",
                    "kata_static_sha256",
                )
            }
        )
    except KeyError as missing:
        raise MachineInputError(f"{resource}: install_artifacts lacks {missing}") from None


# --- MachineClaim ---------------------------------------------------------------------------------------


class ClaimProvider(_Stateless):
    """The dynamic provider behind MachineClaim."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        failures = [dyn.CheckFailure(key, reason) for key, reason in claim_input_problems(news)]
        return dyn.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        result = claim_diff(olds, news)
        if olds.get("marker") != news.get("marker") and not result.replaces:
            engine_link.progress(
                f"{news.get('resource_name')}: the fleet's marker changed to {news.get('marker')}: the "
                f"update checks that {olds.get('vendor')} box {olds.get('box_id')} carries it, and refuses "
                "(never releases) a box that does not",
                news.get("urn"),
                ephemeral=False,
                warning=True,
            )
        if result.replaces:
            box = olds.get("box_id")
            engine_link.progress(
                f"{news.get('resource_name')}: {', '.join(result.replaces or [])} changed: the claim of "
                f"{olds.get('vendor')} box {box} is released (the box is reinstalled), another claimed",
                news.get("urn"),
                ephemeral=False,
                warning=True,
            )
        return result

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        spec = parse_claim(props)
        settings = self._config()
        if spec.vendor is Vendor.ROBOT:
            # Refuse before any vendor write: an install without its pins must not leave a claim behind.
            artifact_pins(spec, props, spec.resource_name)
        client = settings.vendor_client(spec.vendor)
        record = settings.claim_record(spec.api_server)

        def log(message: str) -> None:
            engine_link.progress(message, spec.urn)

        budget = spec.timeout("claiming")
        log(f"{spec.resource_name}: CLAIMING on {spec.vendor.value} fleet {spec.fleet} (budget {budget:g}s)")
        box, progress = claim_box(
            client,
            record,
            spec,
            log,
            settings.pools,
            deadline=self.clock.now() + budget,
            clock=self.clock.now,
        )
        allowed = release_refusal(spec) is None
        if progress.phase in (Phase.ADOPTING, Phase.READY, Phase.LEAVING):
            # This slot's own box, adopted (or being adopted, or leaving) under a claim that left the
            # state while the box stayed: a refresh that lost the marker, a claim removed by hand, the
            # migration that adds claims to machines. The record keeps where the box is: reset to
            # CLAIMED, the machine's create would install a Robot box again under its workloads.
            saved = record.save(replace(progress, release_allowed=allowed))
            log(f"{spec.resource_name}: {box.id} was this slot's already (record {progress.state}): kept")
        else:
            saved = record.save(
                replace(progress, phase=Phase.CLAIMED, state="CLAIMED", release_allowed=allowed)
            )
        return dyn.CreateResult(
            id_=resource_id(spec.vendor, box.id),
            outs=self._outs(props, spec, box, record, release_allowed=saved.release_allowed),
        )

    @staticmethod
    def _outs(
        props: dict[str, Any], spec: ClaimSpec, box: Box, record: ClaimRecord, *, release_allowed: bool
    ) -> dict[str, Any]:
        return _outputs(
            props,
            box_id=box.id,
            box_name=box.name,
            datacenter=box.datacenter,
            public_ipv4=box.public_ipv4,
            provider_id=provider_id_for(box.vendor, box.id, box.datacenter),
            node_name=node_name_for(spec.fleet, box.id),
            claim_token=spec.token,
            record=record.where,
            state="releasing" if box.claim is not None and box.claim.releasing else "claimed",
            # What the record says (a production machine's delete reads it there), not the inputs.
            release_allowed=release_allowed,
        )

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        """The box the id names, if it is still claimed by this holder (vendor marker, and the cluster
        record when there is a cluster); else gone, so `pulumi refresh` drops it from state."""
        vendor, box_id = parse_resource_id(id_)
        spec = parse_claim(props)
        token = str(props.get("claim_token") or spec.token)
        settings = self._config()
        client = settings.vendor_client(vendor)
        try:
            box = client.get_box(box_id)
        except NotFoundError as error:
            confirm_gone(client, vendor, box_id, error)
            engine_link.progress(
                f"{spec.resource_name}: {vendor.value} box {box_id} no longer exists", spec.urn
            )
            return dyn.ReadResult(id_="", outs={})
        if box.claim is None or box.claim.token != token:
            holder = box.claim.token if box.claim else "nobody"
            engine_link.progress(
                f"{spec.resource_name}: {vendor.value} box {box_id} is claimed by {holder}, not by this "
                "machine: it is gone from the stack",
                spec.urn,
                ephemeral=False,
                warning=True,
            )
            return dyn.ReadResult(id_="", outs={})
        record = settings.claim_record(spec.api_server)
        held = record.get(vendor.value, box_id)
        if held is not None and held.holder.token != token:
            engine_link.progress(
                f"{spec.resource_name}: the cluster records {vendor.value} box {box_id} as {held.holder}'s",
                spec.urn,
                ephemeral=False,
                warning=True,
            )
            return dyn.ReadResult(id_="", outs={})
        outs = self._outs(props, spec, box, record, release_allowed=held is not None and held.release_allowed)
        outs["claim_token"] = token
        return dyn.ReadResult(id_=id_, outs=outs)

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        """Every claim update records the new inputs (release reads them) and, with a cluster, whether
        they allow the release in the box's record (a production machine's delete reads it there); a
        claim that now has a cluster is recorded there too."""
        spec = parse_claim(news)
        vendor, box_id = parse_resource_id(id_)
        token = str(olds.get("claim_token") or spec.token)
        if olds.get("marker") != spec.marker:
            self._check_new_marker(spec, vendor, box_id)
        outs = {**{k: v for k, v in olds.items() if k != PROVIDER_KEY}, **_outputs(news)}
        outs.update({key: olds[key] for key in CLAIM_OUTPUTS if key in olds})
        outs["record"] = "cluster" if spec.api_server else olds.get("record", "process")
        if spec.api_server:
            record = self._config().claim_record(spec.api_server)
            holder = Holder(spec.project, spec.stack, spec.resource_name, token)
            progress = Progress(
                vendor=vendor.value, box_id=box_id, fleet=spec.fleet, holder=holder, state="CLAIMED"
            )
            outs["release_allowed"] = _record_release_switches(
                record, progress, release_refusal(spec) is None
            )
        return dyn.UpdateResult(outs=outs)

    def _check_new_marker(self, spec: ClaimSpec, vendor: Vendor, box_id: str) -> None:
        """The claimed box carries the fleet's new marker, or nothing is written: a marker edited in the
        config must not release (reinstall) the boxes the fleet holds. Re-marked boxes stay claimed;
        giving one up is the operator's explicit `--replace`."""
        box = self._config().vendor_client(vendor).get_box(box_id)
        if box.has_marker(spec.marker):
            return
        raise MarkerChangeError(
            f"{spec.resource_name}: {vendor.value} box {box_id} does not carry the fleet's new marker "
            f"{spec.marker!r} (it reads {box.marker_field!r}); its claim is kept and nothing was written. "
            f"Mark it (`tuist-ops mark -s {spec.stack} {vendor.value}:{box_id} --fleet {spec.fleet}`, or "
            "at the vendor) and run `pulumi up` again; or give the box up: `pulumi up --replace` its "
            f"claim (`tuist-ops urn -s {spec.stack} {vendor.value}:{box_id}`) releases it, reinstalled, "
            "and claims a box that carries the marker"
        )

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        spec = parse_claim(props)
        refusal = release_refusal(spec)
        if refusal:
            raise ReleaseRefusedError(refusal)
        vendor, box_id = parse_resource_id(id_)
        pins = artifact_pins(spec, props, spec.resource_name) if vendor is Vendor.ROBOT else None
        settings = self._config()
        token = str(props.get("claim_token") or spec.token)
        client = settings.vendor_client(vendor)
        record = settings.claim_record(spec.api_server)
        holder = Holder(spec.project, spec.stack, spec.resource_name, token)

        def log(message: str) -> None:
            engine_link.progress(message, spec.urn)

        def let_go() -> None:
            """Drop this holder's record of the box, if any; another holder's record is theirs."""
            held = record.get(vendor.value, box_id)
            if held is not None and held.holder.token == token:
                record.release(held)

        # The box is read before its record is taken: a box this slot no longer holds (an operator
        # unclaimed it and another slot claimed it) is left alone, not refused on every run.
        try:
            box = client.get_box(box_id)
        except NotFoundError as error:
            confirm_gone(client, vendor, box_id, error)
            log(f"{spec.resource_name}: {box_id} no longer exists at {vendor.value}; nothing to release")
            let_go()
            return
        if box.claim is None or box.claim.token != token:
            holder_text = box.claim.token if box.claim else "nobody"
            log(f"{spec.resource_name}: {box_id} is held by {holder_text}, not this machine; left alone")
            let_go()
            return
        progress = record.acquire(
            Progress(vendor=vendor.value, box_id=box_id, fleet=spec.fleet, holder=holder)
        )
        if spec.api_server and progress.phase != Phase.RELEASING:
            provider_id = provider_id_for(vendor, box_id, box.datacenter)
            progress = self._leave_first(spec, vendor, box_id, provider_id, record, progress)
        table = release_table(vendor)
        start = resume_state(
            table, progress.phase == Phase.RELEASING, progress.state, progress.facts, progress.error_type
        )
        run = self._run(
            spec.resource_name,
            vendor,
            box_id,
            spec,
            spec.urn,
            claim=spec,
            token=token,
            client=client,
            pins=pins,
            hostname=node_name_for(spec.fleet, box_id),
            target=SshTarget(str(box.public_ipv4 or props.get("public_ipv4")), spec.ssh_port, spec.login),
        )
        if start == "RELEASE_MARKING" or (start == "RESCUE_BOOT" and progress.state != start):
            # A new release, or a Robot install started over: nothing of an earlier install is true.
            progress = replace(progress, facts={})
        done = Runner(table, run, record, progress, Phase.RELEASING).start(start)
        record.release(done)
        log(f"{spec.resource_name}: {box_id} returned to the {spec.fleet} pool")

    def _leave_first(
        self,
        spec: ClaimSpec,
        vendor: Vendor,
        box_id: str,
        provider_id: str,
        record: ClaimRecord,
        progress: Progress,
    ) -> Progress:
        """A Node of the box still in the cluster when its claim is deleted: its machine is not in state
        (a create that failed after the kubelet registered, or a pending create cleared by hand), so
        nothing else will leave. The box leaves as a machine's delete would (cordon, drain, the Node
        and its local claims), then is wiped; a wiped box under a live Node and its claims is what the
        reference's incidents were made of. The Node is the program's name for the box's, or else the
        one that carries the box's providerID (an imported box keeps the name it was joined under)."""
        settings = self._config()
        api = settings.kube_api()
        node = node_name_for(spec.fleet, box_id)
        if not kube.node_exists(api, node):
            named = kube.nodes_with_provider_id(api, provider_id)
            if not named:
                return progress
            if len(named) > 1:
                raise AmbiguousNodeError(
                    f"{spec.resource_name}: Nodes {', '.join(named)} all carry providerID {provider_id} of "
                    f"{vendor.value} box {box_id}: the box is not wiped while it is not known which of them "
                    "runs on it; delete the stale ones (`kubectl delete node`), then run again"
                )
            node = named[0]
        run = self._run(spec.resource_name, vendor, box_id, spec, spec.urn, spec=_LeavingNode(node), kube=api)
        run.log(
            f"{spec.resource_name}: Node {node} of {run.box_label} is still in the cluster: it leaves first"
        )
        table = leave_table()
        start = progress.state if progress.phase == Phase.LEAVING and progress.state in table else "CORDONING"
        done = Runner(table, run, record, progress, Phase.LEAVING).start(start)
        return record.save(replace(done, phase=Phase.CLAIMED, state="CLAIMED"))


@dataclass(frozen=True)
class _LeavingNode:
    """What the leave states read of a machine's spec: the Node's name."""

    node_name: str


# --- AdoptedMachine -------------------------------------------------------------------------------------


class MachineProvider(_Stateless):
    """The dynamic provider behind AdoptedMachine."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        failures = [dyn.CheckFailure(key, reason) for key, reason in machine_input_problems(news)]
        return dyn.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        return machine_diff(olds, news)

    def _holder(self, spec: MachineSpec) -> Holder:
        return Holder(spec.project, spec.stack, spec.resource_name, spec.claim_token)

    def _progress(self, record: ClaimRecord, spec: MachineSpec) -> Progress:
        """The box's record (the claim made it; a process record of an earlier run is gone: made again)."""
        return record.acquire(
            Progress(
                vendor=spec.vendor.value, box_id=spec.box_id, fleet=spec.fleet, holder=self._holder(spec)
            )
        )

    def _machine_run(self, spec: MachineSpec, props: dict[str, Any], **extra: Any) -> Run:
        return self._run(
            spec.resource_name,
            spec.vendor,
            spec.box_id,
            spec,
            spec.urn,
            spec=spec,
            target=SshTarget(spec.public_ipv4, spec.ssh_port, spec.login),
            **extra,
        )

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        spec = parse_machine(props)
        settings = self._config()
        extra: dict[str, Any] = {"hostname": spec.node_name}
        if spec.vendor is Vendor.ROBOT:
            extra["pins"] = artifact_pins(spec, props, spec.resource_name)
            extra["client"] = settings.vendor_client(spec.vendor)
        record = settings.claim_record(spec.api_server)
        progress = self._progress(record, spec)
        if progress.phase == Phase.RELEASING:
            # A release of this box died (its claim's delete failed) and the slot is wanted again: the
            # box may be mid-reinstall, so joining it would put a Node on a disk being wiped.
            raise ReleaseUnfinishedError(
                f"{spec.resource_name}: the release of {spec.vendor.value} box {spec.box_id} stopped at "
                f"{progress.state} ({progress.error_type or 'no error recorded'}) and has not finished; "
                "finish it first: `pulumi destroy --target` the claim (its URN: `tuist-ops urn -s STACK "
                f"{spec.vendor.value}:{spec.box_id}`), then `pulumi up` claims a box for this slot again"
            )
        network = bool(spec.private_network)
        table = adopt_table(spec.vendor, network)
        resume = progress.phase == Phase.ADOPTING and progress.state in table
        # READY (or the adoption's DONE, saved just before READY) with a pinned host key: this holder
        # adopted the box and no delete left the cluster since (a create whose answer was lost, or a
        # refresh that found its Node gone). A Robot box is installed already: join it again, never
        # reinstall it under its workloads.
        # LEAVING too: a leave that stopped halfway (the machine's delete failed), the machine then
        # dropped from state and wanted again; its Node, if still there, is uncordoned after the join.
        adopted = progress.phase in (Phase.READY, Phase.LEAVING) or (
            progress.phase == Phase.ADOPTING and progress.state == DONE
        )
        was_leaving = progress.phase == Phase.LEAVING
        installed = adopted and bool(progress.facts.get(PIN))
        if resume:
            start = install_resume_state(progress.state, progress.error_type)
            if start != progress.state:
                progress = replace(progress, facts={})  # the rescue system those facts name is gone
        elif installed:
            start = join_start(spec.vendor, network)
        else:
            start = adopt_start(spec.vendor, network)
            if start == "RESCUE_BOOT" and spec.api_server:
                self._refuse_install_under_a_node(spec)
        run = self._machine_run(spec, props, **extra)
        if resume:
            run.log(
                f"{spec.resource_name}: resuming at {start} (attempt {progress.attempt + 1}; last error "
                f"{progress.error_type or 'none'}, {progress.error_count} so far)"
            )
        elif installed:
            run.log(
                f"{spec.resource_name}: {run.box_label} was adopted already (record {progress.state}): "
                "joining again"
            )
        elif spec.vendor is Vendor.ROBOT:
            progress = replace(progress, facts={})
        done = Runner(table, run, record, progress, Phase.ADOPTING).start(start)
        if was_leaving and installed:
            self._uncordon(spec, run)
        record.save(replace(done, phase=Phase.READY, state="READY"))
        run.log(f"{spec.resource_name}: ready on {run.box_label} as node {spec.node_name}")
        outs = _outputs(
            props,
            node_name=spec.node_name,
            host_key_fingerprint=run.facts[PIN],
            node_registered=run.facts.get(REGISTERED) == "true",
            state="ready",
        )
        return dyn.CreateResult(id_=resource_id(spec.vendor, spec.box_id), outs=outs)

    def _refuse_install_under_a_node(self, spec: MachineSpec) -> None:
        """A Robot box is installed on adoption, which wipes it. The record says whether this holder
        installed it already; a record lost (the MachineClaim CRD recreated, say) says nothing, while
        the box may run a Node with its workloads. A Node carrying the box's providerID is that."""
        named = kube.nodes_with_provider_id(self._config().kube_api(), spec.provider_id)
        if named:
            raise UnrecordedNodeError(
                f"{spec.resource_name}: {spec.vendor.value} box {spec.box_id} is already Node "
                f"{', '.join(named)} (providerID {spec.provider_id}), but its claim's record says nothing of "
                "an install: it is not installed again under that Node. If the Node is this box's, import "
                'the machine (docs/machines.md, "Importing a box that is already a node"); if it is stale, '
                f"`kubectl delete node {named[0]}` and run again"
            )

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        spec = parse_machine({**news, "node_name": olds.get("node_name")})
        outs = {**{k: v for k, v in olds.items() if k != PROVIDER_KEY}, **_outputs(news)}
        outs.update({key: olds[key] for key in MACHINE_OUTPUTS if key in olds})
        changed = rejoin_needed(olds, news)
        if not changed:
            return dyn.UpdateResult(outs=outs)
        settings = self._config()
        record = settings.claim_record(spec.api_server)
        progress = replace(
            self._progress(record, spec), facts={PIN: str(olds.get("host_key_fingerprint") or "")}
        )
        was_leaving = progress.phase == Phase.LEAVING
        # The Private Network the box is moved off (another one, or none): the server leaves it at
        # Scaleway first, then the box's pn0 is replaced (the new network's VLAN) or removed.
        old_network = olds.get("private_network")
        detach = (
            spec.vendor is Vendor.SCALEWAY_EM
            and isinstance(old_network, str)
            and bool(old_network)
            and old_network != spec.private_network
        )
        run = self._machine_run(spec, news, **({OLD_PRIVATE_NETWORK: old_network} if detach else {}))
        if was_leaving:
            run.log(
                f"{spec.resource_name}: its leave stopped at {progress.state} and it is wanted again: "
                "joining again, then uncordoning its Node"
            )
        else:
            run.log(f"{spec.resource_name}: {', '.join(changed)} changed: joining again")
        network = bool(spec.private_network)
        table = rejoin_table(spec.vendor, network, detach)
        done = Runner(table, run, record, progress, Phase.ADOPTING).start(
            join_start(spec.vendor, network, detach)
        )
        if was_leaving:
            self._uncordon(spec, run)
        record.save(replace(done, phase=Phase.READY, state="READY"))
        outs["state"] = "ready"
        outs.update(host_key_fingerprint=run.facts[PIN], node_registered=run.facts.get(REGISTERED) == "true")
        return dyn.UpdateResult(outs=outs)

    def read(self, id_: str, props: dict[str, Any]) -> dyn.ReadResult:
        """The machine the id names: its box still claimed by this holder and, with a cluster, its Node
        still registered; else gone."""
        vendor, box_id = parse_resource_id(id_)
        spec = parse_machine({**props, "vendor": vendor.value, "box_id": box_id})
        settings = self._config()
        client = settings.vendor_client(vendor)
        try:
            box = client.get_box(box_id)
        except NotFoundError as error:
            confirm_gone(client, vendor, box_id, error)
            return dyn.ReadResult(id_="", outs={})
        if box.claim is None or box.claim.token != spec.claim_token:
            engine_link.progress(
                f"{spec.resource_name}: {vendor.value} box {box_id} is no longer claimed by it",
                spec.urn,
                ephemeral=False,
                warning=True,
            )
            return dyn.ReadResult(id_="", outs={})
        # A Mac whose agent registers no Node (the dev stack's) has none to find.
        if (
            spec.api_server
            and spec.registers_node
            and not kube.node_exists(settings.kube_api(), spec.node_name)
        ):
            engine_link.progress(
                f"{spec.resource_name}: Node {spec.node_name} is not registered",
                spec.urn,
                ephemeral=False,
                warning=True,
            )
            return dyn.ReadResult(id_="", outs={})
        state = "ready"
        if spec.api_server:
            held = settings.claim_record(spec.api_server).get(vendor.value, box_id)
            mine = held if held is not None and held.holder.token == spec.claim_token else None
            if mine is not None and mine.phase == Phase.ADOPTING:
                # Its last update failed halfway (a create that fails leaves no machine in the stack):
                # the next `pulumi up` joins it again, even with the change that started it reverted.
                state = JOINING
                engine_link.progress(
                    f"{spec.resource_name}: its last join stopped at {mine.state} "
                    f"({mine.error_type or 'no error recorded'}): `pulumi up` joins it again",
                    spec.urn,
                    ephemeral=False,
                    warning=True,
                )
            elif mine is not None and mine.phase == Phase.LEAVING:
                # Its delete failed halfway (a drain held past its budget): the Node is cordoned. Kept
                # in the stack, the next `pulumi up` joins it again and uncordons it (spec.LEAVING);
                # removed from the stack, it finishes leaving.
                state = LEAVING
                engine_link.progress(
                    f"{spec.resource_name}: its leave stopped at {mine.state}: Node {spec.node_name} is "
                    "cordoned; `pulumi up` rejoins it, or finishes the leave if the machine is removed",
                    spec.urn,
                    ephemeral=False,
                    warning=True,
                )
        joined_as = props.get("public_ipv4")
        if box.public_ipv4 and joined_as and box.public_ipv4 != joined_as:
            # Kept as joined: it is the kubelet's --node-ip, so the claim's new address (which the same
            # refresh reads) shows in the next diff as the rejoin it needs, not as nothing to do.
            engine_link.progress(
                f"{spec.resource_name}: {vendor.value} now gives box {box_id} the address {box.public_ipv4}; "
                f"it joined as {joined_as} (its kubelet's --node-ip): `pulumi up` rejoins it at the new one",
                spec.urn,
                ephemeral=False,
                warning=True,
            )
        outs = _outputs(props, datacenter=box.datacenter, state=state)
        if vendor is Vendor.SCALEWAY_EM:
            outs["private_network"] = self._private_network_read(spec, client)
        return dyn.ReadResult(id_=id_, outs=outs)

    @staticmethod
    def _private_network_read(spec: MachineSpec, client: object) -> str | None:
        """The Private Network the Elastic Metal server is on at Scaleway (None: none), where the stack
        says `private_network`. They differ after a move that failed halfway (the old network left, the
        new one not reached); read as Scaleway has it, the next `pulumi up` moves the server to the
        network its config names, the old one included when the change was reverted."""
        reader = private_network_reader(client)
        on = [a.private_network_id for a in reader.private_networks(spec.box_id) if a.status in ON_NETWORK]
        wanted = spec.private_network or None
        found = wanted if wanted in on else (on[0] if on else None)
        if found == wanted:
            return found
        engine_link.progress(
            f"{spec.resource_name}: Elastic Metal server {spec.box_id} is on Private Network "
            f"{found or '(none)'}, not {wanted or '(none)'}: `pulumi up` moves it",
            spec.urn,
            ephemeral=False,
            warning=True,
        )
        return found

    def _uncordon(self, spec: MachineSpec, run: Run) -> None:
        """The Node of a leave that stopped halfway, joined again: schedulable again (the leave
        cordoned it; the join does not touch that)."""
        if not spec.api_server:
            return
        if kube.uncordon(self._config().kube_api(), spec.node_name):
            run.log(f"{spec.resource_name}: Node {spec.node_name} uncordoned")

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        """Leave the cluster. The box stays claimed: the claim's delete, which follows, releases it."""
        spec = parse_machine(props)
        if not spec.api_server:
            engine_link.progress(f"{spec.resource_name}: no cluster to leave", spec.urn)
            return
        if props.get("node_registered") is False and not spec.registers_node:
            # A Mac whose agent registers no Node (the dev stack's): nothing of it is in the cluster.
            engine_link.progress(f"{spec.resource_name}: registered no Node; no cluster to leave", spec.urn)
            return
        settings = self._config()
        record = settings.claim_record(spec.api_server)
        try:
            progress = self._progress(record, spec)
        except ClaimHeldError as held:
            # Another slot holds the box in the cluster now: its Node is not this machine's to drain.
            engine_link.progress(
                f"{spec.resource_name}: {spec.vendor.value} box {spec.box_id} is held by {held.holder}; "
                "its Node is left alone",
                spec.urn,
                ephemeral=False,
                warning=True,
            )
            return
        refusal = leave_refusal(spec, progress)
        if refusal:
            # Before the drain: leaving deletes the Node and its local volumes' claims (Kura's data),
            # and the claim's release after it would be refused all the same.
            raise ReleaseRefusedError(refusal)
        table = leave_table()
        start = progress.state if progress.phase == Phase.LEAVING and progress.state in table else "CORDONING"
        run = self._machine_run(spec, props, kube=settings.kube_api())
        done = Runner(table, run, record, progress, Phase.LEAVING).start(start)
        record.save(replace(done, phase=Phase.CLAIMED, state="CLAIMED"))


__all__ = ["INSTALL_STATES", "ClaimProvider", "MachineProvider"]
