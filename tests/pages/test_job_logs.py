"""The job's log and a dev job's port on the job pages (DESIGN §13, issue 22), with jobs that
really run on a simulator process: the tail grows, the download is the whole log in pieces, every
"no log" has its reason, and another tenant's job is a 404 everywhere (the ingress check: 403)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.urls import reverse

from jobs.clusters import dispatch, logs
from jobs.clusters.backends.base import LOG_CHUNK_BYTES
from jobs.models import Job, ProjectSecret, ProjectStorage
from portal.models import Project, User
from quotas.models import Cluster, Node
from tests import job_runs
from tests.backends import k8s_standin
from tests.simserver import _free_port
from tests.waiting import settle, wait_until

pytestmark = pytest.mark.django_db


def _page(client, job) -> str:
    response = client.get(reverse("job-detail", args=[job.pk]))
    assert response.status_code == 200
    return response.content.decode()


def _last_step(job) -> int:
    found = job_runs.steps(logs.job_log_tail(job, max_bytes=4096).text)
    return found[-1] if found else 0


# --- the tail -------------------------------------------------------------------------------


def test_the_tail_grows_while_the_job_runs(world, simserver):
    job = job_runs.run(world, simserver)
    first = wait_until(lambda: _last_step(job), "a first step line")
    wait_until(lambda: _last_step(job) > first + 3, f"step lines after step {first}")
    tail = logs.job_log_tail(job, max_bytes=settings.GPUPOOL["LOG_TAIL_BYTES"])
    assert tail.missing == "" and tail.size >= len(tail.text.encode())
    # The tail is the simulator's log file as it was then (the file only grows).
    assert tail.text.encode() in job_runs.log_file(simserver, job).read_bytes()


def test_a_short_tail_is_the_end_from_a_whole_line(world, simserver):
    job = job_runs.run(world, simserver)
    wait_until(lambda: _last_step(job) > 20, "twenty step lines")
    tail = logs.job_log_tail(job, max_bytes=200)
    assert tail.truncated and tail.size > 200 and len(tail.text.encode()) <= 200
    assert tail.text and not tail.text.startswith(("tep", " ")) and job_runs.STEP.search(tail.text)


def test_the_running_job_page_polls_its_log_and_the_fragment_has_the_new_lines(world, simserver, page_client):
    job = job_runs.run(world, simserver)
    client = page_client("pa1_member")
    page = _page(client, job)
    assert f'hx-get="/jobs/{job.pk}/log/"' in page and 'data-refresh-every="2"' in page
    assert "No log store is connected" not in page
    seen = wait_until(lambda: _last_step(job), "a step line")
    fragment = wait_until(
        lambda: (lambda text: text if max(job_runs.steps(text), default=0) > seen else None)(
            client.get(reverse("job-log", args=[job.pk])).content.decode()
        ),
        f"the fragment to show a step after {seen}",
    )
    assert 'id="job-log"' in fragment and "<html" not in fragment
    assert f'href="/jobs/{job.pk}/log/download/"' in fragment


def test_a_finished_job_shows_its_final_tail_and_stops_polling(world, simserver, page_client):
    job = job_runs.run(world, simserver, sim_seconds=300, until={"succeeded"})
    page = _page(page_client("pa1_member"), job)
    assert f'hx-get="/jobs/{job.pk}/log/"' not in page and "data-refresh-every" not in page
    assert "this is its final log" in page
    assert "step 30/30" in page  # 300 simulated seconds, a step per 10


def test_a_queued_job_says_not_started_and_polls_slowly(english, world, page_client):
    job = job_runs.submit(world)
    tail = logs.job_log_tail(job, max_bytes=1000)
    assert tail.text == "" and tail.missing.startswith("Not started yet")
    page = _page(page_client("pa1_member"), job)
    assert "Not started yet" in page and 'data-refresh-every="10"' in page
    assert "Download the whole log" not in page


# --- the whole log ----------------------------------------------------------------------------


def test_the_download_is_the_whole_log_streamed_in_pieces(world, fast_simserver, page_client):
    job = job_runs.run(world, fast_simserver, sim_seconds=40_000, until={"succeeded"})
    whole = job_runs.log_file(fast_simserver, job).read_bytes()
    assert len(whole) > 2 * LOG_CHUNK_BYTES  # several pieces
    response = page_client("a_finance").get(reverse("job-log-download", args=[job.pk]))
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="gp-{job.pk}.log"'
    pieces = list(response.streaming_content)
    assert len(pieces) >= 3 and all(0 < len(p) <= LOG_CHUNK_BYTES for p in pieces)
    assert b"".join(pieces) == whole
    tail = logs.job_log_tail(job, max_bytes=logs.MAX_TAIL_BYTES)
    assert tail.size == len(whole) and tail.text.encode() == whole[-len(tail.text.encode()) :]


def test_a_download_without_a_log_goes_back_to_the_job_page_saying_why(world, page_client):
    job = job_runs.submit(world)
    client = page_client("pa1_member")
    response = client.get(reverse("job-log-download", args=[job.pk]))
    assert response.status_code == 302 and response["Location"] == reverse("job-detail", args=[job.pk])
    assert "Not started yet" in client.get(response["Location"]).content.decode()


# --- why there is no log ---------------------------------------------------------------------


def test_an_external_jobs_log_stays_on_its_cluster(english, world, page_client):
    job = job_runs.submit(world)
    Job.objects.filter(pk=job.pk).update(
        kind="external", cluster=Cluster.objects.get(name="c1"), backend_id="4242", state="running"
    )
    job.refresh_from_db()
    assert "submitted to its cluster directly" in logs.job_log_tail(job, max_bytes=100).missing
    with pytest.raises(logs.LogUnavailable, match="submitted to its cluster directly"):
        logs.job_log_stream(job)
    page = _page(page_client("pa1_member"), job)
    assert "submitted to its cluster directly" in page
    assert f'hx-get="/jobs/{job.pk}/log/"' not in page  # nothing to poll for


def test_an_unreachable_cluster_is_a_reason_not_an_error(english, world, page_client):
    job = job_runs.submit(world)
    cluster = Cluster.objects.get(name="c1")
    cluster.config = {"url": f"http://127.0.0.1:{_free_port()}"}  # nobody listens there
    cluster.save()
    Job.objects.filter(pk=job.pk).update(cluster=cluster, backend_id=f"gp-{job.pk}")
    job.refresh_from_db()
    assert "Cluster c1 could not be read" in logs.job_log_tail(job, max_bytes=100).missing
    with pytest.raises(logs.LogUnavailable, match="could not be read"):
        logs.job_log_stream(job)
    client = page_client("pa1_member")
    assert "could not be read" in _page(client, job)
    assert client.get(reverse("job-log", args=[job.pk])).status_code == 200
    assert client.get(reverse("job-log-download", args=[job.pk])).status_code == 302


def test_the_backends_own_reason_is_shown(english, world, simserver, page_client):
    job = job_runs.submit(world)
    cluster = job_runs.cluster_on(simserver)
    Job.objects.filter(pk=job.pk).update(cluster=cluster)  # the simulator never saw gp-<id>
    job.refresh_from_db()
    assert logs.job_log_tail(job, max_bytes=100).missing == f"No log: the simulator has no job gp-{job.pk}"
    with pytest.raises(logs.LogUnavailable, match=f"the simulator has no job gp-{job.pk}"):
        logs.job_log_stream(job)


# --- who sees it -----------------------------------------------------------------------------


@pytest.mark.parametrize("persona", ["pb_member", "b_admin", "b_finance", "outsider"])
def test_another_tenants_log_and_port_are_404(world, simserver, page_client, persona):
    job = job_runs.run(world, simserver, kind="dev", expose_port=8888)
    client = page_client(persona)
    for name in ("job-detail", "job-log", "job-log-download", "job-open"):
        assert client.get(reverse(name, args=[job.pk])).status_code == 404, name
    # The ingress check: 403, never 404 (ingress-nginx would make a 404 a 500).
    assert client.get(reverse("job-access-auth", args=[job.pk])).status_code == 403


def test_whoever_sees_the_job_reads_its_log(world, simserver, page_client):
    job = job_runs.run(world, simserver)
    wait_until(lambda: _last_step(job), "a step line")
    for persona in ("pa1_member", "pa1_admin", "a_admin", "a_finance", "auditor", "platform"):
        assert job_runs.STEP.search(
            page_client(persona).get(reverse("job-log", args=[job.pk])).content.decode()
        )


def test_anonymous_visitors_are_sent_to_sign_in_and_the_ingress_check_says_401(world, simserver, page_client):
    job = job_runs.run(world, simserver, kind="dev", expose_port=8888)
    anonymous = page_client(None)
    for name in ("job-log", "job-log-download", "job-open"):
        response = anonymous.get(reverse(name, args=[job.pk]))
        assert response.status_code == 302 and response["Location"].startswith(reverse("login")), name
    assert anonymous.get(reverse("job-access-auth", args=[job.pk])).status_code == 401


# --- a dev job's port -------------------------------------------------------------------------


def test_a_running_dev_job_opens_the_simulators_page_through_the_portal(world, simserver, page_client):
    job = job_runs.run(world, simserver, kind="dev", expose_port=8888)
    client = page_client("pa1_member")
    page = _page(client, job)
    assert f'href="/jobs/{job.pk}/open/"' in page and "exposes port 8888" in page
    response = client.get(reverse("job-open", args=[job.pk]))
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    body = response.content.decode()
    assert f"gpupool dev job gp-{job.pk}" in body and "Simulated dev server on port 8888" in body
    assert response["Content-Security-Policy"].startswith("sandbox")
    assert client.post(reverse("job-open", args=[job.pk])).status_code == 405  # GET only
    # The ingress check lets the job's owner through, and only while it runs: seeing a job
    # (an auditor, the project's admin) is not a way into its owner's notebook.
    assert client.get(reverse("job-access-auth", args=[job.pk])).status_code == 200
    for viewer in ("auditor", "pa1_admin", "platform"):
        assert page_client(viewer).get(reverse("job-access-auth", args=[job.pk])).status_code == 403
        assert "/open/" not in _page(page_client(viewer), job)


def test_the_port_closes_with_the_job(world, simserver, page_client):
    job = job_runs.run(world, simserver, kind="dev", expose_port=8888)
    client = page_client("pa1_member")
    assert client.post(reverse("job-cancel", args=[job.pk])).status_code == 302
    assert dispatch.stop_job(job.pk) == "stopping"  # what the Celery task runs after commit
    settle(job.cluster_id, job, {"cancelled"})
    assert logs.job_access(job, world.users["pa1_member"]) is None
    response = client.get(reverse("job-open", args=[job.pk]), follow=True)
    assert "This job exposes nothing now" in response.content.decode()
    assert client.get(reverse("job-access-auth", args=[job.pk])).status_code == 403


def test_a_training_job_exposes_nothing(world, simserver, page_client):
    job = job_runs.run(world, simserver)
    client = page_client("pa1_member")
    assert logs.job_access(job, world.users["pa1_member"]) is None
    assert client.get(reverse("job-access-auth", args=[job.pk])).status_code == 403
    assert client.get(reverse("job-open", args=[job.pk])).status_code == 302
    assert "/open/" not in _page(client, job)


# --- the environment --------------------------------------------------------------------------


def test_the_environment_panel_shows_mounts_variables_and_secrets_by_name_only(world, page_client):
    ProjectStorage.objects.create(
        project=world.pa1,
        name="datasets",
        kind="hostpath",
        host_path="/srv/ds",
        mount_path="/data",
        read_only=True,
    )
    ProjectStorage.objects.create(
        project=world.pa1,
        name="work",
        kind="hostpath",
        host_path="/srv/work",
        mount_path="/work",
        checkpoints=True,
    )
    Project.objects.filter(pk=world.pa1.pk).update(image_pull_secret="regcred-pa1")
    world.pa1.refresh_from_db()
    ProjectSecret.objects.create(project=world.pa1, name="hf-token")
    job = job_runs.submit(
        world,
        mounts=["datasets"],
        env=[
            {"name": "MODE", "value": "fast"},
            {"name": "HF_TOKEN", "secret": "hf-token", "key": "token"},
        ],
    )
    page = _page(page_client("pa1_member"), job)
    environment = page.split('<section class="environment">', 1)[1].split("</section>", 1)[0]
    assert "<code>datasets</code> → <code>/data</code>" in environment and "read-only" in environment
    assert "<code>MODE</code> = <code>fast</code>" in environment
    assert "from secret hf-token/token" in environment
    assert f"/work/.gpupool/checkpoints/{job.pk}" in environment
    assert "regcred-pa1" in environment


# --- Kubernetes: an ingress URL, or the port-forward command (the stand-in API server) -----------

k8s_api = k8s_standin.k8s_api  # the fixture, under this module's name


def _running_on_kubernetes(world, k8s_api, **config):
    cluster = Cluster.objects.create(
        name="k1", kind="kubernetes", config={"host": k8s_api.url, "token": "tok", **config}
    )
    job = job_runs.submit(world, kind="dev", expose_port=8888, name="k8s-notebook")
    Job.objects.filter(pk=job.pk).update(state="running", cluster=cluster, backend_id=f"gp-{job.pk}")
    job.refresh_from_db()
    return job


def test_a_kubernetes_ingress_url_is_a_redirect_behind_the_ingress_check(
    english, world, k8s_api, page_client, api
):
    job = _running_on_kubernetes(
        world, k8s_api, ingress_domain="dev.centre.example", portal_url="https://gpupool.centre.example"
    )
    url = f"https://gp-{job.pk}.dev.centre.example/"
    client = page_client("pa1_member")
    page = _page(client, job)
    assert f'href="/jobs/{job.pk}/open/"' in page and f"<code>{url}</code>" in page
    response = client.get(reverse("job-open", args=[job.pk]))
    assert response.status_code == 302 and response["Location"] == url
    assert api(world.users["pa1_member"]).get(reverse("api:job-access", args=[job.pk])).json()["url"] == url
    assert client.get(reverse("job-access-auth", args=[job.pk])).status_code == 200
    assert page_client("pb_member").get(reverse("job-access-auth", args=[job.pk])).status_code == 403
    # Its log is the pod's, which the stand-in does not have: a reason, not an error.
    assert logs.job_log_tail(job, max_bytes=100).missing


def test_without_an_ingress_the_page_shows_the_port_forward_command_to_copy(world, k8s_api, page_client):
    job = _running_on_kubernetes(world, k8s_api)
    client = page_client("pa1_member")
    page = _page(client, job)
    command = f"kubectl -n gpupool-jobs port-forward pod/gp-{job.pk} 8888"
    assert f'<pre class="tunnel" id="tunnel-command">{command}</pre>' in page
    assert 'data-copy="tunnel-command"' in page and f'href="/jobs/{job.pk}/open/"' not in page
    response = client.get(reverse("job-open", args=[job.pk]), follow=True)
    assert response.redirect_chain == [(reverse("job-detail", args=[job.pk]), 302)]
    assert "Needs kubectl access to namespace gpupool" in response.content.decode()


def test_a_cluster_configuration_the_backend_refuses_is_a_reason_not_a_500(
    english, world, k8s_api, page_client
):
    job = _running_on_kubernetes(world, k8s_api, ingress_domain="dev.centre.example")  # no portal_url
    assert "configuration is not usable" in logs.job_log_tail(job, max_bytes=100).missing
    access = logs.job_access(job, world.users["pa1_member"])
    assert access.url == "" and "configuration is not usable" in access.note
    page = _page(page_client("pa1_member"), job)
    assert "configuration is not usable" in page


def test_the_log_panel_speaks_the_readers_language(world, page_client):
    job = job_runs.submit(world)
    page = _page(page_client("pa1_member", "zh-hans"), job)
    assert "<h2>日志</h2>" in page and "尚未启动：任务提交到集群后才有日志。" in page
    assert "<h2>运行环境</h2>" in page


# --- Slurm: the tunnel through the login node, as the viewer's Unix user --------------------------


def test_a_slurm_dev_job_shows_its_owner_the_tunnel_to_its_first_node_as_their_unix_user(
    english, world, page_client
):
    cluster = Cluster.objects.create(
        name="s1",
        kind="slurm",
        config={"slurm_conf": "/nonexistent/slurm.conf", "login_host": "login.example"},
    )
    node = Node.objects.create(
        cluster=cluster, name="gpu07", flavor=world.F, gpu_count=8, zone="z", spine="s"
    )
    job = job_runs.submit(world, kind="dev", expose_port=8888, name="slurm-notebook")
    Job.objects.filter(pk=job.pk).update(
        state="running", cluster=cluster, backend_id="4242", placement=[[[node.pk, 0, 1000]]]
    )
    job.refresh_from_db()
    owner = world.users["pa1_member"]
    User.objects.filter(pk=owner.pk).update(unix_username="pmem")
    owner.refresh_from_db()
    access = logs.job_access(job, owner)
    assert access.command == "ssh -N -L 8888:gpu07:8888 pmem@login.example" and access.url == ""
    page = _page(page_client("pa1_member"), job)
    assert "ssh -N -L 8888:gpu07:8888 pmem@login.example" in page and "/open/" not in page
    # Another viewer of the job sees its log, not a tunnel into it.
    assert logs.job_access(job, world.users["a_admin"]) is None
    client = page_client("a_admin")
    assert "ssh -N" not in _page(client, job)
    assert logs.job_log_tail(job, max_bytes=100).missing  # no slurm.conf here: a reason, not a 500
