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
from typing import Any

from regional_dns.reconciler import KUBE_TIMEOUT, KubeView, RegionalDns, Settings


def kube_api() -> Any:
    """The pod's client to its cluster: a timed-out call is not sent again
    (providers.kube.loop_retries), so a pass keeps within PASS_BUDGET_SECONDS."""
    from providers.kube import in_cluster_api_client

    return in_cluster_api_client(timeout=KUBE_TIMEOUT)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        raise SystemExit(f"regional_dns: {exc}") from None
    from kubernetes import client

    api = kube_api()
    view = KubeView(settings, client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api))
    reconciler = RegionalDns(settings, view)
    stop = threading.Event()
    # Each write is one apply: stopping between passes leaves nothing half-written.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    reconciler.run(stop)
    sys.exit(0)


if __name__ == "__main__":
    main()
