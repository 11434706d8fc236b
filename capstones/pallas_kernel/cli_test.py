"""The command line refuses bad key=value items with exit status 2 and writes nothing."""

from __future__ import annotations

import pytest

from capstones.pallas_kernel import cli


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["agreement", "interpret=gpu"], "interpret must be one of tpu, hlo"),
        (["agreement", "seed"], "expected key=value"),
        (["agreement", "sed=1"], "did you mean seed?"),
        (["agreement", "quick=maybe"], "quick takes true or false"),
        (["objective", "seeds=0"], "seeds must be in 1..16"),
        (["objective", "compute_dtype=bfloat16"], "float32 models without dropout"),
        (["objective", "seq_len=40"], "multiple of the block 16"),
        (["objective", "num_heads=3"], "num_heads=3 must divide d_model=32"),
        (["profile", "preset=huge"], "preset must be one of small, capstone"),
        (["profile", "steps=0"], "steps must be in 1..100"),
        (["partition", "topologies=v4:2x2"], "topologies must be one of"),
        (["partition", "ts=100"], "multiple of 128"),
        (["partition", "ts=a,b"], "comma-separated ints"),
        (["report", "sections=agreement,speed"], "sections must be one of"),
        (["report", "d_model=64"], "unknown option 'd_model'"),
    ],
)
def test_bad_options_exit_2_and_write_nothing(argv, words, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main([*argv, f"out={out}"]) == 2
    assert words in capsys.readouterr().err
    assert not out.exists()


def test_usage_and_help(capsys):
    assert cli.main([]) == 2
    assert cli.main(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    assert all(name in text for name in cli.REGISTRY)
    assert cli.main(["profile", "--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: {cli.PROG} profile") and "d_model" in text


def test_interpret_flag_maps_through_the_one_kernel_mapping():
    import jax

    from capstones.pallas_kernel import common

    if jax.default_backend() != "tpu":
        assert common.interpret_mode("tpu").detect_races  # TPU interpret mode
        assert common.interpret_mode("hlo") is True
    with pytest.raises(ValueError, match="'mosaic'"):
        common.interpret_mode("mosaic")
