"""Arrays and dependencies (DESIGN §17): their rules and the writes of dependencies; the
cancellations (cancel all, a dependency that can no longer be met) are ``jobs.services``'.

* An **array** is one submission of N tasks; each task is a job with its index (``Job.array_index``,
  ``GPUPOOL_ARRAY_INDEX`` on every backend), billed as any job. At most ``max_running`` tasks hold
  GPUs at once: the scheduler's snapshot offers the engine only the lowest-indexed queued tasks
  that fit under the cap (``jobs.scheduling.snapshot.ELIGIBLE_SQL``), so the engine never sees the
  others. Cancelling the array cancels every task not yet finished.
* A **dependency** (``after_ok``, ``after_any``, ``after_not_ok``) is on a job the submitter can see;
  the dependent job is not offered to the engine before it is met, and it is cancelled (an event
  with the reason) once it can no longer be met (``jobs.services.cancel_unmet_dependents``, run
  before every scheduling cycle). A job's dependencies may be replaced while it waits: one that
  would close a cycle is refused, like one on a job the submitter cannot see — a 400 that changes
  nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils.translation import gettext as _

from jobs.models import DependencyCondition, Job, JobArray, JobDependency, JobKind
from jobs.scheduling.snapshot import ELIGIBLE_SQL, TERMINAL_SQL
from jobs.selectors import visible_jobs
from jobs.states import HOLDING, TERMINAL, JobState
from jobs.transitions import request_cycle
from portal import permissions as perm
from portal.models import User
from portal.selectors import scope_for

# At most this many tasks in one array (Slurm's default MaxArraySize is 1001) and this highest index.
ARRAY_MAX_TASKS = 1000
ARRAY_MAX_INDEX = 99_999
# At most this many dependencies per job.
MAX_DEPENDENCIES = 100
WAITING = (JobState.QUEUED.value, JobState.PENDING_APPROVAL.value)
DEPENDENCY_LOCK = 0x6770_7017  # "gp" + §17: the advisory lock of dependency changes, one at a time

_RANGE = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")


@dataclass(frozen=True)
class ArraySpec:
    """``0-99%10`` read: the task indices in order and the cap on tasks running at once."""

    text: str
    indices: tuple[int, ...]
    max_running: int | None


def parse_array(text: str) -> ArraySpec:
    """Slurm's ``--array`` grammar: comma-separated indices and ranges (``a-b``, ``a-b:step``),
    then optionally ``%K``. Refused, never clamped: an empty or reversed range (``5-2``), a
    duplicate index, ``%0``, more than ARRAY_MAX_TASKS tasks or an index over ARRAY_MAX_INDEX."""
    text = (text or "").strip()
    body, percent, cap_text = text.partition("%")
    error = _("An array such as 0-99%10: indices and ranges (a-b, a-b:step) separated by commas, "
              "then %K for at most K tasks running at once.")
    if not body:
        raise ValidationError({"array": [error]})
    indices: list[int] = []
    for item in body.split(","):
        match = _RANGE.fullmatch(item.strip())
        if not match:
            raise ValidationError({"array": [error]})
        lo, hi, step = int(match[1]), int(match[2] or match[1]), int(match[3] or 1)
        if hi < lo or step < 1:
            raise ValidationError({"array": [_("The range %(r)s is empty: its end is before its start, or "
                                               "its step is 0.") % {"r": item.strip()}]})
        if hi > ARRAY_MAX_INDEX:
            raise ValidationError({"array": [_("Indices go up to %(n)d.") % {"n": ARRAY_MAX_INDEX}]})
        indices.extend(range(lo, hi + 1, step))
        if len(indices) > ARRAY_MAX_TASKS:
            too_many = _("At most %(n)d tasks in one array.") % {"n": ARRAY_MAX_TASKS}
            raise ValidationError({"array": [too_many]})
    if len(set(indices)) != len(indices):
        raise ValidationError({"array": [_("An index appears twice.")]})
    max_running = None
    if percent:
        if not cap_text.isdigit() or int(cap_text) < 1:
            raise ValidationError({"array": [_("After %%: at least 1 task running at once.") % {}]})
        max_running = int(cap_text)
    return ArraySpec(text, tuple(sorted(indices)), max_running)


def array_create(*, actor: User, project, name: str, spec: ArraySpec, at) -> JobArray:
    return JobArray.objects.create(
        name=name, project=project, submitted_by=actor, spec=spec.text, size=len(spec.indices),
        max_running=spec.max_running, submitted_at=at,
    )


# --- dependencies ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dependency:
    condition: str
    job_id: int


def parse_dependencies(value) -> list[Dependency]:
    """``[{"condition": "after_ok", "job": 12}, …]`` (the API), or the text ``after_ok:12,after_any:13``
    (the form, the command line; Slurm's ``afterok:12:13`` too)."""
    if value in (None, "", []):
        return []
    pairs: list[tuple[object, object]] = []
    if isinstance(value, str):
        for item in value.split(","):
            condition, _sep, ids = item.strip().partition(":")
            condition = _SLURM_NAMES.get(condition.strip().lower(), condition.strip().lower())
            pairs.extend((condition, job) for job in (ids.split(":") if ids else [""]))
    elif isinstance(value, list):
        pairs = [(d.get("condition"), d.get("job")) if isinstance(d, dict) else (None, None) for d in value]
    else:
        raise ValidationError({"dependencies": [_DEPENDENCY_FORMAT()]})
    out = []
    for condition, job in pairs:
        if condition not in DependencyCondition.values:
            raise ValidationError({"dependencies": [_DEPENDENCY_FORMAT()]})
        job_id = _job_id(job)
        if job_id is None:
            raise ValidationError({"dependencies": [_DEPENDENCY_FORMAT()]})
        out.append(Dependency(str(condition), job_id))
    if len(out) > MAX_DEPENDENCIES:
        raise ValidationError({"dependencies": [_("At most %(n)d dependencies.") % {"n": MAX_DEPENDENCIES}]})
    if len({d.job_id for d in out}) != len(out):
        raise ValidationError({"dependencies": [_("A job is named twice.")]})
    return out


_SLURM_NAMES = {"afterok": "after_ok", "afterany": "after_any", "afternotok": "after_not_ok"}


def _DEPENDENCY_FORMAT() -> str:
    return _("Dependencies such as after_ok:12,after_any:13 (after_ok, after_any or after_not_ok, then a "
             "job number).")


MAX_JOB_ID = 2**63 - 1  # a bigint: a larger number names no job (and would not fit the query)


def _job_id(value) -> int | None:
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 19:
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 < value <= MAX_JOB_ID else None


def check_dependencies(
    actor: User, deps: list[Dependency], *, job: Job | None = None
) -> list[tuple[Job, str]]:
    """The jobs ``deps`` name, each one the submitter can see, none already impossible to meet,
    none the job itself or waiting (through others) for it. Every error at once."""
    if not deps:
        return []
    found = {j.pk: j for j in visible_jobs(actor).filter(pk__in=[d.job_id for d in deps])}
    errors = []
    for d in deps:
        parent = found.get(d.job_id)
        if parent is None or parent.kind == JobKind.EXTERNAL:
            # The same words whether it does not exist or is another tenant's: nothing leaks.
            errors.append(_("Job %(n)d does not exist or you cannot see it.") % {"n": d.job_id})
        elif job is not None and parent.pk == job.pk:
            errors.append(_("A job cannot depend on itself."))
        elif unmet_never(d.condition, parent.state):
            errors.append(_("Job %(n)d is already %(state)s: %(condition)s can never be met.")
                          % {"n": parent.pk, "state": parent.state, "condition": d.condition})
    if job is not None and not errors:
        cycle = _closes_cycle(job.pk, [d.job_id for d in deps])
        if cycle:
            path = " → ".join(f"#{n}" for n in cycle)
            errors.append(_("This would make a cycle: %(path)s.") % {"path": path})
    if errors:
        raise ValidationError({"dependencies": errors})
    return [(found[d.job_id], d.condition) for d in deps]


def unmet_never(condition: str, state: str) -> bool:
    """Whether a dependency on a job in ``state`` can no longer be met."""
    if condition == DependencyCondition.AFTER_OK:
        return state in TERMINAL and state != JobState.SUCCEEDED
    if condition == DependencyCondition.AFTER_NOT_OK:
        return state == JobState.SUCCEEDED
    return False


def met(condition: str, state: str) -> bool:
    if state not in TERMINAL:
        return False
    if condition == DependencyCondition.AFTER_OK:
        return state == JobState.SUCCEEDED
    if condition == DependencyCondition.AFTER_NOT_OK:
        return state != JobState.SUCCEEDED
    return True


def _closes_cycle(job_id: int, targets: list[int]) -> list[int] | None:
    """The path target → … → job when ``job`` already is (transitively) a dependency of one of
    ``targets``: depending on them would close a cycle. One recursive query."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH RECURSIVE reach(id, path) AS (
                SELECT t, ARRAY[t] FROM unnest(%s::bigint[]) AS t
                UNION
                SELECT d.depends_on_id, r.path || d.depends_on_id::bigint
                FROM jobs_jobdependency d JOIN reach r ON d.job_id = r.id
                WHERE NOT d.depends_on_id = ANY(r.path) AND cardinality(r.path) < 10000
            )
            SELECT path FROM reach WHERE id = %s LIMIT 1
            """,
            [targets, job_id],
        )
        row = cursor.fetchone()
    return [job_id, *row[0]] if row else None


def dependencies_create(job: Job, checked: list[tuple[Job, str]]) -> None:
    JobDependency.objects.bulk_create(
        [JobDependency(job=job, depends_on=parent, condition=condition) for parent, condition in checked]
    )


def dependencies_set(*, actor: User, job: Job, deps: list[Dependency]) -> Job:
    """Replace the dependencies of a job that still waits (queued or pending approval). The job's
    row is locked, so two calls cannot each add half of a cycle."""
    scope = scope_for(actor)
    perm.require(job.submitted_by_id == actor.pk or perm.can_edit_project(scope, job.project))
    with transaction.atomic():
        # One lock for every dependency change: two jobs made to depend on each other at the same
        # moment would otherwise each see no cycle.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [DEPENDENCY_LOCK])
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.state not in WAITING:
            raise ValidationError(_("Only a waiting job's dependencies can change; this one is %(state)s.")
                                  % {"state": job.state})
        checked = check_dependencies(actor, deps, job=job)
        JobDependency.objects.filter(job=job).delete()
        dependencies_create(job, checked)
    request_cycle()  # released now, perhaps
    return job


_UNMET_SQL = """
    SELECT DISTINCT ON (d.job_id) d.job_id, p.id, d.condition, p.state
    FROM jobs_jobdependency d
    JOIN jobs_job j ON j.id = d.job_id
    JOIN jobs_job p ON p.id = d.depends_on_id
    WHERE j.state = ANY(%s)
      AND ((d.condition = 'after_ok' AND p.state = ANY(%s) AND p.state <> 'succeeded')
           OR (d.condition = 'after_not_ok' AND p.state = 'succeeded'))
    ORDER BY d.job_id, p.id
"""


def unmet_never_rows() -> list[tuple[int, int, str, str]]:
    """(dependent job, job it depends on, condition, that job's state) of each waiting job with a
    dependency that can no longer be met (the first such dependency of each)."""
    with connection.cursor() as cursor:
        cursor.execute(_UNMET_SQL, [list(WAITING), sorted(s.value for s in TERMINAL)])
        return cursor.fetchall()


# --- why a job is held back before the engine sees it (explain) --------------------------------


def held_back(job: Job) -> dict | None:
    """Why a queued job is not offered to the engine, as an explain answer: an unmet dependency
    (``reason`` "dependency", the job it waits for) or its array's cap (``reason`` "array_cap");
    None when neither holds it."""
    for dep in job.dependencies.select_related("depends_on").order_by("depends_on_id"):
        if not met(dep.condition, dep.depends_on.state):
            return _dependency_answer(job.flavor.name, dep.depends_on_id, dep.condition)
    if job.array_id is None:
        return None
    array = job.array
    if array.max_running is None:
        return None
    tasks = Job.objects.filter(array_id=array.pk)
    running = tasks.filter(state__in=[s.value for s in HOLDING]).count()
    ahead = tasks.filter(state=JobState.QUEUED, array_index__lt=job.array_index).count()
    if running + ahead < array.max_running:
        return None
    return _cap_answer(job.flavor.name, array.max_running, running)


# Every held-back queued job at once, for the queue page (the cycle caches these beside the
# engine's answers): the first unmet dependency of each, then the capped tasks without one.
_HELD_BY_DEPENDENCY_SQL = f"""
    SELECT DISTINCT ON (d.job_id) d.job_id, d.depends_on_id, d.condition, f.name
    FROM jobs_jobdependency d
    JOIN jobs_job j ON j.id = d.job_id
    JOIN jobs_job p ON p.id = d.depends_on_id
    JOIN quotas_flavor f ON f.id = j.flavor_id
    WHERE j.state = 'queued' AND NOT CASE d.condition
        WHEN 'after_ok' THEN p.state = 'succeeded'
        WHEN 'after_not_ok' THEN p.state IN {TERMINAL_SQL} AND p.state <> 'succeeded'
        ELSE p.state IN {TERMINAL_SQL} END
    ORDER BY d.job_id, d.depends_on_id
"""  # noqa: S608 - constants only
_HELD_BY_CAP_SQL = f"""
    SELECT j.id, a.max_running, COALESCE(h.holding, 0), f.name
    FROM jobs_job j
    JOIN jobs_jobarray a ON a.id = j.array_id
    JOIN quotas_flavor f ON f.id = j.flavor_id
    LEFT JOIN (SELECT array_id, count(*) AS holding FROM jobs_job
               WHERE array_id IS NOT NULL AND state IN ('admitted', 'running') GROUP BY array_id) h
        ON h.array_id = j.array_id
    WHERE j.state = 'queued' AND a.max_running IS NOT NULL AND NOT ({ELIGIBLE_SQL})
"""  # noqa: S608 - constants only


def held_back_all() -> dict[int, dict]:
    """``held_back`` of every queued job the snapshot holds back, in two queries."""
    out: dict[int, dict] = {}
    with connection.cursor() as cursor:
        cursor.execute(_HELD_BY_DEPENDENCY_SQL)
        for job_id, parent, condition, flavor in cursor.fetchall():
            out[job_id] = _dependency_answer(flavor, parent, condition)
        cursor.execute(_HELD_BY_CAP_SQL)
        for job_id, cap, holding, flavor in cursor.fetchall():
            out.setdefault(job_id, _cap_answer(flavor, cap, holding))
    return out


def _dependency_answer(flavor: str, parent: int, condition: str) -> dict:
    return {"position": None, "reason": "dependency", "flavor": flavor, "numbers": {},
            "message": f"waits for job {parent} ({condition})",
            "dependency": {"job": parent, "condition": condition}}


def _cap_answer(flavor: str, cap: int, holding: int) -> dict:
    return {"position": None, "reason": "array_cap", "flavor": flavor,
            "numbers": {"cap": cap, "running_tasks": holding},
            "message": f"waits: array cap of {cap} running tasks"}


# --- the array ---------------------------------------------------------------------------------


def array_states(array: JobArray) -> dict[str, int]:
    """How many of its tasks are in each state."""
    counts: dict[str, int] = {}
    for state in array.tasks.values_list("state", flat=True):
        counts[state] = counts.get(state, 0) + 1
    return counts
