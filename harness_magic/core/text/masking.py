"""Masking what the model sees: per sensitivity class ``allow``, ``mask`` (a stable pseudonym) or ``deny``.

Contract of :class:`Masker`:

* **Policy.** ``{class: action}`` over :data:`~.sensitivity.SENSITIVITY_CLASSES`;
  missing classes take :data:`DEFAULT_POLICY` (``pii`` and ``financial``
  masked, ``restricted`` denied). :func:`check_policy` names a bad class or action.
* **Stable pseudonyms.** ``mask`` replaces a value by a keyed hash (keyed BLAKE2b
  with a per-masker random key) shaped like the original: an e-mail stays an
  e-mail, a card keeps its length, separators, first digit (the network) and last four digits, a phone its
  ``+`` and separators. The same value gets the same pseudonym for the life of
  the masker (one session), so counts, joins and group-bys the model reasons
  about stay consistent; a pseudonym does not reveal its value.
* **Deny.** ``deny`` replaces the value by ``[denied CLASS]``: nothing of it is sent.
* **Two ways a value is found.** Validated patterns (:func:`~.sensitivity.find_sensitive`)
  anywhere in the text — cells, printed lines, error messages, column names —
  and the *known values* of classified columns (:meth:`Masker.learn_column`):
  a column classed by configuration holds names or free text no pattern
  recognises, so its values seen in snapshots and cached frames are masked
  wherever they appear. Known values are bounded by :data:`KNOWN_VALUES_MAX`
  and shorter ones than :data:`KNOWN_VALUE_MIN_CHARS` are not tracked.
* **Cut values.** A known value cut where the text goes on with ``...`` or
  ``…`` (pandas cuts cells at ``display.max_colwidth``, snapshots at 60, 30 or
  16 characters) is masked by its prefix when at least
  :data:`KNOWN_PREFIX_MIN_CHARS` of it are left; a cut e-mail, international
  phone or card is recognised by :func:`~.sensitivity.find_sensitive`. The cut
  mark stays, the pseudonym stands for the whole value.
* **Numbers by value.** A numeric value of a classified column (an amount
  classed ``financial``) is matched by value, whatever its format: ``99000.5``,
  ``99000.50``, ``99,000.50``, ``9.90005e4``, ``99_000.5`` (and their negation)
  are one value. Only learned values: a number computed and printed is never
  touched unless it equals one of them. Rounded (``99000.49`` for a printed
  ``99000.4912``) or spelled-out forms are not matched.
* **Never crash on data.** :meth:`Masker.learn_column` skips missing values of
  every kind (``None``, NaN, ``pd.NA``, ``NaT``) and values that are not one
  value (containers, bytes) or cannot be read; they count in
  :attr:`Masker.unread`.
* **Not covered.** Values encoded (base64, hex, reversed, split over several
  lines or chunks of a literal, spaced out or joined by zero-width characters)
  are not recognised, nor a value cut without a mark (``s[:20]``) unless a
  pattern still finds what is left: the masker sees text, not intent.

Pure: imports neither pandas nor the agent.
"""

from __future__ import annotations

import bisect
import decimal
import hashlib
import numbers
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from harness_magic.core.text.sensitivity import (
    CUT_MARK,
    DETECTED_KINDS,
    SENSITIVITY_CLASSES,
    classify_cell,
    find_sensitive,
    is_missing,
)

__all__ = ["Masker", "Masked", "ColumnClass", "MASK_ACTIONS", "DEFAULT_POLICY", "KNOWN_VALUES_MAX",
           "KNOWN_VALUE_MIN_CHARS", "KNOWN_PREFIX_MIN_CHARS", "CUT_PREFIX_MAX_CHARS", "check_policy", "denied_text",
           "sensitivity_text"]

MASK_ACTIONS = ("allow", "mask", "deny")
DEFAULT_POLICY = {"pii": "mask", "financial": "mask", "restricted": "deny"}
"""Pseudonyms keep analysis possible for personal and financial data; restricted data is never sent."""
KNOWN_VALUES_MAX = 50_000
"""Known values of classified columns kept for masking: bounds memory and the matcher's size."""
KNOWN_VALUE_MIN_CHARS = 3
"""Shorter values are not tracked as known values: two letters or digits match everywhere and say nothing.
For numbers: digits before the point plus significant digits after it (``250``, ``12.5``; not ``7`` or ``0.5``)."""
KNOWN_PREFIX_MIN_CHARS = 8
"""Fewest characters of a known value left before a cut mark for the cut text to be masked as that value: a
shorter start (``Ann...``) is shared by too many ordinary words."""
CUT_PREFIX_MAX_CHARS = 200
"""Characters before a cut mark compared with known values: more than any cell pandas (50) or a snapshot (60)
shows before cutting it."""
_NUMBER = re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d[\d_]*(?:\.\d*)?(?:[eE][-+]?\d+)?"
                     r"|\.\d+(?:[eE][-+]?\d+)?)(?!\w)(?!\.\d)")
"""A number as Python, pandas and people print it: ``99000.5``, ``99,000.50``, ``9.90005e+04``, ``99_000.5``."""
NUMBER_TEXTS_MEMO = 65_536
"""Numbers as printed whose verdict (a known number or not) is remembered: printed output repeats them."""
_NUMBER_EXPONENT_MAX = 400
"""Exponents past this are not numbers anyone's data holds (and ``Decimal`` work on them is not free)."""


def number_key(value: Any) -> decimal.Decimal | None:
    """The magnitude of a number or numeric text as an exact ``Decimal`` (``99000.50`` and ``9.90005e4`` give one
    key), or None for text that is not a number, NaN, infinities and booleans."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.replace(",", "").replace("_", "").strip()
    elif isinstance(value, (numbers.Real, decimal.Decimal)):
        try:
            text = str(value)
        # broad: str() of a hostile value runs its own __str__; such a cell is simply not a known value
        except Exception:
            return None
    else:
        return None
    try:
        key = abs(decimal.Decimal(text))
    except (decimal.DecimalException, ValueError, TypeError):  # not a number, or one past Decimal's exponents
        return None
    if not key.is_finite() or abs(key.adjusted()) > _NUMBER_EXPONENT_MAX:
        return None
    return key


def _number_digits(key: decimal.Decimal) -> int:
    """Digits a number shows: ``250`` -> 3, ``12.5`` -> 3, ``0.5`` -> 1 (see :data:`KNOWN_VALUE_MIN_CHARS`)."""
    sign, digits, exponent = key.normalize().as_tuple()
    return len(digits) + max(int(exponent), 0)


def check_policy(policy: Any) -> dict[str, str]:
    """The full policy: ``policy`` over :data:`DEFAULT_POLICY`; a ValueError names a bad class or action."""
    if policy is None:
        return dict(DEFAULT_POLICY)
    if not isinstance(policy, Mapping):
        raise ValueError(f"masking policy must be a mapping of class to action, got {type(policy).__name__}")
    full = dict(DEFAULT_POLICY)
    for cls, action in policy.items():
        if cls not in SENSITIVITY_CLASSES:
            raise ValueError(f"masking policy names class {cls!r}; classes: {', '.join(SENSITIVITY_CLASSES)}")
        if action not in MASK_ACTIONS:
            raise ValueError(f"masking action {action!r} for {cls!r} is not valid; allowed: {', '.join(MASK_ACTIONS)}")
        full[cls] = action
    return full


def sensitivity_text(rows: Iterable[tuple[str, str]]) -> str:
    """The line ``%agent_vars HANDLE`` prints under a snapshot: each sensitive column with its class and source."""
    return "\nsensitive columns: " + ("; ".join(f"{column} {how}" for column, how in rows) or "none")


def denied_text(cls: str) -> str:
    """What a denied value of class ``cls`` becomes."""
    return f"[denied {cls}]"


@dataclass(frozen=True)
class ColumnClass:
    """A column's sensitivity and where it came from (``config``, ``glossary`` or ``detected``)."""

    cls: str
    source: str
    kind: str | None = None
    """The detected kind (``email``, ``card``...), None for configured columns."""


@dataclass
class Masked:
    """A masked text and how many values of each class were masked or denied in it."""

    text: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


_PROTECT_MIN_DIGITS = 7
"""Issued pseudonyms with at least this many digits are protected in text (shorter ones cannot pass as a value)."""


DIRECT_SCAN_MAX = 30_000
"""Known values are found by the automaton once it holds them all. Until then (values were just learned), in a
text of ``n`` characters they are found by looking up its spans (``n`` times one more than the number of distinct
lengths of known values) while that product is under this: a snapshot or a short tool result does not pay for
extending the automaton, a long text does, once."""


def _is_word(ch: str) -> bool:
    """``ch`` is a character of a word, as ``\\w`` reads it (letters and digits of any script, ``_``)."""
    return ch.isalnum() or ch == "_"


class _KnownValues:
    """Known values, found in a text as whole words (never inside one), the longest first where several start
    at one place, left to right, never overlapping.

    One structure for all of them: a dict (value -> class) looked up span by span in a short text, and one
    Aho-Corasick automaton (:mod:`ahocorasick`, built in C, extended with the values learned since its last
    use) for a long one. Both give the same spans (``tests/test_masking_values.py`` compares them)."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self._order: list[str] = []
        """The values in the order they were added: each index below takes those added since its last use."""
        self._lengths: set[int] = set()
        self._longest = 0
        self._heads: set[str] = set()
        """The first :data:`KNOWN_PREFIX_MIN_CHARS` characters of each value that long (the cut scan's first check)."""
        self._automaton: Any = None
        self._taken = {"heads": 0, "automaton": 0}
        """How many of :attr:`_order` each index holds."""
        self._sorted: list[str] | None = None

    def add(self, value: str, cls: str) -> bool:
        return self.add_many([value], cls) == 1

    def add_many(self, values: Iterable[str], cls: str) -> int:
        """Add ``values`` not known yet (up to :data:`KNOWN_VALUES_MAX` in all) as ``cls``; returns how many.
        Every value is at least :data:`KNOWN_VALUE_MIN_CHARS` long (callers skip shorter ones)."""
        room = KNOWN_VALUES_MAX - len(self.values)
        return self.extend([v for v in dict.fromkeys(values) if v not in self.values][:max(room, 0)], cls)

    def extend(self, new: list[str], cls: str) -> int:
        """Add ``new``: distinct values, none known yet, within the bound (what :meth:`add_many` checks)."""
        if not new:
            return 0
        self.values.update(dict.fromkeys(new, cls))
        self._order.extend(new)
        lengths = set(map(len, new))
        self._lengths |= lengths
        self._longest = max(self._longest, max(lengths))
        self._sorted = None
        return len(new)

    def _fresh(self, index: str) -> list[str]:
        """The values added since ``index`` last took them (and marks them taken)."""
        start = self._taken[index]
        self._taken[index] = len(self._order)
        return self._order[start:]

    def completion(self, prefix: str) -> str | None:
        """The known value ``prefix`` starts (the first in order when several do), or None."""
        fresh = self._fresh("heads")
        self._heads.update(v[:KNOWN_PREFIX_MIN_CHARS] for v in fresh if len(v) >= KNOWN_PREFIX_MIN_CHARS)
        if prefix[:KNOWN_PREFIX_MIN_CHARS] not in self._heads:
            return None
        if self._sorted is None:
            self._sorted = sorted(self.values)
        i = bisect.bisect_left(self._sorted, prefix)
        if i < len(self._sorted) and self._sorted[i].startswith(prefix):
            return self._sorted[i]
        return None

    def cut_spans(self, text: str) -> list[tuple[int, int, str]]:
        """``(start, end, known value)`` for each known value cut in ``text``: its start, at least
        :data:`KNOWN_PREFIX_MIN_CHARS` long and at a word boundary, right before a cut mark."""
        if self._longest < KNOWN_PREFIX_MIN_CHARS:
            return []
        spans: list[tuple[int, int, str]] = []
        floor = 0
        for mark in CUT_MARK.finditer(text):
            end = mark.start()
            for start in range(max(floor, end - CUT_PREFIX_MAX_CHARS), end - KNOWN_PREFIX_MIN_CHARS + 1):
                if start and _is_word(text[start - 1]):
                    continue  # the known-value matcher's own rule: never from inside a word
                value = self.completion(text[start:end])
                if value is not None:
                    spans.append((start, end, value))
                    break
            floor = mark.end()
        return spans

    def spans(self, text: str, *, direct: bool | None = None) -> list[tuple[int, int, str]]:
        """``(start, end, value)`` of each known value in ``text`` (see the class); ``direct`` forces the span
        lookups (True) or the automaton (False) instead of the cheaper of the two."""
        if not self.values or not text:
            return []
        if direct is None:  # the automaton once it holds every value; spans looked up in a short text meanwhile
            unindexed = self._taken["automaton"] < len(self._order)
            direct = unindexed and len(text) * (1 + len(self._lengths)) <= DIRECT_SCAN_MAX
        if direct:
            return self._direct_spans(text)
        return self._automaton_spans(text)

    def _direct_spans(self, text: str) -> list[tuple[int, int, str]]:
        values, size = self.values, len(text)
        lengths = sorted(self._lengths, reverse=True)
        spans: list[tuple[int, int, str]] = []
        start = 0
        while start < size:
            if start and (text[start - 1].isalnum() or text[start - 1] == "_"):  # inside a word (see _is_word)
                start += 1
                continue
            for length in lengths:
                end = start + length
                if end > size or (end < size and _is_word(text[end])):
                    continue
                value = text[start:end]
                if value in values:
                    spans.append((start, end, value))
                    start = end
                    break
            else:
                start += 1
        return spans

    def _automaton_spans(self, text: str) -> list[tuple[int, int, str]]:
        import ahocorasick

        fresh = self._fresh("automaton")
        if fresh or self._automaton is None:
            if self._automaton is None:
                self._automaton = ahocorasick.Automaton()
            add = self._automaton.add_word
            for value in fresh:
                add(value, value)
            self._automaton.make_automaton()
        size = len(text)
        found = []
        for last, value in self._automaton.iter(text):  # every occurrence, overlapping ones too
            start, end = last + 1 - len(value), last + 1
            if (start and _is_word(text[start - 1])) or (end < size and _is_word(text[end])):
                continue
            found.append((start, -end, value))
        found.sort()
        spans: list[tuple[int, int, str]] = []
        taken = 0
        for start, negative_end, value in found:  # leftmost first, the longest of those starting there
            if start >= taken:
                spans.append((start, -negative_end, value))
                taken = -negative_end
        return spans


class Masker:
    """Masks sensitive values in text for one session (see the module contract).

    ``policy``: a mapping, or a callable returning one (read at each call, so a
    changed setting applies from the next tool result). ``declared``: a callable
    returning ``{"table.column" or "column": ColumnClass}`` from configuration
    and glossaries, read at each call too.
    """

    def __init__(self, policy: Mapping[str, str] | Callable[[], Mapping[str, str]] | None = None, *,
                 declared: Callable[[], Mapping[str, ColumnClass]] | None = None, key: bytes | None = None) -> None:
        self._policy = policy
        self._declared = declared or (lambda: {})
        self._key = key or secrets.token_bytes(32)
        self._keyed_states: dict[tuple[str, bool], Any] = {}
        """``(kind, cut)`` -> the keyed BLAKE2b state that absorbed that prefix (:meth:`_keyed`)."""
        self._known = _KnownValues()
        self._kinds: dict[str, str | None] = {}
        """Known value -> its detected kind (memo): a known e-mail still gets an e-mail-shaped pseudonym."""
        self.columns: dict[str, dict[str, ColumnClass]] = {}
        """Handle -> column -> class, for the handles :meth:`learn_column` was told about (``%agent_vars``)."""
        self._numbers: dict[decimal.Decimal, str] = {}
        """Known numeric values (magnitudes, :func:`number_key`) -> class: matched by value in any format."""
        self._digits_automaton: Any = None
        """The significant digits of each known number (:meth:`_numbers_may_be_in`), built when first needed."""
        self._digits_indexed = 0
        self._number_digits: set[str] = set()
        """The significant digits of each known number (:func:`_significant_digits`): a printed number whose own
        (:func:`_printed_digits`) are none of these is no known number."""
        self._number_texts: dict[str, str | None] = {}
        """Number as printed -> the class of the known number it is, or None (memo, :data:`NUMBER_TEXTS_MEMO`)."""
        self.unread = 0
        """Values :meth:`learn_column` could not read as one value (containers, bytes, a failing ``str``)."""
        self._pseudonyms: dict[str, str] = {}
        """Real value -> the pseudonym it got at entry (:meth:`register_pseudonym`): text masks it the same way."""
        self._issued: set[str] = set()
        """Pseudonyms issued at entry: what the agent's side holds, never masked again."""
        self._issued_digits = _KnownValues()
        """Issued pseudonyms made of digit groups (phones, cards, ids): found first in a text and left alone, so
        a run of digits printed beside them is never read as a new value (a pseudonym phone and card side by side)."""

    @property
    def policy(self) -> dict[str, str]:
        source = self._policy() if callable(self._policy) else self._policy
        return check_policy(source)

    @property
    def active(self) -> bool:
        """False when every class is allowed: text passes through unchanged."""
        return any(action != "allow" for action in self.policy.values())

    def declared_class(self, column: str, table: str | None = None) -> ColumnClass | None:
        """The configured class of ``column`` (``table.column`` first, then the bare column name), or None."""
        declared = self._declared()
        if table and f"{table}.{column}" in declared:
            return declared[f"{table}.{column}"]
        if column in declared:
            return declared[column]
        wanted = column.lower()
        for key, value in declared.items():  # "customers.email" also classes a result column named "email"
            if key.rsplit(".", 1)[-1].lower() == wanted:
                return value
        return None

    def register_pseudonym(self, real: str, pseudonym: str, cls: str) -> None:
        """``real`` (of class ``cls``) was replaced by ``pseudonym`` at entry: text holding ``real`` gets the same
        pseudonym (a prompt naming a customer finds her rows), and ``pseudonym`` is never masked again."""
        self.register_pseudonyms([(real, pseudonym)], cls)

    def register_pseudonyms(self, pairs: list[tuple[str, str]], cls: str) -> None:
        """:meth:`register_pseudonym` for many ``(real, pseudonym)`` pairs (what entry issues for a column); every
        pseudonym is remembered, real values only up to :data:`KNOWN_VALUES_MAX`."""
        self._issued.update(p for _, p in pairs)
        for _, pseudonym in pairs:
            self._protect(pseudonym)
        for real, pseudonym in pairs:
            if len(self._pseudonyms) >= KNOWN_VALUES_MAX:
                break
            self._pseudonyms[real] = pseudonym
            text = real.strip()
            if len(text) >= KNOWN_VALUE_MIN_CHARS:
                self._known.add(text, cls)

    def _protect(self, pseudonym: str) -> None:
        if pseudonym[:1] in ("<", "u"):  # <class:hex> and user-…@… pseudonyms are no digit groups: cheap to skip
            return
        if sum(ch.isdigit() for ch in pseudonym) >= _PROTECT_MIN_DIGITS:
            self._issued_digits.add(pseudonym, "")

    def is_pseudonym(self, text: str) -> bool:
        """``text`` is a pseudonym issued at entry."""
        return text in self._issued

    def issued_digit_spans(self, text: str) -> list[tuple[int, int]]:
        """``(start, end)`` of each pseudonym issued at entry that is made of digit groups (phones, cards, ids
        with at least :data:`_PROTECT_MIN_DIGITS` digits) in ``text``."""
        return [(start, end) for start, end, _ in self._issued_digits.spans(text)]

    def learn_column(self, handle: str, column: str, cls: ColumnClass, values: Iterable[Any]) -> None:
        """Record ``column`` of ``handle`` as ``cls`` and track its ``values`` as known sensitive values
        (pseudonyms issued at entry excepted: they are what the agent may see).

        Numbers are tracked by value (:func:`number_key`), text as text. Never raises on a value: missing
        ones are skipped, those that are not one value or cannot be read are counted in :attr:`unread`."""
        self.columns.setdefault(handle, {})[str(column)] = cls
        values = values if isinstance(values, list) else list(values)
        strings = [value for value in values if type(value) is str]
        if strings:
            self._learn_texts(strings, cls)
        others = [value for value in values if type(value) is not str] if len(strings) < len(values) else []
        for value in others:
            if is_missing(value):
                continue
            if self.known_values >= KNOWN_VALUES_MAX:
                break
            if isinstance(value, (numbers.Real, decimal.Decimal)) and not isinstance(value, bool):
                try:
                    key = number_key(str(value))
                except Exception:  # an int subclass whose str fails
                    self.unread += 1
                    continue
                if key is not None and _number_digits(key) >= KNOWN_VALUE_MIN_CHARS:
                    self._add_number(key, cls.cls)
                continue
            if not isinstance(value, (str, numbers.Number, bool)) and not _is_scalar(value):
                self.unread += 1  # a list, dict, bytes or array in a cell: not one value
                continue
            try:
                text = str(value).strip()
            # broad: str() of a hostile cell runs its own __str__; never crash on data, count it unread
            except Exception:
                self.unread += 1
                continue
            self._learn_texts([text], cls)

    def _learn_texts(self, texts: list[str], cls: ColumnClass) -> None:
        """Track the stripped ``texts`` (plain strings) of a column classed ``cls``, in one pass: those long
        enough, not issued pseudonyms, up to :data:`KNOWN_VALUES_MAX` known values in all."""
        room = KNOWN_VALUES_MAX - self.known_values
        if room <= 0:
            return
        known, issued = self._known.values, self._issued
        fresh = [text for text in dict.fromkeys(map(str.strip, texts))
                 if len(text) >= KNOWN_VALUE_MIN_CHARS and text not in known and text not in issued][:room]
        self._known.extend(fresh, cls.cls)
        if cls.cls == "financial" and cls.kind is None:
            for text in fresh:
                if text[:1].isdigit() or text[:1] == ".":
                    key = number_key(text)  # an amount held as text is matched by value too (not a card's digits)
                    if key is not None and _number_digits(key) >= KNOWN_VALUE_MIN_CHARS:
                        self._add_number(key, cls.cls)

    def _add_number(self, key: decimal.Decimal, cls: str) -> None:
        if key not in self._numbers:
            self._numbers[key] = cls
            self._number_digits.add(_significant_digits(key))
            self._number_texts.clear()  # a number printed before may be this one

    def _numbers_may_be_in(self, text: str) -> bool:
        """False when no known number can be printed in ``text``: an ASCII text in which, once ``,``, ``_`` and
        ``.`` are dropped, no known number's significant digits appear (every format :data:`_NUMBER` reads keeps
        them in order: ``99,000.50`` and ``9.90005e4`` hold ``990005``). One automaton pass instead of reading
        every number; a text with other digits (``٩٩٠٠٠``) is always read number by number."""
        if not text.isascii():
            return True
        if self._digits_automaton is None or self._digits_indexed < len(self._numbers):
            import ahocorasick

            automaton = ahocorasick.Automaton()
            for key in self._numbers:
                automaton.add_word(_significant_digits(key), True)
            automaton.make_automaton()
            self._digits_automaton, self._digits_indexed = automaton, len(self._numbers)
        return next(self._digits_automaton.iter(text.translate(_NUMBER_SEPARATORS)), None) is not None

    def _number_class(self, text: str) -> str | None:
        """The class of the known number ``text`` (as printed) stands for, or None (memoised per text)."""
        if text.isascii() and _printed_digits(text) not in self._number_digits:
            return None  # its significant digits are no known number's: no Decimal needed to say so
        memo = self._number_texts
        if text not in memo:
            if len(memo) >= NUMBER_TEXTS_MEMO:
                memo.clear()
            key = number_key(text)
            memo[text] = None if key is None else self._numbers.get(key)
        return memo[text]

    @property
    def known_values(self) -> int:
        """Known values tracked: texts and numbers (bounded together by :data:`KNOWN_VALUES_MAX`)."""
        return len(self._known.values) + len(self._numbers)

    def pseudonym(self, kind: str, value: str, *, cut: bool = False) -> str:
        """The stable, format-shaped stand-in for ``value`` of ``kind`` (a detected kind, or a class); ``cut``:
        ``value`` is the start of a value cut in the text (nothing of what it shows is kept)."""
        state = self._keyed(kind, cut)
        state.update(value.encode())
        return _shaped(kind, value, state.digest(), cut)

    def _keyed(self, kind: str, cut: bool) -> Any:
        """A fresh copy of the keyed BLAKE2b state that has absorbed ``kind`` and the cut mark (kept per
        ``(kind, cut)``): a value fed to it gives the digest of the one-shot call over the whole text."""
        state = self._keyed_states.get((kind, cut))
        if state is None:
            state = hashlib.blake2b(f"{kind}\0{'cut' if cut else ''}\0".encode(), key=self._key)
            self._keyed_states[(kind, cut)] = state
        return state.copy()

    def pseudonyms(self, kind: str, values: list[str]) -> list[str]:
        """:meth:`pseudonym` of each of ``values`` (whole values), in one pass: what entry uses for a column."""
        # The key and the prefix are absorbed once; each value continues a copy of that state, which gives the
        # same digest as a one-shot call at about half the cost per value.
        keyed = self._keyed(kind, False)
        digests = []
        for value in values:
            state = keyed.copy()
            state.update(value.encode())
            digests.append(state.digest())
        if kind == "email":
            return [f"user-{d[:4].hex()}@{d[4:7].hex()}.{v.rpartition('@')[2].rsplit('.', 1)[-1]}"
                    for v, d in zip(values, digests)]
        if kind not in _SHAPED_KINDS:
            return [f"<{kind}:{d[:5].hex()}>" for d in digests]
        return [_shaped(kind, v, d, False) for v, d in zip(values, digests)]


    def mask_text(self, text: str) -> Masked:
        """``text`` with every sensitive value masked or denied by the policy, and the counts per class."""
        policy = self.policy
        if not text or not any(action != "allow" for action in policy.values()):
            return Masked(text)
        counts: dict[str, int] = {}
        spans: list[tuple[int, int, str]] = []
        for start, end, value in self._known.spans(text):
            cls = self._known.values[value]
            if policy[cls] != "allow":
                spans.append((start, end, self._replace(cls, self._kind(value, cls), value, policy, counts)))
        taken = _Spans(spans)
        for start, end, value in self._known.cut_spans(text) if "..." in text or "…" in text else ():
            cls = self._known.values[value]
            if policy[cls] != "allow" and not taken.overlaps(start, end):
                taken.add(start, end)
                spans.append((start, end, self._replace(cls, self._kind(value, cls), value, policy, counts)))
        if self._numbers and self._numbers_may_be_in(text):  # by value: the distinct texts, then where they are
            wanted = {number for number in set(_NUMBER.findall(text)) if self._number_class(number) is not None}
            for match in _NUMBER.finditer(text) if wanted else ():
                number = match.group()
                number_cls = self._number_class(number) if number in wanted else None
                key = number_key(number) if number_cls is not None else None
                if key is None or number_cls is None or policy[number_cls] == "allow" \
                        or taken.overlaps(match.start(), match.end()):
                    continue
                taken.add(match.start(), match.end())
                spans.append((match.start(), match.end(),
                              self._replace(number_cls, None, _number_text(key), policy, counts)))
        for start, end, _ in self._issued_digits.spans(text):
            if not taken.overlaps(start, end):
                taken.add(start, end)  # a pseudonym: protected, never replaced
        for found in find_sensitive(text):
            if policy[found.cls] == "allow" or found.value in self._issued or taken.overlaps(found.start, found.end):
                continue
            known = self._known.values.get(found.value)
            cls = known if known is not None and DETECTED_KINDS[found.kind] != known else found.cls
            spans.append((found.start, found.end,
                          self._replace(cls, found.kind, found.value, policy, counts, cut=found.cut)))
        if not spans:
            return Masked(text)
        spans.sort()
        out, at = [], 0
        for start, end, replacement in spans:
            out.append(text[at:start])
            out.append(replacement)
            at = end
        out.append(text[at:])
        return Masked("".join(out), counts)

    def _kind(self, value: str, cls: str) -> str | None:
        """The detected kind of known ``value`` when it agrees with its class (memo): a known e-mail still gets an
        e-mail-shaped pseudonym."""
        if value not in self._kinds:
            kind = classify_cell(value)
            self._kinds[value] = kind if kind is not None and DETECTED_KINDS[kind] == cls else None
        return self._kinds[value]

    def _replace(self, cls: str, kind: str | None, value: str, policy: Mapping[str, str], counts: dict[str, int],
                 *, cut: bool = False) -> str:
        counts[cls] = counts.get(cls, 0) + 1
        if policy[cls] == "deny":
            return denied_text(cls)
        return self._pseudonyms.get(value) or self.pseudonym(kind or cls, value, cut=cut)

    def mask_value(self, value: Any, counts: dict[str, int] | None = None) -> Any:
        """``value`` (a snapshot: dicts, lists, strings) with every string and key masked; others as they are."""
        counts = counts if counts is not None else {}
        if isinstance(value, str):
            masked = self.mask_text(value)
            for cls, n in masked.counts.items():
                counts[cls] = counts.get(cls, 0) + n
            return masked.text
        if isinstance(value, dict):
            return {self.mask_value(k, counts) if isinstance(k, str) else k: self.mask_value(v, counts)
                    for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.mask_value(v, counts) for v in value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and self._numbers:
            key = number_key(value)
            if key is not None and key in self._numbers:
                return self.mask_value(str(value), counts)
        return value


_NUMBER_SEPARATORS = str.maketrans("", "", ",_.")
"""What a printed number may hold between its digits (thousands, underscores, the point): dropped before looking
for known numbers' digits."""


def _significant_digits(key: decimal.Decimal) -> str:
    """The digits of a number without leading or trailing zeros (``99000.50`` -> ``990005``)."""
    return "".join(map(str, key.normalize().as_tuple().digits))


def _printed_digits(text: str) -> str:
    """The significant digits of a number as :data:`_NUMBER` reads it in ASCII text (``99,000.50`` and
    ``9.90005e+04`` -> ``990005``): :func:`_significant_digits` of its :func:`number_key`, without the Decimal."""
    mantissa = text.partition("e")[0].partition("E")[0]
    return mantissa.translate(_NUMBER_SEPARATORS).strip("0") or "0"


def _number_text(key: decimal.Decimal) -> str:
    """One text per numeric value (``99000.5`` for ``99000.50`` and ``9.90005e4``): its pseudonym's seed."""
    return format(key.normalize(), "f")


def _is_scalar(value: Any) -> bool:
    """A one-value cell that is not a string or number (a date, a numpy scalar): not a container or bytes."""
    if isinstance(value, (bytes, bytearray, memoryview, list, tuple, dict, set, frozenset)):
        return False
    return not hasattr(value, "__len__") or hasattr(value, "isoformat")


class _Spans:
    """Sorted non-overlapping spans already replaced (a pattern match inside one is skipped)."""

    def __init__(self, spans: list[tuple[int, int, str]]) -> None:
        self._spans = sorted((s, e) for s, e, _ in spans)

    def add(self, start: int, end: int) -> None:
        bisect.insort(self._spans, (start, end))

    def overlaps(self, start: int, end: int) -> bool:
        i = bisect.bisect_right(self._spans, (start, float("inf")))
        if i and self._spans[i - 1][1] > start:
            return True
        return i < len(self._spans) and self._spans[i][0] < end

_DIGIT_OF_BYTE = [str(b % 10) for b in range(256)]
"""A digest byte -> the digit that stands for a digit of the value."""
_SHAPED_KINDS = ("email", "card", "phone", "national_id", "iban", "ip")
"""Kinds whose pseudonym keeps the value's shape; any other kind (a class) gets ``<kind:hex>``."""


def _shaped(kind: str, value: str, digest: bytes, cut: bool) -> str:
    """The pseudonym of ``value`` of ``kind`` from its keyed ``digest`` (see :meth:`Masker.pseudonym`)."""
    stream = iter(digest * 4)
    if kind == "email":
        local, _, domain = value.rpartition("@")
        if cut:
            return f"user-{digest[:4].hex()}@{digest[4:7].hex()}"
        tld = domain.rsplit(".", 1)[-1]
        return f"user-{digest[:4].hex()}@{digest[4:7].hex()}.{tld}"
    if kind in ("card", "phone", "national_id"):
        positions = [i for i, ch in enumerate(value) if ch.isdigit()]
        keep = 4 if kind == "card" and not cut else 0  # a card's last four digits are what receipts show
        brand = 1 if kind == "card" and not cut else 0  # ... and its first digit names the network (4: Visa)
        chars = list(value)
        pool = digest * 4
        for j, i in enumerate(positions[brand:len(positions) - keep]):
            chars[i] = _DIGIT_OF_BYTE[pool[j]]
        text = "".join(chars)
        return f"9{text[1:]}" if kind == "national_id" else text  # 9xx: never an issued SSN
    if kind == "iban":
        out = [value[:2]]
        for ch in value[2:]:
            if ch.isdigit():
                out.append(str(next(stream) % 10))
            elif ch.isalpha():
                out.append(chr(ord("A") + next(stream) % 26))
            else:
                out.append(ch)
        return "".join(out)
    if kind == "ip":
        if ":" in value:
            return "fd00:" + ":".join(digest[i:i + 2].hex() for i in range(0, 8, 2)) + "::1"
        return f"10.{digest[0]}.{digest[1]}.{digest[2]}"
    return f"<{kind}:{digest[:5].hex()}>"
