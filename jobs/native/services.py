"""Writes of native work (DESIGN §11): mapping an external source to a project."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from jobs.models import PriorityClass
from jobs.native.external import map_source
from portal import permissions as perm
from portal.models import Project, User
from portal.selectors import scope_for


def external_source_map(*, actor: User, source, project: Project):
    """Map an unmapped Slurm account / Kubernetes namespace to a project (platform admins): its
    observed jobs become external jobs of the project; the meter's next run bills their history
    (``jobs.native.external.map_source``). Answers the import's ``Outcome``."""
    perm.require(scope_for(actor).platform_admin)
    if source.project_id is not None:
        raise ValidationError(
            _("%(name)s is already mapped to project %(project)s.")
            % {"name": source.name, "project": source.project.code}
        )
    if not project.active:
        raise ValidationError({"project": [_("Project %(code)s is not active.") % {"code": project.code}]})
    if not PriorityClass.objects.exists():
        raise ValidationError(_("External jobs are ranked by a priority class: create one first."))
    try:
        return map_source(source=source, project=project, actor=actor)
    except ValueError as exc:  # mapped by someone else since it was read (map_source locks the row)
        raise ValidationError(_("%(name)s is already mapped.") % {"name": source.name}) from exc
