"""Reference solution of distributed.communication_algorithms.ring_allreduce: a ring
all-reduce (reduce-scatter, then all-gather) simulated step by step over D NumPy buffers."""

import numpy as np


def ring_allreduce(grads_DN):
    """(result_DN, steps): every device's buffer after a ring all-reduce, and the chunk each
    device sent at each step.

    Device i's buffer is cut into D chunks of N/D floats; at each step every device sends one
    chunk to device (i + 1) % D, all at once. Reduce-scatter (D - 1 steps): at step s device i
    sends chunk (i - s) % D, the one it has just received and added its own part to, and the
    receiver adds it in; after D - 1 steps device i holds the whole sum of chunk (i + 1) % D.
    All-gather (D - 1 steps): at step s device i sends chunk (i + 1 - s) % D, starting with
    the chunk it completed, and the receiver overwrites its copy.
    """
    buffers_DN = np.array(grads_DN, copy=True)
    devices, length = buffers_DN.shape
    size = length // devices
    chunk = lambda c: slice(c * size, (c + 1) * size)  # noqa: E731
    steps = []
    for phase in ("reduce-scatter", "all-gather"):
        for s in range(devices - 1):
            first = 0 if phase == "reduce-scatter" else 1
            sent = [(i - s + first) % devices for i in range(devices)]
            # every device sends at once: copy what is sent before anyone receives
            payload = [buffers_DN[i, chunk(c)].copy() for i, c in enumerate(sent)]
            for i, c in enumerate(sent):
                receiver = (i + 1) % devices
                if phase == "reduce-scatter":
                    buffers_DN[receiver, chunk(c)] += payload[i]
                else:
                    buffers_DN[receiver, chunk(c)] = payload[i]
            steps.append(sent)
    return buffers_DN, steps
