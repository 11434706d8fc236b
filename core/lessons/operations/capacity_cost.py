"""Lesson "Capacity, utilization, and operating cost": a measured step against the roofline.

A two-layer tanh MLP's SGD step (float32) is jitted, its FLOPs and bytes read from XLA's
cost analysis and compared with the closed form, and timed with core.perf.timing. Two
utilizations against this CPU's measured matmul peak: MFU (model FLOPs utilization) counts
the model's FLOPs, the closed form of its matmuls (forward 2 N per example for N weights,
backward 4 N less the input gradient nobody needs, as the cost table's 6 N per token);
HFU (hardware FLOPs utilization) counts what XLA executes, elementwise work and
transcendentals included, so HFU >= MFU. The bound comes from the arithmetic
intensity against this CPU's ridge point. Every figure is this CPU's.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from core.perf import machine, roofline, timing

# XLA counts the elementwise work (tanh, its derivative, the update, the loss) beside the
# matmuls: about 6 FLOPs per hidden unit and row against 2(3C + 2F) for the matmuls, so its
# share falls with features F and classes C: measured 11.7 % at F=8, C=4 (the tests' smallest).
ELEMENTWISE_SHARE = 0.15


def matmul_flops(batch: int, features: int, hidden: int, classes: int) -> float:
    """Closed form: forward 2B(FH + HC); backward dW2, dH, dW1 (no input gradient)."""
    return 2.0 * batch * (3 * hidden * classes + 2 * features * hidden)


def _step(params, x, y, lr):
    def loss(p):
        h = jnp.tanh(x @ p["w1"])
        r = h @ p["w2"] - y
        return 0.5 * jnp.mean(jnp.sum(r * r, axis=-1))

    grads = jax.grad(loss)(params)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads)


@dataclasses.dataclass(frozen=True)
class Utilization:
    shape: dict
    closed_form_flops: float
    xla_flops: float
    xla_bytes: float
    step_s: float
    peak_flops: float
    bandwidth: float
    machine: str

    @property
    def achieved(self) -> float:
        return self.xla_flops / self.step_s

    @property
    def mfu(self) -> float:
        """Model FLOPs utilization: the closed form's (matmul) FLOPs per second over peak."""
        return self.closed_form_flops / self.step_s / self.peak_flops

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilization: every FLOP XLA counts (elementwise too) over peak."""
        return self.achieved / self.peak_flops

    @property
    def intensity(self) -> float:
        return self.xla_flops / self.xla_bytes

    @property
    def bound(self) -> str:
        return roofline.bound(self.intensity, self.peak_flops, self.bandwidth)

    def rows(self) -> list[dict]:
        return [
            {"figure": "step time (median, this CPU)", "value": f"{self.step_s * 1e3:.3g} ms"},
            {"figure": "FLOPs per step (XLA cost analysis)", "value": f"{self.xla_flops:.4g}"},
            {"figure": "FLOPs per step (closed form, matmuls)",
             "value": f"{self.closed_form_flops:.4g}"},
            {"figure": "bytes accessed (XLA)", "value": f"{self.xla_bytes:.4g}"},
            {"figure": "achieved FLOP/s", "value": f"{self.achieved / 1e9:.3g} GFLOP/s"},
            {"figure": "this CPU's matmul peak", "value": f"{self.peak_flops / 1e9:.3g} GFLOP/s"},
            {"figure": "MFU on this CPU (model FLOPs: the matmuls' closed form)",
             "value": f"{self.mfu:.1%}"},
            {"figure": "HFU on this CPU (every FLOP XLA counts, elementwise too)",
             "value": f"{self.hfu:.1%}"},
            {"figure": "intensity / ridge (FLOP/byte)",
             "value": f"{self.intensity:.3g} / {self.peak_flops / self.bandwidth:.3g}"},
            {"figure": "bound", "value": self.bound},
        ]  # fmt: skip


def inputs(batch: int, features: int, hidden: int, classes: int, seed: int = 0):
    keys = jax.random.split(jax.random.key(seed), 4)
    params = {
        "w1": jax.random.normal(keys[0], (features, hidden)) / np.sqrt(features),
        "w2": jax.random.normal(keys[1], (hidden, classes)) / np.sqrt(hidden),
    }
    x = jax.random.normal(keys[2], (batch, features))
    y = jax.random.normal(keys[3], (batch, classes))
    return params, x, y


def compiled_step(batch: int, features: int, hidden: int, classes: int, seed: int = 0):
    """(executable, its arguments) of one SGD step at these shapes."""
    params, x, y = inputs(batch, features, hidden, classes, seed)
    lr = jnp.float32(0.01)
    compiled = jax.jit(_step).lower(params, x, y, lr).compile()
    return compiled, (params, x, y, lr)


def measure(
    batch: int, features: int, hidden: int, classes: int, repeats: int = 10, peaks=None
) -> Utilization:
    """Compile, read the cost analysis, time ``repeats`` steps (median), against the peaks
    (``peaks``: a core.perf.machine report; default the saved one or a quick measurement)."""
    for name, value in (("batch", batch), ("features", features), ("hidden", hidden),
                        ("classes", classes), ("repeats", repeats)):  # fmt: skip
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    compiled, args = compiled_step(batch, features, hidden, classes)
    cost = roofline.cost_from_compiled(compiled)
    step_s = timing.time_calls(compiled, *args, repeats=repeats, warmup=1).summary.median
    report = peaks or machine.load() or machine.measure(quick=True, bf16=False)
    return Utilization(
        {"batch": batch, "features": features, "hidden": hidden, "classes": classes},
        matmul_flops(batch, features, hidden, classes),
        cost.flops + cost.transcendentals,
        cost.bytes,
        step_s,
        float(report["peak_flop_per_s"]),
        float(report["bytes_per_s"]),
        report.get("machine", machine.machine_label()),
    )


def step_reference(params, x, y, lr) -> dict:
    """The same SGD step by hand in NumPy float64 (backprop written out)."""
    w1, w2 = (np.asarray(params[k], np.float64) for k in ("w1", "w2"))
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    h = np.tanh(x @ w1)
    r = h @ w2 - y
    d_out = r / len(x)
    g2 = h.T @ d_out
    g1 = x.T @ ((d_out @ w2.T) * (1 - h**2))
    return {"w1": w1 - lr * g1, "w2": w2 - lr * g2}
