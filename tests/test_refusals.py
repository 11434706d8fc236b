"""A refused combination of controls stops an app cleanly: headless, `STOPPED: <why>`, exit 0.

DESIGN.md: a combination that cannot work shows a callout that says why, never a traceback,
and every cell that would fail on it depends on the stopping cell. Each case below is a
`python apps/NAME.py FLAGS...` run that must exit 0, print a `STOPPED:` line and no traceback.
The list holds every combination that once ran past its guard (found by
tests/tools/sweep_refusals.py, marked "was a bug") plus one refused combination per app
that has a guard, so a cell added later without the dependency is caught.
"""

from __future__ import annotations

import pytest

from core import curriculum

# (app stem, flags, why it is refused). Keep this short: each case is one headless run, and
# where an app has several guards the case trips the earliest (the run stops soonest).
REFUSALS = [
    # was a bug (issue 12): the gradient-accumulation cell ran past the stop
    ("communication_algorithms", ["--batch", "10", "--microbatches", "4"], "K does not divide B"),
    ("communication_algorithms", ["--batch", "6", "--mesh-size", "8"], "K=4 does not divide 6"),
    # was a bug: the interrupted-job cell ran the job with the refused steps
    ("stage_launch_jobs", ["--kill-after", "6"], "killed after the last step"),
    # was a bug: an invalid VM name raised in the create-command line
    ("select_tpu_slice", ["--name", ""], "an empty TPU VM name"),
    ("select_tpu_slice", ["--name", "My_TPU"], "a TPU VM name gcloud refuses"),
    # one refused combination per app whose guard a flag can trip
    ("adapt_pretrained", ["--rank", "40"], "LoRA at rank 40 trains more than full fine-tuning"),
    ("edge_deploy", ["--calibration", "test split"], "int8 calibrated on the held-out digits"),
    ("export_serving_contract", ["--batch-sizes", "3,16,64", "--max-batch", "32"], "over 32"),
    ("framework_interop", ["--formats", "jax,torch", "--mistake", "gelu_swapped"], "onnx not run"),
    ("inference_capacity", ["--max-wait-ms", "20", "--p95-budget-ms", "10"], "wait > budget"),
    ("capacity_cost", ["--team", "ML Platform"], "label value breaks GCP rules"),
    ("accelerator_jobs", ["--steps", "4", "--preempt-after", "4"], "preempt after the end"),
    ("observability", ["--heartbeat-s", "2", "--stall-after-s", "1"], "stall < heartbeat"),
    ("precision_policy", ["--accumulator", "int16"], "int16 can overflow with 8-bit operands"),
    ("async_checkpoints", ["--kill-at-save", "5"], "the 5th save is past --steps"),
    ("attention", ["--head", "5"], "head 5 of 2"),
    ("capstone_transformer", ["--ckpt-every", "8"], "no checkpoint before the crash"),
    ("assessment_learn_tpus", ["--answers", "/nonexistent/answers.json"], "no answers file"),
    ("assessment_make_it_fast", ["--answers", "README.md"], "an answers file that is not JSON"),
    ("containerize_service", ["--rows", "40", "--max-batch", "32"], "over the max batch"),
    ("contrastive", ["--min-crop", "1.0", "--max-shift", "0", "--noise-std", "0"], "views equal"),
    ("first_gradient", ["--x-lo", "3", "--x-hi", "-3"], "empty range"),
    ("grain_pipeline", ["--examples", "1"], "fewer examples than processes"),
    ("immutable_updates", ["--indices", "a, b"], "indices that are not numbers"),
    ("input_pipeline", ["--drop-remainder", "--batch-size", "20"], "no full batch to keep"),
    # once silently broke example 9 instead (the slider's value was clamped)
    ("input_pipeline", ["--fault", "wrong dtype", "--fault-index", "50"], "no example 50 of 10"),
    ("lax_cond", ["--x-min", "0", "--x-max", "0"], "empty grid"),
    ("losses_value_and_grad", ["--classes", "1"], "cross-entropy over one class"),
    ("masked_image", ["--patch", "3"], "3x3 patches do not tile 8x8"),
    ("masked_lm", ["--heads", "3"], "3 heads do not divide width 32"),
    ("masking_packing", ["--documents", ""], "no document to pack"),
    ("meshes_sharding", ["--batch", "3"], "3 rows over 8 devices"),
    ("move_to_tpu", ["--script-flags", "'unclosed"], "script flags that do not parse"),
    # the exported script refuses a flag it does not have (exit 2): a refusal, not a FAIL
    ("move_to_tpu", ["--script-flags", "--row 2"], "a flag the script does not have"),
    ("pod_slices", ["--batch", "12"], "12 over 2 x 4 devices"),
    ("pure_functions", ["--old-scale", "2", "--new-scale", "2"], "nothing changes"),
    ("pytrees", ["--taper", "halving", "--width", "1", "--depth", "8"], "a layer of width 0"),
    ("random_keys", ["--devices", "16"], "more devices than JAX sees"),
    ("resilient_training", ["--batch", "7"], "7 over 8 devices"),
    ("resume_data_position", ["--resume-at", "16"], "resume at the last step"),
    ("rollback_provenance", ["--steps", "10"], "v1 too weak to protect"),
    ("select_tpu_slice", ["--params-billion", "500"], "no slice fits"),
    ("shapes_broadcasting", ["--shape-a", "x"], "not a shape"),
    ("sharded_train_step", ["--batch", "12"], "12 over 8 devices"),
    ("tiny_mlp", ["--classes", "3"], "moons has 2 classes"),
    ("tpu_generations_hbm", ["--batch", "3"], "3 over 16 chips"),
    # bfloat16's tolerance cannot see exact vs tanh GELU at act1
    ("torch_to_flax", ["--mistake", "gelu_swapped", "--tolerance-dtype", "bfloat16"], "blind"),
    ("tracing_recompilation", ["--lengths", "a"], "not a length"),
    ("train_generate", ["--heads", "3"], "3 heads do not divide width 32"),
    ("train_generate", ["--kv-heads", "3"], "3 K/V heads do not divide 2 query heads"),
    ("transformer_block", ["--heads", "3"], "3 heads do not divide width 64"),
    ("transformer_block", ["--swap", "100"], "token 100 of a 64-token sequence"),
    ("transformer_block", ["--width", "24", "--heads", "8"], "RoPE on an odd head dim 3"),
    ("virtual_devices", ["--rows", "3"], "3 rows over 4 devices"),
    ("vmap", ["--in-axis-1", "2"], "mapped axes of different sizes"),
    # phase "Math & optimization" (issue 15)
    ("adam_clipping_schedules", ["--warmup", "100"], "no step to decay"),
    ("gradient_descent", ["--learning-rate", "0.004", "--momentum", "0"], "past the stability"),
    ("minibatch_noise", ["--batch", "48"], "does not divide"),
    ("optax_basics", ["--learning-rate", "-0.1"], "climbs the loss"),
    ("regularization_validation", ["--lr-fraction", "1.2"], "stability limit"),
    ("stable_losses", ["--temperature", "0"], "needs T > 0"),
    ("curvature_hessians", ["--lam-min", "-0.5"], "no unique minimum"),
    ("gradient_checking", ["--function", "sqrt(x)", "--x0", "-1"], "only for x > 0"),
    ("least_squares", ["--rank", "3"], "A^T A (6 x 6) has rank 3"),
    ("linear_algebra_loss", ["--std-2", "0"], "standard deviation 0"),
    ("vectors_norms", ["--a", "0, 0"], "a is the zero vector"),
    # phase "Reinforcement learning" (issue 16)
    ("batched_rollouts", ["--min-envs", "64", "--max-envs", "16"], "larger than max envs"),
    ("policy_gradients_ppo", ["--num-minibatches", "3"], "does not divide the batch"),
    ("evaluate_agents", ["--lr-b", "0.00025"], "nothing to rank"),
    # phase "Post-training" (issue 17)
    ("lora", ["--rank", "40"], "rank 40 exceeds the smallest side 32"),
    ("pallas_grids", ["--bn", "64"], "breaks the TPU tiling rule"),
    ("pallas_grids", ["--bm", "96"], "96 does not divide 256: the course asks whole blocks"),
    ("pallas_grids", ["--ragged-block-rows", "256"], "a block taller than the 200-row array"),
    ("first_tpu_kernel", ["--bk", "96"], "does not divide"),
    ("tiling_pipelining", ["--chunk", "48"], "does not divide the 256 rows"),
    ("rlhf_ppo", ["--group", "1"], "a GRPO group of 1 sample has no spread"),
    ("rlhf_ppo", ["--group", "3"], "3 samples per prompt do not divide the batch of 64 responses"),
    ("kernel_iteration", ["--block-q", "96"], "does not divide"),
    ("kernel_iteration", ["--dtype", "bfloat16", "--block-q", "8"], "multiple of 16"),
    ("capstone_pallas_kernel", ["--block-q", "24"], "does not divide"),
    # the Keras track (issue 27)
    ("keras_distribution", ["--mesh", "1x8", "--hidden", "20"], "20 units over 8 model devices"),
    ("keras_custom_loop", ["--examples", "100", "--batch", "32"], "a smaller last batch"),
    ("keras_saving", ["--saved-by", "jax", "--loaders", "jax"], "no other backend loads it"),
    ("keras_nnx_twin", ["--backends", "torch,torch"], "a backend named twice"),
    ("keras_tiny_mlp", ["--backends", "jax,mxnet"], "an unknown Keras backend"),
    ("keras_cnn_digits", ["--backends", ","], "no backend chosen"),
    ("keras_transformer_block", ["--heads", "3"], "3 heads do not divide the width 16"),
    ("keras_train_eval_step", ["--jit-compile", "on"], "torch.compile is not run here"),
    ("keras_debug_unstable", ["--backends", "jax,jax"], "a backend named twice"),
    ("mlops", ["--psi-bins", "50", "--drift-rows", "100"], "2 reference rows per PSI bin"),
    ("failure_runbooks", ["--at-step", "12", "--steps", "10"], "is after the last step 10"),
    ("failure_runbooks", ["--failure", "disk-full", "--at-step", "5"], "full disk shows at a save"),
    ("llmops", ["--candidate", "continue the pattern: {pattern}"], "prompt too long"),
]
# A hang guard, not a speed assertion (a stopped app does less than a full run).
LIMIT_S = 120


def _id(case) -> str:
    stem, flags, _why = case
    return f"{stem}[{' '.join(flags)}]"


@pytest.mark.parametrize("case", REFUSALS, ids=[_id(c) for c in REFUSALS])
def test_refused_combination_stops_cleanly(case, run_lesson):
    stem, flags, why = case
    result = run_lesson(stem, *flags, timeout=LIMIT_S)
    output = result.stdout + result.stderr
    assert "Traceback" not in output, f"{why}: a cell ran past the refusal\n{output[-4000:]}"
    assert result.returncode == 0, f"{why}: exit {result.returncode}\n{output[-4000:]}"
    stopped = [line for line in result.stdout.splitlines() if line.startswith("STOPPED: ")]
    assert stopped, f"{why}: no STOPPED line (the combination was not refused)\n{output[-4000:]}"
    assert all(len(line) > len("STOPPED: ") + 10 for line in stopped), "STOPPED says why"


# Apps whose guard no flag can trip (they stop only when something outside fails).
NO_FLAG_REFUSAL = {
    "tpu_receipt": "stops only when its receipt subprocess fails",
    "resume_data_position": "its second guard stops only when the resume subprocess fails",
    "read_xprof_trace": "stops only when an allocator demo child process fails",
}


def test_every_app_with_a_guard_has_a_refused_case():
    guarded = {
        path.stem
        for path in curriculum.APPS_DIR.glob("*.py")
        if "lab.guard(" in path.read_text(encoding="utf-8")
    }
    covered = {stem for stem, _flags, _why in REFUSALS}
    assert guarded - covered - set(NO_FLAG_REFUSAL) == set(), "add a refused case for these apps"
    assert covered <= guarded, "a case names an app without a guard"


def test_a_mistyped_flag_is_refused_not_ignored(run_lesson):
    """`python apps/x.py --sed 5` once ran the defaults without a word (issue 36): a script
    refuses a flag its app does not have, as argparse does (exit 2), and suggests the near one."""
    result = run_lesson("vmap", "--sed", "5", timeout=LIMIT_S)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "unrecognized arguments: --sed 5 (did you mean --seed?)" in result.stderr
    assert "Traceback" not in result.stderr and "PASS" not in result.stdout


def test_a_seed_that_is_not_the_sheets_is_refused(run_lesson, tmp_path):
    """`--seed 5 --answers sheet.json` once graded the sheet's seed while results.md said
    --seed=5 (issue 36): a chosen seed and the sheet's must agree, or the app stops and
    names both."""
    sheet = tmp_path / "sheet.json"
    sheet.write_text('{"path": "learn-tpus", "seed": 11, "answers": {}}', encoding="utf-8")
    result = run_lesson(
        "assessment_learn_tpus", "--seed", "5", "--answers", sheet,
        "--progress-dir", tmp_path / "workspace", timeout=LIMIT_S,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "Traceback" not in output, output[-3000:]
    stopped = [line for line in result.stdout.splitlines() if line.startswith("STOPPED: ")]
    assert stopped and "seed 11" in stopped[0] and "seed 5" in stopped[0], output[-3000:]
    assert "score:" not in result.stdout, "nothing is graded at a disputed seed"
