"""PyTorch autograd for "Losses and value_and_grad": the second independent reference.

Apart from losses_value_and_grad.py so that what imports the lesson's library (an exercise's
live value) never needs torch; only the app's torch check and its test import this.
"""

from __future__ import annotations

from core.lessons.transformations.losses_value_and_grad import TORCH_DTYPES, _as_numpy, problem


def torch_value_and_grad(params, x_BD, y, loss: str, dtype: str = "float64"):
    """(loss, grads as NumPy float64) from PyTorch autograd in ``dtype``."""
    import torch

    if dtype not in TORCH_DTYPES:
        raise ValueError(f"torch dtype must be one of {TORCH_DTYPES}, got {dtype!r}")
    torch_dtype = getattr(torch, dtype)
    p, x, y = _as_numpy(params, x_BD, y)
    w = torch.tensor(p["w_DK"], dtype=torch_dtype, requires_grad=True)
    b = torch.tensor(p["b_K"], dtype=torch_dtype, requires_grad=True)
    out = torch.tensor(x, dtype=torch_dtype) @ w + b
    if loss == "mse":
        value = torch.nn.functional.mse_loss(out, torch.tensor(y, dtype=torch_dtype))
    elif loss == "cross_entropy":
        value = torch.nn.functional.cross_entropy(out, torch.tensor(y, dtype=torch.long))
    else:
        raise ValueError(problem(loss, 2))
    value.backward()
    grads = {"w_DK": w.grad.double().numpy(), "b_K": b.grad.double().numpy()}
    return float(value.detach()), grads
