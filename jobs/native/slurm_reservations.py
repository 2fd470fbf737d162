"""Write the portal's reservations and maintenance windows to Slurm as Slurm reservations (DESIGN
§17; docs/reservations.md), so native users see them (``scontrol show reservation``) and slurmctld
keeps their jobs out: a maintenance is ``Flags=MAINT`` on its nodes (``Users=root``: nobody's jobs
run there), a project's reservation is its nodes for the project's Slurm account
(``Accounts=<prefix><code>``). A count of a flavor is written as whole nodes — the fewest of the
flavor's nodes on the cluster that cover it, by name — since slurmctld reserves nodes, not GPUs.

The portal is the source: a reservation under the portal's names (``<prefix>resv_<id>``,
``<prefix>maint_<id>``) that the portal no longer has is deleted; one that differs in time or
nodes is updated in place (jobs running in it stay); the changes are returned (and logged) as the
drift found. Both sides compare ``StartTime``/``EndTime`` in the local time both this process and
scontrol read them in. A project's reservation has ``Flags=MAGNETIC``: the project's jobs, native
or the portal's, run in it without asking for it.

Which clusters: every active, not simulated Slurm cluster (as the account sync,
``jobs.native.slurm_accounts.accounts_clusters``). When: after every reservation change
(``jobs.sync_slurm_reservations``), and from beat with the account sync.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from jobs.clusters.backends.base import BackendError
from jobs.native.slurm_accounts import accounts_clusters, naming
from jobs.reservation_models import Reservation
from jobs.reservations import live_windows
from quotas.models import Cluster, Node

log = logging.getLogger(__name__)
FLAGS_MAINT = "MAINT,IGNORE_JOBS"
# MAGNETIC: the project's jobs (native ones and the portal's, which name no reservation) run in
# it without asking for it (``--reservation``); others cannot.
FLAGS_PROJECT = "IGNORE_JOBS,MAGNETIC"


@dataclass(frozen=True, slots=True)
class SlurmReservation:
    name: str
    start: str  # scontrol's form, local time: 2026-12-07T20:00:00; "now" once it has started
    end: str
    nodes: tuple[str, ...]
    maint: bool
    accounts: str  # "" for a maintenance (Users=root)

    def create_args(self) -> list[str]:
        who = ["Users=root"] if self.maint else [f"Accounts={self.accounts}"]
        return ["scontrol", "create", "reservation", f"ReservationName={self.name}",
                f"StartTime={self.start}", f"EndTime={self.end}", f"Nodes={','.join(self.nodes)}",
                f"Flags={FLAGS_MAINT if self.maint else FLAGS_PROJECT}", *who]


def slurm_time(at: datetime) -> str:
    return at.astimezone().replace(tzinfo=None).strftime("%Y-%m-%dT%H:%M:%S")


def _names(resv: Reservation, prefix: str) -> str:
    return f"{prefix}maint_{resv.pk}" if resv.maintenance else f"{prefix}resv_{resv.pk}"


def desired(cluster: Cluster, windows: list[Reservation], prefix: str,
            now: datetime) -> dict[str, SlurmReservation]:
    """The Slurm reservations ``cluster`` should hold for ``windows`` (those with nodes there). One
    that has started is created from "now" (slurmctld refuses a start in the past)."""
    nodes = list(Node.objects.filter(cluster=cluster).order_by("name"))
    out: dict[str, SlurmReservation] = {}
    taken: set[str] = {n.name for w in windows for n in w.nodes.all() if n.cluster_id == cluster.pk}
    for w in windows:
        if w.gpus:
            names = _cover(w, [n for n in nodes if n.flavor_id == w.flavor_id and n.name not in taken])
            taken.update(names)
        else:
            names = tuple(sorted(n.name for n in w.nodes.all() if n.cluster_id == cluster.pk))
        if not names:
            continue
        name = _names(w, prefix)
        account = "" if w.maintenance else f"{prefix}{w.project.code.lower()}"
        start = "now" if w.starts_at <= now else slurm_time(w.starts_at)
        out[name] = SlurmReservation(name, start, slurm_time(w.ends_at), names, w.maintenance, account)
    return out


def _cover(w: Reservation, free: list[Node]) -> tuple[str, ...]:
    """The fewest of ``free`` (largest first, then by name) whose GPUs cover the count."""
    chosen, left = [], w.gpus
    for node in sorted(free, key=lambda n: (-n.gpu_count, n.name)):
        if left <= 0:
            break
        chosen.append(node.name)
        left -= node.gpu_count
    return tuple(sorted(chosen)) if left <= 0 else ()


def parse_shown(text: str, prefix: str) -> dict[str, dict[str, str]]:
    """``scontrol -o show reservation``: the portal's reservations by name, their fields."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        name = fields.get("ReservationName", "")
        if name.startswith((f"{prefix}resv_", f"{prefix}maint_")):
            out[name] = fields
    return out


def plan(want: dict[str, SlurmReservation], shown: dict[str, dict[str, str]],
         hostnames) -> list[tuple[str, str, list[list[str]]]]:
    """(change, name, commands): delete what the portal no longer has, create what is missing,
    update what differs in time or nodes (in place: jobs running in it stay), replace one whose
    kind changed (``hostnames`` expands Slurm's node list: ``node[1-2]``)."""
    changes = []
    for name in sorted(set(shown) - set(want)):
        changes.append(("delete", name, [["scontrol", "delete", f"ReservationName={name}"]]))
    for name, spec in sorted(want.items()):
        have = shown.get(name)
        if have is None:
            changes.append(("create", name, [spec.create_args()]))
        elif ("MAINT" in have.get("Flags", "").split(",")) != spec.maint:
            changes.append(("replace", name, [["scontrol", "delete", f"ReservationName={name}"],
                                              spec.create_args()]))
        else:
            fields = _differing(spec, have, hostnames)
            if fields:
                changes.append(("update", name, [["scontrol", "update", f"ReservationName={name}", *fields]]))
    return changes


def _differing(spec: SlurmReservation, have: dict[str, str], hostnames) -> list[str]:
    """The ``Field=value`` settings that bring ``have`` to ``spec`` (a started one keeps its start)."""
    fields = []
    if spec.start != "now" and have.get("StartTime") != spec.start:
        fields.append(f"StartTime={spec.start}")
    if have.get("EndTime") != spec.end:
        fields.append(f"EndTime={spec.end}")
    if tuple(sorted(hostnames(have.get("Nodes", "")))) != spec.nodes:
        fields.append(f"Nodes={','.join(spec.nodes)}")
    return fields


def _run(env: dict, args: Sequence[str]) -> str:
    try:
        done = subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=30,  # noqa: S603
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendError(f"{args[0]}: {exc}") from exc
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise BackendError(f"{' '.join(args[:3])} failed: {detail[-1] if detail else done.returncode}")
    return done.stdout


def sync_cluster_reservations(cluster: Cluster, *, now: datetime | None = None) -> list[dict]:
    """Bring ``cluster``'s Slurm reservations in step; returns the drift found and fixed."""
    now = now or timezone.now()
    conf = (cluster.config or {}).get("slurm_conf") or os.environ["SLURM_CONF"]
    env = {**os.environ, "SLURM_CONF": conf}
    prefix = naming().prefix
    want = desired(cluster, live_windows(now), prefix, now)
    shown = parse_shown(_run(env, ["scontrol", "-o", "show", "reservation"]), prefix)

    def hostnames(nodes: str) -> list[str]:
        if not nodes or nodes == "(null)":
            return []
        return _run(env, ["scontrol", "show", "hostnames", nodes]).split()

    drift = []
    for change, name, commands in plan(want, shown, hostnames):
        for args in commands:
            try:
                _run(env, args)
            except BackendError as exc:
                # slurmctld keeps a reservation its jobs run in ("in use"): it is ended instead;
                # the jobs run on, and it goes when they end. One second ahead, not "now": a
                # reservation created with StartTime=now in this same second would otherwise end
                # where it starts, which slurmctld refuses ("Invalid time specified").
                if args[1] != "delete" or "in use" not in str(exc):
                    raise
                _run(env, ["scontrol", "update", f"ReservationName={name}", "EndTime=now+1"])
                change = "end"
        drift.append({"change": change, "name": name})
        log.info("slurm reservation %s on %s: %s", name, cluster.name, change)
    return drift


def sync_all(*, now: datetime | None = None) -> dict[str, list[dict] | str]:
    """Every Slurm cluster the account sync covers; a cluster that fails is reported, not fatal."""
    out: dict[str, list[dict] | str] = {}
    for cluster in accounts_clusters():
        try:
            out[cluster.name] = sync_cluster_reservations(cluster, now=now)
        except BackendError as exc:
            log.warning("slurm reservations on %s: %s", cluster.name, exc)
            out[cluster.name] = str(exc)
    return out

