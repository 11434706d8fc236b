"""UTF-8 byte tokens, sequence packing with segment ids and positions, and the masks it needs.

Glossary: see core/lm/attention.py (B batch, T positions in a row, S key positions).

A token is one byte of the UTF-8 encoding (vocabulary V = 256): no training, no unknown
tokens, every string round-trips. Packing lays several documents into one row of T tokens:

    tokens_BT       the bytes (PAD_ID where nothing was placed)
    segment_ids_BT  1, 2, 3, ... per document in the row; 0 marks padding
    positions_BT    0, 1, 2, ... restarting at each document (position embeddings)

so a row holds no wasted compute beyond its tail, and the attention mask (causal AND same
segment) keeps each document blind to its neighbours. The next-token target at t is the token
at t+1, valid only when both lie in the same (real) document.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

VOCAB_SIZE = 256  # one token per byte value
PAD_ID = 0  # the NUL byte: never in text; padding is also marked by segment id 0
PAD_SEGMENT = 0


def encode(text: str) -> np.ndarray:
    """The UTF-8 bytes of ``text`` as int32 tokens in [0, 256)."""
    if not isinstance(text, str):
        raise TypeError(f"encode takes a str, got {type(text).__name__}")
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)


def decode(tokens, errors: str = "strict") -> str:
    """Tokens back to text. Use errors="replace" for model samples, which may cut a
    multi-byte character in half or produce invalid UTF-8."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 1:
        raise ValueError(f"decode takes a 1-D token sequence, got shape {tokens.shape}")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= VOCAB_SIZE):
        raise ValueError(
            f"byte tokens must lie in [0, {VOCAB_SIZE}), got {tokens.min()}..{tokens.max()}"
        )
    return tokens.astype(np.uint8).tobytes().decode("utf-8", errors=errors)


def byte_table(text: str) -> list[dict]:
    """One row per character: the character, its code point and its UTF-8 byte tokens."""
    return [
        {
            "char": ch,
            "code point": f"U+{ord(ch):04X}",
            "bytes": " ".join(str(b) for b in ch.encode()),
        }
        for ch in text
    ]


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one piece of a document went: tokens_BT[row, start:start + length]."""

    document: int  # index into the documents given to pack_documents
    piece: int  # 0, 1, ... when a document longer than a row was cut
    row: int
    start: int
    length: int
    segment: int


@dataclasses.dataclass(frozen=True)
class Packed:
    """Rows of packed documents (numpy int32) and the record of where each piece went."""

    tokens_BT: np.ndarray
    segment_ids_BT: np.ndarray
    positions_BT: np.ndarray
    placements: tuple[Placement, ...]

    @property
    def fill(self) -> float:
        """Fraction of the row slots holding real tokens."""
        return float(np.mean(self.segment_ids_BT != PAD_SEGMENT))


def pack_documents(
    documents: Sequence[np.ndarray], seq_len: int, num_rows: int | None = None
) -> Packed:
    """Greedy, in order: each document goes into the current row if it fits, else opens a
    new row (the rest of the old row stays padding). A document longer than seq_len is cut
    into seq_len pieces, each its own segment. ``num_rows`` fixes the row count (extra rows
    are all padding; ValueError if the documents need more rows); None uses as many as
    needed.
    """
    if seq_len < 2:
        raise ValueError(f"seq_len T must be >= 2 (a token and its next token), got {seq_len}")
    pieces = []
    for index, document in enumerate(documents):
        document = np.asarray(document)
        if document.ndim != 1:
            raise ValueError(f"document {index} must be 1-D tokens, got shape {document.shape}")
        for piece, start in enumerate(range(0, len(document), seq_len)):
            pieces.append((index, piece, document[start : start + seq_len]))
    placements, row, used, segment = [], 0, 0, 0
    for index, piece, chunk in pieces:
        if used + len(chunk) > seq_len:
            row, used, segment = row + 1, 0, 0
        segment += 1
        placements.append(Placement(index, piece, row, used, len(chunk), segment))
        used += len(chunk)
    needed = row + 1 if placements else 0
    rows = needed if num_rows is None else num_rows
    if rows < needed:
        raise ValueError(
            f"the documents need {needed} rows of T={seq_len} tokens, "
            f"only num_rows={num_rows} given"
        )
    tokens = np.full((rows, seq_len), PAD_ID, np.int32)
    segments = np.full((rows, seq_len), PAD_SEGMENT, np.int32)
    positions = np.zeros((rows, seq_len), np.int32)
    for placement, (_, _, chunk) in zip(placements, pieces, strict=True):
        span = slice(placement.start, placement.start + placement.length)
        tokens[placement.row, span] = chunk
        segments[placement.row, span] = placement.segment
        positions[placement.row, span] = np.arange(placement.length)
    return Packed(tokens, segments, positions, tuple(placements))


def segment_mask_BTS(segment_ids_BT, causal: bool = True):
    """(B, T, T) bool: query t may attend to key s iff same segment (and s <= t if causal).

    Padding (segment 0) attends only to padding, so no row is ever masked everywhere.
    NumPy in, NumPy out (for pictures and data prep); a JAX array or tracer in, JAX out.
    """
    xp = np if isinstance(segment_ids_BT, np.ndarray) else jnp
    segment_ids_BT = xp.asarray(segment_ids_BT)
    if segment_ids_BT.ndim != 2:
        raise ValueError(f"segment_ids_BT must be (B, T), got {tuple(segment_ids_BT.shape)}")
    same = segment_ids_BT[:, :, None] == segment_ids_BT[:, None, :]
    if not causal:
        return same
    t = segment_ids_BT.shape[1]
    return xp.logical_and(same, xp.tril(xp.ones((t, t), bool))[None])


def next_token_targets(tokens_BT, segment_ids_BT) -> tuple[np.ndarray, np.ndarray]:
    """targets_BT (the token at t+1, int32) and weights_BT (1.0 where that target is real,
    float32), in NumPy: data preparation, done once per batch on the host.

    A target is valid when positions t and t+1 hold the same real document: padding and the
    first token of the next document (a boundary) are never predicted, and the row's last
    position has no target at all.
    """
    tokens_BT, segment_ids_BT = np.asarray(tokens_BT), np.asarray(segment_ids_BT)
    if tokens_BT.shape != segment_ids_BT.shape or tokens_BT.ndim != 2:
        raise ValueError(
            f"tokens_BT {tokens_BT.shape} and segment_ids_BT {segment_ids_BT.shape} "
            "must be the same (B, T) shape"
        )
    targets = np.full_like(tokens_BT, PAD_ID, dtype=np.int32)
    targets[:, :-1] = tokens_BT[:, 1:]
    next_segment = np.full_like(segment_ids_BT, PAD_SEGMENT)
    next_segment[:, :-1] = segment_ids_BT[:, 1:]
    valid = (segment_ids_BT != PAD_SEGMENT) & (next_segment == segment_ids_BT)
    return targets, valid.astype(np.float32)
