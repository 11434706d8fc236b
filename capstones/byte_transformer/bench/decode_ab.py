"""``decode_ab=N``: the open questions of the decode target, as interleaved A/Bs in one run.

1. XLA:CPU's multi-threaded Eigen for the on-device decode loop: the loop program compiled
   with XLA's defaults and with ``xla_cpu_multi_thread_eigen=False`` (a per-program compiler
   option, nothing else changes; the bench's own loop uses the faster, decode.py), timed
   in N interleaved rounds in this process together with the per-token decoder and the
   recompute baseline, so every round gives a decode ratio
   (cached tokens/s / recompute tokens/s) and the ratios' spread is reported.
2. glibc's ``arena_max=1`` for decoding: malloc settings are fixed when a process starts,
   so fresh child processes alternate (A B A B ..., N of each): the capstone's settings
   (arena_max=1, mmap_max=0, trim_threshold) against the same without arena_max (glibc's
   default arena count); each child times 3 rounds of both decoders and the recompute.

Child: ``python -m capstones.byte_transformer.bench.decode_ab CONFIG_JSON CONTEXT TOKENS
ROUNDS`` prints one JSON line.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

EIGEN_OFF = {"xla_cpu_multi_thread_eigen": False}  # decode.LOOP_COMPILER_OPTIONS: kept
ARENA_MODES = ("arena_max_1", "arena_default")
CHILD_ROUNDS = 3
CHILD_TIMEOUT_S = 600


def _spread(values) -> dict:
    values = np.asarray(values, float)
    return {
        "median": float(np.median(values)),
        "min": float(values.min()),
        "max": float(values.max()),
        "p10": float(np.percentile(values, 10)),
        "p90": float(np.percentile(values, 90)),
    }


def _decoders(config, params, prompt, new_tokens, loop_options=None):
    from capstones.byte_transformer.bench import decode as decode_lib

    return decode_lib.Decoders(config, params, prompt, new_tokens, loop_options)


def interleaved_rounds(
    config, params, prompt, new_tokens: int, rounds: int, eigen_ab: bool, progress=None
) -> dict:
    """Per round: recompute, per-token cached decode, the loop, (the loop with Eigen off):
    tokens/s of each and per-round decode ratios vs that round's recompute."""
    base = _decoders(config, params, prompt, new_tokens, {})  # the loop with XLA's defaults
    ways = {
        "recompute": base.recompute,
        "per_token": lambda: base.cached("fp32"),
        "loop": lambda: base.cached_loop("fp32"),
    }
    if eigen_ab:
        off = _decoders(config, params, prompt, new_tokens, EIGEN_OFF)
        ways["loop_eigen_off"] = lambda: off.cached_loop("fp32")
    reference = None
    for name, way in ways.items():  # compile each, and check they agree
        tokens = way()[0]
        reference = reference or tokens
        if tokens != reference:
            raise RuntimeError(f"decode A/B: {name} decoded other tokens than recompute")
    steps = new_tokens - 1
    rates = {name: [] for name in ways}
    for number in range(rounds):
        for name, way in ways.items():
            out = way()
            seconds = out[1] if name == "recompute" else out[2]
            rates[name].append((new_tokens if name == "recompute" else steps) / seconds)
        if progress:
            progress(
                f"  decode A/B round {number + 1}/{rounds}: "
                + ", ".join(f"{n} {r[-1]:,.0f} tok/s" for n, r in rates.items())
            )
    recompute = np.asarray(rates["recompute"])
    result = {
        "tokens_per_s": {n: _spread(r) for n, r in rates.items()},
        "ratio_vs_recompute": {
            n: _spread(np.asarray(r) / recompute) for n, r in rates.items() if n != "recompute"
        },
    }
    if eigen_ab:
        result["loop_eigen_off_vs_on"] = _spread(
            np.asarray(rates["loop_eigen_off"]) / np.asarray(rates["loop"])
        )
    return result


def _child_env(mode: str) -> dict:
    from core.perf import allocator

    settings = dict(allocator.SETTINGS)
    if mode == "arena_default":
        settings.pop("arena_max")
    env = allocator.child_env(tuned=True)
    env["GLIBC_TUNABLES"] = ":".join(f"glibc.malloc.{k}={v}" for k, v in settings.items())
    return env


def arena_ab(config, context: int, new_tokens: int, pairs: int, progress) -> dict:
    """``pairs`` fresh children of each arena mode, alternating; per child its decode figures.
    {"error": str} when a child fails (the bench goes on)."""
    children = {mode: [] for mode in ARENA_MODES}
    argv = [
        sys.executable,
        "-m",
        __name__,
        json.dumps(config.to_dict()),
        str(context),
        str(new_tokens),
        str(CHILD_ROUNDS),
    ]
    for number in range(pairs):
        for mode in ARENA_MODES if number % 2 == 0 else ARENA_MODES[::-1]:
            progress(f"decode A/B: fresh process {number + 1}/{pairs}, {mode}")
            try:
                done = subprocess.run(
                    argv,
                    env=_child_env(mode),
                    capture_output=True,
                    text=True,
                    timeout=CHILD_TIMEOUT_S,
                    check=True,
                )
                children[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
            except (subprocess.SubprocessError, ValueError, IndexError) as exc:
                tail = getattr(exc, "stderr", "") or ""
                return {"error": f"{mode}: {type(exc).__name__}: {tail[-500:]}"}
    summary = {}
    for mode, runs in children.items():
        summary[mode] = {
            "glibc_tunables": _child_env(mode)["GLIBC_TUNABLES"],
            "children": runs,
            "per_token_ratio": _spread(
                [r["ratio_vs_recompute"]["per_token"]["median"] for r in runs]
            ),
            "loop_ratio": _spread([r["ratio_vs_recompute"]["loop"]["median"] for r in runs]),
        }
    for way in ("per_token", "loop"):
        a = summary["arena_max_1"][f"{way}_ratio"]["median"]
        b = summary["arena_default"][f"{way}_ratio"]["median"]
        summary[f"{way}_arena_max_1_vs_default"] = a / b
    return summary


def decode_ab(config, params, corpus, context: int, new_tokens: int, rounds: int, progress) -> dict:
    """Both A/Bs (module docstring) and what to keep: the faster side of each."""
    from capstones.byte_transformer.bench import decode as decode_lib

    prompt = decode_lib.decode_prompt(corpus, context)
    progress(f"decode A/B: {rounds} interleaved rounds in this process (Eigen on/off loop)")
    here = interleaved_rounds(config, params, prompt, new_tokens, rounds, True, progress)
    arena = arena_ab(config, context, new_tokens, rounds, progress)
    eigen_ratio = here["loop_eigen_off_vs_on"]["median"]
    keep = {"loop_multi_thread_eigen": eigen_ratio <= 1.0}
    if "error" not in arena:
        keep["arena_max_1"] = arena["per_token_arena_max_1_vs_default"] >= 1.0
    return {
        "method": __doc__.split("\n\n")[1].replace("\n", " ").strip(),
        "context": context,
        "new_tokens": new_tokens,
        "rounds": rounds,
        "in_process": here,
        "arena": arena,
        "faster": keep,
    }


def _child(config_json: str, context: int, new_tokens: int, rounds: int) -> dict:
    import os

    from capstones.byte_transformer import config as config_lib
    from capstones.byte_transformer import data, training
    from capstones.byte_transformer.bench import decode as decode_lib

    config = config_lib.Config.from_dict(json.loads(config_json))
    prompt = decode_lib.decode_prompt(data.load_corpus(config), context)
    params = training.init_state(config)["params"]
    load = os.getloadavg()[0]
    result = interleaved_rounds(config, params, prompt, new_tokens, rounds, False)
    return {
        **result,
        "load_average_1m": [load, os.getloadavg()[0]],
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
    }


if __name__ == "__main__":
    print(json.dumps(_child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))))
