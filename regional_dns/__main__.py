"""`python -m regional_dns`: run one region's public-plane DNS reconciler inside the cluster.

Settings come from the Deployment's environment (components/dns_reconciler.py): REGION,
REGION_HOST, KURA_NAMESPACE, GATEWAY_DEPLOYMENT, NODE_POOL, DNSENDPOINT, and optionally
REFRESH_SECONDS (default 30) and HEARTBEAT_FILE (regional_dns.reconciler.Settings).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading

from regional_dns.reconciler import KubeView, RegionalDns, Settings


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        raise SystemExit(f"regional_dns: {exc}") from None
    from kubernetes import client, config

    config.load_incluster_config()
    view = KubeView(settings, client.CoreV1Api(), client.AppsV1Api(), client.CustomObjectsApi())
    reconciler = RegionalDns(settings, view)
    stop = threading.Event()
    # Each write is one apply: stopping between passes leaves nothing half-written.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    reconciler.run(stop)
    sys.exit(0)


if __name__ == "__main__":
    main()
