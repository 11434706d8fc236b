"""The capstone's data: Python's standard library as bytes, split by file, streamed into rows.

Training reads a ``DocumentStream``: epoch e visits the training files in a seeded
permutation (data_seed, e) and packs their bytes into rows of ``seq_len``, each row holding
consecutive pieces, one segment per piece (a file that does not fit in the rest of a row
continues in the next row as a new segment; a row tail shorter than ``min_piece`` is left
as padding). The stream's position is three integers, (epoch, document, offset): where the
next byte comes from. It is saved with every checkpoint, so a resumed run reads exactly the
bytes an uninterrupted one would.

Held-out batches pack the held-out files (never trained on) in name order, once.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from capstones.byte_transformer import config as config_lib
from core.lm import corpus as corpus_lib
from core.lm import tokenizer, transformer


def load_corpus(config: config_lib.Config) -> corpus_lib.Corpus:
    """The stdlib's top-level .py files (config.max_files of them, 0: all), each cut to
    config.max_bytes, split by file into train and held-out with config.data_seed."""
    count = config.max_files or len(corpus_lib.list_source_files())
    return corpus_lib.load_corpus(
        max_files=count,
        max_bytes=config.max_bytes,
        heldout_fraction=config.heldout_fraction,
        seed=config.data_seed,
    )


@dataclasses.dataclass(frozen=True)
class Position:
    """Where the stream's next byte comes from: byte ``offset`` of the ``document``-th file
    of epoch ``epoch``'s permutation."""

    epoch: int = 0
    document: int = 0
    offset: int = 0

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


class DocumentStream:
    """Rows of packed training bytes, batch after batch, from a resumable position."""

    def __init__(
        self,
        documents: tuple[corpus_lib.Document, ...],
        seq_len: int,
        batch_size: int,
        seed: int,
        min_piece: int = 16,
        position: Position | None = None,
    ):
        if not documents:
            raise ValueError("DocumentStream needs at least one document")
        if any(len(d.content) == 0 for d in documents):
            raise ValueError("every document must have at least one byte")
        self.tokens = [d.tokens for d in documents]
        self.seq_len, self.batch_size, self.seed = seq_len, batch_size, seed
        self.min_piece = min(min_piece, seq_len - 1)
        self.position = position or Position()
        self._order_epoch, self._order = -1, np.zeros(0, int)
        self.set_state(self.position.to_dict())

    def order(self, epoch: int) -> np.ndarray:
        """Document indices of ``epoch`` in visiting order (a seeded permutation)."""
        if epoch != self._order_epoch:
            self._order = np.random.default_rng([self.seed, epoch]).permutation(len(self.tokens))
            self._order_epoch = epoch
        return self._order

    def get_state(self) -> dict[str, int]:
        """The position as JSON-ready ints (what a checkpoint stores)."""
        return self.position.to_dict()

    def set_state(self, state: dict) -> None:
        position = Position(**{k: int(state[k]) for k in ("epoch", "document", "offset")})
        if position.epoch < 0 or not 0 <= position.document < len(self.tokens):
            raise ValueError(f"stream position {state} is outside the {len(self.tokens)} documents")
        length = len(self.tokens[self.order(position.epoch)[position.document]])
        if not 0 <= position.offset < length:
            raise ValueError(f"stream position {state}: offset outside a {length}-byte document")
        self.position = position

    def _advance(self, taken: int) -> None:
        epoch, document, offset = self.position.epoch, self.position.document, self.position.offset
        offset += taken
        if offset >= len(self.tokens[self.order(epoch)[document]]):
            document, offset = document + 1, 0
            if document == len(self.tokens):
                epoch, document = epoch + 1, 0
        self.position = Position(epoch, document, offset)

    def next_packed(self) -> tokenizer.Packed:
        """The next batch_size rows (and where each piece came from, as Placements whose
        ``document`` is the index into the documents given to the stream)."""
        b, t = self.batch_size, self.seq_len
        tokens = np.full((b, t), tokenizer.PAD_ID, np.int32)
        segments = np.full((b, t), tokenizer.PAD_SEGMENT, np.int32)
        positions = np.zeros((b, t), np.int32)
        placements = []
        for row in range(b):
            used, segment = 0, 0
            while t - used >= self.min_piece:
                index = int(self.order(self.position.epoch)[self.position.document])
                offset = self.position.offset
                piece = self.tokens[index][offset : offset + (t - used)]
                segment += 1
                span = slice(used, used + len(piece))
                tokens[row, span] = piece
                segments[row, span] = segment
                positions[row, span] = np.arange(len(piece))
                placements.append(
                    tokenizer.Placement(index, offset, row, used, len(piece), segment)
                )
                used += len(piece)
                self._advance(len(piece))
        return tokenizer.Packed(tokens, segments, positions, tuple(placements))

    def next_batch(self) -> dict[str, np.ndarray]:
        """The next training batch (core.lm.transformer.batch_from_packed arrays)."""
        return transformer.batch_from_packed(self.next_packed())


def training_stream(
    config: config_lib.Config, corpus: corpus_lib.Corpus, position: dict | None = None
) -> DocumentStream:
    stream = DocumentStream(
        corpus.train, config.seq_len, config.batch_size, config.data_seed, config.min_piece
    )
    if position is not None:
        stream.set_state(position)
    return stream


def heldout_packed(config: config_lib.Config, corpus: corpus_lib.Corpus) -> list[tokenizer.Packed]:
    """The held-out files packed in name order into at most eval_batches batches of
    (batch_size, seq_len) rows (the last one padded)."""
    packed = corpus_lib.pack(corpus.heldout, config.seq_len)
    rows = packed.tokens_BT.shape[0]
    batches = []
    for first in range(0, min(rows, config.eval_batches * config.batch_size), config.batch_size):
        take = slice(first, first + config.batch_size)

        def pad(array, fill, take=take):
            out = np.full((config.batch_size, config.seq_len), fill, array.dtype)
            part = array[take]
            out[: len(part)] = part
            return out

        placements = tuple(
            dataclasses.replace(p, row=p.row - first)
            for p in packed.placements
            if first <= p.row < first + config.batch_size
        )
        batches.append(
            tokenizer.Packed(
                pad(packed.tokens_BT, tokenizer.PAD_ID),
                pad(packed.segment_ids_BT, tokenizer.PAD_SEGMENT),
                pad(packed.positions_BT, 0),
                placements,
            )
        )
    return batches


def heldout_batches(config: config_lib.Config, corpus: corpus_lib.Corpus) -> list[dict]:
    """Held-out batches as training-step arrays (see heldout_packed)."""
    return [transformer.batch_from_packed(p) for p in heldout_packed(config, corpus)]
