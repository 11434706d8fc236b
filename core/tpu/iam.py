"""Least privilege for a TPU training job: two service accounts, one custom role, one bucket.

- the *launcher* account creates and deletes the job's TPU VMs: a custom role with only the
  ``tpu.nodes.*``/``tpu.operations.get`` permissions the launcher's gcloud calls need
  (create, delete, describe, ssh/scp read the node), bound on the project, and the right to
  attach the job account to a VM (``roles/iam.serviceAccountUser`` on THAT account only);
  it reads and writes no data;
- the *job* account, which the TPU VM runs as, reads and writes objects in ONE bucket
  (``roles/storage.objectUser`` bound on ``gs://BUCKET``, never on the project) and writes
  logs and metrics; it acts as no account.

``commands(plan)`` spells it as gcloud commands (checked against core/tpu/gcloud_grammar.py);
``bindings_from_commands`` reads them back, and ``problems`` refuses what is over-broad:
``roles/owner``/``roles/editor``/``roles/viewer``, any storage role on the project, a bucket
other than the job's, a public member, actAs anywhere but on the job's account (bound on the
project it lets the member act as every service account there), a grant on a resource above
the project (organization, folder), a role that gives a member on a resource none of what
that member needs there (storage for the launcher, actAs for the job), a custom role with
permissions the job does not need, a role the checker does not know, or a needed permission
missing. Permissions of the predefined roles used are listed in
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
JOB_DATA_PERMISSIONS = (
    "storage.objects.create", "storage.objects.delete", "storage.objects.get",
    "storage.objects.list",
)  # fmt: skip
JOB_PROJECT_PERMISSIONS = ("logging.logEntries.create", "monitoring.timeSeries.create")
JOB_PERMISSIONS = JOB_DATA_PERMISSIONS + JOB_PROJECT_PERMISSIONS
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
# Matched whole (fullmatch): `^...$` with re.match also accepts a trailing newline.
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")
_ACCOUNT_RE = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")
_PROJECT_RE = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")  # a project id (no domain prefix)
_ROLE_ID_RE = re.compile(r"[a-zA-Z0-9_.]{3,64}")


@dataclasses.dataclass(frozen=True)
class Plan:
    """Who may do what for one training job in ``project`` with data in ``bucket``."""

    project: str = "my-tpu-project"
    bucket: str = "my-tpu-checkpoints"
    launcher: str = "tpu-launcher"
    job: str = "tpu-job"
    role_id: str = "tpuJobLauncher"

    def __post_init__(self):
        if not _PROJECT_RE.fullmatch(self.project):
            raise ValueError(f"project id {self.project!r}: 6-30 of [a-z0-9-], a letter first")
        if not _BUCKET_RE.fullmatch(self.bucket):
            raise ValueError(f"bucket name {self.bucket!r}: 3-63 of [a-z0-9._-]")
        for name in (self.launcher, self.job):
            if not _ACCOUNT_RE.fullmatch(name):
                raise ValueError(f"service account id {name!r}: 6-30 of [a-z0-9-], a letter first")
        if not _ROLE_ID_RE.fullmatch(self.role_id):
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
    """The bindings and custom roles (name -> permissions) the commands would create.

    A grant outside the recorded grammar (``gcloud organizations add-iam-policy-binding``, a
    folder's) is read as a binding on that resource, which ``problems`` refuses; a command
    that replaces a whole policy (``set-iam-policy``) cannot be read here: ValueError.
    """
    bindings, roles = [], {}
    for argv in argvs:
        path, positionals, _ = gcloud_grammar.split(argv)
        value = functools.partial(gcloud_grammar.flag_value, argv)
        if path not in gcloud_grammar.COMMANDS:  # split gave every word that is not a flag
            if "set-iam-policy" in path:
                raise ValueError(f"`gcloud {' '.join(path)}` sets a whole policy: unreadable here")
            if "add-iam-policy-binding" in path:
                at = path.index("add-iam-policy-binding")
                flags = dict(w[2:].partition("=")[::2] for w in argv if w.startswith("--"))
                target = path[at + 1] if len(path) > at + 1 else "?"
                resource = f"{'/'.join(path[:at])}:{target}"
                bindings.append(Binding(resource, flags.get("member"), flags.get("role")))
        elif path == ("iam", "roles", "create"):
            name = f"projects/{value('project')}/roles/{positionals[0]}"
            roles[name] = tuple((value("permissions") or "").split(","))
        elif path[-1] == "add-iam-policy-binding":
            kind = {"projects": "project", "storage": "bucket", "iam": "account"}[path[0]]
            target = positionals[0].removeprefix("gs://")
            bindings.append(Binding(f"{kind}:{target}", value("member"), value("role")))
    return bindings, roles


def needs(plan: Plan) -> dict[tuple[str, str], frozenset[str]]:
    """{(member, resource): the permissions the member needs there}: all the plan grants."""
    launcher = f"serviceAccount:{plan.email(plan.launcher)}"
    job = f"serviceAccount:{plan.email(plan.job)}"
    project = f"project:{plan.project}"
    return {
        (launcher, project): frozenset(LAUNCHER_PERMISSIONS),
        (launcher, f"account:{plan.email(plan.job)}"): frozenset({ACT_AS}),
        (job, f"bucket:{plan.bucket}"): frozenset(JOB_DATA_PERMISSIONS),
        (job, project): frozenset(JOB_PROJECT_PERMISSIONS),
    }


def problems(bindings: list[Binding], roles: dict[str, tuple[str, ...]], plan: Plan) -> list[str]:
    """Everything over-broad or missing in ``bindings`` for ``plan`` ([] when least-privilege)."""
    found = []
    wanted = needs(plan)
    members = {member for member, _ in wanted}
    resources = {f"project:{plan.project}", f"bucket:{plan.bucket}"}
    granted: dict[tuple[str, str], set[str]] = {}
    for b in bindings:
        where = f"{b.role} for {b.member} on {b.resource}"
        if b.role in BASIC_ROLES:
            found.append(f"{where}: a basic role grants far more than a training job needs")
        if b.member in PUBLIC_MEMBERS:
            found.append(f"{where}: a public member")
        elif b.member not in members:
            found.append(f"{where}: a member outside the plan")
        kind = b.resource.split(":")[0]
        if b.role.startswith("roles/storage.") and kind != "bucket":
            found.append(f"{where}: storage granted project-wide; bind it on gs://{plan.bucket}")
        if kind == "bucket" and b.resource != f"bucket:{plan.bucket}":
            found.append(f"{where}: a bucket the job does not use")
        elif kind == "account" and b.resource != f"account:{plan.email(plan.job)}":
            found.append(f"{where}: acting as an account other than the job's")
        elif kind not in ("bucket", "account") and b.resource not in resources:
            found.append(
                f"{where}: a resource outside the plan (it reaches every project under it)"
            )
        if b.role in roles:
            permissions = set(roles[b.role])
        elif b.role in PREDEFINED:
            permissions = set(PREDEFINED[b.role])
        else:
            found.append(f"{where}: a role whose permissions this checker does not know")
            permissions = set()
        if ACT_AS in permissions and kind != "account":
            found.append(
                f"{where}: actAs here lets the member act as every service account under "
                f"{b.resource}; bind roles/iam.serviceAccountUser on {plan.email(plan.job)} only"
            )
        need = wanted.get((b.member, b.resource), frozenset())
        if permissions and not permissions & need:
            found.append(
                f"{where}: the member needs none of it here ({', '.join(sorted(permissions))})"
            )
        elif b.role in roles and (extra := sorted(permissions - need)):
            found.append(f"{where}: permissions the job does not need: {', '.join(extra)}")
        granted.setdefault((b.member, b.resource), set()).update(permissions & need)
    for (member, resource), need in wanted.items():
        missing = sorted(need - granted.get((member, resource), set()))
        if missing == [ACT_AS]:
            found.append(f"{member} cannot attach {plan.email(plan.job)} to a VM (actAs)")
        elif missing:
            found.append(f"{member} lacks {', '.join(missing)} on {resource}")
    return found
