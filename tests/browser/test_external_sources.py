"""External jobs in a real browser (issue 20 item 4): a platform admin finds the unmapped Slurm
account under "More → External sources", maps it to a project in one step, and sees its jobs in
the project's job list marked as external; the project's member then sees them too."""

import pytest

from jobs.native.models import ExternalSource
from tests import factories as fx
from tests.external_world import external_world

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_admin_maps_an_unmapped_account_and_its_jobs_appear_in_the_project(world, browser_for, shot):
    fx.priority()
    ext = external_world(world)
    page = browser_for(world.users["platform"], "pw-platform")
    page.click("details.nav-more summary")
    page.click("a.nav-external-sources")
    page.wait_for_url("**/external-sources/")
    row = page.locator(f"#source-{ext.stray.pk}")
    assert "acct-stray" in row.inner_text() and "4.00" in row.locator(".observed-card-hours").inner_text()
    shot(page, "external-sources")
    row.locator("select[name=project]").select_option(label="pa · Project a")
    with page.expect_navigation():
        row.locator("button[type=submit]").click()
    message = page.inner_text("article.message.success")
    assert "acct-stray is now mapped to project pa: 2 jobs were recorded" in message
    assert "acct-stray" in page.inner_text("#mapped") and "acct-stray" not in page.inner_text("#unmapped")
    assert ExternalSource.objects.get(pk=ext.stray.pk).project == world.pa

    page.goto(page.base + "/jobs/?project=pa")
    badges = page.locator("table.jobs mark.badge.external")
    assert badges.count() == 2
    assert "External · Slurm job 2001 · user alice" in page.inner_text("table.jobs")
    shot(page, "external-jobs-in-project")
    page.locator("table.jobs a", has_text="ext-2002").first.click()
    page.wait_for_selector("article.external-note")
    assert "managed on its cluster" in page.inner_text("article.external-note")
    assert "Priority" in page.inner_text("article.explain")  # the cluster's reason, not the engine's
    assert page.locator("form[action$='/cancel/']").count() == 0

    member = browser_for(world.users["a_admin"], "pw-a_admin", lang="zh-hans")
    member.goto(member.base + "/jobs/?project=pa")
    assert "外部作业 · Slurm 作业 2001 · 用户 alice" in member.inner_text("table.jobs")
