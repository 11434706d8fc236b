"""Least privilege for a TPU training job: two service accounts, one custom role, one bucket.

- the *launcher* account creates and deletes the job's TPU VMs: a custom role with only the
  ``tpu.nodes.*``/``tpu.operations.get`` permissions the launcher's gcloud calls need
  (create, delete, describe, ssh/scp read the node), bound on the project, and the right to
  attach the job account to a VM (``roles/iam.serviceAccountUser`` on THAT account only);
- the *job* account, which the TPU VM runs as, reads and writes objects in ONE bucket
  (``roles/storage.objectUser`` bound on ``gs://BUCKET``, never on the project) and writes
  logs and metrics.

``commands(plan)`` spells it as gcloud commands (checked against core/tpu/gcloud_grammar.py);
``bindings_from_commands`` reads them back, and ``problems`` refuses what is over-broad:
``roles/owner``/``roles/editor``/``roles/viewer``, any storage role on the project, a bucket
other than the job's, a public member, a custom role with permissions the job does not need,
or a needed permission missing. Permissions of the predefined roles used are listed in
``PREDEFINED`` (from the IAM roles reference, cloud.google.com/iam/docs/roles-permissions,
read 2026-12-03; only the ones the job relies on).
"""

from __future__ import annotations

import dataclasses
import functools
import re

from core.tpu import gcloud_grammar

LAUNCHER_PERMISSIONS = (
    "tpu.nodes.create", "tpu.nodes.delete", "tpu.nodes.get", "tpu.nodes.list",
    "tpu.operations.get",
)  # fmt: skip
JOB_PERMISSIONS = (
    "storage.objects.create", "storage.objects.delete", "storage.objects.get",
    "storage.objects.list", "logging.logEntries.create", "monitoring.timeSeries.create",
)  # fmt: skip
ACT_AS = "iam.serviceAccounts.actAs"

PREDEFINED: dict[str, tuple[str, ...]] = {
    "roles/storage.objectUser": (
        "storage.objects.create", "storage.objects.delete", "storage.objects.get",
        "storage.objects.list", "storage.objects.update", "storage.multipartUploads.create",
    ),
    "roles/logging.logWriter": ("logging.logEntries.create",),
    "roles/monitoring.metricWriter": ("monitoring.timeSeries.create",),
    "roles/iam.serviceAccountUser": ("iam.serviceAccounts.actAs", "iam.serviceAccounts.get"),
}  # fmt: skip
BASIC_ROLES = ("roles/owner", "roles/editor", "roles/viewer")
PUBLIC_MEMBERS = ("allUsers", "allAuthenticatedUsers")
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
_ACCOUNT_RE = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_ROLE_ID_RE = re.compile(r"^[a-zA-Z0-9_.]{3,64}$")


@dataclasses.dataclass(frozen=True)
class Plan:
    """Who may do what for one training job in ``project`` with data in ``bucket``."""

    project: str = "my-tpu-project"
    bucket: str = "my-tpu-checkpoints"
    launcher: str = "tpu-launcher"
    job: str = "tpu-job"
    role_id: str = "tpuJobLauncher"

    def __post_init__(self):
        if not _BUCKET_RE.match(self.bucket):
            raise ValueError(f"bucket name {self.bucket!r}: 3-63 of [a-z0-9._-]")
        for name in (self.launcher, self.job):
            if not _ACCOUNT_RE.match(name):
                raise ValueError(f"service account id {name!r}: 6-30 of [a-z0-9-], a letter first")
        if not _ROLE_ID_RE.match(self.role_id):
            raise ValueError(f"role id {self.role_id!r}: 3-64 of [a-zA-Z0-9_.]")

    def email(self, account: str) -> str:
        return f"{account}@{self.project}.iam.gserviceaccount.com"

    @property
    def custom_role(self) -> str:
        return f"projects/{self.project}/roles/{self.role_id}"


def commands(plan: Plan, permissions: tuple[str, ...] = LAUNCHER_PERMISSIONS) -> list[list[str]]:
    """The gcloud commands that make the accounts, the role and the bindings, in order."""
    launcher = f"serviceAccount:{plan.email(plan.launcher)}"
    job = f"serviceAccount:{plan.email(plan.job)}"
    p = f"--project={plan.project}"
    argvs = [
        ["gcloud", "iam", "service-accounts", "create", plan.launcher,
         "--display-name=TPU launcher (creates/deletes the job's TPU VMs)", p],
        ["gcloud", "iam", "service-accounts", "create", plan.job,
         "--display-name=TPU training job (runs on the TPU VM)", p],
        ["gcloud", "iam", "roles", "create", plan.role_id, p,
         "--title=TPU job launcher", "--stage=GA", "--permissions=" + ",".join(permissions)],
        ["gcloud", "projects", "add-iam-policy-binding", plan.project,
         f"--member={launcher}", f"--role={plan.custom_role}"],
        ["gcloud", "iam", "service-accounts", "add-iam-policy-binding", plan.email(plan.job),
         f"--member={launcher}", "--role=roles/iam.serviceAccountUser", p],
        ["gcloud", "storage", "buckets", "add-iam-policy-binding", f"gs://{plan.bucket}",
         f"--member={job}", "--role=roles/storage.objectUser"],
        ["gcloud", "projects", "add-iam-policy-binding", plan.project,
         f"--member={job}", "--role=roles/logging.logWriter"],
        ["gcloud", "projects", "add-iam-policy-binding", plan.project,
         f"--member={job}", "--role=roles/monitoring.metricWriter"],
    ]  # fmt: skip
    for argv in argvs:
        if found := gcloud_grammar.problems(argv):
            raise ValueError("; ".join(found))
    return argvs


@dataclasses.dataclass(frozen=True)
class Binding:
    """``member`` holds ``role`` on ``resource`` ("project:P", "bucket:B", "account:EMAIL")."""

    resource: str
    member: str
    role: str


def bindings_from_commands(
    argvs: list[list[str]],
) -> tuple[list[Binding], dict[str, tuple[str, ...]]]:
    """The bindings and custom roles (name -> permissions) the commands would create."""
    bindings, roles = [], {}
    for argv in argvs:
        path, positionals, _ = gcloud_grammar.split(argv)
        value = functools.partial(gcloud_grammar.flag_value, argv)
        if path == ("iam", "roles", "create"):
            name = f"projects/{value('project')}/roles/{positionals[0]}"
            roles[name] = tuple((value("permissions") or "").split(","))
        elif path[-1] == "add-iam-policy-binding":
            kind = {"projects": "project", "storage": "bucket", "iam": "account"}[path[0]]
            target = positionals[0].removeprefix("gs://")
            bindings.append(Binding(f"{kind}:{target}", value("member"), value("role")))
    return bindings, roles


def problems(bindings: list[Binding], roles: dict[str, tuple[str, ...]], plan: Plan) -> list[str]:
    """Everything over-broad or missing in ``bindings`` for ``plan`` ([] when least-privilege)."""
    found = []
    granted: dict[str, set[str]] = {}
    launcher = f"serviceAccount:{plan.email(plan.launcher)}"
    job = f"serviceAccount:{plan.email(plan.job)}"
    need = {launcher: set(LAUNCHER_PERMISSIONS), job: set(JOB_PERMISSIONS)}
    for b in bindings:
        where = f"{b.role} for {b.member} on {b.resource}"
        if b.role in BASIC_ROLES:
            found.append(f"{where}: a basic role grants far more than a training job needs")
        if b.member in PUBLIC_MEMBERS:
            found.append(f"{where}: a public member")
        elif b.member not in need:
            found.append(f"{where}: a member outside the plan")
        if b.role.startswith("roles/storage.") and not b.resource.startswith("bucket:"):
            found.append(f"{where}: storage granted project-wide; bind it on gs://{plan.bucket}")
        if b.resource.startswith("bucket:") and b.resource != f"bucket:{plan.bucket}":
            found.append(f"{where}: a bucket the job does not use")
        if b.resource.startswith("account:") and b.resource != f"account:{plan.email(plan.job)}":
            found.append(f"{where}: acting as an account other than the job's")
        if b.role in roles:
            permissions = set(roles[b.role])
        elif b.role in PREDEFINED:
            permissions = set(PREDEFINED[b.role])
        else:
            found.append(f"{where}: a role whose permissions this checker does not know")
            permissions = set()
        if b.resource.startswith("account:"):
            if b.member == launcher and ACT_AS in permissions:
                continue  # attaching the job account: checked by resource above
        granted.setdefault(b.member, set()).update(permissions)
        if b.member in need and b.role in roles:
            extra = sorted(permissions - need[b.member])
            if extra:
                found.append(f"{where}: permissions the job does not need: {', '.join(extra)}")
    for member, wanted in need.items():
        missing = sorted(wanted - granted.get(member, set()))
        if missing:
            found.append(f"{member} lacks {', '.join(missing)}")
    if not any(b.resource == f"account:{plan.email(plan.job)}" for b in bindings):
        found.append(f"{launcher} cannot attach {plan.email(plan.job)} to a VM (actAs)")
    return found
