from celery import shared_task


@shared_task(name="portal.ping")
def ping(payload: str) -> str:
    """Round-trip probe: proves a worker consumes from the broker and returns results."""
    return f"pong:{payload}"
