"""Cloud TPU VM choices and the exact gcloud commands that act on them.

Only strings are built here; nothing runs gcloud. The launcher in tpu_scripts/ and the
lesson "Move your experiment to a TPU" both build their commands from these functions, so
what a learner reads is what a job runs. Reading the commands back for checks (an independent
parse of the shell text) is core/tpu/command_check.py; the lesson's local half (export an app
as a headless script, run it) is core/tpu/local_run.py.

Sources (read 2026-11): Cloud TPU "TPU regions and zones" (cloud.google.com/tpu/docs/regions-zones,
US zones), "TPU software versions" (cloud.google.com/tpu/docs/runtimes), the v5e/v5p/v6e
pages (chips per host, slice shapes) and `gcloud compute tpus tpu-vm {create,scp,ssh} --help`
(SDK 528: --spot, --worker=all|N|a,b|a-b with --command). TPU7x (Ironwood) is not created
through the Cloud TPU API (the TPU7x page: GKE or Compute Engine): ``PROVISIONING`` says how
each generation is created, and a TpuVm of TPU7x is refused with that reason.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Sequence

# Runtime (software) version for JAX per generation, from the Cloud TPU runtimes page.
RUNTIME_VERSIONS: dict[str, str] = {
    "v5e": "v2-alpha-tpuv5-lite",
    "v5p": "v2-alpha-tpuv5",
    "v6e": "v2-alpha-tpuv6e",
}

# Zones that offer each generation (US, from the regions-and-zones page; quota is per project).
ZONES: dict[str, tuple[str, ...]] = {
    "v5e": ("us-central1-a", "us-south1-a", "us-west1-c", "us-west4-a"),
    "v5p": ("us-central1-a", "us-east5-a"),
    "v6e": ("us-central1-b", "us-east1-d", "us-east5-a", "us-east5-b"),
}

# Every zone above, once: what a zone menu offers before it knows the generation.
ALL_ZONES: tuple[str, ...] = tuple(sorted({zone for zones in ZONES.values() for zone in zones}))

# The folder on every worker that holds the script, the wheel and the .venv.
REMOTE_DIR = "jax-tpu-lab"


@dataclasses.dataclass(frozen=True)
class AcceleratorType:
    """One gcloud accelerator type, e.g. ``v5litepod-8`` (8 v5e chips on one host)."""

    name: str
    generation: str
    chips: int
    chips_per_host: int

    @property
    def hosts(self) -> int:
        """Host VMs (gcloud "workers") in the slice; a slice smaller than a host has one."""
        return -(-self.chips // self.chips_per_host)

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1


@dataclasses.dataclass(frozen=True)
class Provisioning:
    """How a generation's VMs are created, per the Cloud docs (``source``)."""

    generation: str
    tpu_vm_api: bool  # created with `gcloud compute tpus tpu-vm create` (the launcher's path)
    how: str
    source: str


_CLOUD_TPU_API = (
    "the Cloud TPU API: `gcloud compute tpus tpu-vm create` (or `gcloud compute tpus "
    "queued-resources create`, which waits for capacity)"
)
PROVISIONING: dict[str, Provisioning] = {
    **{
        g: Provisioning(g, True, _CLOUD_TPU_API, "cloud.google.com/tpu/docs/create-tpu-vm")
        for g in ("v5e", "v5p", "v6e")
    },
    "tpu7x": Provisioning(
        "tpu7x",
        False,
        "Google Kubernetes Engine (a TPU7x node pool; a multi-host slice takes a workload "
        "policy, `--placement-policy`, instead of `--tpu-topology`) or Compute Engine (its "
        "TPU machine types); not the Cloud TPU API, so not `gcloud compute tpus tpu-vm create`",
        "cloud.google.com/tpu/docs/tpu7x, cloud.google.com/kubernetes-engine/docs/concepts/"
        "tpu-ironwood, cloud.google.com/compute/docs/tpus/tpu-machines (read 2026-12)",
    ),
}


def provisioning_problem(generation: str) -> str | None:
    """Why the course's launcher (the Cloud TPU API) cannot create ``generation``, or None."""
    way = PROVISIONING[generation]
    if way.tpu_vm_api:
        return None
    return (
        f"{generation} is not created through the Cloud TPU API (gcloud compute tpus tpu-vm "
        f"create): create it with {way.how} (sources: {way.source})"
    )


def _types() -> dict[str, AcceleratorType]:
    types = {}
    # v5e and v6e names count chips (1 TensorCore each); a host holds up to 8 chips.
    for chips in (1, 4, 8, 16, 32, 64, 128, 256):
        types[f"v5litepod-{chips}"] = AcceleratorType(f"v5litepod-{chips}", "v5e", chips, 8)
    for chips in (1, 4, 8, 16, 32, 64, 128, 256):
        types[f"v6e-{chips}"] = AcceleratorType(f"v6e-{chips}", "v6e", chips, 8)
    # v5p names count TensorCores (2 per chip): v5p-8 is 4 chips on one host.
    for cores in (8, 16, 32, 64, 128, 256):
        types[f"v5p-{cores}"] = AcceleratorType(f"v5p-{cores}", "v5p", cores // 2, 4)
    # TPU7x has no Cloud TPU API accelerator type: its slices are named here by the topology
    # libtpu and GKE use (4 chips per VM, 3-D shapes as v5p's; the shapes beyond 2x2x1 are
    # not verified from a TPU7x document).
    for chips, shape in ((4, "2x2x1"), (8, "2x2x2"), (16, "2x2x4"), (32, "2x4x4"), (64, "4x4x4")):
        types[f"tpu7x:{shape}"] = AcceleratorType(f"tpu7x:{shape}", "tpu7x", chips, 4)
    return types


ACCELERATOR_TYPES: dict[str, AcceleratorType] = _types()
# The ones the Cloud TPU API creates (what `gcloud compute tpus tpu-vm create` accepts).
CREATABLE_TYPES: tuple[str, ...] = tuple(
    name for name, t in ACCELERATOR_TYPES.items() if PROVISIONING[t.generation].tpu_vm_api
)

NAME_RULE = (
    "1-63 characters: lowercase letters, digits or '-', starting with a letter and not "
    "ending with '-'"
)
_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?\Z")
# Project ids: 6-30 of [a-z0-9-], starting with a letter; optionally "domain.com:" first.
_PROJECT_RE = re.compile(r"^([a-z][-a-z0-9.]*[a-z0-9]:)?[a-z][-a-z0-9]{4,28}[a-z0-9]\Z")
_RUNTIME_RE = re.compile(r"^[a-z0-9][-a-z0-9.]*\Z")


@dataclasses.dataclass(frozen=True)
class TpuVm:
    """A Cloud TPU VM to create, validated against the tables above (ValueError says why)."""

    name: str = "jax-tpu-lab"
    accelerator_type: str = "v5litepod-8"
    zone: str = "us-west4-a"
    runtime_version: str = ""  # empty: the generation's default from RUNTIME_VERSIONS
    spot: bool = False
    project: str = ""  # empty: gcloud's configured project
    # cost-attribution labels, (key, value) pairs: `--labels=team=x,job=y` on create
    labels: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        if problems := label_problems(self.labels):
            raise ValueError("labels: " + "; ".join(problems))
        if not _NAME_RE.match(self.name):
            raise ValueError(f"TPU name {self.name!r} is not allowed: use {NAME_RULE}")
        if self.accelerator_type not in ACCELERATOR_TYPES:
            raise ValueError(
                f"unknown accelerator type {self.accelerator_type!r}; choose one of "
                f"{', '.join(CREATABLE_TYPES)}"
            )
        if problem := provisioning_problem(self.generation):
            raise ValueError(f"{self.accelerator_type}: {problem}")
        zones = ZONES[self.generation]
        if self.zone not in zones:
            raise ValueError(
                f"{self.generation} ({self.accelerator_type}) is not offered in zone "
                f"{self.zone!r}; zones with {self.generation}: {', '.join(zones)}"
            )
        if not self.runtime_version:
            object.__setattr__(self, "runtime_version", RUNTIME_VERSIONS[self.generation])
        expected = RUNTIME_VERSIONS[self.generation]
        if self.runtime_version in RUNTIME_VERSIONS.values() and self.runtime_version != expected:
            other = next(g for g, r in RUNTIME_VERSIONS.items() if r == self.runtime_version)
            raise ValueError(
                f"runtime {self.runtime_version!r} is the {other} image; a {self.generation} "
                f"slice ({self.accelerator_type}) needs {expected!r}"
            )
        if not _RUNTIME_RE.match(self.runtime_version):
            raise ValueError(
                f"runtime version {self.runtime_version!r} must be lowercase letters, digits, "
                "'-' or '.', e.g. " + expected
            )
        if self.project and not _PROJECT_RE.match(self.project):
            raise ValueError(
                f"project id {self.project!r} must be 6-30 lowercase letters, digits or '-', "
                "start with a letter and not end with '-' (leave it empty for gcloud's default)"
            )

    @property
    def accelerator(self) -> AcceleratorType:
        return ACCELERATOR_TYPES[self.accelerator_type]

    @property
    def generation(self) -> str:
        return ACCELERATOR_TYPES[self.accelerator_type].generation

    def _common(self) -> list[str]:
        flags = [f"--zone={self.zone}"]
        if self.project:
            flags.append(f"--project={self.project}")
        return flags


# GCP label rules (cloud.google.com/resource-manager/docs/labels-overview, read 2026-12-03;
# the SDK's labels_util.IsValidLabelKey/Value): at most 64 labels; a key 1-63 characters
# starting with a lowercase letter, a value 0-63; both of lowercase letters, digits, '_', '-'.
# (GCP also allows international lowercase letters; the course keeps to ASCII.)
MAX_LABELS = 64
_LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}\Z")  # \Z: `$` lets "ml\n" pass
_LABEL_VALUE_RE = re.compile(r"^[a-z0-9_-]{0,63}\Z")
LABEL_RULE = (
    "keys 1-63 characters starting with a lowercase letter, values 0-63 characters, both "
    "only lowercase letters, digits, '_' or '-'; at most 64 labels"
)


def label_problems(labels: Sequence[tuple[str, str]]) -> list[str]:
    """What breaks GCP's label rules in ``labels`` ([] when nothing does)."""
    problems = []
    if len(labels) > MAX_LABELS:
        problems.append(f"{len(labels)} labels, at most {MAX_LABELS} allowed")
    keys = [key for key, _ in labels]
    for key in sorted({k for k in keys if keys.count(k) > 1}):
        problems.append(f"key {key!r} given twice")
    for key, value in labels:
        if not isinstance(key, str) or not _LABEL_KEY_RE.match(key):
            problems.append(f"key {key!r} is not allowed ({LABEL_RULE})")
        if not isinstance(value, str) or not _LABEL_VALUE_RE.match(value):
            problems.append(f"value {value!r} of {key!r} is not allowed ({LABEL_RULE})")
    return problems


def parse_labels(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``["team=ml", "job=sweep"]`` (or one ``"team=ml,job=sweep"``) as validated pairs."""
    pairs = []
    for item in items:
        for part in item.split(","):
            key, sep, value = part.partition("=")
            if not sep:
                raise ValueError(f"label {part!r} is not KEY=VALUE")
            pairs.append((key, value))
    if problems := label_problems(pairs):
        raise ValueError("labels: " + "; ".join(problems))
    return tuple(pairs)


def labels_flag(labels: Sequence[tuple[str, str]]) -> str:
    """``--labels=k1=v1,k2=v2`` (gcloud's dict flag syntax)."""
    return "--labels=" + ",".join(f"{key}={value}" for key, value in labels)


# Every command of a TPU VM starts with these words (command_check reads them back).
TPU_VM = ["gcloud", "compute", "tpus", "tpu-vm"]
_FLAG_RE = re.compile(r"^--[a-z][-a-z0-9]*=")


def shell_join(argv: Sequence[str]) -> str:
    """``shlex.join``, but ``--flag=value`` quotes only the value (``--command='a b'``).

    Both spell the same words for a POSIX shell; this one reads the way gcloud's docs do.
    """
    words = []
    for word in argv:
        if match := _FLAG_RE.match(word):
            words.append(match[0] + shlex.quote(word[match.end() :]))
        else:
            words.append(shlex.quote(word))
    return " ".join(words)


def _raw_words(line: str) -> list[str]:
    """``line`` split at unquoted blanks, each word kept as written (quotes included)."""
    words, word, quote, escaped = [], "", None, False
    for char in line:
        if escaped:
            word, escaped = word + char, False
        elif char == "\\" and quote != "'":
            word, escaped = word + char, True
        elif quote:
            word += char
            quote = None if char == quote else quote
        elif char in "'\"":
            word, quote = word + char, char
        elif char in " \t":
            if word:
                words.append(word)
            word = ""
        else:
            word += char
    if quote or escaped:
        raise ValueError(f"unbalanced quote in {line[:80]!r}")
    return [*words, word] if word else words


CONTINUATION = " \\\n    "  # backslash-newline: the shell reads the lines as one command


def display_command(line: str, width: int = 76) -> str:
    """``line`` as a page shows it: if longer than ``width``, each option (and any word that
    would overflow) on its own line, joined by shell line continuations, so a reader sees the
    whole command and a copy still runs as one. Words stay exactly as written; a word longer
    than ``width`` (a long --command='...') stays whole, for the page to wrap."""
    if len(line) <= width:
        return line
    lines: list[list[str]] = [[]]
    for word in _raw_words(line):
        current = lines[-1]
        overflow = len("    " + " ".join([*current, word]) + " \\") > width
        if current and (word.startswith("-") or overflow):
            lines.append([word])
        else:
            current.append(word)
    return CONTINUATION.join(" ".join(words) for words in lines)


def command_words(text: str) -> list[str]:
    """The words a POSIX shell reads from ``text`` (shlex), line continuations removed.

    shlex keeps an escaped newline as a word of its own ("\\n"); a shell drops it.
    """
    return [word for word in shlex.split(text) if word != "\n"]


def create_command(vm: TpuVm) -> list[str]:
    """argv that creates the slice; ``--spot`` makes it cheaper and preemptible."""
    argv = [*TPU_VM, "create", vm.name, *vm._common()]
    argv += [f"--accelerator-type={vm.accelerator_type}", f"--version={vm.runtime_version}"]
    if vm.spot:
        argv.append("--spot")
    if vm.labels:
        argv.append(labels_flag(vm.labels))
    return argv


def scp_command(
    vm: TpuVm, local_paths: Sequence[str], remote_dir: str = REMOTE_DIR + "/"
) -> list[str]:
    """argv that copies files to every worker (a multi-host slice has one VM per host).

    ``remote_dir`` is relative to the remote home and must exist (see ``workflow``).
    """
    if not local_paths:
        raise ValueError("scp needs at least one local path to copy")
    argv = [*TPU_VM, "scp", *local_paths]
    argv += [f"{vm.name}:{remote_dir}", *vm._common(), "--worker=all"]
    return argv


def _worker_indices(worker: str) -> list[int] | None:
    """Indices named by a --worker value "N", "a,b,c" or "a-b"; None if it is none of those."""
    if re.fullmatch(r"\d+(,\d+)*", worker):
        return [int(w) for w in worker.split(",")]
    if match := re.fullmatch(r"(\d+)-(\d+)", worker):
        first, last = int(match[1]), int(match[2])
        return list(range(first, last + 1)) if first <= last else None
    return None


def ssh_command(vm: TpuVm, remote_command: str, worker: str | int = "all") -> list[str]:
    """argv that runs ``remote_command`` on workers: "all" (multi-host), "0", "0,2" or "1-3"."""
    worker = str(worker)
    hosts = vm.accelerator.hosts
    indices = [] if worker == "all" else _worker_indices(worker)
    if indices is None or any(i >= hosts for i in indices):
        raise ValueError(
            f"worker {worker!r} does not exist: {vm.accelerator_type} has {hosts} "
            f"worker{'s' if hosts > 1 else ''} (0..{hosts - 1}); use 'all', an index, "
            "a list like '0,1' or a range like '0-1'"
        )
    if not remote_command.strip():
        raise ValueError("ssh needs a command to run on the workers")
    argv = [*TPU_VM, "ssh", vm.name, *vm._common()]
    argv += [f"--worker={worker}", f"--command={remote_command}"]
    return argv


def delete_command(vm: TpuVm) -> list[str]:
    """argv that deletes the slice (--quiet: no prompt). Billing stops only after this."""
    return [*TPU_VM, "delete", vm.name, *vm._common(), "--quiet"]


def describe_command(vm: TpuVm) -> list[str]:
    """After delete, this must fail with NOT_FOUND: the teardown check."""
    return [*TPU_VM, "describe", vm.name, *vm._common()]


WHEEL = "dist/jax_tpu_lab-0.1.0-py3-none-any.whl"


def build_wheel_command() -> list[str]:
    """Local step: the project as one wheel, so a TPU VM installs exactly this checkout."""
    return ["python", "-m", "pip", "wheel", "--no-deps", "-w", "dist", "."]


def export_command(app: str, output: str, python: str = "python") -> list[str]:
    """Local step: ``python -m tpu_scripts export APP -o OUTPUT`` (an app as a headless script)."""
    return [python, "-m", "tpu_scripts", "export", str(app), "-o", str(output)]


def _quoted_flags(extra_flags: str) -> str:
    try:
        return shlex.join(shlex.split(extra_flags))
    except ValueError as exc:  # e.g. "No closing quotation"
        raise ValueError(
            f"script flags {extra_flags!r} do not parse as shell words: {exc}"
        ) from None


def bootstrap_remote_command(script: str, wheel: str = WHEEL, extra_flags: str = "") -> str:
    """The shell line each worker runs: ~/jax-tpu-lab/.venv, the wheel with libtpu, the script.

    ``script`` and ``wheel`` are local paths; on the worker they sit in ~/jax-tpu-lab/. The
    TPU VM images ship Python 3.10 while jax 0.10 needs >= 3.11, so the .venv is made by uv
    (installed from PyPI on first use, not by piping a web script into a shell), which
    fetches Python 3.11. Running it again reuses the .venv.
    """
    script_name = script.rsplit("/", 1)[-1]
    flags = _quoted_flags(extra_flags)
    run = f".venv/bin/python {shlex.quote(script_name)}" + (f" {flags}" if flags else "")
    return f"{install_remote_command(wheel)} && {run}"


def install_remote_command(wheel: str = WHEEL, reinstall: bool = False) -> str:
    """The shell line that makes ~/jax-tpu-lab/.venv and installs the staged wheel with libtpu.

    ``reinstall``: install the project again even when the version is unchanged (a rebuilt
    wheel of the same version would otherwise be skipped by the installer).
    """
    wheel_name = wheel.rsplit("/", 1)[-1]
    if not re.fullmatch(r"[A-Za-z0-9._+-]+\.whl", wheel_name):
        raise ValueError(f"{wheel!r} is not a wheel file name (NAME-VERSION-...-any.whl)")
    again = "--reinstall-package jax-tpu-lab " if reinstall else ""
    return (
        f'cd ~/{REMOTE_DIR} && export PATH="$HOME/.local/bin:$PATH" && '
        "(command -v uv >/dev/null || python3 -m pip install --user -q uv) && "
        "([ -x .venv/bin/python ] || uv venv --python 3.11 .venv) && "
        f'uv pip install --python .venv/bin/python -q {again}"./{wheel_name}[tpu]"'
    )


def workflow(
    vm: TpuVm, script: str, wheel: str = WHEEL, extra_flags: str = "", app: str = ""
) -> list[tuple[str, str]]:
    """(step, shell command) for the whole round trip: create, copy, run, delete, verify.

    With ``app``, the first step exports that lesson app to ``script``.
    """
    steps = []
    if app:
        steps.append(
            (
                "export the lesson as a headless script (local)",
                shell_join(export_command(app, script)),
            )
        )
    steps += [
        ("build the project wheel (local)", shell_join(build_wheel_command())),
        ("create the TPU VM", shell_join(create_command(vm))),
        (
            "make the folder on every worker",
            shell_join(ssh_command(vm, f"mkdir -p ~/{REMOTE_DIR}")),
        ),
        ("copy script and wheel to every worker", shell_join(scp_command(vm, [script, wheel]))),
        (
            "run the same script on all workers",
            shell_join(ssh_command(vm, bootstrap_remote_command(script, wheel, extra_flags))),
        ),
        ("delete the TPU VM (billing stops here)", shell_join(delete_command(vm))),
        ("verify it is gone (must fail with NOT_FOUND)", shell_join(describe_command(vm))),
    ]
    return steps
