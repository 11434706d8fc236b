"""TPU compiles on a CPU host (libtpu). Each compile takes seconds: results are cached per
process (lru_cache), so the tests share them."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest

from core.tpu import budget, topology_compile

P = jax.sharding.PartitionSpec
pytestmark = pytest.mark.skipif(
    topology_compile.libtpu_problem() is not None, reason="libtpu not installed"
)

# Small enough to compile in a few seconds; widths multiples of 128 (the TPU lane width).
SHAPE = budget.TransformerShape(vocab=256, d_model=128, layers=1, heads=2, d_ff=512)
SETUP = budget.TrainingSetup(batch=8, seq=64, chips=4)


# TPU layouts pad arrays to tiles (minor dimension to 128 lanes; a scalar takes a small tile),
# so the compiler's bytes exceed the analytic ones by a little: bound that padding.
def padding_bound(expected: float) -> float:
    return 0.01 * expected + 16 * 1024


def analytic_arguments(shape, setup):
    parts = budget.training_budget(shape, setup)
    tokens_and_targets = 2 * (setup.batch // setup.chips) * setup.seq * 4
    return parts["parameters"] + parts["optimizer moments"] + tokens_and_targets


@pytest.mark.parametrize("topology", ["v5e:2x2", "v6e:2x2"])
def test_compiled_arguments_match_the_analytic_budget(topology):
    report = topology_compile.training_step_report(SHAPE, SETUP, topology)
    assert report.devices == 4 and report.device_kind.startswith("TPU v")
    measured = report.memory["argument_size_in_bytes"]
    expected = analytic_arguments(SHAPE, SETUP)
    assert expected <= measured <= expected + padding_bound(expected)
    # parameters and optimizer state are donated: the compiler aliases them to the outputs
    assert report.memory["alias_size_in_bytes"] >= expected - 2 * (SETUP.batch // 4) * SETUP.seq * 4
    # the compiler's peak covers at least the state, and stays within 3x of the estimate
    analytic_total = sum(budget.training_budget(SHAPE, SETUP).values())
    peak = topology_compile.peak_bytes(report.memory)
    assert expected <= peak <= 3 * analytic_total


def test_fsdp_splits_the_state_over_chips():
    data = topology_compile.training_step_report(SHAPE, SETUP, "v5e:2x2")
    fsdp = topology_compile.training_step_report(
        SHAPE, dataclasses.replace(SETUP, strategy="fsdp"), "v5e:2x2"
    )
    expected = analytic_arguments(SHAPE, dataclasses.replace(SETUP, strategy="fsdp"))
    assert expected <= fsdp.memory["argument_size_in_bytes"] <= expected + padding_bound(expected)
    assert fsdp.memory["argument_size_in_bytes"] < data.memory["argument_size_in_bytes"] / 3


def test_compiler_reports_usable_hbm_below_the_published_capacity():
    usable = topology_compile.usable_hbm_bytes("v5e:2x2")
    assert 14 * 2**30 < usable <= 16 * 2**30  # published: 16 GB per v5e chip


def test_cost_analysis_counts_a_sharded_matmul_per_device():
    shapes = (
        jax.ShapeDtypeStruct((512, 256), jnp.bfloat16),
        jax.ShapeDtypeStruct((256, 128), jnp.bfloat16),
    )
    report, _ = topology_compile.compile_for_topology(
        lambda a, b: a @ b, shapes, (P("data"), P()), "v6e:2x2"
    )
    assert report.cost["flops"] == 2 * (512 // 4) * 256 * 128  # one device's rows


def test_parse_available_hbm():
    message = "RESOURCE_EXHAUSTED: ... exceeds available HBM (15.75G)."
    assert topology_compile.parse_available_hbm(message) == 15.75 * 2**30
    assert topology_compile.parse_available_hbm("no number here") is None


def test_peak_bytes_takes_the_larger_account():
    memory = dict.fromkeys(topology_compile.MEMORY_FIELDS, 0)
    memory.update(
        argument_size_in_bytes=10,
        output_size_in_bytes=6,
        alias_size_in_bytes=4,
        temp_size_in_bytes=3,
    )
    assert topology_compile.peak_bytes(memory) == 15
    memory["peak_memory_in_bytes"] = 40
    assert topology_compile.peak_bytes(memory) == 40


def test_bad_topology_names_are_explained():
    with pytest.raises(ValueError, match="not topology names"):
        topology_compile.topology_devices("v5litepod-8")
    with pytest.raises(ValueError, match="refused"):
        topology_compile.topology_devices("v5e:1x1")
    with pytest.raises(ValueError, match="chips"):
        topology_compile.training_step_report(
            SHAPE, dataclasses.replace(SETUP, chips=8, batch=8), "v5e:2x2"
        )


def test_fsdp_specs_split_the_first_divisible_dimension():
    shapes = {
        "a": jax.ShapeDtypeStruct((6, 8), jnp.float32),
        "b": jax.ShapeDtypeStruct((3,), jnp.float32),
    }
    specs = topology_compile.param_specs_fsdp(shapes, 4)
    assert specs == {"a": P(None, "data"), "b": P()}


def test_training_comparison_rows():
    report = topology_compile.training_step_report(SHAPE, SETUP, "v5e:2x2")
    rows = topology_compile.training_comparison(SHAPE, SETUP, report)
    assert [r["per chip"].split(":")[0] for r in rows][0] == "arguments"
    arguments = rows[0]
    assert arguments["analytic (MB)"] == pytest.approx(
        analytic_arguments(SHAPE, SETUP) / 1e6, abs=1e-3
    )
    assert arguments["compiler (MB)"] == pytest.approx(
        report.memory["argument_size_in_bytes"] / 1e6, abs=1e-3
    )
    assert (
        0
        <= arguments["compiler - analytic (KB)"]
        <= padding_bound(analytic_arguments(SHAPE, SETUP)) / 1e3
    )


def test_ironwood_compiles_here_with_two_devices_per_chip():
    devices = topology_compile.topology_devices("tpu7x:2x2x1")
    assert len(devices) == 8 and {d.device_kind for d in devices} == {"TPU7x"}
    with pytest.raises(ValueError, match="tpu7x:2x2x1"):
        topology_compile.topology_devices("v7x:2x2x1")


# libtpu's lines on a CPU host, which a learner reads as failures (issue 14).
LIBTPU_NOISE = (
    "Failed to find host bounds",
    "Logging before InitGoogle",
    "unexpected worker hostname",
)


def _stderr_of(code: str) -> str:
    import subprocess
    import sys

    from core import curriculum, runtime

    env = runtime.child_env(JAX_PLATFORMS="cpu")
    for name in topology_compile.CPU_HOST_LIBTPU_ENV:
        env.pop(name, None)
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=curriculum.REPO_ROOT,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


@pytest.mark.skipif(
    __import__("core.runtime").runtime.host_has_tpu(), reason="a TPU VM has its own metadata"
)
def test_compiling_for_a_topology_on_a_cpu_host_prints_no_libtpu_noise():
    quiet = _stderr_of(
        "from core.tpu import topology_compile as t\n"
        "for name in ('v5e:2x2', 'tpu7x:2x2x1'):\n"
        "    t.topology_devices(name)\n"
    )
    assert [line for line in LIBTPU_NOISE if line in quiet] == [], quiet[-3000:]
    # Without the module's environment, the same libtpu prints it: the test above can fail.
    # (When a libtpu release stops printing it, this fails: drop CPU_HOST_LIBTPU_ENV then.)
    loud = _stderr_of(
        "import os\nos.environ['ALLOW_MULTIPLE_LIBTPU_LOAD'] = '1'\n"
        "from jax.experimental import topologies\n"
        "topologies.get_topology_desc(platform='tpu', topology_name='v5e:2x2')\n"
    )
    assert any(line in loud for line in LIBTPU_NOISE), loud[-3000:]


def _compile_twice_with_a_cache(cache_dir, devices_code: str) -> str:
    """stderr of compiling one program twice for v5e:2x2 with a persistent cache in cache_dir."""
    return _stderr_of(
        "import os\n"
        f"os.environ['JAX_COMPILATION_CACHE_DIR'] = {str(cache_dir)!r}\n"
        "os.environ['JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS'] = '0'\n"
        "import jax, jax.numpy as jnp, numpy as np\n"
        "from core.tpu import topology_compile as t\n"
        f"{devices_code}\n"
        "mesh = jax.sharding.Mesh(np.array(devices), ('data',))\n"
        "sharding = jax.sharding.NamedSharding(mesh, t.P('data'))\n"
        "x = jax.ShapeDtypeStruct((8, 128), jnp.float32, sharding=sharding)\n"
        "for _ in range(2):\n"
        "    jax.clear_caches()\n"
        "    jax.jit(lambda a: jnp.tanh(a) * 2).lower(x).compile()\n"
    )


def test_topology_compiles_skip_the_persistent_cache_they_cannot_read_back(tmp_path):
    """A cached compile-only TPU executable cannot be loaded back (no TPU client): each read
    warns. Through topology_devices the process compiles without the cache and stays quiet;
    asked for the devices directly, the same compiles warn, so the check can fail."""
    quiet = _compile_twice_with_a_cache(
        tmp_path / "module",
        # a CPU compile first: the process has already decided to use the cache
        "jax.jit(lambda a: a + 1)(jnp.ones(3)).block_until_ready()\n"
        "devices = t.topology_devices('v5e:2x2')",
    )
    assert "persistent compilation cache" not in quiet, quiet[-3000:]
    loud = _compile_twice_with_a_cache(
        tmp_path / "direct",
        "t._prepare_libtpu_for_compile_only()\n"
        "jax.config.update('jax_enable_compilation_cache', True)\n"
        "from jax.experimental import topologies\n"
        "devices = topologies.get_topology_desc(platform='tpu', topology_name='v5e:2x2').devices",
    )
    assert "persistent compilation cache" in loud, loud[-3000:]
