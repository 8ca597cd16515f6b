"""Sensitive values: which text is an e-mail, phone, card, IBAN, national id or IP address, and which class it has.

Contract:

* **Classes.** :data:`SENSITIVITY_CLASSES` — ``pii``, ``financial``,
  ``restricted``. Detection yields ``pii`` (e-mail, phone, national id, IP
  address) or ``financial`` (payment card, IBAN); ``restricted`` comes only
  from configuration.
* **Validated, not guessed.** A candidate found by a cheap regex is kept only
  when a validator accepts it: ``python-stdnum`` (Luhn for cards, IBAN check
  digits, US SSN rules), ``phonenumbers`` (a number valid in its region),
  ``email-validator`` (syntax only, no DNS) and :mod:`ipaddress`. Verdicts are
  memoised; an e-mail with a plain ASCII local part costs one validation per
  domain, and Luhn is computed in place (same verdicts as the libraries).
* **Free text: only where it is sure** (issue 36). Printed output, errors and
  documents are scanned by :func:`find_sensitive` with the strict rules: a phone
  in international form (``+`` and a valid country code) or in the national
  format of :data:`DEFAULT_PHONE_REGION` with its usual grouping (``(212)
  555-0134``, ``212-555-0134``, ``212.555.0134``; never digit runs split by a
  single space, never a local number without its area code); a card with a
  valid Luhn digit, 13-19 digits and a card's grouping (groups of four with one
  separator throughout, Amex 4-6-5, or 14-16 contiguous digits that start
  like a card brand of that length); an IBAN with its check digits; an SSN with its
  dashes. A digit run that is a whole number printed by Python or pandas (a
  count, sum, index, epoch timestamp, decimal) is never taken: recall belongs
  to classification at entry, whose values the masker tracks by value.
* **Cut values.** A value cut by pandas or a snapshot (followed by ``...`` or
  ``…``) is still recognised when what is left says what it was: an e-mail's
  local part and ``@``, an international phone with at least
  :data:`CUT_PHONE_MIN_DIGITS` digits, a card's first twelve or more digits
  in a card grouping (``Found.cut``).
* **Cells are classified as a whole.** :func:`classify_cell` (column
  classification at entry, not free text) also takes bare digit runs and
  space-grouped numbers that are a valid phone in the region.
* **Never crash on data.** Missing values of every kind (``None``, NaN,
  ``pd.NA``, ``NaT``) are skipped; containers, bytes and values whose ``str``
  fails are not one value and are never classified.
* **Bounded.** :func:`classify_column` reads at most :data:`DETECT_SAMPLE_VALUES`
  values; :func:`find_sensitive` is linear in the text (each regex is).
* **Only lines that can hold a value are scanned.** No value spans a line
  break, and each needs a mark cheap to find: an ``@`` (e-mails), a run of at
  least seven digits and separators (phones, cards, SSNs, IPv4), two letters and
  two digits (IBANs) or two colons around hex digits (IPv6) — :data:`_HINTS`.
  The full pattern runs on the lines holding one; the result is the same as a
  scan of the whole text (printed tables of counts and amounts are skipped).
  In ASCII text the digit-run and IBAN hints read its character classes
  (:data:`_ASCII_CLASSES`, one translation) and find the same lines.

Pure: no pandas, no IPython.
"""

from __future__ import annotations

import functools
import ipaddress
import numbers
import re
import string
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

__all__ = [
    "SENSITIVITY_CLASSES",
    "DETECTED_KINDS",
    "DETECT_SAMPLE_VALUES",
    "DETECT_MIN_SHARE",
    "DEFAULT_PHONE_REGION",
    "CUT_MARK",
    "Found",
    "is_missing",
    "cell_text",
    "find_sensitive",
    "classify_cell",
    "classify_column",
    "check_sensitivity_map",
    "clear_verdict_memos",
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
_CARD = r"(?P<card>(?<![\d\-])(?<!\d\.)\d(?:[ \-]?\d){12,18}(?![\d\-])(?!\.\d))"
_SSN = r"(?P<national_id>(?<![\d\-])\d{3}-\d{2}-\d{4}(?![\d\-]))"
_IPV4 = r"(?P<ipv4>(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.]))"
_IPV6 = r"(?P<ipv6>(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{1,4}:){2,7}:?[0-9A-Fa-f]{0,4}(?:::?[0-9A-Fa-f]{1,4})*(?![0-9A-Fa-f:]))"
_PHONE = (r"(?P<phone>(?<![\w+.\-])(?:\+\d{7,15}(?!\w)|(?:\+\d{1,3}[ \-.]?)?(?:\(\d{1,5}\)[ \-.]?|\d{1,5}[ \-.])(?:\d{1,6}[ \-.]){0,5}\d{2,8}(?!\w)(?![.\-]\d)))")
_START = r"(?=[\d+(]|[A-Z]{2}\d|[0-9A-Fa-f]{1,4}:|[A-Za-z0-9._%+\-]{1,64}@)"
"""Where any alternative can start: checked first, it makes the scan about three times faster."""
_PATTERN = re.compile(_START + "(?:" + "|".join((_EMAIL, _IBAN, _SSN, _CARD, _IPV4, _IPV6, _PHONE)) + ")")
"""One pass over the text: alternatives in priority order (a card is tried before a phone at the same place)."""
_LINE_PATTERNS = {
    (True, True): _PATTERN,
    (True, False): re.compile(r"(?=[\d+(]|[A-Z]{2}\d|[A-Za-z0-9._%+\-]{1,64}@)"
                              + "(?:" + "|".join((_EMAIL, _IBAN, _SSN, _CARD, _IPV4, _PHONE)) + ")"),
    (False, True): re.compile(r"(?=[\d+(]|[A-Z]{2}\d|[0-9A-Fa-f]{1,4}:)"
                              + "(?:" + "|".join((_IBAN, _SSN, _CARD, _IPV4, _IPV6, _PHONE)) + ")"),
    (False, False): re.compile(r"(?=[\d+(]|[A-Z]{2}\d)" + "(?:" + "|".join((_IBAN, _SSN, _CARD, _IPV4, _PHONE)) + ")"),
}
""":data:`_PATTERN` for a line by (it holds an ``@``, it holds a ``:``): without the alternatives that cannot match
there (an e-mail needs its ``@``, an IPv6 address its colons), in the same order; the e-mail look-ahead reads
every word of a line, so a line without ``@`` is scanned several times faster."""


@dataclass(frozen=True)
class Found:
    """One validated sensitive value in a text: ``text[start:end]`` is of ``kind`` (class ``cls``)."""

    start: int
    end: int
    kind: str
    """A key of :data:`DETECTED_KINDS`."""
    value: str
    cut: bool = False
    """The value was cut where the text goes on with ``...``/``…``: ``value`` is its start only."""

    @property
    def cls(self) -> str:
        return DETECTED_KINDS[self.kind]


_ASCII_NOT_DIGITS = str.maketrans("", "", "".join(chr(c) for c in range(128) if not chr(c).isdigit()))
"""Deletes every ASCII character but the digits (one C pass over an ASCII text)."""


def _digits(text: str) -> str:
    """The digits of ``text`` in order (``str.isdigit``'s digits: other scripts' too)."""
    if text.isascii():
        return text.translate(_ASCII_NOT_DIGITS)
    return "".join(ch for ch in text if ch.isdigit())


_DATE_LIKE = re.compile(r"\d{4}[-./]\d{1,2}[-./]\d{1,2}|\d{1,2}[-./]\d{1,2}[-./]\d{2,4}")
"""Dates look like phone numbers to a regex; they never are one."""
_NATIONAL_SHAPE = re.compile(r"\(\d{1,5}\) ?\d{1,6}(?:([\-.])\d{1,8}(?:\1\d{1,8})*)?|\d{1,5}([\-.])\d{1,6}(?:\2\d{1,8})*")
"""A national phone grouped as people write it: an area code in parentheses, or one ``-``/``.`` throughout
(never single spaces: ``3 100000`` is two numbers printed side by side)."""
_GROUPS = re.compile(r"\d+")
_CARD_BRANDS = (
    (("4",), (13, 16, 19)),  # Visa
    (tuple(str(n) for n in range(51, 56)) + tuple(str(n) for n in range(2221, 2721)), (16,)),  # Mastercard
    (("34", "37"), (15,)),  # American Express
    (("6011", "65") + tuple(str(n) for n in range(644, 650)), (16, 17, 18, 19)),  # Discover
    (tuple(str(n) for n in range(3528, 3590)), (16, 17, 18, 19)),  # JCB
    (("36", "38", "39") + tuple(str(n) for n in range(300, 306)), (14, 15, 16, 17, 18, 19)),  # Diners Club
    (("62",), (16, 17, 18, 19)),  # UnionPay
)
"""Issuer prefixes and lengths of the major card brands: an ungrouped digit run is a card only if it starts like
one of these at its length (an epoch timestamp in ms or ns starts with 1 and is never taken)."""
_CARD_GROUPINGS = ((4, 6, 5), (4, 6, 4))
"""Card groupings other than fours (American Express, Diners Club)."""
_CONTIGUOUS_CARD_LENGTHS = (14, 15, 16)
"""Lengths at which an ungrouped digit run in text can be a card: 13 and 19 digits are rare cards and common
sums, hashes and epoch nanoseconds (a column of them is still classified, and its values tracked)."""


def _card_grouping(value: str, digits: str) -> bool:
    """A card as cards are printed: contiguous with a brand's prefix and length, or groups of four (the last
    shorter) or 4-6-5 with one separator throughout."""
    separators = set(re.findall(r"[ \-]", value))
    if not separators:
        return len(digits) in _CONTIGUOUS_CARD_LENGTHS and any(
            len(digits) in lengths and digits.startswith(prefixes) for prefixes, lengths in _CARD_BRANDS)
    if len(separators) != 1:
        return False
    groups = tuple(len(g) for g in _GROUPS.findall(value))
    return groups in _CARD_GROUPINGS or (all(g == 4 for g in groups[:-1]) and 1 <= groups[-1] <= 4)


_TRUNK = re.compile(r"0\d")
"""A national number written with its trunk zero (``020 7946 0958``): a printed number never starts so."""


@functools.lru_cache(maxsize=None)
def _national_lengths(region: str) -> frozenset[int]:
    """Digit counts a national number of ``region`` can have as written: its possible lengths, and one more
    for a trunk or national prefix (``0`` in Europe, ``1`` in North America)."""
    import phonenumbers

    metadata = phonenumbers.PhoneMetadata.metadata_for_region(region)
    general = metadata.general_desc if metadata is not None else None
    lengths = set(general.possible_length) if general is not None else set(range(7, 16))
    return frozenset(lengths | {n + 1 for n in lengths})


def _phone(value: str, strict: bool) -> bool:
    """A valid phone number with its area code; ``strict`` (free text): international, or the national format's
    grouping of :data:`DEFAULT_PHONE_REGION` (see the module contract)."""
    import phonenumbers

    digits = _digits(value)
    if not PHONE_MIN_DIGITS <= len(digits) <= 15 or _DATE_LIKE.match(value):
        return False
    international = value.startswith("+")
    if strict and not international:  # cheap refusals before parsing: most candidates in printed output end here
        if len(digits) not in _national_lengths(DEFAULT_PHONE_REGION):
            return False
        if not _NATIONAL_SHAPE.fullmatch(value) and not _TRUNK.match(value):
            return False
    try:
        number = phonenumbers.parse(value, None if international else DEFAULT_PHONE_REGION)
    except phonenumbers.NumberParseException:
        return False
    if not phonenumbers.is_valid_number(number):
        return False
    if phonenumbers.is_possible_number_with_reason(number) == phonenumbers.ValidationResult.IS_POSSIBLE_LOCAL_ONLY:
        return False  # 310-0000: a local number without its area code is any count beside a small integer
    if not strict or international:
        return True
    national = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.NATIONAL)
    if value == national:  # the region's own format (020 7946 0958 in GB): trunk zero or parentheses
        return True
    same_groups = [len(g) for g in _GROUPS.findall(value)] == [len(g) for g in _GROUPS.findall(national)]
    return same_groups and _NATIONAL_SHAPE.fullmatch(value) is not None


@functools.lru_cache(maxsize=VALIDATION_MEMO)
def _valid(kind: str, value: str, *, strict: bool = True) -> bool:
    """Whether ``value`` is a ``kind``; ``strict`` for free text, else a cell checked as a whole."""
    if kind == "email":
        return _email_valid(value)
    if kind == "iban":
        from stdnum import iban

        return iban.is_valid(value)
    if kind == "card":
        digits = _digits(value)
        if not (CARD_MIN_DIGITS <= len(digits) <= 19 and len(set(digits)) > 1 and _luhn_valid(digits)):
            return False
        return not strict or _card_grouping(value, digits)
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
        return _phone(value, strict)
    return False


def _email_accepted(value: str) -> bool:
    """What ``email-validator`` says of ``value`` (syntax only, no DNS): the reference :func:`_email_valid` keeps."""
    from email_validator import EmailNotValidError, validate_email

    try:
        validate_email(value, check_deliverability=False)
    except EmailNotValidError:
        return False
    return True


EMAIL_MAX_CHARS = 254
"""Longest e-mail address (RFC 5321, as ``email-validator`` counts it: UTF-8 bytes, here ASCII characters)."""
_PLAIN_LOCAL = re.compile(r"[A-Za-z0-9_%+\-]+(?:\.[A-Za-z0-9_%+\-]+)*")
"""An ASCII local part in dot-atom form (no leading, trailing or doubled dot): every one is valid as it is."""


def _email_valid(value: str) -> bool:
    """:func:`_email_accepted`'s verdict on ``value``, the validator run once per domain: an address with a
    plain ASCII local part (:data:`_PLAIN_LOCAL`) is valid when its domain is, and it is within
    :data:`EMAIL_MAX_CHARS`; any other address is given to the validator whole. Printed output repeats a few
    domains over many addresses (``tests/test_masking_fast.py`` checks both agree on hostile addresses)."""
    local, at, domain = value.rpartition("@")
    if at and value.isascii() and _PLAIN_LOCAL.fullmatch(local):
        return len(value) <= EMAIL_MAX_CHARS and _email_domain_valid(domain)
    return _email_accepted(value)


@functools.lru_cache(maxsize=VALIDATION_MEMO)
def _email_domain_valid(domain: str) -> bool:
    """Whether ``email-validator`` accepts the domain ``domain`` (one short plain local part before it: the
    domain's checks do not read the local part, and no address of a domain too long for this one is valid)."""
    return _email_accepted("x@" + domain)


_LUHN_DOUBLED = str.maketrans("0123456789", "0246813579")
"""A digit -> the digit sum of its double (``7`` -> 14 -> ``5``): Luhn's doubled positions."""


def _luhn_valid(digits: str) -> bool:
    """The Luhn check of ``digits`` (as ``stdnum.luhn.is_valid``: False for an empty text or other than ASCII
    digits)."""
    if not digits or not digits.isascii() or not digits.isdigit():
        return False
    return (sum(map(int, digits[::-2])) + sum(map(int, digits[-2::-2].translate(_LUHN_DOUBLED)))) % 10 == 0


PHONE_MIN_DIGITS = 7
"""Fewest digits of a phone number (with its area code) that detection takes as one."""
CARD_MIN_DIGITS = 13
"""Fewest digits of a payment card number (ISO/IEC 7812)."""
CUT_PHONE_MIN_DIGITS = 6
"""Fewest digits (country code included) of a cut international phone taken as one: ``+44 20 79...``."""
CUT_CARD_MIN_DIGITS = 12
"""Fewest digits of a cut card taken as one: three groups of four say it is a card, fewer say little."""
CUT_WINDOW_CHARS = 200
"""Characters before a cut mark searched for a cut value: longer than any cell pandas or a snapshot cuts."""
_SEPARATOR = re.compile(r"[ \-.()]+")
"""What stands between digit groups: after a failed digit run, the next candidate starts past one."""
_GROUP_END = re.compile(r"\d(?=[ \-.]\d)")
"""Where a run of digit groups can be cut: after a digit followed by a separator and another digit."""
CUT_MARK = re.compile(r"\.\.\.|…")
"""What pandas (``...``), snapshots and summaries (``…``) put where they cut a text."""
_CUT = re.compile(
    r"(?:(?P<email>(?<![A-Za-z0-9._%+\-])[A-Za-z0-9_%+\-][A-Za-z0-9._%+\-]{0,63}@[A-Za-z0-9.\-]{0,253})"
    r"|(?P<phone>(?<![\w+])\+\d{1,3}(?:[ \-.]?\d{1,6}){1,5})"
    r"|(?P<card>(?<![\d\-.])(?:\d{4}(?P<sep>[ \-])\d{4}(?P=sep)\d{4}(?:(?P=sep)\d{1,4}){0,2}(?P=sep)?"
    r"|[2-6]\d{11,18})))\Z")
"""A value cut where the text ends (searched up to a cut mark): an e-mail's start up to or past its ``@``, an
international phone, a card's first groups."""


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


def _cut_valid(kind: str, value: str) -> bool:
    """Whether the start of a cut value still says it is a ``kind`` (see :data:`_CUT`)."""
    if kind == "phone":
        import phonenumbers

        digits = _digits(value)
        return len(digits) >= CUT_PHONE_MIN_DIGITS and any(
            digits[:n].isdigit() and int(digits[:n]) in phonenumbers.COUNTRY_CODE_TO_REGION_CODE for n in (1, 2, 3))
    if kind == "card":
        return len(_digits(value.rstrip(" -"))) >= CUT_CARD_MIN_DIGITS
    return "@" in value


def _cut_values(text: str) -> list[Found]:
    """Values cut by a mark in ``text`` (pandas ``...``, ``…``): each ends where its mark starts."""
    found: list[Found] = []
    for mark in CUT_MARK.finditer(text):
        end = mark.start()
        match = _CUT.search(text, max(0, end - CUT_WINDOW_CHARS), end)
        if match is None or (found and found[-1].end > match.start()):
            continue
        kind = match.lastgroup or ""
        value = match.group()
        if _cut_valid(kind, value):
            found.append(Found(match.start(), end, kind, value, cut=True))
    return found


_HINTS = (
    re.compile(r"@"),
    re.compile(r"\d[\d \-.()]{5,}\d"),
    re.compile(r"[A-Z]{2}\d\d"),
    re.compile(r":[0-9A-Fa-f]{0,4}:"),
)
"""What every value :func:`find_sensitive` can find holds, on its own line: an e-mail's ``@``; a phone (seven
digits or more), card, SSN or IPv4 address as a run of digits and separators at least seven characters long from
its first digit to its last; an IBAN's country and check digits; an IPv6 address's two colons. Each is a plain
scan (a literal or one character class first), several times cheaper than the full pattern."""


_ASCII_CLASSES = str.maketrans({**dict.fromkeys("0123456789", "0"), **dict.fromkeys(string.ascii_uppercase, "A"),
                                **dict.fromkeys(" -.()", "-")})
"""ASCII text -> the same text with each digit written ``0``, each capital ``A`` and each of a digit run's
separators ``-`` (one C pass): :data:`_HINTS` on it become a literal or one-character scans."""
_ASCII_HINTS = (
    (False, _HINTS[0]),
    (True, re.compile(r"0[0\-]{5,}0")),
    (True, re.compile(r"AA00")),
    (False, _HINTS[3]),
)
""":data:`_HINTS` for an ASCII text, in the same order, each with whether it reads the text mapped by
:data:`_ASCII_CLASSES`: the digit-run and IBAN hints find the same places there (``\\d`` and ``[A-Z]`` are the
ASCII digits and capitals) several times faster than their character classes on the text itself; the ``@`` and
IPv6 hints start with a literal and read the text as it is."""


def _hinted_lines(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each line of ``text`` (``end`` at its ``\\n`` or the end) holding one of :data:`_HINTS`,
    in order; a line without one holds no value :data:`_PATTERN` would validate."""
    size = len(text)
    lines: set[tuple[int, int]] = set()
    hints: Iterable[tuple[bool, re.Pattern[str]]] = ((False, hint) for hint in _HINTS)
    mapped = text
    if text.isascii():  # the same places, found on the text's classes (same length, same line breaks)
        hints, mapped = _ASCII_HINTS, text.translate(_ASCII_CLASSES)
    for on_classes, hint in hints:
        searched = mapped if on_classes else text
        pos = 0
        while (hit := hint.search(searched, pos)) is not None:
            start = text.rfind("\n", 0, hit.start()) + 1
            end = text.find("\n", hit.end())
            end = size if end < 0 else end
            lines.add((start, end))
            pos = end + 1
    return sorted(lines)


def find_sensitive(text: str) -> Iterator[Found]:
    """Each validated sensitive value in ``text``, left to right, never overlapping.

    Values cut by a mark come first (an e-mail cut after its domain's first dot still parses whole).
    A candidate that fails validation does not hide what starts inside it: a digit run is cut at
    its group boundaries (:func:`_shorter`), and otherwise the scan resumes one character later.
    Only the lines :func:`_hinted_lines` names are scanned (no match spans a line break).
    """
    return _scan(text, _hinted_lines(text))


def _scan(text: str, lines: Iterable[tuple[int, int]]) -> Iterator[Found]:
    """:func:`find_sensitive` over the ``(start, end)`` spans ``lines`` of ``text`` (in order, not overlapping);
    ``[(0, len(text))]`` scans the whole text, which gives the same values as the hinted lines."""
    cut = _cut_values(text) if "..." in text or "…" in text else []
    pos, at = 0, 0
    for line_start, line_end in lines:
        pos = max(pos, line_start)
        pattern = _LINE_PATTERNS[text.find("@", line_start, line_end) >= 0, text.find(":", line_start, line_end) >= 0]
        while (match := pattern.search(text, pos, line_end)) is not None:
            while at < len(cut) and cut[at].end <= match.start():
                yield cut[at]
                at += 1
            if at < len(cut) and cut[at].start < match.end():  # inside a cut value: it is the value
                pos = max(cut[at].end, match.start() + 1)
                continue
            kind = match.lastgroup or ""
            value = match.group()
            if _valid(kind, value):
                yield Found(match.start(), match.end(), "ip" if kind in ("ipv4", "ipv6") else kind, value)
                pos = match.end()
                continue
            if kind in ("card", "phone") and (shorter := _shorter(value)) is not None:
                end, short_kind = shorter
                yield Found(match.start(), match.start() + end, short_kind, value[:end])
                pos = match.start() + end
                continue
            if kind in ("card", "phone"):  # no value starts inside a digit group (look-behinds): skip to the next
                gap = _SEPARATOR.search(value)
                pos = match.start() + (gap.end() if gap else len(value))
            else:
                pos = match.start() + 1
    yield from cut[at:]


def clear_verdict_memos() -> None:
    """Forget every memoised verdict (validations, e-mail domains, digit runs cut short): the next values are
    checked as if never seen. For measuring a first pass; masking never needs it (verdicts do not change)."""
    for memo in (_valid, _email_domain_valid, _shorter):
        memo.cache_clear()


def is_missing(value: Any) -> bool:
    """Whether ``value`` is an empty cell: None, NaN, ``pd.NA``, ``NaT`` (never raises, whatever ``value`` is)."""
    if value is None:
        return True
    try:
        return bool(value != value)
    except Exception:  # pd.NA's truth is ambiguous; an array compares element-wise
        return type(value).__name__ in ("NAType", "NaTType")


def cell_text(value: Any) -> str | None:
    """The text of a cell that can be one sensitive value (a string or an integer), stripped; None otherwise.

    Containers, bytes, floats, booleans, dates and values whose ``str`` fails are not one value."""
    if isinstance(value, bool) or not isinstance(value, (str, numbers.Integral)):
        return None
    try:
        return str(value).strip()
    except Exception:  # an int subclass with a broken __str__
        return None


def classify_cell(value: Any) -> str | None:
    """The kind of one cell's whole value (bare-digit phones included), or None. Never raises on a value."""
    text = cell_text(value)
    if not text or len(text) > _CELL_MAX_CHARS:
        return None
    match = _PATTERN.fullmatch(text)
    if match is not None:
        kind = match.lastgroup or ""
        if _valid(kind, text, strict=False):
            return "ip" if kind in ("ipv4", "ipv6") else kind
    if _CELL_NUMBER.fullmatch(text):
        if _valid("card", text, strict=False):
            return "card"
        if _valid("phone", text, strict=False):
            return "phone"
    return None


_CELL_NUMBER = re.compile(r"\+?[\d ()\-.]+")
"""A cell that can be a card or phone written any way (checked as a whole, not found in text)."""


def classify_column(values: Iterable[Any]) -> str | None:
    """The kind most of a column's sampled values have (:data:`DETECT_MIN_SHARE`), or None.

    Reads at most :data:`DETECT_SAMPLE_VALUES` values; empty cells (None, NaN, ``pd.NA``, ``NaT``, blank)
    do not count. Stops as soon as the values left cannot change the verdict (a kind already holds more than
    half of every value that can still count, or no kind can reach the share any more): the same answer as
    reading them all. Never raises on a value.
    """
    counts: dict[str, int] = {}
    seen = 0
    for i, value in enumerate(values):
        if i >= DETECT_SAMPLE_VALUES:
            break
        if is_missing(value) or (isinstance(value, str) and not value.strip()):
            continue
        seen += 1
        kind = classify_cell(value)
        if kind is not None:
            counts[kind] = counts.get(kind, 0) + 1
        left = DETECT_SAMPLE_VALUES - i - 1
        best = max(counts.values(), default=0)
        if best * 2 > seen + left and DETECT_MIN_SHARE <= 0.5:  # more than half of all: the one kind at any end
            break
        if (best + left) < DETECT_MIN_SHARE * (seen + left):  # even all the rest of one kind would not do
            return None
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
