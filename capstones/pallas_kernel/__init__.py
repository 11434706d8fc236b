"""The second capstone: a checked Pallas kernel and a measurement-backed optimization argument.

``python -m capstones.pallas_kernel COMMAND [key=value ...]`` (cli.py): ``agreement`` (the
flash-attention kernel against NumPy float64 over shapes x blocks x dtypes x masks),
``profile`` (where the byte Transformer's train step spends its time and memory; the Amdahl
bound of replacing its attention core), ``partition`` (the kernel inside ``jax.shard_map``
over 8 CPU devices, the collectives in the HLO, CPU before/after, the TPU compiler's memory
per generation), ``objective`` (the model's loss and gradients with the kernel equal those
with the reference core) and ``report`` (all of them in one Markdown + JSON report).

CPU figures of the kernel are Pallas interpret-mode figures: they establish semantics, not
speed. A TPU claim needs tpu_scripts/pallas_kernel_tpu.py run on a TPU.
"""
