"""Estimated starts (issue 24) in a real browser, in English and Chinese: the queue's column and
the job page's box, from the beat task's cached forecast."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.scheduling.cycle import schedule_once
from jobs.scheduling.start_estimates import start_estimates_refresh
from jobs.services import job_submit
from tests import factories as fx

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WORDS = {
    "en": ("Estimated start", "maximum runtime"),
    "zh-hans": ("预计开始时间", "最长运行时间"),
}


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_the_queue_and_the_job_page_show_when_a_job_will_start(world, browser_for, shot, lang):
    prio = fx.priority()
    jobs = [
        job_submit(actor=world.users["pb_member"], project=world.pb, name=f"est-{k}", kind="training",
                   flavor=world.F, priority_class=prio, image="img", gpus_per_worker=8,
                   max_runtime_seconds=3600)
        for k in range(4)
    ]
    now = timezone.now().replace(microsecond=0)
    schedule_once(now)  # two run (16 GPUs), two wait for their one-hour limits
    start_estimates_refresh(now)
    shown = timezone.localtime(now + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M")
    heading, assumption = WORDS[lang]

    page = browser_for(world.users["pb_member"], "pw-pb_member", lang)
    page.goto(f"{page.base}/jobs/queue/")
    assert heading in page.inner_text("table.queue thead")
    cells = page.locator("table.queue td.start time")
    assert cells.count() == 2 and all(cells.nth(k).inner_text() == shown for k in range(2))
    shot(page, f"start-estimates-queue-{lang}")

    waiting = [j for j in jobs if j.__class__.objects.get(pk=j.pk).state == "queued"]
    page.goto(f"{page.base}/jobs/{waiting[-1].pk}/")
    box = page.inner_text("article.start-estimate")
    assert heading in box and shown in box and assumption in box
    shot(page, f"start-estimates-job-{lang}")
