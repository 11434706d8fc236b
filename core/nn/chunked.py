"""Training loops run as compiled chunks of a fixed length, so a new step count compiles nothing.

A ``lax.scan``'s length is part of its program: a whole run in one scan inside a jitted
function compiles the training program again for every new step count (count them with
``counting_compiles``), and a learner moves a lesson's steps control often. ``ChunkedScan`` compiles
one program per (step function, static arguments, shapes) that runs ``chunk`` steps, and calls
it back to back, carrying the state from chunk to chunk: the same loop body on the same carry,
so the results are bitwise those of one scan over all the steps (chunked_test checks it).

A run whose steps are not a multiple of ``chunk`` ends with one shorter chunk, compiled once per
remainder length. Pick ``chunk`` equal to the steps control's step size (or a divisor of it):
every count the control offers is then whole chunks, and a move compiles nothing. Padding the
remainder to a whole chunk would never compile a second length, but it needs a masked loop body
(another program, whose bits need not be those of the plain scan) and runs the padded steps for
nothing; a remainder costs one compile, once.

Dimension glossary: S steps, K steps in one chunk.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

DEFAULT_CHUNK = 10  # most of the course's steps controls move by 10


class ChunkedScan:
    """``step(carry, x, *args, **static) -> (carry, per-step values)`` run for many steps.

    ``x`` is the step's slice of ``xs`` (a pytree with a leading S axis), or, without ``xs``,
    the step's index 0..S-1 (an int32 scalar, counted across chunks). ``args`` are traced
    (new values reuse the program); keyword arguments are static (hashable: a new value
    compiles a new program). Create one per step function, at module level: ``step`` is
    part of the compiled program's identity.
    """

    def __init__(self, step: Callable, *, chunk: int = DEFAULT_CHUNK):
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        self.step = step
        self.chunk = chunk
        self._compiled = jax.jit(self._scan, static_argnames=("length", "static"))

    def _scan(self, carry, xs_K, args, length: int, static: tuple):
        def body(carry, x):
            return self.step(carry, x, *args, **dict(static))

        return jax.lax.scan(body, carry, xs_K, length=length)

    def __call__(self, carry, *args, steps: int | None = None, xs=None, **static):
        """(final carry, per-step values with a leading S axis as NumPy).

        Give ``steps``, or ``xs`` (its leading axis is the step count; ``steps`` may repeat
        it). The carry stays on the device; the per-step values are joined on the host (an
        eager concatenate would compile again for every step count).
        """
        if xs is not None:
            xs = jax.device_get(xs)  # sliced on the host: an eager slice compiles per start
            count = jax.tree.leaves(xs)[0].shape[0]
            if steps is not None and steps != count:
                raise ValueError(f"steps={steps} but xs has {count} entries")
            steps = count
        if steps is None or steps < 1:
            raise ValueError(f"need steps >= 1 (or xs with at least one entry), got {steps}")
        static_items = tuple(sorted(static.items()))
        # on the device once: host arrays, then the chunks' own outputs, would be two entries
        carry, args = jax.device_put((carry, args))
        chunks = []
        for start in range(0, steps, self.chunk):
            length = min(self.chunk, steps - start)
            if xs is None:
                xs_K = np.arange(start, start + length, dtype=np.int32)
            else:
                xs_K = jax.tree.map(lambda x, s=start, n=length: x[s : s + n], xs)
            carry, values = self._compiled(carry, xs_K, args, length, static_items)
            chunks.append(values)
        values = jax.tree.map(lambda *parts: np.concatenate(parts), *jax.device_get(chunks))
        return carry, values

    def _cache_size(self) -> int:
        """How many chunk programs are compiled so far (jax.jit's count, for tests)."""
        return self._compiled._cache_size()


def scan_reference(step: Callable, carry, *args, steps: int | None = None, xs=None, **static):
    """The same run as one jitted ``lax.scan`` over all the steps (a new program per count):
    what ``ChunkedScan`` must equal bit for bit."""

    @jax.jit
    def run(carry, xs, args):
        return jax.lax.scan(lambda c, x: step(c, x, *args, **static), carry, xs)

    if xs is None:
        xs = jnp.arange(steps, dtype=jnp.int32)
    carry, values = run(carry, xs, args)
    return carry, jax.device_get(values)


@contextlib.contextmanager
def counting_compiles() -> Iterator[list[str]]:
    """Collect the name of every XLA program compiled inside the block (jax.monitoring)."""
    names: list[str] = []

    def listen(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            names.append(str(kwargs.get("fun_name")))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield names
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
