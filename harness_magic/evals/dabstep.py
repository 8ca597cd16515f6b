"""DABstep's answer comparison as a grader, and the accuracy figures its leaderboard reports.

DABstep compares an agent's final answer with the label after its own
normalisation (both lower-cased and stripped), in this order:

1. **Comma-grouped or decimal numbers** (``1,234.5``, ``$0.99``, ``12,5``): when either
   side looks like one, both are read as numbers (commas and ``$`` dropped, the
   first unsigned number taken, a ``%`` ignored) and compared numerically.
2. **Lists**: when either side holds ``,`` or ``;``, both are split on them (outer
   brackets dropped), items stripped and sorted; equal lists match, lists of equal
   length match when every pair matches by these same rules.
3. **Numbers**: when both sides hold a number, numeric comparison.
4. **Text**: equal once everything but letters, digits and ``_`` is removed; or, when
   either side is one word, one side's words are a subset of the other's; or a
   sequence similarity above 0.95.

Numeric comparison: equal; or both below 1 and within 1e-4 (relative or absolute);
or equal once rounded to the fewer decimal places of the two; or within 1e-4.

This is the benchmark's rule, kept so figures compare with its leaderboard. It is
lenient in ways the project's own graders are not: the sign of a number is not
read, and a one-word label matches any answer containing that word. The grader
applies it to the committed answer only: the text after ``ANSWER:`` (two
different ``ANSWER:`` lines are ``ambiguous``).

Grader options (task files written by ``import dabstep``)::

    - dabstep: {expected: "0.75", id: "5", level: easy}
"""

from __future__ import annotations

import math
import re
from difflib import SequenceMatcher
from types import ModuleType
from typing import Any, Iterable

from harness_magic.evals.dabench import MAX_ANSWER_CHARS, BenchmarkGrade

__all__ = ["answers_match", "committed_answer", "grade_dabstep", "validate_dabstep", "benchmark_figures",
           "MAX_EXPECTED_CHARS"]

MAX_EXPECTED_CHARS = 10_000
"""A label longer than this is refused (DABstep's labels are short values and lists)."""
SIMILARITY = 0.95
"""Two texts whose sequence similarity exceeds this match (the benchmark's threshold)."""
CLOSE = 1e-4
"""Relative and absolute tolerance of the numeric comparison (the benchmark's)."""
MAX_LIST_ITEMS = 1_000
"""Lists longer than this are compared as whole strings only (bounds the pairwise work)."""
_GROUPED_NUMBER = re.compile(r"\$?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+[.,]\d+)")
_UNSIGNED = re.compile(r"(\d*\.\d+|\d+\.?\d*)%?")
_ANSWER_LINE = re.compile(r"^[ \t>*_#-]*ANSWER\s*:[ \t]*(.*?)[ \t*_]*$", re.IGNORECASE | re.MULTILINE)


def _number(text: str) -> float | None:
    found = _UNSIGNED.search(text.replace(",", "").replace("$", ""))
    if not found:
        return None
    try:
        return float(found.group(1))
    except ValueError:
        return None


def _decimals(value: float) -> int:
    text = str(value)
    return len(text.split(".")[-1]) if "." in text else 0


def _numbers_match(a: float, b: float) -> bool:
    if a == b:
        return True
    if a < 1 and b < 1:
        return math.isclose(a, b, rel_tol=CLOSE, abs_tol=CLOSE)
    places = min(_decimals(a), _decimals(b))
    if round(a, places) == round(b, places):
        return True
    return math.isclose(a, b, rel_tol=CLOSE, abs_tol=CLOSE)


def _texts_match(a: str, b: str) -> bool:
    if re.sub(r"\W", "", a) == re.sub(r"\W", "", b):
        return True
    words_a, words_b = re.findall(r"\b\w+\b", a), re.findall(r"\b\w+\b", b)
    if words_a and words_b and (len(words_a) == 1 or len(words_b) == 1):
        return set(words_a) <= set(words_b) or set(words_b) <= set(words_a)
    return SequenceMatcher(None, a, b).ratio() > SIMILARITY


def _items(text: str) -> list[str]:
    text = re.sub(r"^\[|\]$", "", text.strip())
    return sorted(item.strip() for item in re.split(r"[,;]", text) if item.strip())


def _lists_match(a: str, b: str) -> bool:
    items_a, items_b = _items(a), _items(b)
    if items_a == items_b:
        return True
    if len(items_a) != len(items_b) or len(items_a) > MAX_LIST_ITEMS:
        return False
    return all(answers_match(x, y) for x, y in zip(items_a, items_b))


def answers_match(answer: str, label: str) -> bool:
    """DABstep's comparison of an answer with its label (see the module docstring)."""
    a, b = answer.strip().lower(), label.strip().lower()
    if _GROUPED_NUMBER.fullmatch(a) or _GROUPED_NUMBER.fullmatch(b):
        x, y = _number(a), _number(b)
        return x is not None and y is not None and _numbers_match(x, y)
    if any(sep in a or sep in b for sep in ",;"):
        return _lists_match(a, b)
    x, y = _number(a), _number(b)
    if x is not None and y is not None:
        return _numbers_match(x, y)
    return _texts_match(a, b)


def committed_answer(text: str) -> tuple[str | None, str, bool]:
    """(the value after ``ANSWER:``, why not, ambiguous): None when there is no such line or two lines differ."""
    lines = [m.strip() for m in _ANSWER_LINE.findall(text[:MAX_ANSWER_CHARS])]
    lines = [line for line in lines if line]
    if not lines:
        return None, "no ANSWER: line", False
    if len(set(lines)) > 1:
        listed = ", ".join(map(repr, sorted(set(lines))[:4]))
        return None, f"{len(set(lines))} different ANSWER: lines: {listed} (commit to one)", True
    return lines[0], "", False


def grade_dabstep(options: dict[str, Any], ctx: Any) -> BenchmarkGrade:
    """Grade the committed answer of ``ctx.answer`` (a ``GradeContext``) by DABstep's comparison."""
    expected = str(options["expected"])
    got, why, several = committed_answer(ctx.answer)
    facts = {"name": "dabstep", "id": options.get("id"), "level": options.get("level"), "correct": False,
             "answered": got is not None}
    if got is None:
        return BenchmarkGrade("dabstep", False, why, missing=not several, ambiguous=several, benchmark=facts)
    facts["correct"] = ok = answers_match(got, expected)
    return BenchmarkGrade("dabstep", ok, f"got {got[:200]!r}, expected {expected[:200]!r} (DABstep's comparison)",
                          benchmark=facts)


def validate_dabstep(options: dict[str, Any], answers: ModuleType | None = None) -> None:
    """Raise ValueError naming the bad option of a ``dabstep`` grader."""
    allowed = {"expected", "id", "level"}
    unknown = sorted(set(map(str, options)) - allowed)
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    expected = options.get("expected")
    if not isinstance(expected, str) or not expected.strip() or len(expected) > MAX_EXPECTED_CHARS:
        raise ValueError(f"expected must be a non-empty string of at most {MAX_EXPECTED_CHARS} characters, "
                         f"got {expected!r}"[:300])
    if "\n" in expected or "\r" in expected:
        raise ValueError(f"expected {expected[:100]!r} holds a line break; an ANSWER: line cannot state it")
    if "level" in options and not isinstance(options["level"], str):
        raise ValueError(f"level must be a string, got {options['level']!r}")
    if "id" in options and (isinstance(options["id"], bool) or not isinstance(options["id"], (int, str))):
        raise ValueError(f"id must be an integer or a string, got {options['id']!r}")


def benchmark_figures(results: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """DABstep's leaderboard figures from result dicts: accuracy overall and per level; None without dabstep grades.

    Every attempt counts (the leaderboard scores every task; no answer is a wrong one).
    Values are (fraction, right, total).
    """
    facts = [g["benchmark"] for r in results for g in r.get("grades", [])
             if g.get("kind") == "dabstep" and isinstance(g.get("benchmark"), dict)]
    if not facts:
        return None
    levels: dict[str, list[int]] = {}
    for f in facts:
        tally = levels.setdefault(str(f.get("level") or "unknown"), [0, 0])
        tally[0] += bool(f.get("correct"))
        tally[1] += 1
    right = sum(bool(f.get("correct")) for f in facts)
    return {"tasks": len(facts), "answered": sum(bool(f.get("answered")) for f in facts),
            "accuracy": (right / len(facts), right, len(facts)),
            "by_level": {level: (ok / total, ok, total) for level, (ok, total) in sorted(levels.items())}}

