"""``python -m capstones.byte_transformer COMMAND [key=value ...]`` (see cli.py)."""

import sys

from core import runtime
from core.perf import allocator

# On a host without a TPU, JAX's CPU backend, chosen before JAX starts: libtpu stays quiet.
runtime.use_cpu_without_tpu()

# Before JAX or torch start a thread: malloc keeps freed step buffers instead of unmapping
# them (core/perf/allocator.py; JAX_LAB_MALLOC_DEFAULTS=1 keeps glibc's defaults).
allocator.configure()

from capstones.byte_transformer import cli  # noqa: E402 - after the allocator settings

if __name__ == "__main__":
    sys.exit(cli.main(sys.argv[1:]))
