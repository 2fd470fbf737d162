"""The job's working environment (DESIGN §13): storages checked as admins define them, a job's
mounts, env and checkpoint directory snapshotted at submission and handed to the backend."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from jobs import environment
from jobs.clusters.backends.base import Checkpoint, EnvVar, Mount
from jobs.clusters.dispatch import job_spec
from jobs.environment import image_allowed, image_repository, parse_env_lines, path_error
from jobs.models import Job, ProjectSecret, ProjectStorage
from tests import factories as fx


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        ("pytorch", "docker.io/library/pytorch"),
        ("pytorch:2.3", "docker.io/library/pytorch"),
        ("team/train:1", "docker.io/team/train"),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/pytorch"),
        ("registry.centre.cn:5000/ai/llm@sha256:" + "a" * 64, "registry.centre.cn:5000/ai/llm"),
        ("localhost/x", "localhost/x"),
        ("REGISTRY.Centre.cn/ai/x", "registry.centre.cn/ai/x"),
    ],
)
def test_an_image_resolves_to_its_registry_as_docker_does(image, repository):
    assert image_repository(image) == repository


def test_the_allow_list_matches_whole_hosts_and_path_prefixes():
    allow = ["registry.centre.cn", "nvcr.io/nvidia"]
    assert image_allowed("registry.centre.cn/ai/x:1", allow)
    assert image_allowed("nvcr.io/nvidia/pytorch:1", allow)
    assert not image_allowed("registry.centre.cn.evil.io/ai/x", allow)  # a host is not a prefix
    assert not image_allowed("nvcr.io/nvidiafake/x", allow)
    assert not image_allowed("pytorch:2.3", allow)  # Docker Hub, not listed
    assert image_allowed("pytorch:2.3", [])  # no list: any registry


@pytest.mark.parametrize(
    "path",
    ["", "data", "/data/", "/data/../etc", "/data/./x", "//data", "/da\x00ta", "/data\nx", "/" + "x" * 1000],
)
def test_a_path_must_be_absolute_and_normalised(path):
    assert path_error(path) is not None


@pytest.mark.parametrize("path", ["/", "/etc", "/etc/ssl", "/proc", "/usr/local"])
def test_a_mount_point_is_never_a_system_directory(path):
    assert path_error(path, mount_point=True) is not None
    assert path_error("/data/etc", mount_point=True) is None


def test_env_lines_parse_and_round_trip():
    plain = parse_env_lines("A=1\n# note\n\nB=x=y \n", secrets=False)
    assert plain == [{"name": "A", "value": "1"}, {"name": "B", "value": "x=y "}]
    secret = parse_env_lines("TOKEN=hf-token/token", secrets=True)
    assert secret == [{"name": "TOKEN", "secret": "hf-token", "key": "token"}]
    assert environment.env_lines(plain + secret, secrets=False) == "A=1\nB=x=y "
    assert environment.env_lines(plain + secret, secrets=True) == "TOKEN=hf-token/token"
    with pytest.raises(ValueError):
        parse_env_lines("TOKEN=nokey", secrets=True)


@pytest.mark.django_db
def test_a_storage_is_checked_for_what_its_kind_needs():
    project = fx.project("p1", fx.department("d1"))
    cases = [
        (dict(kind="nfs", mount_path="/data"), {"nfs_server", "nfs_path"}),
        (dict(kind="nfs", nfs_server="bad host", nfs_path="/x", mount_path="/data"), {"nfs_server"}),
        (dict(kind="hostpath", mount_path="/data"), {"host_path"}),
        (dict(kind="hostpath", host_path="/shared/../etc", mount_path="/data"), {"host_path"}),
        (dict(kind="pvc", claim_name="Bad_Claim", mount_path="/data"), {"claim_name"}),
        (dict(kind="pvc", claim_name="c", mount_path="/etc"), {"mount_path"}),
        (
            dict(kind="pvc", claim_name="c", mount_path="/data", read_only=True, checkpoints=True),
            {"checkpoints"},
        ),
    ]
    for fields, bad in cases:
        with pytest.raises(ValidationError) as caught:
            ProjectStorage(project=project, name="s", **fields).full_clean()
        assert bad <= set(caught.value.message_dict), (fields, caught.value.message_dict)
    ProjectStorage(
        project=project, name="ok", kind="nfs", nfs_server="10.0.0.5", nfs_path="/e", mount_path="/d"
    ).full_clean()


@pytest.mark.django_db
def test_a_project_has_one_checkpoint_storage_and_it_is_writable():
    project = fx.project("p1", fx.department("d1"))
    ProjectStorage.objects.create(
        project=project, name="a", kind="hostpath", host_path="/a", mount_path="/a", checkpoints=True
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        ProjectStorage.objects.create(
            project=project, name="b", kind="hostpath", host_path="/b", mount_path="/b", checkpoints=True
        )
    with pytest.raises(IntegrityError), transaction.atomic():
        ProjectStorage.objects.create(
            project=fx.project("p2", fx.department("d2")),
            name="c",
            kind="hostpath",
            host_path="/c",
            mount_path="/c",
            checkpoints=True,
            read_only=True,
        )


@pytest.mark.django_db
def test_a_job_carries_its_mounts_env_and_checkpoint_to_the_backend():
    f = fx.flavor()
    fx.nodes(f, 1)
    project = fx.project("p1", fx.department("d1"))
    project.image_pull_secret = "centre-registry"
    project.save()
    fx.quota(f, project, 8)
    data = ProjectStorage.objects.create(
        project=project,
        name="data",
        kind="nfs",
        nfs_server="nfs.centre",
        nfs_path="/export/p1",
        host_path="/shared/p1/data",
        mount_path="/data",
        read_only=True,
    )
    ProjectStorage.objects.create(
        project=project,
        name="work",
        kind="hostpath",
        host_path="/shared/p1/work",
        mount_path="/work",
        checkpoints=True,
    )
    ProjectSecret.objects.create(project=project, name="tok")
    job = fx.submit(
        project,
        f,
        gpus=1,
        prio=fx.priority("low", 10),
        name="t",
        kind="dev",
        mounts=["data"],
        env=[{"name": "A", "value": "1"}, {"name": "T", "secret": "tok", "key": "k"}],
        expose_port=8888,
    )
    job = Job.objects.get(pk=job.pk)
    assert job.checkpoint["subdir"] == f".gpupool/checkpoints/{job.pk}"
    assert environment.checkpoint_dir(job.checkpoint) == f"/work/.gpupool/checkpoints/{job.pk}"
    # An admin editing the storage later does not move the submitted job's data.
    data.mount_path = "/elsewhere"
    data.save()
    spec = job_spec(job, {})
    assert spec.mounts == (
        Mount("data", "nfs", "/data", "/shared/p1/data", "nfs.centre", "/export/p1", "", True),
    )
    assert spec.env == (EnvVar("A", "1"), EnvVar("T", secret="tok", key="k"))
    assert spec.checkpoint == Checkpoint(
        Mount("work", "hostpath", "/work", "/shared/p1/work"), f".gpupool/checkpoints/{job.pk}"
    )
    assert spec.checkpoint.host_dir == f"/shared/p1/work/.gpupool/checkpoints/{job.pk}"
    assert (spec.pull_secret, spec.expose_port) == ("centre-registry", 8888)


@pytest.mark.django_db
def test_a_project_without_checkpoint_storage_gives_no_checkpoint_dir():
    f = fx.flavor()
    fx.nodes(f, 1)
    project = fx.project("p1", fx.department("d1"))
    fx.quota(f, project, 8)
    job = fx.submit(project, f, gpus=1, prio=fx.priority("low", 10), name="t")
    assert Job.objects.get(pk=job.pk).checkpoint is None
    assert job_spec(job, {}).checkpoint is None
