"""Mosaic's default scoped VMEM limit per TPU generation: the VMEM a Pallas kernel may use
unless it asks for more with ``pltpu.CompilerParams(vmem_limit_bytes=...)``.

Physical VMEM (``pltpu.get_tpu_info_for_chip``: 128 MiB on v5e and v6e, 64 MiB on v5p and
TPU7x per TensorCore) is not what a kernel gets by default: the compiler scopes a smaller
limit, and a kernel whose buffers exceed it fails to compile ("Scoped allocation with size
... and limit ... exceeded scoped vmem limit"). XLA's flag ``xla_tpu_scoped_vmem_limit_kib``
changes the default for a whole program; ``vmem_limit_bytes`` for one kernel.

The figures below were read from that compile error with libtpu 0.0.42.1 (jax 0.10.2),
compiling a Pallas kernel for each topology on a CPU host (``vmem_test.py`` compiles it again
and fails when libtpu's limit moves). Public pages that state them: JAX's Pallas TPU docs note
VMEM is "16MB+" (https://docs.jax.dev/en/latest/pallas/tpu/details.html); the per-generation
defaults are libtpu's and undocumented there, so the compile is the source.
"""

from __future__ import annotations

MIB = 2**20
LIBTPU_VERSION = "0.0.42.1"  # the libtpu these limits were read from
# generation -> (topology compiled for, default scoped VMEM limit in bytes)
DEFAULT_SCOPED_VMEM = {
    "v5e": ("v5e:2x2", 16 * MIB),
    "v6e": ("v6e:2x2", 32 * MIB),
    "v5p": ("v5p:2x2x1", 16 * MIB),
    "TPU7x": ("tpu7x:2x2x1", 32 * MIB),
}


def default_scoped_vmem_bytes(generation: str) -> int:
    """The default scoped VMEM limit of ``generation`` (bytes); ValueError for an unknown one."""
    if generation not in DEFAULT_SCOPED_VMEM:
        raise ValueError(
            f"no scoped VMEM limit recorded for {generation!r}: known {list(DEFAULT_SCOPED_VMEM)}"
        )
    return DEFAULT_SCOPED_VMEM[generation][1]


def fits(need_bytes: int, generation: str, vmem_limit_bytes: int | None = None) -> bool:
    """Whether buffers of ``need_bytes`` fit the kernel's scoped limit: the default, or the
    ``vmem_limit_bytes`` the kernel asks for."""
    limit = default_scoped_vmem_bytes(generation) if vmem_limit_bytes is None else vmem_limit_bytes
    return need_bytes <= limit
