"""Write the rendered YuniKorn queue configuration (:mod:`quotas.yunikorn`) into the ConfigMap
YuniKorn reads, through the official client's ``CoreV1Api``. Plain Python, no Django.

YuniKorn's shim watches the ConfigMap ``yunikorn-configs`` in its own namespace and reloads the
key ``<policy group>.yaml`` (``queues.yaml``) on every change. gpupool owns that one key: the
sync reads the ConfigMap, writes only when the text differs (so an unchanged tree writes
nothing and YuniKorn reloads nothing) and then by a JSON merge patch of that key alone, so the
other keys (``log.level``, ``service.*`` …) stay as the operator set them. The patch carries the
``resourceVersion`` it read: a concurrent writer makes the API server answer 409 and the next
sync retry, instead of one change silently replacing the other. A missing ConfigMap is created
(YuniKorn's Helm chart creates only ``yunikorn-defaults``).

``RULES`` lists the verbs used (the RBAC the portal's service account needs in YuniKorn's
namespace, restricted to the one ConfigMap by ``resourceNames`` except for ``create``).
"""

from __future__ import annotations

from typing import Any

from jobs.clusters.backends.kubernetes import MERGE_PATCH, KubernetesBackend
from quotas.queues import MANAGED_BY
from quotas.yunikorn import CONFIGMAP, POLICY_GROUP, policy_key

DEFAULT_NAMESPACE = "yunikorn"
RULES = (("", "configmaps", ("get", "create", "patch")),)


class YuniKornSync:
    def __init__(
        self,
        backend: KubernetesBackend,
        namespace: str = DEFAULT_NAMESPACE,
        policy_group: str = POLICY_GROUP,
        configmap: str = CONFIGMAP,
    ):
        self.backend = backend
        self.core = backend.core
        self.namespace = namespace
        self.configmap = configmap
        self.key = policy_key(policy_group)

    def current(self) -> dict[str, Any] | None:
        """The ConfigMap as a dict, None when there is none."""
        found = self.backend._call(
            self.core.read_namespaced_config_map, self.configmap, self.namespace, missing_ok=True
        )
        return None if found is None else self.backend.api_client.sanitize_for_serialization(found)

    def apply(self, text: str) -> dict[str, int]:
        configmap = self.current()
        if configmap is None:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": self.configmap, "labels": dict(MANAGED_BY)},
                "data": {self.key: text},
            }
            self.backend._call(self.core.create_namespaced_config_map, self.namespace, body)
            return {"created": 1, "updated": 0, "unchanged": 0}
        if (configmap.get("data") or {}).get(self.key) == text:
            return {"created": 0, "updated": 0, "unchanged": 1}
        patch = {
            "metadata": {"resourceVersion": configmap["metadata"]["resourceVersion"]},
            "data": {self.key: text},
        }
        self.backend._call(
            self.core.patch_namespaced_config_map,
            self.configmap,
            self.namespace,
            patch,
            _content_type=MERGE_PATCH,
        )
        return {"created": 0, "updated": 1, "unchanged": 0}
