"""`python -m watcher`: run the failover watcher for one region inside the cluster.

Settings come from the Deployment's environment (components/failover_watcher.py):
FAILOVER_IP, FAILOVER_VENDOR, REGION, NODE_POOL, KURA_NAMESPACE, POLL_SECONDS,
CONFIRM_POLLS, and for the mover FAILOVER_VENDOR_ACCOUNT (non-secret account settings,
JSON) and FAILOVER_CREDENTIALS_DIR. Vendor credentials are files mounted from a Secret
and are read only by the mover (watcher/mover.py), never from the environment.

LEASE_NAME and LEASE_NAMESPACE name the region's Lease and POD_NAME (the downward API) is this
watcher's identity in it: the loop moves the IP only while it holds that Lease (watcher/lease.py).

POLL_SECONDS is how often Kubernetes is read. The vendor's route is read no more often than its
request budget allows (watcher.mover.min_poll_seconds: Robot's GET /failover/{ip} allows 100 calls
an hour per account, shared by ROBOT_FAILOVER_WATCHERS watchers, default 1); between two reads the
loop decides on the route it knows, so a Robot region's IP leaves a failing box as fast as any other.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from typing import Any

from watcher.lease import LeaseFence, LeaseSettings
from watcher.loop import KUBE_TIMEOUT, FailoverWatcher, WatcherSettings, kube_listers
from watcher.mover import MoverConfigError, VendorMover, min_poll_seconds, mover_from_env, parse_vendor

log = logging.getLogger("watcher")


def _require(env: str) -> str:
    value = os.environ.get(env, "")
    if not value:
        raise SystemExit(f"watcher: environment variable {env} is required")
    return value


def _number(env: str, default: str, kind: type[float] | type[int]) -> float:
    raw = os.environ.get(env, default)
    try:
        value = kind(raw)
    except ValueError:
        raise SystemExit(f"watcher: environment variable {env}={raw!r} is not a number") from None
    if value <= 0:
        raise SystemExit(f"watcher: environment variable {env} must be > 0, got {raw}")
    return value


def settings_from_env() -> WatcherSettings:
    try:
        vendor = parse_vendor(_require("FAILOVER_VENDOR"))
    except MoverConfigError as exc:
        raise SystemExit(f"watcher: FAILOVER_VENDOR: {exc}") from None
    poll_seconds = _number("POLL_SECONDS", "30", float)
    route_read_seconds = min_poll_seconds(vendor, watchers=int(_number("ROBOT_FAILOVER_WATCHERS", "1", int)))
    if route_read_seconds > poll_seconds:
        log.info(
            "reading Kubernetes every %gs and %s's route every %gs (half its request budget)",
            poll_seconds,
            vendor.value,
            route_read_seconds,
        )
    return WatcherSettings(
        ip=_require("FAILOVER_IP"),
        region=_require("REGION"),
        node_pool=_require("NODE_POOL"),
        namespace=os.environ.get("KURA_NAMESPACE", "kura"),
        poll_seconds=poll_seconds,
        route_read_seconds=route_read_seconds,
        confirm_polls=int(_number("CONFIRM_POLLS", "2", int)),
        heartbeat_file=os.environ.get("HEARTBEAT_FILE") or None,
    )


def lease_from_env() -> LeaseSettings | None:
    name = os.environ.get("LEASE_NAME", "")
    if not name:
        log.warning("LEASE_NAME is not set: moving the IP without the region's lease")
        return None
    return LeaseSettings(
        namespace=_require("LEASE_NAMESPACE"),
        name=name,
        identity=os.environ.get("POD_NAME") or socket.gethostname(),
    )


def build_mover() -> VendorMover:
    try:
        return mover_from_env()
    except MoverConfigError as exc:
        # A bad mount or setting is fixed by a deploy, not by a traceback.
        raise SystemExit(f"watcher: {exc}") from None


def kube_api() -> Any:
    """The pod's client to its cluster, for the lists and the Lease alike: every call names its own
    timeouts, and a timed-out one is not sent again (providers.kube.loop_retries), so the Lease's
    timing (watcher/lease.py) and the poll's budget hold."""
    from providers.kube import in_cluster_api_client

    return in_cluster_api_client(timeout=KUBE_TIMEOUT)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = settings_from_env()
    mover = build_mover()
    from kubernetes import client

    api = kube_api()
    list_nodes, list_pods = kube_listers(client.CoreV1Api(api), settings)
    lease = lease_from_env()
    fence = LeaseFence(client.CoordinationV1Api(api), lease) if lease is not None else None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    watcher = FailoverWatcher(settings, list_nodes, list_pods, mover, fence=fence)
    if fence is None:
        watcher.run(stop)
    else:
        fence.hold()  # before the first poll, which would otherwise wait a whole poll as standby
        renewals_stop = threading.Event()
        renewals = threading.Thread(target=fence.renew_until, args=(renewals_stop,), daemon=True)
        renewals.start()
        watcher.run(stop)
        # After the loop's last poll (and any move in it): the next watcher takes over at once.
        renewals_stop.set()
        renewals.join()
        fence.release()
    sys.exit(0)


if __name__ == "__main__":
    main()
