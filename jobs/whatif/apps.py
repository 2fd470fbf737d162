from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WhatifConfig(AppConfig):
    name = "jobs.whatif"
    label = "whatif"
    verbose_name = _("What-if")
