"""What every importer shares: bounded JSONL reading, safe table names, the output suite, the report.

Input files come from outside the project and are read as hostile: a file over
its size limit is refused, a malformed line is reported by its line number and
skipped, a table name that is not a plain file name inside the tables directory
(``../x.csv``, ``/etc/passwd``, a link leading out) is refused, a table over
:data:`MAX_TABLE_BYTES` or one that is missing, empty or unreadable is reported and
the questions using it are skipped with the reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness_magic.core.text.counts import count
from harness_magic.evals.runner import MAX_INPUT_FILE_BYTES
from harness_magic.evals.schema import MAX_TASKS

__all__ = ["BenchmarkImportError", "ImportReport", "read_jsonl", "check_table", "handle_name", "task_id",
           "prepare_out", "write_task", "MAX_JSONL_BYTES", "MAX_LINE_CHARS", "MAX_TABLE_BYTES", "REPORT_FILE"]

MAX_JSONL_BYTES = 64 * 1024 * 1024
"""A questions or labels file larger than this is refused (the published files are well under 1 MB)."""
MAX_LINE_CHARS = 1_000_000
"""A JSONL line longer than this is reported and skipped (one question is a few kilobytes)."""
MAX_TABLE_BYTES = MAX_INPUT_FILE_BYTES
"""A table larger than this is skipped: the runner would refuse it as an input anyway."""
MAX_RECORDS = MAX_TASKS
"""At most this many questions are imported (a suite may hold no more tasks)."""
REPORT_FILE = "import_report.json"
"""Written into the suite: what was imported, what was skipped and why."""
_ID = re.compile(r"[^a-z0-9_]+")


class BenchmarkImportError(ValueError):
    """The import cannot go on (unreadable input, a file over its limit, an output folder in use)."""


@dataclass
class ImportReport:
    """What an import did: tasks written, questions skipped with the reason, input problems by line."""

    benchmark: str
    out: str
    imported: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(question id, reason)."""
    problems: list[str] = field(default_factory=list)
    """Input lines that could not be read, by file and line number."""
    tables: dict[str, str] = field(default_factory=dict)
    """Table name -> ``ok`` or why it cannot be used."""

    def to_dict(self) -> dict[str, Any]:
        return {"benchmark": self.benchmark, "out": self.out, "imported": self.imported,
                "skipped": [{"id": i, "reason": r} for i, r in self.skipped], "problems": self.problems,
                "tables": self.tables}

    def lines(self) -> list[str]:
        """The report as text, one finding a line."""
        out = [f"{self.benchmark}: {count(len(self.imported), 'task')} written to {self.out}; "
               f"{count(len(self.skipped), 'question')} skipped; {count(len(self.problems), 'input problem')}"]
        out += [f"  table {name}: {status}" for name, status in sorted(self.tables.items()) if status != "ok"]
        out += [f"  skipped {qid}: {reason}" for qid, reason in self.skipped]
        out += [f"  {problem}" for problem in self.problems]
        return out


def read_jsonl(path: str | os.PathLike[str], what: str, report: ImportReport) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for every readable line; bad lines go to ``report.problems`` by number."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise BenchmarkImportError(f"cannot read the {what} file {path}: {exc.strerror or exc}") from None
    if not path.is_file():
        raise BenchmarkImportError(f"the {what} file {path} is not a regular file")
    if size > MAX_JSONL_BYTES:
        raise BenchmarkImportError(f"the {what} file {path} has {size} bytes; at most {MAX_JSONL_BYTES} are read")
    out: list[tuple[int, dict[str, Any]]] = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            where = f"{path.name} line {number}"
            if len(raw) > MAX_LINE_CHARS:
                report.problems.append(f"{where}: {len(raw)} bytes, longer than {MAX_LINE_CHARS}; skipped")
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                report.problems.append(f"{where}: not UTF-8 ({exc.reason} at byte {exc.start}); skipped")
                continue
            except json.JSONDecodeError as exc:
                report.problems.append(f"{where}: not JSON ({exc.msg} at column {exc.colno}); skipped")
                continue
            if not isinstance(record, dict):
                report.problems.append(f"{where}: expected a JSON object, got {type(record).__name__}; skipped")
                continue
            out.append((number, record))
    return out


def _plain_name(name: Any) -> str | None:
    """Why ``name`` is not a plain file name, or None when it is."""
    if not isinstance(name, str) or not name.strip():
        return f"table name {name!r} is not a non-empty string"
    if "/" in name or "\\" in name or "\x00" in name or name in (".", "..") or name.startswith("."):
        return f"table name {name!r} is not a plain file name (no folders, no leading dot)"
    if len(name) > 255:
        return f"table name {name[:40]!r}... is longer than 255 characters"
    return None


def check_table(directory: Path, name: Any, suffixes: tuple[str, ...] = (".csv",)) -> tuple[Path | None, str]:
    """(the table's path, "ok") or (None, why it cannot be used): a plain, non-empty, readable file inside."""
    why = _plain_name(name)
    if why:
        return None, why
    if not name.lower().endswith(suffixes):
        return None, f"table {name!r}: allowed formats are {', '.join(suffixes)}"
    path = directory / name
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None, f"table {name!r} is missing from {directory}"
    if not real.is_relative_to(directory.resolve()):
        return None, f"table {name!r} leads outside {directory} (a link to {real})"
    if not real.is_file():
        return None, f"table {name!r} is not a regular file"
    size = real.stat().st_size
    if size == 0:
        return None, f"table {name!r} is empty (0 bytes)"
    if size > MAX_TABLE_BYTES:
        return None, f"table {name!r} has {size} bytes; at most {MAX_TABLE_BYTES}"
    return real, "ok"


def read_frame(path: Path) -> tuple[Any, str]:
    """(the CSV as a DataFrame, "ok") or (None, why not): unreadable or without rows/columns is unusable."""
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError, OSError) as exc:
        return None, f"table {path.name!r} cannot be read as CSV: {type(exc).__name__}: {str(exc)[:200]}"
    if frame.shape[0] == 0 or frame.shape[1] == 0:
        return None, f"table {path.name!r} is empty ({frame.shape[0]} rows, {frame.shape[1]} columns)"
    return frame, "ok"


def handle_name(file_name: str, taken: set[str] | None = None) -> str:
    """A Python identifier for a table (its file stem), unique among ``taken``."""
    stem = re.sub(r"\W+", "_", Path(file_name).stem).strip("_").lower() or "table"
    if stem[0].isdigit():
        stem = f"t_{stem}"
    stem = stem[:56]
    name, n = stem, 2
    while taken is not None and name in taken:
        name, n = f"{stem}_{n}", n + 1
    if taken is not None:
        taken.add(name)
    return name


def task_id(prefix: str, raw: Any) -> str | None:
    """``prefix_<id>`` in the suite's id alphabet, or None when the id is unusable."""
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        return None
    text = _ID.sub("_", str(raw).strip().lower()).strip("_")
    if not text or len(prefix) + 1 + len(text) > 64:
        return None
    return f"{prefix}_{text}"


def prepare_out(out: str | os.PathLike[str]) -> Path:
    """The output suite folder: created, or an existing empty folder; a folder with files is refused."""
    path = Path(out)
    if path.exists():
        if not path.is_dir():
            raise BenchmarkImportError(f"--out {path} exists and is not a folder")
        if any(path.iterdir()):
            raise BenchmarkImportError(f"--out {path} is not empty; import into a new or empty folder")
    path.mkdir(parents=True, exist_ok=True)
    return path


def copy_table(source: Path, suite: Path, folder: str, name: str) -> str:
    """Copy a table into ``suite/folder/`` once; its path relative to the suite."""
    target_dir = suite / folder
    target_dir.mkdir(exist_ok=True)
    target = target_dir / name
    if not target.exists():
        shutil.copyfile(source, target)
    return f"{folder}/{name}"


def write_task(suite: Path, task: dict[str, Any], header: str) -> Path:
    """Write one task file ``<id>.yaml`` (YAML, keys in the order given)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        """Multi-line strings (prompts) as literal blocks, so the file reads like the question."""

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        block = "\n" in value and not any(c in value for c in "\r\t") and value == value.rstrip(" ")
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if block else None)

    Dumper.add_representer(str, text)
    path = suite / f"{task['id']}.yaml"
    text = yaml.dump(task, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=120)
    path.write_text(f"# {header}\n{text}", encoding="utf-8")
    return path


def write_report(suite: Path, report: ImportReport) -> None:
    (suite / REPORT_FILE).write_text(json.dumps(report.to_dict(), indent=1), encoding="utf-8")
