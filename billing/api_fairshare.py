"""``GET /api/v1/fair-share/`` (DESIGN §16): the fair-share report, like ``sshare`` — the same
figures as the page ``/quotas/fair-share/`` and ``manage.py sshare`` (``billing.fairshare_report``)."""

from __future__ import annotations

import math

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from .fairshare_report import Report, fair_share_report


class FairShareNodeOut(serializers.Serializer):
    tree_id = serializers.CharField(help_text='"d<id>" for a department, "p<id>" for a project.')
    kind = serializers.ChoiceField(choices=["department", "project"])
    id = serializers.IntegerField()
    code = serializers.CharField()
    name = serializers.CharField()
    parent = serializers.CharField(allow_null=True)
    depth = serializers.IntegerField()
    shares = serializers.FloatField(help_text="An admin's weight, else the quota in normalised cards.")
    weighted = serializers.BooleanField()
    shares_norm = serializers.FloatField(help_text="Its part of its siblings' shares.")
    usage_card_hours = serializers.FloatField(
        help_text="Normalised card-hours over the last half-life, undecayed (its subtree).")
    decayed_card_seconds = serializers.FloatField(help_text="Normalised card-seconds, decayed (its subtree).")
    usage_norm = serializers.FloatField(help_text="Its part of its siblings' decayed usage.")
    level_fs = serializers.FloatField(allow_null=True,
                                      help_text="shares_norm / usage_norm; null: no usage (goes first).")
    rank = serializers.IntegerField(allow_null=True, help_text="Projects: 1 is served first.")
    factor = serializers.FloatField(allow_null=True, help_text="Projects: (leaves − rank + 1) / leaves.")


class FairShareReportOut(serializers.Serializer):
    now = serializers.DateTimeField()
    half_life_seconds = serializers.IntegerField()
    nodes = FairShareNodeOut(many=True)


def report_data(report: Report) -> dict:
    return {
        "now": report.now,
        "half_life_seconds": report.half_life_s,
        "nodes": [{
            "tree_id": r.tree_id, "kind": r.kind, "id": r.pk, "code": r.code, "name": r.name,
            "parent": r.parent, "depth": r.depth, "shares": r.fair.shares, "weighted": r.weighted,
            "shares_norm": r.fair.shares_norm, "usage_card_hours": r.usage_card_hours,
            "decayed_card_seconds": r.fair.usage, "usage_norm": r.fair.usage_norm,
            "level_fs": None if math.isinf(r.fair.level_fs) else r.fair.level_fs,
            "rank": r.fair.rank, "factor": r.fair.factor,
        } for r in report.rows],
    }


class FairShareReportApi(APIView):
    """Platform admins and auditors: the whole tree; department admins: their subtrees; others 403."""

    @extend_schema(responses=FairShareReportOut)
    def get(self, request):
        return Response(FairShareReportOut(report_data(fair_share_report(request.user, timezone.now()))).data)
