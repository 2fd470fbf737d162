"""Where work that does not come through the portal comes from (DESIGN §11): sources (a Slurm
account or a Kubernetes namespace of a cluster) mapped to projects, what an unmapped source's jobs
looked like, and how far each importer has read. The tables keep the names they had in the `jobs`
app (issue 31: the models moved, the rows did not)."""

from django.db import models
from django.utils.translation import gettext_lazy as _

from portal.models import Project, User
from quotas.models import Cluster


class ExternalSourceKind(models.TextChoices):
    SLURM_ACCOUNT = "slurm_account", _("Slurm account")
    K8S_NAMESPACE = "k8s_namespace", _("Kubernetes namespace")


class ExternalSource(models.Model):
    """Where external jobs come from: a Slurm account or a Kubernetes namespace of one cluster,
    and the project its jobs belong to (DESIGN §11). ``project`` empty: unmapped — its jobs are
    kept as observations until an admin maps it, which turns them into jobs (history included)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="external_sources")
    kind = models.CharField(_("kind"), max_length=20, choices=ExternalSourceKind.choices)
    name = models.CharField(_("name"), max_length=100)
    project = models.ForeignKey(
        Project,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="external_sources",
        verbose_name=_("project"),
    )
    first_seen_at = models.DateTimeField(_("first seen"), auto_now_add=True)
    last_seen_at = models.DateTimeField(_("last seen"), null=True, blank=True)
    mapped_at = models.DateTimeField(_("mapped"), null=True, blank=True)
    mapped_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.PROTECT, related_name="+")

    class Meta:
        ordering = ["cluster", "kind", "name"]
        verbose_name = _("external source")
        verbose_name_plural = _("external sources")
        db_table = "jobs_externalsource"  # the table from before the app split (issue 31)
        constraints = [
            models.UniqueConstraint(fields=["cluster", "kind", "name"], name="external_source_unique"),
        ]

    def __str__(self):
        return f"{self.cluster}: {self.name}"


class ExternalObservation(models.Model):
    """A backend job of an unmapped source, as last seen (``record``: the importer's fields,
    JSON). Mapping the source turns each into an external job; until then it is only shown."""

    source = models.ForeignKey(ExternalSource, on_delete=models.CASCADE, related_name="observations")
    backend_id = models.CharField(max_length=100)
    record = models.JSONField()
    observed_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "jobs_externalobservation"
        constraints = [
            models.UniqueConstraint(fields=["source", "backend_id"], name="external_observation_unique"),
        ]

    def __str__(self):
        return f"{self.source}: {self.backend_id}"


class ExternalCursor(models.Model):
    """How far an importer of external jobs has read a cluster (``kind``: e.g. "sacct" — the
    end of the last window read; "pods" — the pod list's resourceVersion to watch from)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20)
    value = models.CharField(max_length=200)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "jobs_externalcursor"
        constraints = [models.UniqueConstraint(fields=["cluster", "kind"], name="external_cursor_unique")]

    def __str__(self):
        return f"{self.cluster}: {self.kind} {self.value}"
