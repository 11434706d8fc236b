"""`make lab`'s server: `marimo run` over the course's apps, each lesson's kernel warm.

    python -m core.lab.serve apps/ --host 127.0.0.1 --port 2718 [more `marimo run` flags]

The arguments are `marimo run`'s. Before serving, one warm process imports the stack the
lessons use (core/lab/warm_kernels.py), and every lesson opened in the gallery forks its
kernel from it instead of importing everything again: a lesson's first cell runs seconds
sooner. JAX_TPU_LAB_WARM_KERNELS=0 serves exactly as `marimo run` does.
"""

from __future__ import annotations

import sys

from core.lab import warm_kernels


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    server = warm_kernels.start() if warm_kernels.enabled() else None
    if server is not None:
        warm_kernels.install(server)
    from marimo._cli.cli import main as marimo_main

    sys.argv = ["marimo", "run", *argv]
    try:
        return marimo_main()
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
