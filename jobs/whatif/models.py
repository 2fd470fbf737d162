"""The policy advisor's searches and candidates (issue 25; docs/advisor.md). The tables keep the
names they had in the `jobs` app (issue 31). States move only along :data:`SEARCH_MOVES` /
:data:`CANDIDATE_MOVES`, by conditional updates that write an :class:`AdvisorEvent` row."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from portal.models import User


class SearchState(models.TextChoices):
    QUEUED = "queued", _("queued")
    RUNNING = "running", _("running")
    DONE = "done", _("done")
    FAILED = "failed", _("failed")
    CANCELLED = "cancelled", _("cancelled")


class CandidateState(models.TextChoices):
    QUEUED = "queued", _("queued")
    RUNNING = "running", _("running")
    DONE = "done", _("done")
    FAILED = "failed", _("failed")


# from -> allowed to; finished states are final.
SEARCH_MOVES = {
    SearchState.QUEUED: {SearchState.RUNNING, SearchState.CANCELLED},
    SearchState.RUNNING: {SearchState.DONE, SearchState.FAILED, SearchState.CANCELLED},
}
CANDIDATE_MOVES = {
    CandidateState.QUEUED: {CandidateState.RUNNING},
    # running -> queued: its worker died (no heartbeat); the candidate is replayed again.
    CandidateState.RUNNING: {CandidateState.DONE, CandidateState.FAILED, CandidateState.QUEUED},
}


class AdvisorSearch(models.Model):
    """One search: the admin's bounds, seed and budget over one replay scenario."""

    created_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    scenario = models.JSONField()  # jobs.whatif.advisor.scenario.Scenario.to_json()
    bounds = models.JSONField()  # jobs.whatif.advisor.space.check_bounds()
    seed = models.PositiveIntegerField()
    budget = models.PositiveIntegerField(validators=[MinValueValidator(1), MaxValueValidator(2000)])
    in_flight = models.PositiveSmallIntegerField(default=2, validators=[MinValueValidator(1),
                                                                        MaxValueValidator(64)])
    p95_bound = models.FloatField(default=1.5)
    p95_floor_s = models.FloatField(default=60.0)
    projects = models.JSONField(default=list)  # the scenario's projects (queueing dimensions)
    state = models.CharField(max_length=10, choices=SearchState.choices, default=SearchState.QUEUED)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name = _("advisor search")
        verbose_name_plural = _("advisor searches")
        db_table = "jobs_advisorsearch"  # the table from before the app split (issue 31)

    def __str__(self):
        return f"advisor search #{self.pk} ({self.state})"


class AdvisorCandidate(models.Model):
    """One candidate: its params, one replay of them (``result``) and its score. Number 0 is
    today's settings (the baseline every other candidate is scored against)."""

    search = models.ForeignKey(AdvisorSearch, on_delete=models.CASCADE, related_name="candidates")
    number = models.PositiveIntegerField()
    params = models.JSONField()
    inputs = models.JSONField()  # the replay's spec keys: {"policy": ..., "queueing": ...}
    state = models.CharField(max_length=10, choices=CandidateState.choices, default=CandidateState.QUEUED)
    attempt = models.PositiveIntegerField(default=0)  # claims so far; a finish must carry the latest
    runs = models.PositiveIntegerField(default=0)  # replays that completed and were stored (≤ 1)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    objective = models.FloatField(null=True, blank=True)
    feasible = models.BooleanField(null=True)
    verdict = models.JSONField(null=True, blank=True)  # terms, violations, worst p95 ratio
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["search", "number"]
        db_table = "jobs_advisorcandidate"
        constraints = [models.UniqueConstraint(fields=["search", "number"], name="advisor_candidate_number")]
        indexes = [models.Index(fields=["state", "heartbeat_at"], name="advisor_candidate_state")]

    def __str__(self):
        return f"candidate {self.number} of search #{self.search_id} ({self.state})"


class AdvisorHistoryData(models.Model):
    """A history scenario's export (``jobs.whatif.history.texts``: trace.csv, cluster.json, recorded.csv,
    manifest.json), taken when the search was created: every worker reads it from here, whatever
    was recorded since and however often workers restart. Its own row, so that reading a search
    (the page polls it) does not load megabytes of trace."""

    search = models.OneToOneField(AdvisorSearch, on_delete=models.CASCADE, primary_key=True,
                                  related_name="history_data")
    files = models.JSONField()  # file name -> text

    class Meta:
        db_table = "jobs_advisorhistorydata"

    def __str__(self):
        return f"history of advisor search #{self.search_id}"


class AdvisorEvent(models.Model):
    """Append-only: every state change of a search or a candidate."""

    search = models.ForeignKey(AdvisorSearch, on_delete=models.CASCADE, related_name="events")
    candidate = models.ForeignKey(AdvisorCandidate, null=True, blank=True, on_delete=models.CASCADE,
                                  related_name="events")
    at = models.DateTimeField(auto_now_add=True)
    from_state = models.CharField(max_length=10)
    to_state = models.CharField(max_length=10)
    reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["id"]
        db_table = "jobs_advisorevent"

    def __str__(self):
        return f"{self.from_state or '∅'} → {self.to_state}"
