"""The liveness heartbeat of the in-cluster loops (the failover watcher, the public DNS reconciler).

Before each step a loop writes the time by which it will write again; the pod's exec probe
(components/k8s.py, `heartbeat_probe`) restarts a loop that missed it, hung on a call that never
returns. No Pulumi import here.
"""

from __future__ import annotations

import os
import time

__all__ = ["write_heartbeat"]


def write_heartbeat(path: str | None, within: float) -> None:
    """Promise the next write within `within` seconds: whole, or not at all (a rename). None: not kept."""
    if not path:
        return
    temporary = f"{path}.tmp"
    with open(temporary, "w") as out:
        out.write(f"{int(time.time() + within)}\n")
    os.replace(temporary, path)
