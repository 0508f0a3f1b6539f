"""`python -m watcher`: run the failover watcher for one region inside the cluster.

Settings come from the Deployment's environment (components/failover_watcher.py):
FAILOVER_IP, FAILOVER_VENDOR, REGION, NODE_POOL, KURA_NAMESPACE, POLL_SECONDS,
CONFIRM_POLLS. Vendor credentials arrive as environment from a Secret and are read
only by the mover.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import threading

from watcher.loop import FailoverWatcher, Mover, WatcherSettings, kube_listers


def _require(env: str) -> str:
    value = os.environ.get(env, "")
    if not value:
        raise SystemExit(f"watcher: environment variable {env} is required")
    return value


def settings_from_env() -> WatcherSettings:
    return WatcherSettings(
        ip=_require("FAILOVER_IP"),
        region=_require("REGION"),
        node_pool=_require("NODE_POOL"),
        namespace=os.environ.get("KURA_NAMESPACE", "kura"),
        poll_seconds=float(os.environ.get("POLL_SECONDS", "30")),
        confirm_polls=int(os.environ.get("CONFIRM_POLLS", "2")),
    )


def build_mover(vendor: str) -> Mover:
    # The vendor clients live in providers.vendor (wired separately); import lazily so
    # the watcher's own logic has no vendor dependency.
    try:
        module = importlib.import_module("providers.vendor")
    except ImportError as exc:
        raise SystemExit(f"watcher: no mover available ({exc}); providers.vendor is required") from exc
    mover: Mover = module.VendorClient.from_env(vendor)
    return mover


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = settings_from_env()
    from kubernetes import client, config

    config.load_incluster_config()
    list_nodes, list_pods = kube_listers(client.CoreV1Api(), settings)
    watcher = FailoverWatcher(settings, list_nodes, list_pods, build_mover(_require("FAILOVER_VENDOR")))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    watcher.run(stop)
    sys.exit(0)


if __name__ == "__main__":
    main()
