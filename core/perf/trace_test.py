import jax
import jax.numpy as jnp
import pytest

from core.perf import trace


def small_step():
    key = jax.random.key(0)
    params = {"w1": jax.random.normal(key, (64, 128)), "w2": jax.random.normal(key, (128, 16))}
    x, y = jax.random.normal(key, (32, 64)), jax.random.normal(key, (32, 16))

    def loss(p):
        return jnp.mean((jnp.tanh(x @ p["w1"]) @ p["w2"] - y) ** 2)

    @jax.jit
    def train_step(p):
        return jax.tree.map(lambda a, g: a - 0.01 * g, p, jax.grad(loss)(p))

    return train_step, params


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    step, params = small_step()
    capture, _ = trace.capture(
        step, params, tmp_path_factory.mktemp("trace"), steps=3, perfetto=True
    )
    return capture, step, params


def test_capture_writes_xplane_json_and_perfetto(captured):
    capture, _, _ = captured
    kinds = {row["kind"] for row in capture.file_rows()}
    assert any("XSpace" in k for k in kinds) and any("Perfetto" in k for k in kinds)
    assert capture.find(".xplane.pb").stat().st_size > 0
    with pytest.raises(ValueError, match="no"):
        capture.find(".nothing")


def test_two_independent_readers_agree_on_op_times(captured):
    capture, _, _ = captured
    events = trace.xplane_op_events(capture.find(".xplane.pb"))
    table = trace.op_table(events, "jit_train_step")
    json_totals = trace.json_op_totals(
        trace.trace_json_events(capture.find(".trace.json.gz")), "jit_train_step"
    )
    assert {r["op"] for r in table} == set(json_totals)
    for row in table:
        assert row["total (us)"] == pytest.approx(json_totals[row["op"]], rel=1e-3, abs=1e-2)


def test_warmup_keeps_compilation_out_and_each_step_runs_every_op(captured):
    capture, _, _ = captured
    events = trace.xplane_op_events(capture.find(".xplane.pb"))
    assert trace.modules(events)[0] == "jit_train_step"
    table = trace.op_table(events, "jit_train_step")
    # every op of the program ran once per traced step, never for compilation or warm-up
    assert {r["count"] for r in table} == {capture.steps}
    assert sum(r["share"] for r in table) == pytest.approx(1.0)
    assert table == sorted(table, key=lambda r: r["total (us)"], reverse=True)


def test_profiled_ops_are_defined_in_the_compiled_hlo(captured):
    capture, step, params = captured
    events = trace.xplane_op_events(capture.find(".xplane.pb"))
    ops = [r["op"] for r in trace.op_table(events, "jit_train_step")]
    hlo_text = step.lower(params).compile().as_text()
    definitions = trace.hlo_definitions(hlo_text, ops)
    assert set(definitions) == set(ops)
    assert all(
        " = " in instruction and "metadata" not in instruction
        for instruction, _ in definitions.values()
    )
    # the backward pass shows up as transpose(jvp(...)) in the metadata of some op
    assert any("transpose" in source for _, source in definitions.values())


def test_timeline_rows_start_at_zero(captured):
    capture, _, _ = captured
    events = trace.xplane_op_events(capture.find(".xplane.pb"))
    rows = trace.timeline_rows(events)
    assert min(r["start (us)"] for r in rows) == 0.0
    assert len({r["thread"] for r in rows}) == len({e.thread for e in events})
    assert all("#" in r["thread"] for r in rows)
    assert all(r["end (us)"] >= r["start (us)"] for r in rows)
    assert trace.timeline_rows([]) == []


def test_xprof_commands_quote_their_arguments():
    text = trace.xprof_commands("/tmp/my trace", tpu_name="tpu-1", zone="us-east5-a", port=8791)
    assert "xprof --logdir='/tmp/my trace' --port=8791" in text
    assert (
        "gcloud compute tpus tpu-vm ssh tpu-1 --zone=us-east5-a -- -L 8791:localhost:8791" in text
    )


def test_example_training_step_keeps_parameter_shapes():
    step, params = trace.example_training_step(jax.random.key(0), batch=16, width=8, depth=2)
    assert [p.shape for p in params] == [(8, 8), (8, 8)]
    new = step(params)
    assert all(a.shape == b.shape for a, b in zip(params, new, strict=True))
    with pytest.raises(ValueError, match="depth"):
        trace.example_training_step(jax.random.key(0), depth=0)


def test_capture_checks_its_arguments(tmp_path):
    with pytest.raises(ValueError, match="steps"):
        trace.capture(lambda s: s, 0, tmp_path, steps=0)
