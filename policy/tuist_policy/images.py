"""Image references: pinned (a digest, or a tag naming one release: RELEASE_TAG) or floating."""

from __future__ import annotations

import re

# Tags that name a moving target. A tag that is not one of these (0.10.5, v1.11.3, 1.27.3-alpine) is
# an explicit version; a digest pins the bytes themselves.
FLOATING_TAGS = frozenset({"latest", "main", "master", "edge", "nightly", "stable", "dev", "head"})
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# What a pinned tag looks like: a full version (0.10.5, v1.13.3, 1.27.3-alpine) or a commit's
# (sha-0123abc). Anything else (alpine, mainline, lts, v1, latest-amd64) may move under the same name.
RELEASE_TAG = re.compile(r"v?\d+\.\d+\.\d+([-+._][0-9A-Za-z._+-]+)?|sha-[0-9a-f]{7,40}")


def floating_reason(image: str) -> str | None:
    """Why `image` would not deploy the same bits twice, or None when it is pinned."""
    if "@" in image:
        digest = image.split("@", 1)[1]
        return None if _DIGEST.match(digest) else f"'{image}' has a malformed digest (want @sha256:<64 hex>)"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"'{image}' has no tag, which means latest"
    tag = last.rsplit(":", 1)[1]
    if not tag:
        return f"'{image}' has an empty tag"
    if tag.lower() in FLOATING_TAGS:
        return f"'{image}' uses the floating tag '{tag}'"
    if not RELEASE_TAG.fullmatch(tag):
        return f"'{image}' uses the tag '{tag}', which names no release (want x.y.z, or a digest)"
    return None
