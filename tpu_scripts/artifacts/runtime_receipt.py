"""Artifact ``runtime-receipt``: the runtime receipt (tpu_scripts/receipt.py), verified.

Checks, each against a reference the receipt did not compute:

- the psum over every device equals sum(range(1, n + 1)), summed here in Python integers;
- the device count (global and per process) and kind match the expected topology: on a TPU
  the accelerator type's chips x JAX devices per chip (core/tpu/cloud_tpu and specs), named
  by ``--accelerator-type`` or $TPU_ACCELERATOR_TYPE; on CPU the $JAX_NUM_CPU_DEVICES asked
  for (default 8);
- every device is listed once (distinct ids; distinct coordinates on a TPU).

``python -m tpu_scripts artifact verify DIR/runtime-receipt.json`` reloads the file and
refuses it when its sha256 or its schema does not match.
"""

from __future__ import annotations

import os

from core import runtime
from tpu_scripts import receipt as runtime_receipt
from tpu_scripts.artifacts import common

NAME = "runtime-receipt"


class Expected(common.documents.Document):
    devices: int
    local_devices: int
    kind_prefix: str
    source: str


class Document(common.Envelope):
    expected: Expected | None


def expected_topology(backend: str, accelerator_type: str | None, cpu_devices: int) -> dict | str:
    """What the receipt should show, or why it cannot be said (a str)."""
    from core.tpu import cloud_tpu, specs

    if backend == "cpu":
        return {
            "devices": cpu_devices,
            "local_devices": cpu_devices,
            "kind_prefix": "cpu",
            "source": f"JAX_NUM_CPU_DEVICES={cpu_devices} (logical CPU devices asked for)",
        }
    if backend != "tpu":
        return f"no expected topology for backend {backend!r}"
    if not accelerator_type:
        return "accelerator type unknown: pass --accelerator-type (e.g. v5litepod-8)"
    kind = cloud_tpu.ACCELERATOR_TYPES.get(accelerator_type)
    if kind is None:
        return f"accelerator type {accelerator_type!r} is not in core/tpu/cloud_tpu's table"
    per_chip = specs.chip(kind.generation).devices_per_chip
    return {
        "devices": kind.chips * per_chip,
        "local_devices": min(kind.chips, kind.chips_per_host) * per_chip,
        "kind_prefix": "TPU",
        "source": f"{accelerator_type}: {kind.chips} {kind.generation} chips x {per_chip} "
        f"JAX device(s) per chip, {kind.chips_per_host} chips per host",
    }


def checks(receipt: dict, expected: dict | str) -> list[dict]:
    n = receipt["device_count"]
    collective = receipt["collective"]
    triangular = sum(range(1, collective["devices"] + 1))  # exact, in Python integers
    rows = [
        common.check(
            "psum over all devices equals the closed form",
            collective["result"] == triangular and collective["passed"],
            f"psum of (i + 1) over {collective['devices']} devices = {collective['result']:g}, "
            f"sum(range(1, n + 1)) = {triangular}",
        ),
        common.check(
            "every device listed once",
            len({d["id"] for d in receipt["devices"]}) == n == len(receipt["devices"])
            and collective["devices"] == n,
            f"{len(receipt['devices'])} device rows, {n} devices, psum over "
            f"{collective['devices']}",
        ),
    ]
    coords = [(tuple(d["coords"]), d["core_on_chip"]) for d in receipt["devices"] if d["coords"]]
    if coords:
        rows.append(
            common.check(
                "distinct TPU coordinates",
                len(set(coords)) == len(coords),
                f"{len(set(coords))} distinct (coords, core) of {len(coords)}",
            )
        )
    if isinstance(expected, str):
        rows.append(common.check("device count matches the expected topology", False, expected))
        return rows
    kinds = {d["kind"] for d in receipt["devices"]}
    rows += [
        common.check(
            "device count matches the expected topology",
            n == expected["devices"] and receipt["local_device_count"] == expected["local_devices"],
            f"{n} devices ({receipt['local_device_count']} local); expected "
            f"{expected['devices']} ({expected['local_devices']} local) from {expected['source']}",
        ),
        common.check(
            "device kind matches",
            all(k.startswith(expected["kind_prefix"]) for k in kinds) and len(kinds) == 1,
            f"kinds {sorted(kinds)}; expected one kind starting {expected['kind_prefix']!r}",
        ),
    ]
    return rows


def build(repeats: int = 5, accelerator_type: str | None = None) -> tuple[dict, list]:
    cpu_devices = runtime.use_cpu_devices()
    receipt = runtime_receipt.runtime_receipt(repeats)
    expected = expected_topology(
        receipt["backend"],
        accelerator_type or os.environ.get("TPU_ACCELERATOR_TYPE"),
        cpu_devices,
    )
    document = common.envelope(NAME, receipt, checks(receipt, expected), [])
    document["expected"] = None if isinstance(expected, str) else expected
    sections = [
        ("Receipt", "\n".join(f"    {line}" for line in runtime_receipt.summary_lines(receipt))),
        (
            "Devices",
            [
                {
                    "id": d["id"],
                    "kind": d["kind"],
                    "process": d["process_index"],
                    "coords": d["coords"],
                    "core on chip": d["core_on_chip"],
                }
                for d in receipt["devices"]
            ],
        ),
    ]
    return document, sections


def add_arguments(parser) -> None:
    parser.add_argument("--repeats", type=int, default=5, help="timed psum calls (median)")
    parser.add_argument(
        "--accelerator-type",
        default=None,
        help="the slice's type (v5litepod-8, v5p-8, ...); default $TPU_ACCELERATOR_TYPE",
    )


def problem(args) -> str | None:
    if not 1 <= args.repeats <= 1000:
        return f"--repeats must be in 1..1000, got {args.repeats}"
    return None


def produce(args, out_dir) -> tuple[dict, list]:
    document, sections = build(args.repeats, args.accelerator_type)
    return document, common.write(out_dir, Document, document, sections)
