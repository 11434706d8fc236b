"""The plan's recommendation: generation and slice from the per-chip footprint vs HBM, a
roofline bound on tokens/s per chip, and the list price per chip-hour; when to move up."""

from __future__ import annotations

import math

from capstones.byte_transformer import config as config_lib
from capstones.byte_transformer.plan import memory
from core.tpu import cloud_tpu, slice_planner, specs

# On-demand list price per chip-hour (USD), Cloud TPU pricing page (us-central1) as of
# late 2024. Prices change and differ by region and commitment: check before provisioning.
# TPU7x has no list price there (its page: "contact your account team"), so the plan shows
# its footprint and roofline bound and leaves it out of the cost comparison.
PRICE_PER_CHIP_HOUR = {"v5e": 1.20, "v6e": 2.70, "v5p": 4.20}
PRICE_SOURCE = (
    "on-demand list prices per chip-hour, cloud.google.com/tpu/pricing (us-central1, late "
    "2024): v5e $1.20, v6e $2.70, v5p $4.20; they change, check before provisioning. "
    "TPU7x: no list price published (access through the account team), so not priced here"
)
# Slice sizes (chips) a single generation offers (core.tpu.cloud_tpu.ACCELERATOR_TYPES).
SLICE_CHIPS = {
    generation: sorted(
        t.chips for t in cloud_tpu.ACCELERATOR_TYPES.values() if t.generation == generation
    )
    for generation in specs.GENERATIONS
}


def generation_of(topology: str) -> str:
    return topology.split(":", 1)[0]


def accelerator_type(generation: str, chips: int) -> str | None:
    """The gcloud accelerator type with ``chips`` chips of ``generation`` (None if none)."""
    for name, kind in cloud_tpu.ACCELERATOR_TYPES.items():
        if kind.generation == generation and kind.chips == chips:
            return name
    return None


def step_cost(analytic: dict, compiled: dict[str, dict], generation: str) -> dict:
    """Per-chip footprint, FLOPs and HBM bytes of one step on ``generation``, and where
    each comes from: this generation's compile, another one's, or the analytic model."""
    own = next((c for t, c in compiled.items() if generation_of(t) == generation), None)
    source = own or next(iter(compiled.values()), None)
    if source is None:
        return {
            "footprint": analytic["peak_liveness_bytes"],
            "footprint_source": "analytic (liveness estimate)",
            "flops": analytic["flops_per_step"],
            # state traffic (read params, grads, mu, nu; write params, mu, nu) + saved
            # activations written once and read once
            "moved": 28 * analytic["params"] + 2 * analytic["saved_activations_bytes"],
            "cost_source": "analytic (28 N + 2 x saved activations bytes)",
        }
    return {
        "footprint": own["peak_bytes"] if own else analytic["peak_liveness_bytes"],
        "footprint_source": f"compiler ({own['topology']})"
        if own
        else "analytic (liveness estimate)",
        "flops": source["flops"],
        "moved": source["bytes_accessed"],
        "cost_source": f"compiled for {source['topology']}",
    }


def max_rows_per_chip(config: config_lib.Config, analytic: dict, hbm_bytes: float) -> int | None:
    """Rows per chip that fit: 90% of HBM minus old state, new state and gradients, divided
    by what one row adds (its saved activations and its batch bytes)."""
    fixed = 2 * sum(memory.state_bytes(config).values()) + analytic["gradients_bytes"]
    per_row = (
        analytic["saved_activations_bytes"] + memory.batch_bytes(config, analytic["local_batch"])
    ) / analytic["local_batch"]
    room = 0.9 * hbm_bytes - fixed
    return int(room // per_row) if per_row > 0 else None


def generation_row(
    config: config_lib.Config,
    analytic: dict,
    compiled: dict[str, dict],
    generation: str,
    target_tokens_per_s: float,
) -> dict:
    """One generation's footprint, roofline bound, price and slice for the target."""
    spec = specs.chip(generation)
    cost = step_cost(analytic, compiled, generation)
    compute_s = cost["flops"] / spec.bf16_flops.value
    memory_s = cost["moved"] / spec.hbm_bandwidth.value
    per_chip = analytic["tokens_per_chip"] / max(compute_s, memory_s)
    price = PRICE_PER_CHIP_HOUR.get(generation)  # None: no published price
    needed = max(1, math.ceil(target_tokens_per_s / per_chip))
    slice_chips = next((n for n in SLICE_CHIPS[generation] if n >= needed), None)
    return {
        "generation": generation,
        "hbm_bytes": spec.hbm_bytes.value,
        "footprint_bytes": int(cost["footprint"]),
        "footprint_source": cost["footprint_source"],
        "hbm_used_pct": round(100 * cost["footprint"] / spec.hbm_bytes.value, 3),
        "step_flops": cost["flops"],
        "step_bytes": cost["moved"],
        "cost_source": cost["cost_source"],
        "step_compute_s": compute_s,
        "step_memory_s": memory_s,
        "bound": "HBM bandwidth" if memory_s > compute_s else "compute (bf16 peak)",
        "tokens_per_s_per_chip": per_chip,
        "usd_per_chip_hour": price,
        "usd_per_million_tokens": None if price is None else price / 3600 / per_chip * 1e6,
        "chips_for_target": needed,
        "slice_chips_for_target": slice_chips,
        "accelerator_type_for_target": accelerator_type(generation, slice_chips)
        if slice_chips
        else None,
        "max_rows_per_chip": max_rows_per_chip(config, analytic, spec.hbm_bytes.value),
    }


def reasons(
    config: config_lib.Config, analytic: dict, rows: list[dict], choice: dict, target: float
) -> list[str]:
    """Why this generation and topology (footprint, bound, cost, topology, v6e)."""
    by_gen = {r["generation"]: r for r in rows}
    v5e, best = by_gen["v5e"], by_gen[choice["generation"]]
    chips, topology, tokens = choice["chips"], choice["topology"], analytic["tokens_per_chip"]
    return [
        f"footprint: the step needs {v5e['footprint_bytes'] / 1e6:.1f} MB per chip "
        f"({v5e['footprint_source']}), {v5e['hbm_used_pct']:.2f}% of a "
        "v5e chip's 16 GB: every generation holds it many times over, so HBM capacity does "
        "not decide.",
        f"per chip the step is bound by {best['bound']}: at least "
        f"{max(best['step_compute_s'], best['step_memory_s']) * 1e3:.3f} ms for "
        f"{tokens} tokens on {best['generation']} (a roofline bound, not a measurement; "
        "a step this small is also dominated by launch and host overheads, which favour "
        "the cheapest chip).",
        "cost per million tokens at the bound: "
        + ", ".join(
            f"{r['generation']} ${r['usd_per_million_tokens']:.3g}"
            if r["usd_per_million_tokens"] is not None
            else f"{r['generation']} not priced (no list price)"
            for r in rows
        )
        + f" -> {best['generation']} is the cheapest that fits and that the Cloud TPU API "
        "creates (TPU7x is made through GKE or Compute Engine).",
        f"topology: {topology} ({choice['accelerator_type']}, one host, "
        f"{chips} chips) data parallel: global batch {config.batch_size} splits as "
        f"{config.batch_size // chips if config.batch_size % chips == 0 else 'n/a'} rows per "
        f"chip; the target {target:,.0f} tokens/s needs "
        f"{best['chips_for_target']} chip(s) at the bound; a 2x2 slice is the smallest that "
        "exercises data parallelism across chips (gradients all-reduced over ICI).",
        "v6e has 4.7x v5e's bf16 FLOP/s and 2x its HBM bandwidth for 2.25x the price: it "
        "wins once the step is compute-bound (bfloat16 compute, larger b x T per chip, "
        "wider model), not for this tiny float32 model.",
    ]


def move_up_when(config: config_lib.Config, rows: list[dict]) -> list[str]:
    """When this choice stops being the right one."""
    v5e = {r["generation"]: r for r in rows}["v5e"]
    return [
        f"batch per chip: on v5e about {v5e['max_rows_per_chip']:,} rows of "
        f"{config.seq_len} bytes per chip fit (90% of 16 GB); beyond that use more chips or "
        "remat (hypothesis below), or v6e (32 GB) / v5p (95 GiB).",
        "model size: data parallelism keeps 16 bytes per parameter (f32 params, grads, Adam "
        "mu and nu) on every chip; past ~0.5 B parameters (8 GB) a v5e chip has no room left "
        "for activations: shard the state (FSDP) or move to v6e / v5p.",
        "compute-bound steps (bfloat16 compute, d_model >= 1024, long sequences): move to "
        "v6e for FLOP/s per dollar; more than 256 chips or 3D model parallelism: v5p.",
        "float32 matmuls run as several bf16 passes on the MXU: the bf16 peak used here is "
        "optimistic for compute_dtype=float32.",
    ]


def recommendation(
    config: config_lib.Config,
    analytic: dict,
    compiled: dict[str, dict],
    target_tokens_per_s: float,
) -> dict:
    """Generation and slice from footprint vs HBM and a roofline bound per chip.

    Per chip the step moves ``bytes_accessed`` through HBM and does ``flops`` (compiled
    figures when available, else the analytic FLOPs and 3x the state + activations as
    bytes); the step takes at least max(flops / bf16 peak, bytes / HBM bandwidth).
    Weak scaling: each chip keeps b = B / chips rows, so tokens/s grows with chips.
    """
    rows = [
        generation_row(config, analytic, compiled, generation, target_tokens_per_s)
        for generation in specs.GENERATIONS
    ]
    fitting = [
        r
        for r in rows
        if r["hbm_used_pct"] < 90
        and r["usd_per_million_tokens"] is not None
        and cloud_tpu.provisioning_problem(r["generation"]) is None
    ]
    best = min(fitting, key=lambda r: r["usd_per_million_tokens"])
    chips = best["slice_chips_for_target"] or SLICE_CHIPS[best["generation"]][-1]
    chips = max(chips, 4)  # a 2x2 slice: one host, data parallel over 4 chips
    layout = slice_planner.TOPOLOGY_2D  # v5e and v6e slices are 2D tori
    choice = {
        "generation": best["generation"],
        "topology": f"{best['generation']}:{layout.get(chips, str(chips))}",
        "accelerator_type": accelerator_type(best["generation"], chips),
        "chips": chips,
    }
    return {
        "choice": choice,
        "generations": rows,
        "target_tokens_per_s": target_tokens_per_s,
        "reasons": reasons(config, analytic, rows, choice, target_tokens_per_s),
        "move_up_when": move_up_when(config, rows),
        "price_source": PRICE_SOURCE,
    }
