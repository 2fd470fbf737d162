"""Issue 31: the advisor's and the external jobs' models moved from the `jobs` app to `whatif` and
`native` without touching the database. A database at the head before the move (jobs 0022), with
rows in every moved table, reads the same rows through the new apps after migrating; the moving
migrations print no SQL; permissions' content types follow the models."""

from datetime import UTC, datetime

import pytest
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE_THE_MOVE = [("jobs", "0022_gpu_sample_hours")]
UNDO_THE_MOVE = [*BEFORE_THE_MOVE, ("whatif", None), ("native", None)]  # None: none of the app's
MOVED = {
    "whatif": ["advisorsearch", "advisorcandidate", "advisorhistorydata", "advisorevent"],
    "native": ["externalsource", "externalobservation", "externalcursor"],
}
SEEN_AT = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def _old_rows(apps) -> dict:
    """Rows written through the models as they were in the `jobs` app."""
    model = lambda name: apps.get_model("jobs", name)  # noqa: E731
    user = apps.get_model("portal", "User").objects.create(username="old-admin")
    department = apps.get_model("portal", "Department").objects.create(code="d-old", name="Old dept")
    project = apps.get_model("portal", "Project").objects.create(
        code="p-old", name="Old", department=department
    )
    cluster = apps.get_model("quotas", "Cluster").objects.create(name="c-old", kind="slurm")
    search = model("AdvisorSearch").objects.create(
        created_by=user, scenario={"kind": "trace", "trace": "alibaba"}, bounds={"grace_s": [10, 60]},
        seed=7, budget=20, projects=["p-old"], state="done", error="",
    )
    candidate = model("AdvisorCandidate").objects.create(
        search=search, number=0, params={"grace_s": 30}, inputs={"policy": {}}, state="done",
        result={"p95_wait_s": 12.5}, objective=1.0, feasible=True,
    )
    model("AdvisorHistoryData").objects.create(search=search, files={"trace.csv": "id,submit\n1,0\n"})
    model("AdvisorEvent").objects.create(
        search=search, candidate=candidate, from_state="running", to_state="done"
    )
    source = model("ExternalSource").objects.create(
        cluster=cluster, kind="slurm_account", name="acct-x", project=project, mapped_by=user,
        mapped_at=SEEN_AT,
    )
    model("ExternalObservation").objects.create(source=source, backend_id="4242", record={"gpus": 8})
    model("ExternalCursor").objects.create(cluster=cluster, kind="sacct", value="2026-11-30T08:00:00")
    return {"search": search.pk, "candidate": candidate.pk, "source": source.pk, "user": user.pk}


@pytest.mark.django_db(transaction=True)
def test_rows_written_before_the_move_read_the_same_through_the_new_apps():
    executor = MigrationExecutor(connection)
    executor.migrate(UNDO_THE_MOVE)
    old_apps = executor.loader.project_state(BEFORE_THE_MOVE).apps
    ids = _old_rows(old_apps)
    content_type = old_apps.get_model("contenttypes", "ContentType")
    before = {
        (label, name): content_type.objects.get_or_create(app_label="jobs", model=name)[0].pk
        for label, names in MOVED.items() for name in names
    }

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    from jobs.native.models import ExternalCursor, ExternalObservation, ExternalSource
    from jobs.whatif.models import AdvisorCandidate, AdvisorEvent, AdvisorHistoryData, AdvisorSearch

    search = AdvisorSearch.objects.get(pk=ids["search"])
    assert (search.created_by_id, search.seed, search.budget, search.state) == (ids["user"], 7, 20, "done")
    assert search.scenario == {"kind": "trace", "trace": "alibaba"} and search.projects == ["p-old"]
    candidate = search.candidates.get()
    assert (candidate.pk, candidate.objective) == (ids["candidate"], 1.0)
    assert candidate.result == {"p95_wait_s": 12.5}
    assert AdvisorHistoryData.objects.get(search=search).files == {"trace.csv": "id,submit\n1,0\n"}
    event = AdvisorEvent.objects.get(search=search)
    assert (event.candidate_id, event.from_state, event.to_state) == (candidate.pk, "running", "done")
    assert AdvisorCandidate.objects.count() == 1
    source = ExternalSource.objects.get(pk=ids["source"])
    assert (source.name, source.project.code, source.mapped_at) == ("acct-x", "p-old", SEEN_AT)
    assert ExternalObservation.objects.get(source=source).record == {"gpus": 8}
    assert ExternalCursor.objects.get(cluster=source.cluster).value == "2026-11-30T08:00:00"
    # Permissions and admin log entries point at content types: the same rows, relabelled.
    after = {(label, name): ContentType.objects.get(app_label=label, model=name).pk for label, name in before}
    assert after == before
    moved = [name for names in MOVED.values() for name in names]
    assert not ContentType.objects.filter(app_label="jobs", model__in=moved).exists()


@pytest.mark.parametrize(
    ("app", "migration"),
    [("jobs", "0023"), ("jobs", "0024"), ("whatif", "0001"), ("native", "0001")],
)
def test_the_moving_migrations_run_no_sql(app, migration, capsys, db):
    call_command("sqlmigrate", app, migration)
    statements = [
        line for line in capsys.readouterr().out.splitlines()
        if line.strip() and not line.startswith("--") and line.strip() not in ("BEGIN;", "COMMIT;")
    ]
    assert statements == []
