"""``report``: every section (agreement, profile, partition, objective) in one Markdown +
JSON report in ``out`` (default runs/pallas_kernel/): report.md, report.json (validated by
the pydantic models below when written and when loaded) and amdahl.vl.json (an Altair /
Vega-Lite chart of the whole-step speed-up against the kernel's speed-up).

``rerun=true`` (default) runs the sections; ``rerun=false`` reads their JSON from ``out``
(written by the commands of the same names) and names any that is missing. Each section
carries the hardware it ran on; CPU figures of the kernel are labelled interpret-mode
figures (semantics, not speed).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Literal

import pydantic

from capstones.byte_transformer import args
from capstones.pallas_kernel import common
from core import documents

FORMAT = "pallas_kernel report"
SECTIONS = ("agreement", "profile", "partition", "objective")
TPU_SCRIPT = "tpu_scripts/pallas_kernel_tpu.py"


class Hardware(documents.Document):
    backend: str
    device_kind: str
    device_count: int
    host: str
    jax: str


class Section(documents.Document):
    section: str
    created_utc: str
    hardware: Hardware

    @pydantic.field_validator("created_utc")
    @classmethod
    def _time(cls, value: str) -> str:
        return documents.iso_time(value)


class AgreementSection(Section):
    label: str
    rows: list[dict[str, Any]]
    all_pass: bool
    property_tests: dict[str, Any]
    property_line: str


class ProfileSection(Section):
    config: dict[str, Any]
    timing: dict[str, Any]
    trace: dict[str, Any]
    attention_share: float = pydantic.Field(ge=0.0, le=1.0)
    amdahl: dict[str, Any]
    memory: dict[str, Any]
    caveat: str


class PartitionSection(Section):
    label: str
    sharded: dict[str, Any]
    before_after: dict[str, Any]
    tpu_memory: dict[str, Any]


class ObjectiveSection(Section):
    label: str
    tolerance: float
    cases: list[dict[str, Any]]
    worst: dict[str, float]
    all_pass: bool


MODELS = {
    "agreement": AgreementSection,
    "profile": ProfileSection,
    "partition": PartitionSection,
    "objective": ObjectiveSection,
}


class Report(documents.Document):
    what: str = "report"
    format: Literal["pallas_kernel report"]
    version: Literal[1]
    created_utc: str
    agreement: AgreementSection | None = None
    profile: ProfileSection | None = None
    partition: PartitionSection | None = None
    objective: ObjectiveSection | None = None
    missing: list[str]
    charts: dict[str, str]


def load(path: str | pathlib.Path) -> dict:
    """report.json, validated (ValueError naming the field when it is not a report)."""
    document = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    return documents.validate(Report, document, "pallas_kernel report")


def amdahl_chart(share: float):
    """Whole-step speed-up vs the kernel's speed-up s for the measured attention share."""
    import altair as alt
    import pandas as pd

    from capstones.pallas_kernel import profile

    points = [2 ** (i / 4) for i in range(0, 33)]  # s from 1 to 256
    frame = pd.DataFrame(
        [{"kernel speed-up s": s, "whole-step speed-up": profile.amdahl(share, s)} for s in points]
    )
    line = (
        alt.Chart(frame)
        .mark_line()
        .encode(
            x=alt.X("kernel speed-up s:Q", scale=alt.Scale(type="log", base=2)),
            y=alt.Y("whole-step speed-up:Q"),
            tooltip=list(frame.columns),
        )
    )
    bound = profile.amdahl(share)
    rule = (
        alt.Chart(pd.DataFrame([{"bound": bound}])).mark_rule(strokeDash=[4, 4]).encode(y="bound:Q")
    )
    return (line + rule).properties(
        width=420,
        height=220,
        title=f"Amdahl: attention core = {share:.1%} of op time, bound {bound:.2f}x (dashed)",
    )


def _hardware_line(section: dict) -> str:
    hw = section["hardware"]
    return (
        f"*Ran on: {hw['host']}; JAX {hw['jax']} backend `{hw['backend']}`, "
        f"{hw['device_count']} x {hw['device_kind']}; {section['created_utc']}.*"
    )


def _agreement_md(section: dict) -> list[str]:
    keep = ("shape (B,H,T,D)", "blocks (bq,bk)", "dtype", "causal", "O error", "dQ error",
            "dK error", "dV error", "tolerance", "pass")  # fmt: skip
    rows = [{k: r[k] for k in keep} for r in section["rows"]]
    verdict = "every row passes" if section["all_pass"] else "SOME ROWS FAIL"
    return [
        "## 1. Reference agreement",
        _hardware_line(section),
        "",
        f"The kernel (forward + Pallas backward, {section['label']}) against NumPy float64 "
        f"closed forms: max scaled error per output, tolerance by dtype; {verdict}.",
        "",
        common.md_table(rows),
        "",
        section["property_line"],
    ]


def _profile_md(section: dict, charts: dict) -> list[str]:
    from capstones.pallas_kernel import profile

    memory = section["memory"]
    config = section["config"]
    lines = [
        "## 2. Profile: where the train step's time and memory go",
        _hardware_line(section),
        "",
        f"The byte Transformer's train step (d_model {config['d_model']}, {config['num_layers']} "
        f"layers, {config['num_heads']} heads, T {config['seq_len']}, B {config['batch_size']}, "
        f"{config['compute_dtype']}, dropout {config['dropout']}), XLA reference attention.",
        "",
        *[f"- {line}" for line in profile.summary_lines(section) if line],
        "",
        f"Op time by category ({section['trace']['method']}):",
        "",
        common.md_table(section["trace"]["by_category"]),
        "",
        "The bottleneck, top ops of the trace:",
        "",
        common.md_table(section["trace"]["top_ops"]),
        "",
        "Amdahl's law for the attention core's share f: whole-step speed-up "
        "1 / ((1 - f) + f / s) for a kernel s times faster, at most 1 / (1 - f):",
        "",
        common.md_table(section["amdahl"]["rows"]),
    ]
    if "amdahl" in charts:
        lines += ["", f"Chart: `{charts['amdahl']}` (Vega-Lite JSON)."]
    closed = memory["attention_closed_form"]
    lines += [
        "",
        "Compiled memory (memory_analysis, bytes): "
        + ", ".join(f"{k} {v:,}" for k, v in memory["compiled"].items())
        + f". Closed form: the f32 scores B*H*T*T*4 = {closed['scores per layer']:,} bytes per "
        f"layer; the probabilities kept for the backward, all layers: "
        f"{closed['probabilities kept, all layers']:,} bytes "
        f"({memory['scores share of temporaries']:.0%} of the temporaries, at least: the masked "
        "scores and the backward's dS are T x T too): the O(T^2) term the kernel removes.",
    ]
    return lines


def _partition_md(section: dict) -> list[str]:
    check, before = section["sharded"], section["before_after"]
    collective_rows = [{"program": what, **counts} for what, counts in check["collectives"].items()]
    worst = max(
        max(check["sharded vs unsharded"].values()), max(check["sharded vs float64"].values())
    )
    lines = [
        "## 3. Partitioning, collectives, before/after",
        _hardware_line(section),
        "",
        f"The kernel in `jax.shard_map` over a mesh {tuple(check['mesh']['shape'])} "
        f"{tuple(check['mesh']['axes'])} of {check['mesh']['devices']} devices, q/k/v/dO "
        f"{tuple(check['shape (B,H,T,D)'])} split to {tuple(check['per-device shape'])} per "
        f"device: sharded == unsharded == float64: **{check['equal']}** (worst scaled error "
        f"{worst:.2g}, tolerance {check['tolerance']:g}).",
        "",
        "Collectives in the compiled HLO:",
        "",
        common.md_table(collective_rows),
        "",
        check["why"],
        "",
        f"Before/after on this host ({before['label']}): {before['what']}, shape "
        f"{tuple(before['shape (B,H,T,D)'])}:",
        "",
        common.md_table(section["before_after"]["rows"]),
        "",
        "### Mosaic compile results per TPU generation",
        "",
        section["tpu_memory"]["what"] + f"; shape {section['tpu_memory']['shape (B,H,T,D)']}, "
        f"blocks {tuple(section['tpu_memory']['blocks'])}, causal, float32.",
        "",
        common.md_table(section["tpu_memory"]["rows"]),
    ]
    return lines


def _objective_md(section: dict) -> list[str]:
    rows = [{k: v for k, v in c.items() if k != "per_leaf"} for c in section["cases"]]
    verdict = "holds" if section["all_pass"] else "DOES NOT HOLD"
    return [
        "## 4. The global objective",
        _hardware_line(section),
        "",
        f"{section['how']} ({section['label']}). Tolerance {section['tolerance']:g}: {verdict}.",
        "",
        common.md_table(rows),
        "",
        "Worst over the cases: " + ", ".join(f"{k} {v:.2g}" for k, v in section["worst"].items()),
    ]


def render_markdown(report: dict) -> str:
    lines = [
        "# A checked kernel and a measurement-backed optimization argument",
        "",
        f"Flash attention in Pallas (core/kernels/flash_attention.py) as the byte Transformer's "
        f"attention core. Written {report['created_utc']} by `python -m capstones.pallas_kernel "
        "report`. CPU figures of the kernel come from Pallas interpret mode: they establish "
        "semantics, not speed; TPU memory comes from the TPU compiler run on this host.",
    ]
    renderers = {
        "agreement": _agreement_md,
        "profile": lambda s: _profile_md(s, report["charts"]),
        "partition": _partition_md,
        "objective": _objective_md,
    }
    for name in SECTIONS:
        section = report.get(name)
        lines += [""]
        if section is None:
            lines += [f"## {name}", "", f"Not run: `python -m capstones.pallas_kernel {name}`."]
        else:
            lines += renderers[name](section)
    lines += [
        "",
        "## What this does not show",
        "",
        f"TPU speed. A kernel-vs-XLA timing on a TPU needs `{TPU_SCRIPT}` run on a TPU VM "
        "(it refuses to label anything a TPU result elsewhere); no CPU figure here stands in "
        "for it.",
    ]
    return "\n".join(lines) + "\n"


def run_sections(names, interpret: str, quick: bool, out: pathlib.Path, progress=print) -> dict:
    """Run each named section (the same code as its command); {name: section}."""
    from capstones.pallas_kernel import agreement, objective, partition, profile

    runners = {
        "agreement": lambda: agreement.run(interpret, quick=quick, progress=progress),
        "profile": lambda: profile.measure(profile.SMALL, out, progress=progress),
        "partition": lambda: partition.run(
            interpret,
            partition.TOPOLOGIES[:1] if quick else partition.TOPOLOGIES,
            partition.TPU_TS[:1] if quick else partition.TPU_TS,
            progress=progress,
        ),
        "objective": lambda: objective.run(seeds=(0,) if quick else (0, 1, 2), interpret=interpret),
    }
    sections = {}
    for name in names:
        progress(f"report: running {name}")
        sections[name] = runners[name]()
        common.write_json(out, f"{name}.json", sections[name])
    return sections


def build(sections: dict, out: pathlib.Path) -> dict:
    """The report document from the sections (validated), and its files written in ``out``."""
    charts = {}
    if sections.get("profile") is not None:
        chart = amdahl_chart(sections["profile"]["attention_share"])
        documents.write_text_atomic(out / "amdahl.vl.json", chart.to_json())
        charts["amdahl"] = "amdahl.vl.json"
    report = {
        "format": FORMAT,
        "version": 1,
        "created_utc": common.now_utc(),
        **{name: sections.get(name) for name in SECTIONS},
        "missing": [name for name in SECTIONS if sections.get(name) is None],
        "charts": charts,
    }
    report = documents.validate(Report, report, "pallas_kernel report")
    common.write_json(out, "report.json", report)
    documents.write_text_atomic(out / "report.md", render_markdown(report))
    return report


def command(parsed: args.Parsed) -> int:
    from capstones.pallas_kernel import partition

    interpret = args.choice("interpret", parsed["interpret"], common.INTERPRETS)
    names = partition._parse_list("sections", parsed["sections"])
    for name in names:
        args.choice("sections", name, SECTIONS)
    out = pathlib.Path(parsed["out"])
    if parsed["rerun"]:
        sections = run_sections(names, interpret, parsed["quick"], out)
    else:
        sections = {}
        for name in names:
            found = common.read_json(out / f"{name}.json")
            if found is not None:
                sections[name] = documents.validate(MODELS[name], found, f"{name}.json")
    report = build(sections, out)
    print(f"wrote {out / 'report.md'} and {out / 'report.json'}; missing: {report['missing']}")
    failed = [
        name
        for name in ("agreement", "objective")
        if report.get(name) is not None and not report[name]["all_pass"]
    ]
    if report.get("partition") is not None and not report["partition"]["sharded"]["equal"]:
        failed.append("partition")
    if failed:
        print(f"FAILED sections: {failed}")
    return 1 if failed else 0


OPTIONS = {
    "out": args.Option(str, common.DEFAULT_OUT, "output folder (report.md, report.json, ...)"),
    "sections": args.Option(str, ",".join(SECTIONS), "which sections, comma-separated"),
    "rerun": args.Option(bool, True, "run the sections (false: read their JSON from out)"),
    "interpret": args.Option(str, "tpu", "tpu (races detected) or hlo (plain HLO interpreter)"),
    "quick": args.Option(bool, False, "smaller agreement table, one TPU topology and T, one seed"),
}
COMMANDS = {
    "report": args.Command(
        "every section above in one Markdown + JSON report", OPTIONS, command, False
    )
}
