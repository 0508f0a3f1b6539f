"""Adapter to the SSH box farm (vendorsim/boxes.py, written separately).

The simulator only needs ensure / reinstall / stop_all; `--no-ssh` swaps in a farm that
starts nothing, so the HTTP side runs (and is tested) without OpenSSH.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol


class Farm(Protocol):
    def ensure(
        self,
        box_key: str,
        *,
        ssh_port: int,
        user: str,
        authorized_key: str | None,
        sudo_password: str | None,
        disks: Sequence[Any] | None = None,
        ssh_host: str = "127.0.0.1",
        platform: Mapping[str, object] | None = None,
        hardware: Any | None = None,
    ) -> Any: ...

    def reinstall(
        self,
        box_key: str,
        *,
        user: str,
        authorized_key: str | None,
        sudo_password: str | None,
        nopasswd_sudo: bool = False,
        platform: Mapping[str, object] | None = None,
    ) -> Any: ...

    def boot_rescue(
        self, box_key: str, *, authorized_key: str | None, host_key_pem: str | None = None
    ) -> Any: ...

    def reboot(self, box_key: str, *, new_host_key: bool) -> Any: ...

    def installed_in_rescue(self, box_key: str) -> bool: ...

    def stop_all(self) -> None: ...


class NoSshFarm:
    """--no-ssh: boxes exist only as API state."""

    def ensure(
        self,
        box_key: str,
        *,
        ssh_port: int,
        user: str,
        authorized_key: str | None,
        sudo_password: str | None,
        disks: Sequence[Any] | None = None,
        ssh_host: str = "127.0.0.1",
        platform: Mapping[str, object] | None = None,
        hardware: Any | None = None,
    ) -> None:
        return None

    def reinstall(
        self,
        box_key: str,
        *,
        user: str,
        authorized_key: str | None,
        sudo_password: str | None,
        nopasswd_sudo: bool = False,
        platform: Mapping[str, object] | None = None,
    ) -> None:
        return None

    def boot_rescue(
        self, box_key: str, *, authorized_key: str | None, host_key_pem: str | None = None
    ) -> None:
        return None

    def reboot(self, box_key: str, *, new_host_key: bool) -> None:
        return None

    def installed_in_rescue(self, box_key: str) -> bool:
        # No sandbox runs installimage without SSH: a reset out of rescue boots the old OS.
        return False

    def stop_all(self) -> None:
        return None


def open_farm(state_dir: Path, *, ssh: bool, cpu_budget: Path | None = None) -> Farm:
    if not ssh:
        return NoSshFarm()
    try:
        from vendorsim.boxes import BoxFarm  # type: ignore[import-not-found,unused-ignore]
    except ImportError as e:
        raise SystemExit(f"vendorsim: SSH boxes are unavailable ({e}); run with --no-ssh") from None
    from vendorsim.boxes import reap_orphans

    # A previous run that was killed outright leaves its sshd holding the boxes' ports.
    reap_orphans(state_dir / "boxes")
    farm: Farm = BoxFarm(state_dir / "boxes", cpu_budget=cpu_budget)
    return farm
