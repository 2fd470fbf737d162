#!/usr/bin/env python3
"""Submit a job, poll it until it ends, then print its card-hours and the project's cost this month.

Standard library only (urllib); with `requests` installed the same calls are one-liners, e.g.
``requests.post(f"{URL}/api/v1/jobs/", json=job, headers=HEADERS).json()``.

    GPUPOOL_URL=http://127.0.0.1:8000 GPUPOOL_USERNAME=ai-admin GPUPOOL_PASSWORD=gpupool-demo \\
        python3 docs/examples/submit_and_cost.py

Environment: GPUPOOL_URL (default http://127.0.0.1:8000), GPUPOOL_TOKEN or GPUPOOL_USERNAME +
GPUPOOL_PASSWORD, GPUPOOL_PROJECT (project code, default nlp-llm), GPUPOOL_FLAVOR (default
A100-80G), GPUPOOL_WAIT (seconds to poll, default 600), GPUPOOL_POLL (seconds between polls,
default 5), GPUPOOL_SIM_DURATION (simulated run time, default 600). Prints one JSON object.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from fractions import Fraction

URL = os.environ.get("GPUPOOL_URL", "http://127.0.0.1:8000").rstrip("/")
if not URL.startswith(("http://", "https://")):  # urllib would also open file: URLs
    sys.exit(f"GPUPOOL_URL must be http:// or https://, not {URL!r}")
TERMINAL = {"succeeded", "failed", "cancelled", "rejected", "expired"}


def call(method, path, body=None, token=None):
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Token {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(URL + path, data=data, method=method, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - scheme checked
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:  # 4xx answers are JSON: {"detail": …} or field errors
        return error.code, json.loads(error.read() or b"null")


def token():
    if os.environ.get("GPUPOOL_TOKEN"):
        return os.environ["GPUPOOL_TOKEN"]
    # A new token at every run: one that lives a day, named so its owner knows it on the tokens page.
    credentials = {"username": os.environ["GPUPOOL_USERNAME"], "password": os.environ["GPUPOOL_PASSWORD"],
                   "name": "submit_and_cost example", "expires_in_days": 1}
    status, answer = call("POST", "/api/v1/auth/token/", credentials)
    if status != 200:
        sys.exit(f"no token: {status} {answer}")
    return answer["token"]


def main():
    key = token()
    code = os.environ.get("GPUPOOL_PROJECT", "nlp-llm")
    _, projects = call("GET", "/api/v1/projects/?" + urllib.parse.urlencode({"code": code}), token=key)
    if not projects["results"]:
        sys.exit(f"project {code} is not visible to this user")
    project = projects["results"][0]

    job = {
        "name": "example-finetune",
        "project": project["id"],  # the API takes the project's id
        "kind": "training",
        "flavor": os.environ.get("GPUPOOL_FLAVOR", "A100-80G"),
        "workers": 1,
        "gpus_per_worker": 1,
        "priority": "training",
        "image": "registry.example.com/llm/finetune:1.0",
        "command": "python train.py --epochs 1",
        "max_runtime_seconds": 3600,
        # The simulated cluster runs the job this long (the demo's runs 60x faster than real time).
        "sim_duration_seconds": int(os.environ.get("GPUPOOL_SIM_DURATION", "600")),
    }
    status, submitted = call("POST", "/api/v1/jobs/", job, token=key)
    if status != 201:
        sys.exit(f"refused: {status} {submitted}")
    job_id = submitted["id"]
    print(f"submitted job {job_id}: {submitted['state']}", file=sys.stderr)

    deadline = time.monotonic() + float(os.environ.get("GPUPOOL_WAIT", "600"))
    current = submitted
    while current["state"] not in TERMINAL and time.monotonic() < deadline:
        time.sleep(float(os.environ.get("GPUPOOL_POLL", "5")))
        _, current = call("GET", f"/api/v1/jobs/{job_id}/", token=key)
        line = current["state"]
        if current["state"] == "queued":  # why it waits, and where it is in the queue
            _, why = call("GET", f"/api/v1/jobs/{job_id}/explain/", token=key)
            line += f" (position {why['position']}: {why['reason']})"
        print(line, file=sys.stderr)

    # The job's own card-hours as the meter counts them: from each transition into "running" to
    # the transition out of it (the instants the portal recorded), × devices × card fraction.
    # (A job that was scaled while running needs the "scaled" events too; gpupool_cli.py does that.)
    _, flavors = call("GET", "/api/v1/flavors/?page_size=1000", token=key)
    flavor = next(f for f in flavors["results"] if f["name"] == current["flavor"])
    fraction = Fraction(flavor["fraction_numerator"], flavor["fraction_denominator"])  # exact: 1/7
    _, events = call("GET", f"/api/v1/jobs/{job_id}/events/", token=key)
    devices = (current["granted_workers"] or current["workers"]) * current["gpus_per_worker"]
    cards = float(devices * fraction * Fraction(current["gpu_milli"] or 1000, 1000))
    seconds, since = 0.0, None
    for event in events:
        if event["kind"] != "transition":
            continue
        at = datetime.fromisoformat(event["at"])
        if event["to_state"] == "running":
            since = at
        elif event["from_state"] == "running" and since is not None:
            seconds, since = seconds + (at - since).total_seconds(), None
    job_card_hours = cards * seconds / 3600

    # The cost: this month's estimate of the project's department. Finance, department admins,
    # platform admins and auditors see it; members and project admins get 404.
    query = urllib.parse.urlencode({"department": project["department"]})
    status, estimate = call("GET", f"/api/v1/statements/estimate/?{query}", token=key)
    lines = []
    if status == 200:
        lines = [line for e in estimate for line in e["lines"] if line["project"] == project["id"]]
    print(
        json.dumps(
            {
                "job": job_id,
                "state": current["state"],
                "started_at": current["started_at"],
                "finished_at": current["finished_at"],
                "job_card_hours": f"{job_card_hours:.6f}",
                "cost_visible": status == 200,
                "metered_through": estimate[0]["metered_through"] if status == 200 and estimate else None,
                "project_card_hours": str(sum(float(line["card_hours"]) for line in lines)),
                "project_amount": str(sum(float(line["amount"] or 0) for line in lines)),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
