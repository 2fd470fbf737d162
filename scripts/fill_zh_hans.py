"""Fill the zh-hans translations of the portal from its glossary (DESIGN §10 words).

    python scripts/fill_zh_hans.py locale/zh_Hans/LC_MESSAGES/django.po

Run after ``manage.py makemessages -l zh_Hans``, then ``compilemessages``. It prints the
messages that still need a translation here. Needs polib (in the test extra)."""

import sys

import polib

GLOSSARY = {
    'You already have %(n)d development jobs; stop one first.': '您已有 %(n)d 个开发调试任务，请先停止一个。',
    "%(amount)s of this quota is promised to loans; the quota cannot go below that.": "该配额中有 %(amount)s 已承诺借出，配额不能低于此数。",
    "%(f)s is not available for new jobs.": "%(f)s 不接受新任务。",
    "%(f)s is not shareable: ask for whole devices.": "%(f)s 不可共享：请申请整卡。",
    "%(f)s nodes have at most %(n)d devices; a worker must fit on one node.": "%(f)s 节点最多有 %(n)d 张卡；一个工作节点必须放在一台服务器上。",
    "%(flavor)s is not shareable: use whole units.": "%(flavor)s 不可共享：请使用整数。",
    "%(owner)s has quota %(q)s and %(lent)s already lent in this period; it cannot lend %(amount)s more.": "%(owner)s 配额为 %(q)s，此期间已借出 %(lent)s，不能再借出 %(amount)s。",
    "A %(state)s job cannot be cancelled.": "状态为 %(state)s 的任务不能取消。",
    "A department cannot be moved below itself or its own sub-department.": "部门不能移动到自身或其下级部门之下。",
    "A development job uses one device or slice.": "开发调试任务只使用一张卡或一个切片。",
    "A node cannot borrow from itself.": "不能向自己借用。",
    "A quota node belongs to exactly one department or project.": "配额节点必须且只能属于一个部门或项目。",
    "A shared request is 1–999 thousandths of one device.": "共享请求为单卡的 1–999 千分之一。",
    "A shared request is one worker with one device.": "共享请求只能是一个工作节点、一张卡。",
    "A window can lower the quota (%(q)s), not raise it.": "配额时段只能降低配额（%(q)s），不能提高。",
    "A window must override the quota, the lend limit, or both.": "配额时段必须覆盖配额或借出上限（或两者）。",
    "active": "启用",
    "Active": "生效中",
    "Admin": "管理后台",
    "all": "全部",
    "amount": "数量",
    "API": "API",
    "Auditor": "审计员",
    "Between 1 and %(n)d workers.": "工作节点数须在 1 到 %(n)d 之间。",
    "Between 1 and the number of workers.": "须在 1 到工作节点数之间。",
    "Between 60 s and 90 days.": "须在 60 秒到 90 天之间。",
    "borrow limit": "借用上限",
    "Borrow limit": "借用上限",
    "Borrowed": "借用中",
    "Cambricon": "寒武纪",
    "Cancelled": "已取消",
    "card fraction": "卡占比",
    "checkpointing": "断点(checkpoint)",
    "cluster": "集群",
    "Cluster": "集群",
    "clusters": "集群",
    "code": "编码",
    "command": "命令",
    "configuration": "配置",
    "Cordoned": "已隔离",
    "cost centre": "成本中心",
    "Dashboard": "仪表盘",
    "department": "部门",
    "Department / project": "部门 / 项目",
    "Department admin": "部门管理员",
    "departments": "部门",
    "Departments": "部门",
    "description": "描述",
    "Development": "开发调试",
    "Digits 0 (Monday) to 6, each once.": "数字 0（周一）到 6，每个最多一次。",
    "display name": "显示名称",
    "Down": "故障",
    "Effective quota": "有效配额",
    "Empty: all idle quota may be lent. 0: lends nothing.": "留空：空闲配额可全部借出；0：不借出。",
    "Empty: may borrow any idle capacity. 0: never borrows.": "留空：可借用任意空闲资源；0：不借用。",
    "end time": "结束时间",
    "ends at": "结束时间",
    "English": "英语",
    "Finance": "财务",
    "flavor": "资源规格",
    "Flavor": "资源规格",
    "flavors": "资源规格",
    "GPU count": "GPU 数量",
    "GPU milli": "GPU 千分比",
    "GPU pool": "GPU资源池",
    "GPUs": "GPU 数",
    "GPUs per worker": "每个工作节点 GPU 数",
    "grace period (s)": "宽限期（秒）",
    "Healthy capacity": "健康容量",
    "Healthy capacity %(c)s, pool overcommit ratio %(r)s.": "健康容量 %(c)s，资源池超发比例 %(r)s。",
    "Huawei Ascend": "华为昇腾",
    "Hygon DCU": "海光 DCU",
    "image": "镜像",
    "Inference": "推理",
    "Inventory": "资源清单",
    "Jobs": "任务",
    "Jobs may ask for gpu_milli < 1000 of one card (vGPU / HAMi / time-slicing).": "任务可申请单卡的 gpu_milli < 1000（vGPU / HAMi / 时间片）。",
    "kind": "类型",
    "Kubernetes resource": "Kubernetes 资源名",
    "Language": "语言",
    "last seen": "最后在线",
    "leaf": "Leaf 交换机",
    "Lend a positive amount.": "借出数量必须为正数。",
    "lend limit": "借出上限",
    "Lend limit": "借出上限",
    "Lender and borrower must hold quota of the same flavor.": "借出方与借入方必须是同一资源规格的配额。",
    "Lent": "借出",
    "loan": "借用",
    "loans": "借用",
    "Log out": "退出登录",
    "Lower-case letters, digits and '-', 1–63 characters, starting and ending with a letter or digit.": "小写字母、数字和 '-'，1–63 个字符，以字母或数字开头和结尾。",
    "maximum runtime (s)": "最长运行时间（秒）",
    "Member": "成员",
    "membership": "成员关系",
    "memberships": "成员关系",
    "memory (MiB)": "显存 (MiB)",
    "Metering and billing": "计量与计费",
    "MIG profile": "MIG 规格",
    "minimum workers": "最少工作节点数",
    "model": "型号",
    "Must be between 0 and 1,000,000.": "必须在 0 到 1,000,000 之间。",
    "name": "名称",
    "No departments visible.": "没有可见的部门。",
    "No projects visible.": "没有可见的项目。",
    "No quota visible.": "没有可见的配额。",
    "node": "节点",
    "nodes": "节点",
    "Nodes": "节点数",
    "none — ask an administrator for access": "无 — 请联系管理员开通权限",
    "Only a pending or active loan can be cancelled.": "只能取消待审批或生效中的借用。",
    "Only an empty department (no sub-departments, no projects) can be deleted.": "只能删除空部门（无下级部门、无项目）。",
    "Other": "其他",
    "overcommit ratio": "超发比例",
    "Overcommit ratio": "超发比例",
    "parent department": "上级部门",
    "Password": "密码",
    "Pending approval": "待审批",
    "platform": "平台",
    "Platform admin": "平台管理员",
    "pool overcommit ratio": "资源池超发比例",
    "Portal and tenancy": "门户与租户",
    "preemptible": "可抢占",
    "premium": "高端",
    "priority class": "优先级",
    "priority classes": "优先级",
    "project": "项目",
    "Project admin": "项目管理员",
    "projects": "项目",
    "Projects": "项目",
    "quota": "配额",
    "Quota": "配额",
    "quota node": "配额节点",
    "quota nodes": "配额节点",
    "Quota tree": "配额树",
    "quota window": "配额时段",
    "quota windows": "配额时段",
    "Ready": "就绪",
    "reason": "原因",
    "Rejected": "已驳回",
    "Resources and quotas": "资源与配额",
    "Returned": "已归还",
    "role": "角色",
    "shareable": "可共享",
    "Sign in": "登录",
    "Sign in to the GPU pool": "登录 GPU资源池",
    "Simplified Chinese": "简体中文",
    "Simulated cluster": "模拟集群",
    "Slurm GRES": "Slurm GRES",
    "spine": "Spine 交换机",
    "Spine": "Spine",
    "start time": "开始时间",
    "starts at": "开始时间",
    "state": "状态",
    "State": "状态",
    "Switch": "切换",
    "The lend limit cannot exceed the quota (%(q)s).": "借出上限不能超过配额（%(q)s）。",
    "The loan must end after it starts.": "借用结束时间必须晚于开始时间。",
    "The never-lent parts (quota − lend limit) of %(where)s's children for %(flavor)s would add up to %(total)s, above its quota %(quota)s: they cannot be oversold.": "%(where)s 下级在 %(flavor)s 上不可借出的部分（配额 − 借出上限）合计将为 %(total)s，超过其配额 %(quota)s：这部分不能超发。",
    "the pool": "资源池",
    "The quotas of %(where)s's children for %(flavor)s would add up to %(total)s, above its overcommit ratio %(ratio)s × quota %(quota)s = %(limit)s.": "%(where)s 下级在 %(flavor)s 上的配额合计将为 %(total)s，超过其超发比例 %(ratio)s × 配额 %(quota)s = %(limit)s。",
    "This quota has loans on record; set its quota to 0 instead.": "该配额存在借用记录，请改为将配额设为 0。",
    "This role applies to the whole platform; give no scope.": "该角色作用于整个平台，请勿指定范围。",
    "This role is granted on a department (and only a department).": "该角色只能授予在部门上。",
    "This role is granted on a project (and only a project).": "该角色只能授予在项目上。",
    "This user already holds this role here.": "该用户在此已拥有该角色。",
    "Times are shown in %(zone)s.": "时间按 %(zone)s 时区显示。",
    "Training": "训练",
    "Unknown user or wrong password.": "用户名不存在或密码错误。",
    "Use 1–40 letters, digits, '.', '_' or '-', starting with a letter or digit.": "请使用 1–40 个字母、数字、'.'、'_' 或 '-'，并以字母或数字开头。",
    "Used": "已用",
    "Username": "用户名",
    "value": "数值",
    "vendor": "厂商",
    "Vendor": "厂商",
    "weekdays": "星期",
    "workers": "工作节点数",
    "You do not have permission to change this.": "您无权修改此项。",
    "Your roles": "您的角色",
    "Your username and password didn't match. Please try again.": "用户名与密码不匹配，请重试。",
    "zone": "可用区",
    "Zone": "可用区",
    # issue 32 items 17-22 (helper h4); the native app's name (issue 31) was not in the catalogue yet
    "Native workloads": "原生作业",
    "Clusters": "集群",
    'A string: send a number in quotes, e.g. "5".': '应为字符串：数字请加引号发送，例如 "5"。',
    "Too many test messages: try again in %(n)d seconds.": "测试消息发送过多：请在 %(n)d 秒后重试。",
    "Not a PromQL query the portal can read: %(error)s.": "门户无法解析该 PromQL 查询：%(error)s。",
    (
        "Every series the query reads must be the job's own: %(selector)s is not. Give each "
        'selector a matcher such as hpc_job="{job}", job="{job}", pod=~"{job}-.*" or '
        'job_id="{job_id}".'
    ): (
        "查询读取的每条序列都必须属于本作业：%(selector)s 不是。请为每个选择器加上匹配条件，例如 "
        'hpc_job="{job}"、job="{job}"、pod=~"{job}-.*" 或 job_id="{job_id}"。'
    ),
    "the query reads series that are not the job's own: not asked": "查询会读取不属于本作业的序列：未向 Prometheus 查询",
    "%(name)s: %(secret)s is not a secret of project %(project)s.": "%(name)s：%(secret)s 不是项目 %(project)s 声明的密钥。",
    "secret %(secret)s is not declared for project %(project)s": "密钥 %(secret)s 未在项目 %(project)s 中声明",
    "Secret name": "Secret 名称",
    "The Kubernetes Secret's name in the jobs' namespace (lower-case letters, digits, '-', '.').": (
        "作业命名空间中 Kubernetes Secret 的名称（小写字母、数字、'-'、'.'）。"
    ),
    "What it holds, for the project's users.": "其中存放的内容，供项目用户参考。",
    "project secret": "项目密钥",
    "project secrets": "项目密钥",
    "Secrets your projects declare: %(list)s.": "您的项目声明的密钥：%(list)s。",
    "Your projects declare no secrets yet: a platform admin declares them.": "您的项目尚未声明密钥：由平台管理员声明。",
    (
        'Jobs never run in %(namespace)s: it holds the portal\'s own secrets. Give "namespace" '
        "another value (the default is %(default)s)."
    ): (
        '作业不会在 %(namespace)s 中运行：该命名空间存放门户自身的密钥。请为 "namespace" 指定其他值'
        "（默认为 %(default)s）。"
    ),
}


def fill(path: str) -> list[str]:
    po = polib.pofile(path)
    missing = []
    for entry in po:
        if entry.msgid in GLOSSARY:
            entry.msgstr = GLOSSARY[entry.msgid]
            if "fuzzy" in entry.flags:
                entry.flags.remove("fuzzy")
        elif not entry.msgstr:
            missing.append(entry.msgid)
    po.metadata["Content-Type"] = "text/plain; charset=UTF-8"
    po.metadata["Language"] = "zh_Hans"
    po.save()
    return missing


if __name__ == "__main__":
    untranslated = fill(sys.argv[1])
    print("\n".join(untranslated) or "all messages translated")
    sys.exit(1 if untranslated else 0)
