"""Classify SQL text as ``read``, ``write`` or ``destructive`` without a parser.

A small tokenizer drops comments (``--``, nested ``/* */``), string literals
(``'..'`` with ``''`` escapes, ``E'..'`` with backslash escapes, PostgreSQL
dollar quotes ``$tag$..$tag$``) and quoted identifiers (``".."``, `````..`````,
``[..]``), splits statements on top-level ``;`` and looks at keywords.

The rules fail closed: a statement is ``read`` only when it starts with a
known read keyword (SELECT, WITH, VALUES, TABLE, SHOW, EXPLAIN without
ANALYZE, DESCRIBE, ...) and contains no data-changing keyword anywhere
(a CTE wrapping INSERT/UPDATE/DELETE/MERGE, ``SELECT ... INTO``,
``FOR UPDATE``, ``EXPLAIN ANALYZE <write>``). Unknown statements are
``write``. DROP, TRUNCATE, DELETE/UPDATE without WHERE, GRANT/REVOKE and
ALTER ... DROP are ``destructive``. The most severe statement decides the
class of a multi-statement text.

Engines enforce more than this can (PostgreSQL queries also run in a
``READ ONLY`` transaction), so side-effecting functions in a SELECT are caught
there rather than here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Classification", "StatementInfo", "classify_sql", "split_statements", "SQLClassificationError"]

READ_KEYWORDS = frozenset({"SELECT", "WITH", "VALUES", "TABLE", "SHOW", "EXPLAIN", "DESCRIBE", "DESC", "SUMMARIZE",
                           "FROM"})
"""Statement starts that only read (DuckDB's ``FROM t`` and ``SUMMARIZE`` included)."""
WRITE_INSIDE = frozenset({"INSERT", "UPDATE", "DELETE", "MERGE", "TRUNCATE", "DROP", "CREATE", "ALTER", "COPY",
                          "GRANT", "REVOKE", "CALL", "ATTACH", "DETACH", "INSTALL", "LOAD", "EXPORT", "IMPORT"})
"""Keywords that make an otherwise read statement a write (data-modifying CTEs and the like)."""
DESTRUCTIVE_START = frozenset({"DROP", "TRUNCATE", "GRANT", "REVOKE", "DETACH"})
_SEVERITY = {"read": 0, "write": 1, "destructive": 2}


class SQLClassificationError(ValueError):
    """The text cannot be tokenized (unterminated string, comment or quote) or is empty."""


@dataclass(frozen=True)
class StatementInfo:
    keyword: str
    """First keyword, upper case (``WITH``, ``INSERT``, ...)."""
    kind: str
    """``read``, ``write`` or ``destructive``."""
    reason: str
    """Why, in a few words (``INSERT inside WITH``)."""


@dataclass(frozen=True)
class Classification:
    kind: str
    """Most severe class over all statements."""
    statements: tuple[StatementInfo, ...]

    @property
    def is_read(self) -> bool:
        return self.kind == "read"

    @property
    def summary(self) -> str:
        parts = [f"{s.keyword} ({s.kind}: {s.reason})" for s in self.statements]
        return f"{self.kind}: " + "; ".join(parts)


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


def _tokenize(sql: str) -> list[list[str]]:
    """Keyword/identifier/punctuation tokens per statement; literals and comments dropped."""
    statements: list[list[str]] = [[]]
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c.isspace():
            i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if sql.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif sql.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            if depth:
                raise SQLClassificationError("unterminated /* comment")
        elif c in "'\"`[":
            close = {"'": "'", '"': '"', "`": "`", "[": "]"}[c]
            backslash = c == "'" and i > 0 and sql[i - 1] in "eE" and (i < 2 or not sql[i - 2].isalnum())
            j = i + 1
            while True:
                if j >= n:
                    raise SQLClassificationError(f"unterminated {c}...{close} in SQL")
                if backslash and sql[j] == "\\":
                    j += 2
                    continue
                if sql[j] == close:
                    if j + 1 < n and sql[j + 1] == close and close != "]":
                        j += 2
                        continue
                    break
                j += 1
            statements[-1].append("<literal>" if c == "'" else "<ident>")
            i = j + 1
        elif c == "$" and _DOLLAR_TAG.match(sql, i):
            tag = _DOLLAR_TAG.match(sql, i).group(0)
            end = sql.find(tag, i + len(tag))
            if end < 0:
                raise SQLClassificationError(f"unterminated dollar quote {tag}")
            statements[-1].append("<literal>")
            i = end + len(tag)
        elif c == ";":
            statements.append([])
            i += 1
        else:
            match = _WORD.match(sql, i)
            if match:
                word = match.group(0)
                # E'..' string prefix: the quote handler sees the E before it.
                if word in ("E", "e") and i + 1 < n and sql[i + 1] == "'":
                    i += 1
                    continue
                statements[-1].append(word.upper())
                i = match.end()
            else:
                statements[-1].append(c)
                i += 1
    return [s for s in statements if s]


def split_statements(sql: str) -> int:
    """Number of non-empty statements in ``sql``."""
    return len(_tokenize(sql))


def _classify_tokens(tokens: list[str]) -> StatementInfo:
    first = tokens[0]
    words = set(tokens)
    if first == "EXPLAIN":
        rest = tokens[1:]
        if rest and rest[0] == "(":  # EXPLAIN (ANALYZE, ...) <stmt>
            close = rest.index(")") if ")" in rest else len(rest) - 1
            options, rest = rest[1:close], rest[close + 1:]
        else:
            options = []
            while rest and rest[0] in ("ANALYZE", "VERBOSE", "ANALYSE"):
                options.append(rest[0])
                rest = rest[1:]
        if ("ANALYZE" in options or "ANALYSE" in options) and rest:
            inner = _classify_tokens(rest)
            if inner.kind != "read":
                return StatementInfo("EXPLAIN", inner.kind, f"EXPLAIN ANALYZE runs {inner.keyword}")
        return StatementInfo("EXPLAIN", "read", "plan only")
    if first in READ_KEYWORDS:
        inside = sorted(words & WRITE_INSIDE)
        if inside:
            kind = "destructive" if set(inside) & DESTRUCTIVE_START else "write"
            return StatementInfo(first, kind, f"{inside[0]} inside {first}")
        if "INTO" in words and first in ("SELECT", "WITH"):
            return StatementInfo(first, "write", "SELECT ... INTO creates a table")
        for i, tok in enumerate(tokens[:-1]):
            if tok == "FOR" and tokens[i + 1] in ("UPDATE", "SHARE", "NO", "KEY"):
                return StatementInfo(first, "write", "row locks (FOR UPDATE/SHARE)")
        return StatementInfo(first, "read", "query")
    if first in DESTRUCTIVE_START:
        return StatementInfo(first, "destructive", f"{first} removes data or privileges")
    if first in ("DELETE", "UPDATE"):
        if "WHERE" not in words:
            return StatementInfo(first, "destructive", f"{first} without WHERE touches every row")
        return StatementInfo(first, "write", "changes rows")
    if first == "ALTER" and ("DROP" in words or "RENAME" in words):
        return StatementInfo(first, "destructive", "ALTER ... DROP/RENAME")
    return StatementInfo(first, "write", "changes the database or session" if first.isalpha() else "unknown")


def classify_sql(sql: str) -> Classification:
    """Classify every statement of ``sql``; raises :class:`SQLClassificationError` when empty or malformed."""
    if not isinstance(sql, str):
        raise SQLClassificationError(f"SQL must be a string, got {type(sql).__name__}")
    statements = _tokenize(sql)
    if not statements:
        raise SQLClassificationError("the SQL text holds no statement")
    infos = tuple(_classify_tokens(tokens) for tokens in statements)
    kind = max((s.kind for s in infos), key=_SEVERITY.__getitem__)
    return Classification(kind=kind, statements=infos)
