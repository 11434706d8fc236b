"""The MLOps lesson's Kubeflow pipeline: preprocess -> train -> evaluate -> publish.

This file runs ONLY inside the kfp environment (.venv-kfp, `make kfp-env`): kfp 2.17 pins
protobuf<7 and requests==2.33.0, which conflict with the course's .venv (tensorflow-cpu,
locust), so the lesson (core/lessons/operations/mlops.py) starts it as a subprocess and
never imports it. It imports nothing of `core` and its components use the standard library
only (each kfp component's body runs in a fresh interpreter and must be self-contained).

    .venv-kfp/bin/python core/lessons/operations/mlops_pipeline.py \
        --raw RAW.json --out DIR [--seed 0] [--test-fraction 0.25] [--min-accuracy 0.8]

writes DIR/pipeline.yaml (the compiled IR YAML that Vertex AI Pipelines runs), runs it with
kfp.local's SubprocessRunner (use_venv=False: this interpreter's packages) under
DIR/pipeline_root, and writes DIR/run.json: the artifacts' paths and the outputs.
"""

import argparse
import json
import os
import pathlib
import sys
import tempfile
from typing import NamedTuple

from kfp import compiler, dsl, local
from kfp.dsl import Dataset, Input, Metrics, Model, Output

PIPELINE_NAME = "digits-preprocess-train-evaluate-publish"
BASE_IMAGE = "python:3.11"  # the image Vertex AI runs each component in (stdlib only)


@dsl.component(base_image=BASE_IMAGE)
def preprocess(
    raw_path: str, seed: int, test_fraction: float, train: Output[Dataset], test: Output[Dataset]
):
    """Scale the pixels to [0, 1] and split the rows (a seeded shuffle) into train and test."""
    import json
    import random

    raw = json.loads(open(raw_path).read())
    rows = [
        ([p / 16.0 for p in x], int(y)) for x, y in zip(raw["features"], raw["labels"], strict=True)
    ]
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    cut = int(round(len(rows) * test_fraction))
    for artifact, part in ((test, order[:cut]), (train, order[cut:])):
        doc = {"features": [rows[i][0] for i in part], "labels": [rows[i][1] for i in part]}
        doc["rows"] = [raw["ids"][i] for i in part]
        with open(artifact.path, "w") as f:
            json.dump(doc, f)
        artifact.metadata["rows"] = len(part)


@dsl.component(base_image=BASE_IMAGE)
def train(train: Input[Dataset], model: Output[Model]):
    """A nearest-centroid classifier: the mean image of every class."""
    import json

    data = json.loads(open(train.path).read())
    sums, counts = {}, {}
    for x, y in zip(data["features"], data["labels"], strict=True):
        acc = sums.setdefault(y, [0.0] * len(x))
        for i, v in enumerate(x):
            acc[i] += v
        counts[y] = counts.get(y, 0) + 1
    classes = sorted(sums)
    centroids = [[v / counts[c] for v in sums[c]] for c in classes]
    with open(model.path, "w") as f:
        json.dump({"kind": "nearest_centroid", "classes": classes, "centroids": centroids}, f)
    model.metadata["classes"] = len(classes)
    model.metadata["train_rows"] = len(data["labels"])


@dsl.component(base_image=BASE_IMAGE)
def evaluate(model: Input[Model], test: Input[Dataset], metrics: Output[Metrics]) -> float:
    """Accuracy of the model on the test rows (logged as a kfp Metrics artifact)."""
    import json

    m = json.loads(open(model.path).read())
    data = json.loads(open(test.path).read())
    right = 0
    for x, y in zip(data["features"], data["labels"], strict=True):
        dists = [sum((a - b) ** 2 for a, b in zip(x, c, strict=True)) for c in m["centroids"]]
        right += m["classes"][dists.index(min(dists))] == y
    accuracy = right / len(data["labels"])
    metrics.log_metric("accuracy", accuracy)
    metrics.log_metric("test_rows", len(data["labels"]))
    return accuracy


@dsl.component(base_image=BASE_IMAGE)
def publish(model: Input[Model], accuracy: float, min_accuracy: float, published: Output[Model]):
    """The gate: publish (copy, with its accuracy) only a model at or above min_accuracy."""
    import json

    if accuracy < min_accuracy:
        raise RuntimeError(f"accuracy {accuracy:.4f} is below the gate {min_accuracy:.4f}")
    doc = json.loads(open(model.path).read())
    doc["accuracy"] = accuracy
    with open(published.path, "w") as f:
        json.dump(doc, f)
    published.metadata["accuracy"] = accuracy


class Outputs(NamedTuple):
    train_data: Dataset
    test_data: Dataset
    model: Model
    metrics: Metrics
    published: Model
    accuracy: float


@dsl.pipeline(name=PIPELINE_NAME, description="One commit: preprocess, train, evaluate, publish.")
def digits_pipeline(
    raw_path: str, seed: int = 0, test_fraction: float = 0.25, min_accuracy: float = 0.8
) -> Outputs:
    pre = preprocess(raw_path=raw_path, seed=seed, test_fraction=test_fraction)
    fit = train(train=pre.outputs["train"])
    ev = evaluate(model=fit.outputs["model"], test=pre.outputs["test"])
    pub = publish(model=fit.outputs["model"], accuracy=ev.outputs["Output"],
                  min_accuracy=min_accuracy)  # fmt: skip
    return Outputs(
        train_data=pre.outputs["train"],
        test_data=pre.outputs["test"],
        model=fit.outputs["model"],
        metrics=ev.outputs["metrics"],
        published=pub.outputs["published"],
        accuracy=ev.outputs["Output"],
    )


def _artifact(a) -> dict:
    return {"path": a.path, "uri": a.uri, "metadata": dict(a.metadata)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", required=True, help="the raw rows (JSON: ids, features, labels)")
    parser.add_argument("--out", required=True, help="directory for the YAML, root and run.json")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-fraction", type=float, default=0.25)
    parser.add_argument("--min-accuracy", type=float, default=0.8)
    parser.add_argument("--compile-only", action="store_true")
    a = parser.parse_args(argv)
    if not 0 < a.test_fraction < 1 or not 0 <= a.min_accuracy <= 1:
        parser.error("--test-fraction must be in (0, 1) and --min-accuracy in [0, 1]")
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(digits_pipeline, str(out / "pipeline.yaml"))
    if a.compile_only:
        return 0
    local.init(local.SubprocessRunner(use_venv=False), pipeline_root=str(out / "pipeline_root"))
    args = {"seed": a.seed, "test_fraction": a.test_fraction, "min_accuracy": a.min_accuracy}
    task = digits_pipeline(raw_path=str(pathlib.Path(a.raw).resolve()), **args)
    o = task.outputs
    result = {
        "pipeline": PIPELINE_NAME,
        "kfp_version": __import__("kfp").__version__,
        "python": sys.executable,
        "arguments": args,
        "accuracy": o["accuracy"],
        "artifacts": {k: _artifact(o[k]) for k in Outputs._fields if k != "accuracy"},
    }
    fd, tmp = tempfile.mkstemp(dir=out, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, out / "run.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
