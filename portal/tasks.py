from celery import shared_task


@shared_task(name="portal.ping")
def ping(payload: str) -> str:
    """Round-trip probe: proves a worker consumes from the broker and returns results."""
    return f"pong:{payload}"


@shared_task(name="portal.approvals_tick", ignore_result=True)
def approvals_tick() -> dict:
    """Every minute: escalate or expire overdue approval steps, then retry unsent mails.
    Idempotent: every change is a conditional update, every mail a claimed row."""
    from .approvals.deadlines import approval_deadlines_process
    from .notifications import mail_pending

    counts = approval_deadlines_process()
    counts["mailed"] = mail_pending()
    return counts


@shared_task(name="portal.send_notification_mail", ignore_result=True)
def send_notification_mail(ids: list[int]) -> int:
    from .notifications import mail_pending

    return mail_pending(ids)


@shared_task(name="portal.deliver_webhook", ignore_result=True)
def deliver_webhook(ids: list[int]) -> list[str]:
    """Make the webhook attempts ``ids`` that are due (docs/notifications.md)."""
    from .webhook_delivery import delivery_attempt

    return [delivery_attempt(pk) for pk in ids]


@shared_task(name="portal.webhooks_tick", ignore_result=True)
def webhooks_tick() -> int:
    """Every minute: send the webhook attempts that are due (retries after their backoff)."""
    from django.utils import timezone

    from .webhooks import deliveries_dispatch

    return deliveries_dispatch(timezone.now())


@shared_task(name="portal.sync_ldap", ignore_result=True)
def sync_ldap() -> dict:
    """Beat (GPUPOOL_LDAP_SYNC_INTERVAL_SECONDS): the LDAP directory's users and groups applied.
    A directory that cannot be read raises (the task fails loudly) and changes nothing."""
    from .ldap_sync import sync_ldap as run

    report, listing = run()
    return {**report.as_dict(), "users": len(listing.identities), "groups": listing.groups}


@shared_task(name="portal.oidc_check_accounts", ignore_result=True)
def oidc_check_accounts() -> dict:
    """Beat (GPUPOOL_OIDC_CHECK_INTERVAL_SECONDS, only with oidc on): ask the OpenID Connect
    provider about every user whose sign-in left a refresh token; deactivate those it no longer
    knows (docs/identity.md)."""
    from .oidc_check import accounts_check

    return accounts_check().as_dict()


@shared_task(name="portal.oidc_check_account", ignore_result=True)
def oidc_check_account(user_id: int) -> str:
    """Ask the provider about one user, after a back-channel logout ended their session."""
    from .oidc_check import account_check

    return account_check(user_id)


@shared_task(name="portal.api_tokens_prune", ignore_result=True)
def api_tokens_prune() -> int:
    """Daily: delete personal API tokens revoked or expired more than 90 days ago."""
    from .tokens import api_tokens_prune as prune

    return prune()
