from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ClustersConfig(AppConfig):
    name = "jobs.clusters"
    label = "clusters"
    verbose_name = _("Clusters")

    def ready(self):
        # The job page's Log, Environment and Access panels come from here: jobs sits below clusters.
        from jobs.clusters.views_logs import detail_context
        from jobs.hooks import job_page_panels

        if detail_context not in job_page_panels:
            job_page_panels.append(detail_context)
