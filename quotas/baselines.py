"""Software baselines (DESIGN §15): writes for platform admins and the reads that judge nodes
against them (:mod:`quotas.drift` decides; this module feeds it rows).

A cluster's baseline for a flavor overrides the flavor's baseline for every cluster.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from portal import permissions as perm
from portal.models import User
from portal.selectors import scope_for

from . import drift as drift_rules
from .drift import Drift
from .models import Cluster, Flavor, Node, SoftwareBaseline

# Shown on the node map's badge, the node page and the report (zh and en).
DRIFT_LABELS = {
    drift_rules.OLDER: gettext_lazy("older than baseline"),
    drift_rules.UNREPORTED: gettext_lazy("version not reported"),
    drift_rules.DRIVER: gettext_lazy("driver differs"),
    drift_rules.CUDA: gettext_lazy("CUDA differs"),
    drift_rules.OK: gettext_lazy("on baseline"),
    drift_rules.NONE: gettext_lazy("no baseline"),
}


# --- writes (platform admins) -------------------------------------------------------------


def baseline_check(*, flavor: Flavor, cluster: Cluster | None, driver_version: str, cuda_version: str,
                   instance: SoftwareBaseline | None) -> None:
    """Every refusal at once, on its field (a 400 in the API, form errors on the pages)."""
    errors: dict[str, list[str]] = {}
    if driver_version and not drift_rules.DRIVER_VERSION.fullmatch(driver_version):
        errors["driver_version"] = [_("A driver version such as 535.104.05.")]
    if cuda_version and not drift_rules.CUDA_VERSION.fullmatch(cuda_version):
        errors["cuda_version"] = [_("A CUDA version such as 12.4.")]
    if not driver_version and not cuda_version:
        errors["driver_version"] = [_("Give the expected driver version, the CUDA version, or both.")]
    twins = SoftwareBaseline.objects.filter(flavor=flavor, cluster=cluster)
    if instance is not None:
        twins = twins.exclude(pk=instance.pk)
    if twins.exists():
        where = cluster.name if cluster else _("every cluster")
        errors["cluster"] = [_("%(flavor)s already has a baseline for %(where)s: change that one.") % {
            "flavor": flavor.name, "where": where}]
    if errors:
        raise ValidationError(errors)


def _write(baseline: SoftwareBaseline, fields: dict) -> SoftwareBaseline:
    for name, value in fields.items():
        setattr(baseline, name, value)
    baseline_check(flavor=baseline.flavor, cluster=baseline.cluster, driver_version=baseline.driver_version,
                   cuda_version=baseline.cuda_version, instance=baseline if baseline.pk else None)
    try:
        with transaction.atomic():  # a savepoint: a twin written meanwhile is a 400, not a 500
            baseline.save()
    except IntegrityError:
        raise ValidationError({"cluster": [_("This flavor already has a baseline there.")]}) from None
    return baseline


def baseline_create(*, actor: User, flavor: Flavor, cluster: Cluster | None = None,
                    driver_version: str = "", cuda_version: str = "") -> SoftwareBaseline:
    perm.require(scope_for(actor).platform_admin)
    return _write(SoftwareBaseline(), {"flavor": flavor, "cluster": cluster,
                                       "driver_version": driver_version, "cuda_version": cuda_version})


def baseline_update(*, actor: User, baseline: SoftwareBaseline, **fields) -> SoftwareBaseline:
    perm.require(scope_for(actor).platform_admin)
    return _write(baseline, fields)


def baseline_delete(*, actor: User, baseline: SoftwareBaseline) -> None:
    perm.require(scope_for(actor).platform_admin)
    baseline.delete()


# --- reads ----------------------------------------------------------------------------------


def baselines() -> dict[tuple[int, int | None], SoftwareBaseline]:
    """Every baseline by (flavor id, cluster id or None): one query."""
    return {(b.flavor_id, b.cluster_id): b for b in SoftwareBaseline.objects.all()}


def node_drift(node: Node, known: dict | None = None) -> Drift:
    """``node`` against its baseline (``known``: :func:`baselines`, read once for many nodes)."""
    found = drift_rules.baseline_for(baselines() if known is None else known, node.flavor_id, node.cluster_id)
    if found is None:
        return drift_rules.drift("", "", node.driver_version, node.cuda_version)
    return drift_rules.drift(found.driver_version, found.cuda_version, node.driver_version, node.cuda_version)


def drift_label(state: str) -> str:
    return str(DRIFT_LABELS.get(state, state))


@dataclass
class DriftGroup:
    """The nodes of one flavor on one cluster that are off their baseline."""

    flavor: str
    cluster: str
    expected_driver: str
    expected_cuda: str
    nodes_total: int = 0
    off: list[tuple[Node, Drift]] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for _node, found in self.off:
            out[found.state] += 1
        return dict(out)


def drift_report() -> list[DriftGroup]:
    """Every node of an active cluster whose flavor has a baseline, grouped by flavor and
    cluster; each group lists the nodes off it (none: the group is on its baseline). Two
    queries, whatever the number of nodes."""
    known = baselines()
    groups: dict[tuple[str, str], DriftGroup] = {}
    nodes = Node.objects.filter(cluster__active=True).select_related("flavor", "cluster").order_by(
        "flavor__name", "cluster__name", "name")
    for node in nodes:
        found = drift_rules.baseline_for(known, node.flavor_id, node.cluster_id)
        if found is None:
            continue
        key = (node.flavor.name, node.cluster.name)
        group = groups.get(key)
        if group is None:
            group = groups[key] = DriftGroup(*key, found.driver_version, found.cuda_version)
        group.nodes_total += 1
        judged = drift_rules.drift(found.driver_version, found.cuda_version, node.driver_version,
                                   node.cuda_version)
        if judged.off:
            group.off.append((node, judged))
    return list(groups.values())
