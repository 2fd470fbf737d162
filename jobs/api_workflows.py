"""REST API of arrays and dependencies (DESIGN §17): an array with its tasks' states, cancel all;
a job's dependencies, read and replaced while it waits."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import selectors, services, workflows
from jobs.models import JobArray, JobDependency
from portal.selectors import get_visible


class ArrayTaskOut(serializers.Serializer):
    id = serializers.IntegerField()
    index = serializers.IntegerField(source="array_index")
    state = serializers.CharField()
    backend_id = serializers.CharField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    exit_code = serializers.IntegerField(allow_null=True)


class ArrayOut(serializers.ModelSerializer):
    project = serializers.PrimaryKeyRelatedField(read_only=True)
    submitted_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    spec = serializers.CharField(help_text='As submitted, e.g. "0-99%10".')
    size = serializers.IntegerField(help_text="How many tasks.")
    max_running = serializers.IntegerField(
        allow_null=True, help_text="At most this many tasks hold GPUs at once; null: no cap."
    )
    backend_id = serializers.CharField(
        help_text="A native Slurm array (submitted with sbatch --array): its array job id; empty otherwise."
    )
    states = serializers.SerializerMethodField()
    tasks = serializers.SerializerMethodField()

    def get_states(self, array) -> dict[str, int]:
        """How many tasks are in each state."""
        return workflows.array_states(array)

    @extend_schema(responses=ArrayTaskOut(many=True))
    def get_tasks(self, array) -> list[dict]:
        """Every task, by index: its job id, state, backend id, times and exit code."""
        return ArrayTaskOut(selectors.array_tasks(array), many=True).data

    class Meta:
        model = JobArray
        fields = ["id", "name", "project", "submitted_by", "submitted_at", "spec", "size", "max_running",
                  "cluster", "backend_id", "states", "tasks"]


class ArrayDetailApi(APIView):
    """One array (DESIGN §17) with its tasks' states; another tenant's is a 404."""

    @extend_schema(responses=ArrayOut)
    def get(self, request, pk):
        array = get_visible(selectors.visible_arrays(request.user), pk=pk)
        return Response(ArrayOut(array).data)


class ArrayCancelOut(serializers.Serializer):
    cancelled = serializers.IntegerField(help_text="Tasks cancelled, or asked to stop when on the cluster.")
    array = ArrayOut()


class ArrayCancelApi(APIView):
    """Cancel every task not yet finished; finished tasks keep their state."""

    @extend_schema(request=None, responses=ArrayCancelOut)
    def post(self, request, pk):
        array = get_visible(selectors.visible_arrays(request.user), pk=pk)
        done = services.array_cancel(actor=request.user, array=array)
        return Response({"cancelled": done, "array": ArrayOut(array).data})


class DependencyOut(serializers.ModelSerializer):
    job = serializers.IntegerField(source="depends_on_id")
    state = serializers.CharField(source="depends_on.state", help_text="The state of the job it depends on.")
    met = serializers.SerializerMethodField()

    def get_met(self, dep) -> bool:
        return workflows.met(dep.condition, dep.depends_on.state)

    class Meta:
        model = JobDependency
        fields = ["condition", "job", "state", "met"]


class DependencyIn(serializers.Serializer):
    condition = serializers.ChoiceField(choices=["after_ok", "after_any", "after_not_ok"])
    job = serializers.IntegerField(min_value=1, max_value=workflows.MAX_JOB_ID)


class DependenciesIn(serializers.Serializer):
    dependencies = DependencyIn(many=True, max_length=workflows.MAX_DEPENDENCIES)


class JobDependenciesApi(APIView):
    """A job's dependencies (after_ok, after_any, after_not_ok); POST replaces them while the job
    waits. A job the caller cannot see, or one that would close a cycle, is a 400 that changes
    nothing."""

    @extend_schema(responses=DependencyOut(many=True))
    def get(self, request, pk):
        job = get_visible(selectors.visible_jobs(request.user), pk=pk)
        return Response(DependencyOut(selectors.job_dependencies(job), many=True).data)

    @extend_schema(request=DependenciesIn, responses=DependencyOut(many=True))
    def post(self, request, pk):
        job = get_visible(selectors.visible_jobs(request.user), pk=pk)
        data = DependenciesIn(data=request.data)
        data.is_valid(raise_exception=True)
        deps = workflows.parse_dependencies([dict(d) for d in data.validated_data["dependencies"]])
        job = workflows.dependencies_set(actor=request.user, job=job, deps=deps)
        return Response(DependencyOut(selectors.job_dependencies(job), many=True).data)
