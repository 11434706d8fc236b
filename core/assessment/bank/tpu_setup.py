"""The assessment item of the phase "TPU Setup: Provisioning & Runtime Verification".

- ``tpu_setup.slice_chips`` (predict): the chips in a slice name.

Every figure a question uses comes from the course's TPU library (core/tpu/specs.py, with
its sources; core/tpu/cloud_tpu.py for slice names) and every expected answer is computed:
``live`` with the library, ``derive`` by the closed form in plain Python, independently.
"""

from __future__ import annotations

import math

from core.assessment.bank.common import pick
from core.assessment.items import Item, PredictItem
from core.tpu import cloud_tpu, specs


class SliceChips(PredictItem):
    """How many chips a slice name means: v5p names count TensorCores, v5e/v6e names count
    chips, TPU7x slices are named by their chip topology."""

    id = "tpu_setup.slice_chips"
    phase = "TPU Setup: Provisioning & Runtime Verification"
    lesson = "select_tpu_slice"
    title = "Chips in a TPU slice name"
    units = ""
    rel_tol = 0.0
    abs_tol = 0.5  # a count: the nearest integer

    def params(self, generator):
        generation = pick(generator, specs.GENERATIONS)
        names = [
            name
            for name, kind in cloud_tpu.ACCELERATOR_TYPES.items()
            if kind.generation == generation and kind.chips >= 4
        ]
        return {"name": pick(generator, names)}

    def prompt(self, params):
        name = params["name"]
        if name.startswith("tpu7x:"):
            given = (
                f"A TPU7x (Ironwood) slice has the topology `{name}` (the name libtpu and GKE "
                "use: TPU7x has no Cloud TPU API accelerator type)."
            )
        else:
            given = f"You create a Cloud TPU VM with `--accelerator-type={name}`."
        return f"{given}\n\nHow many TPU **chips** does the slice have?"

    def live(self, params):
        return float(cloud_tpu.ACCELERATOR_TYPES[params["name"]].chips)

    def _by_rule(self, name: str) -> tuple[str, int, str]:
        """(generation, chips, the rule in words) from the name alone."""
        if name.startswith("tpu7x:"):
            dims = [int(d) for d in name.split(":", 1)[1].split("x")]
            chips = math.prod(dims)
            product = " x ".join(str(d) for d in dims)
            return "tpu7x", chips, f"a TPU7x topology counts chips per axis: {product} = {chips}"
        prefix, number = name.rsplit("-", 1)
        count = int(number)
        if prefix == "v5p":
            return (
                "v5p",
                count // 2,
                f"a v5p name counts TensorCores, 2 per chip: {count} / 2 = {count // 2}",
            )
        generation = "v5e" if prefix == "v5litepod" else prefix
        return generation, count, f"a {generation} name counts chips (1 TensorCore each): {count}"

    def derive(self, params):
        generation, chips, rule = self._by_rule(params["name"])
        spec = specs.chip(generation)
        hosts = -(-chips // spec.chips_per_host)
        devices = chips * spec.devices_per_chip
        text = (
            f"**{params['name']}**: {rule} chips.\n\n"
            f"- TensorCores: {chips} chips x {spec.tensorcores} = {chips * spec.tensorcores}\n"
            f"- JAX devices: {chips} x {spec.devices_per_chip} per chip = {devices}"
            + (" (each TPU7x TensorCore is its own device)" if spec.devices_per_chip > 1 else "")
            + "\n"
            f"- hosts (gcloud workers): ceil({chips} / {spec.chips_per_host} chips per host) "
            f"= {hosts}\n\n"
            "Lesson: read the generation's naming rule before you size a slice. v5p names "
            "count TensorCores, v5e (`v5litepod-N`) and v6e names count chips, TPU7x is named "
            "by its chip topology; chips, TensorCores, JAX devices and hosts are four "
            "different counts."
        )
        return float(chips), text

    def wrong(self, params, expected):
        generation, chips, _rule = self._by_rule(params["name"])
        spec = specs.chip(generation)
        hosts = -(-chips // spec.chips_per_host)
        wrong = {"hosts taken for chips": float(hosts)}
        if generation == "v5p":
            wrong["the name's number taken as chips (it counts TensorCores)"] = float(2 * chips)
        elif generation == "tpu7x":
            dims = [int(d) for d in params["name"].split(":", 1)[1].split("x")]
            wrong["TensorCores / JAX devices taken for chips"] = float(2 * chips)
            wrong["the topology's dimensions added, not multiplied"] = float(sum(dims))
        else:
            wrong["v5p's rule applied: the number halved"] = float(chips / 2)
        return {k: v for k, v in wrong.items() if abs(v - expected) > self.abs_tol}


ITEMS: tuple[Item, ...] = (SliceChips(),)
