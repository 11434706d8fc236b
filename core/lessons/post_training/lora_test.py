from core.lessons.post_training import lora as lesson
from core.post_training import lora, task


def test_rank_problem_names_the_kernel_side():
    assert lesson.rank_problem(task.MODEL.width, lora.ATTENTION) is None
    problem = lesson.rank_problem(task.MODEL.width + 1, lora.MLP)
    assert problem is not None and f"side {task.MODEL.width}" in problem
