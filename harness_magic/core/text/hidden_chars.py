"""Characters that make code run differently from how it reads, and the one policy for code handed to a notebook.

:func:`find_hidden` finds every character a reader cannot see for what it is:
bidirectional controls (U+202A–U+202E, U+2066–U+2069, U+200E/F, U+061C) that
reorder what is shown, zero-width and other format characters (U+200B–U+200D,
U+2060, U+FEFF, tags, ...), control characters other than newline and tab
(ESC sequences, ``\\r``, backspace, C1), line/paragraph separators, private-use,
surrogate and unassigned code points, spaces other than U+0020, and a short list
of letters and marks that render as nothing (Hangul fillers, variation selectors;
an emoji presentation selector right after a symbol, as in ``"⚠️"``, is not hidden).
It is what code hosts warn about as "hidden or bidirectional Unicode".

:func:`hand_over` is the policy that ``%agent_code`` and the "copy code" button
share: clean code passes unchanged (CRLF line ends become LF); code holding
hidden characters is refused, naming each by line, column, code point and name,
unless the caller asks for it ``escaped``: then each hidden character is written
as a visible Python escape (``\\u202e``) under a comment that lists them.

Pure: standard library only.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

__all__ = ["HiddenChar", "HandOver", "find_hidden", "is_hidden", "reveal", "describe", "hand_over",
           "report_lines", "MAX_FINDINGS_SHOWN"]

MAX_FINDINGS_SHOWN = 20
"""A report names this many hidden characters and counts the rest (code full of U+200B would flood the output)."""

_ALLOWED = frozenset("\n\t ")
"""Whitespace a reader sees for what it is."""
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp", "Zs"})
"""Controls, format characters, private use, unassigned, surrogates, separators, and spaces other than U+0020."""
_INVISIBLE_OTHERS = frozenset(
    [0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0x2800, 0x3164, 0xFFA0]
    + list(range(0xFE00, 0xFE10)) + list(range(0xE0100, 0xE01F0))
)
"""Letters and marks outside those categories that render as nothing: combining grapheme joiner, Hangul fillers
(valid in identifiers), Khmer inherent vowels, Mongolian and other variation selectors, Braille blank."""
_CONTROL_NAMES = {
    0x00: "NULL", 0x07: "BELL", 0x08: "BACKSPACE", 0x0B: "LINE TABULATION", 0x0C: "FORM FEED",
    0x0D: "CARRIAGE RETURN", 0x1B: "ESCAPE", 0x7F: "DELETE", 0x85: "NEXT LINE", 0x9B: "CONTROL SEQUENCE INTRODUCER",
    0x9D: "OPERATING SYSTEM COMMAND",
}
"""Names of the control characters that matter most here (``unicodedata.name`` has none for controls)."""


_PRESENTATION_SELECTORS = frozenset("\ufe0e\ufe0f")
"""Text/emoji presentation selectors: not hidden right after a symbol (``"⚠️"`` is written with U+FE0F)."""


def is_hidden(char: str, previous: str = "") -> bool:
    """Whether ``char`` (one character, after ``previous``) is one a reader cannot see for what it is."""
    if char in _ALLOWED:
        return False
    if char in _PRESENTATION_SELECTORS and previous and unicodedata.category(previous) == "So":
        return False
    return unicodedata.category(char) in _HIDDEN_CATEGORIES or ord(char) in _INVISIBLE_OTHERS


def describe(char: str) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE``: the code point and its name (controls get their usual name)."""
    point = ord(char)
    name = _CONTROL_NAMES.get(point) or unicodedata.name(char, "")
    if not name:
        name = {"Cc": "control character", "Co": "private-use character", "Cs": "surrogate",
                "Cn": "unassigned code point"}.get(unicodedata.category(char), "unnamed character")
    return f"U+{point:04X} {name}"


@dataclass(frozen=True)
class HiddenChar:
    """One hidden character in a text."""

    line: int
    """1-based line (lines end at ``\\n`` only, as the notebook cell counts them)."""
    column: int
    """1-based character position in the line."""
    char: str

    def __str__(self) -> str:
        return f"line {self.line}, column {self.column}: {describe(self.char)}"


def find_hidden(text: str) -> list[HiddenChar]:
    """Every hidden character in ``text``, in order."""
    found: list[HiddenChar] = []
    line, start = 1, 0
    for index, char in enumerate(text):
        if char == "\n":
            line, start = line + 1, index + 1
        elif is_hidden(char, text[index - 1] if index else ""):
            found.append(HiddenChar(line, index - start + 1, char))
    return found


def _escape(char: str) -> str:
    point = ord(char)
    if point <= 0xFF:
        return f"\\x{point:02x}"
    return f"\\u{point:04x}" if point <= 0xFFFF else f"\\U{point:08x}"


def reveal(text: str) -> str:
    """``text`` with each hidden character written as a visible Python escape (``\\x1b``, ``\\u202e``, ``\\U000e0041``).

    Inside a (non-raw) string literal the escape means the same character; anywhere else it is plainly visible text.
    """
    return "".join(_escape(c) if is_hidden(c, text[i - 1] if i else "") else c for i, c in enumerate(text))


def report_lines(findings: list[HiddenChar], line_offset: int = 0) -> list[str]:
    """One line per finding (``line 3, column 9: U+202E RIGHT-TO-LEFT OVERRIDE``), at most :data:`MAX_FINDINGS_SHOWN`
    and a count of the rest; ``line_offset`` is added to each line number."""
    lines = [str(HiddenChar(f.line + line_offset, f.column, f.char)) for f in findings[:MAX_FINDINGS_SHOWN]]
    if len(findings) > MAX_FINDINGS_SHOWN:
        lines.append(f"... and {len(findings) - MAX_FINDINGS_SHOWN} more")
    return lines


@dataclass(frozen=True)
class HandOver:
    """What the notebook may receive for a piece of code, and why."""

    text: str | None
    """The text to put into the notebook; None when it was refused."""
    findings: tuple[HiddenChar, ...] = ()
    """The hidden characters of the code (lines of the code as given, CRLF counted as one line end)."""

    @property
    def refused(self) -> bool:
        return self.text is None

    def report(self) -> str:
        """The findings, one per line (empty for clean code)."""
        return "\n".join(report_lines(list(self.findings)))


_ESCAPED_NOTE = ("# harness_magic: {n} hidden character{s} below {are} written as visible escapes; inside a string "
                 "literal an escape means the same character, anywhere else it no longer runs as it was:")


def hand_over(code: str, *, escaped: bool = False) -> HandOver:
    """The policy for code handed to the notebook (``%agent_code``, the "copy code" button).

    Clean code comes back unchanged except that CRLF line ends become LF. Code with
    hidden characters is refused (``text`` None, the findings say where and what)
    unless ``escaped``: then it comes back with each one written as a visible escape
    (:func:`reveal`) under comment lines naming each by where its escape starts in the returned text.
    """
    code = code.replace("\r\n", "\n")
    findings = find_hidden(code)
    if not findings:
        return HandOver(code)
    if not escaped:
        return HandOver(None, tuple(findings))
    n = len(findings)
    head = [_ESCAPED_NOTE.format(n=n, s="" if n == 1 else "s", are="is" if n == 1 else "are")]
    offset = len(head) + min(n, MAX_FINDINGS_SHOWN) + (1 if n > MAX_FINDINGS_SHOWN else 0)
    shown, shift, last_line = [], 0, 0  # where each escape starts in the returned text
    for finding in findings:
        shift = shift if finding.line == last_line else 0
        shown.append(HiddenChar(finding.line + offset, finding.column + shift, finding.char))
        shift, last_line = shift + len(_escape(finding.char)) - 1, finding.line
    head += [f"#   {line}" for line in report_lines(shown)]
    return HandOver("\n".join(head) + "\n" + reveal(code), tuple(findings))
