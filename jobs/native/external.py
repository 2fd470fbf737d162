"""Jobs the portal did not submit (DESIGN §11): recorded, counted, metered and billed like any job.

An importer (Slurm: ``jobs.native.native_slurm``; Kubernetes: ``jobs.native.native_k8s``) reads what the
backend runs and hands ``ExternalRecord`` objects to :func:`record_external`. Each backend job
becomes one ``Job`` of kind ``external`` — at most one, by the unique (cluster, backend id) — in
the project its source (Slurm account, Kubernetes namespace) is mapped to:

* its events carry the backend's instants (submit, start, end; ``time_source`` the backend's),
  so the meter bills exactly the backend's allocation, as for a portal job;
* while it runs it holds its GPUs in the engine's snapshot (``placement``) and counts in its
  project's usage; the engine splits it in-quota/on-loan (rule 1) every cycle but never chooses
  it as a victim (``RunningJob.pinned``); while it waits it is listed, never admitted;
* a source mapped to no project keeps its jobs as observations (``ExternalObservation``) until
  an admin maps it (:func:`map_source`), which records them all — their metering back-fills,
  because the meter follows the order in which facts are recorded.

New jobs are written with set-based SQL (an import of a month of ``sacct``, 100,000 jobs, is a
few statements per thousand jobs); a job already recorded moves through ``job_transition`` like
any other, so its events and state changes stay conditional.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from jobs.clusters.backends.base import CANCELLED, FAILED, RUNNING, SUCCEEDED
from jobs.models import Job, JobArray, JobKind, PriorityClass
from jobs.native.backends.external import ENDED, UNKNOWN_DEVICE, ExternalRecord, job_name
from jobs.native.models import ExternalObservation, ExternalSource
from jobs.states import HOLDING, JobState
from jobs.transitions import MAX_CLOCK_SKEW, job_transition, request_cycle
from portal.models import Project, User
from quotas.models import Cluster, Flavor, Node

log = logging.getLogger(__name__)

PLACEHOLDER_USER = "gpupool-external"
BATCH = 5000
END_STATES = {SUCCEEDED: JobState.SUCCEEDED, FAILED: JobState.FAILED, CANCELLED: JobState.CANCELLED}


@dataclass
class Outcome:
    """What one import did, by kind of change (``counts``) and the sources it saw unmapped."""

    counts: Counter = field(default_factory=Counter)
    unmapped: set[str] = field(default_factory=set)

    def as_dict(self) -> dict:
        return {**self.counts, "unmapped_sources": sorted(self.unmapped)}


def record_external(
    cluster: Cluster, source_kind: str, records: Iterable[ExternalRecord], *, time_source: str,
    now: datetime | None = None,
) -> Outcome:
    """Record what the backend reported. Idempotent: a record already true changes nothing."""
    now = now or timezone.now()
    out = Outcome()
    by_source: dict[str, list[ExternalRecord]] = defaultdict(list)
    for record in records:
        problem = record.problem() or _future(record, now)
        if problem:
            out.counts["refused"] += 1
            log.warning("external job %s of %s refused: %s", record.backend_id, cluster, problem)
            continue
        by_source[record.source].append(record)
    sources = _sources(cluster, source_kind, sorted(by_source), now)
    ctx = _Context.load(cluster, time_source)
    for name, recs in by_source.items():
        source = sources[name]
        if source.project_id is None:
            out.unmapped.add(name)
            out.counts["observed"] += _observe(source, recs)
        else:
            _record(ctx, source.project_id, recs, out)
    if out.counts["created"] or out.counts["changed"]:
        request_cycle()
    return out


def _future(record: ExternalRecord, now: datetime) -> str | None:
    latest = max(t for t in (record.submitted_at, record.started_at, record.finished_at) if t is not None)
    return "a time in the future" if latest > now + MAX_CLOCK_SKEW else None


def _sources(cluster: Cluster, kind: str, names: list[str], now: datetime) -> dict[str, ExternalSource]:
    existing = {s.name: s for s in ExternalSource.objects.filter(cluster=cluster, kind=kind, name__in=names)}
    missing = [ExternalSource(cluster=cluster, kind=kind, name=n) for n in names if n not in existing]
    ExternalSource.objects.bulk_create(missing, ignore_conflicts=True)
    ExternalSource.objects.filter(cluster=cluster, kind=kind, name__in=names).update(last_seen_at=now)
    return {s.name: s for s in ExternalSource.objects.filter(cluster=cluster, kind=kind, name__in=names)}


def _observe(source: ExternalSource, records: list[ExternalRecord]) -> int:
    """Keep an unmapped source's jobs as observations (the latest record of each)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO jobs_externalobservation (source_id, backend_id, record, observed_at)
            SELECT %s, b, r::jsonb, now() FROM unnest(%s::text[], %s::text[]) AS v(b, r)
            ON CONFLICT (source_id, backend_id) DO UPDATE SET record = EXCLUDED.record,
                observed_at = EXCLUDED.observed_at
            WHERE jobs_externalobservation.record IS DISTINCT FROM EXCLUDED.record
            """,
            [source.pk, [r.backend_id for r in records], [json.dumps(r.to_json()) for r in records]],
        )
        return cursor.rowcount


@dataclass
class _Context:
    """What turning records into jobs needs, read once per import."""

    cluster: Cluster
    time_source: str
    flavors: dict[str, Flavor]
    nodes: dict[str, int]
    users: dict[str, int]
    placeholder: int
    classes: dict[str, int]
    default_class: int
    held: dict[int, set[int]] | None = None  # node id → device indices held (read on first need)
    gpus: dict[int, int] = field(default_factory=dict)  # node id → its device count

    @classmethod
    def load(cls, cluster: Cluster, time_source: str) -> _Context:
        flavors = flavor_index(cluster, Flavor.objects.all())
        classes = dict(PriorityClass.objects.values_list("name", "id"))
        lowest = PriorityClass.objects.order_by("value", "id").values_list("id", flat=True).first()
        if lowest is None:
            raise ValueError("no priority class: external jobs need one to be ranked by")
        return cls(
            cluster=cluster, time_source=time_source, flavors=flavors,
            nodes=dict(Node.objects.filter(cluster=cluster).values_list("name", "id")),
            users={}, placeholder=_placeholder_user().pk, classes=classes, default_class=lowest,
        )

    def user_ids(self, names: Iterable[str]) -> None:
        wanted = set(names) - set(self.users)
        # A backend names the Unix user: the directory's Unix name first (DESIGN §12), else the username.
        by_username = User.objects.filter(username__in=wanted, unix_username="")
        self.users.update(by_username.values_list("username", "id"))
        self.users.update(User.objects.filter(unix_username__in=wanted).values_list("unix_username", "id"))
        for name in wanted - set(self.users):
            self.users[name] = self.placeholder

    def priority_class(self, hint: str) -> int:
        """The class a backend priority names: the same name, or the name after a prefix
        (QOS ``gp_training`` → ``training``); the lowest class otherwise."""
        if hint in self.classes:
            return self.classes[hint]
        for sep in ("_", "-"):
            tail = hint.split(sep, 1)[-1]
            if tail in self.classes:
                return self.classes[tail]
        return self.default_class

    def placement(self, record: ExternalRecord) -> list:
        """One worker holding every device it was given, on the nodes the portal knows. A slot
        whose device the backend does not name (a pod's extended resource) takes the lowest
        index of its node that no running job — nor a job placed earlier in this import — holds;
        with none free the slot is left out (the job still counts in its project's usage)."""
        slots = []
        for name, index in record.slots:
            node = self.nodes.get(name)
            if node is None:
                continue
            taken = self._held(node)
            if index == UNKNOWN_DEVICE:
                free = [i for i in range(self.gpus.get(node, 0)) if i not in taken]
                if not free:
                    log.warning("external job %s: no free device left on %s", record.backend_id, name)
                    continue
                index = free[0]
            taken.add(index)
            slots.append([node, index, record.gpu_milli or 1000])
        return [slots] if slots else []

    def _held(self, node: int) -> set[int]:
        if self.held is None:
            self.held = defaultdict(set)
            with connection.cursor() as cursor:
                cursor.execute(_HELD_DEVICES, [[s.value for s in HOLDING], list(self.nodes.values())])
                for node_id, index in cursor.fetchall():
                    self.held[node_id].add(index)
            self.gpus = dict(Node.objects.filter(pk__in=self.nodes.values()).values_list("pk", "gpu_count"))
        return self.held[node]


# Device indices of the given nodes that admitted and running jobs hold (placement: workers, each
# a list of [node id, device index, milli]).
_HELD_DEVICES = """
SELECT (slot->>0)::bigint, (slot->>1)::int
FROM jobs_job j, jsonb_array_elements(j.placement) AS w(worker), jsonb_array_elements(w.worker) AS s(slot)
WHERE j.state = ANY(%s) AND jsonb_typeof(j.placement) = 'array' AND (slot->>0)::bigint = ANY(%s)
"""


def flavor_index(cluster: Cluster, flavors: Iterable[Flavor]) -> dict[str, Flavor]:
    """What a backend's resource name (Slurm GRES, Kubernetes resource) means on ``cluster``: the
    cluster's ``gres_map`` first, then each flavor's name, Slurm GRES or Kubernetes name."""
    index: dict[str, Flavor] = {}
    gres_map = (cluster.config or {}).get("gres_map") or {}
    for flavor in flavors:
        for key in (flavor.name, flavor.slurm_gres, flavor.k8s_resource_name):
            if key:
                index.setdefault(key, flavor)
        mapped = gres_map.get(flavor.slurm_gres) or gres_map.get(flavor.name)
        if mapped:
            index[mapped] = flavor
    return index


def _placeholder_user() -> User:
    user, created = User.objects.get_or_create(
        username=PLACEHOLDER_USER, defaults={"is_active": False, "display_name": "external (unknown user)"}
    )
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


def _record(ctx: _Context, project_id: int, records: list[ExternalRecord], out: Outcome) -> None:
    known = {
        j.backend_id: j
        for j in Job.objects.filter(
            cluster=ctx.cluster, kind=JobKind.EXTERNAL, backend_id__in=[r.backend_id for r in records]
        )
    }
    fresh = [r for r in records if r.backend_id not in known]
    ctx.user_ids(r.user for r in fresh)
    for start in range(0, len(fresh), BATCH):
        out.counts["created"] += _insert(ctx, project_id, fresh[start:start + BATCH], out)
    for record in records:
        job = known.get(record.backend_id)
        if job is None:
            continue
        # One transaction per job: admitted and running commit together, so no dispatcher or
        # cycle ever sees an external job admitted but not yet started.
        with transaction.atomic():
            if _advance(ctx, job, record):
                out.counts["changed"] += 1
    _link_arrays(ctx, project_id, [r for r in records if r.array_id])


def _link_arrays(ctx: _Context, project_id: int, records: list[ExternalRecord]) -> None:
    """Native array tasks (Slurm ``123_4``) become tasks of one array per array job (DESIGN §17),
    with their index; the record of the array's unstarted tasks joins it without one until it
    starts as a task of its own. Idempotent: a task already linked is left alone."""
    by_array: dict[str, list[ExternalRecord]] = defaultdict(list)
    for record in records:
        by_array[record.array_id].append(record)
    for array_id, recs in by_array.items():
        first = min(recs, key=lambda r: r.submitted_at)
        ctx.user_ids([first.user])
        array, _created = JobArray.objects.get_or_create(
            cluster=ctx.cluster, backend_id=array_id,
            defaults={"name": job_name(first.name.rsplit(" ", 1)[0], f"slurm-array-{array_id}"),
                      "project_id": project_id, "submitted_by_id": ctx.users[first.user], "spec": "",
                      "size": 0, "submitted_at": first.submitted_at},
        )
        for r in recs:
            Job.objects.filter(cluster=ctx.cluster, kind=JobKind.EXTERNAL, backend_id=r.backend_id).exclude(
                array=array, array_index=r.array_index).update(array=array, array_index=r.array_index)
        size = array.tasks.exclude(array_index=None).count()
        JobArray.objects.filter(pk=array.pk).exclude(size=size).update(size=size)


def _flavor(ctx: _Context, record: ExternalRecord, out: Outcome) -> Flavor | None:
    flavor = ctx.flavors.get(record.resource)
    if flavor is None:
        out.counts["unknown_resource"] += 1
    return flavor


def _insert(ctx: _Context, project_id: int, records: list[ExternalRecord], out: Outcome) -> int:
    """Insert new external jobs and their events (set-based; a job another import inserted
    first is skipped, ON CONFLICT)."""
    rows = []
    for r in records:
        flavor = _flavor(ctx, r, out)
        if flavor is None:
            continue
        state = _state_of(r)
        placement = ctx.placement(r) if state == JobState.RUNNING else []
        rows.append((r, flavor, state, placement))
    if not rows:
        return 0
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_INSERT_JOBS, [
            # Columns a raw insert must name (Django's defaults are not the database's).
            now, ctx.cluster.pk, Job._meta.get_field("autoscale_cooldown_seconds").default,
            [job_name(r.name, f"{ctx.cluster.kind}-{r.backend_id}") for r, *_ in rows],
            [project_id] * len(rows),
            [ctx.users[r.user] for r, *_ in rows],
            [f.pk for _, f, *_ in rows],
            [ctx.priority_class(r.priority) for r, *_ in rows],
            [r.devices for r, *_ in rows],
            [str(s) for _, _, s, _ in rows],
            [r.submitted_at for r, *_ in rows],
            [r.started_at for r, *_ in rows],
            [None if s in (JobState.RUNNING, JobState.QUEUED) else r.finished_at for r, _, s, _ in rows],
            [json.dumps(p) for *_, p in rows],
            [r.backend_id for r, *_ in rows],
            [r.exit_code for r, *_ in rows],
            [r.reason[:500] for r, *_ in rows],
            [r.user[:100] for r, *_ in rows],
            [r.gpu_milli for r, *_ in rows],
            [r.cpu_millicores for r, *_ in rows],
            [r.memory_mib for r, *_ in rows],
        ])
        inserted = {backend_id: job_id for job_id, backend_id in cursor.fetchall()}
        events = [e for r, _, s, p in rows if r.backend_id in inserted
                  for e in _events(inserted[r.backend_id], r, s, p, ctx.time_source)]
        cursor.execute(_INSERT_EVENTS, [list(col) for col in zip(*events, strict=True)])
    return len(inserted)


# The states a job can be recorded in, and from them its events (from, to, at, reason, data).
def _state_of(record: ExternalRecord) -> JobState:
    if record.phase == RUNNING:
        return JobState.RUNNING
    if record.phase in ENDED:
        # Ended without ever starting (cancelled while pending): queued → cancelled.
        return END_STATES[record.phase] if record.started_at is not None else JobState.CANCELLED
    return JobState.QUEUED


def _events(job_id: int, r: ExternalRecord, state: JobState, placement: list, source: str) -> list[tuple]:
    out = [(job_id, "", "queued", r.submitted_at, f"submitted to {source} directly", {})]
    if r.started_at is not None:
        admitted = {"workers": 1, "placement": placement, "external": True}
        out.append((job_id, "queued", "admitted", r.started_at, "started outside the portal", admitted))
        out.append((job_id, "admitted", "running", r.started_at, "started", {}))
        if state != JobState.RUNNING:
            ended = {"exit_code": r.exit_code}
            out.append((job_id, "running", str(state), r.finished_at, _end_reason(r), ended))
    elif state != JobState.QUEUED:
        out.append((job_id, "queued", str(state), r.finished_at or r.submitted_at, _end_reason(r), {}))
    return [(j, f, t, at, reason, json.dumps(data), source) for j, f, t, at, reason, data in out]


def _end_reason(r: ExternalRecord) -> str:
    return {SUCCEEDED: "completed", FAILED: "failed", CANCELLED: "cancelled"}.get(r.phase, r.phase) + (
        f": {r.reason}" if r.reason else "")


_INSERT_JOBS = """
INSERT INTO jobs_job (name, project_id, submitted_by_id, kind, flavor_id, priority_class_id, workers,
    gpus_per_worker, image, command, checkpointing, approved, state, state_changed_at, submitted_at,
    admitted_at, started_at, finished_at, granted_workers, placement, requeue_count, cluster_id,
    backend_id, exit_code, message, grown_at, external_user, mounts, env, flavor_choices, framework,
    gpu_milli, autoscale_query, autoscale_cooldown_seconds, autoscale_status, unit_share,
    min_cuda_version, cpu_millicores, memory_mib)
SELECT v.name, v.project, v.usr, 'external', v.flavor, v.pc, 1, v.devices, '', '', false, true, v.state,
       %s, v.submitted, v.started, v.started, v.finished, CASE WHEN v.started IS NULL THEN NULL ELSE 1 END,
       v.placement::jsonb, 0, %s, v.backend_id, v.exit_code, v.message, '[]'::jsonb, v.ext_user,
       '[]'::jsonb, '[]'::jsonb, '{}'::int[], '', v.milli, '', %s, '{}'::jsonb, '{}'::jsonb, '',
       v.cpu, v.mem
FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::int[], %s::text[],
            %s::timestamptz[], %s::timestamptz[], %s::timestamptz[], %s::text[], %s::text[], %s::int[],
            %s::text[], %s::text[], %s::int[], %s::int[], %s::bigint[])
     AS v(name, project, usr, flavor, pc, devices, state, submitted, started, finished, placement,
          backend_id, exit_code, message, ext_user, milli, cpu, mem)
ON CONFLICT (cluster_id, backend_id) WHERE kind = 'external' DO NOTHING
RETURNING id, backend_id
"""


_INSERT_EVENTS = """
INSERT INTO jobs_jobevent (job_id, kind, from_state, to_state, occurred_at, reason, data, time_source)
SELECT j, 'transition', f, t, at, reason, d::jsonb, src
FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::timestamptz[], %s::text[], %s::text[], %s::text[])
     AS v(j, f, t, at, reason, d, src)
"""


def _advance(ctx: _Context, job: Job, record: ExternalRecord) -> bool:
    """Move a recorded job to what the backend now says (conditional transitions, backend times)."""
    clock = {"time_source": ctx.time_source}
    changed = False
    if job.state == JobState.QUEUED:
        if record.started_at is not None:
            placement = ctx.placement(record)
            _held_machine(job, record)
            admitted = job_transition(
                job, JobState.ADMITTED, reason="started outside the portal",
                data={"workers": 1, "placement": placement, "external": True},
                occurred_at=record.started_at, placement=placement, granted_workers=1, **clock,
            )
            changed = admitted and job_transition(
                job, JobState.RUNNING, reason="started", occurred_at=record.started_at, **clock)
        elif record.phase in ENDED:
            return job_transition(job, JobState.CANCELLED, reason=_end_reason(record),
                                  occurred_at=record.finished_at or timezone.now(), **clock)
        elif record.reason and record.reason[:500] != job.message:
            Job.objects.filter(pk=job.pk, state=JobState.QUEUED).update(message=record.reason[:500])
            return False
    if job.state == JobState.RUNNING and record.phase in ENDED:
        state = END_STATES[record.phase]
        changed = job_transition(
            job, state, reason=_end_reason(record), occurred_at=record.finished_at,
            data={"exit_code": record.exit_code}, exit_code=record.exit_code, placement=[], **clock,
        ) or changed
    return changed


def _held_machine(job: Job, record: ExternalRecord) -> None:
    """A job that started holds what the backend allocated, which may differ from what it asked
    while it waited (Slurm's defaults, a whole node): recorded as it starts."""
    held = {k: v for k, v in (("cpu_millicores", record.cpu_millicores), ("memory_mib", record.memory_mib))
            if v is not None and getattr(job, k) != v}
    if held:
        Job.objects.filter(pk=job.pk).update(**held)
        for key, value in held.items():
            setattr(job, key, value)


def open_backend_ids(cluster: Cluster) -> list[str]:
    """Backend ids of the cluster's external jobs still queued or running: an importer asks the
    backend's history (``sacct``) for those it no longer sees live."""
    return list(Job.objects.filter(
        cluster=cluster, kind=JobKind.EXTERNAL, state__in=[JobState.QUEUED, JobState.RUNNING]
    ).values_list("backend_id", flat=True))


def end_missing(cluster: Cluster, backend_ids: Iterable[str], *, reason: str) -> int:
    """End what the backend no longer shows and never reported an end for (a pod deleted
    before its containers reported one, or while nobody watched): cancelled at this
    observation, the portal's clock — the only instant known. Jobs and, for unmapped sources,
    their observations. Returns how many jobs ended."""
    ids = list(backend_ids)
    ended = 0
    open_states = [JobState.QUEUED, JobState.RUNNING]
    jobs = Job.objects.filter(cluster=cluster, kind=JobKind.EXTERNAL, backend_id__in=ids)
    now = timezone.now()
    for job in jobs.filter(state__in=open_states):
        with transaction.atomic():
            ended += job_transition(job, JobState.CANCELLED, reason=reason, placement=[], finished_at=now)
    observed = ExternalObservation.objects.filter(source__cluster=cluster, backend_id__in=ids)
    for obs in observed:
        record = ExternalRecord.from_json(obs.record)
        if record.phase in ENDED:
            continue
        obs.record = {**record.to_json(), "phase": CANCELLED, "finished_at": now.isoformat(), "slots": [],
                      "reason": reason}
        obs.save(update_fields=["record", "observed_at"])
    if ended:
        request_cycle()
    return ended


@transaction.atomic
def map_source(*, source: ExternalSource, project: Project, actor: User | None) -> Outcome:
    """Assign an unmapped source to a project and record every job it was seen running: the
    history is metered by the meter's next run (facts recorded late are picked up). ``actor``
    None: mapped by the source's own label (a namespace's ``gpupool.io/project``)."""
    locked = ExternalSource.objects.select_for_update().get(pk=source.pk)
    if locked.project_id is not None:
        raise ValueError("already mapped")
    locked.project, locked.mapped_at, locked.mapped_by = project, timezone.now(), actor
    locked.save(update_fields=["project", "mapped_at", "mapped_by"])
    records = [ExternalRecord.from_json(o.record) for o in locked.observations.all()]
    time_source = "slurm" if locked.kind == "slurm_account" else "kubernetes"
    out = Outcome()
    ctx = _Context.load(locked.cluster, time_source)
    _record(ctx, project.pk, records, out)
    locked.observations.all().delete()
    if out.counts["created"]:
        request_cycle()
    return out


