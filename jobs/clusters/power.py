"""Rack power (DESIGN §18): DCGM power from Prometheus, and each rack's planned and measured draw.

- ``poll_node_power`` (every metrics poll, ``jobs.poll_metrics``): each node's GPU power, the sum of
  ``DCGM_FI_DEV_POWER_USAGE`` (watts per GPU) by the exporter's ``Hostname`` label, stored on the
  node with its instant. The engine takes it in place of the estimate while it is recent
  (jobs.scheduling.rack_power); a Prometheus outage leaves the last figure to grow stale, never a 0.
- ``rack_power``: what the node map shows per rack — the cap, the *planned* draw (idle draw plus
  the board power of every card a job holds, what the engine plans with), the *measured* draw
  (idle draw plus DCGM power where a recent measurement exists, the estimate elsewhere) and
  whether the rack is at its cap (no further card fits under it: no new placement there).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from jobs.clusters.metrics import prometheus
from jobs.models import Job
from jobs.scheduling.rack_power import MEASURED_FRESH_SECONDS
from jobs.states import HOLDING
from quotas.models import Cluster, Node, Rack

log = logging.getLogger(__name__)

POWER_QUERY = "sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE)"



def poll_node_power(now: datetime | None = None) -> int:
    """Store each measured node's GPU power; the number of nodes updated (0 when Prometheus is
    not configured or did not answer)."""
    if not settings.GPUPOOL.get("PROMETHEUS_URL"):
        return 0
    now = now or timezone.now()
    try:
        series = prometheus().custom_query(POWER_QUERY)
    except Exception as exc:  # any failure of the source: keep the last figures (they grow stale)
        log.warning("rack power: Prometheus did not answer: %s", exc)
        return 0
    by_host = {s["metric"].get("Hostname", ""): round(float(s["value"][1])) for s in series}
    updated = 0
    for watts in sorted(set(by_host.values())):
        hosts = [h for h, w in by_host.items() if w == watts and h]
        updated += Node.objects.filter(name__in=hosts).update(measured_watts=max(0, watts), measured_at=now)
    return updated


@dataclass(slots=True)
class RackPower:
    rack: Rack
    nodes: int
    planned_w: int
    measured_w: int
    measured_nodes: int  # nodes whose draw is measured (the rest are estimated)
    board_w: int  # the largest board power among its nodes' flavors (one more card)

    @property
    def cap_w(self) -> int | None:
        return None if self.rack.power_cap_kw is None else int(self.rack.power_cap_kw * 1000)

    @property
    def draw_w(self) -> int:
        """What the engine counts: the measurement where present, else the estimate."""
        return self.measured_w

    @property
    def at_cap(self) -> bool:
        """No further card of its largest board fits under the cap: new placements stop here."""
        cap = self.cap_w
        return cap is not None and self.draw_w + self.board_w > cap

    @property
    def over_cap(self) -> bool:
        cap = self.cap_w
        return cap is not None and self.draw_w > cap

    @staticmethod
    def kw(watts: int | None) -> Decimal | None:
        return None if watts is None else (Decimal(watts) / 1000).quantize(Decimal("0.01"))


def busy_units(node_ids: set[int], flavor_ids: set[int]) -> dict[int, int]:
    """Per node id of ``node_ids``, its units any job holds part of (one read of the jobs holding
    GPUs of ``flavor_ids``: a job admitted but not yet dispatched has no cluster yet)."""
    units: set[tuple[int, int]] = set()
    for placement in Job.objects.filter(state__in=list(HOLDING), flavor_id__in=flavor_ids).values_list(
        "placement", flat=True
    ):
        for worker in placement or ():
            units.update((node_id, gpu) for node_id, gpu, _milli in worker if node_id in node_ids)
    out: dict[int, int] = {}
    for node_id, _ in units:
        out[node_id] = out.get(node_id, 0) + 1
    return out


def rack_power(cluster: Cluster, now: datetime | None = None) -> list[RackPower]:
    """Each rack of ``cluster`` with nodes, with its planned and measured draw."""
    fresh = (now or timezone.now()) - timedelta(seconds=MEASURED_FRESH_SECONDS)
    nodes = list(Node.objects.filter(cluster=cluster, rack__isnull=False).select_related("flavor", "rack")
                 .order_by("rack__name", "name"))
    busy = busy_units({n.pk for n in nodes}, {n.flavor_id for n in nodes}) if nodes else {}
    out: dict[int, RackPower] = {}
    for node in nodes:
        board = _board(node)
        idle = node.idle_watts or 0
        estimate = idle + busy.get(node.pk, 0) * board
        measured = node.measured_at is not None and node.measured_at > fresh
        row = out.get(node.rack_id)
        if row is None:
            row = out[node.rack_id] = RackPower(node.rack, 0, 0, 0, 0, 0)
        row.nodes += 1
        row.planned_w += estimate
        row.measured_w += idle + node.measured_watts if measured else estimate
        row.measured_nodes += measured
        row.board_w = max(row.board_w, board)
    return list(out.values())


def _board(node: Node) -> int:
    """One busy unit's board power: a slice draws its fraction of its card's, rounded up."""
    f = node.flavor
    return -(-(f.board_watts or 0) * f.fraction_numerator // f.fraction_denominator)
