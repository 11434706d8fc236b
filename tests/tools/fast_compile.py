"""The suite's XLA:CPU programs compiled with LLVM's optimizer off.

core.runtime.FAST_COMPILE_XLA_FLAGS, set by conftest.py in the controller before JAX starts.

Why: the suite compiles thousands of small programs (every test, every lesson run headless and
in a browser kernel) and runs each for milliseconds; LLVM's optimization passes were about a
third of an in-process test module's CPU time (core/optim/optimizers_test.py: 53.5 -> 36.0 CPU
s with the compilation cache off, 2-core host, jax 0.10.2). What the checks check is
unchanged: the same HLO, the same fusions and library kernels; results may differ from a
default build in the last bits, which the tolerances against independent references cover, and
a comparison of two runs (bitwise resume, chunked against one scan) runs both under the same
flags, since every process of the session inherits XLA_FLAGS from the controller.

The suite-wide setting is the suite's alone: only its controller sets it, on the CPU backend
(a chip session keeps XLA's defaults); a learner's lesson and a benchmark run with XLA's
defaults, but for the Keras track's jax children, which ask for the same flags themselves.
JAX_LAB_TEST_FAST_COMPILE=0 keeps XLA's defaults (to reproduce a learner's run bit for bit
inside the suite).
"""

from __future__ import annotations

import os

from core import runtime  # no JAX import: safe before the backend is chosen

ENV_DISABLE = "JAX_LAB_TEST_FAST_COMPILE"  # "0" keeps XLA's default optimization


def enable(backend: str, environ=os.environ) -> str:
    """Add the fast-compile flags to ``environ``'s XLA_FLAGS for a CPU session; say so."""
    if backend != "cpu":
        return f"XLA:CPU fast compile: off (test backend {backend})"
    if environ.get(ENV_DISABLE) == "0":
        return f"XLA:CPU fast compile: off ({ENV_DISABLE}=0)"
    environ["XLA_FLAGS"] = runtime.with_fast_compile(environ.get("XLA_FLAGS", ""))
    return f"XLA:CPU fast compile: on (XLA_FLAGS={environ['XLA_FLAGS']})"
