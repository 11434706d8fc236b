"""``python -m capstones.pallas_kernel COMMAND [key=value ...]`` (see cli.py)."""

import sys

from core import runtime

# On a host without a TPU, JAX's CPU backend, chosen before JAX starts: libtpu stays quiet.
runtime.use_cpu_without_tpu()

from capstones.pallas_kernel import cli  # noqa: E402 - after the platform is chosen

if __name__ == "__main__":
    sys.exit(cli.main(sys.argv[1:]))
