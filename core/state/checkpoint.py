"""The course's one way to save and restore training: Orbax steps, committed atomically,
verified against a manifest before anything is loaded.

A checkpoint step holds the **complete** training state, so the next update after a restart
is the update the uninterrupted run would have made:

- ``state`` (Orbax StandardSave, a pytree of arrays): parameters, optimizer state (both
  Adam moments and the count), the step, PRNG keys (the dropout key included; store raw
  ``jax.random.key_data`` so every leaf is a plain uint32 array);
- ``data`` (JSON): the input pipeline's position, e.g. Grain's ``iterator.get_state()``;
- ``meta`` (JSON): ``{"config": ..., "metadata": ...}``.

How a step becomes usable:

1. **Atomic commit (Orbax).** Orbax writes ``<dir>/<step>.orbax-checkpoint-tmp/`` and, when
   every item is complete, writes ``commit_success.txt`` into it and renames it to
   ``<dir>/<step>/`` (``AtomicRenameTemporaryPath``, the default on local disks; on GCS it
   uses the commit file alone). A process killed mid-save leaves only the tmp directory,
   which is never listed as a step (and is removed when the next Checkpointer opens).
2. **Manifest (this module).** After Orbax commits a step, ``manifest.json`` is written into
   it atomically (tmp file + fsync + ``os.replace``): the step, the size and sha256 of every
   file, and the path/shape/dtype of every state leaf.
3. **Verification before use.** ``restore`` checks the manifest first (missing, truncated or
   changed file, missing item, unexpected file, state tree differing from the abstract state
   the caller expects) and raises ``CorruptCheckpointError`` naming the step and each
   problem. ``restore_latest`` walks back from the newest step to the newest good one and
   moves the bad newer steps aside into ``<dir>/rejected/`` (kept as evidence; training
   can then save those step numbers again). A step without a manifest (the process died
   between Orbax's rename and the manifest write) is unverified and treated as bad; when
   such steps are all there is, the run starts from scratch, as after a kill mid-save.

Nothing is unpickled: arrays are TensorStore/zarr files, the rest is JSON. The manifest
detects damage, not tampering (whoever can rewrite files can rewrite the manifest).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pathlib
import shutil
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import numpy as np

from core import documents

ITEMS = ("state", "data", "meta")
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "jax-tpu-lab checkpoint manifest"
MANIFEST_VERSION = 1
REJECTED = "rejected"
TMP_SUFFIX = ".orbax-checkpoint-tmp"  # Orbax's partial-save marker (path/atomicity_types.py)
# The one problem a crash (not damage) leaves: Orbax renamed the step, the manifest never came.
UNFINISHED_STEP = (
    f"no {MANIFEST}: the step was never verified "
    "(the process may have stopped between the commit and the manifest)"
)

log = logging.getLogger(__name__)


class CorruptCheckpointError(ValueError):
    """A checkpoint step failed verification; ``problems`` says how. Nothing was loaded."""

    def __init__(self, step: int | None, problems: list[str]):
        self.step = step
        self.problems = list(problems)
        where = f"checkpoint step {step}" if step is not None else "checkpoint"
        super().__init__(f"{where} rejected: " + "; ".join(self.problems))


class Restored(NamedTuple):
    """What ``restore``/``restore_latest`` return (unpacks as a 5-tuple)."""

    step: int
    state: Any
    data_state: dict
    config: dict
    metadata: dict


# --- manifests --------------------------------------------------------------------------


def leaf_specs(tree) -> list[dict]:
    """[{path, shape, dtype}] of every leaf of a pytree of arrays or ShapeDtypeStructs."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [
        {
            "path": jax.tree_util.keystr(path),
            "shape": [int(d) for d in leaf.shape],
            "dtype": str(np.dtype(leaf.dtype)),
        }
        for path, leaf in leaves
    ]


def tree_problems(saved: list[dict], expected: list[dict]) -> list[str]:
    """How the saved state tree differs from the expected one (paths, shapes, dtypes)."""
    saved_by_path = {s["path"]: s for s in saved}
    expected_by_path = {s["path"]: s for s in expected}
    problems = []
    if missing := [p for p in expected_by_path if p not in saved_by_path]:
        problems.append(
            f"state tree differs: expected leaves missing from the checkpoint: {', '.join(missing)}"
        )
    if extra := [p for p in saved_by_path if p not in expected_by_path]:
        problems.append(
            "state tree differs: leaves in the checkpoint that the model does not have: "
            f"{', '.join(extra)}"
        )
    for path, want in expected_by_path.items():
        have = saved_by_path.get(path)
        if have and (have["shape"] != want["shape"] or have["dtype"] != want["dtype"]):
            problems.append(
                f"state leaf {path} is {tuple(have['shape'])} {have['dtype']} in the checkpoint, "
                f"expected {tuple(want['shape'])} {want['dtype']}"
            )
    return problems


def sha256_file(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_leaves(tree) -> str:
    """A short sha256 (16 hex digits) over a pytree's leaves: dtype, shape and bytes of
    each, in tree order. Equal digests, equal states (for comparing restored pieces)."""
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(tree):
        array = np.asarray(leaf)
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:16]


# The pieces of a training state {params, opt_state, step, rng} + data position that a
# resume must restore exactly, in the order state_digest reports them.
DIGEST_GROUPS = (
    "params",
    "adam_mu",
    "adam_nu",
    "adam_count",
    "step",
    "dropout_key",
    "data_position",
)


def adam_state(tree):
    """The first optax ScaleByAdamState (count, mu, nu) inside ``tree`` (a training state
    or its optimizer state, at any depth of chaining)."""
    for part in jax.tree.leaves(tree, is_leaf=lambda x: hasattr(x, "mu")):
        if hasattr(part, "mu"):
            return part
    raise ValueError("no Adam state (mu, nu) in the optimizer state")


def state_digest(state: Mapping, data_state) -> dict[str, str]:
    """A short sha256 per DIGEST_GROUPS piece of a training state ``{params, opt_state,
    step, rng}`` and its JSON data position: equal digests, equal bytes."""
    adam = adam_state(state["opt_state"])
    return {
        "params": sha256_leaves(state["params"]),
        "adam_mu": sha256_leaves(adam.mu),
        "adam_nu": sha256_leaves(adam.nu),
        "adam_count": sha256_leaves(adam.count),
        "step": sha256_leaves(state["step"]),
        "dropout_key": sha256_leaves(state["rng"]),
        "data_position": hashlib.sha256(
            json.dumps(data_state, sort_keys=True).encode()
        ).hexdigest()[:16],
    }


def _is_manifest_file(name: str) -> bool:
    return name == MANIFEST or name.startswith(MANIFEST + ".tmp")


def file_digests(step_dir: pathlib.Path) -> dict[str, dict]:
    """{relative path: {bytes, sha256}} of every file under a step directory (not the manifest)."""
    step_dir = pathlib.Path(step_dir)
    digests = {}
    for path in sorted(p for p in step_dir.rglob("*") if p.is_file()):
        relative = path.relative_to(step_dir).as_posix()
        if _is_manifest_file(relative):
            continue
        digests[relative] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
    return digests


def write_json_atomic(path: pathlib.Path, value: Any) -> None:
    """Write JSON so a reader sees the old file or the new one, never half of one."""
    documents.write_text_atomic(path, json.dumps(value, indent=1, sort_keys=True))


def build_manifest(step: int, step_dir: pathlib.Path, state_specs: list[dict]) -> dict:
    return {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "step": int(step),
        "items": list(ITEMS),
        "files": file_digests(step_dir),
        "state_tree": state_specs,
    }


def manifest_problems(
    step: int, step_dir: pathlib.Path, expected_specs: list[dict] | None
) -> list[str]:
    """Every way the committed step directory disagrees with its manifest (empty: good)."""
    step_dir = pathlib.Path(step_dir)
    path = step_dir / MANIFEST
    if not path.exists():
        return [UNFINISHED_STEP]
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"{MANIFEST} is unreadable ({exc})"]
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        return [f"{MANIFEST} is not a {MANIFEST_FORMAT}"]
    problems = []
    if manifest.get("step") != step:
        problems.append(f"{MANIFEST} is for step {manifest.get('step')}, not {step}")
    missing_items = [item for item in manifest.get("items", []) if not (step_dir / item).is_dir()]
    problems.extend(f"item '{item}' is missing" for item in missing_items)
    listed = manifest.get("files", {})
    for relative, want in listed.items():
        file = step_dir / relative
        if relative.split("/")[0] in missing_items:
            continue  # already reported as a missing item
        if not file.is_file():
            problems.append(f"file {relative} is missing")
            continue
        size = file.stat().st_size
        if size != want["bytes"]:
            problems.append(
                f"file {relative} has {size} bytes, the manifest says {want['bytes']} "
                "(truncated or rewritten)"
            )
        elif sha256_file(file) != want["sha256"]:
            problems.append(
                f"file {relative} changed since the save "
                "(sha256 mismatch: flipped or rewritten bytes)"
            )
    problems.extend(
        f"file {relative} is not in the manifest"
        for relative in _file_names(step_dir)
        if relative not in listed
    )
    if expected_specs is not None:
        problems.extend(tree_problems(manifest.get("state_tree", []), expected_specs))
    return problems


def _file_names(step_dir: pathlib.Path) -> list[str]:
    names = (p.relative_to(step_dir).as_posix() for p in step_dir.rglob("*") if p.is_file())
    return sorted(n for n in names if not _is_manifest_file(n))


# --- inspecting a directory without opening it with Orbax --------------------------------


def step_dirs(directory: pathlib.Path) -> dict[int, pathlib.Path]:
    """Committed step directories (Orbax renamed them into place): {step: path}."""
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        return {}
    return {int(p.name): p for p in directory.iterdir() if p.is_dir() and p.name.isdigit()}


def partial_saves(directory: pathlib.Path) -> list[str]:
    """Names of uncommitted (partial) saves left in ``directory``: Orbax tmp directories."""
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if TMP_SUFFIX in p.name)


def directory_tree(directory: pathlib.Path) -> list[dict]:
    """Every file and directory under ``directory``: [{path, kind, bytes}] (bytes: file size)."""
    directory = pathlib.Path(directory)
    rows = []
    for path in sorted(directory.rglob("*")):
        relative = path.relative_to(directory).as_posix()
        kind = "dir" if path.is_dir() else "file"
        rows.append(
            {
                "path": relative + ("/" if kind == "dir" else ""),
                "kind": kind,
                "bytes": path.stat().st_size if kind == "file" else 0,
            }
        )
    return rows


def abstract_like(state):
    """The abstract state (ShapeDtypeStruct + sharding per leaf) that restores into
    ``state``'s layout."""
    import orbax.checkpoint as ocp

    return jax.tree.map(ocp.utils.to_shape_dtype_struct, state)


def _check_json(name: str, value: Any) -> None:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{name} must be JSON-serialisable (dicts, lists, str, numbers): {exc}"
        ) from None


# --- the Checkpointer --------------------------------------------------------------------


@dataclasses.dataclass
class SaveEvent:
    """One moment of the save timeline (wall clock seconds, time.time())."""

    step: int
    # "save called", "save returned", "committed" (Orbax's time), "manifest written",
    # "rejected", "restored"
    event: str
    time: float


class Checkpointer:
    """Save every ``save_every`` steps, keep the newest ``max_to_keep`` (plus every
    ``keep_period``-th step), optionally asynchronously; restore only verified steps.

        with Checkpointer(run_dir / "checkpoints", save_every=10, max_to_keep=3) as ckpt:
            restored = ckpt.restore_latest(abstract_state)       # None: start fresh
            for step in range(start + 1, steps + 1):
                state = train_step(state, next(batches))
                ckpt.save(step, state, iterator.get_state(), config, {"loss": loss})
        # leaving the block waits for the last async save and writes its manifest
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        save_every: int = 1,
        max_to_keep: int | None = 3,
        async_save: bool = True,
        keep_period: int | None = None,
        on_commit: Callable[[int], None] | None = None,
    ):
        import orbax.checkpoint as ocp
        from orbax.checkpoint import checkpoint_managers

        if save_every < 1:
            raise ValueError(f"save_every must be >= 1, got {save_every}")
        if max_to_keep is not None and max_to_keep < 1:
            raise ValueError(f"max_to_keep must be >= 1 or None (keep all), got {max_to_keep}")
        if keep_period is not None and keep_period < 1:
            raise ValueError(f"keep_period must be >= 1 or None, got {keep_period}")
        self.directory = pathlib.Path(directory).absolute()
        self.save_every = save_every
        self.max_to_keep = max_to_keep
        self.keep_period = keep_period
        self.async_save = async_save
        self.on_commit = on_commit
        self.events: list[SaveEvent] = []
        self.rejected: list[tuple[int, list[str]]] = []  # set by the latest restore_latest
        self._pending: dict[int, list[dict]] = {}  # saved here, manifest not yet written
        keep = [checkpoint_managers.LatestN(max_to_keep)]
        if keep_period is not None:
            keep.append(checkpoint_managers.EveryNSteps(keep_period))
        options = ocp.CheckpointManagerOptions(
            save_decision_policy=checkpoint_managers.FixedIntervalPolicy(save_every),
            preservation_policy=checkpoint_managers.AnyPreservationPolicy(keep),
            enable_async_checkpointing=async_save,
            cleanup_tmp_directories=True,  # partial saves of a killed process are never steps
            create=True,
        )
        partial_before = partial_saves(self.directory)
        self._manager = ocp.CheckpointManager(
            self.directory,
            options=options,
            item_handlers={
                "state": ocp.StandardCheckpointHandler(),
                "data": ocp.JsonCheckpointHandler(),
                "meta": ocp.JsonCheckpointHandler(),
            },
        )
        # Orbax removes partial saves in the background and waits for that only at the next
        # save; wait now (a private hook: without it the cleanup merely happens later).
        await_cleanup = getattr(self._manager, "_maybe_await_cleanup_tmp_directory", None)
        if await_cleanup is not None:
            await_cleanup()
        self.removed_partial_saves = sorted(
            set(partial_before) - set(partial_saves(self.directory))
        )

    # -- saving --

    def should_save(self, step: int) -> bool:
        return self._manager.should_save(step)

    def save(
        self,
        step: int,
        state,
        data_state: Mapping[str, Any],
        config: Mapping[str, Any],
        metadata: Mapping[str, Any] | None = None,
        force: bool = False,
    ) -> bool:
        """Save ``step`` if the interval says so (or ``force``); True when a save started.

        Call it every step: between saves it only writes manifests of steps Orbax has
        committed in the background. With ``async_save`` it returns once the arrays are
        copied off the device; the files are written while training continues.
        """
        import orbax.checkpoint as ocp

        self.poll()
        if not (force or self._manager.should_save(step)):
            return False
        data_state, config, metadata = dict(data_state), dict(config), dict(metadata or {})
        for name, value in (("data_state", data_state), ("config", config), ("metadata", metadata)):
            _check_json(name, value)
        # Orbax waits for the previous save before starting this one; wait here so its
        # manifest is written first.
        self._manager.wait_until_finished()
        self.poll()
        self.events.append(SaveEvent(step, "save called", time.time()))
        self._pending[step] = leaf_specs(state)
        saved = self._manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state),
                data=ocp.args.JsonSave(data_state),
                meta=ocp.args.JsonSave({"config": config, "metadata": metadata}),
            ),
            force=force,
        )
        self.events.append(SaveEvent(step, "save returned", time.time()))
        if not saved:
            self._pending.pop(step, None)
        if not self.async_save:
            self.poll()
        return saved

    def poll(self) -> list[int]:
        """Write the manifest of every step this process saved that Orbax has committed.

        Returns the steps verified just now. Does nothing while a save is in flight. On a
        multi-process run only process 0 writes (the step directory is shared).
        """
        if not self._pending or self._manager.is_saving_in_progress():
            return []
        if jax.process_index() != 0:
            self._pending.clear()
            return []
        self._manager.check_for_errors()
        done = []
        for step in sorted(self._pending):
            step_dir = self.directory / str(step)
            if step_dir.is_dir():
                if (committed_at := self.commit_time(step)) is not None:
                    self.events.append(SaveEvent(step, "committed", committed_at))
                write_json_atomic(
                    step_dir / MANIFEST, build_manifest(step, step_dir, self._pending[step])
                )
                self.events.append(SaveEvent(step, "manifest written", time.time()))
                done.append(step)
                if self.on_commit is not None:
                    self.on_commit(step)
            # else: retention already deleted it (or the save failed and check_for_errors said so)
            del self._pending[step]
        return done

    def wait_until_finished(self) -> None:
        """Block until the save in flight is committed, then write its manifest."""
        self._manager.wait_until_finished()
        self.poll()

    def close(self) -> None:
        self.wait_until_finished()
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- inspecting --

    def committed_steps(self) -> list[int]:
        """Steps Orbax has committed (renamed into place), oldest first; verified or not."""
        return sorted(self._manager.all_steps())

    def verify(self, step: int, abstract_state=None) -> list[str]:
        """Problems with committed ``step`` (empty list: safe to load), checked file by file.

        With ``abstract_state`` (the pytree of ShapeDtypeStructs the caller will restore
        into), the saved state tree must also match it leaf by leaf.
        """
        step_dir = self.directory / str(step)
        if not step_dir.is_dir():
            partial = [
                name
                for name in partial_saves(self.directory)
                if name.startswith(f"{step}{TMP_SUFFIX}")
            ]
            return [
                f"step {step} was not committed"
                + (" (only a partial save exists)" if partial else "")
            ]
        expected = leaf_specs(abstract_state) if abstract_state is not None else None
        return manifest_problems(step, step_dir, expected)

    def commit_time(self, step: int) -> float | None:
        """When Orbax committed ``step`` (its own record, seconds since the epoch), if known."""
        try:
            nanoseconds = self._manager.metadata(step).commit_timestamp_nsecs
        except (OSError, ValueError, KeyError):
            return None
        return nanoseconds / 1e9 if nanoseconds else None

    # -- restoring --

    def restore(self, step: int, abstract_state) -> Restored:
        """Verify ``step``, then load it into ``abstract_state``'s shapes, dtypes and shardings.

        Raises CorruptCheckpointError (naming the step and every problem) before reading
        any array when verification fails.
        """
        import orbax.checkpoint as ocp

        problems = self.verify(step, abstract_state)
        if problems:
            raise CorruptCheckpointError(step, problems)
        restored = self._manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_state),
                data=ocp.args.JsonRestore(),
                meta=ocp.args.JsonRestore(),
            ),
        )
        meta = restored["meta"]
        self.events.append(SaveEvent(step, "restored", time.time()))
        return Restored(
            step, restored["state"], dict(restored["data"]), meta["config"], meta["metadata"]
        )

    def restore_latest(self, abstract_state, quarantine: bool = True) -> Restored | None:
        """The newest step that passes verification, or None when nothing was committed.

        Bad newer steps are logged, recorded in ``self.rejected`` and (``quarantine``)
        moved into ``<dir>/rejected/`` so training can save those steps again. When every
        committed step is bad, raises CorruptCheckpointError and moves nothing: starting
        from scratch over a damaged run must be a decision, not a fallback. The exception
        is a run whose only steps are unfinished (no manifest, nothing else wrong): a kill
        between Orbax's rename and the manifest write is a crash like a kill mid-save, not
        damage, so those steps are moved aside and None is returned (start from step 0).
        """
        self.wait_until_finished()
        self.rejected = []
        for step in reversed(self.committed_steps()):
            try:
                restored = self.restore(step, abstract_state)
            except CorruptCheckpointError as exc:
                log.error("%s; trying the previous step", exc)
                self.events.append(SaveEvent(step, "rejected", time.time()))
                self.rejected.append((step, exc.problems))
                continue
            if quarantine and self.rejected and jax.process_index() == 0:
                self._quarantine(self.rejected)
            return restored
        if self.rejected and all(problems == [UNFINISHED_STEP] for _, problems in self.rejected):
            log.warning(
                "no verified step: steps %s were never finished (killed before their "
                "manifest); starting from scratch",
                [step for step, _ in self.rejected],
            )
            if quarantine and jax.process_index() == 0:
                self._quarantine(self.rejected)
            return None
        if self.rejected:
            raise CorruptCheckpointError(
                None,
                [f"step {step}: {'; '.join(problems)}" for step, problems in self.rejected]
                + ["no committed step passed verification"],
            )
        return None

    def _quarantine(self, rejected: list[tuple[int, list[str]]]) -> None:
        target_root = self.directory / REJECTED
        target_root.mkdir(exist_ok=True)
        for step, problems in rejected:
            suffix = 0
            while (target := target_root / f"step_{step}_{suffix}").exists():
                suffix += 1
            shutil.move(str(self.directory / str(step)), target)
            write_json_atomic(
                target / "REJECTED.json", {"step": step, "problems": problems, "time": time.time()}
            )
            log.warning("moved rejected checkpoint step %d to %s", step, target)
        self._manager.reload()
