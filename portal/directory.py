"""Identities from the centre's directory (DESIGN §12): LDAP and OpenID Connect users, their roles
from admin-defined group rules, and deprovisioning.

Both sign-in paths and the periodic LDAP sync describe a user as a :class:`DirectoryIdentity`;
a sign-in calls :func:`apply_identity`, the sync :func:`sync_directory` with the whole listing (the
same rules, read and written a batch at a time). This module is the one place that creates directory
users, updates what the directory owns (names, mail, Unix name, groups) — writing only what changed —
applies the rules and deactivates users the directory disabled. Roles given by hand
(``Membership.rule`` empty) are never touched here; roles a rule gave are removed as soon as the
user is no longer in the rule's group.

Deactivating (:func:`deactivate_user`) ends the user's sessions (the session hash changes and an
inactive user is never loaded by the auth backends), revokes their API tokens (the API answers 401),
and so refuses new submissions; what happens to their jobs is the centre's policy
(``GPUPOOL_DEPROVISION_JOBS``: ``keep``, the default, or ``stop``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.db.models.signals import post_save
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


def _adoptable(user: User) -> bool:
    # A user created by hand before the directory was connected is adopted by name — never a
    # staff or superuser account: the local break-glass admins stay local (a directory entry
    # of the same name must not take over their account).
    return (user.directory == Directory.LOCAL and user.directory_subject == ""
            and not user.is_staff and not user.is_superuser)


def _find(identity: DirectoryIdentity) -> User | None:
    user = User.objects.filter(directory=identity.directory, directory_subject=identity.subject).first()
    if user is None:
        user = User.objects.filter(
            username=identity.username, directory=Directory.LOCAL, directory_subject="",
            is_staff=False, is_superuser=False,
        ).first()
    return user


def _conflict(identity: DirectoryIdentity) -> DirectoryConflict:
    return DirectoryConflict(f"{identity.directory} user {identity.subject!r}: "
                             f"the name {identity.username!r} is another portal user's")


def _take(user: User, identity: DirectoryIdentity, now: datetime) -> list[str]:
    """Give ``user`` what the directory says about them; return the fields that changed (none:
    there is nothing to write — a resync of an unchanged directory writes no row).
    ``directory_synced_at`` is the last time the directory changed the user."""
    wanted = {
        "directory": identity.directory,
        "directory_subject": identity.subject,
        "unix_username": identity.unix_name[:32],
        "email": identity.email or user.email,
        "display_name": identity.display_name[:120] or user.display_name,
        "directory_groups": sorted({_norm(identity.directory, g)[:500] for g in identity.groups}),
    }
    if not user.is_active and user.deactivated_at is not None:
        # Re-enabled in the directory: active again (its old sessions stay ended: new hash).
        wanted.update(is_active=True, deactivated_at=None, deactivated_reason="")
    changed = [name for name, value in wanted.items() if getattr(user, name) != value]
    if user._state.adding or user.directory != identity.directory:
        user.set_unusable_password()  # directory users sign in through the directory only
        changed.append("password")
    for name in changed:
        if name != "password":
            setattr(user, name, wanted[name])
    if changed:
        user.directory_synced_at = now
        changed.append("directory_synced_at")
    return changed


@transaction.atomic
def apply_identity(
    identity: DirectoryIdentity, *, now: datetime | None = None, report: SyncReport | None = None,
    rules: list[DirectoryRule] | None = None,
) -> User | None:
    """Create or update the user, apply the rules, or deactivate: the user (None when the
    directory says the user is disabled and no such user exists). Raises
    :class:`DirectoryConflict` when the name belongs to a user the directory may not take over.
    Writes only what changed: ``report.updated`` counts users whose row changed."""
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
            raise _conflict(identity)
        user = User(username=identity.username)
    changed = _take(user, identity, now)
    if user._state.adding:
        user.save()
        report.created += 1
    elif changed:
        user.save(update_fields=changed)
        report.updated += 1
    apply_rules(user, identity.directory, identity.groups, report=report, rules=rules)
    return user


@dataclass
class _Rules:
    """A directory's rules indexed by normalised group, built once per sync (not per user)."""

    directory: str
    by_group: dict[str, list[DirectoryRule]]
    ids: set[int]

    @classmethod
    def of(cls, directory: str, rules: Iterable[DirectoryRule]) -> _Rules:
        by_group: dict[str, list[DirectoryRule]] = {}
        ours = [r for r in rules if r.directory == directory]
        for rule in ours:
            by_group.setdefault(_norm(directory, rule.group), []).append(rule)
        return cls(directory, by_group, {r.pk for r in ours})

    def changes(self, user: User, groups: Iterable[str], held: list[Membership]):
        """(stale, new): the memberships this directory's rules gave that the user's groups no
        longer justify, and the unsaved ones their groups call for. A role the user already holds
        — by hand, or by another rule of the same role and scope — is not given again."""
        wanted: dict[int, DirectoryRule] = {}
        for group in {_norm(self.directory, g) for g in groups}:
            wanted.update((r.pk, r) for r in self.by_group.get(group, ()))
        stale = [m for m in held if m.rule_id in self.ids and m.rule_id not in wanted]
        stale_ids = {m.pk for m in stale}
        kept = {(m.role, m.department_id, m.project_id) for m in held if m.pk not in stale_ids}
        new = []
        for rule in wanted.values():
            key = (rule.role, rule.department_id, rule.project_id)
            if key not in kept:
                kept.add(key)
                new.append(Membership(user=user, role=rule.role, department_id=rule.department_id,
                                      project_id=rule.project_id, rule=rule))
        return stale, new


def apply_rules(
    user: User, directory: str, groups: Iterable[str], *, report: SyncReport | None = None,
    rules: list[DirectoryRule] | None = None,
) -> None:
    """Give the roles of every rule whose group the user is in; take back the roles rules gave
    for groups the user left. A role the user already holds by hand stays a hand-given role."""
    report = report if report is not None else SyncReport()
    if rules is None:
        rules = list(DirectoryRule.objects.filter(directory=directory))
    stale, new = _Rules.of(directory, rules).changes(user, groups, list(Membership.objects.filter(user=user)))
    if stale:
        Membership.objects.filter(pk__in=[m.pk for m in stale]).delete()
        report.roles_removed += len(stale)
    for membership in new:
        membership.save()
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


# --- the sync: a whole listing, read and written in batches ---------------------------------------
#
# A listing of 10,000 users applied one user at a time cost ~5 statements and a commit each (find by
# subject, find by name, the name's owner, the memberships, the save). The sync reads what it needs
# in a few queries up front and writes a batch of users at a time, and only what changed.

SYNC_BATCH = 1000  # users per transaction: a failure keeps the batches before it
_IN_CHUNK = 5000  # values per IN (…) list


def _chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


@dataclass
class _Known:
    """What the portal holds for a listing, read in a few queries: the directory's users by
    subject, hand-made local users it may adopt by name, every portal user name the listing uses,
    and the memberships of all of these."""

    by_subject: dict[str, User]
    adoptable: dict[str, User]
    taken: set[str]
    held: dict[int, list[Membership]]

    @classmethod
    def load(cls, directory: str, listing: list[DirectoryIdentity]) -> _Known:
        by_subject = {u.directory_subject: u for u in
                      User.objects.filter(directory=directory).exclude(directory_subject="")}
        names = sorted({i.username for i in listing})
        owners = [u for part in _chunks(names, _IN_CHUNK) for u in User.objects.filter(username__in=part)]
        adoptable = {u.username: u for u in owners if _adoptable(u)}
        held: dict[int, list[Membership]] = {}
        adopted = Q(user__in=list(adoptable.values()))
        for m in Membership.objects.filter(Q(user__directory=directory) | adopted):
            held.setdefault(m.user_id, []).append(m)
        return cls(by_subject, adoptable, {u.username for u in owners}, held)

    def user_for(self, identity: DirectoryIdentity) -> User:
        """The identity's portal user — found, adopted or new (unsaved). Raises
        :class:`DirectoryConflict` as :func:`apply_identity` does."""
        user = self.by_subject.get(identity.subject)
        if user is None:
            user = self.adoptable.pop(identity.username, None)
            if user is None:
                if identity.username in self.taken:
                    raise _conflict(identity)
                user = User(username=identity.username)
            self.taken.add(identity.username)
            self.by_subject[identity.subject] = user
        return user

    def found(self, identity: DirectoryIdentity) -> User | None:
        """As :func:`_find`, for a disabled identity (nothing is created for it)."""
        return self.by_subject.get(identity.subject) or self.adoptable.get(identity.username)


@dataclass
class _Batch:
    """The writes a batch of the listing calls for, made in a few statements."""

    created: list[User] = field(default_factory=list)
    updated: dict[tuple[str, ...], list[User]] = field(default_factory=dict)  # by the fields changed
    disabled: list[User] = field(default_factory=list)
    stale: list[Membership] = field(default_factory=list)
    new: list[Membership] = field(default_factory=list)

    def write(self, directory: str, now: datetime) -> None:
        User.objects.bulk_create(self.created)  # sets their ids (PostgreSQL returns them)
        for fields, users in self.updated.items():
            User.objects.bulk_update(users, fields)
        if self.stale:
            Membership.objects.filter(pk__in=[m.pk for m in self.stale]).delete()
        Membership.objects.bulk_create(self.new)
        if self.new:
            # bulk_create sends no post_save; the listeners (the clusters' account syncs) need to
            # hear that memberships changed, once, not which ones.
            post_save.send(sender=Membership, instance=self.new[-1], created=True, update_fields=None,
                           raw=False, using=Membership.objects.db)
        for user in self.disabled:
            deactivate_user(user, reason=f"disabled in {directory}", now=now)


def _plan(identity: DirectoryIdentity, known: _Known, rules: _Rules, now: datetime,
          batch: _Batch, report: SyncReport) -> None:
    if not identity.active:
        user = known.found(identity)
        if user is not None and user.is_active and not user._state.adding:
            batch.disabled.append(user)
            report.deactivated += 1
        return
    user = known.user_for(identity)
    changed = _take(user, identity, now)
    if user._state.adding:  # new: the listing has each subject once, so not in this batch yet
        batch.created.append(user)
        report.created += 1
    elif changed:
        batch.updated.setdefault(tuple(sorted(changed)), []).append(user)
        report.updated += 1
    stale, new = rules.changes(user, identity.groups, known.held.get(user.pk, []))
    batch.stale += stale
    batch.new += new
    report.roles_removed += len(stale)
    report.roles_added += len(new)


def sync_directory(
    directory: str, identities: Iterable[DirectoryIdentity], *, complete: bool, now: datetime | None = None,
) -> SyncReport:
    """Apply a listing of the directory. ``complete``: the listing is the whole directory, so
    its users the listing no longer has were deleted there and are deactivated. The same rules as
    :func:`apply_identity`, read and written a batch at a time: the number of statements does not
    grow with the number of users, and a listing that changed nothing writes nothing."""
    now = now or timezone.now()
    report = SyncReport()
    listing = list({i.subject: i for i in identities}.values())  # a subject listed twice: the last
    rules = _Rules.of(directory, DirectoryRule.objects.filter(directory=directory))
    known = _Known.load(directory, listing)
    for part in _chunks(listing, SYNC_BATCH):
        batch = _Batch()
        for identity in part:
            try:
                _plan(identity, known, rules, now, batch, report)
            except DirectoryConflict as exc:
                log.warning("directory sync skipped a user: %s", exc)
                report.conflicts += 1
        with transaction.atomic():
            batch.write(directory, now)
    if complete:
        seen = [i.subject for i in listing]
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
