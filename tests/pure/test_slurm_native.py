"""Parsing what Slurm prints about the jobs users submit directly (DESIGN §11). The samples are
what Slurm 22.05 printed on the test cluster (SLURM_TIME_FORMAT=%s), plus the odd values."""

from datetime import UTC, datetime

from jobs.native.backends.slurm_native import (
    SQUEUE_FIELDS,
    gpu_indices,
    gpu_tres,
    machine_tres,
    parse_sacct,
    parse_scontrol_gpus,
    parse_squeue,
    portal_job_id,
    sacct_args,
    shard_tres,
    to_record,
)


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


SQUEUE = """\
2|2|gpxacct|gpxu1|PENDING|1796387273|1827923274|normal|cpu=1,mem=2G,node=1,billing=1,gres/gpu=8,gres/gpu:a100=8||Resources|full|
13|13|gpxacct|gpxu1|PENDING|1796387314|N/A|normal|cpu=1,gres/gpu=1,gres/gpu:a100=1||JobHeldUser|\
a name with | pipe|
10|10+0|gpxacct|gpxu1|RUNNING|1796387300|1796387301|normal|cpu=1,gres/gpu=1,gres/gpu:a100=1|gpu-a100-1|None|het|
12|12|gpxacct|gpxu1|RUNNING|1796387300|1796387301|normal|cpu=2,node=2,gres/gpu=6,gres/gpu:a100=6|gpu-a100-[1-2]|None|multi|
8|4_0|gpxacct|gpxu1|RUNNING|1796387274|1796387274|normal|cpu=1,gres/gpu=1,gres/gpu:a100=1|gpu-a100-2|None|arr|
5|5|gpxacct|gpxu1|RUNNING|1796387274|1796387274|normal|billing=1,cpu=1,mem=2G,node=1|gpu-a100-2|None|nogpu|

garbage line
"""

SACCT = """\
1|1|gpxacct|gpxu1|COMPLETED|1796387273|1796387274|1796387304|billing=1,cpu=1,gres/gpu:a100=2,gres/gpu=2,mem=2G,node=1|\
billing=1,cpu=1,gres/gpu=2|gpu-a100-1|normal|0:0|None|train1
3|3|gpxacct|gpxu1|CANCELLED by 0|1796387274|1796387300|1796387300||billing=1,cpu=1,gres/gpu:a100=1,\
gres/gpu=1|None assigned|normal|0:0|None|held
7|6+1|gpxacct|gpxu1|TIMEOUT|1796387274|1796387276|1796387280|gres/gpu:a100=2,gres/gpu=2|gres/gpu=2|gpu-a100-1|normal|\
0:15|None|het
9|4_1|gpxacct|gpxu1|NODE_FAIL|Unknown|1796387274|1796387277|gres/gpu=1|gres/gpu=1|gpu-a100-2|normal|1:0|\
NodeDown|x|y
20|20|gpxacct|gpxu1|RUNNING|1796387274|1796387274|Unknown|gres/gpu:a100=1,gres/gpu=1|gres/gpu=1|gpu-a100-2|normal|\
0:0|None|still
21|21|gpxacct|gpxu1|COMPLETED|Unknown|Unknown|Unknown|gres/gpu=1|gres/gpu=1|gpu-a100-2|normal|0:0|None|\
no times
"""

SCONTROL = (
    "JobId=1 JobName=train1 UserId=gpxu1(1001) JobState=RUNNING NumNodes=1 "
    "TRES=cpu=1,mem=2G,node=1,billing=1,gres/gpu=2,gres/gpu:a100=2 JOB_GRES=gpu:a100:2 "
    "Nodes=gpu-a100-1 CPU_IDs=0 Mem=2048 GRES=gpu:a100:2(IDX:0-1) MinCPUsNode=1\n"
    "JobId=12 JobName=multi JobState=RUNNING JOB_GRES=gpu:a100:6 "
    "Nodes=gpu-a100-1 CPU_IDs=1 Mem=2048 GRES=gpu:a100:3(IDX:3-5) "
    "Nodes=gpu-a100-2 CPU_IDs=1 Mem=2048 GRES=gpu:a100:3(IDX:2-4) Features=(null)\n"
    "JobId=30 JobName=same Nodes=gpu-a100-[3-4] CPU_IDs=0-1 Mem=4096 GRES=gpu:a100(CNT:2)(IDX:0,6)\n"
    "JobId=31 JobName=Nodes=fake Nodes=gpu-a100-1 CPU_IDs=0 Mem=1 GRES=\n"
    "JobId=32 JobState=PENDING JOB_GRES=(null)\n"
)


def test_squeue_lines_become_live_jobs_with_reasons_and_no_forecast_start():
    jobs = {j.job_id: j for j in parse_squeue(SQUEUE)}
    assert set(jobs) == {"2", "13", "10", "12", "8", "5"}  # the blank and garbage lines dropped
    full = jobs["2"]
    assert (full.state, full.reason, full.started, full.devices, full.gres_type) == (
        "PENDING", "Resources", None, 8, "gpu:a100")  # StartTime 1827923274 is a forecast
    assert jobs["13"].name == "a name with | pipe" and jobs["13"].reason == "JobHeldUser"
    assert jobs["12"].nodes == ("gpu-a100-1", "gpu-a100-2") and jobs["12"].devices == 6
    assert jobs["10"].display_id == "10+0" and jobs["10"].started == at(1796387301)
    assert jobs["5"].devices == 0 and to_record(jobs["5"]) is None  # no GPU: not a GPU job


def test_squeue_format_keeps_the_name_last():
    assert SQUEUE_FIELDS[-1] == "Name"  # a name may contain the separator


def test_sacct_lines_with_odd_values():
    jobs = {j.job_id: j for j in parse_sacct(SACCT)}
    done = jobs["1"]
    assert (done.started, done.ended, done.devices, done.exit_code) == (at(1796387274), at(1796387304), 2, 0)
    cancelled = jobs["3"]
    assert (cancelled.state, cancelled.started, cancelled.nodes) == ("CANCELLED", None, ())
    assert cancelled.devices == 1  # allocated nothing: what it asked for (ReqTRES); Start = cancel time
    assert jobs["7"].exit_code == 128 + 15 and jobs["7"].display_id == "6+1"
    assert jobs["9"].submitted is None and jobs["9"].name == "x|y" and jobs["9"].reason == "NodeDown"
    assert jobs["20"].ended is None  # End "Unknown" while it runs


def test_records_carry_slurm_times_phase_and_why_it_ended():
    jobs = {j.job_id: j for j in parse_sacct(SACCT)}
    rec = to_record(jobs["1"])
    assert (rec.backend_id, rec.source, rec.user, rec.resource, rec.devices, rec.phase) == (
        "1", "gpxacct", "gpxu1", "gpu:a100", 2, "succeeded")
    assert (rec.started_at, rec.finished_at, rec.problem()) == (at(1796387274), at(1796387304), None)
    cancelled = to_record(jobs["3"])
    assert (cancelled.phase, cancelled.started_at) == ("cancelled", None)
    assert cancelled.finished_at == at(1796387300)
    timeout = to_record(jobs["7"])
    assert (timeout.phase, timeout.reason, timeout.name) == ("failed", "timeout", "het 6+1")
    node_fail = to_record(jobs["9"])
    assert node_fail.submitted_at == at(1796387274)  # Submit unknown: its start stands in
    assert node_fail.reason == "node_fail, NodeDown" and node_fail.resource == "gpu"  # untyped GRES
    assert to_record(jobs["21"]) is None  # no time at all: nothing to meter by
    assert to_record(jobs["20"]).slots == ()  # running per accounting: no indices from sacct


def test_scontrol_gives_the_indices_each_running_job_holds_per_node():
    held = parse_scontrol_gpus(SCONTROL)
    assert held["1"] == (("gpu-a100-1", 0), ("gpu-a100-1", 1))
    assert held["12"] == (*[("gpu-a100-1", g) for g in (3, 4, 5)], *[("gpu-a100-2", g) for g in (2, 3, 4)])
    assert held["30"] == (("gpu-a100-3", 0), ("gpu-a100-3", 6), ("gpu-a100-4", 0), ("gpu-a100-4", 6))
    assert "31" not in held and "32" not in held  # GRES empty, no detail
    live = {j.job_id: j for j in parse_squeue(SQUEUE)}
    rec = to_record(live["12"], held["12"])
    assert rec.phase == "running" and len(rec.slots) == 6 and rec.problem() is None
    assert to_record(live["2"], held["12"]).slots == ()  # a pending job holds nothing


def test_gres_and_tres_helpers():
    assert gpu_indices("gpu:a100:2(IDX:0-1),mps:100(IDX:N/A)") == [0, 1]
    assert gpu_indices("gpu:a100:3(IDX:0,2-3)") == [0, 2, 3]
    assert gpu_indices("gpu:1(IDX:N/A)") == [] and gpu_indices("") == []
    assert gpu_tres("gres/gpu:a100=1,gres/gpu:h100=3,gres/gpu=4") == ("gpu:h100", 4)
    assert gpu_tres("cpu=4,mem=8G") == ("", 0) and gpu_tres("") == ("", 0)
    assert gpu_tres("gres/gpumem=8G,gres/gpu=2") == ("gpu", 2)


def test_portal_names_and_sacct_arguments():
    assert portal_job_id("gp-42") == 42
    assert portal_job_id("gp-42-copy") is None and portal_job_id("train") is None
    args = sacct_args(since=datetime(2026, 12, 1, 8, tzinfo=UTC), until=datetime(2026, 12, 1, 9, tzinfo=UTC))
    assert args[args.index("-S") + 1] == "2026-12-01T08:00:00" and "-X" in args and "--allusers" in args
    assert sacct_args(job_ids=["7", "9"])[-2:] == ["-j", "7,9"]


# What Slurm 22.05 printed for shard jobs on the test cluster (8 shards per GPU): AllocTRES is
# untyped even when the job asked for shard:a100; ReqTRES keeps the type.
SHARD_SACCT = """\
40|40|gpxacct|gpxu1|COMPLETED|1796387273|1796387274|1796387304|billing=1,cpu=1,gres/shard=4,mem=2G,node=1|\
billing=1,cpu=1,gres/shard:a100=4,gres/shard=4,mem=2G,node=1|gpu-a100-1|normal|0:0|None|half
41|41|gpxacct|gpxu1|CANCELLED by 0|1796387274|1796387300|1796387300||billing=1,cpu=1,gres/shard:a100=2,\
gres/shard=2|None assigned|normal|0:0|None|quarter
42|42|gpxacct|gpxu1|COMPLETED|1796387273|1796387274|1796387304|gres/shard=8,node=1|gres/shard=8|gpu-a100-2|\
normal|0:0|None|all eight
43|43|gpxacct|gpxu1|COMPLETED|1796387273|1796387274|1796387304|gres/shard=6,node=2|gres/shard=6|gpu-a100-[1-2]|\
normal|0:0|None|two nodes
"""


def test_shards_are_a_share_of_one_card_per_node():
    assert shard_tres("gres/shard=4", 1) == ("gpu", 1, 500)
    assert shard_tres("gres/shard:a100=2,gres/shard=2", 1) == ("gpu:a100", 1, 250)
    assert shard_tres("gres/shard=3", 1) == ("gpu", 1, 375)
    assert shard_tres("gres/shard=1", 1, shards_per_gpu=3) == ("gpu", 1, 334)  # rounded up, never less
    assert shard_tres("gres/shard=8", 1) == ("gpu", 1, None)  # all of a GPU's shards: the whole card
    assert shard_tres("gres/shard=6", 2) == ("gpu", 2, 375)  # 3 on each node's GPU
    assert shard_tres("gres/shard=4", 0) == ("gpu", 1, 500)  # pending: no nodes yet, one card
    assert shard_tres("cpu=1,gres/gpu=1", 1) == ("", 0, None)


def test_sacct_shard_jobs_are_gpu_jobs_holding_part_of_a_card():
    jobs = {j.job_id: j for j in parse_sacct(SHARD_SACCT)}
    assert [(j.gres_type, j.devices, j.gpu_milli) for j in jobs.values()] == [
        ("gpu", 1, 500), ("gpu:a100", 1, 250), ("gpu", 1, None), ("gpu", 2, 375)]
    assert to_record(jobs["40"]).devices == 1 and to_record(jobs["40"]).problem() is None
    assert jobs["41"].started is None  # cancelled while pending: its ReqTRES, typed
    whole_gpu = parse_sacct(SACCT)
    assert all(j.gpu_milli is None for j in whole_gpu)


def test_squeue_and_scontrol_see_a_running_shard_job_on_its_gpu():
    line = "50|50|gpxacct|gpxu1|RUNNING|1796387300|1796387301|normal|cpu=1,gres/shard=4|gpu-a100-1|None|s|"
    (job,) = parse_squeue(line)
    assert (job.gres_type, job.devices, job.gpu_milli, job.nodes) == ("gpu", 1, 500, ("gpu-a100-1",))
    held = parse_scontrol_gpus("JobId=50 Nodes=gpu-a100-1 CPU_IDs=0 Mem=2048 GRES=shard:4(IDX:0)\n")
    assert held == {"50": (("gpu-a100-1", 0),)}
    assert gpu_indices("gpu:a100:1(IDX:1),shard:a100:2(IDX:0)") == [1, 0]


def test_the_cpu_and_memory_a_job_holds_come_from_its_tres():
    assert machine_tres("billing=24,cpu=24,gres/gpu=2,mem=248G,node=1") == (24_000, 253_952)
    assert machine_tres("cpu=2,mem=1500M,node=2") == (2_000, 1_500)
    assert machine_tres("cpu=96,mem=1T") == (96_000, 1_048_576)
    assert machine_tres("cpu=1,mem=1.5G") == (1_000, 1_536)
    assert machine_tres("gres/gpu=1") == (None, None)
    sacct = {j.job_id: j for j in parse_sacct(SACCT)}
    # Allocated: AllocTRES; cancelled while pending: what it asked (ReqTRES, no mem there).
    assert (sacct["1"].cpu_millicores, sacct["1"].memory_mib) == (1_000, 2_048)
    assert (sacct["3"].cpu_millicores, sacct["3"].memory_mib) == (1_000, None)
    squeue = {j.job_id: j for j in parse_squeue(SQUEUE)}
    assert (squeue["12"].cpu_millicores, squeue["12"].memory_mib) == (2_000, None)
    record = to_record(sacct["1"])
    assert (record.cpu_millicores, record.memory_mib) == (1_000, 2_048)
