import pytest

from core.tpu import iam

PLAN = iam.Plan()
JOB = f"serviceAccount:{PLAN.email(PLAN.job)}"
LAUNCHER = f"serviceAccount:{PLAN.email(PLAN.launcher)}"


def parsed(argvs):
    return iam.bindings_from_commands(argvs)


def test_the_generated_plan_is_least_privilege():
    bindings, roles = parsed(iam.commands(PLAN))
    assert iam.problems(bindings, roles, PLAN) == []
    assert roles == {PLAN.custom_role: iam.LAUNCHER_PERMISSIONS}
    storage = [b for b in bindings if b.role.startswith("roles/storage.")]
    assert storage == [iam.Binding(f"bucket:{PLAN.bucket}", JOB, "roles/storage.objectUser")]


def _with(extra=(), drop=None, permissions=iam.LAUNCHER_PERMISSIONS):
    argvs = [a for a in iam.commands(PLAN, permissions) if drop is None or not drop(a)]
    argvs += [list(a) for a in extra]
    return iam.problems(*parsed(argvs), PLAN)


def _binding(kind, target, member, role):
    verb = {"project": ["projects"], "bucket": ["storage", "buckets"],
            "account": ["iam", "service-accounts"]}[kind]  # fmt: skip
    return [
        "gcloud",
        *verb,
        "add-iam-policy-binding",
        target,
        f"--member={member}",
        f"--role={role}",
    ]


@pytest.mark.parametrize(
    "extra, message",
    [
        ([_binding("project", PLAN.project, JOB, "roles/owner")], "basic role"),
        ([_binding("project", PLAN.project, LAUNCHER, "roles/editor")], "basic role"),
        ([_binding("project", PLAN.project, JOB, "roles/storage.admin")], "project-wide"),
        ([_binding("project", PLAN.project, JOB, "roles/storage.objectUser")], "project-wide"),
        ([_binding("bucket", "gs://someone-elses-data", JOB, "roles/storage.objectUser")],
         "does not use"),
        ([_binding("bucket", f"gs://{PLAN.bucket}", "allUsers", "roles/storage.objectUser")],
         "public member"),
        ([_binding("project", PLAN.project, "user:intern@example.com", "roles/tpu.admin")],
         "outside the plan"),
        ([_binding("account", PLAN.email("other-sa1"), LAUNCHER, "roles/iam.serviceAccountUser")],
         "other than the job's"),
        # actAs on the project: the launcher could run a VM as ANY account of the project
        ([_binding("project", PLAN.project, LAUNCHER, "roles/iam.serviceAccountUser")],
         "every service account"),
        ([_binding("project", PLAN.project, JOB, "roles/iam.serviceAccountUser")],
         "every service account"),
        # the job account needs no actAs at all, even on itself
        ([_binding("account", PLAN.email(PLAN.job), JOB, "roles/iam.serviceAccountUser")],
         "needs none of it"),
        # the launcher creates VMs; it reads and writes no data
        ([_binding("bucket", f"gs://{PLAN.bucket}", LAUNCHER, "roles/storage.objectUser")],
         "needs none of it"),
        ([_binding("project", PLAN.project, LAUNCHER, "roles/logging.logWriter")],
         "needs none of it"),
        # the job's storage role must come from the bucket, its log role from the project
        ([_binding("bucket", f"gs://{PLAN.bucket}", JOB, "roles/logging.logWriter")],
         "needs none of it"),
    ],
)  # fmt: skip
def test_planted_over_broad_policies_are_refused(extra, message):
    found = _with(extra)
    assert any(message in p for p in found), found


def test_a_grant_above_the_project_is_refused():
    """An organization or folder binding reaches every project under it (it was a KeyError)."""
    for verb in (["organizations"], ["resource-manager", "folders"]):
        extra = ["gcloud", *verb, "add-iam-policy-binding", "123456789",
                 f"--member={JOB}", "--role=roles/logging.logWriter"]  # fmt: skip
        found = _with([extra])
        assert any("a resource outside the plan" in p for p in found), found
    with pytest.raises(ValueError, match="sets a whole policy"):
        _with([["gcloud", "projects", "set-iam-policy", PLAN.project, "policy.json"]])


def test_a_custom_role_with_unneeded_permissions_is_refused():
    found = _with(permissions=(*iam.LAUNCHER_PERMISSIONS, "tpu.nodes.update", "compute.*"))
    assert any("does not need: compute.*, tpu.nodes.update" in p for p in found), found


def test_missing_permissions_and_missing_act_as_are_reported():
    found = _with(permissions=("tpu.nodes.create",))
    assert any("lacks tpu.nodes.delete" in p for p in found), found
    found = _with(drop=lambda a: "storage" in a)
    assert any(f"{JOB} lacks storage.objects.create" in p for p in found), found
    found = _with(drop=lambda a: a[1:3] == ["iam", "service-accounts"] and "add" in a[3])
    assert any("actAs" in p for p in found), found


def test_bad_plans_are_refused():
    for kwargs, message in (
        ({"bucket": "B"}, "bucket"),
        ({"job": "x"}, "service account"),
        ({"role_id": "a b"}, "role id"),
        # a trailing newline: `$` matches before it, \Z does not
        ({"bucket": "xyz\n"}, "bucket"),
        ({"job": "tpu-job\n"}, "service account"),
        ({"launcher": "tpu-launcher\n"}, "service account"),
        ({"role_id": "tpuJobLauncher\n"}, "role id"),
        ({"project": "my-tpu-project\n"}, "project"),
    ):
        with pytest.raises(ValueError, match=message):
            iam.Plan(**kwargs)
