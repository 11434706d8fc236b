"""README's wheelhouse commands parse, and the host's one-line install fits one command line."""

import pathlib
import shlex

from tpu_scripts.wheelhouse import cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _commands():
    for line in README.splitlines():
        words = shlex.split(line.split(" && ")[0]) if "tpu_scripts wheelhouse" in line else []
        if words[:4] in (["python", "-m", "tpu_scripts", "wheelhouse"],
                         ["python3", "-m", "tpu_scripts", "wheelhouse"]):  # fmt: skip
            yield line, words[4:]


def test_every_wheelhouse_command_in_the_readme_parses():
    seen = set()
    for line, argv in _commands():
        args = cli.build_parser().parse_args(argv)  # exits 2 on a stale flag
        seen.add(args.action)
        if args.action == "install":
            assert args.target, line
    assert seen == {None, "install", "inventory", "profiles"}
    assert "\nwheelhouse: $(STAMP)" in (ROOT / "Makefile").read_text()


def test_an_offline_host_s_one_line_install_fits_one_command_line():
    line = next(
        line for line, argv in _commands() if argv[:1] == ["install"] and "/tmp/site" in line
    )
    assert len(line) <= 2000
    assert line.endswith("&& export PYTHONPATH=$PYTHONPATH:$PWD:/tmp/site")  # the host's JAX first
    assert ".wheelhouse/part-*" in line
