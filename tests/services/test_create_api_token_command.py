"""``manage.py create_api_token``: an operator's way to a personal token for a service account
(DRF's ``drf_create_token`` left with the clear-text tokens, issue 32 item 16)."""

import io

import pytest
from django.core.management import CommandError, call_command

from portal.models import ApiToken, User
from portal.tokens import digest, token_user

pytestmark = pytest.mark.django_db


def test_the_command_prints_a_working_token_once_and_keeps_only_its_digest():
    user = User.objects.create_user(username="ci-runner")
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_token", "ci-runner", "--name", "nightly", "--days", "7", stdout=out, stderr=err)
    secret = out.getvalue().strip()
    token = ApiToken.objects.get(user=user)
    assert token.name == "nightly" and token.digest == digest(secret) and secret not in str(token.__dict__)
    assert token_user(secret)[0] == user
    assert (token.expires_at - token.created_at).days == 7
    assert token.prefix in err.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nobody", "--name", "x"], "No user"),
        (["ci-runner", "--name", "  "], "name"),
        (["ci-runner", "--name", "x", "--days", "0"], "expires_in_days"),
    ],
)
def test_the_command_refuses_bad_input_and_makes_nothing(args, message):
    User.objects.create_user(username="ci-runner")
    with pytest.raises(CommandError, match=message):
        call_command("create_api_token", *args, stdout=io.StringIO(), stderr=io.StringIO())
    assert not ApiToken.objects.exists()


def test_a_deactivated_user_gets_no_token():
    User.objects.create_user(username="gone", is_active=False)
    with pytest.raises(CommandError):
        call_command("create_api_token", "gone", "--name", "x", stdout=io.StringIO(), stderr=io.StringIO())
    assert not ApiToken.objects.exists()
