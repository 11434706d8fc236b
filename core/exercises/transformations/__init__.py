"""Exercises of the phase "JAX transformations", one module per lesson.

- ``transformations.first_gradient.derivative_at_point`` (predict): ``jax.grad(f)(x0)`` for
  one of the lesson's functions, worked out by hand.
- ``transformations.first_gradient.central_difference`` (code): a float64 central difference
  whose step the learner picks, accurate to 1e-8.
- ``transformations.losses_value_and_grad.bias_gradient`` (predict): one entry of the
  cross-entropy's gradient with respect to the bias, at zero parameters.
- ``transformations.losses_value_and_grad.mse_value_and_grad`` (code): the mean squared
  error, a metric and the gradients, returned as ``value_and_grad(..., has_aux=True)`` does.
- ``transformations.vmap.output_shape`` (predict): the shape ``jax.vmap`` returns for
  in_axes/out_axes set by the seed.
- ``transformations.vmap.pairwise_distances`` (code): batched pairwise distances, stable far
  from the origin.

The items live in the lesson modules (core.exercises.transformations.first_gradient,
.losses_value_and_grad, .vmap); what two of them share (the phase title, the checks of a
learner's result) in ._shared.
"""

from __future__ import annotations

from core.assessment.items import Item
from core.exercises.transformations._shared import PHASE
from core.exercises.transformations.first_gradient import CentralDifference, DerivativeAtPoint
from core.exercises.transformations.losses_value_and_grad import BiasGradient, MseValueAndGrad
from core.exercises.transformations.vmap import OutputShape, PairwiseDistances

__all__ = ["ITEMS", "PHASE"]

ITEMS: tuple[Item, ...] = (
    DerivativeAtPoint(),
    CentralDifference(),
    BiasGradient(),
    MseValueAndGrad(),
    OutputShape(),
    PairwiseDistances(),
)
