"""Configured files of the ``duckdb`` connector: what each names, and Arrow datasets Python opens read-only.

:func:`resolve_source` turns a configured path (a file, a directory read
recursively, or a glob) into its reader kind and the files it names, resolved
(links followed), all of one kind, each existing; it raises ``ValueError``
naming the path otherwise. :func:`open_source` opens them for reading only,
as an Arrow dataset (CSV scanned lazily) or, for a JSON document, a table.
Parquet views do not come through here: DuckDB reads those itself through
:class:`~.readonly_fs.ReadOnlyFiles` (see :mod:`.engine`).
"""

from __future__ import annotations

import glob as _glob
import os
from pathlib import Path
from typing import Any, cast

__all__ = ["READERS", "is_glob", "resolve_source", "open_source"]

READERS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".tsv": "tsv",
           ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl"}
"""File suffix -> how Python opens it for DuckDB (see :func:`_open_file`)."""

_GLOB_CHARS = frozenset("*?[")


def is_glob(path: str) -> bool:
    """Whether a configured path is a glob pattern (holds ``*``, ``?`` or ``[``)."""
    return any(c in _GLOB_CHARS for c in path)


def resolve_source(path: str) -> tuple[str, list[Path]]:
    """(reader kind, files) for a configured file, directory (its files, recursively) or glob.

    Every file is resolved (links followed) and must exist; all must share one
    reader kind; JSON documents (not lines) are single files only.
    """
    if is_glob(path):
        members = sorted(Path(os.path.realpath(p)) for p in _glob.glob(path, recursive=True))
        where = f"glob {path!r}"
    elif os.path.isdir(path):
        members = sorted(Path(os.path.realpath(p)) for p in Path(path).rglob("*")
                         if p.suffix.lower() in READERS)
        where = f"directory {path!r}"
    else:
        real = Path(os.path.realpath(path))
        if real.suffix.lower() not in READERS:
            raise ValueError(f"duckdb cannot read {path!r}; supported: {', '.join(sorted(READERS))}")
        if not real.is_file():
            raise ValueError(f"duckdb file {path!r} does not exist")
        return READERS[real.suffix.lower()], [real]
    members = [m for m in members if m.is_file()]
    if not members:
        raise ValueError(f"duckdb {where} matches no files")
    kinds = {READERS.get(m.suffix.lower()) for m in members}
    if None in kinds or len(kinds) != 1:
        raise ValueError(f"duckdb {where} must match files of one kind ({', '.join(sorted(READERS))}); "
                         f"it matches {', '.join(sorted({m.suffix or '(none)' for m in members}))}")
    kind = cast(str, kinds.pop())  # None was rejected just above
    if kind == "json" and len(members) > 1:
        raise ValueError(f"duckdb {where}: JSON documents are read one file at a time; use JSON lines (.jsonl)")
    return kind, members


def open_source(kind: str, members: list[Path]) -> Any:
    """An Arrow dataset over ``members``, opened by Python for reading only."""
    if len(members) == 1:
        return _open_file(members[0])
    import pyarrow.csv as pacsv
    import pyarrow.dataset as ds

    paths = [str(m) for m in members]
    if kind == "parquet":
        return ds.dataset(paths, format="parquet")
    if kind in ("csv", "tsv"):
        delimiter = "\t" if kind == "tsv" else ","
        return ds.dataset(paths, format=ds.CsvFileFormat(parse_options=pacsv.ParseOptions(delimiter=delimiter)))
    return ds.dataset(paths, format="json")


def _open_file(path: Path) -> Any:
    """An Arrow dataset/table over ``path``, opened by Python for reading only."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.dataset as ds

    kind = READERS[path.suffix.lower()]
    if kind == "parquet":
        return ds.dataset(str(path), format="parquet")
    if kind in ("csv", "tsv"):
        delimiter = "\t" if kind == "tsv" else ","
        return ds.dataset(str(path), format=ds.CsvFileFormat(parse_options=pacsv.ParseOptions(delimiter=delimiter)))
    if kind == "jsonl":
        return ds.dataset(str(path), format="json")
    import json

    with open(path, "rb") as handle:
        data = json.load(handle)
    rows = data if isinstance(data, list) else [data]
    if not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{path.name}: a JSON file must hold an object or a list of objects")
    return pa.Table.from_pylist(rows)
