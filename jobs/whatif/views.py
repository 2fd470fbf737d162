"""The policy advisor's pages (策略顾问, issue 25; docs/advisor.md): start a search, watch its
progress, compare the best candidates with today per department, apply one. Platform admins only
(everyone else: 404, like the what-if)."""

from __future__ import annotations

import json

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_http_methods, require_POST

from jobs.whatif.advisor import space
from jobs.whatif.advisor.objective import beats_today, reuse_today
from jobs.whatif.advisor.scenario import Scenario
from jobs.whatif.advisor.space import DEFAULT_BOUNDS
from jobs.whatif.charts import department_rows, figures
from jobs.whatif.labels import change_labels, not_applied
from jobs.whatif.models import CandidateState, SearchState
from jobs.whatif.proposals import ProposalChanged, advisor_candidate_apply, advisor_candidate_preview
from jobs.whatif.services import (
    SCENARIO_FAILED,
    advisor_search_cancel,
    advisor_search_create,
    trace_missing_text,
    visible_candidates,
    visible_searches,
)
from portal.selectors import get_visible, scope_for

SEARCHES_SHOWN = 20
BEST_SHOWN = 5


class _Choices(forms.RadioSelect):
    """Radio buttons of which some are disabled, each with its reason after its label."""

    disabled: dict[str, str] = {}

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        if value in self.disabled:
            option["attrs"]["disabled"] = True
            option["label"] = f"{label} — {self.disabled[value]}"
        return option


class SearchForm(forms.Form):
    scenario_kind = forms.ChoiceField(
        label=gettext_lazy("Scenario"), initial="alibaba", widget=_Choices, required=False,
        choices=[("alibaba", gettext_lazy("The Alibaba GPU 2023 trace with synthetic projects")),
                 ("history", gettext_lazy("This portal's own history"))])
    history_weeks = forms.IntegerField(label=gettext_lazy("History: the last N weeks"), min_value=1,
                                       required=False, initial=4)
    overlay = forms.IntegerField(label=gettext_lazy("Trace copies (overlay)"), min_value=1, max_value=20,
                                 initial=Scenario.overlay)
    window_s = forms.FloatField(label=gettext_lazy("Arrival window (s)"), min_value=60,
                                initial=Scenario.window_s)
    node_fraction = forms.FloatField(label=gettext_lazy("Share of the nodes"), min_value=0.01, max_value=1,
                                     initial=Scenario.node_fraction)
    budget = forms.IntegerField(label=gettext_lazy("Candidates"), min_value=1, max_value=2000, initial=200)
    seed = forms.IntegerField(label=gettext_lazy("Seed"), min_value=0, max_value=2**31 - 1, initial=42)
    in_flight = forms.IntegerField(label=gettext_lazy("Candidates in flight (= workers)"), min_value=1,
                                   max_value=64, initial=2)
    p95_bound = forms.FloatField(label=gettext_lazy("Fairness bound (× today's p95)"), min_value=1,
                                 initial=1.5)
    p95_floor_s = forms.FloatField(label=gettext_lazy("p95 floor (s)"), min_value=0, initial=60.0)
    bounds = forms.CharField(label=gettext_lazy("Bounds (JSON)"),
                             widget=forms.Textarea(attrs={"rows": 10}),
                             initial=json.dumps(DEFAULT_BOUNDS, indent=1))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The Alibaba scenario needs its trace on this server: without it, disabled with the reason.
        self.trace_missing = trace_missing_text()
        if self.trace_missing:
            self.fields["scenario_kind"].widget.disabled = {"alibaba": self.trace_missing}
            self.fields["scenario_kind"].initial = "history"

    def clean_bounds(self):
        try:
            value = json.loads(self.cleaned_data["bounds"])
        except ValueError:
            raise ValidationError(_("Give the bounds as a JSON object.")) from None
        if not isinstance(value, dict):
            raise ValidationError(_("Give the bounds as a JSON object."))
        return value

    def clean(self):
        data = super().clean()
        if data.get("scenario_kind") == "history" and data.get("history_weeks") is None \
                and "history_weeks" not in self.errors:
            self.add_error("history_weeks", _("Give the number of weeks of history to replay."))
        if data.get("scenario_kind") != "history" and self.trace_missing:
            self.add_error("scenario_kind", self.trace_missing)
        return data

    def scenario(self) -> dict:
        d = self.cleaned_data
        if d.get("scenario_kind") == "history":  # none chosen: the Alibaba trace, as before
            return {"kind": "history", "weeks": d["history_weeks"]}
        return {**Scenario().to_json(), "overlay": d["overlay"], "window_s": d["window_s"],
                "node_fraction": d["node_fraction"]}


def _platform_admin(request) -> None:
    if not scope_for(request.user).platform_admin:
        raise Http404


@login_required
def advisor(request):
    _platform_admin(request)
    form = SearchForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        try:
            search = advisor_search_create(
                by=request.user, scenario=form.scenario(), bounds=d["bounds"], seed=d["seed"],
                budget=d["budget"], in_flight=d["in_flight"], p95_bound=d["p95_bound"],
                p95_floor_s=d["p95_floor_s"])
        except ValueError as exc:
            form.add_error("history_weeks" if d.get("scenario_kind") == "history" else None, str(exc))
        else:
            return redirect("advisor-search", pk=search.pk)
    searches = visible_searches(request.user).select_related("created_by")[:SEARCHES_SHOWN]
    return render(request, "jobs/advisor.html", {"form": form, "searches": searches})


def _context(search) -> dict:
    cands = list(search.candidates.order_by("number"))
    done = sum(1 for c in cands if c.state in (CandidateState.DONE, CandidateState.FAILED))
    total = search.budget + 1
    ctx = {"search": search, "done": done, "total": total, "percent": round(100 * done / total),
           "active": search.state in (SearchState.QUEUED, SearchState.RUNNING),
           "best": [], "charts": [], "rows": [],
           "scenario_failed": search.state == SearchState.FAILED
           and search.events.filter(candidate=None, reason=SCENARIO_FAILED).exists()}
    base = next((c for c in cands if c.number == 0 and c.state == CandidateState.DONE), None)
    feasible = sorted((c for c in cands[1:] if c.feasible and c.objective is not None),
                      key=lambda c: (c.objective, c.number))
    # Only what beats today is offered: a candidate at 1.000 is today's outcome by other means.
    ctx["best"] = [c for c in feasible if beats_today(c.objective)][:BEST_SHOWN]
    for c in [base, *ctx["best"]] if base is not None else ctx["best"]:
        c.reuse_today = reuse_today(c.result)  # what the objective judges (docs/advisor.md)
    for c in ctx["best"]:  # what differs from today, labelled in the reader's language
        c.changes = change_labels(space.changes(c.params, search.projects), search.bounds)
    ctx["infeasible"] = sum(1 for c in cands if c.feasible is False)
    ctx["no_better"] = sum(1 for c in feasible if not beats_today(c.objective))
    if base is not None:
        top = ctx["best"][0] if ctx["best"] else base
        ctx.update(baseline=base, top=top, rows=department_rows(base.result, top.result),
                   charts=figures(base.result, top.result, cands))
    return ctx


@login_required
def advisor_search(request, pk: int):
    _platform_admin(request)
    search = get_visible(visible_searches(request.user), pk=pk)
    return render(request, "jobs/advisor_search.html", _context(search))


@login_required
def advisor_progress(request, pk: int):
    """The fragment the search page polls every 2 s (htmx) while the search runs."""
    _platform_admin(request)
    search = get_visible(visible_searches(request.user), pk=pk)
    return render(request, "jobs/advisor_progress.html", _context(search))


@login_required
@require_POST
def advisor_cancel(request, pk: int):
    """Cancel a queued or running search (results of candidates still running are discarded)."""
    _platform_admin(request)
    search = get_visible(visible_searches(request.user), pk=pk)
    if advisor_search_cancel(search=search, by=request.user):
        messages.success(request, _("Search cancelled. Results of candidates still running will be "
                                    "discarded."))
    else:
        search.refresh_from_db()
        messages.info(request, _("The search had already ended (%(state)s): nothing changed.") % {
            "state": search.get_state_display()})
    return redirect("advisor-search", pk=search.pk)


@login_required
@require_http_methods(["GET", "POST"])
def advisor_apply(request, pk: int):
    """GET: the preview — every request a candidate would file, nothing filed — with a confirm
    button; POST (that button, carrying the preview's digest): file them. A POST without the digest
    files nothing and shows the preview; one whose requests changed since shows the new one (409)."""
    _platform_admin(request)
    candidate = get_visible(visible_candidates(request.user).select_related("search"), pk=pk)
    digest = request.POST.get("digest") if request.method == "POST" else None
    try:
        if digest:
            out = advisor_candidate_apply(actor=request.user, candidate=candidate, digest=digest)
            return _applied(request, candidate, out)
        preview = advisor_candidate_preview(actor=request.user, candidate=candidate)
        status = 200
    except PermissionDenied:
        raise Http404 from None
    except ProposalChanged as exc:
        messages.warning(request, " ".join(exc.messages))
        preview, status = advisor_candidate_preview(actor=request.user, candidate=candidate), 409
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("advisor-search", pk=candidate.search_id)
    candidate.changes = change_labels(space.changes(candidate.params, candidate.search.projects),
                                      candidate.search.bounds)
    preview = {**preview, "unmapped": not_applied(preview["unmapped"])}
    return render(request, "jobs/advisor_apply.html", {"candidate": candidate, "search": candidate.search,
                                                        "preview": preview}, status=status)


def _applied(request, candidate, out: dict):
    sent = len(out["requests"])
    messages.success(request, _("%(n)s quota request(s) sent for approval.") % {"n": sent})
    for item in not_applied(out["unmapped"]):
        messages.warning(request, _("Not applied: %(change)s — %(reason)s") % item)
    for text in out["skipped"]:
        messages.warning(request, text)
    if out["rule_change_request"] is not None:
        messages.success(request, _("Rule change request #%(id)s sent for approval: it is shown below.")
                         % {"id": out["rule_change_request"]})
        return redirect("approval-detail", pk=out["rule_change_request"])
    return redirect("advisor-search", pk=candidate.search_id)
