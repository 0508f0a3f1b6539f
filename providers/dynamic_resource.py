"""The base of this project's dynamic resources: pulumi.dynamic.Resource with its provider serializer
made safe to call any number of times in one process.

pulumi 3.x's `serialize_provider` swaps in a dict-sorting `pickle._Pickler._batch_setitems` (so the
pickled provider is deterministic) wrapped around whatever is installed, and never restores it: every
dynamic resource stacks one more wrapper. Pickling a dict then recurses once per resource registered
before it, so each registration costs more than the last (quadratic in the stack's size) and a
program past about a thousand dynamic resources dies with RecursionError. Here each serialization
runs against the pickler as it was before any of them, and leaves it that way.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pulumi
import pulumi.dynamic as dyn
from pulumi.dynamic import dynamic as _sdk

# What serialize_provider patches: the pure-Python pickler dill builds on. Read once, at import, so
# before this process serialized any provider.
_PATCHED = ("_batch_setitems", "save_dict")
_PRISTINE: dict[str, Callable[..., Any]] = {name: getattr(pickle._Pickler, name) for name in _PATCHED}


@contextmanager
def _pristine_pickler() -> Iterator[None]:
    for name, method in _PRISTINE.items():
        setattr(pickle._Pickler, name, method)
    try:
        yield
    finally:
        for name, method in _PRISTINE.items():
            setattr(pickle._Pickler, name, method)


def serialize_provider(provider: dyn.ResourceProvider) -> str:
    """The SDK's `__provider` value for `provider` (base64 dill pickle, dicts sorted)."""
    with _pristine_pickler():
        return str(_sdk.serialize_provider(provider))


class DynamicResource(dyn.Resource):
    """pulumi.dynamic.Resource, whose provider serialization leaves no wrapper behind."""

    def __init__(
        self,
        provider: dyn.ResourceProvider,
        name: str,
        props: Mapping[str, Any],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        with _pristine_pickler():
            super().__init__(provider, name, dict(props), opts)
