"""TPU per-chip specifications, each number with its source, and what follows from them.

Published figures disagree slightly between sources and versions, so every number in the
table is a :class:`Figure` that carries its source and any alternative values. Derived
figures (ridge points, per-chip ICI from per-link figures) are computed here, never typed
in, and tested against the published values they should reproduce.

Units: FLOP/s, bytes, bytes/s. "GB" is 1e9 bytes, "GiB" is 2**30 bytes; the table keeps the
unit its source used. A figure no source publishes is None and reads "not published" in
every table (TPU7x's PCIe figure, v5e's fp8), never a guess; a capability a source says the
chip lacks reads "not supported" (TPU7x's int8 matmuls, per JAX's tpu_info).

Per-chip ICI: links x the scaling book's per-link figure comes to 0.90 of the per-chip figure
Cloud publishes, on every generation where both exist. That is no rounding: the two sources
give different link rates (Cloud's per-chip figure over its link count is 100 GB/s one way on
v5p and v6e, 50 GB/s on v5e; the scaling book uses 90 and 45), and the scaling book's footnote
says ICI links reach slightly different bandwidths depending on the operation performed.
"""

from __future__ import annotations

import dataclasses

SOURCES = {
    "scaling-book": (
        'How to Scale Your Model (jax-ml/scaling-book), chapter "tpus.md", TPU specs table; '
        "PRs #106 and #122 corrected the v5e HBM bandwidth and the v5p FLOP/s"
    ),
    "scaling-book-text": 'How to Scale Your Model, text of "tpus.md" / "roofline.md"',
    "scaling-book-appendix": (
        'How to Scale Your Model, "How to Think About TPUs", Appendix A: More on TPU internals '
        '(VPU; its figures are v5p\'s unless noted; pop quiz "Calculating VPU throughput")'
    ),
    "cloud-v5e": "Google Cloud TPU documentation, TPU v5e page",
    "cloud-v5p": "Google Cloud TPU documentation, TPU v5p page",
    "cloud-v6e": "Google Cloud TPU documentation, TPU v6e (Trillium) page",
    "cloud-tpu7x": (
        "Google Cloud TPU documentation, TPU7x (Ironwood) page (cloud.google.com/tpu/docs/tpu7x, "
        "read 2026-12): its table of v5p, v6e and TPU7x per-chip figures"
    ),
    "older-table": "an earlier version of the scaling-book specs table",
    "jax-tpu-info": (
        "JAX's TPU hardware table, jax._src.pallas.mosaic.tpu_info (TpuInfo per chip version; "
        "rendered at docs.jax.dev/en/latest/pallas/tpu/hardware.html)"
    ),
}
SOURCE_URLS = {
    "scaling-book": "https://jax-ml.github.io/scaling-book/tpus/",
    "scaling-book-text": "https://jax-ml.github.io/scaling-book/tpus/",
    "scaling-book-appendix": (
        "https://jax-ml.github.io/scaling-book/tpus/#appendix-a-more-on-tpu-internals"
    ),
    "cloud-v5e": "https://cloud.google.com/tpu/docs/v5e",
    "cloud-v5p": "https://cloud.google.com/tpu/docs/v5p",
    "cloud-v6e": "https://cloud.google.com/tpu/docs/v6e",
    "cloud-tpu7x": "https://cloud.google.com/tpu/docs/tpu7x",
    "older-table": "https://github.com/jax-ml/scaling-book/blob/main/tpus.md",
    "jax-tpu-info": "https://docs.jax.dev/en/latest/pallas/tpu/hardware.html",
}
NOT_SUPPORTED = "not supported"
ICI_RATIO_REASON = (
    "the sources' link rates differ: Cloud's per-chip figure / links is 100 GB/s one way "
    "(50 on v5e), the scaling book's 90 (45); its footnote: links reach slightly different "
    "bandwidths depending on the operation"
)


@dataclasses.dataclass(frozen=True)
class Figure:
    """One published number: value (SI units), its source, alternatives from other sources."""

    value: float
    source: str
    unit: str = ""
    alternatives: tuple[tuple[float, str], ...] = ()  # (value, source) pairs that disagree

    def __post_init__(self):
        for source in (self.source, *(s for _, s in self.alternatives)):
            if source not in SOURCES:
                raise ValueError(f"unknown source {source!r}: add it to specs.SOURCES")

    def values(self) -> list[tuple[float, str]]:
        """The value and every alternative, each with its source."""
        return [(self.value, self.source), *self.alternatives]


@dataclasses.dataclass(frozen=True)
class ChipSpec:
    """Per-chip figures of one TPU generation."""

    generation: str
    bf16_flops: Figure
    int8_ops: Figure | None  # None with int8_supported False: the chip has no int8 matmul
    hbm_bytes: Figure
    hbm_bandwidth: Figure
    ici_link_one_way: Figure | None  # bytes/s per ICI link, one direction
    ici_link_bidirectional: Figure | None
    ici_links: int | None  # links (ports) per chip: 4 in a 2D torus, 6 in a 3D torus
    ici_chip_bidirectional: Figure  # the per-chip figure Cloud publishes
    torus: str
    largest_pod: str
    chips_per_host: int
    host_chip_layout: str
    tensorcores: int
    mxus: str
    dcn_egress: Figure
    pcie: Figure | None
    topology_name: str  # a name jax.experimental.topologies.get_topology_desc accepts
    # JAX devices per chip: 1 where the TensorCores act as one device (v5p's megacore), 2 on
    # TPU7x (each TensorCore is a device); probed here with libtpu (core/tpu/generations_test).
    devices_per_chip: int = 1
    fp8_flops: Figure | None = None  # None: no published fp8 figure (no native fp8 either)
    int8_supported: bool = True  # False on TPU7x: JAX's tpu_info lists no int8 matmul there
    # The largest slice one ICI domain takes, in chips (the pod for v5e and v6e).
    max_slice_chips: int = 0
    max_slice_source: str = ""

    @property
    def ridge_point(self) -> float:
        """bf16 FLOP per HBM byte at which a kernel stops being memory-bound."""
        return ridge_point(self.bf16_flops.value, self.hbm_bandwidth.value)

    @property
    def ici_chip_bidirectional_derived(self) -> float | None:
        """Per-chip bidirectional ICI bandwidth from the per-link figure: links x per link.

        None where no source publishes the per-link figure or the link count."""
        if self.ici_links is None or self.ici_link_bidirectional is None:
            return None
        return self.ici_links * self.ici_link_bidirectional.value


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """FLOP per byte where compute time equals memory time: peak FLOP/s / bytes/s."""
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(
            f"peak FLOP/s and bandwidth must be positive, got {peak_flops}, {bandwidth}"
        )
    return peak_flops / bandwidth


def _f(value, source, unit="", *alternatives):
    return Figure(float(value), source, unit, tuple((float(v), s) for v, s in alternatives))


CHIPS: dict[str, ChipSpec] = {
    "v5e": ChipSpec(
        generation="v5e",
        bf16_flops=_f(1.97e14, "scaling-book", "FLOP/s"),
        int8_ops=_f(3.94e14, "scaling-book", "OP/s"),
        hbm_bytes=_f(16e9, "scaling-book", "GB"),
        hbm_bandwidth=_f(
            8.2e11, "scaling-book", "B/s", (8.19e11, "cloud-v5e"), (8.1e11, "older-table")
        ),
        ici_link_one_way=_f(4.5e10, "scaling-book", "B/s"),
        ici_link_bidirectional=_f(9e10, "scaling-book", "B/s"),
        ici_links=4,
        ici_chip_bidirectional=_f(4e11, "cloud-v5e", "B/s"),
        torus="2D torus",
        largest_pod="16x16",
        chips_per_host=8,
        host_chip_layout="4x2",
        tensorcores=1,
        mxus="4 MXU of 128x128",
        dcn_egress=_f(3.125e9, "scaling-book", "B/s"),
        pcie=_f(1.6e10, "scaling-book", "B/s"),
        topology_name="v5e:2x2",
        max_slice_chips=256,
        max_slice_source="cloud-v5e",
    ),
    "v5p": ChipSpec(
        generation="v5p",
        bf16_flops=_f(4.59e14, "scaling-book", "FLOP/s"),
        int8_ops=_f(9.18e14, "scaling-book", "OP/s"),
        # Cloud's table: 95 GiB user-allocatable (about 102e9 bytes; its note: 96 GiB
        # physical, the rest reserved by the runtime); the scaling book writes 96GB.
        hbm_bytes=_f(95 * 2**30, "cloud-v5p", "GiB", (96e9, "scaling-book")),
        hbm_bandwidth=_f(
            2.8e12, "scaling-book", "B/s", (2.5e12, "scaling-book-text"), (2.765e12, "cloud-v5p")
        ),
        ici_link_one_way=_f(9e10, "scaling-book", "B/s"),
        ici_link_bidirectional=_f(1.8e11, "scaling-book", "B/s"),
        ici_links=6,
        ici_chip_bidirectional=_f(1.2e12, "cloud-v5p", "B/s"),
        torus="3D torus",
        largest_pod="16x20x28 (8960 chips)",
        chips_per_host=4,
        host_chip_layout="2x2x1",
        tensorcores=2,
        mxus="4 MXU per TC (megacore: the 2 TCs act as one device)",
        dcn_egress=_f(6.25e9, "scaling-book", "B/s"),
        pcie=_f(1.6e10, "scaling-book", "B/s"),
        topology_name="v5p:2x2x1",
        fp8_flops=_f(4.59e14, "cloud-tpu7x", "FLOP/s"),  # the same as bf16: no fp8 speed-up
        # "The maximum v5p shape is 16x16x24 (6144 chips)": the pod has 8960 chips
        max_slice_chips=6144,
        max_slice_source="cloud-v5p",
    ),
    "v6e": ChipSpec(
        generation="v6e",
        bf16_flops=_f(9.2e14, "scaling-book", "FLOP/s", (9.18e14, "cloud-v6e")),
        int8_ops=_f(1.84e15, "scaling-book", "OP/s"),
        hbm_bytes=_f(32e9, "scaling-book", "GB"),
        hbm_bandwidth=_f(1.6e12, "scaling-book", "B/s", (1.638e12, "cloud-v6e")),
        ici_link_one_way=_f(9e10, "scaling-book", "B/s"),
        ici_link_bidirectional=_f(1.8e11, "scaling-book", "B/s"),
        ici_links=4,
        ici_chip_bidirectional=_f(8e11, "cloud-v6e", "B/s"),
        torus="2D torus",
        largest_pod="16x16",
        chips_per_host=8,
        host_chip_layout="4x2",
        tensorcores=1,
        mxus="2 MXU of 256x256",
        dcn_egress=_f(1.25e10, "scaling-book", "B/s"),
        pcie=_f(3.2e10, "scaling-book", "B/s"),
        topology_name="v6e:2x2",
        fp8_flops=_f(9.18e14, "cloud-tpu7x", "FLOP/s"),
        max_slice_chips=256,
        max_slice_source="cloud-v6e",
    ),
    # Ironwood. Cloud's TPU7x table gives the per-chip figures (1200 GB/s bidirectional ICI,
    # as v5p); JAX's tpu_info gives the 256-wide MXU and no int8 matmul. Neither Cloud's TPU7x
    # page nor the scaling book's TPU chapter (its ICI table stops at v6e) gives a per-link ICI
    # figure or a link count, and Cloud's TPU7x table has no topology row: those read "not
    # published" (a 3D torus is what reports of Google's Hot Chips 2025 talk describe; libtpu
    # takes 3D topology names, tpu7x:2x2x1). No source gives a PCIe figure either.
    "tpu7x": ChipSpec(
        generation="tpu7x",
        bf16_flops=_f(2.307e15, "cloud-tpu7x", "FLOP/s"),
        int8_ops=None,
        int8_supported=False,
        hbm_bytes=_f(192 * 2**30, "cloud-tpu7x", "GiB"),
        hbm_bandwidth=_f(7.38e12, "cloud-tpu7x", "B/s"),
        ici_link_one_way=None,
        ici_link_bidirectional=None,
        ici_links=None,
        ici_chip_bidirectional=_f(1.2e12, "cloud-tpu7x", "B/s"),
        torus="3D torus, per reports of Google's Hot Chips 2025 talk",
        largest_pod="9216 chips",
        chips_per_host=4,
        host_chip_layout="2x2x1",
        tensorcores=2,
        mxus="MXU of 256x256 (jax-tpu-info: mxu_column_size 256)",
        dcn_egress=_f(1.25e10, "cloud-tpu7x", "B/s"),  # 100 Gb/s per chip
        pcie=None,
        topology_name="tpu7x:2x2x1",
        devices_per_chip=2,
        fp8_flops=_f(4.614e15, "cloud-tpu7x", "FLOP/s"),
        max_slice_chips=9216,
        max_slice_source="cloud-tpu7x",
    ),
}
GENERATIONS = tuple(CHIPS)


def generations_with_link_figures() -> tuple[str, ...]:
    """The generations whose per-link ICI figure a source publishes (not TPU7x)."""
    return tuple(g for g, spec in CHIPS.items() if spec.ici_link_bidirectional is not None)


def chip(generation: str) -> ChipSpec:
    """The spec of ``generation`` ("v5e", "v5p", "v6e" or "tpu7x")."""
    if generation not in CHIPS:
        raise ValueError(f"unknown TPU generation {generation!r}: choose one of {GENERATIONS}")
    return CHIPS[generation]


def ridge_point_range(spec: ChipSpec) -> tuple[float, float]:
    """The lowest and highest ridge point over every published FLOP/s and bandwidth pair."""
    points = [
        ridge_point(flops, bandwidth)
        for flops, _ in spec.bf16_flops.values()
        for bandwidth, _ in spec.hbm_bandwidth.values()
    ]
    return min(points), max(points)


NOT_PUBLISHED = "not published"


def _si(value: float, unit: str) -> str:
    if unit == "GiB":
        return f"{value / 2**30:.0f} GiB"
    if unit == "GB":
        return f"{value / 1e9:.0f} GB"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G")):
        if value >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def _figure_text(figure: Figure | None, absent: str = NOT_PUBLISHED) -> str:
    if figure is None:
        return absent
    text = _si(figure.value, figure.unit)
    for value, source in figure.alternatives:
        if value % 2**30 == 0:
            alt = f"{value / 2**30:.0f} GiB"
        else:  # a capacity that is no whole GiB is in GB (1e9 bytes)
            alt = _si(value, "GB" if figure.unit in ("GB", "GiB") else figure.unit)
        text += f" ({source}: {alt})"
    return text


def spec_rows(generations: tuple[str, ...] = GENERATIONS) -> list[dict]:
    """The spec table, one row per figure and one column per generation, plus sources."""
    specs = [chip(g) for g in generations]
    fields = [
        ("bf16 FLOP/s", lambda s: s.bf16_flops),
        ("fp8 FLOP/s", lambda s: s.fp8_flops),
        ("int8 OP/s", lambda s: s.int8_ops),
        ("HBM capacity", lambda s: s.hbm_bytes),
        ("HBM bandwidth", lambda s: s.hbm_bandwidth),
        ("ICI per link, one way", lambda s: s.ici_link_one_way),
        ("ICI per link, bidirectional", lambda s: s.ici_link_bidirectional),
        ("ICI per chip, bidirectional (published)", lambda s: s.ici_chip_bidirectional),
        ("DCN egress per chip", lambda s: s.dcn_egress),
        ("PCIe", lambda s: s.pcie),
    ]
    rows = []
    for name, get in fields:
        row = {"per chip": name}
        sources = set()
        for spec in specs:
            figure = get(spec)
            absent = NOT_SUPPORTED if name == "int8 OP/s" and not spec.int8_supported else None
            row[spec.generation] = _figure_text(figure, absent or NOT_PUBLISHED)
            if figure is not None:
                sources.update(s for _, s in figure.values())
        row["source"] = ", ".join(sorted(sources))
        rows.append(row)
    plain = [
        (
            "ICI links per chip",
            lambda s: f"{s.ici_links or NOT_PUBLISHED} ({s.torus})",
            "scaling-book, cloud pages",
        ),
        (
            "largest slice or pod (chips)",
            lambda s: f"{s.max_slice_chips} ({s.max_slice_source})",
            "cloud pages",
        ),
        (
            "largest pod / chips per host",
            lambda s: f"{s.largest_pod} / {s.host_chip_layout} ({s.chips_per_host})",
            "scaling-book, cloud-tpu7x",
        ),
        (
            "TensorCores / MXUs",
            lambda s: f"{s.tensorcores} TC, {s.mxus}",
            "scaling-book, cloud, jax-tpu-info",
        ),
        (
            "JAX devices per chip",
            lambda s: str(s.devices_per_chip),
            "probed: jax.experimental.topologies + libtpu",
        ),
        (
            "topology name for compiling here",
            lambda s: f"`{s.topology_name}`",
            "probed: jax.experimental.topologies + libtpu",
        ),
    ]
    for name, get, source in plain:
        rows.append({"per chip": name, **{s.generation: get(s) for s in specs}, "source": source})
    return rows


def derived_rows(generations: tuple[str, ...] = GENERATIONS) -> list[dict]:
    """Figures computed from the table: ridge points and per-chip ICI from per-link numbers."""
    rows = []
    for generation in generations:
        spec = chip(generation)
        low, high = ridge_point_range(spec)
        derived_ici = spec.ici_chip_bidirectional_derived
        published = spec.ici_chip_bidirectional.value
        if derived_ici is None:
            per_link, ratio = f"{NOT_PUBLISHED} (no per-link figure)", NOT_PUBLISHED
        else:
            per_link = (
                f"{spec.ici_links} x {spec.ici_link_bidirectional.value / 1e9:.0f} GB/s "
                f"= {derived_ici / 1e9:.0f} GB/s"
            )
            ratio = f"{derived_ici / published:.2f}"
        rows.append(
            {
                "generation": generation,
                "bf16 ridge point (FLOP/byte)": f"{spec.ridge_point:.0f}",
                "ridge range over sources": f"{low:.0f}-{high:.0f}",
                "ICI per chip = links x per-link": per_link,
                "published per chip": f"{published / 1e9:.0f} GB/s",
                "derived / published": ratio,
            }
        )
    return rows


# jax's device_kind of each generation's chip (a v5e reports "TPU v5 lite")
DEVICE_KIND_GENERATION = {
    "TPU v5 lite": "v5e",
    "TPU v5e": "v5e",
    "TPU v6 lite": "v6e",
    "TPU v6e": "v6e",
    "TPU v5": "v5p",
    "TPU v5p": "v5p",
}


def bf16_peak_of_device_kind(device_kind: str) -> float | None:
    """One chip's bf16 peak FLOP/s for a jax device_kind ("TPU v5 lite": 1.97e14), or None
    for a kind not in DEVICE_KIND_GENERATION (a CPU, an unknown chip)."""
    generation = DEVICE_KIND_GENERATION.get(device_kind)
    return None if generation is None else chip(generation).bf16_flops.value
