"""A sharded training step that runs the same on 1 process or N (a Pod slice rehearsal).

Linear regression y = x @ w_true + noise, global batch sharded over every device of every
process (`jax.make_array_from_process_local_data`: each process loads only its rows), the
parameters replicated; a few SGD steps under jit. Prints compile (first step) time and
steady-state step time separately, then one JSON result line (loss and parameters) that
`python -m tpu_scripts rehearse` compares between a 2x4 and a 1x8 run.

    python tpu_scripts/examples/sharded_step.py --steps 3 --batch 64
    python tpu_scripts/examples/sharded_step.py --steps 6 --checkpoint-dir ckpt  # resumable

With ``--checkpoint-dir`` every step is saved with core/state/checkpoint.py (Orbax, verified
manifest); a restart with the same directory resumes after the newest good step, so a
killed job (a preempted Spot VM) loses at most one step of work.
"""

import argparse

from tpu_scripts import rehearse

process_id, process_count = rehearse.initialize_from_env()  # before any JAX computation

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from core.perf import timing  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64, help="global batch (all processes)")
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-dir", default="", help="save every step; resume from it")
    args = parser.parse_args()

    devices = jax.devices()
    if args.batch % len(devices):
        raise SystemExit(f"--batch {args.batch} must divide over {len(devices)} devices")
    mesh = jax.sharding.Mesh(np.array(devices), ("data",))
    batch_sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    # Every process can build the global batch from the seed, but loads only its own rows:
    # on a Pod slice each host reads its own shard of the data.
    rng = np.random.default_rng(args.seed)
    x_BF = rng.standard_normal((args.batch, args.features)).astype(np.float32)
    w_true_F = rng.standard_normal(args.features).astype(np.float32)
    y_B = x_BF @ w_true_F + 0.01 * rng.standard_normal(args.batch).astype(np.float32)
    rows = args.batch // process_count
    local = slice(process_id * rows, (process_id + 1) * rows)
    x = jax.make_array_from_process_local_data(batch_sharding, x_BF[local], x_BF.shape)
    y = jax.make_array_from_process_local_data(batch_sharding, y_B[local], y_B.shape)
    w = jax.device_put(jnp.zeros(args.features, jnp.float32), replicated)

    @jax.jit
    def train_step(w_F, x_BF, y_B):
        def loss_fn(w_F):
            return jnp.mean((x_BF @ w_F - y_B) ** 2)

        loss, grad_F = jax.value_and_grad(loss_fn)(w_F)
        return w_F - args.learning_rate * grad_F, loss

    checkpointer, first_step = None, 1
    if args.checkpoint_dir:
        from core.state import checkpoint

        checkpointer = checkpoint.Checkpointer(args.checkpoint_dir, save_every=1, async_save=False)
        restored = checkpointer.restore_latest({"w": checkpoint.abstract_like(w)})
        if restored is not None:
            w, first_step = restored.state["w"], restored.step + 1
            print(f"resumed from checkpoint step {restored.step}", flush=True)

    times, losses = [], []
    for step in range(first_step, args.steps + 1):
        (w, loss), seconds = timing.timed_call(train_step, w, x, y)
        times.append(seconds)
        losses.append(float(np.asarray(loss.addressable_shards[0].data)))
        if checkpointer is not None:
            checkpointer.save(step, {"w": w}, {"step": step}, vars(args), {"loss": losses[-1]})
            checkpointer.wait_until_finished()
            checkpointer.poll()
            print(f"step {step} loss {losses[-1]:.6f} saved", flush=True)
    if checkpointer is not None:
        checkpointer.close()
    if not times:
        times = [float("nan")]
    compile_s = times[0]
    step_s = timing.summarize(times[1:]).median if len(times) > 1 else float("nan")
    print(
        f"process {process_id}/{process_count}: {jax.local_device_count()} local of "
        f"{jax.device_count()} devices; compile (first step) {compile_s * 1e3:.1f} ms, "
        f"steady-state step {step_s * 1e3:.2f} ms"
    )
    rehearse.print_result(
        {
            "first_step": first_step,
            "losses": losses,
            "w": np.asarray(w.addressable_shards[0].data).tolist(),
            "compile_s": compile_s,
            "step_s": step_s,
        }
    )


if __name__ == "__main__":
    main()
