"""The route reconciler: watch the region's account Services, keep the routes ConfigMap in step.

One reconciler per region (components/peer_demux.py deploys it). It lists the Services of the Kura
namespace that kura-controller labelled as an account's Services of this region
(`RouteSettings.service_selector`), then watches them; every change re-renders the routes file
(demux/routes.py) and, when the text differs from what the ConfigMap holds, server-side-applies it
as its own field manager.
The demux pods mount that ConfigMap and reload nginx gracefully on change (nginx-reload.sh), so
established peer connections survive a new account.

Failures keep the last routes: a read error or an expired watch is retried with a backoff and a
fresh list, never answered with an empty map.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from demux.routes import (
    ROUTES_KEY,
    RouteSettings,
    ServiceView,
    account_routes,
    render_routes,
    service_view,
)

__all__ = ["FIELD_MANAGER", "RouteReconciler"]

log = logging.getLogger("demux")

# The field manager that owns the routes ConfigMap's data (Pulumi owns only its metadata).
FIELD_MANAGER = "kura-peer-demux-routes"


class RouteReconciler:
    def __init__(
        self,
        settings: RouteSettings,
        core_v1: Any,
        configmap: str,
        *,
        resync_seconds: int = 300,
        backoff_seconds: float = 5.0,
        watch_factory: Callable[[], Any] | None = None,
    ) -> None:
        self.settings = settings
        self._core = core_v1
        self.configmap = configmap
        self.resync_seconds = resync_seconds
        self.backoff_seconds = backoff_seconds
        self._services: dict[str, ServiceView] = {}
        self._written: str | None = None
        if watch_factory is None:
            from kubernetes import watch

            watch_factory = watch.Watch
        self._watch_factory = watch_factory

    # --- one step -------------------------------------------------------------------------------

    def desired(self) -> str:
        routes, skipped = account_routes(self._services.values(), self.settings)
        for s in skipped:
            log.warning("region %s: not routing %s: %s", self.settings.region, s.service, s.reason)
        return render_routes(routes, self.settings)

    def apply(self) -> bool:
        """Write the routes when they differ from what was last written; True when written."""
        text = self.desired()
        if text == self._written:
            return False
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": self.configmap, "namespace": self.settings.namespace},
            "data": {ROUTES_KEY: text},
        }
        self._core.patch_namespaced_config_map(
            self.configmap,
            self.settings.namespace,
            body,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
        )
        self._written = text
        hosts = [line.split('"')[1].removeprefix("ok:") for line in text.splitlines() if line.startswith('"')]
        log.info("region %s: routes written to %s: %s", self.settings.region, self.configmap, hosts or "none")
        return True

    def relist(self) -> str:
        """List the region's account Services afresh; returns the list's resourceVersion."""
        listing = self._core.list_namespaced_service(
            self.settings.namespace, label_selector=self.settings.service_selector()
        )
        self._services = {s.metadata.name: service_view(s) for s in listing.items}
        # A resync writes the routes again even when they are what this process wrote last: the
        # ConfigMap may have lost them since (replaced by an up, edited, deleted), and nginx would
        # then serve no route at all until this pod restarted. The apply is server-side: an equal
        # write changes nothing, so no reload follows it.
        self._written = None
        return str(listing.metadata.resource_version)

    def on_event(self, kind: str, service: Any) -> None:
        name = service.metadata.name
        if kind == "DELETED":
            self._services.pop(name, None)
        else:
            self._services[name] = service_view(service)

    # --- the loop ---------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                version = self.relist()
                self.apply()
                watcher = self._watch_factory()
                for event in watcher.stream(
                    self._core.list_namespaced_service,
                    self.settings.namespace,
                    # A Service relabelled out of the selector arrives as DELETED.
                    label_selector=self.settings.service_selector(),
                    resource_version=version,
                    timeout_seconds=self.resync_seconds,
                ):
                    if event["type"] == "ERROR":
                        # 410 Gone and friends: the watch is over, relist.
                        log.info("region %s: watch ended: %s", self.settings.region, event.get("raw_object"))
                        break
                    self.on_event(event["type"], event["object"])
                    self.apply()
                    if stop.is_set():
                        watcher.stop()
                        break
            except Exception as exc:  # keep the last routes; try again after a pause
                log.warning(
                    "region %s: keeping the current routes, retrying in %.0fs: %s",
                    self.settings.region,
                    self.backoff_seconds,
                    exc,
                )
                stop.wait(self.backoff_seconds)
