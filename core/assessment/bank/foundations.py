"""Assessment items for the foundation phases: devices, arrays, transformations, randomness,
curvature and Flax NNX models (one item per phase, numbers from the learner's seed).

- ``setup.shard_shape`` (predict a shape): the block each device holds under a NamedSharding.
- ``arrays.plausible_bug`` (diagnose): a shape/dtype/update mistake that still returns numbers.
- ``transformations.recompiles`` (predict a count): how often a jitted function is traced.
- ``control_flow.key_reuse`` (diagnose): a broken PRNG-key discipline.
- ``math_optimization.stable_learning_rate`` (predict): gradient descent's limit 2/lambda_max.
- ``nn_training.parameter_count`` (predict a count): trainable numbers of a Flax NNX model.
"""

from __future__ import annotations

import contextlib
import fractions
import io
import itertools
import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from core.assessment.items import DiagnoseItem, Evidence, Item, PredictItem, Question, rng
from core.distributed import sharding
from core.nn import nnx_models

MESH_DEVICES = 4  # setup.shard_shape places its array on this many devices


def _run(source: str) -> tuple[dict[str, Any], str]:
    """Execute a program's source as shown to the learner: (its namespace, what it printed)."""
    namespace: dict[str, Any] = {"__name__": "assessment_program"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, "<assessment program>", "exec"), namespace)  # noqa: S102
    return namespace, printed.getvalue().strip()


def _fmt_array(values) -> str:
    return np.array2string(np.asarray(values, dtype=np.float64), precision=4, separator=", ")


# --- Setup & first steps -------------------------------------------------------------------


def _spec_text(entries: tuple) -> str:
    """('data', None, ('x', 'y')) -> "P('data', None, ('x', 'y'))", trailing Nones dropped."""
    entries = list(entries)
    while entries and entries[-1] is None:
        entries.pop()
    parts = [
        "None"
        if e is None
        else repr(e)
        if isinstance(e, str)
        else "(" + ", ".join(map(repr, e)) + ")"
        for e in entries
    ]
    return "P(" + ", ".join(parts) + ")"


def _entry_axes(entry) -> tuple[str, ...]:
    return () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)


class ShardShape(PredictItem):
    """The block of a NamedSharding-placed array each of 4 devices holds."""

    id = "setup.shard_shape"
    phase = "Setup & first steps"
    lesson = "virtual_devices"
    title = "The block each device holds"
    answer_type = "shape"

    DIM_SIZES = (8, 12, 16, 20, 24, 32, 40, 48, 64)  # all divisible by 4: every split is even
    DTYPES = ("float32", "bfloat16", "int8", "float16")
    AXIS_NAMES_1D = (("x",), ("devices",), ("data",))
    AXIS_NAMES_2D = (("x", "y"), ("data", "model"), ("batch", "tensor"))

    def params(self, generator):
        rank = int(generator.integers(2, 4))
        shape = tuple(int(s) for s in generator.choice(self.DIM_SIZES, rank, replace=False))
        dtype = self.DTYPES[int(generator.integers(len(self.DTYPES)))]
        entries: list = [None] * rank
        if generator.integers(2) == 0:
            mesh_shape = (MESH_DEVICES,)
            names = self.AXIS_NAMES_1D[int(generator.integers(len(self.AXIS_NAMES_1D)))]
            entries[int(generator.integers(rank))] = names[0]
        else:
            mesh_shape = (2, 2)
            names = self.AXIS_NAMES_2D[int(generator.integers(len(self.AXIS_NAMES_2D)))]
            a, b = names
            # On a rank-2 array, 'a' on one dim and 'b' on the other splits both by 2: the
            # "neighbouring dimension" mistake would then give the right shape, so not offered.
            layouts = ("one axis", "both axes on one dim") + (("two dims",) if rank == 3 else ())
            layout = layouts[int(generator.integers(len(layouts)))]
            dims = [int(d) for d in generator.permutation(rank)]
            if layout == "one axis":
                entries[dims[0]] = names[int(generator.integers(2))]
            elif layout == "both axes on one dim":
                entries[dims[0]] = (a, b) if generator.integers(2) == 0 else (b, a)
            else:
                entries[dims[0]], entries[dims[1]] = a, b
        return {
            "shape": shape,
            "dtype": dtype,
            "mesh_shape": mesh_shape,
            "axis_names": names,
            "entries": tuple(entries),
        }

    def prompt(self, params):
        mesh_shape, names = params["mesh_shape"], params["axis_names"]
        note = ""
        if len(jax.devices()) < MESH_DEVICES:
            note = (
                f"\n\n*This item needs {MESH_DEVICES} devices and this process has "
                f"{len(jax.devices())}: start it with `JAX_NUM_CPU_DEVICES=8` to have it "
                "checked live.*"
            )
        return (
            f"Four devices form a mesh of shape {mesh_shape} with axis names {names}. "
            "An array is placed on it with a `NamedSharding`:\n\n"
            "```python\n"
            f"mesh = jax.make_mesh({mesh_shape}, {names})\n"
            f"x = jnp.zeros({params['shape']}, dtype=jnp.{params['dtype']})\n"
            f"x = jax.device_put(x, NamedSharding(mesh, {_spec_text(params['entries'])}))\n"
            "x.addressable_shards[0].data.shape  # ?\n"
            "```\n\n"
            "What is the shape of the block each device holds?" + note
        )

    def question(self, seed):
        if len(jax.devices()) >= MESH_DEVICES:
            return super().question(seed)
        # Too few devices to compute it live: show the question and say why it cannot be
        # checked here (grading raises the ValueError of ``live``).
        hint = "a shape: integers separated by commas"
        prompt = self.prompt(self.params(rng(self.id, seed)))
        return Question(prompt, hint, tolerance=self.tolerance_text())

    def live(self, params):
        devices = jax.devices()
        if len(devices) < MESH_DEVICES:
            raise ValueError(
                f"{self.id} places an array on {MESH_DEVICES} devices; this process has "
                f"{len(devices)}. Set JAX_NUM_CPU_DEVICES=8 before JAX starts."
            )
        mesh = sharding.make_mesh(params["mesh_shape"], params["axis_names"])
        spec = jax.sharding.PartitionSpec(*params["entries"])
        x = jax.device_put(
            np.zeros(params["shape"], dtype=jnp.dtype(params["dtype"])),  # host data: no compile
            jax.sharding.NamedSharding(mesh, spec),
        )
        blocks = {tuple(shard.data.shape) for shard in x.addressable_shards}
        if len(blocks) != 1:
            raise ValueError(f"the devices hold blocks of different shapes: {sorted(blocks)}")
        return blocks.pop()

    @staticmethod
    def _divisors(params) -> tuple[int, ...]:
        """How many parts each array dimension is cut into: the product of its axes' sizes."""
        size = dict(zip(params["axis_names"], params["mesh_shape"], strict=True))
        return tuple(math.prod(size[a] for a in _entry_axes(e)) for e in params["entries"])

    def derive(self, params):
        shape, divisors = params["shape"], self._divisors(params)
        block = tuple(n // d for n, d in zip(shape, divisors, strict=True))
        size = dict(zip(params["axis_names"], params["mesh_shape"], strict=True))
        rows = []
        for dim, (n, entry, d) in enumerate(zip(shape, params["entries"], divisors, strict=True)):
            axes = _entry_axes(entry)
            if axes:
                over = " × ".join(f"{a}={size[a]}" for a in axes)
                rows.append(f"| {dim} | {n} | {', '.join(axes)} | {n} / ({over}) = {n // d} |")
            else:
                rows.append(f"| {dim} | {n} | None | {n} (whole) |")
        derivation = (
            "Each array dimension is cut into as many parts as the product of the sizes of "
            f"the mesh axes its PartitionSpec entry names ({_spec_text(params['entries'])}; "
            "missing trailing entries are None: not split):\n\n"
            "| dim | size | mesh axes | block size |\n|---|---|---|---|\n"
            + "\n".join(rows)
            + f"\n\nBlock shape: **{block}**. The dtype ({params['dtype']}) changes the bytes "
            "per block, never its shape. A dimension is divided by its own axes' sizes, not by "
            "the number of devices: the blocks of unnamed mesh axes are replicas."
        )
        return block, derivation

    def wrong(self, params, expected):
        shape, divisors = params["shape"], self._divisors(params)
        rolled = divisors[-1:] + divisors[:-1]  # the split applied one dimension over
        found = {
            "forgot the sharding: the global shape": shape,
            "off by one axis: split the neighbouring dimension": tuple(
                n // d for n, d in zip(shape, rolled, strict=True)
            ),
        }
        by_devices = tuple(
            n // (MESH_DEVICES if d > 1 else 1) for n, d in zip(shape, divisors, strict=True)
        )
        if by_devices != tuple(expected):
            found["divided by the device count, not the mesh axis size"] = by_devices
        return found


# --- Arrays & pure functions ---------------------------------------------------------------


class PlausibleBug(DiagnoseItem):
    """A scoring script with one shape, dtype or update mistake that still prints a number."""

    id = "arrays.plausible_bug"
    phase = "Arrays & pure functions"
    lesson = "shapes_broadcasting"
    title = "A bug that still returns a plausible number"
    defects: ClassVar[dict[str, tuple[str, str]]] = {
        "wrong_axis": (
            "The counts are normalized over the wrong axis",
            "`counts.sum(axis=0, keepdims=True)` sums each class over the examples, so the "
            "rows of `probs` do not sum to 1. Normalize each example over its classes: "
            "`axis=1` (the K axis), with `keepdims=True` so (B, 1) broadcasts against (B, K).",
        ),
        "broadcast_column": (
            "The targets broadcast against the predictions into a (B, B) matrix",
            "`targets` is a (B, 1) column, and (B,) minus (B, 1) broadcasts to (B, B): the mean "
            "then averages every prediction against every target. Keep both (B,) (a flat list, "
            "or `targets[:, 0]`), or check `(pred - targets).shape` before reducing.",
        ),
        "discarded_update": (
            "An update's result is thrown away",
            "`probs.at[0].set(...)` returns a new array and leaves `probs` as it was: JAX arrays "
            "are immutable. Assign it: `probs = probs.at[0].set(...)`.",
        ),
        "integer_dtype": (
            "An integer dtype silently truncates the uniform probabilities",
            "`jnp.full_like(counts[0], 1 / K)` takes its dtype from `counts`, which is int32: "
            "1/K is truncated to 0, so example 0 gets all-zero probabilities. Take a float "
            "template (`jnp.full_like(probs[0], 1 / K)`) or pass `dtype=jnp.float32`.",
        ),
    }
    PROBES: ClassVar[dict[str, tuple[str, str]]] = {
        "wrong_axis": ("probs.sum(axis=1)", "each example's probabilities summed"),
        "broadcast_column": ("(pred - targets).shape", "the shape that is averaged"),
        "discarded_update": ("probs[0]", "example 0's probabilities"),
        "integer_dtype": ("probs[0]", "example 0's probabilities"),
    }

    def params(self, generator):
        # Fixed sizes (the numbers change with the seed): the eager operations of the programs
        # compile once per shape, so every seed after the first runs from JAX's caches.
        batch, classes = 5, 4
        counts = generator.integers(1, 10, size=(batch, classes))
        while len(set(counts[0])) == 1:  # example 0 must not already be uniform
            counts[0] = generator.integers(1, 10, size=classes)
        values = np.sort(generator.choice(np.arange(1, 9), classes, replace=False))
        updated = int(generator.integers(classes))
        new_value = float(values[updated] + generator.choice([0.25, 0.5, 0.75]))
        targets = np.round(generator.uniform(values.min(), values.max(), batch), 1)
        return {
            "counts": counts.tolist(),
            "values": [int(v) for v in values],
            "updated": updated,
            "new_value": new_value,
            "targets": [float(t) for t in targets],
        }

    def prompt(self, params):
        batch, classes = len(params["counts"]), len(params["values"])
        return (
            f"This script scores {batch} examples (B = {batch}) labelled by votes over "
            f"K = {classes} classes: each example's votes become probabilities, example 0 "
            "(not labelled yet) gets the uniform distribution, and the mean squared error "
            "of the expected value against the measured targets is printed. It runs and prints "
            "a plausible number, but one line is wrong. Which mistake is it?"
        )

    def program(self, defect, params):
        classes = len(params["values"])
        values = "[" + ", ".join(f"{v:.1f}" for v in params["values"]) + "]"
        if defect == "broadcast_column":
            targets = "[" + ", ".join(f"[{t}]" for t in params["targets"]) + "]"
        else:
            targets = "[" + ", ".join(str(t) for t in params["targets"]) + "]"
        axis = 0 if defect == "wrong_axis" else 1
        template = "counts[0]" if defect == "integer_dtype" else "probs[0]"
        uniform = f"probs.at[0].set(jnp.full_like({template}, 1 / {classes}))"
        if defect != "discarded_update":
            uniform = f"probs = {uniform}"
        counts = "[" + ", ".join(str(row) for row in params["counts"]) + "]"
        return (
            "import jax.numpy as jnp\n"
            "\n"
            f"counts = jnp.array({counts})  # (B, K) votes\n"
            f"values = jnp.array({values})  # (K,) what each class is worth\n"
            f"targets = jnp.array({targets})  # measured value per example\n"
            "\n"
            f"values = values.at[{params['updated']}].set({params['new_value']})"
            f"  # class {params['updated']} was re-measured\n"
            f"probs = counts / counts.sum(axis={axis}, keepdims=True)  # (B, K)\n"
            f"{uniform}  # example 0 is unlabelled: uniform\n"
            "pred = probs @ values  # (B,) expected value per example\n"
            "mse = jnp.mean((pred - targets) ** 2)\n"
            'print(f"mse = {float(mse):.4f}")\n'
        )

    def fixed_program(self, params) -> str:
        return self.program("none", params)

    def evidence(self, defect, params):
        shown, shown_out = _run(self.program(defect, params))
        fixed, fixed_out = _run(self.fixed_program(params))
        probe, meaning = self.PROBES[defect]
        probe_shown = eval(probe, shown)  # noqa: S307 (our own fixed expression)
        probe_fixed = eval(probe, fixed)  # noqa: S307
        mse_shown, mse_fixed = float(shown["mse"]), float(fixed["mse"])

        def show(value):
            if isinstance(value, tuple):
                return str(value)
            return f"{_fmt_array(value)} ({value.dtype})"

        markdown = (
            "Both programs were run here:\n\n"
            "| | the program shown | the fixed program |\n|---|---|---|\n"
            f"| printed | `{shown_out}` | `{fixed_out}` |\n"
            f"| `{probe}` ({meaning}) | `{show(probe_shown)}` | `{show(probe_fixed)}` |\n\n"
            f"The mean squared error is off by {abs(mse_shown - mse_fixed):.4g} and nothing "
            "raised: the mistake is only visible if you check a shape, a dtype or a sum."
        )
        facts = {
            "the defect changes the result": abs(mse_shown - mse_fixed)
            > 1e-6 * max(abs(mse_fixed), 1.0),
            "the probe differs between the programs": show(probe_shown) != show(probe_fixed),
            "the fixed program's probabilities sum to 1 per example": bool(
                np.allclose(np.asarray(fixed["probs"]).sum(axis=1), 1.0, atol=1e-6)
            ),
        }
        return Evidence(markdown, facts)


# --- JAX transformations -------------------------------------------------------------------


RECOMPILE_SHAPES = ((4,), (8,), (2, 4), (4, 2), (2, 2, 2), (3, 4))
RECOMPILE_DTYPES = ("float32", "int32", "bfloat16")


def _call_text(call) -> str:
    shape, dtype, power = call
    return f"f(jnp.ones({shape}, jnp.{dtype}), power={power})"


class Recompiles(PredictItem):
    """How many times a jitted function with a static argument is traced."""

    id = "transformations.recompiles"
    phase = "JAX transformations"
    lesson = "tracing_recompilation"
    title = "How many times jit traces"
    rel_tol = 0.0
    abs_tol = 0.5

    def params(self, generator):
        while True:
            shapes = [RECOMPILE_SHAPES[i] for i in generator.choice(6, 3, replace=False)]
            dtypes = [RECOMPILE_DTYPES[i] for i in generator.choice(3, 2, replace=False)]
            powers = sorted(int(p) for p in generator.choice([1, 2, 3], 2, replace=False))
            pool = list(itertools.product(shapes, dtypes, powers))
            calls_count = int(generator.integers(6, 11))
            distinct = int(generator.integers(3, min(calls_count, 7)))  # <= 6 compiles
            signatures = [pool[i] for i in generator.choice(len(pool), distinct, replace=False)]
            # every signature once, then repeats, in a shuffled order
            extra = [
                signatures[i] for i in generator.integers(distinct, size=calls_count - distinct)
            ]
            calls = [(signatures + extra)[i] for i in generator.permutation(calls_count)]
            if len({c[0] for c in calls}) < distinct:  # "distinct shapes" must be a wrong answer
                return {"calls": tuple(calls)}

    def prompt(self, params):
        calls = "\n".join(_call_text(c) for c in params["calls"])
        return (
            "```python\n"
            "import functools\n\nimport jax\nimport jax.numpy as jnp\n\n\n"
            '@functools.partial(jax.jit, static_argnames="power")\n'
            "def f(x, power):\n"
            "    return jnp.sum(x**power)\n\n\n"
            f"{calls}\n"
            "```\n\n"
            f"These {len(params['calls'])} calls run in a fresh process. How many times is `f` "
            "traced (and compiled)?"
        )

    def live(self, params):
        traces = []

        def f(x, power):
            traces.append((x.shape, x.dtype, power))  # runs only while JAX traces
            return jnp.sum(x**power)

        jitted = jax.jit(f, static_argnames="power")
        for shape, dtype, power in params["calls"]:
            # NumPy ones: the same signature as jnp.ones, without compiling jnp.ones itself
            jitted(np.ones(shape, jnp.dtype(dtype)), power=power).block_until_ready()
        return float(len(traces))

    def derive(self, params):
        seen: dict[tuple, int] = {}
        rows = []
        for number, call in enumerate(params["calls"], start=1):
            if call in seen:
                verdict = f"cached: same signature as call {seen[call]}"
            else:
                seen[call] = number
                verdict = f"**new signature: trace {len(seen)}**"
            shape, dtype, power = call
            rows.append(f"| {number} | {shape} | {dtype} | {power} | {verdict} |")
        count = len(seen)
        derivation = (
            "`jax.jit` traces once per new signature: the shapes and dtypes of the array "
            "arguments plus the values of the static arguments (values of traced arrays do not "
            "matter):\n\n| call | shape | dtype | power (static) | |\n|---|---|---|---|---|\n"
            + "\n".join(rows)
            + f"\n\n{len(params['calls'])} calls, {count} distinct (shape, dtype, power) "
            f"signatures: **{count} traces**. A static argument's every new value is a new "
            "program, and so is a new dtype."
        )
        return float(count), derivation

    def wrong(self, params, expected):
        calls = params["calls"]
        found = {
            "one trace per call": float(len(calls)),
            "distinct shapes only (dtype and static value ignored)": float(
                len({c[0] for c in calls})
            ),
        }
        ignoring_static = float(len({c[:2] for c in calls}))
        if abs(ignoring_static - expected) > 0.5:
            found["distinct shapes and dtypes (the static argument ignored)"] = ignoring_static
        return found


# --- State, randomness & control flow ------------------------------------------------------


class KeyReuse(DiagnoseItem):
    """A program whose PRNG keys give identical draws where they should be independent."""

    id = "control_flow.key_reuse"
    phase = "State, randomness & control flow"
    lesson = "random_keys"
    title = "Where the random draws repeat"
    defects: ClassVar[dict[str, tuple[str, str]]] = {
        "same_key": (
            "One key is used for two draws that should be independent",
            "`w_b` is drawn with `k_a`, the key that drew `w_a`: same key and shape give the "
            "same numbers, so both layers start identical. Give every draw its own key "
            "(`w_b = jax.random.normal(k_b, ...)`).",
        ),
        "parent_reused": (
            "A key is used again after it was split",
            "`key` was already split into `k_init` and `k_loop`, and the noise loop starts "
            "from `key` again: its first split re-creates `k_init`, whose split gives `k_b`, "
            "so the second noise step repeats `w_b`. Once a key is split, use only its "
            "children (start the loop from `k_loop`).",
        ),
        "carry_not_advanced": (
            "The loop's carried key never advances",
            "`_, sub = jax.random.split(k)` throws the new key away and keeps `k`, so every "
            "step splits the same key and draws the same noise. Carry the new key: "
            "`k, sub = jax.random.split(k)` (in a `lax.scan`, return it as the carry).",
        ),
    }

    def params(self, generator):
        return {
            "key_seed": int(generator.integers(0, 1000)),
            "width": int(generator.integers(3, 5)),  # few sizes: eager ops compile per shape
            "steps": int(generator.integers(3, 5)),
        }

    def prompt(self, params):
        return (
            f"This program should draw two independently initialized weight vectors `w_a` and "
            f"`w_b` (D = {params['width']}) and T = {params['steps']} steps of fresh noise in "
            "a loop that carries its key. It runs, but one line breaks the key discipline of "
            "`jax.random`, so some draws repeat. Which mistake is it?"
        )

    def program(self, defect, params):
        draw_b = "k_a" if defect == "same_key" else "k_b"
        carry = "_" if defect == "carry_not_advanced" else "k"
        loop_from = "key" if defect == "parent_reused" else "k_loop"
        width, steps = params["width"], params["steps"]
        return (
            "import jax\n"
            "import jax.numpy as jnp\n"
            "\n"
            f"key = jax.random.key({params['key_seed']})\n"
            "k_init, k_loop = jax.random.split(key)\n"
            "k_a, k_b = jax.random.split(k_init)\n"
            f"w_a = jax.random.normal(k_a, ({width},))  # layer a's weights\n"
            f"w_b = jax.random.normal({draw_b}, ({width},))  # layer b's, independent of w_a\n"
            "\n"
            "\n"
            "def noise_steps(k, steps):\n"
            f'    """(steps, {width}) noise: a fresh key for every step."""\n'
            "    rows = []\n"
            "    for _ in range(steps):\n"
            f"        {carry}, sub = jax.random.split(k)\n"
            f"        rows.append(jax.random.normal(sub, ({width},)))\n"
            "    return jnp.stack(rows)\n"
            "\n"
            "\n"
            f"noise_TD = noise_steps({loop_from}, {steps})\n"
        )

    # (description, maximum |difference| between the two arrays): 0 means identical draws
    @staticmethod
    def _gaps(namespace) -> dict[str, float]:
        w_a, w_b = np.asarray(namespace["w_a"]), np.asarray(namespace["w_b"])
        noise = np.asarray(namespace["noise_TD"])
        return {
            "same_key": float(np.max(np.abs(w_a - w_b))),
            "parent_reused": float(np.max(np.abs(noise[1] - w_b))),
            "carry_not_advanced": float(np.max(np.abs(noise[1:] - noise[0]))),
        }

    LABELS: ClassVar[dict[str, str]] = {
        "same_key": "largest difference between w_a and w_b",
        "parent_reused": "largest difference between noise_TD[1] and w_b",
        "carry_not_advanced": "largest difference between any noise_TD[t] and noise_TD[0]",
    }

    def evidence(self, defect, params):
        shown, _ = _run(self.program(defect, params))
        fixed, _ = _run(self.program("none", params))
        gaps_shown, gaps_fixed = self._gaps(shown), self._gaps(fixed)
        rows = "\n".join(
            f"| {self.LABELS[d]} | {gaps_shown[d]:.4g} | {gaps_fixed[d]:.4g} |" for d in self.LABELS
        )
        arrays = {
            "same_key": ("w_a", "w_b"),
            "parent_reused": ("noise_TD[1]", "w_b"),
            "carry_not_advanced": ("noise_TD[0]", "noise_TD[1]"),
        }[defect]
        listing = "\n".join(
            f"- `{name}` = shown `{_fmt_array(eval(name, shown))}`, "  # noqa: S307
            f"fixed `{_fmt_array(eval(name, fixed))}`"  # noqa: S307
            for name in arrays
        )
        markdown = (
            "Both programs were run here (0 means two draws are bit-for-bit identical):\n\n"
            "| | the program shown | the fixed program |\n|---|---|---|\n"
            f"{rows}\n\n{listing}\n\n"
            "Identical draws look random one by one; only comparing them shows the repeat."
        )
        facts = {
            "the program shown repeats a draw": gaps_shown[defect] == 0.0,
            "the fixed program repeats no draw": min(gaps_fixed.values()) > 0.0,
            "the defect changes the result": any(
                not np.array_equal(np.asarray(shown[n]), np.asarray(fixed[n]))
                for n in ("w_a", "w_b", "noise_TD")
            ),
        }
        return Evidence(markdown, facts)


# --- Math & optimization -------------------------------------------------------------------


# Rotations with entries k/5 or k/25 (Pythagorean triples; unit quaternions (4,2,2,1)/5 in some
# order and signs): with eigenvalues that are multiples of 1/16, A = Q diag(lambda) Q^T has
# entries that are exact multiples of 1/10000, so the four decimals shown are A itself.
TRIPLES = ((3, 4, 5), (4, 3, 5), (7, 24, 25), (24, 7, 25))
EIGEN_STEP = fractions.Fraction(1, 16)


def _rotation(generator, n: int) -> list[list[fractions.Fraction]]:
    if n == 2:
        p, q, r = TRIPLES[int(generator.integers(len(TRIPLES)))]
        s = int(generator.choice([-1, 1]))
        c, s = fractions.Fraction(p, r), fractions.Fraction(s * q, r)
        return [[c, -s], [s, c]]
    w, x, y, z = (
        int(v) * int(generator.choice([-1, 1])) for v in generator.permutation([4, 2, 2, 1])
    )
    m = fractions.Fraction(1, 25)
    return [
        [m * (w * w + x * x - y * y - z * z), m * 2 * (x * y - w * z), m * 2 * (x * z + w * y)],
        [m * 2 * (x * y + w * z), m * (w * w - x * x + y * y - z * z), m * 2 * (y * z - w * x)],
        [m * 2 * (x * z - w * y), m * 2 * (y * z + w * x), m * (w * w - x * x - y * y + z * z)],
    ]


@jax.jit  # one compile per matrix size, instead of one per eager operation
def _hessian_eigenvalues(a_NN: jax.Array, b_N: jax.Array) -> jax.Array:
    """The eigenvalues (N,) of the Hessian of f(x) = 1/2 x^T A x + b^T x, by jax.hessian."""

    def f(x_N):
        return 0.5 * x_N @ a_NN @ x_N + b_N @ x_N

    return jnp.linalg.eigvalsh(jax.hessian(f)(jnp.zeros_like(b_N)))


class StableLearningRate(PredictItem):
    """The largest learning rate for which gradient descent on a quadratic converges."""

    id = "math_optimization.stable_learning_rate"
    phase = "Math & optimization"
    lesson = "curvature_hessians"
    title = "The largest stable learning rate"

    def params(self, generator):
        n = int(generator.integers(2, 4))
        # lambda_max in [4, 12], lambda_min in [0.5, 2] (so 2/lambda_min is far from the
        # answer), any middle one strictly between; all multiples of 1/16.
        top = int(generator.integers(64, 193))
        bottom = int(generator.integers(8, 33))
        middle = [int(generator.integers(bottom + 1, top))] if n == 3 else []
        eigen = [EIGEN_STEP * k for k in [top, *middle, bottom]]
        eigen = [eigen[i] for i in generator.permutation(n)]
        q = _rotation(generator, n)
        a = [
            [sum(q[i][k] * eigen[k] * q[j][k] for k in range(n)) for j in range(n)]
            for i in range(n)
        ]
        b = [round(float(v), 1) for v in generator.uniform(-3, 3, n)]
        return {
            "A": tuple(tuple(float(v) for v in row) for row in a),
            "A_exact": tuple(tuple(row) for row in a),
            "eigenvalues": tuple(float(v) for v in eigen),
            "b": tuple(b),
        }

    def prompt(self, params):
        rows = ",\n     ".join(
            "[" + ", ".join(f"{v:.4f}" for v in row) + "]" for row in params["A"]
        )
        return (
            "Gradient descent x ← x − η ∇f(x) runs on\n\n"
            "f(x) = ½ xᵀ A x + bᵀ x, with\n\n"
            f"```\nA = [{rows}]\nb = {list(params['b'])}\n```\n\n"
            "(A is symmetric positive definite; its entries are exact as shown.) What is the "
            "largest learning rate η for which gradient descent converges from every starting "
            "point (it converges for every η below your number, diverges above it)? You may "
            "use NumPy."
        )

    def live(self, params):
        with jax.enable_x64(True):
            a = jnp.asarray(params["A"], dtype=jnp.float64)
            b = jnp.asarray(params["b"], dtype=jnp.float64)
            return float(2.0 / jnp.max(_hessian_eigenvalues(a, b)))

    def derive(self, params):
        eigen = np.asarray(params["eigenvalues"], dtype=np.float64)
        top = float(eigen.max())
        value = 2.0 / top
        shown = ", ".join(f"{v:g}" for v in sorted(eigen))
        derivation = (
            "The Hessian of f is A everywhere (b only moves the minimum). Along eigenvector i of "
            "A, gradient descent multiplies the error by (1 − η λᵢ) each step, so it converges "
            "when every |1 − η λᵢ| < 1, i.e. η < 2 / λ_max.\n\n"
            f"Eigenvalues of A: {shown}; λ_max = {top:g}.\n\n"
            f"η_max = 2 / λ_max = 2 / {top:g} = **{value:.6g}**.\n\n"
            "The steepest direction sets the limit; the flattest one (λ_min) only sets how "
            "slowly the rest converges."
        )
        return value, derivation

    def wrong(self, params, expected):
        eigen = np.asarray(params["eigenvalues"], dtype=np.float64)
        found = {
            "1 / lambda_max (the factor 2 forgotten)": 1.0 / eigen.max(),
            "2 / lambda_min (the flattest direction)": 2.0 / eigen.min(),
        }
        diagonal = 2.0 / max(params["A"][i][i] for i in range(len(eigen)))
        if abs(diagonal - expected) > 0.05 * expected:
            found["2 / the largest diagonal entry (not an eigenvalue)"] = diagonal
        return found


# --- Neural network training ---------------------------------------------------------------


class ParameterCount(PredictItem):
    """The number of trainable parameters of a small Flax NNX model."""

    id = "nn_training.parameter_count"
    phase = "Neural network training"
    lesson = "flax_nnx"
    title = "Parameters of an NNX model"
    rel_tol = 0.0
    abs_tol = 0.5

    WIDTHS = (6, 8, 10, 12, 16, 20, 24, 32, 48, 64)
    BUILD = "model = Net(nnx.Rngs(0))"

    def params(self, generator):
        linears = int(generator.integers(2, 5))
        sizes = [int(generator.choice(self.WIDTHS)) for _ in range(linears)]
        sizes.append(int(generator.integers(2, 11)))  # classes
        hidden = range(linears - 1)  # layers followed by an activation
        layer_norm = tuple(bool(generator.integers(2)) for _ in hidden)
        no_bias = int(generator.integers(linears - 1)) if generator.integers(3) == 0 else -1
        return {
            "sizes": tuple(sizes),
            "layer_norm": layer_norm,  # after hidden layer i
            "no_bias": no_bias,  # the index of a hidden layer built with use_bias=False, or -1
            "dropout": bool(generator.integers(2)),
        }

    def source(self, params) -> str:
        sizes, linears = params["sizes"], len(params["sizes"]) - 1
        init, call = [], []
        for i in range(linears):
            bias = ", use_bias=False" if i == params["no_bias"] else ""
            init.append(
                f"        self.linear{i} = nnx.Linear({sizes[i]}, {sizes[i + 1]}{bias}, rngs=rngs)"
            )
            call.append(f"        h = self.linear{i}(h)")
            if i < linears - 1:
                if params["layer_norm"][i]:
                    init.append(f"        self.norm{i} = nnx.LayerNorm({sizes[i + 1]}, rngs=rngs)")
                    call.append(f"        h = self.norm{i}(h)")
                call.append("        h = nnx.relu(h)")
        if params["dropout"]:
            init.append("        self.dropout = nnx.Dropout(0.1, rngs=rngs)")
            call.insert(len(call) - 1, "        h = self.dropout(h)")
        return (
            "from flax import nnx\n\n\n"
            "class Net(nnx.Module):\n"
            "    def __init__(self, rngs: nnx.Rngs):\n"
            + "\n".join(init)
            + "\n\n    def __call__(self, x):\n        h = x\n"
            + "\n".join(call)
            + "\n        return h\n\n\n"
            f"{self.BUILD}\n"
        )

    def prompt(self, params):
        return (
            f"```python\n{self.source(params)}```\n\n"
            "How many trainable parameters (the elements of `nnx.state(model, nnx.Param)`) "
            "does `model` have?"
        )

    def live(self, params):
        # The class as shown, built abstractly (shapes only, no initializers run: fast).
        namespace, _ = _run(self.source(params).replace(self.BUILD, ""))
        net = namespace["Net"]
        model = nnx.eval_shape(lambda: net(nnx.Rngs(0)))
        return float(nnx_models.count_params(model))

    def _terms(self, params) -> list[tuple[str, int, str]]:
        """(layer, parameters, formula) per layer that has any."""
        sizes, terms = params["sizes"], []
        for i in range(len(sizes) - 1):
            fan_in, fan_out = sizes[i], sizes[i + 1]
            if i == params["no_bias"]:
                terms.append((f"linear{i}", fan_in * fan_out, f"{fan_in}×{fan_out} (no bias)"))
            else:
                formula = f"{fan_in}×{fan_out} + {fan_out}"
                terms.append((f"linear{i}", fan_in * fan_out + fan_out, formula))
            if i < len(sizes) - 2 and params["layer_norm"][i]:
                terms.append((f"norm{i}", 2 * fan_out, f"2×{fan_out} (scale and bias)"))
        return terms

    def derive(self, params):
        terms = self._terms(params)
        total = sum(count for _, count, _ in terms)
        rows = "\n".join(f"| {name} | {formula} | {count} |" for name, count, formula in terms)
        derivation = (
            "An `nnx.Linear(in, out)` holds an (in, out) kernel and an (out,) bias "
            "(none with `use_bias=False`); an `nnx.LayerNorm(d)` a (d,) scale and a (d,) "
            "bias; `relu` and `Dropout` hold no parameters.\n\n"
            f"| layer | in×out + out | parameters |\n|---|---|---|\n{rows}\n\n"
            f"Total: {' + '.join(str(c) for _, c, _ in terms)} = **{total}**."
        )
        return float(total), derivation

    def wrong(self, params, expected):
        sizes = params["sizes"]
        biases = sum(sizes[i + 1] for i in range(len(sizes) - 1) if i != params["no_bias"])
        last = len(sizes) - 2
        last_layer = sizes[last] * sizes[last + 1] + (
            sizes[last + 1] if last != params["no_bias"] else 0
        )
        found = {
            "biases forgotten": expected - biases,
            "the output layer left out (hidden layers only)": expected - last_layer,
        }
        norms = sum(2 * sizes[i + 1] for i, on in enumerate(params["layer_norm"]) if on)
        if norms:
            found["LayerNorm's scale and bias left out"] = expected - norms
        return found


ITEMS: tuple[Item, ...] = (
    ShardShape(),
    PlausibleBug(),
    Recompiles(),
    KeyReuse(),
    StableLearningRate(),
    ParameterCount(),
)
