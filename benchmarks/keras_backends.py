"""Time per training step per Keras backend for the track's CNN and Transformer block, from one
run, beside the JAX lesson's own step (Flax NNX + Optax under nnx.jit) on the same shapes.

    python benchmarks/keras_backends.py [--steps 30] [--record]

Keras: interop/keras_track's worker under jax, torch and tensorflow (one process each, one
after another so no step time includes another backend's work, or ``--concurrent`` as the
apps run them; ``train_on_batch`` with Keras's Adam, ``jit_compile="auto"``), median
seconds per step with the first (compile) step apart. JAX lesson: core.nn.nnx_models.CNN with
core.nn.training's train step, and core.lm.transformer.Block with an MSE loss and optax.adam
in one nnx.jit step, timed with core.nn.training.time_calls. CPU only: these are this
machine's numbers, not a TPU's. ``--record`` writes them with core.perf.records.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from core import lab  # noqa: E402

lab.use_cpu_devices(1)

from benchmarks import _report  # noqa: E402
from core.perf import allocator  # noqa: E402
from interop.keras_track import models, runner  # noqa: E402

NAME = "keras_backends"
CNN = models.CNNSpec(channels1=16, channels2=32)  # cnn_digits' defaults
BLOCK = models.TransformerSpec(width=64, heads=4, seq_len=64)  # transformer_block's defaults
BATCH = {"cnn": 32, "transformer": 8}


def jax_cnn_step(x_SB, y_SB, repeats: int):
    import optax
    from flax import nnx

    from core.nn import nnx_models, training

    model = nnx_models.CNN(rngs=nnx.Rngs(0), channels=(CNN.channels1, CNN.channels2))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    step = training.make_train_step()
    return training.time_calls(step, model, optimizer, x_SB[0], y_SB[0], repeats=repeats)


def jax_block_step(x_SB, y_SB, repeats: int):
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    from core.lm import attention, transformer
    from core.nn import training

    config = transformer.TransformerConfig(width=BLOCK.width, num_heads=BLOCK.heads)
    block = transformer.Block(config, jax.random.key(0))
    optimizer = nnx.Optimizer(block, optax.adam(1e-3), wrt=nnx.Param)
    mask = attention.causal_mask_TS(BLOCK.seq_len)[None, None]

    @nnx.jit
    def step(block, optimizer, x, y):
        def loss_fn(block):
            out, _ = block(x, mask)
            return jnp.mean((out - y) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(block)
        optimizer.update(block, grads)
        return loss

    return training.time_calls(step, block, optimizer, x_SB[0], y_SB[0], repeats=repeats)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps per run")
    parser.add_argument("--record", action="store_true", help="write a benchmark record")
    parser.add_argument("--records-root", default=None, help="records folder (default: repo's)")
    parser.add_argument("--output", default="benchmarks/results/keras_backends.json")
    parser.add_argument(
        "--concurrent",
        action="store_true",
        help="run the three Keras workers at once, as the apps do (default: one after another, "
        "so no backend's step time includes another's on a shared CPU)",
    )
    args = parser.parse_args(argv)
    if args.steps < 3:
        parser.error("--steps must be >= 3 (the first step is the compile)")
    cases, data = [], {}
    for spec in (CNN, BLOCK):
        data[spec.kind] = models.make_data(spec, 0, args.steps, BATCH[spec.kind])
        training = runner.Training("adam", 1e-3, args.steps, gradients=False)
        cases.append(
            runner.Case(spec.kind, spec, models.init_weights(spec, 0), data[spec.kind], training)
        )
    if args.concurrent:
        runs = runner.run_cases(cases, runner.BACKENDS)
    else:
        runs = {b: runner.run_cases(cases, (b,))[b] for b in runner.BACKENDS}
    rows = []
    for kind in ("cnn", "transformer"):
        for backend in runner.BACKENDS:
            run = runs[backend][kind]
            rows.append(
                {
                    "model": kind,
                    "framework": f"Keras {backend}",
                    "ms/step": 1e3 * run.median_step_seconds,
                    "first step ms": 1e3 * float(run.step_seconds[0]),
                    "jit_compile": run.summary["jit_compile"],
                }
            )
        lesson = jax_cnn_step if kind == "cnn" else jax_block_step
        timed = lesson(data[kind]["x_train"], data[kind]["y_train"], args.steps - 1)
        rows.append(
            {
                "model": kind,
                "framework": "JAX lesson (nnx.jit)",
                "ms/step": 1e3 * timed.median_s,
                "first step ms": 1e3 * timed.first_s,
                "jit_compile": "nnx.jit",
            }
        )
    print(_report.format_table(rows, list(rows[0])))
    malloc = allocator.in_force()
    document = {"machine": _report.machine_label(), "steps": args.steps, "rows": rows}
    print(f"wrote {_report.write_json({**document, 'malloc': malloc}, args.output)}")
    if args.record:
        figures = {f"{r['model']} {r['framework']}: ms per step": r["ms/step"] for r in rows}
        figures.update(
            {f"{r['model']} {r['framework']}: first step ms": r["first step ms"] for r in rows}
        )
        notes = (
            f"CNN {CNN.channels1}/{CNN.channels2} batch {BATCH['cnn']}, Transformer block "
            f"D={BLOCK.width} H={BLOCK.heads} T={BLOCK.seq_len} batch {BATCH['transformer']}; "
            f"Adam, {args.steps} steps, median with the first step apart; the three Keras "
            f"workers ran {'concurrently (as the apps do)' if args.concurrent else 'in turn'}"
            " on a 2-core CPU, the JAX lesson's step after them in the parent; CPU only, not a "
            f"TPU; malloc: {malloc}"
        )
        command = f"python benchmarks/keras_backends.py --steps {args.steps} --record"
        command += " --concurrent" * args.concurrent
        return _report.keep_record(NAME, command, figures, notes, args.records_root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
