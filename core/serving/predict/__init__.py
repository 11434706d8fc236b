"""The predict service: a batched digits classifier served from a jax.export artifact with a
SYMBOLIC batch dimension, verified (sha256 + schema) before it is loaded, on the course's
service kit (core.serving.http).

    python -m core.serving.predict export --out DIR [--seed 0 --steps 300 --max-batch 64
                                                     --model-version V --platforms cpu,tpu]
    python -m core.serving.predict serve --artifacts DIR [--host 127.0.0.1 --port 8100
                                         --max-batch 32 --max-wait-ms 2 --allow-remote
                                         --max-seconds 0]
    python -m core.serving.predict predict --artifacts DIR --inputs X.npy --out Y.npz

export trains a 64-64-10 MLP (core.nn.mlp) on the digits (core.data.digits) and writes DIR
(export.py): weights.npz, predict.jax_exported and manifest.json (manifest.ArtifactManifest).
serve verifies and warms it in a background thread (one compile per bucket size: a batch is
padded to the next power of two, up to the artifact's max_batch) while /healthz already
answers; with --max-batch > 1 and --max-wait-ms > 0, the rows of concurrent requests are run
together (core.serving.batching.MicroBatcher). predict runs a .npy file through the artifact in
this process (the fresh-process reload check). A bad flag: a usage message, exit status 2.

modules: manifest.py (the manifest's schema), models.py (the request/response models),
export.py (train, export, write, verify + load, the contract check), engine.py (PredictEngine:
open verifies + deserializes, warm runs every bucket, predict), app.py (the routes, make_server,
``start``: a server on a free loopback port in a thread, for tests and lessons).

Endpoints (a POST body is a JSON object sent with ``Content-Type: application/json``; every
response is JSON; an error is {"error": message} with status 400 (an invalid request, a body
over 64 KiB), 404 (no such path), 405 (wrong method), 415 (a body not declared JSON) or 503
(the artifact not loaded yet, or refused)):

    GET  /healthz   200 {"status": "alive"} while the process runs
    GET  /readyz    200 {"status": "ready", "model_version", "max_batch", "features",
                    "classes", "min_value", "max_value", "platforms", "buckets",
                    "batching": {"max_batch", "max_wait_ms", "batches", "rows"}} once the
                    artifact is verified, loaded and warmed; else 503 {"error"}
    POST /predict   {"inputs": [[64 numbers in [0, 16]], ...]} (1 to max_batch rows: an 8x8
                    digit's pixel intensities, row by row; JSON numbers only, no NaN)
                 -> {"labels": [int 0..9], "probabilities": [[10 floats]], "model_version"}

Every request is validated by a strict pydantic model whose bounds come from the manifest's
contract, then by the loaded artifact's contract check (export.Artifacts.check_inputs), before
it reaches the model; a client's X-Request-ID (1 to 64 of A-Z a-z 0-9 . _ -) is echoed, else a
fresh id; one access-log line per request ends with ``id=<it>``. The server binds loopback only
unless --allow-remote. The OpenAPI document is /openapi.json (interactive: /docs).
"""
