"""The bank as a whole: every item in the module of its phase, the modules in the course's phase
order; and properties across items over many seeds (the TPU items' planted mistakes and generations,
the predict items' tolerances; the generic contract in core/assessment/items_test.py checks three
seeds)."""

from __future__ import annotations

import pathlib

import pytest

from core import curriculum
from core.assessment import bank, items
from core.assessment.bank import (
    operations,
    performance,
    post_training,
    self_supervised,
    tpu_setup,
    tpu_systems,
)
from core.tpu import specs

MANY_SEEDS = range(200)  # the TPU items'
PREDICT_SEEDS = range(60)  # the other predict items' (each grades live with the library)

SLICE_CHIPS = tpu_setup.SliceChips()
KV = tpu_systems.KvCacheHbm()
ROOFLINE = performance.RooflineBound()
MFU = operations.ModelFlopsUtilization()


@pytest.mark.parametrize("item", [SLICE_CHIPS, KV, ROOFLINE, MFU], ids=lambda i: i.id)
def test_planted_mistakes_fail_on_many_seeds(item):
    """Every seed has at least two planted mistakes, each outside the tolerance, and the
    library and the derivation agree."""
    for seed in MANY_SEEDS:
        _params, live, derived, _text = item.seeded(seed)
        assert abs(live - derived) <= 1e-9 * abs(derived), (seed, live, derived)
        wrong = item.wrong_answers(seed)
        assert len(wrong) >= 2, (seed, wrong)
        for mistake, answer in wrong.items():
            assert not item.matches(answer, live), (seed, mistake, answer, live)


def test_every_generation_is_asked():
    for item in (SLICE_CHIPS, KV, ROOFLINE, MFU):
        generations = set()
        for seed in range(60):
            params = item.seeded(seed)[0]
            if "name" in params:
                generations.add(SLICE_CHIPS._by_rule(params["name"])[0])
            else:
                generations.add(params["generation"])
        assert generations == set(specs.GENERATIONS), (item.id, generations)


def test_items_use_their_own_streams():
    assert items.rng(KV.id, 5).random() != items.rng(ROOFLINE.id, 5).random()


@pytest.mark.parametrize(
    "item", [self_supervised.MaskedLossCount(), post_training.DpoLoss()], ids=lambda i: i.id
)
def test_predict_items_hold_on_many_seeds(item):
    """The tolerance separates the answer from every planted mistake on every seed tried,
    and the library agrees with the derivation."""
    for seed in PREDICT_SEEDS:
        assert item.grade(seed, item.reference_answer(seed)).passed, seed
        for mistake, answer in item.wrong_answers(seed).items():
            assert not item.grade(seed, answer).passed, (seed, mistake, answer)
        assert max(item.self_check(seed).errors.values()) <= 1e-6, seed


def test_each_item_lives_in_the_module_of_its_phase():
    """bank/<package>.py holds the items of the phase whose lesson package is <package>, and
    their ids start with "<package>."; the modules are listed in the course's phase order."""
    packages = [curriculum.PHASE_PACKAGES[phase.title] for phase in curriculum.PHASES]
    modules = [module.__name__.rpartition(".")[2] for module in bank.PHASE_MODULES]
    assert modules == packages
    on_disk = {p.stem for p in pathlib.Path(bank.__file__).parent.glob("*.py")}
    on_disk -= {"__init__", "common"} | {s for s in on_disk if s.endswith("_test")}
    assert on_disk == set(packages), "a bank module that is not a phase's, or a phase without one"
    ids = [item.id for item in bank.ITEMS]
    assert len(ids) == len(set(ids))
    for module in bank.PHASE_MODULES:
        package = module.__name__.rpartition(".")[2]
        assert module.ITEMS, package
        for item in module.ITEMS:
            assert type(item).__module__ == module.__name__, item.id
            assert curriculum.PHASE_PACKAGES[item.phase] == package, item.id
            assert item.id.partition(".")[0] == package, item.id
    assert list(bank.ITEMS) == [item for module in bank.PHASE_MODULES for item in module.ITEMS]
