"""Reference solution of transformations.losses_value_and_grad.mse_value_and_grad."""

import jax
import jax.numpy as jnp


def mse_value_and_grad(params, x_BD, y_BK):
    """((loss, metrics), grads) of the mean squared error of x_BD @ w_DK + b_K against y_BK.

    loss_fn returns a tuple, so has_aux=True: JAX differentiates the first entry (the loss)
    with respect to the first argument (the params dict) and carries the metrics along.
    The grads come back with the structure of params.
    """

    def loss_fn(p):
        pred_BK = x_BD @ p["w_DK"] + p["b_K"]
        error_BK = pred_BK - y_BK
        return jnp.mean(error_BK**2), {"max abs error": jnp.max(jnp.abs(error_BK))}

    return jax.value_and_grad(loss_fn, has_aux=True)(params)
