#!/usr/bin/env python3
"""gpupool — submit and follow jobs on a gpupool portal from a shell or a script.

Standard library only: copy this one file anywhere with Python 3.10+.

    export GPUPOOL_URL=http://127.0.0.1:8000
    export GPUPOOL_TOKEN=$(python3 gpupool_cli.py token -u alice)    # asks for the password
    python3 gpupool_cli.py submit --project nlp-llm --flavor A100-80G --gpus 1 \\
        --priority training --image pytorch:2.3 --name my-first-job --sim-duration 600
    python3 gpupool_cli.py jobs --state queued
    python3 gpupool_cli.py status 42 --wait 300          # position and "why pending" while queued
    python3 gpupool_cli.py cancel 42
    python3 gpupool_cli.py submit ... --array 0-99%10     # 100 tasks, at most 10 running at once
    python3 gpupool_cli.py submit ... --dependency after_ok:42   # waits until job 42 succeeds
    python3 gpupool_cli.py array 7                        # an array's tasks; --cancel cancels them
    python3 gpupool_cli.py submit --kind inference --workers 4 --min-workers 1 ... \\
        --autoscale-query 'avg(rps{job="{job}"})' --autoscale-target 10   # scales from load
    python3 gpupool_cli.py scale 42 3                    # an inference service to 3 replicas
    python3 gpupool_cli.py autoscale 42 --query 'avg(rps{job="{job}"})' --target 10
    python3 gpupool_cli.py autoscale 42                  # its autoscaling and last decision
    python3 gpupool_cli.py cost --project nlp-llm        # this month's estimate (finance/admins)
    python3 gpupool_cli.py approvals list                # requests waiting for my decision
    python3 gpupool_cli.py approvals show 12             # one request, with its context
    python3 gpupool_cli.py approvals approve 12 -m "ok for this month"
    python3 gpupool_cli.py usage --start 2026-11-01 --end 2026-12-01 --group-by department,user
    python3 gpupool_cli.py quota --flavor A100-80G        # the quota tree: quota, used, borrowed, lent
    python3 gpupool_cli.py logs 42 --tail-bytes 4096 --follow

Every command takes --json (before the command) to print the API's answer as it is. Exit
status: 0 ok, 1 the portal refused (its message is printed) or the input is incomplete, 2 bad
usage. The API itself: docs/api.md.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from fractions import Fraction
from pathlib import Path

TERMINAL = {"succeeded", "failed", "cancelled", "rejected", "expired"}
JOB_FIELDS = (
    "name",
    "project",
    "kind",
    "flavor",
    "workers",
    "gpus_per_worker",
    "gpu_milli",
    "min_workers",
    "priority",
    "image",
    "command",
    "max_runtime_seconds",
    "checkpointing",
    "max_retries",
    "sim_duration_seconds",
    "autoscale",
    "cpu_millicores",
    "memory_mib",
    "local_disk_gib",
    "min_cuda_version",
)


class ApiError(Exception):
    """The portal answered with an error status; ``body`` is its JSON (or text) answer."""

    def __init__(self, status: int, body):
        super().__init__(f"HTTP {status}: {json.dumps(body, ensure_ascii=False)}")
        self.status, self.body = status, body


def _api_error(err: urllib.error.HTTPError) -> ApiError:
    """The portal's refusal: its JSON detail, or the start of whatever else it answered."""
    raw = err.read()
    try:
        detail = json.loads(raw)
    except ValueError:
        detail = raw.decode(errors="replace")[:500]
    return ApiError(err.code, detail)


class Client:
    def __init__(self, url: str, token: str | None = None, timeout: float = 30):
        if not url.startswith(("http://", "https://")):  # urllib would also open file: URLs
            raise SystemExit(f"gpupool: GPUPOOL_URL must be http:// or https://, not {url!r}")
        self.url, self.token, self.timeout = url.rstrip("/"), token, timeout

    def request(self, method: str, path: str, body: dict | None = None, query: dict | None = None):
        target = self.url + path
        if query:
            target += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v not in (None, "")})
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Token {self.token}"
        req = urllib.request.Request(target, data=data, method=method, headers=headers)  # noqa: S310
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - scheme checked
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raise _api_error(err) from None
        return json.loads(raw) if raw else None

    def raw(self, path: str, out) -> None:
        """Copy a non-JSON answer (a log download) to the binary file ``out`` as it streams."""
        headers = {"Authorization": f"Token {self.token}"} if self.token else {}
        req = urllib.request.Request(self.url + path, headers=headers)  # noqa: S310 - scheme checked
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                while chunk := resp.read(64 * 1024):
                    out.write(chunk)
        except urllib.error.HTTPError as err:
            raise _api_error(err) from None

    def get(self, path: str, **query):
        return self.request("GET", path, query=query)

    def post(self, path: str, body: dict | None = None):
        return self.request("POST", path, body=body if body is not None else {})

    def put(self, path: str, body: dict):
        return self.request("PUT", path, body=body)

    def all_pages(self, path: str, **query) -> list[dict]:
        rows, page = [], 1
        while True:
            answer = self.get(path, page=page, **query)
            rows += answer["results"]
            if not answer.get("next"):
                return rows
            page += 1


# --- helpers ----------------------------------------------------------------------------------


def project_id(client: Client, project: str) -> int:
    """A project given by id or by code (``nlp-llm``)."""
    if project.isdigit():
        return int(project)
    found = client.get("/api/v1/projects/", code=project)["results"]
    if not found:
        raise SystemExit(f"gpupool: no visible project with code {project!r}")
    return found[0]["id"]


def department_id(client: Client, department: str) -> int:
    if department.isdigit():
        return int(department)
    found = client.get("/api/v1/departments/", code=department)["results"]
    if not found:
        raise SystemExit(f"gpupool: no visible department with code {department!r}")
    return found[0]["id"]


def load_file(path: str) -> dict:
    """A job description in JSON, or YAML when PyYAML is installed."""
    text = Path(path).read_text()
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise SystemExit("gpupool: reading YAML needs PyYAML (pip install pyyaml); or use JSON") from None
        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise SystemExit(f"gpupool: {path} must hold one object with the job's fields")
    unknown = sorted(set(data) - set(JOB_FIELDS))
    if unknown:
        raise SystemExit(f"gpupool: unknown field(s) in {path}: {', '.join(unknown)}")
    return data


def table(rows: list[list], header: list[str]) -> str:
    cells = [header, *[["" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def show(args, data, text: str) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else text)


def devices(job: dict) -> str:
    count = (job.get("granted_workers") or job["workers"]) * job["gpus_per_worker"]
    return f"{count}×{job['gpu_milli']}‰" if job.get("gpu_milli") else str(count)


# --- commands ---------------------------------------------------------------------------------


def cmd_token(client: Client, args) -> int:
    username = args.username or os.environ.get("GPUPOOL_USERNAME") or input("username: ")
    password = args.password or os.environ.get("GPUPOOL_PASSWORD") or getpass.getpass("password: ")
    answer = client.post("/api/v1/auth/token/", {"username": username, "password": password})
    show(args, answer, answer["token"])
    return 0


def submission(client: Client, args) -> dict:
    body = load_file(args.file) if args.file else {}
    flags = {
        "name": args.name,
        "kind": args.kind,
        "flavor": args.flavor,
        "workers": args.workers,
        "gpus_per_worker": args.gpus,
        "gpu_milli": args.gpu_milli,
        "min_workers": args.min_workers,
        "priority": args.priority,
        "image": args.image,
        "command": args.command,
        "max_runtime_seconds": args.max_runtime,
        "max_retries": args.max_retries,
        "sim_duration_seconds": args.sim_duration,
        "cpu_millicores": args.cpu_millicores,
        "memory_mib": args.memory_mib,
        "local_disk_gib": args.local_disk_gib,
        "min_cuda_version": args.min_cuda_version,
        "array": args.array,
    }
    body.update({k: v for k, v in flags.items() if v is not None})
    if args.dependency is not None:
        body["dependencies"] = dependencies(args.dependency)
    if args.checkpointing:
        body["checkpointing"] = True
    autoscale = {
        "query": args.autoscale_query,
        "target": args.autoscale_target,
        "cooldown_seconds": args.autoscale_cooldown,
    }
    if any(v is not None for v in autoscale.values()):  # laid over the file's autoscale, if any
        given = {k: v for k, v in autoscale.items() if v is not None}
        body["autoscale"] = {**(body.get("autoscale") or {}), **given}
    if args.project is not None:
        body["project"] = args.project
    if isinstance(body.get("project"), str):
        body["project"] = project_id(client, body["project"])
    body.setdefault("kind", "training")
    missing = [f for f in ("name", "project", "flavor", "priority", "image") if f not in body]
    if missing:
        raise SystemExit(f"gpupool: submit needs {', '.join('--' + m for m in missing)} (or --file)")
    return body


# Slurm's names of the dependency conditions, read as the portal's (--dependency afterok:12).
SLURM_CONDITIONS = {"afterok": "after_ok", "afterany": "after_any", "afternotok": "after_not_ok"}


def dependencies(text: str) -> list[dict]:
    """``after_ok:12,after_any:13`` (or Slurm's ``afterok:12:13``) as the API's list; the portal
    checks the conditions and the jobs."""
    out = []
    for item in text.split(","):
        condition, _sep, ids = item.strip().partition(":")
        condition = SLURM_CONDITIONS.get(condition.lower(), condition.lower())
        out.extend({"condition": condition, "job": job} for job in (ids.split(":") if ids else [""]))
    return out


def cmd_submit(client: Client, args) -> int:
    job = client.post("/api/v1/jobs/", submission(client, args))
    if job.get("array") is not None:
        array = client.get(f"/api/v1/arrays/{job['array']}/")
        first, last = array["tasks"][0]["id"], array["tasks"][-1]["id"]
        cap = f", at most {array['max_running']} running at once" if array["max_running"] else ""
        text = f"array {array['id']} {array['name']}: {array['size']} tasks{cap} (jobs {first}–{last})"
        show(args, job, text)
        return 0
    show(args, job, f"job {job['id']} {job['name']}: {job['state']}")
    return 0


def cmd_array(client: Client, args) -> int:
    if args.cancel:
        answer = client.post(f"/api/v1/arrays/{args.id}/cancel/", {})
        show(args, answer, f"array {args.id}: {answer['cancelled']} tasks cancelled")
        return 0
    array = client.get(f"/api/v1/arrays/{args.id}/")
    states = ", ".join(f"{state} {n}" for state, n in sorted(array["states"].items()))
    rows = [[t["index"], t["id"], t["state"], t["exit_code"] if t["exit_code"] is not None else "—"]
            for t in array["tasks"]]
    text = f"array {array['id']} {array['name']} [{array['spec']}]: {states}\n"
    show(args, array, text + table(rows, ["index", "job", "state", "exit"]))
    return 0


def cmd_jobs(client: Client, args) -> int:
    query = {"state": args.state, "kind": args.kind}
    if args.project:
        query["project"] = project_id(client, args.project)
    answer = client.get("/api/v1/jobs/", page_size=args.limit, **query)
    codes = project_codes(client)
    rows = [
        [
            j["id"],
            j["name"],
            codes.get(j["project"], j["project"]),
            j["kind"],
            j["flavor"],
            devices(j),
            j["state"],
            j["submitted_at"][:19],
        ]
        for j in answer["results"]
    ]
    header = ["id", "name", "project", "kind", "flavor", "gpus", "state", "submitted"]
    show(args, answer, table(rows, header) + f"\n({len(rows)} of {answer['count']})")
    return 0


def project_codes(client: Client) -> dict[int, str]:
    return {p["id"]: p["code"] for p in client.all_pages("/api/v1/projects/")}


def metered_card_hours(job: dict, events: list[dict], card_fraction: str) -> dict[str, float]:
    """Card-hours per tier as the meter counts them (docs/billing.md): from each transition into
    ``running`` to the transition out of it, at the instants the portal recorded, times the
    workers granted at admission (or scaled to) × GPUs per worker × the card fraction ("1/7":
    kept exact, so seven slices are one card)."""
    per_worker = job["gpus_per_worker"] * Fraction(card_fraction) * Fraction(job["gpu_milli"] or 1000, 1000)
    hours = {"standard": 0.0, "on_loan": 0.0}
    workers, on_loan, opened = job["workers"], False, None

    def close(at: datetime) -> None:
        if opened is not None:
            hours["on_loan" if on_loan else "standard"] += (
                float(workers * per_worker) * (at - opened).total_seconds() / 3600
            )

    for event in events:
        at, data = datetime.fromisoformat(event["at"]), event.get("data") or {}
        if event["kind"] == "transition" and event["to_state"] == "running":
            opened = opened or at
        elif event["kind"] == "transition" and event["from_state"] == "running":
            close(at)
            opened = None
        elif event["kind"] == "transition" and event["to_state"] == "admitted":
            workers, on_loan = data.get("workers") or job["workers"], bool(data.get("on_loan"))
        elif event["kind"] in ("on_loan", "scaled"):  # a new segment starts here
            close(at)
            opened = at if opened is not None else None
            workers = data.get("workers") or workers
            on_loan = on_loan if data.get("on_loan") is None else bool(data["on_loan"])
    if opened is not None:
        close(datetime.now(opened.tzinfo))
    return hours


def describe(job: dict, explain: dict | None, project: str, hours: dict[str, float] | None) -> str:
    lines = [
        f"job {job['id']} {job['name']}  state: {job['state']}",
        f"  project {project} · {job['kind']} · {job['flavor']} · gpus {devices(job)}"
        f" · priority {job['priority']}",
        f"  submitted {job['submitted_at']}  started {job['started_at'] or '—'}"
        f"  finished {job['finished_at'] or '—'}",
    ]
    if job.get("on_loan") is not None:
        lines.append("  on loan (may be reclaimed)" if job["on_loan"] else "  in quota")
    if job.get("approval_request"):
        lines.append(f"  approval request #{job['approval_request']}")
    if hours and any(hours.values()):
        split = ", ".join(f"{tier} {value:.6f}" for tier, value in hours.items() if value)
        lines.append(
            f"  card-hours so far {sum(hours.values()):.6f} ({split}; priced per tier on the statement)"
        )
    if explain and job["state"] == "queued":
        lines.append(f"  position {explain.get('position')} · why pending: {explain.get('reason')}")
        why = explain.get("text") or explain.get("message")  # the sentence for people, when there is one
        if why:
            lines.append(f"    {why}")
    if explain and job["state"] == "queued":
        lines.append(f"  {start_line(explain.get('start_estimate'))}")
    return "\n".join(lines)


def start_line(estimate: dict | None) -> str:
    """``estimated start 2026-12-05T09:00:00+08:00`` or ``estimated start unknown (reason)``
    (issue 24: running jobs assumed to run to their maximum runtime, nothing else arriving)."""
    if not estimate:
        return "estimated start unknown (not estimated yet)"
    if estimate.get("estimated_start"):
        return f"estimated start {estimate['estimated_start']}"
    why = estimate.get("unknown_text") or estimate.get("unknown_reason") or "?"
    return f"estimated start unknown ({why})"


def cmd_status(client: Client, args) -> int:
    deadline = time.monotonic() + args.wait
    while True:
        job = client.get(f"/api/v1/jobs/{args.id}/")
        explain = client.get(f"/api/v1/jobs/{args.id}/explain/") if job["state"] == "queued" else None
        if job["state"] in TERMINAL or time.monotonic() >= deadline:
            break
        if args.wait and not args.json:
            print(
                f"… {job['state']}"
                + (f" (position {explain.get('position')}, {explain.get('reason')})" if explain else "")
                + (f", {start_line(explain.get('start_estimate'))}" if explain else ""),
                file=sys.stderr,
            )
        time.sleep(args.interval)
    if args.json:
        show(args, {"job": job, "explain": explain}, "")
        return 0
    fractions = {
        f["name"]: f"{f['fraction_numerator']}/{f['fraction_denominator']}"
        for f in client.all_pages("/api/v1/flavors/")
    }
    events = client.get(f"/api/v1/jobs/{args.id}/events/")
    hours = metered_card_hours(job, events, fractions[job["flavor"]]) if job["flavor"] in fractions else None
    project = project_codes(client).get(job["project"], str(job["project"]))
    print(describe(job, explain, project, hours))
    return 0


def cmd_cancel(client: Client, args) -> int:
    job = client.post(f"/api/v1/jobs/{args.id}/cancel/")
    show(args, job, f"job {job['id']} {job['name']}: {job['state']}")
    return 0


def cmd_scale(client: Client, args) -> int:
    job = client.post(f"/api/v1/jobs/{args.id}/scale/", {"replicas": args.replicas})
    target = job["target_workers"] or job["workers"]
    text = table(
        [[job["id"], job["state"], len(job["placement"]), target, job["min_workers"], job["workers"]]],
        ["ID", "STATE", "REPLICAS", "TARGET", "MIN", "MAX"],
    )
    show(args, job, text)
    return 0


def describe_autoscale(a: dict) -> str:
    target = a["target_workers"] or a["workers"]
    rows = [
        ["autoscaling", "on" if a["enabled"] else "off"],
        ["replicas", f"{a['replicas']} (target {target}, min {a['min_workers']}, max {a['workers']})"],
    ]
    if a["enabled"]:
        rows += [
            ["query", a["filled_query"]],
            ["target per replica", a["target"]],
            ["cool-down", f"{a['cooldown_seconds']} s"],
            ["last change", a["last_scaled_at"] or "-"],
        ]
    status = a.get("status")
    if status:
        rows += [
            ["value per replica", "-" if status["value"] is None else status["value"]],
            ["desired", status["desired"]],
            ["decided", status["decided_at"]],
            ["why", status["reason"]],
        ]
    return table(rows, ["JOB", str(a["job"])])


def cmd_autoscale(client: Client, args) -> int:
    path = f"/api/v1/jobs/{args.id}/autoscale/"
    if args.off:
        answer = client.put(path, {"query": ""})
    elif args.query is not None or args.target is not None or args.cooldown is not None:
        current = client.get(path)
        body = {
            "query": current["query"] if args.query is None else args.query,
            "target": current["target"] if args.target is None else args.target,
            "cooldown_seconds": current["cooldown_seconds"] if args.cooldown is None else args.cooldown,
        }
        answer = client.put(path, body)
    else:
        answer = client.get(path)
    show(args, answer, describe_autoscale(answer))
    return 0


def cost_answer(client: Client, args) -> tuple[str, list[dict]]:
    """This month (or --month): the estimate while it is open, the statements once closed."""
    query = {"month": args.month}
    if args.department:
        query["department"] = department_id(client, args.department)
    if args.month:  # a closed month has statements; the estimate refuses it
        closed = [s for s in client.all_pages("/api/v1/statements/", **query) if s["state"] == "closed"]
        if closed:
            return "closed", [client.get(f"/api/v1/statements/{s['id']}/") for s in closed]
    return "estimate", client.get("/api/v1/statements/estimate/", **query)


def names_for_estimate(client: Client) -> dict[str, dict]:
    return {
        "projects": {p["id"]: p["code"] for p in client.all_pages("/api/v1/projects/")},
        "flavors": {f["id"]: f["name"] for f in client.all_pages("/api/v1/flavors/")},
    }


def cmd_cost(client: Client, args) -> int:
    try:
        kind, statements = cost_answer(client, args)
    except ApiError as err:
        if err.status == 404:
            raise SystemExit(
                "gpupool: your roles see no costs (finance, department admins, platform admins "
                "and auditors do); card-hours are on the reports page"
            ) from None
        raise
    wanted = project_id(client, args.project) if args.project else None
    names = names_for_estimate(client) if kind == "estimate" else None
    rows, total = [], 0.0
    for st in statements:
        for line in st["lines"]:
            if wanted is not None and line["project"] != wanted:
                continue
            amount = line["amount"]
            total += float(amount or 0)
            if names is not None:  # estimate lines carry ids; statements carry codes and names
                line = {
                    **line,
                    "project_code": names["projects"].get(line["project"], line["project"]),
                    "flavor": names["flavors"].get(line["flavor"], line["flavor"]),
                    "user": line.get("username") or line["user"],
                }
            rows.append(
                [
                    st["month"],
                    st["department_code"],
                    line["project_code"],
                    line["user"],
                    line["flavor"],
                    line["tier"],
                    line["card_hours"],
                    amount or "unpriced",
                ]
            )
    result = {
        "kind": kind,
        "project": wanted,
        "total": f"{total:.2f}",
        "lines": rows,
        "statements": statements,
    }
    header = ["month", "department", "project", "user", "flavor", "tier", "card_hours", "amount"]
    through = ", ".join(sorted({str(s.get("metered_through")) for s in statements if "metered_through" in s}))
    note = f"estimate, metered through {through}" if kind == "estimate" else "closed statements"
    show(args, result, table(rows, header) + f"\ntotal {total:.2f} ({note})")
    return 0


def step_label(step: dict | None) -> str:
    if not step:
        return "—"
    who = (
        "platform admins"
        if step["approver_role"] == "platform_admin"
        else (f"admins of {step.get('department_name') or step.get('department')}")
    )
    return f"step {step['order']}: {who}"


def cmd_approvals_list(client: Client, args) -> int:
    """My pending steps: the requests waiting for my decision (``?inbox=1``), newest first."""
    query = {"inbox": "1", "kind": args.kind}
    answer = client.get("/api/v1/approvals/", page_size=args.limit, **query)
    codes = project_codes(client) if answer["results"] else {}
    rows = [
        [
            a["id"],
            a["kind"],
            a["requester"],
            codes.get(a["project"], a["project"] or "—"),
            (a["current_step"] or {}).get("deadline", "")[:16].replace("T", " ") or "—",
            a["summary"],
        ]
        for a in answer["results"]
    ]
    header = ["id", "kind", "requester", "project", "deadline", "summary"]
    show(args, answer, table(rows, header) + f"\n({len(rows)} of {answer['count']} waiting for you)")
    return 0


def describe_context(ctx: dict | None) -> list[str]:
    """The figures an approver weighs the request against (docs/approvals.md)."""
    if not ctx:
        return ["  context: not shown to you (approvers, the department's admins and finance see it)"]
    lines = ["  context (now):"]
    flavor = ctx.get("flavor")
    for row in ctx.get("usage") or []:
        role = "" if row["role"] == "owner" else f" ({row['role']})"
        lines.append(
            f"    {flavor} of {row['owner']}{role}: quota {row['quota']} (effective {row['effective_quota']})"
            f" · in quota {row['in_quota']} · borrowed {row['borrowed']}"
        )
    mine = ctx.get("requester_usage")
    if mine:
        lines.append(
            f"    requester's own jobs there: in quota {mine['in_quota']} · borrowed {mine['borrowed']}"
        )
    cap = ctx.get("capacity")
    if cap:
        lines.append(f"    {flavor} free now: {cap['free']} of {cap['healthy']} healthy ({cap['held']} held)")
    cost = ctx.get("cost")
    if cost:
        basis = {
            "job": "up to its maximum runtime",
            "quota_month": "a month of the added quota",
            "loan": "the loan's whole period",
        }.get(cost["basis"], cost["basis"])
        if cost["card_hours"] is None:
            lines.append("    estimated cost: unbounded (no maximum runtime)")
        else:
            money = f"{cost['amount']} {cost['currency']}" if cost["amount"] is not None else "no rate"
            lines.append(f"    estimated cost: {money} ({cost['card_hours']} card-hours, {basis})")
    for b in ctx.get("budgets") or []:
        left = []
        if b.get("remaining") is not None:
            left.append(f"{b['remaining']} of {b['card_hours']} card-hours")
        if b.get("amount") is not None:
            left.append(f"{b['remaining_amount']} of {b['amount']} {b['currency']}")
        lines.append(
            f"    budget {b['owner']} ({b['of']}) {b['month']}: {' and '.join(left)} left"
            f" ({b['percent']} % used)"
        )
    h = ctx.get("history")
    if h:
        lines.append(
            f"    requester's last {h['days']} days: {h['approved']} approved, {h['rejected']} rejected,"
            f" {h.get('jobs_run', 0)} jobs run, {h.get('jobs_idle', 0)} flagged idle"
        )
    return lines


def cmd_approvals_show(client: Client, args) -> int:
    a = client.get(f"/api/v1/approvals/{args.id}/")
    lines = [
        f"request {a['id']} {a['kind']}: {a['summary']}  state: {a['state']}",
        f"  requested by {a['requester']} at {a['created_at'][:16].replace('T', ' ')}",
    ]
    if a.get("reason"):
        lines.append(f"  reason: {a['reason']}")
    if a["state"] == "pending":
        lines.append(
            f"  waiting for {step_label(a['current_step'])}"
            + (" — you may decide it" if a["can_decide"] else "")
        )
    lines += describe_context(a.get("context"))
    show(args, a, "\n".join(lines))
    return 0


def cmd_approvals_decide(client: Client, args) -> int:
    approve = args.decision == "approve"
    a = client.post(
        f"/api/v1/approvals/{args.id}/decide/", {"approve": approve, "comment": args.message or ""}
    )
    if a["state"] == "pending":
        text = f"request {a['id']}: your step is approved; now waiting for {step_label(a['current_step'])}"
    else:
        text = f"request {a['id']}: {a['state']}"
    show(args, a, text)
    return 0


USAGE_HEADER = ["card_hours", "normalised", "cost", "util_%", "jobs", "wait_avg_min", "wait_p95_min"]


def cmd_usage(client: Client, args) -> int:
    """The usage explorer (``sacct``/``sreport`` of the portal): [start, end) in the site time
    zone grouped by one or two of department, project, user, flavor, kind, priority."""
    answer = client.get("/api/v1/usage/", start=args.start, end=args.end, group_by=args.group_by)
    dims = answer["group_by"]

    def line(labels: list[str], row: dict) -> list:
        return [
            *labels,
            row["card_hours"],
            row["normalised_card_hours"],
            row["cost"] if row["cost"] is not None else "-",
            row["utilisation_pct"] if row["utilisation_pct"] is not None else "-",
            row["jobs_started"],
            "-" if row["wait_mean_minutes"] is None else f"{row['wait_mean_minutes']:.1f}",
            "-" if row["wait_p95_minutes"] is None else f"{row['wait_p95_minutes']:.1f}",
        ]

    rows = [line([r["labels"][d] for d in dims], r) for r in answer["rows"]]
    rows.append(line(["total", *[""] * (len(dims) - 1)], answer["total"]))
    currency = f", cost in {answer['currency']}" if answer["currency"] else ", no costs for your roles"
    note = f"{answer['start']} to {answer['end']} (exclusive){currency}"
    show(args, answer, table(rows, [*dims, *USAGE_HEADER]) + "\n" + note)
    return 0
def quota_answer(client: Client, flavor: str | None) -> list[dict]:
    """The quota-usage answer of each flavor asked for (all active ones by default) in which the
    user sees some quota node."""
    names = [flavor] if flavor else [f["name"] for f in client.all_pages("/api/v1/flavors/", active="true")]
    answers = [client.get("/api/v1/quota-usage/", flavor=name) for name in names]
    return [a for a in answers if a["nodes"] or flavor]


def cmd_quota(client: Client, args) -> int:
    answers = quota_answer(client, args.flavor)
    rows = []
    for answer in answers:
        for node in answer["nodes"]:
            rows.append(
                [
                    answer["flavor"],
                    "  " * node["depth"] + node["owner"],
                    node["kind"],
                    qty(node["quota"]),
                    qty(node["used"]),
                    qty(node["in_quota"]),
                    qty(node["on_loan"]),
                    qty(node["borrowed_from_outside"]),
                    qty(node["lent_to_outside"]),
                    "over quota" if node["over_quota"] else "",
                ]
            )
    header = ["flavor", "node", "kind", "quota", "used", "in_quota", "on_loan", "borrowed", "lent", ""]
    note = (
        "borrowed: on-loan use covered from outside the node's subtree; lent: its idle quota used "
        "from outside (docs/quotas.md)"
    )
    show(args, {"flavors": answers}, (table(rows, header) + "\n" + note) if rows else "no quota visible")
    return 0


def qty(value) -> str:
    """A quantity as the portal writes it ("8.000") without trailing zeros ("8", "0.5")."""
    text = str(value)
    return text.rstrip("0").rstrip(".") if "." in text else text


def new_output(text: str, size: int | None, seen: int | None, last: str) -> tuple[str, int | None, str]:
    """What a --follow poll adds to what was printed: by the log's size where the cluster knows it
    (the bytes past ``seen``), else the text after the last line printed. A gap (more new bytes
    than the tail holds) prints the whole tail after a marker."""
    data = text.encode()
    if size is not None and seen is not None:
        grown = size - seen
        if grown <= 0:
            return "", size, last
        if grown > len(data):
            return "[… earlier output skipped …]\n" + text, size, text
        return data[-grown:].decode(errors="replace"), size, text
    if last and last.rstrip("\n"):
        anchor = last.rstrip("\n").rsplit("\n", 1)[-1] + "\n"
        at = text.rfind(anchor)
        if at >= 0:
            return text[at + len(anchor):], size, text
    return text, size, text


def cmd_logs(client: Client, args) -> int:
    base = f"/api/v1/jobs/{args.id}/log/"
    if not args.follow and args.tail_bytes is None and not args.json:
        client.raw(base + "download/", sys.stdout.buffer)  # the whole log, as it streams
        sys.stdout.flush()
        return 0
    tail = client.get(base, tail_bytes=args.tail_bytes)
    if args.json:
        show(args, tail, "")
        return 0
    if not args.follow:
        if tail["missing"]:
            raise SystemExit(f"gpupool: no log: {tail['missing']}")
        sys.stdout.write(tail["text"])
        return 0
    seen, last = None, ""
    while True:
        if tail["missing"] and not args.quiet:
            print(f"… {tail['missing']}", file=sys.stderr)
        elif not tail["missing"]:
            text, seen, last = new_output(tail["text"], tail["size"], seen, last)
            sys.stdout.write(text)
            sys.stdout.flush()
        if client.get(f"/api/v1/jobs/{args.id}/")["state"] in TERMINAL:
            tail = client.get(base, tail_bytes=args.tail_bytes)  # what it wrote last
            if not tail["missing"]:
                sys.stdout.write(new_output(tail["text"], tail["size"], seen, last)[0])
            return 0
        time.sleep(args.interval)
        tail = client.get(base, tail_bytes=args.tail_bytes)


# --- argument parsing -------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="gpupool", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    top.add_argument(
        "--url",
        default=os.environ.get("GPUPOOL_URL", "http://127.0.0.1:8000"),
        help="portal address (env GPUPOOL_URL; default http://127.0.0.1:8000)",
    )
    top.add_argument("--token", default=os.environ.get("GPUPOOL_TOKEN"), help="API token (env GPUPOOL_TOKEN)")
    top.add_argument("--json", action="store_true", help="print the API's JSON answer")
    sub = top.add_subparsers(dest="command", required=True)

    token = sub.add_parser("token", aliases=["login"], help="print an API token for a username and password")
    token.add_argument("-u", "--username", help="env GPUPOOL_USERNAME, else asked")
    token.add_argument("-p", "--password", help="env GPUPOOL_PASSWORD, else asked (not echoed)")
    token.set_defaults(func=cmd_token, anonymous=True)

    submit = sub.add_parser("submit", help="submit a job from flags and/or --file job.json|yaml")
    submit.add_argument("-f", "--file", help="JSON (or YAML) object with the job's fields; flags override it")
    submit.add_argument("--name")
    submit.add_argument("--project", help="project code or id")
    submit.add_argument("--kind", choices=["training", "inference", "dev"], help="default training")
    submit.add_argument("--flavor", help="flavor name, e.g. A100-80G")
    submit.add_argument("--workers", type=int)
    submit.add_argument("--gpus", type=int, help="GPUs per worker")
    submit.add_argument("--gpu-milli", type=int, help="thousandths of one shared GPU (shareable flavors)")
    submit.add_argument("--min-workers", type=int, help="elastic: start with at least this many")
    # DESIGN §15: per worker; left out, each is the worker's GPUs' share of the flavor's nodes.
    submit.add_argument("--cpu-millicores", type=int, help="CPU per worker, e.g. 24000 (default: share)")
    submit.add_argument("--memory-mib", type=int, help="memory per worker in MiB (default: the GPUs' share)")
    submit.add_argument("--local-disk-gib", type=int, help="local disk per worker in GiB (default: share)")
    submit.add_argument("--min-cuda-version", help="lowest CUDA version the image needs, e.g. 12.4")
    submit.add_argument("--priority", help="priority class, e.g. training")
    submit.add_argument("--image")
    submit.add_argument("--command")
    submit.add_argument("--max-runtime", type=int, help="seconds")
    submit.add_argument("--checkpointing", action="store_true")
    submit.add_argument("--max-retries", type=int, help="training: retry a failed run this often")
    submit.add_argument("--sim-duration", type=int, help="simulated cluster only: how long the job runs (s)")
    submit.add_argument(
        "--autoscale-query",
        help="inference: scale between --min-workers and --workers from load; PromQL, one value per "
        "replica, {job} / {job_id} name the job",
    )
    submit.add_argument("--autoscale-target", help="inference: the value one replica should carry, e.g. 10")
    submit.add_argument(
        "--autoscale-cooldown", type=int, help="inference: seconds without a change after one (default 300)"
    )
    submit.add_argument(
        "--array", help="an array of tasks, e.g. 0-99%%10: one job per index (GPUPOOL_ARRAY_INDEX), "
        "at most 10 running at once"
    )
    submit.add_argument(
        "--dependency", help="jobs to wait for, e.g. after_ok:12,after_any:13 (after_ok, after_any, "
        "after_not_ok; Slurm's afterok:12 too)"
    )
    submit.set_defaults(func=cmd_submit)

    arr = sub.add_parser("array", help="an array's tasks and their states; --cancel cancels the unfinished")
    arr.add_argument("id", type=int)
    arr.add_argument("--cancel", action="store_true", help="cancel every task not yet finished")
    arr.set_defaults(func=cmd_array)

    jobs = sub.add_parser("jobs", help="list the jobs you can see, newest first")
    jobs.add_argument("--state")
    jobs.add_argument("--kind")
    jobs.add_argument("--project", help="project code or id")
    jobs.add_argument("--limit", type=int, default=25)
    jobs.set_defaults(func=cmd_jobs)

    status = sub.add_parser("status", help="one job: state, and queue position and why it waits")
    status.add_argument("id", type=int)
    status.add_argument("--wait", type=float, default=0, help="poll up to this many seconds until it ends")
    status.add_argument("--interval", type=float, default=5)
    status.set_defaults(func=cmd_status)

    cancel = sub.add_parser("cancel", help="cancel a job")
    cancel.add_argument("id", type=int)
    cancel.set_defaults(func=cmd_cancel)

    scale = sub.add_parser("scale", help="scale a running inference service (or elastic job) to N replicas")
    scale.add_argument("id", type=int)
    scale.add_argument("replicas", type=int)
    scale.set_defaults(func=cmd_scale)

    autoscale = sub.add_parser(
        "autoscale", help="an inference job's autoscaling from load: show it, or set it with the options"
    )
    autoscale.add_argument("id", type=int)
    autoscale.add_argument("--query", help="PromQL, one value per replica; {job} / {job_id} name the job")
    autoscale.add_argument("--target", help="the value one replica should carry, e.g. 10")
    autoscale.add_argument("--cooldown", type=int, help="seconds with no change after a change (default 300)")
    autoscale.add_argument("--off", action="store_true", help="turn autoscaling off")
    autoscale.set_defaults(func=cmd_autoscale)

    cost = sub.add_parser("cost", help="a month's cost: the estimate while open, the statements once closed")
    cost.add_argument("--month", help="YYYY-MM (site time zone); default this month")
    cost.add_argument("--department", help="department code or id")
    cost.add_argument("--project", help="only this project's lines (code or id)")
    cost.set_defaults(func=cmd_cost)

    approvals = sub.add_parser(
        "approvals", help="requests waiting for your decision: list, show, approve, reject"
    )
    steps = approvals.add_subparsers(dest="action", required=True)
    listing = steps.add_parser("list", help="the requests waiting for my decision")
    listing.add_argument("--kind", choices=["job", "quota", "loan"])
    listing.add_argument("--limit", type=int, default=50)
    listing.set_defaults(func=cmd_approvals_list)
    one = steps.add_parser("show", help="one request with the figures to decide it (usage, cost, budgets…)")
    one.add_argument("id", type=int)
    one.set_defaults(func=cmd_approvals_show)
    for decision in ("approve", "reject"):
        decide = steps.add_parser(decision, help=f"{decision} the open step of a request")
        decide.add_argument("id", type=int)
        decide.add_argument("-m", "--message", help="comment kept with the decision")
        decide.set_defaults(func=cmd_approvals_decide, decision=decision)

    usage = sub.add_parser("usage", help="card-hours, cost, utilisation and queue waits of a range, grouped")
    usage.add_argument("--start", help="YYYY-MM-DD, the first day (default: the first of this month)")
    usage.add_argument("--end", help="YYYY-MM-DD, exclusive (default: the first of next month)")
    usage.add_argument(
        "--group-by",
        default="project",
        help="one or two of department, project, user, flavor, kind, priority, comma-separated",
    )
    usage.set_defaults(func=cmd_usage)
    quota = sub.add_parser("quota", help="the quota tree: quota, used, on loan, borrowed and lent per flavor")
    quota.add_argument("--flavor", help="one flavor; default every active flavor you hold quota in")
    quota.set_defaults(func=cmd_quota)

    logs = sub.add_parser(
        "logs", help="a job's log: all of it, its end (--tail-bytes), or followed until the job ends"
    )
    logs.add_argument("id", type=int)
    logs.add_argument("--tail-bytes", type=int, help="only the end: 1 to 1048576 bytes, from a whole line")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep printing new output until the job ends"
    )
    logs.add_argument("--interval", type=float, default=2, help="seconds between --follow reads")
    logs.add_argument("-q", "--quiet", action="store_true", help="--follow: no 'not started yet' notes")
    logs.set_defaults(func=cmd_logs)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.token and not getattr(args, "anonymous", False):
        print(
            "gpupool: set GPUPOOL_TOKEN (gpupool token -u USER prints one) or pass --token", file=sys.stderr
        )
        return 2
    client = Client(args.url, None if getattr(args, "anonymous", False) else args.token)
    try:
        return args.func(client, args)
    except ApiError as err:
        print(
            f"gpupool: the portal answered {err.status}: {json.dumps(err.body, ensure_ascii=False)}",
            file=sys.stderr,
        )
        return 1
    except urllib.error.URLError as err:
        print(f"gpupool: cannot reach {args.url}: {err.reason}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
