"""How a claim is written into, and read back from, each vendor's per-box marker field.

The fleet marker always stays intact, so a claimed or releasing box stays in its fleet (and in its
environment):

- OVH displayName: `<base>` free, `<base> claim:<token>` claimed, `<base> releasing:<token>` while
  the holder's release reinstall runs.
- Dedibox tags: the fleet tag plus one `tuist-claim:<token>` or `tuist-releasing:<token>` tag.
- Robot server_name (Robot has no tags, keep it short): `<base>`, `<base>~c-<token>`,
  `<base>~r-<token>`.

Any claim-shaped suffix is read as a claim, even one with a token we would never write: a box that
someone marked by hand is held by someone, and adopting it would be the worse mistake.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable

from providers.errors import VendorInputError
from providers.vendor import Claim

_TOKEN = re.compile(r"^[0-9a-f]{12}$")

_OVH_SUFFIX = re.compile(r"^(?P<base>.*?) (?P<kind>claim|releasing):(?P<token>\S+)$")
DEDIBOX_CLAIM_PREFIX = "tuist-claim:"
DEDIBOX_RELEASING_PREFIX = "tuist-releasing:"
_ROBOT_SUFFIX = re.compile(r"^(?P<base>.*?)~(?P<kind>[cr])-(?P<token>[^~]+)$")


def claim_token(project: str, stack: str, resource_name: str) -> str:
    """Deterministic claim id of one machine resource: a retried create finds its own claim."""
    for what, value in (("project", project), ("stack", stack), ("resource_name", resource_name)):
        if not value:
            raise VendorInputError(f"claim_token: {what} is empty")
    return hashlib.sha256(f"{project}/{stack}/{resource_name}".encode()).hexdigest()[:12]


def _check_token(claim: Claim) -> None:
    if not _TOKEN.match(claim.token):
        raise VendorInputError(f"claim token {claim.token!r} is not 12 lowercase hex characters")


# --- OVH displayName ------------------------------------------------------------


def parse_ovh_display_name(display_name: str) -> tuple[str, Claim | None]:
    """(fleet marker part, claim) of an OVH displayName."""
    match = _OVH_SUFFIX.match(display_name)
    if not match:
        return display_name, None
    return match["base"], Claim(token=match["token"], releasing=match["kind"] == "releasing")


def ovh_display_name(base: str, claim: Claim | None) -> str:
    """The displayName carrying `claim` on top of the fleet marker part `base`."""
    _check_base(base, parse_ovh_display_name, "OVH displayName")
    if claim is None:
        return base
    _check_token(claim)
    kind = "releasing" if claim.releasing else "claim"
    return f"{base} {kind}:{claim.token}"


# --- Robot server_name -------------------------------------------------------------


def parse_robot_server_name(server_name: str) -> tuple[str, Claim | None]:
    """(fleet marker part, claim) of a Robot server_name."""
    match = _ROBOT_SUFFIX.match(server_name)
    if not match:
        return server_name, None
    return match["base"], Claim(token=match["token"], releasing=match["kind"] == "r")


def robot_server_name(base: str, claim: Claim | None) -> str:
    """The server_name carrying `claim` on top of the fleet marker part `base`."""
    _check_base(base, parse_robot_server_name, "Robot server_name")
    if claim is None:
        return base
    _check_token(claim)
    kind = "r" if claim.releasing else "c"
    return f"{base}~{kind}-{claim.token}"


# --- Dedibox tags ----------------------------------------------------------------


def _is_claim_tag(tag: str) -> bool:
    return tag.startswith((DEDIBOX_CLAIM_PREFIX, DEDIBOX_RELEASING_PREFIX))


def parse_dedibox_tags(tags: Iterable[str]) -> tuple[tuple[str, ...], Claim | None]:
    """(tags without claim tags, claim) of a Dedibox server.

    Two claim tags should never happen (set_claim replaces them all); if they do, the box reads as
    claimed by the first in sorted order, so it is never mistaken for a free box.
    """
    tags = list(tags)
    fleet_tags = tuple(tag for tag in tags if not _is_claim_tag(tag))
    claim_tags = sorted(tag for tag in tags if _is_claim_tag(tag))
    if not claim_tags:
        return fleet_tags, None
    first = claim_tags[0]
    if first.startswith(DEDIBOX_RELEASING_PREFIX):
        return fleet_tags, Claim(token=first.removeprefix(DEDIBOX_RELEASING_PREFIX), releasing=True)
    return fleet_tags, Claim(token=first.removeprefix(DEDIBOX_CLAIM_PREFIX), releasing=False)


def dedibox_tags(tags: Iterable[str], claim: Claim | None) -> list[str]:
    """The full tag list carrying `claim`: every non-claim tag kept in order, old claim tags dropped."""
    kept = [tag for tag in tags if not _is_claim_tag(tag)]
    if claim is None:
        return kept
    _check_token(claim)
    prefix = DEDIBOX_RELEASING_PREFIX if claim.releasing else DEDIBOX_CLAIM_PREFIX
    return [*kept, f"{prefix}{claim.token}"]


def _check_base(base: str, parse: Callable[[str], tuple[object, Claim | None]], field: str) -> None:
    if not base.strip():
        raise VendorInputError(f"{field}: the fleet marker part is empty")
    if parse(base)[1] is not None:
        raise VendorInputError(f"{field}: {base!r} already ends in a claim")
