"""MLOps: data contracts, CI gates and monitoring (lesson code of apps/mlops.py).

- the ingestion contract of the digits rows (pandera: schema, ranges, duplicates) and the
  violations it refuses, each named by row id and rule;
- a promotion gate: a candidate and the champion evaluated on the same held-out rows;
- drift on incoming data: the two-sample Kolmogorov-Smirnov statistic and the population
  stability index per pixel;
- the Kubeflow pipeline (mlops_pipeline.py) run in its own environment (.venv-kfp) through a
  subprocess, its run document and artifacts validated, its compiled YAML read back as a DAG;
- the Cloud Build config that would run the tests and submit that pipeline to Vertex AI
  Pipelines, checked against the build config schema.
"""

import json
import os
import pathlib
import re
import subprocess
import typing

import numpy as np
import pandas as pd
import pydantic
import yaml

from core import documents
from core.data import digits

if typing.TYPE_CHECKING:  # pandera is imported where the contract is used: a host may lack it
    import pandera.pandas as pa

PIXELS = digits.IMAGE_SIZE * digits.IMAGE_SIZE
PIXEL_COLUMNS = [f"p{i}" for i in range(PIXELS)]
MAX_PIXEL = 16  # the digits' pixels are counts of 0..16 (sklearn's digits.csv.gz)
VIOLATIONS = ("pixel out of range", "unknown label", "duplicate id", "duplicate image", "missing")
ROOT = pathlib.Path(__file__).resolve().parents[3]
KFP_PYTHON = ROOT / ".venv-kfp" / "bin" / "python"
PIPELINE_SCRIPT = pathlib.Path(__file__).with_name("mlops_pipeline.py")
KFP_COMMAND = "make kfp-env"
PIPELINE_TIMEOUT_S = 300  # a bound on a hung pipeline run (a real run takes seconds)


# --- the data contract -------------------------------------------------------------------


def raw_rows(rows: int) -> pd.DataFrame:
    """The first ``rows`` digits as ingestion sees them: id, p0..p63 (ints 0..16), label."""
    images, labels = digits.load_all()
    if not 1 <= rows <= len(labels):
        raise ValueError(f"rows must be in [1, {len(labels)}], got {rows}")
    pixels = np.rint(images[:rows].reshape(rows, PIXELS) * MAX_PIXEL).astype(np.int64)
    frame = pd.DataFrame(pixels, columns=PIXEL_COLUMNS)
    frame.insert(0, "id", np.arange(rows, dtype=np.int64))
    frame["label"] = labels[:rows].astype(np.int64)
    return frame


def contract() -> "pa.DataFrameSchema":
    """The ingestion contract: exact columns and dtypes, no nulls, pixels in [0, 16], labels
    0..9, ids unique, no image twice (a duplicate image leaks between train and test)."""
    import pandera.pandas as pa

    pixel = pa.Column(int, pa.Check.in_range(0, MAX_PIXEL), nullable=False)
    return pa.DataFrameSchema(
        {
            "id": pa.Column(int, pa.Check.ge(0), unique=True, nullable=False),
            **{name: pixel for name in PIXEL_COLUMNS},
            "label": pa.Column(int, pa.Check.isin(list(range(digits.CLASSES))), nullable=False),
        },
        unique=PIXEL_COLUMNS,
        report_duplicates="exclude_first",
        strict=True,
        ordered=True,
        name="digits ingestion contract",
    )


def plant(frame: pd.DataFrame, kinds, seed: int) -> tuple[pd.DataFrame, list[dict]]:
    """A copy of ``frame`` with one planted violation of each kind: (frame, planted rows)."""
    unknown = sorted(set(kinds) - set(VIOLATIONS))
    if unknown:
        raise ValueError(f"unknown violations {unknown}; choose from {list(VIOLATIONS)}")
    kinds = list(dict.fromkeys(kinds))
    if len(frame) < 2 * len(kinds) + 1:
        raise ValueError(f"{len(frame)} rows cannot hold {len(kinds)} planted violations")
    out = frame.copy()
    rng = np.random.default_rng(seed)
    where = rng.choice(np.arange(1, len(frame)), size=len(kinds), replace=False)
    planted = []
    for kind, i in zip(kinds, where, strict=True):
        row_id = int(out.at[i, "id"])
        if kind == "pixel out of range":
            col = PIXEL_COLUMNS[int(rng.integers(PIXELS))]
            out.at[i, col] = MAX_PIXEL + 1 + int(rng.integers(100))
        elif kind == "unknown label":
            out.at[i, "label"] = digits.CLASSES + int(rng.integers(5))
        elif kind == "duplicate id":
            other = int(out.at[i - 1, "id"]) if i > 0 else int(out.at[i + 1, "id"])
            out.at[i, "id"] = other
            row_id = other
        elif kind == "duplicate image":
            out.loc[i, PIXEL_COLUMNS] = out.loc[0, PIXEL_COLUMNS].to_numpy()
        elif kind == "missing":
            col = PIXEL_COLUMNS[int(rng.integers(PIXELS))]
            out[col] = out[col].astype("float64")
            out.at[i, col] = np.nan
        planted.append({"violation": kind, "row": int(i), "id": row_id})
    return out, planted


def check_contract(frame: pd.DataFrame) -> list[dict]:
    """Every breach of the contract as {row, id, column, rule, value} (empty: accepted)."""
    import pandera.pandas as pa

    try:
        contract().validate(frame, lazy=True)
    except pa.errors.SchemaErrors as exc:
        cases = exc.failure_cases
    else:
        return []
    found = []
    for case in cases.to_dict("records"):
        index = case["index"]
        row = None if index is None or pd.isna(index) else int(index)
        found.append(
            {
                "row": row,
                "id": None if row is None else _plain(frame["id"].iloc[row]),
                "column": case["column"],
                "rule": str(case["check"]),
                "value": _plain(case["failure_case"]),
            }
        )
    return found


def by_row(found: list[dict]) -> list[dict]:
    """The breaches grouped per (row, rule): one line each, its columns named."""
    groups: dict[tuple, dict] = {}
    for f in found:
        rule = re.sub(r"\(.*", "", f["rule"]) if not f["rule"].startswith("dtype") else "dtype"
        g = groups.setdefault((f["row"], rule), {"row": f["row"], "id": f["id"], "rule": rule,
                                                   "columns": [], "values": []})  # fmt: skip
        g["columns"].append(f["column"])
        g["values"].append(f["value"])
    out = []
    for g in groups.values():
        cols = g["columns"]
        shown = ", ".join(cols) if len(cols) <= 3 else f"{cols[0]} .. {cols[-1]} ({len(cols)})"
        value = g["values"][0] if len(cols) == 1 else "-"
        out.append({"row": g["row"], "id": g["id"], "rule": g["rule"], "columns": shown,
                    "value": value})  # fmt: skip
    return sorted(out, key=lambda r: (r["row"] is None, r["row"] or 0, r["rule"]))


def _plain(value):
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def violation_rule(kind: str) -> str:
    """The pandera rule name each planted violation must be refused with."""
    return {
        "pixel out of range": "in_range",
        "unknown label": "isin",
        "duplicate id": "field_uniqueness",
        "duplicate image": "multiple_fields_uniqueness",
        "missing": "not_nullable",
    }[kind]


# --- the promotion gate --------------------------------------------------------------------


def train_softmax(x_NF, y_N, steps: int, learning_rate: float, seed: int) -> np.ndarray:
    """Softmax regression by full-batch gradient descent (NumPy float64): weights (F+1, C)."""
    x = np.hstack([x_NF, np.ones((len(x_NF), 1))])
    w = np.random.default_rng(seed).normal(0.0, 0.01, (x.shape[1], digits.CLASSES))
    onehot = np.eye(digits.CLASSES)[y_N]
    for _ in range(steps):
        z = x @ w
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        w -= learning_rate * x.T @ (p - onehot) / len(x)
    return w


def predict(w, x_NF) -> np.ndarray:
    return np.argmax(np.hstack([x_NF, np.ones((len(x_NF), 1))]) @ w, axis=1)


def champion_and_candidate(label_noise: float, steps: int, seed: int) -> dict:
    """The champion trained on clean labels, the candidate on labels of which ``label_noise``
    were replaced by random ones (a broken labelling job), both evaluated on the same
    held-out rows (never seen in training)."""
    if not 0 <= label_noise <= 1:
        raise ValueError(f"label_noise must be in [0, 1], got {label_noise}")
    split = digits.load(test_fraction=0.25, seed=seed)
    x_train = split.x_train.reshape(len(split.y_train), -1).astype(np.float64)
    x_test = split.x_test.reshape(len(split.y_test), -1).astype(np.float64)
    rng = np.random.default_rng(seed + 1)
    noisy = split.y_train.copy()
    flip = rng.random(len(noisy)) < label_noise
    noisy[flip] = rng.integers(0, digits.CLASSES, int(flip.sum()))
    champion = train_softmax(x_train, split.y_train, steps, 0.5, seed)
    candidate = train_softmax(x_train, noisy, steps, 0.5, seed)
    return {
        "x_test": x_test,
        "y_test": split.y_test,
        "champion": predict(champion, x_test),
        "candidate": predict(candidate, x_test),
        "flipped": int(flip.sum()),
    }


def gate(champion_accuracy: float, candidate_accuracy: float, max_regression: float) -> dict:
    """Promote only if the candidate's accuracy is at most ``max_regression`` below the
    champion's on the same held-out rows."""
    regression = champion_accuracy - candidate_accuracy
    return {"regression": regression, "promote": bool(regression <= max_regression)}


# --- drift ---------------------------------------------------------------------------------


def incoming(rows: int, shift: float, seed: int) -> np.ndarray:
    """Incoming pixels (rows, 64) in [0, 1]: held-out digits brightened by ``shift`` and
    clipped (a changed scanner), the production batch the monitor compares."""
    images, _ = digits.load_all()
    x = images.reshape(len(images), -1).astype(np.float64)
    pick = np.random.default_rng(seed).choice(len(x), size=rows, replace=False)
    return np.clip(x[pick] + shift, 0.0, 1.0)


def ks_statistic(a, b) -> float:
    """sup |F_a - F_b| over the pooled sample (the empirical CDFs: right-continuous)."""
    a, b = np.sort(np.asarray(a, np.float64)), np.sort(np.asarray(b, np.float64))
    grid = np.concatenate([a, b])
    fa = np.searchsorted(a, grid, side="right") / a.size
    fb = np.searchsorted(b, grid, side="right") / b.size
    return float(np.max(np.abs(fa - fb)))


PSI_EPS = 1e-4  # floor of a bin's share: an empty bin would make ln(p/q) infinite


def psi(reference, current, bins: int) -> float:
    """Population stability index over the reference's quantile bins, right-closed:
    (-inf, e0], (e0, e1], ..., (e_last-1, inf) for the distinct quantile edges e0 < e1 < ...
    (the maximum dropped), so the minimum gets a bin of its own: a point mass there (most
    pixels are 0 in most digits) stays visible when it moves."""
    reference, current = np.asarray(reference, np.float64), np.asarray(current, np.float64)
    inner = np.unique(np.quantile(reference, np.linspace(0, 1, bins + 1)))[:-1]
    p = np.bincount(np.searchsorted(inner, reference, "left"), minlength=inner.size + 1)
    q = np.bincount(np.searchsorted(inner, current, "left"), minlength=inner.size + 1)
    p = np.maximum(p / p.sum(), PSI_EPS)
    q = np.maximum(q / q.sum(), PSI_EPS)
    return float(np.sum((q - p) * np.log(q / p)))


def psi_reference(reference, current, bins: int) -> float:
    """PSI another way (the check's reference): pandas.cut into the same right-closed bins,
    then the symmetric Kullback-Leibler divergence with scipy.special.rel_entr."""
    import scipy.special

    reference, current = np.asarray(reference, np.float64), np.asarray(current, np.float64)
    edges = sorted(set(np.quantile(reference, np.linspace(0, 1, bins + 1)).tolist()))
    cuts = [-np.inf, *edges[:-1], np.inf]
    n = len(cuts) - 1
    p = np.bincount(pd.cut(reference, cuts, right=True).codes, minlength=n) / reference.size
    q = np.bincount(pd.cut(current, cuts, right=True).codes, minlength=n) / current.size
    p, q = np.maximum(p, PSI_EPS), np.maximum(q, PSI_EPS)
    return float(np.sum(scipy.special.rel_entr(p, q) + scipy.special.rel_entr(q, p)))


def drift_table(reference_NF, current_NF, bins: int) -> list[dict]:
    """KS and PSI per pixel that varies in the reference."""
    rows = []
    for f in range(reference_NF.shape[1]):
        if np.ptp(reference_NF[:, f]) == 0:
            continue
        rows.append(
            {
                "pixel": f,
                "ks": ks_statistic(reference_NF[:, f], current_NF[:, f]),
                "psi": psi(reference_NF[:, f], current_NF[:, f], bins),
            }
        )
    return rows


# --- the Kubeflow pipeline, in its own environment -------------------------------------------


class ArtifactRecord(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    path: str
    uri: str
    metadata: dict[str, float | int | str]


class PipelineRun(pydantic.BaseModel):
    """run.json, which mlops_pipeline.py writes in the kfp environment."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    pipeline: str
    kfp_version: str
    python: str
    arguments: dict[str, float | int]
    accuracy: float
    artifacts: dict[str, ArtifactRecord]


class CentroidModel(pydantic.BaseModel):
    """The Model artifact the pipeline's train step writes."""

    model_config = pydantic.ConfigDict(extra="forbid")
    kind: str
    classes: list[int]
    centroids: list[list[float]]
    accuracy: float | None = None


class DatasetArtifact(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    features: list[list[float]]
    labels: list[int]
    rows: list[int]


def kfp_missing() -> str | None:
    """Why the pipeline cannot run here (None: it can)."""
    if not KFP_PYTHON.exists():
        return f"the kfp environment {KFP_PYTHON.parent.parent} is missing: run `{KFP_COMMAND}`"
    return None


def write_raw(frame: pd.DataFrame, path) -> None:
    """The contract-checked rows as the pipeline's input (JSON, written atomically)."""
    doc = {
        "ids": frame["id"].tolist(),
        "features": frame[PIXEL_COLUMNS].to_numpy().tolist(),
        "labels": frame["label"].tolist(),
    }
    documents.write_text_atomic(pathlib.Path(path), json.dumps(doc))


def run_pipeline(raw_path, out_dir, seed: int, test_fraction: float, min_accuracy: float):
    """Compile and run the pipeline in .venv-kfp (a subprocess): (PipelineRun, stdout+err)."""
    problem = kfp_missing()
    if problem:
        raise RuntimeError(problem)
    out = pathlib.Path(out_dir)
    command = [
        str(KFP_PYTHON), str(PIPELINE_SCRIPT), "--raw", str(raw_path), "--out", str(out),
        "--seed", str(seed), "--test-fraction", repr(test_fraction),
        "--min-accuracy", repr(min_accuracy),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=PIPELINE_TIMEOUT_S, env=env
    )
    log = done.stdout + done.stderr
    if done.returncode != 0:
        causes = [line.strip() for line in log.splitlines() if "Error: " in line]
        raise RuntimeError(
            f"the pipeline failed (exit {done.returncode}): "
            + (" / ".join(dict.fromkeys(causes)) or log[-2000:])
        )
    run = PipelineRun.model_validate_json((out / "run.json").read_text())
    root = (out / "pipeline_root").resolve()
    for name, art in run.artifacts.items():
        if not pathlib.Path(art.path).resolve().is_relative_to(root):
            raise ValueError(f"artifact {name} at {art.path} is outside the run's root {root}")
    return run, log


def read_artifacts(run: PipelineRun) -> dict:
    """The Dataset and Model artifacts, each validated by its schema."""
    a = run.artifacts
    return {
        "train": DatasetArtifact.model_validate_json(
            pathlib.Path(a["train_data"].path).read_text()
        ),
        "test": DatasetArtifact.model_validate_json(pathlib.Path(a["test_data"].path).read_text()),
        "model": CentroidModel.model_validate_json(pathlib.Path(a["model"].path).read_text()),
        "published": CentroidModel.model_validate_json(
            pathlib.Path(a["published"].path).read_text()
        ),
    }


def centroid_accuracy(model: CentroidModel, test: DatasetArtifact) -> float:
    """The model artifact's accuracy on the test artifact, in NumPy float64 (outside kfp)."""
    c = np.asarray(model.centroids, np.float64)
    x = np.asarray(test.features, np.float64)
    d = ((x[:, None, :] - c[None]) ** 2).sum(-1)
    return float(np.mean(np.asarray(model.classes)[np.argmin(d, 1)] == np.asarray(test.labels)))


def pipeline_dag(yaml_path) -> list[dict]:
    """The compiled pipeline's tasks: {task, component, depends on, inputs} from the IR YAML."""
    spec = yaml.safe_load(pathlib.Path(yaml_path).read_text())
    tasks = spec["root"]["dag"]["tasks"]
    rows = []
    for name, task in tasks.items():
        inputs = task.get("inputs", {})
        rows.append(
            {
                "task": name,
                "component": task["componentRef"]["name"],
                "depends on": ", ".join(task.get("dependentTasks", [])) or "-",
                "inputs": ", ".join(
                    sorted([*inputs.get("artifacts", {}), *inputs.get("parameters", {})])
                ),
            }  # fmt: skip
        )
    return rows


# --- the Cloud Build config ---------------------------------------------------------------

# The build config schema's parts used here (https://cloud.google.com/build/docs/
# build-config-file-schema, read 2026-12): a build is steps (required, each with a required
# name: the builder image) plus optional substitutions, timeout, options; a user
# substitution's key is "_" then capitals, digits or "_"; durations are seconds, "600s".
CLOUDBUILD_SCHEMA = {
    "type": "object",
    "required": ["steps"],
    "additionalProperties": False,
    "properties": {
        "steps": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "entrypoint": {"type": "string"},
                    "env": {"type": "array", "items": {"type": "string", "pattern": "^[^=]+="}},
                    "dir": {"type": "string"},
                    "id": {"type": "string"},
                    "waitFor": {"type": "array", "items": {"type": "string"}},
                    "timeout": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?s$"},
                },
            },
        },
        "substitutions": {
            "type": "object",
            "propertyNames": {"pattern": "^_[A-Z0-9_]+$"},
            "additionalProperties": {"type": "string"},
        },
        "timeout": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?s$"},
        "options": {
            "type": "object",
            "properties": {
                "machineType": {
                    "enum": [
                        "UNSPECIFIED",
                        "N1_HIGHCPU_8",
                        "N1_HIGHCPU_32",
                        "E2_HIGHCPU_8",
                        "E2_HIGHCPU_32",
                        "E2_MEDIUM",
                    ],
                },  # fmt: skip
                "logging": {
                    "enum": [
                        "LOGGING_UNSPECIFIED",
                        "LEGACY",
                        "GCS_ONLY",
                        "CLOUD_LOGGING_ONLY",
                        "NONE",
                    ]
                },  # fmt: skip
                "substitutionOption": {"enum": ["MUST_MATCH", "ALLOW_LOOSE"]},
            },
            "additionalProperties": False,
        },
    },
}
# Substitutions Cloud Build provides itself (the rest must be declared).
BUILTIN_SUBSTITUTIONS = {
    "PROJECT_ID",
    "BUILD_ID",
    "PROJECT_NUMBER",
    "LOCATION",
    "COMMIT_SHA",
    "SHORT_SHA",
    "REPO_NAME",
    "BRANCH_NAME",
    "TAG_NAME",
    "REVISION_ID",
}


def cloudbuild_config(region: str, pipeline_root: str, min_accuracy: float) -> dict:
    """The commit trigger's build: the tests, the compile, then the Vertex AI Pipelines run."""
    image = "python:3.11"
    submit = (
        "from google.cloud import aiplatform; "
        "aiplatform.init(project='$PROJECT_ID', location='${_REGION}'); "
        "aiplatform.PipelineJob(display_name='digits-$SHORT_SHA', "
        "template_path='pipeline/pipeline.yaml', pipeline_root='${_PIPELINE_ROOT}', "
        "parameter_values={'raw_path': '${_RAW_PATH}', "
        "'min_accuracy': float('${_MIN_ACCURACY}')}).submit()"
    )
    return {
        "steps": [
            {"id": "test", "name": image, "entrypoint": "bash", "args": ["-c", "make test"]},
            {
                "id": "compile",
                "name": image,
                "entrypoint": "bash",
                "waitFor": ["test"],
                "args": [
                    "-c",
                    "pip install --require-hashes --no-deps "
                    "-r core/lessons/operations/kfp_requirements.lock && "
                    "python core/lessons/operations/mlops_pipeline.py --raw unused "
                    "--out pipeline --compile-only",
                ],
            },
            {
                "id": "submit",
                "name": image,
                "entrypoint": "bash",
                "waitFor": ["compile"],
                "args": ["-c", 'pip install google-cloud-aiplatform && python -c "' + submit + '"'],
            },
        ],  # fmt: skip
        "substitutions": {
            "_REGION": region,
            "_PIPELINE_ROOT": pipeline_root,
            "_RAW_PATH": pipeline_root.rstrip("/") + "/raw/digits.json",
            "_MIN_ACCURACY": repr(min_accuracy),
        },
        "timeout": "3600s",
        "options": {"logging": "CLOUD_LOGGING_ONLY", "substitutionOption": "MUST_MATCH"},
    }


def check_cloudbuild(text: str) -> list[str]:
    """Problems with a cloudbuild.yaml (empty: none): the schema above, step ids and waitFor,
    every $VAR / ${VAR} used declared or built in, gs:// for the pipeline root."""
    import jsonschema

    doc = yaml.safe_load(text)
    problems = [
        f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
        for e in jsonschema.Draft7Validator(CLOUDBUILD_SCHEMA).iter_errors(doc)
    ]
    if problems:
        return problems
    ids = [s.get("id") for s in doc["steps"]]
    for i, step in enumerate(doc["steps"]):
        for dep in step.get("waitFor", []):
            if dep != "-" and dep not in ids[:i]:
                problems.append(f"step {step.get('id', i)} waits for {dep!r}, not an earlier step")
    declared = set(doc.get("substitutions", {}))
    used = set()
    for step in doc["steps"]:
        for arg in step.get("args", []):
            used |= set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", arg))
    for name in sorted(used - declared - BUILTIN_SUBSTITUTIONS):
        problems.append(f"${name} is used but neither declared nor built in")
    for name in sorted(n for n in declared - used):
        problems.append(f"substitution {name} is declared but never used (MUST_MATCH refuses it)")
    root = doc.get("substitutions", {}).get("_PIPELINE_ROOT", "")
    if not root.startswith("gs://"):
        problems.append(f"_PIPELINE_ROOT must be a gs:// path, got {root!r}")
    return problems


def cloudbuild_yaml(config: dict) -> str:
    return yaml.safe_dump(config, sort_keys=False, width=100)
