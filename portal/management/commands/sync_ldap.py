"""``manage.py sync_ldap``: the periodic LDAP sync, once, now (docs/identity.md)."""

from django.core.management.base import BaseCommand, CommandError

from portal.ldap_sync import LdapSyncError, sync_ldap


class Command(BaseCommand):
    help = "Read every user and group of the LDAP directory and apply them (roles, deactivation)."

    def handle(self, *args, **options):
        try:
            report, listing = sync_ldap()
        except LdapSyncError as exc:
            raise CommandError(f"{exc} — nothing was changed.") from exc
        self.stdout.write(
            f"{len(listing.identities)} users, {listing.groups} groups: "
            + ", ".join(f"{k} {v}" for k, v in report.as_dict().items())
        )
