"""What the engine is built on besides jobs (``Config``), read in ONE statement.

Every scheduling cycle compares the configuration with the one its warm engine was built on, so
this read runs every cycle. It used to be eleven ORM queries and ~25 ms of a 5,000-job cycle (issue
32 item 24). Now the database builds every row the configuration needs as one JSON text and its
md5 in a single statement, and sends the text only when the md5 differs from the one the reader
holds; unchanged rows are not sent or parsed again, and the effective limits are recomputed only
when a quota window or a loan starts or ends. Rows and md5 come from one statement, so from one
snapshot: a change and its undoing between two statements can never leave a stale configuration
behind a matching fingerprint.

Only the columns the engine uses are read (a node's ``last_seen_at``, touched by every inventory
sync, changes nothing). The over-budget tenants depend on usage, not on these rows: the providers
run every cycle."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, time
from decimal import Decimal

from django.conf import settings
from django.db import connection

from jobs.rule_models import Packing
from jobs.scheduler.engine.model import Node as CoreNode
from jobs.scheduler.engine.model import PriorityClass as CorePriorityClass
from portal.models import Queueing
from quotas.admission import Limits, TreeNode
from quotas.effective import Limits as BaseLimits
from quotas.effective import LoanSpan, Window, effective_limits
from quotas.models import LoanState, NodeState
from quotas.selectors import site_zone

MILLI = 1000
# Hooks through which apps above `jobs` add to the configuration without `jobs` importing them:
# callables ``provider(now) -> Iterable[tree node id]`` of tenants over budget (billing).
over_budget_providers: list = []


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
    # The operator's engine settings (jobs.scheduling.settings): a change rebuilds a warm engine.
    fragmentation_aware: bool = True
    backfill: bool = True


def _rows(select: str, order: str) -> str:
    return f"(SELECT coalesce(json_agg(json_build_array({select}) ORDER BY {order}), '[]') FROM"


# Numbers as text (Decimal, exactly), times and instants as ISO text. Orders are the ones the ORM
# reads used (Node's and the tree's Meta orderings), so the engine sees everything in the same order.
_CONFIG_JSON = f"""
    json_build_array(
        {_rows("name, value, preemptible, grace_seconds", "id")} jobs_priorityclass),
        {_rows("name", "name")} quotas_flavor WHERE active),
        (SELECT json_build_array(backfill, packing) FROM jobs_schedulersettings WHERE id = 1),
        {_rows("n.id, f.name, n.gpu_count, n.zone, n.spine, n.leaf, n.state, n.cluster_id",
               "n.cluster_id, n.zone, n.spine, n.leaf, n.name, n.id")}
            quotas_node n JOIN quotas_flavor f ON f.id = n.flavor_id
            JOIN quotas_cluster c ON c.id = n.cluster_id WHERE c.active),
        {_rows("id, parent_id", "code, id")} portal_department),
        {_rows("id, department_id, queueing, aging_bound_seconds", "code, id")} portal_project),
        {_rows("q.id, q.department_id, q.project_id, f.name, q.quota::text, q.borrow_limit::text, "
               "q.lend_limit::text", "q.id")}
            quotas_quotanode q JOIN quotas_flavor f ON f.id = q.flavor_id),
        {_rows("quota_node_id, weekdays, start_time::text, end_time::text, quota::text, lend_limit::text",
               "id")} quotas_quotawindow WHERE active),
        {_rows("lender_id, borrower_id, amount::text, starts_at, ends_at", "id")}
            quotas_loan WHERE state = '{LoanState.ACTIVE.value}'),
        {_rows("department_id, over_budget", "department_id")} jobs_approvalpolicy)
    )::text"""  # noqa: S608 - constants only
# The text only when its md5 is not the caller's (%s: the md5 it holds, or NULL).
# MATERIALIZED: built once (inlined, each reference of ``doc`` would build it again).
CONFIG_SQL = f"""
    WITH built AS MATERIALIZED (SELECT {_CONFIG_JSON} AS doc),
         hashed AS (SELECT doc, md5(doc) AS digest FROM built)
    SELECT digest, CASE WHEN digest IS DISTINCT FROM %s THEN doc END FROM hashed
"""  # noqa: S608 - constants only


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
    exempt: frozenset[str] | None = field(default=None)  # computed when first needed

    @classmethod
    def parse(cls, doc: str) -> Rows:
        classes, active, flags, nodes, departments, projects, quota, windows, loans, policies = (
            json.loads(doc))
        backfill, packing = flags if flags is not None else (True, Packing.FRAGMENTATION_AWARE)
        by_node = _windows(windows)
        spans, out_of, into = _loans(loans)
        return cls(
            classes=tuple(CorePriorityClass(*row) for row in classes),
            active=frozenset(name for (name,) in active),
            flags=(packing == Packing.FRAGMENTATION_AWARE, backfill),
            nodes=tuple(
                CoreNode(f"n{pk}", flavor, gpus, zone, spine, leaf, schedulable=(state == NodeState.READY),
                         cluster=f"c{cluster}")
                for pk, flavor, gpus, zone, spine, leaf, state, cluster in nodes
            ),
            tree=tuple(
                [TreeNode(f"d{pk}", f"d{up}" if up else None, "department") for pk, up in departments]
                + [TreeNode(f"p{pk}", f"d{dept}", "project") for pk, dept, _q, _b in projects]
            ),
            strict=frozenset(f"p{pk}" for pk, _d, q, _b in projects if q == Queueing.STRICT_FIFO),
            bounds=tuple((f"p{pk}", b) for pk, _d, _q, b in sorted(projects) if b is not None),
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
            projects=tuple((pk, dept) for pk, dept, _q, _b in projects),
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


class ConfigReader:
    """Reads the configuration each cycle; parses it again only when its rows changed, computes
    the effective limits again only when a window or a loan starts or ends (or the zone changes).
    A warm engine keeps one; ``read_config`` uses a fresh one."""

    def __init__(self) -> None:
        self.digest: str | None = None
        self.rows: Rows | None = None
        self._limits_key: tuple | None = None
        self._limits: dict = {}

    def read(self, now: datetime) -> Config:
        digest, doc = _fetch(self.digest)
        if doc is not None:  # the rows changed (or were never read): parse them
            self.rows, self.digest, self._limits_key = Rows.parse(doc), digest, None
        rows = self.rows
        over_budget = frozenset(t for provider in over_budget_providers for t in provider(now))
        fragmentation_aware, backfill = rows.flags
        return Config(
            rows.nodes, rows.tree, self._limits_at(now), rows.classes, over_budget,
            rows.budget_exempt() if over_budget else frozenset(), rows.active, rows.strict, rows.bounds,
            settings.GPUPOOL["AGING_BOUND_SECONDS"] or None,
            fragmentation_aware=fragmentation_aware, backfill=backfill,
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


def _fetch(digest: str | None) -> tuple[str, str | None]:
    """(md5, the rows as JSON text, or None when their md5 is ``digest``)."""
    with connection.cursor() as cursor:
        cursor.execute(CONFIG_SQL, [digest])
        return cursor.fetchone()


def read_rows() -> Rows:
    """The configuration's rows as they are now (nodes, tree, …), in one statement."""
    return Rows.parse(_fetch(None)[1])


def read_config(now: datetime) -> Config:
    """The configuration at ``now``, read afresh (a cold cycle, a forecast)."""
    return ConfigReader().read(now)
