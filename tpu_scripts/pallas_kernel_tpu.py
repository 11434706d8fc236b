"""The Pallas kernel capstone on a Cloud TPU VM: the flash-attention kernel compiled by Mosaic
(interpret=False) against XLA's attention, timed, checked, and written as a TPU result only
when JAX really runs on a TPU.

    python tpu_scripts/pallas_kernel_tpu.py --out DIR [--ts 1024,2048,4096] [--heads 8]
        [--d 128] [--blocks 128,256,512] [--dtype bfloat16] [--repeats 10]
        [--allow-cpu-rehearsal]

What it measures, for each sequence length T and each block size in --blocks (block_q =
block_k; the block sweep brings the measured block-size curve home; q, k, v, dO of shape
(1, heads, T, d), causal):
the kernel (core.kernels.flash_attention: forward, and forward + Pallas backward) and XLA's
attention (mha_reference and jax.vjp of it), each lowered and compiled ahead of time
(core.perf.timing.lower_and_compile: seconds apart), then the median of --repeats blocked
calls after one warm-up (core.perf.timing.time_calls); and agreement of the kernel's O, dQ,
dK, dV with mha_reference's (max scaled error, within twice the dtype's tolerance: the two
round to the dtype on their own); and each program's compiled memory_analysis (arguments,
outputs, temporaries, generated code: on a TPU the Mosaic compile's HBM figures for that
block; XLA's memory_analysis carries no VMEM figure for a Mosaic kernel, so VMEM is not
claimed). "block_sweep" lists, per T, every block's kernel medians side by side.

What it writes into DIR:
    tpu_result.json            only when jax.default_backend() == "tpu" and every device is
                               a TPU ("kind": "tpu result", "is_tpu_result": true)
    cpu_rehearsal_result.json  with --allow-cpu-rehearsal on a host without a TPU: the kernel
                               in Pallas interpret mode ("kind": "cpu rehearsal — not a TPU
                               result", "is_tpu_result": false)
    runtime.json               backend, devices (coords), package versions, recorded here

Without a TPU and without --allow-cpu-rehearsal it REFUSES: exit status 3, a message on
stderr, nothing written. A CPU number never stands in for a TPU number. Exit status 2: bad
arguments, or DIR already holds a result; 1: the kernel disagreed with XLA (the result is
written, with "agree": false).

Exact flow to run it on a TPU VM and bring the results back (single-host slices: v5e 2x2 =
v5litepod-4; v6e-4 works the same with --zone us-east5-b):

    # 0. the project wheel (carries capstones/, core/, tpu_scripts/)
    python -m pip wheel --no-deps -w dist .
    # 1. create the VM
    python -m tpu_scripts launch create --name pk-lab --accelerator-type v5litepod-4 \\
        --zone us-west4-a
    # 2. copy this script and the wheel to every worker
    python -m tpu_scripts launch stage --name pk-lab --accelerator-type v5litepod-4 \\
        --zone us-west4-a tpu_scripts/pallas_kernel_tpu.py \\
        dist/jax_tpu_lab-0.1.0-py3-none-any.whl
    # 3. run it (the bootstrap makes ~/jax-tpu-lab/.venv with the wheel's [tpu] extra)
    python -m tpu_scripts launch run --name pk-lab --accelerator-type v5litepod-4 \\
        --zone us-west4-a tpu_scripts/pallas_kernel_tpu.py -- --out pk_tpu
    # 4. fetch DIR back (it lands in results/pk_tpu)
    mkdir -p results
    python -m tpu_scripts launch fetch --name pk-lab --accelerator-type v5litepod-4 \\
        --zone us-west4-a pk_tpu results/
    # 5. delete the VM (launch checks that describe fails afterwards)
    python -m tpu_scripts launch delete --name pk-lab --accelerator-type v5litepod-4 \\
        --zone us-west4-a

Rehearse everything but the TPU on this machine (interpret mode, small sizes):

    python tpu_scripts/pallas_kernel_tpu.py --out /tmp/pk_rehearsal --ts 64 --heads 1 \\
        --d 32 --blocks 16,32 --repeats 2 --allow-cpu-rehearsal
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import sys
from typing import Any

from core import documents as core_documents

EXIT_REFUSED = 3
RESULT_FILES = ("tpu_result.json", "cpu_rehearsal_result.json")  # run_manifest's names
DTYPES = ("bfloat16", "float32")
MAX_T = 32768


class Result(core_documents.Document):
    """tpu_result.json / cpu_rehearsal_result.json of this script (validated before writing)."""

    kind: str
    is_tpu_result: bool
    created_utc: str
    command: list[str]
    backend: str
    device_kind: str
    device_count: int
    kernel_mode: str
    settings: dict[str, Any]
    rows: list[dict[str, Any]]
    block_sweep: dict[str, list[dict[str, Any]]]
    agree: bool
    note: str


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python tpu_scripts/pallas_kernel_tpu.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", required=True, help="result directory (new or empty)")
    parser.add_argument("--ts", default="1024,2048,4096", help="sequence lengths, comma-separated")
    parser.add_argument("--heads", type=int, default=8, help="attention heads H (batch 1)")
    parser.add_argument("--d", type=int, default=128, help="head dimension D")
    parser.add_argument(
        "--blocks",
        default="128,256,512",
        help="block sizes to sweep (block_q = block_k along T), comma-separated",
    )
    parser.add_argument("--dtype", default="bfloat16", choices=DTYPES, help="q, k, v dtype")
    parser.add_argument("--repeats", type=int, default=10, help="timed calls (median)")
    parser.add_argument(
        "--allow-cpu-rehearsal",
        action="store_true",
        help="without a TPU, run in interpret mode and mark the result 'cpu rehearsal — not a "
        "TPU result'",
    )
    return parser


def problems(args) -> list[str]:
    """What is wrong with the arguments (before anything runs or is written)."""
    found = []
    try:
        args.t_values = tuple(int(t) for t in args.ts.split(",") if t.strip())
    except ValueError:
        return [f"--ts takes comma-separated integers, got {args.ts!r}"]
    try:
        args.block_values = tuple(int(b) for b in args.blocks.split(",") if b.strip())
    except ValueError:
        return [f"--blocks takes comma-separated integers, got {args.blocks!r}"]
    if not args.t_values:
        found.append("--ts needs at least one sequence length")
    if not args.block_values:
        found.append("--blocks needs at least one block size")
    if len(set(args.block_values)) != len(args.block_values):
        found.append(f"--blocks lists a block twice: {args.blocks!r}")
    for name in ("heads", "d", "repeats"):
        if getattr(args, name) < 1:
            found.append(f"--{name} must be >= 1, got {getattr(args, name)}")
    for t in args.t_values:
        if not 1 <= t <= MAX_T:
            found.append(f"every T must be in 1..{MAX_T}, got T={t}")
        for block in args.block_values:
            if block < 1 or t % block:
                found.append(f"--blocks: block {block} must be >= 1 and divide T={t}")
    return found


def _say(line: str) -> None:
    print(line, flush=True)


def measure(t: int, block: int, args, interpret) -> dict:
    """Compile seconds and memory, median blocked seconds and agreement of kernel vs XLA
    at one T and one block size."""
    import jax
    import numpy as np

    from core import numerics
    from core.kernels import flash_attention
    from core.perf import timing

    shape = (1, args.heads, t, args.d)
    rng = np.random.default_rng(t)
    dtype = jax.numpy.dtype(args.dtype)
    q, k, v, do = (jax.numpy.asarray(x) for x in rng.standard_normal((4, *shape)).astype(dtype))
    blocks = (block, block)
    kernel_fwd = jax.jit(
        functools.partial(
            flash_attention.flash_attention,
            causal=True,
            block_q=blocks[0],
            block_k=blocks[1],
            interpret=interpret,
        ),
        compiler_options=flash_attention.COMPILER_OPTIONS,
    )
    xla_fwd = jax.jit(functools.partial(flash_attention.mha_reference, causal=True))

    def kernel_both(q, k, v, do):  # forward kernel, then the Pallas backward kernels
        o, vjp = jax.vjp(
            functools.partial(
                flash_attention.flash_attention,
                causal=True,
                block_q=blocks[0],
                block_k=blocks[1],
                backward="kernel",
                interpret=interpret,
            ),
            q,
            k,
            v,
        )
        return o, vjp(do)

    def xla_both(q, k, v, do):
        o, vjp = jax.vjp(functools.partial(flash_attention.mha_reference, causal=True), q, k, v)
        return o, vjp(do)

    options = flash_attention.COMPILER_OPTIONS
    programs = {
        "kernel forward": (kernel_fwd, (q, k, v)),
        "XLA forward": (xla_fwd, (q, k, v)),
        "kernel forward+backward": (
            jax.jit(kernel_both, compiler_options=options),
            (q, k, v, do),
        ),
        "XLA forward+backward": (jax.jit(xla_both), (q, k, v, do)),
    }
    rows, outputs = {}, {}
    for name, (program, operands) in programs.items():
        compiled = timing.lower_and_compile(program, *operands)
        times = timing.time_calls(compiled.executable, *operands, repeats=args.repeats)
        outputs[name] = compiled.executable(*operands)
        summary = times.summary
        memory = compiled.executable.memory_analysis()
        rows[name] = {
            "compiled memory (bytes)": {
                field: int(getattr(memory, field, 0) or 0)
                for field in (
                    "argument_size_in_bytes",
                    "output_size_in_bytes",
                    "temp_size_in_bytes",
                    "generated_code_size_in_bytes",
                )
            },
            "lower_s": compiled.lower_s,
            "compile_s": compiled.compile_s,
            "median_s": summary.median,
            "p10_s": summary.p10,
            "p90_s": summary.p90,
            "samples_s": list(times.samples),
        }
        _say(
            f"  T={t} block={block} {name}: compile {compiled.compile_s:.2f} s, "
            f"median {summary.median:.4g} s"
        )
    o_k, grads_k = outputs["kernel forward+backward"]
    o_x, grads_x = outputs["XLA forward+backward"]
    errors = {
        "O (forward)": numerics.scaled_max_error(outputs["kernel forward"], outputs["XLA forward"])
    }
    errors["O"] = numerics.scaled_max_error(o_k, o_x)
    for name, g_k, g_x in zip(("dQ", "dK", "dV"), grads_k, grads_x, strict=True):
        errors[name] = numerics.scaled_max_error(g_k, g_x)
    tolerance = 2 * numerics.tolerance(args.dtype)  # kernel and XLA each round on their own
    on_tpu = interpret is False
    return {
        "T": t,
        "block": block,
        "shape (B,H,T,D)": list(shape),
        "compiled memory from": "the TPU compile (Mosaic for the kernel): HBM bytes of one chip"
        if on_tpu
        else "this CPU host's compile (interpret mode): not a TPU memory figure",
        "programs": rows,
        "speedup forward (XLA / kernel)": rows["XLA forward"]["median_s"]
        / rows["kernel forward"]["median_s"],
        "speedup forward+backward (XLA / kernel)": rows["XLA forward+backward"]["median_s"]
        / rows["kernel forward+backward"]["median_s"],
        "errors vs mha_reference": errors,
        "tolerance": tolerance,
        "agree": all(e <= tolerance for e in errors.values()),
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    found = problems(args)
    if found:
        print("error: " + "; ".join(found), file=sys.stderr)
        return 2
    from core import runtime

    runtime.use_cpu_devices(1)  # no TPU here: pin the CPU (no slow probe); a TPU VM keeps its TPU
    import jax

    from capstones.byte_transformer import documents, run_manifest
    from core.kernels import matmul

    backend = jax.default_backend()
    devices = jax.devices()
    _say(f"backend: {backend}; devices: {len(devices)} x {devices[0].device_kind}")
    record = run_manifest.capture_runtime()
    refusal = run_manifest.tpu_refusal(
        record, "interpret mode; the result is marked 'cpu rehearsal — not a TPU result'"
    )
    on_tpu = refusal is None
    if refusal and not args.allow_cpu_rehearsal:
        print(refusal, file=sys.stderr)
        return EXIT_REFUSED
    out = pathlib.Path(args.out)
    existing = [name for name in RESULT_FILES if (out / name).exists()]
    if existing:
        print(f"error: {out} already holds {', '.join(existing)}: use a new --out", file=sys.stderr)
        return 2
    interpret = False if on_tpu else matmul.interpret_params()
    kind = run_manifest.TPU_RESULT_KIND if on_tpu else run_manifest.REHEARSAL_KIND
    _say(f"mode: {kind} ({'compiled by Mosaic' if on_tpu else 'Pallas TPU interpret mode'})")
    rows = [
        measure(t, block, args, interpret) for t in args.t_values for block in args.block_values
    ]
    sweep = {
        f"T={t}": [
            {
                "block": row["block"],
                "kernel forward median_s": row["programs"]["kernel forward"]["median_s"],
                "kernel forward+backward median_s": row["programs"]["kernel forward+backward"][
                    "median_s"
                ],
                "speedup forward+backward (XLA / kernel)": row[
                    "speedup forward+backward (XLA / kernel)"
                ],
            }
            for row in rows
            if row["T"] == t
        ]
        for t in args.t_values
    }
    # the guard again, right before a TPU result is written: the file must never say TPU
    # unless JAX says so now
    on_tpu = on_tpu and jax.default_backend() == "tpu"
    document = {
        "kind": run_manifest.TPU_RESULT_KIND if on_tpu else run_manifest.REHEARSAL_KIND,
        "is_tpu_result": on_tpu,
        "created_utc": record["captured_utc"],
        "command": ["python", "tpu_scripts/pallas_kernel_tpu.py", *argv],
        "backend": jax.default_backend(),
        "device_kind": devices[0].device_kind,
        "device_count": len(devices),
        "kernel_mode": "compiled by Mosaic (interpret=False)"
        if on_tpu
        else "Pallas TPU interpret mode: measures semantics, not speed",
        "settings": {
            "heads": args.heads,
            "d": args.d,
            "blocks": list(args.block_values),
            "dtype": args.dtype,
            "causal": True,
            "repeats": args.repeats,
        },
        "rows": rows,
        "block_sweep": sweep,
        "agree": all(r["agree"] for r in rows),
        "note": "measured on a TPU"
        if on_tpu
        else "cpu rehearsal — not a TPU result: these numbers describe this CPU host only",
    }
    documents.write(out / run_manifest.RUNTIME_FILE, documents.Runtime, record)
    name = RESULT_FILES[0] if on_tpu else RESULT_FILES[1]
    validated = core_documents.validate(Result, document, name)
    core_documents.write_text_atomic(out / name, json.dumps(validated, indent=2) + "\n")
    _say(f"{document['kind']}: {out / name}; kernel agrees with XLA: {document['agree']}")
    return 0 if document["agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
