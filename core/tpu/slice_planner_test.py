"""core/tpu/slice_planner: memory and FLOP needs vs closed forms; slices that gcloud sells."""

import math

import pytest

from core.tpu import cloud_tpu, command_check, slice_planner, specs


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
    parsed = command_check.parse_tpu_command(line)
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


# --- the independent checks -----------------------------------------------------------------


def test_published_examples_are_reproduced():
    rows = slice_planner.published_example_rows()
    assert len(rows) == len(slice_planner.PUBLISHED_EXAMPLES) >= 4
    assert all(r["holds"] for r in rows), rows


@pytest.mark.parametrize(
    ("table", "claim"),
    [
        # Adam with one moment instead of two: the ZeRO figure (16 bytes/parameter) catches it
        (
            {"float32 master weights": 4, "float32 gradients": 4, "Adam moment": 4},
            "7.5B training state, one device (GB)",
        ),
        # gradients forgotten
        (
            {"float32 master weights": 4, "Adam moments (2 x float32)": 8},
            "7.5B training state over 64 devices (GB)",
        ),
    ],
)
def test_a_wrong_state_formula_fails_a_published_example(monkeypatch, table, claim):
    monkeypatch.setitem(slice_planner.BYTES_PER_PARAM, "train", table)
    failing = {r["claim"] for r in slice_planner.published_example_rows() if not r["holds"]}
    assert claim in failing


def test_a_wrong_flop_formula_fails_a_published_example(monkeypatch):
    monkeypatch.setattr(slice_planner, "step_flops", lambda w: 8 * w.params * w.tokens)
    failing = {r["claim"] for r in slice_planner.published_example_rows() if not r["holds"]}
    assert failing == {"GPT-3 175B on 300B tokens (FLOP)"}


def test_compiled_param_count_gives_whole_unpadded_shards():
    w = slice_planner.Workload(1.0)
    for chips in (1, 4, 8, 256):
        n = slice_planner.compiled_param_count(w, chips)
        rows = n // slice_planner.STATE_WIDTH
        assert n % slice_planner.STATE_WIDTH == 0 and rows % (slice_planner.ROW_TILE * chips) == 0
        assert 0 <= n - w.params < slice_planner.STATE_WIDTH * slice_planner.ROW_TILE * chips


def test_compile_topology_names_libtpu_topologies():
    options = {o.generation: o for o in slice_planner.plan(slice_planner.Workload(1.0))}
    for generation, option in options.items():
        name, chips = slice_planner.compile_topology(option)
        assert name.startswith(f"{generation}:") and chips == option.chips
    tiny = slice_planner.plan(slice_planner.Workload(0.1, batch=1, seq_len=128, step_time_s=60))
    one_chip = [o for o in tiny if o.chips == 1]
    assert one_chip, [(o.generation, o.chips) for o in tiny]
    for option in one_chip:  # libtpu refuses 1x1: one device of the smallest topology
        name, chips = slice_planner.compile_topology(option)
        assert chips == 1 and name in ("v5e:2x2", "v6e:2x2", "v5p:2x2x1")


needs_libtpu = pytest.mark.skipif(
    slice_planner.compiler_check_problem() is not None,
    reason=str(slice_planner.compiler_check_problem()),
)


@needs_libtpu
@pytest.mark.parametrize(
    ("workload", "generation"),
    [
        (slice_planner.Workload(1.0), "v5p"),  # 4 chips, v5p:2x2x1
        (slice_planner.Workload(0.3, mode="inference", batch=1, step_time_s=60), "v5e"),  # 1 chip
    ],
)
def test_the_tpu_compiler_agrees_with_the_state_closed_form(workload, generation):
    option = next(o for o in slice_planner.plan(workload) if o.generation == generation)
    check = slice_planner.compiler_check(workload, option)
    assert check.chips == option.chips
    assert check.passed, check.rows()
    assert check.relative_error <= slice_planner.COMPILER_TOLERANCE


@needs_libtpu
@pytest.mark.parametrize(
    "table",
    [
        {"float32 master weights": 4, "float32 gradients": 4, "Adam moment": 4},
        {"bfloat16 weights": 2, "float32 gradients": 4, "Adam moments (2 x float32)": 8},
    ],
    ids=["one Adam moment", "bf16 weights instead of f32 master"],
)
def test_the_compiler_check_catches_a_wrong_planner_formula(monkeypatch, table):
    workload = slice_planner.Workload(1.0)
    option = next(o for o in slice_planner.plan(workload) if o.generation == "v5p")
    monkeypatch.setitem(slice_planner.BYTES_PER_PARAM, "train", table)
    check = slice_planner.compiler_check(workload, option)
    assert not check.passed and check.relative_error > 0.1, check.rows()


@needs_libtpu
def test_the_compiler_check_catches_state_that_is_not_divided_over_chips(monkeypatch):
    workload = slice_planner.Workload(1.0)
    option = next(o for o in slice_planner.plan(workload) if o.generation == "v5p")
    real = slice_planner.state_breakdown
    # a planner that forgot the sharding: each chip holds the whole state
    monkeypatch.setattr(
        slice_planner,
        "state_breakdown",
        lambda w: {k: v * option.chips for k, v in real(w).items()},
    )
    assert not slice_planner.compiler_check(workload, option).passed


@needs_libtpu
def test_every_slice_the_planner_can_pick_is_a_topology_libtpu_compiles_for():
    from core.tpu import topology_compile

    for generation in specs.GENERATIONS:
        for accel in slice_planner._slices(generation):
            option = slice_planner.SliceOption(
                generation,
                1,
                1,
                accel.name,
                accel.chips,
                slice_planner.topology(generation, accel.chips),
                accel.hosts,
                0.0,
                0.0,
                (),
            )
            name, chips = slice_planner.compile_topology(option)
            assert len(topology_compile.topology_devices(name)) >= chips, name


def test_ironwood_is_planned_but_not_recommended_for_the_cloud_tpu_launcher():
    workload = slice_planner.Workload(params_billion=8.0, batch=64, seq_len=4096)
    options = {o.generation: o for o in slice_planner.plan(workload)}
    ironwood = options["tpu7x"]
    assert ironwood.fits and ironwood.topology in slice_planner.TOPOLOGY_3D.values()
    # 192 GiB per chip: Ironwood needs the fewest chips for memory of the four
    assert ironwood.chips_for_memory == min(o.chips_for_memory for o in options.values())
    best = slice_planner.recommend(list(options.values()))
    assert best is not None and best.generation != "tpu7x"
    rows = {r["generation"]: r for r in slice_planner.option_rows(list(options.values()))}
    assert rows["tpu7x"]["created with"] == "GKE or Compute Engine"
    assert rows["v5e"]["created with"] == "Cloud TPU API"
    with pytest.raises(ValueError, match="not created through the Cloud TPU API"):
        slice_planner.create_command(ironwood)
