import jax
import numpy as np
import pytest

from core import numerics
from core.perf import remat
from core.tpu import topology_compile

# On a chip: float32 matmuls at HIGHEST, bounds from numerics (the CPU's values on the CPU).
pytestmark = pytest.mark.usefixtures("highest_matmul_precision_on_tpu")


@pytest.fixture(scope="module", params=[(16, 2, 8), (32, 3, 4)], ids=["w16d2", "w32d3"])
def problem(request):
    width, depth, batch = request.param
    return remat.init_mlp(jax.random.key(width), width, depth, batch)


@pytest.mark.parametrize("policy", remat.POLICIES)
def test_gradients_match_numpy_float64_backprop(problem, policy):
    params, x, y = problem
    grads = remat.grad_fn(policy)(params, x, y)
    reference = remat.mlp_grads_numpy(params, x, y)
    assert remat.max_grad_difference(grads, reference) < numerics.tolerance("float32")


@pytest.mark.parametrize("policy", remat.POLICIES[1:])
def test_every_policy_gives_the_no_remat_gradients(problem, policy):
    params, x, y = problem
    baseline = remat.grad_fn("none")(params, x, y)
    same = numerics.scaled_tolerance(1e-6)  # the same gradients, some values recomputed
    assert remat.max_grad_difference(remat.grad_fn(policy)(params, x, y), baseline) < same


def test_saved_residuals_shrink_with_the_policy(problem):
    params, x, y = problem
    depth, (batch, width) = len(params), x.shape
    saved = {}
    for policy in remat.POLICIES:
        residuals, text = remat.saved_residuals(policy, params, x, y)
        assert len(residuals) == len([line for line in text.splitlines() if line.strip()])
        saved[policy] = sum(r.nbytes for r in residuals if not r.from_argument)
    activation = batch * width * 4
    assert saved["none"] == saved["everything_saveable"]
    # dots_saveable keeps one matmul output per layer (+ the loss residual)
    assert saved["dots_saveable"] == depth * activation + activation
    # nothing_saveable keeps only the loss's own residual outside the checkpoint
    assert saved["nothing_saveable"] == activation
    assert saved["nothing_saveable"] < saved["dots_saveable"] < saved["none"]


def test_parse_residual_line():
    residual = remat.parse_residual_line("f32[64,128] output of dot_general from x.py:3")
    assert (residual.dtype, residual.shape, residual.nbytes) == ("f32", (64, 128), 64 * 128 * 4)
    assert remat.parse_residual_line("bf16[] from the argument s").from_argument
    with pytest.raises(ValueError, match="residual"):
        remat.parse_residual_line("nonsense")


def test_compiled_memory_on_cpu_counts_arguments(problem):
    params, x, y = problem
    memory = remat.compiled_memory("nothing_saveable", params, x, y)
    argument_bytes = sum(np.asarray(a).nbytes for a in jax.tree.leaves((params, x, y)))
    assert memory["argument_size_in_bytes"] == argument_bytes


@pytest.mark.skipif(topology_compile.libtpu_problem() is not None, reason="libtpu not installed")
def test_compiled_memory_on_cpu_is_the_cpu_compilers_whatever_the_default_device(problem):
    """Kind 6 of issue 37: "on this CPU" is the CPU compiler's report on a TPU host too (here a
    v5e chip's compiler, ahead of time, stands in for the TPU default device)."""
    params, x, y = problem
    on_cpu = remat.compiled_memory("nothing_saveable", params, x, y)
    with jax.default_device(topology_compile.topology_devices("v5e:2x2")[0]):
        assert remat.compiled_memory("nothing_saveable", params, x, y) == on_cpu


@pytest.mark.skipif(topology_compile.libtpu_problem() is not None, reason="libtpu not installed")
def test_compiled_memory_for_a_tpu_topology():
    params, x, y = remat.init_mlp(jax.random.key(0), 128, 2, 128)
    memory = remat.compiled_memory("dots_saveable", params, x, y, topology="v5e:2x2")
    argument_bytes = sum(np.asarray(a).nbytes for a in jax.tree.leaves((params, x, y)))
    assert memory["argument_size_in_bytes"] >= argument_bytes
    assert topology_compile.peak_bytes(memory) >= argument_bytes


def test_unknown_policy():
    with pytest.raises(ValueError, match="policy"):
        remat.policy("save_some")
