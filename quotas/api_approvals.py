"""REST API of quota requests and loan requests (``POST /api/v1/quota-requests/``,
``POST /api/v1/loan-requests/``; the same bodies with ``"kind"`` on ``POST /api/v1/approvals/``)."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy as _h
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.views import APIView

from portal.api import VisibleRelatedField
from portal.api_approvals import ApprovalDetailOut, create_through
from portal.approvals import handler_for
from portal.daterange import validate_in_range
from portal.models import ApprovalKind, ApprovalRequest, Department, User
from portal.selectors import visible_departments, visible_projects

from . import approvals
from .models import Flavor
from .selectors import visible_quota_nodes


def _check_kind(value: str, kind: str) -> str:
    if value != kind:
        raise serializers.ValidationError(_("This body is a %(kind)s request.") % {"kind": kind})
    return value


class QuotaRequestIn(serializers.Serializer):
    kind = serializers.CharField(required=False, help_text=_h('"quota" (on POST /approvals/)'))
    flavor = serializers.SlugRelatedField(slug_field="name", queryset=Flavor.objects.filter(active=True))
    project = VisibleRelatedField(visible_projects, required=False, allow_null=True)
    department = VisibleRelatedField(visible_departments, required=False, allow_null=True)
    quota = serializers.DecimalField(max_digits=12, decimal_places=3, min_value=0, max_value=1_000_000)
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")

    def validate_kind(self, value):
        return _check_kind(value, ApprovalKind.QUOTA)

    def validate(self, attrs):
        if (attrs.get("project") is None) == (attrs.get("department") is None):
            raise serializers.ValidationError({"project": [_("Give exactly one project or department.")]})
        return attrs


def create_quota_request(actor: User, data: dict) -> ApprovalRequest:
    return approvals.quota_request_create(
        actor=actor,
        flavor=data["flavor"],
        quota=data["quota"],
        project=data.get("project"),
        department=data.get("department"),
        reason=data.get("reason", ""),
    )


class LoanRequestIn(serializers.Serializer):
    kind = serializers.CharField(required=False, help_text=_h('"loan" (on POST /approvals/)'))
    borrower = VisibleRelatedField(visible_quota_nodes)  # the quota node that borrows (its flavor)
    # The lender is any department, named by its code: the directory of departments is what a
    # borrower needs to ask; the lender's quotas and usage stay invisible to it.
    lender = serializers.SlugRelatedField(slug_field="code", queryset=Department.objects.all())
    amount = serializers.DecimalField(max_digits=12, decimal_places=3, min_value=0, max_value=1_000_000)
    starts_at = serializers.DateTimeField(validators=[validate_in_range])
    ends_at = serializers.DateTimeField(validators=[validate_in_range])
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")

    def validate_kind(self, value):
        return _check_kind(value, ApprovalKind.LOAN)


def create_loan_request(actor: User, data: dict) -> ApprovalRequest:
    return approvals.loan_request_create(
        actor=actor,
        borrower=data["borrower"],
        lender=data["lender"],
        amount=data["amount"],
        starts_at=data["starts_at"],
        ends_at=data["ends_at"],
        reason=data.get("reason", ""),
    )


class QuotaRequestApi(APIView):
    """Ask for a new quota of a flavor for a project (members, admins) or a department (its
    admins). The department admin decides; a platform admin too when departments must grow."""

    @extend_schema(request=QuotaRequestIn, responses={201: ApprovalDetailOut})
    def post(self, request):
        return create_through(handler_for(ApprovalKind.QUOTA), request)


class LoanRequestApi(APIView):
    """The borrower's admin asks a lender department for a loan; the lender's admin decides."""

    @extend_schema(request=LoanRequestIn, responses={201: ApprovalDetailOut})
    def post(self, request):
        return create_through(handler_for(ApprovalKind.LOAN), request)
