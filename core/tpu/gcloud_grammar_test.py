import pathlib
import re

import pytest

from core.tpu import billing, cloud_tpu, gcloud_grammar, iam

SURFACE = pathlib.Path("/usr/lib/google-cloud-sdk/lib/surface")
needs_sdk = pytest.mark.skipif(not SURFACE.is_dir(), reason="no Cloud SDK surface files here")


@needs_sdk
def test_every_recorded_command_exists_in_the_installed_sdk():
    for grammar in gcloud_grammar.COMMANDS.values():
        assert (SURFACE / grammar.surface).is_file(), grammar.surface


@needs_sdk
def test_budget_flags_match_the_sdk_definition():
    text = (SURFACE / "billing/budgets/create.yaml").read_text(encoding="utf-8")
    # top-level arg_names (the nested arg_dict keys basis/percent are the rule's fields)
    sdk = set(re.findall(r"^\s*-\s+arg_name: ([a-z-]+)$", text, flags=re.MULTILINE))
    sdk -= {"basis", "percent"}
    recorded = set(gcloud_grammar.COMMANDS[("billing", "budgets", "create")].flags)
    assert recorded - {"billing-account"} == sdk  # --billing-account: the resource argument


@needs_sdk
@pytest.mark.parametrize(
    "path", [("iam", "roles", "create"), ("iam", "service-accounts", "create")]
)
def test_iam_create_flags_match_the_sdk_definition(path):
    grammar = gcloud_grammar.COMMANDS[path]
    text = (SURFACE / grammar.surface).read_text(encoding="utf-8")
    sdk = set(re.findall(r"'--([a-z-]+)'", text))
    assert set(grammar.flags) - {"project", "organization"} == sdk - {"project", "organization"}


def test_the_generated_commands_pass_and_planted_mistakes_are_caught():
    budget = billing.Budget("012345-6789AB-CDEF01", "my-tpu-project", 500.0)
    for argv in billing.commands(budget):
        assert gcloud_grammar.problems(argv) == []
    good = billing.budget_command(budget)
    planted = {
        "unknown flag --threshold": [*good, "--threshold=0.5"],
        "needs a value": [*good[:-1], "--notifications-rule-pubsub-topic"],
        "required flag --display-name": [a for a in good if "display-name" not in a],
        "exactly one of --budget-amount or --last-period-amount": [*good, "--last-period-amount"],
        "takes no value": [*good, "--disable-default-iam-recipients=yes"],
        "more than once": [*good, "--calendar-period=year"],
        "positional": [*good, "extra"],
        "not a recorded command": ["gcloud", "billing", "budgets", "explode"],
    }
    for message, argv in planted.items():
        assert any(message in p for p in gcloud_grammar.problems(argv)), message


def test_budget_thresholds_round_trip_and_bad_budgets_refused():
    budget = billing.Budget(
        "012345-6789AB-CDEF01", "my-tpu-project", 1234.5,
        thresholds=((0.5, "current-spend"), (1.0, "forecasted-spend")),
        labels=(("team", "ml"),),
    )  # fmt: skip
    argv = billing.budget_command(budget)
    assert "--budget-amount=1234.5USD" in argv
    assert "--filter-labels=team=ml" in argv
    assert billing.parse_thresholds(argv) == [(0.5, "current-spend"), (1.0, "forecasted-spend")]
    for kwargs, message in (
        ({"billing_account": "123"}, "billing account"),
        ({"amount_usd": 0.0}, "positive"),
        ({"thresholds": ()}, "never alerts"),
        ({"thresholds": ((50, "current-spend"),)}, "fraction"),
        ({"email": "nobody"}, "e-mail"),
        ({"labels": (("Team", "x"),)}, "labels"),
    ):
        with pytest.raises(ValueError, match=message):
            billing.Budget(**{"billing_account": "012345-6789AB-CDEF01", "project": "p-123456",
                              "amount_usd": 10.0, **kwargs})  # fmt: skip


def test_tpu_create_with_labels_is_in_the_grammar():
    vm = cloud_tpu.TpuVm(labels=(("team", "ml"),), spot=True, project="my-tpu-project")
    assert gcloud_grammar.problems(cloud_tpu.create_command(vm)) == []


def test_iam_commands_are_in_the_grammar():
    for argv in iam.commands(iam.Plan()):
        assert gcloud_grammar.problems(argv) == [], argv
