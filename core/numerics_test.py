import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.perf.precision import mxu_matmul

REFERENCE = np.array([[4.0, -0.5], [0.25, 0.0]])
RESULT = np.array([[4.2, -0.5], [0.25, 0.1]])  # errors 0.2 (at |ref| 4) and 0.1 (at ref 0)


def test_each_measure_against_hand_worked_values():
    assert numerics.max_abs_error(RESULT, REFERENCE) == pytest.approx(0.2)
    assert numerics.scaled_max_error(RESULT, REFERENCE) == pytest.approx(0.2 / 4.0)
    # per element: 0.2 / 4 = 0.05 and 0.1 / max(0, 1) = 0.1
    assert numerics.elementwise_relative_error(RESULT, REFERENCE) == pytest.approx(0.1)
    frobenius = np.sqrt(0.2**2 + 0.1**2) / np.sqrt(16 + 0.25 + 0.0625)
    assert numerics.norm_relative_error(RESULT, REFERENCE) == pytest.approx(frobenius)


def test_below_magnitude_one_the_scaled_error_is_absolute():
    assert numerics.scaled_max_error([0.1 + 1e-3], [0.1]) == pytest.approx(1e-3)


@pytest.mark.parametrize(
    "measure",
    [
        numerics.max_abs_error,
        numerics.scaled_max_error,
        numerics.elementwise_relative_error,
        numerics.norm_relative_error,
    ],
)
def test_a_non_finite_result_never_passes_and_shapes_must_match(measure):
    assert measure([1.0, np.nan], [1.0, 2.0]) == float("inf")
    assert measure([1.0, np.inf], [1.0, 2.0]) == float("inf")
    assert measure([1.0, np.inf], [1.0, -np.inf]) == float("inf")
    assert measure([1.0, 2.0], [1.0, np.nan]) == float("inf")
    assert measure([1.0, np.inf, np.nan], [1.0, np.inf, np.nan]) == 0.0  # the same values
    with pytest.raises(ValueError, match="shape"):
        measure(np.zeros(3), np.zeros(4))


def test_bfloat16_and_jax_arrays_are_widened_exactly():
    x = jnp.asarray([1.0, 2.5, -3.0], jnp.bfloat16)
    assert numerics.as_float64(x).dtype == np.float64
    assert numerics.max_abs_error(x, [1.0, 2.5, -3.0]) == 0.0
    # bfloat16 rounds 1 + 2**-9 to 1: the error is exactly 2**-9
    assert numerics.max_abs_error(jnp.asarray([1 + 2**-9], jnp.bfloat16), [1 + 2**-9]) == 2**-9


def test_pytrees_report_the_worst_leaf_and_refuse_other_structures():
    reference = {"w": np.ones((2, 2)), "b": np.zeros(2)}
    result = {"w": np.ones((2, 2)) * 1.5, "b": np.full(2, 0.1)}
    assert numerics.tree_scaled_max_error(result, reference) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="structures differ"):
        numerics.tree_scaled_max_error({"w": np.ones(2)}, reference)


def test_tolerance_table_reads_names_and_dtypes():
    assert numerics.tolerance("bfloat16") == numerics.tolerance(jnp.bfloat16) == 2e-2
    assert numerics.tolerance(np.float32, backend="cpu") == 1e-5  # the table (a TPU: below)
    with pytest.raises(ValueError, match="no tolerance for dtype 'complex64'"):
        numerics.tolerance("complex64")


def test_the_normwise_tree_error_has_one_scale_and_no_floor():
    reference = {"w": np.full((2, 2), 1e-3), "b": np.array([2e-3, 0.0])}
    result = {"w": np.full((2, 2), 1e-3), "b": np.array([2e-3, 1e-4])}
    # 1e-4 off, against the largest reference magnitude 2e-3 (tree_scaled_max_error: 1e-4)
    assert numerics.tree_normwise_max_error(result, reference) == pytest.approx(0.05)
    assert numerics.tree_scaled_max_error(result, reference) == pytest.approx(1e-4)
    assert numerics.tree_normwise_max_error(reference, reference) == 0.0
    nan = {"w": np.full((2, 2), np.nan), "b": reference["b"]}
    assert numerics.tree_normwise_max_error(nan, reference) == float("inf")
    with pytest.raises(ValueError, match="structures differ"):
        numerics.tree_normwise_max_error({"w": np.ones(2)}, reference)


# --- float32 on a TPU (issue 37): the tolerance follows the backend and the matmul precision ---


def test_no_cpu_tolerance_got_looser():
    assert numerics.TOLERANCE == {
        "float64": 1e-12,
        "float32": 1e-5,
        "float16": 3e-3,
        "bfloat16": 2e-2,
        "int32": 0.0,
        "int8": 0.0,
    }
    for name, value in numerics.TOLERANCE.items():
        bound = numerics.tolerance(name, backend="cpu")
        assert bound == value and bound.reason == ""
    assert numerics.tolerance("float32", backend="cpu", precision="default") == 1e-5


def test_float32_on_a_tpu_follows_the_matmul_precision_and_says_why():
    default = numerics.tolerance("float32", backend="tpu", precision="default")
    assert default == numerics.TOLERANCE["bfloat16"]
    assert "TPU at DEFAULT matmul precision (1 bfloat16 pass" in default.reason
    for precision in ("highest", "float32", jax.lax.Precision.HIGHEST, "HIGHEST"):
        bound = numerics.tolerance("float32", backend="tpu", precision=precision)
        assert bound == 5e-4 and "HIGHEST matmul precision (6 bfloat16 passes)" in bound.reason
    high = numerics.tolerance("float32", backend="tpu", precision="bfloat16_3x")
    assert high == 5e-4 and "HIGH matmul" in high.reason
    with jax.default_matmul_precision("highest"):
        assert numerics.tolerance("float32", backend="tpu") == 5e-4
    assert numerics.tolerance("float32", backend="tpu") == default  # DEFAULT again
    assert numerics.tolerance("bfloat16", backend="tpu") == 2e-2  # other dtypes: the table
    with pytest.raises(ValueError, match="unknown matmul precision"):
        numerics.tolerance("float32", backend="tpu", precision="double")


def test_float32_without_a_matmul_keeps_the_table_on_a_tpu():
    bound = numerics.tolerance("float32", backend="tpu", matmul=False)
    assert bound == numerics.TOLERANCE["float32"] and bound.reason == ""
    assert numerics.tolerance("float32", backend="tpu") == numerics.TOLERANCE["bfloat16"]


def test_a_tpu_is_never_asked_for_float64():
    with pytest.raises(ValueError, match="a TPU has no float64.*NumPy"):
        numerics.tolerance("float64", backend="tpu")


def test_before_any_jax_computation_the_table_applies(tmp_path):
    import subprocess
    import sys

    code = (
        "from core import numerics; import jax; t = numerics.tolerance('float32'); "
        "print(numerics.computed_backend(), float(t), repr(t.reason))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split() == ["None", "1e-05", "''"]
    jnp.ones(1).block_until_ready()  # this process has computed: its backend is known
    assert numerics.computed_backend() == jax.default_backend()  # "cpu" in CI, "tpu" on a chip


def _attention(q, k, v, matmul, causal=True, flip=1.0):
    """Causal softmax attention (T, D) with ``matmul`` for both products; ``flip`` and
    ``causal`` plant a sign bug and a missing mask."""
    scores = flip * matmul(q, k.T) / np.sqrt(q.shape[-1])
    if causal:
        t = q.shape[0]
        scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -jnp.inf)
    return matmul(jax.nn.softmax(scores, axis=-1), v)


def _attention64(q, k, v):
    scores = q @ k.T / np.sqrt(q.shape[-1])
    scores = np.where(np.tril(np.ones(scores.shape, bool)), scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("t, d", [(64, 32), (256, 128)])
@pytest.mark.parametrize("passes, precision", [(1, "default"), (3, "high")])
def test_the_tpu_tolerance_passes_the_mxu_and_fails_planted_bugs(seed, t, d, passes, precision):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((t, d)) for _ in range(3))
    w = rng.standard_normal((d, d)) / np.sqrt(d)  # square: its transpose is a plausible bug
    bound = numerics.tolerance("float32", backend="tpu", precision=precision)
    matmul = lambda a, b: mxu_matmul(a, b, precision.upper())  # noqa: E731  (emulated passes)

    # a linear layer + tanh, and causal attention: right on the emulated MXU
    layer = numerics.scaled_max_error(jnp.tanh(matmul(q, w)), np.tanh(q @ w))
    attention = numerics.scaled_max_error(_attention(q, k, v, matmul), _attention64(q, k, v))
    assert layer <= bound and attention <= bound, (layer, attention, bound)
    if passes == 1:  # why the rule exists: one bfloat16 pass fails the CPU's float32 bound
        assert max(layer, attention) > numerics.tolerance("float32", backend="cpu")

    # planted bugs: a transposed weight, a sign, a missing causal mask
    transposed = numerics.scaled_max_error(jnp.tanh(matmul(q, w.T)), np.tanh(q @ w))
    sign = numerics.scaled_max_error(_attention(q, k, v, matmul, flip=-1.0), _attention64(q, k, v))
    unmasked = numerics.scaled_max_error(
        _attention(q, k, v, matmul, causal=False), _attention64(q, k, v)
    )
    assert min(transposed, sign, unmasked) > 10 * bound, (transposed, sign, unmasked, bound)


def test_the_tpu_tolerances_hold_what_a_v5e_measured_with_margin():
    """The committed TPU record (benchmarks/float32_precision.py run on a v5e chip): every
    figure at a precision within half its tolerance; the elementwise functions within half
    HIGHEST's (they set its floor)."""
    from core.perf import records

    record = records.latest("float32_precision")
    assert record.machine.platform == "tpu" and record.figures["device_kind"] == "TPU v5 lite"
    figures = {k: v for k, v in record.figures.items() if isinstance(v, float)}
    for level, (_passes, bound) in numerics.TPU_FLOAT32.items():
        at_level = {k: v for k, v in figures.items() if k.endswith("_" + level.lower())}
        assert len(at_level) == 4 and max(at_level.values()) <= bound / 1.5, (level, at_level)
    elementwise = {k: v for k, v in figures.items() if k.startswith("elementwise_")}
    assert len(elementwise) == 6
    assert max(elementwise.values()) <= numerics.TPU_FLOAT32["HIGHEST"][1] / 2
    # and CPU float32 is still the table's: the TPU's HIGHEST error would fail it
    assert max(elementwise.values()) > numerics.tolerance("float32", backend="cpu")


def test_a_checks_own_bound_is_carried_to_the_tpu_with_its_reason():
    assert numerics.scaled_tolerance(1e-4, backend="cpu") == 1e-4
    assert numerics.scaled_tolerance(1e-4, backend="cpu").reason == ""
    default = numerics.scaled_tolerance(1e-4, backend="tpu", precision="default")
    assert default == pytest.approx(1e-4 * 2e-2 / 1e-5)
    assert default.reason.startswith("the CPU's 0.0001 x 2000: float32 on a TPU at DEFAULT")
    highest = numerics.scaled_tolerance(1e-4, backend="tpu", precision="highest")
    assert highest == pytest.approx(1e-4 * 50)
