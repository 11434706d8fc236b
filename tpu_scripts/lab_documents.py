"""The lesson-results modules of core.lab, for the tools here (course-run, compare).

tpu_scripts never imports marimo (the import contract in pyproject.toml). core.lab.results
and core.lab.comparison do not either when imported: core/lab/__init__.py imports marimo only
inside the functions that draw, and these tools call none of them (``lab_documents_test``
checks that loading and comparing bundles leaves marimo out of ``sys.modules``). The static
contract follows the lazy ``from core import lab`` inside core/lab/results.py, so until that
import points at a marimo-free module the two are loaded by name here, in this one place.
"""

from __future__ import annotations

import importlib

results = importlib.import_module("core.lab.results")
comparison = importlib.import_module("core.lab.comparison")
