"""REST API of the policy advisor (issue 25; docs/advisor.md): start and list searches, read
one with its candidates, cancel one, apply a candidate. Platform admins only; anyone else gets 404
(the searches are not theirs to know of), before the body or the id is looked at."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs.whatif.advisor.scenario import Scenario
from jobs.whatif.models import SearchState
from jobs.whatif.proposals import ProposalChanged, advisor_candidate_apply, advisor_candidate_preview
from jobs.whatif.services import (
    advisor_search_cancel,
    advisor_search_create,
    visible_candidates,
    visible_searches,
)
from portal.selectors import get_visible, scope_for


def _platform_admin(request) -> None:
    if not scope_for(request.user).platform_admin:
        raise NotFound


class SearchIn(serializers.Serializer):
    scenario = serializers.JSONField(
        required=False, default=dict,
        help_text="Scenario keys to change (overlay, window_s, node_fraction, …) of the Alibaba trace, or "
        "{\"kind\": \"history\", \"weeks\": N} (or since / until, ISO with an offset): this portal's own "
        "history, exported when the search is created.")
    bounds = serializers.JSONField(
        required=False, default=dict,
        help_text="Per dimension: [low, high] or a list of choices (docs/advisor.md).")
    seed = serializers.IntegerField(min_value=0, max_value=2**31 - 1)
    budget = serializers.IntegerField(min_value=1, max_value=2000, help_text="Candidates besides today's.")
    in_flight = serializers.IntegerField(min_value=1, max_value=64, default=2)
    p95_bound = serializers.FloatField(min_value=1, default=1.5)
    p95_floor_s = serializers.FloatField(min_value=0, default=60.0)


class CandidateOut(serializers.Serializer):
    id = serializers.IntegerField()
    number = serializers.IntegerField(help_text="0 = today's settings.")
    state = serializers.CharField()
    params = serializers.JSONField()
    inputs = serializers.JSONField(help_text="The replay's spec keys: policy and queueing.")
    objective = serializers.FloatField(allow_null=True, help_text="Lower is better; today = 1.")
    feasible = serializers.BooleanField(allow_null=True)
    verdict = serializers.JSONField(allow_null=True)
    result = serializers.JSONField(allow_null=True)


class SearchOut(serializers.Serializer):
    id = serializers.IntegerField()
    state = serializers.CharField()
    created_at = serializers.DateTimeField()
    scenario = serializers.JSONField()
    bounds = serializers.JSONField()
    seed = serializers.IntegerField()
    budget = serializers.IntegerField()
    in_flight = serializers.IntegerField()
    p95_bound = serializers.FloatField()
    p95_floor_s = serializers.FloatField()
    done = serializers.IntegerField(help_text="Candidates finished (today's included).")
    error = serializers.CharField(
        help_text="Why the search failed (state failed), e.g. its scenario's trace is missing; else empty.")


class CancelConflictOut(serializers.Serializer):
    detail = serializers.CharField()
    state = serializers.CharField(help_text="The search's state, unchanged: done or failed.")


class SearchDetailOut(SearchOut):
    candidates = CandidateOut(many=True)


class UnmappedOut(serializers.Serializer):
    change = serializers.CharField(help_text="The candidate's dimension.")
    reason = serializers.CharField()


class QuotaRequestPreviewOut(serializers.Serializer):
    project = serializers.CharField()
    flavor = serializers.CharField()
    before = serializers.CharField(help_text="The quota today.")
    after = serializers.CharField(help_text="The quota asked for: whole units, unless the quota today has a "
                                  "fraction (a shareable flavor).")
    line = serializers.CharField(help_text="The request as one line, in the reader's language.")


class PreviewOut(serializers.Serializer):
    quota_requests = QuotaRequestPreviewOut(many=True, help_text="The quota requests a confirm would file.")
    rule_lines = serializers.ListField(child=serializers.CharField(),
                                       help_text="The rule-change request's changes, one line each.")
    rule_changes = serializers.JSONField(help_text="Its entries, with the values they replace (before).")
    unmapped = serializers.JSONField(help_text="Changes that could not be mapped onto this portal, and why.")
    skipped = serializers.ListField(child=serializers.CharField(),
                                    help_text="Quota requests the portal refuses.")
    digest = serializers.CharField(
        help_text="Give it to POST: nothing is filed if the requests differ by then.")


class ApplyIn(serializers.Serializer):
    digest = serializers.CharField(
        required=False, help_text="The preview's (GET): when given, the requests are filed only if they are "
        "still the ones previewed (else 409, nothing filed).")


class ApplyOut(serializers.Serializer):
    requests = serializers.ListField(child=serializers.IntegerField(), help_text="Quota request ids.")
    rule_change_request = serializers.IntegerField(
        allow_null=True,
        help_text="The rule-change request (kind policy) with every other change; null: none.")
    rule_change_request_url = serializers.CharField(allow_null=True, help_text="Its API detail.")
    unmapped = UnmappedOut(many=True, help_text="Changes that could not be mapped onto this portal, and why.")
    skipped = serializers.ListField(child=serializers.CharField(), help_text="Quota requests refused.")


def _out(search, detail: bool = False) -> dict:
    cands = list(search.candidates.order_by("number")) if detail else None
    fields = ("id", "state", "created_at", "scenario", "bounds", "seed", "budget", "in_flight", "p95_bound",
              "p95_floor_s", "error")
    row = {f: getattr(search, f) for f in fields}
    row["done"] = search.candidates.filter(state__in=["done", "failed"]).count()
    if detail:
        row["candidates"] = [{f: getattr(c, f) for f in CandidateOut().fields} for c in cands]
    return row


class AdvisorSearchListApi(APIView):
    """``GET`` the searches (newest first); ``POST`` starts one (400 on bad bounds or scenario)."""

    @extend_schema(responses=SearchOut(many=True))
    def get(self, request):
        _platform_admin(request)
        return Response([_out(s) for s in visible_searches(request.user)[:100]])

    @extend_schema(request=SearchIn, responses={201: SearchOut})
    def post(self, request):
        _platform_admin(request)
        data = SearchIn(data=request.data)
        data.is_valid(raise_exception=True)
        d = data.validated_data
        if not isinstance(d["scenario"], dict) or not isinstance(d["bounds"], dict):
            raise ApiValidationError({"scenario": ["Give JSON objects."]})
        scenario = d["scenario"]
        if scenario.get("kind", "alibaba") == "alibaba":
            scenario = {**Scenario().to_json(), **scenario}
        try:
            search = advisor_search_create(
                by=request.user, scenario=scenario, bounds=d["bounds"],
                seed=d["seed"], budget=d["budget"], in_flight=d["in_flight"], p95_bound=d["p95_bound"],
                p95_floor_s=d["p95_floor_s"])
        except (ValueError, TypeError) as exc:
            raise ApiValidationError({"detail": [str(exc)]}) from None
        return Response(_out(search), status=status.HTTP_201_CREATED)


class AdvisorSearchDetailApi(APIView):
    """One search with every candidate, its params, replay summary and score."""

    @extend_schema(responses=SearchDetailOut)
    def get(self, request, pk):
        _platform_admin(request)
        return Response(_out(get_visible(visible_searches(request.user), pk=pk), detail=True))


class AdvisorSearchCancelApi(APIView):
    """Cancel a queued or running search: no more candidates are drawn, and the results of
    candidates still running are discarded when they arrive. 200 with the search (cancelled); a
    search already cancelled: 200, unchanged (the request is idempotent); a search that finished
    (done or failed): 409, unchanged. Platform admins only: 404 for anyone else, as every advisor
    endpoint, before anything is read; an unknown id: 404."""

    @extend_schema(request=None, responses={200: SearchOut, 409: CancelConflictOut})
    def post(self, request, pk):
        _platform_admin(request)
        search = get_visible(visible_searches(request.user), pk=pk)
        advisor_search_cancel(search=search, by=request.user)
        search.refresh_from_db()
        if search.state != SearchState.CANCELLED:
            return Response({"detail": f"The search is {search.state}: it can no longer be cancelled.",
                             "state": search.state}, status=status.HTTP_409_CONFLICT)
        return Response(_out(search))


def _texts(preview: dict) -> dict:
    """The preview's messages rendered in the reader's language."""
    from portal.texts import render

    quota = [{**r, "line": render(r["line"])} for r in preview["quota_requests"]]
    rules = [render(line) for line in preview["rule_lines"]]
    return {**preview, "quota_requests": quota, "rule_lines": rules}


class AdvisorCandidateApplyApi(APIView):
    """``GET``: the preview — every request applying the candidate would file now, nothing filed,
    with its ``digest``. ``POST``: file them (see docs/advisor.md "Apply"); with the preview's
    ``digest``, only if they are still those (else 409 with the new preview, nothing filed). A
    candidate that does not beat today's settings, today's own, or an unfinished one: 400."""

    def _candidate(self, request, pk):
        _platform_admin(request)
        return get_visible(visible_candidates(request.user).select_related("search"), pk=pk)

    @extend_schema(responses=PreviewOut, description=(
        "The preview: every request applying the candidate would file now — quota requests and one "
        "rule-change request — nothing filed, and its `digest` for the POST. 400: a candidate that does not "
        "beat today's settings (objective below 0.9995), today's own, or an unfinished or infeasible one."))
    def get(self, request, pk):
        candidate = self._candidate(request, pk)
        try:
            return Response(_texts(advisor_candidate_preview(actor=request.user, candidate=candidate)))
        except DjangoValidationError as exc:
            raise ApiValidationError({"detail": exc.messages}) from None

    @extend_schema(request=ApplyIn, responses={200: ApplyOut, 409: PreviewOut}, description=(
        "File the candidate's requests (docs/advisor.md, Apply). With the preview's `digest`, only if they "
        "are still the ones previewed: else 409 with the new preview (and `detail`), nothing filed. 400 "
        "as for the preview."))
    def post(self, request, pk):
        candidate = self._candidate(request, pk)
        data = ApplyIn(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            out = advisor_candidate_apply(actor=request.user, candidate=candidate,
                                          digest=data.validated_data.get("digest"))
        except ProposalChanged as exc:
            preview = _texts(advisor_candidate_preview(actor=request.user, candidate=candidate))
            return Response({"detail": exc.messages, **preview}, status=status.HTTP_409_CONFLICT)
        except DjangoValidationError as exc:
            raise ApiValidationError({"detail": exc.messages}) from None
        rid = out["rule_change_request"]
        out["rule_change_request_url"] = reverse("api:approval-detail", args=[rid]) if rid else None
        return Response({k: out[k] for k in ApplyOut().fields})
