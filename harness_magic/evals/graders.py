"""Graders: decide whether one finished run answered its task.

Each grader takes a :class:`GradeContext` (the answer text, the session cache,
the run-log records, the task's inputs) and its options from the task file, and
returns a :class:`Grade`. ``Grade.missing`` is True when there was nothing to
grade (no number in the answer, no such handle): the runner then classes the
failure as ``no_answer`` instead of ``wrong_answer``; ``Grade.ambiguous`` when
the answer did not commit to one value (class ``ambiguous``). Text and number
graders read the *committed answer* (:mod:`.answer_parse`): the ``ANSWER:``
value, else the whole final text.

Expected values are literals in the task file or the name of a function in the
suite's ``answers.py`` (called with the task's input frames, fresh copies), so
answers are computed independently of the reference script.

Kinds and options:

``number``
    ``expected``, ``abs_tol`` (0), ``rel_tol`` (1e-9), ``handle`` (read a scalar /
    1x1 frame / 1-element series from the cache instead of the answer),
    ``pattern`` (a regex whose first group is the number). From the answer the
    number is the one the committed answer commits to (:mod:`.answer_parse`: a
    list, range, ``±`` or hedge is ``ambiguous``).
``frame``
    ``handle``, ``expected``, ``ignore_row_order`` (false), ``ignore_column_order``
    (false), ``rtol`` (1e-9), ``atol`` (0), ``check_dtype`` (false).
``contains``
    ``text`` (string or list, all required) and/or ``expected`` (a function in
    answers.py whose value must occur), ``absent`` (list that must not
    occur), ``case_sensitive`` (false). On the committed answer; a negated or
    compared-away mention does not count, a hedged one is ``ambiguous``.
``regex``
    ``pattern``, ``ignore_case`` (false); on the committed answer, as ``contains``.
``choice``
    ``options`` (at least two), ``expected`` (an option or a function in answers.py),
    ``case_sensitive`` (false): the committed answer names exactly one option, not
    negated or hedged; naming several is ``ambiguous``.
``sql``
    ``query`` and ``expected`` rows; run read-only on the task's SQLite database
    (``on: database``) or with DuckDB over the cached frames (``on: handles``).
``no_writes``
    no write executed or approved in the run log; every attempt (approved, denied,
    refused by a read tool) is listed in the detail. ``attempts: fail`` fails any attempt.
``chart``
    ``min`` (1): the run drew at least this many charts.
``judge``
    ``rubric``, ``model`` (else the runner's judge model): a model through
    litellm answers PASS or FAIL. Never the only grader (the loader refuses it).

Every kind, these and ``dabench``/``dabstep``, is a :class:`GraderPlugin` declared
under the entry-point group ``harness_magic.graders`` (:data:`GRADERS`); an
installed package adds a kind the same way (``docs/design.md``, "Write a plugin").
"""

from __future__ import annotations

import functools
import math
import re
import sqlite3
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, cast

from harness_magic.core.cache.protocol import HandleCache
from harness_magic.core.plugins import PluginGroup
from harness_magic.core.text.counts import count
from harness_magic.evals.writes import attempt_line, write_attempts
from harness_magic.evals.answer_parse import (MAX_ANSWER_CHARS, Committed, NumberReading, committed_answer,
                                              hedge_in, is_cancelled, named_mentions, read_number, sentence_of)

__all__ = ["Grade", "GradeContext", "grade", "validate_grader", "parse_answer_number", "GRADERS", "GraderPlugin",
           "grader_kinds", "MAX_SQL_ROWS"]

MAX_DETAIL_CHARS = 600
"""A grade's detail is cut to this many characters (it is shown in reports, one line per grade)."""
MAX_SQL_ROWS = 10_000
"""An ``sql`` grader query returning more rows than this fails (expected results are small)."""


@dataclass
class Grade:
    kind: str
    passed: bool
    detail: str
    missing: bool = False
    """Nothing to grade (no answer, no handle): the attempt fails as ``no_answer``."""
    ambiguous: bool = False
    """The answer did not commit to one value or option: the attempt fails as ``ambiguous``."""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "passed": self.passed, "detail": self.detail, "missing": self.missing,
                "ambiguous": self.ambiguous}


@dataclass
class GradeContext:
    answer: str
    cache: HandleCache | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)
    answers: ModuleType | None = None
    database: str | None = None
    """Path of the task's SQLite database, if it has one."""
    charts: int = 0
    """Charts the run drew."""
    judge_model: str | None = None
    judge_options: dict[str, Any] = field(default_factory=dict)
    sql_dialects: dict[str, str] = field(default_factory=dict)
    """Connector name -> SQL dialect of its database (see :data:`SQL_DIALECTS`)."""


def answer_number(answer: str, pattern: str | None = None) -> NumberReading:
    """The one number an answer commits to (:func:`~harness_magic.evals.answer_parse.read_number`).

    With ``pattern`` the number is read from the pattern's first group (else its match) in the
    whole answer; otherwise from the committed answer (the ``ANSWER:`` value, else the text).
    """
    answer = answer[:MAX_ANSWER_CHARS]
    if pattern:
        match = re.search(pattern, answer)
        if not match:
            return NumberReading(None, f"pattern {pattern!r} not found in the answer", missing=True)
        return read_number(match.group(1) if match.groups() else match.group(0))
    committed = committed_answer(answer)
    if committed.problem:  # lines that differ in writing but read as one number ("46", "46.0") still commit
        readings = [read_number(line) for line in committed.lines]
        values = {r.value for r in readings}
        if len(values) == 1 and None not in values:
            return readings[-1]
        return NumberReading(None, committed.problem, ambiguous=True)
    return read_number(committed.text, prose=committed.source == "text")


def parse_answer_number(answer: str, pattern: str | None = None) -> tuple[float | None, str]:
    """The number an answer commits to, or (None, why not); see :func:`answer_number`."""
    reading = answer_number(answer, pattern)
    return reading.value, reading.detail


def _expected(options: dict[str, Any], ctx: GradeContext) -> Any:
    value = options.get("expected")
    if isinstance(value, str) and ctx.answers is not None and callable(getattr(ctx.answers, value, None)):
        return getattr(ctx.answers, value)({k: v.copy() for k, v in ctx.inputs.items()})
    return value


def _close(got: float, want: float, abs_tol: float, rel_tol: float) -> bool:
    return math.isclose(got, want, abs_tol=abs_tol, rel_tol=rel_tol)


def _handle_value(ctx: GradeContext, handle: str) -> tuple[Any, str]:
    if ctx.cache is None:
        return None, "no cache to read handles from"
    try:
        return ctx.cache.get(handle), ""
    except Exception:  # broad: reading a handle may run an engine query or read a spill file; a failed grade
        names = ctx.cache.names()
        return None, f"no handle {handle!r} (handles: {', '.join(names) or 'none'})"


def _scalar(value: Any) -> tuple[float | None, str]:
    import numpy as np
    import pandas as pd

    if isinstance(value, pd.DataFrame):
        if value.shape != (1, 1):
            return None, f"a frame of shape {value.shape}, expected a scalar or 1x1 frame"
        value = value.iat[0, 0]
    elif isinstance(value, pd.Series):
        if len(value) != 1:
            return None, f"a series of length {len(value)}, expected one value"
        value = value.iat[0]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None, f"a {type(value).__name__}, expected a number"
    return float(value), ""


def grade_number(options: dict[str, Any], ctx: GradeContext) -> Grade:
    want = float(_expected(options, ctx))
    if options.get("handle"):
        value, why = _handle_value(ctx, options["handle"])
        if why:
            return Grade("number", False, why, missing=True)
        got, why = _scalar(value)
        if got is None:
            return Grade("number", False, f"handle {options['handle']!r} holds {why}")
    else:
        reading = answer_number(ctx.answer, options.get("pattern"))
        if reading.value is None:
            return Grade("number", False, reading.detail, missing=reading.missing, ambiguous=reading.ambiguous)
        got = reading.value
    abs_tol, rel_tol = float(options.get("abs_tol", 0.0)), float(options.get("rel_tol", 1e-9))
    ok = not math.isnan(got) and _close(got, want, abs_tol, rel_tol)
    return Grade("number", ok, f"got {got:.12g}, expected {want:.12g} (abs_tol={abs_tol:g}, rel_tol={rel_tol:g})")


def _normalise(frame: Any, options: dict[str, Any]) -> Any:
    import pandas as pd

    if isinstance(frame, pd.Series):
        frame = frame.reset_index()
    frame = frame.copy()
    if isinstance(frame.index, pd.MultiIndex) or frame.index.name is not None or any(frame.index.names):
        frame = frame.reset_index()
    frame.columns = [str(c) for c in frame.columns]
    if options.get("ignore_column_order"):
        frame = frame[sorted(frame.columns)]
    if options.get("ignore_row_order"):
        frame = frame.sort_values(list(frame.columns), kind="mergesort", na_position="last")
    return frame.reset_index(drop=True)


def grade_frame(options: dict[str, Any], ctx: GradeContext) -> Grade:
    import pandas as pd

    value, why = _handle_value(ctx, options["handle"])
    if why:
        return Grade("frame", False, why, missing=True)
    if not isinstance(value, (pd.DataFrame, pd.Series)):
        return Grade("frame", False, f"handle {options['handle']!r} is a {type(value).__name__}, not a table")
    want = _expected(options, ctx)
    if not isinstance(want, pd.DataFrame):
        want = pd.DataFrame(want)
    got = _normalise(value, options)
    want = _normalise(want, options)
    if list(got.columns) != list(want.columns):
        return Grade("frame", False, f"columns {list(got.columns)} != expected {list(want.columns)}")
    if len(got) != len(want):
        return Grade("frame", False, f"{len(got)} rows, expected {len(want)}")
    try:
        pd.testing.assert_frame_equal(got, want, check_dtype=bool(options.get("check_dtype", False)),
                                      rtol=float(options.get("rtol", 1e-9)), atol=float(options.get("atol", 0.0)),
                                      check_exact=False, check_index_type=False, check_column_type=False)
    except AssertionError as exc:
        return Grade("frame", False, " ".join(str(exc).split())[:400])
    except (TypeError, ValueError) as exc:
        return Grade("frame", False, f"cannot compare: {exc}"[:400])
    return Grade("frame", True, f"{len(got)} rows x {len(got.columns)} columns match")


def _committed(kind: str, ctx: GradeContext) -> Committed | Grade:
    """The committed answer, or the failed grade when there is none to grade."""
    committed = committed_answer(ctx.answer)
    if committed.problem:
        return Grade(kind, False, committed.problem, ambiguous=True)
    if not committed.text.strip():
        return Grade(kind, False, "empty answer", missing=True)
    return committed


def _hedged(committed: Committed, mentions: list[re.Match[str]]) -> str | None:
    """Why the sentence of one of ``mentions`` is hedged, or None."""
    text = committed.text
    for match in mentions:
        hedge = hedge_in(sentence_of(text, match.start(), match.end()), strict=committed.source == "answer_line")
        if hedge:
            return f"hedged ({hedge!r}) in {sentence_of(text, match.start(), match.end()).strip()[:160]!r}"
    return None


def grade_contains(options: dict[str, Any], ctx: GradeContext) -> Grade:
    committed = _committed("contains", ctx)
    if isinstance(committed, Grade):
        return committed
    text = committed.text
    wanted = options.get("text") or []
    wanted = [wanted] if isinstance(wanted, str) else list(wanted)
    if "expected" in options:
        wanted.append(str(_expected(options, ctx)))
    absent = list(options.get("absent") or [])
    flags = 0 if options.get("case_sensitive") else re.IGNORECASE
    missing: list[str] = []
    negated: list[str] = []
    found: list[re.Match[str]] = []
    for item in wanted:
        named, cancelled = named_mentions(text, re.compile(re.escape(item), flags))
        found.extend(named)
        if not named:
            (negated if cancelled else missing).append(item)
    present = [a for a in absent if named_mentions(text, re.compile(re.escape(a), flags))[0]]
    hedge = _hedged(committed, found)
    if hedge and not missing and not negated:
        return Grade("contains", False, hedge, ambiguous=True)
    if missing or negated or present:
        parts = (([f"missing {missing}"] if missing else []) + ([f"only negated or compared away: {negated}"] if negated
                 else []) + ([f"must not contain {present}"] if present else []))
        return Grade("contains", False, "; ".join(parts) + f" in the committed answer {text[:160]!r}")
    return Grade("contains", True, f"contains {wanted}" + (f", none of {absent}" if absent else ""))


def grade_regex(options: dict[str, Any], ctx: GradeContext) -> Grade:
    committed = _committed("regex", ctx)
    if isinstance(committed, Grade):
        return committed
    flags = re.IGNORECASE if options.get("ignore_case") else 0
    named, cancelled = named_mentions(committed.text, re.compile(options["pattern"], flags))
    if not named:
        why = "only negated matches" if cancelled else "not found"
        return Grade("regex", False, f"pattern {options['pattern']!r} {why} in the committed answer "
                                     f"{committed.text[:160]!r}")
    hedge = _hedged(committed, named)
    if hedge:
        return Grade("regex", False, hedge, ambiguous=True)
    return Grade("regex", True, f"pattern {options['pattern']!r} found: {named[0].group(0)[:80]!r}")


def _option_mentions(text: str, choices: list[str], flags: int) -> list[tuple[str, re.Match[str]]]:
    """(option, match) for each whole-word mention; a mention inside a longer option's mention is dropped."""
    found: list[tuple[str, re.Match[str]]] = []
    for choice in choices:
        pattern = re.compile(rf"(?<!\w){re.escape(choice)}(?!\w)", flags)
        found.extend((choice, m) for m in pattern.finditer(text))
    found.sort(key=lambda cm: (cm[1].start(), -(cm[1].end() - cm[1].start())))
    kept: list[tuple[str, re.Match[str]]] = []
    for choice, match in found:
        if not kept or match.start() >= kept[-1][1].end():
            kept.append((choice, match))
    return kept


def grade_choice(options: dict[str, Any], ctx: GradeContext) -> Grade:
    committed = _committed("choice", ctx)
    if isinstance(committed, Grade):
        return committed
    text = committed.text
    choices = [str(c) for c in options["options"]]
    want = options["expected"] if options["expected"] in choices else str(_expected(options, ctx))
    if want not in choices:
        return Grade("choice", False, f"expected {want!r} is not one of the options {choices}")
    flags = 0 if options.get("case_sensitive") else re.IGNORECASE
    named: dict[str, list[re.Match[str]]] = {}
    cancelled: list[str] = []
    for choice, match in _option_mentions(text, choices, flags):
        if is_cancelled(text, match.start(), match.end()):
            cancelled.append(choice)
        else:
            named.setdefault(choice, []).append(match)
    if len(named) > 1:
        return Grade("choice", False, f"names {len(named)} options ({', '.join(named)}) in {text[:160]!r}: one, please",
                     ambiguous=True)
    if not named:
        if cancelled:
            return Grade("choice", False, f"only negated or compared-away options ({', '.join(dict.fromkeys(cancelled))}) "
                                          f"in {text[:160]!r}")
        return Grade("choice", False, f"names none of the options {choices} in {text[:160]!r}", missing=True)
    (choice, mentions), = named.items()
    hedge = _hedged(committed, mentions)
    if hedge:
        return Grade("choice", False, hedge, ambiguous=True)
    return Grade("choice", choice == want, f"names {choice!r}" + ("" if choice == want else f", expected {want!r}"))


def _rows(rows: Any) -> list[tuple[Any, ...]]:
    out = []
    for row in rows:
        out.append(tuple(round(v, 9) if isinstance(v, float) else v for v in (row if isinstance(row, (list, tuple)) else [row])))
    return out


def grade_sql(options: dict[str, Any], ctx: GradeContext) -> Grade:
    query = options["query"]
    on = options.get("on", "database")
    try:
        if on == "database":
            if not ctx.database:
                return Grade("sql", False, "the task has no database (connectors.sql) to query")
            con = sqlite3.connect(f"file:{ctx.database}?mode=ro", uri=True)
            try:
                rows = con.execute(query).fetchmany(MAX_SQL_ROWS + 1)
            finally:
                con.close()
        else:
            import duckdb

            db = duckdb.connect(":memory:", config={"enable_external_access": False})
            try:
                if ctx.cache is not None:
                    for name in ctx.cache.names():
                        value = ctx.cache.get(name)
                        if hasattr(value, "columns"):
                            db.register(name, value)
                rows = db.execute(query).fetchmany(MAX_SQL_ROWS + 1)
            finally:
                db.close()
    except Exception as exc:  # the model's handles may be missing: a failed grade, not a crash
        return Grade("sql", False, f"query failed: {type(exc).__name__}: {exc}"[:400], missing=on == "handles")
    if len(rows) > MAX_SQL_ROWS:
        return Grade("sql", False, f"query returned more than {MAX_SQL_ROWS} rows")
    want = _expected(options, ctx)
    if not isinstance(want, (list, tuple)):
        want = [[want]]  # a function may return one value: a one-row, one-column result
    got_rows, want_rows = _rows(rows), _rows(want)
    if options.get("ignore_row_order"):
        got_rows, want_rows = sorted(got_rows, key=repr), sorted(want_rows, key=repr)
    ok = got_rows == want_rows
    return Grade("sql", ok, f"rows {got_rows[:5]!r}{'...' if len(got_rows) > 5 else ''}"
                             + ("" if ok else f" != expected {want_rows[:5]!r}"))


def grade_no_writes(options: dict[str, Any], ctx: GradeContext) -> Grade:
    attempts = write_attempts(ctx.records, ctx.sql_dialects)
    done = [a for a in attempts if a["outcome"] == "approved"]
    listed = "; ".join(attempt_line(a) for a in attempts)[:MAX_DETAIL_CHARS]
    if done:
        return Grade("no_writes", False, f"{count(len(done), 'write')} executed or approved of {len(attempts)} attempted: "
                                         f"{listed}")
    if attempts and options.get("attempts") == "fail":
        return Grade("no_writes", False, f"{count(len(attempts), 'write')} attempted (none ran; the task fails any attempt): "
                                         f"{listed}")
    if attempts:
        return Grade("no_writes", True, f"no write executed; {len(attempts)} attempted and stopped: {listed}")
    return Grade("no_writes", True, "no write attempted")


def grade_chart(options: dict[str, Any], ctx: GradeContext) -> Grade:
    need = int(options.get("min", 1))
    if ctx.charts < need:
        return Grade("chart", False, f"{count(ctx.charts, 'chart')} drawn, expected at least {need}", missing=True)
    return Grade("chart", True, f"{count(ctx.charts, 'chart')} drawn")


JUDGE_PROMPT = (
    "You grade an answer against a rubric. Reply with exactly one word on the first line: PASS or FAIL, "
    "then one sentence of reason.\n\nRubric:\n{rubric}\n\nQuestion:\n{prompt}\n\nAnswer:\n{answer}"
)


def grade_judge(options: dict[str, Any], ctx: GradeContext) -> Grade:
    model = options.get("model") or ctx.judge_model
    if not model:
        return Grade("judge", False, "no judge model (give the grader a model or run with --judge-model)")
    if not ctx.answer.strip():
        return Grade("judge", False, "empty answer", missing=True)
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    content = JUDGE_PROMPT.format(rubric=options["rubric"], prompt=ctx.judge_options.get("prompt", ""),
                                  answer=ctx.answer[:MAX_ANSWER_CHARS])
    try:
        reply = litellm.completion(model=model, messages=[{"role": "user", "content": content}], temperature=0,
                                   **{k: v for k, v in ctx.judge_options.items() if k in ("api_base", "api_key")})
        text = (reply.choices[0].message.content or "").strip()
    except Exception as exc:  # broad: litellm raises many unrelated types; the judge failing fails this grade
        return Grade("judge", False, f"judge model failed: {type(exc).__name__}: {exc}"[:300])
    verdict = text.split(None, 1)[0].strip(".:*").upper() if text else ""
    if verdict not in ("PASS", "FAIL"):
        return Grade("judge", False, f"judge reply is neither PASS nor FAIL: {text[:120]!r}")
    return Grade("judge", verdict == "PASS", text[:300])


GraderFn = Callable[[dict[str, Any], GradeContext], Grade]
Validator = Callable[[dict[str, Any], "ModuleType | None"], None]
_KIND = re.compile(r"[a-z][a-z0-9_]{0,31}")


@dataclass(frozen=True)
class GraderPlugin:
    """What a ``harness_magic.graders`` entry point names (the entry point's name is the grader kind).

    ``grade(options, ctx) -> Grade`` grades one finished run; ``validate(options, answers)`` raises
    ValueError naming a bad option when a task file is loaded (``answers``: the suite's answers.py or None).
    """

    grade: GraderFn
    validate: Validator

    def __post_init__(self) -> None:
        if not callable(self.grade) or not callable(self.validate):
            raise TypeError(f"GraderPlugin needs two callables (grade, validate), got {self.grade!r}, {self.validate!r}")


def _check(obj: object, kind: str) -> GraderPlugin:
    if not _KIND.fullmatch(kind):
        raise ValueError(f"a grader kind is 1-32 characters of [a-z0-9_] starting with a letter, got {kind!r}")
    if not isinstance(obj, GraderPlugin):
        raise TypeError(f"a grader is a harness_magic.evals.graders.GraderPlugin(grade, validate); "
                        f"{kind!r} is a {type(obj).__name__}")
    return obj


GRADERS: PluginGroup[GraderPlugin] = PluginGroup("harness_magic.graders", _check, "grader kind")
"""Every grader kind installed (the built-ins below and outside packages'), by the name task files use."""


def grader_kinds() -> tuple[str, ...]:
    """Every grader kind a task file may use (built-in and plugins)."""
    return GRADERS.names()


_OPTIONS: dict[str, tuple[set[str], set[str]]] = {  # kind -> (required, optional)
    "number": ({"expected"}, {"abs_tol", "rel_tol", "handle", "pattern"}),
    "frame": ({"handle", "expected"}, {"ignore_row_order", "ignore_column_order", "rtol", "atol", "check_dtype"}),
    "contains": (set(), {"text", "expected", "absent", "case_sensitive"}),
    "choice": ({"options", "expected"}, {"case_sensitive"}),
    "regex": ({"pattern"}, {"ignore_case"}),
    "sql": ({"query", "expected"}, {"on", "ignore_row_order"}),
    "no_writes": (set(), {"attempts"}),
    "judge": ({"rubric"}, {"model"}),
    "chart": (set(), {"min"}),
}


def validate_grader(kind: str, options: dict[str, Any], answers: ModuleType | None) -> None:
    """Raise ValueError naming the bad option and what is allowed (an unknown or broken kind: naming it)."""
    GRADERS.get(kind).obj.validate(options, answers)


def _validate_builtin(kind: str, options: dict[str, Any], answers: ModuleType | None) -> None:
    """The options of the built-in kind ``kind`` (:data:`_OPTIONS`)."""
    required, optional = _OPTIONS[kind]
    unknown = sorted(k if isinstance(k, str) else repr(k) for k in set(options) - required - optional)  # `on:` is True in YAML
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)}; allowed: {', '.join(sorted(required | optional))}")
    missing = sorted(required - set(options))
    if missing:
        raise ValueError(f"missing option(s) {', '.join(missing)}")
    for key in ("abs_tol", "rel_tol", "rtol", "atol"):
        if key in options and (isinstance(options[key], bool) or not isinstance(options[key], (int, float))
                               or options[key] < 0 or math.isnan(options[key])):
            raise ValueError(f"{key} must be a non-negative number, got {options[key]!r}")
    for key in ("pattern",):
        if key in options:
            if not isinstance(options[key], str):
                raise ValueError(f"{key} must be a string, got {options[key]!r}")
            try:
                re.compile(options[key])
            except re.error as exc:
                raise ValueError(f"{key} {options[key]!r} is not a valid regex: {exc}") from None
    expected = options.get("expected")
    if kind == "contains" and "expected" in options and not isinstance(expected, str):
        raise ValueError(f"expected must be the name of a function in answers.py, got {expected!r}")
    if isinstance(expected, str) and kind in ("number", "frame", "sql", "contains"):
        if answers is None or expected.startswith("_") or not callable(getattr(answers, expected, None)):
            raise ValueError(f"expected {expected!r} names no function in the suite's answers.py")
    elif kind == "number" and "expected" in options and (isinstance(expected, bool)
                                                          or not isinstance(expected, (int, float))):
        raise ValueError(f"expected must be a number or the name of a function in answers.py, got {expected!r}")
    elif kind == "frame" and "expected" in options and not isinstance(expected, (list, dict)):
        raise ValueError(f"expected must be records (a list of mappings) or a function name, got {expected!r}")
    elif kind == "sql" and "expected" in options and not isinstance(expected, list):
        raise ValueError(f"expected must be a list of rows or a function name, got {expected!r}")
    if kind == "choice":
        choices = options["options"]
        if (not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) and c.strip() for c in choices)
                or len(set(choices)) != len(choices)):
            raise ValueError(f"options must be a list of at least 2 distinct non-empty strings, got {choices!r}")
        if not isinstance(expected, str):
            raise ValueError(f"expected must be one of the options or a function in answers.py, got {expected!r}")
        if expected not in choices and (answers is None or expected.startswith("_")
                                        or not callable(getattr(answers, expected, None))):
            raise ValueError(f"expected {expected!r} is neither one of the options {choices} nor a function in "
                             "the suite's answers.py")
    if kind == "contains" and "text" not in options and "expected" not in options:
        raise ValueError("give 'text' (string or list) and/or 'expected' (a function in answers.py)")
    if kind == "contains" and "text" in options:
        text = options["text"]
        if not (isinstance(text, str) and text) and not (isinstance(text, list) and text
                                                          and all(isinstance(t, str) and t for t in text)):
            raise ValueError(f"text must be a non-empty string or list of strings, got {text!r}")
    if kind in ("frame", "number") and "handle" in options and not (
            isinstance(options["handle"], str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", options["handle"])):
        raise ValueError(f"handle must be a handle name (identifier), got {options['handle']!r}")
    if kind == "sql" and options.get("on", "database") not in ("database", "handles"):
        raise ValueError(f"on {options.get('on')!r}; allowed: database, handles")
    if kind == "chart" and "min" in options and (not isinstance(options["min"], int) or isinstance(options["min"], bool)
                                                 or options["min"] < 1):
        raise ValueError(f"min must be a positive integer, got {options['min']!r}")
    if kind == "no_writes" and options.get("attempts", "report") not in ("report", "fail"):
        raise ValueError(f"attempts {options.get('attempts')!r}; allowed: report (stopped attempts are listed, "
                         "the grade passes), fail (any attempt fails)")
    if kind == "judge" and not (isinstance(options["rubric"], str) and options["rubric"].strip()):
        raise ValueError("rubric must be a non-empty string")


def grade(kind: str, options: dict[str, Any], ctx: GradeContext) -> Grade:
    """Run one grader; an unexpected error is a failed grade naming it, never a crash."""
    try:
        return GRADERS.get(kind).obj.grade(options, ctx)
    # A grader is task-specific code (a plugin's too): whatever it raises is that grade's failure, named in
    # the report, and the other graders and tasks still run.
    except Exception as exc:
        return Grade(kind, False, f"grader error: {type(exc).__name__}: {exc}"[:400])


def _builtin(kind: str, fn: GraderFn) -> GraderPlugin:
    return GraderPlugin(fn, functools.partial(_validate_builtin, kind))


# The built-in kinds, declared in pyproject.toml under [project.entry-points."harness_magic.graders"]:
NUMBER = _builtin("number", grade_number)
FRAME = _builtin("frame", grade_frame)
CONTAINS = _builtin("contains", grade_contains)
REGEX = _builtin("regex", grade_regex)
CHOICE = _builtin("choice", grade_choice)
SQL = _builtin("sql", grade_sql)
NO_WRITES = _builtin("no_writes", grade_no_writes)
CHART = _builtin("chart", grade_chart)
JUDGE = _builtin("judge", grade_judge)
from harness_magic.evals import dabench as _dabench, dabstep as _dabstep  # noqa: E402  benchmark graders
# A BenchmarkGrade has every field and the to_dict of a Grade (its own class so dabench need not import this module).
DABENCH = GraderPlugin(cast(GraderFn, _dabench.grade_dabench), _dabench.validate_dabench)
DABSTEP = GraderPlugin(cast(GraderFn, _dabstep.grade_dabstep), _dabstep.validate_dabstep)
