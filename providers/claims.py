"""The claim token: who holds a box, as every vendor marker and the cluster record name it.

How a claim is written into each vendor's marker field lives with that vendor's models
(providers/{ovh,robot,dedibox,scaleway_em,applesilicon}/models.py), on the grammar and limits of
providers/vendor.py (`CLAIM_SUFFIX`, `CLAIM_TAG`, `MARKER_LIMITS`).
"""

from __future__ import annotations

import hashlib

from providers.errors import VendorInputError


def claim_token(project: str, stack: str, resource_name: str) -> str:
    """Deterministic claim id of one machine resource: a retried create finds its own claim."""
    for what, value in (("project", project), ("stack", stack), ("resource_name", resource_name)):
        if not value:
            raise VendorInputError(f"claim_token: {what} is empty")
    return hashlib.sha256(f"{project}/{stack}/{resource_name}".encode()).hexdigest()[:12]
