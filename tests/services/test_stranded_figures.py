"""Stranded GPUs in the figures (DESIGN §15, docs/resources.md "Stranded GPUs in the figures"):
a node where a CPU-heavy job runs has free GPUs its cores cannot feed; the node map (en and zh),
the node page, the node API, the Prometheus exposition and the dashboard show them — and the
submission form's start estimate does not start a job on GPUs its own request would strand."""

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.clusters.metrics import portal_metrics
from jobs.models import Job
from jobs.requests import queued_request
from jobs.scheduler.footprint import Request
from jobs.scheduling import start_estimates
from jobs.scheduling.cycle import schedule_once
from jobs.states import JobState
from quotas.models import Node
from tests import factories as fx

pytestmark = pytest.mark.django_db


@pytest.fixture
def crowded_node():
    """One node of 8 GPUs, 96 cores (12 a GPU), 1 TiB: "heavy" holds 1 GPU and 60 cores, "plain"
    2 GPUs and their share (24 cores). 5 GPUs are free; the 12 cores left feed one of them, so 4
    are stranded."""
    f, proj = fx.single_project_pool(1, 8)
    node = f.nodes.get()
    node.cpu_millicores, node.memory_mib, node.local_disk_gib = 96_000, 1_048_576, 3_500
    node.save()
    heavy = fx.submit(proj, f, gpus=1, name="heavy", cpu_millicores=60_000)
    plain = fx.submit(proj, f, gpus=2, name="plain")
    schedule_once()
    for job in (heavy, plain):
        job.refresh_from_db()
        assert job.state == JobState.ADMITTED
    return f, proj, node


def _admin_client(language="en") -> Client:
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(fx.platform_admin())
    return client


def test_the_node_api_gives_free_usable_and_stranded_gpus(crowded_node):
    client = APIClient()
    client.force_authenticate(fx.platform_admin())
    (shown,) = client.get(reverse("api:node-occupancy")).json()["results"]
    assert (shown["free"], shown["usable"], shown["stranded"]) == (5, 1, 4)


def test_nothing_is_stranded_while_every_job_holds_its_share(crowded_node):
    Job.objects.filter(name="heavy").update(cpu_millicores=None)  # as if it asked its share
    client = APIClient()
    client.force_authenticate(fx.platform_admin())
    (shown,) = client.get(reverse("api:node-occupancy")).json()["results"]
    assert (shown["free"], shown["usable"], shown["stranded"]) == (5, 5, 0)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_node_map_and_the_node_page_show_stranded_gpus(crowded_node, language):
    _f, _proj, node = crowded_node
    client = _admin_client(language)
    page = client.get(reverse("node-map"))
    assert page.status_code == 200
    totals = page.context["map"].totals
    assert (totals["free"], totals["usable"], totals["stranded"]) == (5, 1, 4)
    html = page.content.decode()
    assert 'data-free="5" data-usable="1" data-stranded="4"' in html  # the node and the totals
    assert html.count('data-stranded="4"') == 2
    if language == "en":
        assert "5 free on ready nodes (1 usable, 4 stranded)" in html
        assert "1 usable, 4 stranded" in html.split(f'id="node-{node.pk}"')[1]
    detail = client.get(reverse("node-page", args=[node.pk]))
    assert detail.status_code == 200
    assert 'data-stranded="4"' in detail.content.decode()
    assert (detail.context["view"].usable, detail.context["view"].stranded) == (1, 4)


def test_the_metrics_count_stranded_gpus_per_flavor(crowded_node):
    text = portal_metrics()
    assert "# TYPE gpupool_gpus_stranded gauge" in text
    assert 'gpupool_gpus_stranded{flavor="A100"} 4.0' in text
    assert 'gpupool_gpus_unallocated{flavor="A100"} 5.0' in text
    Node.objects.update(state="cordoned")  # a node that takes no jobs counts neither
    assert 'gpupool_gpus_stranded{flavor="A100"}' not in portal_metrics()


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_dashboard_shows_stranded_gpus_beside_utilisation(crowded_node, language):
    page = _admin_client(language).get(reverse("dashboard"))
    assert page.status_code == 200
    (row,) = [r for r in page.context["pool"] if r[0].name == "A100"]
    assert (row[1], row[2], row[3]) == (8, 3, 4)  # capacity, in use, stranded
    assert 'data-stranded="4"' in page.content.decode()


def test_the_forms_estimate_does_not_start_a_job_on_gpus_its_request_would_strand(crowded_node):
    """5 GPUs are free but only one can be fed. A 1-GPU job asking 12 cores (its share) starts
    now; one asking 24 cores needs two GPUs' worth of the node — it starts when "plain" (2 GPUs,
    24 cores, its 1 h limit) ends, not now."""
    f, proj, _node = crowded_node
    now = timezone.now()

    def estimate(cpu):
        asked = queued_request(f, Request(cpu, None, None), units=1, milli=None)
        return start_estimates.start_estimate_new(
            project_id=proj.pk, flavor=f.name, workers=1, min_workers=None, gpus_per_worker=1,
            gpu_milli=None, priority=100, preemptible=True, max_runtime_seconds=600,
            needs_approval=False, request=asked, now=now).estimated_start

    cache.delete(start_estimates._FORM_SNAPSHOT_KEY)  # a snapshot of this world, not an older one
    assert estimate(None) == now
    assert estimate(12_000) == now
    later = estimate(24_000)
    assert later is not None and later >= now + timedelta(minutes=59)


def test_the_submission_forms_live_estimate_counts_the_request(crowded_node):
    """The same through the form's live feedback: the figure typed in moves the estimate."""
    f, proj, _node = crowded_node
    cache.delete(start_estimates._FORM_SNAPSHOT_KEY)
    body = {"name": "new", "project": proj.pk, "kind": "training", "flavor": f.pk,
            "priority_class": fx.priority().pk, "workers": "1", "gpus_per_worker": "1", "min_workers": "",
            "gpu_milli": "", "image": "img", "command": "", "max_runtime_seconds": "600"}
    client = _admin_client()

    def start(**extra):
        response = client.post("/jobs/new/validate/", {**body, **extra}, HTTP_HX_REQUEST="true")
        assert response.status_code == 200
        found = response.context["summary"]["start"]
        return found.estimated_start - found.computed_at

    assert start() == timedelta(0)
    assert start(cpu_millicores="12000") == timedelta(0)
    assert start(cpu_millicores="24000") >= timedelta(minutes=59)


def test_every_stranded_text_of_the_pages_has_its_chinese_in_the_glossary():
    """The zh catalogue is regenerated from scripts/fill_zh_hans.py: every text of the three pages
    that speaks of usable or stranded GPUs is in its glossary, exactly as the templates say it."""
    import importlib.util
    import re
    from pathlib import Path

    from django.utils.translation.template import templatize

    spec = importlib.util.spec_from_file_location("fill_zh_hans", Path("scripts/fill_zh_hans.py"))
    glossary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(glossary)
    texts = []
    for name in ("jobs/node_map.html", "jobs/node_detail.html", "portal/dashboard.html"):
        source = Path("templates", name).read_text()
        for single, double in re.findall(r"""gettext\(u?(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")\)""",
                                         templatize(source, name)):
            text = (single or double).replace("\\'", "'").replace('\\"', '"')
            if "tranded" in text or "usable" in text:
                texts.append(text)
    assert len(texts) >= 5
    assert [t for t in texts if t not in glossary.GLOSSARY] == []
