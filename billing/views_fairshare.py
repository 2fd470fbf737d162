"""The fair-share report page (``/quotas/fair-share/``, DESIGN §16): the tree like ``sshare`` and a
chart of each department's usage share against its share over the last 30 days."""

from __future__ import annotations

import plotly.graph_objects as go
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext as _

from portal.selectors import scope_for

from .charts import _layout
from .fairshare_report import fair_share_report, share_history


def usage_against_share(history: dict) -> str | None:
    """One line per department (its usage share, daily) and a dotted line at its share."""
    if not history["series"]:
        return None
    traces = []
    for code, points, share in history["series"]:
        line = go.Scatter(x=history["days"], y=[round(p * 100, 2) for p in points], mode="lines+markers",
                          name=_("%(dept)s usage") % {"dept": code}, legendgroup=code)
        traces.append(line)
        traces.append(go.Scatter(x=[history["days"][0], history["days"][-1]], y=[round(share * 100, 2)] * 2,
                                 mode="lines", line={"dash": "dot"}, legendgroup=code,
                                 name=_("%(dept)s share") % {"dept": code}))
    layout = _layout(_("Usage share against share, per department (among its siblings)"), _("Day"),
                     _("Percent of its siblings"))
    return go.Figure(traces, layout=layout).to_json()


@login_required
def fair_share_report_page(request):
    now = timezone.now()
    report = fair_share_report(request.user, now)
    figure = usage_against_share(share_history(request.user, now))
    context = {"report": report, "figure": figure, "can_edit": scope_for(request.user).platform_admin,
               "half_life_days": report.half_life_s / 86400}
    return render(request, "billing/fair_share.html", context)
