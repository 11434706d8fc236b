"""Primary sources per lesson: the pages a learner reads next, kept with the course map.

Every lesson shows its own sources first (``LESSON_SOURCES``), then its phase's
(``PHASE_SOURCES``, by phase package). Each URL's host is one of ``PRIMARY_DOMAINS``: the
projects' own documentation, Google Cloud's TPU pages, the scaling book, the papers' arXiv
pages. A page a learner cannot trust (a blog, a news site, a mirror) has no place here;
curriculum_test.py holds every URL to the list.
"""

from __future__ import annotations

import dataclasses
from urllib.parse import urlparse

# Hosts of primary sources: a project's own documentation, a vendor's product pages, the
# paper as its authors posted it.
PRIMARY_DOMAINS = frozenset(
    {
        "docs.jax.dev",
        "flax.readthedocs.io",
        "optax.readthedocs.io",
        "orbax.readthedocs.io",
        "google-grain.readthedocs.io",
        "jax-ml.github.io",  # How to Scale Your Model (the JAX team's scaling book)
        "cloud.google.com",
        "openxla.org",
        "arxiv.org",
        "numpy.org",
        "mlflow.org",
        "keras.io",
        "pytorch.org",
        "www.tensorflow.org",
        "gymnasium.farama.org",
        "kubernetes.io",
        "docs.docker.com",
        "fastapi.tiangolo.com",
        "d2l.ai",
    }
)


@dataclasses.dataclass(frozen=True)
class Source:
    title: str
    url: str

    @property
    def domain(self) -> str:
        return urlparse(self.url).hostname or ""

    def markdown(self) -> str:
        return f"[{self.title}]({self.url})"


def _s(title: str, url: str) -> Source:
    return Source(title, url)


JAX = "https://docs.jax.dev/en/latest/"
BOOK = "https://jax-ml.github.io/scaling-book/"
TPU = "https://cloud.google.com/tpu/docs/"
ARXIV = "https://arxiv.org/abs/"
D2L = "https://d2l.ai/"
OPTAX = "https://optax.readthedocs.io/en/latest/"
FLAX = "https://flax.readthedocs.io/en/latest/"

PHASE_SOURCES: dict[str, tuple[Source, ...]] = {
    "setup": (
        _s("JAX: Quickstart", JAX + "quickstart.html"),
        _s("JAX: Key concepts", JAX + "key-concepts.html"),
        _s("Cloud TPU: Introduction to Cloud TPU", TPU + "intro-to-tpu"),
    ),
    "tpu_setup": (
        _s("Cloud TPU: TPU VM architecture", TPU + "system-architecture-tpu-vm"),
        _s("Cloud TPU: Run a calculation on a Cloud TPU VM with JAX", TPU + "run-calculation-jax"),
        _s("Cloud TPU: Manage TPU resources", TPU + "managing-tpus-tpu-vm"),
    ),
    "tpu_workflows": (
        _s("Cloud TPU: Run JAX code on TPU Pod slices", TPU + "jax-pods"),
        _s("JAX: Multi-host and multi-process environments", JAX + "multi_process.html"),
        _s("Orbax: Checkpointing", "https://orbax.readthedocs.io/en/latest/"),
    ),
    "tpu_systems": (
        _s("How to Scale Your Model: How to think about TPUs", BOOK + "tpus/"),
        _s("Cloud TPU: TPU v5e", TPU + "v5e"),
        _s("JAX: Profiling computation", JAX + "profiling.html"),
    ),
    "arrays": (
        _s("JAX: Key concepts", JAX + "key-concepts.html"),
        _s("JAX: The sharp bits", JAX + "notebooks/Common_Gotchas_in_JAX.html"),
        _s("NumPy: Broadcasting", "https://numpy.org/doc/stable/user/basics.broadcasting.html"),
    ),
    "transformations": (
        _s("JAX: Automatic differentiation", JAX + "automatic-differentiation.html"),
        _s("JAX: Automatic vectorization", JAX + "automatic-vectorization.html"),
        _s("JAX: Just-in-time compilation", JAX + "jit-compilation.html"),
    ),
    "control_flow": (
        _s("JAX: Pseudorandom numbers", JAX + "random-numbers.html"),
        _s("JAX: Pytrees", JAX + "pytrees.html"),
        _s("JAX: Control flow and logical operators with JIT", JAX + "control-flow.html"),
    ),
    "math_optimization": (
        _s(
            "Dive into Deep Learning: Optimization algorithms",
            D2L + "chapter_optimization/index.html",
        ),
        _s("Optax: Getting started", OPTAX + "getting_started.html"),
        _s("Kingma and Ba, Adam: A method for stochastic optimization", ARXIV + "1412.6980"),
    ),
    "nn_training": (
        _s("Flax: NNX basics", FLAX + "nnx_basics.html"),
        _s("Flax: MNIST tutorial", FLAX + "mnist_tutorial.html"),
        _s(
            "Dive into Deep Learning: Multilayer perceptrons",
            D2L + "chapter_multilayer-perceptrons/index.html",
        ),
    ),
    "data_checkpoints": (
        _s("Grain: documentation", "https://google-grain.readthedocs.io/en/latest/"),
        _s("Orbax: Checkpointing", "https://orbax.readthedocs.io/en/latest/"),
        _s("MLflow: documentation", "https://mlflow.org/docs/latest/"),
    ),
    "transformers": (
        _s("Vaswani et al., Attention is all you need", ARXIV + "1706.03762"),
        _s("How to Scale Your Model: All the Transformer math", BOOK + "transformers/"),
        _s(
            "Dive into Deep Learning: Attention mechanisms and Transformers",
            D2L + "chapter_attention-mechanisms-and-transformers/index.html",
        ),
    ),
    "self_supervised": (
        _s("Devlin et al., BERT", ARXIV + "1810.04805"),
        _s("He et al., Masked autoencoders are scalable vision learners", ARXIV + "2111.06377"),
        _s(
            "Chen et al., A simple framework for contrastive learning (SimCLR)",
            ARXIV + "2002.05709",
        ),
    ),
    "reinforcement_learning": (
        _s("Schulman et al., Proximal policy optimization algorithms", ARXIV + "1707.06347"),
        _s("Schulman et al., Generalized advantage estimation", ARXIV + "1506.02438"),
        _s("Gymnasium: Basic usage", "https://gymnasium.farama.org/introduction/basic_usage/"),
    ),
    "post_training": (
        _s(
            "Ouyang et al., Training language models to follow instructions (InstructGPT)",
            ARXIV + "2203.02155",
        ),
        _s("Hu et al., LoRA: Low-rank adaptation of large language models", ARXIV + "2106.09685"),
        _s("Rafailov et al., Direct preference optimization", ARXIV + "2305.18290"),
    ),
    "performance": (
        _s("How to Scale Your Model: All about rooflines", BOOK + "roofline/"),
        _s("How to Scale Your Model: How to profile TPU programs", BOOK + "profiling/"),
        _s("JAX: Profiling computation", JAX + "profiling.html"),
    ),
    "distributed": (
        _s("JAX: Introduction to parallel programming", JAX + "sharded-computation.html"),
        _s(
            "How to Scale Your Model: Sharded matrices and how to multiply them", BOOK + "sharding/"
        ),
        _s(
            "How to Scale Your Model: How to parallelize a Transformer for training",
            BOOK + "training/",
        ),
    ),
    "pallas": (
        _s("JAX: Pallas quickstart", JAX + "pallas/quickstart.html"),
        _s("JAX: Grids and BlockSpecs", JAX + "pallas/grid_blockspec.html"),
        _s("JAX: Pallas TPU pipelining", JAX + "pallas/tpu/pipelining.html"),
    ),
    "deployment": (
        _s("JAX: Exporting and serializing staged-out computations", JAX + "export/export.html"),
        _s("Keras: Multi-backend Keras", "https://keras.io/getting_started/"),
        _s("How to Scale Your Model: All about Transformer inference", BOOK + "inference/"),
    ),
    "operations": (
        _s(
            "Cloud TPU: TPUs in GKE",
            "https://cloud.google.com/kubernetes-engine/docs/concepts/tpus",
        ),
        _s("Cloud TPU: Pricing", "https://cloud.google.com/tpu/pricing"),
        _s("MLflow: documentation", "https://mlflow.org/docs/latest/"),
    ),
}

# A lesson's own pages, shown before its phase's.
LESSON_SOURCES: dict[str, tuple[Source, ...]] = {
    "first_gradient": (
        _s("JAX: Automatic differentiation", JAX + "automatic-differentiation.html"),
    ),
    "vmap": (_s("JAX: Automatic vectorization", JAX + "automatic-vectorization.html"),),
    "jit": (_s("JAX: Just-in-time compilation", JAX + "jit-compilation.html"),),
    "random_keys": (_s("JAX: Pseudorandom numbers", JAX + "random-numbers.html"),),
    "pytrees": (_s("JAX: Pytrees", JAX + "pytrees.html"),),
    "optax_basics": (_s("Optax: Optimizer schedules", OPTAX + "api/optimizer_schedules.html"),),
    "adam_clipping_schedules": (
        _s("Optax: Optimizer schedules", OPTAX + "api/optimizer_schedules.html"),
    ),
    "attention": (_s("Vaswani et al., Attention is all you need", ARXIV + "1706.03762"),),
    "policy_gradients_ppo": (
        _s("Schulman et al., Generalized advantage estimation", ARXIV + "1506.02438"),
    ),
    "lora": (_s("Hu et al., LoRA", ARXIV + "2106.09685"),),
    "dpo": (_s("Rafailov et al., Direct preference optimization", ARXIV + "2305.18290"),),
    "remat_tradeoffs": (_s("JAX: Gradient checkpointing", JAX + "gradient-checkpointing.html"),),
    "async_benchmarking": (_s("JAX: Asynchronous dispatch", JAX + "async_dispatch.html"),),
    "tpu_generations_hbm": (
        _s("Cloud TPU: TPU v5p", TPU + "v5p"),
        _s("Cloud TPU: TPU v6e", TPU + "v6e"),
    ),
    "communication_algorithms": (
        _s("How to Scale Your Model: Sharded matrices", BOOK + "sharding/"),
    ),
    "export_serving_contract": (
        _s("JAX: Exporting and serialization", JAX + "export/export.html"),
    ),
}


# Apps outside the lessons that close with lab.lesson_end (a capstone): their own reading.
APP_SOURCES: dict[str, tuple[Source, ...]] = {
    "capstone_pallas_kernel": (
        _s("Dao et al., FlashAttention", ARXIV + "2205.14135"),
        _s("JAX: Pallas TPU pipelining", JAX + "pallas/tpu/pipelining.html"),
        _s("How to Scale Your Model: All about rooflines", BOOK + "roofline/"),
    ),
}


def sources_for(lesson_slug: str, phase_package: str) -> tuple[Source, ...]:
    """The lesson's own sources, then its phase's, each URL once."""
    seen, found = set(), []
    for source in LESSON_SOURCES.get(lesson_slug, ()) + PHASE_SOURCES.get(phase_package, ()):
        if source.url not in seen:
            seen.add(source.url)
            found.append(source)
    return tuple(found)
