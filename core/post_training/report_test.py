import re

import jax

from core import curriculum
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
