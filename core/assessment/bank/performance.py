"""The assessment items of the phase "Performance diagnosis".

- ``performance.roofline_bound`` (predict): the roofline bound of a matmul.
- ``performance.host_sync`` (diagnose): a training loop with a host sync, a recompile or an
  unblocked timer; the evidence counts compiles, host reads and device waits (never time).

Every figure a question uses comes from the course's TPU library (core/tpu/specs.py, with
its sources; core/tpu/cloud_tpu.py for slice names) and every expected answer is computed:
``live`` with the library, ``derive`` by the closed form in plain Python, independently.
"""

from __future__ import annotations

import functools
import os
import time

from core.assessment.bank.common import cite, pick, run_program
from core.assessment.items import DiagnoseItem, Evidence, Item, PredictItem
from core.perf import roofline
from core.tpu import specs


def _distinct(wrong: dict[str, float], expected: float, margin: float) -> dict[str, float]:
    """The planted mistakes that give another number than the right one for these params
    (forgetting the 2 of 2MNK changes nothing when the matmul is memory-bound)."""
    return {
        name: value
        for name, value in wrong.items()
        if abs(value - expected) > margin * max(abs(expected), 1e-300)
    }


def _alternatives(figure: specs.Figure, name: str) -> str:
    """Other published values of a figure, named with their sources ("" when none)."""
    if not figure.alternatives:
        return ""
    others = ", ".join(f"{value:.4g} ({source})" for value, source in figure.alternatives)
    return f" (other published {name}: {others}; the course uses {figure.value:.4g})"


class RooflineBound(PredictItem):
    """The roofline lower bound on a bf16 matmul's time on one TPU chip."""

    id = "performance.roofline_bound"
    phase = "Performance diagnosis"
    lesson = "hlo_roofline"
    title = "Roofline bound of a matmul on a TPU chip"
    units = "µs"
    rel_tol = 0.02
    itemsize = 2  # bfloat16 inputs and output

    def params(self, generator):
        generation = pick(generator, specs.GENERATIONS)
        spec = specs.chip(generation)
        compute_bound = bool(generator.integers(2))  # both kinds occur over the seeds
        for _ in range(1000):
            m = int(2 ** generator.integers(3, 14))
            k = int(2 ** generator.integers(10, 15))
            n = int(2 ** generator.integers(10, 15))
            intensity = (m * n * k) / (m * k + k * n + m * n)  # 2MNK / (2 bytes x elements)
            ratio = intensity / spec.ridge_point
            # away from the ridge, so the "other bound" mistake is a different number
            if (compute_bound and ratio > 1.5) or (not compute_bound and ratio < 0.67):
                return {"generation": generation, "m": m, "k": k, "n": n}
        raise RuntimeError("no matmul shape in range")  # never reached in practice

    def prompt(self, p):
        spec = specs.chip(p["generation"])
        return (
            f"A **bfloat16** matmul (M, K) @ (K, N) with M = **{p['m']}**, K = **{p['k']}**, "
            f"N = **{p['n']}** (the output is bfloat16 too) runs on one **{p['generation']}** "
            f"chip: bf16 peak {spec.bf16_flops.value:.4g} FLOP/s, HBM bandwidth "
            f"{spec.hbm_bandwidth.value:.4g} B/s (source: "
            f"{', '.join(dict.fromkeys((spec.bf16_flops.source, spec.hbm_bandwidth.source)))})."
            "\n\n"
            "What is the **roofline lower bound** on its time, in **microseconds**? "
            "(Each operand and the result cross HBM once.)"
        )

    def live(self, p):
        spec = specs.chip(p["generation"])
        cost = roofline.matmul_cost(p["m"], p["n"], p["k"], self.itemsize)
        seconds = roofline.roofline_seconds(cost, spec.bf16_flops.value, spec.hbm_bandwidth.value)
        return seconds * 1e6

    def _times(self, p) -> tuple[float, float, float, float]:
        """(FLOPs, bytes, compute µs, memory µs) by the closed form."""
        spec = specs.chip(p["generation"])
        flops = 2.0 * p["m"] * p["n"] * p["k"]
        moved = float(p["m"] * p["k"] + p["k"] * p["n"] + p["m"] * p["n"]) * self.itemsize
        return (
            flops,
            moved,
            flops / spec.bf16_flops.value * 1e6,
            moved / spec.hbm_bandwidth.value * 1e6,
        )

    def derive(self, p):
        spec = specs.chip(p["generation"])
        flops, moved, compute_us, memory_us = self._times(p)
        bound_us = max(compute_us, memory_us)
        intensity = flops / moved
        ridge = spec.bf16_flops.value / spec.hbm_bandwidth.value
        kind = "compute-bound" if compute_us >= memory_us else "memory-bound"
        m, k, n = p["m"], p["k"], p["n"]
        text = (
            f"FLOPs = 2 M N K = 2 x {m} x {n} x {k} = {flops:.4g}\n\n"
            f"Bytes = (M K + K N + M N) x 2 B = ({m * k:,} + {k * n:,} + {m * n:,}) x 2 "
            f"= {moved:.4g} B\n\n"
            f"Compute time = {flops:.4g} / {spec.bf16_flops.value:.4g} FLOP/s "
            f"= {compute_us:.4g} µs; memory time = {moved:.4g} / "
            f"{spec.hbm_bandwidth.value:.4g} B/s = {memory_us:.4g} µs\n\n"
            f"Bound = max of the two = **{bound_us:.4g} µs**: **{kind}**. Arithmetic "
            f"intensity {flops:.4g} / {moved:.4g} = {intensity:.4g} FLOP/byte against the "
            f"{p['generation']} ridge point {spec.bf16_flops.value:.4g} / "
            f"{spec.hbm_bandwidth.value:.4g} = {ridge:.4g} FLOP/byte.\n\n"
            f"Sources of the peak and the bandwidth: {cite(spec.bf16_flops, spec.hbm_bandwidth)}"
            f"{_alternatives(spec.hbm_bandwidth, 'HBM bandwidth')}.\n\n"
            "Lesson: a kernel can be no faster than the slower of computing and moving its "
            "bytes; below the ridge point the bandwidth sets the time (a small-M matmul, as "
            "in decoding), above it the MXUs do."
        )
        return bound_us, text

    def wrong(self, p, expected):
        flops, moved, compute_us, memory_us = self._times(p)
        spec = specs.chip(p["generation"])
        wrong = {
            "the other bound (min instead of max)": min(compute_us, memory_us),
            "MNK FLOPs (the 2 forgotten)": max(compute_us / 2, memory_us),
            "bits for bytes": max(compute_us, moved * 8 / spec.hbm_bandwidth.value * 1e6),
        }
        return _distinct(wrong, expected, margin=2.5 * self.rel_tol)


_ARRAY_MODULE = os.path.join("jax", "_src", "array.py")


@functools.cache
def _count_loop(source: str) -> dict[str, int]:
    """Run the loop program and count, deterministically (never wall time):

    - compiles: entries in ``train_step``'s jit cache (one per signature it compiled);
    - reads: device arrays copied into Python values between the two clock reads (calls of
      ``jax.Array._value``, the one path ``float()``, ``.item()``, ``print`` and ``np.asarray``
      take from a device buffer to the host);
    - waits: ``block_until_ready`` calls the program makes between the two clock reads.

    The transfer guard (``jax.transfer_guard_device_to_host("disallow")``) would raise on a
    TPU, but on the CPU backend the device is host memory and it never fires, so the reads
    are counted at the array's own host-copy method instead.
    """
    filename = "<loop program>"
    state = {"clocks": 0, "reads": 0, "waits": 0}

    def hook(frame, event, arg):
        timed = state["clocks"] == 1
        code = frame.f_code
        if event == "c_call" and arg is time.perf_counter and code.co_filename == filename:
            state["clocks"] += 1
        elif event == "call" and timed:
            if code.co_name == "_value" and code.co_filename.endswith(_ARRAY_MODULE):
                state["reads"] += 1
            elif (
                code.co_name == "block_until_ready"
                and frame.f_back is not None
                and frame.f_back.f_code.co_filename == filename
            ):
                state["waits"] += 1

    namespace = run_program(source, filename, hook)
    return {
        "compiles": int(namespace["train_step"]._cache_size()),
        "reads": state["reads"],
        "waits": state["waits"],
        "clocks": state["clocks"],
    }


class HostSync(DiagnoseItem):
    id = "performance.host_sync"
    phase = "Performance diagnosis"
    lesson = "recompilation_host_sync"
    title = "A slow training loop: host sync, recompiles, or the timer"
    defects = {
        "host_sync": (
            "A host sync every step: float(loss) inside the loop waits for the device",
            "`float(loss)` copies the loss to the host, so Python waits for every step to "
            "finish before dispatching the next: the device idles between steps. Keep the "
            "losses as device arrays (`losses.append(loss)`) and read them once after the "
            "loop (`jax.device_get(losses)`), or log every N steps.",
        ),
        "recompile": (
            "The step recompiles every step: the step number is a static argument",
            "`static_argnames='step'` makes each new step value a new signature, so jit "
            "traces and compiles `train_step` once per step (the jit cache grows by one per "
            "call). Pass the step as an ordinary (traced) argument; only values that change "
            "the program's structure belong in static arguments.",
        ),
        "unblocked_timer": (
            "The timer stops before the device is done: no block_until_ready",
            "JAX dispatches asynchronously: the loop returns as soon as the steps are queued, "
            "so the clock measures dispatch, not compute. Call `jax.block_until_ready(w)` "
            "before reading the clock (and time after a warm-up step, so compile time is "
            "not in the number).",
        ),
    }

    def params(self, generator):
        return {
            "steps": int(generator.integers(3, 5)),  # the recompile variant compiles once per step
            "batch": int(generator.choice([32, 64, 128])),
            "features": int(generator.integers(4, 17)),
            "learning_rate": float(generator.choice([0.02, 0.05, 0.1])),
            "data_seed": int(generator.integers(0, 1000)),
        }

    def prompt(self, params):
        return (
            f"This loop trains a linear model for {params['steps']} steps and reports how long "
            "the steps took. It has one defect the course warns about: its numbers look "
            "plausible, but either the loop is slower than it needs to be or its timing is "
            "wrong. Which one is it?"
        )

    def program(self, defect, params):
        decorator = (
            '@functools.partial(jax.jit, static_argnames="step")'
            if defect == "recompile"
            else "@jax.jit"
        )
        imports = "import functools\nimport time" if defect == "recompile" else "import time"
        record = "losses.append(float(loss))" if defect == "host_sync" else "losses.append(loss)"
        block = "" if defect == "unblocked_timer" else "jax.block_until_ready(w)\n"
        p = params
        return (
            f"{imports}\n\nimport jax\nimport jax.numpy as jnp\nimport numpy as np\n\n\n"
            f"{decorator}\n"
            "def train_step(w, x, y, step):\n"
            f"    lr = {p['learning_rate']} / (1.0 + 0.1 * step)  # a decaying learning rate\n"
            "    loss, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)\n"
            "    return w - lr * grad, loss\n\n\n"
            f"data = np.random.default_rng({p['data_seed']}).normal(size=({p['batch']}, "
            f"{p['features']})).astype(np.float32)\n"
            "x = jnp.asarray(data)  # on the device once, before the loop\n"
            f"y = jnp.asarray(data @ np.arange({p['features']}, dtype=np.float32))\n"
            f"w = jnp.zeros({p['features']})\n"
            "losses = []\n"
            "start = time.perf_counter()\n"
            f"for step in range({p['steps']}):\n"
            "    w, loss = train_step(w, x, y, step)\n"
            f"    {record}\n"
            f"{block}"
            "seconds = time.perf_counter() - start\n"
            f'print(f"{p["steps"]} steps in {{seconds * 1e3:.1f}} ms, '
            'last loss {float(losses[-1]):.4f}")\n'
        )

    def evidence(self, defect, params):
        steps = params["steps"]
        planted = _count_loop(self.program(defect, params))
        fixed = _count_loop(self.program("fixed", params))
        rows = (
            ("compiles of `train_step` (entries in its jit cache)", "compiles"),
            ("device values read on the host while the clock runs", "reads"),
            ("`block_until_ready` waits while the clock runs", "waits"),
        )
        table = "| counted | this program | fixed |\n|---|---|---|\n" + "\n".join(
            f"| {label} | {planted[key]} | {fixed[key]} |" for label, key in rows
        )
        expected = {
            "host_sync": planted["reads"] == steps and fixed["reads"] == 0,
            "recompile": planted["compiles"] == steps and fixed["compiles"] == 1,
            "unblocked_timer": planted["waits"] == 0 and fixed["waits"] == 1,
        }[defect]
        markdown = (
            f"Both versions ran here for {steps} steps, counted (never timed, so the counts "
            f"are the same on every run):\n\n{table}\n\n"
            "Host reads are counted where a device array is copied into a Python value "
            "(`jax.Array._value`, the path of `float`, `.item()`, `print`); on a TPU, "
            "`jax.transfer_guard_device_to_host('disallow')` would raise at each one, but on "
            "the CPU backend device memory is host memory and the guard never fires."
        )
        return Evidence(
            markdown,
            {
                "the defect changes a counted quantity": planted != fixed,
                "the fixed loop compiles once, reads nothing and waits once in the timed part": (
                    fixed["compiles"] == 1 and fixed["reads"] == 0 and fixed["waits"] == 1
                ),
                "the count the defect changes is the one its choice names": expected,
                "both programs read the clock twice": planted["clocks"] == fixed["clocks"] == 2,
            },
        )


ITEMS: tuple[Item, ...] = (
    RooflineBound(),
    HostSync(),
)
