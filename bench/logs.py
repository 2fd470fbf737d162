"""How reading a job's log scales with its size (DESIGN §13): the job page polls the tail every
2 s, and a download streams the whole log. Both must cost the same for a 1 KB and a 1 GB log
(tail) or be bounded in memory (stream).

Real work, no Slurm or Kubernetes needed for the parts timed:

* Slurm: ``SlurmBackend.log_tail`` / ``log_stream`` on a real output file of ``--mb`` MiB in a job
  directory laid out as ``submit`` leaves it (``submitted-<id>``, ``started-<id>``,
  ``slurm-<id>.out``) — exactly the calls the portal makes.
* Kubernetes: ``KubernetesBackend.log_tail`` / ``log_stream`` through the official client over HTTP
  against the tests' stand-in API server serving a ``--k8s-mb`` MiB pod log.

Peak Python memory of each call is measured with tracemalloc; the stand-in runs in its own process,
so the figures are the portal side's alone. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.clusters.backends.base import JobSpec, Slot
from jobs.clusters.backends.kubernetes import KubernetesBackend
from jobs.clusters.backends.slurm import SlurmBackend

MIB = 1024 * 1024
LINE = b"step %09d loss 0.%06d lr 3e-4 throughput 1234.5 samples/s\n"


def write_log(path: Path, size: int) -> int:
    block = b"".join(LINE % (i, i % 10**6) for i in range(16384))
    written = 0
    with path.open("wb") as out:
        while written < size:
            out.write(block)
            written += len(block)
    return written


def timed(call, repeat: int) -> tuple[float, float]:
    """(median ms, peak traced KiB) of ``call`` over ``repeat`` runs."""
    times, peak = [], 0
    for _ in range(repeat):
        tracemalloc.start()
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
        peak = max(peak, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    return statistics.median(times), peak / 1024


def consume(stream) -> int:
    return sum(len(chunk) for chunk in stream)


def slurm_figures(mb: int, tail_bytes: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        jobs = Path(tmp) / "jobs"
        workdir = jobs / "gp-1"
        workdir.mkdir(parents=True)
        for marker in ("submitted-101", "started-101"):
            (workdir / marker).touch()
        size = write_log(workdir / "slurm-101.out", mb * MIB)
        backend = SlurmBackend(str(Path(tmp) / "etc" / "slurm.conf"), jobs_dir=str(jobs))
        tail_ms, tail_kib = timed(lambda: backend.log_tail("gp-1", max_bytes=tail_bytes), 50)
        small = workdir.parent / "gp-2"
        small.mkdir()
        (small / "submitted-102").touch()
        (small / "started-102").touch()
        (small / "slurm-102.out").write_bytes(LINE % (1, 1))
        small_ms, _ = timed(lambda: backend.log_tail("gp-2", max_bytes=tail_bytes), 50)
        t0 = time.perf_counter()
        tracemalloc.start()
        streamed = consume(backend.log_stream("gp-1"))
        stream_peak = tracemalloc.get_traced_memory()[1] / 1024
        tracemalloc.stop()
        stream_s = time.perf_counter() - t0
    assert streamed == size
    return {
        "slurm_log_bytes": size,
        "slurm_tail_ms": round(tail_ms, 3),
        "slurm_tail_of_one_line_ms": round(small_ms, 3),
        "slurm_tail_peak_kib": round(tail_kib, 1),
        "slurm_stream_seconds": round(stream_s, 3),
        "slurm_stream_mib_per_s": round(size / MIB / stream_s, 1),
        "slurm_stream_peak_kib": round(stream_peak, 1),
    }


SERVE_POD_LOG = """
import sys
from datetime import UTC, datetime
sys.path.insert(0, sys.argv[1])
from bench.logs import LINE, MIB, pod_spec
from jobs.clusters.backends.kubernetes import build_pod
from tests.backends.k8s_standin import StandIn
api = StandIn().start()
api.add("pods", build_pod(pod_spec()))
api.pod_started("gpupool-jobs", "gp-1", "gpu-a", datetime(2026, 1, 1, tzinfo=UTC))
block = b"".join(LINE % (i, i % 10**6) for i in range(16384))
size = 0
while size < int(sys.argv[2]) * MIB:
    api.append_log("gp-1", block)
    size += len(block)
print(api.url, size, flush=True)
sys.stdin.read()  # until the bench closes it
api.stop()
"""


def pod_spec() -> JobSpec:
    return JobSpec(
        job_id=1, name="gp-1", kind="dev", image="x", command="true", flavor="A100",
        k8s_resource="nvidia.com/gpu", slurm_gres="gpu", workers=1, gpus_per_worker=1, gpu_milli=None,
        placement=((Slot("gpu-a", 0, 1000),),),
    )  # fmt: skip


def k8s_figures(mb: int, tail_bytes: int) -> dict:
    # The API server runs in its own process, so the memory traced here is the client's alone.
    root = str(Path(__file__).resolve().parents[1])
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE_POD_LOG, root, str(mb)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        url, size = server.stdout.readline().split()
        size = int(size)
        backend = KubernetesBackend(host=url, namespace="gpupool-jobs", token="t")
        tail_ms, tail_kib = timed(lambda: backend.log_tail("gp-1", max_bytes=tail_bytes), 20)
        tracemalloc.start()
        t0 = time.perf_counter()
        streamed = consume(backend.log_stream("gp-1"))
        stream_s = time.perf_counter() - t0
        stream_peak = tracemalloc.get_traced_memory()[1] / 1024
        tracemalloc.stop()
    finally:
        server.stdin.close()
        server.wait(30)
    assert streamed == size
    return {
        "k8s_log_bytes": size,
        "k8s_tail_ms": round(tail_ms, 3),
        "k8s_tail_peak_kib": round(tail_kib, 1),
        "k8s_stream_seconds": round(stream_s, 3),
        "k8s_stream_mib_per_s": round(size / MIB / stream_s, 1),
        "k8s_stream_peak_kib": round(stream_peak, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1024, help="Slurm output file size (MiB)")
    parser.add_argument("--k8s-mb", type=int, default=64, help="pod log size (MiB)")
    parser.add_argument("--tail-bytes", type=int, default=16384)
    args = parser.parse_args(argv)
    result = {"tail_bytes": args.tail_bytes, **slurm_figures(args.mb, args.tail_bytes)}
    result.update(k8s_figures(args.k8s_mb, args.tail_bytes))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
