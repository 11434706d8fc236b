"""Reference solution of performance.hlo_roofline.roofline_seconds: the roofline lower bound
of a sequence of unfused ops."""


def op_flops_and_bytes(op):
    """(FLOPs, bytes moved) of one op: every input read once, the output written once."""
    width = op["bytes_per_element"]
    if op["op"] == "matmul":
        m, k, n = op["m"], op["k"], op["n"]
        return 2 * m * n * k, (m * k + k * n + m * n) * width  # a multiply-add is 2 FLOPs
    if op["op"] == "elementwise":
        elements = op["elements"]
        return op["flops_per_element"] * elements, (op["inputs"] + 1) * elements * width
    raise ValueError(f"unknown op {op['op']!r}")


def roofline_seconds(ops, peak_flops, bandwidth):
    """Σ over the ops of max(FLOPs / peak, bytes / bandwidth).

    Within one op, compute and memory traffic overlap: the slower one bounds it (max, not
    sum). Across ops nothing overlaps (each writes its output before the next reads it), so
    the bounds add: one max over the program's totals would let a memory-bound op hide
    behind a compute-bound one.
    """
    total = 0.0
    for op in ops:
        flops, moved = op_flops_and_bytes(op)
        total += max(flops / peak_flops, moved / bandwidth)
    return total
