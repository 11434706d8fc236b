"""The byte Transformer capstone on a Cloud TPU VM: train-step timing, a short checkpointed
run and the run manifest, written only when JAX really runs on a TPU.

    python tpu_scripts/byte_transformer_tpu.py --out DIR [--steps N] [--repeats R]
        [--preset tpu-v5e] [--compare-default] [--skip-training] [--profile]
        [--record NAME] [--allow-cpu-rehearsal] [key=value ...]
                                     (key=value: capstone Config overrides, after the preset)

MFU (train_step.mfu_comparison): with --preset the run's config is the named preset
(capstones/byte_transformer/config.py PRESETS) plus the overrides; --compare-default also
times the capstone's default config, side by side. Each is the median of --repeats steps
after a warmup (use >= 20), with model FLOPs counted by model_math.causal_train_flops
(causal attention halved: model_math.CAUSAL_FLOP_FORMULA) over the chip's bf16 peak
(core.tpu.specs). A configuration that fails (out of memory) is recorded with its error and
the others go on. --profile traces 3 steps of the run's config (jax.profiler) and keeps the
op breakdown (core.perf.trace: top ops by time) in train_step.profile; a failure there is
recorded, never fatal. --skip-training leaves out the short training run. --record NAME
writes the MFU figures as a benchmark record (core.perf.records, load-checked on this
machine, i.e. the chip's host) under DIR/records/NAME/: copy it into benchmarks/records/.

What it measures, with the bench command's own train-step timing
(capstones.byte_transformer.bench: jax_stepper, interleaved, step_summary, flops_per_step)
on training.make_train_step: lower and compile seconds, the median of --repeats blocked
steps after a warmup, tokens/s, XLA's FLOPs per device and, on a TPU, model FLOPs
utilization against the chips' bf16 peak (core.tpu.specs); the same step data parallel
over every local device when the batch splits; then a short training run (training.train,
--steps steps, checkpoints) into DIR/run.

What it writes into DIR:
    tpu_result.json            only when jax.default_backend() == "tpu" and every device is
                               a TPU ("kind": "tpu result", "is_tpu_result": true)
    cpu_rehearsal_result.json  with --allow-cpu-rehearsal on a host without a TPU
                               ("kind": "cpu rehearsal — not a TPU result",
                               "is_tpu_result": false)
    runtime.json               backend, devices (coords), package versions, recorded here
    run/                       the training run (config, metrics.jsonl, checkpoints/)
    job.log                    everything the job printed, libtpu's own lines included
    run_manifest.json          capstones/byte_transformer/run_manifest.py over DIR

Without a TPU and without --allow-cpu-rehearsal it REFUSES: exit status 3, a message on
stderr, nothing written. A CPU number never stands in for a TPU number. Other exit
statuses: 2 bad arguments (or DIR already holds a result), 4 preempted (SIGTERM: the
checkpoint is saved and no result written; the same command resumes).

Exact flow to run it on a TPU VM and bring the results back (single-host slices: v5e 2x2 =
v5litepod-4; v6e-4 works the same with --zone us-east5-b):

    # 0. the project wheel (carries capstones/, core/, tpu_scripts/)
    python -m pip wheel --no-deps -w dist .
    # 1. create the VM
    python -m tpu_scripts launch create --name bt-lab --accelerator-type v5litepod-4 \\
        --zone us-west4-a
    # 2. copy this script and the wheel to every worker
    python -m tpu_scripts launch stage --name bt-lab --accelerator-type v5litepod-4 \\
        --zone us-west4-a tpu_scripts/byte_transformer_tpu.py \\
        dist/jax_tpu_lab-0.1.0-py3-none-any.whl
    # 3. run it (the bootstrap makes ~/jax-tpu-lab/.venv with the wheel's [tpu] extra)
    python -m tpu_scripts launch run --name bt-lab --accelerator-type v5litepod-4 \\
        --zone us-west4-a tpu_scripts/byte_transformer_tpu.py -- --out bt_tpu --steps 50
    # 4. fetch DIR back (it lands in results/bt_tpu)
    mkdir -p results
    python -m tpu_scripts launch fetch --name bt-lab --accelerator-type v5litepod-4 \\
        --zone us-west4-a bt_tpu results/
    # 5. the VM's identity, while it still exists
    gcloud compute tpus tpu-vm describe bt-lab --zone=us-west4-a --format=json \\
        > results/describe.json
    # 6. delete it (launch checks that describe fails), then keep the proof: NOT_FOUND
    python -m tpu_scripts launch delete --name bt-lab --accelerator-type v5litepod-4 \\
        --zone us-west4-a
    gcloud compute tpus tpu-vm describe bt-lab --zone=us-west4-a \\
        > results/teardown.log 2>&1
    # 7. the manifest: identity, devices, events, sha256 of every file, teardown proof
    python -m capstones.byte_transformer run-manifest run_dir=results/bt_tpu \\
        log=results/bt_tpu/job.log describe_json=results/describe.json \\
        teardown_log=results/teardown.log claim_tpu=true

Rehearse everything but the TPU on this machine:

    python tpu_scripts/byte_transformer_tpu.py --out /tmp/bt_rehearsal --steps 4 \\
        --allow-cpu-rehearsal d_model=32 num_layers=2 seq_len=32 batch_size=2 max_files=4

The script runs itself as a child process and records the child's stdout and stderr into
DIR/job.log (libtpu writes its initialization lines from C++ to the process's stderr, which
Python cannot capture from inside); SIGTERM is passed on to the child, whose training loop
saves a checkpoint and stops (run the same command again to resume).
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import signal
import subprocess
import sys
import threading

CHILD_ENV = "BYTE_TRANSFORMER_TPU_CHILD"
EXIT_REFUSED = 3
EXIT_PREEMPTED = 4
LOG_FILE = "job.log"
# run_manifest.RESULT_FILES (spelled out: the parent decides before importing JAX)
RESULT_FILES = ("tpu_result.json", "cpu_rehearsal_result.json")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python tpu_scripts/byte_transformer_tpu.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", required=True, help="result directory (new or empty)")
    parser.add_argument("--steps", type=int, default=20, help="training steps of the short run")
    parser.add_argument("--repeats", type=int, default=10, help="timed train steps (median)")
    parser.add_argument("--preset", default="", help="a named config (config.PRESETS)")
    parser.add_argument(
        "--compare-default", action="store_true", help="also time the default config (MFU)"
    )
    parser.add_argument("--skip-training", action="store_true", help="no short training run")
    parser.add_argument("--profile", action="store_true", help="XProf op breakdown (guarded)")
    parser.add_argument("--record", default="", help="write the MFU figures as record NAME")
    parser.add_argument(
        "--allow-cpu-rehearsal",
        action="store_true",
        help="without a TPU, run on CPU and mark every result 'cpu rehearsal — not a TPU result'",
    )
    parser.add_argument("overrides", nargs="*", help="capstone Config overrides, key=value")
    return parser


# --- the parent: run the child, keep its log, write the manifest ---------------------------


def _pump(stream, sink, log: list[str], lock: threading.Lock) -> None:
    for line in iter(stream.readline, ""):
        sink.write(line)
        sink.flush()
        with lock:
            log.append(line)
    stream.close()


def _results_in(out: pathlib.Path) -> list[str]:
    return [name for name in RESULT_FILES if (out / name).exists()]


def run_parent(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)  # --help and bad flags end here
    out = pathlib.Path(args.out)
    if held := _results_in(out):
        print(f"error: {out} already holds {', '.join(held)}: use a new --out", file=sys.stderr)
        return 2
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    from core import runtime

    # The child takes the chip; this parent never starts JAX (child_env: one process per chip).
    env = runtime.child_env(**{CHILD_ENV: "1", "PYTHONUNBUFFERED": "1"})
    child = subprocess.Popen(
        [sys.executable, str(pathlib.Path(__file__).resolve()), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))
    log: list[str] = []
    lock = threading.Lock()
    pumps = [
        threading.Thread(target=_pump, args=(child.stdout, sys.stdout, log, lock)),
        threading.Thread(target=_pump, args=(child.stderr, sys.stderr, log, lock)),
    ]
    for pump in pumps:
        pump.start()
    code = child.wait()
    for pump in pumps:
        pump.join()
    signal.signal(signal.SIGTERM, previous)
    if not out.is_dir():  # refused (or failed) before writing anything
        return code
    # appended: a preempted job run again into the same folder keeps its earlier segments
    with open(out / LOG_FILE, "a", encoding="utf-8") as handle:
        handle.write(f"=== job segment started {started}: {' '.join(argv)} ===\n")
        handle.write("".join(log))
    log_text = (out / LOG_FILE).read_text(encoding="utf-8")
    if code != 0:
        print(f"the job failed (exit {code}); its log is in {out / LOG_FILE}", file=sys.stderr)
        return code
    from capstones.byte_transformer import run_manifest

    manifest = run_manifest.build_manifest(out, log_text=log_text, log_name=LOG_FILE)
    path = run_manifest.write_manifest(manifest, out / run_manifest.MANIFEST_FILE)
    for line in run_manifest.summary_lines(manifest):
        print(line)
    print(f"manifest: {path}")
    return 0


# --- the child: the measurement --------------------------------------------------------------


def _say(line: str) -> None:
    print(line, flush=True)


def time_train_step(config, repeats: int, devices: list | None = None) -> dict:
    """The bench command's train-step timing (capstones.byte_transformer.bench: jax_stepper,
    interleaved, step_summary) on one device, or data parallel over ``devices`` (batch
    split, state replicated): lower and compile seconds, then the median of ``repeats``
    blocked steps that advance the state, tokens/s and model FLOPs utilization."""
    import jax
    import numpy as np

    from capstones.byte_transformer import bench, data, training

    corpus = data.load_corpus(config)
    batch = data.training_stream(config, corpus).next_batch()
    state = training.init_state(config)
    count = len(devices) if devices else 1
    if devices:
        mesh = jax.sharding.Mesh(np.array(devices), ("data",))
        split = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
        whole = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        batch = jax.device_put(batch, split)
        state = jax.device_put(state, whole)
    step, figures = bench.jax_stepper(config, state, batch)
    usage: list[dict] = []  # host page faults per step: the malloc settings at work
    measured = bench.with_usage(step, usage)
    wall, cpu = bench.interleaved({"jax": measured}, rounds=repeats, warmup=1, progress=_say)
    tokens = config.batch_size * config.seq_len
    valid = float(np.sum(np.asarray(jax.device_get(batch["weights_BT"]))))
    summary = bench.step_summary(wall["jax"], cpu["jax"], tokens, valid, usage[-repeats:])
    return {
        "devices": count,
        "lower_s": figures["lower_s"],
        "compile_s": figures["compile_s"],
        "step": summary,
        "repeats": repeats,
        "tokens_per_step": tokens,
        "valid_tokens_per_step": valid,
        "tokens_per_s": summary["tokens_per_s"],
        # bench's model FLOPs (whole batch) and XLA's count (one device's program)
        "model_flops_per_step": bench.flops_per_step(config)["total"],
        "xla_flops_per_device_per_step": figures["xla_cost_analysis_flops"],
    }


def peak_fraction(measurement: dict, device_kind: str) -> dict | None:
    """Model FLOP/s over the bf16 peak of the chips used (core.tpu.specs); TPU kinds only."""
    from core.tpu import specs

    generation = specs.DEVICE_KIND_GENERATION.get(device_kind)
    if generation is None:
        return None
    peak = specs.chip(generation).bf16_flops.value * measurement["devices"]
    achieved = measurement["model_flops_per_step"] / measurement["step"]["median_s"]
    return {
        "generation": generation,
        "model_flops_per_s": achieved,
        "bf16_peak_flops_per_s": peak,
        "mfu_vs_bf16_peak": achieved / peak,
    }


def _error_text(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0][:400] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"


def mfu_summary(config, measurement: dict, device_kind: str, on_tpu: bool) -> dict:
    """The MFU line of one timed config: step time, tokens/s, causal model FLOPs per step
    (model_math.causal_train_flops, whole batch) and their fraction of the bf16 peak."""
    from capstones.byte_transformer import model_math
    from core.tpu import specs

    flops = model_math.causal_train_flops(config, config.batch_size)
    median = measurement["step"]["median_s"]
    peak = specs.bf16_peak_of_device_kind(device_kind) if on_tpu else None
    return {
        "config": config.to_dict(),
        "median_step_s": median,
        "repeats": measurement["repeats"],
        "compile_s": measurement["compile_s"],
        "tokens_per_s": measurement["tokens_per_s"],
        "model_flops_per_step": flops["total"],
        "weight_flops_per_step": flops["weights"],
        "attention_flops_per_step": flops["attention"],
        "flop_formula": model_math.CAUSAL_FLOP_FORMULA,
        "xla_flops_per_step": measurement["xla_flops_per_device_per_step"],
        "bf16_peak_flops_per_s": peak,
        "mfu": model_math.mfu(flops["total"], median, peak) if peak else None,
    }


def mfu_comparison(configs: dict, repeats: int, device_kind: str, on_tpu: bool):
    """{label: mfu_summary or {"error"}} for each config, and the run config's measurement
    (None if it failed). The last label is the run's own config."""
    table, measured = {}, None
    for label, config in configs.items():
        _say(f"MFU: timing the {label} config ({repeats} repeats)")
        try:
            measurement = time_train_step(config, repeats)
        except Exception as exc:  # noqa: BLE001 - recorded; the others go on
            table[label] = {"config": config.to_dict(), "error": _error_text(exc)}
            _say(f"MFU {label}: failed: {table[label]['error']}")
            continue
        table[label] = mfu_summary(config, measurement, device_kind, on_tpu)
        mfu = table[label]["mfu"]
        _say(
            f"MFU {label}: step {measurement['step']['median_s'] * 1e3:.2f} ms, "
            f"{measurement['tokens_per_s']:,.0f} tokens/s, "
            + (f"MFU {mfu:.1%} (causal FLOPs halved)" if mfu is not None else "no TPU peak")
        )
        measured = measurement
    return table, measured


def profile_step(config, out: pathlib.Path, steps: int = 3) -> dict:
    """The op breakdown of ``steps`` traced train steps (core.perf.trace): top 25 ops by
    time with their share, read from the trace's xplane.pb via jax.profiler.ProfileData."""
    import jax

    from capstones.byte_transformer import data, training
    from core.perf import trace
    from core.tpu import specs

    batch = data.training_stream(config, data.load_corpus(config)).next_batch()
    step = training.make_train_step(config)
    capture, _ = trace.capture(
        lambda state: step(state, batch)[0], training.init_state(config), out / "profile", steps
    )
    planes = [path for path in capture.files if path.name.endswith(".xplane.pb")]
    events = trace.xplane_op_events(planes[0])  # the TPU plane's ops where there is one
    result = {
        "steps": steps,
        "events": len(events),
        "modules": trace.modules(events),
        "top_ops": trace.op_table(events)[:25],
    }
    jsons = [path for path in capture.files if path.name.endswith(".trace.json.gz")]
    peak = specs.bf16_peak_of_device_kind(jax.devices()[0].device_kind)
    if jsons and peak:  # a TPU's trace: its device "XLA Ops" line gives each op's category
        from capstones.byte_transformer import model_math
        from core.perf import profile_categories

        attention = model_math.causal_train_flops(config, config.batch_size)["attention"]
        result["categories"] = profile_categories.category_table(
            trace.trace_json_events(jsons[0]), steps, peak,
            attributed_flops={"custom-call": attention},
        )  # fmt: skip
    return result


PROFILE_FIGURES = {  # record figure -> (HLO category of the profile, its column)
    "profile_matmul_share": ("convolution fusion", "share"),
    "profile_matmul_fraction_of_peak": ("convolution fusion", "fraction_of_peak"),
    "profile_attention_share": ("custom-call", "share"),
    "profile_attention_ms_per_step": ("custom-call", "ms_per_step"),
    "profile_attention_fraction_of_peak": ("custom-call", "fraction_of_peak"),
    "profile_elementwise_share": ("loop fusion", "share"),
    "profile_data_formatting_share": ("data formatting", "share"),
}
MFU_NOTES = (
    "MFU = model FLOPs per step (causal attention halved) / median step / bf16 peak; "
    "*_mfu_attention_not_halved counts causal attention over the full T x T (12 L B T^2 D), "
    "as MaxText's published v5e figures do; profile_*: the same run's profiled steps of the "
    "configuration by HLO category (core.perf.profile_categories.category_table): matmul = "
    "'convolution fusion' at the compiler's model_flops, attention = 'custom-call' (the Pallas "
    "flash kernel) credited with the causal attention FLOPs 6 L B T^2 D, elementwise = 'loop "
    "fusion'; shares are of the busy time"
)


def mfu_record_figures(table: dict, profile: dict | None = None) -> dict:
    """The record's figures: per configuration of ``table`` (mfu_comparison) its MFU, also
    with causal attention over the full T x T, step (ms), tokens/s and model FLOPs; and, from
    ``profile`` (profile_step) when it has categories, the step's busy ms and PROFILE_FIGURES
    (a category the profile lacks counts 0)."""
    figures = {}
    for label, line in table.items():
        key = label.replace("-", "_")
        if "error" in line:
            figures[f"{key}_error"] = line["error"]
            continue
        figures[f"{key}_mfu"] = line["mfu"] if line["mfu"] is not None else "no TPU peak"
        figures[f"{key}_step_ms"] = line["median_step_s"] * 1e3
        figures[f"{key}_tokens_per_s"] = line["tokens_per_s"]
        figures[f"{key}_model_flops_per_step"] = float(line["model_flops_per_step"])
        if line["mfu"] is not None and line.get("attention_flops_per_step"):
            full = line["model_flops_per_step"] + line["attention_flops_per_step"]
            figures[f"{key}_mfu_attention_not_halved"] = (
                line["mfu"] * full / line["model_flops_per_step"]
            )
    categories = {row["category"]: row for row in (profile or {}).get("categories", [])}
    if categories:
        figures["profile_busy_ms_per_step"] = sum(r["ms_per_step"] for r in categories.values())
        for name, (category, column) in PROFILE_FIGURES.items():
            figures[name] = float(categories.get(category, {}).get(column, 0.0))
    return figures


def record_mfu(
    name: str,
    out: pathlib.Path,
    command: list[str],
    table: dict,
    load: dict | None = None,
    profile: dict | None = None,
) -> str:
    """Write mfu_record_figures(table, profile) as benchmark record ``name`` under
    out/records; its path. ``load``: records.measure_load's reading (default: this
    process's run so far)."""
    from core.perf import records

    path = records.write_record(
        name,
        " ".join(command),
        mfu_record_figures(table, profile),
        notes=MFU_NOTES,
        root=out / "records",
        load=load,
    )
    return str(path)


def short_training(config, out: pathlib.Path) -> dict | None:
    """The short checkpointed training run into out/run: its summary, or None when
    preempted (SIGTERM: the checkpoint is saved; the same command resumes)."""
    from capstones.byte_transformer import training

    _say(f"training {config.steps} steps into {out / 'run'}")
    result = training.train(
        config, out / "run", log_mlflow=False, progress=lambda line: _say(f"  {line}")
    )
    if result.preempted:
        _say(
            f"preempted (SIGTERM) at step {result.last_step}: checkpoint saved, no result "
            "written; run the same command again to resume"
        )
        return None
    records = result.records
    later = [r["tokens_per_s"] for r in records[1:]] or [records[-1]["tokens_per_s"]]
    heldout = [r for r in records if "heldout_loss" in r]
    training_summary = {
        "run_dir": "run",
        "start_step": result.start_step,
        "last_step": result.last_step,
        "preempted": result.preempted,
        "first_loss": records[0]["loss"] if records else None,
        "last_loss": records[-1]["loss"] if records else None,
        "heldout_loss": heldout[-1]["heldout_loss"] if heldout else None,
        "heldout_bpb": heldout[-1]["heldout_bpb"] if heldout else None,
        "median_tokens_per_s_after_step_1": sorted(later)[len(later) // 2],
    }
    return training_summary


def run_child(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from core import runtime

    # no TPU here: pin the CPU (no slow TPU probe); a TPU VM keeps its TPU
    runtime.use_cpu_devices()
    import jax

    from capstones.byte_transformer import config as config_lib
    from capstones.byte_transformer import documents, run_manifest

    backend = jax.default_backend()
    devices = jax.devices()
    _say(f"backend: {backend}")
    _say(f"devices: {len(devices)} x {devices[0].device_kind}")
    runtime = run_manifest.capture_runtime()
    refusal = run_manifest.tpu_refusal(
        runtime, "results are marked 'cpu rehearsal — not a TPU result'"
    )
    on_tpu = refusal is None
    if refusal and not args.allow_cpu_rehearsal:
        print(refusal, file=sys.stderr)
        return EXIT_REFUSED
    if args.steps < 1 or args.repeats < 1:
        print("error: --steps and --repeats must be >= 1", file=sys.stderr)
        return 2
    runtime_fields = {
        "steps": args.steps,
        "ckpt_every": max(1, args.steps // 2),
        "eval_every": args.steps,
        "log_every": max(1, args.steps // 5),
    }
    base = config_lib.Config(**runtime_fields)
    try:
        if args.preset:
            base = config_lib.preset(args.preset, base=base)
        config = config_lib.Config.from_overrides(args.overrides, base=base)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out)
    existing = _results_in(out)
    if existing:
        print(f"error: {out} already holds {', '.join(existing)}: use a new --out", file=sys.stderr)
        return 2
    kind = run_manifest.TPU_RESULT_KIND if on_tpu else run_manifest.REHEARSAL_KIND
    _say(f"mode: {kind}")

    label = args.preset or "run"
    # the capstone's defaults with this run's run-time fields (steps and logging only)
    compared = {"default": config_lib.Config(**runtime_fields)} if args.compare_default else {}
    table, single = mfu_comparison(
        {**compared, label: config}, args.repeats, devices[0].device_kind, on_tpu
    )
    profile = None
    if args.profile:
        try:
            profile = profile_step(config, out)
        except Exception as exc:  # noqa: BLE001 - the MFU numbers are kept regardless
            profile = {"error": _error_text(exc)}
        _say(f"profile: {profile.get('error') or str(len(profile['top_ops'])) + ' top ops'}")
    if args.record:
        try:
            command = ["python", *sys.argv]
            _say(f"record: {record_mfu(args.record, out, command, table, profile=profile)}")
        except Exception as exc:  # noqa: BLE001 - a busy host refuses; the JSON keeps all
            table["record_error"] = {"error": _error_text(exc)}
            _say(f"record not written: {table['record_error']['error']}")
    failed = single is None  # the run's config failed: keep what was measured, no more
    if failed:
        single = {"error": table[label].get("error", "failed")}
    local = jax.local_devices()
    if failed:
        parallel = {"skipped": "the single-device step failed"}
    elif len(local) > 1 and config.batch_size % len(local) == 0:
        _say(f"timing the train step data parallel over {len(local)} devices")
        parallel = time_train_step(config, args.repeats, list(local))
        _say(
            f"compile_s {parallel['compile_s']:.2f}; "
            f"step {parallel['step']['median_s'] * 1e3:.2f} ms; "
            f"{parallel['tokens_per_s']:,.0f} tokens/s"
        )
    else:
        parallel = {
            "skipped": f"{len(local)} local device(s); batch_size {config.batch_size} "
            + ("does not split over them" if len(local) > 1 else "(nothing to split over)")
        }
    if failed or args.skip_training:
        why = "the train step failed" if failed else "--skip-training"
        training_summary = {"skipped": why}
    else:
        training_summary = short_training(config, out)
        if training_summary is None:
            return EXIT_PREEMPTED
    # the guard again, right before a TPU result is written: the backend may not change
    # under us, but the file must never say TPU unless JAX says so now
    on_tpu = on_tpu and jax.default_backend() == "tpu"
    device_kind = devices[0].device_kind
    document = {
        "kind": run_manifest.TPU_RESULT_KIND if on_tpu else run_manifest.REHEARSAL_KIND,
        "is_tpu_result": on_tpu,
        "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": ["python", "tpu_scripts/byte_transformer_tpu.py", *argv],
        "backend": jax.default_backend(),
        "device_kind": device_kind,
        "device_count": len(devices),
        "config": config.to_dict(),
        "train_step": {
            "single_device": single,
            "data_parallel": parallel,
            "peak_fraction": peak_fraction(single, device_kind) if on_tpu and not failed else None,
            "mfu_comparison": table,
            "profile": profile,
            "peak_fraction_data_parallel": peak_fraction(parallel, device_kind)
            if on_tpu and "skipped" not in parallel
            else None,
        },
        "training": training_summary,
        "note": "measured on a TPU"
        if on_tpu
        else "cpu rehearsal — not a TPU result: these numbers describe this CPU host only",
    }
    documents.write(out / run_manifest.RUNTIME_FILE, documents.Runtime, runtime)
    name = run_manifest.TPU_RESULT_FILE if on_tpu else run_manifest.REHEARSAL_RESULT_FILE
    documents.write(out / name, documents.JobResult, document)
    _say(f"{document['kind']}: {out / name}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if os.environ.get(CHILD_ENV) == "1":
        return run_child(argv)
    return run_parent(argv)


if __name__ == "__main__":
    sys.exit(main())
