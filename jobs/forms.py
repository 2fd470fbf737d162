"""Forms of the job pages. They check the shape of the input; the rules (permissions, flavor
limits, the dev-job limit, approvals) stay in ``jobs.services`` and reach the form as errors."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from jobs import environment, flavor_choice, requests, rules, selectors, services
from jobs.models import (
    AUTOSCALE_QUERY_MAX_LENGTH,
    COMMAND_MAX_LENGTH,
    IMAGE_MAX_LENGTH,
    SUBMITTABLE_KINDS,
    JobKind,
    PriorityClass,
    ProjectSecret,
    ProjectStorage,
    image_validator,
    name_validator,
)
from jobs.retry_models import MAX_RETRIES_CEILING
from jobs.states import JobState
from jobs.templatetags.jobs_ui import STATE_LABELS
from portal.models import Project, User
from portal.selectors import visible_projects
from portal.widgets import FastSelect, ModelChoiceField
from quotas.models import Flavor

DEFAULT_PRIORITY_CLASS = "training"  # preselected when it exists (DESIGN §4's example classes)


class _FlavorChoice(forms.ModelChoiceField):
    def label_from_instance(self, obj: Flavor) -> str:
        return f"{obj.name} ({_('shareable')})" if obj.shareable else obj.name


# The service's name of a field → the form's (the env vars are two textareas here).
SERVICE_FIELDS = {"env": "env_text"}


def _storage_label(storage: ProjectStorage) -> str:
    mode = _("read-only") if storage.read_only else _("read-write")
    return f"{storage.project.code} / {storage.name} → {storage.mount_path} ({mode})"


def _no_hard_limits(fields) -> None:
    """Drop the ``maxlength`` Django puts on text inputs and textareas (issue 32 item 2): a browser
    cuts typed or pasted text at it without a word, and the job was created under the cut name.
    The fields keep their ``max_length``, so the server refuses over-long input with its length —
    on the field, live when the user leaves it and on submit (docs/ui.md, "Never a silent cut")."""
    for field in fields.values():
        field.widget.attrs.pop("maxlength", None)


def _autoscale_query_field(**kw) -> forms.CharField:
    return forms.CharField(
        label=_("Query (PromQL)"), required=False, max_length=AUTOSCALE_QUERY_MAX_LENGTH,
        widget=forms.TextInput(attrs={"placeholder": 'avg(requests_per_second{job="{job}"})'}), **kw,
    )


def _autoscale_target_field() -> forms.CharField:
    return forms.CharField(label=_("Target value per replica"), required=False, max_length=40)


def _autoscale_cooldown_field() -> forms.IntegerField:
    return forms.IntegerField(
        label=_("Cool-down (s)"), required=False, help_text=_("No change within this long after the last.")
    )


class JobForm(forms.Form):
    """The submission body of DESIGN §9 as a browser form."""

    name = forms.CharField(
        label=_("Name"),
        max_length=63,
        validators=[name_validator],
        help_text=_("Lower-case letters, digits and '-'."),
    )
    project = forms.ModelChoiceField(queryset=Project.objects.none(), label=_("Project"))
    kind = forms.ChoiceField(label=_("Kind"), choices=SUBMITTABLE_KINDS, initial=JobKind.TRAINING)
    flavor = _FlavorChoice(queryset=Flavor.objects.none(), label=_("Flavor"))
    priority_class = forms.ModelChoiceField(queryset=PriorityClass.objects.none(), label=_("Priority class"))
    alternatives = forms.CharField(
        label=_("Other acceptable flavors"),
        max_length=400,
        required=False,
        help_text=_(
            "In order of preference, separated by '|', e.g. Ascend-910B|MLU370: the job runs on the first "
            "flavor, this one included, that the scheduler can place."
        ),
    )
    framework = forms.CharField(
        label=_("Framework"),
        max_length=40,
        required=False,
        help_text=_("e.g. pytorch: flavors below the minimum operator coverage for it are never chosen."),
    )
    min_operator_coverage = forms.DecimalField(
        label=_("Minimum operator coverage"),
        min_value=0,
        max_value=1,
        max_digits=4,
        decimal_places=3,
        required=False,
        help_text=_("A share between 0 and 1, e.g. 0.9."),
    )
    workers = forms.IntegerField(label=_("Workers"), min_value=1, max_value=services.MAX_WORKERS, initial=1)
    gpus_per_worker = forms.IntegerField(label=_("GPUs per worker"), min_value=1, max_value=128, initial=1)
    min_workers = forms.IntegerField(
        label=_("Minimum workers"),
        min_value=1,
        max_value=services.MAX_WORKERS,
        required=False,
        help_text=_("Elastic training: starts with at least this many workers."),
    )
    gpu_milli = forms.IntegerField(
        label=_("GPU share (‰)"),
        min_value=1,
        max_value=999,
        required=False,
        help_text=_("Shareable flavors only: thousandths of one GPU, e.g. 250."),
    )
    # DESIGN §15: what each worker asks of its node besides its GPUs; empty: its GPUs' share (the
    # help text says how much, for the chosen flavor and GPUs: offer_request_defaults).
    cpu_millicores = forms.IntegerField(
        label=_("CPU per worker (millicores)"), min_value=1, max_value=requests.ABSURD, required=False
    )
    memory_mib = forms.IntegerField(
        label=_("Memory per worker (MiB)"), min_value=1, max_value=requests.ABSURD, required=False
    )
    local_disk_gib = forms.IntegerField(
        label=_("Local disk per worker (GiB)"), min_value=1, max_value=requests.ABSURD, required=False
    )
    min_cuda_version = forms.CharField(
        label=_("Minimum CUDA version"),
        max_length=20,
        required=False,
        help_text=_("e.g. 12.4: nodes with an older CUDA are never chosen. Empty: any."),
    )
    image = forms.CharField(
        label=_("Container image"), max_length=IMAGE_MAX_LENGTH, validators=[image_validator]
    )
    command = forms.CharField(
        label=_("Command"),
        max_length=COMMAND_MAX_LENGTH,
        required=False,
        strip=False,  # stored verbatim, as the API does
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    max_runtime_seconds = forms.IntegerField(
        label=_("Maximum runtime (s)"),
        min_value=60,
        max_value=services.MAX_RUNTIME,
        required=False,
        help_text=_("86400 s = 24 hours. Development jobs default to their lifetime."),
    )
    # DESIGN §17: an array of tasks and the jobs this one waits for (jobs.workflows reads both).
    array = forms.CharField(
        label=_("Array"),
        max_length=200,
        required=False,
        help_text=_("Training jobs: e.g. 0-99%10 submits 100 tasks (GPUPOOL_ARRAY_INDEX 0–99), at most 10 "
                    "running at once. Empty: one job."),
    )
    dependencies = forms.CharField(
        label=_("Dependencies"),
        max_length=2000,
        required=False,
        help_text=_("Jobs it waits for, e.g. after_ok:12,after_any:13 — after_ok (succeeded), after_any "
                    "(ended), after_not_ok (failed or cancelled). Empty: none."),
    )
    checkpointing = forms.BooleanField(
        label=_("Checkpointing: the job saves a checkpoint and resumes after preemption"), required=False
    )
    max_retries = forms.IntegerField(
        label=_("Retries after a failure"),
        min_value=0,
        max_value=MAX_RETRIES_CEILING,
        required=False,
        help_text=_("Training jobs: a failed run is run again after 1, 2, 4 … minutes (at most an hour). "
                    "Empty: none."),
    )
    mounts = forms.ModelMultipleChoiceField(
        queryset=ProjectStorage.objects.none(),
        label=_("Mounts"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("Storages of the chosen project the job sees (admins define them per project)."),
    )
    env_text = forms.CharField(
        label=_("Environment variables"),
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "EPOCHS=10"}),
        help_text=_("One NAME=value per line. Never put a secret here: use the field below."),
    )
    secret_env_text = forms.CharField(
        label=_("Variables from secrets"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "HF_TOKEN=hf-token/token"}),
        help_text=_(
            "One NAME=secret/key per line: the value is read on the cluster from that Kubernetes Secret "
            "(on Slurm, from the file of that name); the portal never sees it."
        ),
    )
    expose_port = forms.IntegerField(
        label=_("Exposed port"),
        min_value=1,
        max_value=65535,
        required=False,
        help_text=_(
            "Development jobs: the port of Jupyter, a VS Code server or SSH, reachable from the job page."
        ),
    )
    # Inference jobs (the page shows them for that kind only): the settings of the job page's
    # autoscaling form, given with the job; ``job_submit`` checks them (jobs.scheduling.autoscale).
    autoscale_query = _autoscale_query_field(
        help_text=_("Optional: scale between the minimum workers and the workers from load. One value "
                    "per replica; {job} stands for the job's name on the cluster (gp-<id>), {job_id} for "
                    "its id."),
    )
    autoscale_target = _autoscale_target_field()
    autoscale_cooldown_seconds = _autoscale_cooldown_field()
    sim_duration_seconds = forms.IntegerField(
        label=_("Simulated duration (s)"),
        min_value=1,
        max_value=services.MAX_RUNTIME,
        required=False,
        help_text=_("Demo only: how long the simulated cluster runs the job."),
    )

    def __init__(self, *args, user: User, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["project"].queryset = selectors.submittable_projects(user)
        self.fields["flavor"].queryset = Flavor.objects.filter(active=True).order_by("name")
        self.fields["mounts"].queryset = ProjectStorage.objects.filter(
            project__in=self.fields["project"].queryset, active=True
        ).select_related("project")
        self.fields["mounts"].label_from_instance = _storage_label
        self.mounts_for = ""  # the project whose storages the list shows (offer_mounts)
        self._say_which_secrets()
        # Every class validates (so job_submit names the rule a choice breaks); the list offers
        # only those the user may use for the chosen kind (offer_priority_classes).
        self.classes = list(PriorityClass.objects.all())
        self.fields["priority_class"].queryset = PriorityClass.objects.all()
        self.offer_choices()
        if not settings.GPUPOOL["DEMO"]:
            del self.fields["sim_duration_seconds"]
        _no_hard_limits(self.fields)

    def _chosen(self, name: str):
        if self.is_bound:
            return self.data.get(self.add_prefix(name)) or None
        return self.initial.get(name, self.fields[name].initial)

    def _chosen_project(self) -> Project | None:
        project_pk = self._chosen("project")
        if project_pk is None or not str(project_pk).isdigit():
            return None
        return self.fields["project"].queryset.filter(pk=int(project_pk)).first()

    def _chosen_mounts(self) -> set[str]:
        if self.is_bound:
            widget, name = self.fields["mounts"].widget, self.add_prefix("mounts")
            return {str(v) for v in widget.value_from_datadict(self.data, self.files, name)}
        return {str(v) for v in self.initial.get("mounts") or ()}

    def _class_context(self) -> tuple[str, int]:
        """The chosen kind and the user's rank in the chosen project (before one is chosen: the
        highest rank over the projects the user may submit to)."""
        kind = str(self._chosen("kind") or JobKind.TRAINING)
        return kind, rules.usage_rank(self.user, self._chosen_project())

    def offer_choices(self) -> None:
        """The lists that depend on other fields. Call again after changing ``initial`` or ``data``."""
        self.offer_priority_classes()
        self.offer_mounts()
        self.offer_request_defaults()

    def _chosen_int(self, name: str) -> int | None:
        value = self._chosen(name)
        try:
            return int(value) if value is not None else None
        except (TypeError, ValueError):
            return None

    def offer_request_defaults(self) -> None:
        """Under CPU, memory and disk: what a worker gets when the field is left empty — its GPUs'
        share of the chosen flavor (DESIGN §15). The live check swaps the help texts in, so they
        follow the flavor and the GPU count."""
        flavor_pk = self._chosen_int("flavor")
        flavor = self.fields["flavor"].queryset.filter(pk=flavor_pk).first() if flavor_pk else None
        gpus = self._chosen_int("gpus_per_worker") or 1
        milli = self._chosen_int("gpu_milli") if flavor is not None and flavor.shareable else None
        share = requests.flavor_share(flavor) if flavor is not None else None
        default = requests.default_request(share, units=gpus, milli=milli) if share is not None else None
        for dim in requests.DIMENSIONS:
            self.fields[dim].help_text = self._default_text(flavor, dim, share, default, gpus, milli)

    @staticmethod
    def _default_text(flavor, dim, share, default, gpus, milli) -> str:
        if flavor is None:
            return _("Empty: the share of the worker's GPUs on the flavor's nodes (choose a flavor to see "
                     "it).")
        if default is None or default.get(dim) is None:
            text = _("Empty: the cluster's default (the nodes of %(f)s do not report it).")
            return text % {"f": flavor.name}
        units = f"{milli / 1000:g}" if milli else str(gpus)
        return _("Empty: %(value)s (%(raw)s) — %(units)s × %(per)s, the share of one %(f)s GPU.") % {
            "value": requests.quantity_text(dim, default.get(dim)),
            "raw": default.get(dim),
            "units": units,
            "f": flavor.name,
            "per": requests.quantity_text(dim, share.get(dim)),
        }

    def _default_class(self, usable: list[PriorityClass]) -> PriorityClass | None:
        return next((pc for pc in usable if pc.name == DEFAULT_PRIORITY_CLASS), usable[0] if usable else None)

    def offer_priority_classes(self) -> None:
        """List the classes usable for the chosen kind and project (issue 18 item 5), marking
        those that need approval; a class chosen in the data stays listed, so its error shows
        next to it. Call again after changing ``initial`` or ``data``."""
        kind, rank = self._class_context()
        chosen = str(self._chosen("priority_class") or "")
        field = self.fields["priority_class"]
        usable = [pc for pc in self.classes if rules.usable(pc, kind, rank)]
        choices = [("", field.empty_label)]
        for pc in self.classes:
            if pc in usable:
                label = str(pc)
                if rules.below_role(pc, rank):
                    label = _("%(class)s — needs approval") % {"class": label}
                choices.append((pc.pk, label))
            elif str(pc.pk) == chosen:
                choices.append((pc.pk, str(pc)))
        field.widget.choices = choices
        default = self._default_class(usable)
        field.initial = default.pk if default else None

    def offer_mounts(self) -> None:
        """List the storages of the chosen project only (issue 32 item 4); a storage chosen in the
        data stays listed, so the refusal shows next to it. Validation still reads every storage
        of the user's projects, so such a choice is refused by ``clean`` rather than ignored."""
        project, chosen = self._chosen_project(), self._chosen_mounts()
        field = self.fields["mounts"]
        project_pk = project.pk if project is not None else None
        storages = [s for s in field.queryset if s.project_id == project_pk or str(s.pk) in chosen]
        field.widget.choices = [(s.pk, _storage_label(s)) for s in storages]
        self.mounts_for = str(project.pk) if project is not None else ""
        if project is None:
            field.help_text = _("Choose a project to see its storages.")
        elif not storages:
            field.help_text = _("Project %(project)s has no storages.") % {"project": project.code}

    def drop_foreign_mounts(self) -> None:
        """For the live check: storages of another project that are still ticked after the project
        changed are unticked (in ``data``, which must be mutable), and the field says which. The
        submission itself never drops one: ``clean`` refuses it."""
        project = self._chosen_project()
        if project is None:
            return  # no project yet: the ticks stay, listed, until one is chosen
        chosen = self._chosen_mounts()
        storages = self.fields["mounts"].queryset
        foreign = [s for s in storages if str(s.pk) in chosen and s.project_id != project.pk]
        if not foreign:
            return
        name, dropped = self.add_prefix("mounts"), {str(s.pk) for s in foreign}
        self.data.setlist(name, [v for v in self.data.getlist(name) if str(v) not in dropped])
        self.offer_mounts()
        self.fields["mounts"].help_text = _(
            "%(names)s is not a storage of project %(project)s and was unticked."
        ) % {"names": ", ".join(s.name for s in foreign), "project": project.code}

    def replace_unusable_class(self) -> None:
        """For the live check while the user fills in the form (before ``is_valid``): when the
        chosen class cannot be used for the chosen kind and project, choose the default usable
        one instead (in ``data``, which must be mutable) and say so under the field. The
        submission itself never replaces a choice: job_submit refuses it with the reason."""
        kind, rank = self._class_context()
        chosen = str(self._chosen("priority_class") or "")
        old = next((pc for pc in self.classes if str(pc.pk) == chosen), None)
        if old is None or rules.usable(old, kind, rank):
            return
        new = self._default_class([pc for pc in self.classes if rules.usable(pc, kind, rank)])
        if new is None:
            return
        self.data[self.add_prefix("priority_class")] = str(new.pk)
        self.offer_priority_classes()
        self.fields["priority_class"].help_text = _(
            "%(old)s cannot be used for this kind of job here; %(new)s was chosen instead."
        ) % {"old": old.name, "new": new.name}

    def _say_which_secrets(self) -> None:
        """The help of the secrets' textarea names the Secrets the user's projects declare: only
        those can be read (issue 32 item 17)."""
        declared = ProjectSecret.objects.filter(
            project__in=self.fields["project"].queryset, active=True
        ).select_related("project").order_by("project__code", "name")[:50]
        names = ", ".join(f"{s.project.code} / {s.name}" for s in declared)
        extra = (
            _("Secrets your projects declare: %(list)s.") % {"list": names}
            if names
            else _("Your projects declare no secrets yet: a platform admin declares them.")
        )
        field = self.fields["secret_env_text"]
        field.help_text = f"{field.help_text} {extra}"

    def clean(self):
        data = super().clean()
        project, storages = data.get("project"), data.get("mounts") or []
        if project is not None and any(s.project_id != project.pk for s in storages):
            self.add_error("mounts", _("Choose storages of the job's project only."))
        env = []
        for field, secrets in (("env_text", False), ("secret_env_text", True)):
            try:
                entries = environment.parse_env_lines(data.get(field, ""), secrets=secrets)
                environment.clean_env(entries, project=project)  # its errors on its own textarea
            except ValueError as exc:
                self.add_error(field, str(exc))
            except ValidationError as exc:
                self.add_error(field, exc.message_dict["env"])
            else:
                env += entries
        data["env"] = env
        return data

    def clean_alternatives(self) -> list[Flavor]:
        text = self.cleaned_data.get("alternatives", "").strip()
        if not text:
            return []
        return flavor_choice.by_names(flavor_choice.parse_names(text))

    def submit_kwargs(self) -> dict:
        """``cleaned_data`` as the keyword arguments of ``services.job_submit``."""
        data = dict(self.cleaned_data)
        more = data.pop("alternatives", None) or []
        if more:
            data["flavor"] = [data["flavor"], *more]
        data.setdefault("sim_duration_seconds", None)
        data["max_retries"] = data.get("max_retries") or 0
        data["mounts"] = [storage.name for storage in data.get("mounts") or []]
        data.pop("env_text", None)
        data.pop("secret_env_text", None)
        data.setdefault("env", [])
        data["autoscale"] = self._autoscale(data)
        return data

    @staticmethod
    def _autoscale(data: dict) -> dict | None:
        """The three autoscaling fields as ``job_submit``'s ``autoscale``; None when all are empty."""
        query = data.pop("autoscale_query", "")
        target = data.pop("autoscale_target", "")
        cooldown = data.pop("autoscale_cooldown_seconds", None)
        if not query and not target and cooldown is None:
            return None
        settings_ = {"query": query, "target": target or None}
        if cooldown is not None:
            settings_["cooldown_seconds"] = cooldown
        return settings_

    def shows_autoscale(self) -> bool:
        """The autoscaling fields are shown (and sent) for inference jobs only."""
        return str(self._chosen("kind") or "") == JobKind.INFERENCE

    def add_service_error(self, error: ValidationError, skip=()) -> None:
        """Errors raised by the service, on the field they name (others above the form);
        errors on the fields in ``skip`` are left out."""
        if hasattr(error, "error_dict"):
            for field, errors in error.error_dict.items():
                field = SERVICE_FIELDS.get(field, field)
                if field not in skip:
                    self.add_error(field if field in self.fields else None, errors)
        else:
            self.add_error(None, error)

    def hide_untouched(self) -> None:
        """While the user is still typing, a blank field is not an error yet."""
        for name in list(self.errors):
            if name in self.fields and self.data.get(self.add_prefix(name), "") == "":
                del self.errors[name]

    def mark_invalid(self) -> None:
        for name in self.errors:
            if name in self.fields:
                self.fields[name].widget.attrs["aria-invalid"] = "true"


class JobFilterForm(forms.Form):
    """The filters of the job list and the queue (GET). Invalid values are ignored."""

    q = forms.CharField(label=_("Name contains"), max_length=63, required=False)
    project = ModelChoiceField(
        queryset=Project.objects.none(), to_field_name="code", required=False, label=_("Project")
    )
    flavor = ModelChoiceField(
        queryset=Flavor.objects.none(), to_field_name="name", required=False, label=_("Flavor")
    )
    state = forms.ChoiceField(required=False, label=_("State"), widget=FastSelect)
    kind = forms.ChoiceField(
        required=False, label=_("Kind"), choices=[("", _("all")), *JobKind.choices], widget=FastSelect
    )
    mine = forms.BooleanField(required=False, label=_("Only mine"))

    def __init__(self, *args, user: User, states, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["project"].queryset = visible_projects(user).order_by("code")
        self.fields["flavor"].queryset = Flavor.objects.order_by("name")
        self.fields["state"].choices = [("", _("all"))] + [(s.value, STATE_LABELS[s.value]) for s in states]
        self.fields["project"].empty_label = _("all")
        self.fields["flavor"].empty_label = _("all")

    def filters(self) -> dict:
        self.is_valid()
        return {k: v for k, v in self.cleaned_data.items() if v}


QUEUE_STATES = selectors.QUEUE_STATES
ALL_STATES = tuple(JobState)


class PriorityClassForm(forms.ModelForm):
    """Validates a priority class; the write goes through ``services.priority_class_*``."""

    class Meta:
        model = PriorityClass
        fields = [
            "name",
            "value",
            "preemptible",
            "grace_seconds",
            "min_runtime_seconds",
            "description",
            "allowed_kinds",
            "min_role",
            "approval_below_role",
        ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            # The name is how the API and jobs refer to the class: fixed once created.
            self.fields["name"].disabled = True
        # Left out (a client that predates the usage rules): the class keeps its rule, a new
        # one gets the model's default (every member).
        self.fields["min_role"].required = False
        # The same for the minimum runtime (a client that predates it): the class keeps its own.
        self.fields["min_runtime_seconds"].required = False

    def clean_min_role(self) -> str:
        return self.cleaned_data.get("min_role") or self.instance.min_role

    def clean_min_runtime_seconds(self) -> int:
        value = self.cleaned_data.get("min_runtime_seconds")
        return self.instance.min_runtime_seconds if value is None else value


class AutoscaleForm(forms.Form):
    """An inference job's autoscaling (the service ``jobs.scheduling.autoscale.job_autoscale_set`` checks
    the values: an empty query turns it off)."""

    query = _autoscale_query_field(
        help_text=_("One value per replica; {job} stands for the job's name on the cluster (gp-<id>), "
                    "{job_id} for its id. Empty: autoscaling off."),
    )
    target = _autoscale_target_field()
    cooldown_seconds = _autoscale_cooldown_field()


class IdleExemptionForm(forms.Form):
    """Ask that the idle policy leave a job alone (``jobs.idle_exemptions``; the service checks the
    job, the permission and that ``until`` is in the future)."""

    until = forms.DateTimeField(
        label=_("Until"), required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text=_("Empty: for the job's life."),
    )
    reason = forms.CharField(label=_("Reason"), max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))
