"""The centre's retry policy (DESIGN §17 "Retries", "Start timeout"; docs/operator-guide.md, "Retries
and start timeout"): one row (pk 1), edited by platform admins in the admin."""

from django.contrib.postgres.fields import ArrayField
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

MAX_RETRIES_CEILING = 20  # whatever the centre says: 2^19 minutes of backoff is already capped at 1 h
START_TIMEOUT_MIN_SECONDS = 60
START_TIMEOUT_MAX_SECONDS = 7 * 86400
# Exit codes that say the job's configuration is wrong, not its luck: the portal's own Slurm codes
# for a missing secret file (78, EX_CONFIG) and an uncreatable checkpoint directory (73), and the
# shell's "cannot execute" (126) and "command not found" (127). Running again changes nothing.
DEFAULT_FINAL_EXIT_CODES = [73, 78, 126, 127]


def default_final_exit_codes() -> list[int]:
    return list(DEFAULT_FINAL_EXIT_CODES)


class RetryPolicy(models.Model):
    max_retries_limit = models.PositiveSmallIntegerField(
        _("most retries a job may ask for"), default=5, validators=[MaxValueValidator(MAX_RETRIES_CEILING)],
    )
    final_exit_codes = ArrayField(
        models.IntegerField(validators=[MinValueValidator(0), MaxValueValidator(255)]),
        verbose_name=_("final exit codes"), default=default_final_exit_codes, blank=True,
        help_text=_("A job that fails with one of these exit codes is never retried."),
    )
    start_timeout_seconds = models.PositiveIntegerField(
        _("start timeout (s)"), default=900,
        validators=[MinValueValidator(START_TIMEOUT_MIN_SECONDS),
                    MaxValueValidator(START_TIMEOUT_MAX_SECONDS)],
        help_text=_("An admitted job not running after this long gives its GPUs back and is requeued. "
                    "A cluster's configuration may set its own (start_timeout_seconds)."),
    )
    max_start_timeouts = models.PositiveSmallIntegerField(
        _("start timeouts before the job fails"), default=5,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_RETRIES_CEILING)],
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("retry policy")
        verbose_name_plural = _("retry policy")
        constraints = [models.CheckConstraint(condition=models.Q(pk=1), name="retry_policy_one_row")]

    def __str__(self):
        return f"retries ≤ {self.max_retries_limit}, start timeout {self.start_timeout_seconds} s"
