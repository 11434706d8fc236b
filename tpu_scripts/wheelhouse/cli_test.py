"""The wheelhouse commands README and the docs pages show parse, and the host's one-line install
fits one command line."""

import pathlib
import shlex

import pytest

from tpu_scripts.wheelhouse import cli

ROOT = pathlib.Path(__file__).resolve().parents[2]


def manual_text(root: pathlib.Path = ROOT) -> str:
    """README.md and every docs/*.md page, one text (the wheelhouse lives on a page of docs/)."""
    paths = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return "\n".join(path.read_text(encoding="utf-8") for path in paths)


def _commands(text: str):
    for line in text.splitlines():
        words = shlex.split(line.split(" && ")[0]) if "tpu_scripts wheelhouse" in line else []
        if words[:4] in (["python", "-m", "tpu_scripts", "wheelhouse"],
                         ["python3", "-m", "tpu_scripts", "wheelhouse"]):  # fmt: skip
            yield line, words[4:]


def test_every_wheelhouse_command_in_the_manual_parses():
    seen = set()
    for line, argv in _commands(manual_text()):
        args = cli.build_parser().parse_args(argv)  # exits 2 on a stale flag
        seen.add(args.action)
        if args.action == "install":
            assert args.target, line
    assert seen == {None, "install", "inventory", "profiles"}
    assert "\nwheelhouse: $(STAMP)" in (ROOT / "Makefile").read_text()


def test_a_stale_command_on_a_docs_page_is_read_and_refused(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# x\n", encoding="utf-8")
    (tmp_path / "docs" / "page.md").write_text(
        "```bash\npython -m tpu_scripts wheelhouse --no-such-flag\n```\n", encoding="utf-8"
    )
    [(_line, argv)] = _commands(manual_text(tmp_path))
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(argv)


def test_an_offline_host_s_one_line_install_fits_one_command_line():
    line = next(
        line
        for line, argv in _commands(manual_text())
        if argv[:1] == ["install"] and "/tmp/site" in line
    )
    assert len(line) <= 2000
    assert line.endswith("&& export PYTHONPATH=$PYTHONPATH:$PWD:/tmp/site")  # the host's JAX first
    assert ".wheelhouse/part-*" in line
