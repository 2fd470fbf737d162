"""``seed_demo`` builds a believable centre, satisfies the quota rules, and is idempotent."""

from collections import defaultdict
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db.models import Count

from portal.models import Department, Membership, Project, Role, User
from quotas.models import Cluster, Flavor, Loan, Node, NodeState, QuotaNode, QuotaWindow
from quotas.validation import Share, level_violations

pytestmark = pytest.mark.django_db


def _counts():
    return {
        m.__name__: m.objects.count()
        for m in (Department, Project, User, Membership, Flavor, Cluster, Node, QuotaNode, Loan, QuotaWindow)
    }


def test_seed_demo_is_idempotent():
    call_command("seed_demo")
    first = _counts()
    quotas = list(QuotaNode.objects.order_by("id").values_list("id", "quota", "lend_limit"))
    call_command("seed_demo")
    assert _counts() == first
    assert list(QuotaNode.objects.order_by("id").values_list("id", "quota", "lend_limit")) == quotas


def test_demo_centre_is_believable():
    call_command("seed_demo")
    tops = Department.objects.filter(parent__isnull=True)
    assert tops.count() >= 3
    assert Department.objects.filter(parent__isnull=False).count() >= 3
    assert Project.objects.count() >= 8
    flavors = Flavor.objects.all()
    assert flavors.count() >= 4
    assert flavors.filter(mig_profile__gt="", card_fraction__lt=1).exists()
    assert flavors.filter(shareable=True).exists()
    assert flavors.exclude(vendor="nvidia").exists()
    assert Cluster.objects.count() >= 2
    assert Node.objects.count() >= 64
    assert Node.objects.values("leaf").distinct().count() >= 8
    assert Node.objects.values("spine").distinct().count() >= 4
    assert Node.objects.exclude(state=NodeState.READY).exists()
    assert QuotaNode.objects.filter(overcommit_ratio__gt=1).exists()
    assert set(Membership.objects.values_list("role", flat=True)) == set(Role.values)
    assert Loan.objects.filter(state="active").exists() and QuotaWindow.objects.exists()
    assert User.objects.annotate(n=Count("memberships")).filter(n=0).exists()  # an outsider


def test_demo_quota_tree_satisfies_every_level_rule():
    """Checked independently of the services: rebuild each level from the rows."""
    call_command("seed_demo")
    capacity = defaultdict(Decimal)
    for node in Node.objects.filter(state=NodeState.READY):
        capacity[node.flavor_id] += node.gpu_count
    for flavor in Flavor.objects.all():
        nodes = list(QuotaNode.objects.filter(flavor=flavor).select_related("department", "project"))
        by_dept = {n.department_id: n for n in nodes if n.department_id}
        levels = defaultdict(list)
        for n in nodes:
            parent = n.project.department_id if n.project_id else n.department.parent_id
            levels[parent].append(Share(n.quota, n.lend_limit))
        for parent, shares in levels.items():
            if parent is None:
                q, ratio = capacity[flavor.pk], flavor.pool_overcommit_ratio
            else:
                q, ratio = by_dept[parent].quota, by_dept[parent].overcommit_ratio
            assert level_violations(q, ratio, shares) == [], (flavor.name, parent)
