"""Input pipelines: from examples to padded, masked batches, by hand and with Grain.

Lessons "Design an input pipeline" and "Load, batch, and checkpoint order with Grain", and
the data side of every resumable training run (core/state/recovery_demo.py, the capstone).

An *example* is a dict of NumPy values, e.g. ``{"id": int32 (), "x": float32 (F,),
"y": int32 ()}``. A *batch* stacks B examples per field (``x_BF``, ``y_B``, ``id_B``) and
adds ``mask_B`` (bool): the last batch of an epoch is padded with zeros up to B rows and
the mask says which rows are real, so every batch has one shape (one compiled program) and
padded rows never count in a loss (``masked_mean``).

A ``DataContract`` names the shape, dtype and range of every field; examples are checked
where they enter the pipeline, so a bad example is refused with a ValueError that names the
example, the field and the problem, instead of failing later inside a jitted function.

Dimension glossary: N examples, B batch, F features, C classes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

FAULTS = (
    "none",
    "wrong shape",
    "wrong dtype",
    "missing field",
    "non-finite value",
    "label out of range",
)


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """What one field of every example must look like.

    ``shape`` is per example (no batch dimension); ``lo``/``hi`` bound integer values
    (inclusive lo, exclusive hi); float fields must be finite.
    """

    shape: tuple[int, ...]
    dtype: str
    lo: int | None = None
    hi: int | None = None


@dataclasses.dataclass(frozen=True)
class DataContract:
    """The fields an example must carry: name -> FieldSpec. Checked at the boundary."""

    fields: Mapping[str, FieldSpec]

    def example_problems(self, example: Mapping[str, Any], where: str = "example") -> list[str]:
        """Every way ``example`` breaks the contract (empty when it is fine)."""
        if not isinstance(example, Mapping):
            return [
                f"{where}: expected a dict of fields {sorted(self.fields)}, "
                f"got {type(example).__name__}"
            ]
        problems = []
        missing = sorted(set(self.fields) - set(example))
        extra = sorted(set(example) - set(self.fields))
        if missing:
            problems.append(f"{where}: missing field(s) {missing}")
        if extra:
            problems.append(f"{where}: unexpected field(s) {extra}")
        for name, spec in self.fields.items():
            if name not in example:
                continue
            value = np.asarray(example[name])
            if tuple(value.shape) != tuple(spec.shape):
                problems.append(
                    f"{where}: field '{name}' has shape {tuple(value.shape)}, "
                    f"expected {tuple(spec.shape)}"
                )
            if value.dtype != np.dtype(spec.dtype):
                problems.append(
                    f"{where}: field '{name}' has dtype {value.dtype}, expected {spec.dtype}"
                )
            if np.issubdtype(value.dtype, np.floating) and not np.all(np.isfinite(value)):
                problems.append(f"{where}: field '{name}' has non-finite values (NaN or inf)")
            if np.issubdtype(value.dtype, np.integer) and value.size:
                if spec.lo is not None and value.min() < spec.lo:
                    problems.append(f"{where}: field '{name}' = {value.min()} is below {spec.lo}")
                if spec.hi is not None and value.max() >= spec.hi:
                    problems.append(
                        f"{where}: field '{name}' = {value.max()} is not below {spec.hi}"
                    )
        return problems

    def check_example(
        self, example: Mapping[str, Any], where: str = "example"
    ) -> Mapping[str, Any]:
        """Return ``example`` unchanged, or raise ValueError naming every problem."""
        problems = self.example_problems(example, where)
        if problems:
            raise ValueError("data contract violated: " + "; ".join(problems))
        return example

    def check_batch(self, batch: Mapping[str, np.ndarray], batch_size: int) -> None:
        """A batch leaving the pipeline: every field (B, *shape) of its dtype, plus mask_B."""
        problems = []
        for name, spec in {**self.fields, "mask": FieldSpec((), "bool")}.items():
            if name not in batch:
                problems.append(f"batch: missing field '{name}'")
                continue
            value = np.asarray(batch[name])
            expected = (batch_size, *spec.shape)
            if tuple(value.shape) != expected or value.dtype != np.dtype(spec.dtype):
                problems.append(
                    f"batch: field '{name}' is {tuple(value.shape)} {value.dtype}, "
                    f"expected {expected} {spec.dtype}"
                )
        if problems:
            raise ValueError("data contract violated: " + "; ".join(problems))


def classification_contract(features: int, classes: int) -> DataContract:
    """The contract of ``make_examples``: id (), x (F,) float32, y () int32 in [0, C)."""
    return DataContract(
        {
            "id": FieldSpec((), "int32", lo=0),
            "x": FieldSpec((features,), "float32"),
            "y": FieldSpec((), "int32", lo=0, hi=classes),
        }
    )


def make_columns(seed: int, count: int, features: int, classes: int) -> dict[str, np.ndarray]:
    """A generated classification data set, column-wise: id_N, x_NF (N(0,1)), y_N.

    Labels come from a fixed random linear teacher (argmax of x @ W), so a model can learn
    them. Same seed, same bytes, on any machine (NumPy's PCG64).
    """
    if count < 1 or features < 1 or classes < 2:
        raise ValueError(
            f"need count >= 1, features >= 1, classes >= 2; got {count}, {features}, {classes}"
        )
    rng = np.random.default_rng(seed)
    x_NF = rng.standard_normal((count, features)).astype(np.float32)
    teacher_FC = rng.standard_normal((features, classes))
    y_N = np.argmax(x_NF.astype(np.float64) @ teacher_FC, axis=1).astype(np.int32)
    return {"id": np.arange(count, dtype=np.int32), "x": x_NF, "y": y_N}


class ColumnSource:
    """A random-access data source over columns: ``source[i]`` is example i (a dict).

    Grain reads through ``__len__`` and ``__getitem__``; so does the hand-written pipeline.
    """

    def __init__(self, columns: Mapping[str, np.ndarray]):
        lengths = {name: len(column) for name, column in columns.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"columns must have one length, got {lengths}")
        self.columns = dict(columns)
        self._length = next(iter(lengths.values()))

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if not -self._length <= index < self._length:
            raise IndexError(f"example {index} out of range for {self._length} examples")
        return {name: np.array(column[index]) for name, column in self.columns.items()}

    def __repr__(self) -> str:  # Grain writes this into DataLoader states
        return f"ColumnSource({self._length} examples, fields {sorted(self.columns)})"


def inject_fault(
    examples: Sequence[Mapping[str, Any]], kind: str, index: int, classes: int
) -> list[dict]:
    """A copy of ``examples`` with example ``index`` broken in one of the ways of FAULTS."""
    if kind not in FAULTS:
        raise ValueError(f"fault must be one of {FAULTS}, got {kind!r}")
    if not 0 <= index < len(examples):
        raise ValueError(f"fault index {index} out of range for {len(examples)} examples")
    broken = [dict(e) for e in examples]
    example = broken[index]
    if kind == "wrong shape":
        example["x"] = np.concatenate([example["x"], np.zeros(1, example["x"].dtype)])
    elif kind == "wrong dtype":
        example["x"] = example["x"].astype(np.float64)
    elif kind == "missing field":
        del example["y"]
    elif kind == "non-finite value":
        example["x"] = example["x"].copy()
        example["x"][0] = np.nan
    elif kind == "label out of range":
        example["y"] = np.int32(classes)
    return broken


def epoch_order(count: int, seed: int, epoch: int) -> np.ndarray:
    """The shuffled example order of one epoch: a permutation of range(count), int64.

    Seeded by (seed, epoch): reproducible, and different in every epoch.
    """
    return np.random.default_rng([seed, epoch]).permutation(count)


def collate(examples: Sequence[Mapping[str, Any]], batch_size: int) -> dict[str, np.ndarray]:
    """Stack up to ``batch_size`` examples into one batch, zero-padded, with ``mask_B``."""
    if not 1 <= len(examples) <= batch_size:
        raise ValueError(f"collate needs 1..{batch_size} examples, got {len(examples)}")
    batch = {}
    for name in examples[0]:
        rows = np.stack([np.asarray(e[name]) for e in examples])
        pad = np.zeros((batch_size - len(examples), *rows.shape[1:]), rows.dtype)
        batch[name] = np.concatenate([rows, pad])
    batch["mask"] = np.arange(batch_size) < len(examples)
    return batch


def batches(
    source: Sequence[Mapping[str, Any]],
    contract: DataContract,
    batch_size: int,
    seed: int,
    epoch: int = 0,
    drop_remainder: bool = False,
) -> list[dict[str, np.ndarray]]:
    """One epoch of batches, by hand: check each example at the boundary, shuffle, batch, pad.

    Raises ValueError naming the first example that breaks the contract. Every batch has
    B rows (the last one padded, ``mask_B`` False on padding) unless ``drop_remainder``.
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    examples = [contract.check_example(source[i], f"example {i}") for i in range(len(source))]
    order = epoch_order(len(examples), seed, epoch)
    stop = len(order) - len(order) % batch_size if drop_remainder else len(order)
    result = []
    for start in range(0, stop, batch_size):
        batch = collate([examples[i] for i in order[start : start + batch_size]], batch_size)
        contract.check_batch(batch, batch_size)
        result.append(batch)
    return result


def masked_mean(values_B: np.ndarray, mask_B: np.ndarray) -> float:
    """Mean of ``values_B`` over the real rows only (float64)."""
    mask = np.asarray(mask_B, dtype=bool)
    if not mask.any():
        raise ValueError("masked_mean of a batch with no real rows")
    return float(np.asarray(values_B, dtype=np.float64)[mask].mean())


# --- Grain ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Shard:
    """Which slice of the data this process reads: examples index, index + count, ..."""

    index: int = 0
    count: int = 1

    def __post_init__(self):
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(
                f"shard index must be in [0, count), got index {self.index} of {self.count}"
            )

    @classmethod
    def of_jax_process(cls) -> Shard:
        """This JAX process's shard: Grain's ShardByJaxProcess (process index / count)."""
        import grain

        options = grain.sharding.ShardByJaxProcess()
        return cls(options.shard_index, options.shard_count)


def grain_dataset(
    source: Sequence[Mapping[str, Any]],
    contract: DataContract,
    batch_size: int,
    seed: int,
    shard: Shard = Shard(),
    num_epochs: int | None = None,
):
    """A Grain MapDataset of padded batches: shard, check, shuffle per epoch, batch, repeat.

    - ``shard``: this process reads examples ``shard.index::shard.count`` (disjoint,
      covering); use ``Shard.of_jax_process()`` on a multi-host run.
    - shuffling is seeded; ``repeat`` reseeds it every epoch (a new order each epoch, the
      same orders every run). Batches never straddle an epoch: the last one is padded.
    - ``num_epochs=None`` repeats forever.
    """
    import grain

    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    dataset = grain.MapDataset.source(source)[shard.index :: shard.count]
    if len(dataset) == 0:
        raise ValueError(
            f"shard {shard.index} of {shard.count} is empty: only {len(source)} examples"
        )
    return (
        dataset.map(
            lambda e: contract.check_example(e, f"example {int(np.asarray(e.get('id', -1)))}")
        )
        .shuffle(seed=seed)
        .batch(batch_size, batch_fn=lambda rows: collate(rows, batch_size))
        .repeat(num_epochs)
    )


def grain_iterator(dataset):
    """An iterator over ``dataset`` with ``get_state()``/``set_state()``; no worker threads.

    Reading in the calling thread keeps the order a pure function of the state (prefetch
    threads would only change timing, but the lessons stay single-threaded and simple).
    """
    import grain

    return iter(dataset.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)))


def batches_per_epoch(examples: int, batch_size: int, shard: Shard = Shard()) -> int:
    """Batches one shard yields per epoch (the last one padded)."""
    shard_examples = len(range(shard.index, examples, shard.count))
    return -(-shard_examples // batch_size)


def take_ids(iterator: Iterator[Mapping[str, np.ndarray]], count: int) -> list[list[int]]:
    """The real example ids of the next ``count`` batches (padding dropped)."""
    return [
        [int(i) for i in batch["id"][batch["mask"]]]
        for batch in (next(iterator) for _ in range(count))
    ]


def grain_loader(
    source: Sequence[Mapping[str, Any]],
    batch_size: int,
    seed: int,
    shard: Shard = Shard(),
    num_epochs: int | None = None,
):
    """The same job with grain.DataLoader: an IndexSampler over this shard, Batch op.

    worker_count=0 reads in the calling process (worker processes need absl flags parsed).
    Note: the sampler shards contiguously (shard i gets one block of examples), MapDataset
    slicing above interleaves; both are disjoint and covering. Its iterator state is JSON
    text in bytes (``loader_state_to_json`` / ``loader_state_from_json``).
    """
    import grain

    sampler = grain.samplers.IndexSampler(
        num_records=len(source),
        shard_options=grain.sharding.ShardOptions(shard.index, shard.count, drop_remainder=False),
        shuffle=True,
        num_epochs=num_epochs,
        seed=seed,
    )
    return grain.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[grain.transforms.Batch(batch_size, drop_remainder=False)],
        worker_count=0,
    )


def loader_state_to_json(state: bytes) -> dict:
    """A DataLoader iterator state (JSON text as bytes) as a dict, to store with a checkpoint."""
    return json.loads(state.decode("utf-8"))


def loader_state_from_json(state: Mapping[str, Any]) -> bytes:
    """The inverse of ``loader_state_to_json``: what ``iterator.set_state`` takes."""
    return json.dumps(dict(state), indent=4).encode("utf-8")
