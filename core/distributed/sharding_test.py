import itertools
import math

import jax
import numpy as np
import pytest

from core import numerics
from core.distributed import sharding

P = jax.sharding.PartitionSpec


def expected_layout(full: np.ndarray, mesh: jax.sharding.Mesh, spec) -> dict[int, tuple]:
    """device id -> (start, stop) per dim, worked out with np.array_split on the device grid."""
    device_grid = np.vectorize(lambda d: d.id)(mesh.devices)
    axis_sizes = dict(zip(mesh.axis_names, device_grid.shape, strict=True))
    entries = list(spec) + [None] * (full.ndim - len(spec))
    layout = {}
    for coords in itertools.product(*(range(n) for n in device_grid.shape)):
        at = dict(zip(mesh.axis_names, coords, strict=True))
        index = []
        for dim, entry in enumerate(entries):
            axes = () if entry is None else ((entry,) if isinstance(entry, str) else tuple(entry))
            parts = math.prod(axis_sizes[a] for a in axes)
            block = (
                int(np.ravel_multi_index([at[a] for a in axes], [axis_sizes[a] for a in axes]))
                if axes
                else 0
            )
            positions = np.array_split(np.arange(full.shape[dim]), parts)[block]
            index.append((int(positions[0]), int(positions[-1]) + 1))
        layout[int(device_grid[coords])] = tuple(index)
    return layout


CASES = [
    ((4,), P(), (8, 12)),
    ((4,), P("x"), (8, 12)),
    ((4,), P(None, "x"), (8, 12)),
    ((8,), P("x"), (16, 3)),
    ((2, 2), P("x"), (6, 4)),
    ((2, 2), P("x", "y"), (4, 6)),
    ((2, 4), P("y", "x"), (8, 2)),
    ((2, 2), P(("x", "y")), (8, 5)),
    ((4, 2), P(None, ("x", "y")), (3, 16)),
    ((1, 8), P(None, "y"), (2, 8)),
]


@pytest.mark.parametrize("mesh_shape, spec, shape", CASES)
@pytest.mark.needs_devices("mesh_shape")
def test_layout_matches_numpy_slicing(mesh_shape, spec, shape):
    mesh = sharding.make_mesh(mesh_shape)
    full = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    x = sharding.shard(full, mesh, spec)
    layout = sharding.shard_layout(x)
    expected = expected_layout(full, mesh, spec)
    assert {row.device: row.index for row in layout} == expected
    for row in layout:
        block = full[row.slices()]
        assert row.shape == block.shape and row.nbytes == block.nbytes
    assert sharding.max_shard_error(x, full) == 0.0
    # every element is held by (mesh size / number of distinct blocks) devices
    blocks = sharding.holders_by_block(layout)
    copies = {len(devices) for devices in blocks.values()}
    assert copies == {math.prod(mesh_shape) // len(blocks)}
    assert sum(row.replica == 0 for row in layout) == len(blocks)


@pytest.mark.needs_devices(4)
def test_replicated_array_is_whole_on_every_device():
    mesh = sharding.make_mesh((4,))
    full = np.ones((3, 5), np.float32)
    layout = sharding.shard_layout(sharding.shard(full, mesh, P()))
    assert [row.device for row in layout] == [d.id for d in jax.devices()[:4]]
    assert all(row.index == ((0, 3), (0, 5)) and row.nbytes == full.nbytes for row in layout)


@pytest.mark.parametrize("mesh_shape, spec, shape", [c for c in CASES] + [((1,), P("x"), (1, 1))])
@pytest.mark.needs_devices("mesh_shape")
def test_sharded_equals_unsharded_equals_numpy(mesh_shape, spec, shape):
    mesh = sharding.make_mesh(mesh_shape)
    x, w = sharding.example_inputs(jax.random.key(3), *shape, hidden=5)
    run = sharding.run_sharded(x, w, mesh, spec)
    reference = sharding.layer_reference(x, w)
    assert run.y_RH.shape == reference.shape == (shape[0], 5)
    tol = numerics.tolerance("float32")  # 1e-5 on the CPU; a TPU's float32 matmul: its own
    assert numerics.scaled_max_error(run.y_RH, reference) <= tol
    np.testing.assert_allclose(
        np.asarray(run.y_RH),
        np.asarray(run.y_unsharded_RH),
        rtol=tol,
        atol=numerics.scaled_tolerance(1e-6),
    )
    assert sharding.max_shard_error(run.y_RH, reference) <= tol
    assert sharding.max_shard_error(run.x_RC, np.asarray(x)) == 0.0


@pytest.mark.needs_devices(4)
def test_contracting_over_a_sharded_dim_needs_communication():
    mesh = sharding.make_mesh((4,))
    x, w = sharding.example_inputs(jax.random.key(0), 8, 12, hidden=3)
    by_rows = sharding.run_sharded(x, w, mesh, P("x"))
    by_cols = sharding.run_sharded(x, w, mesh, P(None, "x"))
    assert sum(by_rows.collectives.values()) == 0  # each device owns whole rows of y
    assert sum(by_cols.collectives.values()) >= 1  # partial sums must be combined
    assert by_rows.y_RH.sharding.spec == P("x")


@pytest.mark.parametrize("device_count", range(1, 9))
def test_valid_mesh_sizes_are_the_divisors(device_count):
    closed_form = {
        1: [1],
        2: [1, 2],
        3: [1, 3],
        4: [1, 2, 4],
        5: [1, 5],
        6: [1, 2, 3, 6],
        7: [1, 7],
        8: [1, 2, 4, 8],
    }
    assert sharding.valid_mesh_sizes(device_count) == closed_form[device_count]


@pytest.mark.parametrize("size", [1, 4, 6, 8])
@pytest.mark.needs_devices("size")
def test_mesh_shapes_are_the_factorizations(size):
    shapes = sharding.mesh_shapes(size)
    assert shapes[0] == (size,)
    assert all(math.prod(s) == size for s in shapes)
    assert sorted(shapes[1:]) == sorted(
        (a, b) for a in range(1, size + 1) for b in range(1, size + 1) if a * b == size
    )
    for s in shapes:
        assert sharding.parse_mesh_shape(sharding.mesh_shape_name(s)) == s
        assert sharding.make_mesh(s).devices.size == size


def test_valid_partition_specs_only_name_mesh_axes():
    one_d = sharding.valid_partition_specs(("x",))
    assert list(one_d) == ["P()", "P('x')", "P(None, 'x')"]
    two_d = sharding.valid_partition_specs(("x", "y"))
    assert {"P('x', 'y')", "P(('x', 'y'))", "P(None, 'y')"} <= set(two_d)
    for name, spec in two_d.items():
        assert sharding.spec_name(spec) == name
        assert sharding.divisibility_problem((8, 8), {"x": 2, "y": 4}, spec) is None
    assert "replicated" in sharding.describe_spec(P())
    assert sharding.describe_spec(P(None, "x")) == "rows whole, cols split over x"


def test_divisibility_reason_is_actionable():
    mesh = {"x": 4}
    assert sharding.divisibility_problem((6, 8), mesh, P("x")) == (
        "rows=6 can't be split evenly over x=4 devices: pick rows divisible by 4."
    )
    assert sharding.divisibility_problem((8, 6), mesh, P(None, "x")) == (
        "cols=6 can't be split evenly over x=4 devices: pick cols divisible by 4."
    )
    assert sharding.divisibility_problem((6, 6), mesh, P()) is None
    assert "x×y=8" in sharding.divisibility_problem((12, 2), {"x": 2, "y": 4}, P(("x", "y")))
    assert "only has axes" in sharding.divisibility_problem((8, 8), mesh, P("x", "y"))
    assert "twice" in sharding.divisibility_problem((8, 8), mesh, P("x", "x"))
    assert "entries" in sharding.divisibility_problem((8,), mesh, P(None, "x"))


@pytest.mark.needs_devices(4)
def test_shard_refuses_an_uneven_split_by_name():
    with pytest.raises(ValueError, match="rows=6"):
        sharding.shard(np.zeros((6, 8)), sharding.make_mesh((4,)), P("x"))


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="devices"):
        sharding.make_mesh((16,))
    with pytest.raises(ValueError, match="2x2"):
        sharding.parse_mesh_shape("2*2")
    with pytest.raises(ValueError, match="device count"):
        sharding.valid_mesh_sizes(0)


@pytest.mark.parametrize(
    "mesh_shape, spec",
    [((4,), P("x")), ((2, 2), P("x")), ((2, 2), P(None, ("x", "y"))), ((4,), P())],
)
@pytest.mark.needs_devices("mesh_shape")
def test_element_owners_lists_each_element_once_with_its_holders(mesh_shape, spec):
    mesh = sharding.make_mesh(mesh_shape)
    full = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    layout = sharding.shard_layout(sharding.shard(full, mesh, spec))
    owners = sharding.element_owners(layout)
    assert [(r["row"], r["col"]) for r in owners] == [(r, c) for r in range(8) for c in range(4)]
    for record in owners:
        holders = sorted(
            row.device
            for row in layout
            if full[row.slices()].ravel().tolist().count(full[record["row"], record["col"]])
        )
        assert record["held by"] == ", ".join(map(str, holders))
        assert record["copies"] == len(holders)
