"""Demo tenancy: departments with sub-departments, projects, and a user for every role.

Every part of the demo seed (this one and ``quotas``/``jobs``/``billing``'s) creates only what is
missing and never changes a row that exists: ``make demo`` runs the seed at every start, and what
users changed in the running demo (a moved department, an approved quota, an edited priority
class) must stand after a restart. Rows are found by their natural key (code, name, owner and
flavor), so a row deleted in the demo comes back at the next start; a renamed *code* is a new row.
"""

from django.core.exceptions import ValidationError
from django.db import transaction

from .models import Department, DirectoryRule, Membership, Project, Role, User

DEMO_PASSWORD = "gpupool-demo"  # noqa: S105 - printed by `make demo`; demo data only

# code, name, parent code, cost centre
DEPARTMENTS = [
    ("ai", "AI Research / 人工智能研究院", None, "CC-1001"),
    ("ai-nlp", "NLP Lab / 自然语言处理实验室", "ai", "CC-1001"),
    ("ai-cv", "Vision Lab / 计算机视觉实验室", "ai", "CC-1002"),
    ("ad", "Autonomous Driving / 自动驾驶事业部", None, "CC-2001"),
    ("ad-perc", "Perception / 感知组", "ad", "CC-2001"),
    ("ad-sim", "Simulation / 仿真组", "ad", "CC-2002"),
    ("svc", "Online Services / 在线服务部", None, "CC-3001"),
    ("svc-inf", "Inference Platform / 推理平台组", "svc", "CC-3001"),
    ("plat", "Platform Engineering / 平台工程部", None, "CC-4001"),
]

# code, name, department code
PROJECTS = [
    ("nlp-llm", "LLM pre-training / 大模型预训练", "ai-nlp"),
    ("nlp-asr", "Speech recognition / 语音识别", "ai-nlp"),
    ("cv-detect", "Detection / 目标检测", "ai-cv"),
    ("cv-gen", "Image generation / 图像生成", "ai-cv"),
    ("ad-bev", "BEV perception / BEV 感知", "ad-perc"),
    ("ad-replay", "Scenario replay / 场景回放", "ad-sim"),
    ("svc-rank", "Search ranking / 搜索排序", "svc-inf"),
    ("svc-chat", "Chat assistant / 智能客服", "svc-inf"),
    ("plat-bench", "Hardware benchmarks / 硬件评测", "plat"),
]

# username, display name, [(role, scope code or None)]
USERS = [
    ("admin", "Platform Admin / 平台管理员", [(Role.PLATFORM_ADMIN, None)]),
    ("auditor", "Auditor / 审计员", [(Role.AUDITOR, None)]),
    ("ai-admin", "Wang Fang / 王芳", [(Role.DEPARTMENT_ADMIN, "ai")]),
    ("ad-admin", "Li Qiang / 李强", [(Role.DEPARTMENT_ADMIN, "ad")]),
    ("svc-admin", "Zhao Min / 赵敏", [(Role.DEPARTMENT_ADMIN, "svc")]),
    ("ai-finance", "Chen Jing / 陈静", [(Role.FINANCE, "ai")]),
    (
        "finance",
        "Finance Office / 财务处",
        [(Role.FINANCE, "ai"), (Role.FINANCE, "ad"), (Role.FINANCE, "svc"), (Role.FINANCE, "plat")],
    ),
    ("nlp-lead", "Liu Yang / 刘洋", [(Role.PROJECT_ADMIN, "nlp-llm")]),
    ("alice", "Alice Zhang / 张爱丽", [(Role.MEMBER, "nlp-llm"), (Role.MEMBER, "nlp-asr")]),
    ("bob", "Bob Sun / 孙博", [(Role.MEMBER, "cv-detect")]),
    ("carol", "Carol Zhou / 周卡", [(Role.MEMBER, "ad-bev")]),
    ("dave", "Dave Wu / 吴迪", [(Role.MEMBER, "svc-chat")]),
    ("outsider", "Outsider / 访客", []),
]


# The demo directory's groups (deploy/ldap/demo.ldif) → roles (DESIGN §12).
DIRECTORY_RULES = [
    ("cn=nlp-researchers,ou=groups,dc=centre,dc=example", Role.MEMBER, "nlp-llm"),
    ("cn=cv-researchers,ou=groups,dc=centre,dc=example", Role.MEMBER, "cv-detect"),
]


def create_missing(stdout, what: str, create):
    """Make one missing demo row through its validated service, in a savepoint. When the service
    refuses it (users changed the quotas around it since the last start) the seed goes on
    without it and says why, rather than stopping the demo from starting; the savepoint drops
    whatever the refused call had written. Returns the created object, or None."""
    try:
        with transaction.atomic():
            return create()
    except ValidationError as error:
        stdout.write(f"warning: demo {what} left out: {' '.join(error.messages)}")
        return None


def seed(stdout) -> None:
    departments: dict[str, Department] = {}
    for code, name, parent, cost_centre in DEPARTMENTS:
        departments[code], _ = Department.objects.get_or_create(
            code=code, defaults={"name": name, "parent": departments.get(parent), "cost_centre": cost_centre}
        )
    projects: dict[str, Project] = {}
    for code, name, dept in PROJECTS:
        projects[code], _ = Project.objects.get_or_create(
            code=code, defaults={"name": name, "department": departments[dept]}
        )
    made = 0
    for username, display_name, roles in USERS:
        user, created = User.objects.get_or_create(username=username, defaults={"display_name": display_name})
        if not created:
            continue  # an existing user's roles are the admins' to change, not the seed's
        user.set_password(DEMO_PASSWORD)
        user.save()
        made += 1
        for role, scope in roles:
            target = (
                {"department": departments[scope]}
                if scope in departments
                else ({"project": projects[scope]} if scope else {})
            )
            Membership.objects.create(user=user, role=role, **target)
    for group, role, project in DIRECTORY_RULES:
        DirectoryRule.objects.get_or_create(directory="ldap", group=group, role=role, project=projects[project])
    stdout.write(
        f"tenancy: {len(departments)} departments, {len(projects)} projects, {len(USERS)} users "
        f"({made} new)"
    )
