"""`python -m demux`: run one region's peer-demux route reconciler inside the cluster.

Settings come from the Deployment's environment (components/peer_demux.py): REGION, REGION_HOST,
KURA_NAMESPACE, PEER_PORT, CLUSTER_DOMAIN (demux.routes.RouteSettings) and
ROUTES_CONFIGMAP, the ConfigMap the region's demux pods mount.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from demux.reconciler import RouteReconciler
from demux.routes import RouteSettings


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = RouteSettings.from_env()
    except ValueError as exc:
        raise SystemExit(f"demux: {exc}") from None
    configmap = os.environ.get("ROUTES_CONFIGMAP", "")
    if not configmap:
        raise SystemExit("demux: environment variable ROUTES_CONFIGMAP is required")
    from kubernetes import client, config

    config.load_incluster_config()
    reconciler = RouteReconciler(settings, client.CoreV1Api(), configmap)
    stop = threading.Event()

    def terminate(*_: object) -> None:
        # The watch blocks in a read: leave now, nothing is half-written (each write is one apply).
        stop.set()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, terminate)
    reconciler.run(stop)
    sys.exit(0)


if __name__ == "__main__":
    main()
