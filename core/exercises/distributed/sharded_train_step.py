"""Exercises of the lesson sharded_train_step: the MLP's training step over a mesh.

- ``fsdp_adam_bytes`` (predict): the optimizer-state bytes each device holds when the
  lesson's MLP trains with Adam under FSDP.
- ``tensor_parallel_logits`` (code): the MLP's forward, tensor parallel over the hidden units
  with ``jax.shard_map``, one psum in the right place.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.distributed._shared import FLOAT32_BYTES, PHASE


class FsdpAdamBytes(PredictItem):
    """Adam keeps two moments shaped (and sharded) like each parameter, and a replicated
    int32 step count: 2 · 4 · (FH/D + H/D + HC/D + C) + 4 bytes per device under FSDP."""

    id = "distributed.sharded_train_step.fsdp_adam_bytes"
    phase = PHASE
    lesson = "sharded_train_step"
    title = "Adam's state per device under FSDP"
    units = "bytes"
    rel_tol = 0.0
    abs_tol = 0.5  # a count of bytes: exact
    hints = (
        "Adam keeps two float32 arrays per parameter, each shaped like it (the first and "
        "second moments), and one step count. The lesson gives each moment its parameter's "
        "sharding.",
        "Under FSDP w1, b1 and w2 are split along their first dimension over the D devices, "
        "so a device holds 1/D of each; b2's spec is P(): every device holds all of it. The "
        "step count is one int32, replicated.",
        "bytes = 2 · 4 · (F·H/D + H/D + H·C/D + C) + 4.",
    )

    def params(self, generator):
        devices = int(generator.choice([2, 4, 8]))
        hidden = devices * int(generator.integers(2, 9))
        # more classes than the lesson's control allows (16): the answer is not a reading of
        # the lesson's table
        classes = int(generator.integers(17, 41))
        if classes == hidden:  # b1 and b2 of one shape would share one sharding
            classes += 1
        return {
            "devices": devices,
            "features": devices * int(generator.integers(1, 7)),
            "hidden": hidden,
            "classes": classes,
        }

    def prompt(self, params) -> str:
        f, h, c, d = (params[k] for k in ("features", "hidden", "classes", "devices"))
        return (
            f"The lesson's MLP (`w1` ({f}, {h}), `b1` ({h},), `w2` ({h}, {c}), `b2` ({c},), "
            f"float32) trains with `optax.adam` under **FSDP** on **{d} devices**: the specs "
            "are those of the lesson's table (`w1`, `b1`, `w2`: `P('x')`; `b2`: `P()`), and "
            "each piece of the optimizer state shaped like a parameter gets that parameter's "
            "sharding, anything else is replicated. **Predict how many bytes of optimizer "
            'state each device holds** (the table\'s "optimizer bytes / device"); the '
            "lesson's library then places the state on the virtual devices and counts them."
        )

    def live(self, params) -> float:
        import jax

        from core import distributed
        from core.assessment.bank.common import mesh_devices
        from core.distributed import sharding

        f, h, c, d = (params[k] for k in ("features", "hidden", "classes", "devices"))
        devices, _note = mesh_devices(d)
        if not devices:
            raise RuntimeError(f"a {d}-device mesh needs {d} devices")
        mesh = sharding.make_mesh((d,), (distributed.AXIS,), devices)
        shapes = {"w1": (f, h), "b1": (h,), "w2": (h, c), "b2": (c,)}
        zeros = {k: np.zeros(shape, np.float32) for k, shape in shapes.items()}
        placed = distributed.place(zeros, distributed.param_specs("fsdp"), mesh)
        tx = distributed.make_optimizer("adam", 0.01)
        state = tx.init(placed)
        state = jax.device_put(state, distributed.opt_shardings(state, placed))
        return float(max(distributed.device_bytes(state).values()))

    def derive(self, params):
        f, h, c, d = (params[k] for k in ("features", "hidden", "classes", "devices"))
        per_moment = f * h // d + h // d + h * c // d + c
        value = 2 * FLOAT32_BYTES * per_moment + 4
        return value, (
            f"One moment, sharded like the parameters: w1 {f}·{h}/{d} = {f * h // d}, b1 "
            f"{h}/{d} = {h // d}, w2 {h}·{c}/{d} = {h * c // d} (all split along their first "
            f"dimension), b2 {c} (P(): whole on every device), {per_moment} floats. Adam keeps "
            f"two (mu and nu): 2 · 4 · {per_moment} = {8 * per_moment} bytes, plus its step "
            f"count, one int32 on every device: **{value} bytes**. Data parallel would hold "
            f"{2 * FLOAT32_BYTES * (f * h + h + h * c + c) + 4} bytes on each device: FSDP "
            "divides all but the replicated pieces by D."
        )

    def wrong(self, params, expected):
        f, h, c, d = (params[k] for k in ("features", "hidden", "classes", "devices"))
        full = f * h + h + h * c + c
        return {
            "nothing split (data parallel's state)": 2 * FLOAT32_BYTES * full + 4,
            "b2 split too: everything / D": 2 * FLOAT32_BYTES * full / d + 4,
            "one moment, not two": (expected - 4) / 2 + 4,
            "the step count left out": expected - 4,
            "every device's bytes added up: × D": expected * d,
        }


_TP_STUB = '''\
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def tensor_parallel_logits(params, x_BF, mesh):
    """Logits (B, C) of the lesson's MLP, tanh(x_BF @ w1 + b1) @ w2 + b2, tensor parallel.

    mesh: a 1-D mesh with axis "x" of D devices. params: {"w1": (F, H), "b1": (H,),
    "w2": (H, C), "b2": (C,)}, float32, placed as the lesson's tensor-parallel strategy
    says: w1 split by columns P(None, "x"), b1 P("x"), w2 split by rows P("x"), b2
    replicated P(); x_BF (B, F) is replicated. H is divisible by D.
    Use jax.shard_map so that each device computes with its own H/D hidden units only, and
    return the logits replicated (out_specs=P()), equal to the unsharded forward.
    """
    raise NotImplementedError
'''

_TP_HEAD = """\
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def tensor_parallel_logits(params, x_BF, mesh):
    def local(w1_Fh, b1_h, w2_hC, b2_C, x_BF):
        h_Bh = jnp.tanh(x_BF @ w1_Fh + b1_h)
"""
_TP_TAIL = """
    forward = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P(None, "x"), P("x"), P("x"), P(), P()),
        out_specs=P(),{check}
    )
    return jax.jit(forward)(params["w1"], params["b1"], params["w2"], params["b2"], x_BF)
"""
_TP_NO_PSUM = (
    _TP_HEAD + "        return h_Bh @ w2_hC + b2_C\n" + _TP_TAIL.format(check=" check_vma=False,")
)
_TP_PMEAN = (
    _TP_HEAD
    + '        return jax.lax.pmean(h_Bh @ w2_hC, "x") + b2_C\n'
    + _TP_TAIL.format(check="")
)
_TP_BIAS_INSIDE = (
    _TP_HEAD + '        return jax.lax.psum(h_Bh @ w2_hC + b2_C, "x")\n' + _TP_TAIL.format(check="")
)

# Float32 forward of order-1 (here up to a few hundred) logits, a float64 reference: sums of
# at most 64 products, rounding about 1e-7 relative; judged on max(1, max |logit|).
TP_RTOL = 1e-5


def mlp_logits_reference(params, x_BF) -> np.ndarray:
    """The unsharded forward in float64 NumPy (independent of core.distributed)."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    return np.tanh(np.asarray(x_BF, np.float64) @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def _replication_problem(value, devices: int) -> str | None:
    """Why ``value`` is not one jax.Array replicated on ``devices`` devices, copies equal."""
    import jax

    if not isinstance(value, jax.Array):
        return f"it is a {type(value).__name__}, not a jax.Array from the shard_map"
    if len(value.sharding.device_set) != devices or not value.sharding.is_fully_replicated:
        return f"it is not replicated on the {devices} devices (sharding {value.sharding})"
    shards = value.addressable_shards
    first = np.asarray(shards[0].data)
    unequal = [s.device.id for s in shards[1:] if not np.array_equal(np.asarray(s.data), first)]
    if unequal:
        return f"the copies on devices {unequal} differ from device {shards[0].device.id}'s"
    return None


class TensorParallelLogits(CodeItem):
    id = "distributed.sharded_train_step.tensor_parallel_logits"
    phase = PHASE
    lesson = "sharded_train_step"
    title = "A tensor-parallel forward with shard_map"
    function_name = "tensor_parallel_logits"
    stub = _TP_STUB
    solution_module = "core.exercises.solutions.tensor_parallel_logits"
    hints = (
        "Inside shard_map each device sees its own blocks: w1 (F, H/D), b1 (H/D,), w2 "
        "(H/D, C), and all of x and b2. Which steps of the forward need only this device's "
        "hidden units, and which one sums over all H of them?",
        "x @ w1 + b1 and tanh act on each hidden unit alone: no communication. h @ w2 sums "
        "over the hidden units, so each device holds a partial sum over its H/D: the devices' "
        "partial logits must be added (lax.psum over 'x'), not averaged.",
        "return jax.lax.psum(h_Bh @ w2_hC, 'x') + b2_C, with in_specs (P(None, 'x'), P('x'), "
        "P('x'), P(), P()) and out_specs P(): b2 after the psum, or it is added D times.",
    )

    mesh_sizes = (2, 4, 8)

    def prompt(self, seed: int) -> str:
        from core.assessment.bank.common import mesh_devices

        available, where = mesh_devices(max(self.mesh_sizes))
        note = f"\n\n*The meshes are built here: {where}.*" if where else ""
        if not available:
            note = (
                f"\n\n**This process has too few devices** for the {max(self.mesh_sizes)}"
                "-device test (start Python with JAX_NUM_CPU_DEVICES=8); it will fail."
            )
        return (
            "Complete `tensor_parallel_logits(params, x_BF, mesh)`: the forward pass of the "
            "lesson's tensor-parallel strategy, written with `jax.shard_map` so that you place "
            "the one collective yourself (in the lesson XLA inserts it). The hidden tests use "
            f"meshes of {', '.join(map(str, self.mesh_sizes))} devices with seeded shapes, one "
            "with inputs large enough to saturate tanh and logits in the hundreds, compare "
            "with a float64 NumPy forward (error at most "
            f"{TP_RTOL:g} × max(1, largest logit)), and check that every device holds the "
            "same logits." + note
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "no collective: each device returns its own partial logits": _TP_NO_PSUM,
            "pmean instead of psum: the partial sums averaged, not added": _TP_PMEAN,
            "b2 added on every device before the psum (D times)": _TP_BIAS_INSIDE,
        }

    @functools.cache  # noqa: B019 (module-level singleton; a seed's cases are fixed)
    def cases(self, seed: int) -> list[dict]:
        generator = rng(self.id + "/inputs", seed)
        cases = []
        for devices in self.mesh_sizes:
            large = devices == max(self.mesh_sizes)
            features = int(generator.integers(3, 9))
            hidden = devices * int(generator.integers(1, 5))
            classes = int(generator.integers(2, 7))
            rows = int(generator.integers(2, 9))
            x_scale, w2_scale = (40.0, 30.0) if large else (1.0, 1.0)
            cases.append(
                {
                    "name": (
                        f"{devices} devices, B={rows}, F={features}, H={hidden}, C={classes}"
                        + (", large inputs and weights" if large else "")
                    ),
                    "devices": devices,
                    "params": {
                        "w1": (generator.normal(size=(features, hidden)) / np.sqrt(features)),
                        "b1": generator.normal(size=hidden),
                        "w2": generator.normal(size=(hidden, classes)) * w2_scale,
                        "b2": generator.normal(size=classes) * 3.0,
                    },
                    "x": generator.normal(size=(rows, features)) * x_scale,
                }
            )
        for case in cases:
            case["params"] = {k: v.astype(np.float32) for k, v in case["params"].items()}
            case["x"] = case["x"].astype(np.float32)
        return cases

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        import jax

        from core import distributed
        from core.assessment.bank.common import mesh_devices
        from core.distributed import sharding

        tests = []
        for case in self.cases(seed):
            devices, name = case["devices"], case["name"]
            on, _where = mesh_devices(devices)
            if not on:
                tests.append(
                    HiddenTest(name, False, f"needs {devices} devices; {len(jax.devices())} here")
                )
                continue
            mesh = sharding.make_mesh((devices,), (distributed.AXIS,), on)
            params = distributed.place(case["params"], distributed.param_specs("tensor"), mesh)
            x = jax.device_put(case["x"], jax.sharding.NamedSharding(mesh, distributed.P()))
            out = function(params, x, mesh)
            expected = mlp_logits_reference(case["params"], case["x"])
            got = np.asarray(out, np.float64)
            if got.shape != expected.shape:
                tests.append(
                    HiddenTest(name, False, f"shape {got.shape}; expected {expected.shape}")
                )
                continue
            scale = max(1.0, float(np.abs(expected).max()))
            error = float(np.abs(got - expected).max()) / scale if np.isfinite(got).all() else 1.0
            tests.append(
                HiddenTest(
                    f"{name}: logits vs a float64 NumPy forward",
                    error <= TP_RTOL,
                    f"largest error {error:.1e} of max(1, largest logit) = {scale:.3g} "
                    f"(tolerance {TP_RTOL:g})",
                )
            )
            problem = _replication_problem(out, devices)
            tests.append(
                HiddenTest(
                    f"{name}: the same logits on every device",
                    problem is None,
                    problem or f"one equal copy on each of the {devices} devices",
                )
            )
        return tests
