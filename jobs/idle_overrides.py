"""A project's idle-policy override (DESIGN §16; docs/scheduling.md "Idle policy"): its row replaces
the class's and the centre's policy for the project's jobs (``jobs.idle_service.Policies.of``).
Read by whoever sees the project; set and cleared by platform admins — here (the API) or in the
admin, where the centre's and the classes' rows are edited too."""

from __future__ import annotations

from django.db import transaction

from portal import permissions as perm
from portal.models import Project, User
from portal.selectors import scope_for

from .idle_models import IdlePolicy

FIELDS = ("threshold_pct", "idle_minutes", "grace_minutes", "dev_action", "training_action",
          "inference_action")


def centre_policy() -> IdlePolicy:
    """The centre's row (the model's defaults if it is gone)."""
    return IdlePolicy.objects.filter(priority_class=None, project=None).first() or IdlePolicy()


def project_override(project: Project) -> IdlePolicy | None:
    return IdlePolicy.objects.filter(project=project).first()


def idle_override_set(*, actor: User, project: Project, values: dict) -> IdlePolicy:
    """Set the project's override (platform admins only). A field left out keeps the override's
    value, or for a new override the centre's. A value out of range is a ValidationError naming its
    field, and nothing changes."""
    perm.require(scope_for(actor).platform_admin)
    with transaction.atomic():
        row = IdlePolicy.objects.select_for_update().filter(project=project).first()
        if row is None:
            base = centre_policy()
            row = IdlePolicy(project=project, **{f: getattr(base, f) for f in FIELDS})
        for field, value in values.items():
            setattr(row, field, value)
        row.full_clean()
        row.save()
    return row


def idle_override_clear(*, actor: User, project: Project) -> bool:
    """Return the project's jobs to their class's or the centre's policy; True if it had one."""
    perm.require(scope_for(actor).platform_admin)
    deleted, _rows = IdlePolicy.objects.filter(project=project).delete()
    return bool(deleted)
