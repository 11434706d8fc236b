"""bench and profile: the figures are computed the way the JSON says they are.

Never asserts a wall-clock speed. References: FLOPs counted independently from the train
step's jaxpr (every dot_general, forward and backward) and by hand in model_math_test.py
(bench.flops_per_step is model_math's formula), MFU from its definition, greedy decoding
from core.lm.generate.greedy_without_cache, cache bytes from array sizes, profile totals
against the wall clock.
"""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from capstones.byte_transformer import bench, cli, data, training
from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer import report as capstone_report
from core.lm import generate, tokenizer
from core.perf import allocator, records

TINY = dict(
    d_model=32, num_layers=2, num_heads=2, seq_len=32, batch_size=2, max_files=4, max_bytes=2048
)


def tiny(**overrides) -> config_lib.Config:
    return config_lib.Config(**{**TINY, **overrides})


def test_mfu_arithmetic():
    assert bench.mfu(2e9, 0.5, 8e9) == pytest.approx(0.5)
    assert bench.mfu(1e12, 2.0, 1e12) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        bench.mfu(1e9, 0.0, 1e9)


def test_interleaved_takes_one_sample_per_method_per_round():
    calls = []
    steppers = {name: (lambda name=name: calls.append(name)) for name in ("a", "b", "c")}
    wall, cpu = bench.interleaved(steppers, rounds=3, warmup=2, progress=lambda line: None)
    assert calls == ["a", "a", "b", "b", "c", "c"] + ["a", "b", "c"] * 3
    assert all(len(wall[n]) == len(cpu[n]) == 3 for n in steppers)


def test_decode_cached_equals_recompute_equals_reference():
    """The cached and recomputed greedy tokens are the same tokens, and both equal
    core.lm.generate.greedy_without_cache (an independent decoder)."""
    config = tiny(d_model=32, num_heads=4, max_len=64)
    params = training.init_state(config)["params"]
    prompt = np.asarray(tokenizer.encode("def main(argv):\n    return "), np.int32)[None]
    result = bench.decode_benchmark(config, params, prompt, 6, precisions=("fp32",), repeats=1)
    model = training.model_from_params(config, params)
    reference = generate.greedy_without_cache(model, prompt, 6)[0, prompt.shape[1] :]
    assert result["tokens"] == result["recompute"]["tokens"] == [int(t) for t in reference]
    assert result["greedy_tokens_identical"] is True
    assert result["capacity"] == prompt.shape[1] + 6
    cached = result["cached"]["fp32"]
    assert cached["tokens_per_s"] == pytest.approx(5 / cached["seconds"])
    assert result["speedup"] == pytest.approx(
        cached["tokens_per_s"] / result["recompute"]["tokens_per_s"]
    )
    loop = result["cached_device_loop"]["fp32"]
    assert loop["tokens"] == result["recompute"]["tokens"]
    assert result["speedup_device_loop"] == pytest.approx(
        loop["tokens_per_s"] / result["recompute"]["tokens_per_s"]
    )


def test_flops_name_the_attention_work_the_blocked_core_skips():
    """MFU counts the formula's full T x T attention; at the default T=256 the blocked core
    (4 query blocks) never computes 3/8 of it, and the bench says how much."""
    flops = bench.flops_per_step(config_lib.Config())
    assert flops["attention_skipped"] == pytest.approx(flops["attention"] * 3 / 8)
    assert flops["total"] == flops["matmul"] + flops["attention"]


def test_peak_shapes_are_the_train_steps_weight_matmuls():
    shapes = bench.model_matmul_shapes(config_lib.Config())
    tokens = 16 * 256
    assert (tokens, 256, 1024) in shapes and (tokens, 1024, 256) in shapes  # MLP forward
    assert (256, tokens, 1024) in shapes  # a dW = X^T dY product
    assert all(tokens in shape for shape in shapes)


def test_cache_bytes_closed_form_and_measured():
    config = tiny(d_model=256, num_heads=4)  # the default width and heads
    cache = bench.cache_bytes(config)
    for precision in ("fp32", "bf16", "int8"):
        assert cache[precision]["closed_form"] == cache[precision]["measured"]
    assert cache["fp32"]["closed_form"] == 2 * 256 * 4
    assert cache["int8"]["ratio_vs_fp32"] == pytest.approx(0.25 + 4 / 256)  # 1/4 + H/D
    assert cache["bf16"]["ratio_vs_fp32"] == 0.5


def test_torch_compile_failure_is_recorded(monkeypatch):
    torch = pytest.importorskip("torch")

    def broken(fn, *args, **kwargs):
        raise RuntimeError("no working C++ compiler\n(details)")

    monkeypatch.setattr(torch, "compile", broken)
    config = tiny()
    state = training.init_state(config)
    batch = data.training_stream(config, data.load_corpus(config)).next_batch()
    step, figures = bench.torch_compile_stepper(config, state["params"], batch)
    assert step is None
    assert figures == {"error": "RuntimeError: no working C++ compiler (details)"}


BENCH_KEYS = {
    "format", "version", "command", "machine", "cpu_model", "cores", "load_average",
    "versions", "xla_flags", "allocator", "torch_threads", "jax_devices", "config", "batch",
    "timing", "peak", "flops", "jax", "jax_dense_attention", "torch_eager", "torch_compile",
    "jax_vs_torch", "decode", "allocator_comparison", "cache_bytes", "targets", "defects",
    "warnings", "total_s",
}  # fmt: skip
STEP_KEYS = {
    "median_s", "p10_s", "p90_s", "min_s", "samples_s", "cpu_median_s", "tokens_per_s",
    "valid_tokens_per_s", "minor_faults_per_step", "system_s_per_step", "mfu",
}  # fmt: skip


def test_bench_end_to_end_writes_consistent_json(tmp_path, monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    # torch.compile of even a tiny model takes minutes on two cores: stand in for it with
    # the eager function so the success path of the schema is exercised
    monkeypatch.setattr(torch, "compile", lambda fn, *a, **k: fn)
    out = tmp_path / "bench.json"
    argv = ["bench", f"out={out}", "steps=2", "warmup=1", "decode_context=8"]
    argv += ["decode_tokens=3", "matmul_n=64", "malloc_steps=0"]  # malloc: its own test
    argv += [f"{k}={v}" for k, v in TINY.items()] + ["record=true"]
    monkeypatch.setenv(records.ROOT_ENV, str(tmp_path / "records"))
    # the refusal on a busy machine has its own tests (core/perf/records_test.py): this one
    # checks the figures, whatever the machine's load
    monkeypatch.setattr(records, "busy_reason", lambda load: "")
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert set(report) == BENCH_KEYS  # the optional parts only when asked for
    kept = records.latest("byte_transformer_bench")  # the record: validated, the same figures
    assert f"wrote the benchmark record {records.latest_path('byte_transformer_bench')}" in printed
    assert kept.command == report["command"] and "load average" in kept.notes
    assert kept.figures["jax_step_median_s"] == records.significant(
        report["jax"]["step"]["median_s"]
    )
    assert kept.figures["decode_speedup"] == records.significant(report["decode"]["speedup"])
    assert kept.figures["jax_mfu"] == records.significant(report["jax"]["mfu"])
    assert sorted(p.name for p in (tmp_path / "records").iterdir()) == ["byte_transformer_bench"]
    assert report["format"] == bench.BENCH_FORMAT
    assert "jax_vs_torch_speedup" in printed and str(out) in printed
    # The profiler's slowdown is quoted from this run's figures, never a typed range.
    slowdown = report["jax"]["breakdown"]["wall_step_s"] / report["jax"]["step"]["median_s"] - 1
    assert f"{slowdown:+.0%} against the untraced median" in printed and "25-60" not in printed
    assert len(report["load_average"]["start"]) == len(report["load_average"]["end"]) == 3
    assert report["load_average"]["other_processes_cores"] >= 0

    tokens = TINY["batch_size"] * TINY["seq_len"]
    assert report["batch"]["tokens_per_step"] == tokens
    assert 0 < report["batch"]["valid_tokens_per_step"] <= tokens
    assert report["flops"]["total"] == bench.flops_per_step(tiny())["total"]
    assert report["flops"]["attention_skipped"] == 0.0  # T=32: the dense core runs
    peak = report["peak"]["flop_per_s"]
    candidates = report["peak"]["candidates"]
    assert {row["framework"] for row in candidates} == {"xla", "torch"}
    assert peak == max(row["flop_per_s"] for row in candidates)
    for framework in ("xla", "torch"):
        assert report["peak"][f"{framework}_best_flop_per_s"] == max(
            row["flop_per_s"] for row in candidates if row["framework"] == framework
        )
    assert report["allocator"]["mechanism"] in {"mallopt", "GLIBC_TUNABLES", "none"}
    assert report["allocator_comparison"]["error"] == "skipped"
    for name in ("jax", "jax_dense_attention", "torch_eager", "torch_compile"):
        step = report[name]["step"]
        assert set(step) == STEP_KEYS
        assert step["minor_faults_per_step"] >= 0 and step["system_s_per_step"] >= 0
        assert len(step["samples_s"]) == 2
        assert step["median_s"] == pytest.approx(float(np.median(step["samples_s"])))
        assert step["tokens_per_s"] == pytest.approx(tokens / step["median_s"])
        assert report[name]["mfu"] == pytest.approx(
            report["flops"]["total"] / step["median_s"] / peak
        )
    assert report["jax"]["compile_s"] > 0 and report["jax"]["lower_s"] > 0
    assert report["torch_compile"]["first_step_s"] > 0
    faster = report["jax_vs_torch"]["faster_torch"]
    assert report["jax_vs_torch"]["speedup"] == pytest.approx(
        report[faster]["step"]["median_s"] / report["jax"]["step"]["median_s"]
    )
    decode = report["decode"]
    assert decode["greedy_tokens_identical"] is True
    assert set(decode["cached"]) == {"fp32", "bf16", "int8"}
    assert set(report["targets"]) == set(bench.TARGETS)
    for name, row in report["targets"].items():
        op, threshold = bench.TARGETS[name]
        assert row["target"] == threshold and row["op"] == op
        assert row["pass"] == (
            row["value"] >= threshold if op == ">=" else row["value"] <= threshold
        )
    assert report["targets"]["mfu"]["value"] == report["jax"]["mfu"]
    # the capstone report tells the story from these figures, in order
    story = "\n".join(capstone_report._bench_section(report, {"charts": {}}))
    assert "Allocator before/after not measured: skipped" in story
    assert f"{report['jax_vs_torch']['speedup']:.2f}x (median of per-round ratios" in story


def test_malloc_before_after_in_two_fresh_processes():
    """allocator_comparison: the same step in a child with glibc's defaults and one with the
    tunables; each reports the settings it really ran with; the story reads its figures."""
    malloc = bench.malloc_comparison(tiny(), steps=2, warmup=1, progress=lambda line: None)
    assert malloc["glibc_defaults"]["allocator"]["mechanism"] == "none"
    assert malloc["tuned"]["allocator"] == {
        "mechanism": "GLIBC_TUNABLES",
        "settings": allocator.SETTINGS,
        "reason": "set before the process started",
    }
    for mode in ("glibc_defaults", "tuned"):
        assert len(malloc[mode]["samples_s"]) == 2 and malloc[mode]["minor_faults_per_step"] >= 0
    assert malloc["speedup"] == pytest.approx(
        malloc["glibc_defaults"]["median_s"] / malloc["tuned"]["median_s"]
    )
    before = malloc["glibc_defaults"]
    story = "\n".join(capstone_report._bench_story(_story_fixture(malloc)))
    assert f"took {before['median_s']:.3f} s with {before['minor_faults_per_step']:,.0f}" in story


def _story_fixture(malloc: dict) -> dict:
    step = {"median_s": 1.0, "minor_faults_per_step": 0.0}
    return {
        "allocator_comparison": malloc,
        "jax_vs_torch": {
            "faster_torch": "torch_eager",
            "speedup": 1.0,
            "dense_attention_speedup": 0.9,
            "median_of_round_ratios": 1.0,
        },
        "flops": {"attention_skipped": 1e9, "total": 9e10},
        "jax": {"step": step, "mfu": 0.5},
        "torch_eager": {"step": step},
    }


def test_load_warning_only_on_a_shared_machine():
    start = {"machine_busy_s": 100.0, "own_s": 10.0, "wall_s": 50.0}
    end = {"machine_busy_s": 130.0, "own_s": 30.0, "wall_s": 60.0}  # 30 busy, 20 ours, 10 s
    assert bench.other_processes_cores(start, end) == pytest.approx(1.0)
    assert bench.other_processes_cores(start, {**end, "machine_busy_s": None}) is None
    report = {"cores": 2, "load_average": {"start": [1.9, 0, 0], "end": [2.0, 0, 0]}}
    report["load_average"]["other_processes_cores"] = 0.1  # our own load is not others'
    assert bench.load_warnings(report) == []
    report["load_average"]["other_processes_cores"] = 1.0
    (warning,) = bench.load_warnings(report)
    assert "1.00 of 2 cores" in warning
    assert set(bench.cpu_counters()) == {"machine_busy_s", "own_s", "wall_s"}


def test_bench_rejects_bad_options(capsys):
    assert cli.main(["bench", "decode_tokens=1"]) == 2
    assert "decode_tokens" in capsys.readouterr().err
    for bad, says in (("dense,3", "T=256 to split into 3"), ("2,2", "twice"), ("four", "four")):
        assert cli.main(["bench", f"block_sweep={bad}"]) == 2
        assert says in capsys.readouterr().err
    assert cli.main(["bench", "decode_ab=-1"]) == 2
    assert cli.main(["bench", "d_model=30", "num_heads=4"]) == 2


def test_profile_op_table_within_wall_time(tmp_path, capsys):
    out = tmp_path / "profile"
    argv = ["profile", f"out={out}", "steps=2", "warmup=1", "top=5"]
    assert cli.main(argv + [f"{k}={v}" for k, v in TINY.items()]) == 0
    report = json.loads((out / "profile.json").read_text())
    assert report["format"] == bench.PROFILE_FORMAT
    assert 0 < len(report["op_table"]) <= 5 and report["ops"] >= len(report["op_table"])
    assert report["module"].startswith("jit_")
    # some op was running for at most the time the traced steps took on the wall clock,
    # and the summed op time fits in threads x that
    assert 0 < report["op_busy_s"] <= report["wall_total_s"]
    assert report["op_busy_s"] <= report["op_time_total_s"]
    assert report["op_time_total_s"] <= report["threads"] * report["wall_total_s"]
    assert sum(r["share"] for r in report["by_source"]) == pytest.approx(1.0)
    assert {r["phase"] for r in report["by_phase"]} >= {"forward", "backward"}
    assert list(out.glob("trace/**/*.xplane.pb"))
    assert report["op_table"][0]["op"] in capsys.readouterr().out


def test_profile_categories_find_the_blocked_attention_and_dropout_by_scope():
    """The blocked core's and dropout's ops carry named scopes (core.lm.causal_blocked.SCOPE,
    transformer.DROPOUT_SCOPE); the categories must find them as they appear in op_name."""
    from core.lm import causal_blocked, transformer

    scope, drop = causal_blocked.SCOPE, transformer.DROPOUT_SCOPE
    matmul = f"jit(train_step)/transpose(jvp({scope}))/bhtk,bhsk->bhts/dot_general"
    softmax = f"jit(train_step)/jvp({scope})/reduce_max"
    bits = f"jit(train_step)/jvp({drop})/while/body/closed_call/xor"
    weight = "jit(train_step)/jvp(btd,dhk->bthk)/dot_general"
    assert bench.category_of(matmul, [matmul]) == bench.CATEGORIES[1]
    assert bench.category_of("fusion", [softmax]) == bench.CATEGORIES[2]
    assert bench.category_of("fusion", [softmax, bits]) == bench.CATEGORIES[3]
    assert bench.category_of(weight, [weight]) == bench.CATEGORIES[0]
    assert bench.phase_of(bits) == "dropout RNG"


def test_the_block_sweep_times_the_same_function_at_each_block_count():
    """Every sweep row is the train step of the dense core (the reference) with another
    attention core: one step from the same state gives the dense loss and gradient norm."""
    config = tiny(seq_len=32, dropout=0.0)
    state = training.init_state(config)
    batch = dict(data.training_stream(config, data.load_corpus(config)).next_batch())
    # three documents per row (the stream's tiny rows hold one): the mask is not just causal
    batch["segment_ids_BT"] = np.repeat([[1] * 10 + [2] * 13 + [3] * 9], 2, axis=0).astype(
        batch["segment_ids_BT"].dtype
    )
    metrics = {}
    for row in ("dense", 2, 4):
        _, metrics[row] = bench.variants.sweep_step_fn(config, row)(state, batch)
    for row in (2, 4):
        for name in ("loss", "grad_norm"):
            assert float(metrics[row][name]) == pytest.approx(
                float(metrics["dense"][name]), rel=1e-5
            ), (row, name)
    compiled = []

    def listen(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(kwargs.get("fun_name"))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:  # the sweep times the very programs checked above: it compiles none of them again
        sweep = bench.variants.block_sweep(config, state, batch, ["dense", 2, 4], 2, 0, lambda _: 0)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert "jit(train_step)" not in compiled, compiled
    assert [row["blocks"] for row in sweep["rows"]] == ["dense", 2, 4]
    assert [row["skipped_fraction"] for row in sweep["rows"]] == [0.0, 1 / 4, 3 / 8]
    assert sweep["rows"][0]["vs_dense"]["median"] == 1.0
    fastest = min(sweep["rows"], key=lambda r: r["step"]["median_s"])
    assert sweep["fastest"] == fastest["blocks"]
    assert all(len(row["step"]["samples_s"]) == 2 for row in sweep["rows"])
    figures = bench.record.sweep_figures(sweep)
    assert figures["blocks"] == ["dense", "2", "4"] and figures["default_blocks"] == 4


def test_bf16_rows_follow_the_float32_curves_of_both_frameworks():
    """Without dropout the JAX and torch float32 losses are the same numbers (the twin is the
    reference); each bf16 policy changes them (it took effect) by far less than the loss."""
    pytest.importorskip("torch")
    config = tiny(dropout=0.0)
    state = training.init_state(config)
    batch = data.training_stream(config, data.load_corpus(config)).next_batch()
    result = bench.variants.bf16_policy(config, state, batch, 2, 1, lambda _: 0)
    curves = {name: row["loss_curve"] for name, row in result["rows"].items()}
    assert all(len(curve) == 3 for curve in curves.values())  # warm-up step + 2 rounds
    np.testing.assert_allclose(curves["jax_f32"], curves["torch_f32"], rtol=2e-4)
    for framework in ("jax", "torch"):
        gap = np.abs(np.subtract(curves[f"{framework}_bf16"], curves[f"{framework}_f32"]))
        assert 0 < gap.max() < 0.05, (framework, gap)
        assert result[f"loss_gap_{framework}_bf16_vs_f32"] == pytest.approx(gap.max())
    rows = result["rows"]
    assert result["jax_bf16_vs_torch_bf16"]["of_medians"] == pytest.approx(
        rows["torch_bf16"]["median_s"] / rows["jax_bf16"]["median_s"]
    )
    figures = bench.record.bf16_figures(result)
    # the figures keep the curve itself; core.perf.records rounds to significant digits on write
    assert figures["jax_bf16_loss_curve"] == [float(v) for v in curves["jax_bf16"]]


def test_decode_ab_rounds_and_the_arena_children_settings():
    config = tiny(d_model=32, num_heads=4, max_len=64)
    params = training.init_state(config)["params"]
    # the prompt and length of the decode test above: its compiled decode programs serve here
    prompt = np.asarray(tokenizer.encode("def main(argv):\n    return "), np.int32)[None]
    ab = bench.decode_ab.interleaved_rounds(config, params, prompt, 6, 2, True)
    rates = ab["tokens_per_s"]
    assert set(rates) == {"recompute", "per_token", "loop", "loop_eigen_off"}
    for way in ("per_token", "loop", "loop_eigen_off"):
        spread = ab["ratio_vs_recompute"][way]
        assert spread["min"] <= spread["median"] <= spread["max"]
    assert bench.decode_ab.EIGEN_OFF == bench.decode.LOOP_COMPILER_OPTIONS  # the kept side
    # decoders of one model shape share their jitted programs (compiled once per process);
    # only the loop differs with its compiler options
    kept, xla_default = (bench.decode.Decoders(config, params, prompt, 6, o) for o in (None, {}))
    assert all(kept.jit[n] is xla_default.jit[n] for n in ("prefill", "decode", "recompute"))
    assert kept.jit["decode_loop"] is not xla_default.jit["decode_loop"]
    tuned = bench.decode_ab._child_env("arena_max_1")["GLIBC_TUNABLES"]
    default = bench.decode_ab._child_env("arena_default")["GLIBC_TUNABLES"]
    assert tuned == allocator.TUNABLES
    assert "arena_max" not in default and "mmap_max=0" in default
    report = {
        "decode_ab": {
            "method": "m",
            "context": 17,
            "new_tokens": 4,
            "rounds": 2,
            "in_process": ab,
            "arena": {"error": "x: failed"},
            "faster": {"loop_multi_thread_eigen": True},
        }
    }
    lines = "\n".join(bench.report.variant_lines(report))
    assert "arena A/B failed: x: failed" in lines and "loop Eigen off / on" in lines
    figures = bench.record.decode_ab_figures(report["decode_ab"])
    assert figures["arena_error"] == "x: failed"
