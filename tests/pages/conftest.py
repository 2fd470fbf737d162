"""Fixtures for the browser pages: the persona world of tests/conftest.py plus jobs."""

import pytest
from django.test import Client

from jobs.models import Job
from jobs.services import job_submit
from tests import factories as fx

# The shared refusal assertions report their values like a test module's own.
pytest.register_assert_rewrite("tests.pages.submit_refusals")


@pytest.fixture
def prio(db):
    return fx.priority("training", 100)


@pytest.fixture
def page_client(world):
    """``page_client(name)`` → a Django test client signed in as that persona, in English (the
    assertions read English text; zh-hans rendering has its own test)."""

    def make(name: str | None, language: str = "en") -> Client:
        client = Client(HTTP_ACCEPT_LANGUAGE=language)
        if name is not None:
            client.force_login(world.users[name])
        return client

    return make


@pytest.fixture
def pa1_job(world, prio) -> Job:
    """A job of project pa1 submitted by its member."""
    return job_submit(
        actor=world.users["pa1_member"],
        project=world.pa1,
        name="pa1-train",
        kind="training",
        flavor=world.F,
        priority_class=prio,
        image="pytorch:2.3",
        workers=1,
        gpus_per_worker=4,
        max_runtime_seconds=7200,
    )


@pytest.fixture
def pb_job(world, prio) -> Job:
    return job_submit(
        actor=world.users["pb_member"],
        project=world.pb,
        name="pb-secret",
        kind="training",
        flavor=world.F,
        priority_class=prio,
        image="pytorch:2.3",
        workers=1,
        gpus_per_worker=8,
        max_runtime_seconds=3600,
    )
