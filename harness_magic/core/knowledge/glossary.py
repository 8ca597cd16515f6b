"""Definitions and ownership: terms, metrics and tables from YAML, with their links.

File format (several files merge; a name defined twice is an error naming both)::

    owners:
      finance-data: {name: Finance Data team, contact: finance-data@acme.example}
    terms:
      net_revenue:
        kind: metric                      # metric | term | table | dimension
        definition: Revenue the company keeps after refunds and partner payouts.
        formula: gross_revenue - refunds - partner_share
        sql: SELECT sum(amount) - ... FROM finance.orders ...
        tables: [finance.orders, finance.refunds]
        columns: [finance.orders.amount]
        owners: [finance-data]
        synonyms: [net sales]
        see_also: [gross_revenue]
      customers.email: {kind: dimension, definition: Contact address., sensitivity: pii}   # masked for the model
    tables:                               # same fields; kind defaults to table
      finance.orders: {definition: One row per order line., owners: [finance-data]}

Ids: ``term:<name>`` for terms, metrics and tables; ``owner:<key>`` for owners.
:meth:`Glossary.lookup` finds a term by name or synonym (case, spaces,
hyphens and underscores do not matter), else by word overlap, and expands
along links: a metric brings its tables and owners; a table brings the
metrics defined on it and its owners.

YAML is read with ``yaml.safe_load`` (no object construction) after refusing
tags, anchors/aliases (their expansion is unbounded) and nesting deeper than
:data:`~harness_magic.core.text.safe_yaml.YAML_MAX_DEPTH`, from a regular file
(never a FIFO or device), up to ``GLOSSARY_MAX_BYTES``.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from harness_magic.core.confinement.safe_open import TooLarge, read_regular
from harness_magic.core.text.safe_yaml import PlainYAMLError, load_plain_yaml

__all__ = ["Glossary", "Term", "Owner", "GlossaryError", "load_glossary", "normalize_term", "GLOSSARY_MAX_BYTES",
           "WORKSPACE_SOURCE", "sensitive_columns"]

GLOSSARY_MAX_BYTES = 5 * 1024 * 1024
"""A glossary file larger than this is refused: definitions are text, not data."""
KINDS = ("metric", "term", "table", "dimension")
TERM_FIELDS = ("kind", "definition", "formula", "sql", "tables", "columns", "owners", "synonyms", "see_also",
               "sensitivity")
OWNER_FIELDS = ("name", "contact", "team", "slack", "notes")
SUGGESTIONS = 3
"""Near matches listed when a lookup finds no exact term."""
WORKSPACE_SOURCE = "workspace memory"
"""The source of terms the user approved into workspace memory (:mod:`.workspace_memory`), not a YAML file."""

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}")
_WORD_RE = re.compile(r"[a-z0-9]+")


class GlossaryError(ValueError):
    """A glossary file is malformed (the message names the file, entry and field)."""


def normalize_term(text: str) -> str:
    """Case-, space-, hyphen- and underscore-insensitive key: ``"Net Revenue"`` -> ``"net_revenue"``."""
    return "_".join(_WORD_RE.findall(str(text).lower()))


@dataclass(frozen=True)
class Owner:
    key: str
    name: str = ""
    contact: str = ""
    team: str = ""
    slack: str = ""
    notes: str = ""

    @property
    def source_id(self) -> str:
        return f"owner:{self.key}"

    def line(self) -> str:
        bits = [self.name or self.key]
        if self.team:
            bits.append(f"team {self.team}")
        if self.contact:
            bits.append(self.contact)
        if self.slack:
            bits.append(self.slack)
        return f"[{self.source_id}] " + ", ".join(bits)


@dataclass(frozen=True)
class Term:
    name: str
    kind: str
    source: str
    """The YAML file it came from, or :data:`WORKSPACE_SOURCE`."""
    definition: str = ""
    formula: str = ""
    sql: str = ""
    tables: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    owners: tuple[str, ...] = ()
    synonyms: tuple[str, ...] = ()
    see_also: tuple[str, ...] = ()
    sensitivity: str = ""
    """``pii``, ``financial`` or ``restricted`` for its ``columns`` (or, with none, the entry's own name); "" none."""

    @property
    def source_id(self) -> str:
        return f"term:{self.name}"

    def formula_components(self) -> list[str]:
        """Identifiers in the formula (``gross_revenue - refunds`` -> ``["gross_revenue", "refunds"]``)."""
        names = re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", self.formula)
        return [n for n in dict.fromkeys(names) if n.lower() not in {"sum", "count", "avg", "min", "max", "distinct"}]

    def text(self) -> str:
        """The entry as the model reads it."""
        lines = [f"[{self.source_id}] {self.name} ({self.kind})"]
        if self.source == WORKSPACE_SOURCE:
            lines.append(f"Source: {WORKSPACE_SOURCE} (a definition the user approved)")
        if self.definition:
            lines.append(f"Definition: {self.definition}")
        if self.formula:
            lines.append(f"Formula: {self.formula}")
        if self.sql:
            lines.append("SQL: " + " ".join(self.sql.split()))
        for label, values in (("Tables", self.tables), ("Columns", self.columns), ("Synonyms", self.synonyms),
                              ("See also", self.see_also)):
            if values:
                lines.append(f"{label}: {', '.join(values)}")
        return "\n".join(lines)


@dataclass
class Glossary:
    terms: dict[str, Term] = field(default_factory=dict)
    owners: dict[str, Owner] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    digest: str = ""

    def _keys(self) -> dict[str, str]:
        keys: dict[str, str] = {}
        for term in self.terms.values():
            keys.setdefault(normalize_term(term.name), term.name)
        for term in self.terms.values():
            for synonym in term.synonyms:
                keys.setdefault(normalize_term(synonym), term.name)
        return keys

    def find(self, text: str) -> Term | None:
        """The term named ``text`` or having it as a synonym (ids ``term:x`` and ``[term:x]`` accepted)."""
        raw = str(text).strip().strip("[]")
        if raw.startswith("term:"):
            raw = raw[5:]
        if raw in self.terms:
            return self.terms[raw]
        name = self._keys().get(normalize_term(raw))
        return self.terms.get(name) if name else None

    def suggest(self, text: str, n: int = SUGGESTIONS) -> list[Term]:
        """Terms sharing the most words with ``text`` (name and synonyms count double)."""
        words = set(_WORD_RE.findall(str(text).lower()))
        if not words:
            return []
        scored = []
        for term in self.terms.values():
            head = set(_WORD_RE.findall(" ".join((term.name, *term.synonyms)).lower()))
            body = set(_WORD_RE.findall(term.definition.lower()))
            score = 2 * len(words & head) + len(words & body)
            if score:
                scored.append((-score, term.name))
        return [self.terms[name] for _, name in sorted(scored)[:n]]

    def related(self, term: Term) -> tuple[list[Term], list[Owner]]:
        """(linked terms, owners): a metric's tables and see-also; a table's metrics; everyone's owners."""
        linked: list[Term] = []
        for name in (*term.tables, *term.see_also):
            other = self.terms.get(name)
            if other is not None and other not in linked:
                linked.append(other)
        if term.kind == "table":
            for other in self.terms.values():
                if term.name in other.tables and other not in linked:
                    linked.append(other)
        owners = [self.owners[k] for k in term.owners if k in self.owners]
        return linked, owners

    def lookup_text(self, text: str) -> tuple[str, list[tuple[str, str]]]:
        """(model-facing text, [(source id, snippet)] retrieved) for a lookup of ``text``."""
        term = self.find(text)
        if term is None:
            near = self.suggest(text)
            if not near:
                raise LookupError(f"No glossary term matches {text!r}. Terms: "
                                  + ", ".join(sorted(self.terms)[:30]) + ("..." if len(self.terms) > 30 else ""))
            lines = [f"No term named {text!r}; closest matches:"]
            sources = []
            for other in near:
                lines.append(f"- [{other.source_id}] {other.name} ({other.kind}): {other.definition}")
                sources.append((other.source_id, other.definition))
            lines.append("Call glossary lookup again with one of these names for the full entry.")
            return "\n".join(lines), sources
        linked, owners = self.related(term)
        lines = [term.text()]
        sources = [(term.source_id, term.text())]
        if owners:
            lines.append("Owners: " + "; ".join(o.line() for o in owners))
            sources.extend((o.source_id, o.line()) for o in owners)
        missing = [k for k in term.owners if k not in self.owners]
        if missing:
            lines.append("Owners (no contact listed): " + ", ".join(missing))
        if linked:
            lines.append("Linked:")
            for other in linked:
                relation = ("metric on this table" if term.kind == "table" and term.name in other.tables
                            else other.kind)
                detail = other.definition or other.formula
                lines.append(f"- [{other.source_id}] {other.name} ({relation}): {detail}")
                other_owners = [self.owners[k].line() for k in other.owners if k in self.owners]
                if other_owners and other.kind == "table":
                    lines.append(f"  owners: {'; '.join(other_owners)}")
                sources.append((other.source_id, other.text()))
        return "\n".join(lines), sources


# --------------------------------------------------------------------------- loading


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
        return tuple(str(v) for v in value)
    raise GlossaryError(f"{where} must be a string or a list of strings, got {type(value).__name__}")


def _text(value: Any, where: str) -> str:
    if value is None:
        return ""
    if isinstance(value, (str, int, float)):
        return str(value).strip()
    raise GlossaryError(f"{where} must be text, got {type(value).__name__}")


def _read_yaml(path: Path) -> Any:
    where = str(path)
    try:  # a regular file only (a FIFO in its place would hang the session), at most GLOSSARY_MAX_BYTES
        data = read_regular(path, GLOSSARY_MAX_BYTES, follow_links=True)
    except TooLarge:
        raise GlossaryError(f"glossary file {where!r} is over {GLOSSARY_MAX_BYTES} bytes, the limit") from None
    except OSError as exc:
        raise GlossaryError(f"glossary file {where!r} cannot be read: {exc.strerror or exc}") from None
    try:
        return load_plain_yaml(data), hashlib.sha256(data).hexdigest()
    except PlainYAMLError as exc:
        if exc.reason in ("anchor", "alias"):
            raise GlossaryError(f"glossary file {where!r} uses YAML anchors/aliases; write entries out ({exc})") \
                from None
        raise GlossaryError(f"glossary file {where!r} is not valid YAML: {exc}") from None


def load_glossary(files: Sequence[str | os.PathLike]) -> Glossary:
    """Parse and merge glossary YAML files; GlossaryError names the file, entry and field at fault."""
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    if not files:
        raise GlossaryError("the glossary connector needs at least one YAML file")
    glossary = Glossary()
    defined_in: dict[str, str] = {}
    digests = []
    for raw in files:
        path = Path(raw)
        data, digest = _read_yaml(path)
        digests.append(digest)
        glossary.files.append(str(path))
        if data is None:
            continue
        if not isinstance(data, dict):
            raise GlossaryError(f"{path}: the top level must be a mapping with terms/tables/owners")
        unknown = set(map(str, data)) - {"terms", "tables", "owners"}
        if unknown:
            raise GlossaryError(f"{path}: unknown sections {sorted(unknown)}; allowed: terms, tables, owners")
        for key, entry in (data.get("owners") or {}).items():
            where = f"{path}: owner {key!r}"
            if not _NAME_RE.fullmatch(str(key)):
                raise GlossaryError(f"{where}: names are letters, digits, '_', '.', '-' (at most 100)")
            entry = entry or {}
            if isinstance(entry, str):
                entry = {"name": entry}
            if not isinstance(entry, dict):
                raise GlossaryError(f"{where} must be a mapping")
            bad = set(map(str, entry)) - set(OWNER_FIELDS)
            if bad:
                raise GlossaryError(f"{where}: unknown fields {sorted(bad)}; allowed: {', '.join(OWNER_FIELDS)}")
            if f"owner:{key}" in defined_in:
                raise GlossaryError(f"{where} is also defined in {defined_in[f'owner:{key}']}")
            defined_in[f"owner:{key}"] = str(path)
            glossary.owners[str(key)] = Owner(str(key), **{f: _text(entry.get(f), f"{where}.{f}")
                                                            for f in OWNER_FIELDS})
        for section, default_kind in (("terms", "term"), ("tables", "table")):
            entries = data.get(section) or {}
            if not isinstance(entries, dict):
                raise GlossaryError(f"{path}: {section} must be a mapping of name -> entry")
            for name, entry in entries.items():
                name = str(name)
                where = f"{path}: {section[:-1]} {name!r}"
                if not _NAME_RE.fullmatch(name):
                    raise GlossaryError(f"{where}: names are letters, digits, '_', '.', '-' (at most 100)")
                if not isinstance(entry, dict):
                    raise GlossaryError(f"{where} must be a mapping of fields ({', '.join(TERM_FIELDS)})")
                bad = set(map(str, entry)) - set(TERM_FIELDS)
                if bad:
                    raise GlossaryError(f"{where}: unknown fields {sorted(bad)}; allowed: {', '.join(TERM_FIELDS)}")
                kind = _text(entry.get("kind"), f"{where}.kind") or default_kind
                if kind not in KINDS:
                    raise GlossaryError(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
                if f"term:{name}" in defined_in:
                    raise GlossaryError(f"{where} is also defined in {defined_in[f'term:{name}']}")
                defined_in[f"term:{name}"] = str(path)
                glossary.terms[name] = Term(
                    name=name, kind=kind, source=str(path),
                    definition=_text(entry.get("definition"), f"{where}.definition"),
                    formula=_text(entry.get("formula"), f"{where}.formula"),
                    sql=_text(entry.get("sql"), f"{where}.sql"),
                    sensitivity=_sensitivity(entry.get("sensitivity"), f"{where}.sensitivity"),
                    **{f: _strings(entry.get(f), f"{where}.{f}")
                       for f in ("tables", "columns", "owners", "synonyms", "see_also")})
    glossary.digest = hashlib.sha256("".join(digests).encode()).hexdigest()
    return glossary


def _sensitivity(value: Any, where: str) -> str:
    from harness_magic.core.text.sensitivity import SENSITIVITY_CLASSES

    if value is None or value == "":
        return ""
    if value not in SENSITIVITY_CLASSES:
        raise GlossaryError(f"{where}: {value!r} is not one of {', '.join(SENSITIVITY_CLASSES)}")
    return str(value)


def sensitive_columns(glossary: Glossary) -> dict[str, str]:
    """``{"table.column": class}`` from entries with a ``sensitivity`` (their ``columns``, else their own name)."""
    out: dict[str, str] = {}
    for term in glossary.terms.values():
        if term.sensitivity:
            for column in term.columns or (term.name,):
                out[column] = term.sensitivity
    return out
