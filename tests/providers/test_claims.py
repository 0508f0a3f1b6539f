"""The claim token, and the claim encodings each vendor's models write into its marker field
(docs/vendor-behaviour.md section 4): `<base>--c-<token>` / `--r-` in a name, `tuist-claim-<token>` /
`tuist-releasing-<token>` as a tag of its own; the first version's forms still read as claims."""

from __future__ import annotations

import hashlib

import pytest

from providers.applesilicon import models as applesilicon
from providers.claims import claim_token
from providers.dedibox import models as dedibox
from providers.errors import VendorInputError
from providers.ovh import models as ovh
from providers.robot import models as robot
from providers.scaleway_em import models as scaleway_em
from providers.vendor import Claim

TOKEN = "0123456789ab"


def test_claim_token_is_first_12_hex_of_sha256():
    expected = hashlib.sha256(b"tuist-infra/staging/kura-us-east-0").hexdigest()[:12]
    assert claim_token("tuist-infra", "staging", "kura-us-east-0") == expected
    assert claim_token("tuist-infra", "staging", "kura-us-east-1") != expected
    with pytest.raises(VendorInputError, match="claim_token: stack is empty"):
        claim_token("tuist-infra", "", "x")


NAMED = [
    (ovh.display_name, ovh.parse_display_name, "tuist-kura-staging-bhs"),
    (robot.server_name, robot.parse_server_name, "tuist-bm-canary-3"),
    (applesilicon.compose_name, applesilicon.parse_name, "tuist-macos-canary-3"),
]


@pytest.mark.parametrize(("write", "read", "base"), NAMED)
@pytest.mark.parametrize(
    ("claim", "suffix"),
    [(None, ""), (Claim(TOKEN), f"--c-{TOKEN}"), (Claim(TOKEN, releasing=True), f"--r-{TOKEN}")],
)
def test_name_claims_round_trip(write, read, base, claim, suffix):
    assert write(base, claim) == base + suffix
    assert read(base + suffix) == (base, claim)


@pytest.mark.parametrize("tags_with", [dedibox.tags_with, scaleway_em.tags_with])
def test_tag_claims_keep_fleet_tags_and_replace_claims(tags_with):
    tags = ["tuist-kura-staging", "rack-b", f"tuist-claim:{TOKEN}"]  # an earlier version's claim tag
    assert tags_with(tags, Claim("ffffffffffff", releasing=True)) == [
        "tuist-kura-staging",
        "rack-b",
        "tuist-releasing-ffffffffffff",
    ]
    assert tags_with(tags, None) == ["tuist-kura-staging", "rack-b"]
    assert dedibox.parse_tags(tags) == (("tuist-kura-staging", "rack-b"), Claim(TOKEN))
    assert dedibox.parse_tags(["tuist-kura-staging", f"tuist-claim-{TOKEN}"]) == (
        ("tuist-kura-staging",),
        Claim(TOKEN),
    )
    assert dedibox.parse_tags(["tuist-kura-staging"]) == (("tuist-kura-staging",), None)


def test_two_claim_tags_still_read_as_claimed():
    _, claim = dedibox.parse_tags(["f", "tuist-releasing-bbbbbbbbbbbb", "tuist-claim-aaaaaaaaaaaa"])
    assert claim == Claim("aaaaaaaaaaaa")


def test_the_first_versions_claims_and_hand_written_ones_read_as_foreign_claims():
    assert ovh.parse_display_name("tuist-kura-staging claim:by-hand") == (
        "tuist-kura-staging",
        Claim("by-hand"),
    )
    assert robot.parse_server_name("tuist-bm-canary-1~c-x") == ("tuist-bm-canary-1", Claim("x"))
    assert applesilicon.parse_name("tuist-macos-dev-4--c-5a1ce0de0001") == (
        "tuist-macos-dev-4",
        Claim("5a1ce0de0001"),
    )


def test_writing_refuses_bad_tokens_bases_and_names_too_long_for_the_field():
    with pytest.raises(VendorInputError, match=r"claim token 'ABC' is not 12 lowercase hex characters"):
        ovh.display_name("tuist-kura-staging", Claim("ABC"))
    with pytest.raises(VendorInputError, match=r"OVH service displayName .*: the fleet marker part is empty"):
        ovh.display_name("", Claim(TOKEN))
    with pytest.raises(
        VendorInputError, match=r"Robot server_name .*: 'a--c-0123456789ab' already ends in a claim"
    ):
        robot.server_name(f"a--c-{TOKEN}", None)
    with pytest.raises(VendorInputError, match="is not 12 lowercase hex"):
        scaleway_em.tags_with([], Claim("nothex000000"))
    with pytest.raises(VendorInputError, match="use lowercase letters, digits and '-'"):
        applesilicon.compose_name("Tuist-Macos", Claim(TOKEN))
    # Apple silicon names stay hostname labels: 63 characters, so a 48-character base leaves no room.
    with pytest.raises(
        VendorInputError, match=r"is 64 characters long with the claim; the field takes at most 63"
    ):
        applesilicon.compose_name("m" * 48, Claim(TOKEN))
    assert len(applesilicon.compose_name("m" * 47, Claim(TOKEN))) == 63
