"""REST API of jobs: submit, list, detail, cancel, events, explain; and quota usage."""

from __future__ import annotations

from decimal import Decimal
from functools import cached_property

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import environment, flavor_choice, requests, selectors, services
from jobs.api_autoscale import AutoscaleSubmitIn, nested_autoscale_errors
from jobs.approvals import approval_request_of, with_approval_request
from jobs.models import (
    COMMAND_MAX_LENGTH,
    IMAGE_MAX_LENGTH,
    SUBMITTABLE_KINDS,
    Job,
    JobEvent,
    PriorityClass,
    image_validator,
    name_validator,
)
from jobs.quota_tree import quota_usage_with_lending
from jobs.retry_models import MAX_RETRIES_CEILING
from jobs.scheduling import explaining, start_estimates
from jobs.scheduling.cycle import explain_job
from portal.api import VisibleRelatedField
from portal.api_base import DetailApi, ListCreateApi
from portal.selectors import get_visible, visible_projects
from quotas.models import Flavor
from quotas.selectors import healthy_capacity

# Marks a row column whose output is read once per page (``JobOut.represent_rows``).
_PER_PAGE = object()


class StrictCharField(serializers.CharField):
    """A JSON string, nothing else: DRF's ``CharField`` turns ``5`` into ``"5"``, so an env value
    sent as a number was stored as text without a word (issue 32 item 22). A value passes
    verbatim into the job's environment; a number would come out as whatever text Python made
    of it (``1e3`` → ``"1000.0"``), so it is refused, not converted."""

    default_error_messages = {
        "not_a_string": gettext_lazy('A string: send a number in quotes, e.g. "5".'),
    }

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_a_string")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer, nothing else: DRF's ``IntegerField`` takes ``"16"`` and ``16.0`` too. A
    resource figure is refused when it is not a whole number as sent (``"16Gi"``, ``1.5``, ``true``),
    never converted or rounded (DESIGN §15)."""

    default_error_messages = {
        "not_an_integer": gettext_lazy("A whole number, e.g. 16384 (no quotes, no decimals)."),
    }

    def to_internal_value(self, data):
        if not isinstance(data, int) or isinstance(data, bool):
            self.fail("not_an_integer")
        return super().to_internal_value(data)


def _resource_field(help_text: str) -> StrictIntegerField:
    return StrictIntegerField(
        min_value=1, max_value=requests.ABSURD, required=False, allow_null=True, help_text=help_text
    )


class StartEstimateOut(serializers.Serializer):
    estimated_start = serializers.CharField(
        allow_null=True,
        help_text="When the job is estimated to start (ISO 8601), assuming running jobs run to their "
        "maximum runtime and nothing else arrives; null when unknown.",
    )
    unknown_reason = serializers.CharField(
        allow_null=True,
        help_text="Why there is no estimate: unlimited (it waits for jobs without a maximum runtime), "
        "beyond_horizon (not within 7 days), budget, approval, not_computed; on /explain/ also dependency "
        "and array_cap (held back until another job or a task of its array ends, DESIGN §17).",
    )
    unknown_text = serializers.CharField(help_text="The reason in the language of Accept-Language.")
    computed_at = serializers.CharField(allow_null=True)


class JobOut(serializers.ModelSerializer):
    flavor = serializers.SlugRelatedField(slug_field="name", read_only=True)
    priority = serializers.SlugRelatedField(source="priority_class", slug_field="name", read_only=True)
    submitted_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    approval_request = serializers.SerializerMethodField()
    cluster = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True, help_text="The cluster it runs (or ran) on."
    )
    backend_id = serializers.CharField(
        read_only=True, help_text="Its id on the cluster (Slurm job id, pod); empty before it is sent."
    )
    external_user = serializers.CharField(
        read_only=True,
        help_text="Kind external (submitted to the cluster directly, DESIGN §11): the user as the cluster "
        "names it (Slurm user; Kubernetes namespace/service account); empty for portal jobs. "
        "`submitted_by` is the portal user of that name, or the placeholder gpupool-external.",
    )

    idle_warned_at = serializers.DateTimeField(
        read_only=True, allow_null=True,
        help_text="When the idle policy warned that its GPUs were idle (DESIGN §16); null: no warning "
        "stands (never idle, busy again, or exempted).",
    )
    idle_preemptible_at = serializers.DateTimeField(
        read_only=True, allow_null=True,
        help_text="When the idle policy made it preemptible whatever its priority class; null: it did not.",
    )
    mounts = serializers.SerializerMethodField()
    checkpoint_dir = serializers.SerializerMethodField()
    flavors = serializers.SerializerMethodField()
    start_estimate = serializers.SerializerMethodField(
        help_text="When it is estimated to start, while it waits (queued or pending approval; null "
        "otherwise): the answer of /explain/'s start_estimate (issue 24)."
    )

    @extend_schema_field(StartEstimateOut(allow_null=True))
    def get_start_estimate(self, job) -> dict | None:
        """When it is estimated to start (issue 24), while it waits (queued or pending approval);
        null otherwise. The same answer as ``/explain/``'s ``start_estimate``."""
        found = start_estimates.start_estimate(job)
        return found.as_dict() if found else None

    def get_flavors(self, job) -> list[str]:
        """The flavors it accepts, in its order (DESIGN §14); empty: only `flavor`."""
        return self._flavor_names(job.flavor_choices)

    def _flavor_names(self, ids) -> list[str]:
        return [self._flavor_name_of.get(pk, str(pk)) for pk in ids or ()]

    @cached_property
    def _flavor_name_of(self) -> dict[int, str]:
        # Once per response (a list's items share this serializer), and only when a job has
        # alternatives: flavors are a short table.
        return dict(Flavor.objects.values_list("pk", "name"))

    def get_mounts(self, job) -> list[dict]:
        """The project's storages it mounts: name, mount path, read-only."""
        return _mounts_out(job.mounts)

    def get_checkpoint_dir(self, job) -> str | None:
        """GPUPOOL_CHECKPOINT_DIR as a container sees it (None: the project has no checkpoint storage)."""
        return environment.checkpoint_dir(job.checkpoint)

    def get_approval_request(self, job) -> int | None:
        """The job's (latest) approval request, when it needed one (DESIGN §6)."""
        return approval_request_of(job)

    def to_representation(self, job):
        # The job lists serialise 100 jobs a request, and DRF's generic walk (get_attribute,
        # checks, to_representation per field) was a third of a list's CPU at 100,000 jobs
        # (bench/load.py). Plain columns are copied as DRF would convert them; every other
        # field (dates in the site's zone, slugs, choices, the approval request) still goes
        # through its own DRF field, so the output is the same (tests/api/test_job_out.py).
        return {name: represent(job) for name, represent in self._plan}

    @cached_property
    def _plan(self):
        return [(field.field_name, _representer(field)) for field in self._readable_fields]

    # The job lists read rows as dicts (``values()``) instead of model instances: building
    # ~500 instances a page (job, project, flavor, priority class, user) and walking them was
    # over half of a list's CPU at 100,000 jobs (bench/load.py). Method fields name the column
    # their value comes from; ``with_approval_request`` annotates it.
    ROW_COLUMNS = {
        "start_estimate": ("id", _PER_PAGE),  # by id, from one read of the estimates per page
        "approval_request": "approval_request_pk",
        "mounts": ("mounts", lambda mounts: _mounts_out(mounts)),
        "checkpoint_dir": ("checkpoint", environment.checkpoint_dir),
    }

    def columns(self, jobs: QuerySet[Job]) -> _Rows:
        """``jobs`` as dicts of the columns the output is made of, for a paginator."""
        # The start estimates need each row's state and kind too (fields of the output).
        columns = [column for _name, column, _convert in self._row_plan] + ["state", "kind"]
        return _Rows(jobs, list(dict.fromkeys(columns)))

    def represent_rows(self, rows) -> list[dict]:
        """The output of each row of ``columns()``: the same as ``to_representation`` of its job
        (tests/api/test_job_out.py). The start estimates of the whole page are read at once."""
        rows = list(rows)
        starts = start_estimates.cached_start_estimates_of((r["id"], r["state"], r["kind"]) for r in rows)

        def estimate(pk):
            return starts[pk].as_dict() if pk in starts else None

        plan = [(name, col, estimate if conv is _PER_PAGE else conv) for name, col, conv in self._row_plan]
        return [
            {
                name: row[column] if convert is None or row[column] is None else convert(row[column])
                for name, column, convert in plan
            }
            for row in rows
        ]

    @cached_property
    def _row_plan(self):
        columns = {**self.ROW_COLUMNS, "flavors": ("flavor_choices", self._flavor_names)}
        return [(field.field_name, *_row_column(field, columns)) for field in self._readable_fields]

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "project",
            "kind",
            "flavor",
            "priority",
            "workers",
            "min_workers",
            "gpus_per_worker",
            "gpu_milli",
            "cpu_millicores",
            "memory_mib",
            "local_disk_gib",
            "unit_share",
            "min_cuda_version",
            "image",
            "command",
            "max_runtime_seconds",
            "checkpointing",
            "max_retries",
            "retries",
            "start_timeouts",
            "not_before",
            "sim_duration_seconds",
            "state",
            "submitted_by",
            "submitted_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "granted_workers",
            "placement",
            "on_loan",
            "terminating_since",
            "approval_request",
            "cluster",
            "backend_id",
            "external_user",
            "mounts",
            "env",
            "checkpoint_dir",
            "expose_port",
            "flavors",
            "framework",
            "min_operator_coverage",
            "start_estimate",
            "idle_warned_at",
            "idle_preemptible_at",
            "array",
            "array_index",
        ]


def _mounts_out(mounts) -> list[dict]:
    return [
        {"name": m["name"], "mount_path": m["mount_path"], "read_only": m["read_only"]} for m in mounts or ()
    ]


_PLAIN = {serializers.IntegerField: int, serializers.CharField: str, serializers.BooleanField: bool}


def _representer(field):
    attr = field.source
    if type(field) in _PLAIN:
        convert = _PLAIN[type(field)]
        return lambda obj: None if (v := getattr(obj, attr)) is None else convert(v)
    if type(field) is serializers.JSONField and not field.binary:
        return lambda obj: getattr(obj, attr)
    if type(field) is serializers.PrimaryKeyRelatedField:
        return lambda obj: getattr(obj, f"{attr}_id")

    def generic(obj):
        value = field.get_attribute(obj)
        return None if value is None else field.to_representation(value)

    return generic


class _Rows:
    """What a paginator needs of the jobs: their count, from the jobs themselves (the joins of the
    related columns made PostgreSQL join 100,000 jobs to count them: 34–124 ms instead of a few),
    and a slice as ``values()`` dicts."""

    def __init__(self, jobs: QuerySet[Job], columns: list[str]):
        self.jobs, self.columns = jobs, columns
        self.ordered = jobs.ordered

    def count(self) -> int:
        return self.jobs.count()

    def __getitem__(self, index):
        return self.jobs.values(*self.columns)[index]


def _row_column(field, method_columns: dict) -> tuple:
    """(the ``values()`` column, how its value becomes the field's output; None: as it is)."""
    if type(field) is serializers.SerializerMethodField:
        column = method_columns[field.field_name]
        return column if isinstance(column, tuple) else (column, None)
    if type(field) in _PLAIN:
        return field.source, _PLAIN[type(field)]
    if type(field) is serializers.PrimaryKeyRelatedField or (
        type(field) is serializers.JSONField and not field.binary
    ):
        return field.source, None
    if type(field) is serializers.SlugRelatedField:
        return f"{field.source}__{field.slug_field}", None
    return field.source, field.to_representation


class FlavorsField(serializers.CharField):
    """``"A100-80G"`` or acceptable flavors in order of preference, ``"A100-80G|Ascend-910B"``:
    a list of Flavor objects (DESIGN §14). The service checks each is active and fits."""

    def to_internal_value(self, data):
        text = super().to_internal_value(data)
        try:
            return flavor_choice.by_names(flavor_choice.parse_names(text))
        except DjangoValidationError as exc:
            raise ValidationError(exc.messages) from exc


class JobIn(serializers.Serializer):
    name = serializers.CharField(max_length=63, validators=[name_validator])
    project = VisibleRelatedField(visible_projects)
    kind = serializers.ChoiceField(choices=SUBMITTABLE_KINDS)
    flavor = FlavorsField(
        max_length=400,
        help_text="A flavor name, or the acceptable flavors in order of preference separated by '|' "
        "(e.g. A100-80G|Ascend-910B): the scheduler runs the job on the first it can place within the "
        "quota rules; the job's flavor then becomes that one. Each must be active and fit the shape.",
    )
    framework = serializers.CharField(
        max_length=40,
        required=False,
        allow_blank=True,
        default="",
        help_text="A framework the job needs (e.g. pytorch): flavors whose profile lists a lower operator "
        "coverage for it than min_operator_coverage (or none at all) are never chosen.",
    )
    min_operator_coverage = serializers.DecimalField(
        max_digits=4,
        decimal_places=3,
        min_value=Decimal(0),
        max_value=Decimal(1),
        required=False,
        allow_null=True,
        help_text="Share of the framework's mainstream operators a flavor must support, 0..1 (e.g. 0.9).",
    )
    workers = serializers.IntegerField(min_value=1, max_value=services.MAX_WORKERS, default=1)
    gpus_per_worker = serializers.IntegerField(min_value=1, max_value=128, default=1)
    gpu_milli = serializers.IntegerField(min_value=1, max_value=999, required=False, allow_null=True)
    min_workers = serializers.IntegerField(
        min_value=1, max_value=services.MAX_WORKERS, required=False, allow_null=True
    )
    priority = serializers.SlugRelatedField(slug_field="name", queryset=PriorityClass.objects.all())
    image = serializers.CharField(max_length=IMAGE_MAX_LENGTH, validators=[image_validator])
    command = serializers.CharField(
        max_length=COMMAND_MAX_LENGTH, required=False, allow_blank=True, default="", trim_whitespace=False
    )
    max_runtime_seconds = serializers.IntegerField(
        min_value=60, max_value=services.MAX_RUNTIME, required=False, allow_null=True
    )
    checkpointing = serializers.BooleanField(default=False)
    max_retries = StrictIntegerField(
        min_value=0, max_value=MAX_RETRIES_CEILING, default=0,
        help_text="Training jobs: how often a failed run is retried, with a backoff of 60 s × 2^(n−1) "
        "(at most 1 h) before retry n; exit codes the centre marks final are not retried (DESIGN §17). "
        "More than the centre's maximum (its RetryPolicy) is a 400 that names it.",
    )
    sim_duration_seconds = serializers.IntegerField(
        min_value=1, max_value=services.MAX_RUNTIME, required=False, allow_null=True
    )
    mounts = serializers.ListField(
        child=serializers.CharField(max_length=40),
        max_length=environment.MAX_MOUNTS,
        required=False,
        default=list,
        help_text="Names of the project's storages to mount (GET /api/v1/projects/{id}/storages/).",
    )
    env = serializers.ListField(
        child=serializers.DictField(
            child=StrictCharField(
                max_length=environment.MAX_ENV_VALUE_BYTES, allow_blank=True, trim_whitespace=False
            )
        ),
        max_length=environment.MAX_ENV,
        required=False,
        default=list,
        help_text='Environment variables: {"name", "value"}, or {"name", "secret", "key"} to read the '
        "value from a Kubernetes Secret (on Slurm: a file of that name on the nodes) — the portal "
        "never stores a secret value.",
    )
    expose_port = serializers.IntegerField(
        min_value=1, max_value=65535, required=False, allow_null=True, help_text="Development jobs only."
    )
    cpu_millicores = _resource_field(
        "CPU per worker in millicores (DESIGN §15). Omitted or null: the worker's GPUs' share of the "
        "flavor's nodes (Job.unit_share). More than the flavor's biggest node can give one worker (a "
        "shared worker: one unit's share) is a 400 naming the limit."
    )
    memory_mib = _resource_field("Memory per worker in MiB; null: the GPUs' share (as cpu_millicores).")
    local_disk_gib = _resource_field("Local disk per worker in GiB; null: the GPUs' share.")
    min_cuda_version = serializers.CharField(
        max_length=20, required=False, allow_blank=True, default="",
        help_text='The lowest CUDA version the image needs, e.g. "12.4": nodes below it are never chosen.',
    )
    autoscale = AutoscaleSubmitIn(
        required=False,
        allow_null=True,
        help_text='Inference jobs (min_workers below workers): scale from load between min_workers and '
        'workers. {"query": PromQL whose every selector reads the job\'s own series ({job}, {job_id}), '
        '"target": a decimal > 0 per '
        'replica, "cooldown_seconds": 30–86400, default 300} — the settings of PUT '
        '/api/v1/jobs/{id}/autoscale/, given with the job; omitted or null: off. A refusal names the '
        'field under autoscale (e.g. {"autoscale": {"target": [...]}}) and creates no job.',
    )


    array = serializers.CharField(
        max_length=200, required=False, allow_blank=True, allow_null=True,
        help_text='Training jobs: submit an array (DESIGN §17), e.g. "0-99%10" — one task per index '
        "(ranges a-b, a-b:step, commas), each a job with GPUPOOL_ARRAY_INDEX; %K: at most K tasks "
        "running at once. At most 1000 tasks, indices up to 99999. The response is the first task; its "
        "`array` is the array's id (GET /api/v1/arrays/{id}/).",
    )
    dependencies = serializers.ListField(
        child=serializers.DictField(), required=False, max_length=100, default=list,
        help_text='Jobs it waits for: [{"condition": "after_ok" | "after_any" | "after_not_ok", "job": 12}]. '
        "Each a job you can see; a dependency that can no longer be met cancels the job, with that reason.",
    )


class JobListApi(ListCreateApi):
    output, input = JobOut, JobIn
    filterset_fields = ["project", "state", "kind", "flavor"]

    def visible(self):
        jobs = with_approval_request(selectors.visible_jobs(self.request.user))
        return jobs.order_by("-submitted_at", "-id")

    def list(self, request, *args, **kwargs):
        out = self.output(context=self.get_serializer_context())
        page = self.paginate_queryset(out.columns(self.filter_queryset(self.get_queryset())))
        return self.get_paginated_response(out.represent_rows(page))

    def perform(self, data):
        data = dict(data)
        data["priority_class"] = data.pop("priority")
        if data.get("autoscale") is not None:
            data["autoscale"] = dict(data["autoscale"])
        try:
            return services.job_submit(actor=self.request.user, **data)
        except DjangoValidationError as exc:
            raise body_errors(exc) from exc


def body_errors(exc: DjangoValidationError) -> Exception:
    """The service's error with its fields named as the submission body names them (``priority``,
    ``autoscale.query``)."""
    if not hasattr(exc, "error_dict"):
        return exc
    errors = {"priority" if f == "priority_class" else f: m for f, m in exc.message_dict.items()}
    return ValidationError(nested_autoscale_errors(errors))


class JobDetailApi(DetailApi):
    output = JobOut

    def visible(self):
        return with_approval_request(selectors.visible_jobs(self.request.user))


class JobCancelApi(APIView):
    @extend_schema(request=None, responses=JobOut)
    def post(self, request, pk):
        job = get_visible(selectors.visible_jobs(request.user), pk=pk)
        return Response(JobOut(services.job_cancel(actor=request.user, job=job)).data)


class JobEventOut(serializers.ModelSerializer):
    # Null for what the system did (scheduler, backend sync, metering).
    actor = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    reason = serializers.CharField(
        read_only=True, help_text="English, for programs: started, reclaim for job 12, …"
    )
    reason_text = serializers.CharField(
        read_only=True, help_text="The reason in the language of Accept-Language."
    )
    at = serializers.DateTimeField(
        source="occurred_at", read_only=True, help_text="Same as occurred_at (kept for older clients)."
    )

    class Meta:
        model = JobEvent
        fields = [
            "id",
            "kind",
            "from_state",
            "to_state",
            "reason",
            "reason_text",
            "actor",
            "at",
            "occurred_at",
            "recorded_at",
            "time_source",
            "data",
        ]


class JobEventsApi(APIView):
    @extend_schema(responses=JobEventOut(many=True))
    def get(self, request, pk):
        job = get_visible(selectors.visible_jobs(request.user), pk=pk)
        return Response(JobEventOut(selectors.job_events(job), many=True).data)


class ExplainOut(serializers.Serializer):
    position = serializers.IntegerField(allow_null=True)
    reason = serializers.CharField()
    text = serializers.CharField(
        required=False,
        help_text="Why it waits, in the language of Accept-Language, in the flavor's units and with "
        "quota levels by name; empty when the job does not wait.",
    )
    message = serializers.CharField(
        required=False, help_text="The scheduler's diagnostic line (English, engine ids such as d3 / p1)."
    )
    flavor = serializers.CharField(required=False)
    blocking_node = serializers.CharField(
        required=False,
        allow_null=True,
        help_text="Engine id of the blocking quota level: d<department id> or p<project id>.",
    )
    blocking_node_name = serializers.CharField(
        required=False, allow_null=True, help_text="Its name, when the caller may see it."
    )
    numbers = serializers.DictField(
        child=serializers.FloatField(),
        required=False,
        help_text="The figures of the failed comparison, in units of the flavor (workers: a count).",
    )
    holders = serializers.ListField(child=serializers.DictField(), required=False)
    reservation = serializers.DictField(required=False, allow_null=True)
    behind = serializers.IntegerField(
        required=False, allow_null=True,
        help_text="Reason fifo: the earlier job of its project it waits behind (docs/scheduling.md).",
    )
    behind_why = serializers.CharField(
        required=False, allow_null=True,
        help_text="Why that job blocks: strict_fifo (its project's strategy) or aging (over its bound).",
    )
    resource = serializers.CharField(
        required=False, allow_null=True,
        help_text="Reasons resources and invalid: the dimension its nodes lack — CPU, memory or local disk.",
    )
    waited_seconds = serializers.IntegerField(
        required=False, allow_null=True, help_text="Set when the job is over its aging bound: seconds waited."
    )
    aging_bound_seconds = serializers.IntegerField(required=False, allow_null=True)
    window = serializers.DictField(
        required=False, allow_null=True,
        help_text="Reasons maintenance and reserved (DESIGN §17): the window's nodes (ids and names), its "
        "start, and whether it is a maintenance; another project's reservation is not named.",
    )
    computed_at = serializers.CharField(required=False)
    start_estimate = StartEstimateOut(required=False, allow_null=True,
                                      help_text="Estimated start (issue 24).")


class JobExplainApi(APIView):
    """Why the job waits: its queue position, the blocking quota level or resource, and who
    holds what it is owed (DESIGN §4 Explain). An external job (submitted to its cluster
    directly) waits in the cluster's own queue: reason ``external``, the cluster's reason in
    ``message``."""

    @extend_schema(responses=ExplainOut)
    def get(self, request, pk):
        job = get_visible(selectors.visible_jobs(request.user), pk=pk)
        out = explaining.readable(explain_job(job), request.user)
        # One answer, one story: the job's own reservation is its start when the forecast has none.
        found = start_estimates.with_reservation(start_estimates.start_estimate(job), out, job.pk)
        return Response({**out, "start_estimate": found.as_dict() if found else None})


class UsageRowOut(serializers.Serializer):
    quota_node = serializers.IntegerField(source="row.node.pk")
    kind = serializers.CharField(source="row.kind")
    owner_id = serializers.IntegerField(source="row.owner_id")
    owner = serializers.CharField(source="row.node.owner")
    depth = serializers.IntegerField(source="row.depth")
    quota = serializers.DecimalField(max_digits=12, decimal_places=3, source="row.effective.quota")
    used = serializers.DecimalField(max_digits=12, decimal_places=3)
    in_quota = serializers.DecimalField(max_digits=12, decimal_places=3)
    borrowed = serializers.DecimalField(max_digits=12, decimal_places=3)
    lent = serializers.DecimalField(max_digits=12, decimal_places=3)
    external = serializers.DecimalField(
        max_digits=12,
        decimal_places=3,
        help_text="The part of used held by external jobs (submitted to the cluster directly).",
    )
    on_loan = serializers.DecimalField(
        max_digits=12, decimal_places=3, help_text="On-loan usage in the subtree (the same as borrowed)."
    )
    borrowed_from_outside = serializers.DecimalField(
        max_digits=12,
        decimal_places=3,
        help_text="The part of on_loan covered by idle quota outside the subtree (siblings, other "
        "departments, the pool) — docs/quotas.md, who borrows from whom.",
    )
    lent_to_outside = serializers.DecimalField(
        max_digits=12,
        decimal_places=3,
        help_text="The node's idle quota that on-loan jobs outside its subtree use now (exact, nearest "
        "first; lent is the older estimate).",
    )
    over_quota = serializers.BooleanField(help_text="used exceeds the effective quota.")
    borrowers = serializers.IntegerField(help_text="Projects that use the node's idle quota now.")


# Declares the response of QuotaUsageApi, which builds the dict itself. Its ``capacity`` is a bare
# Decimal, which DRF's JSON encoder writes as a number (COERCE_DECIMAL_TO_STRING only applies to
# serializer fields), hence FloatField.
class QuotaUsageOut(serializers.Serializer):
    flavor = serializers.CharField()
    capacity = serializers.FloatField()
    nodes = UsageRowOut(many=True)


class QuotaUsageApi(APIView):
    """Quota, usage, borrowed and lent per visible tree node for one flavor."""

    @extend_schema(parameters=[OpenApiParameter("flavor", str, required=True)], responses=QuotaUsageOut)
    def get(self, request):
        name = request.query_params.get("flavor", "")
        flavor = Flavor.objects.filter(name=name).first()
        if flavor is None:
            raise ValidationError({"flavor": [f"Unknown flavor {name[:40]!r}."]})
        rows = quota_usage_with_lending(request.user, flavor.pk)
        return Response(
            {
                "flavor": flavor.name,
                "capacity": healthy_capacity(flavor.pk) or Decimal(0),
                "nodes": UsageRowOut(rows, many=True).data,
            }
        )


class GpuSampleOut(serializers.Serializer):
    minute = serializers.DateTimeField()
    gpu_util_pct = serializers.FloatField()
    fb_used_mib = serializers.FloatField()
    gpus = serializers.IntegerField()


# Declares the response of JobUtilisationApi, which builds the dict itself.
class JobUtilisationOut(serializers.Serializer):
    job = serializers.IntegerField()
    idle_since = serializers.DateTimeField(allow_null=True)
    samples = GpuSampleOut(many=True)


class JobUtilisationApi(APIView):
    """Per-minute GPU utilisation of the job (from Prometheus/DCGM); minutes without data are
    absent, not zero. ``idle_since`` is set when the idle policy warned the job (emptied when it is
    busy again; docs/scheduling.md, "Idle policy")."""

    @extend_schema(responses=JobUtilisationOut)
    def get(self, request, pk):
        job = get_visible(selectors.visible_jobs(request.user), pk=pk)
        samples = selectors.job_gpu_samples(job)  # a week of minutes at most
        return Response(
            {"job": job.pk, "idle_since": job.idle_since, "samples": GpuSampleOut(samples, many=True).data}
        )


class JobScaleIn(serializers.Serializer):
    replicas = serializers.IntegerField(min_value=1, max_value=services.MAX_WORKERS)


class JobScaleOut(serializers.Serializer):
    """The job's size after the call (the full job is at ``/jobs/{id}/``)."""

    id = serializers.IntegerField()
    state = serializers.CharField()
    workers = serializers.IntegerField()
    min_workers = serializers.IntegerField(allow_null=True)
    granted_workers = serializers.IntegerField(allow_null=True)
    target_workers = serializers.IntegerField(allow_null=True)
    placement = serializers.JSONField()


class JobScaleApi(APIView):
    """Scale a running elastic job (an inference service, or a checkpointing training job)
    between its ``min_workers`` and ``workers``: down releases the surplus workers at once, up
    sets the target the scheduler grows it to as room allows (docs/scheduling.md)."""

    @extend_schema(request=JobScaleIn, responses=JobScaleOut)
    def post(self, request, pk):
        job = get_visible(selectors.visible_jobs(request.user), pk=pk)
        data = JobScaleIn(data=request.data)
        data.is_valid(raise_exception=True)
        job = services.job_scale(actor=request.user, job=job, replicas=data.validated_data["replicas"])
        return Response(JobScaleOut(job).data)
