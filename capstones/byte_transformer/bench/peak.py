"""An honest float32 peak for MFU: the machine's best measured GEMM, XLA's and torch's.

MFU divides achieved model FLOP/s by a peak. A peak measured with one framework's matmul
only flatters whichever framework is slower at GEMM (each framework reaches a different share
of its own square-GEMM rate inside the step). So the peak here is the
fastest of jit(jnp.matmul) and torch.mm over the shapes the train step really multiplies
(forward and both backward products of every weight matmul) plus one large square, each the
fastest of ``repeats`` calls after a warm-up; both frameworks' best figures are kept.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from capstones.byte_transformer import config as config_lib
from core.perf import timing

METHOD = (
    "the fastest float32 GEMM measured here: jit(jnp.matmul) (XLA) and torch.mm at the train "
    "step's weight-matmul shapes (forward, dX and dW products) and one n x n square; the "
    "fastest of {repeats} calls after a warm-up (a peak is what the machine can do: the "
    "fastest call is the one least disturbed by other work); 2 m k n FLOPs"
)


def model_matmul_shapes(config: config_lib.Config) -> list[tuple[int, int, int]]:
    """Distinct (m, k, n) of the step's weight matmuls: forward x W, dX = dY W^T and
    dW = X^T dY, for the q/k/v/o projections (D x D), the MLP (D x F, F x D) and the
    vocabulary head (D x V); m = B * T tokens."""
    tokens, d = config.batch_size * config.seq_len, config.d_model
    f = config.mlp_width or 4 * config.d_model
    vocab = config.model_config().vocab_size
    shapes = []
    for k, n in ((d, d), (d, f), (f, d), (d, vocab)):
        shapes += [(tokens, k, n), (tokens, n, k), (k, tokens, n)]
    return sorted(set(shapes))


def _operands(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)


def measure(shapes: list[tuple[int, int, int]], repeats: int = 7, progress=None) -> dict:
    """{"flop_per_s", "kernel", "flops", "seconds", "method", "xla_best_flop_per_s",
    "torch_best_flop_per_s", "candidates": [{"framework", "m", "k", "n", "flop_per_s"}]}:
    the fastest candidate is the peak."""
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    matmul = jax.jit(jnp.matmul)
    candidates = []
    for m, k, n in shapes:
        a, b = _operands(m, k, n)
        flops = 2.0 * m * k * n
        ja, jb = jnp.asarray(a), jnp.asarray(b)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        calls = {
            "xla": lambda ja=ja, jb=jb: matmul(ja, jb),
            "torch": lambda ta=ta, tb=tb: torch.mm(ta, tb),
        }
        seconds = {
            name: timing.time_calls(call, repeats=repeats, warmup=1).summary.minimum
            for name, call in calls.items()
        }
        for framework, s in seconds.items():
            row = {"framework": framework, "m": m, "k": k, "n": n, "flops": flops}
            candidates.append({**row, "seconds": s, "flop_per_s": flops / s})
        if progress is not None:
            progress(
                f"  peak {m}x{k}x{n}: XLA {flops / seconds['xla'] / 1e9:.1f}, torch "
                f"{flops / seconds['torch'] / 1e9:.1f} GFLOP/s"
            )
    best = max(candidates, key=lambda row: row["flop_per_s"])
    by_framework = {
        name: max(r["flop_per_s"] for r in candidates if r["framework"] == name)
        for name in ("xla", "torch")
    }
    return {
        "kernel": f"{best['framework']} matmul {best['m']}x{best['k']}x{best['n']} float32",
        "flops": best["flops"],
        "seconds": best["seconds"],
        "flop_per_s": best["flop_per_s"],
        "method": METHOD.format(repeats=repeats),
        "xla_best_flop_per_s": by_framework["xla"],
        "torch_best_flop_per_s": by_framework["torch"],
        "candidates": [
            {key: row[key] for key in ("framework", "m", "k", "n", "flop_per_s")}
            for row in candidates
        ],
    }


def honest_peak(config: config_lib.Config, square_n: int, repeats: int = 7, progress=None):
    """``measure`` over the config's matmul shapes plus one square_n x square_n GEMM."""
    return measure(model_matmul_shapes(config) + [(square_n,) * 3], repeats, progress)
