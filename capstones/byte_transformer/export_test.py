"""export: six endpoints reloaded in a fresh process reproduce the in-process outputs bit
for bit; damaged or mismatched artifacts are refused before use, each with its own error."""

import contextlib
import hashlib
import io
import json
import pathlib
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from capstones.byte_transformer import artifact_files, cli, export, kv_cache
from capstones.byte_transformer import config as config_lib
from core import runtime
from core.lm import transformer

TINY = config_lib.Config(
    d_model=32, num_heads=4, num_layers=2, max_len=64, seq_len=32, batch_size=2,
    max_files=4, max_bytes=2048,
)  # fmt: skip
PREFILL_LEN, CAPACITY, BATCH = 8, 16, 2


@pytest.fixture(scope="module")
def model():
    return transformer.TinyLM(TINY.model_config(), jax.random.key(TINY.seed))


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    """(artifact dir, the export command's stdout): exported once through the CLI."""
    out = tmp_path_factory.mktemp("artifacts")
    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(stdout):
        patch.setattr(kv_cache, "_load_model", lambda run_dir: (TINY, model))
        argv = ["export", "run_dir=unused", f"out={out}", f"prefill_len={PREFILL_LEN}"]
        status = cli.main([*argv, f"capacity={CAPACITY}", f"batch={BATCH}"])
    assert status == 0
    return out, stdout.getvalue()


@pytest.fixture(scope="module")
def in_process(model):
    """probe_outputs of the original functions under jax.jit in this process."""
    weights = export.flat_weights(model)
    functions = {
        p: [jax.jit(f) for f in export.endpoint_functions(model, p, CAPACITY)]
        for p in kv_cache.PRECISIONS
    }
    shapes = {"batch": BATCH, "prefill_len": PREFILL_LEN, "capacity": CAPACITY}
    return export.probe_outputs(
        lambda p, tokens, lengths: functions[p][0](weights, tokens, lengths),
        lambda p, token, cache: functions[p][1](weights, token, cache),
        kv_cache.PRECISIONS,
        shapes,
    )


def _copy(exported, tmp_path) -> pathlib.Path:
    target = tmp_path / "copy"
    shutil.copytree(exported[0], target)
    return target


def _edit_manifest(directory: pathlib.Path, edit, fix_hash: bool = True) -> None:
    path = directory / artifact_files.MANIFEST
    manifest = json.loads(path.read_text())
    edit(manifest)
    if fix_hash:  # keep the manifest self-consistent so the check under test is reached
        manifest["manifest_sha256"] = hashlib.sha256(
            json.dumps(
                {k: v for k, v in manifest.items() if k != "manifest_sha256"},
                sort_keys=True,
                separators=(",", ":"),
            ).encode()
        ).hexdigest()
    path.write_text(json.dumps(manifest))


# --- what was written -----------------------------------------------------------------------


def test_manifest_lists_every_file_with_its_hash(exported, model):
    directory, stdout = exported
    manifest = json.loads((directory / artifact_files.MANIFEST).read_text())
    assert (
        set(manifest["artifacts"]) == set(artifact_files.ENDPOINTS)
        and len(artifact_files.ENDPOINTS) == 6
    )
    for entry in [manifest["weights"], *manifest["artifacts"].values()]:
        data = (directory / entry["file"]).read_bytes()
        assert entry["bytes"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [artifact_files.MANIFEST, artifact_files.WEIGHTS]
        + [f"{n}.jax_exported" for n in artifact_files.ENDPOINTS]
    )  # no temporary files left behind
    assert manifest["versions"]["jax"] == jax.__version__
    assert manifest["config"] == TINY.to_dict()
    assert manifest["shapes"] == {
        "batch": BATCH, "prefill_len": PREFILL_LEN, "capacity": CAPACITY, "vocab_size": 256,
    }  # fmt: skip
    prefill = manifest["artifacts"]["prefill_int8"]
    assert prefill["platforms"] == ["cpu"]
    assert {"name": "tokens_BP", "shape": [BATCH, PREFILL_LEN], "dtype": "int32"} in prefill[
        "inputs"
    ]
    assert {
        "name": "cache/k_scale_LBSH",
        "shape": [2, BATCH, CAPACITY, 4],
        "dtype": "float32",
    } in prefill["outputs"]
    # the weights file, read independently, holds the model's parameters
    with np.load(directory / artifact_files.WEIGHTS, allow_pickle=False) as archive:
        np.testing.assert_array_equal(
            archive["blocks.1.attn.wq"], np.asarray(model.blocks[1].attn.wq[...])
        )
        assert (
            len(archive.files) == len(manifest["weights"]["leaves"]) == 3 + 2 + 12 * 2
        )  # embeddings, head, final norm, blocks
    assert "prefill_int8" in stdout and "reload: verified" in stdout


# --- reproduction in a fresh process ---------------------------------------------------------


def test_fresh_process_reproduces_outputs_bitwise(exported, in_process, tmp_path):
    out = tmp_path / "replayed.npz"
    code = (
        "import sys; from capstones.byte_transformer import export; "
        "export.replay(sys.argv[1], sys.argv[2])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(exported[0]), str(out)],
        env=runtime.child_env(JAX_PLATFORMS="cpu"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    replayed = export.load_outputs(out)
    assert set(replayed) == set(in_process)
    for name in artifact_files.ENDPOINTS:  # every endpoint, logits and every cache array
        assert any(k.startswith(name + "/") and k.endswith("logits_BV") for k in replayed)
    for key, ours in in_process.items():
        theirs = replayed[key]
        assert theirs.dtype == ours.dtype and theirs.shape == ours.shape, key
        assert np.array_equal(theirs.view(np.uint8), ours.view(np.uint8)), f"{key} differs"
    assert in_process["decode_bf16/0/cache/k_LBSHK"].dtype.name == "bfloat16"
    assert in_process["decode_int8/1/cache/v_LBSHK"].dtype == np.int8


def test_loaded_endpoints_match_kv_cache(exported, model):
    artifacts = artifact_files.load_artifacts(exported[0])
    tokens, lengths = export.probe_inputs(artifacts.shapes)
    logits, cache = artifacts.prefill("int8", tokens, lengths)
    ours, our_cache = kv_cache.prefill(model, tokens, lengths, "int8", CAPACITY)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(ours), atol=1e-5)
    np.testing.assert_array_equal(np.asarray(cache["length_B"]), lengths)
    np.testing.assert_array_equal(np.asarray(cache["k_LBSHK"]), np.asarray(our_cache.k_LBSHK))


# --- refusals -------------------------------------------------------------------------------


def test_tampered_artifact_bytes(exported, tmp_path):
    directory = _copy(exported, tmp_path)
    path = directory / "decode_int8.jax_exported"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(artifact_files.ChecksumError, match="decode_int8.jax_exported"):
        artifact_files.load_artifacts(directory)


def test_wrong_hash_in_manifest(exported, tmp_path):
    directory = _copy(exported, tmp_path)
    _edit_manifest(directory, lambda m: m["artifacts"]["prefill_fp32"].update(sha256="0" * 64))
    with pytest.raises(artifact_files.ChecksumError, match="sha256 of prefill_fp32"):
        artifact_files.load_artifacts(directory)


def test_edited_manifest_without_its_hash(exported, tmp_path):
    directory = _copy(exported, tmp_path)
    _edit_manifest(directory, lambda m: m["shapes"].update(capacity=99), fix_hash=False)
    with pytest.raises(artifact_files.ChecksumError, match="manifest was edited"):
        artifact_files.load_artifacts(directory)


def test_manifest_shapes_not_matching_the_artifact(exported, tmp_path):
    directory = _copy(exported, tmp_path)

    def edit(manifest):
        for leaf in manifest["artifacts"]["prefill_bf16"]["inputs"]:
            if leaf["name"] == "tokens_BP":
                leaf["shape"] = [BATCH, PREFILL_LEN + 1]

    _edit_manifest(directory, edit)
    with pytest.raises(
        artifact_files.SignatureMismatchError, match=r"prefill_bf16 inputs .*tokens_BP"
    ):
        artifact_files.load_artifacts(directory)


def test_unsupported_platform(exported, tmp_path, model):
    with pytest.raises(
        artifact_files.UnsupportedPlatformError, match=r"built for \['cpu'\], this process runs tpu"
    ):
        artifact_files.load_artifacts(exported[0], expected_platform="tpu")
    # a real TPU-only export (lowered for TPU on this CPU host) is refused here
    tpu_dir = tmp_path / "tpu"
    export.export_artifacts(
        model, TINY.to_dict(), tpu_dir, 4, 8, platforms=("tpu",), precisions=("fp32",)
    )
    with pytest.raises(artifact_files.UnsupportedPlatformError) as error:
        artifact_files.load_artifacts(tpu_dir)
    message = str(error.value)
    assert message.startswith("unsupported platform: artifact ")
    assert "built for ['tpu'], this process runs cpu" in message


def test_missing_files(exported, tmp_path):
    directory = _copy(exported, tmp_path)
    (directory / "decode_bf16.jax_exported").unlink()
    with pytest.raises(
        artifact_files.MissingArtifactError, match="decode_bf16.jax_exported .*missing"
    ):
        artifact_files.load_artifacts(directory)
    (directory / artifact_files.MANIFEST).unlink()
    with pytest.raises(artifact_files.MissingArtifactError, match="no manifest.json"):
        artifact_files.load_artifacts(directory)


def test_malformed_manifest(exported, tmp_path):
    directory = _copy(exported, tmp_path)
    _edit_manifest(directory, lambda m: m.pop("weights"))
    with pytest.raises(artifact_files.ManifestSchemaError, match="lacks 'weights'"):
        artifact_files.load_artifacts(directory)
    _edit_manifest(directory, lambda m: m.update(weights={"file": "../w.npz"}))
    with pytest.raises(artifact_files.ManifestSchemaError, match="lacks 'sha256'"):
        artifact_files.load_artifacts(directory)
    (directory / artifact_files.MANIFEST).write_text("{not json")
    with pytest.raises(artifact_files.ManifestSchemaError, match="not valid JSON"):
        artifact_files.load_artifacts(directory)


def test_weights_not_matching_the_manifest(exported, tmp_path):
    directory = _copy(exported, tmp_path)
    buffer = io.BytesIO()
    np.savez(buffer, head=np.zeros((32, 256), np.float32))  # a different set of leaves
    data = buffer.getvalue()
    (directory / artifact_files.WEIGHTS).write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    _edit_manifest(directory, lambda m: m["weights"].update(sha256=digest, bytes=len(data)))
    with pytest.raises(artifact_files.WeightsMismatchError, match="lacks"):
        artifact_files.load_artifacts(directory)


def test_wrong_inputs_at_call_time(exported):
    artifacts = artifact_files.load_artifacts(exported[0])
    tokens, lengths = export.probe_inputs(artifacts.shapes)
    with pytest.raises(
        artifact_files.InputMismatchError,
        match=r"tokens_BP must be int32\[2, 8\], got int64\[2, 8\]",
    ):
        artifacts.prefill("fp32", tokens.astype(np.int64), lengths)
    with pytest.raises(
        artifact_files.InputMismatchError,
        match=r"tokens_BP must be int32\[2, 8\], got int32\[2, 9\]",
    ):
        artifacts.prefill("fp32", np.zeros((2, 9), np.int32), lengths)
    with pytest.raises(artifact_files.InputMismatchError, match="lengths_B must be int32"):
        artifacts.prefill("fp32", tokens, lengths.astype(np.float32))
    cache = kv_cache.init_cache(TINY.model_config(), BATCH, CAPACITY, "fp32").as_dict()
    with pytest.raises(artifact_files.InputMismatchError, match="expected inputs"):
        artifacts.decode("int8", np.zeros((2,), np.int32), cache)  # no scales: an fp32 cache
    with pytest.raises(artifact_files.InputMismatchError, match=r"cache/k_LBSHK must be bfloat16"):
        artifacts.decode("bf16", np.zeros((2,), np.int32), cache)
    with pytest.raises(artifact_files.ArtifactError, match="no endpoint"):
        artifacts.call("prefill_fp8", tokens, lengths)


def test_error_classes_share_one_base():
    for error in (
        artifact_files.MissingArtifactError, artifact_files.ManifestSchemaError,
        artifact_files.ChecksumError, artifact_files.SignatureMismatchError,
        artifact_files.UnsupportedPlatformError, artifact_files.WeightsMismatchError,
        artifact_files.InputMismatchError, artifact_files.InputOutOfRangeError,
    ):  # fmt: skip
        assert issubclass(error, artifact_files.ArtifactError)


def test_export_command_rejects_bad_shapes(model, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(kv_cache, "_load_model", lambda run_dir: (TINY, model))
    argv = ["export", "run_dir=unused", f"out={tmp_path}", "prefill_len=32", "capacity=16"]
    assert cli.main(argv) == 2
    assert "prefill_len (32) <= capacity (16)" in capsys.readouterr().err


# --- values outside the contract (issue 12) ---------------------------------------------------


def test_values_outside_the_contract_are_refused(exported):
    """Shapes and dtypes right, values wrong: the loader's check names endpoint, field, bound
    (prefill once clipped lengths [0, 4] to [1, 4] silently)."""
    artifacts = artifact_files.load_artifacts(exported[0])
    tokens, lengths = export.probe_inputs(artifacts.shapes)
    for bad_lengths in ([0, 4], [4, PREFILL_LEN + 1], [-2, 1]):
        with pytest.raises(
            artifact_files.InputOutOfRangeError,
            match=rf"prefill_fp32: lengths_B must lie in \[1, {PREFILL_LEN}\] \(prompt lengths",
        ):
            artifacts.prefill("fp32", tokens, np.array(bad_lengths, np.int32))
    for bad in (256, -1):
        wrong = tokens.copy()
        wrong[1, 3] = bad
        with pytest.raises(
            artifact_files.InputOutOfRangeError,
            match=rf"prefill_bf16: tokens_BP must lie in \[0, 255\].*got \[{bad}\]",
        ):
            artifacts.prefill("bf16", wrong, lengths)
    logits, cache = artifacts.prefill("int8", tokens, lengths)
    with pytest.raises(
        artifact_files.InputOutOfRangeError,
        match=r"decode_int8: token_B must lie in \[0, 255\].*\[256\]",
    ):
        artifacts.decode("int8", np.array([3, 256], np.int32), cache)
    full = {**cache, "length_B": np.array([1, CAPACITY], np.int32)}
    with pytest.raises(
        artifact_files.InputOutOfRangeError,
        match=rf"decode_int8: cache/length_B must lie in \[0, {CAPACITY - 1}\]",
    ):
        artifacts.decode("int8", np.array([3, 4], np.int32), full)
    # the bounds themselves are inside the contract
    edge = np.array([1, PREFILL_LEN], np.int32)
    artifacts.prefill("fp32", tokens, edge)
    last = {**cache, "length_B": np.array([0, CAPACITY - 1], np.int32)}
    artifacts.decode("int8", np.array([0, 255], np.int32), last)
