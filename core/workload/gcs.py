"""Checkpoints on a ``gs://`` path, served by a local Cloud Storage emulator on loopback.

``Emulator`` runs ``gcp-storage-emulator`` (PyPI) in this process: an HTTP server on
127.0.0.1, port 0 (the OS picks a free one), in-memory objects, one bucket, and a bounded
lifetime (a timer stops it after ``lifetime_s`` even if nobody does). Inside
``pointed_at(emulator)`` the Cloud Storage clients talk to it instead of
storage.googleapis.com, and the checkpoint is written by **Orbax's own GCS path**, the code
that writes to real Cloud Storage on a TPU VM:

- Orbax -> ``etils.epath`` -> ``gcsfs`` for directories and small files (``EPATH_USE_TF=false``
  picks gcsfs over tf.io.gfile; gcsfs honours ``STORAGE_EMULATOR_HOST``);
- Orbax -> TensorStore's ``gcs`` kvstore for the arrays (TensorStore 0.1.86 honours
  ``TENSORSTORE_GCS_HTTP_URL``; ``GOOGLE_AUTH_TOKEN_FOR_TESTING`` gives it a bearer token
  instead of looking for Google credentials or the GCE metadata server).

So no fallback writer is needed. Object stores have no atomic directory rename, so on
``gs://`` Orbax commits a step by writing ``commit_success.txt`` into it last; a step without
it is a partial save and Orbax does not list it (``committed_steps``). After the commit a
``manifest.json`` object records the size and sha256 of every object of the step
(read back through the JSON API with google-cloud-storage, an independent client); a restore
verifies the manifest first (``verify``) and nothing is loaded from a step that fails it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import http.server
import json
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

DEFAULT_BUCKET = "lab-checkpoints"
# Long enough for a save and a restore of a small state on a loaded 2-core machine; the
# emulator is a test double: it must not outlive the lesson that started it.
DEFAULT_LIFETIME_S = 120.0
COMMIT_MARKER = "commit_success.txt"  # Orbax's commit file on object stores
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "jax-tpu-lab gcs checkpoint manifest"
EMULATOR_TOKEN = "emulator"  # a bearer token the emulator ignores; never a real credential


class _QuietServer(http.server.HTTPServer):
    """The emulator's HTTP server; a client hanging up early is recorded, not printed."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.dropped: list[str] = []

    def handle_error(self, request, client_address):
        import sys

        self.dropped.append(repr(sys.exc_info()[1]))


class Emulator:
    """gcp-storage-emulator on 127.0.0.1:<free port> with one bucket, for ``lifetime_s``."""

    def __init__(self, bucket: str = DEFAULT_BUCKET, lifetime_s: float = DEFAULT_LIFETIME_S):
        if not lifetime_s > 0:
            raise ValueError(f"lifetime_s must be > 0, got {lifetime_s}")
        self.bucket = bucket
        self.lifetime_s = lifetime_s
        self._server: _QuietServer | None = None
        self._threads: list[threading.Thread | threading.Timer] = []

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the emulator is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> Emulator:
        from gcp_storage_emulator.handlers import buckets
        from gcp_storage_emulator.server import RequestHandler
        from gcp_storage_emulator.storage import Storage

        # It logs every existence probe that misses (Orbax and TensorStore make many) as ERROR.
        logging.getLogger("gcp_storage_emulator").setLevel(logging.CRITICAL)
        storage = Storage(use_memory_fs=True)
        buckets.create_bucket(self.bucket, storage)
        self._server = _QuietServer(("127.0.0.1", 0), functools.partial(RequestHandler, storage))
        serve = threading.Thread(target=self._server.serve_forever, daemon=True)
        timer = threading.Timer(self.lifetime_s, self.stop)
        timer.daemon = True
        self._threads = [serve, timer]
        serve.start()
        timer.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            if isinstance(thread, threading.Timer):
                thread.cancel()

    def env(self) -> dict[str, str]:
        """The variables that point Orbax, TensorStore, gcsfs and google-cloud-storage here."""
        return {
            "STORAGE_EMULATOR_HOST": self.url,
            "TENSORSTORE_GCS_HTTP_URL": self.url,
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": EMULATOR_TOKEN,
            "EPATH_USE_TF": "false",
            "GOOGLE_CLOUD_PROJECT": "jax-tpu-lab-emulator",
        }

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def pointed_at(emulator: Emulator) -> Iterator[Emulator]:
    """Point this process's Cloud Storage clients at ``emulator``; restored on exit."""
    saved = {key: os.environ.get(key) for key in emulator.env()}
    os.environ.update(emulator.env())
    logging.getLogger("gcsfs").setLevel(logging.ERROR)  # "could not determine bucket type"
    try:
        _reset_gcsfs()
        yield emulator
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _reset_gcsfs()


def _reset_gcsfs() -> None:
    """gcsfs file systems cache their endpoint and their listings (etils.epath caches the
    file system too): a new emulator, or objects changed by another client, need a new one."""
    import gcsfs
    from etils.epath import backend, gpath

    # etils reads EPATH_USE_TF once per process (functools.cache): read it again now.
    gpath._is_tf_installed.cache_clear()
    backend.fsspec_backend._get_filesystem.cache_clear()
    gcsfs.GCSFileSystem.clear_instance_cache()


def split(url: str) -> tuple[str, str]:
    """``gs://bucket/a/b`` -> ("bucket", "a/b"); anything else is a ValueError."""
    if not url.startswith("gs://"):
        raise ValueError(f"{url!r} is not a gs:// URL")
    bucket, _, prefix = url[len("gs://") :].partition("/")
    if not bucket or not prefix.strip("/"):
        raise ValueError(f"{url!r}: expected gs://BUCKET/PATH")
    return bucket, prefix.strip("/")


def client(emulator: Emulator):
    """A google-cloud-storage client on the emulator's JSON API (anonymous)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project=emulator.env()["GOOGLE_CLOUD_PROJECT"],
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": emulator.url},
    )


def objects(emulator: Emulator, url: str) -> list[dict]:
    """[{name, bytes, sha256}] of every object under ``url``, read back in full."""
    bucket, prefix = split(url)
    rows = []
    for blob in client(emulator).list_blobs(bucket, prefix=prefix + "/"):
        content = blob.download_as_bytes()
        rows.append(
            {
                "name": blob.name[len(prefix) + 1 :],
                "bytes": len(content),
                "sha256": hashlib.sha256(content).hexdigest(),
            }
        )
    return sorted(rows, key=lambda row: row["name"])


def _manager(url: str):
    import orbax.checkpoint as ocp
    from etils import epath

    _reset_gcsfs()  # list what is in the bucket now, not what this process saw before

    return ocp.CheckpointManager(
        epath.Path(url),
        options=ocp.CheckpointManagerOptions(enable_async_checkpointing=False, create=True),
        item_handlers={
            "state": ocp.StandardCheckpointHandler(),
            "meta": ocp.JsonCheckpointHandler(),
        },
    )


def save(emulator: Emulator, url: str, step: int, state: Any, meta: dict) -> dict:
    """Save ``state`` at ``url/<step>`` with Orbax, then write the step's manifest object.

    Returns the manifest. Call inside ``pointed_at(emulator)``.
    """
    import orbax.checkpoint as ocp

    split(url)
    json.dumps(meta)  # a TypeError here, before anything is written
    manager = _manager(url)
    try:
        manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)
            ),
        )
        manager.wait_until_finished()
    finally:
        manager.close()
    step_url = f"{url.rstrip('/')}/{step}"
    files = [row for row in objects(emulator, step_url) if row["name"] != MANIFEST]
    if COMMIT_MARKER not in {row["name"] for row in files}:
        raise RuntimeError(f"Orbax returned without {COMMIT_MARKER} in {step_url}")
    manifest = {"format": MANIFEST_FORMAT, "step": int(step), "objects": files}
    bucket, prefix = split(step_url)
    client(emulator).bucket(bucket).blob(f"{prefix}/{MANIFEST}").upload_from_string(
        json.dumps(manifest, indent=1, sort_keys=True), content_type="application/json"
    )
    return manifest


def committed_steps(url: str) -> list[int]:
    """The steps Orbax considers committed (their commit marker is there)."""
    manager = _manager(url)
    try:
        return sorted(manager.all_steps())
    finally:
        manager.close()


def verify(emulator: Emulator, url: str, step: int) -> list[str]:
    """Every way ``url/<step>`` disagrees with its manifest (empty: good)."""
    step_url = f"{url.rstrip('/')}/{step}"
    present = {row["name"]: row for row in objects(emulator, step_url)}
    if MANIFEST not in present:
        return [f"step {step}: no {MANIFEST} (never committed and verified)"]
    bucket, prefix = split(step_url)
    manifest = json.loads(
        client(emulator).bucket(bucket).blob(f"{prefix}/{MANIFEST}").download_as_bytes()
    )
    problems = []
    listed = {row["name"]: row for row in manifest.get("objects", [])}
    if COMMIT_MARKER not in present:
        problems.append(f"step {step}: no {COMMIT_MARKER} (a partial save)")
    for name, want in listed.items():
        have = present.get(name)
        if have is None:
            if name != COMMIT_MARKER:
                problems.append(f"object {name} is missing")
        elif have["sha256"] != want["sha256"]:
            problems.append(f"object {name} changed since the save (sha256 mismatch)")
    problems.extend(
        f"object {name} is not in the manifest"
        for name in present
        if name not in listed and name != MANIFEST
    )
    return problems


def restore(emulator: Emulator, url: str, step: int, like: Any) -> tuple[Any, dict]:
    """(state, meta) of ``url/<step>``, after ``verify``; restores into ``like``'s layout."""
    import jax
    import orbax.checkpoint as ocp

    if problems := verify(emulator, url, step):
        raise ValueError(f"{url}/{step} rejected: " + "; ".join(problems))
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
    manager = _manager(url)
    try:
        restored = manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()
            ),
        )
    finally:
        manager.close()
    return restored["state"], dict(restored["meta"])


def drop_commit_marker(emulator: Emulator, url: str, step: int) -> None:
    """Delete a step's commit marker: what a process killed mid-save leaves behind."""
    bucket, prefix = split(f"{url.rstrip('/')}/{step}")
    client(emulator).bucket(bucket).blob(f"{prefix}/{COMMIT_MARKER}").delete()


@dataclasses.dataclass
class RoundTrip:
    url: str
    emulator_url: str
    manifest: dict
    committed: list[int]
    bitwise_equal: bool
    digest_saved: str
    digest_restored: str
    partial_listed: bool  # after dropping the marker, does Orbax still list the step?
    partial_problems: list[str]


def round_trip(state: Any, step: int = 1, bucket: str = DEFAULT_BUCKET) -> RoundTrip:
    """Start an emulator, save ``state`` to gs://BUCKET/run/checkpoints/<step>, read it back,
    compare bitwise, then remove the commit marker and show the step is no longer usable."""
    from core.state import checkpoint

    url = f"gs://{bucket}/run/checkpoints"
    with Emulator(bucket) as emulator, pointed_at(emulator):
        manifest = save(emulator, url, step, state, {"step": step})
        committed = committed_steps(url)
        restored, _ = restore(emulator, url, step, state)
        saved_digest = checkpoint.sha256_leaves(state)
        restored_digest = checkpoint.sha256_leaves(restored)
        equal = saved_digest == restored_digest and all(
            _bytes(a) == _bytes(b) for a, b in zip(_leaves(state), _leaves(restored), strict=True)
        )
        drop_commit_marker(emulator, url, step)
        partial_listed = step in committed_steps(url)
        partial_problems = verify(emulator, url, step)
        return RoundTrip(
            url,
            emulator.url,
            manifest,
            committed,
            equal,
            saved_digest,
            restored_digest,
            partial_listed,
            partial_problems,
        )


def _leaves(tree) -> list:
    import jax

    return jax.tree.leaves(tree)


def _bytes(leaf) -> tuple:
    import numpy as np

    array = np.asarray(leaf)
    return str(array.dtype), array.shape, np.ascontiguousarray(array).tobytes()
