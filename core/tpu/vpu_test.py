import pytest

from core.tpu import specs, vpu


def test_v5p_vpu_peak_reproduces_the_scaling_books_answer():
    # "8 * 128 * 4 * 2 * 1.75e9 = 1.4e13 FLOPs/s" (sublanes, lanes, ALUs, cores, clock)
    assert vpu.peak("v5p") == 8 * 128 * 4 * 2 * 1.75e9
    assert vpu.peak("v5p") == pytest.approx(1.4e13, rel=0.03)


def test_v5e_vpu_peak_is_its_parts_with_one_tensorcore():
    assert vpu.peak("v5e") == 8 * 128 * 4 * 1 * 1.5e9
    assert vpu.peak("v5e") == pytest.approx(6.1e12, rel=0.01)


@pytest.mark.parametrize(("generation", "mxus_per_core"), [("v5e", 4), ("v5p", 4)])
def test_the_clocks_reproduce_the_published_mxu_peaks(generation, mxus_per_core):
    # independent of the VPU: TensorCores x MXUs x 128x128 multiply-adds x 2 x clock equals
    # the bf16 peak a different table publishes (v5e 1.97e14, v5p 4.59e14), within 0.3%
    clock = vpu.parts(generation).clock_hz.value
    cores = specs.chip(generation).tensorcores
    assert cores * mxus_per_core * 128 * 128 * 2 * clock == pytest.approx(
        specs.chip(generation).bf16_flops.value, rel=3e-3
    )


def test_the_vpu_roof_is_far_below_the_mxu_roof():
    for generation in vpu.generations_with_peak():
        assert 10 < specs.chip(generation).bf16_flops.value / vpu.peak(generation) < 40


def test_unpublished_parts_give_no_peak_not_a_guess():
    assert vpu.generations_with_peak() == ("v5e", "v5p")
    for generation in ("v6e", "tpu7x"):
        assert vpu.peak(generation) is None
        row = {r["generation"]: r for r in vpu.rows()}[generation]
        assert row["VPU f32 FLOP/s per chip"] == specs.NOT_PUBLISHED
        assert row["clock (GHz)"] == specs.NOT_PUBLISHED


def test_every_part_names_a_known_source_and_bad_input_is_refused():
    for p in vpu.PARTS.values():
        assert p.sublanes.source in specs.SOURCE_URLS and p.lanes.source in specs.SOURCE_URLS
    with pytest.raises(ValueError, match="unknown source"):
        vpu.Part(1, "a blog")
    with pytest.raises(ValueError, match="unknown TPU generation"):
        vpu.peak("v9")


def test_sublanes_and_lanes_are_jaxs_tpu_info():
    from jax._src.pallas.mosaic import tpu_info  # JAX's own hardware table

    versions = {
        "v5e": tpu_info.ChipVersion.TPU_V5E,
        "v5p": tpu_info.ChipVersion.TPU_V5P,
        "v6e": tpu_info.ChipVersion.TPU_V6E,
        "tpu7x": tpu_info.ChipVersion.TPU_7X,
    }
    for generation, version in versions.items():
        info = tpu_info._get_tpu_info_impl(version, 1)
        p = vpu.parts(generation)
        assert (info.num_sublanes, info.num_lanes) == (p.sublanes.value, p.lanes.value)
