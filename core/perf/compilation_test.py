import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core import numerics
from core.perf import compilation

# ----------------------------------------------------------------------------- jit


@pytest.mark.parametrize("name", compilation.JIT_NAMES)
@pytest.mark.parametrize("size", [1, 7, 32])
def test_jit_equals_eager_equals_numpy_float64(name, size):
    results = compilation.jit_eager_reference(name, compilation.example_input(size, seed=size))
    reference = results["numpy float64"]
    assert numerics.scaled_max_error(results["jit"], reference) <= compilation.tolerance(size)
    assert numerics.scaled_max_error(results["eager"], reference) <= compilation.tolerance(size)
    assert results["jit"].shape == results["eager"].shape == reference.shape == (size, size)


def _one_bf16_pass(a, b):
    """a @ b as a TPU's DEFAULT float32 matmul: bfloat16 operands, float32 accumulation."""
    dot = jnp.dot(
        a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), preferred_element_type=jnp.float32
    )
    return np.asarray(dot)


@pytest.mark.parametrize("size", [8, 64, 256])
def test_the_tpu_bound_holds_the_mxu_and_still_fails_a_transpose(size):
    """The TPU bound does not grow with sqrt(size) (2e-2 x 16 at size 256 would pass anything):
    tanh(x @ x^T / C) @ x with one bfloat16 pass (emulated here) is within it, and the same
    with the transpose forgotten is not."""
    x = np.asarray(compilation.example_input(size, seed=3))
    bound = compilation.tolerance(size, backend="tpu")
    assert "TPU at DEFAULT" in bound.reason and bound < 0.03
    assert compilation.tolerance(size, backend="cpu") == 1e-5 * size**0.5 + 1e-6
    reference = np.asarray(compilation.get_example("tanh_matmul").numpy_f(x))
    mxu = _one_bf16_pass(jnp.tanh(_one_bf16_pass(x, x.T) / size), x)
    assert numerics.scaled_max_error(mxu, reference) <= bound
    no_transpose = _one_bf16_pass(jnp.tanh(_one_bf16_pass(x, x) / size), x)
    assert numerics.scaled_max_error(no_transpose, reference) > bound


def test_norm_gelu_rows_are_normalized_before_gelu():
    # GELU(y) is ~y for large y and ~0 for very negative y: check on a row with a known spread.
    x = jnp.array([[-3.0, -1.0, 1.0, 3.0]])
    y = (np.array([-3.0, -1.0, 1.0, 3.0]) - 0.0) / np.sqrt(5.0 + 1e-5)
    expected = 0.5 * y * (1 + np.tanh(0.7978845608 * (y + 0.044715 * y**3)))
    # no matmul here, but rsqrt and tanh: a TPU's float32 transcendentals (tanh 4.4e-5 on a
    # v5e) set its floor, the HIGHEST bound (5e-4; a chip gave 7.3e-5); on a CPU 1e-5
    bound = numerics.tolerance("float32", precision="highest")
    np.testing.assert_allclose(
        compilation.jit_eager_reference("norm_gelu", x)["jit"][0], expected, rtol=bound
    )


@pytest.mark.parametrize("name", compilation.JIT_NAMES)
def test_compile_and_steady_reports_every_measurement(name):
    result = compilation.compile_and_steady(name, 8, repeats=2)
    for key in ("trace_lower_s", "compile_s", "first_call_s", "jit_s", "eager_s"):
        assert result[key] > 0, key
    assert result["speedup"] == pytest.approx(result["eager_s"] / result["jit_s"])
    assert (
        result["size"] == 8
        and result["function"] == name
        and result["backend"] == jax.default_backend()
    )
    assert result["jaxpr_ops"] >= 3 and result["fusions"] >= 1


def test_xla_fuses_the_elementwise_chain():
    # Structure, not speed: eager mode dispatches every jaxpr equation; XLA fuses them.
    result = compilation.compile_and_steady("norm_gelu", 4, repeats=1)
    assert result["fusions"] < result["jaxpr_ops"] / 2


def test_jit_vs_eager_gives_one_row_per_size():
    rows = compilation.jit_vs_eager([2, 4], "tanh_matmul", repeats=1)
    assert [r["size"] for r in rows] == [2, 4]


def test_each_measurement_compiles_a_fresh_function():
    # Two measurements of the same size both trace: neither hits the other's cache.
    first = compilation.get_example("norm_gelu").make()
    second = compilation.get_example("norm_gelu").make()
    assert first is not second
    x = compilation.example_input(3)
    jitted_first = jax.jit(first)
    jitted_first(x)
    assert jitted_first._cache_size() == 1 and jax.jit(second)._cache_size() == 0


def test_donation_deletes_the_donated_input_and_keeps_the_result_right():
    demo = compilation.donation_demo(6)
    assert demo["kept_deleted"] is False
    assert demo["donated_deleted"] is True  # the CPU backend reuses donated buffers
    assert "deleted" in demo["use_after_donation"]
    assert demo["result_error"] <= 1e-6


def test_count_fusions_reads_the_entry_computation():
    text = (
        "%fused_computation {...}\n\n"
        "ENTRY %main {\n  %a = fusion(%p)\n  ROOT %b = f32[] fusion(%a)\n}"
    )
    assert compilation.count_fusions(text) == 2


# ---------------------------------------------------------------- tracing / buckets


@pytest.mark.parametrize(
    "n, pow2, min4", [(1, 1, 4), (3, 4, 4), (4, 4, 4), (5, 8, 8), (17, 32, 32), (64, 64, 64)]
)
def test_bucket_length_is_the_next_power_of_two(n, pow2, min4):
    assert compilation.bucket_length(n, "pow2") == pow2
    assert compilation.bucket_length(n, "pow2", 4) == min4
    assert compilation.bucket_length(n, "exact") == n


def test_padding_with_a_mask_equals_the_unpadded_computation():
    x = np.array([1.0, -2.0, 4.0], dtype=np.float32)
    padded, mask = compilation.pad_to(x, 8)
    np.testing.assert_array_equal(padded, [1, -2, 4, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(mask, [1, 1, 1, 0, 0, 0, 0, 0])
    for center in (False, True):
        got = float(compilation.masked_moment(jnp.asarray(padded), jnp.asarray(mask), center))
        assert got == pytest.approx(compilation.moment_reference(x, center), rel=1e-6)


@pytest.mark.parametrize("bucketing, min_bucket", [("exact", 1), ("pow2", 1), ("pow2", 8)])
@pytest.mark.parametrize("pattern", compilation.CENTER_PATTERNS)
def test_compile_count_equals_the_distinct_buckets(bucketing, min_bucket, pattern):
    lengths = [3, 5, 8, 5, 13, 3, 20, 7]
    centers = compilation.centers_for(pattern, len(lengths))
    records = compilation.run_calls(lengths, centers, bucketing, min_bucket)
    compiles = sum(r.traced for r in records)
    assert compiles == compilation.expected_compiles(lengths, centers, bucketing, min_bucket)
    assert records[-1].cache_size in (None, compiles)  # JAX's own count agrees
    for r in records:
        assert r.padded == compilation.bucket_length(r.length, bucketing, min_bucket)
        assert r.result == pytest.approx(r.reference, rel=1e-5, abs=1e-6)
        assert (r.reason == "cache hit") == (not r.traced)


def test_closed_form_counts():
    lengths = [3, 5, 8, 5, 13, 3, 20]
    off = [False] * len(lengths)
    assert compilation.expected_compiles(lengths, off, "exact") == 5  # 3, 5, 8, 13, 20
    assert compilation.expected_compiles(lengths, off, "pow2") == 4  # 4, 8, 16, 32
    assert compilation.expected_compiles(lengths, off, "pow2", 8) == 3  # 8, 16, 32
    alternate = compilation.centers_for("alternate", len(lengths))
    assert alternate[:3] == [False, True, False]
    assert (
        compilation.expected_compiles(lengths, alternate, "pow2", 64) == 2
    )  # one bucket x 2 flags


def test_jaxpr_shows_the_static_branch():
    centered = compilation.jaxpr_text(8, True)
    plain = compilation.jaxpr_text(8, False)
    assert "f32[8]" in centered and centered.count("sub") == 1
    assert "sub" not in plain


def test_a_traced_flag_cannot_drive_a_python_if():
    assert "boolean conversion" in compilation.nonstatic_flag_error()


def test_bad_inputs_name_the_problem():
    assert compilation.parse_lengths(" 3, 5 8 ,13") == [3, 5, 8, 13]
    with pytest.raises(ValueError, match="at least one"):
        compilation.parse_lengths(" , ")
    with pytest.raises(ValueError, match="whole number"):
        compilation.parse_lengths("3, x")
    with pytest.raises(ValueError, match="1..4096"):
        compilation.parse_lengths("0")
    with pytest.raises(ValueError, match="at most"):
        compilation.parse_lengths(",".join(["2"] * 40))
    with pytest.raises(ValueError, match="power of two"):
        compilation.bucket_length(3, "pow2", 3)
    with pytest.raises(ValueError, match="pad"):
        compilation.pad_to(np.ones(5), 4)
    with pytest.raises(ValueError, match="unknown function"):
        compilation.get_example("relu")
    with pytest.raises(ValueError, match="one flag per call"):
        compilation.run_calls([1, 2], [True], "exact")


def test_calls_read_prefixes_of_one_sequence():
    records = compilation.run_calls([2, 5], [False, True], "exact", seed=3)
    data = compilation.sequence_data(5, seed=3)
    assert records[0].reference == pytest.approx(compilation.moment_reference(data[:2], False))
    assert records[1].reference == pytest.approx(compilation.moment_reference(data, True))


def test_use_after_donation_is_reported_on_repeated_demos():
    # The second demo hits JAX's cached `+ 1`, which reports the deleted buffer differently.
    first = compilation.donation_demo(size=8)
    second = compilation.donation_demo(size=8)
    for demo in (first, second):
        assert demo["donated_deleted"] and demo["use_after_donation"]
