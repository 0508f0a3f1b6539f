"""Shared machinery: the simulator object, per-request context, vendor errors and task phases."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from werkzeug.wrappers import Request

from vendorsim.farm import Farm
from vendorsim.faults import Behaviour, Faults
from vendorsim.inventory import Inventory
from vendorsim.store import Store

Clock = Callable[[], float]

# Request-body keys whose values never reach the audit log or /_admin/state.
SECRET_KEYS = frozenset(
    {"user_password", "root_password", "panel_password", "password", "sudo_password", "service_password"}
)
REDACTED = "<redacted>"


class VendorError(Exception):
    """An error response in the vendor's own shape."""

    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


@dataclass
class Reply:
    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Call:
    """One request as a handler sees it."""

    request: Request
    vendor: str
    body: Any = None
    form: dict[str, list[str]] = field(default_factory=dict)
    box: str | None = None  # the box a write touched, for the audit log

    @property
    def args(self) -> Any:
        return self.request.args


class Sim:
    def __init__(
        self,
        inventory: Inventory,
        state_dir: Path,
        *,
        task_seconds: float,
        farm: Farm,
        clock: Clock = time.time,
        reset: bool = False,
    ) -> None:
        self.inventory = inventory
        self.task_seconds = task_seconds
        self.started_task_seconds = task_seconds  # what POST /_admin/reset puts back
        self.farm = farm
        self.clock = clock
        self.lock = threading.RLock()
        self.faults = Faults()
        self.behaviour = Behaviour()
        self.store = Store(state_dir / "vendorsim.db")
        self.robot_hits: dict[tuple[str, str], list[float]] = {}
        # Every vendor API request, reads included (the audit keeps writes only): GET /_admin/calls.
        self.calls: list[dict[str, Any]] = []
        self.calls_lock = threading.Lock()
        self.apply_inventory_settings()
        if reset or self.store.get_meta("seeded") is None:
            self.seed()

    def apply_inventory_settings(self) -> None:
        """Faults and behaviours back to what the inventory starts with (none, by default)."""
        self.faults.clear()
        for spec in self.inventory.faults:
            self.faults.add(dict(spec))
        self.behaviour.reset(dict(self.inventory.behaviour))

    def seed(self) -> None:
        from vendorsim.app import VENDORS

        with self.lock:
            self.store.wipe()
            for module in VENDORS.values():
                module.seed(self)
            self.store.set_meta("seeded", iso(self.clock()))
            self.store.commit()
            self.robot_hits.clear()
        with self.calls_lock:
            self.calls.clear()

    def record_call(
        self, *, started: float, vendor: str, method: str, path: str, status: int, box: str | None
    ) -> None:
        with self.calls_lock:
            self.calls.append(
                {
                    "id": len(self.calls) + 1,
                    "time": started,
                    "seconds": round(self.clock() - started, 4),
                    "vendor": vendor,
                    "method": method,
                    "path": path,
                    "status": status,
                    "box": box,
                }
            )

    def calls_since(self, since: int) -> list[dict[str, Any]]:
        with self.calls_lock:
            return list(self.calls[since:])

    # --- boxes (SSH) ------------------------------------------------------------

    def boxes(self) -> list[dict[str, Any]]:
        return self.store.all("box")

    def start_boxes(self) -> None:
        from vendorsim.boxes import Disk, Hardware
        from vendorsim.inventory import box_hardware

        hardware = box_hardware(self.inventory)
        boxes = self.boxes()

        def ensure(box: dict[str, Any]) -> Any:
            if "ip" not in box:
                # Seeded before boxes listened on their own IPs: only a reseed gives them one.
                raise RuntimeError(f"vendorsim state has no IP for box {box['key']}: restart with --reset")
            disks = box.get("disks")
            # A Mac (applesilicon) says which macOS it runs; Linux boxes pass nothing.
            platform = {"platform": box["platform"]} if box.get("platform") else {}
            # The kubelet stand-in's capacity: the box's threads and memory, as its offer has them.
            given = hardware.get(box["key"])
            machine = None if given is None else Hardware(given.threads, given.memory_gib * 2**30)
            return self.farm.ensure(
                box["key"],
                ssh_host=box["ip"],
                ssh_port=box["ssh_port"],
                user=box["user"],
                authorized_key=box["authorized_key"],
                sudo_password=box["sudo_password"],
                disks=None if disks is None else [Disk(d["name"], int(d["size"])) for d in disks],
                hardware=machine,
                **platform,
            )

        for box, info in zip(boxes, _on_each(ensure, boxes), strict=True):
            self._record_box(box, info)
        self.store.commit()

    def reset_boxes(self) -> None:
        """After a reseed: every box back to its prepped install (fresh sandbox, prep key)."""
        self.start_boxes()
        prep = self.inventory.prep
        boxes = self.boxes()

        def reinstall(box: dict[str, Any]) -> Any:
            return self._reinstall(
                box,
                user=box["user"],
                authorized_key=prep.fleet_public_key,
                sudo_password=prep.sudo_password,
                platform=box.get("platform"),
                reset=True,
            )

        for box, info in zip(boxes, _on_each(reinstall, boxes), strict=True):
            self._record_box(box, info)
        self.store.commit()

    def reinstall_box(
        self,
        key: str,
        *,
        user: str,
        authorized_key: str | None,
        sudo_password: str | None,
        state: str = "installed",
        nopasswd_sudo: bool = False,
        platform: dict[str, Any] | None = None,
    ) -> None:
        box = self.store.get("box", key)
        if box is None:
            raise KeyError(f"no box {key}")
        info = self._reinstall(
            box,
            user=user,
            authorized_key=authorized_key,
            sudo_password=sudo_password,
            state=state,
            nopasswd_sudo=nopasswd_sudo,
            platform=platform,
        )
        self._record_box(box, info)

    def _reinstall(
        self,
        box: dict[str, Any],
        *,
        user: str,
        authorized_key: str | None,
        sudo_password: str | None,
        state: str = "installed",
        nopasswd_sudo: bool = False,
        platform: dict[str, Any] | None = None,
        reset: bool = False,
    ) -> Any:
        """Reinstall the box on the farm and update its document (not stored: the caller records it).
        `reset`: the admin reset's, which a farm may skip on a box nobody used since its last one."""
        box.update(user=user, authorized_key=authorized_key, sudo_password=sudo_password, state=state)
        box["generation"] = box.get("generation", 0) + 1
        extra: dict[str, Any] = {}
        if platform is not None:
            box["platform"] = platform
            extra["platform"] = platform
        farm_reset = getattr(self.farm, "reset", None) if reset and not nopasswd_sudo else None
        if farm_reset is not None:
            return farm_reset(
                box["key"], user=user, authorized_key=authorized_key, sudo_password=sudo_password, **extra
            )
        return self.farm.reinstall(
            box["key"],
            user=user,
            authorized_key=authorized_key,
            sudo_password=sudo_password,
            nopasswd_sudo=nopasswd_sudo,
            **extra,
        )

    def boot_rescue(self, key: str, *, authorized_key: str | None, host_key_pem: str | None = None) -> None:
        """Robot: the box boots the rescue system (root, the rescue keys, the host key Robot
        announced when the rescue boot was armed); its disk is kept."""
        box = self.store.get("box", key)
        if box is None:
            raise KeyError(f"no box {key}")
        box["state"] = "rescue"
        info = (
            self.farm.boot_rescue(key, authorized_key=authorized_key, host_key_pem=host_key_pem)
            if host_key_pem is not None
            else self.farm.boot_rescue(key, authorized_key=authorized_key)
        )
        self._record_box(box, info)

    def reboot_box(self, key: str) -> None:
        """A hardware reset with no rescue armed: the box boots the OS on its disk. Out of the rescue
        system after installimage, that is a fresh install: new host key, root with the keys
        installimage copied; otherwise the old OS comes back as it was."""
        box = self.store.get("box", key)
        if box is None:
            raise KeyError(f"no box {key}")
        fresh = box.get("state") == "rescue" and self.farm.installed_in_rescue(key)
        if fresh:
            box["generation"] = box.get("generation", 0) + 1
            box.update(user="root", authorized_key=box.get("rescue_key"), sudo_password=None)
        box["state"] = "installed"
        self._record_box(box, self.farm.reboot(key, new_host_key=fresh))

    def set_box_state(self, key: str, state: str) -> None:
        box = self.store.get("box", key)
        if box is not None:
            box["state"] = state
            self.store.put("box", key, box)

    def _record_box(self, box: dict[str, Any], info: Any) -> None:
        if info is not None:
            box["host_key_fingerprint"] = getattr(info, "host_key_fingerprint", None)
            box["sandbox_root"] = str(getattr(info, "sandbox_root", "")) or None
        self.store.put("box", box["key"], box)

    # --- async phases -----------------------------------------------------------

    def phase(self, created_at: float, phases: list[str]) -> tuple[int, bool]:
        """Index into `phases` for a task created at `created_at`, and whether it finished.

        The last entry is reached when task_seconds have passed; the others share the time
        before it evenly. Evaluated on read, so no background thread is needed.
        """
        elapsed = self.clock() - created_at
        if self.task_seconds <= 0 or elapsed >= self.task_seconds:
            return len(phases) - 1, True
        running = len(phases) - 1
        return min(int(elapsed / self.task_seconds * running), running - 1), False

    def advance(self, task: dict[str, Any], phases: list[str], failed: str) -> tuple[str | None, bool]:
        """The status wall time puts `task` in (its injected failure status, or `failed`, when it
        finishes with a fault injected), or None when that is the status it already has; and
        whether it has finished."""
        index, finished = self.phase(task["created_at"], phases)
        fail = task.get("fail")
        failure = failed if fail is True else fail
        status = failure if finished and failure else phases[index]
        return (None if status == task["status"] else status), finished


def public(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored documents without their `secret_` fields, for /_admin/state."""
    return [{k: v for k, v in d.items() if not k.startswith("secret_")} for d in docs]


def iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def iso_offset(epoch: float) -> str:
    """OVH writes dates with a numeric offset (2024-05-01T10:00:00+02:00)."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="seconds")


def redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: (REDACTED if k in SECRET_KEYS and v not in (None, "") else redact(v)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def json_reply(body: Any) -> bytes:
    return json.dumps(body).encode()


_T = TypeVar("_T")

# Boxes start and reinstall side by side: each one mostly waits (ssh-keygen, sshd coming up, its old
# processes going), and the farm locks per box. Tests reset the simulator before each test: reinstalling
# the dev inventory's 35 boxes took 12 s one after another, 2.5 s side by side (busy 2-core machine);
# boxes the last test did not use are skipped (BoxFarm.reset), 0.7 s when it used none.
BOX_WORKERS = 8


def _on_each(work: Callable[[dict[str, Any]], _T], boxes: Sequence[dict[str, Any]]) -> list[_T]:
    """`work` on every box at once (at most BOX_WORKERS at a time); results in the boxes' order, and the
    first failure raised."""
    if len(boxes) <= 1:
        return [work(box) for box in boxes]
    with ThreadPoolExecutor(max_workers=BOX_WORKERS, thread_name_prefix="box") as pool:
        return list(pool.map(work, boxes))
