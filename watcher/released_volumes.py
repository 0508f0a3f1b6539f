"""`python -m watcher.released_volumes`: empty a box's released Kura volumes and make them usable again.

A region's local volumes (components/storage.py) are static PersistentVolumes with reclaim policy
Retain. When a claim on one is deleted (kura-controller drops a claim that can never bind again; an
account's instance goes), the PV controller never binds the volume again: the box has one volume
fewer until it is released, and the old claim's data stays on its disk. The volume is Released, or
Failed when kura-controller first flipped it to reclaim policy Delete, as it does before it deletes
a claim (with a provisioner, Delete has the provisioner remove the volume; for these the PV
controller's only deleter is the in-tree hostPath one, which removes nothing outside /tmp and
fails). For a
region whose `released_volumes` is `scrub`, the program writes `tuist.dev/on-release: scrub` on each
of its volumes and runs this loop on every box of the region's pool (components/volume_scrubber.py:
a DaemonSet with the box's VOLUME_ROOT mounted). Each pass takes the region's volumes that are

- Released, or Failed with reclaim policy Delete (the deleter's failure above), and on this box
  (their node affinity names exactly this node),
- marked `scrub` by the program (a `keep` or unmarked volume is left to an operator, and said once),
- at the folder the program gives them (VOLUME_ROOT/<name>; any other path is refused, and said),
- claimed last from the Kura namespace by a claim that is gone (read again: absent, or a new claim
  of the same name with another uid that does not ask for this volume by name, which is a rebind),

and for each empties its folder (the folder stays; nothing is followed through a symlink), then, in
one JSON patch that first tests the old claim's uid, clears its claimRef and records whose data went
(`tuist.dev/scrubbed`). The PV controller makes it Available and the next claim on the box binds it.
A crash between the two empties the folder again on the next pass: the volume still names that
claim. A volume that fails (its claim's read, its folder, its patch) is said once and tried again at
the next pass; the others go on. Deleting the claim (and kura-controller's flip to Delete) is the
decision to drop its data; `scrub` on the region is the decision that a dropped claim's data is
wiped on its box rather than kept for an operator.

Settings, from the DaemonSet's environment: REGION, NODE_NAME (the downward API), KURA_NAMESPACE,
VOLUME_MOUNT (where the box's VOLUME_ROOT is mounted; default /volumes), POLL_SECONDS (default 30)
and HEARTBEAT_FILE. No Pulumi import here.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import shutil
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from providers.constants import (
    HOSTNAME_LABEL,
    ON_RELEASE_ANNOTATION,
    SCRUBBED_ANNOTATION,
    VOLUME_ROOT,
    volume_path,
)
from watcher.environment import positive_seconds
from watcher.heartbeat import write_heartbeat

__all__ = [
    "KUBE_TIMEOUT",
    "Scrubbable",
    "ScrubberLoop",
    "ScrubberSettings",
    "assess",
    "empty_folder",
    "release_patch",
]

log = logging.getLogger("released-volumes")

KUBE_TIMEOUT = (5, 30)  # (connect, read) seconds of each API call
# How long a pass may take before the liveness probe restarts the loop: the reads, and emptying a
# volume of up to its whole size (a restart mid-way empties it again, from where it got).
PASS_BUDGET_SECONDS = 900.0
# A volume's name as the program makes them (components/storage.volume_name): one path segment.
VOLUME_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$")


@dataclass(frozen=True)
class ScrubberSettings:
    region: str
    node: str
    namespace: str  # the Kura namespace: the only one whose claims' volumes are emptied
    volume_mount: Path  # the box's VOLUME_ROOT, as mounted in the container
    poll_seconds: float = 30.0
    heartbeat_file: str | None = None

    def to_env(self) -> dict[str, str]:
        """The DaemonSet's environment, but NODE_NAME (the downward API gives it)."""
        env = {
            "REGION": self.region,
            "KURA_NAMESPACE": self.namespace,
            "VOLUME_MOUNT": str(self.volume_mount),
            "POLL_SECONDS": f"{self.poll_seconds:g}",
        }
        if self.heartbeat_file:
            env["HEARTBEAT_FILE"] = self.heartbeat_file
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ScrubberSettings:
        missing = [name for name in ("REGION", "NODE_NAME", "KURA_NAMESPACE") if not env.get(name)]
        if missing:
            raise ValueError(f"environment variable(s) {', '.join(missing)} required")
        return cls(
            region=env["REGION"],
            node=env["NODE_NAME"],
            namespace=env["KURA_NAMESPACE"],
            volume_mount=Path(env.get("VOLUME_MOUNT") or "/volumes"),
            poll_seconds=positive_seconds(env, "POLL_SECONDS", "30"),
            heartbeat_file=env.get("HEARTBEAT_FILE") or None,
        )

    @property
    def selector(self) -> str:
        """The region's local volumes (components/storage.py labels them)."""
        return f"app.kubernetes.io/part-of=kura,tuist.dev/region={self.region}"


@dataclass(frozen=True)
class Scrubbable:
    """A volume of this box that may be emptied, and the claim whose data it holds."""

    name: str
    folder: Path
    claim_namespace: str
    claim_name: str
    claim_uid: str

    @property
    def claim(self) -> str:
        return f"{self.claim_namespace}/{self.claim_name}"


def _on_node(pv: Mapping[str, Any], node: str) -> bool:
    """Whether the volume's node affinity is exactly `kubernetes.io/hostname In [node]`."""
    terms = (((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}).get(
        "nodeSelectorTerms"
    )
    if not terms or len(terms) != 1:
        return False
    expressions = terms[0].get("matchExpressions") or []
    return len(expressions) == 1 and expressions[0] == {
        "key": HOSTNAME_LABEL,
        "operator": "In",
        "values": [node],
    }


def _left_by_its_claim(pv: Mapping[str, Any]) -> bool:
    """Released, or Failed because the PV controller could not delete it (reclaim policy Delete)."""
    phase = (pv.get("status") or {}).get("phase")
    policy = (pv.get("spec") or {}).get("persistentVolumeReclaimPolicy")
    return phase == "Released" or (phase == "Failed" and policy == "Delete")


def assess(pv: Mapping[str, Any], settings: ScrubberSettings) -> Scrubbable | str | None:
    """What this box does with the volume: empty it (Scrubbable), leave it and say why once (str),
    or leave it silently (None: its claim did not leave it, or it is another box's)."""
    metadata, spec = pv.get("metadata") or {}, pv.get("spec") or {}
    if not _left_by_its_claim(pv) or not _on_node(pv, settings.node):
        return None
    name = metadata.get("name", "")
    decision = (metadata.get("annotations") or {}).get(ON_RELEASE_ANNOTATION)
    if decision != "scrub":
        shown = f"'{decision}'" if decision else "not set"
        return f"kept for an operator: {ON_RELEASE_ANNOTATION} is {shown}"
    path = (spec.get("hostPath") or {}).get("path")
    if not VOLUME_NAME.match(name) or path != volume_path(name):
        return f"refused: its path {path!r} is not the program's {VOLUME_ROOT}/<volume name>"
    ref = spec.get("claimRef") or {}
    if not (ref.get("namespace") and ref.get("name") and ref.get("uid")):
        return None  # no claim to forget: the PV controller makes it Available by itself
    if ref["namespace"] != settings.namespace:
        return f"kept: its claim was in namespace '{ref['namespace']}', not Kura's '{settings.namespace}'"
    return Scrubbable(
        name=name,
        folder=settings.volume_mount / name,
        claim_namespace=ref["namespace"],
        claim_name=ref["name"],
        claim_uid=ref["uid"],
    )


def empty_folder(folder: Path, beat: Callable[[], None] = lambda: None) -> int:
    """Remove everything in `folder` and keep it; returns how many entries went. A symlink is removed,
    never followed (shutil.rmtree's fd-based walk); `beat` is called between entries."""
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return 0  # never mounted by a pod: nothing was written
    if not stat.S_ISDIR(mode):
        raise NotADirectoryError(f"{folder} is not a directory (a {stat.filemode(mode)[0]!r} entry)")
    removed = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed += 1
            beat()
    return removed


def release_patch(volume: Scrubbable, when: dt.datetime) -> list[dict[str, Any]]:
    """The JSON patch that hands the emptied volume back: applied only while it still names the claim."""
    return [
        {"op": "test", "path": "/spec/claimRef/uid", "value": volume.claim_uid},
        {"op": "remove", "path": "/spec/claimRef"},
        {
            "op": "add",
            "path": "/metadata/annotations/" + SCRUBBED_ANNOTATION.replace("~", "~0").replace("/", "~1"),
            "value": f"{volume.claim} (uid {volume.claim_uid}) at {when.isoformat(timespec='seconds')}",
        },
    ]


def _describe(error: Exception) -> str:
    """One line: an API error's status and reason (its str carries the response's headers), else the
    error's own message."""
    status = getattr(error, "status", None)
    if status is not None:
        return f"the API answered {status} {getattr(error, 'reason', None) or ''}".rstrip()
    return f"{type(error).__name__}: {error}"


class ScrubberLoop:
    """One box's loop. `core_v1` is a kubernetes CoreV1Api (any object with its three methods)."""

    def __init__(
        self,
        settings: ScrubberSettings,
        core_v1: Any,
        *,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.settings = settings
        self._core = core_v1
        self._clock = clock
        self._said: set[tuple[str, str]] = set()

    def scrub_once(self) -> list[str]:
        """One pass; returns the volumes emptied and handed back. A failed listing propagates; a volume
        that fails (its claim's read, its folder, its patch) is left as it is, said, and tried again at
        the next pass, while the pass goes on to the others."""
        listed = self._core.list_persistent_volume(
            label_selector=self.settings.selector, _preload_content=False, _request_timeout=KUBE_TIMEOUT
        )
        done: list[str] = []
        for pv in json.loads(listed.data)["items"]:
            verdict = assess(pv, self.settings)
            if isinstance(verdict, str):
                self._say_once(pv["metadata"]["name"], verdict)
            elif verdict is not None:
                try:
                    if self._claim_gone(verdict) and self._scrub(verdict):
                        done.append(verdict.name)
                except Exception as error:  # one volume's failure must not hold the others back
                    self._say_once(verdict.name, f"left for the next pass: {_describe(error)}")
        return done

    def _claim_gone(self, volume: Scrubbable) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            response = self._core.read_namespaced_persistent_volume_claim(
                volume.claim_name,
                volume.claim_namespace,
                _preload_content=False,
                _request_timeout=KUBE_TIMEOUT,
            )
        except ApiException as error:
            if error.status == 404:
                return True
            raise
        claim = json.loads(response.data)
        if claim["metadata"]["uid"] == volume.claim_uid:
            self._say_once(volume.name, f"kept: its claim {volume.claim} still exists (being deleted?)")
            return False
        if (claim.get("spec") or {}).get("volumeName") == volume.name:
            # Someone wants this data back: the usual rebind is to drop the claimRef's uid.
            self._say_once(
                volume.name,
                f"kept: a new claim {volume.claim} asks for this volume by name (a rebind: remove the "
                "volume's spec.claimRef.uid to hand it the data)",
            )
            return False
        return True  # a new claim of the same name: the one whose data this is, is gone

    def _scrub(self, volume: Scrubbable) -> bool:
        from kubernetes.client.exceptions import ApiException

        log.info(
            "emptying released volume %s (claim %s, uid %s)", volume.name, volume.claim, volume.claim_uid
        )
        started = time.monotonic()
        removed = empty_folder(volume.folder, beat=lambda: self.beat(PASS_BUDGET_SECONDS))
        try:
            self._core.patch_persistent_volume(
                volume.name, release_patch(volume, self._clock()), _request_timeout=KUBE_TIMEOUT
            )
        except ApiException as error:
            if error.status in (404, 409, 422):
                # Gone, or no longer naming that claim (an operator's edit): nothing to hand back.
                log.warning(
                    "volume %s changed while it was emptied (%s): left as it is", volume.name, error.status
                )
                return False
            raise
        log.info(
            "volume %s emptied (%d entries, %.1f s) and Available again",
            volume.name,
            removed,
            time.monotonic() - started,
        )
        return True

    def _say_once(self, name: str, why: str) -> None:
        if (name, why) not in self._said:
            self._said.add((name, why))
            log.warning("released volume %s %s", name, why)

    def run(self, stop: threading.Event) -> None:
        """A pass every `poll_seconds` until `stop` is set; a failed pass is retried at the next."""
        while not stop.is_set():
            self.beat(PASS_BUDGET_SECONDS)
            try:
                self.scrub_once()
            except Exception:  # the listing failed: every volume is left as it was and tried again
                log.exception("pass failed; retrying in %g s", self.settings.poll_seconds)
            self.beat(self.settings.poll_seconds + PASS_BUDGET_SECONDS)
            stop.wait(self.settings.poll_seconds)

    def beat(self, within: float) -> None:
        write_heartbeat(self.settings.heartbeat_file, within)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = ScrubberSettings.from_env(os.environ)
    except ValueError as exc:
        raise SystemExit(f"released_volumes: {exc}") from None
    from kubernetes import client

    from providers.kube import in_cluster_api_client

    scrubber = ScrubberLoop(settings, client.CoreV1Api(in_cluster_api_client(timeout=KUBE_TIMEOUT)))
    stop = threading.Event()
    # A SIGTERM mid-pass ends it after the volume at hand: stopping between the wipe and the patch
    # would only mean emptying it again.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    scrubber.run(stop)
    sys.exit(0)


if __name__ == "__main__":
    main()
