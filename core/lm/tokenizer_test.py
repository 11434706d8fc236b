import numpy as np
import pytest

from core.lm import tokenizer

TEXTS = ["", "hello", "naïve café", "日本語のテキスト", "emoji 🙂🚀 and \n tabs\t", "a\0b"]


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip_and_bytes(text):
    tokens = tokenizer.encode(text)
    assert tokens.dtype == np.int32
    assert tokens.tolist() == list(text.encode("utf-8"))  # the independent reference
    assert tokenizer.decode(tokens) == text
    assert len(tokenizer.byte_table(text)) == len(text)


def test_non_ascii_takes_several_bytes():
    rows = tokenizer.byte_table("aé🙂")
    assert [len(r["bytes"].split()) for r in rows] == [1, 2, 4]
    assert rows[1]["code point"] == "U+00E9"


def test_decode_of_a_cut_character():
    cut = tokenizer.encode("é")[:1]
    with pytest.raises(UnicodeDecodeError):
        tokenizer.decode(cut)
    assert tokenizer.decode(cut, errors="replace") == "\ufffd"
    with pytest.raises(ValueError, match="256"):
        tokenizer.decode([300])
    with pytest.raises(TypeError):
        tokenizer.encode(b"bytes")


def random_documents(seed, count, max_len):
    rng = np.random.default_rng(seed)
    return [
        rng.integers(1, 256, size=rng.integers(1, max_len + 1)).astype(np.int32)
        for _ in range(count)
    ]


@pytest.mark.parametrize(
    "seed, count, max_len, seq_len", [(0, 5, 6, 8), (1, 12, 20, 16), (2, 3, 40, 7), (3, 1, 2, 2)]
)
def test_packing_places_every_token_once(seed, count, max_len, seq_len):
    documents = random_documents(seed, count, max_len)
    packed = tokenizer.pack_documents(documents, seq_len)
    b, t = packed.tokens_BT.shape
    assert t == seq_len
    covered = np.zeros((b, t), int)
    rebuilt = {i: [] for i in range(count)}
    for p in packed.placements:
        span = slice(p.start, p.start + p.length)
        covered[p.row, span] += 1
        rebuilt[p.document].append((p.piece, packed.tokens_BT[p.row, span]))
        assert np.all(packed.segment_ids_BT[p.row, span] == p.segment)
        np.testing.assert_array_equal(packed.positions_BT[p.row, span], np.arange(p.length))
    for i, document in enumerate(documents):
        np.testing.assert_array_equal(
            np.concatenate([c for _, c in sorted(rebuilt[i], key=lambda x: x[0])]), document
        )
    assert covered.max() == 1, "two pieces overlap"
    assert np.all((covered == 1) == (packed.segment_ids_BT != tokenizer.PAD_SEGMENT))
    assert np.all(packed.tokens_BT[covered == 0] == tokenizer.PAD_ID)
    assert packed.fill == pytest.approx(sum(map(len, documents)) / (b * t))
    # segments count up from 1 within a row, left to right
    for row in packed.segment_ids_BT:
        real = row[row != 0]
        assert np.all(np.diff(real) >= 0) and (real.size == 0 or real[0] == 1)


def test_packing_rows_and_errors():
    docs = [tokenizer.encode("abc"), tokenizer.encode("de")]
    packed = tokenizer.pack_documents(docs, 8, num_rows=3)
    assert packed.tokens_BT.shape == (3, 8)
    assert packed.segment_ids_BT[0].tolist() == [1, 1, 1, 2, 2, 0, 0, 0]
    assert packed.positions_BT[0].tolist() == [0, 1, 2, 0, 1, 0, 0, 0]
    with pytest.raises(ValueError, match="need 2 rows"):
        tokenizer.pack_documents([tokenizer.encode("abcdef")] * 2, 8, num_rows=1)
    with pytest.raises(ValueError, match="seq_len"):
        tokenizer.pack_documents(docs, 1)
    with pytest.raises(ValueError, match="1-D"):
        tokenizer.pack_documents([np.ones((2, 2))], 8)


def mask_reference(segments, causal):
    b, t = segments.shape
    mask = np.zeros((b, t, t), bool)
    for r in range(b):
        for i in range(t):
            for j in range(t):
                mask[r, i, j] = segments[r, i] == segments[r, j] and (j <= i or not causal)
    return mask


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_segment_mask_matches_loops(seed, causal):
    packed = tokenizer.pack_documents(random_documents(seed, 6, 9), 12)
    mask = np.asarray(tokenizer.segment_mask_BTS(packed.segment_ids_BT, causal))
    np.testing.assert_array_equal(mask, mask_reference(packed.segment_ids_BT, causal))
    assert np.all(mask.any(-1)), "every query sees at least itself"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_targets_count_only_real_next_tokens(seed):
    documents = random_documents(seed, 7, 15)
    packed = tokenizer.pack_documents(documents, 10)
    targets, weights = (
        np.asarray(a) for a in tokenizer.next_token_targets(packed.tokens_BT, packed.segment_ids_BT)
    )
    expected = np.zeros_like(weights)
    for p in packed.placements:
        expected[p.row, p.start : p.start + p.length - 1] = 1.0
        np.testing.assert_array_equal(
            targets[p.row, p.start : p.start + p.length - 1],
            packed.tokens_BT[p.row, p.start + 1 : p.start + p.length],
        )
    np.testing.assert_array_equal(weights, expected)
    assert weights.sum() == sum(p.length - 1 for p in packed.placements)
    with pytest.raises(ValueError, match="same"):
        tokenizer.next_token_targets(packed.tokens_BT, packed.segment_ids_BT[:, :-1])
