"""Bare-metal machines: a box claimed for a fleet slot (MachineClaim) and joined to the cluster
(AdoptedMachine), with its Node's later labels and taints (NodeLabels).

spec.py        inputs, checks and the diff table
selection.py   candidates and the claim
record.py      where claims and progress persist (cluster MachineClaim objects, or process memory)
fsm.py         the state machine's engine: results, rows, runner, clock
states.py      the flows as tables, and the join and leave handlers
robot_install.py, release.py   the Robot install and the release handlers
provider.py    the Pulumi dynamic providers; resource.py the resources; node_labels.py NodeLabels
settings.py    what configure() reads; engine_link.py progress lines and the engine watchdog
crd.py         the MachineClaim CRD
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from providers.machine.node_labels import NodeLabels
    from providers.machine.resource import AdoptedMachine, MachineClaim

__all__ = ["AdoptedMachine", "MachineClaim", "NodeLabels"]

# The resources load the Pulumi SDK; importing a leaf (providers.machine.errors, .spec, .settings) from
# the operator's CLI or the watcher must not (PEP 562: the names resolve on first use).
_HOMES = {
    "AdoptedMachine": "providers.machine.resource",
    "MachineClaim": "providers.machine.resource",
    "NodeLabels": "providers.machine.node_labels",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
