"""Reading a dbt project's artifacts: ``manifest.json`` (and ``catalog.json``) into a :class:`DbtProject`.

Reading never runs dbt: it reads the JSON files dbt wrote (``dbt build`` / ``dbt docs generate``).

Bounded and strict, since a manifest is input from outside:

* each file is opened as a regular file only (a FIFO, device or directory is refused, so nothing can hang the
  session), never through a symbolic link in its last component, and read up to ``max_bytes``
  (:data:`MANIFEST_MAX_BYTES` by default; only ``max_bytes + 1`` bytes are ever read);
* nesting deeper than :data:`JSON_MAX_DEPTH` is refused: the C JSON parser stops at the interpreter's recursion
  limit with an error (never a crash), and the parsed value's depth is then measured without recursion;
* at most :data:`MAX_ENTRIES` entries and :data:`MAX_COLUMNS` columns per entry are kept, each text is one
  line of at most :data:`TEXT_MAX_CHARS`, and an entry whose id is not a plain dbt id is left out (counted in
  :attr:`DbtProject.skipped`).

Descriptions are data written by whoever edits the project: they reach the model as quoted text on one line,
and a citation-shaped ``[...]`` inside them is turned into ``(...)``, so a description can neither start a line
that looks like another entry nor cite a source the run did not retrieve.

Every failure is a :class:`DbtError` naming the file and what is wrong with it.
"""

from __future__ import annotations

import errno
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness_magic.core.confinement.safe_open import LinkRefused, NotRegularFile, TooLarge, read_regular

__all__ = ["DbtError", "DbtProject", "Entry", "Column", "load_project", "project_paths", "MANIFEST_MAX_BYTES",
           "JSON_MAX_DEPTH", "MAX_ENTRIES", "MAX_COLUMNS", "TEXT_MAX_CHARS", "KINDS", "clean_text"]

MANIFEST_MAX_BYTES = 64 * 1024 * 1024
"""A manifest or catalog larger than this is refused (a large project's manifest is tens of MB)."""
JSON_MAX_DEPTH = 64
"""Deepest ``[``/``{`` nesting accepted; dbt's own artifacts nest about a dozen levels."""
MAX_ENTRIES = 50_000
"""Models, sources, seeds, snapshots, metrics, semantic models and exposures kept from one manifest."""
MAX_COLUMNS = 2_000
"""Columns kept per entry."""
TEXT_MAX_CHARS = 2_000
"""Longest description, definition or SQL filter kept (one line; longer is cut with an ellipsis)."""
SQL_MAX_CHARS = 200_000
"""Longest compiled SQL kept for lineage and ``model_sql`` (longer: treated as absent)."""
KINDS = ("model", "source", "seed", "snapshot", "metric", "semantic_model", "exposure")
"""The entry kinds served, in the order lookups list them."""
RELATION_KINDS = ("model", "source", "seed", "snapshot")
"""Kinds that are tables or views in the warehouse."""
_RELATION_PRIORITY = {"model": 0, "snapshot": 1, "source": 2, "seed": 3}
"""Which entry a relation maps back to when several name it (a source over the seed it reads)."""

_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,299}")
_CITATION_SHAPE = re.compile(r"\[([^\[\]\n]{0,300})\]")


class DbtError(ValueError):
    """A dbt artifact cannot be used (the message names the file and the reason)."""


def clean_text(value: Any, limit: int = TEXT_MAX_CHARS) -> str:
    """``value`` as one line of data text: whitespace collapsed, ``[x]`` made ``(x)``, cut at ``limit``."""
    if value is None or isinstance(value, (dict, list)):
        return ""
    text = " ".join(str(value).split())
    if "[" in text:
        text = _CITATION_SHAPE.sub(lambda m: f"({m.group(1)})", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Column:
    """One column of a model, source, seed or snapshot."""

    name: str
    description: str = ""
    data_type: str = ""
    tests: tuple[str, ...] = ()
    """Data tests on the column, e.g. ``unique``, ``accepted_values(values=['a', 'b'])``."""


@dataclass
class Entry:
    """One model, source, seed, snapshot, metric, semantic model or exposure."""

    uid: str
    """dbt's unique id (``model.shop.orders``); the citation id is ``dbt:<uid>``."""
    kind: str
    name: str
    label: str = ""
    description: str = ""
    owner: str = ""
    """``meta.owner`` (or an exposure's owner), as text."""
    path: str = ""
    """The project file that defines it."""
    relation: tuple[str, str, str] | None = None
    """(database, schema, identifier) of a relation kind."""
    relation_name: str = ""
    """The relation as compiled SQL names it (``"shop"."main"."orders"``)."""
    materialized: str = ""
    compiled_sql: str = ""
    columns: dict[str, Column] = field(default_factory=dict)
    tests: tuple[str, ...] = ()
    """Data tests on the whole entry (not on one column)."""
    details: list[str] = field(default_factory=list)
    """Lines specific to its kind: a metric's definition, a semantic model's measures, an exposure's URL."""
    parents: tuple[str, ...] = ()
    """Entry ids it depends on (``depends_on.nodes``, tests left out)."""
    definition_inputs: tuple[str, ...] = ()
    """A derived or ratio metric's input metrics (names), for the answer check."""
    measures: dict[str, tuple[str, str]] = field(default_factory=dict)
    """A semantic model's measures: name -> (agg, expr)."""
    input_measures: tuple[str, ...] = ()
    """A metric's measures (names)."""

    @property
    def source_id(self) -> str:
        return f"dbt:{self.uid}"

    @property
    def display(self) -> str:
        """``orders`` (a source: ``shop_raw.raw_orders``)."""
        return self.name


@dataclass
class DbtProject:
    """The entries of a manifest, their children, and what was left out."""

    entries: dict[str, Entry] = field(default_factory=dict)
    children: dict[str, list[str]] = field(default_factory=dict)
    project_name: str = ""
    dbt_version: str = ""
    adapter_type: str = ""
    skipped: int = 0
    """Entries left out (an id that is not a plain dbt id, or past :data:`MAX_ENTRIES`)."""
    has_catalog: bool = False
    by_relation: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """(database, schema, identifier), lower-cased -> entry id."""

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for entry in self.entries.values():
            out[entry.kind] = out.get(entry.kind, 0) + 1
        return out

    def summary(self) -> str:
        """``shop (dbt 1.11.16, duckdb): 5 models, 2 sources, 3 metrics...``."""
        counts = self.counts()
        parts = [f"{counts[k]} {k.replace('_', ' ')}{'s' if counts[k] != 1 else ''}" for k in KINDS if k in counts]
        left = f"; {self.skipped} entries left out" if self.skipped else ""
        return (f"{self.project_name or 'dbt project'} (dbt {self.dbt_version or '?'}, "
                f"{self.adapter_type or '?'}): {', '.join(parts) or 'no entries'}{left}")


# --------------------------------------------------------------------------- reading


def project_paths(project: str | os.PathLike[str] | None, manifest: str | os.PathLike[str] | None,
                  catalog: str | os.PathLike[str] | None) -> tuple[Path, Path | None]:
    """(manifest path, catalog path or None) from a project directory or explicit paths; DbtError when the
    configuration names neither or both."""
    if (project is None) == (manifest is None):
        raise DbtError("a dbt connector needs either 'project' (a dbt project directory holding target/manifest.json) "
                       "or 'manifest' (a manifest.json path, with an optional 'catalog'), not "
                       + ("both" if project is not None else "neither"))
    if project is not None:
        if catalog is not None:
            raise DbtError("'catalog' goes with 'manifest'; with 'project' it is read from target/catalog.json")
        if not isinstance(project, (str, os.PathLike)):
            raise DbtError(f"'project' must be a directory path, got {type(project).__name__}")
        target = Path(project).expanduser() / "target"
        found_catalog = target / "catalog.json"
        return target / "manifest.json", found_catalog if os.path.lexists(found_catalog) else None
    for key, value in (("manifest", manifest), ("catalog", catalog)):
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise DbtError(f"'{key}' must be a file path, got {type(value).__name__}")
    return Path(manifest).expanduser(), Path(catalog).expanduser() if catalog is not None else None  # type: ignore[arg-type]  # manifest is not None here (checked above)


def _depth(value: Any) -> int:
    """The deepest list/object nesting of a parsed JSON value, without recursion (stops past the limit)."""
    if not isinstance(value, (dict, list)):
        return 0
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > JSON_MAX_DEPTH:
            return depth
        stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)
                     if isinstance(child, (dict, list)))
    return deepest


def read_json(path: Path, what: str, max_bytes: int) -> dict[str, Any]:
    """The JSON object in ``path`` (bounded as the module says); DbtError naming ``what`` and the reason."""
    where = f"dbt {what} {str(path)!r}"
    try:
        raw = read_regular(path, max_bytes)
    except TooLarge:
        raise DbtError(f"{where} is over {max_bytes:,} bytes, the limit (option max_bytes)") from None
    except LinkRefused:
        raise DbtError(f"{where} is a symbolic link; name the file itself") from None
    except NotRegularFile as exc:
        raise DbtError(f"{where} is {exc.strerror}; dbt writes its artifacts as regular files") from None
    except FileNotFoundError:
        hint = " (run `dbt build` or `dbt docs generate` in the project first)" if what == "manifest" else ""
        raise DbtError(f"{where} does not exist{hint}") from None
    except OSError as exc:
        raise DbtError(f"{where} cannot be read: {exc.strerror or errno.errorcode.get(exc.errno or 0, exc)}") from None
    try:  # the C parser stops at the interpreter's recursion limit with RecursionError, never a crash
        data = json.loads(raw)
    except RecursionError:
        raise DbtError(f"{where} nests deeper than the JSON parser reads; at most {JSON_MAX_DEPTH} levels "
                       "are read") from None
    except ValueError as exc:
        raise DbtError(f"{where} is not valid JSON: {str(exc)[:200]}") from None
    depth = _depth(data)
    if depth > JSON_MAX_DEPTH:
        raise DbtError(f"{where} nests more than {JSON_MAX_DEPTH} levels deep, the limit")
    if not isinstance(data, dict):
        raise DbtError(f"{where} holds a JSON {type(data).__name__}, not a dbt artifact object")
    return data


# --------------------------------------------------------------------------- parsing


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _owner(raw: dict[str, Any]) -> str:
    meta = {**_mapping(_mapping(raw.get("config")).get("meta")), **_mapping(raw.get("meta"))}
    owner = meta.get("owner")
    if isinstance(owner, list):
        return clean_text(", ".join(str(o) for o in owner if isinstance(o, (str, int))), 200)
    if owner is not None and not isinstance(owner, dict):
        return clean_text(owner, 200)
    exposure_owner = _mapping(raw.get("owner"))
    bits = [clean_text(exposure_owner.get(k), 200) for k in ("name", "email")]
    return ", ".join(b for b in bits if b)


def _test_text(test: dict[str, Any]) -> str:
    metadata = _mapping(test.get("test_metadata"))
    name = clean_text(metadata.get("name"), 80) or clean_text(test.get("name"), 80)
    kwargs = {k: v for k, v in _mapping(metadata.get("kwargs")).items() if k not in ("model", "column_name")}
    if not kwargs:
        return name
    args = ", ".join(f"{clean_text(k, 40)}={clean_text(json.dumps(v, default=str), 200)}"
                     for k, v in list(kwargs.items())[:6])
    return f"{name}({args})"


def _metric_details(raw: dict[str, Any], semantic_of_measure: dict[str, str],
                    entries: dict[str, Entry]) -> tuple[list[str], tuple[str, ...], tuple[str, ...]]:
    """(definition lines, input metric names, input measure names) of a metric."""
    params = _mapping(raw.get("type_params"))
    kind = clean_text(raw.get("type"), 40) or "metric"
    lines: list[str] = []
    inputs: tuple[str, ...] = ()
    measures = tuple(clean_text(_mapping(m).get("name"), 100) for m in _list(params.get("input_measures")))
    if kind == "simple" or params.get("measure"):
        measure = clean_text(_mapping(params.get("measure")).get("name"), 100)
        where = semantic_of_measure.get(measure, "")
        model = entries.get(where)
        agg, expr = model.measures.get(measure, ("", "")) if model is not None else ("", "")
        how = f"{agg}({expr})" if agg else measure
        lines.append(f"Definition: {how}, measure {measure}"
                     + (f" of semantic model {model.name} [{model.source_id}]" if model is not None else ""))
    if kind == "derived" or params.get("expr"):
        inputs = tuple(clean_text(_mapping(m).get("name"), 100) for m in _list(params.get("metrics")))
        lines.append(f"Definition: {clean_text(params.get('expr'), 500)}"
                     + (f" (from metrics {', '.join(inputs)})" if inputs else ""))
    if kind == "ratio":
        numerator = clean_text(_mapping(params.get("numerator")).get("name"), 100)
        denominator = clean_text(_mapping(params.get("denominator")).get("name"), 100)
        inputs = (numerator, denominator)
        lines.append(f"Definition: {numerator} / {denominator} (ratio)")
    if kind in ("cumulative", "conversion") and not lines:
        detail = params.get("cumulative_type_params") or params.get("conversion_type_params")
        lines.append(f"Definition: {kind} metric, {clean_text(json.dumps(detail, default=str), 500)}")
    filters = [clean_text(_mapping(f).get("where_sql_template"), 500)
               for f in _list(_mapping(raw.get("filter")).get("where_filters"))]
    if any(filters):
        lines.append("Filter: " + " AND ".join(f for f in filters if f))
    return lines, tuple(i for i in inputs if i), tuple(m for m in measures if m)


def _semantic_details(raw: dict[str, Any]) -> tuple[list[str], dict[str, tuple[str, str]]]:
    measures: dict[str, tuple[str, str]] = {}
    lines = []
    for item in _list(raw.get("measures"))[:MAX_COLUMNS]:
        m = _mapping(item)
        name = clean_text(m.get("name"), 100)
        if not name:
            continue
        agg, expr = clean_text(m.get("agg"), 40), clean_text(m.get("expr"), 300) or name
        measures[name] = (agg, expr)
        described = clean_text(m.get("description"), 300)
        lines.append(f"- measure {name}: {agg}({expr})" + (f" — {described}" if described else ""))
    for key in ("dimensions", "entities"):
        names = [f"{clean_text(_mapping(d).get('name'), 100)} ({clean_text(_mapping(d).get('type'), 40)})"
                 for d in _list(raw.get(key))[:MAX_COLUMNS]]
        if names:
            lines.append(f"{key.capitalize()}: {', '.join(names)}")
    return lines, measures


def _relation(raw: dict[str, Any], kind: str) -> tuple[str, str, str] | None:
    if kind not in RELATION_KINDS:
        return None
    identifier = raw.get("identifier") if kind == "source" else raw.get("alias")
    bits = (raw.get("database"), raw.get("schema"), identifier or raw.get("name"))
    if not all(isinstance(b, str) and b for b in bits):
        return None
    return (str(bits[0]), str(bits[1]), str(bits[2]))


def _entry(uid: str, raw: dict[str, Any], kind: str) -> Entry:
    name = clean_text(raw.get("name"), 200) or uid.rsplit(".", 1)[-1]
    if kind == "source":
        name = f"{clean_text(raw.get('source_name'), 100)}.{name}"
    description = clean_text(raw.get("description"))
    if kind == "source" and not description:
        description = clean_text(raw.get("source_description"))
    compiled = raw.get("compiled_code") if kind in ("model", "snapshot") else None
    columns = {}
    for key, col in list(_mapping(raw.get("columns")).items())[:MAX_COLUMNS]:
        c = _mapping(col)
        col_name = clean_text(c.get("name") or key, 200)
        columns[col_name.lower()] = Column(col_name, clean_text(c.get("description")),
                                           clean_text(c.get("data_type"), 80))
    parents = tuple(p for p in _list(_mapping(raw.get("depends_on")).get("nodes"))
                    if isinstance(p, str) and _ID_RE.fullmatch(p) and not p.startswith(("test.", "macro.")))
    return Entry(
        uid=uid, kind=kind, name=name, label=clean_text(raw.get("label"), 200), description=description,
        owner=_owner(raw), path=clean_text(raw.get("original_file_path"), 300), relation=_relation(raw, kind),
        relation_name=clean_text(raw.get("relation_name"), 400),
        materialized=clean_text(_mapping(raw.get("config")).get("materialized"), 40),
        compiled_sql=compiled if isinstance(compiled, str) and len(compiled) <= SQL_MAX_CHARS else "",
        columns=columns, parents=parents)


def _kind_of(uid: str, raw: dict[str, Any]) -> str | None:
    kind = raw.get("resource_type")
    return kind if isinstance(kind, str) and kind in KINDS and uid.startswith(kind + ".") else None


def parse_manifest(manifest: dict[str, Any], catalog: dict[str, Any] | None = None) -> DbtProject:
    """The :class:`DbtProject` of parsed artifacts (malformed parts are skipped, never trusted)."""
    metadata = _mapping(manifest.get("metadata"))
    project = DbtProject(project_name=clean_text(metadata.get("project_name"), 100),
                         dbt_version=clean_text(metadata.get("dbt_version"), 40),
                         adapter_type=clean_text(metadata.get("adapter_type"), 40), has_catalog=catalog is not None)
    tests: list[dict[str, Any]] = []
    raws: dict[str, dict[str, Any]] = {}
    for section in ("nodes", "sources", "semantic_models", "metrics", "exposures"):
        for uid, raw in _mapping(manifest.get(section)).items():
            if not isinstance(raw, dict):
                project.skipped += 1
                continue
            if isinstance(uid, str) and uid.startswith("test.") and raw.get("resource_type") == "test":
                tests.append(raw)
                continue
            kind = _kind_of(uid, raw) if isinstance(uid, str) else None
            if kind is None:
                if isinstance(uid, str) and uid.split(".", 1)[0] in ("analysis", "operation", "sql_operation",
                                                                     "unit_test", "function"):
                    continue  # kinds not served, not suspicious
                project.skipped += 1
                continue
            if not _ID_RE.fullmatch(uid) or len(project.entries) >= MAX_ENTRIES:
                project.skipped += 1
                continue
            project.entries[uid] = _entry(uid, raw, kind)
            raws[uid] = raw
    semantic_of_measure: dict[str, str] = {}
    for uid, entry in project.entries.items():
        if entry.kind == "semantic_model":
            entry.details, entry.measures = _semantic_details(raws[uid])
            for measure in entry.measures:
                semantic_of_measure.setdefault(measure, uid)
    for uid, entry in project.entries.items():
        if entry.kind == "metric":
            entry.details, entry.definition_inputs, entry.input_measures = _metric_details(
                raws[uid], semantic_of_measure, project.entries)
        elif entry.kind == "exposure":
            raw = raws[uid]
            bits = [f"{k} {clean_text(raw.get(k), 300)}" for k in ("type", "maturity", "url") if raw.get(k)]
            if bits:
                entry.details.append("Exposure: " + ", ".join(bits))
    _attach_tests(project, tests)
    _apply_catalog(project, catalog)
    for uid, entry in project.entries.items():
        entry.parents = tuple(p for p in entry.parents if p in project.entries)
        for parent in entry.parents:
            project.children.setdefault(parent, []).append(uid)
        if entry.relation is not None:  # a relation two entries name (a seed read as a source) is the higher's
            key = (entry.relation[0].lower(), entry.relation[1].lower(), entry.relation[2].lower())
            held = project.by_relation.get(key)
            if held is None or _RELATION_PRIORITY[entry.kind] < _RELATION_PRIORITY[project.entries[held].kind]:
                project.by_relation[key] = uid
    return project


def _attach_tests(project: DbtProject, tests: list[dict[str, Any]]) -> None:
    per_column: dict[tuple[str, str], list[str]] = {}
    for test in tests:
        attached = test.get("attached_node")
        if not isinstance(attached, str):
            parents = _list(_mapping(test.get("depends_on")).get("nodes"))
            attached = parents[0] if parents and isinstance(parents[0], str) else None
        entry = project.entries.get(attached) if attached is not None else None
        if entry is None:
            continue
        text = _test_text(test)
        column = test.get("column_name")
        if isinstance(column, str) and column:
            per_column.setdefault((entry.uid, column.lower()), []).append(text)
        else:
            entry.tests = (*entry.tests, text)
    for (uid, column), texts in per_column.items():
        entry = project.entries[uid]
        existing = entry.columns.get(column)
        if existing is None and len(entry.columns) < MAX_COLUMNS:
            existing = Column(clean_text(column, 200))
        if existing is not None:
            entry.columns[column] = Column(existing.name, existing.description, existing.data_type,
                                           (*existing.tests, *sorted(texts)))


def _apply_catalog(project: DbtProject, catalog: dict[str, Any] | None) -> None:
    """Column types (and columns the manifest does not document) from ``catalog.json``."""
    if catalog is None:
        return
    for section in ("nodes", "sources"):
        for uid, raw in _mapping(catalog.get(section)).items():
            entry = project.entries.get(uid) if isinstance(uid, str) else None
            if entry is None or not isinstance(raw, dict):
                continue
            for key, col in list(_mapping(raw.get("columns")).items())[:MAX_COLUMNS]:
                c = _mapping(col)
                name = clean_text(c.get("name") or key, 200)
                known = entry.columns.get(name.lower())
                if known is None and len(entry.columns) >= MAX_COLUMNS:
                    continue
                entry.columns[name.lower()] = Column(known.name if known else name,
                                                     known.description if known else "",
                                                     clean_text(c.get("type"), 80) or (known.data_type if known else ""),
                                                     known.tests if known else ())


def load_project(manifest: Path, catalog: Path | None, *, max_bytes: int = MANIFEST_MAX_BYTES) -> DbtProject:
    """Read and parse ``manifest`` (and ``catalog`` when given) under the module's bounds."""
    data = read_json(manifest, "manifest", max_bytes)
    if not isinstance(data.get("nodes"), dict) or not isinstance(data.get("metadata"), dict):
        raise DbtError(f"dbt manifest {str(manifest)!r} has no 'nodes' and 'metadata' objects; "
                       "is it a dbt target/manifest.json?")
    catalog_data = read_json(catalog, "catalog", max_bytes) if catalog is not None else None
    return parse_manifest(data, catalog_data)
