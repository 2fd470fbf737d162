"""Demo priority classes (DESIGN §4), jobs, storages and a job template (DESIGN §13)."""

from pathlib import Path

from django.conf import settings

from jobs.models import PriorityClass

CLASSES = [
    # name, value, preemptible, grace seconds, description
    ("inference-online", 1000, False, 60, "Online inference / 在线推理"),
    ("training-high", 500, True, 300, "Urgent training / 紧急训练"),
    ("training", 100, True, 300, "Training / 训练"),
    ("dev", 50, True, 30, "Development / 开发调试"),
    ("best-effort", 0, True, 30, "Best effort / 尽力而为"),
]
# Who may use each class (issue 18 item 5), for a new installation only: online inference is for
# inference services; urgent training is for training, and a member needs approval for it.
USAGE_RULES = {
    "inference-online": {"allowed_kinds": ["inference"]},
    "training-high": {
        "allowed_kinds": ["training"],
        "min_role": "project_admin",
        "approval_below_role": True,
    },
}


def seed(stdout) -> None:
    for name, value, preemptible, grace, description in CLASSES:
        PriorityClass.objects.get_or_create(
            name=name,
            defaults={
                "value": value,
                "preemptible": preemptible,
                "grace_seconds": grace,
                "description": description,
                **USAGE_RULES.get(name, {}),
            },
        )
    stdout.write(f"jobs: {len(CLASSES)} priority classes")
    seed_storages(stdout)
    seed_jobs(stdout)
    seed_approvals(stdout)
    seed_templates(stdout)


# A believable morning: training gangs, inference services, dev boxes; durations in simulated s.
DEMO_JOBS = [
    # project, user, name, kind, flavor, workers, gpus/worker, gpu_milli, priority, duration, checkpointing
    ("nlp-llm", "alice", "llama-pretrain", "training", "A100-80G", 4, 8, None, "training-high", 7200, True),
    ("nlp-llm", "alice", "llama-sft", "training", "A100-80G", 2, 8, None, "training", 3600, True),
    ("nlp-asr", "alice", "whisper-finetune", "training", "Ascend-910B", 1, 8, None, "training", 5400, False),
    ("cv-detect", "bob", "yolo-sweep", "training", "A100-1g.10gb", 1, 2, None, "best-effort", 1800, False),
    ("cv-gen", "ai-admin", "sdxl-train", "training", "MLU370", 2, 8, None, "training", 9000, True),
    ("ad-bev", "carol", "bev-fusion", "training", "Ascend-910B", 4, 8, None, "training", 10800, True),
    ("ad-replay", "ad-admin", "replay-batch", "training", "A100-80G", 1, 4, None, "best-effort", 1200, False),
    ("svc-chat", "dave", "chat-serving", "inference", "H800", 2, 4, None, "inference-online", 86400, False),
    (
        "svc-rank",
        "svc-admin",
        "rank-serving",
        "inference",
        "T4-shared",
        1,
        1,
        500,
        "inference-online",
        86400,
        False,
    ),
    ("svc-chat", "dave", "notebook-idle", "dev", "T4-shared", 1, 1, 250, "dev", None, False),  # its lifetime
    ("plat-bench", "admin", "dcu-burnin", "training", "DCU-Z100", 4, 8, None, "best-effort", 2400, False),
]


def seed_jobs(stdout) -> None:
    from jobs.models import Job
    from jobs.services import job_submit
    from portal.models import Project, User
    from quotas.models import Flavor

    if Job.objects.exists():
        return
    for project, user, name, kind, flavor, workers, gpus, milli, prio, duration, ckpt in DEMO_JOBS:
        job_submit(
            actor=User.objects.get(username=user),
            project=Project.objects.get(code=project),
            name=name,
            kind=kind,
            flavor=Flavor.objects.get(name=flavor),
            priority_class=PriorityClass.objects.get(name=prio),
            image="registry.local/ai/base:2026.11",
            command="python train.py" if "idle" not in name else "sleep infinity  # idle notebook",
            workers=workers,
            gpus_per_worker=gpus,
            gpu_milli=milli,
            max_runtime_seconds=None if kind == "dev" else 172800,  # a dev job: its lifetime
            checkpointing=ckpt,
            sim_duration_seconds=duration,
        )
    stdout.write(f"jobs: {len(DEMO_JOBS)} demo jobs submitted")


def seed_approvals(stdout) -> None:
    """AI Research asks for approval above 8 cards or on a premium flavor (H800), and a platform
    admin too above 32 cards; alice's H800 fine-tune waits for ai-admin. Added after the demo
    jobs, so those run as before."""
    from jobs.models import ApprovalPolicy, Job
    from jobs.services import job_submit
    from portal.models import Department, Project, User
    from quotas.models import Flavor

    ApprovalPolicy.objects.get_or_create(
        department=Department.objects.get(code="ai"),
        defaults={"max_gpus": 8, "premium_flavors": True, "platform_gpus": 32, "max_runtime_hours": 72},
    )
    if not Job.objects.filter(name="llama-70b-sft").exists():
        job_submit(
            actor=User.objects.get(username="alice"),
            project=Project.objects.get(code="nlp-llm"),
            name="llama-70b-sft",
            kind="training",
            flavor=Flavor.objects.get(name="H800"),
            priority_class=PriorityClass.objects.get(name="training"),
            image="registry.local/ai/base:2026.11",
            command="python sft.py --model llama-70b",
            workers=2,
            gpus_per_worker=8,
            max_runtime_seconds=86400,
            checkpointing=True,
            sim_duration_seconds=5400,
        )
    stdout.write("approvals: a policy for ai, one pending job, quota and loan request")


# DESIGN §13: every demo project reads its data set at /data (read-only) and keeps checkpoints and
# outputs in /work. Host paths on this machine (the demo's "shared file system"), one per project,
# under the demo's run folder (GPUPOOL_DEMO_STORAGE_DIR; .run/demo-storage, or --run-dir's).
DEMO_STORAGES = [
    # name, mount path, read-only, holds checkpoints, quota note
    ("data", "/data", True, False, "Data sets (read-only) / 数据集（只读）"),
    ("work", "/work", False, True, "Checkpoints and outputs, 2 TiB / 检查点与输出，2 TiB"),
]


def seed_storages(stdout) -> None:
    """A ``data`` and a ``work`` storage for each demo project, each only when the project has
    no storage of that name (one users changed or removed by deactivating stays as it is)."""
    from jobs.models import ProjectStorage
    from portal.demo import PROJECTS, create_missing
    from portal.models import Project

    made = 0
    for project in Project.objects.filter(code__in=[code for code, _name, _dept in PROJECTS]):
        for name, mount_path, read_only, checkpoints, note in DEMO_STORAGES:
            if project.storages.filter(name=name).exists():
                continue
            host_path = Path(settings.GPUPOOL["DEMO_STORAGE_DIR"]) / project.code / name
            storage = ProjectStorage(
                project=project,
                name=name,
                kind="hostpath",
                host_path=str(host_path),
                mount_path=mount_path,
                read_only=read_only,
                checkpoints=checkpoints,
                quota_note=note,
            )
            if create_missing(stdout, f"storage {project.code}/{name}", lambda s=storage: _save_valid(s)):
                host_path.mkdir(parents=True, exist_ok=True)  # the simulated nodes write there
                made += 1
    stdout.write(f"jobs: {made} demo storages created")


def _save_valid(obj):
    obj.full_clean()  # the paths' checks and the constraints (one checkpoint storage per project)
    obj.save()
    return obj


DEMO_TEMPLATE = {
    "owner": "nlp-lead",
    "project": "nlp-llm",
    "name": "LLM fine-tune (8 cards) / 大模型微调（8 卡）",
    "values": {
        "name": "llama-finetune",
        "kind": "training",
        "flavor": "A100-80G",
        "priority": "training",
        "image": "registry.local/ai/base:2026.11",
        "command": "python finetune.py --data /data --out $GPUPOOL_CHECKPOINT_DIR",
        "workers": 1,
        "gpus_per_worker": 8,
        "max_runtime_seconds": 86400,
        "checkpointing": True,
        "mounts": ["data"],
        "env": [{"name": "EPOCHS", "value": "3"}],
    },
}


def seed_templates(stdout) -> None:
    """One template shared with nlp-llm by its project admin, when it is missing."""
    from jobs.models import JobTemplate
    from jobs.templates_service import template_save
    from portal.demo import create_missing
    from portal.models import Project, User

    owner = User.objects.filter(username=DEMO_TEMPLATE["owner"]).first()
    project = Project.objects.filter(code=DEMO_TEMPLATE["project"]).first()
    if owner is None or project is None:
        return
    if JobTemplate.objects.filter(project=project, owner=owner, name=DEMO_TEMPLATE["name"]).exists():
        return
    made = create_missing(
        stdout,
        "job template",
        lambda: template_save(
            actor=owner,
            project=project,
            name=DEMO_TEMPLATE["name"],
            values=DEMO_TEMPLATE["values"],
            shared=True,
        ),
    )
    if made:
        stdout.write("jobs: a shared demo job template")
