"""Tests pass in any order (issue 18, item 18): what one test leaves in the thread or in Redis is
gone before the next one starts (tests/conftest.py ``_no_leftovers``).

The first test leaves state behind the way real tests did; the second, which pytest-django
always runs after it (it needs no database), must not see it."""

import pytest
from django.core.cache import cache
from django.utils import timezone, translation

LEFT = "item18-left-behind"


@pytest.mark.django_db
def test_item18_an_english_request_leaves_english_active_in_the_tests_thread(client):
    response = client.get("/accounts/login/", HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 200 and response.headers["Content-Language"] == "en"
    # LocaleMiddleware activated the request's language in this thread and left it there.
    assert translation.get_language() == "en"
    timezone.activate("UTC")
    cache.set(LEFT, "yes", 600)


def test_item18_the_next_test_starts_in_the_site_language_zone_and_an_empty_cache(settings):
    assert translation.get_language() == settings.LANGUAGE_CODE == "zh-hans"
    assert str(translation.gettext("English")) == "英语"
    assert timezone.get_current_timezone_name() == settings.TIME_ZONE
    assert cache.get(LEFT) is None
