"""Exercises of the phase "Distributed training", one module per lesson
(meshes_sharding, sharded_train_step, communication_algorithms), in the order the lessons' apps
ask them.

- ``distributed.meshes_sharding.shard_shape`` (predict): the block of a 3-D array each device
  holds under a 2-D mesh and a PartitionSpec.
- ``distributed.meshes_sharding.device_block`` (code): which slice of the array a device at
  given mesh coordinates holds, for any PartitionSpec.
- ``distributed.sharded_train_step.fsdp_adam_bytes`` (predict): the optimizer-state bytes
  each device holds when the lesson's MLP trains with Adam under FSDP.
- ``distributed.sharded_train_step.tensor_parallel_logits`` (code): the MLP's forward, tensor
  parallel over the hidden units with ``jax.shard_map``, one psum in the right place.
- ``distributed.communication_algorithms.microbatch_allreduce_bytes`` (predict): the bytes
  each device sends per step when every microbatch's gradient is all-reduced.
- ``distributed.communication_algorithms.ring_allreduce`` (code): a ring all-reduce
  (reduce-scatter + all-gather) simulated step by step over D buffers, chunk schedule and all.

The assessment bank (core/assessment/bank/distributed.py) asks the plain ring all-reduce bytes
and a data-parallel shard_map step; these exercises ask around them, not the same questions.
"""

from __future__ import annotations

from core.assessment.items import Item
from core.exercises.distributed._shared import PHASE
from core.exercises.distributed.communication_algorithms import (
    MicrobatchAllReduceBytes,
    RingAllReduce,
)
from core.exercises.distributed.meshes_sharding import DeviceBlock, ShardShape
from core.exercises.distributed.sharded_train_step import FsdpAdamBytes, TensorParallelLogits

__all__ = ["ITEMS", "PHASE"]

ITEMS: tuple[Item, ...] = (
    ShardShape(),
    DeviceBlock(),
    FsdpAdamBytes(),
    TensorParallelLogits(),
    MicrobatchAllReduceBytes(),
    RingAllReduce(),
)
