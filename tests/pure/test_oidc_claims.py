"""An OpenID Connect provider's claims → a directory identity's fields (portal.oidc_claims: no
Django): every value the provider sends is checked before it reaches the database or Slurm."""

from __future__ import annotations

import pytest

from portal.oidc_claims import MAX_GROUP_LENGTH, ClaimError, ClaimMap, identity_fields

CLAIMS = {"sub": "s-1", "preferred_username": "alice", "email": "alice@centre.example", "name": "Alice",
          "uid": "alice1", "groups": ["vision-lab", "gpu-users"]}
MAP = ClaimMap(unix_name="uid")


def test_the_claims_named_by_the_map_become_the_fields():
    assert identity_fields(CLAIMS, MAP) == {
        "subject": "s-1", "username": "alice", "unix_name": "alice1", "email": "alice@centre.example",
        "display_name": "Alice", "groups": frozenset({"vision-lab", "gpu-users"}),
    }
    renamed = ClaimMap(username="upn", groups="roles", unix_name="")
    fields = identity_fields({"sub": "s-1", "upn": "bob", "roles": "admins"}, renamed)
    assert (fields["username"], fields["unix_name"], fields["groups"]) == ("bob", "", frozenset({"admins"}))


@pytest.mark.parametrize("change, claim", [
    ({"sub": ""}, "sub"),
    ({"sub": "x" * 256}, "sub"),
    ({"preferred_username": None}, "preferred_username"),
    ({"preferred_username": "al ice"}, "preferred_username"),
    ({"preferred_username": ["alice"]}, "preferred_username"),
    ({"uid": "Alice"}, "uid"),
    ({"uid": "a;rm -rf /"}, "uid"),
    ({"name": "Al\x00ice"}, "name"),
    ({"groups": {"a": 1}}, "groups"),
])
def test_claims_that_cannot_describe_a_user_are_refused_naming_the_claim(change, claim):
    with pytest.raises(ClaimError, match=claim):
        identity_fields({**CLAIMS, **change}, MAP)


def test_what_a_rule_could_never_match_is_left_out():
    groups = ["ok", "", 7, None, "x" * (MAX_GROUP_LENGTH + 1), "n\x00ul"]
    fields = identity_fields({**CLAIMS, "groups": groups, "email": "not-an-address"}, MAP)
    assert fields["groups"] == frozenset({"ok"}) and fields["email"] == ""
    assert identity_fields({**CLAIMS, "uid": None}, MAP)["unix_name"] == ""  # none sent: the user name
