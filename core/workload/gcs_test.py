"""core.workload.gcs: Orbax writes a checkpoint to gs:// on the local emulator, reads it back
bitwise; a step without its commit marker or with a changed object is refused."""

from __future__ import annotations

import threading

import jax.numpy as jnp
import numpy as np
import pytest

from core.workload import gcs


def _state():
    return {
        "params": {"w": jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4) / 7},
        "step": jnp.asarray(5, jnp.int32),
        "key": jnp.asarray([1, 2**32 - 1], jnp.uint32),
    }


def test_round_trip_through_orbax_gcs_path_is_bitwise():
    state = _state()
    result = gcs.round_trip(state, step=5)
    assert result.url == "gs://lab-checkpoints/run/checkpoints"
    assert result.emulator_url.startswith("http://127.0.0.1:")
    assert result.committed == [5]
    assert result.bitwise_equal and result.digest_saved == result.digest_restored
    names = {row["name"] for row in result.manifest["objects"]}
    assert gcs.COMMIT_MARKER in names
    assert any(name.startswith("state/") for name in names)  # TensorStore wrote the arrays
    # without the commit marker the step is a partial save: Orbax no longer lists it
    assert not result.partial_listed
    assert result.partial_problems == ["step 5: no commit_success.txt (a partial save)"]


def test_changed_object_is_refused_before_loading():
    state = _state()
    url = "gs://lab-checkpoints/run/checkpoints"
    with gcs.Emulator() as emulator, gcs.pointed_at(emulator):
        gcs.save(emulator, url, 2, state, {"step": 2})
        restored, meta = gcs.restore(emulator, url, 2, state)
        assert meta == {"step": 2}
        np.testing.assert_array_equal(restored["params"]["w"], state["params"]["w"])
        blob = (
            gcs.client(emulator).bucket("lab-checkpoints").blob("run/checkpoints/2/meta/metadata")
        )
        names = {row["name"] for row in gcs.objects(emulator, url + "/2")}
        target = (
            "meta/metadata"
            if "meta/metadata" in names
            else sorted(n for n in names if n.startswith("meta/"))[0]
        )
        blob = gcs.client(emulator).bucket("lab-checkpoints").blob(f"run/checkpoints/2/{target}")
        blob.upload_from_string(b'{"step": 3}')
        with pytest.raises(ValueError, match="sha256 mismatch"):
            gcs.restore(emulator, url, 2, state)


def test_emulator_stops_by_itself_and_rejects_bad_urls():
    emulator = gcs.Emulator(lifetime_s=0.2).start()
    assert emulator.running
    stopped = threading.Event()
    timer = threading.Timer(5.0, stopped.set)
    timer.start()
    while emulator.running and not stopped.is_set():
        stopped.wait(0.05)
    timer.cancel()
    assert not emulator.running
    with pytest.raises(ValueError, match="gs://"):
        gcs.split("/tmp/x")
    with pytest.raises(ValueError, match="BUCKET/PATH"):
        gcs.split("gs://bucket")
    with pytest.raises(ValueError, match="lifetime_s"):
        gcs.Emulator(lifetime_s=0)
