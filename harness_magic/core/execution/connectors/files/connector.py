"""The ``files`` connector: list and read data files under configured roots.

Read-only. Formats: CSV/TSV, Parquet, JSON (records or JSON lines), Excel.
Paths are written ``<root label>/<relative path>`` (with a single root the
label may be left out; absolute paths are accepted when they lie inside a
root). ``..`` is refused. Every file is opened beneath its root without
following any link (:func:`._safe_open.open_beneath`: ``openat2`` with
``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` where the kernel has it,
component-wise ``O_NOFOLLOW`` otherwise) and read from that descriptor, so a
link swapped in between a check and the open cannot reach outside the root.
Hard-linked files (``st_nlink > 1``) are refused unless the root is listed in
``allow_hardlinks``. Listings skip links and refused files.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import stat as _stat

from harness_magic.core.execution.connectors._results import DEFAULT_MAX_ROWS, cap_rows, truncation_note
from harness_magic.core.confinement.safe_open import HardLinkRefused, LinkRefused, open_beneath
from harness_magic.core.execution.connectors.registry import Connector, ConnectorResult
from harness_magic.core.execution.connectors.sameness import records_configuration
from harness_magic.core.execution.tools import ToolError

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
    """Labelled directories; opens model-written paths beneath them without following links."""

    def __init__(self, roots: Iterable[str | os.PathLike[str]] | Mapping[str, str | os.PathLike[str]],
                 allow_hardlinks: bool | Iterable[str] = False) -> None:
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
        if isinstance(allow_hardlinks, bool):
            self.hardlink_roots = set(self.roots) if allow_hardlinks else set()
        else:
            self.hardlink_roots = set(allow_hardlinks)
            unknown = sorted(self.hardlink_roots - set(self.roots))
            if unknown:
                raise ValueError(f"allow_hardlinks names unknown roots {unknown}; roots: {', '.join(self.roots)}")

    def display(self, path: Path) -> str:
        for label, root in self.roots.items():
            if _inside(path, root):
                return f"{label}/{path.relative_to(root).as_posix()}" if path != root else label
        return path.name

    def _refuse_outside(self, path: str) -> ToolError:
        return ToolError(f"Refused: {path!r} is outside the configured directories ({', '.join(self.roots)}). "
                         "Use paths from files__list.")

    def locate(self, path: str) -> list[tuple[str, str]]:
        """Candidate ``(root label, path relative to it)`` pairs for a model-written path, checked lexically."""
        if not isinstance(path, str) or not path.strip():
            raise ToolError("path must be a non-empty string such as 'data/sales.csv'")
        text = path.replace("\\", "/")
        if ".." in text.split("/"):
            raise self._refuse_outside(path)
        candidates: list[tuple[str, str]] = []
        if os.path.isabs(text):
            normal = os.path.normpath(text)
            for label, root in self.roots.items():
                if _inside(Path(normal), root):
                    candidates.append((label, os.path.relpath(normal, root)))
        else:
            head, _, rest = text.partition("/")
            if head in self.roots:
                candidates.append((head, rest or "."))
            if len(self.roots) == 1:
                candidates.append((next(iter(self.roots)), text))
        if not candidates:
            raise self._refuse_outside(path)
        return candidates

    def open(self, path: str, kind: str = "file") -> tuple[int, str, str]:
        """``(read-only descriptor, root label, relative path)``; ToolError naming the path otherwise."""
        missing: OSError | None = None
        for label, relative in self.locate(path):
            try:
                fd = open_beneath(str(self.roots[label]), relative, kind=kind,  # type: ignore[arg-type]  # kind is "file" or "directory" (the callers pass one of them)
                                  allow_hardlinks=label in self.hardlink_roots)
            except LinkRefused:
                raise ToolError(f"Refused: {path!r} is or passes through a symbolic link. Links are not followed, "
                                f"so nothing outside the configured directories ({', '.join(self.roots)}) can be "
                                "reached; use paths from files__list.") from None
            except HardLinkRefused as exc:
                raise ToolError(f"Refused: {path!r} is a hard-linked file ({exc.strerror}); a hard link can name "
                                "any file on the disk, so these are read only under roots configured with "
                                "allow_hardlinks.") from None
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
                missing = exc
                continue
            return fd, label, os.path.normpath(relative)
        what = "directory" if kind == "directory" else "file"
        raise ToolError(f"No {what} {path!r}. Use files__list to see what exists.") from missing

    def resolve(self, path: str) -> tuple[Path, Path]:
        """(path, its root) for a path that opens safely beneath a root; ToolError otherwise."""
        fd, label, relative = self.open(path)
        os.close(fd)
        return self.roots[label] / relative, self.roots[label]


def _inside(path: Path, root: Path) -> bool:
    try:
        return os.path.commonpath([str(path), str(root)]) == str(root)
    except ValueError:
        return False


def _read(path: Any, kind: str, cap: int, sheet: str | None, suffix: str = "") -> tuple[Any, bool]:
    """Read ``path`` (a path or a binary file object opened by :meth:`FileRoots.open`)."""
    import pandas as pd

    if kind == "csv":
        sep = "\t" if (suffix or getattr(path, "suffix", "")).lower() == ".tsv" else None
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

        data = json.load(path) if hasattr(path, "read") else json.loads(Path(path).read_text(encoding="utf-8"))
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


@records_configuration
def files_connector(
    roots: Iterable[str | os.PathLike[str]] | Mapping[str, str | os.PathLike[str]],
    *,
    name: str = "files",
    description: str | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    allow_hardlinks: bool | Iterable[str] = False,
) -> Connector:
    """A read-only connector over data files under ``roots`` (a list, or label -> directory).

    ``allow_hardlinks``: True, or the labels of the roots whose hard-linked files may be read.
    """
    file_roots = FileRoots(roots, allow_hardlinks=allow_hardlinks)
    connector = Connector(
        name, description or f"Data files (CSV, Parquet, JSON, Excel) under {', '.join(file_roots.roots)}: "
                             "list them and read one as a DataFrame handle.")
    connector.roots = file_roots  # type: ignore[attr-defined]  # a files connector's own attribute

    @connector.tool(name="list")
    def list_files(directory: str = "", pattern: str = "*") -> Any:
        """List data files (path, format, size, modified time), recursively.

        Args:
            directory: A directory under a root ('' lists every root).
            pattern: Glob on the file name, e.g. '*.parquet'.
        """
        if directory:
            fd, label, relative = file_roots.open(directory, kind="directory")
            starts = [(fd, label, "" if relative == "." else relative)]
        else:
            starts = [(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), label, "")
                      for label, root in file_roots.roots.items()]
        entries: list[dict[str, Any]] = []
        try:
            for fd, label, prefix in starts:
                for dirpath, dirnames, filenames, dir_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
                    dirnames.sort()
                    for filename in sorted(filenames):
                        kind = DATA_SUFFIXES.get(Path(filename).suffix.lower())
                        if kind is None or not fnmatch.fnmatch(filename, pattern):
                            continue
                        info = os.stat(filename, dir_fd=dir_fd, follow_symlinks=False)
                        if not _stat.S_ISREG(info.st_mode):
                            continue  # links are never followed, so they are not listed
                        if info.st_nlink > 1 and label not in file_roots.hardlink_roots:
                            continue  # hard-linked files are refused on read
                        relative = os.path.normpath(os.path.join(prefix, dirpath, filename))
                        entries.append({
                            "path": f"{label}/{relative}", "format": kind, "bytes": info.st_size,
                            "modified": _dt.datetime.fromtimestamp(info.st_mtime).isoformat(timespec="seconds"),
                        })
                        if len(entries) >= LIST_MAX_ENTRIES:
                            return {"files": entries, "note": f"listing stopped at {LIST_MAX_ENTRIES} files"}
        finally:
            for fd, _, _ in starts:
                os.close(fd)
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
        file_roots.locate(path)  # refuses paths outside the roots before anything else is said about them
        suffix = Path(path).suffix.lower()
        kind = DATA_SUFFIXES.get(suffix)
        if kind is None:
            raise ToolError(f"{path!r} is not a supported data file ({', '.join(sorted(DATA_SUFFIXES))})")
        fd, _, relative = file_roots.open(path)
        cap = cap_rows(max_rows, connector_max_rows)
        try:
            with os.fdopen(fd, "rb") as handle:  # read from the descriptor that was opened safely
                frame, truncated = _read(handle, kind, cap, sheet, suffix)
        except ToolError:
            raise
        # broad: pandas/pyarrow/openpyxl readers raise many types for a bad file; each is the tool's error
        except Exception as exc:
            raise ToolError(f"Could not read {path!r} as {kind}: {type(exc).__name__}: {exc}") from exc
        note = truncation_note(len(frame), cap, truncated).replace("Query returned", "Read")
        return ConnectorResult(frame, note, name=name or Path(relative).stem)

    connector_max_rows = max_rows
    return connector
