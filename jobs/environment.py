"""The job's working environment (DESIGN §13): the storages it mounts, its environment
variables, its checkpoint directory and the registry of its image.

Everything is checked here, once, at submission (``job_submit`` calls it for the form, the API and
templates alike) and stored on the job as plain snapshots; dispatch turns them into the backend
contract's ``Mount`` / ``EnvVar`` / ``Checkpoint`` (``jobs.clusters.dispatch.spec_fields``). A secret
is only ever a reference (a Kubernetes Secret name and key; on Slurm a file of that name on the nodes): the
portal never holds a secret value, so it cannot leak one. A job may reference only the secrets its
project declares (``ProjectSecret``, like its storages): a name is not a capability, and the jobs of
every project share one namespace (issue 32 item 17).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

MAX_MOUNTS = 16
MAX_ENV = 64
MAX_ENV_VALUE_BYTES = 32 * 1024
MAX_ENV_TOTAL_BYTES = 256 * 1024
MAX_PATH = 1000
ENV_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
# The portal sets these itself (job id, checkpoint dir, mounts): a user's value would shadow them.
RESERVED_ENV_PREFIX = "GPUPOOL_"
# A Kubernetes object name (DNS-1123 subdomain) and a Secret's data key.
DNS_SUBDOMAIN = re.compile(
    r"\A(?=.{1,253}\Z)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z"
)
SECRET_KEY = re.compile(r"\A[-._a-zA-Z0-9]{1,253}\Z")
HOST = re.compile(
    r"\A(?=.{1,253}\Z)[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*\Z"
)
# Mounting over these would break the container (or the node, for a Slurm job's paths).
SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/run", "/sbin", "/sys", "/usr")
CHECKPOINT_SUBDIR = ".gpupool/checkpoints"
MOUNT_FIELDS = (
    "name",
    "kind",
    "mount_path",
    "host_path",
    "nfs_server",
    "nfs_path",
    "claim_name",
    "read_only",
)


# ---- paths and storages --------------------------------------------------------------------


def path_error(value: str, *, mount_point: bool = False) -> str | None:
    """Why ``value`` is not an absolute, normalised path (no ``..``, no control characters), or
    None. A mount point must not be / nor a system directory."""
    if not isinstance(value, str) or not value:
        return _("A path is required.")
    if len(value) > MAX_PATH:
        return _("At most %(n)d characters.") % {"n": MAX_PATH}
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return _("A path cannot contain control characters.")
    if not value.startswith("/"):
        return _("An absolute path, starting with /.")
    if ".." in value.split("/") or "//" in value or posixpath.normpath(value) != value:
        return _("A normalised path: no '..', '.', '//' or trailing '/'.")
    if mount_point and (value == "/" or any(value == d or value.startswith(d + "/") for d in SYSTEM_DIRS)):
        return _("%(path)s is a system directory: choose another mount path.") % {"path": value}
    return None


def storage_errors(storage) -> dict[str, list[str]]:
    """Field errors of a ProjectStorage (what its kind needs, every path checked)."""
    errors: dict[str, list[str]] = {}

    def need(field: str, check) -> None:
        message = check(getattr(storage, field))
        if message:
            errors.setdefault(field, []).append(message)

    need("mount_path", lambda v: path_error(v, mount_point=True))
    if storage.host_path or storage.kind == "hostpath":
        need("host_path", lambda v: path_error(v, mount_point=True))
    if storage.kind == "nfs":
        need("nfs_server", lambda v: None if HOST.match(v or "") else _("A host name or IPv4 address."))
        need("nfs_path", path_error)
    if storage.kind == "pvc":
        need("claim_name", lambda v: None if DNS_SUBDOMAIN.match(v or "") else _("A Kubernetes object name."))
    if storage.checkpoints and storage.read_only:
        errors.setdefault("checkpoints", []).append(_("A read-only storage cannot hold checkpoints."))
    return errors


def mount_snapshot(storage) -> dict[str, Any]:
    return {field: getattr(storage, field) for field in MOUNT_FIELDS}


def clean_mounts(project, names: Any) -> list[dict[str, Any]]:
    """The chosen storages of ``project`` as snapshots, in the order chosen; any name that is
    not an active storage of that project is refused."""
    if names in (None, ""):
        return []
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise ValidationError({"mounts": [_("A list of the project's storage names.")]})
    if len(names) > MAX_MOUNTS:
        raise ValidationError({"mounts": [_("At most %(n)d mounts.") % {"n": MAX_MOUNTS}]})
    if len(set(names)) != len(names):
        raise ValidationError({"mounts": [_("A storage is mounted once.")]})
    storages = {s.name: s for s in project.storages.filter(active=True, name__in=list(names))}
    unknown = [n for n in names if n not in storages]
    if unknown:
        raise ValidationError(
            {
                "mounts": [
                    _("Not a storage of project %(project)s: %(names)s.")
                    % {"project": project.code, "names": ", ".join(sorted(n[:40] for n in unknown))}
                ]
            }
        )
    chosen = [mount_snapshot(storages[n]) for n in names]
    paths = [m["mount_path"] for m in chosen]
    if len(set(paths)) != len(paths):
        raise ValidationError({"mounts": [_("Two of the chosen storages use the same mount path.")]})
    return chosen


def checkpoint_for(project, job_id: int) -> dict[str, Any] | None:
    """The job's checkpoint directory on the project's checkpoint storage (None: the project has
    none). It depends on the job id only, so every run of the job finds the same one."""
    storage = project.storages.filter(active=True, checkpoints=True).first()
    if storage is None:
        return None
    return {"mount": mount_snapshot(storage), "subdir": f"{CHECKPOINT_SUBDIR}/{int(job_id)}"}


def checkpoint_dir(checkpoint: dict[str, Any] | None) -> str | None:
    """GPUPOOL_CHECKPOINT_DIR as the job's containers see it."""
    if not checkpoint:
        return None
    return f"{checkpoint['mount']['mount_path'].rstrip('/')}/{checkpoint['subdir']}"


# ---- environment variables -----------------------------------------------------------------


def clean_env(entries: Any, *, project=None) -> list[dict[str, str]]:
    """``[{"name", "value"}]`` or ``[{"name", "secret", "key"}]`` entries, checked: names that a
    shell and Kubernetes accept, none reserved or repeated, bounded values, secret references
    that name a Kubernetes Secret and key (never a path) which ``project`` declares (None: the
    project is not known yet — its own field says why — and references are checked by shape)."""
    if entries in (None, ""):
        return []
    if not isinstance(entries, list | tuple):
        raise ValidationError({"env": [_("A list of {name, value} or {name, secret, key} objects.")]})
    if len(entries) > MAX_ENV:
        raise ValidationError({"env": [_("At most %(n)d environment variables.") % {"n": MAX_ENV}]})
    cleaned, errors, total = [], [], 0
    for index, entry in enumerate(entries, start=1):
        item, error = _env_entry(entry)
        if error:
            errors.append(_("Variable %(i)d: %(error)s") % {"i": index, "error": error})
            continue
        total += len(item.get("value", "").encode())
        cleaned.append(item)
    if project is not None:
        errors += undeclared_secrets(project, cleaned)
    names = [item["name"] for item in cleaned]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        errors.append(_("Each variable once: %(names)s.") % {"names": ", ".join(repeated)})
    if total > MAX_ENV_TOTAL_BYTES:
        errors.append(_("The values add up to more than %(n)d KiB.") % {"n": MAX_ENV_TOTAL_BYTES // 1024})
    if errors:
        raise ValidationError({"env": errors})
    return cleaned


def _env_entry(entry: Any) -> tuple[dict[str, str], str | None]:
    if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
        return {}, _("an object of strings.")
    keys = set(entry)
    if keys not in ({"name", "value"}, {"name", "secret", "key"}):
        return {}, _("either name and value, or name, secret and key.")
    name = entry["name"]
    if not ENV_NAME.match(name):
        return {}, _("a name of letters, digits and '_', not starting with a digit (at most 128).")
    if name.upper().startswith(RESERVED_ENV_PREFIX):
        return {}, _("%(name)s: names starting with GPUPOOL_ are set by the portal.") % {"name": name}
    if "value" in entry:
        value = entry["value"]
        if len(value.encode()) > MAX_ENV_VALUE_BYTES:
            return {}, _("%(name)s: a value of at most %(n)d KiB.") % {
                "name": name,
                "n": MAX_ENV_VALUE_BYTES // 1024,
            }
        if "\x00" in value:
            return {}, _("%(name)s: a value cannot contain a NUL character.") % {"name": name}
        return {"name": name, "value": value}, None
    secret, key = entry["secret"], entry["key"]
    if not DNS_SUBDOMAIN.match(secret):
        return {}, _("%(name)s: the secret is a Kubernetes Secret name (lower-case, '-', '.').") % {
            "name": name
        }
    if not SECRET_KEY.match(key) or key in (".", ".."):
        return {}, _("%(name)s: the key is a Secret key (letters, digits, '-', '_', '.').") % {"name": name}
    return {"name": name, "secret": secret, "key": key}, None


def declared_secrets(project) -> set[str]:
    return set(project.secrets.filter(active=True).values_list("name", flat=True))


def undeclared_secrets(project, entries: Iterable[dict[str, str]]) -> list[str]:
    """One message per reference to a Secret that ``project`` does not declare (the portal's
    own ``gpupool-secrets``, another project's, a removed one): refused, whatever the backend."""
    references = [e for e in entries if "secret" in e]
    if not references:
        return []
    declared = declared_secrets(project)
    return [
        _("%(name)s: %(secret)s is not a secret of project %(project)s.")
        % {"name": e["name"], "secret": e["secret"][:63], "project": project.code}
        for e in references
        if e["secret"] not in declared
    ]


def parse_env_lines(text: str, *, secrets: bool) -> list[dict[str, str]]:
    """The form's textareas: ``NAME=value`` lines, or for secrets ``NAME=secret/key``; blank
    lines and ``#`` comments skipped. Raises ValueError naming the line."""
    entries = []
    for number, line in enumerate((text or "").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, rest = line.partition("=")
        if not sep:
            raise ValueError(_("Line %(n)d: NAME=value.") % {"n": number})
        name = name.strip()
        if not secrets:
            entries.append({"name": name, "value": rest})
            continue
        secret, slash, key = rest.strip().partition("/")
        if not slash:
            raise ValueError(_("Line %(n)d: NAME=secret-name/key.") % {"n": number})
        entries.append({"name": name, "secret": secret, "key": key})
    return entries


def env_lines(entries: Iterable[dict[str, str]], *, secrets: bool) -> str:
    """The inverse of ``parse_env_lines`` (to fill the form from a job or a template)."""
    if secrets:
        return "\n".join(f"{e['name']}={e['secret']}/{e['key']}" for e in entries if "secret" in e)
    return "\n".join(f"{e['name']}={e['value']}" for e in entries if "value" in e)


# ---- images --------------------------------------------------------------------------------


def image_repository(image: str) -> str:
    """``registry/path`` of an image reference without tag or digest, as Docker resolves it: the
    first component is a registry when it has a '.' or ':' or is localhost, else Docker Hub."""
    name = image.split("@", 1)[0]
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = "docker.io", name if slash else f"library/{name}"
    path = path.rsplit(":", 1)[0] if ":" in path.rsplit("/", 1)[-1] else path
    return f"{registry.lower()}/{path}"


def image_allowed(image: str, allowlist: Iterable[str]) -> bool:
    """Whether the image comes from an allowed registry (or repository prefix); an empty list
    allows every registry."""
    entries = [e.strip().strip("/").lower() for e in allowlist if e.strip()]
    if not entries:
        return True
    repository = image_repository(image)
    return any(repository.startswith(entry + "/") for entry in entries)


def check_image(image: str) -> None:
    allowlist = settings.GPUPOOL["REGISTRY_ALLOWLIST"]
    if not image_allowed(image, allowlist):
        raise ValidationError(
            {
                "image": [
                    _("Images come from the centre's registries only: %(list)s.")
                    % {"list": ", ".join(allowlist)}
                ]
            }
        )
