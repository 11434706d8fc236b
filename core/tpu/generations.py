"""One table of the TPU generations the course compares: names, chips, devices, hosts, how made.

Each row joins the chip spec (core/tpu/specs.py) with the slice names and provisioning of
core/tpu/cloud_tpu.py for one single-host example slice, so that "how many JAX devices does
my slice have, on how many hosts, under which name, created how?" has one answer per
generation. The JAX device count is probed by generations_test.py with libtpu (compile-only
TPU devices on this CPU host), never only typed in.
"""

from __future__ import annotations

import math

from core.tpu import cloud_tpu, specs


def example_slice(generation: str) -> cloud_tpu.AcceleratorType:
    """The slice whose chips match the spec's compile topology (one host's chip layout)."""
    spec = specs.chip(generation)
    chips = topology_chips(spec.topology_name)
    return next(
        t
        for t in cloud_tpu.ACCELERATOR_TYPES.values()
        if t.generation == generation and t.chips == chips
    )


def topology_chips(topology_name: str) -> int:
    """Chips in a topology name: the product of its dimensions ("v5p:2x2x1" -> 4)."""
    return math.prod(int(d) for d in topology_name.split(":", 1)[1].split("x"))


def generation_rows(generations: tuple[str, ...] = specs.GENERATIONS) -> list[dict]:
    """One row per generation: accelerator-type string, chips, TensorCores per chip, JAX
    devices, hosts, chips per host, topology name and how it is provisioned."""
    rows = []
    for generation in generations:
        spec = specs.chip(generation)
        example = example_slice(generation)
        way = cloud_tpu.PROVISIONING[generation]
        rows.append(
            {
                "generation": generation,
                "accelerator type": (
                    example.name
                    if way.tpu_vm_api
                    else f"none in the Cloud TPU API (slice {example.name})"
                ),
                "chips": example.chips,
                "TensorCores per chip": spec.tensorcores,
                "JAX devices": example.chips * spec.devices_per_chip,
                "hosts": example.hosts,
                "chips per host": spec.chips_per_host,
                "topology name": spec.topology_name,
                "provisioned with": way.how,
            }
        )
    return rows
