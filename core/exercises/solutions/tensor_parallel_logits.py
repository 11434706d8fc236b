"""Reference solution of distributed.sharded_train_step.tensor_parallel_logits: the lesson's
MLP forward, tensor parallel over the hidden units, with jax.shard_map."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def tensor_parallel_logits(params, x_BF, mesh):
    """(B, C) logits of tanh(x @ w1 + b1) @ w2 + b2, replicated on the mesh's axis "x".

    Each device holds H/D hidden units: the columns of w1 and the entries of b1 that make
    them, and the rows of w2 that read them. tanh acts on each hidden unit alone, so a device
    computes its units' activations without talking to anyone; h @ w2 is a sum over all H
    units, so each device has a partial sum over its own units, and one psum (an all-reduce)
    adds them. b2 is added once, after the psum (before it, every device would add it: D
    times).
    """

    def local(w1_Fh, b1_h, w2_hC, b2_C, x_BF):
        h_Bh = jnp.tanh(x_BF @ w1_Fh + b1_h)  # this device's H/D hidden units
        partial_BC = h_Bh @ w2_hC  # their share of the contraction over H
        return jax.lax.psum(partial_BC, "x") + b2_C

    forward = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P(None, "x"), P("x"), P("x"), P(), P()),
        out_specs=P(),
    )
    return jax.jit(forward)(params["w1"], params["b1"], params["w2"], params["b2"], x_BF)
