"""What the engine is built on besides jobs (``Config``), read in ONE statement.

Every scheduling cycle compares the configuration with the one its warm engine was built on, so
this read runs every cycle. It used to be eleven ORM queries and ~25 ms of a 5,000-job cycle (issue
32 item 24). Now one statement takes a digest of every row the configuration needs and builds the
rows as one JSON text only when the digest differs from the one the reader holds: unchanged rows
are not built, sent or parsed again, and the effective limits are recomputed only when a quota
window or a loan starts or ends. Digest and rows come from one statement, so from one snapshot: a
change and its undoing between two statements can never leave a stale configuration behind a
matching digest.

Only the columns the engine uses are read (a node's ``last_seen_at``, touched by every inventory
sync, changes nothing). The over-budget tenants depend on usage, not on these rows: the providers
run every cycle.

Fair share (DESIGN §16): the shares of every node (an admin's weight, else its quota in normalised
cards) come from these rows, so a weight edit rebuilds a warm engine like a quota edit; the decayed
usage changes every instant and is read apart (:func:`fair_usage`), by the hooks billing fills."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, time
from decimal import Decimal

from django.conf import settings
from django.db import connection

from jobs.rule_models import FAIR_ENTRY_DEFAULT_SECONDS, FAIR_HALF_LIFE_DEFAULT_SECONDS, Packing
from jobs.scheduler.engine.model import Node as CoreNode
from jobs.scheduler.engine.model import NodePower
from jobs.scheduler.engine.model import PriorityClass as CorePriorityClass
from jobs.scheduler.engine.model import Window as CoreWindow
from jobs.scheduling import rack_power
from portal.models import Queueing
from quotas.admission import Limits, TreeNode
from quotas.effective import Limits as BaseLimits
from quotas.effective import LoanSpan, Window, effective_limits
from quotas.fair_shares import shares_of
from quotas.models import LoanState, NodeState
from quotas.selectors import site_zone

MILLI = 1000
# Hooks through which apps above `jobs` add to the configuration without `jobs` importing them:
# callables ``provider(now) -> Iterable[tree node id]`` of tenants over budget (billing).
over_budget_providers: list = []
# callables ``provider(now, half_life_s) -> Mapping[project tree id, decayed normalised
# card-seconds]`` (billing.fairshare): the fair share's usage. None registered: no usage.
fair_usage_providers: list = []


def cuda_version(text: str | None) -> tuple[int, ...]:
    """"12.4" → (12, 4); empty or unreadable (an inventory's odd string) → () — not reported."""
    parts = (text or "").strip().split(".")
    return tuple(int(x) for x in parts) if all(x.isdigit() and x.isascii() for x in parts) else ()


def milli(value: Decimal | None) -> int | None:
    return None if value is None else int((value * MILLI).to_integral_value())


@dataclass(frozen=True)
class Config:
    """What the engine is built on besides jobs. A warm engine is rebuilt when it changes
    (a quota edit, a loan or window starting or ending, a node going down, …)."""

    nodes: tuple[CoreNode, ...]
    tree: tuple[TreeNode, ...]
    limits: dict
    classes: tuple[CorePriorityClass, ...]
    over_budget: frozenset[str]
    budget_exempt: frozenset[str] = frozenset()
    # A queued job's alternatives are its still-active flavors (snapshot._JOBS_SQL): when that set
    # changes, a warm engine's queue is stale.
    active_flavors: frozenset[str] = frozenset()
    # Queueing strategies (docs/scheduling.md): projects under strict FIFO, their own aging
    # bounds, the centre's default (None: none).
    strict_fifo: frozenset[str] = frozenset()
    aging_bounds: tuple[tuple[str, int], ...] = ()
    default_aging_bound: int | None = None
    # Per-user caps (DESIGN §16): (project tree id, (GPU milli, running jobs)) of capped projects.
    user_caps: tuple[tuple[str, tuple[int | None, int | None]], ...] = ()
    # The operator's engine settings (jobs.scheduling.settings): a change rebuilds a warm engine.
    fragmentation_aware: bool = True
    backfill: bool = True
    # Fair share (DESIGN §16): the centre's half-life and entry time, and every department's and
    # project's shares (tree id → normalised cards or an admin's weight).
    fair_half_life_s: int = FAIR_HALF_LIFE_DEFAULT_SECONDS
    fair_entry_s: int = FAIR_ENTRY_DEFAULT_SECONDS
    fair_shares: dict = field(default_factory=dict)
    # Reservations and maintenance windows not yet over, and the queues on hold or draining
    # (DESIGN §17): one starting, ending or set rebuilds a warm engine.
    windows: tuple[CoreWindow, ...] = ()
    queues_held: frozenset[str] = frozenset()
    # Consolidation (jobs/scheduler/engine/consolidate.py): the centre's hourly budget of moves, 0: off.
    consolidation_moves_per_hour: int = 0
    # Rack power (DESIGN §18, jobs.scheduling.rack_power): capped racks and their nodes.
    rack_caps: dict = field(default_factory=dict)
    node_power: dict = field(default_factory=dict)


# The configuration's parts, in the order Rows.parse reads them: (columns, rows, order). Numbers
# as text (Decimal, exactly), times and instants as ISO text. Orders are the ones the ORM reads
# used (Node's and the tree's Meta orderings, id last), so the engine sees everything as before.
_PARTS = (
    ("name, value, preemptible, grace_seconds, min_runtime_seconds", "jobs_priorityclass", "id"),
    ("name", "quotas_flavor WHERE active", "name"),
    ("backfill, packing, fair_share_half_life_seconds, fair_share_entry_seconds, "
     "consolidation_moves_per_hour",
     "jobs_schedulersettings WHERE id = 1", "id"),
    ("n.id, f.name, n.gpu_count, n.zone, n.spine, n.leaf, n.state, n.cluster_id, n.cpu_millicores, "
     "n.memory_mib, n.local_disk_gib, n.cuda_version",
     "quotas_node n JOIN quotas_flavor f ON f.id = n.flavor_id JOIN quotas_cluster c ON c.id = n.cluster_id"
     " WHERE c.active", "n.cluster_id, n.zone, n.spine, n.leaf, n.name, n.id"),
    ("id, parent_id", "portal_department", "code, id"),
    ("id, department_id, queueing, aging_bound_seconds, user_gpu_cap, user_running_jobs_cap",
     "portal_project", "code, id"),
    ("q.id, q.department_id, q.project_id, f.name, q.quota::text, q.borrow_limit::text, q.lend_limit::text",
     "quotas_quotanode q JOIN quotas_flavor f ON f.id = q.flavor_id", "q.id"),
    ("quota_node_id, weekdays, start_time::text, end_time::text, quota::text, lend_limit::text",
     "quotas_quotawindow WHERE active", "id"),
    ("lender_id, borrower_id, amount::text, starts_at, ends_at",
     f"quotas_loan WHERE state = '{LoanState.ACTIVE.value}'", "id"),
    ("department_id, over_budget", "jobs_approvalpolicy", "department_id"),
    # Fair share: each flavor's normalised cards per unit (§14: its relative throughput × the card
    # fraction of a unit) and the admins' weights.
    ("name, (relative_throughput * fraction_numerator / fraction_denominator)::text", "quotas_flavor",
     "name"),
    ("department_id, project_id, weight::text", "quotas_fairshareweight", "id"),
    rack_power.PART,  # capped racks and their nodes' power (DESIGN §18)
)


def _as_json(cols: str, rows: str, order: str) -> str:
    return f"(SELECT coalesce(json_agg(json_build_array({cols}) ORDER BY {order}), '[]') FROM {rows})"  # noqa: S608


def _hashed(k: int, cols: str, rows: str, order: str) -> str:
    return f"SELECT {k} || ROW({cols}, {order})::text AS t FROM {rows}"  # noqa: S608


def _digest_of(parts) -> str:
    rows = " UNION ALL ".join(_hashed(k, *part) for k, part in enumerate(parts))
    return f"(SELECT count(*) || ':' || coalesce(sum(hashtextextended(t, 0)), 0) FROM ({rows}) AS r)"  # noqa: S608


# The digest: the count of the rows and the sum of a hash of each (its part, its columns and its
# order keys). It needs no sort — the order is a function of the rows — so it costs a scan of them:
# a third of building them as JSON (2,500 nodes: 2.4 against 5.8 ms).
_DIGEST = _digest_of(_PARTS)
# Every cycle: the digest alone (one statement).
DIGEST_SQL = f"SELECT {_DIGEST}"
# When it changed: the rows as JSON and their digest, in one statement so from one snapshot — the
# digest kept is the one of the rows kept, so a change undone since can never hide behind it.
CONFIG_SQL = f"SELECT {_DIGEST}, json_build_array({', '.join(_as_json(*part) for part in _PARTS)})::text"


def _decimal(text: str | None) -> Decimal | None:
    return None if text is None else Decimal(text)


def _windows(rows: list) -> dict[int, list[Window]]:
    """Active quota windows per quota node, in id order (the first covering one wins)."""
    by_node: dict[int, list[Window]] = {}
    for node_id, weekdays, start, end, quota, lend in rows:
        by_node.setdefault(node_id, []).append(Window(
            frozenset(int(d) for d in weekdays), time.fromisoformat(start), time.fromisoformat(end),
            _decimal(quota), _decimal(lend)))
    return by_node


def _loans(rows: list) -> tuple[tuple[LoanSpan, ...], dict[int, list[LoanSpan]], dict[int, list[LoanSpan]]]:
    """Active loans: all of them, and per lender and per borrower quota node. Whether one is
    running at an instant is the effective limits' question (``LoanSpan.active_at``)."""
    spans, out_of, into = [], {}, {}
    for lender, borrower, amount, starts, ends in rows:
        span = LoanSpan(Decimal(amount), datetime.fromisoformat(starts), datetime.fromisoformat(ends))
        spans.append(span)
        out_of.setdefault(lender, []).append(span)
        into.setdefault(borrower, []).append(span)
    return tuple(spans), out_of, into


@dataclass(frozen=True)
class QuotaRow:
    key: tuple[str, str]  # (tree node id, flavor name)
    base: BaseLimits
    windows: tuple[Window, ...]  # active ones, in id order: the first covering one wins
    loans_out: tuple[LoanSpan, ...]
    loans_in: tuple[LoanSpan, ...]


@dataclass
class Rows:
    """The parsed configuration rows; everything here depends on the rows alone, not on time."""

    classes: tuple[CorePriorityClass, ...]
    active: frozenset[str]
    flags: tuple[bool, bool]  # (fragmentation_aware, backfill)
    fair: tuple[int, int]  # (half-life, entry time) in seconds
    shares: dict[str, float]  # tree id → fair-share shares
    nodes: tuple[CoreNode, ...]
    tree: tuple[TreeNode, ...]
    strict: frozenset[str]
    bounds: tuple[tuple[str, int], ...]
    quota: tuple[QuotaRow, ...]
    windows: tuple[Window, ...]
    loans: tuple[LoanSpan, ...]
    policies: dict[int, bool]
    parents: dict[int, int | None]
    projects: tuple[tuple[int, int], ...]  # (id, department id)
    user_caps: tuple[tuple[str, tuple[int | None, int | None]], ...] = ()
    moves_per_hour: int = 0  # consolidation's hourly budget (0: off)
    rack_caps: dict[str, int] = field(default_factory=dict)
    node_power: dict[str, NodePower] = field(default_factory=dict)
    exempt: frozenset[str] | None = field(default=None)  # computed when first needed

    @classmethod
    def parse(cls, doc: str) -> Rows:
        (classes, active, flags, nodes, departments, projects, quota, windows, loans, policies, norms,
         weights, power) = json.loads(doc)
        rack_caps, node_power = rack_power.parse(power)
        backfill, packing, half_life, entry, moves = flags[0] if flags else (
            True, Packing.FRAGMENTATION_AWARE, FAIR_HALF_LIFE_DEFAULT_SECONDS, FAIR_ENTRY_DEFAULT_SECONDS, 0)
        by_node = _windows(windows)
        spans, out_of, into = _loans(loans)
        return cls(
            classes=tuple(CorePriorityClass(*row) for row in classes),
            active=frozenset(name for (name,) in active),
            flags=(packing == Packing.FRAGMENTATION_AWARE, backfill),
            fair=(half_life, entry),
            moves_per_hour=moves,
            shares=fair_shares(departments, projects, quota, norms, weights),
            nodes=tuple(
                CoreNode(f"n{pk}", flavor, gpus, zone, spine, leaf, schedulable=(state == NodeState.READY),
                         cluster=f"c{cluster}", cpu_millicores=cpu, memory_mib=memory,
                         local_disk_gib=disk, cuda=cuda_version(cuda))
                for pk, flavor, gpus, zone, spine, leaf, state, cluster, cpu, memory, disk, cuda in nodes
            ),
            tree=tuple(
                [TreeNode(f"d{pk}", f"d{up}" if up else None, "department") for pk, up in departments]
                + [TreeNode(f"p{pk}", f"d{dept}", "project") for pk, dept, *_ in projects]
            ),
            strict=frozenset(f"p{pk}" for pk, _d, q, *_ in projects if q == Queueing.STRICT_FIFO),
            bounds=tuple((f"p{pk}", b) for pk, _d, _q, b, *_ in sorted(projects) if b is not None),
            quota=tuple(
                QuotaRow(
                    (f"p{project}" if project else f"d{dept}", flavor),
                    BaseLimits(Decimal(q), _decimal(borrow), _decimal(lend)),
                    tuple(by_node.get(pk, ())), tuple(out_of.get(pk, ())), tuple(into.get(pk, ())),
                )
                for pk, dept, project, flavor, q, borrow, lend in quota
            ),
            windows=tuple(w for ws in by_node.values() for w in ws),
            loans=spans,
            policies=dict(policies),
            parents=dict(departments),
            projects=tuple((pk, dept) for pk, dept, *_ in projects),
            user_caps=tuple((f"p{pk}", (None if gpus is None else gpus * MILLI, jobs))
                            for pk, _d, _q, _b, gpus, jobs in projects
                            if gpus is not None or jobs is not None),
            rack_caps=rack_caps, node_power=node_power,
        )

    def budget_exempt(self) -> frozenset[str]:
        """Tree ids of the projects whose approval policy — the nearest department's up the tree,
        as at submission (``jobs.approvals.policy_for_project``) — turns the over-budget hold off."""
        if self.exempt is None:
            self.exempt = frozenset(f"p{pk}" for pk, dept in self.projects if not self._holds(dept))
        return self.exempt

    def _holds(self, dept: int | None) -> bool:
        seen = set()
        while dept is not None and dept not in seen:
            if dept in self.policies:
                return self.policies[dept]
            seen.add(dept)
            dept = self.parents.get(dept)
        return True  # no policy: a spent budget holds (DESIGN §3.9)


def fair_shares(departments: list, projects: list, quota: list, norms: list,
                weights: list) -> dict[str, float]:
    """Every department's and project's shares from the configuration's rows (``shares_of``)."""
    nodes = [f"d{pk}" for pk, _up in departments] + [f"p{pk}" for pk, *_rest in projects]
    return shares_of(
        nodes,
        ((f"p{project}" if project else f"d{dept}", flavor, Decimal(q))
         for _pk, dept, project, flavor, q, *_ in quota),
        {name: Decimal(factor) for name, factor in norms},
        {f"p{project}" if project else f"d{dept}": Decimal(weight) for dept, project, weight in weights},
    )


def fair_usage(now: datetime, half_life_s: int) -> dict[str, float]:
    """The decayed normalised card-seconds of every project with recent usage (tree id →), from
    the registered providers (billing's one statement); empty when none is registered."""
    usage: dict[str, float] = {}
    for provider in fair_usage_providers:
        for key, value in provider(now, half_life_s).items():
            usage[key] = usage.get(key, 0.0) + value
    return usage


class ConfigReader:
    """Reads the configuration each cycle: the digest of its rows, and the rows themselves only
    when it changed; computes the effective limits again only when a window or a loan starts or
    ends (or the zone changes). A warm engine keeps one; ``read_config`` uses a fresh one."""

    def __init__(self) -> None:
        self.digest: str | None = None
        self.rows: Rows | None = None
        self._limits_key: tuple | None = None
        self._limits: dict = {}

    def read(self, now: datetime) -> Config:
        if self.digest is None or _digest() != self.digest:
            self.digest, doc = _fetch()
            self.rows, self._limits_key = Rows.parse(doc), None
        rows = self.rows
        over_budget = frozenset(t for provider in over_budget_providers for t in provider(now))
        fragmentation_aware, backfill = rows.flags
        return Config(
            rows.nodes, rows.tree, self._limits_at(now), rows.classes, over_budget,
            rows.budget_exempt() if over_budget else frozenset(), rows.active, rows.strict, rows.bounds,
            settings.GPUPOOL["AGING_BOUND_SECONDS"] or None,
            user_caps=rows.user_caps, fragmentation_aware=fragmentation_aware, backfill=backfill,
            fair_half_life_s=rows.fair[0], fair_entry_s=rows.fair[1], fair_shares=rows.shares,
            windows=engine_windows(now), queues_held=held_queues(),
            consolidation_moves_per_hour=rows.moves_per_hour,
            rack_caps=rows.rack_caps, node_power=rows.node_power,
        )

    def _limits_at(self, now: datetime) -> dict[tuple[str, str], Limits]:
        zone = site_zone()
        local = now.astimezone(zone)
        # What the effective limits depend on besides the rows (quotas.effective).
        key = (zone.key, tuple(w.covers(local) for w in self.rows.windows),
               tuple(loan.active_at(now) for loan in self.rows.loans))
        if key != self._limits_key:
            self._limits = {}
            for row in self.rows.quota:
                e = effective_limits(row.base, at=now, zone=zone, windows=row.windows,
                                     loans_out=row.loans_out, loans_in=row.loans_in)
                self._limits[row.key] = Limits(milli(e.quota), milli(e.borrow_limit), milli(e.lend_limit))
            self._limits_key = key
        return self._limits


_WINDOWS_SQL = """
    SELECT r.id, r.project_id, f.name, r.gpus, r.starts_at, r.ends_at,
           ARRAY(SELECT rn.node_id FROM jobs_reservation_nodes rn WHERE rn.reservation_id = r.id
                 ORDER BY rn.node_id)
    FROM jobs_reservation r LEFT JOIN quotas_flavor f ON f.id = r.flavor_id
    WHERE r.state = 'active' AND r.ends_at > %s
    ORDER BY r.starts_at, r.id
"""


def engine_windows(now: datetime) -> tuple[CoreWindow, ...]:
    """The active reservations and maintenance windows not over at ``now`` (jobs.reservation_models),
    as the engine takes them: tree ids of projects, node ids, a count of a flavor."""
    with connection.cursor() as cursor:
        cursor.execute(_WINDOWS_SQL, [now])
        rows = cursor.fetchall()
    return tuple(
        CoreWindow(str(pk), start, end, None if project is None else f"p{project}",
                   tuple(f"n{n}" for n in nodes), flavor or "", gpus or 0)
        for pk, project, flavor, gpus, start, end, nodes in rows
    )


def held_queues() -> frozenset[str]:
    """Tree ids of the projects and departments whose queue is on hold or draining."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT project_id, department_id FROM jobs_queuesetting WHERE state <> 'open'")
        return frozenset(f"p{p}" if p is not None else f"d{d}" for p, d in cursor.fetchall())


def _digest() -> str:
    with connection.cursor() as cursor:
        cursor.execute(DIGEST_SQL)
        return cursor.fetchone()[0]


def _fetch() -> tuple[str, str]:
    """(digest, the rows as JSON text), from one snapshot."""
    with connection.cursor() as cursor:
        cursor.execute(CONFIG_SQL)
        return cursor.fetchone()


def read_rows() -> Rows:
    """The configuration's rows as they are now (nodes, tree, …), in one statement."""
    return Rows.parse(_fetch()[1])


def read_config(now: datetime) -> Config:
    """The configuration at ``now``, read afresh (a cold cycle, a forecast)."""
    return ConfigReader().read(now)
