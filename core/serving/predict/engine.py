"""The predict service's engine: the verified artifact (export.load_artifacts), warmed at every
bucket size, and its predict(request); with max_batch > 1 the rows of concurrent requests are
run together by core.serving.batching.MicroBatcher (a time window: max_batch rows, max_wait)."""

from __future__ import annotations

import importlib
import threading

import numpy as np

from core.serving.artifacts import ArtifactError, InputMismatchError
from core.serving.http import RequestError, ServiceEngine
from core.serving.predict import export


def micro_batcher_class():
    """core.serving.batching.MicroBatcher, or None while that module does not exist."""
    try:
        return importlib.import_module("core.serving.batching").MicroBatcher
    except ImportError:
        return None


class PredictEngine(ServiceEngine):
    """Serves the artifact in ``artifacts_dir``. ``contract``: the manifest's contract, read
    (and hash-checked) at construction, which bounds the request model (None when it cannot
    be read yet: load() then says why). ``max_batch`` rows per model call and ``max_wait_s``
    the batching window: max_batch 1 (or max_wait 0) runs each request alone, under the lock."""

    def __init__(self, artifacts_dir, max_batch: int = 1, max_wait_s: float = 0.0):
        super().__init__()
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if not 0 <= max_wait_s <= 1:
            raise ValueError(f"max_wait must be in [0, 1] s, got {max_wait_s}")
        self.artifacts_dir = artifacts_dir
        self.max_batch, self.max_wait_s = max_batch, max_wait_s
        self.batcher = None
        self.model_calls = 0
        self.rows = 0
        self._count_lock = threading.Lock()
        try:
            self.contract = export.read_manifest(artifacts_dir)["contract"]
        except (ArtifactError, OSError):
            self.contract = None
        if self.contract is not None and max_batch > self.contract["max_batch"]:
            raise ValueError(
                f"max_batch {max_batch} exceeds the artifact's max_batch "
                f"{self.contract['max_batch']} (the largest batch it accepts)"
            )

    def open(self) -> export.Artifacts:
        artifacts = export.load_artifacts(self.artifacts_dir)
        if self.contract is not None and artifacts.contract != self.contract:
            raise ArtifactError(
                f"the artifact changed since the server started: contract {artifacts.contract},"
                f" the request model was built for {self.contract}; restart the server"
            )
        return artifacts

    def warm(self, artifacts: export.Artifacts) -> None:
        """One call at every bucket size (compiles each), then the batcher if batching."""
        for size in artifacts.buckets:
            features = artifacts.contract["features"]
            artifacts.run(np.zeros((size, features), artifacts.input_dtype))
        batcher = micro_batcher_class()
        if batcher is not None and self.max_batch > 1 and self.max_wait_s > 0:
            self.batcher = batcher(
                self._run_probabilities(artifacts), self.max_batch, self.max_wait_s
            )

    def _run_probabilities(self, artifacts):
        def run_batch(x_BF: np.ndarray) -> np.ndarray:
            self._count(x_BF.shape[0])
            return artifacts.run(np.asarray(x_BF, artifacts.input_dtype))[1]

        return run_batch

    def _count(self, rows: int) -> None:
        with self._count_lock:
            self.model_calls += 1
            self.rows += rows

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()

    def readiness(self) -> dict:
        a = self.require_ready()
        c = a.contract
        return {
            "status": "ready",
            "model_version": a.model_version,
            "max_batch": c["max_batch"],
            "features": c["features"],
            "classes": c["classes"],
            "min_value": c["min_value"],
            "max_value": c["max_value"],
            "platforms": a.manifest["exported"]["platforms"],
            "buckets": a.buckets,
            "batching": {
                "max_batch": self.max_batch if self.batcher is not None else 1,
                "max_wait_ms": self.max_wait_s * 1000 if self.batcher is not None else 0.0,
                "batches": self.model_calls,
                "rows": self.rows,
                "queue_depth": self.batcher.queue_depth if self.batcher is not None else 0,
            },
        }

    def predict_array(self, x_BF: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(labels, probabilities) of rows that meet the contract (RequestError otherwise)."""
        a = self.require_ready()
        try:
            x = a.check_inputs(x_BF)
        except InputMismatchError as exc:
            raise RequestError(str(exc)) from None
        if self.batcher is not None and x.shape[0] <= self.max_batch:
            try:
                futures = [self.batcher.submit(row) for row in x]
                probabilities = np.stack([np.asarray(f.result(timeout=60)) for f in futures])
            except RuntimeError as exc:  # BatcherClosed, QueueFull: the service sheds it
                raise RequestError(f"not serving now: {exc}", 503) from None
            # predict_fn's labels are the argmax of these same probabilities
            return probabilities.argmax(axis=-1).astype(np.int32), probabilities
        with self.lock:
            self._count(x.shape[0])
            return a.run(x)

    def predict(self, request) -> dict:
        """The /predict response of a PredictRequest (already validated by the model)."""
        a = self.require_ready()
        x = np.asarray(request.inputs, np.float64).astype(a.input_dtype)  # JSON numbers
        labels, probabilities = self.predict_array(x)
        return {
            "labels": [int(v) for v in labels],
            "probabilities": probabilities.astype(float).tolist(),
            "model_version": a.model_version,
        }
