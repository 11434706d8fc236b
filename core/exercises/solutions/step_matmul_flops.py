"""Reference solution of performance.remat_tradeoffs.step_matmul_flops: the matmul FLOPs of
one gradient step of the lesson's MLP under a remat policy."""


def step_matmul_flops(batch, width, depth, policy):
    """(forward, backward, recompute) matmul FLOPs of jax.grad(loss) w.r.t. the parameters.

    - forward: one (B, W) @ (W, W) matmul a layer, 2·B·W·W FLOPs each;
    - backward: a layer computes its weight gradient h_in.T @ G and, for the layer below,
      G @ W.T; the first layer's input is x, which needs no gradient: 2·depth - 1 matmuls;
    - recompute: nothing_saveable keeps no activation, so the backward pass runs the whole
      forward again (depth matmuls); dots_saveable keeps the matmul outputs and recomputes
      only the bias add and the tanh; none and everything_saveable recompute nothing.
    """
    if policy not in ("none", "everything_saveable", "dots_saveable", "nothing_saveable"):
        raise ValueError(f"unknown policy {policy!r}")
    one = 2 * batch * width * width
    recompute = depth * one if policy == "nothing_saveable" else 0
    return depth * one, (2 * depth - 1) * one, recompute
