"""Fixtures of the security tests: the persona world of tests/conftest.py, signed in."""

import pytest
from django.test import Client


@pytest.fixture
def page_client(world):
    """``page_client(name, **client_kwargs)`` → a Django test client signed in as that persona."""

    def make(name: str | None, **kwargs) -> Client:
        client = Client(HTTP_ACCEPT_LANGUAGE="en", **kwargs)
        if name is not None:
            client.force_login(world.users[name])
        return client

    return make
