"""The claim encodings on each vendor's marker field, and the claim token."""

from __future__ import annotations

import hashlib

import pytest

from providers import claims
from providers.errors import VendorInputError
from providers.vendor import Claim

TOKEN = "0123456789ab"


def test_claim_token_is_first_12_hex_of_sha256():
    expected = hashlib.sha256(b"tuist-infra/staging/kura-us-east-0").hexdigest()[:12]
    assert claims.claim_token("tuist-infra", "staging", "kura-us-east-0") == expected
    assert claims.claim_token("tuist-infra", "staging", "kura-us-east-1") != expected
    with pytest.raises(VendorInputError, match="claim_token: stack is empty"):
        claims.claim_token("tuist-infra", "", "x")


@pytest.mark.parametrize(
    ("claim", "display_name"),
    [
        (None, "tuist-kura-staging-bhs"),
        (Claim(TOKEN), f"tuist-kura-staging-bhs claim:{TOKEN}"),
        (Claim(TOKEN, releasing=True), f"tuist-kura-staging-bhs releasing:{TOKEN}"),
    ],
)
def test_ovh_display_name_round_trip(claim, display_name):
    assert claims.ovh_display_name("tuist-kura-staging-bhs", claim) == display_name
    assert claims.parse_ovh_display_name(display_name) == ("tuist-kura-staging-bhs", claim)


@pytest.mark.parametrize(
    ("claim", "server_name"),
    [
        (None, "tuist-bm-canary-3"),
        (Claim(TOKEN), f"tuist-bm-canary-3~c-{TOKEN}"),
        (Claim(TOKEN, releasing=True), f"tuist-bm-canary-3~r-{TOKEN}"),
    ],
)
def test_robot_server_name_round_trip(claim, server_name):
    assert claims.robot_server_name("tuist-bm-canary-3", claim) == server_name
    assert claims.parse_robot_server_name(server_name) == ("tuist-bm-canary-3", claim)


def test_dedibox_tags_keep_fleet_tags_and_replace_claims():
    tags = ["tuist-kura-staging", "rack-b", f"tuist-claim:{TOKEN}"]
    assert claims.dedibox_tags(tags, Claim("ffffffffffff", releasing=True)) == [
        "tuist-kura-staging",
        "rack-b",
        "tuist-releasing:ffffffffffff",
    ]
    assert claims.dedibox_tags(tags, None) == ["tuist-kura-staging", "rack-b"]
    assert claims.parse_dedibox_tags(tags) == (("tuist-kura-staging", "rack-b"), Claim(TOKEN))
    assert claims.parse_dedibox_tags(["tuist-kura-staging"]) == (("tuist-kura-staging",), None)


def test_two_dedibox_claim_tags_still_read_as_claimed():
    _, claim = claims.parse_dedibox_tags(["f", "tuist-releasing:bbbbbbbbbbbb", "tuist-claim:aaaaaaaaaaaa"])
    assert claim == Claim("aaaaaaaaaaaa")


def test_hand_written_claim_suffix_reads_as_a_foreign_claim():
    assert claims.parse_ovh_display_name("tuist-kura-staging claim:by-hand") == (
        "tuist-kura-staging",
        Claim("by-hand"),
    )
    assert claims.parse_robot_server_name("tuist-bm-canary-1~c-x") == ("tuist-bm-canary-1", Claim("x"))


def test_writing_refuses_bad_tokens_and_bases():
    with pytest.raises(VendorInputError, match=r"claim token 'ABC' is not 12 lowercase hex characters"):
        claims.ovh_display_name("tuist-kura-staging", Claim("ABC"))
    with pytest.raises(VendorInputError, match=r"OVH displayName: the fleet marker part is empty"):
        claims.ovh_display_name("", Claim(TOKEN))
    with pytest.raises(VendorInputError, match=r"Robot server_name: 'a~c-x' already ends in a claim"):
        claims.robot_server_name("a~c-x", None)
    with pytest.raises(VendorInputError, match="is not 12 lowercase hex"):
        claims.dedibox_tags([], Claim("nothex000000"))
