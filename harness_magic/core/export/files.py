"""Writing run records to a file: ``.jsonl`` (the run logs, scrubbed), ``.html`` or ``.md``.

Contract: :func:`export_runs` picks the format by the suffix
(:data:`EXPORT_FORMATS`), refuses an unknown suffix, no runs, a missing
directory (never created) or a missing run log with an error naming it, and
scrubs every registered secret (:func:`~harness_magic.core.transcript.scrub.scrub`)
from what it writes. A ``.jsonl`` export reads alone: a run whose log refers to
an earlier run's log (``history_from``) that the export does not hold before
it is written with its history whole
(:func:`~harness_magic.core.transcript.log.portable_lines`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from harness_magic.core.export.record import RunRecord
from harness_magic.core.export.render_html import render_html_document
from harness_magic.core.export.render_markdown import render_markdown_document
from harness_magic.core.transcript.log import portable_lines
from harness_magic.core.transcript.scrub import scrub

__all__ = ["export_runs", "EXPORT_FORMATS"]

EXPORT_FORMATS = (".jsonl", ".html", ".md")
"""Suffixes :func:`export_runs` understands."""


def export_runs(records: Iterable[RunRecord], path: str | Path) -> Path:
    """Write ``records`` to ``path``; the suffix picks the format (see :data:`EXPORT_FORMATS`).

    The directory must exist: a mistyped path is refused (``FileNotFoundError``
    naming it), never created.
    """
    records = list(records)
    target = Path(path).expanduser()
    suffix = target.suffix.lower()
    if suffix not in EXPORT_FORMATS:
        raise ValueError(f"cannot export to {target.name!r}: use one of {', '.join(EXPORT_FORMATS)}")
    if not records:
        raise ValueError("no runs to export yet")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise FileNotFoundError(f"cannot export to {str(path)!r}: directory {str(parent)!r} does not exist "
                                "(create it first; nothing was written)")
    if suffix == ".jsonl":
        for record in records:
            if not record.run_file or not Path(record.run_file).exists():
                raise ValueError(f"run {record.run_id}: its log file {record.run_file!r} is missing")
        exported: set[str] = set()  # run ids already in the export: a later run's history may refer to them
        with open(target, "w", encoding="utf-8") as out:
            for record in records:
                assert record.run_file is not None  # checked for every record above
                for line in portable_lines(record.run_file, exported):
                    out.write(scrub(line))
    elif suffix == ".html":
        target.write_text(scrub(render_html_document(records)), encoding="utf-8")
    else:
        target.write_text(scrub(render_markdown_document(records)), encoding="utf-8")
    return target
