import pytest

from core.tpu import cloud_tpu, generations, specs, topology_compile


def test_one_row_per_generation_with_every_column():
    rows = generations.generation_rows()
    assert [r["generation"] for r in rows] == list(specs.GENERATIONS)
    assert "tpu7x" in specs.GENERATIONS
    columns = {
        "generation", "accelerator type", "chips", "TensorCores per chip", "JAX devices",
        "hosts", "chips per host", "topology name", "provisioned with",
    }  # fmt: skip
    assert all(set(r) == columns for r in rows)


def test_the_rows_agree_with_the_published_names():
    rows = {r["generation"]: r for r in generations.generation_rows()}
    # v5p names count TensorCores (v5p-8 is 4 chips); v5e names count chips.
    assert (rows["v5p"]["accelerator type"], rows["v5p"]["chips"]) == ("v5p-8", 4)
    assert (rows["v5e"]["accelerator type"], rows["v5e"]["chips"]) == ("v5litepod-4", 4)
    assert rows["tpu7x"]["accelerator type"].startswith("none in the Cloud TPU API")
    assert "Kubernetes Engine" in rows["tpu7x"]["provisioned with"]
    assert rows["tpu7x"]["chips per host"] == 4 and rows["tpu7x"]["TensorCores per chip"] == 2


@pytest.mark.skipif(topology_compile.libtpu_problem() is not None, reason="libtpu not installed")
@pytest.mark.parametrize("generation", specs.GENERATIONS)
def test_jax_device_count_is_what_libtpu_gives(generation):
    row = {r["generation"]: r for r in generations.generation_rows()}[generation]
    devices = topology_compile.topology_devices(row["topology name"])
    assert len(devices) == row["JAX devices"]
    assert len(devices) == row["chips"] * specs.chip(generation).devices_per_chip


def test_topology_chips_is_the_product_of_the_dimensions():
    assert generations.topology_chips("v5e:2x4") == 8
    assert generations.topology_chips("tpu7x:2x2x2") == 8
    assert cloud_tpu.ACCELERATOR_TYPES["tpu7x:2x2x2"].hosts == 2
