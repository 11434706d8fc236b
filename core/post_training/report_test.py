import re

import jax

from core import curriculum
from core.lab import charts
from core.post_training import cache, report

APPS = ("sft", "lora", "reward_model", "rlhf_ppo", "dpo")


def test_the_hash_caption_names_the_device_count_and_the_base_models_origin():
    caption = report.hashes_caption(cache.ORIGIN_CACHE)
    assert f"{len(jax.devices())} devices" in caption
    assert "device count" in caption and cache.ORIGIN_CACHE in caption
    assert cache.ORIGIN_TRAINED in report.hashes_caption(cache.ORIGIN_TRAINED)
    assert report.hashes_caption(cache.ORIGIN_CACHE, "the same pairs").endswith("the same pairs")


def test_every_post_training_app_shows_its_hashes_with_that_caption():
    # A content hash of trained weights depends on the process's device count (the same
    # training rounds differently with 1 and 8 CPU devices): no app may show one without
    # saying so, and each says where its base model came from.
    for stem in APPS:
        source = (curriculum.APPS_DIR / f"{stem}.py").read_text(encoding="utf-8")
        assert not re.search(r'caption="Content hashes', source), stem
        assert re.search(r"report\.hashes_caption\(\s*task\.base_origin\(", source), stem


def _labels_fit_or_are_in_a_legend(spec: dict, categories: list[str]) -> bool:
    """Each x category label fits its band, or the x axis draws none and a legend of the
    same field names them."""
    x, color = spec["encoding"]["x"], spec["encoding"].get("color", {})
    if x.get("axis", {}).get("labels") is False:
        return color.get("field") == x["field"] and color.get("legend") is not None
    band = spec["spec"]["width"] / len(categories) if "spec" in spec else spec["width"] / 2
    return all(charts.text_width(c) <= band for c in categories)


def test_the_policy_bars_never_run_their_names_into_each_other():
    reports = {
        "reference (base)": {"true reward": 0.7, "KL k3 (nats)": 0.0},
        "DPO policy": {"true reward": 1.5, "KL k3 (nats)": 2.0},
    }
    spec = report.bars_by_policy(reports, ("true reward", "KL k3 (nats)"), "Gain").to_dict()
    assert _labels_fit_or_are_in_a_legend(spec, list(reports))
    # what dpo drew before: the names under 60-pixel bars overlapped
    old = {
        "encoding": {"x": {"field": "policy", "axis": {"labelAngle": 0}}},
        "spec": {"width": 120},
    }
    assert not _labels_fit_or_are_in_a_legend(old, list(reports))


def test_no_post_training_app_quotes_a_time_it_has_no_record_for():
    # "about half a minute on two CPU cores" (rlhf_ppo's run button) was a measurement with
    # no benchmark record behind it.
    pattern = re.compile(r"\b(seconds?|minutes?|half a minute|\d+(\.\d+)? ?(s|ms|min))\b", re.I)
    for stem in APPS:
        source = (curriculum.APPS_DIR / f"{stem}.py").read_text(encoding="utf-8")
        assert not pattern.search(source), (stem, pattern.search(source))
