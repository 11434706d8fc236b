"""A byte-level MLP language model trained data parallel with PyTorch/XLA on a TPU VM.

    # on a TPU VM, in the PyTorch/XLA environment (tpu_scripts/frameworks/environments.py):
    PJRT_DEVICE=TPU python -m tpu_scripts.frameworks.torch_xla_train --steps 50 --out DIR
    # a CPU rehearsal with `make torch-xla-env` here (one XLA:CPU device):
    PJRT_DEVICE=CPU .venv-torch-xla/bin/python -m tpu_scripts.frameworks.torch_xla_train ...
    # the same model, data and step in plain PyTorch (the course's .venv, no torch_xla):
    python -m tpu_scripts.frameworks.torch_xla_train --device cpu --steps 30

The model, the data sharding (corpus.shard: disjoint per process, every example once) and the
train step are plain PyTorch functions, tested by the course's CPU torch in `make test`. Only
``run_xla`` touches torch_xla: ``torch_xla.launch`` starts one process per local device (on a
multi-host slice every host runs this command and the processes form one job), each takes
its shard by ``torch_xla.runtime.global_ordinal()``, ``xm.optimizer_step`` all-reduces the
gradients before the update and ``torch_xla.sync()`` cuts one graph per step.

Writes DIR/result.json (process 0): the losses of process 0's batches, seconds per step after
the first (compiling) step, world size, device type, versions; ``is_tpu_result`` is true only
when the device type is TPU. Exit statuses: 0 trained, 2 bad arguments, 3 refused (no TPU here
and no PJRT_DEVICE chosen).
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


@dataclasses.dataclass(frozen=True)
class Config:
    steps: int = 30
    batch_size: int = 32
    context: int = 8
    embed: int = 16
    hidden: int = 128
    lr: float = 3e-3
    sentences: int = 400
    seed: int = 0


def build_model(config: Config):
    """Embedding of each context byte, concatenated, one hidden layer, logits over 256 bytes."""
    import torch
    from torch import nn

    torch.manual_seed(config.seed)
    return nn.Sequential(
        nn.Embedding(corpus.VOCAB, config.embed),
        nn.Flatten(),
        nn.Linear(config.context * config.embed, config.hidden),
        nn.GELU(),
        nn.Linear(config.hidden, corpus.VOCAB),
    )


def make_optimizer(model, config: Config):
    import torch

    return torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)


def train_step(model, optimizer, x, y, optimizer_step=None):
    """One step: cross-entropy of the next byte, backward, update. ``optimizer_step(optimizer)``
    replaces ``optimizer.step()`` (PyTorch/XLA: ``xm.optimizer_step`` all-reduces the gradients
    across processes first). Returns the loss tensor (not .item(): no device sync here)."""
    import torch.nn.functional as F

    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    if optimizer_step is None:
        optimizer.step()
    else:
        optimizer_step(optimizer)
    return loss.detach()


def rank_batches(config: Config, rank: int, world: int):
    """(x, y) int64 CPU tensors for this rank's ``config.steps`` steps: epoch after epoch of its
    shard (a new permutation each epoch), the same count on every rank."""
    import torch

    x, y = corpus.examples(corpus.make_text(config.sentences, config.seed), config.context)
    per_epoch = corpus.steps_per_epoch(len(x), world, config.batch_size)
    if per_epoch < 1:
        raise ValueError(
            f"{len(x)} examples over {world} processes give no full batch of "
            f"{config.batch_size}: lower --batch-size or raise --sentences"
        )
    out, epoch = [], 0
    while len(out) < config.steps:
        shard = corpus.shard(len(x), rank, world, config.seed, epoch)
        for idx in corpus.batches(shard, config.batch_size)[:per_epoch]:
            out.append((torch.from_numpy(x[idx]).long(), torch.from_numpy(y[idx]).long()))
        epoch += 1
    return out[: config.steps]


def train(config: Config, rank: int = 0, world: int = 1, device=None, optimizer_step=None,
          sync=None) -> dict:  # fmt: skip
    """Train ``config.steps`` steps on this rank's shard; the losses (floats) and timing."""
    model = build_model(config)
    if device is not None:
        model = model.to(device)
    optimizer = make_optimizer(model, config)
    losses, stamps = [], []
    for x, y in rank_batches(config, rank, world):
        if device is not None:
            x, y = x.to(device), y.to(device)
        losses.append(train_step(model, optimizer, x, y, optimizer_step))
        if sync is not None:
            sync()
        stamps.append(time.perf_counter())
    values = [float(loss.item()) for loss in losses]  # one transfer at the end
    later = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    return {
        "losses": values,
        "seconds_per_step": sorted(later)[len(later) // 2] if later else None,
        "rank": rank,
        "world_size": world,
    }


# ----------------------------------------------------------------------------------------
# The XLA device layer: the only code that imports torch_xla (runs in its own environment).


def _xla_process(index: int, config: Config, out: str | None) -> None:
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    rank, world = xr.global_ordinal(), xr.world_size()
    result = train(config, rank, world, torch_xla.device(), xm.optimizer_step, torch_xla.sync)
    if rank == 0:
        import torch

        result.update(
            framework="torch_xla",
            device_type=xr.device_type(),
            is_tpu_result=xr.device_type() == "TPU",
            versions={"torch": torch.__version__, "torch_xla": torch_xla.__version__},
            config=dataclasses.asdict(config),
        )
        _report(result, out)


def run_xla(config: Config, out: str | None) -> None:
    """One process per local XLA device (torch_xla.launch), each training on its own shard."""
    import torch_xla

    torch_xla.launch(_xla_process, args=(config, out))


def device_problem(environ=os.environ) -> str | None:
    """Why the XLA layer must not start here, or None (PJRT_DEVICE chosen, or a TPU host)."""
    from core import runtime

    if environ.get("PJRT_DEVICE") or runtime.host_has_tpu():
        return None
    return (
        "no TPU on this host (no /dev/accel* or /dev/vfio): set PJRT_DEVICE=CPU for a CPU "
        "rehearsal with the PyTorch/XLA environment (make torch-xla-env), or pass --device cpu "
        "for plain PyTorch"
    )


def _report(result: dict, out: str | None) -> None:
    first, last = result["losses"][0], result["losses"][-1]
    print(f"loss {first:.4f} -> {last:.4f} over {len(result['losses'])} steps", flush=True)
    if out:
        folder = pathlib.Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{RESULT}.tmp"
        tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, folder / RESULT)
        print(f"wrote {folder / RESULT}", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Config()
    parser.add_argument("--device", choices=("xla", "cpu"), default="xla")
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--out", help="write result.json here")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1 or args.lr <= 0:
        parser.error("--steps and --batch-size must be >= 1 and --lr > 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    config = Config(steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed)
    if args.device == "cpu":
        import torch

        result = train(config)
        result.update(
            framework="torch",
            device_type="CPU",
            is_tpu_result=False,
            versions={"torch": torch.__version__},
            config=dataclasses.asdict(config),
        )
        _report(result, args.out)
        return 0
    problem = device_problem()
    if problem:
        print(f"REFUSED: {problem}", file=sys.stderr)
        return REFUSED
    run_xla(config, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
