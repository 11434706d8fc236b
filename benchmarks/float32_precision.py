"""How close float32 work on this backend comes to float64, by matmul precision.

    python benchmarks/float32_precision.py [--quick] [-o benchmarks/results/float32_precision.json]

The figures behind ``core.numerics.TPU_FLOAT32`` (the tolerance of a float32 check on a TPU at
each ``jax.default_matmul_precision``): on a TPU a float32 matmul runs as 1 (DEFAULT), 3 (HIGH)
or 6 (HIGHEST) bfloat16 passes on the MXU, and its elementwise functions have their own
accuracy. Each figure is ``numerics.scaled_max_error`` against NumPy/SciPy float64 on the host,
the worst over SEEDS, for the lessons' building blocks: a matmul, a dense layer + tanh, causal
attention, a gradient through both, and the elementwise functions alone. On a CPU every
precision gives float32's own error (XLA:CPU has no bfloat16 passes).

Writes the record ``float32_precision`` (core.perf.records) for this machine.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks import _report  # noqa: E402  (starts the record's load reading)

PRECISIONS = ("default", "high", "highest")
SEEDS = (0, 1, 2)
ELEMENTWISE = ("exp", "log", "tanh", "erf", "sin", "sigmoid")


def _float64_references():
    """The float64 side, in NumPy/SciPy on the host (never asked of a TPU)."""
    import numpy as np
    from scipy import special

    def attention(q, k, v):
        scores = q @ k.T / np.sqrt(q.shape[-1])
        scores = np.where(np.tril(np.ones(scores.shape, bool)), scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        return (p / p.sum(-1, keepdims=True)) @ v

    def layer_grad(x, w):
        """d sum(tanh(x @ w)) / d w = x.T @ (1 - tanh(x @ w)^2)."""
        return x.T @ (1.0 - np.tanh(x @ w) ** 2)

    elementwise = {
        "exp": np.exp,
        "log": lambda a: np.log(np.abs(a) + 0.5),
        "tanh": np.tanh,
        "erf": special.erf,
        "sin": np.sin,
        "sigmoid": special.expit,
    }
    return attention, layer_grad, elementwise


def measure(size: int, seq: int, head: int) -> dict:
    """{figure name: worst scaled error over SEEDS} on the default backend."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from core import numerics

    attention64, layer_grad64, elementwise64 = _float64_references()
    functions = {
        "exp": jnp.exp,
        "log": lambda a: jnp.log(jnp.abs(a) + 0.5),
        "tanh": jnp.tanh,
        "erf": jax.scipy.special.erf,
        "sin": jnp.sin,
        "sigmoid": jax.nn.sigmoid,
    }

    def attention(q, k, v):
        scores = q @ k.T / jnp.sqrt(q.shape[-1]).astype(q.dtype)
        mask = jnp.tril(jnp.ones((q.shape[0], q.shape[0]), bool))
        return jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1) @ v

    layer_grad = jax.grad(lambda w, x: jnp.sum(jnp.tanh(x @ w)))
    figures: dict[str, float] = {}

    def keep(name: str, error: float) -> None:
        figures[name] = max(figures.get(name, 0.0), error)

    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((size, size))
        w = rng.standard_normal((size, size)) / np.sqrt(size)
        q, k, v = (rng.standard_normal((seq, head)) for _ in range(3))
        x32, w32 = jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32)
        q32, k32, v32 = (jnp.asarray(a, jnp.float32) for a in (q, k, v))
        for precision in PRECISIONS:
            with jax.default_matmul_precision(precision):
                matmul = jax.jit(jnp.matmul)(x32, w32)
                layer = jax.jit(lambda a, b: jnp.tanh(a @ b))(x32, w32)
                attended = jax.jit(attention)(q32, k32, v32)
                grad = jax.jit(layer_grad)(w32, x32)
            keep(f"matmul_{precision}", numerics.scaled_max_error(matmul, x @ w))
            keep(f"dense_tanh_{precision}", numerics.scaled_max_error(layer, np.tanh(x @ w)))
            keep(
                f"attention_{precision}", numerics.scaled_max_error(attended, attention64(q, k, v))
            )
            keep(f"layer_grad_{precision}", numerics.scaled_max_error(grad, layer_grad64(x, w)))
        for name in ELEMENTWISE:
            got = jax.jit(functions[name])(x32)
            keep(
                f"elementwise_{name}",
                numerics.elementwise_relative_error(got, elementwise64[name](x)),
            )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    parser.add_argument("--no-record", action="store_true", help="print only; write no record")
    parser.add_argument(
        "-o", "--output", default=str(_report.RESULTS_DIR / "float32_precision.json")
    )
    args = parser.parse_args(argv)
    size, seq, head = (64, 64, 32) if args.quick else (1024, 512, 128)

    import jax

    from core import numerics

    figures = measure(size, seq, head)
    backend = jax.default_backend()
    rows = []
    for name, error in sorted(figures.items()):
        row = {"figure": name, "scaled error vs float64": error}
        precision = name.rsplit("_", 1)[-1]
        if precision in PRECISIONS:
            row["tolerance here"] = float(numerics.tolerance("float32", precision=precision))
        rows.append(row)
    print(f"backend {backend} ({jax.devices()[0].device_kind}), sizes {size}, T={seq}, D={head}")
    print(_report.format_table(rows, ["figure", "scaled error vs float64", "tolerance here"]))
    pathlib.Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    document = {"machine": _report.machine_label(), "device": jax.devices()[0].device_kind,
                "figures": figures}  # fmt: skip
    pathlib.Path(args.output).write_text(json.dumps(document, indent=2) + "\n")
    if args.no_record:
        return 0
    figures = {**figures, "device_kind": jax.devices()[0].device_kind, "size": size}
    figures.update({"seq_len": seq, "head_dim": head, "seeds": len(SEEDS)})
    command = "python benchmarks/float32_precision.py" + (" --quick" if args.quick else "")
    notes = (
        "scaled_max_error vs NumPy/SciPy float64 on the host, worst of 3 seeds; elementwise: "
        "elementwise_relative_error over a standard normal input"
    )
    return _report.keep_record("float32_precision", command, figures, notes)


if __name__ == "__main__":
    sys.exit(main())
