"""The three kinds of assessment item: predict-then-check, diagnose, and code exercise.

An item is a question whose numbers come from the learner's seed (``rng(item_id, seed)``),
so two learners get different numbers and a copied answer fails. The expected answer is
always computed, never typed in:

- ``PredictItem``: the learner commits a number (or a shape) before the app computes it live
  with the course's library (``live``). ``derive`` is the closed-form derivation shown as
  feedback; it is computed independently of ``live``, and the two must agree (``self_check``).
- ``DiagnoseItem``: the seed plants one defect from the course into a short program; the
  learner names it from the choices; ``evidence`` runs the defective and the fixed program
  and shows what differs.
- ``CodeItem``: the learner completes a stub; hidden tests from core grade the function it
  defines; the reference solution lives in core and is shown only after an attempt. The
  learner's source runs in a process of its own (core.assessment.sandbox: time and memory
  limits, no access to the course's files where the kernel has Landlock); the hidden tests
  run in the grader and call it there.

A live value and the hidden tests are computed on the host's CPU (``on_grading_backend``),
where a learner's code runs too: the same keys and verdicts on a TPU host as on a laptop.

Answers have one of three Python types: a float (predict, ``answer_type="number"``), a list
of ints (predict, ``answer_type="shape"``), or a str (a choice id, or Python source).
"""

from __future__ import annotations

import abc
import collections
import contextlib
import dataclasses
import functools
import importlib
import math
import pathlib
import traceback
import zlib
from collections.abc import Callable
from typing import Any, ClassVar, Literal

import numpy as np

from core.assessment import sandbox

Kind = Literal["predict", "diagnose", "code"]
Answer = float | list[int] | str


def rng(item_id: str, seed: int) -> np.random.Generator:
    """The item's own generator for a learner seed: items never share a stream."""
    return np.random.default_rng([int(seed), zlib.crc32(item_id.encode())])


@contextlib.contextmanager
def on_grading_backend():
    """Run what is inside on the host's CPU (``jax.default_device``), whatever JAX's default
    backend is: the backend a learner's code runs on (sandbox.Child starts its process with
    JAX_PLATFORMS=cpu), so the course's own sources face the hidden tests where a learner's
    answer does, and an answer key is the same number on every host. On a TPU host the
    default backend computes float32 matmuls in bfloat16 passes and transcendentals with the
    chip's own approximations: a reference judged there at the CPU's float32 tolerance failed
    (the chip run of 2026-12-06), and a key computed there differs in its last bits. Where
    JAX's CPU backend is left out (JAX_PLATFORMS=tpu), the default device: the checks say so
    by failing, never by loosening."""
    import jax

    try:
        device = jax.devices("cpu")[0]
    except RuntimeError:  # JAX_PLATFORMS leaves the CPU backend out
        device = None
    with contextlib.nullcontext() if device is None else jax.default_device(device):
        yield device


@dataclasses.dataclass(frozen=True)
class Question:
    """What the learner sees for one item at one seed, before any attempt.

    ``prompt`` is Markdown with this seed's numbers in it; ``answer_hint`` says what to enter
    ("a number, in GiB"); ``tolerance`` is stated beside a predict item; ``choices`` are a
    diagnose item's (id, text) options; ``program`` is the code a diagnose item shows;
    ``stub`` is the source a code exercise starts from.
    """

    prompt: str
    answer_hint: str
    tolerance: str = ""
    choices: tuple[tuple[str, str], ...] = ()
    program: str = ""
    stub: str = ""


@dataclasses.dataclass(frozen=True)
class Feedback:
    """The verdict on one answer: ``summary`` is one line, ``detail`` is Markdown that teaches
    (the derivation, the evidence, or which hidden tests failed and why)."""

    passed: bool
    summary: str
    detail: str
    # why the grader could not grade the answer ("" when it did): not the learner's failure,
    # the answer is not counted as an attempt
    ungraded: str = ""
    confinement: str = ""  # how a code answer's process was confined (sandbox.Child)
    # a code item's reference solution, Markdown: an assessment shows it after an attempt, a
    # lesson only behind "show solution" (core.lab.exercises)
    solution: str = ""


@dataclasses.dataclass(frozen=True)
class SelfCheck:
    """An item's own check at one seed, for the app's ``lab.Check``: measured errors between
    the live computation and its independent derivation, and facts that must hold."""

    errors: dict[str, float]
    facts: dict[str, bool]


class Item(abc.ABC):
    """One assessment item. Subclasses set the class attributes and implement the methods."""

    id: ClassVar[str]  # unique, "phase_package.short_name": "tpu_systems.kv_cache_hbm"
    phase: ClassVar[str]  # the phase title in core.curriculum.PHASES
    lesson: ClassVar[str]  # the lesson slug to revisit when the answer fails
    kind: ClassVar[Kind]
    title: ClassVar[str]  # a short name for tables: "KV-cache HBM on a TPU generation"
    # What a lesson shows after each failed attempt, weakest first (the last one all but
    # gives the answer); a lesson exercise has at least two (core/exercises).
    hints: ClassVar[tuple[str, ...]] = ()

    @abc.abstractmethod
    def question(self, seed: int) -> Question: ...

    @abc.abstractmethod
    def grade(self, seed: int, answer: Answer) -> Feedback:
        """Grade an answer that ``answer_problem`` accepted."""

    @abc.abstractmethod
    def reference_answer(self, seed: int) -> Answer:
        """The answer that passes (tests, and the app's own check); never shown unasked."""

    @abc.abstractmethod
    def wrong_answers(self, seed: int) -> dict[str, Answer]:
        """At least two planted wrong answers, named by the mistake ("units: MiB for GiB")."""

    @abc.abstractmethod
    def answer_problem(self, answer: Any) -> str | None:
        """None when ``answer`` has this item's type, else what is wrong with it."""

    @abc.abstractmethod
    def self_check(self, seed: int) -> SelfCheck: ...


def _is_number(answer: Any) -> bool:
    return isinstance(answer, int | float) and not isinstance(answer, bool)


class PredictItem(Item):
    """Commit a number, then see it computed live with the course's library.

    Subclasses implement ``params`` (the seeded numbers), ``prompt``, ``live`` (the course
    library's value), ``derive`` (the closed form, independently, with its Markdown
    derivation) and ``wrong`` (planted mistakes), and set ``units`` and the tolerance.
    """

    kind: ClassVar[Kind] = "predict"
    answer_type: ClassVar[Literal["number", "shape"]] = "number"
    units: ClassVar[str] = ""  # "GiB", "FLOP/byte", "" for a count
    rel_tol: ClassVar[float] = 0.02  # |answer - expected| <= max(abs_tol, rel_tol * |expected|)
    abs_tol: ClassVar[float] = 0.0
    # Why the answer is the same at every seed, where that is what a lesson's exercise teaches
    # (the DPO loss before the first step is ln 2 for any beta and pairs); "" for an item whose
    # answer changes with the seed, as every assessment item's must (a copied answer fails).
    same_answer_at_every_seed: ClassVar[str] = ""

    @abc.abstractmethod
    def params(self, generator: np.random.Generator) -> dict[str, Any]: ...

    @abc.abstractmethod
    def prompt(self, params: dict[str, Any]) -> str: ...

    @abc.abstractmethod
    def live(self, params: dict[str, Any]) -> float | tuple[int, ...]:
        """The expected answer, computed with the course's library (core/)."""

    @abc.abstractmethod
    def derive(self, params: dict[str, Any]) -> tuple[float | tuple[int, ...], str]:
        """(value, Markdown derivation) by the closed form, independent of ``live``."""

    @abc.abstractmethod
    def wrong(self, params: dict[str, Any], expected) -> dict[str, float | tuple[int, ...]]:
        """Planted wrong answers derived from the expected one (off by an axis, units)."""

    @functools.cache  # noqa: B019 (items are module-level singletons; a seed's values are fixed)
    def seeded(self, seed: int) -> tuple[dict[str, Any], Any, Any, str]:
        """(params, live value, derived value, derivation) for one seed, computed once; the
        live value on the host's CPU (``on_grading_backend``): the answer key does not depend
        on the host."""
        params = self.params(rng(self.id, seed))
        derived, derivation = self.derive(params)
        with on_grading_backend():
            live = self.live(params)
        return params, live, derived, derivation

    def tolerance_text(self) -> str:
        if self.answer_type == "shape":
            return "exact"
        parts = []
        if self.rel_tol:
            parts.append(f"within {self.rel_tol * 100:g}% of the value")
        if self.abs_tol:
            parts.append(f"within {self.abs_tol:g} {self.units}".rstrip())
        return " or ".join(parts) or "exact"

    def question(self, seed: int) -> Question:
        params = self.seeded(seed)[0]
        hint = (
            "a shape: integers separated by commas"
            if self.answer_type == "shape"
            else f"a number{', in ' + self.units if self.units else ''}"
        )
        return Question(self.prompt(params), hint, tolerance=self.tolerance_text())

    def answer_problem(self, answer: Any) -> str | None:
        if self.answer_type == "shape":
            ok = isinstance(answer, list) and all(
                isinstance(x, int) and not isinstance(x, bool) for x in answer
            )
            return None if ok else "expected a shape: a list of integers, like [4, 128]"
        if not _is_number(answer):
            return f"expected a number{' in ' + self.units if self.units else ''}"
        try:
            finite = math.isfinite(answer)
        except OverflowError:  # an integer past float's range
            finite = False
        if not finite:
            return "expected a finite number (within float64's range)"
        return None

    def matches(self, answer, expected) -> bool:
        if self.answer_type == "shape":
            return tuple(answer) == tuple(expected)
        bound = max(self.abs_tol, self.rel_tol * abs(float(expected)))
        return abs(float(answer) - float(expected)) <= bound

    def grade(self, seed: int, answer: Answer) -> Feedback:
        _params, expected, _derived, derivation = self.seeded(seed)
        shown = _show(expected, self.units)
        passed = self.matches(answer, expected)
        verdict = "right" if passed else "not right"
        summary = (
            f"{verdict}: you said {_show(answer, self.units)}; the course library computes "
            f"{shown} (tolerance: {self.tolerance_text()})"
        )
        return Feedback(passed, summary, derivation)

    def reference_answer(self, seed: int) -> Answer:
        expected = self.seeded(seed)[1]
        if self.answer_type == "shape":
            return [int(x) for x in expected]
        return float(expected)

    def wrong_answers(self, seed: int) -> dict[str, Answer]:
        params, expected, _derived, _derivation = self.seeded(seed)
        found = self.wrong(params, expected)
        if self.answer_type == "shape":
            return {name: [int(x) for x in value] for name, value in found.items()}
        return {name: float(value) for name, value in found.items()}

    def self_check(self, seed: int) -> SelfCheck:
        _params, expected, derived, _derivation = self.seeded(seed)
        if self.answer_type == "shape":
            error = 0.0 if tuple(expected) == tuple(derived) else float("inf")
        else:
            scale = max(abs(float(derived)), 1e-300)
            error = abs(float(expected) - float(derived)) / scale
        return SelfCheck({f"{self.id}: library vs derivation": error}, {})


def _show(value, units: str) -> str:
    if isinstance(value, list | tuple):
        return "(" + ", ".join(str(int(x)) for x in value) + ")"
    text = f"{float(value):.6g}"
    return f"{text} {units}".rstrip()


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What running the defective and the fixed program showed: Markdown for the learner and
    the facts that make it evidence (``"the defect changes the result": True``)."""

    markdown: str
    facts: dict[str, bool]


class DiagnoseItem(Item):
    """Name the defect the seed planted in a short program, then see the evidence.

    Subclasses set ``defects`` ({id: (choice text, why it is wrong and how to fix it)}) and
    implement ``params``, ``program`` (the source with one defect planted) and ``evidence``
    (run the defective and the fixed variant; the facts must hold for every defect).
    """

    kind: ClassVar[Kind] = "diagnose"
    defects: ClassVar[dict[str, tuple[str, str]]]

    @abc.abstractmethod
    def params(self, generator: np.random.Generator) -> dict[str, Any]: ...

    @abc.abstractmethod
    def prompt(self, params: dict[str, Any]) -> str: ...

    @abc.abstractmethod
    def program(self, defect: str, params: dict[str, Any]) -> str:
        """The short program with ``defect`` planted, as the learner reads it."""

    @abc.abstractmethod
    def evidence(self, defect: str, params: dict[str, Any]) -> Evidence: ...

    @functools.cache  # noqa: B019 (module-level singletons)
    def seeded(self, seed: int) -> tuple[str, dict[str, Any], tuple[str, ...]]:
        """(planted defect, params, choice order) for one seed."""
        generator = rng(self.id, seed)
        ids = sorted(self.defects)
        planted = ids[int(generator.integers(len(ids)))]
        order = tuple(ids[i] for i in generator.permutation(len(ids)))
        return planted, self.params(generator), order

    @functools.cache  # noqa: B019
    def seeded_evidence(self, seed: int) -> Evidence:
        planted, params, _order = self.seeded(seed)
        return self.evidence(planted, params)

    def question(self, seed: int) -> Question:
        planted, params, order = self.seeded(seed)
        choices = tuple((i, self.defects[i][0]) for i in order)
        return Question(
            self.prompt(params),
            "one choice id",
            choices=choices,
            program=self.program(planted, params),
        )

    def answer_problem(self, answer: Any) -> str | None:
        if not isinstance(answer, str) or answer not in self.defects:
            return f"expected one of the choice ids {sorted(self.defects)}"
        return None

    def grade(self, seed: int, answer: Answer) -> Feedback:
        planted, _params, _order = self.seeded(seed)
        passed = answer == planted
        named = self.defects[answer][0] if answer in self.defects else str(answer)
        summary = (
            f"right: the planted defect is {self.defects[planted][0].lower()}"
            if passed
            else f"not right: you named {named.lower()!r}; the planted defect is another one"
        )
        evidence = self.seeded_evidence(seed)
        # The explanation names the defect, so it is shown once the answer is right, or after
        # any committed attempt (the learner has committed; the evidence teaches).
        detail = f"{evidence.markdown}\n\n**Why:** {self.defects[planted][1]}"
        return Feedback(passed, summary, detail)

    def reference_answer(self, seed: int) -> Answer:
        return self.seeded(seed)[0]

    def wrong_answers(self, seed: int) -> dict[str, Answer]:
        planted = self.seeded(seed)[0]
        return {f"names {other}": other for other in sorted(self.defects) if other != planted}

    def self_check(self, seed: int) -> SelfCheck:
        evidence = self.seeded_evidence(seed)
        return SelfCheck({}, {f"{self.id}: {k}": v for k, v in evidence.facts.items()})


@dataclasses.dataclass(frozen=True)
class HiddenTest:
    """One hidden test's verdict on a learner's function."""

    name: str
    passed: bool
    message: str  # what was compared, and the measured error or the exception


MAX_SOURCE_CHARS = 100_000

# The hidden test a stopped answer fails, by how it stopped (sandbox.Stopped.status).
_STOPPED = {
    "timeout": "finished within the time limit",
    "memory": "stayed within the memory limit",
    "exit": "returned to the grader (no sys.exit)",
    "ended": "kept its process running",
    "crashed": "kept its process running",
    "malformed": "answered in the grader's format",
    "grader": "the grader started the process that runs your code",
}


@dataclasses.dataclass(frozen=True)
class Run:
    """The hidden tests' verdicts on one source at one seed, and how its process ran:
    ``output`` is what it printed last (for a stopped answer), ``ungraded`` why the grader
    could not run it at all, ``confinement`` what confined it."""

    tests: tuple[HiddenTest, ...]
    confinement: str
    output: str = ""
    ungraded: str = ""


class CodeItem(Item):
    """Complete a stub; hidden tests from core grade the function it defines.

    Subclasses set ``function_name``, ``stub`` (complete source whose function raises
    NotImplementedError) and ``solution_module`` (the reference solution: a module under
    core/assessment/solutions/ that defines ``function_name``, imports included, tested
    there), and implement ``planted_wrong`` ({mistake: source}) and ``hidden_tests`` (seeded
    inputs; compare with an independent reference such as float64 NumPy).
    """

    kind: ClassVar[Kind] = "code"
    function_name: ClassVar[str]
    stub: ClassVar[str]
    solution_module: ClassVar[str]  # "core.assessment.solutions.causal_attention"

    @abc.abstractmethod
    def prompt(self, seed: int) -> str: ...

    def reference_source(self) -> str:
        """The reference solution's whole module source: what the learner sees after trying."""
        module = importlib.import_module(self.solution_module)
        return pathlib.Path(module.__file__).read_text(encoding="utf-8")

    @abc.abstractmethod
    def planted_wrong(self) -> dict[str, str]:
        """At least two wrong solutions, {mistake: source}, each failing a hidden test."""

    @abc.abstractmethod
    def hidden_tests(self, function: Callable, seed: int) -> list[HiddenTest]:
        """Run ``function`` on seeded inputs against an independent reference."""

    def question(self, seed: int) -> Question:
        return Question(
            self.prompt(seed),
            f"Python source that defines {self.function_name}(...)",
            stub=self.stub,
        )

    def answer_problem(self, answer: Any) -> str | None:
        if not isinstance(answer, str):
            return "expected Python source as one string"
        if len(answer) > MAX_SOURCE_CHARS:
            return f"the source has {len(answer)} characters; at most {MAX_SOURCE_CHARS}"
        return None

    @functools.cache  # noqa: B019 (module-level singletons)
    def course_sources(self) -> frozenset[str]:
        """The course's own sources for this exercise (reference, stub, planted mistakes):
        the only ones the grader runs in its own process, all others in a sandbox."""
        return frozenset({self.reference_source(), self.stub, *self.planted_wrong().values()})

    def load(self, source: str) -> Callable:
        """Execute one of the course's sources in a fresh namespace here; its function."""
        if source not in self.course_sources():
            raise ValueError("only the course's own sources run in the grader's process")
        namespace: dict[str, Any] = {"__name__": f"learner_{self.function_name}"}
        exec(compile(source, f"<your {self.function_name}>", "exec"), namespace)  # noqa: S102
        function = namespace.get(self.function_name)
        if not callable(function):
            raise ValueError(f"the source defines no function named {self.function_name!r}")
        return function

    def run_tests(self, seed: int, source: str) -> list[HiddenTest]:
        """The hidden tests' verdicts on ``source`` at ``seed``; run once per (seed, source):
        they are deterministic, and grading and the self-check both run the reference (each
        run compiles the learner's function afresh: a jit, a shard_map, a pallas_call)."""
        return list(self.run(seed, source).tests)

    def run(self, seed: int, source: str, limits=None) -> Run:
        """``run_tests`` with how the source's process ran; cached unless ``limits`` is
        given (sandbox.Limits: then always run afresh under them)."""
        if limits is not None:
            return self._run_now(seed, source, limits)
        return _cached_run(self, seed, source)

    def _run_now(self, seed: int, source: str, limits=None) -> Run:
        # The hidden tests run on the host's CPU for every source: a learner's answer runs in
        # a CPU-only process, and the course's own sources run here on the same backend.
        with on_grading_backend():
            return self._run_here_or_confined(seed, source, limits)

    def _run_here_or_confined(self, seed: int, source: str, limits=None) -> Run:
        if source in self.course_sources():  # the course's own code: no need to confine it
            try:
                function = self.load(source)
            except Exception as error:
                return Run((HiddenTest("the source runs", False, _last_line(error)),), _OWN)
            return Run(tuple(self._guarded(function, seed)), _OWN)
        child = sandbox.Child(limits or sandbox.current_limits())
        try:
            with child:
                try:
                    function = child.load(source, self.function_name)
                except sandbox.LearnerError as error:
                    tests = [HiddenTest("the source runs", False, error.text)]
                else:
                    tests = self._guarded(function, seed)
        except sandbox.Stopped as stop:
            test = HiddenTest(_STOPPED[stop.status], False, stop.message)
            ungraded = stop.message if stop.status == "grader" else ""
            return Run((test,), child.confinement, child.output(), ungraded)
        return Run(tuple(tests), child.confinement)

    def _guarded(self, function: Callable, seed: int) -> list[HiddenTest]:
        try:
            return self.hidden_tests(function, seed)
        except Exception as error:  # the learner's exception, here or in its own process
            return [HiddenTest("the hidden tests run", False, _last_line(error))]

    def grade(self, seed: int, answer: Answer) -> Feedback:
        run = self.run(seed, str(answer))
        tests = run.tests
        passed = bool(tests) and all(t.passed for t in tests) and not run.ungraded
        count = sum(t.passed for t in tests)
        if run.ungraded:
            summary = f"not graded: {run.ungraded}; grade it again"
        else:
            verdict = "right" if passed else "not right"
            summary = f"{verdict}: {count} of {len(tests)} hidden tests pass"
        lines = [f"- {'pass' if t.passed else 'FAIL'} · {t.name}: {t.message}" for t in tests]
        detail = "\n".join(lines)
        if run.output.strip():
            detail += (
                "\n\nWhat your code's process wrote last:\n\n"
                f"```text\n{run.output.strip()[-2000:]}\n```"
            )
        if run.confinement.startswith("unconfined"):
            detail += (
                f"\n\nNote: {run.confinement}; the answer ran in its own process with time "
                "and memory limits, but could read the files this user can read."
            )
        solution = (
            f"The reference solution ({self.solution_module}):\n\n"
            f"```python\n{self.reference_source().strip()}\n```"
        )
        return Feedback(passed, summary, detail, run.ungraded, run.confinement, solution)

    def reference_answer(self, seed: int) -> Answer:
        return self.reference_source()

    def wrong_answers(self, seed: int) -> dict[str, Answer]:
        return {"the stub": self.stub, **self.planted_wrong()}

    def self_check(self, seed: int) -> SelfCheck:
        reference = self.run_tests(seed, self.reference_source())
        stub = self.run_tests(seed, self.stub)
        return SelfCheck(
            {},
            {
                f"{self.id}: the reference passes the hidden tests": all(
                    t.passed for t in reference
                ),
                f"{self.id}: the stub fails them": not all(t.passed for t in stub),
            },
        )


_OWN = "the course's own source, run in the grader's process"


_RUNS: collections.OrderedDict[tuple, Run] = collections.OrderedDict()
_RUNS_KEPT = 64


def _cached_run(item: CodeItem, seed: int, source: str) -> Run:
    """The run of (item, seed, source), kept for the 64 latest; an ungraded one is not kept
    (the grader's failure: the next try runs it again)."""
    key = (item.id, seed, source)
    if key in _RUNS:
        _RUNS.move_to_end(key)
        return _RUNS[key]
    run = item._run_now(seed, source)
    if not run.ungraded:
        _RUNS[key] = run
        while len(_RUNS) > _RUNS_KEPT:
            _RUNS.popitem(last=False)
    return run


def _last_line(error: BaseException) -> str:
    """The exception as the learner needs it: type, message, and the line of their code."""
    if isinstance(error, sandbox.LearnerError):  # raised in the answer's process: said there
        return error.text
    frames = traceback.extract_tb(error.__traceback__)
    frames = [f for f in frames if f.filename.startswith("<your")]
    where = f" (line {frames[-1].lineno} of your code)" if frames else ""
    return f"{type(error).__name__}: {error}{where}"
