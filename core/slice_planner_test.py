"""core/slice_planner: memory and FLOP needs vs closed forms; slices that gcloud sells."""

import math

import pytest

from core import cloud_tpu, slice_planner
from core.tpu import specs


@pytest.mark.parametrize(
    ("params_b", "layers", "d_model", "batch", "seq", "mode"),
    [
        (1.0, 24, 2048, 32, 2048, "train"),
        (7.0, 32, 4096, 8, 4096, "train"),
        (7.0, 32, 4096, 8, 4096, "inference"),
        (0.1, 12, 768, 1, 128, "inference"),
    ],
)
def test_memory_need_matches_the_closed_form(params_b, layers, d_model, batch, seq, mode):
    w = slice_planner.Workload(params_b, layers, d_model, batch, seq, mode)
    n = params_b * 1e9
    if mode == "train":  # fp32 weights + fp32 grads + 2 fp32 Adam moments; all layer inputs
        expected = n * (4 + 4 + 4 + 4) + batch * seq * d_model * layers * 2
    else:  # bf16 weights; one layer's input
        expected = n * 2 + batch * seq * d_model * 2
    assert slice_planner.memory_need_bytes(w) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("mode, factor", [("train", 6), ("inference", 2)])
def test_flops_need_is_factor_n_tokens_over_time_and_mfu(mode, factor):
    w = slice_planner.Workload(2.0, batch=4, seq_len=512, mode=mode, step_time_s=0.5, mfu=0.25)
    assert slice_planner.flops_need(w) == pytest.approx(factor * 2e9 * 4 * 512 / 0.5 / 0.25)


@pytest.mark.parametrize("params_b", [0.1, 1.0, 8.0, 70.0])
def test_each_option_covers_both_needs_with_a_real_slice(params_b):
    w = slice_planner.Workload(params_b, step_time_s=10.0)
    for option in slice_planner.plan(w):
        chip = specs.chip(option.generation)
        need_mem = math.ceil(slice_planner.memory_need_bytes(w) / (chip.hbm_bytes.value * 0.9))
        need_flops = math.ceil(slice_planner.flops_need(w) / chip.bf16_flops.value)
        assert option.chips_for_memory == max(1, need_mem)
        assert option.chips_for_compute == max(1, need_flops)
        if option.fits:
            accel = cloud_tpu.ACCELERATOR_TYPES[option.accelerator_type]
            assert accel.chips == option.chips >= max(need_mem, need_flops)
            assert math.prod(int(d) for d in option.topology.split("x")) == option.chips
            assert option.hosts == accel.hosts
            assert option.hbm_per_chip_used <= 0.9


def test_a_small_model_fits_one_host_and_gets_a_create_command():
    options = slice_planner.plan(slice_planner.Workload(0.5, 12, 1024, 8, 1024, step_time_s=5))
    best = slice_planner.recommend(options)
    assert best.hosts == 1
    line = slice_planner.create_command(best, name="my-tpu")
    parsed = cloud_tpu.parse_tpu_command(line)
    assert parsed.verb == "create" and parsed.positionals == ("my-tpu",)
    assert parsed.flags["accelerator-type"] == best.accelerator_type


def test_an_impossible_workload_says_none_fits():
    options = slice_planner.plan(slice_planner.Workload(2000.0, step_time_s=0.01))
    assert not any(o.fits for o in options)
    assert slice_planner.recommend(options) is None
    assert "more than the largest" in options[0].reasoning[-1]
    with pytest.raises(ValueError, match="no v5e slice"):
        slice_planner.create_command(options[0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "serve"}, "mode"),
        ({"mfu": 1.5}, "mfu"),
        ({"batch": 0}, "batch"),
        ({"params_billion": 0}, "params_billion"),
    ],
)
def test_bad_workloads_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        slice_planner.Workload(**kwargs)


def test_topology_rejects_unknown_sizes():
    with pytest.raises(ValueError, match="no v5p topology"):
        slice_planner.topology("v5p", 3)
    assert slice_planner.topology("v6e", 16) == "4x4"
