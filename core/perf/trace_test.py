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


# --- a TPU's profile, read on this CPU (issue 37, kind 5) ----------------------------------
# On a TPU the ops are on a /device:TPU:0 plane: lines "Steps", "XLA Modules" (one event per
# program run, named like "jit_train_step(12)") and "XLA Ops" (one event per HLO op, the op as
# the event's name); stats such as hlo_op / hlo_module may or may not be there. The CPU puts
# them on /host:CPU threads with hlo_op / hlo_module stats. Below: a TPU-shaped XSpace written
# out by jaxlib's own exporter (xplane.pb and trace.json.gz), as jax.profiler.trace would.

TPU_OPS = (  # (event name, display name, stats) per op of one run of jit_train_step
    ("fusion.1", "", {}),
    ("convolution.2", "", {"hlo_module": "jit_train_step"}),
    ("%copy.3 = f32[8,16]{1,0} copy(f32[8,16]{0,1} %p)", "copy.3", {"hlo_op": "copy.3"}),
)


def _tpu_xspace(steps: int = 2) -> str:
    """A text-format XSpace of `steps` runs of jit_train_step (and one of jit_init) on a TPU,
    beside a host plane whose events carry no hlo_op."""
    names = ["jit_init(11)", "jit_train_step(12)", *(name for name, _, _ in TPU_OPS)]
    metadata = {name: i + 1 for i, name in enumerate(names)}
    stat_ids = {"hlo_op": 1, "hlo_module": 2}
    modules, ops, steps_line = [], [], []
    t = 0
    for step in range(-1, steps):  # -1: jit_init, one op
        module = "jit_init(11)" if step < 0 else "jit_train_step(12)"
        run = TPU_OPS[:1] if step < 0 else TPU_OPS
        start = t
        for name, _, stats in run:
            fields = " ".join(
                f'stats {{ metadata_id: {stat_ids[k]} str_value: "{v}" }}' for k, v in stats.items()
            )
            ops.append(
                f"events {{ metadata_id: {metadata[name]} offset_ps: {(t + 100) * 1000} "
                f"duration_ps: {(400 + 100 * len(ops)) * 1000} {fields} }}"
            )
            t += 100 + 400 + 100 * (len(ops) - 1)
        modules.append(
            f"events {{ metadata_id: {metadata[module]} offset_ps: {start * 1000} "
            f"duration_ps: {(t - start + 50) * 1000} }}"
        )
        if step >= 0:
            steps_line.append(
                f"events {{ metadata_id: {metadata[module]} offset_ps: {start * 1000} "
                f"duration_ps: {(t - start + 50) * 1000} }}"
            )
        t += 1000
    event_metadata = "\n".join(
        f'event_metadata {{ key: {i} value {{ id: {i} name: "{name}"'
        + "".join(f' display_name: "{d}"' for n, d, _ in TPU_OPS if n == name and d)
        + " } }"
        for name, i in metadata.items()
    )
    stat_metadata = "\n".join(
        f'stat_metadata {{ key: {i} value {{ id: {i} name: "{name}" }} }}'
        for name, i in stat_ids.items()
    )
    return f"""
planes {{
  id: 1 name: "/host:CPU"
  lines {{ id: 1 name: "python" timestamp_ns: 0 events {{ metadata_id: 1 offset_ps: 0
           duration_ps: {t * 1000} }} }}
  event_metadata {{ key: 1 value {{ id: 1 name: "train" }} }}
}}
planes {{
  id: 2 name: "/device:TPU:0"
  lines {{ id: 1 name: "Steps" timestamp_ns: 5000 {" ".join(steps_line)} }}
  lines {{ id: 2 name: "XLA Modules" timestamp_ns: 5000 {" ".join(modules)} }}
  lines {{ id: 3 name: "XLA Ops" timestamp_ns: 5000 {" ".join(ops)} }}
  {event_metadata}
  {stat_metadata}
}}
"""


@pytest.fixture(scope="module")
def tpu_profile(tmp_path_factory):
    """(xplane.pb, trace.json.gz) of the TPU-shaped XSpace, written by jaxlib's exporter."""
    from jax._src.lib import _profiler

    serialized = jax.profiler.ProfileData.text_proto_to_serialized_xspace(_tpu_xspace())
    session = _profiler.ProfilerSession()
    session.stop()
    logdir = tmp_path_factory.mktemp("tpu_trace")
    session.export(serialized, str(logdir))
    (xplane,) = logdir.rglob("*.xplane.pb")
    (json_trace,) = logdir.rglob("*.trace.json.gz")
    return xplane, json_trace


def test_a_tpu_profile_is_read_from_its_device_plane(tpu_profile):
    """read_xprof_trace stopped with KeyError 'op' and precision_xprof's top ops were empty on
    a TPU: the reader looked for hlo_op stats on host threads only."""
    xplane, _ = tpu_profile
    events = trace.xplane_op_events(xplane)
    assert trace.modules(events) == ["jit_train_step", "jit_init"]
    table = trace.op_table(events, "jit_train_step")
    assert [r["op"] for r in table] == ["copy.3", "convolution.2", "fusion.1"]  # most time first
    assert {r["count"] for r in table} == {2}  # each op once per step: the steps' ops only
    assert {e.thread for e in events} == {"/device:TPU:0 XLA Ops"}
    assert trace.timeline_rows(events)[0]["start (us)"] == 0


def test_both_readers_agree_on_a_tpu_profile(tpu_profile):
    xplane, json_trace = tpu_profile
    table = trace.op_table(trace.xplane_op_events(xplane), "jit_train_step")
    totals = trace.json_op_totals(trace.trace_json_events(json_trace), "jit_train_step")
    assert {r["op"] for r in table} == set(totals)
    for row in table:
        assert row["total (us)"] == pytest.approx(totals[row["op"]], rel=1e-3, abs=1e-2)
    assert set(trace.json_op_totals(trace.trace_json_events(json_trace))) == set(totals)
