"""scripts/gpupool_cli.py ``submit --max-retries`` against a live portal (issue 35 item 3): the
count reaches the job, and one above the centre's maximum is the portal's 400, printed."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.utils import translation

from jobs.models import Job
from jobs.retries import retry_policy
from tests.docs.test_cli import run, token_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_submit_with_max_retries_and_one_too_many(portal, cli, capsys):
    _world, url = portal
    key = token_for(cli, capsys, url, "pa1_member")
    base = ["submit", "--name", "flaky", "--project", "pa1", "--flavor", "F", "--priority", "training",
            "--image", "img:1", "--gpus", "1"]
    code, out, _ = run(cli, capsys, url, "--json", *base, "--max-retries", "2", token=key)
    assert code == 0
    assert Job.objects.get(pk=json.loads(out)["id"]).max_retries == 2
    limit = retry_policy().max_retries_limit
    code, _, err = run(cli, capsys, url, *base, "--max-retries", str(limit + 1), token=key)
    # The CLI sends no Accept-Language: the portal answers in its default language.
    with translation.override(settings.LANGUAGE_CODE):
        said = translation.gettext("Between 0 and %(limit)s (the centre's maximum).") % {"limit": limit}
    assert code == 1 and "max_retries" in err and said in err
    assert Job.objects.count() == 1
