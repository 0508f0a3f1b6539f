"""Third-party modules imported on first use, not at import.

The Pulumi program imports the dynamic resources, hence their providers' modules, only to register
them; the Kubernetes client, paramiko and the Scaleway SDK are for the provider process, which calls
them. Imported eagerly they were most of a small stack's preview (seconds per run):

    if TYPE_CHECKING:
        from kubernetes import client as k8s
    else:
        k8s = lazy_module("kubernetes.client")
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class _LazyModule(ModuleType):
    """Stands in for a module; the first attribute read imports it (under the import lock)."""

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self.__name__), attr)


def lazy_module(name: str) -> Any:
    """`import name`, deferred until an attribute of it is read."""
    return _LazyModule(name)
