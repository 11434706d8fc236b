import math
import shlex
import subprocess

import pytest

from core import curriculum
from core.tpu import cloud_tpu, command_check

REPO = curriculum.REPO_ROOT


def _expected_chips_hosts(name: str) -> tuple[int, int]:
    """Closed form from the Cloud TPU pages: v5e/v6e names count chips, 8 per host; v5p names
    count TensorCores (2 per chip), 4 chips per host."""
    prefix, number = name.rsplit("-", 1)
    n = int(number)
    if prefix in ("v5litepod", "v6e"):
        return n, math.ceil(n / 8)
    assert prefix == "v5p", name
    return n // 2, math.ceil((n // 2) / 4)


@pytest.mark.parametrize("name", cloud_tpu.CREATABLE_TYPES)
def test_every_accelerator_type_has_closed_form_chips_and_hosts(name):
    accelerator = cloud_tpu.ACCELERATOR_TYPES[name]
    chips, hosts = _expected_chips_hosts(name)
    assert (accelerator.chips, accelerator.hosts) == (chips, hosts)
    assert accelerator.multi_host == (hosts > 1)
    assert (
        accelerator.generation
        == {"v5litepod": "v5e", "v6e": "v6e", "v5p": "v5p"}[name.rsplit("-", 1)[0]]
    )


def test_known_slices_from_the_docs():
    # Spot values straight from the v5e / v5p topology tables.
    table = {
        "v5litepod-8": (8, 1),
        "v5litepod-16": (16, 2),
        "v5litepod-256": (256, 32),
        "v5p-8": (4, 1),
        "v5p-16": (8, 2),
        "v5p-128": (64, 16),
        "v6e-1": (1, 1),
        "v6e-64": (64, 8),
    }
    for name, (chips, hosts) in table.items():
        accelerator = cloud_tpu.ACCELERATOR_TYPES[name]
        assert (accelerator.chips, accelerator.hosts) == (chips, hosts), name


def test_every_generation_has_zones_and_a_runtime():
    creatable = {cloud_tpu.ACCELERATOR_TYPES[name].generation for name in cloud_tpu.CREATABLE_TYPES}
    assert set(cloud_tpu.ZONES) == set(cloud_tpu.RUNTIME_VERSIONS) == creatable
    assert set(cloud_tpu.PROVISIONING) == {
        a.generation for a in cloud_tpu.ACCELERATOR_TYPES.values()
    }
    assert set(cloud_tpu.ALL_ZONES) == {z for zones in cloud_tpu.ZONES.values() for z in zones}


@pytest.mark.parametrize("name", ["jax-tpu-lab", "a", "t1", "a" * 63])
def test_good_names_pass(name):
    assert cloud_tpu.TpuVm(name=name).name == name


@pytest.mark.parametrize(
    "name", ["", "Tpu", "1tpu", "tpu-", "tpu_lab", "tpu lab", "a" * 64, "tpu;rm"]
)
def test_bad_name_states_the_rule(name):
    with pytest.raises(
        ValueError, match="lowercase letters, digits or '-', starting with a letter"
    ):
        cloud_tpu.TpuVm(name=name)


def test_unknown_type_lists_the_known_ones():
    with pytest.raises(
        ValueError, match="unknown accelerator type 'v5litepod-3'.*v5litepod-8.*v5p-8"
    ):
        cloud_tpu.TpuVm(accelerator_type="v5litepod-3")


@pytest.mark.parametrize(
    "accelerator_type, zone",
    [
        ("v5litepod-8", "us-east5-a"),
        ("v5p-8", "us-west4-a"),
        ("v6e-4", "us-central1-a"),
        ("v6e-4", "mars-1-a"),
    ],
)
def test_bad_zone_names_the_good_ones(accelerator_type, zone):
    generation = cloud_tpu.ACCELERATOR_TYPES[accelerator_type].generation
    with pytest.raises(ValueError) as info:
        cloud_tpu.TpuVm(accelerator_type=accelerator_type, zone=zone)
    message = str(info.value)
    assert repr(zone) in message
    for good in cloud_tpu.ZONES[generation]:
        assert good in message


@pytest.mark.parametrize("generation", list(cloud_tpu.ZONES))
def test_every_listed_zone_is_accepted(generation):
    accelerator_type = next(
        n for n, a in cloud_tpu.ACCELERATOR_TYPES.items() if a.generation == generation
    )
    for zone in cloud_tpu.ZONES[generation]:
        vm = cloud_tpu.TpuVm(accelerator_type=accelerator_type, zone=zone)
        assert vm.runtime_version == cloud_tpu.RUNTIME_VERSIONS[generation]


def test_runtime_of_another_generation_is_refused():
    with pytest.raises(ValueError, match="v6e image; a v5e slice .* needs 'v2-alpha-tpuv5-lite'"):
        cloud_tpu.TpuVm(runtime_version="v2-alpha-tpuv6e")
    vm = cloud_tpu.TpuVm(
        accelerator_type="v6e-8", zone="us-east1-d", runtime_version="v2-alpha-tpuv6e"
    )
    assert vm.runtime_version == "v2-alpha-tpuv6e"
    with pytest.raises(ValueError, match="runtime version"):
        cloud_tpu.TpuVm(runtime_version="v2 alpha; rm -rf")


@pytest.mark.parametrize("project", ["my-project", "abcdef", "example.com:my-project"])
def test_good_projects(project):
    assert f"--project={project}" in cloud_tpu.create_command(cloud_tpu.TpuVm(project=project))


@pytest.mark.parametrize("project", ["abc", "My-Project", "-project", "project-", "a b cdef"])
def test_bad_projects(project):
    with pytest.raises(ValueError, match="project id"):
        cloud_tpu.TpuVm(project=project)


def _flags(argv):
    return {w[2:].partition("=")[0]: w.partition("=")[2] for w in argv if w.startswith("--")}


def test_create_single_host_exact_argv():
    vm = cloud_tpu.TpuVm(name="lab-1", accelerator_type="v5litepod-8", zone="us-west4-a")
    assert cloud_tpu.create_command(vm) == [
        "gcloud",
        "compute",
        "tpus",
        "tpu-vm",
        "create",
        "lab-1",
        "--zone=us-west4-a",
        "--accelerator-type=v5litepod-8",
        "--version=v2-alpha-tpuv5-lite",
    ]


def test_create_multi_host_spot_and_project():
    vm = cloud_tpu.TpuVm(
        name="pod", accelerator_type="v5p-32", zone="us-east5-a", spot=True, project="proj-123"
    )
    argv = cloud_tpu.create_command(vm)
    assert argv[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "create", "pod"]
    assert argv[-1] == "--spot"
    assert _flags(argv) == {
        "zone": "us-east5-a",
        "project": "proj-123",
        "accelerator-type": "v5p-32",
        "version": "v2-alpha-tpuv5",
        "spot": "",
    }
    assert "--spot" not in cloud_tpu.create_command(cloud_tpu.TpuVm())


@pytest.mark.parametrize("project", ["", "proj-123"])
def test_project_flag_on_every_command_or_none(project):
    vm = cloud_tpu.TpuVm(project=project)
    commands = [
        cloud_tpu.create_command(vm),
        cloud_tpu.scp_command(vm, ["a.py"]),
        cloud_tpu.ssh_command(vm, "true"),
        cloud_tpu.delete_command(vm),
        cloud_tpu.describe_command(vm),
    ]
    for argv in commands:
        assert ([f"--project={project}"] if project else []) == [
            w for w in argv if w.startswith("--project")
        ]
        assert "--zone=us-west4-a" in argv


@pytest.mark.parametrize("accelerator_type", ["v5litepod-8", "v5litepod-32", "v6e-64"])
def test_scp_and_ssh_reach_all_workers(accelerator_type):
    zone = cloud_tpu.ZONES[cloud_tpu.ACCELERATOR_TYPES[accelerator_type].generation][0]
    vm = cloud_tpu.TpuVm(name="lab", accelerator_type=accelerator_type, zone=zone)
    scp = cloud_tpu.scp_command(vm, ["run.py", "dist/x.whl"])
    assert scp[5:8] == ["run.py", "dist/x.whl", "lab:jax-tpu-lab/"] and "--worker=all" in scp
    ssh = cloud_tpu.ssh_command(vm, "python run.py")
    assert ssh[5] == "lab" and "--worker=all" in ssh and ssh[-1] == "--command=python run.py"
    with pytest.raises(ValueError, match="at least one"):
        cloud_tpu.scp_command(vm, [])
    with pytest.raises(ValueError, match="command"):
        cloud_tpu.ssh_command(vm, "  ")


@pytest.mark.parametrize(
    "accelerator_type, good, bad",
    [
        ("v5litepod-8", ["all", "0", 0], ["1", "0-1", "0,1", "-1", "x", "", "1-0"]),
        ("v5litepod-32", ["all", "3", "0,2", "1-3", 2], ["4", "0-4", "0,4", "a-b"]),
        ("v5p-16", ["0", "1", "0-1"], ["2"]),
    ],
)
def test_ssh_worker_validation(accelerator_type, good, bad):
    zone = cloud_tpu.ZONES[cloud_tpu.ACCELERATOR_TYPES[accelerator_type].generation][0]
    vm = cloud_tpu.TpuVm(accelerator_type=accelerator_type, zone=zone)
    hosts = vm.accelerator.hosts
    for worker in good:
        assert f"--worker={worker}" in cloud_tpu.ssh_command(vm, "true", worker=worker)
    for worker in bad:
        with pytest.raises(ValueError, match=rf"has {hosts} worker.*0\.\.{hosts - 1}"):
            cloud_tpu.ssh_command(vm, "true", worker=worker)


def test_delete_is_quiet_and_describe_names_the_tpu():
    vm = cloud_tpu.TpuVm(name="gone")
    assert cloud_tpu.delete_command(vm)[4:] == ["delete", "gone", "--zone=us-west4-a", "--quiet"]
    assert cloud_tpu.describe_command(vm)[4:] == ["describe", "gone", "--zone=us-west4-a"]


@pytest.mark.parametrize(
    "argv",
    [
        ["gcloud", "x", "--command=a 'b' \"c\" $HOME ~/d [e]"],
        ["a b", "--zone=z", "--flag", "-x", "--k=", "it's"],
        [],
    ],
)
def test_shell_join_round_trips_through_shlex(argv):
    assert shlex.split(cloud_tpu.shell_join(argv)) == argv


def test_shell_join_quotes_only_flag_values():
    assert cloud_tpu.shell_join(["ssh", "--command=ls -l"]) == "ssh --command='ls -l'"


@pytest.mark.parametrize(
    "vm_kwargs, flags",
    [
        ({}, ""),
        (
            {
                "name": "pod-run",
                "accelerator_type": "v6e-32",
                "zone": "us-east5-b",
                "spot": True,
                "project": "proj-9",
            },
            "--rows 4 --note 'two words'",
        ),
        ({"accelerator_type": "v5p-64", "zone": "us-central1-a"}, "--seed=3"),
    ],
)
def test_workflow_round_trips_chosen_values(vm_kwargs, flags):
    vm = cloud_tpu.TpuVm(**vm_kwargs)
    steps = cloud_tpu.workflow(vm, "dist/lesson_tpu.py", extra_flags=flags, app="apps/lesson.py")
    lines = [line for _, line in steps]
    words = [shlex.split(line) for line in lines]
    assert words[0] == [
        "python",
        "-m",
        "tpu_scripts",
        "export",
        "apps/lesson.py",
        "-o",
        "dist/lesson_tpu.py",
    ]
    gcloud = [w for w in words if w[0] == "gcloud"]
    assert [w[4] for w in gcloud] == ["create", "ssh", "scp", "ssh", "delete", "describe"]
    for w in gcloud:
        positionals = [x for x in w[5:] if not x.startswith("--")]
        name = positionals[-1].split(":")[0] if w[4] == "scp" else positionals[0]
        assert name == vm.name and f"--zone={vm.zone}" in w
        assert (f"--project={vm.project}" in w) == bool(vm.project)
    assert ("--spot" in gcloud[0]) == vm.spot
    run = gcloud[3]
    assert "--worker=all" in run
    command = next(w for w in run if w.startswith("--command=")).removeprefix("--command=")
    assert command == cloud_tpu.bootstrap_remote_command("dist/lesson_tpu.py", extra_flags=flags)
    remote_words = shlex.split(command)
    tail = remote_words[remote_words.index("lesson_tpu.py") :]
    assert tail == ["lesson_tpu.py", *shlex.split(flags)]
    # The remote line is valid shell (bash -n parses without running anything).
    assert subprocess.run(["bash", "-n", "-c", command]).returncode == 0
    problems = command_check.workflow_problems(
        lines,
        name=vm.name,
        zone=vm.zone,
        accelerator_type=vm.accelerator_type,
        version=vm.runtime_version,
        spot=vm.spot,
        project=vm.project,
        script="dist/lesson_tpu.py",
    )
    assert problems == []


def test_bootstrap_rejects_bad_inputs():
    with pytest.raises(ValueError, match="do not parse"):
        cloud_tpu.bootstrap_remote_command("run.py", extra_flags="--note 'unclosed")
    with pytest.raises(ValueError, match="not a wheel"):
        cloud_tpu.bootstrap_remote_command("run.py", wheel="dist/x.tar.gz")


def _bash_words(text: str) -> list[str]:
    """The words bash itself reads from ``text`` (printf prints each; nothing else runs)."""
    argv = ["bash", "-c", "printf '%s\\0' " + text]
    result = subprocess.run(argv, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("\0")[:-1]


@pytest.mark.parametrize("width", [40, 76])
@pytest.mark.parametrize(
    "vm_kwargs, flags",
    [
        ({}, ""),
        (
            {
                "name": "pod-run",
                "accelerator_type": "v6e-32",
                "spot": True,
                "project": "proj-9",
                "zone": "us-east5-b",
            },
            '--rows 4 --note "it\'s two words"',
        ),
    ],
)
def test_display_command_is_the_same_command_on_several_lines(vm_kwargs, flags, width):
    vm = cloud_tpu.TpuVm(**vm_kwargs)
    for _step, line in cloud_tpu.workflow(vm, "dist/l_tpu.py", extra_flags=flags, app="apps/l.py"):
        shown = cloud_tpu.display_command(line, width=width)
        # The reference is the shell: bash reads the shown text as the words of the one line.
        words = shlex.split(line)
        assert _bash_words(shown) == words, shown
        assert cloud_tpu.command_words(shown) == words
        rows = shown.splitlines()
        assert len(rows) == 1 or len(line) > width
        for row in rows:  # only a single word too long to split may pass the width
            assert len(row) <= width or len(cloud_tpu._raw_words(row.removesuffix(" \\"))) == 1, row
        assert all(row.startswith("    ") for row in rows[1:])


def test_display_command_keeps_short_lines_and_rejects_open_quotes():
    assert cloud_tpu.display_command("gcloud a --b=c") == "gcloud a --b=c"
    with pytest.raises(ValueError, match="unbalanced quote"):
        cloud_tpu.display_command("gcloud " + "x " * 50 + "--command='open")


@pytest.mark.parametrize("name", [n for n in cloud_tpu.ACCELERATOR_TYPES if n.startswith("tpu7x")])
def test_ironwood_slices_are_named_by_topology_with_four_chips_per_vm(name):
    accelerator = cloud_tpu.ACCELERATOR_TYPES[name]
    chips = math.prod(int(d) for d in name.split(":")[1].split("x"))
    assert (accelerator.chips, accelerator.hosts) == (chips, chips // 4)
    assert name not in cloud_tpu.CREATABLE_TYPES


def test_ironwood_is_refused_by_the_cloud_tpu_api_with_the_documented_way():
    with pytest.raises(ValueError, match="not created through the Cloud TPU API") as refusal:
        cloud_tpu.TpuVm(accelerator_type="tpu7x:2x2x1")
    assert "Kubernetes Engine" in str(refusal.value) and "Compute Engine" in str(refusal.value)
    assert cloud_tpu.provisioning_problem("v6e") is None
    with pytest.raises(ValueError, match="v5litepod-8") as unknown:
        cloud_tpu.TpuVm(accelerator_type="v7x-8")
    assert "tpu7x" not in str(unknown.value), "the choices offered are the creatable ones"


def test_create_with_labels_appends_one_labels_flag():
    vm = cloud_tpu.TpuVm(labels=(("team", "ml"), ("job", "sweep-1"), ("cost-center", "cc_7")))
    argv = cloud_tpu.create_command(vm)
    assert argv[-1] == "--labels=team=ml,job=sweep-1,cost-center=cc_7"
    assert command_check.parse_tpu_command(cloud_tpu.shell_join(argv)).flags["labels"] == (
        "team=ml,job=sweep-1,cost-center=cc_7"
    )
    assert not any(a.startswith("--labels") for a in cloud_tpu.create_command(cloud_tpu.TpuVm()))


# The SDK's own rule (googlecloudsdk/command_lib/util/args/labels_util.py, SDK 528): key PCRE
# [\p{Ll}\p{Lo}][\p{Ll}\p{Lo}\p{N}_-]{0,62}, value [\p{Ll}\p{Lo}\p{N}_-]{0,63}; restricted to
# ASCII here, written independently of cloud_tpu's regexes.
def _sdk_key_ok(key):
    return (
        1 <= len(key) <= 63
        and key[0].islower()
        and all(c in "_-" or c.isdigit() or (c.isascii() and c.islower()) for c in key)
    )


def _sdk_value_ok(value):
    return len(value) <= 63 and all(
        c in "_-" or c.isdigit() or (c.isascii() and c.islower()) for c in value
    )


@pytest.mark.parametrize(
    "key, value",
    [
        ("team", "ml"), ("a", ""), ("cost-center", "cc_1"), ("k" * 63, "v" * 63),
        ("k" * 64, "v"), ("k", "v" * 64), ("Team", "x"), ("team", "X"), ("1a", "x"),
        ("_a", "x"), ("a.b", "x"), ("a", "b c"), ("", "x"), ("a", "é"),
        ("team\n", "ml"), ("team", "ml\n"),  # `$` matched before a trailing newline
    ],
)  # fmt: skip
def test_label_rules_agree_with_the_sdk_rule(key, value):
    ok = _sdk_key_ok(key) and _sdk_value_ok(value)
    assert (cloud_tpu.label_problems([(key, value)]) == []) is ok


def test_label_counts_and_duplicates():
    assert cloud_tpu.label_problems([(f"k{i}", "v") for i in range(64)]) == []
    assert "at most 64" in cloud_tpu.label_problems([(f"k{i}", "v") for i in range(65)])[0]
    assert "twice" in cloud_tpu.label_problems([("a", "1"), ("a", "2")])[0]
    with pytest.raises(ValueError, match="KEY=VALUE"):
        cloud_tpu.parse_labels(["team"])
    with pytest.raises(ValueError, match="labels"):
        cloud_tpu.TpuVm(labels=(("Team", "x"),))
