"""The assessment items, one module per phase, named like the phase's lesson package
(core.curriculum.PHASE_PACKAGES): bank/<package>.py holds the items whose ids start with
"<package>.", each listed in its ``ITEMS``; common.py holds what several phases' items share.
``ITEMS`` here is every item in the course's phase order; core.assessment.paper reads it."""

from core.assessment.bank import (
    arrays,
    control_flow,
    data_checkpoints,
    deployment,
    distributed,
    math_optimization,
    nn_training,
    operations,
    pallas,
    performance,
    post_training,
    reinforcement_learning,
    self_supervised,
    setup,
    tpu_setup,
    tpu_systems,
    tpu_workflows,
    transformations,
    transformers,
)
from core.assessment.items import Item

# In the course's phase order (core/curriculum/course.py PHASES); bank_test checks it.
PHASE_MODULES = (
    setup,
    tpu_setup,
    tpu_workflows,
    tpu_systems,
    arrays,
    transformations,
    control_flow,
    math_optimization,
    nn_training,
    data_checkpoints,
    transformers,
    self_supervised,
    reinforcement_learning,
    post_training,
    performance,
    distributed,
    pallas,
    deployment,
    operations,
)
ITEMS: tuple[Item, ...] = tuple(item for module in PHASE_MODULES for item in module.ITEMS)
