from django.core.management.base import BaseCommand

from jobs.clusters.backends.registry import is_simulated
from jobs.clusters.inventory import push_simulated_inventory, sync_inventory
from quotas.models import Cluster


class Command(BaseCommand):
    help = "Push the inventory to simulated clusters and pull it from real ones."

    def handle(self, *args, **options):
        for url, count in push_simulated_inventory().items():
            self.stdout.write(f"simulator {url}: {count} nodes")
        for cluster in Cluster.objects.filter(active=True):
            if not is_simulated(cluster.kind, cluster.config or {}):
                self.stdout.write(f"{cluster.name}: {sync_inventory(cluster)}")
