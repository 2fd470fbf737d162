"""deploy/kubernetes: the base and the demo overlay are rendered (tests/deploy/kustomize.py, and
``kubectl kustomize`` must agree), every object is validated strictly against the Kubernetes 1.30
schemas — the ServiceMonitor against Prometheus Operator's CRD schema — and what a broken deploy
would get wrong is checked: resources, probes, one beat, env and volume wiring, one image, and
production settings accepting the demo's configuration while refusing the base's placeholders."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from django.urls import resolve

from tests.backends import k8s_standin
from tests.deploy.helpers import (
    KUSTOMIZE,
    find,
    need_or_fail,
    objects,
    production_env,
    run,
    shell_steps,
    smoke,
    static_problem,
    variables_the_code_reads,
)
from tests.deploy.kustomize import containers, pod_specs

pytestmark = pytest.mark.deploy

K8S_VERSION = "1.30"
CRD_FILE = Path(__file__).parent / "schemas" / "monitoring.coreos.com_servicemonitors.yaml"
RENDERS = ("base", "demo")  # the portal; deploy/kubernetes/jobs is the jobs' namespace (test_rbac.py)
GPUPOOL_IMAGE = re.compile(r"^gpupool(:|$)")
REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _strict(schema: dict) -> dict:
    """Unknown fields fail (a CRD would prune them silently): every object schema that lists
    its properties is closed, as the API server's strict field validation does."""
    schema = copy.deepcopy(schema)
    stack = [schema]
    while stack:
        node = stack.pop()
        if "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        stack.extend(node.get("properties", {}).values())
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                stack.append(node[key])
    return schema


def _servicemonitor_validator() -> jsonschema.Draft7Validator:
    crd = yaml.safe_load(CRD_FILE.read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft7Validator(_strict(version["schema"]["openAPIV3Schema"]))


SERVICEMONITOR = _servicemonitor_validator()
k8s_api = k8s_standin.k8s_api  # the API stand-in fixture, under this module's name


def validate(obj: dict) -> None:
    if obj["apiVersion"] == "monitoring.coreos.com/v1":
        SERVICEMONITOR.validate(obj)
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def gpupool_containers(objs: list[dict]) -> list[tuple[dict, dict]]:
    return [(o, c) for o in objs for c in containers(o) if GPUPOOL_IMAGE.match(c["image"])]


# -- rendering and schemas


def test_the_python_renderer_matches_kubectl_kustomize():
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        need_or_fail("kubectl (Debian: kubernetes-client)")
    for name, directory in KUSTOMIZE.items():
        out = subprocess.run(
            [kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=True
        )
        theirs = [o for o in yaml.safe_load_all(out.stdout) if o]
        key = lambda o: (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])  # noqa: E731
        assert sorted(map(key, objects(name))) == sorted(map(key, theirs)), name
        assert {key(o): o for o in objects(name)} == {key(o): o for o in theirs}, name


@pytest.mark.parametrize("name", RENDERS)
def test_every_rendered_object_is_valid(name):
    objs = objects(name)
    assert len(objs) >= 16
    for obj in objs:
        validate(obj)


def test_the_validators_reject_what_the_api_server_would():
    web = find(objects("base"), "Deployment", "gpupool-web")
    web["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}  # a typo
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(web)
    monitor = find(objects("base"), "ServiceMonitor", "gpupool")
    monitor["spec"]["endpoints"][0]["bearerToken"] = "x"  # removed from the CRD long ago
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor)
    monitor = find(objects("base"), "ServiceMonitor", "gpupool")
    monitor["spec"]["endpoints"][0]["interval"] = "30 seconds"
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor)


def test_the_base_has_every_part_of_a_deployment():
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects("base")}
    assert {
        ("Deployment", "gpupool-web"),
        ("Deployment", "gpupool-worker"),
        ("Deployment", "gpupool-beat"),
        ("Job", "gpupool-migrate"),
        ("Service", "gpupool-web"),
        ("ConfigMap", "gpupool-config"),
        ("Secret", "gpupool-secrets"),
        ("ServiceAccount", "gpupool-backend"),
        ("ClusterRole", "gpupool-backend"),
        ("ClusterRoleBinding", "gpupool-backend"),
        ("ServiceMonitor", "gpupool"),
        ("PodDisruptionBudget", "gpupool-web"),
    } <= kinds
    assert {
        o["metadata"].get("namespace") for o in objects("base") if not o["kind"].startswith("Cluster")
    } == {"gpupool"}
    assert {
        o["metadata"].get("namespace") for o in objects("demo") if not o["kind"].startswith("Cluster")
    } == {"gpupool-demo"}
    # The jobs run elsewhere (issue 32 item 17): their namespace and Role are their own kustomization.
    jobs = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects("jobs")}
    assert jobs == {("Namespace", None, "gpupool-jobs"), ("Role", "gpupool-jobs", "gpupool-backend"),
                    ("RoleBinding", "gpupool-jobs", "gpupool-backend")}
    for obj in objects("jobs"):
        validate(obj)


# -- what a pod needs


@pytest.mark.parametrize("name", RENDERS)
def test_every_container_has_requests_a_memory_limit_and_runs_unprivileged(name):
    for obj in objects(name):
        for pod in pod_specs(obj):
            assert pod["securityContext"]["runAsNonRoot"] is True, obj["metadata"]["name"]
            assert pod["securityContext"]["runAsUser"] > 0
        for c in containers(obj):
            where = f"{obj['metadata']['name']}/{c['name']}"
            assert {"cpu", "memory"} <= set(c["resources"]["requests"]), where
            assert "memory" in c["resources"]["limits"], where
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, where
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"], where


def test_only_the_worker_gets_a_kubernetes_api_token():
    objs = objects("base")
    for obj in objs:
        for pod in pod_specs(obj):
            if obj["metadata"]["name"] == "gpupool-worker":
                assert pod["serviceAccountName"] == "gpupool-backend"
                assert pod.get("automountServiceAccountToken", True) is True
            else:
                assert pod["automountServiceAccountToken"] is False, obj["metadata"]["name"]
    assert find(objs, "ServiceAccount", "gpupool")["automountServiceAccountToken"] is False


def test_web_probes_ask_healthz_on_the_named_port():
    for name in RENDERS:
        web = find(objects(name), "Deployment", "gpupool-web")
        [c] = web["spec"]["template"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        for probe in ("readinessProbe", "livenessProbe"):
            get = c[probe]["httpGet"]
            assert get["path"] == "/healthz" and get["port"] in ports
            assert resolve(get["path"]).url_name == "healthz"
        assert ports["http"] == 8000 and "--bind=0.0.0.0:8000" in c["command"]
    assert find(objects("base"), "Deployment", "gpupool-web")["spec"]["replicas"] == 2


def test_exactly_one_beat_replaced_by_recreate():
    for name in RENDERS:
        beat = find(objects(name), "Deployment", "gpupool-beat")
        assert beat["spec"]["replicas"] == 1
        assert beat["spec"]["strategy"] == {"type": "Recreate"}
        beats = [
            c
            for _, c in gpupool_containers(objects(name))
            if c["command"][:4] == ["celery", "-A", "portal", "beat"]
        ]
        assert len(beats) == 1


def test_the_migration_job_migrates():
    job = find(objects("base"), "Job", "gpupool-migrate")
    [c] = job["spec"]["template"]["spec"]["containers"]
    assert c["command"] == ["python", "manage.py", "migrate", "--noinput"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"


# -- wiring


def _env_sources(objs: list[dict]) -> dict[tuple[str, str], set[str]]:
    keys: dict[tuple[str, str], set[str]] = {}
    for obj in objs:
        if obj["kind"] in ("ConfigMap", "Secret"):
            keys[(obj["kind"], obj["metadata"]["name"])] = set(obj.get("data", {})) | set(
                obj.get("stringData", {})
            )
    return keys


def _check_container_env(c: dict, sources: dict, where: str) -> None:
    defined: set[str] = set()
    for ref in c.get("envFrom", []):
        kind, target = (
            ("ConfigMap", ref["configMapRef"]) if "configMapRef" in ref else ("Secret", ref["secretRef"])
        )
        assert (kind, target["name"]) in sources, f"{where}: no {kind} {target['name']}"
        defined |= sources[(kind, target["name"])]
    for var in c.get("env", []):
        for ref_kind, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            ref = var.get("valueFrom", {}).get(ref_kind)
            if ref:
                assert ref["key"] in sources[(kind, ref["name"])], f"{where}: {var['name']}"
        for used in REFERENCE.findall(var.get("value", "")):
            assert used in defined, f"{where}: $({used}) is not defined before {var['name']}"
        defined.add(var["name"])


@pytest.mark.parametrize("name", RENDERS)
def test_env_references_name_existing_keys_and_earlier_variables(name):
    objs = objects(name)
    sources = _env_sources(objs)
    for obj, c in gpupool_containers(objs):
        _check_container_env(c, sources, f"{obj['metadata']['name']}/{c['name']}")
        for volume in pod_specs(obj)[0].get("volumes", []):
            if "configMap" in volume:
                keys = sources[("ConfigMap", volume["configMap"]["name"])]
                assert {item["key"] for item in volume["configMap"].get("items", [])} <= keys
        account = pod_specs(obj)[0].get("serviceAccountName")
        if account:
            find(objs, "ServiceAccount", account)


def test_config_and_secret_hold_only_variables_the_code_reads():
    read = variables_the_code_reads()
    for name in RENDERS:
        objs = objects(name)
        for kind, cm in (("ConfigMap", "gpupool-config"), ("Secret", "gpupool-secrets")):
            obj = find(objs, kind, cm)
            keys = set(obj.get("data", {})) | set(obj.get("stringData", {}))
            assert keys - read == set(), f"{name} {cm}: variables nothing reads"
        web = find(objs, "Deployment", "gpupool-web")
        [c] = web["spec"]["template"]["spec"]["containers"]
        helpers = {v["name"] for v in c["env"]} - read
        used = {u for v in c["env"] for u in REFERENCE.findall(v.get("value", ""))}
        assert helpers <= used  # POD_IP, PUBLIC_HOSTS exist only to build ALLOWED_HOSTS


def test_service_servicemonitor_and_pdb_select_the_web_pods():
    objs = objects("base")
    web = find(objs, "Deployment", "gpupool-web")
    pod_labels = web["spec"]["template"]["metadata"]["labels"]
    [c] = web["spec"]["template"]["spec"]["containers"]
    service = find(objs, "Service", "gpupool-web")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= {p["name"] for p in c["ports"]}
    monitor = find(objs, "ServiceMonitor", "gpupool")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert resolve(endpoint["path"]).url_name == "metrics"
    credentials = endpoint["authorization"]["credentials"]
    assert credentials["key"] == "GPUPOOL_METRICS_TOKEN"
    assert credentials["key"] in find(objs, "Secret", credentials["name"])["stringData"]
    pdb = find(objs, "PodDisruptionBudget", "gpupool-web")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_one_image_for_every_gpupool_process():
    for name, expected in (("base", "gpupool:0.1.0"), ("demo", "gpupool:demo")):
        images = {c["image"] for _, c in gpupool_containers(objects(name))}
        assert images == {expected}, name
    demo_processes = {o["metadata"]["name"] for o, _ in gpupool_containers(objects("demo"))}
    assert {
        "gpupool-web",
        "gpupool-worker",
        "gpupool-beat",
        "gpupool-migrate",
        "gpupool-simulator",
    } <= demo_processes


def _web_environment(name: str) -> dict[str, str]:
    """The variables a web pod of this render starts with (the pod IP made up)."""
    objs = objects(name)
    sources = {
        key: {**find(objs, *key).get("data", {}), **find(objs, *key).get("stringData", {})}
        for key in (("ConfigMap", "gpupool-config"), ("Secret", "gpupool-secrets"))
    }
    env = {**sources[("ConfigMap", "gpupool-config")], **sources[("Secret", "gpupool-secrets")]}
    [c] = find(objs, "Deployment", "gpupool-web")["spec"]["template"]["spec"]["containers"]
    for var in c["env"]:
        if "value" in var:
            env[var["name"]] = REFERENCE.sub(lambda m: env[m[1]], var["value"])
        elif "configMapKeyRef" in var["valueFrom"]:
            env[var["name"]] = sources[("ConfigMap", "gpupool-config")][
                var["valueFrom"]["configMapKeyRef"]["key"]
            ]
        else:
            env[var["name"]] = "10.1.2.3"  # status.podIP
    return env


def test_production_settings_accept_the_demo_config_and_refuse_the_base_placeholders():
    demo = _web_environment("demo")
    assert demo["ALLOWED_HOSTS"] == "localhost,127.0.0.1,10.1.2.3"
    accepted = run([sys.executable, "manage.py", "check"], production_env(demo))
    assert accepted.returncode == 0, accepted.stderr
    refused = run([sys.executable, "manage.py", "check"], production_env(_web_environment("base")))
    assert refused.returncode != 0 and "SECRET_KEY must be a random string" in refused.stderr


def test_every_command_in_the_manifests_exists():
    commands = {tuple(c["command"]) for name in RENDERS for _, c in gpupool_containers(objects(name))}
    steps = {tuple(step) for command in commands for step in shell_steps(list(command))}
    assert {s[0] for s in steps} == {"gunicorn", "celery", "python"}
    problems = [p for p in (static_problem(list(s)) for s in steps) if p]
    assert problems == []
    env = production_env(_web_environment("demo"))
    for step in sorted(s for s in steps if s[0] == "gunicorn"):
        result = smoke(list(step), env)
        assert result.returncode == 0, f"{step}: {result.stderr[-2000:]}"


def test_a_wrong_command_is_caught():
    assert static_problem(["python", "manage.py", "migrat"]) == "no management command 'migrat'"
    assert static_problem(["python", "-m", "jobs.clusters.backends.simserverx"]) is not None
    assert static_problem(["celery", "-A", "portal", "wroker"]) == "no celery command 'wroker'"
    assert static_problem(["celery", "-A", "jobs", "worker"]) == "jobs has no Celery app"
    result = smoke(["gunicorn", "portal.wsgix:application"], production_env(_web_environment("demo")))
    assert result.returncode != 0


@pytest.mark.kubernetes
def test_the_in_cluster_kubeconfig_drives_the_backend_with_the_pods_token(tmp_path, k8s_api):
    """The worker's kubeconfig (ConfigMap gpupool-kubeconfig) loads with the official client and
    sends the mounted service-account token — here pointed at the API stand-in."""
    from jobs.clusters.backends.kubernetes import KubernetesBackend

    kubeconfig = find(objects("base"), "ConfigMap", "gpupool-kubeconfig")["data"]["kubeconfig"]
    worker = find(objects("base"), "Deployment", "gpupool-worker")
    [mount] = [
        m
        for m in worker["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        if m["name"] == "kubeconfig"
    ]
    assert mount["mountPath"] == "/etc/gpupool"  # the path docs/deploy.md gives the cluster's config
    account = "/var/run/secrets/kubernetes.io/serviceaccount"
    (tmp_path / "token").write_text("pod-token-123")
    text = kubeconfig.replace(f"{account}/token", str(tmp_path / "token"))
    text = text.replace("https://kubernetes.default.svc", k8s_api.url)
    text = text.replace(f"certificate-authority: {account}/ca.crt", "insecure-skip-tls-verify: true")
    assert text != kubeconfig
    (tmp_path / "kubeconfig").write_text(text)
    backend = KubernetesBackend(kubeconfig=str(tmp_path / "kubeconfig"))
    assert backend.health() == "ok"
    assert k8s_api.authorization[-1] == "Bearer pod-token-123"
