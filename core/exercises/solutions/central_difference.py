"""Reference solution of transformations.first_gradient.central_difference."""

import numpy as np


def f(x):
    """The lesson's f(x) = sin(x) * exp(-x / 4); the tests differentiate this one."""
    return np.sin(x) * np.exp(-x / 4)


def central_difference(x_N):
    """f'(x) at each point of x_N by (f(x + h) - f(x - h)) / (2 h), in float64.

    The points are cast to float64 first: a float32 x + h is rounded to float32 (eps ~1.2e-7),
    and no step survives that. h = 1e-5 sits near the bottom of the float64 V: the formula's
    own error h² |f'''| / 6 ~ 1e-10 and roundoff eps |f| / h ~ 1e-11 balance around
    h = eps^(1/3) ~ 6e-6.
    """
    x = np.asarray(x_N, dtype=np.float64)
    h = 1e-5
    return (f(x + h) - f(x - h)) / (2 * h)
