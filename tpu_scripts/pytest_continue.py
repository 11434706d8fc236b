"""A pytest plugin that continues a cut run: ``-p tpu_scripts.pytest_continue`` leaves out
the node ids listed (one a line) in the file ``$JAX_TPU_LAB_PYTEST_DONE``, by exact match.

pytest's own ``--deselect`` matches prefixes, so deselecting ``test_p[1]`` would also drop
``test_p[10]``. ``tpu_scripts.pytest_on_chip --after JUNIT`` writes the file and names it.
"""

from __future__ import annotations

import os
import pathlib

DONE_ENV = "JAX_TPU_LAB_PYTEST_DONE"


def pytest_collection_modifyitems(config, items):
    """Leave out the node ids named in ``$JAX_TPU_LAB_PYTEST_DONE`` (reported as deselected)."""
    done_file = os.environ.get(DONE_ENV)
    if not done_file:
        return
    done = set(pathlib.Path(done_file).read_text(encoding="utf-8").splitlines())
    left_out = [item for item in items if item.nodeid in done]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item.nodeid not in done]
