"""Assessment items of the scaling phases: performance diagnosis, distributed training, Pallas
kernels, deployment.

- ``performance.host_sync`` (diagnose): a training loop with a host sync, a recompile or an
  unblocked timer; the evidence counts compiles, host reads and device waits (never time).
- ``distributed.allreduce_bytes`` (predict): bytes each device sends in a ring all-reduce.
- ``distributed.sharded_step`` (code): a data-parallel SGD step with ``jax.shard_map``.
- ``pallas.blocked_kernel`` (code): a blocked matmul on a 3-D Pallas grid (interpret mode).
- ``deployment.weight_conversion`` (diagnose): PyTorch-layout weights into a JAX forward.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from core.assessment.items import (
    CodeItem,
    DiagnoseItem,
    Evidence,
    Feedback,
    HiddenTest,
    Item,
    PredictItem,
    SelfCheck,
)
from core.distributed import collectives, sharding

P = jax.sharding.PartitionSpec
MIB = 2**20


def _run_program(source: str, filename: str, hook: Callable | None = None) -> dict[str, Any]:
    """Execute a diagnose item's program text (stdout swallowed); return its namespace.

    ``hook`` is installed with ``sys.setprofile`` while the program runs (the previous
    profiler is restored after)."""
    namespace: dict[str, Any] = {"__name__": "diagnose_program"}
    code = compile(source, filename, "exec")
    previous = sys.getprofile()
    with contextlib.redirect_stdout(io.StringIO()):
        if hook is not None:
            sys.setprofile(hook)
        try:
            exec(code, namespace)  # noqa: S102 (the program is this module's own text)
        finally:
            sys.setprofile(previous)
    return namespace


# --- 1. performance.host_sync ------------------------------------------------------------

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

    namespace = _run_program(source, filename, hook)
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


# --- 2. distributed.allreduce_bytes ------------------------------------------------------

_ITEMSIZE = {"float32": 4, "bfloat16": 2}


class AllReduceBytes(PredictItem):
    """Ring all-reduce bytes per device: 2(D-1)/D · N · itemsize.

    D runs from 3 to 8: at D = 2 the ring factor 2(D-1)/D is exactly 1, so "forgot the ring
    factor" would be the right answer and could not be told apart.
    """

    id = "distributed.allreduce_bytes"
    phase = "Distributed training"
    lesson = "communication_algorithms"
    title = "Bytes each device sends in a ring all-reduce"
    units = "MiB"
    rel_tol = 0.02

    def params(self, generator):
        return {
            "parameters": int(generator.integers(20, 1500)) * 1_000_000
            + int(generator.integers(0, 1_000_000)),
            "dtype": str(generator.choice(list(_ITEMSIZE))),
            "devices": int(generator.integers(3, 9)),
        }

    def prompt(self, params):
        return (
            f"A data-parallel step all-reduces the gradient of a model with "
            f"{params['parameters']:,} parameters, stored in {params['dtype']}, over a ring of "
            f"{params['devices']} devices (the bandwidth-optimal ring algorithm: a "
            "reduce-scatter, then an all-gather). How many bytes does **each device send** "
            "for one all-reduce? Answer in MiB (1 MiB = 2^20 bytes)."
        )

    def live(self, params):
        n_bytes = params["parameters"] * np.dtype(params["dtype"]).itemsize
        return collectives.ring_bytes("all-reduce", n_bytes, params["devices"]) / MIB

    def derive(self, params):
        n, d = params["parameters"], params["devices"]
        itemsize = _ITEMSIZE[params["dtype"]]
        full = n * itemsize
        value = 2.0 * (d - 1) / d * full / MIB
        text = (
            "Ring all-reduce = reduce-scatter + all-gather. Each half moves D-1 of the D "
            "chunks (each N·itemsize/D bytes) through every device, so each device sends\n\n"
            "bytes = 2 · (D-1)/D · N · itemsize\n\n"
            f"= 2 · ({d}-1)/{d} · {n:,} · {itemsize} B = 2 · {(d - 1) / d:.4f} · "
            f"{full:,} B = {value * MIB:,.0f} B = **{value:,.2f} MiB**\n\n"
            f"({params['dtype']} is {itemsize} bytes per element; divide by 2^20 for MiB.) "
            "The lesson: the per-device traffic is almost 2× the gradient and barely depends "
            "on D (the factor tends to 2), which is why the ring scales; the time is that over "
            "the link bandwidth."
        )
        return value, text

    def wrong(self, params, expected):
        d = params["devices"]
        itemsize = _ITEMSIZE[params["dtype"]]
        other = 2 if itemsize == 4 else 4
        full_mib = params["parameters"] * itemsize / MIB
        return {
            "forgot the ring factor: N · itemsize": full_mib,
            "only the reduce-scatter half: (D-1)/D": expected / 2,
            "bits for bytes": expected * 8,
            "every device's traffic summed: × D": expected * d,
            "MB (10^6) for MiB": expected * MIB / 1e6,
            f"{other} bytes per element for {params['dtype']}": expected * other / itemsize,
        }

    @functools.cache  # noqa: B019 (module-level singleton; a seed's HLO is fixed)
    def hlo_evidence(self, seed: int) -> tuple[str, bool]:
        """Compile ``lax.psum`` of this gradient on a CPU mesh of min(D, devices) and read
        the all-reduce in the compiled HLO (abstract inputs: nothing is allocated)."""
        params = self.seeded(seed)[0]
        n, dtype = params["parameters"], params["dtype"]
        size = min(params["devices"], len(jax.devices()))
        mesh = sharding.make_mesh((size,), (collectives.AXIS,))
        spec = jax.ShapeDtypeStruct(
            (size, n), dtype, sharding=jax.sharding.NamedSharding(mesh, P(collectives.AXIS))
        )
        hlo = jax.jit(collectives.allreduce_fn(mesh)).lower(spec).compile().as_text()
        rows = [r for r in collectives.hlo_collectives(hlo) if r["op"] == "all-reduce"]
        elements = [r["bytes"] // collectives._DTYPE_BYTES[r["shape"].split("[")[0]] for r in rows]
        holds = len(rows) == 1 and elements[0] == n
        shown = rows[0]["shape"] if rows else "no all-reduce"
        text = (
            f"\n\n**The compiler agrees:** `lax.psum` of this {params['dtype']} gradient on a "
            f"{size}-device CPU mesh compiles to one `all-reduce` of `{shown}` "
            f"({n:,} elements, the whole gradient: each device ends with all of it). "
            "XLA:CPU reduces bfloat16 in float32; the TPU compiler keeps it bfloat16 (the "
            "same psum compiled for a v5e 2x2 topology, with libtpu, gives `bf16[N]`)."
        )
        return text, holds

    def grade(self, seed, answer):
        feedback = super().grade(seed, answer)
        text, _holds = self.hlo_evidence(seed)
        return Feedback(feedback.passed, feedback.summary, feedback.detail + text)

    def self_check(self, seed):
        check = super().self_check(seed)
        _text, holds = self.hlo_evidence(seed)
        facts = {f"{self.id}: the compiled all-reduce holds the whole gradient": holds}
        return SelfCheck(check.errors, {**check.facts, **facts})


# --- 3. distributed.sharded_step ---------------------------------------------------------

_SHARDED_STUB = '''\
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def sharded_sgd_step(params, batch, mesh, learning_rate):
    """New params {"w": (F, O), "b": (O,)} after one SGD step on the batch {"x": (B, F),
    "y": (B, O)}, float32, data parallel over the 1-D mesh axis "data": the batch split over
    the mesh (B divisible by its size), the params replicated, the gradients averaged across
    devices. Use jax.shard_map; the result must equal the unsharded step and be replicated.

    loss(params, batch) = mean over the B rows of sum over the O outputs of
    (x @ w + b - y) ** 2;   new_p = p - learning_rate * d loss / d p
    """
    raise NotImplementedError
'''


def _sgd_reference(params, batch, learning_rate) -> dict[str, np.ndarray]:
    """The unsharded step in NumPy float64, gradient by hand: r = x w + b - y (B, O),
    dL/dw = 2/B xᵀ r, dL/db = 2/B Σ_b r."""
    x, y = np.asarray(batch["x"], np.float64), np.asarray(batch["y"], np.float64)
    w, b = np.asarray(params["w"], np.float64), np.asarray(params["b"], np.float64)
    residual = x @ w + b - y
    rows = x.shape[0]
    grad_w, grad_b = 2.0 / rows * x.T @ residual, 2.0 / rows * residual.sum(axis=0)
    return {"w": w - learning_rate * grad_w, "b": b - learning_rate * grad_b}


def _update_hint(got: dict, expected: dict, old: dict, devices: int) -> str:
    """What the learner's update is, when it is the right one scaled by D or 1/D."""
    keys = ("w", "b")
    step = np.concatenate([np.ravel(np.asarray(got[k], np.float64) - old[k]) for k in keys])
    right = np.concatenate([np.ravel(expected[k] - old[k]) for k in keys])
    ratio = float(step @ right / (right @ right))
    if np.linalg.norm(step - ratio * right) > 1e-3 * np.linalg.norm(right):
        return ""
    if abs(ratio - devices) < 1e-3 * devices:
        return (
            f". Your update is {devices}x the right one: the per-device gradients were summed, "
            "not averaged (psum for pmean; or jax.grad inside the shard_map, where the "
            "gradient of a replicated parameter is already summed over the devices)"
        )
    if abs(ratio - 1 / devices) < 1e-3 / devices:
        return f". Your update is 1/{devices} of the right one: the mean is divided by D twice"
    return ""


def _replicated_problem(value, devices: int) -> str | None:
    """Why ``value`` is not one array replicated on ``devices`` devices with equal copies."""
    if not isinstance(value, jax.Array):
        return f"it is a {type(value).__name__}, not a jax.Array from the shard_map"
    shards = value.addressable_shards
    if len(value.sharding.device_set) != devices or not value.sharding.is_fully_replicated:
        return f"it is not replicated on the {devices} devices (sharding {value.sharding})"
    first = np.asarray(shards[0].data)
    unequal = [s.device.id for s in shards[1:] if not np.array_equal(np.asarray(s.data), first)]
    if unequal:
        return f"the copies on devices {unequal} differ from device {shards[0].device.id}'s"
    return None


class ShardedStep(CodeItem):
    id = "distributed.sharded_step"
    phase = "Distributed training"
    lesson = "sharded_train_step"
    title = "A data-parallel SGD step with shard_map"
    function_name = "sharded_sgd_step"
    stub = _SHARDED_STUB
    solution_module = "core.assessment.solutions.sharded_step"
    mesh_sizes = (4, 2)

    def prompt(self, seed):
        available = len(jax.devices())
        note = (
            ""
            if available >= max(self.mesh_sizes)
            else f"\n\n**This process has {available} devices**: the tests need 4 "
            "(start Python with JAX_NUM_CPU_DEVICES=8); a test whose mesh does not fit says "
            "so and fails."
        )
        return (
            "Complete `sharded_sgd_step`: one data-parallel SGD step of the linear regression "
            'in its docstring, with `jax.shard_map` over the mesh axis `"data"`: each device '
            "gets B/D rows, the parameters are replicated, and the gradients must be combined "
            "so the new parameters equal the unsharded step's on every device. The hidden "
            f"tests use meshes of {' and '.join(map(str, self.mesh_sizes))} devices, seeded "
            "shapes and values, and compare with a float64 NumPy step (gradient by hand)." + note
        )

    def planted_wrong(self):
        solution = self.reference_source()
        shard_mean = "return jnp.mean(jnp.sum(residual_BO**2, axis=-1))"
        grad_inside = """    def local_step(params, batch):
        grads = jax.grad(shard_loss)(params, batch)
        grads = jax.lax.pmean(grads, "data")
        return jax.tree.map(lambda p, g: p - learning_rate * g, params, grads)

    step = jax.shard_map(local_step, mesh=mesh, in_specs=(P(), P("data")), out_specs=P())
    return jax.jit(step)(params, batch)
"""
        head = solution[: solution.index("    def global_loss")]
        return {
            "psum instead of pmean (gradient × D)": solution.replace("lax.pmean", "lax.psum"),
            "no collective: each device steps on its own shard's gradient": head
            + grad_inside.replace('        grads = jax.lax.pmean(grads, "data")\n', "").replace(
                "out_specs=P())", "out_specs=P(), check_vma=False)"
            ),
            "each shard's loss divided by the global batch, then pmean (gradient / D)": (
                solution.replace(
                    shard_mean,
                    "return jnp.sum(residual_BO**2) / (residual_BO.shape[0] * mesh.size)",
                )
            ),
            "jax.grad inside the shard_map, then pmean (already summed: gradient × D)": (
                head + grad_inside
            ),
        }

    @functools.cache  # noqa: B019 (module-level singleton)
    def cases(self, seed: int) -> list[dict]:
        from core.assessment.items import rng

        generator = rng(self.id, seed)
        cases = []
        for devices in self.mesh_sizes:
            features, outputs = int(generator.integers(3, 7)), int(generator.integers(2, 5))
            rows = devices * int(generator.integers(2, 5))
            cases.append(
                {
                    "devices": devices,
                    "learning_rate": float(generator.choice([0.05, 0.1, 0.2])),
                    "params": {
                        "w": generator.normal(size=(features, outputs)).astype(np.float32),
                        "b": generator.normal(size=(outputs,)).astype(np.float32),
                    },
                    "batch": {
                        "x": generator.normal(size=(rows, features)).astype(np.float32),
                        "y": generator.normal(size=(rows, outputs)).astype(np.float32),
                    },
                }
            )
        return cases

    def hidden_tests(self, function, seed):
        tests = []
        for case in self.cases(seed):
            devices = case["devices"]
            rows, features = case["batch"]["x"].shape
            name = f"{devices} devices, B={rows}, F={features}, O={case['batch']['y'].shape[1]}"
            if devices > len(jax.devices()):
                tests.append(
                    HiddenTest(name, False, f"needs {devices} devices; {len(jax.devices())} here")
                )
                continue
            mesh = sharding.make_mesh((devices,), ("data",))
            params = {k: jax.numpy.asarray(v) for k, v in case["params"].items()}
            batch = {k: jax.numpy.asarray(v) for k, v in case["batch"].items()}
            out = function(params, batch, mesh, case["learning_rate"])
            expected = _sgd_reference(case["params"], case["batch"], case["learning_rate"])
            if not isinstance(out, dict) or set(out) != {"w", "b"}:
                tests.append(HiddenTest(name, False, f"expected a dict with w and b, got {out!r}"))
                continue
            errors = {}
            for key in ("w", "b"):
                got = np.asarray(out[key], np.float64)
                if got.shape != expected[key].shape:
                    errors[key] = float("inf")
                    continue
                errors[key] = float(np.max(np.abs(got - expected[key])))
            worst = max(errors, key=errors.get)
            scale = float(np.max(np.abs(expected[worst]))) + 1.0
            passed = errors[worst] <= 1e-5 * scale
            old = {k: np.asarray(v, np.float64) for k, v in case["params"].items()}
            hint = (
                ""
                if passed or errors[worst] == float("inf")
                else _update_hint(out, expected, old, devices)
            )
            tests.append(
                HiddenTest(
                    f"{name}: new params vs a float64 NumPy step",
                    passed,
                    f"max |error| {errors[worst]:.3g} in {worst} (tolerance {1e-5 * scale:.2g};"
                    f" step size {case['learning_rate']}){hint}",
                )
            )
            problems = [
                f"{key}: {problem}"
                for key in ("w", "b")
                if (problem := _replicated_problem(out[key], devices))
            ]
            tests.append(
                HiddenTest(
                    f"{name}: output params replicated, equal on every device",
                    not problems,
                    "; ".join(problems) or f"w and b: one equal copy on each of {devices} devices",
                )
            )
        return tests


# --- 4. pallas.blocked_kernel ------------------------------------------------------------

_PALLAS_STUB = '''\
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def blocked_matmul(x_MK, y_KN, block_m, block_n, block_k):
    """out_MN (M, N) float32 = x_MK (M, K) @ y_KN (K, N), float32, as one pl.pallas_call on
    the grid (M / block_m, N / block_n, K / block_k): program (i, j, k) reads block (i, k) of
    x (block_m, block_k) and block (k, j) of y (block_k, block_n) and accumulates their
    product into block (i, j) of the output, over k. Use interpret=True (this runs on CPU).
    A block size that does not divide its dimension must raise ValueError.
    """
    raise NotImplementedError
'''


class BlockedKernel(CodeItem):
    id = "pallas.blocked_kernel"
    phase = "Pallas kernels"
    lesson = "pallas_grids"
    title = "A blocked matmul on a 3-D Pallas grid"
    function_name = "blocked_matmul"
    stub = _PALLAS_STUB
    solution_module = "core.assessment.solutions.pallas_kernel"

    def prompt(self, seed):
        return (
            "Complete `blocked_matmul`: a Pallas kernel and its `pallas_call` with a 3-D grid "
            "(i over row blocks, j over column blocks, k over the contraction), BlockSpecs whose "
            "index maps pick the right block of x, y and the output for each program, and an "
            "output block that accumulates over k (zeroed at the first k step). The hidden tests "
            "run two seeded shapes and block sizes against float64 NumPy, and one block size "
            "that does not divide its dimension (it must raise ValueError)."
        )

    def planted_wrong(self):
        solution = self.reference_source()
        return {
            "output index map with swapped grid indices (blocks land transposed)": (
                solution.replace("lambda i, j, kk: (i, j)", "lambda i, j, kk: (j, i)")
            ),
            "output overwritten on every k step instead of accumulated": solution.replace(
                "o_ref[...] += jnp.dot", "o_ref[...] = jnp.dot"
            ),
            "k blocks taken from the wrong operand axis (y block (j, k))": solution.replace(
                "lambda i, j, kk: (kk, j)", "lambda i, j, kk: (j, kk)"
            ),
        }

    @functools.cache  # noqa: B019 (module-level singleton)
    def cases(self, seed: int) -> list[dict]:
        from core.assessment.items import rng

        generator = rng(self.id, seed)
        block = int(generator.choice([8, 16]))
        square = {  # M = N and block_m = block_n: swapped output blocks still fit the array
            "grid": (2, 2, int(generator.integers(2, 4))),
            "blocks": (block, block, int(generator.choice([8, 16]))),
        }
        blocks = tuple(int(b) for b in generator.choice([8, 16], size=3))
        other = {
            "grid": (int(generator.integers(2, 4)), int(generator.integers(1, 3)), 2),
            "blocks": blocks,
        }
        cases = []
        for case in (square, other):
            (gm, gn, gk), (bm, bn, bk) = case["grid"], case["blocks"]
            m, n, k = gm * bm, gn * bn, gk * bk
            cases.append(
                {
                    "x": generator.normal(size=(m, k)).astype(np.float32),
                    "y": generator.normal(size=(k, n)).astype(np.float32),
                    "blocks": (bm, bn, bk),
                }
            )
        return cases

    def hidden_tests(self, function, seed):
        tests = []
        for case in self.cases(seed):
            x, y, (bm, bn, bk) = case["x"], case["y"], case["blocks"]
            (m, k), n = x.shape, y.shape[1]
            name = f"x ({m}, {k}) @ y ({k}, {n}), blocks {bm}x{bn}, k block {bk}"
            out = np.asarray(function(jax.numpy.asarray(x), jax.numpy.asarray(y), bm, bn, bk))
            expected = x.astype(np.float64) @ y.astype(np.float64)
            if out.shape != expected.shape:
                tests.append(HiddenTest(name, False, f"shape {out.shape}, expected {(m, n)}"))
                continue
            error = float(np.max(np.abs(out - expected)))
            bound = 1e-5 * (float(np.max(np.abs(expected))) + 1.0)
            wrong_blocks = sorted(
                {
                    (int(r) // bm, int(c) // bn)
                    for r, c in zip(*np.nonzero(np.abs(out - expected) > bound), strict=True)
                }
            )
            where = f"; wrong output blocks (i, j): {wrong_blocks[:6]}" if wrong_blocks else ""
            tests.append(
                HiddenTest(
                    f"{name} vs float64 NumPy",
                    error <= bound,
                    f"max |error| {error:.3g} (tolerance {bound:.2g}){where}",
                )
            )
        first = self.cases(seed)[0]
        x, y, (bm, bn, bk) = first["x"], first["y"], first["blocks"]
        bad = bk + 8 if x.shape[1] % (bk + 8) else bk + 16  # not a divisor of K
        name = f"block_k={bad} with K={x.shape[1]} raises ValueError"
        try:
            function(jax.numpy.asarray(x), jax.numpy.asarray(y), bm, bn, bad)
        except ValueError as error:
            tests.append(HiddenTest(name, True, f"ValueError: {error}"))
        else:
            tests.append(
                HiddenTest(name, False, "it returned a result: check that each block divides")
            )
        return tests


# --- 5. deployment.weight_conversion -----------------------------------------------------


def _torch_forward(state: dict[str, np.ndarray], x_NCHW: np.ndarray) -> np.ndarray:
    """PyTorch's semantics in NumPy float64 (torch itself is not imported: slow): Conv2d
    (OIHW weight, 3x3, padding 1, cross-correlation) + bias, ReLU, mean over H and W, then
    Linear y = h Wᵀ + b with W (out, in)."""
    weight = np.asarray(state["conv.weight"], np.float64)  # (O, I, 3, 3)
    x = np.pad(np.asarray(x_NCHW, np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    height, width = x_NCHW.shape[2:]
    conv = np.zeros((x_NCHW.shape[0], weight.shape[0], height, width))
    for dy in range(3):
        for dx in range(3):
            window = x[:, :, dy : dy + height, dx : dx + width]  # (N, I, H, W)
            conv += np.einsum("nihw,oi->nohw", window, weight[:, :, dy, dx])
    conv += np.asarray(state["conv.bias"], np.float64)[None, :, None, None]
    pooled = np.maximum(conv, 0.0).mean(axis=(2, 3))  # (N, C)
    fc_weight = np.asarray(state["fc.weight"], np.float64)
    return pooled @ fc_weight.T + np.asarray(state["fc.bias"], np.float64)


class WeightConversion(DiagnoseItem):
    id = "deployment.weight_conversion"
    phase = "Deployment, interoperability & edge AI"
    lesson = "torch_to_flax"
    title = "PyTorch weights into a JAX forward pass"
    defects = {
        "linear_not_transposed": (
            "The Linear weight is not transposed: (out, in) used as (in, out)",
            "torch's Linear stores W as (out, in) and computes x Wᵀ + b; a Flax Dense kernel "
            "is (in, out) and computes x K + b, so K = Wᵀ. With a square layer the shapes "
            "still fit and nothing fails: compare one layer's output with the torch "
            "semantics to find it. Fix: `fc.weight.T`.",
        ),
        "conv_wrong_layout": (
            "The conv kernel is transposed to the wrong layout (HWOI, not HWIO)",
            "torch's Conv2d weight is OIHW; `lax.conv_general_dilated` with "
            "dimension_numbers ('NHWC', 'HWIO', 'NHWC') needs HWIO: transpose(2, 3, 1, 0). "
            "transpose(2, 3, 0, 1) gives HWOI, which has the same shape when in = out "
            "channels, so it runs and mixes the channels wrongly.",
        ),
        "bias_dropped": (
            "The conv bias is converted but never added",
            "Conv2d has a bias by default (bias=True); the converted `conv_bias` must be "
            "added before the ReLU. Without it every activation is shifted and the ReLU cuts "
            "at the wrong place: the outputs stay plausible, and wrong.",
        ),
        "bf16_roundtrip": (
            "The weights are rounded through bfloat16 on the way in",
            "Storing the converted weights in bfloat16 keeps 8 bits of mantissa: each weight "
            "moves by up to 2^-9 relative, and the outputs differ from torch's float32 ones "
            "by ~1e-3 relative, far above float32's ~1e-6. Convert in float32 and choose "
            "lower precision later, on purpose, with a measured tolerance.",
        ),
    }

    def params(self, generator):
        return {
            "channels": int(generator.integers(3, 9)),
            "size": int(generator.integers(5, 9)),
            "batch": int(generator.integers(2, 5)),
            "data_seed": int(generator.integers(0, 10_000)),
        }

    def prompt(self, params):
        return (
            "This program converts a PyTorch model's weights (a Conv2d and a Linear, both "
            f"{params['channels']} channels in and out, held as NumPy arrays in torch's layouts) "
            "into a JAX forward pass. It runs and returns numbers of the right shape, but they "
            "do not match the PyTorch model. Which defect is planted?"
        )

    def program(self, defect, params):
        c, s, n = params["channels"], params["size"], params["batch"]
        to_jax = (
            "jnp.asarray(a, jnp.bfloat16).astype(jnp.float32)  # bf16 halves the memory"
            if defect == "bf16_roundtrip"
            else "jnp.asarray(a, jnp.float32)"
        )
        conv_axes = "(2, 3, 0, 1)" if defect == "conv_wrong_layout" else "(2, 3, 1, 0)"
        fc = '"fc.weight"]' if defect == "linear_not_transposed" else '"fc.weight"].T'
        bias = "" if defect == "bias_dropped" else ' + params["conv_bias"]'
        return textwrap.dedent(
            f"""\
            import jax
            import jax.numpy as jnp
            import numpy as np

            rng = np.random.default_rng({params["data_seed"]})
            torch_state = {{  # a torch Conv2d({c}, {c}, 3, padding=1) and Linear({c}, {c})
                "conv.weight": rng.normal(size=({c}, {c}, 3, 3)).astype(np.float32),  # OIHW
                "conv.bias": rng.normal(size=({c},)).astype(np.float32),
                "fc.weight": rng.normal(size=({c}, {c})).astype(np.float32),  # (out, in)
                "fc.bias": rng.normal(size=({c},)).astype(np.float32),
            }}
            x_NCHW = rng.normal(size=({n}, {c}, {s}, {s})).astype(np.float32)


            def to_jax(a):
                return {to_jax}


            params = {{
                "conv": to_jax(torch_state["conv.weight"].transpose{conv_axes}),  # -> HWIO
                "conv_bias": to_jax(torch_state["conv.bias"]),
                "fc": to_jax(torch_state[{fc}),  # -> (in, out)
                "fc_bias": to_jax(torch_state["fc.bias"]),
            }}


            def forward(params, x_NHWC):
                h = jax.lax.conv_general_dilated(
                    x_NHWC, params["conv"], (1, 1), "SAME",
                    dimension_numbers=("NHWC", "HWIO", "NHWC"),
                )
                h = jax.nn.relu(h{bias})
                return h.mean(axis=(1, 2)) @ params["fc"] + params["fc_bias"]


            y = jax.jit(forward)(params, x_NCHW.transpose(0, 2, 3, 1))  # NCHW -> NHWC
            """
        )

    def evidence(self, defect, params):
        errors = {}
        for variant in (defect, "fixed"):
            namespace = _run_program(self.program(variant, params), "<conversion program>")
            reference = _torch_forward(namespace["torch_state"], namespace["x_NCHW"])
            got = np.asarray(namespace["y"], np.float64)
            errors[variant] = float(np.max(np.abs(got - reference)) / np.max(np.abs(reference)))
        markdown = (
            "Both conversions ran here and were compared with the PyTorch model's forward pass "
            "written in NumPy float64 with torch's semantics (Conv2d on NCHW with an OIHW "
            "weight, y = x Wᵀ + b for the Linear; torch itself is not imported):\n\n"
            "| conversion | max error / max output |\n|---|---|\n"
            f"| this program | {errors[defect]:.2e} |\n| fixed | {errors['fixed']:.2e} |\n\n"
            "The fixed conversion agrees to float32 rounding (~1e-6); the planted defect moves "
            "the outputs far beyond it while the shapes stay right."
        )
        return Evidence(
            markdown,
            {
                "the fixed conversion matches torch semantics (< 1e-5 relative)": (
                    errors["fixed"] < 1e-5
                ),
                "the defect changes the result (> 1e-4 relative)": errors[defect] > 1e-4,
            },
        )


ITEMS: tuple[Item, ...] = (
    HostSync(),
    AllReduceBytes(),
    ShardedStep(),
    BlockedKernel(),
    WeightConversion(),
)
