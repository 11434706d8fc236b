"""Exercises of the phase "Data & checkpoint recovery", one module per lesson.

- ``data_checkpoints.input_pipeline.padding_share`` (predict): the share of the rows one
  epoch computes on that are padding, with the last batch padded to B rows.
- ``data_checkpoints.input_pipeline.epoch_batches`` (code): one epoch of a shuffled,
  batched index stream with its mask, the short batch padded or dropped.
- ``data_checkpoints.save_full_state.state_bytes`` (predict): the bytes of the lesson
  trainer's complete training state (params, both Adam moments, count, step, dropout key).
- ``data_checkpoints.save_full_state.bad_files`` (code): the files of a checkpoint step that
  fail verification against its manifest (missing, resized, changed, unlisted).
- ``data_checkpoints.resume_data_position.examples_read`` (predict): how many examples the
  lesson's padded Grain pipeline has fed the run at its step-K checkpoint.
- ``data_checkpoints.resume_data_position.next_batch`` (code): the next batch of a sampler
  restored from (seed, epoch, position), across epoch boundaries, against a replayed run.

The items live in the lesson modules (core.exercises.data_checkpoints.input_pipeline,
.save_full_state, .resume_data_position); what two of them share (the phase title, the
sampler's order in NumPy, exact checks of index arrays) in ._shared.
"""

from __future__ import annotations

from core.assessment.items import Item
from core.exercises.data_checkpoints._shared import PHASE
from core.exercises.data_checkpoints.input_pipeline import EpochBatches, PaddingShare
from core.exercises.data_checkpoints.resume_data_position import ExamplesRead, NextBatch
from core.exercises.data_checkpoints.save_full_state import BadFiles, StateBytes

__all__ = ["ITEMS", "PHASE"]

# In the phase's lesson order: input_pipeline, save_full_state, resume_data_position.
ITEMS: tuple[Item, ...] = (
    PaddingShare(),
    EpochBatches(),
    StateBytes(),
    BadFiles(),
    ExamplesRead(),
    NextBatch(),
)
