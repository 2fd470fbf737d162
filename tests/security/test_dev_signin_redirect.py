"""Sign-in sends a user back to a dev job's Ingress host (one label under a configured dev-job
domain) and nowhere else: lookalike hosts, deeper names and other schemes stay open redirects
refused (the user lands on the portal)."""

import pytest
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def signin(client, settings):
    settings.GPUPOOL = {**settings.GPUPOOL, "DEV_INGRESS_DOMAINS": ["dev.centre.cn"]}
    get_user_model().objects.create_user(username="ann", password="pw-ann-long-enough")

    def post(next_url):
        response = client.post(
            "/accounts/login/", {"username": "ann", "password": "pw-ann-long-enough", "next": next_url}
        )
        assert response.status_code == 302, response.status_code
        client.logout()
        return response["Location"]

    return post


def test_a_dev_job_host_is_a_place_to_return_to(signin):
    assert signin("https://gp-12.dev.centre.cn/lab?token=x") == "https://gp-12.dev.centre.cn/lab?token=x"


@pytest.mark.parametrize(
    "next_url",
    [
        "https://evil.example/",
        "https://dev.centre.cn.evil.example/",
        "https://a.b.dev.centre.cn/",  # one label only
        "https://gp-12.dev.centre.cn@evil.example/",
        "javascript:alert(1)//gp-12.dev.centre.cn",
        "//evil.example/",
    ],
)
def test_anything_else_lands_on_the_portal(signin, next_url):
    assert signin(next_url) == "/"
