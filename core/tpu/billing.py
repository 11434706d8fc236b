"""Budget and alert commands for a TPU project: a notification channel, then a budget.

``gcloud beta monitoring channels create`` makes an e-mail channel; ``gcloud billing budgets
create`` makes a budget on the billing account with threshold rules (fractions of the budget,
on current or forecasted spend) that notify that channel. Strings only; each command is
checked against core/tpu/gcloud_grammar.py before it is returned.
"""

from __future__ import annotations

import dataclasses
import re

from core.tpu import cloud_tpu, gcloud_grammar

_ACCOUNT_RE = re.compile(r"^[0-9A-F]{6}-[0-9A-F]{6}-[0-9A-F]{6}\Z")
_EMAIL_RE = re.compile(r"^[^@\s,=]+@[^@\s,=]+\.[a-z]{2,}\Z")
BASES = ("current-spend", "forecasted-spend")
# The display name the budgets API keeps (the create page: "less than or equal to 60").
MAX_DISPLAY_NAME = 60


@dataclasses.dataclass(frozen=True)
class Budget:
    """A monthly budget in USD with alert thresholds, for one project's spend."""

    billing_account: str  # 012345-6789AB-CDEF01
    project: str
    amount_usd: float
    thresholds: tuple[tuple[float, str], ...] = ((0.5, "current-spend"), (0.9, "current-spend"))
    display_name: str = "tpu-training-budget"
    email: str = "oncall@example.com"
    labels: tuple[tuple[str, str], ...] = ()  # only spend carrying these labels counts

    def __post_init__(self):
        if not _ACCOUNT_RE.match(self.billing_account):
            raise ValueError(
                f"billing account {self.billing_account!r} must look like 012345-6789AB-CDEF01"
            )
        if not self.amount_usd > 0:
            raise ValueError(f"budget amount must be positive, got {self.amount_usd}")
        if not self.thresholds:
            raise ValueError("a budget without a threshold rule never alerts: add one")
        for percent, basis in self.thresholds:
            if not 0 < percent <= 10 or basis not in BASES:
                raise ValueError(
                    f"threshold {percent} on {basis!r}: percent is a fraction in (0, 10] "
                    f"(0.5 = 50 %), basis one of {BASES}"
                )
        if not 1 <= len(self.display_name) <= MAX_DISPLAY_NAME:
            raise ValueError(f"display name must be 1-{MAX_DISPLAY_NAME} characters")
        if not _EMAIL_RE.match(self.email):
            raise ValueError(f"{self.email!r} is not an e-mail address")
        if problems := cloud_tpu.label_problems(self.labels):
            raise ValueError("labels: " + "; ".join(problems))


CHANNEL_PLACEHOLDER = "CHANNEL_ID"  # the id the channel create prints (projects/P/notif...)


def channel_command(budget: Budget) -> list[str]:
    """The e-mail notification channel the budget's alerts go to."""
    return [
        "gcloud", "beta", "monitoring", "channels", "create",
        f"--display-name={budget.display_name}-email", "--type=email",
        f"--channel-labels=email_address={budget.email}", f"--project={budget.project}",
    ]  # fmt: skip


def budget_command(budget: Budget, channel: str = CHANNEL_PLACEHOLDER) -> list[str]:
    """``gcloud billing budgets create`` with one --threshold-rule per threshold."""
    amount = f"{budget.amount_usd:.2f}".rstrip("0").rstrip(".")
    argv = [
        "gcloud", "billing", "budgets", "create",
        f"--billing-account={budget.billing_account}",
        f"--display-name={budget.display_name}", f"--budget-amount={amount}USD",
        f"--filter-projects=projects/{budget.project}", "--calendar-period=month",
    ]  # fmt: skip
    argv += [f"--threshold-rule=percent={p:g},basis={b}" for p, b in budget.thresholds]
    if budget.labels:
        argv.append("--filter-labels=" + ",".join(f"{k}={v}" for k, v in budget.labels))
    argv.append(
        "--notifications-rule-monitoring-notification-channels="
        f"projects/{budget.project}/notificationChannels/{channel}"
    )
    return argv


def commands(budget: Budget) -> list[list[str]]:
    """The channel, then the budget; ValueError if either leaves the recorded grammar."""
    argvs = [channel_command(budget), budget_command(budget)]
    for argv in argvs:
        if found := gcloud_grammar.problems(argv):
            raise ValueError("; ".join(found))
    return argvs


def parse_thresholds(argv: list[str]) -> list[tuple[float, str]]:
    """The (percent, basis) of every --threshold-rule in a budget command (basis defaults to
    current-spend, as gcloud's does)."""
    rules = []
    for name, value in gcloud_grammar.split(argv)[2]:
        if name == "threshold-rule":
            fields = dict(part.split("=", 1) for part in value.split(","))
            rules.append((float(fields["percent"]), fields.get("basis", "current-spend")))
    return rules
