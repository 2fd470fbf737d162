"""An array task's index (DESIGN §17) reaches its workers as GPUPOOL_ARRAY_INDEX on Kubernetes (a
schema-valid manifest of every kind) and in the simulator (its log names it, against a real
simserver process). Slurm's is shown on a real slurmctld in tests/backends/test_slurm_workflows.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobs.clusters.backends.kubernetes import build_manifest
from tests.backends.test_kubernetes import container, make_spec, pod_of, validate
from tests.backends.test_simulator import spec
from tests.backends.test_simulator_environment import NODES, steps
from tests.waiting import wait_until


@pytest.mark.parametrize("kind", ["training", "inference", "dev"])
def test_a_kubernetes_task_has_its_index_and_a_plain_job_none(kind):
    task = build_manifest(replace(make_spec(kind, workers=1), array_index=17))
    validate(task)
    env = container(pod_of(task))["env"]
    assert {"name": "GPUPOOL_ARRAY_INDEX", "value": "17"} in env
    plain = container(pod_of(build_manifest(make_spec(kind, workers=1))))["env"]
    assert "GPUPOOL_ARRAY_INDEX" not in {e["name"] for e in plain}


def test_a_simulated_task_names_its_index_in_its_log(simserver):
    sim = simserver.backend()
    sim.set_inventory(NODES)
    sim.submit(replace(spec("gp-31"), array_index=4))
    sim.submit(spec("gp-32", workers=(("n2", (0,)),)))  # beside it, not behind it
    for name in ("gp-31", "gp-32"):
        wait_until(lambda n=name: steps(sim.log_tail(n, max_bytes=4096).text), f"{name}'s first step",
                   interval=0.02)
    first_lines = {n: sim.log_tail(n, max_bytes=4096).text.splitlines()[1] for n in ("gp-31", "gp-32")}
    assert first_lines["gp-31"].endswith(" GPUPOOL_ARRAY_INDEX=4"), first_lines
    assert "GPUPOOL_ARRAY_INDEX" not in first_lines["gp-32"]
