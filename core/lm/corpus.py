"""Text that ships with Python: the standard library's own .py files, as a byte corpus.

No downloads: the files are read from ``sysconfig.get_paths()["stdlib"]``. The file list is
sorted by name (deterministic), and the split into train and held-out sets is BY FILE (a
held-out file contributes no byte to training), chosen by a seeded permutation. Each split
records a sha256 over its files' names and contents, so a run states exactly which text it
saw; a different Python version has different files and therefore different hashes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import pathlib
import sysconfig

import numpy as np

from core.lm import tokenizer


def stdlib_dir() -> pathlib.Path:
    """The directory of Python's standard library (the one running this code)."""
    return pathlib.Path(sysconfig.get_paths()["stdlib"])


def list_source_files(
    directory: pathlib.Path | None = None, max_files: int | None = None
) -> list[pathlib.Path]:
    """The top-level ``*.py`` files of ``directory`` (default: the stdlib), sorted by name,
    the first ``max_files`` of them (None: all)."""
    directory = stdlib_dir() if directory is None else pathlib.Path(directory)
    files = sorted((p for p in directory.glob("*.py") if p.is_file()), key=lambda p: p.name)
    if not files:
        raise ValueError(f"no .py files in {directory}")
    if max_files is not None:
        if max_files < 2:
            raise ValueError(
                f"max_files must be >= 2 (one to train on, one held out), got {max_files}"
            )
        files = files[:max_files]
    return files


def sha256_of_files(named_contents: list[tuple[str, bytes]]) -> str:
    """sha256 over (name, NUL, length, NUL, content) of each file in order."""
    digest = hashlib.sha256()
    for name, content in named_contents:
        digest.update(name.encode() + b"\0" + str(len(content)).encode() + b"\0")
        digest.update(content)
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class Document:
    name: str  # file name, e.g. "abc.py"
    content: bytes  # its first max_bytes bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()

    @property
    def tokens(self) -> np.ndarray:
        return np.frombuffer(self.content, dtype=np.uint8).astype(np.int32)


@dataclasses.dataclass(frozen=True)
class Corpus:
    """Train and held-out documents, split by file, with the hash of each side."""

    train: tuple[Document, ...]
    heldout: tuple[Document, ...]
    directory: str
    seed: int

    @property
    def train_sha256(self) -> str:
        return sha256_of_files([(d.name, d.content) for d in self.train])

    @property
    def heldout_sha256(self) -> str:
        return sha256_of_files([(d.name, d.content) for d in self.heldout])

    def rows(self) -> list[dict]:
        """One row per file: split, name, bytes, sha256 (shortened)."""
        return [
            {"split": split, "file": d.name, "bytes": len(d.content), "sha256": d.sha256[:16]}
            for split, docs in (("train", self.train), ("held-out", self.heldout))
            for d in docs
        ]

    def identity(self) -> dict:
        """What to record beside a checkpoint: which text the model was trained on."""
        return {
            "directory": self.directory,
            "seed": self.seed,
            "train_files": [d.name for d in self.train],
            "heldout_files": [d.name for d in self.heldout],
            "train_sha256": self.train_sha256,
            "heldout_sha256": self.heldout_sha256,
        }


def split_by_file(
    names: list[str], heldout_fraction: float, seed: int
) -> tuple[list[str], list[str]]:
    """(train names, held-out names): a seeded permutation of the sorted names; the first
    ceil(fraction * n) are held out (at least one on each side). Both lists come back sorted."""
    if not 0 < heldout_fraction < 1:
        raise ValueError(f"heldout_fraction must be in (0, 1), got {heldout_fraction}")
    names = sorted(names)
    if len(names) != len(set(names)):
        raise ValueError("file names must be unique")
    if len(names) < 2:
        raise ValueError(f"need at least 2 files to split, got {len(names)}")
    count = min(max(1, math.ceil(heldout_fraction * len(names))), len(names) - 1)
    order = np.random.default_rng(seed).permutation(len(names))
    heldout = sorted(names[i] for i in order[:count])
    train = sorted(set(names) - set(heldout))
    return train, heldout


def load_corpus(
    max_files: int = 16,
    max_bytes: int = 4096,
    heldout_fraction: float = 0.25,
    seed: int = 0,
    directory: pathlib.Path | None = None,
) -> Corpus:
    """The first ``max_files`` stdlib files (sorted by name), each cut to its first
    ``max_bytes`` bytes, split by file into train and held-out sets."""
    if max_bytes < 2:
        raise ValueError(f"max_bytes must be >= 2, got {max_bytes}")
    files = list_source_files(directory, max_files)
    by_name = {p.name: p for p in files}
    train, heldout = split_by_file(list(by_name), heldout_fraction, seed)

    def read(name):
        with open(by_name[name], "rb") as handle:
            return Document(name, handle.read(max_bytes))

    return Corpus(
        train=tuple(read(n) for n in train),
        heldout=tuple(read(n) for n in heldout),
        directory=str(files[0].parent),
        seed=seed,
    )


def pack(documents: tuple[Document, ...], seq_len: int) -> tokenizer.Packed:
    """All documents packed into rows of ``seq_len`` tokens (long files cut into pieces)."""
    return tokenizer.pack_documents([d.tokens for d in documents], seq_len)


def batch_rows(num_rows: int, batch_size: int, step: int, seed: int) -> np.ndarray:
    """Row indices of training batch ``step``: epoch e is a seeded permutation of all rows
    (seed, e), cut into consecutive batches; the same (seed, step) always gives the same
    rows, so a resumed run sees exactly the data an uninterrupted one would."""
    if num_rows < 1 or batch_size < 1 or step < 0:
        raise ValueError(
            f"need num_rows, batch_size >= 1 and step >= 0, got {num_rows}, {batch_size}, {step}"
        )
    per_epoch = max(1, num_rows // batch_size)
    epoch, index = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(num_rows)
    picked = order[index * batch_size : (index + 1) * batch_size]
    if len(picked) < batch_size:  # fewer rows than a batch: repeat the permutation
        picked = np.resize(order, batch_size)
    return picked
