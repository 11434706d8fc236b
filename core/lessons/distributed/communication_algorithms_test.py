import jax
import pytest

from core import distributed
from core.distributed import sharding
from core.lessons.distributed import communication_algorithms as ca


def _setup(devices, microbatches, rows_per_microbatch=2, seed=0):
    mesh = sharding.make_mesh((devices,), ("x",))
    params = distributed.init_mlp(jax.random.key(seed), 8, 16, 4)
    batch = distributed.example_batch(
        jax.random.key(seed + 1), devices * microbatches * rows_per_microbatch, 8, 4
    )
    return mesh, params, batch


@pytest.mark.parametrize(("devices", "microbatches"), [(2, 1), (4, 3), (8, 4)])
@pytest.mark.needs_devices("devices")
def test_the_compiled_step_runs_one_all_reduce_or_k(devices, microbatches):
    mesh, params, batch = _setup(devices, microbatches)
    rows, _ = ca.accumulation_versions(mesh, params, batch, microbatches)
    runs = {r["version"].split(",")[0].split(" (")[0]: r for r in rows}
    # the closed form: accumulating sends the gradient once a step, reducing every
    # microbatch K times; the HLO text holds one op either way (the loop body's runs K times)
    assert runs["accumulate"]["all-reduces run per step"] == 1
    assert runs["all-reduce every microbatch"]["all-reduces run per step"] == microbatches
    assert all(r["all-reduce ops in the HLO text"] == 1 for r in rows)


@pytest.mark.parametrize(("devices", "microbatches", "seed"), [(8, 4, 3)])
@pytest.mark.needs_devices("devices")
def test_both_sharded_accumulations_equal_the_float64_big_batch_gradient(
    devices, microbatches, seed
):
    mesh, params, batch = _setup(devices, microbatches, seed=seed)
    _, reference = distributed.reference_loss_and_grads(params, batch)
    with jax.default_matmul_precision("highest"):
        _, grads = ca.accumulation_versions(mesh, params, batch, microbatches)
    for got in grads.values():
        assert distributed.max_tree_error(got, reference) < distributed.accumulation_tolerance()


def test_all_reduces_per_step_multiplies_nested_trip_counts():
    # hand-written HLO: one all-reduce in the entry, one in a loop run 3 times, and one in a
    # loop nested inside it run 5 times per outer iteration: 1 + 3 * (1 + 5) = 19
    trip = 'backend_config={{"known_trip_count":{{"n":"{}"}}}}'
    hlo = "\n".join(
        [
            "%inner (p: f32[4]) -> f32[4] {",
            "  %a = f32[4]{0} all-reduce(%p), to_apply=%add",
            "}",
            "%outer (p: f32[4]) -> f32[4] {",
            "  %b = f32[4]{0} all-reduce(%p), to_apply=%add",
            f"  %w = f32[4]{{0}} while(%b), condition=%c, body=%inner, {trip.format(5)}",
            "}",
            "ENTRY %main (x: f32[4]) -> f32[4] {",
            "  %c0 = f32[4]{0} all-reduce-start(%x), to_apply=%add",
            f"  %w0 = f32[4]{{0}} while(%c0), condition=%c, body=%outer, {trip.format(3)}",
            "}",
        ]
    )
    assert ca.all_reduces_per_step(hlo) == 19
    with pytest.raises(ValueError, match="trip count"):
        ca.all_reduces_per_step(hlo.replace(trip.format(3), ""))
    with pytest.raises(ValueError, match="ENTRY"):
        ca.all_reduces_per_step("%f (x: f32[]) -> f32[] {\n}")


@pytest.mark.parametrize(
    ("generation", "per_link"), [("v5e", 9e10), ("v5p", 1.8e11), ("v6e", 1.8e11)]
)
def test_ici_seconds_divide_ring_bytes_by_the_per_link_figure(generation, per_link):
    # the scaling book's bidirectional per-link figures, typed here independently
    assert ca.ici_seconds(3.6e9, generation) == pytest.approx(3.6e9 / per_link)
    rows = ca.strategy_rows_with_seconds(distributed.strategy_bytes(1000, 4, 2), (generation,))
    for row in rows:
        assert row[f"µs on {generation} ICI"] == pytest.approx(row["bytes"] / per_link * 1e6)
    with pytest.raises(ValueError, match=">= 0"):
        ca.ici_seconds(-1.0, generation)


def test_microbatches_that_do_not_divide_are_refused():
    mesh, params, batch = _setup(2, 2)
    with pytest.raises(ValueError, match="microbatches"):
        ca.accumulation_step(mesh, 3, False)(params, batch)
    with pytest.raises(ValueError, match=">= 1"):
        ca.accumulation_step(mesh, 0, False)
    # no source publishes TPU7x's per-link ICI: refused, and left out of the default table
    with pytest.raises(ValueError, match="per-link"):
        ca.ici_seconds(0.0, "tpu7x")
    row = ca.strategy_rows_with_seconds(distributed.strategy_bytes(1000, 4, 2))[0]
    assert "µs on tpu7x ICI" not in row and "µs on v5e ICI" in row


@pytest.mark.parametrize("devices", [4])
@pytest.mark.needs_devices("devices")
def test_each_variant_is_traced_once_and_reused_for_new_values(devices):
    # a trace per variant (no programs to move the arguments), none for a new seed's values
    first_setup = _setup(devices, 3, seed=11)
    second_setup = _setup(devices, 3, seed=12)
    jax.block_until_ready((first_setup, second_setup))
    traces = []

    def listen(name, _seconds, **_kwargs):
        if name == "/jax/core/compile/jaxpr_trace_duration":
            traces.append(name)

    ca._COMPILED.clear()
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        ca.accumulation_versions(*first_setup, 3)
        first = len(traces)
        ca.accumulation_versions(*second_setup, 3)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert first == 2 and len(traces) == first
