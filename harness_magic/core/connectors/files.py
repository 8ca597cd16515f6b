"""The ``files`` connector: list and read data files under configured roots.

Read-only. Formats: CSV/TSV, Parquet, JSON (records or JSON lines), Excel.
Paths are written ``<root label>/<relative path>`` (with a single root the
label may be left out; absolute paths are accepted when they lie inside a
root). Every path is resolved with symlinks followed and must stay inside its
root, so ``..`` and symlinks pointing outside are refused.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from harness_magic.core.connectors._results import DEFAULT_MAX_ROWS, cap_rows, truncation_note
from harness_magic.core.connectors.registry import Connector, ConnectorResult
from harness_magic.core.tools import ToolError

__all__ = ["files_connector", "FileRoots", "DATA_SUFFIXES"]

DATA_SUFFIXES: dict[str, str] = {
    ".csv": "csv", ".tsv": "csv", ".txt": "csv",
    ".parquet": "parquet", ".pq": "parquet",
    ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl",
    ".xlsx": "excel", ".xlsm": "excel", ".xls": "excel",
}
LIST_MAX_ENTRIES = 500
"""A listing stops here so one call cannot walk a whole disk."""


class FileRoots:
    """Labelled directories; resolves model-written paths safely."""

    def __init__(self, roots: Iterable[str | os.PathLike[str]] | Mapping[str, str | os.PathLike[str]]) -> None:
        items = list(roots.items()) if isinstance(roots, Mapping) else [(None, r) for r in roots]
        if not items:
            raise ValueError("files connector needs at least one root directory")
        self.roots: dict[str, Path] = {}
        for label, root in items:
            real = Path(os.path.realpath(os.fspath(root)))
            if not real.is_dir():
                raise ValueError(f"files root {os.fspath(root)!r} is not a directory")
            label = label or real.name or "root"
            base, n = label, 2
            while label in self.roots:
                label, n = f"{base}_{n}", n + 1
            self.roots[label] = real

    def display(self, path: Path) -> str:
        for label, root in self.roots.items():
            if _inside(path, root):
                return f"{label}/{path.relative_to(root).as_posix()}" if path != root else label
        return path.name

    def resolve(self, path: str) -> tuple[Path, Path]:
        """(real path, its root); ToolError when it escapes every root."""
        if not isinstance(path, str) or not path.strip():
            raise ToolError("path must be a non-empty string such as 'data/sales.csv'")
        candidates: list[tuple[Path, Path]] = []
        if os.path.isabs(path):
            candidates = [(Path(path), root) for root in self.roots.values()]
        else:
            head, _, rest = path.replace("\\", "/").partition("/")
            if head in self.roots:
                candidates.append((self.roots[head] / rest, self.roots[head]))
            if len(self.roots) == 1:
                root = next(iter(self.roots.values()))
                candidates.append((root / path, root))
        inside: list[tuple[Path, Path]] = []
        escaped = False
        for candidate, root in candidates:
            real = Path(os.path.realpath(candidate))
            if not _inside(real, root):
                escaped = True
            elif real.exists():
                return real, root
            else:
                inside.append((real, root))
        if inside and not escaped:
            return inside[0]
        labels = ", ".join(self.roots)
        raise ToolError(f"Refused: {path!r} is outside the configured directories ({labels}). "
                        "Use paths from files__list.")


def _inside(path: Path, root: Path) -> bool:
    try:
        return os.path.commonpath([str(path), str(root)]) == str(root)
    except ValueError:
        return False


def _read(path: Path, kind: str, cap: int, sheet: str | None) -> tuple[Any, bool]:
    import pandas as pd

    if kind == "csv":
        sep = "\t" if path.suffix.lower() == ".tsv" else None
        frame = pd.read_csv(path, nrows=cap + 1, sep=sep, engine="python" if sep is None else "c")
    elif kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        batches, rows = [], 0
        parquet = pq.ParquetFile(path)
        for batch in parquet.iter_batches(batch_size=min(cap + 1, 65_536)):
            batches.append(batch)
            rows += len(batch)
            if rows > cap:
                break
        table = pa.Table.from_batches(batches, schema=parquet.schema_arrow) if batches else \
            parquet.schema_arrow.empty_table()
        frame = table.to_pandas()
    elif kind == "jsonl":
        frame = pd.read_json(path, lines=True, nrows=cap + 1)
    elif kind == "json":
        import json

        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and not any(isinstance(v, list) for v in data.values()):
            data = [data]
        elif isinstance(data, dict):
            key = next(k for k, v in data.items() if isinstance(v, list))
            data = data[key]
        frame = pd.json_normalize(data[: cap + 1]) if isinstance(data, list) else pd.DataFrame([data])
    elif kind == "excel":
        frame = pd.read_excel(path, sheet_name=sheet if sheet is not None else 0, nrows=cap + 1)
    else:  # pragma: no cover - kinds come from DATA_SUFFIXES
        raise ToolError(f"unsupported format {kind!r}")
    truncated = len(frame) > cap
    return (frame.iloc[:cap] if truncated else frame), truncated


def files_connector(
    roots: Iterable[str | os.PathLike[str]] | Mapping[str, str | os.PathLike[str]],
    *,
    name: str = "files",
    description: str | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> Connector:
    """A read-only connector over data files under ``roots`` (a list, or label -> directory)."""
    file_roots = FileRoots(roots)
    connector = Connector(
        name, description or f"Data files (CSV, Parquet, JSON, Excel) under {', '.join(file_roots.roots)}: "
                             "list them and read one as a DataFrame handle.")
    connector.roots = file_roots  # type: ignore[attr-defined]

    @connector.tool(name="list")
    def list_files(directory: str = "", pattern: str = "*") -> Any:
        """List data files (path, format, size, modified time), recursively.

        Args:
            directory: A directory under a root ('' lists every root).
            pattern: Glob on the file name, e.g. '*.parquet'.
        """
        if directory:
            start, _ = file_roots.resolve(directory)
            if not start.is_dir():
                raise ToolError(f"{directory!r} is not a directory")
            starts = [start]
        else:
            starts = list(file_roots.roots.values())
        entries: list[dict[str, Any]] = []
        for start in starts:
            for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
                dirnames.sort()
                for filename in sorted(filenames):
                    full = Path(dirpath) / filename
                    kind = DATA_SUFFIXES.get(full.suffix.lower())
                    if kind is None or not fnmatch.fnmatch(filename, pattern):
                        continue
                    real = Path(os.path.realpath(full))
                    if not any(_inside(real, r) for r in file_roots.roots.values()) or not real.is_file():
                        continue  # a symlink out of the roots is not listed
                    stat = real.stat()
                    entries.append({
                        "path": file_roots.display(full), "format": kind, "bytes": stat.st_size,
                        "modified": _dt.datetime.fromtimestamp(stat.st_mtime).isoformat(timespec="seconds"),
                    })
                    if len(entries) >= LIST_MAX_ENTRIES:
                        return {"files": entries, "note": f"listing stopped at {LIST_MAX_ENTRIES} files"}
        return entries if entries else "No data files found."

    @connector.tool(name="read", result_name=f"{name}_data")
    def read_file(path: str, sheet: str | None = None, name: str | None = None, max_rows: int | None = None) -> Any:
        """Read one CSV, Parquet, JSON or Excel file into a DataFrame handle.

        Args:
            path: File path as shown by the list tool, e.g. 'data/sales.csv'.
            sheet: Excel sheet name (the first sheet when omitted).
            name: Preferred handle name (defaults to the file's stem).
            max_rows: Read at most this many rows.
        """
        real, _ = file_roots.resolve(path)
        if not real.is_file():
            raise ToolError(f"No file {path!r}. Use files__list to see what exists.")
        kind = DATA_SUFFIXES.get(real.suffix.lower())
        if kind is None:
            raise ToolError(f"{path!r} is not a supported data file ({', '.join(sorted(DATA_SUFFIXES))})")
        cap = cap_rows(max_rows, connector_max_rows)
        try:
            frame, truncated = _read(real, kind, cap, sheet)
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(f"Could not read {path!r} as {kind}: {type(exc).__name__}: {exc}") from exc
        note = truncation_note(len(frame), cap, truncated).replace("Query returned", "Read")
        return ConnectorResult(frame, note, name=name or real.stem)

    connector_max_rows = max_rows
    return connector
