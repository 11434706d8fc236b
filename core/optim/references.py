"""Independent references the hand-written optimizers are checked against: optax and torch
running the same fixed gradient sequence.

- ``optax_run(tx, params, grads_S)``: any optax transformation applied step by step in one
  compiled ``lax.scan``; params after every step (leaves with a leading step axis S).
- ``torch_adamw(params, grads_S, learning_rates, b1, b2, eps, weight_decay)``:
  ``torch.optim.AdamW`` (float32, CPU) on the same params and gradients (torch is imported
  inside: ``import core`` stays light).
"""

from __future__ import annotations

import jax
import numpy as np


def optax_run(tx, params, grads_S):
    """params after every step of the optax transformation ``tx`` fed ``grads_S`` (a pytree
    like params, each leaf with a leading step axis S)."""
    import optax

    def body(carry, grads):
        p, state = carry
        updates, state = tx.update(grads, state, p)
        p = optax.apply_updates(p, updates)
        return (p, state), p

    return jax.jit(lambda p, g: jax.lax.scan(body, (p, tx.init(p)), g)[1])(params, grads_S)


def torch_adamw(params, grads_S, learning_rates, b1, b2, eps, weight_decay):
    """params after every step of torch.optim.AdamW (float32 CPU), the same params and
    gradients; ``learning_rates[t]`` is written into the param group before step t."""
    import torch

    names = list(params)
    tensors = [torch.tensor(np.asarray(params[n]), requires_grad=True) for n in names]
    opt = torch.optim.AdamW(
        tensors, lr=float(learning_rates[0]), betas=(b1, b2), eps=eps, weight_decay=weight_decay
    )
    grads_np = {n: np.asarray(grads_S[n]) for n in names}
    out = {n: [] for n in names}
    for t, lr in enumerate(learning_rates):
        for group in opt.param_groups:
            group["lr"] = float(lr)
        for n, tensor in zip(names, tensors, strict=True):
            tensor.grad = torch.from_numpy(grads_np[n][t].copy())
        opt.step()
        for n, tensor in zip(names, tensors, strict=True):
            out[n].append(tensor.detach().numpy().copy())
    return {n: np.stack(v) for n, v in out.items()}
