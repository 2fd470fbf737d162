"""``/api/v1/projects/{id}/idle-policy/`` (DESIGN §16, docs/scheduling.md "Idle policy"): a project's
idle-policy override. GET for whoever sees the project (404 otherwise); PUT and DELETE for platform
admins (403 for others who see it). DELETE returns its jobs to their class's or the centre's policy."""

from __future__ import annotations

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from portal import permissions as perm
from portal.selectors import get_visible, scope_for, visible_projects

from .idle_models import IdleAction, IdlePolicy
from .idle_overrides import FIELDS, centre_policy, idle_override_clear, idle_override_set, project_override


class IdleRulesOut(serializers.Serializer):
    threshold_pct = serializers.IntegerField(
        help_text="A minute is idle when the busiest card is below it (%).")
    idle_minutes = serializers.IntegerField(help_text="Idle minutes before the warning.")
    grace_minutes = serializers.IntegerField(help_text="Minutes after the warning before the action.")
    dev_action = serializers.ChoiceField(choices=IdleAction.choices)
    training_action = serializers.ChoiceField(choices=IdleAction.choices)
    inference_action = serializers.ChoiceField(choices=IdleAction.choices)


class ProjectIdlePolicyOut(serializers.Serializer):
    project = serializers.IntegerField()
    code = serializers.CharField()
    override = IdleRulesOut(allow_null=True, help_text="The project's own rules; null: none.")
    updated_at = serializers.DateTimeField(allow_null=True)
    centre = IdleRulesOut(help_text="The centre's rules (a priority class's override applies before them).")


class ProjectIdlePolicyIn(serializers.Serializer):
    threshold_pct = serializers.IntegerField(required=False, help_text="1–100.")
    idle_minutes = serializers.IntegerField(required=False, help_text="5–10080.")
    grace_minutes = serializers.IntegerField(required=False, help_text="0–10080.")
    dev_action = serializers.ChoiceField(choices=IdleAction.choices, required=False)
    training_action = serializers.ChoiceField(choices=IdleAction.choices, required=False)
    inference_action = serializers.ChoiceField(choices=IdleAction.choices, required=False)

    def validate(self, attrs):
        unknown = sorted(set(self.initial_data) - set(FIELDS))
        if unknown:
            raise serializers.ValidationError({name: [_("Unknown field.")] for name in unknown})
        return attrs


def _rules(row: IdlePolicy) -> dict:
    return {f: getattr(row, f) for f in FIELDS}


def _out(project) -> dict:
    row = project_override(project)
    return ProjectIdlePolicyOut({
        "project": project.pk, "code": project.code, "override": _rules(row) if row else None,
        "updated_at": row.updated_at if row else None, "centre": _rules(centre_policy()),
    }).data


class ProjectIdlePolicyApi(APIView):
    @extend_schema(responses=ProjectIdlePolicyOut)
    def get(self, request, pk):
        return Response(_out(get_visible(visible_projects(request.user), pk=pk)))

    @extend_schema(request=ProjectIdlePolicyIn, responses=ProjectIdlePolicyOut)
    def put(self, request, pk):
        project = get_visible(visible_projects(request.user), pk=pk)
        perm.require(scope_for(request.user).platform_admin)  # before the body: a 403 is a 403
        body = ProjectIdlePolicyIn(data=request.data)
        body.is_valid(raise_exception=True)
        idle_override_set(actor=request.user, project=project, values=body.validated_data)
        return Response(_out(project))

    @extend_schema(responses=ProjectIdlePolicyOut)
    def delete(self, request, pk):
        project = get_visible(visible_projects(request.user), pk=pk)
        idle_override_clear(actor=request.user, project=project)
        return Response(_out(project))
