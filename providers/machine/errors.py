"""The errors the machine package raises. Messages never carry a secret.

`MachineError` hangs under the project's one error tree (providers/errors.py `InfraError`), next to
the vendor clients' `VendorError` and the SSH runner's `SshError`.
"""

from __future__ import annotations

from providers.errors import InfraError
from providers.ssh.runner import HostKeyMismatchError


class MachineError(InfraError):
    """Base of the errors the machine package raises."""


class MachineInputError(MachineError):
    """An input is missing or malformed; the message names it."""


class NotConfiguredError(MachineError):
    """A credential or the vendor account this machine needs is not in the stack config."""


class NoAdoptableBoxError(MachineError):
    """No box of the fleet can be claimed."""


class ReleaseRefusedError(MachineError):
    """A production box was asked to be released without the switches that allow it."""


class ReleaseUnfinishedError(MachineError):
    """A machine was asked to join a box whose release (reinstall) died before it finished."""


class ClaimLostError(MachineError):
    """The cluster-side claim of a box is held by someone else, or changed under this process."""


class BoxStillListedError(MachineError):
    """The vendor answered 404 for a box its account still lists (a wrong zone or endpoint, the
    vendor's own passing fault): the box is not taken as gone, and nothing about it is forgotten."""


class AmbiguousNodeError(MachineError):
    """Several Nodes carry one box's providerID: which one runs on the box is not known, so it is not
    wiped under any of them."""


class UnrecordedNodeError(MachineError):
    """A box to be installed (wiped) already runs a Node, which its claim's record does not know of."""


class MarkerChangeError(MachineError):
    """A fleet's marker changed and a box the fleet holds does not carry the new one: the claim is kept
    (a config edit never releases a box); the operator marks the box or replaces the claim."""


class MachineStepError(MachineError):
    """A state of the machine's state machine failed: names the state, the box, the attempt, the
    error's type and the time spent."""

    def __init__(
        self,
        machine: str,
        state: str,
        box: str,
        elapsed: float,
        cause: str,
        *,
        error_type: str = "Error",
        attempt: int = 1,
        failures: int = 1,
    ) -> None:
        self.machine, self.state, self.box, self.elapsed, self.cause = machine, state, box, elapsed, cause
        self.error_type, self.attempt, self.failures = error_type, attempt, failures
        Exception.__init__(
            self,
            f"{machine}: {state} failed on {box} after {elapsed:.1f}s "
            f"(attempt {attempt}, {error_type}, failure {failures}): {cause}",
        )


class MachineHostKeyMismatchError(MachineStepError, HostKeyMismatchError):
    """The box answered with a host key other than its pin, and nothing here reinstalled it."""
