"""Reading Cloud TPU commands back: an independent parse of the shell text, for checks.

core/tpu/cloud_tpu.py builds the gcloud lines; this module splits them again the way a shell
would (shlex) and compares them with the values a person chose, so a page can say where the
commands it shows disagree with its controls.
"""

from __future__ import annotations

import dataclasses
import pathlib
import shlex
from collections.abc import Sequence

from core.tpu import cloud_tpu


@dataclasses.dataclass(frozen=True)
class GcloudTpuCommand:
    """A ``gcloud compute tpus tpu-vm VERB ...`` line, split the way a shell would."""

    verb: str
    positionals: tuple[str, ...]
    flags: dict[str, str | bool]  # "--zone=x" -> {"zone": "x"}; "--spot" -> {"spot": True}


def parse_tpu_command(line: str) -> GcloudTpuCommand:
    """Split ``line`` with shlex (the shell's own quoting rules) into verb, positionals, flags.

    ``line`` may span lines joined by continuations (display_command).
    """
    words = cloud_tpu.command_words(line)
    if words[:4] != cloud_tpu.TPU_VM or len(words) < 5:
        raise ValueError(f"not a `gcloud compute tpus tpu-vm` command: {line[:80]!r}")
    positionals, flags = [], {}
    for word in words[5:]:
        if word.startswith("--"):
            key, has_value, value = word[2:].partition("=")
            flags[key] = value if has_value else True
        else:
            positionals.append(word)
    return GcloudTpuCommand(words[4], tuple(positionals), flags)


def workflow_problems(
    lines: Sequence[str],
    *,
    name: str,
    zone: str,
    accelerator_type: str,
    version: str,
    spot: bool,
    project: str = "",
    script: str = "",
) -> list[str]:
    """Where the gcloud lines disagree with the values a person chose ([] when none).

    Checks: verbs in the order create, ssh, scp, ssh, delete, describe; every line names the
    TPU, zone and project; create carries the type, version and --spot exactly when chosen;
    scp and ssh reach --worker=all; the run step runs ``script``; delete is --quiet.
    """
    parsed = [parse_tpu_command(line) for line in lines if line.startswith("gcloud ")]
    problems = []
    verbs = [command.verb for command in parsed]
    if verbs != ["create", "ssh", "scp", "ssh", "delete", "describe"]:
        problems.append(f"steps are {verbs}, expected create, ssh, scp, ssh, delete, describe")
    for command in parsed:
        where = f"{command.verb}:"
        target = (
            command.positionals[-1].split(":", 1)[0]
            if command.verb == "scp"
            else command.positionals[0]
        )
        if target != name:
            problems.append(f"{where} TPU name {target!r} != {name!r}")
        if command.flags.get("zone") != zone:
            problems.append(f"{where} zone {command.flags.get('zone')!r} != {zone!r}")
        if command.flags.get("project", "") != project:
            problems.append(f"{where} project {command.flags.get('project')!r} != {project!r}")
        if command.verb == "create":
            if command.flags.get("accelerator-type") != accelerator_type:
                problems.append(
                    f"{where} accelerator type {command.flags.get('accelerator-type')!r} "
                    f"!= {accelerator_type!r}"
                )
            if command.flags.get("version") != version:
                problems.append(f"{where} version {command.flags.get('version')!r} != {version!r}")
            if bool(command.flags.get("spot")) != spot:
                problems.append(f"{where} --spot {'missing' if spot else 'present but not chosen'}")
        if command.verb in ("scp", "ssh") and command.flags.get("worker") != "all":
            problems.append(
                f"{where} --worker={command.flags.get('worker')} does not reach every host"
            )
        if command.verb == "delete" and command.flags.get("quiet") is not True:
            problems.append(f"{where} --quiet missing (delete would wait for a prompt)")
    runs = [c for c in parsed if c.verb == "ssh" and "python" in str(c.flags.get("command"))]
    if script and not any(
        pathlib.PurePath(script).name in shlex.split(str(c.flags["command"])) for c in runs
    ):
        problems.append(f"no ssh step runs {pathlib.PurePath(script).name}")
    return problems
