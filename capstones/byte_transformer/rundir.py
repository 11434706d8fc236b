"""The run directory: its layout, and two rules every command keeps about it.

    DIR/config.json  corpus.json  metrics.jsonl  checkpoints/  mlflow.db     (train)
    DIR/eval.json  cache_report.json  artifacts/  profile/  bench.json
    DIR/report/  run_manifest.json                                (the other commands)
    DIR/previous/<UTC time>-<n>/                                  (history moved aside)

1. A command that reads a run refuses a run that is not there. ``require_run`` says what
   is missing and which command makes it (a ``MissingRun``: exit status 2 through the
   CLI, no traceback) and creates nothing: no directory, no file.
2. Starting from scratch never destroys history. When ``train`` finds no verified
   checkpoint in a directory that already holds the metrics of an earlier start (or
   results computed from its checkpoints), ``rotate_history`` moves them into
   ``DIR/previous/<UTC time>-<n>/`` (with a copy of the old config.json) and says where.
   MLflow's store (mlflow.db) stays: it only ever gains runs, one per training segment,
   and the new one is tagged with the folder the old history went to.
"""

from __future__ import annotations

import datetime
import os
import pathlib
import shutil

from capstones.byte_transformer import args

CONFIG_FILE = "config.json"
CORPUS_FILE = "corpus.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
EVAL_FILE = "eval.json"
PREVIOUS = "previous"
# What a fresh start would overwrite (metrics.jsonl) or leave describing checkpoints that
# no longer exist (everything computed from a trained model).
HISTORY = (
    METRICS_FILE,
    EVAL_FILE,
    "cache_report.json",
    "artifacts",
    "profile",
    "bench.json",
    "report",
    "run_manifest.json",
)
# What tpu_scripts/byte_transformer_tpu.py writes into a job directory (run-manifest reads
# either a training run or such a job directory).
JOB_FILES = ("runtime.json", "tpu_result.json", "cpu_rehearsal_result.json")
TRAIN_COMMAND = "python -m capstones.byte_transformer train run_dir={}"


class MissingRun(args.UsageError, FileNotFoundError):
    """The run a command reads is not there (or has nothing to read yet). A UsageError
    (the CLI prints it, exit status 2) and a FileNotFoundError (for library callers)."""


def require_run(run_dir: str | os.PathLike, trained: bool = True) -> pathlib.Path:
    """``run_dir`` as a Path if it is a training run (config.json; with ``trained``, at
    least one committed checkpoint step too), else MissingRun saying what is missing and
    how to make it. Only looks: creates nothing."""
    path = _existing_dir(run_dir)
    make = "make it with: " + TRAIN_COMMAND.format(run_dir)
    if not (path / CONFIG_FILE).is_file():
        raise MissingRun(
            f"run_dir={run_dir} is not a training run (no {CONFIG_FILE}, the first file "
            f"train writes); {make}"
        )
    if trained and not committed_steps(path / CHECKPOINTS):
        raise MissingRun(
            f"run_dir={run_dir} has no checkpoint yet (nothing committed in {CHECKPOINTS}/); "
            f"train it until one is saved (every ckpt_every steps, and at the end): "
            f"{TRAIN_COMMAND.format(run_dir)} (the same command resumes)"
        )
    return path


def require_run_or_job(run_dir: str | os.PathLike) -> pathlib.Path:
    """``run_dir`` as a Path if it holds a training run (config.json) or a TPU job's
    results (one of JOB_FILES), else MissingRun. Creates nothing."""
    path = _existing_dir(run_dir)
    if not any((path / name).is_file() for name in (CONFIG_FILE, *JOB_FILES)):
        raise MissingRun(
            f"run_dir={run_dir} holds no run: none of {CONFIG_FILE} (written by train) or "
            f"{', '.join(JOB_FILES)} (written by tpu_scripts/byte_transformer_tpu.py); "
            f"make one with: {TRAIN_COMMAND.format(run_dir)}, or fetch a TPU job's directory"
        )
    return path


def _existing_dir(run_dir: str | os.PathLike) -> pathlib.Path:
    if not str(run_dir):
        raise MissingRun("run_dir is empty; give the directory of a training run")
    path = pathlib.Path(run_dir)
    if not path.exists():
        raise MissingRun(
            f"run_dir={run_dir} does not exist; make it with: {TRAIN_COMMAND.format(run_dir)}"
        )
    if not path.is_dir():
        raise MissingRun(f"run_dir={run_dir} is a file, not a run directory")
    return path


def committed_steps(checkpoints: pathlib.Path) -> list[int]:
    """Step numbers Orbax has committed (renamed into place) under ``checkpoints``, read
    off the directory (verified or not; the restore verifies)."""
    if not checkpoints.is_dir():
        return []
    return sorted(int(p.name) for p in checkpoints.iterdir() if p.is_dir() and p.name.isdigit())


def check_writable(run_dir: str | os.PathLike) -> None:
    """UsageError unless ``run_dir`` is (or can be made as) a writable directory. Creates
    nothing: it checks the directory, or its nearest existing ancestor."""
    path = pathlib.Path(run_dir).absolute()
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        where = "is" if probe == path else f"cannot be made: {probe} is"
        raise args.UsageError(f"run_dir={run_dir} {where} a file, not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise args.UsageError(f"run_dir={run_dir}: {probe} is not writable")


def history_present(run_dir: pathlib.Path) -> list[str]:
    """The HISTORY entries ``run_dir`` holds (an empty metrics.jsonl does not count)."""
    found = []
    for name in HISTORY:
        path = run_dir / name
        if path.is_dir() and any(path.iterdir()):
            found.append(name)
        elif path.is_file() and path.stat().st_size > 0:
            found.append(name)
    return found


def rotate_history(
    run_dir: str | os.PathLike, now: datetime.datetime | None = None
) -> tuple[pathlib.Path, list[str]] | None:
    """Move every HISTORY entry of ``run_dir`` into a new ``previous/<UTC time>-<n>/``
    (n: 1, 2, ... so two rotations never share a folder) with a copy of config.json.
    Returns (that folder, the names moved), or None when there was nothing to keep."""
    run_dir = pathlib.Path(run_dir)
    names = history_present(run_dir)
    if not names:
        return None
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y%m%dT%H%M%SZ")
    root = run_dir / PREVIOUS
    root.mkdir(exist_ok=True)
    sequence = 1
    while True:
        target = root / f"{stamp}-{sequence}"
        try:
            target.mkdir()
            break
        except FileExistsError:
            sequence += 1
    for name in names:
        os.replace(run_dir / name, target / name)
    if (run_dir / CONFIG_FILE).is_file():
        shutil.copy2(run_dir / CONFIG_FILE, target / CONFIG_FILE)
    return target, names
