"""Lesson code of "Write gradient descent yourself": Rosenbrock, three loops, a float64 reference.

    f(x, y) = (A - x)^2 + B (y - x^2)^2          (A = 1, B = 100; minimum 0 at (1, 1))
    plain GD      p <- p - lr grad f(p)
    heavy ball    v <- beta v + grad f(p);  p <- p - lr v        (beta = 0: plain GD)

The same update runs as a Python loop calling ``jax.grad`` (every step dispatched op by op),
as a Python loop calling a jitted step, and as one ``lax.scan``: all three give the same
trajectory, and a NumPy float64 loop with the closed-form gradient is the reference.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

A, B = 1.0, 100.0
MINIMUM = (A, A * A)
PYTHON_STEPS = 20  # the op-by-op loop is slow: it runs only the first steps
JIT_STEPS = 100  # the jitted-step loop is compared with scan over these first steps
ESCAPE_RADIUS = 1e3  # a trajectory this far out has diverged
# The claim: from every start of CLAIM_STARTS, at lr 1e-3 and 500 steps, momentum 0.9 ends at
# least 10x lower than plain GD (measured: 60x to 1000x). Not from everywhere: from
# COUNTER_START, below the valley, plain GD slides down to (1, 1) and momentum overshoots.
CLAIM_STARTS = ((-1.2, 1.0), (-1.5, 2.0), (0.0, -0.5), (-0.5, 1.5), (1.2, 2.0))
COUNTER_START = (1.5, 1.0)


def rosenbrock(p_2):
    """f at p_2 = (x, y): a scalar."""
    x, y = p_2[0], p_2[1]
    return (A - x) ** 2 + B * (y - x**2) ** 2


def rosenbrock_numpy(x, y):
    """f in NumPy (any broadcastable x, y), float64."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return (A - x) ** 2 + B * (y - x**2) ** 2


def gradient_numpy(p_2) -> np.ndarray:
    """The closed-form gradient of f at p_2, float64."""
    x, y = float(p_2[0]), float(p_2[1])
    return np.array([-2 * (A - x) - 4 * B * x * (y - x * x), 2 * B * (y - x * x)])


def hessian_numpy(p_2) -> np.ndarray:
    x, y = float(p_2[0]), float(p_2[1])
    return np.array([[2 - 4 * B * (y - x * x) + 8 * B * x * x, -4 * B * x], [-4 * B * x, 2 * B]])


def stability_limit(start_2, beta: float) -> float:
    """2 (1 + beta) / lambda_max of the Hessian at the start: the largest stable learning rate
    of heavy-ball momentum on the quadratic that matches f there (beta 0: 2 / lambda_max)."""
    return 2 * (1 + beta) / float(np.linalg.eigvalsh(hessian_numpy(start_2)).max())


def problem(learning_rate: float, beta: float) -> str | None:
    """Why this run cannot work, or None: a learning rate <= 0, or one past the stability
    limit at the minimum (1, 1), where the run could never settle."""
    if learning_rate <= 0:
        return (
            f"a learning rate of {learning_rate:g} never moves downhill: gradient descent "
            "steps by -lr times the gradient, so lr must be > 0"
        )
    limit = stability_limit(MINIMUM, beta)
    if learning_rate > limit:
        return (
            f"learning rate {learning_rate:g} is past the stability limit 2(1 + beta) / "
            f"lambda_max = {limit:.3g} at the minimum (1, 1) (lambda_max "
            f"{2 * (1 + beta) / limit:.4g}): there every step overshoots along the valley's "
            "steep side by more than it corrects, so the run can never settle at the minimum"
        )
    return None


def path_problem(path_S2) -> str | None:
    """The first step where the (float64) run has left the plot or stopped being finite."""
    for t, p in enumerate(np.asarray(path_S2, np.float64)):
        if not np.all(np.isfinite(p)) or np.abs(p).max() > ESCAPE_RADIUS:
            return (
                f"the run diverged: at step {t} it is past |x|, |y| = {ESCAPE_RADIUS:g}. A "
                "lower learning rate or less momentum keeps it on the map"
            )
    return None


def step(p_2, v_2, learning_rate, beta):
    """One heavy-ball step: (p, v) -> (p, v)."""
    v_2 = beta * v_2 + jax.grad(rosenbrock)(p_2)
    return p_2 - learning_rate * v_2, v_2


def python_loop(start_2, learning_rate, beta, steps):
    """The first ``steps`` steps, op by op from Python (no jit): (steps + 1, 2) float32."""
    p, v = jnp.asarray(start_2, jnp.float32), jnp.zeros(2, jnp.float32)
    path = [p]
    for _ in range(steps):
        p, v = step(p, v, learning_rate, beta)
        path.append(p)
    return np.asarray(jnp.stack(path))


_jitted_step = jax.jit(step)


def jit_loop(start_2, learning_rate, beta, steps):
    """A Python loop calling the jitted step: (steps + 1, 2) float32."""
    p, v = jnp.asarray(start_2, jnp.float32), jnp.zeros(2, jnp.float32)
    path = [p]
    for _ in range(steps):
        p, v = _jitted_step(p, v, learning_rate, beta)
        path.append(p)
    return np.asarray(jnp.stack(path))


def scan_run(start_2, learning_rate, beta, steps):
    """One compiled lax.scan over all steps: positions (steps + 1, 2) float32."""
    return scan_states(start_2, learning_rate, beta, steps)[0]


@functools.partial(jax.jit, static_argnames="steps")
def scan_states(start_2, learning_rate, beta, steps):
    """(positions, velocities), each (steps + 1, 2) float32, from one lax.scan."""
    p0, v0 = jnp.asarray(start_2, jnp.float32), jnp.zeros(2, jnp.float32)

    def body(carry, _):
        p, v = step(*carry, learning_rate, beta)
        return (p, v), (p, v)

    _, (path, velocity) = jax.lax.scan(body, (p0, v0), length=steps)
    return jnp.concatenate([p0[None], path]), jnp.concatenate([v0[None], velocity])


def one_step_reference(p_S2, v_S2, learning_rate, beta) -> tuple[np.ndarray, np.ndarray]:
    """The float64 update applied to every recorded float32 state (p_t, v_t): the (p, v) each
    step should have produced, (S, 2) each for steps 1..S. Comparing step by step keeps
    float32 rounding from being amplified along the trajectory (momentum on Rosenbrock
    amplifies a 1e-7 difference to 1e-3 over thousands of steps)."""
    p_S2, v_S2 = np.asarray(p_S2, np.float64), np.asarray(v_S2, np.float64)
    v_next = np.stack(
        [beta * v + gradient_numpy(p) for p, v in zip(p_S2[:-1], v_S2[:-1], strict=True)]
    )
    return p_S2[:-1] - learning_rate * v_next, v_next


def reference(start_2, learning_rate, beta, steps) -> np.ndarray:
    """The same update in NumPy float64 with the closed-form gradient: (steps + 1, 2)."""
    p, v = np.asarray(start_2, np.float64), np.zeros(2)
    path = [p]
    with np.errstate(all="ignore"):
        for _ in range(steps):
            v = beta * v + gradient_numpy(p)
            p = p - learning_rate * v
            path.append(p)
    return np.stack(path)


def diverged(path_S2) -> bool:
    path_S2 = np.asarray(path_S2)
    return bool(not np.all(np.isfinite(path_S2)) or np.abs(path_S2).max() > ESCAPE_RADIUS)


def final_loss(path_S2) -> float:
    return float(rosenbrock_numpy(path_S2[-1, 0], path_S2[-1, 1]))


def momentum_claim_problems(learning_rate, beta, steps, starts=CLAIM_STARTS) -> list[str]:
    """Starts where momentum does not end at least 10x lower than plain GD (empty: claim holds)."""
    problems = []
    for start in starts:
        plain = final_loss(np.asarray(scan_run(jnp.asarray(start), learning_rate, 0.0, steps)))
        heavy = final_loss(np.asarray(scan_run(jnp.asarray(start), learning_rate, beta, steps)))
        if not heavy * 10 <= plain:
            problems.append(f"start {start}: momentum {heavy:.3g}, plain {plain:.3g}")
    return problems


def landscape(x_range=(-2.0, 2.0), y_range=(-1.0, 3.0), n=60) -> list[dict]:
    """log10(1 + f) on an n x n grid: rows {x, y, x2, y2, log f} for rect marks."""
    xs, ys = np.linspace(*x_range, n + 1), np.linspace(*y_range, n + 1)
    rows = []
    for i in range(n):
        for j in range(n):
            cx, cy = (xs[i] + xs[i + 1]) / 2, (ys[j] + ys[j + 1]) / 2
            rows.append(
                {
                    "x": xs[i],
                    "x2": xs[i + 1],
                    "y": ys[j],
                    "y2": ys[j + 1],
                    "log10(1 + f)": float(np.log10(1 + rosenbrock_numpy(cx, cy))),
                }
            )
    return rows
