"""README opens with the two commands and shows the phase table of the course map."""

from core import curriculum
from core.tpu import cloud_tpu

README = (curriculum.REPO_ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_opens_with_the_two_commands():
    first_block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["make lab", "make test"]
    # Nothing comes between the title and the two commands.
    assert README.split("\n\n")[1].startswith("```bash\nmake lab")


def test_readme_phase_table_matches_the_map():
    for number, phase in enumerate(curriculum.PHASES, start=1):
        row = (
            f"| {number} | {phase.title} | "
            + ", ".join(f"`{lesson.slug}`" for lesson in phase.lessons)
            + " |"
        )
        assert row in README, f"README phase table is out of date at phase {number}"


def test_makefile_targets_the_readme_names_exist():
    makefile = (curriculum.REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("lab", "test", "curriculum", "clean"):
        assert f"\n{target}:" in makefile


def test_readme_tpu_commands_come_from_core():
    """The TPU commands README shows are the ones core/tpu/cloud_tpu.py builds."""
    vm = cloud_tpu.TpuVm()  # the defaults README uses
    steps = cloud_tpu.workflow(vm, "out/virtual_devices_tpu.py", app="apps/virtual_devices.py")
    for step, command in steps:
        if command.startswith("gcloud"):
            assert command in README, f"README is out of date for step {step!r}"


def test_readme_shows_every_capstone_command():
    from capstones.byte_transformer import cli

    makefile = (curriculum.REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    assert "\ncapstone:" in makefile
    for command in cli.REGISTRY:
        assert f"$B {command} " in README, f"README's capstone section lacks {command!r}"


def test_readme_shows_every_pallas_capstone_command():
    from capstones.pallas_kernel import cli

    makefile = (curriculum.REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    assert "\npallas-capstone:" in makefile
    for command in cli.REGISTRY:
        assert f"$K {command} " in README, f"README's Pallas capstone section lacks {command!r}"


def test_readme_assessment_commands_parse():
    """Every `python -m core.assessment ...` line the README shows is a valid command."""
    import shlex

    from core.assessment import __main__ as grader

    lines = [
        line.split("#")[0].strip()
        for line in README.splitlines()
        if line.startswith(".venv/bin/python -m core.assessment ")
    ]
    assert len(lines) >= 5
    for line in lines:
        grader.build_parser().parse_args(shlex.split(line)[3:])
