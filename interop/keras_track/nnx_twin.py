"""DigitsNet's Keras twin against the course's Flax NNX model: weights moved, outputs compared.

The NNX model (interop/twins.py) is the reference; its weights move to Keras names through
``keras_bridge.nnx_to_keras`` (the rules in ``keras_bridge.KERAS_RULES``: every weight is a
copy, only the names change) into a verified safetensors file. Each chosen backend builds the
Keras twin from that file in its own ``KERAS_BACKEND`` child of this module (``child.run``),
concurrently, and returns every named layer's activation; ``interop/activations.py`` diffs
them against NNX's, layer by layer, and names the first layer that diverges.

A planted mistake (``MISTAKES``) is a second move of the same weights, made wrong the way a
hand-written converter goes wrong; it runs in the same child (one import per backend) and must
diverge first at the layer it breaks (``FIRST_DIVERGENT``).
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from collections.abc import Sequence

import numpy as np
from flax import nnx

from interop import activations as diffs
from interop import keras_bridge, torch_flax, twins
from interop.keras_track import child

BACKENDS = keras_bridge.BACKENDS
_MODULE = "interop.keras_track.nnx_twin"
MISTAKES: dict[str, str] = {
    "none": "the move as KERAS_RULES state it",
    "conv1_kernel_transposed": "conv1's kernel with kH and kW swapped (same shape: unseen)",
    "keras_bn_epsilon": "BatchNorm built with Keras's default epsilon 1e-3 (NNX: 1e-5)",
    "bn_statistics_dropped": "BatchNorm's mean and variance left at Keras's init (0 and 1)",
    "act1_tanh_gelu": "act1 as Keras's default tanh GELU (NNX: exact)",
}
FIRST_DIVERGENT: dict[str, str] = {
    "conv1_kernel_transposed": "conv1",
    "keras_bn_epsilon": "bn1",
    "bn_statistics_dropped": "bn1",
    "act1_tanh_gelu": "act1",
}


def mapping_rows(model: twins.NNXDigitsNet | None = None) -> list[dict]:
    """Every NNX parameter -> its Keras weight (name and shape on both sides, the rule).
    Without ``model``, an abstract DigitsNet (``nnx.eval_shape``: shapes only, so no random
    initializer is compiled and run for a table of names and shapes)."""
    if model is None:
        model = nnx.eval_shape(lambda: twins.NNXDigitsNet(twins.SPEC, rngs=nnx.Rngs(0)))
    rows = []
    for rule in keras_bridge.KERAS_RULES:
        value = getattr(getattr(model, rule.layer), rule.nnx_attribute).get_value()
        name = keras_bridge.keras_name(rule)
        rows.append(
            {
                "NNX": f"{rule.layer}.{rule.nnx_attribute}",
                "NNX shape": str(tuple(value.shape)),
                "Keras": name,
                "Keras shape": str(keras_bridge.KERAS_SHAPES[name]),
                "layout": rule.layout,
                "rule": "copy" if tuple(value.shape) == keras_bridge.KERAS_SHAPES[name] else "?",
            }
        )
    return rows


def plant(weights: dict, mistake: str, config: twins.Config = twins.SPEC):
    """(weights, config) moved with ``mistake`` (a copy; "none" returns them unchanged)."""
    if mistake not in MISTAKES:
        raise ValueError(f"unknown mistake {mistake!r}; known: {', '.join(MISTAKES)}")
    weights = {k: np.array(v) for k, v in weights.items()}
    if mistake == "conv1_kernel_transposed":
        weights["conv1.kernel"] = np.ascontiguousarray(
            weights["conv1.kernel"].transpose(1, 0, 2, 3)
        )
    elif mistake == "keras_bn_epsilon":
        config = dataclasses.replace(config, bn_epsilon=1e-3)
    elif mistake == "bn_statistics_dropped":
        weights["bn1.moving_mean"] = np.zeros_like(weights["bn1.moving_mean"])
        weights["bn1.moving_variance"] = np.ones_like(weights["bn1.moving_variance"])
    elif mistake == "act1_tanh_gelu":
        config = dataclasses.replace(config, gelu_approximate=(True, *config.gelu_approximate[1:]))
    return weights, config


def problem(backends: Sequence[str], mistake: str) -> str | None:
    if not backends:
        return "no backend chosen: nothing runs the Keras twin"
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        return f"unknown backend(s) {', '.join(map(repr, unknown))}; known: {', '.join(BACKENDS)}"
    if len(set(backends)) != len(backends):
        return "a backend named twice"
    if mistake not in MISTAKES:
        return f"unknown mistake {mistake!r}; known: {', '.join(MISTAKES)}"
    return None


@dataclasses.dataclass(frozen=True)
class Result:
    backends: tuple[str, ...]
    mistake: str
    diffs: dict[str, dict[tuple[int, str], diffs.Diff]]  # backend -> (seed, move) -> Diff
    seconds: dict[str, float]
    keras_version: str

    def diff(self, backend: str, seed: int, move: str) -> diffs.Diff:
        return self.diffs[backend][(seed, move)]


def run(
    backends: Sequence[str],
    folder: str | pathlib.Path,
    seeds: Sequence[int] = (0,),
    batch: int = 8,
    mistakes: Sequence[str] = (),
) -> Result:
    """For every seed, the correct move and each planted mistake, under each backend (one
    child per backend, concurrently); each run diffed against NNX layer by layer."""
    mistake = next((m for m in mistakes if m != "none"), "none")
    for m in mistakes:
        reason = problem(list(backends), m)
        if reason:
            raise ValueError(reason)
    reason = problem(list(backends), "none")
    if reason:
        raise ValueError(reason)
    folder = pathlib.Path(folder)
    moves = ["none", *[m for m in dict.fromkeys(mistakes) if m != "none"]]
    jobs, references = [], {}
    for seed in seeds:
        nnx = torch_flax.seeded_nnx(seed)
        x = twins.digits_batch(batch, seed)
        references[seed] = twins.nnx_activations(nnx, x)
        np.savez(folder / f"x_{seed}.npz", x=np.asarray(x, np.float32))
        moved = keras_bridge.nnx_to_keras(nnx)
        for move in moves:
            weights, config = plant(moved, move)
            path = folder / f"w_{seed}_{move}.safetensors"
            keras_bridge.write_weights(path, weights, config)
            jobs.append({"seed": seed, "move": move, "weights": str(path)})
    requests = {
        b: {
            "jobs": [
                {
                    **j,
                    "inputs": str(folder / f"x_{j['seed']}.npz"),
                    "output": str(folder / f"{b}_{i}.npz"),
                }
                for i, j in enumerate(jobs)
            ]
        }
        for b in backends
    }
    done = child.run_many(_MODULE, requests, folder, fast_compile=True)
    out: dict[str, dict[tuple[int, str], diffs.Diff]] = {}
    for backend, request in requests.items():
        out[backend] = {}
        for job in request["jobs"]:
            with np.load(job["output"], allow_pickle=False) as data:
                run_ = [(name, data[name]) for name in twins.LAYERS]
            out[backend][(job["seed"], job["move"])] = diffs.diff(run_, references[job["seed"]])
    first = next(iter(done.values()))
    return Result(
        tuple(backends),
        mistake,
        out,
        {b: d.seconds for b, d in done.items()},
        first.result["keras_version"],
    )


# --- the child (python -m interop.keras_track.nnx_twin REQUEST.json, KERAS_BACKEND set) --------


def _handle(request: dict) -> dict:
    for job in request["jobs"]:
        weights, config = keras_bridge.read_weights(job["weights"])
        model = keras_bridge.build_model(config)
        keras_bridge.set_weights(model, weights)
        with np.load(job["inputs"], allow_pickle=False) as data:
            x = data["x"]
        layers = keras_bridge.activations(model, x)
        np.savez(job["output"], **{k: np.asarray(v, np.float32) for k, v in layers.items()})
    return {"jobs": len(request["jobs"])}


if __name__ == "__main__":
    sys.exit(child.serve(sys.argv[1:], _handle))
