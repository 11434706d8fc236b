"""Reference solution of distributed.sharded_step: one data-parallel SGD step with shard_map."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def sharded_sgd_step(params, batch, mesh, learning_rate):
    """New params {"w": (F, O), "b": (O,)} after one SGD step on the batch {"x": (B, F),
    "y": (B, O)}, float32, with the batch split over the mesh axis "data" (B divisible by
    its size) and the params replicated.

    loss(params, batch) = mean over the B rows of sum over the O outputs of
    (x @ w + b - y) ** 2. Each device computes its shard's mean loss; the shards are equal
    in size, so their pmean is the full batch's loss, and its gradient (taken outside the
    shard_map, through the pmean) is the mean of the per-device gradients.
    """

    def shard_loss(params, batch):
        residual_BO = batch["x"] @ params["w"] + params["b"] - batch["y"]
        return jnp.mean(jnp.sum(residual_BO**2, axis=-1))  # this shard's B / D rows

    def global_loss(params, batch):
        return jax.lax.pmean(shard_loss(params, batch), "data")  # mean over the D shards

    loss = jax.shard_map(global_loss, mesh=mesh, in_specs=(P(), P("data")), out_specs=P())

    @jax.jit
    def step(params, batch):
        # Not jax.grad inside the shard_map followed by pmean: with shard_map's replication
        # check on (the default), the gradient of a replicated parameter inside it is
        # already summed over the devices, and a pmean of that sum is still the sum (D x).
        grads = jax.grad(loss)(params, batch)
        return jax.tree.map(lambda p, g: p - learning_rate * g, params, grads)

    return step(params, batch)
