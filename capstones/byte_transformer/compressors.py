"""The lines a byte model has to beat: general-purpose compressors on the same files.

A language model's held-out loss in bits per byte is a compression rate: an arithmetic coder
driven by the model would store the held-out files in that many bits per byte. So the same
held-out files, compressed by gzip, bzip2 and xz (Python's zlib, bz2 and lzma at their
strongest settings), say what "learned something" means here:

- ``per file``: each file compressed alone (what ``gzip -9 file`` does);
- ``together``: the files concatenated and compressed as one stream (xz then finds what files
  share: repeated imports, idioms, licence text);
- ``after training files``: xz given every training file first, counting only the extra
  bytes the held-out files cost: the compressor's view of "seen the training set", the
  fairest comparison for a model trained on it.

    rates = compressor_rates(corpus.heldout, corpus.train)  # {label: bits per byte}
"""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Callable, Sequence

from core.lm import corpus as corpus_lib

# label -> compress(bytes) -> bytes; each at its strongest standard setting
COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "gzip -9": lambda data: gzip.compress(data, compresslevel=9, mtime=0),
    "bzip2 -9": lambda data: bz2.compress(data, compresslevel=9),
    "xz -9e": lambda data: lzma.compress(data, preset=9 | lzma.PRESET_EXTREME),
}


def bits_per_byte(compressed_bytes: int, raw_bytes: int) -> float:
    if raw_bytes <= 0:
        raise ValueError("no bytes to compress")
    return 8.0 * compressed_bytes / raw_bytes


def compressor_rates(
    files: Sequence[corpus_lib.Document], seen: Sequence[corpus_lib.Document] = ()
) -> dict[str, float]:
    """Bits per byte of ``files`` under each compressor, per file and together; with ``seen``
    (the training files), also xz's cost of ``files`` after it has compressed ``seen``."""
    contents = [document.content for document in files]
    raw = sum(len(content) for content in contents)
    rates = {}
    for label, compress in COMPRESSORS.items():
        per_file = sum(len(compress(content)) for content in contents)
        rates[f"{label} per file"] = bits_per_byte(per_file, raw)
        rates[f"{label} together"] = bits_per_byte(len(compress(b"".join(contents))), raw)
    if seen:
        compress = COMPRESSORS["xz -9e"]
        before = b"".join(document.content for document in seen)
        extra = len(compress(before + b"".join(contents))) - len(compress(before))
        rates["xz -9e after training files"] = bits_per_byte(extra, raw)
    return rates


def standing(config, heldout_bpb: float) -> str:
    """Where the run's held-out bits per byte stand: against gzip on the held-out files
    (computed now) and the kept chip run of preset=quality-v5e (its record)."""
    from capstones.byte_transformer import data
    from core.perf import records

    corpus = data.load_corpus(config)
    gzip_rate = compressor_rates(corpus.heldout)["gzip -9 per file"]
    try:  # an installed wheel (a TPU VM) carries no benchmarks/
        kept = records.latest("byte_transformer_quality").figures["final_heldout_bpb"]
        chip = (
            f", and preset=quality-v5e reached {kept:.2f} on one v5e chip "
            "(benchmarks/records/byte_transformer_quality)"
        )
    except (OSError, ValueError, KeyError):
        chip = ""
    return (
        f"held-out {heldout_bpb:.2f} bits per byte (its first {config.eval_batches} held-out "
        f"batches); gzip -9 stores the held-out files in {gzip_rate:.2f}{chip}. The defaults "
        "check the system in minutes; docs/capstone.md says how to train the model worth keeping."
    )
