"""REST API of job approval policies (``/api/v1/approval-policies/``)."""

from __future__ import annotations

from django.utils.translation import gettext as _
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from jobs import approvals
from jobs.models import ApprovalPolicy
from portal import permissions as perm
from portal.api import VisibleRelatedField
from portal.api_base import DetailApi, ListCreateApi
from portal.selectors import visible_departments
from quotas.models import Flavor


class ApprovalPolicyOut(serializers.ModelSerializer):
    flavors = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)
    updated_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = ApprovalPolicy
        fields = [
            "id",
            "department",
            "max_gpus",
            "max_runtime_hours",
            "premium_flavors",
            "flavors",
            "platform_gpus",
            "over_budget",
            "step_timeout_hours",
            "updated_at",
            "updated_by",
        ]


class ApprovalPolicyIn(serializers.Serializer):
    department = VisibleRelatedField(visible_departments)
    max_gpus = serializers.IntegerField(min_value=0, max_value=1_000_000, required=False, allow_null=True)
    max_runtime_hours = serializers.IntegerField(
        min_value=1, max_value=90 * 24, required=False, allow_null=True
    )
    premium_flavors = serializers.BooleanField(required=False)
    flavors = serializers.SlugRelatedField(
        slug_field="name", queryset=Flavor.objects.all(), many=True, required=False
    )
    platform_gpus = serializers.IntegerField(
        min_value=0, max_value=1_000_000, required=False, allow_null=True
    )
    over_budget = serializers.BooleanField(required=False)
    step_timeout_hours = serializers.IntegerField(min_value=1, max_value=30 * 24, required=False)


class ApprovalPolicyListApi(ListCreateApi):
    """Policies of the visible departments and of the departments above them. Written by the
    admin of the department's parent (platform admins for top-level departments)."""

    output, input = ApprovalPolicyOut, ApprovalPolicyIn
    filterset_fields = ["department"]

    def visible(self):
        return approvals.visible_approval_policies(self.request.user).order_by("department__code")

    def perform(self, data):
        data = dict(data)
        department = data.pop("department")
        perm.require(perm.can_edit_department(self.scope, department))
        if ApprovalPolicy.objects.filter(department=department).exists():
            raise ValidationError(
                {"department": [_("This department already has a policy; change that one.")]}
            )
        return approvals.approval_policy_set(actor=self.request.user, department=department, **data)


class ApprovalPolicyDetailApi(DetailApi):
    output, input, deletable = ApprovalPolicyOut, ApprovalPolicyIn, True

    def visible(self):
        return approvals.visible_approval_policies(self.request.user)

    def update_object(self, obj, data):
        data = dict(data)
        department = data.pop("department", obj.department)
        if department.pk != obj.department_id:
            raise ValidationError({"department": [_("A policy stays with its department.")]})
        return approvals.approval_policy_set(actor=self.request.user, department=obj.department, **data)

    def delete_object(self, obj):
        approvals.approval_policy_delete(actor=self.request.user, policy=obj)
