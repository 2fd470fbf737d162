"""The directory pages (DESIGN §12): the group → role rules, and the users with where their roles
come from (a directory group, or given by hand).

Rules and users are the platform's: platform admins and auditors read these pages, everyone
else gets 404; only platform admins write (``portal.directory.directory_rule_*``)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import Count, Q
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from . import directory
from .forms import ServiceErrorsMixin
from .models import Department, Directory, DirectoryRule, Project, Role, User
from .selectors import get_visible, scope_for, visible_directory_rules, visible_memberships
from .services import membership_delete

USERS_PAGE_SIZE = 50


def _require_reader(user: User) -> None:
    if not scope_for(user).sees_everything:
        raise Http404


def _require_writer(user: User) -> None:
    _require_reader(user)
    if not scope_for(user).platform_admin:
        raise PermissionDenied


class DirectoryRuleForm(ServiceErrorsMixin, forms.Form):
    directory = forms.ChoiceField(
        label=gettext_lazy("Directory"),
        choices=[(Directory.LDAP, "LDAP"), (Directory.OIDC, "OpenID Connect")],
    )
    group = forms.CharField(
        label=gettext_lazy("Group"), max_length=500,
        help_text=gettext_lazy("An LDAP group DN (case does not matter), or the value of the OpenID Connect "
                               "groups claim."),
    )
    role = forms.ChoiceField(label=gettext_lazy("Role"), choices=Role.choices)
    department = forms.ModelChoiceField(
        label=gettext_lazy("Department"), queryset=Department.objects.order_by("code"), required=False,
        help_text=gettext_lazy("For department admin and finance."),
    )
    project = forms.ModelChoiceField(
        label=gettext_lazy("Project"), queryset=Project.objects.order_by("code"), required=False,
        help_text=gettext_lazy("For member and project admin. Platform roles take neither."),
    )


@login_required
def directory_rule_list(request):
    _require_reader(request.user)
    rules = (visible_directory_rules(request.user).select_related("department", "project", "created_by")
             .annotate(user_count=Count("memberships")).order_by("directory", "group", "id"))
    return render(request, "portal/directory_rules.html",
                  {"rules": rules, "can_edit": scope_for(request.user).platform_admin})


@login_required
def directory_rule_edit(request, pk: int | None = None):
    """Add a rule or change one; either takes effect at once for the users whose groups are known."""
    _require_writer(request.user)
    rule = get_visible(visible_directory_rules(request.user), pk=pk) if pk is not None else None
    initial = {name: getattr(rule, name) for name in ("directory", "group", "role", "department", "project")
               } if rule else None
    form = DirectoryRuleForm(request.POST if request.method == "POST" else None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            rule = _save(request.user, rule, form.cleaned_data)
        except ValidationError as exc:
            form.add_service_error(exc)
        else:
            count = rule.memberships.count()
            messages.success(request, ngettext(
                "The rule for %(group)s was saved; it gives its role to %(n)d user now.",
                "The rule for %(group)s was saved; it gives its role to %(n)d users now.", count,
            ) % {"group": rule.group, "n": count})
            return redirect("directory-rule-list")
    return render(request, "portal/directory_rule_form.html", {"form": form, "rule": rule})


def _save(actor: User, rule: DirectoryRule | None, data: dict) -> DirectoryRule:
    with transaction.atomic():
        if rule is None:
            return directory.directory_rule_create(actor=actor, **data)
        return directory.directory_rule_update(actor=actor, rule=rule, **data)


@login_required
def directory_rule_delete(request, pk: int):
    if request.method != "POST":
        return redirect("directory-rule-list")
    rule = get_visible(visible_directory_rules(request.user), pk=pk)
    try:
        with transaction.atomic():
            directory.directory_rule_delete(actor=request.user, rule=rule)
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, _("The rule for %(group)s was deleted, and the roles it gave with it.")
                         % {"group": rule.group})
    return redirect("directory-rule-list")


@login_required
def user_list(request):
    _require_reader(request.user)
    users = User.objects.order_by("username")
    query = request.GET.get("q", "").strip()  # searched as typed, never cut (issue 32 item 2)
    if query:
        users = users.filter(Q(username__icontains=query) | Q(display_name__icontains=query)
                             | Q(unix_username__icontains=query))
    page = Paginator(users, USERS_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "portal/users.html", {"page": page, "query": query})


@login_required
def user_detail(request, pk: int):
    _require_reader(request.user)
    shown = get_visible(User.objects.all(), pk=pk)
    memberships = (visible_memberships(request.user).filter(user=shown)
                   .select_related("department", "project", "rule").order_by("role", "id"))
    return render(request, "portal/user_detail.html", {
        "shown": shown, "memberships": memberships, "can_edit": scope_for(request.user).platform_admin,
    })


@login_required
def membership_remove(request, pk: int):
    """Remove a hand-given role; a role from a directory rule is refused with why."""
    if request.method != "POST":
        raise Http404
    membership = get_visible(visible_memberships(request.user).select_related("user", "rule"), pk=pk)
    try:
        with transaction.atomic():
            membership_delete(actor=request.user, membership=membership)
    except (PermissionDenied, ValidationError) as exc:
        messages.error(request, " ".join(getattr(exc, "messages", [str(exc)])))
    else:
        messages.success(request, _("The role %(role)s of %(user)s was removed.")
                         % {"role": membership.get_role_display(), "user": membership.user})
    if scope_for(request.user).sees_everything:
        return redirect("user-detail", membership.user_id)
    return redirect("dashboard")  # the user page is the platform's

