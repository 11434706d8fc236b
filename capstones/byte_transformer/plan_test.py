"""plan: closed forms against real arrays, remat == no remat, one TPU topology compile."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from capstones.byte_transformer import cli, plan, training
from capstones.byte_transformer import config as config_lib
from core.lm import transformer
from core.perf import remat
from core.state import checkpoint
from core.tpu import topology_compile

TINY = [
    "d_model=32",
    "num_layers=2",
    "num_heads=2",
    "seq_len=32",
    "batch_size=4",
    "max_files=4",
    "max_bytes=2048",
    "max_len=64",
]


def tiny(*more: str) -> config_lib.Config:
    return config_lib.Config.from_overrides([*TINY, *more])


@pytest.mark.parametrize(
    "overrides",
    [[], ["d_model=48", "num_heads=3", "mlp_width=80", "num_layers=3", "max_len=40"]],
)
def test_param_count_matches_the_training_state(overrides):
    config = tiny(*overrides)
    state = training.init_state(config)
    actual = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(state["params"]))
    assert plan.param_count(config) == actual
    assert plan.budget_cross_check(config)["total"] == actual  # core.tpu.budget + MLP biases


def test_state_bytes_match_the_arrays():
    config = tiny()
    state = training.init_state(config)
    adam = checkpoint.adam_state(state["opt_state"])
    nbytes = lambda tree: sum(np.asarray(x).nbytes for x in jax.tree.leaves(tree))  # noqa: E731
    parts = plan.state_bytes(config)
    assert parts["parameters (f32)"] == nbytes(state["params"])
    assert parts["Adam mu (f32)"] == nbytes(adam.mu)
    assert parts["Adam nu (f32)"] == nbytes(adam.nu)
    scalars = nbytes(adam.count) + nbytes(state["step"]) + nbytes(state["rng"])
    assert parts["scalars (Adam count, step int32; dropout key uint32[2])"] == scalars


@pytest.mark.parametrize("precision", config_lib.CACHE_PRECISIONS)
def test_kv_cache_bytes_match_real_caches(precision):
    config = tiny()
    batch, context = 3, 40
    if precision == "int8":
        # int8 values plus one float32 scale per (layer, k/v, row, position, head)
        shape = (config.num_layers, batch, context, config.num_heads, config.head_dim)
        expected = 2 * np.zeros(shape, np.int8).nbytes + 2 * np.zeros(shape[:-1], np.float32).nbytes
    else:
        dtype = {"fp32": "float32", "bf16": "bfloat16"}[precision]
        cache = transformer.init_cache(config.model_config(cache=dtype), batch, context)
        expected = cache.k_LBSHK.nbytes + cache.v_LBSHK.nbytes
    assert plan.kv_cache_bytes(config, precision, batch, context) == expected


def test_activation_closed_forms_by_hand():
    # b=2 rows of T=8, D=4, H=2, F=16, float32, dropout on
    config = config_lib.Config.from_overrides(
        [
            "d_model=4",
            "num_heads=2",
            "mlp_width=16",
            "seq_len=8",
            "batch_size=8",
            "max_len=8",
            "min_piece=2",
        ]
    )
    rows = {r["tensor"]: r["bytes"] for r in plan.layer_activations(config, 2)}
    n = 2 * 8
    assert rows["q, k, v"] == 3 * n * 4 * 4
    assert rows["attention probabilities (f32)"] == 2 * 2 * 8 * 8 * 4
    assert rows["MLP pre-activation (f32 accumulator + bias)"] == n * 16 * 4
    assert rows["dropout keep masks, 2 branches (bool)"] == 2 * n * 4
    total = sum(rows.values())
    assert total == n * (8 * 4 * 4 + 16 + 16 * 8 + 2 * 4) + 2 * 2 * 64 * 4
    bf16 = config_lib.Config.from_overrides(["compute_dtype=bfloat16"], base=config)
    bf16_rows = {r["tensor"]: r["bytes"] for r in plan.layer_activations(bf16, 2)}
    assert bf16_rows["q, k, v"] == rows["q, k, v"] // 2
    assert bf16_rows["attention probabilities (f32)"] == rows["attention probabilities (f32)"]
    memory = plan.training_memory(config, 4)
    assert memory["local_batch"] == 2
    assert memory["saved_activations_bytes"] == config.num_layers * total + sum(
        r["bytes"] for r in plan.head_activations(config, 2)
    )
    assert memory["peak_liveness_remat_bytes"] <= memory["peak_liveness_bytes"]
    with pytest.raises(ValueError, match="does not split"):
        plan.training_memory(config, 3)


def test_flops_closed_form():
    config = tiny()
    b, t, d, f, v, layers = 1, 32, 32, 128, 256, 2
    block = b * t * (8 * d * d + 4 * d * f) + 4 * b * t * t * d
    forward = layers * block + 2 * b * t * d * v
    assert plan.flops_per_step(config, 1) == 3 * forward
    # remat (nothing_saveable) recomputes each block's forward except w_out (its output is
    # needed by no backward rule); dots_saveable recomputes no matmul (model_math_test.py
    # checks both against the remat step's jaxpr)
    recompute = layers * (block - 2 * b * t * f * d)
    assert plan.flops_per_step(config, 1, remat=True) == 3 * forward + recompute
    assert plan.flops_per_step(config, 1, remat="dots_saveable") == 3 * forward


@pytest.fixture(scope="module")
def reference():
    """Loss and gradients of training.loss_fn (no remat) on the first batch, dropout on."""
    config = tiny()
    state = training.init_state(config)
    batch = plan.first_batch(config)
    key = jax.random.key(7)
    loss, grads = plan.loss_and_grads(config, state["params"], batch, key, None)
    return config, state, batch, key, loss, grads


@pytest.mark.parametrize("policy", plan.REMAT_POLICIES)
def test_remat_gives_the_same_loss_and_gradients(reference, policy):
    config, state, batch, key, loss, grads = reference
    loss_remat, grads_remat = plan.loss_and_grads(config, state["params"], batch, key, policy)
    np.testing.assert_allclose(float(loss_remat), float(loss), rtol=0, atol=1e-6)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(grads_remat), strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=0, atol=1e-6)


def test_remat_loss_applies_dropout_like_training(reference):
    config, state, batch, key, loss, _ = reference
    with_key = jax.jit(lambda p, k: plan.remat_loss_fn(config, p, batch, k)[0])
    no_dropout = jax.jit(lambda p: plan.remat_loss_fn(config, p, batch, None)[0])(state["params"])
    other_key = with_key(state["params"], jax.random.key(8))
    assert float(with_key(state["params"], key)) == pytest.approx(float(loss), abs=1e-6)
    assert float(no_dropout) != pytest.approx(float(loss), abs=1e-4)  # dropout acted
    assert float(other_key) != pytest.approx(float(loss), abs=1e-4)  # and follows the key


def test_remat_train_step_matches_training_train_step():
    config = tiny()
    state = training.init_state(config)
    batch = plan.first_batch(config)
    reference, metrics = training.make_train_step(config)(state, batch)
    remat_state, remat_metrics = jax.jit(plan.step_function(config, "nothing_saveable"))(
        state, batch
    )
    assert remat.max_grad_difference(reference, remat_state) <= 1e-6
    assert float(remat_metrics["loss"]) == pytest.approx(float(metrics["loss"]), abs=1e-6)
    assert int(remat_state["step"]) == 1


def test_remat_policy_is_validated():
    config = tiny()
    with pytest.raises(ValueError, match="remat policy"):
        plan.remat_loss_fn(config, {}, {}, None, "everything")


@pytest.mark.skipif(
    topology_compile.libtpu_problem() is not None,
    reason=f"libtpu missing: {topology_compile.libtpu_problem()}",
)
def test_one_tpu_topology_compile_matches_the_analytic_state():
    # widths a multiple of the TPU's 128 lanes: tile padding stays small (at d_model=32 the
    # compiler's arguments are ~1.6x the analytic bytes, all of it layout padding)
    config = tiny("d_model=128", "num_layers=1")
    compiled = plan.compile_for_topology(config, "v5e:2x2")
    assert compiled["chips"] == 4 and compiled["device_kind"].startswith("TPU v5")
    analytic = plan.training_memory(config, 4)
    arguments = compiled["memory"]["argument_size_in_bytes"]
    expected = analytic["arguments_bytes"]  # 16 bytes per parameter + scalars + batch shard
    assert expected <= arguments <= expected + 0.01 * expected + 16 * 1024
    outputs = compiled["memory"]["output_size_in_bytes"]
    assert analytic["outputs_bytes"] <= outputs <= analytic["outputs_bytes"] * 1.01 + 16 * 1024
    # the peak holds at least the old and the new state; the estimates bracket it loosely
    assert arguments + outputs <= compiled["peak_bytes"] <= 2 * analytic["peak_all_at_once_bytes"]
    # matmul FLOPs are most of the compiled FLOPs (the rest: elementwise work, AdamW)
    assert 0.5 * compiled["flops"] <= analytic["flops_per_step"] <= compiled["flops"]
    rows = plan.comparison_rows(analytic, compiled)
    assert rows[0]["compiler"] == arguments
    assert rows[0]["analytic_over_compiler"] == pytest.approx(expected / arguments, abs=1e-3)


def test_plan_command_without_tpu_compile(tmp_path, capsys):
    out = tmp_path / "plan.json"
    code = cli.main(["plan", f"out={out}", "compile=false", "timing_repeats=1", *TINY])
    assert code == 0
    printed = capsys.readouterr().out
    assert "not run (compile=false)" in printed and "Precision policy" in printed
    saved = json.loads(out.read_text())
    assert saved["schema"] == plan.SCHEMA
    assert saved["params"]["matches"] is True
    assert saved["compiler"]["available"] is False and saved["compiler"]["topologies"] == {}
    hypothesis = saved["hypothesis"]
    assert hypothesis["peak_bytes_before"] is None  # never a made-up TPU number
    assert hypothesis["max_abs_grad_diff"] <= 1e-6 and hypothesis["loss_abs_diff"] <= 1e-6
    assert hypothesis["cpu_step_s_before"] > 0 and hypothesis["cpu_step_s_after"] > 0
    assert {row["quantity"] for row in saved["precision"]} >= {
        "weights (params)",
        "matmul accumulator",
        "optimizer moments (Adam mu, nu)",
    }
    choice = saved["recommendation"]["choice"]
    assert choice["generation"] in ("v5e", "v6e", "v5p") and choice["chips"] >= 4


def test_plan_command_rejects_bad_options(capsys):
    assert cli.main(["plan", "remat_policy=sometimes", *TINY]) == 2
    assert "remat_policy" in capsys.readouterr().err
    assert cli.main(["plan", "topologies=v9:2x2", *TINY]) == 2
    assert cli.main(["plan", "batch_size=6", "compile=false", *TINY[:-4]]) == 2


def test_abstract_inputs_have_no_device():
    config = tiny()
    state, batch = plan.abstract_inputs(config)
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves((state, batch)))
    assert batch["weights_BT"].dtype == jnp.float32 and batch["tokens_BT"].shape == (4, 32)


def test_without_libtpu_the_compiler_rows_say_so(monkeypatch):
    monkeypatch.setattr(topology_compile, "libtpu_problem", lambda: "libtpu is not installed")
    section = plan.compiler_section(tiny(), ["v5e:2x2"], True, "nothing_saveable")
    assert section == {
        "available": False,
        "problem": "not available: libtpu is not installed",
        "topologies": {},
        "remat": {},
    }
    analytic = plan.training_memory(tiny(), 4)
    rec = plan.recommendation(tiny(), analytic, section["topologies"], 1e6)
    assert {r["footprint_source"] for r in rec["generations"]} == {"analytic (liveness estimate)"}


def test_loss_and_grads_compiles_once_per_program_key_and_policy(reference):
    """A new dropout key, a longer run of the same model: the program compiled for the
    reference runs again (batch and key are its arguments), and the key still acts."""
    config, state, batch, _, loss, _ = reference
    compiled = []

    def listen(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(kwargs.get("fun_name"))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        longer = config_lib.Config.from_overrides(["steps=9"], base=config)
        other, _ = plan.loss_and_grads(longer, state["params"], batch, jax.random.key(8), None)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert "jit(loss)" not in compiled, compiled
    assert float(other) != pytest.approx(float(loss), abs=1e-4)  # dropout follows the key
