import copy

import jax
import jax.numpy as jnp
import pytest

from core import numerics
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
    """On the CPU the events are whole nanoseconds: the readers agree within ProfileData's
    resolution (measured: exactly)."""
    capture, _, _ = captured
    events = trace.xplane_op_events(capture.find(".xplane.pb"))
    table = trace.op_table(events, "jit_train_step")
    durations = trace.json_op_durations(
        trace.trace_json_events(capture.find(".trace.json.gz")), "jit_train_step"
    )
    readers = trace.compare_readers(table, durations)
    assert readers.same_ops and readers.same_counts and readers.json_never_shorter
    assert readers.gap_per_event_us <= trace.PROFILE_DATA_RESOLUTION_US


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


def _tpu_xspace(steps: int = 2, extra_ps: int = 0) -> str:
    """A text-format XSpace of `steps` runs of jit_train_step (and one of jit_init) on a TPU,
    beside a host plane whose events carry no hlo_op; each op lasts ``extra_ps`` picoseconds
    past a whole nanosecond (a TPU times its ops in picoseconds)."""
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
                f"duration_ps: {(400 + 100 * len(ops)) * 1000 + extra_ps} {fields} }}"
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


def _export(xspace_text: str, logdir) -> tuple:
    """(xplane.pb, trace.json.gz) of a text-format XSpace, written by jaxlib's exporter."""
    from jax._src.lib import _profiler

    serialized = jax.profiler.ProfileData.text_proto_to_serialized_xspace(xspace_text)
    session = _profiler.ProfilerSession()
    session.stop()
    session.export(serialized, str(logdir))
    (xplane,) = logdir.rglob("*.xplane.pb")
    (json_trace,) = logdir.rglob("*.trace.json.gz")
    return xplane, json_trace


@pytest.fixture(scope="module")
def tpu_profile(tmp_path_factory):
    """(xplane.pb, trace.json.gz) of the TPU-shaped XSpace, written by jaxlib's exporter."""
    return _export(_tpu_xspace(), tmp_path_factory.mktemp("tpu_trace"))


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


def test_profile_data_truncates_picoseconds_that_the_json_keeps(tmp_path):
    """read_xprof_trace on a v5e: the readers' per-op totals differed by 2.17 ns (0.00217 of
    1 us): ProfileData reads 500,999 ps as 500 ns, the JSON as 0.500999 us. Each event is up
    to 1 ns short in the xplane reader, never longer: the bound the check uses holds at the
    worst case (999 ps past every nanosecond), and the old relative 1e-3 did not."""
    xplane, json_trace = _export(_tpu_xspace(extra_ps=999), tmp_path)
    table = trace.op_table(trace.xplane_op_events(xplane), "jit_train_step")
    events = trace.trace_json_events(json_trace)
    durations = trace.json_op_durations(events, "jit_train_step")
    totals = {r["op"]: r["total (us)"] for r in table}  # whole nanoseconds: 999 ps dropped
    assert totals == {"copy.3": 1.7, "convolution.2": 1.5, "fusion.1": 1.3}
    assert durations["fusion.1"] == [0.500999, 0.800999]  # picoseconds kept
    readers = trace.compare_readers(table, durations)
    assert readers.same_ops and readers.same_counts and readers.json_never_shorter
    assert 0.99 * trace.PROFILE_DATA_RESOLUTION_US < readers.gap_per_event_us
    assert readers.gap_per_event_us <= trace.PROFILE_DATA_RESOLUTION_US
    old_measure = numerics.elementwise_relative_error(
        [sum(durations[r["op"]]) for r in table], [r["total (us)"] for r in table]
    )
    assert old_measure > 1e-3  # the tolerance that failed on the chip


def test_reader_disagreements_beyond_the_resolution_are_caught(tpu_profile):
    """Planted bugs: an op dropped, one event dropped, a duration doubled, a JSON event cut
    short; each fails the comparison the check makes."""
    xplane, json_trace = tpu_profile
    table = trace.op_table(trace.xplane_op_events(xplane), "jit_train_step")
    events = trace.trace_json_events(json_trace)

    def compared(edit):
        return trace.compare_readers(
            table, trace.json_op_durations(edit(copy.deepcopy(events)), "jit_train_step")
        )

    def is_op(event, name):
        return event.get("thread") == "XLA Ops" and trace.op_name(event["name"]) == name

    good = compared(lambda es: es)
    assert good.same_ops and good.same_counts and good.gap_per_event_us == 0
    assert not compared(lambda es: [e for e in es if not is_op(e, "copy.3")]).same_ops
    first = next(i for i, e in enumerate(events) if is_op(e, "convolution.2"))
    assert not compared(lambda es: es[:first] + es[first + 1 :]).same_counts

    def scaled(factor):
        def edit(es):
            es[first]["dur"] *= factor
            return es

        return edit

    assert compared(scaled(2.0)).gap_per_event_us > trace.PROFILE_DATA_RESOLUTION_US
    assert not compared(scaled(0.999)).json_never_shorter


def test_an_op_belongs_to_the_program_holding_its_middle():
    """A TPU's edge ops overhang their program by a rounding (picoseconds read as whole
    nanoseconds, or float sums): they still count for it, and never for the next program."""
    spans = [(0.0, 10.0, "jit_a"), (10.0, 20.0, "jit_b")]
    assert trace._containing(spans, 9.5, 10.0004) == "jit_a"  # last op, 0.4 ns past its end
    assert trace._containing(spans, 9.9996, 10.6) == "jit_b"  # first op, 0.4 ns before
    assert trace._containing(spans, 0.0, 10.0) == "jit_a"
    assert trace._containing(spans, 20.5, 21.0) == ""  # outside every program
