"""The test session's own network namespace (scripts/netns.sh explains why).

scripts/test.sh runs pytest through `scripts/netns.sh exec`. A pytest started any other way (a
targeted run) moves itself into a new anonymous namespace here, before any test or fixture opens a
socket, so every run is isolated from the others on the machine and the boxes' addresses (the box
network on `lo`) exist in every run.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

from vendorsim.boxes import BOX_NETWORK, lo_carries_box_network

REPO = Path(__file__).resolve().parents[2]
NETNS_SH = REPO / "scripts" / "netns.sh"
_CLONE_NEWNET = 0x40000000

__all__ = ["BOX_NETWORK", "ensure_isolated"]


def ensure_isolated() -> None:
    """Enter a new network namespace set up by scripts/netns.sh, unless this one already is one.

    Called while pytest loads the root conftest: the process is single-threaded, and a namespace
    change is per thread, so every thread and child process started later lives in the new one.
    """
    if lo_carries_box_network():
        return
    if os.geteuid() != 0:
        raise SystemExit(
            "tests need a network namespace of their own (scripts/netns.sh), which needs root: "
            "run them as root, through scripts/test.sh or `scripts/netns.sh exec -- python -m pytest ...`"
        )
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise SystemExit(f"cannot enter a new network namespace: {os.strerror(error)}")
    subprocess.run(["bash", str(NETNS_SH), "setup"], check=True)
