"""The parts of the byte Transformer's run on a chip (tpu_scripts/byte_transformer_run_tpu.py
runs each in a process of its own) and the bookkeeping that joins them.

Each ``*_part`` reports through ``save(values)`` as it goes (a part killed by its timeout keeps
what it saved) and ``say(line)`` for progress. ``summary`` joins the parts' reports into the
figures the run is judged by: the resume check, the CPU-vs-TPU agreements
(loss_agreement.py), the decode comparison (decode_compare.py). It imports no JAX at module
level and runs none: the driver that calls it never starts a backend.
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import statistics
from collections.abc import Callable

CURVE_POINTS = 200  # the loss curve kept in the result and the record (every step: metrics.jsonl)


def versions() -> dict:
    """Installed versions of the packages a run depends on (run_manifest.package_versions)."""
    from capstones.byte_transformer import run_manifest

    return {"python": run_manifest.platform.python_version(), **run_manifest.package_versions()}


def downsample(points: list, count: int = CURVE_POINTS) -> list:
    """At most ``count`` of ``points``, evenly spaced, the first and last always kept."""
    if len(points) <= count:
        return list(points)
    last = len(points) - 1
    picks = sorted({round(i * last / (count - 1)) for i in range(count)})
    return [points[i] for i in picks]


def _short_run(config, run_dir: pathlib.Path, steps: int, say: Callable) -> list[dict]:
    """training.train for ``steps`` steps of ``config`` into a fresh ``run_dir``: its metrics."""
    from capstones.byte_transformer import training

    short = dataclasses.replace(config, steps=steps, eval_every=steps, ckpt_every=steps)
    training.train(short, run_dir, log_mlflow=False, progress=lambda line: say(f"  {line}"))
    return training.read_metrics(run_dir)


# --- the parts -------------------------------------------------------------------------------


def train_part(config, run_dir: pathlib.Path, spec: dict, save: Callable, say: Callable) -> None:
    """training.train for config.steps: the first compare_steps losses, the step after the
    resume step, a downsampled loss curve, held-out bits per byte at each eval, step times."""
    from capstones.byte_transformer import training

    say(f"training {config.steps} steps into {run_dir}")
    training.train(config, run_dir, log_mlflow=False, progress=lambda line: say(f"  {line}"))
    records = training.read_metrics(run_dir)
    after = next((r for r in records if r["step"] == spec["resume_step"] + 1), None)
    times = [r["step_time_s"] for r in records[1:]] or [records[0]["step_time_s"]]
    save(
        {
            "steps": records[-1]["step"],
            "final_loss": records[-1]["loss"],
            "losses": [r["loss"] for r in records[: spec["compare_steps"]]],
            "after_resume_step": after and {k: after[k] for k in ("step", "loss", "grad_norm")},
            "curve": downsample([[r["step"], r["loss"]] for r in records]),
            "heldout": [
                {"step": r["step"], "loss": r["heldout_loss"], "bits_per_byte": r["heldout_bpb"]}
                for r in records
                if "heldout_bpb" in r
            ],
            "first_step_s": records[0]["step_time_s"],
            "median_step_s": statistics.median(times),
            "metrics_file": str(run_dir / training.METRICS_FILE),
        }
    )


def resume_part(config, run_dir, resume_dir, spec: dict, save: Callable, say: Callable) -> None:
    """A copy of the run holding only checkpoint C (and its config and corpus), trained to
    C+1 in this fresh process: the step it resumed from and step C+1's loss and grad norm."""
    from capstones.byte_transformer import rundir, training

    step = spec["resume_step"]
    source = pathlib.Path(run_dir) / training.CHECKPOINTS / str(step)
    if not source.is_dir():
        raise FileNotFoundError(f"no checkpoint {step} in {run_dir} (was it kept?)")
    resume_dir = pathlib.Path(resume_dir)
    resume_dir.mkdir(parents=True)
    for name in (rundir.CONFIG_FILE, rundir.CORPUS_FILE):
        shutil.copy2(pathlib.Path(run_dir) / name, resume_dir / name)
    shutil.copytree(source, resume_dir / training.CHECKPOINTS / str(step))
    say(f"resuming a copy holding only checkpoint {step}; training step {step + 1}")
    result = training.train(
        dataclasses.replace(config, steps=step + 1),
        resume_dir,
        log_mlflow=False,
        progress=lambda line: say(f"  {line}"),
    )
    record = result.records[0]
    save({"start_step": result.start_step, **{k: record[k] for k in ("step", "loss", "grad_norm")}})


def first_steps_part(config, run_dir, spec: dict, save: Callable, say: Callable) -> None:
    """The first compare_steps losses of a fresh run (at the matmul precision in force)."""
    import jax

    precision = jax.config.jax_default_matmul_precision or "default"
    say(f"{spec['compare_steps']} steps at matmul precision {precision}")
    records = _short_run(config, pathlib.Path(run_dir), spec["compare_steps"], say)
    save({"precision": precision, "losses": [r["loss"] for r in records]})


def cpu_part(config, work: pathlib.Path, spec: dict, save: Callable, say: Callable) -> None:
    """On the CPU: the first compare_steps losses (training.train), then the same steps with
    the MXU emulated at DEFAULT and at HIGHEST (loss_agreement.first_losses), each saved as
    soon as it is known."""
    from capstones.byte_transformer import loss_agreement

    steps = spec["compare_steps"]
    say(f"{steps} steps on the CPU (float32)")
    save({"losses": [r["loss"] for r in _short_run(config, pathlib.Path(work), steps, say)]})
    for precision in loss_agreement.PRECISIONS:
        say(f"{steps} steps with the MXU emulated at {precision}")
        losses = loss_agreement.first_losses(config, steps, mxu=precision)
        save({f"emulated_{precision.lower()}_losses": losses})


def decode_part(config, run_dir, spec: dict, save: Callable, say: Callable) -> None:
    """The trained model's greedy decode at each context, cached against recompute
    (decode_compare.compare_at); a greedy difference is rerun at HIGHEST, untimed."""
    import jax

    from capstones.byte_transformer import decode_compare, training

    _, restored = training.load_state(run_dir)
    params = restored.state["params"]
    results = []
    for context in spec["contexts"]:
        say(f"context {context}: {spec['new_tokens']} new bytes, cached and recomputed")
        found = decode_compare.compare_at(
            config, params, context, spec["new_tokens"], spec["repeats"]
        )
        if not found["greedy"]["identical"]:
            with jax.default_matmul_precision("highest"):
                found["greedy_at_highest"] = decode_compare.greedy_identity(
                    config, params, context, spec["new_tokens"]
                )
        say(
            f"context {context}: cached {found['cached']['tokens_per_s']:,.0f} tokens/s, "
            f"recompute {found['recompute']['tokens_per_s']:,.0f} tokens/s "
            f"({found['speedup']:.1f}x); greedy identical: {found['greedy']['identical']}"
        )
        results.append(found)
        save({"trained_step": restored.step, "contexts": results})


# --- joining the parts ------------------------------------------------------------------------


def _guarded(build: Callable) -> dict:
    try:
        return build()
    except Exception as exc:  # noqa: BLE001 - one comparison's failure is its own line
        return {"error": f"{type(exc).__name__}: {str(exc).strip()[:300]}"}


def resume_check(parts: dict, spec: dict) -> dict:
    """Step C+1 of the resumed process against the uninterrupted run's: identical means the
    same float32 loss and gradient norm, bit for bit (same program, same device, same
    state)."""
    resumed, train = parts.get("resume", {}), parts.get("train", {})
    if "loss" not in resumed or not train.get("after_resume_step"):
        raise ValueError(resumed.get("error") or train.get("error") or "no step C+1 to compare")
    whole = train["after_resume_step"]
    return {
        "resume_step": spec["resume_step"],
        "resumed_from": resumed["start_step"],
        "step": resumed["step"],
        "resumed_loss": resumed["loss"],
        "uninterrupted_loss": whole["loss"],
        "resumed_grad_norm": resumed["grad_norm"],
        "uninterrupted_grad_norm": whole["grad_norm"],
        "abs_loss_difference": abs(resumed["loss"] - whole["loss"]),
        "identical": resumed["step"] == whole["step"]
        and resumed["loss"] == whole["loss"]
        and resumed["grad_norm"] == whole["grad_norm"],
    }


def cpu_agreements(parts: dict, records_root=None) -> dict:
    """The chip's first losses at DEFAULT (the training run) and HIGHEST against the CPU's,
    each under its tolerance (loss_agreement.tolerance from the emulated run)."""
    from capstones.byte_transformer import loss_agreement

    cpu = parts.get("cpu", {})
    if "losses" not in cpu:
        raise ValueError(cpu.get("error") or "the CPU part gave no losses")
    elementwise, citation = loss_agreement.elementwise_error(records_root)
    chip = {"DEFAULT": parts.get("train", {}), "HIGHEST": parts.get("highest", {})}
    found = {}
    for precision, part in chip.items():

        def one(precision=precision, part=part):
            emulated = cpu.get(f"emulated_{precision.lower()}_losses")
            if not emulated:
                raise ValueError(f"no emulated {precision} run ({cpu.get('error', 'missing')})")
            if not part.get("losses"):
                raise ValueError(part.get("error") or f"no chip losses at {precision}")
            predicted = loss_agreement.relative_differences(cpu["losses"], emulated)
            bound = loss_agreement.tolerance(precision, predicted, elementwise, citation)
            verdict = loss_agreement.agreement(cpu["losses"], part["losses"], bound)
            return {**verdict, "cpu_losses": cpu["losses"], "chip_losses": part["losses"]}

        found[precision.lower()] = _guarded(one)
    return found


def summary(parts: dict, spec: dict, records_root=None) -> dict:
    """Every figure the run is judged by, from the parts' reports (a missing or failed part
    gives its comparison an "error")."""
    train = parts.get("train", {})
    decode = parts.get("decode", {})
    return {
        "training": {
            key: train.get(key)
            for key in ("steps", "final_loss", "heldout", "median_step_s", "first_step_s")
        }
        | ({"error": train["error"]} if "error" in train else {}),
        "resume": _guarded(lambda: resume_check(parts, spec)),
        "cpu_vs_tpu": _guarded(lambda: cpu_agreements(parts, records_root)),
        "decode": {"contexts": decode.get("contexts", [])}
        | ({"error": decode["error"]} if "error" in decode else {}),
    }


def summary_lines(found: dict) -> list[str]:
    """The summary as a few lines for the console."""
    lines = []
    training = found["training"]
    if training.get("steps"):
        held = (training.get("heldout") or [{}])[-1]
        lines.append(
            f"training: {training['steps']} steps, final loss {training['final_loss']:.4f}, "
            f"held-out {held.get('bits_per_byte', float('nan')):.4f} bits/byte, median step "
            f"{training['median_step_s'] * 1e3:.2f} ms"
        )
    else:
        lines.append(f"training: {training.get('error', 'no result')}")
    resume = found["resume"]
    lines.append(
        f"resume: {resume['error']}"
        if "error" in resume
        else f"resume: step {resume['step']} loss {resume['resumed_loss']!r} vs uninterrupted "
        f"{resume['uninterrupted_loss']!r}: identical {resume['identical']}"
    )
    agreements = found["cpu_vs_tpu"]
    for name in ("default", "highest"):
        line = agreements.get(name, agreements)
        lines.append(
            f"CPU vs TPU {name}: {line['error']}"
            if "error" in line
            else f"CPU vs TPU {name}: max relative difference {line['max_relative_difference']:.3g}"
            f" (step {line['at_step']}), tolerance {line['tolerance']:.3g}: agrees {line['agrees']}"
        )
    for item in found["decode"].get("contexts", []):
        lines.append(
            f"decode {item['prompt_len']}: cached {item['cached']['tokens_per_s']:,.0f} vs "
            f"recompute {item['recompute']['tokens_per_s']:,.0f} tokens/s; greedy identical "
            f"{item['greedy']['identical']}"
        )
    if "error" in found["decode"]:
        lines.append(f"decode: {found['decode']['error']}")
    return lines


def write_record(spec: dict, result: dict, root) -> str:
    """The run's figures (chip_run_record.figures) as benchmark record spec["record"] under
    ``root``, with the load the driver measured over the whole run: its path."""
    from capstones.byte_transformer import chip_run_record
    from core.perf import records

    path = records.write_record(
        spec["record"],
        " ".join(spec["command"]),
        chip_run_record.figures(result),
        notes=chip_run_record.NOTES,
        root=root,
        load=spec.get("load"),
    )
    return str(path)


def record_from_result(run_dir: pathlib.Path, host_record: pathlib.Path, root) -> str:
    """The record of a finished chip run whose own record part did not finish on the host
    (``--record-from``): figures from ``run_dir``'s tpu_result.json, command and load from its
    spec.json, versions and device kind from its train part, and the machine from
    ``host_record``, a record the same TPU host wrote itself (same device kind, same date and
    versions, else ValueError). Nothing of this machine goes in. Returns the path written."""
    import json

    from capstones.byte_transformer import chip_run_record
    from core.perf import records

    spec = json.loads((run_dir / "spec.json").read_text())
    result = json.loads((run_dir / "tpu_result.json").read_text())
    if result.get("is_tpu_result") is not True:
        raise ValueError(f"{run_dir}: not a TPU result (is_tpu_result is not true)")
    train = result["parts"].get("train", {})
    host = records.load(host_record)
    chips = host.machine.accelerator
    date = result["created_utc"][:10]
    if chips is None or chips.kind != train.get("device_kind"):
        raise ValueError(
            f"{host_record}: its accelerator is not the run's {train.get('device_kind')!r}"
        )
    if host.date != date:
        raise ValueError(
            f"{host_record} is of {host.date}, the run of {date}: not one session on the host"
        )
    versions = {k: str(v) for k, v in train["versions"].items()}
    differing = [  # a host record written by records.make_record names no libtpu
        k
        for k in ("jax", "jaxlib", "libtpu")
        if k in host.versions and host.versions[k] != versions.get(k)
    ]
    if differing:
        raise ValueError(f"{host_record}: its versions of {differing} differ from the run's")
    notes = (
        f"{chip_run_record.NOTES}. Written after the run by --record-from (its record part ran "
        f"out of the run's budget on the host): the machine from {host_record.name}, a record "
        "the same TPU host wrote in the same session"
    )
    document = records.record_of(
        spec["record"] or chip_run_record.RECORD_NAME,
        " ".join(spec["command"]),
        chip_run_record.figures(result),
        host.machine.model_dump(exclude_none=True),
        versions,
        date,
        spec.get("load"),
        notes,
    )
    return str(records.write_document(document, root))
