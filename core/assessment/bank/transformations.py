"""The assessment item of the phase "JAX transformations".

- ``transformations.recompiles`` (predict a count): how often a jitted function is traced.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from core.assessment.items import Item, PredictItem

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


ITEMS: tuple[Item, ...] = (Recompiles(),)
