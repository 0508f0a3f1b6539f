"""Where a box's claim and the state machine's progress live.

One record per box, named `<vendor>-<box id>`: who holds the box (project, stack, resource, token)
and where its state machine stands (phase, state, last error type and message, error count, attempt,
last transition time, and the facts later states need, such as the rescue system's host key).

- `KubeClaimRecord`: a cluster-scoped `MachineClaim` object (machineclaims.infra.tuist.dev/v1alpha1,
  components/claims_crd.py). Created with `create` (the apiserver refuses a second one: that is the
  arbitration between provider processes and between stacks), then moved on with the status
  subresource and `metadata.resourceVersion` as compare-and-set, and deleted with a resourceVersion
  precondition. The vendor marker stays the human-visible mirror of the claim.
- `ProcessClaimRecord`: the same contract in this process's memory, for stacks without a cluster (the
  dev stack renders manifests). A retried create in a new process then starts over at the claim's
  first state: nothing remembers more.

No Pulumi import here.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from providers.constants import CLAIM_GROUP, CLAIM_KIND, CLAIM_PLURAL, CLAIM_VERSION, MANAGED_BY
from providers.machine.errors import ClaimLostError

HOLDER_LABEL = f"{CLAIM_GROUP}/holder"
# What the identity of the stack's kubeconfig is bound to when it is not cluster-admin
# (components/claims_crd.py creates it).
MACHINE_PROVIDER_ROLE = "tuist-infra:machine-provider"
FLEET_LABEL = f"{CLAIM_GROUP}/fleet"
VENDOR_LABEL = f"{CLAIM_GROUP}/vendor"
_NAME_CHARS = re.compile(r"[^a-z0-9.-]+")


class Phase:
    CLAIMED = "Claimed"
    ADOPTING = "Adopting"
    READY = "Ready"
    LEAVING = "Leaving"
    RELEASING = "Releasing"


@dataclass(frozen=True)
class Holder:
    project: str
    stack: str
    resource: str
    token: str

    def __str__(self) -> str:
        return f"{self.project}/{self.stack}/{self.resource} ({self.token})"


@dataclass(frozen=True)
class Progress:
    """One box's claim and its state machine's progress."""

    vendor: str
    box_id: str
    fleet: str
    holder: Holder
    phase: str = Phase.CLAIMED
    state: str = ""
    error_type: str | None = None
    error_count: int = 0
    last_error: str | None = None
    attempt: int = 0
    last_transition: str = ""
    facts: Mapping[str, str] = field(default_factory=dict)
    # The claim's release switches as its last create or update recorded them (release_refusal): a
    # production machine leaves the cluster only when they let its claim release the box after it.
    release_allowed: bool = False
    version: str | None = None  # resourceVersion (or the process record's counter)

    @property
    def name(self) -> str:
        return record_name(self.vendor, self.box_id)


def record_name(vendor: str, box_id: str) -> str:
    """`<vendor>-<box id>` as a Kubernetes object name (lowercase, '/' and the like become '-')."""
    name = _NAME_CHARS.sub("-", f"{vendor}-{box_id}".lower()).strip("-.")
    return name[:253]


def now_iso(wall: Callable[[], dt.datetime]) -> str:
    return wall().astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ClaimHeldError(ClaimLostError):
    """The box's record is held by another holder."""

    def __init__(self, name: str, holder: Holder) -> None:
        self.holder = holder
        super().__init__(f"{name} is claimed by {holder}")


class ClaimRecord(Protocol):
    """The narrow contract the claim and the state machine persist through."""

    where: str  # "cluster" or "process": said in messages and outputs

    def acquire(self, progress: Progress) -> Progress:
        """Create the record. An existing record of the same holder token is returned (a retried
        create resumes it); one of another holder raises ClaimHeldError."""
        ...

    def get(self, vendor: str, box_id: str) -> Progress | None: ...

    def held(self, vendor: str) -> dict[str, Holder]:
        """box id -> holder of every record of `vendor`."""
        ...

    def find_own(self, token: str) -> Progress | None: ...

    def save(self, progress: Progress) -> Progress:
        """Write the progress if the record is still at `progress.version`; returns it at its new
        version. Raises ClaimLostError when the record changed or went away meanwhile."""
        ...

    def release(self, progress: Progress) -> None:
        """Delete the record if it is still at `progress.version` (gone already counts as done)."""
        ...


# --- in this process ----------------------------------------------------------------------------------


class ProcessClaimRecord:
    """The contract in memory: one store per process (module level), shared by every provider call."""

    where = "process"

    def __init__(self, store: dict[str, Progress] | None = None) -> None:
        self._store = _PROCESS_STORE if store is None else store

    def acquire(self, progress: Progress) -> Progress:
        with _PROCESS_LOCK:
            existing = self._store.get(progress.name)
            if existing is not None:
                if existing.holder.token != progress.holder.token:
                    raise ClaimHeldError(progress.name, existing.holder)
                return existing
            stored = replace(progress, version="1")
            self._store[progress.name] = stored
            return stored

    def get(self, vendor: str, box_id: str) -> Progress | None:
        with _PROCESS_LOCK:
            return self._store.get(record_name(vendor, box_id))

    def held(self, vendor: str) -> dict[str, Holder]:
        with _PROCESS_LOCK:
            return {p.box_id: p.holder for p in self._store.values() if p.vendor == vendor}

    def find_own(self, token: str) -> Progress | None:
        with _PROCESS_LOCK:
            return next((p for p in self._store.values() if p.holder.token == token), None)

    def save(self, progress: Progress) -> Progress:
        with _PROCESS_LOCK:
            current = self._store.get(progress.name)
            if current is None or current.version != progress.version:
                raise ClaimLostError(f"{progress.name}: the claim record changed or went away meanwhile")
            stored = replace(progress, version=str(int(current.version or "0") + 1))
            self._store[progress.name] = stored
            return stored

    def release(self, progress: Progress) -> None:
        with _PROCESS_LOCK:
            current = self._store.get(progress.name)
            if current is None:
                return
            if current.version != progress.version:
                raise ClaimLostError(f"{progress.name}: the claim record changed meanwhile; not deleted")
            del self._store[progress.name]


_PROCESS_STORE: dict[str, Progress] = {}
_PROCESS_LOCK = threading.Lock()


# --- in the cluster -----------------------------------------------------------------------------------


class KubeClaimRecord:
    """MachineClaim objects through the kubernetes client. `api` is a kubernetes.client.ApiClient."""

    where = "cluster"

    def __init__(self, api: Any) -> None:
        from kubernetes import client as k8s

        self._objects = k8s.CustomObjectsApi(api)

    def acquire(self, progress: Progress) -> Progress:
        body = to_object(progress)
        try:
            created = self._call(
                "create",
                lambda: self._objects.create_cluster_custom_object(
                    CLAIM_GROUP, CLAIM_VERSION, CLAIM_PLURAL, body
                ),
                conflict_ok=True,
            )
        except _AlreadyExists:
            existing = self.get(progress.vendor, progress.box_id)
            if existing is None:  # deleted between the two calls: someone released it; try once more
                created = self._call(
                    "create",
                    lambda: self._objects.create_cluster_custom_object(
                        CLAIM_GROUP, CLAIM_VERSION, CLAIM_PLURAL, body
                    ),
                )
            elif existing.holder.token != progress.holder.token:
                raise ClaimHeldError(progress.name, existing.holder) from None
            else:
                return existing
        # The status subresource ignores status on create: write it now.
        return self.save(replace(progress, version=str(created["metadata"]["resourceVersion"])))

    def get(self, vendor: str, box_id: str) -> Progress | None:
        name = record_name(vendor, box_id)
        try:
            obj = self._call(
                "get",
                lambda: self._objects.get_cluster_custom_object(
                    CLAIM_GROUP, CLAIM_VERSION, CLAIM_PLURAL, name
                ),
            )
        except _NotFound:
            return None
        return from_object(obj)

    def held(self, vendor: str) -> dict[str, Holder]:
        return {p.box_id: p.holder for p in self._list(f"{VENDOR_LABEL}={vendor}")}

    def find_own(self, token: str) -> Progress | None:
        return next(iter(self._list(f"{HOLDER_LABEL}={token}")), None)

    def save(self, progress: Progress) -> Progress:
        body = to_object(progress)
        try:
            saved = self._call(
                "update status of",
                lambda: self._objects.replace_cluster_custom_object_status(
                    CLAIM_GROUP, CLAIM_VERSION, CLAIM_PLURAL, progress.name, body
                ),
            )
        except (_Conflict, _NotFound):
            raise ClaimLostError(
                f"MachineClaim {progress.name} changed or went away since this process read it "
                f"(resourceVersion {progress.version}); another process holds or released the box"
            ) from None
        return from_object(saved)

    def release(self, progress: Progress) -> None:
        from kubernetes import client as k8s

        options = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(resource_version=progress.version))
        try:
            self._call(
                "delete",
                lambda: self._objects.delete_cluster_custom_object(
                    CLAIM_GROUP, CLAIM_VERSION, CLAIM_PLURAL, progress.name, body=options
                ),
            )
        except _NotFound:
            return
        except _Conflict:
            raise ClaimLostError(f"MachineClaim {progress.name} changed meanwhile; not deleted") from None

    def _list(self, selector: str) -> list[Progress]:
        listed = self._call(
            "list",
            lambda: self._objects.list_cluster_custom_object(
                CLAIM_GROUP, CLAIM_VERSION, CLAIM_PLURAL, label_selector=selector
            ),
        )
        return sorted((from_object(o) for o in listed.get("items") or []), key=lambda p: p.name)

    @staticmethod
    def _call(what: str, operation: Callable[[], Any], conflict_ok: bool = False) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return operation()
        except ApiException as error:
            if error.status == 404:
                raise _NotFound from None
            if error.status == 409:
                # 409 on create is AlreadyExists; on update / delete a stale resourceVersion.
                raise (_AlreadyExists if conflict_ok else _Conflict) from None
            reason = (error.reason or "").strip()
            if error.status in (401, 403):
                raise ClaimLostError(
                    f"{what} MachineClaim failed (HTTP {error.status} {reason}): the identity of the stack's "
                    f"kubeconfig needs the ClusterRole {MACHINE_PROVIDER_ROLE} (docs/machines.md)"
                ) from None
            raise ClaimLostError(
                f"{what} MachineClaim failed (HTTP {error.status} {reason}); is the "
                f"{CLAIM_PLURAL}.{CLAIM_GROUP} CRD installed?"
            ) from None


class _NotFound(Exception):
    pass


class _Conflict(Exception):
    pass


class _AlreadyExists(Exception):
    pass


def to_object(progress: Progress) -> dict[str, Any]:
    holder = progress.holder
    metadata: dict[str, Any] = {
        "name": progress.name,
        "labels": {
            "app.kubernetes.io/managed-by": MANAGED_BY,
            HOLDER_LABEL: holder.token,
            FLEET_LABEL: progress.fleet,
            VENDOR_LABEL: progress.vendor,
        },
    }
    if progress.version:
        metadata["resourceVersion"] = progress.version
    status: dict[str, Any] = {
        "phase": progress.phase,
        "state": progress.state,
        "errorCount": progress.error_count,
        "attempt": progress.attempt,
        "facts": dict(progress.facts),
        "releaseAllowed": progress.release_allowed,
    }
    if progress.last_transition:
        status["lastTransitionTime"] = progress.last_transition
    if progress.error_type:
        status["errorType"] = progress.error_type
    if progress.last_error:
        status["lastError"] = progress.last_error
    return {
        "apiVersion": f"{CLAIM_GROUP}/{CLAIM_VERSION}",
        "kind": CLAIM_KIND,
        "metadata": metadata,
        "spec": {
            "vendor": progress.vendor,
            "boxId": progress.box_id,
            "fleet": progress.fleet,
            "holder": {
                "project": holder.project,
                "stack": holder.stack,
                "resource": holder.resource,
                "token": holder.token,
            },
        },
        "status": status,
    }


def from_object(obj: Mapping[str, Any]) -> Progress:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    holder = spec.get("holder") or {}
    return Progress(
        vendor=str(spec.get("vendor") or ""),
        box_id=str(spec.get("boxId") or ""),
        fleet=str(spec.get("fleet") or ""),
        holder=Holder(
            project=str(holder.get("project") or ""),
            stack=str(holder.get("stack") or ""),
            resource=str(holder.get("resource") or ""),
            token=str(holder.get("token") or ""),
        ),
        phase=str(status.get("phase") or Phase.CLAIMED),
        state=str(status.get("state") or ""),
        error_type=status.get("errorType"),
        error_count=int(status.get("errorCount") or 0),
        last_error=status.get("lastError"),
        attempt=int(status.get("attempt") or 0),
        last_transition=str(status.get("lastTransitionTime") or ""),
        facts={str(k): str(v) for k, v in (status.get("facts") or {}).items()},
        release_allowed=status.get("releaseAllowed") is True,
        version=str((obj.get("metadata") or {}).get("resourceVersion") or "") or None,
    )
