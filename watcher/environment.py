"""What the in-cluster loops read from their Deployment's or DaemonSet's environment. No Pulumi import."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["positive_seconds"]


def positive_seconds(env: Mapping[str, str], name: str, default: str) -> float:
    """`env[name]` (or `default` when unset) as a positive number of seconds; a ValueError naming the
    variable and its value otherwise."""
    raw = env.get(name, default)
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:  # also NaN
        raise ValueError(f"{name} '{raw}' is not a positive number of seconds")
    return seconds
