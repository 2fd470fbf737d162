"""Issue 19, item 4: the "Move project" page — platform admins only, consequences stated, the
service's refusals on the form."""

from datetime import timedelta

from django.utils import timezone

from portal.models import Department, Project, ProjectMove
from quotas.models import Node, QuotaNode


def _url(project) -> str:
    return f"/projects/{project.pk}/move/"


def test_item4_platform_admin_moves_a_project_from_the_page(page_client, world):
    Project.objects.filter(pk=world.pa.pk).update(created_at=timezone.now() - timedelta(days=30))
    Node.objects.create(cluster=Node.objects.first().cluster, name="n2", flavor=world.F, gpu_count=8,
                        zone="z", spine="s", leaf="l2")
    roomy = Department.objects.create(code="C", name="Dept C")
    client = page_client("platform")
    page = client.get(_url(world.pa))
    assert page.status_code == 200
    text = page.content.decode()
    assert "What a move does" in text and "closed month" in text and "live loans" in text
    at = timezone.localtime(timezone.now() - timedelta(hours=2)).strftime("%Y-%m-%d %H:%M")
    response = client.post(_url(world.pa), {"department": roomy.pk, "at": at, "reason": "reorg"})
    assert response.status_code == 302
    move = ProjectMove.objects.get()
    assert (move.to_department_id, move.reason, move.actor) == (roomy.pk, "reorg", world.users["platform"])
    assert QuotaNode.objects.get(department=roomy).quota == 4
    assert "Dept C" in client.get(_url(world.pa)).content.decode()  # the history


def test_item4_refusals_land_on_the_form(page_client, world):
    client = page_client("platform")
    response = client.post(_url(world.pa), {"department": world.B.pk, "reason": "x"})  # B is full
    assert response.status_code == 200
    assert "department" in response.context["form"].errors
    assert "cannot hold" in response.content.decode()
    assert not ProjectMove.objects.exists()
    later = timezone.localtime(timezone.now() + timedelta(days=1)).strftime("%Y-%m-%d %H:%M")
    response = client.post(_url(world.pa), {"department": world.B.pk, "reason": "x", "at": later})
    assert "at" in response.context["form"].errors


def test_item4_page_speaks_chinese(page_client, world):
    text = page_client("platform", "zh-hans").get(_url(world.pa)).content.decode()
    assert "移动项目" in text and "计费" in text and "已结账" in text


def test_item4_others_get_403_or_404(page_client, world):
    assert page_client("pa1_admin").get(_url(world.pa1)).status_code == 403  # sees it, may not move it
    assert page_client("a_admin").post(_url(world.pa), {"department": world.A1.pk}).status_code == 403
    assert page_client("pb_member").get(_url(world.pa)).status_code == 404  # another tenant's project
    assert page_client("outsider").get(_url(world.pa)).status_code == 404
    assert page_client(None).get(_url(world.pa)).status_code == 302  # to sign-in
    assert not ProjectMove.objects.exists()
