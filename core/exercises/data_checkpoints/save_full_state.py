"""Exercises of the lesson "Save model, optimizer, and random state": how many bytes the
complete training state of the lesson's trainer holds (predict), and the verification of a
checkpoint step's files against its manifest before anything is loaded (code)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

from core.assessment.items import CodeItem, HiddenTest, PredictItem, rng
from core.exercises.data_checkpoints._shared import PHASE


class StateBytes(PredictItem):
    """A resumable Adam state is three copies of the parameters (params, mu, nu), plus the
    small leaves a resume needs all the same: the count, the step, the dropout key."""

    id = "data_checkpoints.save_full_state.state_bytes"
    phase = PHASE
    lesson = "save_full_state"
    title = "Bytes of a complete training state"
    units = "bytes"
    rel_tol = 0.0
    abs_tol = 0.5  # a count of bytes: exact (the nearest planted mistake is 8 bytes away)
    hints = (
        "List what the lesson's checkpoint saves in its `state` item: the parameters, and "
        "what else does the next update read? The lesson's table 'What a complete training "
        "state holds' has a row per part, with its bytes.",
        "Adam keeps two moments, each the shape and dtype (float32) of the parameters. Then "
        "three small leaves: Adam's count (int32), the step (int32), and the dropout key as "
        "raw uint32 key data (a threefry key is 2 words).",
        "P = F·H + H + H·C + C parameters; bytes = 3 · 4 · P (params, mu, nu in float32) + "
        "4 (count) + 4 (step) + 8 (key) = 12·P + 16.",
    )

    def params(self, generator):
        while True:
            params = {
                "features": int(generator.integers(4, 33)),
                "hidden": int(generator.integers(8, 257)),
                "classes": int(generator.integers(2, 11)),
            }
            # the lesson's own model (F = 8, C = 4, H on a slider) has its bytes in a table
            if (params["features"], params["classes"]) != (8, 4):
                return params

    @staticmethod
    def _parameters(params) -> int:
        f, h, c = params["features"], params["hidden"], params["classes"]
        return f * h + h + h * c + c

    def prompt(self, params) -> str:
        f, h, c = params["features"], params["hidden"], params["classes"]
        return (
            f"The lesson's trainer (`recovery_demo`) with **features F = {f}, hidden H = {h}, "
            f"classes C = {c}**: an MLP with w1 (F, H), b1 (H,), w2 (H, C), b2 (C,) in float32, "
            "trained with Adam (`optax.scale_by_adam`) and dropout. **Predict the bytes of "
            "all the arrays in its complete training state**, the `state` item its "
            "checkpoint saves (everything the next update depends on; the data position and "
            "the config are JSON, not counted); the lesson's library then builds the state's "
            "shapes and dtypes (`recovery_demo.abstract_state`) and adds them up."
        )

    def live(self, params) -> float:
        import jax

        from core.state import recovery_demo

        config = recovery_demo.TrainConfig(
            features=params["features"], hidden=params["hidden"], classes=params["classes"]
        )
        leaves = jax.tree.leaves(recovery_demo.abstract_state(config))
        return float(sum(int(np.prod(leaf.shape)) * leaf.dtype.itemsize for leaf in leaves))

    def derive(self, params):
        f, h, c = params["features"], params["hidden"], params["classes"]
        p = self._parameters(params)
        value = 12 * p + 16
        return float(value), (
            f"P = F·H + H + H·C + C = {f * h} + {h} + {h * c} + {c} = **{p} parameters**. "
            f"float32 is 4 bytes: the parameters take {4 * p} bytes, and Adam's two moments "
            f"(mu, nu: the parameters' shapes and dtype) as much again each: 3 · {4 * p} = "
            f"{12 * p}. The small leaves: Adam's count (int32, 4 bytes: its bias correction "
            "1 − β^t needs t), the step (int32, 4), the dropout key (raw uint32 key data, 2 "
            f"words = 8 bytes): **12·P + 16 = {value} bytes**. Saving only the parameters "
            f"({4 * p} bytes) is a third of it, and enough to use the model, not to continue "
            "training it bit for bit."
        )

    def wrong(self, params, expected):
        p = self._parameters(params)
        return {
            "the parameters only": 4 * p,
            "one Adam moment, not two": 8 * p + 16,
            "the count, step and dropout key left out": 12 * p,
        }


_STUB = '''\
import hashlib

import numpy as np


def bad_files(files, manifest):
    """The files of a checkpoint step that fail verification against its manifest.

    files: {relative path: uint8 array of the file's bytes}, everything in the step directory
    now (manifest.json aside). manifest["files"]: {relative path: {"bytes": size, "sha256":
    hex digest}}, written when the step was committed. A file fails when it is listed but
    missing, its size differs, its sha256 differs, or it is not listed at all.
    Returns the failing relative paths as a sorted list (empty: safe to load).
    """
    raise NotImplementedError
'''

_SIZES_ONLY = """\
def bad_files(files, manifest):
    listed = manifest["files"]
    bad = set(files) - set(listed)
    for path, want in listed.items():
        if path not in files or files[path].size != want["bytes"]:
            bad.add(path)  # sizes compared, contents never hashed
    return sorted(bad)
"""

_PRESENT_ONLY = """\
import hashlib


def bad_files(files, manifest):
    listed = manifest["files"]
    bad = []
    for path, content in files.items():  # only the files that are there
        want = listed.get(path)
        if want is None or content.size != want["bytes"]:
            bad.append(path)
        elif hashlib.sha256(content.tobytes()).hexdigest() != want["sha256"]:
            bad.append(path)
    return sorted(bad)
"""

_LISTED_ONLY = """\
import hashlib


def bad_files(files, manifest):
    bad = []
    for path, want in manifest["files"].items():  # files nobody listed go unseen
        content = files.get(path)
        if content is None or content.size != want["bytes"]:
            bad.append(path)
        elif hashlib.sha256(content.tobytes()).hexdigest() != want["sha256"]:
            bad.append(path)
    return sorted(bad)
"""

_FIRST_PROBLEM = """\
import hashlib


def bad_files(files, manifest):
    listed = manifest["files"]
    for path in sorted(set(files) | set(listed)):  # stops at the first bad file
        want, content = listed.get(path), files.get(path)
        if want is None or content is None or content.size != want["bytes"]:
            return [path]
        if hashlib.sha256(content.tobytes()).hexdigest() != want["sha256"]:
            return [path]
    return []
"""

# The step directory's layout, after Orbax's (an OCDBT database of the state's arrays, JSON
# items, the commit marker); the contents are random bytes of the seed.
_NAMES = (
    "_CHECKPOINT_METADATA",
    "commit_success.txt",
    "data/metadata",
    "meta/metadata",
    "state/_METADATA",
    "state/_sharding",
    "state/manifest.ocdbt",
    "state/ocdbt.process_0/manifest.ocdbt",
)


def _step_files(generator) -> dict[str, np.ndarray]:
    files = {name: generator.integers(0, 256, int(generator.integers(1, 600))) for name in _NAMES}
    for _ in range(int(generator.integers(2, 5))):  # the arrays' data files
        name = f"state/ocdbt.process_0/d/{generator.integers(0, 2**63):016x}"
        files[name] = generator.integers(0, 256, int(generator.integers(200, 4000)))
    files["commit_success.txt"] = np.frombuffer(b"Checkpoint commit was successful", np.uint8)
    return {name: np.asarray(content, np.uint8) for name, content in sorted(files.items())}


def _manifest(files: dict[str, np.ndarray]) -> dict:
    """The manifest of ``files`` as core.state.checkpoint writes it (its "files" part)."""
    return {
        "files": {
            path: {"bytes": int(content.size), "sha256": hashlib.sha256(content).hexdigest()}
            for path, content in files.items()
        }
    }


class BadFiles(CodeItem):
    id = "data_checkpoints.save_full_state.bad_files"
    phase = PHASE
    lesson = "save_full_state"
    title = "Verify a checkpoint step against its manifest"
    function_name = "bad_files"
    stub = _STUB
    solution_module = "core.exercises.solutions.bad_files"
    hints = (
        "Four ways a file can fail, and a loop over one side only sees some of them: walk the "
        "manifest's files AND the directory's files.",
        "A listed file that is absent is missing; a present file that is not listed is "
        "unexpected. For the rest, a different size is cheap to spot, but a flipped byte keeps "
        "the size: only the sha256 of the whole content sees it.",
        "bad = set(files) − set(listed); for each listed path: missing, or len differs, or "
        "hashlib.sha256(files[path].tobytes()).hexdigest() differs → bad. Return sorted(bad).",
    )

    def prompt(self, seed: int) -> str:
        return (
            "Complete `bad_files(files, manifest)`: the check `Checkpointer.restore` runs "
            "before it lets Orbax read a step, file by file. The hidden tests build a step "
            "directory's files (Orbax's layout, random bytes), write its manifest, then damage "
            "it the ways disks and crashes do: nothing, a truncated file, one flipped byte "
            "(same size), a deleted file, an unlisted file, all four at once, a flipped last "
            "byte of a 1 MiB file, an empty file. Your sorted list must equal the reference's "
            "(written with hashlib in the exercise)."
        )

    def planted_wrong(self) -> dict[str, str]:
        return {
            "sizes compared, contents never hashed": _SIZES_ONLY,
            "only the files present are checked (a deleted file goes unseen)": _PRESENT_ONLY,
            "only the listed files are checked (an unlisted file goes unseen)": _LISTED_ONLY,
            "stops at the first bad file": _FIRST_PROBLEM,
        }

    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        generator = rng(self.id + "/inputs", seed)
        tests = []

        def pick(files, prefix=""):
            names = sorted(name for name in files if name.startswith(prefix))
            return names[int(generator.integers(len(names)))]

        def truncate(files, bad):
            name = pick(files, "state/ocdbt.process_0/d/")
            files[name] = files[name][: int(generator.integers(0, files[name].size))]
            bad.add(name)

        def flip(files, bad, name=None):
            name = name or pick(files)
            content = files[name].copy()
            at = int(generator.integers(content.size))
            content[at] ^= np.uint8(1 << int(generator.integers(8)))
            files[name] = content
            bad.add(name)

        def delete(files, bad):
            name = pick(files, "state/")
            del files[name]
            bad.add(name)

        def add(files, bad):
            name = f"state/ocdbt.process_0/d/{generator.integers(0, 2**63):016x}.partial"
            files[name] = np.asarray(generator.integers(0, 256, 64), np.uint8)
            bad.add(name)

        def large(files, bad):
            name = "state/ocdbt.process_0/d/large"
            files[name] = np.asarray(generator.integers(0, 256, 2**20), np.uint8)
            return name

        def empty(files, bad):
            files["state/ocdbt.process_0/d/empty"] = np.zeros(0, np.uint8)

        cases = [
            ("an intact step", ()),
            ("a truncated array file", (truncate,)),
            ("one flipped byte, same size", (flip,)),
            ("a deleted file", (delete,)),
            ("a file the manifest does not list", (add,)),
            ("all four at once", (truncate, flip, delete, add)),
            ("the last byte of a 1 MiB file flipped", "large"),
            ("an empty file, intact, beside a flipped one", "empty"),
        ]
        for name, damage in cases:
            files, bad = _step_files(generator), set()
            if damage == "large":
                big = large(files, bad)
                manifest = _manifest(files)
                files[big] = files[big].copy()
                files[big][-1] ^= np.uint8(0x80)
                bad.add(big)
            elif damage == "empty":
                empty(files, bad)
                manifest = _manifest(files)
                flip(files, bad, pick(files, "state/_"))  # a nonempty file
            else:
                manifest = _manifest(files)
                for how in damage:
                    how(files, bad)
            tests.append(self._compare(name, function(files, manifest), sorted(bad)))
        return tests

    @staticmethod
    def _compare(name: str, got, expected: list[str]) -> HiddenTest:
        if not isinstance(got, list | tuple) or not all(isinstance(p, str) for p in got):
            return HiddenTest(name, False, f"expected a list of paths, got {type(got).__name__}")
        if len(set(got)) != len(got):
            return HiddenTest(name, False, "a path is listed twice")
        if sorted(got) == expected:
            return HiddenTest(name, True, f"{len(expected)} bad file(s), all found")
        missed = sorted(set(expected) - set(got))
        wrongly = sorted(set(got) - set(expected))
        parts = [f"missed {missed}" if missed else "", f"flagged good {wrongly}" if wrongly else ""]
        return HiddenTest(name, False, "; ".join(p for p in parts if p))
