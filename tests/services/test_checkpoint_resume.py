"""A preempted checkpointing job resumes from its checkpoint (DESIGN §13), end to end: the portal
with a real Celery worker and beat, the simulated cluster as a real process. The simulated job
keeps its step counter in its checkpoint directory, which depends on the job id only, so the run
the portal requeues after preemption finds it and goes on from there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobs.models import Job, ProjectStorage, backend_name
from jobs.services import job_submit
from jobs.states import JobState
from tests import factories as fx
from tests.services.test_celery_cycle import _about, _worker_and_beat
from tests.waiting import wait_until

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]

LONG = 10**6  # simulated seconds: the jobs run far longer than any wait


def _submit(project, f, name, prio, *, checkpointing=False, duration=LONG):
    return job_submit(
        actor=fx.platform_admin(),
        project=project,
        name=name,
        kind="training",
        flavor=f,
        priority_class=prio,
        image="pytorch:2.3",
        workers=1,
        gpus_per_worker=8,
        checkpointing=checkpointing,
        sim_duration_seconds=duration,
    )


def _step(directory: Path) -> int:
    try:
        return int((directory / "step").read_text())
    except FileNotFoundError:
        return 0


def _transitions(job: Job) -> list[str]:
    return list(
        job.events.filter(kind="transition").order_by("occurred_at", "id").values_list("to_state", flat=True)
    )


def test_a_preempted_checkpointing_job_resumes_from_its_step_in_the_same_directory(sim_pool, tmp_path):
    f, _cluster, pa, pb, simserver = sim_pool
    sim = simserver.backend()
    shared = tmp_path / "shared"
    ProjectStorage.objects.create(
        project=pb,
        name="ckpt",
        kind="hostpath",
        host_path=str(shared / "pb"),
        mount_path="/shared",
        checkpoints=True,
    )
    # pa's job fills the other node and may not be preempted: the urgent job's GPUs can only
    # come from the checkpointing job of its own project.
    pinned = _submit(pa, f, "pinned", fx.priority("pinned", 100, preemptible=False))
    ckpt = _submit(pb, f, "ckpt", fx.priority(), checkpointing=True)
    directory = Path(ckpt.checkpoint["mount"]["host_path"]) / ckpt.checkpoint["subdir"]
    name = backend_name(ckpt.pk)
    with _worker_and_beat(tmp_path):
        # The beat's status sync polls the simulator, which writes the steps that fell due.
        wait_until(lambda: _step(directory) >= 2, "the job to checkpoint step 2", about=_about(ckpt))
        urgent = _submit(pb, f, "urgent", fx.priority("urgent", 500), duration=50)
        wait_until(
            lambda: "resumed from step" in sim.log_tail(name, max_bytes=10**6).text,
            "the requeued run to resume",
            about=_about(ckpt),
        )
        saved = int(re.search(r"resumed from step (\d+)", sim.log_tail(name, max_bytes=10**6).text).group(1))
        wait_until(lambda: _step(directory) > saved, "the step counter to rise past the checkpoint")
        log = sim.log_tail(name, max_bytes=10**6).text
        wait_until(
            lambda: Job.objects.get(pk=urgent.pk).state == JobState.SUCCEEDED,
            "the urgent job to end",
            about=_about(urgent),
        )
    first, second = log.split("== run 2 ==\n")
    assert re.search(rf"end cancelled exit=143 step {saved}/\d+: cancelled\n\Z", first), first[-300:]
    assert saved >= 2
    starts = re.findall(r" start .* GPUPOOL_CHECKPOINT_DIR=(\S+)$", log, flags=re.MULTILINE)
    assert starts == [str(directory), str(directory)]  # both runs: the one directory of the job id
    assert re.search(rf" step {saved + 1}/", second)  # the second run goes on from there
    assert sim.view(name)["resumed_from"] == saved
    transitions = _transitions(ckpt)
    assert transitions[:4] == ["queued", "admitted", "running", "preempted"], transitions
    assert transitions[4:7] == ["queued", "admitted", "running"], transitions
    ckpt.refresh_from_db()
    assert ckpt.requeue_count == 1 and ckpt.state == JobState.RUNNING
    pinned.refresh_from_db()
    assert pinned.state == JobState.RUNNING and _transitions(pinned)[-1] == "running"
