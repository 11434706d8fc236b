"""The assessment items of the phase "Distributed training".

- ``distributed.allreduce_bytes`` (predict): bytes each device sends in a ring all-reduce.
- ``distributed.sharded_step`` (code): a data-parallel SGD step with ``jax.shard_map``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np

from core.assessment.bank.common import mesh_devices
from core.assessment.items import CodeItem, HiddenTest, Item, PredictItem, SelfCheck
from core.distributed import collectives, sharding

P = jax.sharding.PartitionSpec
MIB = 2**20


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
        """Compile ``lax.psum`` of this gradient on a CPU mesh of min(D, CPU devices) and read
        the all-reduce in the compiled HLO (abstract inputs: nothing is allocated). The CPU's
        devices whatever the default backend is: the text says what XLA:CPU compiles."""
        params = self.seeded(seed)[0]
        n, dtype = params["parameters"], params["dtype"]
        cpu = jax.devices("cpu")
        size = min(params["devices"], len(cpu))
        mesh = sharding.make_mesh((size,), (collectives.AXIS,), cpu)
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
        return dataclasses.replace(feedback, detail=feedback.detail + text)

    def self_check(self, seed):
        check = super().self_check(seed)
        _text, holds = self.hlo_evidence(seed)
        facts = {f"{self.id}: the compiled all-reduce holds the whole gradient": holds}
        return SelfCheck(check.errors, {**check.facts, **facts})


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
        available, where = mesh_devices(max(self.mesh_sizes))
        note = f"\n\n*The course's own solution is checked here: {where}.*" if where else ""
        if not available:
            note = (
                f"\n\n**This process has {len(jax.devices())} devices**: the tests need 4 "
                "(start Python with JAX_NUM_CPU_DEVICES=8); a test whose mesh does not fit "
                "says so and fails."
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
            # on the CPU's devices where the default backend has too few (a one-chip TPU host)
            on, _where = mesh_devices(devices)
            if not on:
                tests.append(
                    HiddenTest(name, False, f"needs {devices} devices; {len(jax.devices())} here")
                )
                continue
            mesh = sharding.make_mesh((devices,), ("data",), on)
            with jax.default_device(on[0]):
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


ITEMS: tuple[Item, ...] = (
    AllReduceBytes(),
    ShardedStep(),
)
