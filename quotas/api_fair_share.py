"""``/api/v1/quota-tree/{kind}/{id}/fair-share/`` (DESIGN §16): a node's fair-share shares — its
default (its quota in normalised cards) and the weight a platform admin set instead. GET for whoever
sees the node (404 otherwise); PUT and DELETE for platform admins (DELETE returns to the default)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from portal import permissions as perm
from portal.selectors import scope_for

from .fair_weights import (
    NodeShares,
    fair_share_weight_clear,
    fair_share_weight_set,
    node_shares,
    visible_owner,
)


class FairShareOut(serializers.Serializer):
    kind = serializers.CharField()
    id = serializers.IntegerField()
    code = serializers.CharField()
    shares = serializers.FloatField(help_text="The shares in use: the weight if set, else the default.")
    default_shares = serializers.FloatField(help_text="The node's own quota in normalised cards.")
    weight = serializers.DecimalField(max_digits=12, decimal_places=3, allow_null=True)
    weighted = serializers.BooleanField()
    set_by = serializers.CharField(allow_null=True)
    set_at = serializers.DateTimeField(allow_null=True)


class FairShareIn(serializers.Serializer):
    weight = serializers.JSONField(help_text="A number > 0, at most 1,000,000, at most 3 decimals.")


def _out(found: NodeShares) -> dict:
    return FairShareOut({
        "kind": found.kind, "id": found.owner.pk, "code": found.owner.code, "shares": found.shares,
        "default_shares": found.default_shares, "weight": found.weight, "weighted": found.weight is not None,
        "set_by": found.set_by, "set_at": found.set_at,
    }).data


class FairShareApi(APIView):
    @extend_schema(responses=FairShareOut)
    def get(self, request, kind, pk):
        return Response(_out(node_shares(visible_owner(request.user, kind, pk))))

    @extend_schema(request=FairShareIn, responses=FairShareOut)
    def put(self, request, kind, pk):
        owner = visible_owner(request.user, kind, pk)
        perm.require(scope_for(request.user).platform_admin)  # before the body: a 403 is a 403
        body = FairShareIn(data=request.data)
        body.is_valid(raise_exception=True)
        fair_share_weight_set(actor=request.user, owner=owner, weight=body.validated_data["weight"])
        return Response(_out(node_shares(owner)))

    @extend_schema(responses=FairShareOut)
    def delete(self, request, kind, pk):
        owner = visible_owner(request.user, kind, pk)
        fair_share_weight_clear(actor=request.user, owner=owner)
        return Response(_out(node_shares(owner)))
