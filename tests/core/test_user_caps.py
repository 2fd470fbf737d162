"""Per-user caps inside a project (issue 34 item 2, DESIGN §16) in the pure engine: a user's running
jobs of a capped project never hold more GPUs or jobs than the cap, whatever the order or the
cycle; other users of the project and other projects are not held back; explain names the cap;
a warm engine decides as a cold one."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

from coresnap import NOW, cluster, queued, running, snapshot, tree

from jobs.scheduler.scheduler import Engine, schedule

TL = tree({"D": (64, {"p": 32, "q": 32})})
CAP = {"p": (16_000, None)}  # one user holds at most 16 GPUs of p


def _job(jid, project, gpus, user, *, age_s=60, workers=1, min_workers=None):
    return replace(queued(jid, project, gpus, age_s=age_s, workers=workers, min_workers=min_workers),
                   user=user)


def _run(jid, project, node, gpus, user):
    return replace(running(jid, project, node, gpus), user=user)


def _admitted(result) -> set[str]:
    return {a.job_id for a in result.admissions}


def test_a_user_at_the_gpu_cap_waits_and_explain_names_the_cap():
    jobs = [_job("a1", "p", 8, "alice", age_s=300), _job("a2", "p", 8, "alice", age_s=200),
            _job("a3", "p", 8, "alice", age_s=100), _job("b1", "p", 8, "bob", age_s=50)]
    result = schedule(snapshot(cluster(8), TL, (), jobs, user_caps=CAP))
    assert _admitted(result) == {"a1", "a2", "b1"}  # bob is not held back by alice's cap
    e = result.explanations["a3"]
    assert e.reason == "user_cap" and e.node_id == "p"
    assert dict(e.numbers) == {"cap": 16_000, "usage": 16_000, "request": 8_000}
    assert result.held == ()  # a cap is not a budget hold


def test_running_jobs_count_and_the_job_cap_holds():
    jobs = [_job("a2", "p", 1, "alice", age_s=200), _job("a3", "p", 1, "alice", age_s=100)]
    run = [_run("a1", "p", "n000", 1, "alice")]
    result = schedule(snapshot(cluster(4), TL, run, jobs, user_caps={"p": (None, 2)}))
    assert _admitted(result) == {"a2"}
    e = result.explanations["a3"]
    assert e.reason == "user_cap" and dict(e.numbers) == {"cap_jobs": 2, "running_jobs": 2}


def test_the_same_user_in_another_project_and_jobs_without_a_user_are_not_capped():
    jobs = [_job("q1", "q", 8, "alice"), _job("q2", "q", 8, "alice"), _job("q3", "q", 8, "alice"),
            _job("x1", "p", 8, ""), _job("x2", "p", 8, ""), _job("x3", "p", 8, "")]
    result = schedule(snapshot(cluster(8), TL, (), jobs, user_caps=CAP))
    assert _admitted(result) == {"q1", "q2", "q3", "x1", "x2", "x3"}


def test_a_capped_job_heads_no_level_and_blocks_nobody():
    # alice's job would be the head (oldest) but her cap holds it: no reservation is made for it.
    jobs = [_job("a2", "p", 8, "alice", age_s=300), _job("b1", "p", 8, "bob", age_s=10)]
    run = [_run("a1", "p", "n000", 8, "alice"), _run("a0", "p", "n001", 8, "alice")]
    result = schedule(snapshot(cluster(3), TL, run, jobs, user_caps=CAP))
    assert _admitted(result) == {"b1"}
    assert all(r.job_id != "a2" for r in result.reservations)


def test_an_elastic_job_grows_only_up_to_its_users_cap():
    job = _job("e", "p", 4, "alice", workers=8, min_workers=2)
    result = schedule(snapshot(cluster(8), TL, (), [job], user_caps=CAP))
    (adm,) = result.admissions
    assert adm.workers * 4 <= 16


def _random_world(rng: random.Random, n_jobs: int):
    users = ["u1", "u2", "u3"]
    jobs = [_job(f"j{k}", rng.choice("pq"), rng.choice([1, 2, 4, 8]), rng.choice(users),
                 age_s=rng.randint(1, 5000)) for k in range(n_jobs)]
    caps = {"p": (rng.choice([4_000, 8_000, 16_000, None]), rng.choice([1, 2, 3, None])),
            "q": (rng.choice([8_000, None]), rng.choice([2, None]))}
    return jobs, caps


def _run_of(job, admission, at):
    """A job the warm engine admitted, as a cold snapshot lists it."""
    slots = tuple(slot for worker in admission.placement for slot in worker)
    return replace(running(job.id, job.project_id, "n000", 0), user=job.user, placement=slots,
                   started_at=at)


def test_no_cycle_ever_lets_a_user_exceed_a_cap_and_warm_decides_like_cold():
    capped = 0  # waits for a cap seen: the worlds do bind
    for seed in range(40):
        rng = random.Random(seed)
        jobs, caps = _random_world(rng, 30)
        by_id = {j.id: j for j in jobs}
        engine = Engine(snapshot(cluster(6), TL, (), jobs[:15], user_caps=caps))
        live: dict[str, tuple] = {}  # job id -> (admission, admitted at)
        queue = list(jobs[:15])
        for step in range(4):
            now = NOW + timedelta(minutes=step)
            cold = schedule(snapshot(cluster(6), TL,
                                     [_run_of(by_id[j], *live[j]) for j in sorted(live)],
                                     [q for q in queue if q.id not in live], user_caps=caps, now=now))
            warm = engine.cycle(now)
            capped += sum(e.reason == "user_cap" for e in warm.explanations.values())
            assert sorted(a.job_id for a in warm.admissions) == sorted(a.job_id for a in cold.admissions)
            for a in warm.admissions:
                live[a.job_id] = (a, now)
            held: dict[tuple[str, str], list[int]] = {}
            for jid, (a, _) in live.items():
                h = held.setdefault((by_id[jid].project_id, by_id[jid].user), [0, 0])
                h[0] += a.workers * by_id[jid].gpus_per_worker * 1000
                h[1] += 1
            for (proj, user), (milli, count) in held.items():
                cap_milli, cap_jobs = caps.get(proj, (None, None))
                assert cap_milli is None or milli <= cap_milli, (seed, step, proj, user)
                assert cap_jobs is None or count <= cap_jobs, (seed, step, proj, user)
            done = sorted(live)[: rng.randint(0, len(live))]  # some end
            engine.finish(done)
            for jid in done:
                del live[jid]
                queue = [q for q in queue if q.id != jid]
            new = jobs[15 + step * 3: 18 + step * 3]
            engine.submit(new)
            queue += new
    assert capped > 0
