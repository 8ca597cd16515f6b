"""Sensitive values: which text is an e-mail, phone, card, IBAN, national id or IP address, and which class it has.

Contract:

* **Classes.** :data:`SENSITIVITY_CLASSES` — ``pii``, ``financial``,
  ``restricted``. Detection yields ``pii`` (e-mail, phone, national id, IP
  address) or ``financial`` (payment card, IBAN); ``restricted`` comes only
  from configuration.
* **Validated, not guessed.** A candidate found by a cheap regex is kept only
  when a validator accepts it: ``python-stdnum`` (Luhn for cards, IBAN check
  digits, US SSN rules), ``phonenumbers`` (a number valid in its region),
  ``email-validator`` (syntax only, no DNS) and :mod:`ipaddress`.
* **Free text is conservative about phones.** In running text a phone needs a
  leading ``+`` or a separator (``-``, space, dot, parentheses): bare digit runs
  are counts and ids far more often. A cell of a column is checked as a whole,
  bare digits included.
* **Bounded.** :func:`classify_column` reads at most :data:`DETECT_SAMPLE_VALUES`
  values; :func:`find_sensitive` is linear in the text (each regex is).

Pure: no pandas, no IPython.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

__all__ = [
    "SENSITIVITY_CLASSES",
    "DETECTED_KINDS",
    "DETECT_SAMPLE_VALUES",
    "DETECT_MIN_SHARE",
    "DEFAULT_PHONE_REGION",
    "Found",
    "find_sensitive",
    "classify_cell",
    "classify_column",
    "check_sensitivity_map",
]

SENSITIVITY_CLASSES = ("pii", "financial", "restricted")
"""Classes a column can have (or none)."""
DETECTED_KINDS = {"email": "pii", "phone": "pii", "national_id": "pii", "ip": "pii",
                  "card": "financial", "iban": "financial"}
"""What detection recognises, and the class each kind gets."""
DETECT_SAMPLE_VALUES = 200
"""Values of a column checked to classify it: enough to see a pattern, cheap on any column."""
DETECT_MIN_SHARE = 0.5
"""Share of a column's non-empty sampled values that must be one kind for the column to get its class."""
DEFAULT_PHONE_REGION = "US"
"""Region assumed for phone numbers written without a ``+`` country code."""
VALIDATION_MEMO = 65_536
"""Candidates whose verdict is remembered: printed output repeats the same dates, ids and values."""
_CELL_MAX_CHARS = 120
"""A cell longer than this is prose, not one value: it is not classified as a whole (its text still is masked)."""

_EMAIL = r"(?P<email>[A-Za-z0-9._%+\-]{1,64}@[A-Za-z0-9\-]{1,63}(?:\.[A-Za-z0-9\-]{1,63})*\.[A-Za-z]{2,24})"
_IBAN = r"(?P<iban>\b[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,4})?\b)"
_CARD = r"(?P<card>(?<![\d\-])\d(?:[ \-]?\d){12,18}(?![\d\-]))"
_SSN = r"(?P<national_id>(?<![\d\-])\d{3}-\d{2}-\d{4}(?![\d\-]))"
_IPV4 = r"(?P<ipv4>(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.]))"
_IPV6 = r"(?P<ipv6>(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{1,4}:){2,7}:?[0-9A-Fa-f]{0,4}(?:::?[0-9A-Fa-f]{1,4})*(?![0-9A-Fa-f:]))"
_PHONE = r"(?P<phone>(?<![\w+])(?:\+\d{1,3}[ \-.]?)?(?:\(\d{1,5}\)[ \-.]?|\d{1,5}[ \-.])(?:\d{1,6}[ \-.]){0,5}\d{2,8}(?![\w]))"
_START = r"(?=[\d+(]|[A-Z]{2}\d|[0-9A-Fa-f]{1,4}:|[A-Za-z0-9._%+\-]{1,64}@)"
"""Where any alternative can start: checked first, it makes the scan about three times faster."""
_PATTERN = re.compile(_START + "(?:" + "|".join((_EMAIL, _IBAN, _SSN, _CARD, _IPV4, _IPV6, _PHONE)) + ")")
"""One pass over the text: alternatives in priority order (a card is tried before a phone at the same place)."""


@dataclass(frozen=True)
class Found:
    """One validated sensitive value in a text: ``text[start:end]`` is of ``kind`` (class ``cls``)."""

    start: int
    end: int
    kind: str
    """A key of :data:`DETECTED_KINDS`."""
    value: str

    @property
    def cls(self) -> str:
        return DETECTED_KINDS[self.kind]


def _digits(text: str) -> str:
    return "".join(ch for ch in text if ch.isdigit())


_DATE_LIKE = re.compile(r"\d{4}[-./]\d{1,2}[-./]\d{1,2}|\d{1,2}[-./]\d{1,2}[-./]\d{2,4}")
"""Dates look like phone numbers to a regex; they never are one."""


@functools.lru_cache(maxsize=VALIDATION_MEMO)
def _valid(kind: str, value: str, *, bare_phone: bool = False) -> bool:
    if kind == "email":
        from email_validator import EmailNotValidError, validate_email

        try:
            validate_email(value, check_deliverability=False)
        except EmailNotValidError:
            return False
        return True
    if kind == "iban":
        from stdnum import iban

        return iban.is_valid(value)
    if kind == "card":
        from stdnum import luhn

        digits = _digits(value)
        return CARD_MIN_DIGITS <= len(digits) <= 19 and len(set(digits)) > 1 and luhn.is_valid(digits)
    if kind == "national_id":
        from stdnum.us import ssn

        return ssn.is_valid(value)
    if kind in ("ipv4", "ipv6"):
        try:
            ipaddress.ip_address(value)
        except ValueError:
            return False
        return kind == "ipv6" or value.count(".") == 3
    if kind == "phone":
        import phonenumbers

        digits = _digits(value)
        if not PHONE_MIN_DIGITS <= len(digits) <= 15 or (not bare_phone and digits == value.lstrip("+")) or _DATE_LIKE.match(value):
            return False
        try:
            number = phonenumbers.parse(value, None if value.startswith("+") else DEFAULT_PHONE_REGION)
        except phonenumbers.NumberParseException:
            return False
        return phonenumbers.is_valid_number(number)
    return False


PHONE_MIN_DIGITS = 7
"""Fewest digits of a phone number (with its area code) that detection takes as one."""
CARD_MIN_DIGITS = 13
"""Fewest digits of a payment card number (ISO/IEC 7812)."""
_SEPARATOR = re.compile(r"[ \-.()]+")
"""What stands between digit groups: after a failed digit run, the next candidate starts past one."""
_GROUP_END = re.compile(r"\d(?=[ \-.]\d)")
"""Where a run of digit groups can be cut: after a digit followed by a separator and another digit."""


@functools.lru_cache(maxsize=VALIDATION_MEMO)
def _shorter(value: str) -> tuple[int, str] | None:
    """``(length, kind)`` of the longest card or phone at the start of ``value`` (a digit run that failed
    as a whole), or None.

    A printed row puts values side by side ("+44 20 7946 0958 4111 1111 1111 1111"): the pattern
    takes the whole run, which is neither; cut at group boundaries, longest first, the phone is found
    and the scan goes on after it (to the card). Memoised: printed output repeats its runs.
    """
    for cut in sorted((m.end() for m in _GROUP_END.finditer(value)), reverse=True):
        head = value[:cut]
        digits = sum(ch.isdigit() for ch in head)
        if digits < PHONE_MIN_DIGITS:
            break
        for kind in ("card", "phone") if digits >= CARD_MIN_DIGITS else ("phone",):
            if _valid(kind, head):
                return cut, kind
    return None


def find_sensitive(text: str) -> Iterator[Found]:
    """Each validated sensitive value in ``text``, left to right, never overlapping.

    A candidate that fails validation does not hide what starts inside it: a digit run is cut at
    its group boundaries (:func:`_shorter`), and otherwise the scan resumes one character later.
    """
    pos = 0
    while (match := _PATTERN.search(text, pos)) is not None:
        kind = match.lastgroup or ""
        value = match.group()
        if _valid(kind, value):
            yield Found(match.start(), match.end(), "ip" if kind in ("ipv4", "ipv6") else kind, value)
            pos = match.end()
            continue
        if kind in ("card", "phone") and (shorter := _shorter(value)) is not None:
            cut, short_kind = shorter
            yield Found(match.start(), match.start() + cut, short_kind, value[:cut])
            pos = match.start() + cut
            continue
        if kind in ("card", "phone"):  # no value starts inside a digit group (the look-behinds): skip to the next
            gap = _SEPARATOR.search(value)
            pos = match.start() + (gap.end() if gap else len(value))
        else:
            pos = match.start() + 1


def classify_cell(value: Any) -> str | None:
    """The kind of one cell's whole value (bare-digit phones included), or None."""
    if value is None or isinstance(value, (bool, float)):
        return None
    text = str(value).strip()
    if not text or len(text) > _CELL_MAX_CHARS:
        return None
    match = _PATTERN.fullmatch(text)
    if match is not None:
        kind = match.lastgroup or ""
        if _valid(kind, text):
            return "ip" if kind in ("ipv4", "ipv6") else kind
    if text.isdigit() or text.startswith("+"):
        if _valid("card", text):
            return "card"
        if _valid("phone", text, bare_phone=True):
            return "phone"
    return None


def classify_column(values: Iterable[Any]) -> str | None:
    """The kind most of a column's sampled values have (:data:`DETECT_MIN_SHARE`), or None.

    Reads at most :data:`DETECT_SAMPLE_VALUES` values; empty cells do not count.
    """
    counts: dict[str, int] = {}
    seen = 0
    for i, value in enumerate(values):
        if i >= DETECT_SAMPLE_VALUES:
            break
        if value is None or (isinstance(value, str) and not value.strip()) or value != value:  # NaN
            continue
        seen += 1
        kind = classify_cell(value)
        if kind is not None:
            counts[kind] = counts.get(kind, 0) + 1
    if not seen or not counts:
        return None
    kind, n = max(counts.items(), key=lambda item: item[1])
    return kind if n / seen >= DETECT_MIN_SHARE else None


def check_sensitivity_map(mapping: Any, where: str) -> dict[str, str]:
    """``{"table.column" or "column": class}`` checked; a ValueError names ``where`` and the bad entry."""
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise ValueError(f"{where}: sensitivity must be a mapping of column to class, got {type(mapping).__name__}")
    checked: dict[str, str] = {}
    for column, cls in mapping.items():
        if not isinstance(column, str) or not column.strip():
            raise ValueError(f"{where}: sensitivity column {column!r} must be a non-empty 'table.column' or 'column'")
        if cls not in SENSITIVITY_CLASSES:
            raise ValueError(f"{where}: sensitivity of {column!r} is {cls!r}; allowed: "
                             f"{', '.join(SENSITIVITY_CLASSES)}")
        checked[column.strip()] = cls
    return checked
