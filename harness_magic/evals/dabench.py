"""InfiAgent-DABench's closed-form rule as a grader, and the accuracy figures its authors report.

An answer states every sub-answer as ``@name[value]`` (the benchmark's published
format). A sub-answer is right when its value equals the label as a string, or
when both read as numbers that differ by less than :data:`TOLERANCE`. A question
is right when every labelled sub-answer is right. Names the label does not list
are ignored, as the benchmark's evaluation does.

One deliberate difference from the benchmark's script, for the task's pass/fail
only: a name given twice with different values is ``ambiguous`` (the project's
one-committed-answer rule); the benchmark keeps the last value. The accuracy
figures (:func:`benchmark_figures`) follow the benchmark exactly (last value
kept), so they compare with published numbers.

Grader options (task files written by ``import dabench``)::

    - dabench:
        answers: [[mean_fare, "34.65"], [median_fare, "14.45"]]   # the label's common_answers
        id: 0                      # the benchmark's question id
        concepts: [Summary Statistics]
        level: easy
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Iterable, Sequence

__all__ = ["ANSWER_FIELD", "TOLERANCE", "extract_answers", "answer_equal", "format_answers", "grade_dabench",
           "validate_dabench", "benchmark_figures", "BenchmarkGrade", "NAME", "valid_value"]

ANSWER_FIELD = re.compile(r"@(\w+)\[(.*?)\]")
"""One sub-answer as the benchmark extracts it: ``@name[value]``, the value up to the first ``]`` on its line."""
TOLERANCE = 1e-6
"""Two numeric values are equal when they differ by less than this (the benchmark's rule)."""
NAME = re.compile(r"\w+")
MAX_ANSWER_CHARS = 200_000
"""The grader reads at most this many characters of an answer (bounds the regex work)."""
MAX_SUBANSWERS = 64
"""A label with more sub-answers than this is refused (the published set has at most 8)."""


@dataclass
class BenchmarkGrade:
    """A grade (the fields of :class:`~harness_magic.evals.graders.Grade`) that also carries the benchmark's
    own per-question facts, for its accuracy figures. Its own class, not a subclass, so this module does not
    import the graders module that registers it."""

    kind: str
    passed: bool
    detail: str
    missing: bool = False
    """Nothing to grade: the attempt fails as ``no_answer``."""
    ambiguous: bool = False
    """The answer gave one name two values: the attempt fails as ``ambiguous``."""
    benchmark: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "passed": self.passed, "detail": self.detail, "missing": self.missing,
                "ambiguous": self.ambiguous, "benchmark": self.benchmark}


def extract_answers(text: str) -> list[tuple[str, str]]:
    """Every ``@name[value]`` in ``text``, in order (the first :data:`MAX_ANSWER_CHARS` characters)."""
    return ANSWER_FIELD.findall(text[:MAX_ANSWER_CHARS])


def answer_equal(response: str | None, label: str) -> bool:
    """The benchmark's sub-answer rule: the same string, or numbers less than :data:`TOLERANCE` apart."""
    if response is None:
        return False
    if response == label:
        return True
    try:
        return abs(float(response) - float(label)) < TOLERANCE
    except (ValueError, OverflowError):
        return False


def valid_value(value: str) -> bool:
    """Whether ``value`` can be written as ``@name[value]`` and read back unchanged."""
    return "]" not in value and "\n" not in value and "\r" not in value


def format_answers(pairs: Iterable[Sequence[str]]) -> str:
    """``@a[1] @b[x]``: the answers (``(name, value)`` pairs) in the benchmark's format."""
    return " ".join(f"@{name}[{value}]" for name, value in pairs)


def _labels(options: dict[str, Any]) -> list[tuple[str, str]]:
    return [(str(name), str(value)) for name, value in options["answers"]]


def grade_dabench(options: dict[str, Any], ctx: Any) -> BenchmarkGrade:
    """Grade ``ctx.answer`` (a :class:`~harness_magic.evals.graders.GradeContext`) by the benchmark's rule."""
    labels = _labels(options)
    found = extract_answers(ctx.answer)
    last: dict[str, str] = {}
    values: dict[str, set[str]] = defaultdict(set)
    for name, value in found:
        last[name] = value
        values[name].add(value)
    correct = {name: answer_equal(last.get(name), want) for name, want in labels}
    facts = {"name": "dabench", "id": options.get("id"), "correct": correct,
             "concepts": list(options.get("concepts") or []), "level": options.get("level"),
             "answered": bool(ctx.answer)}
    wanted = {name for name, _ in labels}
    twice = sorted(name for name in wanted if len(values.get(name, ())) > 1)
    right = sum(correct.values())
    if not found or not wanted & set(last):
        return BenchmarkGrade("dabench", False, f"no @name[value] answer for {', '.join(sorted(wanted))}",
                              missing=True, benchmark=facts)
    if twice:
        listed = "; ".join(f"{n}: {sorted(values[n])}" for n in twice)
        return BenchmarkGrade("dabench", False, f"more than one value for {listed} (commit to one)",
                              ambiguous=True, benchmark=facts)
    wrong = [f"{n}: got {last[n]!r}, expected {w!r}" if n in last else f"{n}: missing (expected {w!r})"
             for n, w in labels if not correct[n]]
    detail = f"{right}/{len(labels)} sub-answers right" + (f"; {'; '.join(wrong)}" if wrong else "")
    return BenchmarkGrade("dabench", right == len(labels), detail[:600], benchmark=facts)


def validate_dabench(options: dict[str, Any], answers: ModuleType | None = None) -> None:
    """Raise ValueError naming the bad option of a ``dabench`` grader."""
    allowed = {"answers", "id", "concepts", "level"}
    unknown = sorted(set(map(str, options)) - allowed)
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    pairs = options.get("answers")
    if not isinstance(pairs, list) or not pairs or len(pairs) > MAX_SUBANSWERS:
        raise ValueError(f"answers must be a list of 1 to {MAX_SUBANSWERS} [name, value] pairs, got {pairs!r}"[:300])
    seen = set()
    for index, pair in enumerate(pairs):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            raise ValueError(f"answers[{index}] must be a [name, value] pair of strings, got {pair!r}"[:300])
        name, value = pair
        if not NAME.fullmatch(name):
            raise ValueError(f"answers[{index}]: name {name!r} is not a @name (letters, digits, _)")
        if name in seen:
            raise ValueError(f"answers[{index}]: name {name!r} is given twice")
        seen.add(name)
        if not valid_value(value):
            raise ValueError(f"answers[{index}]: value {value!r} cannot be written as @{name}[value] "
                             "(it holds ']' or a line break)")
    concepts = options.get("concepts", [])
    if not isinstance(concepts, list) or not all(isinstance(c, str) and c for c in concepts):
        raise ValueError(f"concepts must be a list of non-empty strings, got {concepts!r}"[:300])
    if "level" in options and not isinstance(options["level"], str):
        raise ValueError(f"level must be a string, got {options['level']!r}")
    if "id" in options and (isinstance(options["id"], bool) or not isinstance(options["id"], (int, str))):
        raise ValueError(f"id must be an integer or a string, got {options['id']!r}")


def _rate(correct: float, total: int) -> float | None:
    return correct / total if total else None


def benchmark_figures(results: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The accuracy figures InfiAgent-DABench's authors report, from result dicts; None without dabench grades.

    Each attempt is one question result. As in the benchmark's evaluation, an attempt
    with an empty response is left out of every denominator (``answered`` counts the
    rest; ``by_question_all`` divides by every attempt instead). Figures:
    ``by_question`` (all sub-answers right), ``by_sub_question`` (right sub-answers over
    all sub-answers), ``proportional`` (mean per question of its share of right
    sub-answers), ``by_concept``, ``by_concept_count`` and ``two_or_more_concepts``
    (questions by how many concepts they test). Rates are fractions (None: no questions).
    """
    facts = [g["benchmark"] for r in results for g in r.get("grades", [])
             if g.get("kind") == "dabench" and isinstance(g.get("benchmark"), dict)]
    if not facts:
        return None
    counted = [f for f in facts if f.get("answered")]
    full = [all(f["correct"].values()) for f in counted]
    subs_right = sum(sum(bool(v) for v in f["correct"].values()) for f in counted)
    subs_total = sum(len(f["correct"]) for f in counted)
    proportional = sum(sum(bool(v) for v in f["correct"].values()) / len(f["correct"])
                       for f in counted if f["correct"])
    concept: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    count: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for f, ok in zip(counted, full):
        for name in f.get("concepts") or []:
            concept[name][0] += ok
            concept[name][1] += 1
        n = len(f.get("concepts") or [])
        count[n][0] += ok
        count[n][1] += 1
    several = [sum(count[n][i] for n in count if n >= 2) for i in (0, 1)]
    return {
        "questions": len(facts),
        "answered": len(counted),
        "by_question": _rate(sum(full), len(counted)),
        "by_question_all": _rate(sum(full), len(facts)),
        "by_sub_question": _rate(subs_right, subs_total),
        "proportional": _rate(proportional, len(counted)),
        "by_concept": {name: (ok / total, ok, total) for name, (ok, total) in sorted(concept.items())},
        "by_concept_count": {n: (ok / total, ok, total) for n, (ok, total) in sorted(count.items())},
        "two_or_more_concepts": _rate(several[0], several[1]),
    }

