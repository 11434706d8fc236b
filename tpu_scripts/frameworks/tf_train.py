"""The byte-level MLP language model trained with tf.distribute: TPUStrategy on a TPU VM, and
its CPU twin, MirroredStrategy over logical CPU devices, built by the same functions.

    # on a TPU VM, in the TensorFlow environment (tpu_scripts/frameworks/environments.py):
    python -m tpu_scripts.frameworks.tf_train --strategy tpu --accelerator-type v5litepod-8 \\
        --steps 50 --out DIR
    # the CPU twin (tested in make test): 2 logical CPU devices, the same model and step
    python -m tpu_scripts.frameworks.tf_train --strategy mirrored --devices 2 --steps 30

``build_variables``, ``make_dataset`` (tf.data: the generated corpus of corpus.py, shuffled by
seed, batched to the global batch, distributed by the strategy), ``make_train_step`` and
``train`` take the strategy as an argument, so the twin runs exactly what the TPU runs. The
step: each replica's loss is averaged over the global batch (tf.nn.compute_average_loss),
the gradients are summed across replicas (all-reduce) and every replica applies the same SGD
update to its copy of the weights.

Before TensorFlow is imported the TPU path is refused with a message and exit status 3 when
the generation does not support TensorFlow (TPU7x: "You can use the JAX and PyTorch
frameworks on TPU7x. TensorFlow is not supported." — docs.cloud.google.com/tpu/docs/tpu7x,
read 2026-12), when the accelerator type is unknown, or when this host is not a TPU VM (no
/dev/accel* or vfio: core.runtime.host_has_tpu). The resolver is only ever
``TPUClusterResolver(tpu="local")``: a TPU name makes a DNS lookup to Google's TPU service.

Writes DIR/result.json: losses, seconds per step after the first, strategy, replicas, device
kinds, ``is_tpu_result`` (true only under TPUStrategy). Exit: 0, 2 bad arguments, 3 refused.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys
import time

from tpu_scripts.frameworks import corpus

RESULT = "result.json"
REFUSED = 3

# The course's generations (core/tpu/specs.py) on which Cloud TPU runs TensorFlow; TPU7x is
# not one (docs.cloud.google.com/tpu/docs/tpu7x: "TensorFlow is not supported", read 2026-12).
TF_GENERATIONS = ("v5e", "v5p", "v6e")
TF_UNSUPPORTED = {
    "tpu7x": "TPU7x (Ironwood) does not support TensorFlow (docs.cloud.google.com/tpu/docs/"
    "tpu7x: 'You can use the JAX and PyTorch frameworks on TPU7x. TensorFlow is not "
    "supported.'); run the JAX lessons or tpu_scripts/frameworks/torch_xla_train.py there",
}


@dataclasses.dataclass(frozen=True)
class Config:
    steps: int = 30
    global_batch: int = 32
    context: int = 8
    embed: int = 16
    hidden: int = 128
    lr: float = 0.5
    sentences: int = 400
    seed: int = 0


def generation_problem(accelerator_type: str) -> str | None:
    """Why TensorFlow cannot run on ``accelerator_type`` (e.g. "v5litepod-8"), or None."""
    from core.tpu import cloud_tpu

    kind = cloud_tpu.ACCELERATOR_TYPES.get(accelerator_type)
    if kind is None:
        known = ", ".join(sorted(cloud_tpu.ACCELERATOR_TYPES)[:6])
        return (
            f"unknown accelerator type {accelerator_type!r} (pass the slice's type, e.g. "
            f"{known}, ...; on the VM it is in TPU_ACCELERATOR_TYPE or gcloud describe)"
        )
    if kind.generation in TF_UNSUPPORTED:
        return TF_UNSUPPORTED[kind.generation]
    if kind.generation not in TF_GENERATIONS:
        return f"{kind.generation} is not one of the TensorFlow generations {TF_GENERATIONS}"
    return None


def tpu_problem(accelerator_type: str | None) -> str | None:
    """Why the TPU strategy must not start here (checked before TensorFlow is imported)."""
    from core import runtime

    if not accelerator_type:
        return (
            "--strategy tpu needs --accelerator-type (or TPU_ACCELERATOR_TYPE): the generation "
            f"decides whether TensorFlow runs ({', '.join(TF_GENERATIONS)} do; tpu7x does not)"
        )
    problem = generation_problem(accelerator_type)
    if problem:
        return problem
    if not runtime.host_has_tpu():
        return (
            "this host is not a TPU VM (no /dev/accel* or /dev/vfio): TPUClusterResolver("
            'tpu="local") would fail with NotFoundError, and a TPU name would make a DNS '
            "lookup to Google's TPU service; run this on the TPU VM (python -m tpu_scripts "
            "launch run --framework tensorflow ...) or use --strategy mirrored here"
        )
    return None


# ----------------------------------------------------------------------------------------
# The strategies (each imports TensorFlow; call only after the checks above)


def mirrored_strategy(devices: int = 2):
    """MirroredStrategy over ``devices`` logical CPU devices (set before TF's runtime starts)."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(devices)]
    )
    names = [d.name for d in tf.config.list_logical_devices("CPU")][:devices]
    return tf.distribute.MirroredStrategy(names)


def tpu_strategy():
    """TPUStrategy on this TPU VM's own chips: the resolver is always tpu="local"."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="local")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


# ----------------------------------------------------------------------------------------
# The shared builders: model, data, step (any tf.distribute strategy)


def build_variables(strategy, config: Config) -> list:
    """The model's weights, created in the strategy's scope (one copy per replica). Updated in
    replica context with identical (all-reduced) values: ONLY_FIRST_REPLICA aggregation."""
    import tensorflow as tf

    rng = tf.random.Generator.from_seed(config.seed)
    fan_in = config.context * config.embed
    shapes = {
        "embed": ((corpus.VOCAB, config.embed), 1.0),
        "w1": ((fan_in, config.hidden), fan_in**-0.5),
        "b1": ((config.hidden,), 0.0),
        "w2": ((config.hidden, corpus.VOCAB), config.hidden**-0.5),
        "b2": ((corpus.VOCAB,), 0.0),
    }
    initial = {k: rng.normal(shape) * scale for k, (shape, scale) in shapes.items()}
    with strategy.scope():
        return [
            tf.Variable(value, name=k, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            for k, value in initial.items()
        ]


def forward(variables, x):
    """Logits (batch, 256) for int32 context bytes x (batch, context)."""
    import tensorflow as tf

    embed, w1, b1, w2, b2 = variables
    h = tf.reshape(tf.gather(embed, x), [tf.shape(x)[0], -1])
    return tf.nn.gelu(h @ w1 + b1) @ w2 + b2


def make_dataset(strategy, config: Config):
    """tf.data: (x, y) examples, shuffled by seed, repeated, batched to the global batch (the
    remainder dropped: one shape per step), split across the replicas by the strategy."""
    import tensorflow as tf

    x, y = corpus.examples(corpus.make_text(config.sentences, config.seed), config.context)
    data = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(len(x), seed=config.seed, reshuffle_each_iteration=True)
        .repeat()
        .batch(config.global_batch, drop_remainder=True)
        .prefetch(2)
    )
    return strategy.experimental_distribute_dataset(data)


def make_train_step(strategy, variables, config: Config):
    """A tf.function: one SGD step on every replica; returns the global mean loss."""
    import tensorflow as tf

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(y, forward(variables, x))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=config.global_batch)
        # Dense gradients (the embedding's is IndexedSlices from tf.gather; 256 rows is small).
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]
        context = tf.distribute.get_replica_context()
        grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        for variable, grad in zip(variables, grads, strict=True):
            variable.assign_sub(config.lr * grad)
        return loss

    @tf.function
    def step(batch):
        losses = strategy.run(replica_step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return step


def train(strategy, config: Config) -> dict:
    """``config.steps`` steps of the shared step under ``strategy``: losses and timing."""
    if config.global_batch % strategy.num_replicas_in_sync:
        raise ValueError(
            f"global batch {config.global_batch} does not split over "
            f"{strategy.num_replicas_in_sync} replicas"
        )
    variables = build_variables(strategy, config)
    step = make_train_step(strategy, variables, config)
    batches = iter(make_dataset(strategy, config))
    losses, stamps = [], []
    for _ in range(config.steps):
        losses.append(step(next(batches)))
        stamps.append(time.perf_counter())
    values = [float(loss.numpy()) for loss in losses]
    later = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    return {
        "losses": values,
        "seconds_per_step": sorted(later)[len(later) // 2] if later else None,
        "replicas": strategy.num_replicas_in_sync,
    }


# ----------------------------------------------------------------------------------------
# Command line


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Config()
    parser.add_argument("--strategy", choices=("tpu", "mirrored"), default="tpu")
    parser.add_argument(
        "--accelerator-type",
        default=os.environ.get("TPU_ACCELERATOR_TYPE", ""),
        help="the slice's type, e.g. v5litepod-8 (default: $TPU_ACCELERATOR_TYPE)",
    )
    parser.add_argument("--devices", type=int, default=2, help="logical CPU devices (mirrored)")
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--global-batch", type=int, default=defaults.global_batch)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--out", help="write result.json here")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.global_batch < 1 or args.devices < 1 or args.lr <= 0:
        parser.error("--steps, --global-batch and --devices must be >= 1 and --lr > 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.strategy == "tpu":
        problem = tpu_problem(args.accelerator_type)
        if problem:
            print(f"REFUSED: {problem}", file=sys.stderr)
            return REFUSED
    config = Config(steps=args.steps, global_batch=args.global_batch, lr=args.lr, seed=args.seed)
    import tensorflow as tf

    strategy = tpu_strategy() if args.strategy == "tpu" else mirrored_strategy(args.devices)
    try:
        result = train(strategy, config)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    devices = strategy.extended.worker_devices
    result.update(
        framework="tensorflow",
        strategy=type(strategy).__name__,
        devices=list(devices),
        accelerator_type=args.accelerator_type or None,
        is_tpu_result=args.strategy == "tpu",
        versions={"tensorflow": tf.__version__},
        config=dataclasses.asdict(config),
    )
    first, last = result["losses"][0], result["losses"][-1]
    print(f"loss {first:.4f} -> {last:.4f} over {config.steps} steps on {len(devices)} replicas")
    if args.out:
        folder = pathlib.Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{RESULT}.tmp"
        tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, folder / RESULT)
        print(f"wrote {folder / RESULT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
