"""What an answer commits to: the committed answer text, its one number, the options it names.

Rules (the task format in ``docs/evals.md`` states them for suite authors):

Committed answer
    The value of the ``ANSWER:`` line (a line starting with ``ANSWER:`` or ``Final answer:``,
    markdown emphasis allowed, the value on the same or the next line). Several such lines
    commit only when their values are identical; otherwise the answer is ambiguous. With no
    such line the whole final text is the committed answer (prose).
One number
    Within the committed answer, the candidate values are the numbers outside asides
    (parentheses / brackets), outside dates and times, outside labels (before a ``:`` or
    ``=``: ``2008 vs 2007: +0.44%`` commits to 0.44), not negated (``46, not 49``) and not
    the count of a preposition phrase (``of 442 patients, 46`` commits to 46; ``a total of
    46`` to 46, as no other candidate remains). The answer is ambiguous when a hedge is
    written anywhere on it (``maybe``, ``either``, ``or`` before a number, ``?``), when it
    holds a ``±`` or a range (``between 1 and 2``, ``1-2``, ``1 to 2``), or when more than
    one distinct candidate remains (``0.586, 0.561``). Several labelled values
    (``2023: 46, 2024: 49``) are ambiguous too.
Number formats
    ``.586``; ``-``/``+``/unicode minus; comma thousands (``29,328.62``), space / thin /
    no-break space thousands (``29 328.62``); a decimal comma only after space-grouped
    thousands (``29 328,62``) — any other comma separates numbers (``3,5`` is a list);
    ``%`` and currency signs are ignored (the number is compared as written); scientific
    ``1.5e6`` and ``1.5×10^6``; ``million``/``billion``/``thousand`` multiply.
Named options
    An option counts as named when it occurs (whole words, case-insensitive by default)
    and is neither negated nor compared away in its clause: a negation or comparison word
    up to :data:`CUE_WORDS` words before it (``not``, ``isn't``, ``rather than``, ``ahead
    of``, ``followed by``, ``than``, ...) or a runner-up word after it (``second``,
    ``runner-up``). A hedge (``either``, ``or``, ``maybe``, ...) in the sentence of a named
    option makes the answer ambiguous.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Committed", "NumberReading", "committed_answer", "read_number", "numbers_in", "named_mentions",
           "is_cancelled", "sentence_of", "hedge_in", "MAX_ANSWER_CHARS", "MAX_NUMBERS", "CONTEXT_CHARS", "CUE_WORDS"]

MAX_ANSWER_CHARS = 200_000
"""Only this many characters of an answer are read (bounds regex work on a hostile answer)."""
CONTEXT_CHARS = 300
"""Clause and sentence checks look this far either side of a mention (a sentence longer than this is prose, not
an answer; the bound keeps grading linear in the answer's length)."""
MAX_NUMBERS = 200
"""An answer with more numbers than this commits to none of them (and is not read number by number)."""
CUE_WORDS = 3
"""A negation or comparison word this many words or fewer before a mention cancels it (``It is not X``);
further away it belongs to another phrase (``there is no doubt it is X``)."""

_ANSWER_LINE = re.compile(r"^[ \t>*_#-]*(?:final[ \t]+)?answer[ \t*_]*:[ \t*_]*(.*)$", re.IGNORECASE | re.MULTILINE)
_SPACES = "\u0020\u00a0\u2009\u202f\u2007"
_SIGN = r"[-+\u2212]"
_GROUPED_SPACE = rf"\d{{1,3}}(?:[{_SPACES}]\d{{3}})+"
_NUMBER = re.compile(
    rf"(?<![\w.])(?P<sign>{_SIGN})?[$€£¥]?\s?"
    rf"(?:(?P<spaced>{_GROUPED_SPACE})(?:(?P<dec_comma>,\d+)|(?P<dec_dot>\.\d+))?"
    rf"|(?P<comma>\d{{1,3}}(?:,\d{{3}})+)(?P<dec2>\.\d+)?"
    rf"|(?P<plain>\d+)(?P<dec3>\.\d+)?"
    rf"|(?P<bare>\.\d+))"
    rf"(?:(?:[eE](?P<exp>{_SIGN}?\d+))|(?:\s?[×x·*]\s?10\^(?P<exp10>{_SIGN}?\d+)))?"
    rf"(?:\s?(?P<scale>thousand|million|billion|trillion)\b)?"
    rf"(?![\w]|\.\d)", re.IGNORECASE)
_SCALES = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}
_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?"
          r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
_DATES = re.compile(
    r"\b\d{4}-\d{2}(?:-\d{2})?(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?\b"  # ISO date / month / timestamp
    r"|\b\d{1,2}[/.]\d{1,2}[/.]\d{2,4}\b"  # 11/03/2024, 11.03.2024
    rf"|\b\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTH}\.?,?(?:\s+\d{{4}})?\b"  # 11 March 2024
    rf"|\b{_MONTH}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?\b"  # March 11, 2024
    rf"|\b{_MONTH}\.?\s+\d{{4}}\b"  # March 2024
    r"|\b\d{1,2}:\d{2}(?::\d{2})?\b",  # 10:30
    re.IGNORECASE)
_ASIDE = re.compile(r"\([^()]*\)|\[[^\[\]]*\]")
_PLUS_MINUS = re.compile(r"±|\+\s*/\s*-|\+-|plus\s+or\s+minus", re.IGNORECASE)
_HEDGE = re.compile(
    r"\b(?:maybe|perhaps|possibly|probably|either|might|may\s+be|could\s+be|not\s+sure|unsure|unclear|uncertain"
    r"|hard\s+to\s+(?:say|tell)|can(?:not|'t)\s+tell|i\s+think|i\s+guess|depend(?:s|ing)|or\s+so|and/or)\b|\?",
    re.IGNORECASE)
_OR = re.compile(r"\b(?:or|nor)\b", re.IGNORECASE)
_BOUND = re.compile(
    r"\b(?:at\s+(?:least|most)|(?:no\s+)?(?:more|less|fewer|greater)\s+than|up\s+to|upwards\s+of|in\s+excess\s+of"
    r"|a\s+minimum\s+of|a\s+maximum\s+of)\b|[<>\u2264\u2265]=?\s*[-+$\u20ac\u00a3\u2212]?\d", re.IGNORECASE)
"""A bound (``at least 46``, ``< 50``) says where a value lies, not which it is."""
_RANGE_GAP = re.compile(r"\s*(?:-|\u2013|\u2014|\.\.\.?|~|to|and|through|thru|until|till)\s*", re.IGNORECASE)
"""What stands between the two ends of a range (``1-2``, ``1 to 2``, ``1 and 2``)."""
_LABEL_SEP = re.compile(r":|=|\u2192|->")
"""Ends a label (``2008 vs 2007: +0.44%``); times such as 10:30 are blanked as dates before this applies."""
_COUNT_PREP = re.compile(r"\b(?:of|out\s+of|among|across|per|in|for|since|during|by)\s*$", re.IGNORECASE)
_NEGATION = (r"not|no|never|isn't|aren't|wasn't|weren't|doesn't|don't|didn't|neither|nor|except|excluding|exclude"
             r"|without|unlike|instead\s+of|rather\s+than|other\s+than|apart\s+from|than|ahead\s+of|followed\s+by"
             r"|over|beat|beats|beating|behind|vs\.?|versus|before|after|below|above|exceeds?|outsold|outperform(?:ed|s)?")
_NEG_BEFORE = re.compile(rf"\b(?:{_NEGATION})\b[^\w]*(?:\w+[^\w]+){{0,{CUE_WORDS - 1}}}$", re.IGNORECASE)
_NEG_AFTER = re.compile(r"^[^\w]*(?:\w+[^\w]+){0,3}?(?:(?:was|is|came|comes|came\s+in)\s+)?(?:a\s+)?(?:distant\s+)?"
                        r"(?:second|third|runner-up|runner\s+up|next)\b", re.IGNORECASE)
_CLAUSE_END = re.compile(r"[.;:!?\n,()\[\]]|\b(?:but|however|whereas|while|although|instead|rather)\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<!\d)[.;!\n](?!\d)|[?]")


@dataclass(frozen=True)
class Committed:
    """The committed answer of a final text."""

    text: str
    """The ``ANSWER:`` value, or the whole final text when there is no such line."""
    source: str
    """``answer_line`` or ``text`` (no ``ANSWER:`` line: prose)."""
    problem: str = ""
    """Non-empty when the answer commits to nothing: two ``ANSWER:`` lines that differ."""
    lines: tuple[str, ...] = ()
    """Every ``ANSWER:`` value, in order (a number grader accepts differing lines that read as one number)."""


@dataclass(frozen=True)
class NumberReading:
    """The one number an answer commits to, or why there is none."""

    value: float | None
    detail: str = ""
    ambiguous: bool = False
    """The answer offers more than one value (a list, range, ±, a hedge): a failure of its own."""
    candidates: tuple[float, ...] = field(default=())
    missing: bool = False
    """There is no number to grade (no number, or only labels): the attempt has no answer."""


def _clean_value(text: str) -> str:
    return text.strip().strip("*_`").strip().rstrip(".").strip()


def committed_answer(answer: str) -> Committed:
    """The committed answer (see the module docstring)."""
    answer = answer[:MAX_ANSWER_CHARS]
    values = []
    for match in _ANSWER_LINE.finditer(answer):
        value = _clean_value(match.group(1))
        if not value:  # the value on the next non-empty line
            rest = answer[match.end():].lstrip("\n")
            value = _clean_value(rest.split("\n", 1)[0]) if rest else ""
        values.append(value)
    if not values:
        return Committed(answer.strip(), "text")
    distinct = list(dict.fromkeys(" ".join(v.casefold().split()) for v in values))
    if len(distinct) > 1:
        shown = ", ".join(repr(v) for v in dict.fromkeys(values))
        return Committed(values[-1], "answer_line", f"{len(values)} ANSWER: lines with different values: {shown}",
                         tuple(values))
    return Committed(values[-1], "answer_line", lines=tuple(values))


def _value(match: re.Match[str]) -> float:
    g = match.groupdict()
    if g["spaced"]:
        digits = re.sub(f"[{_SPACES}]", "", g["spaced"]) + (g["dec_comma"] or "").replace(",", ".") + (g["dec_dot"] or "")
    elif g["comma"]:
        digits = g["comma"].replace(",", "") + (g["dec2"] or "")
    elif g["plain"]:
        digits = g["plain"] + (g["dec3"] or "")
    else:
        digits = "0" + g["bare"]
    value = float(digits)
    exponent = g["exp"] or g["exp10"]
    if exponent:
        value *= 10.0 ** int(exponent.replace("\u2212", "-"))
    if g["scale"]:
        value *= _SCALES[g["scale"].lower()]
    if g["sign"] in ("-", "\u2212"):
        value = -value
    return value


def numbers_in(text: str) -> list[tuple[float, int, int]]:
    """Every number written in ``text``: (value, start, end)."""
    return [(_value(m), m.start(), m.end()) for m in _NUMBER.finditer(text[:MAX_ANSWER_CHARS])]


def _blank(text: str, pattern: re.Pattern[str]) -> str:
    """``text`` with the matches of ``pattern`` replaced by spaces (positions stay)."""
    return pattern.sub(lambda m: " " * len(m.group(0)), text)


def hedge_in(text: str, *, strict: bool = False) -> str | None:
    """The first hedge word of ``text`` (``maybe``, ``either``, ``?``, ...), or None.

    ``strict`` (an ``ANSWER:`` value, not prose) counts a bare ``or`` too (``X or Y``).
    """
    match = _HEDGE.search(text) or (_OR.search(text) if strict else None)
    return match.group(0) if match else None


def is_cancelled(text: str, start: int, end: int) -> bool:
    """The mention at ``text[start:end]`` is negated or compared away within its clause."""
    before = text[max(0, start - CONTEXT_CHARS):start]
    clause_start = max((m.end() for m in _CLAUSE_END.finditer(before)), default=0)
    if _NEG_BEFORE.search(before[clause_start:]):
        return True
    after = text[end:end + CONTEXT_CHARS]
    stop = _CLAUSE_END.search(after)
    return bool(_NEG_AFTER.search(after[:stop.start()] if stop else after))


def _distinct(values: list[float]) -> list[float]:
    out: list[float] = []
    for v in values:
        if not any(abs(v - w) <= 1e-12 * max(1.0, abs(w)) for w in out):
            out.append(v)
    return out


def read_number(text: str, *, prose: bool = False) -> NumberReading:
    """The one number ``text`` (a committed answer) commits to (see the module docstring).

    ``prose``: the text is a whole final answer without an ``ANSWER:`` line; several
    numbers in it are then no answer (``detail`` says so), not a hedge.
    """
    text = text[:MAX_ANSWER_CHARS]
    found = numbers_in(text)
    if not found:
        return NumberReading(None, "no number in the answer" if prose else f"no number in the answer {text[:120]!r}",
                             missing=True)
    if len(found) > MAX_NUMBERS:
        return NumberReading(None, f"{len(found)} numbers in the answer: no single value", ambiguous=not prose,
                             missing=prose)
    if _PLUS_MINUS.search(text):
        return NumberReading(None, f"a ± in {text[:120]!r}: one value, please", ambiguous=True)
    hedge = hedge_in(_blank(text, _DATES))
    if hedge and not prose:
        return NumberReading(None, f"hedged ({hedge!r}) in {text[:120]!r}", ambiguous=True)
    bound = _BOUND.search(_blank(text, _DATES))
    if bound and not prose:
        return NumberReading(None, f"a bound ({bound.group(0).strip()!r}) in {text[:120]!r}: one value, please",
                             ambiguous=True)
    for value, start, _ in found:  # "46 or 49", "46 (or 49)"
        before = text[:start].rstrip()
        if re.search(r"\b(?:or|nor)$", before, re.IGNORECASE) and re.search(r"\d", before):
            return NumberReading(None, f"alternatives in {text[:120]!r}", ambiguous=True)
    if prose and len(_distinct([v for v, _, _ in found])) > 1:
        listed = ", ".join(f"{v:g}" for v in _distinct([v for v, _, _ in found])[:6])
        return NumberReading(None, f"no ANSWER: line and several numbers in the answer ({listed})", missing=True)
    work = _blank(_blank(text, _DATES), _ASIDE)
    seps = list(_LABEL_SEP.finditer(work))
    if seps:
        bounds = [m.end() for m in seps]
        offsets = [(a, b) for a, b in zip(bounds, [m.start() for m in seps[1:]] + [len(work)])]
        with_numbers = [(a, b) for a, b in offsets if numbers_in(work[a:b])]
        if len(with_numbers) > 1:
            return NumberReading(None, f"several labelled values in {text[:120]!r}", ambiguous=True)
        if with_numbers:  # the value is after the label; the label's numbers do not count
            a, b = with_numbers[0]
            work = " " * a + work[a:b] + " " * (len(work) - b)
    candidates = [(v, s, e) for v, s, e in numbers_in(work)]
    for (_, _, e1), (_, s2, _) in zip(candidates, candidates[1:]):
        if _RANGE_GAP.fullmatch(work[e1:s2]):
            return NumberReading(None, f"a range in {text[:120]!r}: one value, please", ambiguous=True)
    if re.search(r"\bbetween\b", work, re.IGNORECASE) and len(candidates) >= 2:
        return NumberReading(None, f"a range in {text[:120]!r}: one value, please", ambiguous=True)
    kept = [(v, s, e) for v, s, e in candidates if not is_cancelled(work, s, e)]
    if candidates and not kept:
        return NumberReading(None, f"every number in {text[:120]!r} is negated", candidates=())
    plain = [(v, s, e) for v, s, e in kept if not _COUNT_PREP.search(work[:s])]
    chosen = plain or kept
    values = _distinct([v for v, _, _ in chosen])
    if len(values) == 1:
        return NumberReading(values[0], "", candidates=tuple(values))
    if not values:  # every number was a date, a label or an aside
        return NumberReading(None, f"no committed number in {text[:120]!r} (only dates, labels or asides)", missing=True)
    listed = ", ".join(f"{v:g}" for v in values[:6])
    if prose:
        return NumberReading(None, f"no ANSWER: line and {len(values)} numbers in the answer ({listed})",
                             candidates=tuple(values), missing=True)
    return NumberReading(None, f"{len(values)} different numbers ({listed}): one value, please", ambiguous=True,
                         candidates=tuple(values))


def named_mentions(text: str, pattern: re.Pattern[str]) -> tuple[list[re.Match[str]], list[re.Match[str]]]:
    """(mentions that count as named, mentions negated or compared away) of ``pattern`` in ``text``."""
    named: list[re.Match[str]] = []
    cancelled: list[re.Match[str]] = []
    for match in pattern.finditer(text[:MAX_ANSWER_CHARS]):
        (cancelled if is_cancelled(text, match.start(), match.end()) else named).append(match)
    return named, cancelled


def sentence_of(text: str, start: int, end: int) -> str:
    """The sentence of ``text`` around ``text[start:end]`` (for hedge checks), at most CONTEXT_CHARS either side."""
    lo, hi = max(0, start - CONTEXT_CHARS), min(len(text), end + CONTEXT_CHARS)
    begin = max((m.end() for m in _SENTENCE_END.finditer(text, lo, start)), default=lo)
    stop = _SENTENCE_END.search(text, end, hi)
    return text[begin:stop.end() if stop else hi]
