"""The allocator's before/after: the JAX train step in two fresh processes, one with glibc's
default malloc and one with core/perf/allocator.py's settings, each timed alone the same
way (warm-up, then blocked steps with their page faults and system CPU).

malloc settings are process-wide and fixed at start-up, so the bench cannot switch them
between two steps of one process; the two children run one after the other and the load
during each is recorded. Run as a child: ``python -m capstones.byte_transformer.bench.malloc
CONFIG_JSON STEPS WARMUP`` prints one JSON line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

MODES = ("glibc_defaults", "tuned")
CHILD_TIMEOUT_S = 900


def _child(config_json: str, steps: int, warmup: int) -> dict:
    from core.perf import allocator

    state = allocator.configure()  # a no-op under JAX_LAB_MALLOC_DEFAULTS=1

    import statistics

    from capstones.byte_transformer import config as config_lib
    from capstones.byte_transformer import data, training
    from capstones.byte_transformer.bench import steppers

    config = config_lib.Config.from_dict(json.loads(config_json))
    batch = data.training_stream(config, data.load_corpus(config)).next_batch()
    step, _ = steppers.jax_stepper(config, training.init_state(config), batch)
    usage: list[dict] = []
    measured = steppers.with_usage(step, usage)
    load_start = os.getloadavg()[0]
    wall, _ = steppers.interleaved({"jax": measured}, steps, warmup, progress=None)
    timed = usage[-steps:]
    return {
        "allocator": state,
        "median_s": statistics.median(wall["jax"]),
        "samples_s": wall["jax"],
        "minor_faults_per_step": float(statistics.median(u["minor_faults"] for u in timed)),
        "system_s_per_step": float(statistics.median(u["system_s"] for u in timed)),
        "load_average_1m": [load_start, os.getloadavg()[0]],
    }


def compare(config, steps: int, warmup: int, progress) -> dict:
    """{"method", "glibc_defaults": CHILD, "tuned": CHILD, "speedup": defaults / tuned median}
    or {"method", "error": str} when a child fails (the bench goes on)."""
    from core.perf import allocator

    results = {"method": __doc__.split("\n\n")[0].replace("\n", " ")}
    for mode in MODES:
        # GLIBC_TUNABLES, not mallopt, for the tuned child: this module's package imports
        # numpy and torch (and their threads) before _child could call configure()
        env = allocator.child_env(tuned=mode == "tuned")
        progress(f"allocator before/after: the JAX step in a fresh process, {mode}")
        argv = [sys.executable, "-m", __name__, json.dumps(config.to_dict()), str(steps)]
        try:
            done = subprocess.run(
                argv + [str(warmup)],
                env=env,
                capture_output=True,
                text=True,
                timeout=CHILD_TIMEOUT_S,
                check=True,
            )
            results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
        except (subprocess.SubprocessError, ValueError, IndexError) as exc:
            tail = getattr(exc, "stderr", "") or ""
            return {**results, "error": f"{mode}: {type(exc).__name__}: {tail[-500:]}"}
        progress(
            f"  {results[mode]['median_s']:.3f}s/step, "
            f"{results[mode]['minor_faults_per_step']:,.0f} minor faults/step"
        )
    results["speedup"] = results["glibc_defaults"]["median_s"] / results["tuned"]["median_s"]
    return results


if __name__ == "__main__":
    print(json.dumps(_child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
