"""The flags gcloud accepts for the commands the course generates, recorded, and a checker.

Nothing here runs gcloud. Each command's grammar was recorded on 2026-12-03 from its gcloud
reference page (``url``) and the Cloud SDK 528.0.0 command definitions installed on this
machine (``lib/surface/...``, read as files; ``gcloud_grammar_test`` compares the two where the
SDK is present). ``problems(argv)`` says where a generated command leaves that grammar: an
unknown command or flag, a required flag missing, a value missing or given to a switch, the
wrong number of positional arguments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

RECORDED = "2026-12-03"
SDK = "Google Cloud SDK 528.0.0"
# Flags every gcloud command accepts (gcloud topic flags).
GLOBAL_FLAGS = {"project": True, "quiet": False, "format": True, "verbosity": True}


@dataclasses.dataclass(frozen=True)
class Grammar:
    """One command: its positionals, flags (name -> takes a value), what is required."""

    path: tuple[str, ...]
    positionals: int
    flags: dict[str, bool]  # flag name (no dashes) -> True when it takes a value
    required: tuple[str, ...] = ()
    one_of: tuple[tuple[str, ...], ...] = ()  # groups of which exactly one is required
    repeatable: tuple[str, ...] = ()
    url: str = ""
    surface: str = ""  # the SDK file that defines it, under lib/surface/


_IAM_BINDING = {"member": True, "role": True, "condition": True, "condition-from-file": True}

COMMANDS: dict[tuple[str, ...], Grammar] = {
    g.path: g
    for g in (
        Grammar(
            ("billing", "budgets", "create"),
            0,
            {
                "billing-account": True, "display-name": True, "budget-amount": True,
                "last-period-amount": False, "threshold-rule": True, "ownership-scope": True,
                "filter-projects": True, "credit-types-treatment": True,
                "filter-services": True, "filter-resource-ancestors": True,
                "filter-subaccounts": True, "filter-labels": True, "filter-credit-types": True,
                "calendar-period": True, "start-date": True, "end-date": True,
                "all-updates-rule-pubsub-topic": True,
                "all-updates-rule-monitoring-notification-channels": True,
                "notifications-rule-pubsub-topic": True,
                "notifications-rule-monitoring-notification-channels": True,
                "disable-default-iam-recipients": False,
            },
            required=("billing-account", "display-name"),
            one_of=(("budget-amount", "last-period-amount"),),
            repeatable=("threshold-rule",),
            url="https://cloud.google.com/sdk/gcloud/reference/billing/budgets/create",
            surface="billing/budgets/create.yaml",
        ),
        Grammar(
            ("beta", "monitoring", "channels", "create"),
            0,
            {
                "display-name": True, "description": True, "type": True,
                "channel-labels": True, "user-labels": True, "enabled": False,
                "channel-content": True, "channel-content-from-file": True,
            },
            url="https://cloud.google.com/sdk/gcloud/reference/beta/monitoring/channels/create",
            surface="monitoring/channels/create.py",
        ),
        Grammar(
            ("iam", "service-accounts", "create"),
            1,
            {"display-name": True, "description": True},
            url="https://cloud.google.com/sdk/gcloud/reference/iam/service-accounts/create",
            surface="iam/service_accounts/create.py",
        ),
        Grammar(
            ("iam", "roles", "create"),
            1,
            {
                "project": True, "organization": True, "title": True, "description": True,
                "stage": True, "permissions": True, "file": True,
            },
            one_of=(("project", "organization"),),
            url="https://cloud.google.com/sdk/gcloud/reference/iam/roles/create",
            surface="iam/roles/create.py",
        ),
        Grammar(
            ("projects", "add-iam-policy-binding"),
            1,
            _IAM_BINDING,
            required=("member", "role"),
            url="https://cloud.google.com/sdk/gcloud/reference/projects/add-iam-policy-binding",
            surface="projects/add_iam_policy_binding.yaml",
        ),
        Grammar(
            ("storage", "buckets", "add-iam-policy-binding"),
            1,
            _IAM_BINDING,
            required=("member", "role"),
            url="https://cloud.google.com/sdk/gcloud/reference/storage/buckets/"
            "add-iam-policy-binding",
            surface="storage/buckets/add_iam_policy_binding.py",
        ),
        Grammar(
            ("iam", "service-accounts", "add-iam-policy-binding"),
            1,
            _IAM_BINDING,
            required=("member", "role"),
            url="https://cloud.google.com/sdk/gcloud/reference/iam/service-accounts/"
            "add-iam-policy-binding",
            surface="iam/service_accounts/add_iam_policy_binding.yaml",
        ),
        Grammar(
            ("compute", "tpus", "tpu-vm", "create"),
            1,
            {
                "zone": True, "accelerator-type": True, "version": True, "spot": False,
                "labels": True, "service-account": True, "scopes": True,
                "preemptible": False, "network": True, "subnetwork": True,
            },
            required=("version",),
            url="https://cloud.google.com/sdk/gcloud/reference/compute/tpus/tpu-vm/create",
            surface="compute/tpus/tpu_vm/create.yaml",
        ),
    )
}  # fmt: skip


def split(argv: Sequence[str]) -> tuple[tuple[str, ...], list[str], list[tuple[str, str | None]]]:
    """(command path, positionals, [(flag, value or None)]) of a ``gcloud ...`` argv."""
    words = list(argv)
    if not words or words[0] != "gcloud":
        raise ValueError(f"not a gcloud command: {' '.join(words)[:80]!r}")
    rest = words[1:]
    path = ()
    for length in sorted({len(p) for p in COMMANDS}, reverse=True):
        if tuple(rest[:length]) in COMMANDS:
            path = tuple(rest[:length])
            break
    if not path:
        return tuple(w for w in rest if not w.startswith("-")), [], []
    positionals, flags = [], []
    for word in rest[len(path) :]:
        if word.startswith("--"):
            name, has_value, value = word[2:].partition("=")
            flags.append((name, value if has_value else None))
        else:
            positionals.append(word)
    return path, positionals, flags


def problems(argv: Sequence[str]) -> list[str]:
    """Where ``argv`` leaves the recorded grammar of its command ([] when it does not)."""
    path, positionals, flags = split(argv)
    if path not in COMMANDS:
        return [f"`gcloud {' '.join(path)}` is not a recorded command"]
    grammar = COMMANDS[path]
    known = {**GLOBAL_FLAGS, **grammar.flags}
    where = f"gcloud {' '.join(path)}"
    found = []
    if len(positionals) != grammar.positionals:
        found.append(
            f"{where}: {len(positionals)} positional argument(s), expected {grammar.positionals}"
        )
    names = [name for name, _ in flags]
    for name, value in flags:
        if name not in known:
            found.append(f"{where}: unknown flag --{name}")
        elif known[name] and not value:
            found.append(f"{where}: --{name} needs a value (--{name}=VALUE)")
        elif not known[name] and value is not None:
            found.append(f"{where}: --{name} is a switch and takes no value")
    for name in sorted({n for n in names if names.count(n) > 1}):
        if name not in grammar.repeatable:
            found.append(f"{where}: --{name} given more than once")
    for name in grammar.required:
        if name not in names:
            found.append(f"{where}: required flag --{name} missing")
    for group in grammar.one_of:
        given = [n for n in group if n in names]
        if len(given) != 1:
            choices = " or ".join(f"--{n}" for n in group)
            found.append(f"{where}: exactly one of {choices} required, got {len(given)}")
    return found


def flag_value(argv: Sequence[str], name: str) -> str | None:
    """The value of ``--name=`` in ``argv`` (the last one), or None."""
    values = [value for flag, value in split(argv)[2] if flag == name]
    return values[-1] if values else None
