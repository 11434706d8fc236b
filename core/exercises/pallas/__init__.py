"""Exercises of the phase "Pallas kernels", one module per lesson.

- ``pallas.pallas_grids.padding_values`` (predict): how many padding values the grid hands
  the kernel when the blocks divide neither dimension; the lesson's padding demo counts them.
- ``pallas.pallas_grids.blocked_transpose`` (code): the grid and the two BlockSpecs of a
  blocked transpose, run in interpret mode and compared with ``x.T`` bit for bit.
- ``pallas.first_tpu_kernel.kernel_vmem`` (predict): the VMEM the TPU-style matmul holds
  for seeded blocks and dtype (double-buffered blocks, one f32 accumulator), in KiB.
- ``pallas.first_tpu_kernel.matmul_bias_relu`` (code): the kernel body of the TPU-style
  matmul with a fused bias and ReLU epilogue (zeroing, accumulating, the epilogue at the
  last k), in interpret mode against float64 NumPy.
- ``pallas.tiling_pipelining.hbm_traffic`` (predict): the bytes the blocked matmul moves
  between HBM and VMEM for seeded shapes, blocks and dtype, in MiB.
- ``pallas.tiling_pipelining.stream_square`` (code): a double-buffered DMA loop by hand
  (x left in HBM, two VMEM slots, two semaphores), in interpret mode against float64 NumPy.

The items live in the lesson modules (core.exercises.pallas.pallas_grids,
.first_tpu_kernel, .tiling_pipelining); what two of
them share (the phase title, a float64 view of a result, the wrong blocks of one) in
._shared.
"""

from __future__ import annotations

from core.assessment.items import Item
from core.exercises.pallas._shared import PHASE
from core.exercises.pallas.first_tpu_kernel import KernelVmem, MatmulBiasRelu
from core.exercises.pallas.pallas_grids import BlockedTranspose, PaddingValues
from core.exercises.pallas.tiling_pipelining import HbmTraffic, StreamSquare

__all__ = ["ITEMS", "PHASE"]

ITEMS: tuple[Item, ...] = (
    PaddingValues(),
    BlockedTranspose(),
    KernelVmem(),
    MatmulBiasRelu(),
    HbmTraffic(),
    StreamSquare(),
)
