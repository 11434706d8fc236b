"""The course map: 19 phases, 91 lessons, two capstones, each lesson tied to its app.

Phase and lesson titles are verbatim from ../shared/seeds/: the phases of "Learn TPUs and
Google Cloud", with the phase "Pallas kernels" of "Make it fast. Make it scale." placed
after "Distributed training". A lesson's status is read from the file system: "present"
when ``apps/<slug>.py`` exists, "missing" otherwise.

    python -m core.curriculum             # the map with each lesson's status
    python -m core.curriculum --json      # machine-readable map
    python -m core.curriculum --summary   # counts per phase
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
APPS_DIR = REPO_ROOT / "apps"
HOME_APP = "index"  # apps/index.py, the course home; not a lesson


@dataclasses.dataclass(frozen=True)
class Lesson:
    title: str
    slug: str  # the app is apps/<slug>.py

    @property
    def app(self) -> str:
        return f"apps/{self.slug}.py"


@dataclasses.dataclass(frozen=True)
class Phase:
    title: str
    summary: str
    lessons: tuple[Lesson, ...]


@dataclasses.dataclass(frozen=True)
class Capstone:
    title: str
    summary: str
    slug: str
    points: tuple[str, ...]

    @property
    def app(self) -> str:
        return f"apps/{self.slug}.py"


@dataclasses.dataclass(frozen=True)
class Track:
    """A themed route through apps that cuts across phases (built by later issues)."""

    title: str
    summary: str
    slugs: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class LearningPath:
    """One of the seeds' learning paths: an ordered selection of phases."""

    title: str
    audience: str
    phase_titles: tuple[str, ...]


def _phase(title: str, summary: str, *lessons: tuple[str, str]) -> Phase:
    return Phase(title, summary, tuple(Lesson(t, s) for t, s in lessons))


PHASES: tuple[Phase, ...] = (
    _phase(
        "Setup & first steps",
        "Run a saved program and explain its environment, array output and device placement. "
        "Start on one CPU, practice sharding on four logical CPU devices, and learn how to get "
        "a TPU running, launch a TPU job, and run course experiments on TPU in parallel.",
        ("Set up your learning workspace", "workspace"),
        ("Meet your arrays and devices", "arrays_devices"),
        ("Practice with four virtual CPU devices", "virtual_devices"),
        ("Move your experiment to a TPU", "move_to_tpu"),
    ),
    _phase(
        "TPU Setup: Provisioning & Runtime Verification",
        "Choose the right TPU slice, provision a Cloud TPU VM, bootstrap .venv with jax[tpu], "
        "verify a synchronized runtime receipt, and practice clean teardown.",
        ("Select a TPU slice and provision your Cloud TPU VM", "select_tpu_slice"),
        ("Bootstrap .venv and verify a TPU runtime receipt", "tpu_receipt"),
    ),
    _phase(
        "TPU Workflows: Launching Jobs & Checkpointed Experiments",
        "Stage scripts with gcloud compute tpus tpu-vm scp, separate compilation warmup from "
        "steady-state step timing, recover interrupted runs from atomic checkpoints, and launch "
        "single-host or --worker=all Pod slice experiments.",
        ("Stage and launch checkpointed TPU jobs", "stage_launch_jobs"),
        ("Run course scripts and multi-host TPU Pod slices", "pod_slices"),
    ),
    _phase(
        "TPU Systems: Generations, Memory, Precision & XProf",
        "Compare TPU v5e, v5p, and v6e specifications and ridge points, budget training and "
        "KV-cache HBM before provisioning, measure BF16 and INT8 numerical error, and capture "
        "warmed XProf traces.",
        ("TPU generations and HBM memory budgeting", "tpu_generations_hbm"),
        ("bfloat16, int8 precision, and XProf profiling on TPU", "precision_xprof"),
    ),
    _phase(
        "Arrays & pure functions",
        "Treat every axis as part of a contract. Work through normalization, broadcasting and "
        "immutable updates, then diagnose mistakes that still return plausible numbers.",
        ("From NumPy to jax.numpy", "numpy_to_jnp"),
        ("Shapes, broadcasting, and dtypes", "shapes_broadcasting"),
        ("Pure functions and explicit inputs", "pure_functions"),
        ("Immutable updates and indexing", "immutable_updates"),
    ),
    _phase(
        "JAX transformations",
        "Begin with a scalar function, then differentiate it, batch it and compile it. Compare "
        "each transformed result with a simple reference so you can explain what changed.",
        ("Your first gradient", "first_gradient"),
        ("Losses and value_and_grad", "losses_value_and_grad"),
        ("Batch a function with vmap", "vmap"),
        ("Compile a function with jit", "jit"),
        ("Tracing, static arguments, and recompilation", "tracing_recompilation"),
    ),
    _phase(
        "State, randomness & control flow",
        "Make randomness, parameters and loop state explicit. Learn how to repeat an experiment "
        "without accidentally reusing randomness or mutating a caller's state.",
        ("Random keys without surprises", "random_keys"),
        ("Pytrees and structured parameters", "pytrees"),
        ("Compiled loops with lax.scan", "lax_scan"),
        ("Branches with lax.cond", "lax_cond"),
    ),
    _phase(
        "Math & optimization",
        "Connect geometry and probability to the updates in a training loop: linear algebra, "
        "gradient checks, gradient descent, conditioning, curvature, likelihoods, "
        "regularization and optimizer behavior.",
        ("Vectors, norms, and projections", "vectors_norms"),
        ("Linear algebra and loss intuition", "linear_algebra_loss"),
        ("Least squares, rank, and conditioning", "least_squares"),
        ("The chain rule, Jacobians, and directions", "chain_rule_jacobians"),
        ("Gradient checking and numerical accuracy", "gradient_checking"),
        ("Curvature, Hessians, and learning rates", "curvature_hessians"),
        ("Write gradient descent yourself", "gradient_descent"),
        ("Probability, likelihood, and stable losses", "stable_losses"),
        ("Regularization and honest validation", "regularization_validation"),
        ("Minibatches, expectation, and gradient noise", "minibatch_noise"),
        ("Optimize with Optax", "optax_basics"),
        ("Adam, clipping, and learning-rate schedules", "adam_clipping_schedules"),
    ),
    _phase(
        "Neural network training",
        "Build the same ideas into small neural networks: hidden layers, parameter state, "
        "stable objectives and evaluation, then a small image classifier.",
        ("Build a tiny multilayer perceptron", "tiny_mlp"),
        ("Model and state with Flax NNX", "flax_nnx"),
        ("A compiled train and evaluation step", "train_eval_step"),
        ("Train a CNN on a small dataset", "cnn_digits"),
        ("Debug unstable learning", "debug_unstable"),
    ),
    _phase(
        "Data & checkpoint recovery",
        "Follow examples from the dataset into a training update, then save enough to reproduce "
        "the next update after interruption; track configuration, data identity and metric "
        "histories with MLflow alongside complete checkpoints.",
        ("Design an input pipeline", "input_pipeline"),
        ("Load, batch, and checkpoint order with Grain", "grain_pipeline"),
        ("Save model, optimizer, and random state", "save_full_state"),
        ("Recover data position and resume", "resume_data_position"),
        ("Asynchronous checkpoints and failure boundaries", "async_checkpoints"),
        ("Track experiments and lineage with MLflow", "mlflow_tracking"),
    ),
    _phase(
        "Transformers & language models",
        "Build attention and causal masking from small arrays, then connect tokenization, "
        "mixed precision, training and generation.",
        ("Attention from small pieces", "attention"),
        ("Masking, tokenization, and sequence packing", "masking_packing"),
        ("A Transformer block and mixed precision", "transformer_block"),
        ("Train, checkpoint, and generate", "train_generate"),
    ),
    _phase(
        "Self-supervised pretraining: masked and contrastive learning",
        "Train small masked-token, hidden-patch and paired-view models. Audit information "
        "leakage, reduction counts and pair identity before interpreting a falling objective.",
        ("Masked language modeling: predict hidden tokens", "masked_lm"),
        ("Masked image modeling: reconstruct missing patches", "masked_image"),
        ("Contrastive learning: views, positives and negatives", "contrastive"),
    ),
    _phase(
        "Reinforcement learning",
        "Build a functional environment, collect randomized trajectories, train policy-gradient "
        "and clipped-policy agents, and evaluate independent seeds.",
        ("Write a functional environment", "functional_env"),
        ("Batch environments and scan rollouts", "batched_rollouts"),
        ("Policy gradients and PPO", "policy_gradients_ppo"),
        ("Evaluate agents across seeds", "evaluate_agents"),
    ),
    _phase(
        "Post-training: SFT, LoRA, reward models and RLHF",
        "Connect supervised demonstrations, frozen-base LoRA, reward modeling, sampled PPO and "
        "direct preference optimization, keeping the reference, behavior policy, reward model "
        "and dataset identities separate.",
        ("Supervised fine-tuning with response-only token loss", "sft"),
        ("LoRA: adapt, save and merge low-rank updates", "lora"),
        ("Learn a reward model from pairwise preferences", "reward_model"),
        ("RLHF mechanics: a frozen reward and PPO policy updates", "rlhf_ppo"),
        ("Direct preference optimization and reference-corrected margins", "dpo"),
    ),
    _phase(
        "Performance diagnosis",
        "Measure completed work, inspect a real profiler trace and relate compiler output to "
        "memory traffic; compare rematerialization choices.",
        ("Benchmark asynchronous work correctly", "async_benchmarking"),
        ("Diagnose recompilation and host synchronization", "recompilation_host_sync"),
        ("Read an XProf trace", "read_xprof_trace"),
        ("Reason with HLO and the roofline model", "hlo_roofline"),
        ("Memory, rematerialization, and optimization tradeoffs", "remat_tradeoffs"),
    ),
    _phase(
        "Distributed training",
        "Partition arrays and training updates, compare all-reduce with reduce-scatter, and "
        "restore a complete sharded state across an epoch boundary.",
        ("Arrays, meshes, and sharding", "meshes_sharding"),
        ("A sharded training step", "sharded_train_step"),
        ("Communication-efficient algorithms", "communication_algorithms"),
        ("Resilient distributed training", "resilient_training"),
    ),
    _phase(
        "Pallas kernels",
        "Write actual Pallas grids and buffered pipelines, verify boundaries and precision on "
        "CPU, and prepare guarded target measurements before claiming an optimization win.",
        ("Pallas grids and BlockSpecs", "pallas_grids"),
        ("A first TPU kernel", "first_tpu_kernel"),
        ("Tiling, memory, and pipelining", "tiling_pipelining"),
        ("Iterate with correctness and performance evidence", "kernel_iteration"),
    ),
    _phase(
        "Deployment, interoperability & edge AI",
        "Adapt a trained model, verify framework and export contracts, compare precision "
        "policies and measure local inference before planning server or edge capacity.",
        ("Adapt a pretrained model and choose a post-training objective", "adapt_pretrained"),
        ("Move models between JAX, Keras, TensorFlow and PyTorch", "framework_interop"),
        ("Convert PyTorch weights to Flax and locate numerical errors", "torch_to_flax"),
        ("Export a computation and verify its serving contract", "export_serving_contract"),
        ("Choose weight, activation and accumulation precision", "precision_policy"),
        ("Containerize a model service and verify its boundary", "containerize_service"),
        ("Inference capacity, batching, and autoscaling", "inference_capacity"),
        ("Deploy at the edge: conversion, budgets and device checks", "edge_deploy"),
    ),
    _phase(
        "Workload operations",
        "Launch and observe real local jobs, detect failures and stalls, restore complete "
        "training state, verify artifact quality and rehearse rollback before planning capacity.",
        ("Accelerator jobs and runtime lifecycle", "accelerator_jobs"),
        ("Health, logs, and workload observability", "observability"),
        ("Failure recovery and operational runbooks", "failure_runbooks"),
        ("Changes, rollback, and artifact provenance", "rollback_provenance"),
        ("Capacity, utilization, and operating cost", "capacity_cost"),
        ("MLOps: data contracts, CI gates and monitoring", "mlops"),
        ("LLMOps: version prompts, evaluate behavior and trace requests", "llmops"),
        ("ModelOps: own, approve, roll back and retire a model", "modelops"),
    ),
)

CAPSTONES: tuple[Capstone, ...] = (
    Capstone(
        "Causal Transformer training-system capstone",
        "Train and recover a byte Transformer, verify cache precision and exported inference, "
        "and benchmark on CPU and Cloud TPU VM.",
        "capstone_transformer",
        (
            "Independent causal-attention and valid-token loss checks on disjoint data",
            "Fresh-process recovery of parameters, both Adam moments, dropout keys and document "
            "position",
            "FP32/BF16/INT8 cache parity, stored bytes and numerical-error comparisons",
            "Six serialized prefill/decode endpoints with fresh-process reload and artifact "
            "rejection",
            "A genuine profile and synchronized CPU measurements, plus separate actual-target "
            "qualification before any TPU claim",
            "Cloud resource identity, resolved environment, actual backend events, retrieved "
            "checkpoints and verified resource cleanup for any claimed TPU run",
            "Generation and topology choice, explicit weight/activation/accumulator/cache policy, "
            "memory budget and one tested profile hypothesis with retained quality evidence",
        ),
    ),
    Capstone(
        "A checked kernel and a measurement-backed optimization argument",
        "Defend the profile, global objective, partitioning and kernel correctness; quantify a "
        "whole-workload opportunity. CPU checks establish semantics; accelerator execution and "
        "performance remain a separate required qualification for device claims.",
        "capstone_pallas_kernel",
        (
            "Reference agreement across more than one shape and parameter setting",
            "Synchronized compile and execution measurements with a trace of the bottleneck",
            "Array partitioning, collective communication and a before/after comparison on the "
            "stated hardware",
        ),
    ),
)

TRACKS: tuple[Track, ...] = (
    Track(
        "JAX track",
        "The course in JAX end to end: arrays, transformations, Flax NNX training, "
        "checkpoints, sharding and Pallas, on CPU devices first and then on a TPU VM.",
        (),
    ),
    Track(
        "Keras multi-backend track",
        "The same models in Keras 3 on the jax, torch and tensorflow backends, built on the "
        "interop/ conversions; each backend runs in its own process.",
        (),
    ),
)

_PALLAS = "Pallas kernels"
LEARNING_PATHS: tuple[LearningPath, ...] = (
    LearningPath(
        "Learn TPUs and Google Cloud",
        "Model builders who want to provision TPUs, launch single-host and multi-host "
        "experiments, and connect sequence models to accelerator engineering.",
        tuple(p.title for p in PHASES if p.title != _PALLAS),
    ),
    LearningPath(
        "Make it fast. Make it scale.",
        "Engineers comfortable with training loops who want to reason about memory, "
        "communication and throughput.",
        (
            "Setup & first steps",
            "Arrays & pure functions",
            "JAX transformations",
            "State, randomness & control flow",
            "Math & optimization",
            "Neural network training",
            "Data & checkpoint recovery",
            "Performance diagnosis",
            "Distributed training",
            _PALLAS,
        ),
    ),
)


def all_lessons() -> list[Lesson]:
    return [lesson for phase in PHASES for lesson in phase.lessons]


def named_app_slugs() -> set[str]:
    """Every app slug the map names: lessons, capstones, tracks and the course home."""
    slugs = {lesson.slug for lesson in all_lessons()}
    slugs |= {c.slug for c in CAPSTONES}
    slugs |= {s for t in TRACKS for s in t.slugs}
    return slugs | {HOME_APP}


def app_path(slug: str, apps_dir: pathlib.Path = APPS_DIR) -> pathlib.Path:
    return apps_dir / f"{slug}.py"


def status(slug: str, apps_dir: pathlib.Path = APPS_DIR) -> str:
    return "present" if app_path(slug, apps_dir).is_file() else "missing"


def unnamed_apps(apps_dir: pathlib.Path = APPS_DIR) -> list[str]:
    """App files in apps/ that the map does not name (each is a map defect)."""
    named = named_app_slugs()
    return sorted(p.name for p in apps_dir.glob("*.py") if p.stem not in named)


def course_map(apps_dir: pathlib.Path = APPS_DIR) -> list[dict]:
    """The map as JSON-ready data: [{"phase", "lessons": [{"title", "app", "status"}]}]."""
    return [
        {
            "phase": phase.title,
            "lessons": [
                {"title": lesson.title, "app": lesson.app, "status": status(lesson.slug, apps_dir)}
                for lesson in phase.lessons
            ],
        }
        for phase in PHASES
    ]


def summary_rows(apps_dir: pathlib.Path = APPS_DIR) -> list[tuple[str, int, int]]:
    """(phase title, lessons present, lessons in phase) per phase."""
    return [
        (
            phase.title,
            sum(status(lesson.slug, apps_dir) == "present" for lesson in phase.lessons),
            len(phase.lessons),
        )
        for phase in PHASES
    ]


def format_map(apps_dir: pathlib.Path = APPS_DIR) -> str:
    lines = []
    for number, phase in enumerate(PHASES, start=1):
        lines.append(f"{number:2d}. {phase.title}")
        for lesson in phase.lessons:
            mark = "x" if status(lesson.slug, apps_dir) == "present" else " "
            lines.append(f"    [{mark}] {lesson.title:<66} {lesson.app}")
    lines.append("")
    lines.append("Capstones")
    for capstone in CAPSTONES:
        mark = "x" if status(capstone.slug, apps_dir) == "present" else " "
        lines.append(f"    [{mark}] {capstone.title:<66} {capstone.app}")
        lines.extend(f"          - {point}" for point in capstone.points)
    return "\n".join(lines)


def format_summary(apps_dir: pathlib.Path = APPS_DIR) -> str:
    rows = summary_rows(apps_dir)
    width = max(len(title) for title, _, _ in rows)
    lines = [f"{'phase':<{width + 4}} present / lessons"]
    for number, (title, present, total) in enumerate(rows, start=1):
        lines.append(f"{number:2d}. {title:<{width}} {present:>7} / {total}")
    present = sum(r[1] for r in rows)
    total = sum(r[2] for r in rows)
    lines.append(f"{'':4}{'total':<{width}} {present:>7} / {total}")
    lines.append(f"{present} of {total} lessons present, {total - present} missing")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m core.curriculum",
        description="Print the course map with each lesson's status (app present or missing).",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--json", action="store_true", help="print the map as JSON")
    group.add_argument("--summary", action="store_true", help="print counts per phase")
    args = parser.parse_args(argv)  # exits 2 with usage on bad arguments
    if args.json:
        print(json.dumps(course_map(), indent=2))
    elif args.summary:
        print(format_summary())
    else:
        print(format_map())
    return 0


if __name__ == "__main__":
    sys.exit(main())
