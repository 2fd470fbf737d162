"""Cordon, drain and return a node to service (issue 24): platform admins only, each with a
reason, each an append-only ``NodeEvent``, each applied to the cluster through its backend
(``Backend.set_node_schedulable``).

- cordon: the node takes no new jobs; the jobs on it run on.
- drain: the same, and the admin says what happens to the jobs on it: they finish (``requeue``
  False; the node shows "draining" until it is returned), or they are sent back to the queue now
  (``requeue`` True) through the preemption path — a ``preemption_signal`` event, the backend
  stops them with the priority class's grace period where they checkpoint, the status sync
  records them preempted and requeues them (jobs.clusters.dispatch) — so events, metering and the
  checkpoint signal are those of any preemption.
- return to service: the hold is lifted, in the portal and on the cluster.

The hold lives in ``Node.hold``; ``Node.state`` is what the portal schedules by (the engine places
only on ready nodes, jobs/scheduling/snapshot.py) and the inventory sync never lifts a hold
(jobs/clusters/inventory.py).

Concurrency: each change locks the node row, then compares. Two admins cordoning at once: the
first cordons, the second finds it cordoned and changes nothing (no second event, no second
backend call). A backend that refuses leaves the portal unchanged (the transaction rolls back).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from jobs import reasons
from jobs.clusters.backends.base import BackendError
from jobs.clusters.backends.registry import backend_for
from jobs.models import Job
from jobs.scheduling.cycle import preemption_signal
from jobs.states import HOLDING
from portal.enqueue import enqueue
from portal.models import User
from portal.selectors import scope_for
from quotas.models import Node, NodeAction, NodeEvent, NodeHold, NodeState

REASON_MAX = 300
HOLD_OF = {NodeAction.CORDON: NodeHold.CORDONED, NodeAction.DRAIN: NodeHold.DRAINING, NodeAction.RETURN: ""}


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a call did: ``event`` None when the node already was where it was asked to go."""

    node: Node
    event: NodeEvent | None
    requeued: tuple[int, ...] = ()


def jobs_on_node(node: Node) -> list[Job]:
    """The jobs holding GPUs of the node (admitted or running), oldest first. Placements name
    nodes by id; the flavor's holding jobs are few (at most its GPUs), so they are read whole."""
    holding = (
        Job.objects.filter(state__in=list(HOLDING), flavor_id=node.flavor_id)
        .select_related("project")
        .order_by("admitted_at", "id")
    )
    return [job for job in holding if any(slot[0] == node.pk for worker in job.placement for slot in worker)]


def node_cordon(*, actor: User, node: Node, reason: str) -> Outcome:
    return _change(actor, node, NodeAction.CORDON, reason)


def node_drain(*, actor: User, node: Node, reason: str, requeue: bool) -> Outcome:
    return _change(actor, node, NodeAction.DRAIN, reason, requeue=requeue)


def node_return(*, actor: User, node: Node, reason: str) -> Outcome:
    return _change(actor, node, NodeAction.RETURN, reason)


def _clean_reason(reason) -> str:
    text = " ".join(str(reason or "").split())
    if not text:
        raise ValidationError({"reason": [_("Say why (the reason is kept with the node's history).")]})
    if len(text) > REASON_MAX:
        raise ValidationError({"reason": [_("At most %(max)d characters.") % {"max": REASON_MAX}]})
    return text


def _change(actor: User, node: Node, action: str, reason: str, *, requeue: bool = False) -> Outcome:
    if not scope_for(actor).platform_admin:
        raise PermissionDenied(_("Only platform admins cordon, drain or return nodes."))
    text = _clean_reason(reason)
    hold = HOLD_OF[action]
    now = timezone.now()
    with transaction.atomic():
        locked = Node.objects.select_for_update().select_related("cluster", "flavor").get(pk=node.pk)
        on_node = jobs_on_node(locked)
        to_requeue = [j for j in on_node if j.terminating_since is None] if requeue else []
        # A node cordoned outside the portal (no hold) still takes a hold, or is returned.
        there = locked.hold == hold and (hold or locked.state in (NodeState.READY, NodeState.DOWN))
        if there and not to_requeue:
            return Outcome(locked, None)
        if not there:
            cluster = locked.cluster
            try:
                backend_for(cluster.kind, cluster.config or {}).set_node_schedulable(
                    locked.name, not hold, reason=text
                )
            except BackendError as exc:
                raise ValidationError(
                    _("The cluster %(cluster)s refused the change: %(error)s")
                    % {"cluster": cluster.name, "error": exc}
                ) from exc
        before = locked.state
        locked.hold = hold
        if before != NodeState.DOWN:
            locked.state = hold or NodeState.READY
        if action == NodeAction.RETURN:
            # Repaired: the health check's hold (flapping damped or not) ends with the operator's
            # word; a signal still there cordons it again at the next poll (jobs.clusters.health).
            locked.health_reason, locked.health_damped = "", False
        locked.save(update_fields=["hold", "state", "health_reason", "health_damped"])
        requeued = _signal_requeue(to_requeue, locked, text, now)
        event = NodeEvent.objects.create(
            node=locked,
            action=action,
            from_state=before,
            to_state=locked.state,
            reason=text,
            actor=actor,
            at=now,
            data={"jobs": [j.pk for j in on_node], "requeued": requeued},
        )
        if requeued:
            enqueue("jobs.backend_work")  # stop them now rather than at beat's next run
    return Outcome(locked, event, tuple(requeued))


def _signal_requeue(jobs: list[Job], node: Node, text: str, now) -> list[int]:
    """Signal preemption to each job, as the scheduler's preemptions do (only jobs still holding
    GPUs and not signalled already)."""
    why = reasons.reason(reasons.NODE_DRAINED, node=node.name, reason=text)
    return preemption_signal([(job.pk, why) for job in jobs], now, data={"node": node.name})
