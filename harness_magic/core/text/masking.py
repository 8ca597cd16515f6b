"""Masking what the model sees: per sensitivity class ``allow``, ``mask`` (a stable pseudonym) or ``deny``.

Contract of :class:`Masker`:

* **Policy.** ``{class: action}`` over :data:`~.sensitivity.SENSITIVITY_CLASSES`;
  missing classes take :data:`DEFAULT_POLICY` (``pii`` and ``financial``
  masked, ``restricted`` denied). :func:`check_policy` names a bad class or action.
* **Stable pseudonyms.** ``mask`` replaces a value by a keyed hash (HMAC-SHA256
  with a per-masker random key) shaped like the original: an e-mail stays an
  e-mail, a card keeps its length, separators and last four digits, a phone its
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
* **Not covered.** Values encoded (base64, hex, reversed, split over several
  lines or chunks of a literal) are not recognised: the masker sees text, not
  intent.

Pure: imports neither pandas nor the agent.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from harness_magic.core.text.sensitivity import DETECTED_KINDS, SENSITIVITY_CLASSES, classify_cell, find_sensitive

__all__ = ["Masker", "Masked", "ColumnClass", "MASK_ACTIONS", "DEFAULT_POLICY", "KNOWN_VALUES_MAX",
           "KNOWN_VALUE_MIN_CHARS", "check_policy", "denied_text", "sensitivity_text"]

MASK_ACTIONS = ("allow", "mask", "deny")
DEFAULT_POLICY = {"pii": "mask", "financial": "mask", "restricted": "deny"}
"""Pseudonyms keep analysis possible for personal and financial data; restricted data is never sent."""
KNOWN_VALUES_MAX = 50_000
"""Known values of classified columns kept for masking: bounds memory and the matcher's size."""
KNOWN_VALUE_MIN_CHARS = 3
"""Shorter values are not tracked as known values: two letters or digits match everywhere and say nothing."""


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


class _Trie:
    """Known values -> one compiled alternation built as a prefix tree (fast for thousands of literals)."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self._regex: re.Pattern[str] | None = None

    def add(self, value: str, cls: str) -> bool:
        if value in self.values or len(self.values) >= KNOWN_VALUES_MAX:
            return False
        self.values[value] = cls
        self._regex = None
        return True

    def regex(self) -> re.Pattern[str] | None:
        if self._regex is None and self.values:
            root: dict[str, Any] = {}
            for value in self.values:
                node = root
                for ch in value:
                    node = node.setdefault(ch, {})
                node[""] = True
            self._regex = re.compile(r"(?<!\w)(?:" + _trie_pattern(root) + r")(?!\w)")
        return self._regex


def _trie_pattern(node: dict[str, Any]) -> str:
    branches = [re.escape(ch) + _trie_pattern(child) for ch, child in sorted(node.items()) if ch]
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    return f"(?:{body})?" if "" in node else body


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
        self._known = _Trie()
        self._kinds: dict[str, str | None] = {}
        """Known value -> its detected kind (memo): a known e-mail still gets an e-mail-shaped pseudonym."""
        self.columns: dict[str, dict[str, ColumnClass]] = {}
        """Handle -> column -> class, for the handles :meth:`learn_column` was told about (``%agent_vars``)."""

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

    def learn_column(self, handle: str, column: str, cls: ColumnClass, values: Iterable[Any]) -> None:
        """Record ``column`` of ``handle`` as ``cls`` and track its ``values`` as known sensitive values."""
        self.columns.setdefault(handle, {})[str(column)] = cls
        for value in values:
            if value is None or isinstance(value, bool) or value != value:
                continue
            text = str(value).strip()
            if len(text) >= KNOWN_VALUE_MIN_CHARS and not self._known.add(text, cls.cls):
                if len(self._known.values) >= KNOWN_VALUES_MAX:
                    break

    @property
    def known_values(self) -> int:
        return len(self._known.values)

    def pseudonym(self, kind: str, value: str) -> str:
        """The stable, format-shaped stand-in for ``value`` of ``kind`` (a detected kind, or a class)."""
        digest = hmac.new(self._key, f"{kind}\0{value}".encode(), hashlib.sha256).digest()
        stream = iter(digest * 4)
        if kind == "email":
            local, _, domain = value.rpartition("@")
            tld = domain.rsplit(".", 1)[-1]
            return f"user-{digest[:4].hex()}@{digest[4:7].hex()}.{tld}"
        if kind in ("card", "phone", "national_id"):
            digits = sum(ch.isdigit() for ch in value)
            keep = 4 if kind == "card" else 0  # a card's last four digits are what receipts show
            out, seen = [], 0
            for ch in value:
                if ch.isdigit():
                    seen += 1
                    if seen > digits - keep:
                        out.append(ch)
                    else:
                        out.append(str(next(stream) % 10))
                else:
                    out.append(ch)
            text = "".join(out)
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

    def mask_text(self, text: str) -> Masked:
        """``text`` with every sensitive value masked or denied by the policy, and the counts per class."""
        policy = self.policy
        if not text or not any(action != "allow" for action in policy.values()):
            return Masked(text)
        counts: dict[str, int] = {}
        spans: list[tuple[int, int, str]] = []
        regex = self._known.regex()
        if regex is not None:
            for match in regex.finditer(text):
                value = match.group()
                cls = self._known.values.get(value)
                if cls is None or policy[cls] == "allow":
                    continue
                if value not in self._kinds:
                    kind = classify_cell(value)
                    self._kinds[value] = kind if kind is not None and DETECTED_KINDS[kind] == cls else None
                spans.append((match.start(), match.end(),
                               self._replace(cls, self._kinds[value], value, policy, counts)))
        taken = _Spans(spans)
        for found in find_sensitive(text):
            if policy[found.cls] == "allow" or taken.overlaps(found.start, found.end):
                continue
            known = self._known.values.get(found.value)
            cls = known if known is not None and DETECTED_KINDS[found.kind] != known else found.cls
            spans.append((found.start, found.end, self._replace(cls, found.kind, found.value, policy, counts)))
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

    def _replace(self, cls: str, kind: str | None, value: str, policy: Mapping[str, str], counts: dict[str, int]
                 ) -> str:
        counts[cls] = counts.get(cls, 0) + 1
        if policy[cls] == "deny":
            return denied_text(cls)
        return self.pseudonym(kind or cls, value)

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
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            text = str(value)
            if text in self._known.values:
                return self.mask_value(text, counts)
        return value


class _Spans:
    """Sorted non-overlapping spans already replaced (a pattern match inside one is skipped)."""

    def __init__(self, spans: list[tuple[int, int, str]]) -> None:
        self._spans = sorted((s, e) for s, e, _ in spans)

    def overlaps(self, start: int, end: int) -> bool:
        import bisect

        i = bisect.bisect_right(self._spans, (start, float("inf")))
        if i and self._spans[i - 1][1] > start:
            return True
        return i < len(self._spans) and self._spans[i][0] < end
