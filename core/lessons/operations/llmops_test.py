"""The LLMOps lesson's pieces: the prompt registry (hashes, aliases, diffs, tampering), the
evaluation suite (held-out loss == NumPy float64; the behavioural claim over 3 seeds), and
the request traces through the loopback model service (structure, ids, the access log)."""

import copy
import socket

import numpy as np
import pytest

from core import numerics
from core.lessons.operations import llmops

CLAIM_SEEDS = (0, 1, 2)
TRAIN_STEPS = 150  # the app's default
MIN_EXACT_MATCH = 0.9  # the training-format prompt continues the pattern (app's claim)


def test_registry_versions_are_content_hashed_and_aliased(tmp_path):
    reg = llmops.Registry(tmp_path)
    v1 = reg.register("pattern", "{pattern}", "bare")
    v2 = reg.register("pattern", "rep: {pattern}", "the training format")
    assert (v1.version, v2.version) == (1, 2)
    assert reg.register("pattern", "{pattern}").version == 1  # same content, same version
    assert [v.sha256 for v in reg.versions("pattern")] == [
        llmops.template_hash("{pattern}"), llmops.template_hash("rep: {pattern}")
    ]  # fmt: skip
    reg.set_alias("pattern", "production", 2)
    assert reg.get("pattern", "production") == v2 == reg.get("pattern", "2")
    assert "-{pattern}" in reg.diff("pattern", 1, 2) and "+rep: {pattern}" in reg.diff(
        "pattern", 1, "production"
    )
    assert not list(tmp_path.rglob("*.tmp*"))  # atomic writes leave no temp file


def test_registry_refuses_bad_input_and_tampering(tmp_path):
    reg = llmops.Registry(tmp_path)
    for template in ("no slot", "{pattern}{pattern}", "a very long prefix: {pattern}"):
        with pytest.raises(ValueError):
            reg.register("p", template)
    with pytest.raises(ValueError, match="prompt name"):
        reg.register("Bad Name", "{pattern}")
    reg.register("p", "{pattern}")
    with pytest.raises(ValueError, match="no version 3"):
        reg.set_alias("p", "production", 3)
    with pytest.raises(ValueError, match="no alias"):
        reg.get("p", "staging")
    path = tmp_path / "p" / "v0001.json"
    path.write_text(path.read_text().replace("{pattern}", "x{pattern}"))
    with pytest.raises(ValueError, match="sha256"):
        reg.versions("p")
    assert list((tmp_path / "p").glob("*.json")) == [path]
    assert not (tmp_path / "Bad Name").exists()  # nothing written before validation


@pytest.fixture(scope="module")
def models():
    return {seed: llmops.train(TRAIN_STEPS, seed)[0] for seed in CLAIM_SEEDS}


@pytest.mark.parametrize("seed", CLAIM_SEEDS)
def test_heldout_loss_matches_numpy_and_the_training_format_wins(models, seed):
    """Over 3 seeds: the held-out loss equals a NumPy float64 cross-entropy of the logits;
    the training-format prompt continues the pattern (>= 90 %), the bare one does worse."""
    bare = llmops.evaluate(models[seed], "{pattern}", 1, 16, seed)
    trained = llmops.evaluate(models[seed], "rep: {pattern}", 2, 16, seed)
    for e in (bare, trained):
        want = llmops.numpy_loss(e.heldout_logits, e.heldout_batch)
        assert numerics.scaled_max_error(np.float64(e.heldout_loss), want) <= numerics.tolerance(
            "float32"
        )
    assert trained.exact_match >= MIN_EXACT_MATCH > bare.exact_match
    assert trained.heldout_loss < bare.heldout_loss


def test_greedy_in_row_equals_the_course_greedy_decoder(models):
    from core.lm import generate

    prompts = np.stack([llmops.tokenizer.encode(f"rep: {p * 2}") for p in ("abc", "hhg")])
    want = generate.greedy_without_cache(models[1], prompts, 6)
    np.testing.assert_array_equal(llmops.greedy_in_row(models[1], prompts, 6), want)


def test_traces_follow_each_request_through_the_service(models):
    prompts = ["rep: abcabc", "rep: hgahga", "rep: ddcddc"]
    traced = llmops.serve_and_trace(models[0], prompts, 4)
    assert [r["status"] for r in traced.responses] == [200, 200, 200]
    assert [r["request_id"] for r in traced.responses] == ["llmops-0", "llmops-1", "llmops-2"]
    assert len({r["trace_id"] for r in traced.responses}) == 3
    checked = llmops.trace_problems(traced, 4)
    assert checked["problems"] == [] and checked["log_excess_ms"] == 0.0
    assert traced.responses[0]["text"] == "abca"
    assert all(r["path"] == "/generate" for r in traced.access_log)
    broken = copy.deepcopy(traced)
    broken.spans = [s for s in broken.spans if s["name"] != "decode"]
    assert any("expected" in p for p in llmops.trace_problems(broken, 4)["problems"])
    late = copy.deepcopy(traced)
    late.access_log[0]["ms"] += 1000.0
    assert llmops.trace_problems(late, 4)["log_excess_ms"] > 900


def test_the_server_stops_and_frees_its_port(models, monkeypatch):
    bound = []
    real = socket.create_server

    def spy(address, *args, **kwargs):
        sock = real(address, *args, **kwargs)
        bound.append(sock.getsockname())
        return sock

    monkeypatch.setattr(llmops.socket, "create_server", spy)
    llmops.serve_and_trace(models[0], ["rep: abcabc"], 2)
    (host, port) = bound[0][:2]
    assert host == "127.0.0.1"
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=1).close()
