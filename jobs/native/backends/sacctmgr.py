"""``sacctmgr`` for the Slurm accounts sync (docs/backends.md, "Native Slurm users"): reads the
associations, QOS, default accounts and tracked TRES of one cluster, and applies commands with
``sacctmgr -i``, many per process (its stdin takes one command a line); and the ``squeue`` /
``scontrol hold|release`` that hold a spent budget's queued jobs. Plain Python, no Django.

Every association command names ``cluster=``: one slurmdbd serves several clusters, and an
``add account`` without it would add the account to all of them.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jobs.clusters.backends.base import BackendError
from quotas.slurm_accounts import ASSOC_FORMAT, QOS_FORMAT, USER_FORMAT, PendingJob, batches

CLUSTER_NAME = re.compile(r"^\s*ClusterName\s*=\s*(\S+)", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class Snapshot:
    """The raw ``-P -n`` texts the pure parser reads (``quotas.slurm_accounts.parse_current``)."""

    associations: str
    qos: str
    users: str
    tres: str


@dataclass(frozen=True)
class BatchResult:
    commands: list[str]
    returncode: int
    output: str


class Sacctmgr:
    def __init__(self, slurm_conf: str, *, timeout: float = 120.0) -> None:
        self.slurm_conf = str(slurm_conf)
        self.timeout = timeout
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/"),
            "LANG": "C.UTF-8",
            "SLURM_CONF": self.slurm_conf,
        }

    def cluster_name(self) -> str:
        """``ClusterName`` of slurm.conf, as Slurm stores it (lowercase)."""
        try:
            text = Path(self.slurm_conf).read_text()
        except OSError as exc:
            raise BackendError(f"cannot read {self.slurm_conf}: {exc}") from exc
        found = CLUSTER_NAME.search(text)
        if not found:
            raise BackendError(f"no ClusterName in {self.slurm_conf}")
        return found.group(1).lower()

    def snapshot(self, cluster: str) -> Snapshot:
        return Snapshot(
            associations=self._run(["show", "assoc", f"cluster={cluster}", f"format={ASSOC_FORMAT}"]),
            qos=self._run(["show", "qos", f"format={QOS_FORMAT}"]),
            users=self._run(
                ["show", "user", "withassoc", "where", f"cluster={cluster}", f"format={USER_FORMAT}"]
            ),
            tres=self._run(["show", "tres", "format=type,name"]),
        )

    def apply(self, commands: Sequence[str]) -> list[BatchResult]:
        """Each batch in one ``sacctmgr -i`` process. A failed command does not stop the ones after
        it (sacctmgr goes on, and exits 1 at the end): the caller reads the state again to see what
        did not take."""
        results = []
        for batch in batches(list(commands)):
            try:
                done = subprocess.run(
                    ["sacctmgr", "-i"],  # noqa: S607 — found on PATH, like every Slurm client here
                    input="\n".join(batch) + "\n",
                    env=self.env,
                    capture_output=True,
                    text=True,
                    timeout=self.timeout,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise BackendError(f"sacctmgr: {exc}") from exc
            results.append(BatchResult(batch, done.returncode, (done.stdout + done.stderr)[-20000:]))
        return results

    # -- the jobs a spent budget holds (``quotas.slurm_accounts.budget_holds``)

    def pending_jobs(self, owns, read_comment) -> list[PendingJob]:
        """Pending jobs of the accounts ``owns(account)`` accepts; a held one of an account
        ``read_comment(account)`` accepts with its AdminComment (``squeue`` cannot print it in
        Slurm 22.05: one ``scontrol show job`` each, so only where the caller needs it)."""
        text = self._client(["squeue", "-h", "-t", "PD", "-o", "%i|%a|%r"])
        out = []
        for line in text.splitlines():
            job_id, account, reason = [*line.split("|"), "", ""][:3]
            if not owns(account):
                continue
            held = reason == "JobHeldAdmin"
            comment = self._admin_comment(job_id) if held and read_comment(account) else ""
            out.append(PendingJob(job_id, account, held, comment))
        return out

    def hold(self, job_id: str, comment: str) -> None:
        self._client(["scontrol", "hold", job_id])
        self._client(["scontrol", "update", f"jobid={job_id}", f"admincomment={comment}"])

    def release(self, job_id: str) -> None:
        self._client(["scontrol", "update", f"jobid={job_id}", "admincomment="])
        self._client(["scontrol", "release", job_id])

    def _admin_comment(self, job_id: str) -> str:
        for line in self._client(["scontrol", "show", "job", job_id]).splitlines():
            if line.strip().startswith("AdminComment="):
                return line.strip().removeprefix("AdminComment=").strip()
        return ""

    def _run(self, args: list[str]) -> str:
        return self._client(["sacctmgr", "-P", "-n", *args])

    def _client(self, argv: list[str]) -> str:
        try:
            done = subprocess.run(  # noqa: S603 — a fixed Slurm client, arguments as a list
                argv,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BackendError(f"{argv[0]}: {exc}") from exc
        if done.returncode != 0:
            raise BackendError(f"{' '.join(argv)}: {done.stderr.strip()[-2000:]}")
        return done.stdout
