"""Fidelity of history as a trace (issue 25 item 1): a workload recorded by the production
scheduler (tests/history_scenario.py: the real ``schedule_once`` on the database, a loan and a
night window in force, reclaims and priority preemptions, a 5 s backend start latency, beat's
periodic cycle), exported by ``jobs.whatif.history`` and replayed by ``jobs.whatif.replay`` reproduces every
recorded queue delay within 1 s — the replay's 1 s event coalescing — once the replay mirrors
the service's backend start latency and periodic cycle (docs/replay.md, "History as a trace").
"""

import pytest

from jobs.whatif import history
from jobs.whatif.replay import fidelity
from tests.conftest import shared_rows
from tests.history_scenario import record

pytestmark = pytest.mark.django_db
PERIOD = 60.0  # the scenario's periodic cycle (beat's 5 s would make the test long)
TOLERANCE_S = 1.0  # the replay's --coalesce: events within 1 s share one cycle


@pytest.fixture(scope="module")
def exported(django_db_setup, django_db_blocker, tmp_path_factory):
    """One recording for the module (its rows rolled back after it): the tests read the export."""
    folder = tmp_path_factory.mktemp("history")

    def build():
        rec = record(seed=11, jobs=40, span_s=2.5 * 3600, latency=5.0, period=PERIOD)
        export = history.history_export(start=rec.start, end=rec.end)
        history.write_dir(export, folder)
        return rec, export, folder

    yield from shared_rows(django_db_blocker, build)


def test_replayed_queue_delays_match_the_recorded_ones(exported):
    rec, export, folder = exported
    assert rec.preemptions > 0 and export.manifest["loans"] == 1 and export.manifest["windows"] == 1
    assert export.manifest["backend_start_latency_s"] == 5.0
    result = fidelity.replay_export(folder, fidelity.export_options(folder, period=PERIOD))
    cmp = fidelity.compare(fidelity.read_recorded(folder), result)
    assert cmp["compared"] == 40
    assert cmp["avg_recorded_s"] > 600  # the scenario has real contention
    assert cmp["median_abs_error_s"] <= TOLERANCE_S
    assert cmp["p90_abs_error_s"] <= TOLERANCE_S
    assert cmp["max_abs_error_s"] <= TOLERANCE_S
    for tenant, row in cmp["tenants"].items():
        assert abs(row["avg_replayed_s"] - row["avg_recorded_s"]) <= TOLERANCE_S, tenant
    assert result["preemptions"] == rec.preemptions


def test_without_the_periodic_cycle_and_the_start_latency_the_replay_drifts(exported):
    """What the two settings buy: an event-only replay that starts jobs when admitted misses the
    decisions the service took between events and frees GPUs 5 s early, and the errors cascade."""
    _rec, _export, folder = exported
    plain = fidelity.replay_export(folder, fidelity.export_options(folder, period=0.0, start_latency=0.0))
    cmp = fidelity.compare(fidelity.read_recorded(folder), plain)
    assert cmp["max_abs_error_s"] > TOLERANCE_S


def test_the_export_carries_the_services_fair_share_and_its_replay_uses_it(exported, tmp_path):
    """The service orders by fair share (DESIGN §16): the export carries each node's shares (its
    quota in normalised cards here: no admin weights), the service's half-life and entry charge,
    and the replay of it orders by fair share — the recorded delays above are reproduced with it.
    ``shares=False`` leaves it out: that replay orders by dominant share alone."""
    rec, export, folder = exported
    quotas = export.cluster["quotas"]
    assert set(quotas) <= set(export.cluster["shares"])
    for node, per in quotas.items():  # the scenario's flavors keep relative throughput 1.0
        assert export.cluster["shares"][node] == sum(float(e["quota"]) for e in per.values())
    block = export.cluster["fair_share"]
    assert (block["half_life_s"], block["entry_s"]) == (604800, 3600)
    replayed = fidelity.replay_export(folder, fidelity.export_options(folder, period=PERIOD))
    assert replayed["fair_share"] is True
    plain = history.history_export(start=rec.start, end=rec.end, shares=False)
    assert "shares" not in plain.cluster and "fair_share" not in plain.cluster
    history.write_dir(plain, tmp_path)
    replayed = fidelity.replay_export(tmp_path, fidelity.export_options(tmp_path, period=PERIOD))
    assert replayed["fair_share"] is False
