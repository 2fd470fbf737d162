"""REST API of the job's working environment for its users (DESIGN §13): submission templates
(issue 22 item 6) and the storages a project's jobs may mount."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import templates_service as templates
from jobs.api import JobIn, JobOut, body_errors
from jobs.api_autoscale import nested_autoscale_errors
from jobs.models import JobTemplate, ProjectSecret, ProjectStorage, name_validator
from portal.api import VisibleRelatedField
from portal.api_base import DetailApi, ListCreateApi
from portal.selectors import get_visible, visible_projects
from quotas.models import Flavor


class TemplateValues(JobIn):
    """The submission body of ``POST /api/v1/jobs/`` without its project (the template's own);
    the job's name is optional (give it when submitting)."""

    name = serializers.CharField(max_length=63, validators=[name_validator], required=False)
    project = None
    sim_duration_seconds = None
    # A template names one flavor; alternatives and framework requirements are given per job.
    flavor = serializers.SlugRelatedField(slug_field="name", queryset=Flavor.objects.all())
    framework = None
    min_operator_coverage = None
    # Dependencies name jobs, which change from one submission to the next: given per job.
    dependencies = None


def body(values: dict) -> dict:
    """Validated ``TemplateValues`` as the JSON the template stores: flavor and priority by name."""
    out = dict(values)
    for key in ("flavor", "priority"):
        if key in out:
            out[key] = out[key].name
    if out.get("autoscale") is not None:
        out["autoscale"] = dict(out["autoscale"])
    return out


class JobTemplateOut(serializers.ModelSerializer):
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)
    values = serializers.JSONField(
        read_only=True, help_text="The submission body (POST /api/v1/jobs/) without its project."
    )

    class Meta:
        model = JobTemplate
        fields = ["id", "name", "project", "owner", "shared", "values", "created_at", "updated_at"]


class JobTemplateIn(serializers.Serializer):
    name = serializers.CharField(max_length=templates.NAME_MAX)
    project = VisibleRelatedField(visible_projects)
    shared = serializers.BooleanField(
        default=False, help_text="Every member of the project may use it (project administrators only)."
    )
    values = TemplateValues()


class JobTemplatePatchIn(serializers.Serializer):
    name = serializers.CharField(max_length=templates.NAME_MAX, required=False)
    shared = serializers.BooleanField(required=False)
    values = TemplateValues(
        required=False, help_text="Fields to change; the others keep their values (checked again as a whole)."
    )


# The template's own fields; the service's other errors are about its values.
_OWN_FIELDS = ("name", "shared", "project")


def _values_errors_nested(call):
    """A template service's errors as the body is shaped: those of the values under ``values``."""
    try:
        return call()
    except DjangoValidationError as exc:
        if not hasattr(exc, "error_dict"):
            raise
        errors = exc.message_dict
        own = {f: e for f, e in errors.items() if f in _OWN_FIELDS}
        values = {f: e for f, e in errors.items() if f not in _OWN_FIELDS}
        values = nested_autoscale_errors(values)
        raise ValidationError({**own, **({"values": values} if values else {})}) from exc


class JobTemplateListApi(ListCreateApi):
    """Your templates and the shared templates of the projects you may submit to."""

    output, input = JobTemplateOut, JobTemplateIn
    filterset_fields = ["project", "shared"]

    def visible(self):
        return templates.visible_templates(self.request.user)

    def perform(self, data):
        return _values_errors_nested(
            lambda: templates.template_save(
                actor=self.request.user,
                project=data["project"],
                name=data["name"],
                values=body(data["values"]),
                shared=data["shared"],
            )
        )


class JobTemplateDetailApi(DetailApi):
    """Another user's private template answers 404. The owner changes or deletes a template; a
    shared one also the project's administrators."""

    output, input = JobTemplateOut, JobTemplatePatchIn
    deletable = True

    def visible(self):
        return templates.visible_templates(self.request.user)

    def update_object(self, obj, data):
        values = None
        if "values" in data:
            values = {**obj.values, **body(data["values"])}
        return _values_errors_nested(
            lambda: templates.template_update(
                actor=self.request.user,
                template=obj,
                name=data.get("name"),
                shared=data.get("shared"),
                values=values,
            )
        )

    def delete_object(self, obj):
        templates.template_delete(actor=self.request.user, template=obj)


class JobTemplateSubmitApi(APIView):
    """Submit a job from the template; the body overrides any of its values (e.g. ``name``).
    Checked as any submission: a storage removed from the project since is refused (400)."""

    @extend_schema(request=TemplateValues(partial=True), responses={201: JobOut})
    def post(self, request, pk):
        template = get_visible(templates.visible_templates(request.user), pk=pk)
        overrides = TemplateValues(data=request.data, partial=True, context={"request": request})
        overrides.is_valid(raise_exception=True)
        try:
            with transaction.atomic():
                job = templates.template_submit(
                    actor=request.user, template=template, overrides=body(overrides.validated_data)
                )
        except DjangoValidationError as exc:
            raise body_errors(exc) from exc
        return Response(JobOut(job).data, status=status.HTTP_201_CREATED)


class StorageOut(serializers.ModelSerializer):
    kind = serializers.CharField(read_only=True, help_text="nfs, hostpath or pvc.")

    class Meta:
        model = ProjectStorage
        fields = ["id", "name", "kind", "mount_path", "read_only", "checkpoints", "quota_note"]


class ProjectStorageListApi(ListCreateApi):
    """The storages the project's jobs may mount (``mounts`` of a submission names them), to
    whoever can see the project; the platform's administrators define them."""

    output = StorageOut

    def visible(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no project id
            return ProjectStorage.objects.none()
        project = get_visible(visible_projects(self.request.user), pk=self.kwargs["pk"])
        return templates.storage_rows(project)


class SecretOut(serializers.ModelSerializer):
    name = serializers.CharField(
        read_only=True,
        help_text="The Kubernetes Secret's name: a job's env reads it as "
        '{"name": …, "secret": <name>, "key": …}.',
    )

    class Meta:
        model = ProjectSecret
        fields = ["id", "name", "note"]


class ProjectSecretListApi(ListCreateApi):
    """The Secrets the project's jobs may read environment variables from (``env`` entries
    ``{"name", "secret", "key"}`` name one of them; any other is refused), to whoever can see the
    project; the platform's administrators declare them. Names only: the portal holds no value."""

    output = SecretOut

    def visible(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no project id
            return ProjectSecret.objects.none()
        project = get_visible(visible_projects(self.request.user), pk=self.kwargs["pk"])
        return templates.secret_rows(project)
