"""Two admins adding quota under the same parent at the same moment: the flavor row lock
serialises the level checks, so exactly one wins and the tree is never oversold."""

import threading
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import close_old_connections, connection, transaction

from portal.models import Project
from quotas.models import QuotaNode
from quotas.services import quota_node_set


@pytest.mark.django_db(transaction=True)
def test_concurrent_quota_grants_never_oversell_the_parent(world):
    QuotaNode.objects.filter(pk=world.quota["pb"].pk).update(quota=Decimal(4))  # B: 8, pb: 4 → room for 4
    projects = [Project.objects.create(code=f"race{i}", name="r", department=world.B) for i in range(2)]
    admin = world.users["platform"]
    barrier = threading.Barrier(2)
    outcomes = []

    def grant(project):
        try:
            with transaction.atomic():
                barrier.wait(timeout=60)  # a hang guard
                quota_node_set(actor=admin, flavor=world.F, project=project, quota=Decimal(4))
            outcomes.append("ok")
        except ValidationError:
            outcomes.append("refused")
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=grant, args=(p,)) for p in projects]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcomes) == ["ok", "refused"]
    children = QuotaNode.objects.filter(flavor=world.F, project__department=world.B)
    assert sum(n.quota for n in children) == Decimal(8)
