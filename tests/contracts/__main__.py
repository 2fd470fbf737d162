"""Record the contracts anew: ``.venv/bin/python -m tests.contracts`` (then review the diff)."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.test")
django.setup()

from tests.contracts import record  # noqa: E402 - after django.setup()

record()
