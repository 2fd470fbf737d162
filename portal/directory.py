"""Identities from the centre's directory (DESIGN §12): LDAP and OpenID Connect users, their roles
from admin-defined group rules, and deprovisioning.

Both sign-in paths and the periodic LDAP sync describe a user as a :class:`DirectoryIdentity`
and call :func:`apply_identity`; it is the one place that creates directory users, updates what the
directory owns (names, mail, Unix name), applies the rules and deactivates users the directory
disabled. Roles given by hand (``Membership.rule`` empty) are never touched here; roles a rule
gave are removed as soon as the user is no longer in the rule's group.

Deactivating (:func:`deactivate_user`) ends the user's sessions (the session hash changes and an
inactive user is never loaded by the auth backends), revokes their API tokens (the API answers 401),
and so refuses new submissions; what happens to their jobs is the centre's policy
(``GPUPOOL_DEPROVISION_JOBS``: ``keep``, the default, or ``stop``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from . import permissions as perm
from .hooks import run_user_deactivated_hooks
from .models import Department, Directory, DirectoryRule, Membership, OidcGrant, OidcSession, Project, User
from .selectors import forget_scope, scope_for
from .services import check_scope_kind
from .tokens import api_tokens_revoke_all

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DirectoryIdentity:
    """A user as the directory describes them. ``subject``: the directory's stable id (LDAP DN,
    OIDC ``sub``); ``groups``: LDAP group DNs or OIDC claim values, compared exactly as written
    in the rules (LDAP DNs case-insensitively)."""

    directory: str
    subject: str
    username: str
    unix_name: str = ""
    email: str = ""
    display_name: str = ""
    groups: frozenset[str] = field(default_factory=frozenset)
    active: bool = True


class DirectoryConflict(Exception):
    """The directory's user name is taken by a portal user it may not take over: a local
    break-glass admin, or a user of another directory (or another subject of this one)."""


@dataclass
class SyncReport:
    created: int = 0
    updated: int = 0
    deactivated: int = 0
    roles_added: int = 0
    roles_removed: int = 0
    conflicts: int = 0  # directory users not applied: their name is another account's

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _norm(directory: str, group: str) -> str:
    # LDAP DNs compare case-insensitively and without spaces around separators; OIDC values exactly.
    if directory != Directory.LDAP:
        return group
    return ",".join(part.strip() for part in group.split(",")).lower()


def _find(identity: DirectoryIdentity) -> User | None:
    user = User.objects.filter(directory=identity.directory, directory_subject=identity.subject).first()
    if user is None:
        # A user created by hand before the directory was connected is adopted by name — never a
        # staff or superuser account: the local break-glass admins stay local (a directory entry
        # of the same name must not take over their account).
        user = User.objects.filter(
            username=identity.username, directory=Directory.LOCAL, directory_subject="",
            is_staff=False, is_superuser=False,
        ).first()
    return user


@transaction.atomic
def apply_identity(
    identity: DirectoryIdentity, *, now: datetime | None = None, report: SyncReport | None = None,
    rules: list[DirectoryRule] | None = None,
) -> User | None:
    """Create or update the user, apply the rules, or deactivate: the user (None when the
    directory says the user is disabled and no such user exists). Raises
    :class:`DirectoryConflict` when the name belongs to a user the directory may not take over."""
    now = now or timezone.now()
    report = report if report is not None else SyncReport()
    user = _find(identity)
    if not identity.active:
        if user is not None and user.is_active:
            deactivate_user(user, reason=f"disabled in {identity.directory}", now=now)
            report.deactivated += 1
        return user
    if user is None:
        if User.objects.filter(username=identity.username).exists():
            raise DirectoryConflict(f"{identity.directory} user {identity.subject!r}: "
                                    f"the name {identity.username!r} is another portal user's")
        user = User(username=identity.username)
        report.created += 1
    else:
        report.updated += 1
    if user.directory != identity.directory or user._state.adding:
        user.set_unusable_password()  # directory users sign in through the directory only
    user.directory, user.directory_subject = identity.directory, identity.subject
    user.unix_username = identity.unix_name[:32]
    user.email = identity.email or user.email
    user.display_name = identity.display_name[:120] or user.display_name
    user.directory_synced_at = now
    user.directory_groups = sorted({_norm(identity.directory, g)[:500] for g in identity.groups})
    if not user.is_active and user.deactivated_at is not None:
        # Re-enabled in the directory: active again (its old sessions stay ended: new hash).
        user.is_active, user.deactivated_at, user.deactivated_reason = True, None, ""
    user.save()
    apply_rules(user, identity.directory, identity.groups, report=report, rules=rules)
    return user


def apply_rules(
    user: User, directory: str, groups: Iterable[str], *, report: SyncReport | None = None,
    rules: list[DirectoryRule] | None = None,
) -> None:
    """Give the roles of every rule whose group the user is in; take back the roles rules gave
    for groups the user left. A role the user already holds by hand stays a hand-given role."""
    report = report if report is not None else SyncReport()
    member_of = {_norm(directory, g) for g in groups}
    if rules is None:
        rules = list(DirectoryRule.objects.filter(directory=directory))
    wanted = {r.pk: r for r in rules if r.directory == directory and _norm(directory, r.group) in member_of}
    held = list(Membership.objects.filter(user=user))
    by_scope = {(m.role, m.department_id, m.project_id): m for m in held}
    stale = [m.pk for m in held if m.rule_id is not None and m.rule.directory == directory
             and m.rule_id not in wanted]
    if stale:
        Membership.objects.filter(pk__in=stale).delete()
        report.roles_removed += len(stale)
        for m in held:
            if m.pk in stale:
                by_scope.pop((m.role, m.department_id, m.project_id), None)
    for rule in wanted.values():
        key = (rule.role, rule.department_id, rule.project_id)
        if key in by_scope:
            continue  # held already: by hand, or by another rule of the same role and scope
        by_scope[key] = Membership.objects.create(
            user=user, role=rule.role, department_id=rule.department_id, project_id=rule.project_id, rule=rule
        )
        report.roles_added += 1
    forget_scope(user)


def deactivate_user(user: User, *, reason: str, now: datetime | None = None) -> None:
    """The directory disabled or deleted the user: sessions end, tokens stop, submissions are
    refused; the jobs follow ``GPUPOOL_DEPROVISION_JOBS``."""
    user.is_active = False
    user.deactivated_at = now or timezone.now()
    user.deactivated_reason = reason[:300]
    # A new password hash changes the session auth hash: every open session is refused.
    user.set_unusable_password()
    user.save()
    api_tokens_revoke_all(user, reason=f"user deactivated: {reason}", now=user.deactivated_at)
    # Nothing left to ask the provider about, nor sessions to map (they ended with the hash).
    OidcGrant.objects.filter(user=user).delete()
    OidcSession.objects.filter(user=user).delete()
    log.info("user %s deactivated: %s", user.username, reason)
    if settings.GPUPOOL["DEPROVISION_JOBS"] == "stop":
        _stop_jobs(user)


def _stop_jobs(user: User) -> None:
    user_id = user.pk
    transaction.on_commit(lambda: run_user_deactivated_hooks(user_id))


def sync_directory(
    directory: str, identities: Iterable[DirectoryIdentity], *, complete: bool, now: datetime | None = None,
) -> SyncReport:
    """Apply a listing of the directory. ``complete``: the listing is the whole directory, so
    its users the listing no longer has were deleted there and are deactivated."""
    now = now or timezone.now()
    report = SyncReport()
    rules = list(DirectoryRule.objects.filter(directory=directory))
    seen: set[str] = set()
    for identity in identities:
        seen.add(identity.subject)
        try:
            apply_identity(identity, now=now, report=report, rules=rules)
        except DirectoryConflict as exc:
            log.warning("directory sync skipped a user: %s", exc)
            report.conflicts += 1
    if complete:
        gone = User.objects.filter(directory=directory, is_active=True).exclude(directory_subject__in=seen)
        for user in gone:
            deactivate_user(user, reason=f"no longer in {directory}", now=now)
            report.deactivated += 1
    return report


# --- the rules, edited by platform admins ---------------------------------------------------------
#
# Platform admins only: a directory group is a centre-wide name, and a rule reaches every user in
# it, so a department admin writing one could pull people of other departments into its scope.
# A rule takes effect at once for the users whose groups the portal last saw
# (``User.directory_groups``); the others get it at their next sign-in or sync.


def _known_in_group(directory: str, group: str):
    return User.objects.filter(
        directory=directory, is_active=True, directory_groups__contains=[_norm(directory, group)]
    )


def _reapply(users: Iterable[User]) -> None:
    """Re-apply every rule to users whose groups are known (another rule may give the same role)."""
    for user in users:
        if user.directory_groups is not None:
            apply_rules(user, user.directory, user.directory_groups)
        forget_scope(user)


def _validate_rule(rule: DirectoryRule) -> None:
    rule.group = rule.group.strip()
    if rule.directory not in (Directory.LDAP, Directory.OIDC):
        raise ValidationError({"directory": _("Choose LDAP or OpenID Connect.")})
    if not rule.group:
        raise ValidationError({"group": _("Name the directory group.")})
    check_scope_kind(rule.role, rule.department, rule.project)
    rule.full_clean(exclude=["created_by"], validate_constraints=False)
    same = DirectoryRule.objects.filter(
        directory=rule.directory, role=rule.role, department=rule.department, project=rule.project
    ).exclude(pk=rule.pk)
    if any(_norm(rule.directory, r.group) == _norm(rule.directory, rule.group) for r in same):
        raise ValidationError({"group": _("A rule already gives this role here to this group.")})


def _save_rule(rule: DirectoryRule) -> None:
    try:
        with transaction.atomic():
            rule.save()
    except IntegrityError:
        raise ValidationError({"group": _("A rule already gives this role here to this group.")}) from None


@transaction.atomic
def directory_rule_create(
    *, actor: User, directory: str, group: str, role: str,
    department: Department | None = None, project: Project | None = None,
) -> DirectoryRule:
    perm.require(scope_for(actor).platform_admin)
    rule = DirectoryRule(directory=directory, group=group, role=role, department=department, project=project,
                         created_by=actor)
    _validate_rule(rule)
    _save_rule(rule)
    _reapply(_known_in_group(rule.directory, rule.group))
    forget_scope(actor)
    return rule


@transaction.atomic
def directory_rule_update(*, actor: User, rule: DirectoryRule, **fields) -> DirectoryRule:
    """Change a rule: the roles it gave are taken back and given again as the rule now reads."""
    perm.require(scope_for(actor).platform_admin)
    before = list(User.objects.filter(memberships__rule=rule).distinct())
    for name in ("directory", "group", "role", "department", "project"):
        if name in fields:
            setattr(rule, name, fields[name])
    _validate_rule(rule)
    _save_rule(rule)
    Membership.objects.filter(rule=rule).delete()
    after = list(_known_in_group(rule.directory, rule.group).exclude(pk__in=[u.pk for u in before]))
    _reapply([*before, *after])
    forget_scope(actor)
    return rule


@transaction.atomic
def directory_rule_delete(*, actor: User, rule: DirectoryRule) -> None:
    """Delete a rule and the roles it gave (the memberships cascade); hand-given roles stay."""
    perm.require(scope_for(actor).platform_admin)
    affected = list(User.objects.filter(memberships__rule=rule).distinct())
    rule.delete()
    _reapply(affected)
    forget_scope(actor)
