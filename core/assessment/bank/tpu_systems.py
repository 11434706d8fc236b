"""The assessment item of the phase "TPU Systems: Generations, Memory, Precision & XProf".

- ``tpu_systems.kv_cache_hbm`` (predict): the share of HBM a KV cache takes.

Every figure a question uses comes from the course's TPU library (core/tpu/specs.py, with
its sources; core/tpu/cloud_tpu.py for slice names) and every expected answer is computed:
``live`` with the library, ``derive`` by the closed form in plain Python, independently.
"""

from __future__ import annotations

from core.assessment.bank.common import cite, pick
from core.assessment.items import Item, PredictItem
from core.tpu import budget, specs

GIB = 2**30
GB = 1e9


_KV_DTYPES = ("bfloat16", "int8", "float32")
_KV_DTYPE_BYTES = {"bfloat16": 2, "int8": 1, "float32": 4}  # the derivation's own table


class KvCacheHbm(PredictItem):
    """One chip's share of a GQA decoder's KV cache as a percent of that chip's HBM."""

    id = "tpu_systems.kv_cache_hbm"
    phase = "TPU Systems: Generations, Memory, Precision & XProf"
    lesson = "tpu_generations_hbm"
    title = "KV-cache HBM on a TPU generation"
    units = "%"
    rel_tol = 0.01  # tight: GiB against GB is a 7.4% mistake

    def params(self, generator):
        for _ in range(1000):  # resample until one chip's share is a plausible 2-95% of HBM
            kv_heads = pick(generator, (4, 8, 16))
            p = {
                "generation": pick(generator, specs.GENERATIONS),
                "layers": pick(generator, (16, 24, 32, 40, 48, 64, 80)),
                "kv_heads": kv_heads,
                "heads": kv_heads * pick(generator, (2, 4, 8)),
                "head_dim": pick(generator, (64, 128, 256)),
                "batch": pick(generator, (1, 2, 4, 8, 16, 32, 64)),
                "context": pick(generator, (4096, 8192, 16384, 32768, 65536, 131072)),
                "kv_dtype": pick(generator, _KV_DTYPES),
                "chips": pick(generator, [c for c in (1, 2, 4, 8) if kv_heads % c == 0]),
            }
            if 2.0 <= self.derive(p)[0] <= 95.0:
                return p
        raise RuntimeError("no KV-cache parameters in range")  # never reached in practice

    def _shape(self, p) -> budget.TransformerShape:
        d_model = p["heads"] * p["head_dim"]
        return budget.TransformerShape(
            vocab=32000,
            d_model=d_model,
            layers=p["layers"],
            heads=p["heads"],
            d_ff=4 * d_model,
            kv_heads=p["kv_heads"],
            head_dim=p["head_dim"],
        )

    def _hbm_text(self, generation: str) -> str:
        """One chip's HBM in the unit its source uses, with the source's key."""
        figure = specs.chip(generation).hbm_bytes
        if figure.unit == "GiB":
            return f"{figure.value / GIB:.0f} GiB (source: {figure.source})"
        return f"{figure.value / GB:.0f} GB (source: {figure.source})"

    def prompt(self, p):
        return (
            f"A decoder with **{p['layers']} layers**, **{p['heads']} query heads** and "
            f"**{p['kv_heads']} KV heads** (grouped-query attention), head dim "
            f"**{p['head_dim']}**, serves a batch of **{p['batch']}** sequences at a context "
            f"of **{p['context']:,}** tokens, with its KV cache in **{p['kv_dtype']}**. It runs "
            f"on **{p['chips']} {p['generation']} chip{'s' if p['chips'] > 1 else ''}**, the KV "
            "heads split evenly over the chips (tensor parallel). One "
            f"{p['generation']} chip has {self._hbm_text(p['generation'])} of HBM "
            "(GB = 1e9 bytes, GiB = 2^30 bytes).\n\n"
            "What **percent of one chip's HBM** does that chip's share of the KV cache fill?"
        )

    def live(self, p):
        setup = budget.ServingSetup(
            batch=p["batch"], context=p["context"], kv_dtype=p["kv_dtype"], chips=p["chips"]
        )
        per_chip = budget.serving_budget(self._shape(p), setup)["KV cache"]
        return 100.0 * per_chip / specs.chip(p["generation"]).hbm_bytes.value

    def derive(self, p):
        itemsize = _KV_DTYPE_BYTES[p["kv_dtype"]]
        elements = 2 * p["layers"] * p["batch"] * p["context"] * p["kv_heads"] * p["head_dim"]
        total = elements * itemsize
        per_chip = total / p["chips"]
        hbm = specs.chip(p["generation"]).hbm_bytes.value
        percent = 100.0 * per_chip / hbm
        text = (
            "KV cache = 2 (K and V) x layers x batch x context x KV heads x head dim x bytes\n\n"
            f"= 2 x {p['layers']} x {p['batch']} x {p['context']:,} x {p['kv_heads']} x "
            f"{p['head_dim']} x {itemsize} B ({p['kv_dtype']}) = {total:,} B "
            f"= {total / GIB:.4g} GiB\n\n"
            f"Per chip (KV heads split over {p['chips']}): {total / GIB:.4g} / {p['chips']} "
            f"= {per_chip / GIB:.4g} GiB = {per_chip / GB:.4g} GB\n\n"
            f"One {p['generation']} chip's HBM: {self._hbm_text(p['generation'])} = "
            f"{hbm:.4g} B\n\n"
            f"Share: {per_chip:.4g} B / {hbm:.4g} B = **{percent:.4g}%**, leaving "
            f"{(hbm - per_chip) / GIB:.4g} GiB for the weights and the rest.\n\n"
            f"Source of the HBM figure: {cite(specs.chip(p['generation']).hbm_bytes)}.\n\n"
            "Lesson: count both K and V, use the KV heads (not the query heads: grouped-query "
            f"attention shrinks the cache {p['heads'] // p['kv_heads']}x here), and keep bytes "
            "in one unit: HBM is published in GB for some generations and in GiB for others."
        )
        return percent, text

    def wrong(self, p, expected):
        hbm = specs.chip(p["generation"]).hbm_bytes
        # the cache in GiB over an HBM figure read in GB, or the cache in GB over HBM in GiB
        units = GB / GIB if hbm.unit == "GB" else GIB / GB
        wrong = {
            "K or V only (the factor 2 forgotten)": expected / 2,
            "units: GiB and GB mixed": expected * units,
            "query heads used instead of KV heads": expected * p["heads"] / p["kv_heads"],
        }
        if p["chips"] > 1:
            wrong["the cache not split over the chips"] = expected * p["chips"]
        return wrong


ITEMS: tuple[Item, ...] = (KvCacheHbm(),)
