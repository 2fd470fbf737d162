"""The submission form: happy path, bad input (errors shown, nothing written) and the htmx
live validation that runs the service without writing."""

import re
from decimal import Decimal

import pytest
from django.conf import settings
from django.test import override_settings

from jobs import selectors
from jobs.models import COMMAND_MAX_LENGTH, IMAGE_MAX_LENGTH, Job, JobEvent, ProjectStorage
from jobs.submission import may_submit
from portal.models import Project
from tests import factories as fx
from tests.pages.submit_refusals import assert_refused_on

pytestmark = pytest.mark.django_db


def _body(world, prio, **changes):
    body = {
        "name": "bert-large",
        "project": world.pa1.pk,
        "kind": "training",
        "flavor": world.F.pk,
        "priority_class": prio.pk,
        "workers": "2",
        "gpus_per_worker": "8",
        "min_workers": "",
        "gpu_milli": "",
        "image": "pytorch:2.3",
        "command": "python train.py",
        "max_runtime_seconds": "7200",
    }
    body.update(changes)
    return {k: v for k, v in body.items() if v is not None}


def test_form_offers_only_projects_the_user_may_submit_to(page_client, prio):
    page = page_client("pa1_member").get("/jobs/new/").content.decode()
    assert "Project a1" in page and "Project b" not in page and "Project a<" not in page
    outsider = page_client("outsider").get("/jobs/new/").content.decode()
    assert "not a member of any project" in outsider


@pytest.mark.parametrize("persona", ["platform", "auditor", "a_admin", "b_admin", "a_finance", "pa1_admin",
                                     "pa1_member", "pb_member", "outsider"])
def test_submittable_projects_follow_the_service_rule(world, persona):
    user = world.users[persona]
    offered = set(selectors.submittable_projects(user))
    assert offered == {p for p in Project.objects.all() if may_submit(user, p)}


def test_submitting_the_form_creates_the_job_and_shows_it(page_client, world, prio):
    client = page_client("pa1_member")
    response = client.post("/jobs/new/", _body(world, prio, checkpointing="on"), follow=True)
    job = Job.objects.get()
    assert response.redirect_chain[-1][0] == f"/jobs/{job.pk}/"
    assert (job.name, job.project, job.submitted_by.username) == ("bert-large", world.pa1, "pa1_member")
    assert (job.workers, job.gpus_per_worker, job.max_runtime_seconds) == (2, 8, 7200)
    assert job.checkpointing is True
    assert job.state == "queued" and JobEvent.objects.filter(job=job, reason="submitted").exists()
    assert "was submitted" in response.content.decode()


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"name": "Bad Name!"}, "name"),
        ({"workers": "0"}, "workers"),
        ({"workers": "lots"}, "workers"),
        ({"image": ""}, "image"),
        ({"max_runtime_seconds": "10"}, "max_runtime_seconds"),
        ({"flavor": "999999"}, "flavor"),
        ({"priority_class": ""}, "priority_class"),
        ({"min_workers": "5"}, "min_workers"),  # the service: at most the number of workers
        ({"gpu_milli": "500"}, "gpu_milli"),  # the service: F is not shareable
        ({"gpus_per_worker": "16"}, "gpus_per_worker"),  # the service: nodes have 8 GPUs
        ({"kind": "dev"}, "kind"),  # the service: a dev job is one device
    ],
)
def test_bad_input_shows_errors_and_writes_nothing(page_client, world, prio, changes, field):
    response = page_client("pa1_member").post("/jobs/new/", _body(world, prio, **changes))
    assert_refused_on(response, field)


def test_a_project_of_another_tenant_is_not_a_valid_choice(page_client, world, prio):
    response = page_client("pa1_member").post("/jobs/new/", _body(world, prio, project=world.pb.pk))
    assert "project" in response.context["form"].errors
    assert Job.objects.count() == 0


def test_the_dev_job_limit_is_a_form_error(page_client, world, prio):
    body = _body(world, prio, kind="dev", workers="1", gpus_per_worker="1", max_runtime_seconds="")
    client = page_client("pa1_member")
    for n in range(2):
        assert client.post("/jobs/new/", {**body, "name": f"dev-{n}"}).status_code == 302
    response = client.post("/jobs/new/", {**body, "name": "dev-3"})
    assert response.status_code == 200 and "kind" in response.context["form"].errors
    assert Job.objects.count() == 2


def test_live_validation_returns_the_form_fragment_with_a_summary(page_client, world, prio):
    client = page_client("pa1_member")
    # The page's storage list was drawn for pa1 (mounts_for): the project did not change.
    body = _body(world, prio, mounts_for=world.pa1.pk)
    response = client.post("/jobs/new/validate/", body, HTTP_HX_REQUEST="true")
    page = response.content.decode()
    assert response.status_code == 200 and "<html" not in page and 'id="job-form-errors"' in page
    assert 'id="job-summary" class="summary" aria-live="polite" hx-swap-oob="true"' in page
    # Inputs are never swapped; the class list's options are (they depend on kind and project), and
    # the storage list when the project changed (test_item4_…).
    assert "<input" not in page and page.count("<select") == 1
    assert '<select name="priority_class" hx-swap-oob="innerHTML"' in page
    summary = response.context["summary"]
    assert summary["devices"] == 16 and summary["card_hours"] == 32  # 16 cards × 2 h
    assert "32" in page and "no billing rate applies" in page
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


def test_live_validation_shows_service_errors_without_writing(page_client, world, prio):
    response = page_client("pa1_member").post(
        "/jobs/new/validate/", _body(world, prio, gpus_per_worker="16"), HTTP_HX_REQUEST="true"
    )
    form = response.context["form"]
    html = response.content.decode()
    assert "gpus_per_worker" in form.errors and 'id="id_gpus_per_worker-error"' in html
    assert 'data-for="id_gpus_per_worker" data-invalid="true" hx-swap-oob="true"' in html
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


def test_live_validation_does_not_flag_fields_not_filled_in_yet(page_client, world, prio):
    partial = {"project": world.pa1.pk, "flavor": world.F.pk, "workers": "1", "gpus_per_worker": "4",
               "kind": "training"}
    response = page_client("pa1_member").post("/jobs/new/validate/", partial, HTTP_HX_REQUEST="true")
    form = response.context["form"]
    assert "name" not in form.errors and "image" not in form.errors
    assert response.context["summary"]["devices"] == 4
    assert response.context["summary"]["card_hours"] is None  # no maximum runtime: unbounded


def test_live_validation_reports_a_wrong_shape_before_the_image_is_typed(page_client, world, prio):
    partial = _body(world, prio, name="", image="", gpus_per_worker="16")
    response = page_client("pa1_member").post("/jobs/new/validate/", partial, HTTP_HX_REQUEST="true")
    form = response.context["form"]
    assert "gpus_per_worker" in form.errors  # the service's rule: a worker fits on one node
    assert "name" not in form.errors and "image" not in form.errors
    assert Job.objects.count() == 0


def test_summary_counts_mig_slices_and_shares_as_card_fractions(page_client, world, prio):
    mig = fx.flavor("A100-1g", shareable=False)
    mig.fraction_numerator, mig.fraction_denominator = 1, 7
    mig.save()
    fx.nodes(mig, 1, gpus=7, cluster="mig")
    shared = fx.flavor("T4-shared", shareable=True)
    fx.nodes(shared, 1, gpus=4, cluster="t4")
    client = page_client("pa1_member")
    body = _body(world, prio, flavor=mig.pk, workers="1", gpus_per_worker="7", max_runtime_seconds="3600")
    summary = client.post("/jobs/new/validate/", body).context["summary"]
    assert summary["card_hours"] == pytest.approx(1, abs=0.01)  # 7 slices of 1/7 for 1 h
    body = _body(world, prio, flavor=shared.pk, workers="1", gpus_per_worker="1", gpu_milli="250",
                 max_runtime_seconds="36000")
    summary = client.post("/jobs/new/validate/", body).context["summary"]
    assert summary["devices"] == pytest.approx(0.25) and summary["card_hours"] == pytest.approx(2.5)


def test_copy_prefills_the_form_from_a_visible_job(page_client, pa1_job, pb_job):
    page = page_client("pa1_member").get(f"/jobs/new/?copy={pa1_job.pk}").content.decode()
    assert 'value="pa1-train"' in page
    hidden = page_client("pa1_member").get(f"/jobs/new/?copy={pb_job.pk}").content.decode()
    assert "pb-secret" not in hidden


@override_settings(GPUPOOL={**settings.GPUPOOL, "DEMO": True})
def test_the_demo_offers_a_simulated_duration(page_client, world, prio):
    page = page_client("pa1_member").get("/jobs/new/").content.decode()
    assert 'name="sim_duration_seconds"' in page
    page_client("pa1_member").post("/jobs/new/", _body(world, prio, sim_duration_seconds="120"))
    assert Job.objects.get().sim_duration_seconds == 120


@pytest.fixture
def policy(world):
    from jobs.approvals import approval_policy_set

    return approval_policy_set(actor=world.users["platform"], department=world.A, max_gpus=8)


def test_summary_shows_the_approval_a_job_will_need(page_client, world, prio, policy):
    client = page_client("pa1_member")
    big = client.post("/jobs/new/validate/", _body(world, prio), HTTP_HX_REQUEST="true")
    assert len(big.context["summary"]["approvals"]) == 1
    assert "Needs approval" in big.content.decode() and "more than the 8" in big.content.decode()
    small = client.post("/jobs/new/validate/", _body(world, prio, workers="1", gpus_per_worker="4"))
    assert small.context["summary"]["approvals"] == [] and "No approval needed." in small.content.decode()
    assert Job.objects.count() == 0


def test_a_job_over_policy_waits_for_approval_and_says_so(page_client, world, prio, policy, settings):
    settings.LANGUAGE_CODE = "en"  # stored reasons are written in the site language
    client = page_client("pa1_member")
    response = client.post("/jobs/new/", _body(world, prio), follow=True)
    job = Job.objects.get()
    assert job.state == "pending_approval"
    page = response.content.decode()
    assert "Waiting for approval" in page and "more than the 8" in page
    queue = client.get("/jobs/queue/?state=pending_approval").content.decode()
    assert "bert-large" in queue and "Waiting for approval" in queue


def test_money_appears_only_when_billing_registers_a_rate(page_client, world, prio, monkeypatch):
    from jobs import estimates

    client = page_client("pa1_member")
    assert client.post("/jobs/new/validate/", _body(world, prio)).context["summary"]["cost"] is None
    monkeypatch.setattr(estimates, "cost_estimators", [lambda f, hours, at: (hours * Decimal("9.5"), "CNY")])
    response = client.post("/jobs/new/validate/", _body(world, prio))
    assert response.context["summary"]["cost"] == (Decimal("304.00"), "CNY")  # 32 card-hours × 9.5
    assert "304.00 CNY" in response.content.decode()


# --- issue 32: nothing cut without a word (item 2), storages of the chosen project (item 4) ------


def test_item2_no_text_input_of_the_form_cuts_what_is_typed(page_client, world, prio):
    # A browser cuts typed or pasted text at maxlength without a word; the server says it instead.
    page = page_client("pa1_member").get("/jobs/new/").content.decode()
    assert 'name="name"' in page and 'name="autoscale_query"' in page and 'name="template_name"' in page
    assert "maxlength" not in page


@pytest.mark.parametrize(
    ("field", "limit"),
    [("name", 63), ("image", IMAGE_MAX_LENGTH), ("command", COMMAND_MAX_LENGTH), ("alternatives", 400),
     ("framework", 40)],
)
def test_over_long_text_is_refused_with_its_length_on_its_field(page_client, world, prio, field, limit):
    value = "a" * (limit + 1) if field != "image" else "a" * (limit - 3) + ":1.0"
    client = page_client("pa1_member")
    response = client.post("/jobs/new/", _body(world, prio, **{field: value}))
    assert_refused_on(response, field)
    said = f"at most {limit} characters (it has {len(value)})"
    assert said in " ".join(response.context["form"].errors[field])
    live = client.post("/jobs/new/validate/", _body(world, prio, **{field: value}), HTTP_HX_REQUEST="true")
    assert said in live.content.decode()  # said live too, when the user leaves the field


def test_an_over_long_template_name_is_refused_not_cut(page_client, world, prio):
    response = page_client("pa1_member").post(
        "/jobs/new/", _body(world, prio, save_template="1", template_name="t" * 81)
    )
    assert response.status_code == 200 and "A name of 1–80 characters." in response.content.decode()
    assert f'value="{"t" * 81}"' in response.content.decode()  # what was typed, kept to shorten


@pytest.fixture
def two_projects_storages(world):
    def make(project):
        return ProjectStorage.objects.create(project=project, name=f"{project.code}-data", kind="hostpath",
                                             host_path=f"/srv/{project.code}", mount_path="/data")

    return {"pa": make(world.pa), "pa1": make(world.pa1)}


def _listed_mounts(html: str) -> set[str]:
    return set(re.findall(r'<input type="checkbox" name="mounts" value="(\d+)"', html))


def test_item4_the_storage_list_shows_the_chosen_projects_only(
    page_client, world, prio, two_projects_storages
):
    pa, pa1 = (str(two_projects_storages[k].pk) for k in ("pa", "pa1"))
    client = page_client("a_admin")  # may submit to pa and pa1
    page = client.get("/jobs/new/").content.decode()
    assert _listed_mounts(page) == set() and "Choose a project to see its storages." in page
    live = client.post("/jobs/new/validate/", _body(world, prio, project=world.pa.pk, mounts_for=""))
    html = live.content.decode()
    assert '<div id="mounts-choices" hx-swap-oob="true">' in html and _listed_mounts(html) == {pa}
    assert f'name="mounts_for" value="{world.pa.pk}"' in html
    # The project changes with pa's storage ticked: pa1's list comes in, the tick goes, and it is said.
    body = _body(world, prio, mounts=[pa], mounts_for=world.pa.pk)
    html = client.post("/jobs/new/validate/", body).content.decode()
    assert _listed_mounts(html) == {pa1} and 'checked' not in html.split('id="mounts-choices"')[1]
    assert "pa-data is not a storage of project pa1 and was unticked." in html
    # Ticking a box of the same project swaps nothing.
    body = _body(world, prio, mounts=[pa1], mounts_for=world.pa1.pk)
    assert 'id="mounts-choices"' not in client.post("/jobs/new/validate/", body).content.decode()
    # A project without storages says so.
    body = _body(world, prio, project=world.pa.pk, mounts_for=world.pa1.pk)
    two_projects_storages["pa"].delete()
    assert "Project pa has no storages." in client.post("/jobs/new/validate/", body).content.decode()


def test_a_forged_storage_of_another_project_is_refused_beside_it(
    page_client, world, prio, two_projects_storages
):
    pa = str(two_projects_storages["pa"].pk)
    response = page_client("a_admin").post("/jobs/new/", _body(world, prio, mounts=[pa]))
    assert_refused_on(response, "mounts")
    html = response.content.decode()
    assert response.context["form"].errors["mounts"] == ["Choose storages of the job's project only."]
    assert _listed_mounts(html) == {pa, str(two_projects_storages["pa1"].pk)}  # the refused one, listed


def test_item4_a_copy_lists_its_projects_storages_with_its_mount_ticked(
    page_client, world, prio, two_projects_storages
):
    from jobs.services import job_submit

    job = job_submit(actor=world.users["a_admin"], project=world.pa1, name="copied", kind="training",
                     flavor=world.F, priority_class=prio, image="pytorch:2.3", gpus_per_worker=1,
                     max_runtime_seconds=600, mounts=["pa1-data"])
    html = page_client("a_admin").get(f"/jobs/new/?copy={job.pk}").content.decode()
    assert _listed_mounts(html) == {str(two_projects_storages["pa1"].pk)}
    assert re.search(r'name="mounts" value="\d+"[^>]*checked', html)
