"""The assessment item of the phase "State, randomness & control flow".

- ``control_flow.key_reuse`` (diagnose): a broken PRNG-key discipline.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from core.assessment.bank.common import format_array, run_source
from core.assessment.items import DiagnoseItem, Evidence, Item


class KeyReuse(DiagnoseItem):
    """A program whose PRNG keys give identical draws where they should be independent."""

    id = "control_flow.key_reuse"
    phase = "State, randomness & control flow"
    lesson = "random_keys"
    title = "Where the random draws repeat"
    defects: ClassVar[dict[str, tuple[str, str]]] = {
        "same_key": (
            "One key is used for two draws that should be independent",
            "`w_b` is drawn with `k_a`, the key that drew `w_a`: same key and shape give the "
            "same numbers, so both layers start identical. Give every draw its own key "
            "(`w_b = jax.random.normal(k_b, ...)`).",
        ),
        "parent_reused": (
            "A key is used again after it was split",
            "`key` was already split into `k_init` and `k_loop`, and the noise loop starts "
            "from `key` again: its first split re-creates `k_init`, whose split gives `k_b`, "
            "so the second noise step repeats `w_b`. Once a key is split, use only its "
            "children (start the loop from `k_loop`).",
        ),
        "carry_not_advanced": (
            "The loop's carried key never advances",
            "`_, sub = jax.random.split(k)` throws the new key away and keeps `k`, so every "
            "step splits the same key and draws the same noise. Carry the new key: "
            "`k, sub = jax.random.split(k)` (in a `lax.scan`, return it as the carry).",
        ),
    }

    def params(self, generator):
        return {
            "key_seed": int(generator.integers(0, 1000)),
            "width": int(generator.integers(3, 5)),  # few sizes: eager ops compile per shape
            "steps": int(generator.integers(3, 5)),
        }

    def prompt(self, params):
        return (
            f"This program should draw two independently initialized weight vectors `w_a` and "
            f"`w_b` (D = {params['width']}) and T = {params['steps']} steps of fresh noise in "
            "a loop that carries its key. It runs, but one line breaks the key discipline of "
            "`jax.random`, so some draws repeat. Which mistake is it?"
        )

    def program(self, defect, params):
        draw_b = "k_a" if defect == "same_key" else "k_b"
        carry = "_" if defect == "carry_not_advanced" else "k"
        loop_from = "key" if defect == "parent_reused" else "k_loop"
        width, steps = params["width"], params["steps"]
        return (
            "import jax\n"
            "import jax.numpy as jnp\n"
            "\n"
            f"key = jax.random.key({params['key_seed']})\n"
            "k_init, k_loop = jax.random.split(key)\n"
            "k_a, k_b = jax.random.split(k_init)\n"
            f"w_a = jax.random.normal(k_a, ({width},))  # layer a's weights\n"
            f"w_b = jax.random.normal({draw_b}, ({width},))  # layer b's, independent of w_a\n"
            "\n"
            "\n"
            "def noise_steps(k, steps):\n"
            f'    """(steps, {width}) noise: a fresh key for every step."""\n'
            "    rows = []\n"
            "    for _ in range(steps):\n"
            f"        {carry}, sub = jax.random.split(k)\n"
            f"        rows.append(jax.random.normal(sub, ({width},)))\n"
            "    return jnp.stack(rows)\n"
            "\n"
            "\n"
            f"noise_TD = noise_steps({loop_from}, {steps})\n"
        )

    # (description, maximum |difference| between the two arrays): 0 means identical draws
    @staticmethod
    def _gaps(namespace) -> dict[str, float]:
        w_a, w_b = np.asarray(namespace["w_a"]), np.asarray(namespace["w_b"])
        noise = np.asarray(namespace["noise_TD"])
        return {
            "same_key": float(np.max(np.abs(w_a - w_b))),
            "parent_reused": float(np.max(np.abs(noise[1] - w_b))),
            "carry_not_advanced": float(np.max(np.abs(noise[1:] - noise[0]))),
        }

    LABELS: ClassVar[dict[str, str]] = {
        "same_key": "largest difference between w_a and w_b",
        "parent_reused": "largest difference between noise_TD[1] and w_b",
        "carry_not_advanced": "largest difference between any noise_TD[t] and noise_TD[0]",
    }

    def evidence(self, defect, params):
        shown, _ = run_source(self.program(defect, params))
        fixed, _ = run_source(self.program("none", params))
        gaps_shown, gaps_fixed = self._gaps(shown), self._gaps(fixed)
        rows = "\n".join(
            f"| {self.LABELS[d]} | {gaps_shown[d]:.4g} | {gaps_fixed[d]:.4g} |" for d in self.LABELS
        )
        arrays = {
            "same_key": ("w_a", "w_b"),
            "parent_reused": ("noise_TD[1]", "w_b"),
            "carry_not_advanced": ("noise_TD[0]", "noise_TD[1]"),
        }[defect]
        listing = "\n".join(
            f"- `{name}` = shown `{format_array(eval(name, shown))}`, "  # noqa: S307
            f"fixed `{format_array(eval(name, fixed))}`"  # noqa: S307
            for name in arrays
        )
        markdown = (
            "Both programs were run here (0 means two draws are bit-for-bit identical):\n\n"
            "| | the program shown | the fixed program |\n|---|---|---|\n"
            f"{rows}\n\n{listing}\n\n"
            "Identical draws look random one by one; only comparing them shows the repeat."
        )
        facts = {
            "the program shown repeats a draw": gaps_shown[defect] == 0.0,
            "the fixed program repeats no draw": min(gaps_fixed.values()) > 0.0,
            "the defect changes the result": any(
                not np.array_equal(np.asarray(shown[n]), np.asarray(fixed[n]))
                for n in ("w_a", "w_b", "noise_TD")
            ),
        }
        return Evidence(markdown, facts)


ITEMS: tuple[Item, ...] = (KeyReuse(),)
