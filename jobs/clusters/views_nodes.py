"""The node / GPU map (issue 24) and a node's page, where platform admins cordon, drain and
return it to service (``jobs.clusters.nodes``). Everyone signed in reads the map; another tenant's job
is "in use", never named. The node page (its jobs, history and actions) is for platform admins:
anyone else gets 403, as for the other platform actions of the portal."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from jobs.clusters import node_map as selectors
from jobs.clusters.nodes import REASON_MAX, jobs_on_node, node_cordon, node_drain, node_return
from portal.selectors import scope_for
from quotas.models import Cluster, Flavor, Node, NodeAction, NodeState

DRAIN_FINISH, DRAIN_REQUEUE = "finish", "requeue"


class NodeMapFilter(forms.Form):
    cluster = forms.ModelChoiceField(
        queryset=Cluster.objects.none(), to_field_name="name", required=False, label=gettext_lazy("Cluster"),
        empty_label=None,
    )
    flavor = forms.ModelChoiceField(
        queryset=Flavor.objects.none(), to_field_name="name", required=False, label=gettext_lazy("Flavor"),
        empty_label=gettext_lazy("all"),
    )
    state = forms.ChoiceField(
        required=False, label=gettext_lazy("State"),
        choices=[("", gettext_lazy("all")), *NodeState.choices, (selectors.DRAINED, gettext_lazy("Drained"))],
    )
    free = forms.BooleanField(required=False, label=gettext_lazy("Has free GPUs"))
    off_baseline = forms.BooleanField(required=False, label=gettext_lazy("Off baseline only"))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["cluster"].queryset = selectors.map_clusters()
        self.fields["flavor"].queryset = selectors.map_flavors()


class NodeActionForm(forms.Form):
    action = forms.ChoiceField(
        label=gettext_lazy("Action"), choices=NodeAction.choices, widget=forms.RadioSelect
    )
    jobs = forms.ChoiceField(
        label=gettext_lazy("The jobs on the node (drain)"),
        choices=[
            (DRAIN_FINISH, gettext_lazy("Let them finish; the node takes no new jobs")),
            (DRAIN_REQUEUE, gettext_lazy("Requeue them now (preempted; they resume from their checkpoints)")),
        ],
        initial=DRAIN_FINISH,
        widget=forms.RadioSelect,
        required=False,
    )
    reason = forms.CharField(
        label=gettext_lazy("Reason"),
        max_length=REASON_MAX,
        widget=forms.TextInput(attrs={"maxlength": REASON_MAX}),
    )
    # Requeueing stops running work: the page asks once more, naming the jobs, before it does.
    confirmed = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def stops_jobs(self) -> bool:
        data = self.cleaned_data
        return data["action"] == NodeAction.DRAIN and data["jobs"] == DRAIN_REQUEUE


@login_required
def node_map_page(request):
    form = NodeMapFilter(request.GET or None)
    data = form.cleaned_data if form.is_bound and form.is_valid() else {}
    cluster = data.get("cluster") or selectors.map_clusters().first()
    if form.is_bound and not form.is_valid():
        cluster = None
    if not form.is_bound:
        form = NodeMapFilter(initial={"cluster": cluster.name if cluster else None})
    the_map = selectors.node_map(
        request.user,
        cluster=cluster,
        flavor=data.get("flavor"),
        state=data.get("state") or "",
        has_free=bool(data.get("free")),
        off_baseline=bool(data.get("off_baseline")),
    )
    context = {
        "form": form,
        "map": the_map,
        "events": selectors.node_events(request.user, cluster=cluster),
        "can_act": scope_for(request.user).platform_admin,
        "can_report": scope_for(request.user).sees_everything,  # the drift report's readers
    }
    return render(request, "jobs/node_map.html", context)


@login_required
def node_page(request, pk: int):
    if not scope_for(request.user).platform_admin:
        raise PermissionDenied
    node = get_object_or_404(Node.objects.select_related("cluster", "flavor"), pk=pk)
    form = NodeActionForm(request.POST or None)
    confirm = None
    if request.method == "POST" and form.is_valid():
        to_stop = [j for j in jobs_on_node(node) if j.terminating_since is None] if form.stops_jobs() else []
        if to_stop and not form.cleaned_data["confirmed"]:
            confirm = to_stop  # nothing is done until the admin confirms, naming these jobs
        elif _apply(request, form, node):
            return redirect("node-page", pk=node.pk)
    on_node = jobs_on_node(node)
    context = {
        "node": node,
        "view": selectors.node_views(request.user, [node])[0],
        "jobs": on_node,
        "form": form,
        "confirm": confirm,
        "events": selectors.node_events(request.user, node=node),
    }
    return render(request, "jobs/node_detail.html", context)


def _apply(request, form: NodeActionForm, node: Node) -> bool:
    """Run the action; True when done (its outcome is in the messages), False with the
    service's refusal on the form."""
    data = form.cleaned_data
    try:
        if data["action"] == NodeAction.CORDON:
            outcome = node_cordon(actor=request.user, node=node, reason=data["reason"])
        elif data["action"] == NodeAction.DRAIN:
            outcome = node_drain(
                actor=request.user, node=node, reason=data["reason"], requeue=data["jobs"] == DRAIN_REQUEUE,
            )
        else:
            outcome = node_return(actor=request.user, node=node, reason=data["reason"])
    except ValidationError as exc:
        if hasattr(exc, "error_dict"):
            for field_name, errors in exc.error_dict.items():
                form.add_error(field_name if field_name in form.fields else None, errors)
        else:
            form.add_error(None, exc)
        return False
    shown = selectors.NodeView(outcome.node, selectors.occupancy(request.user, [outcome.node])[node.pk])
    if outcome.event is None:
        messages.info(request, _("Nothing to change: %(node)s already is %(state)s.") % {
            "node": node.name, "state": shown.state_label})
    else:
        messages.success(request, _("%(node)s: %(state)s.") % {"node": node.name, "state": shown.state_label})
        if outcome.requeued:
            count = len(outcome.requeued)
            text = ngettext("%(count)d job is being requeued.", "%(count)d jobs are being requeued.", count)
            messages.info(request, text % {"count": count})
    return True
