"""``manage.py create_api_token <username> --name … [--days N]``: a personal API token for a user
the operator names — a service account's, say — since DRF's ``drf_create_token`` left with the
plain-text tokens (docs/identity.md "API tokens"). The secret is printed once, like on the page."""

from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError

from portal.models import User
from portal.tokens import DEFAULT_DAYS, api_token_create


class Command(BaseCommand):
    help = "Make a personal API token for a user and print it once (hashed at rest)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", required=True, help="what will use the token")
        parser.add_argument("--days", type=int, default=DEFAULT_DAYS, help="valid for this many days")

    def handle(self, *args, username, name, days, **options):
        user = User.objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user {username!r}.")
        try:
            issued = api_token_create(actor=user, name=name, expires_in_days=days)
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from exc
        except PermissionDenied as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(issued.secret)
        token = issued.token
        self.stderr.write(f"token {token.prefix}… for {username}, expires {token.expires_at:%Y-%m-%d}")
