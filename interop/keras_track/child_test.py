"""A Keras child's main (``child.serve``) runs its handler without the imports no handler uses."""

from __future__ import annotations

import json
import subprocess
import sys

from interop.keras_track import child

# The child reports which of Keras's optional imports it holds when its handler runs.
_PROBE = """
import json, sys
from interop.keras_track import child
def handler(request):
    return {"loaded": sorted(m for m in ("sklearn", "pandas") if sys.modules.get(m) is not None)}
sys.exit(child.serve(sys.argv[1:], handler))
"""


def test_serve_blocks_keras_sklearn_wrappers_imports(tmp_path):
    request = tmp_path / "probe.request.json"
    request.write_text(json.dumps({"backend": "jax"}))
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(request)],
        env=child.child_env("jax"),
        capture_output=True,
        text=True,
        timeout=child.TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "probe.result.json").read_text())
    assert result["backend"] == "jax" and result["keras_version"]
    assert result["loaded"] == []  # Keras imports both when nothing blocks them
