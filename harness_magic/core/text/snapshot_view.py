"""Snapshots drawn for people: tables in HTML, rich and plain text.

A snapshot (:func:`harness_magic.core.cache.snapshot.make_snapshot`) is what the
model reads, as JSON. This module only *renders* one; it never changes what the
model receives. :func:`snapshot_table` turns a snapshot into a
:class:`SnapshotTable` — header rows (one per column level, repeated labels
blanked as pandas does), index columns (one per index level), a dtype row, the
sample rows with numbers formatted, and notes such as ``+31 more rows`` and
``+8 more columns`` — and three renderers draw it:

* :func:`snapshot_html`: an escaped ``<table>`` with inline styles, wrapped so a
  wide table scrolls inside its box instead of overflowing the page;
* :func:`snapshot_rich`: a :class:`rich.table.Table` for the terminal;
* :func:`snapshot_text`: aligned plain text (``text/plain`` and Markdown export).

Every label and cell is data (possibly hostile): HTML output escapes each one;
the rich renderer wraps each in :class:`rich.text.Text` so ``[bold]``-style
markup in data is shown, not interpreted. Pure: no IPython.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from typing import Any

from harness_magic.core.text.counts import count

__all__ = ["SnapshotTable", "snapshot_table", "snapshot_html", "snapshot_rich", "snapshot_text", "format_number"]

_MUTED = "color:#57606a;font-size:0.9em"
_CELL = "padding:2px 8px;border-bottom:1px solid #d8dee4;white-space:nowrap"
_TEXT_PREVIEW_CHARS = 800
"""Characters of a cached string shown to people (the snapshot itself holds at most ~800)."""


@dataclass
class SnapshotTable:
    """A snapshot laid out as a table (or, for values that are not tabular, as ``text``)."""

    name: str
    kind: str
    shape: str = ""
    index_names: list[str] = field(default_factory=list)
    """One header per index level (blank strings where a level has no name)."""
    header_rows: list[list[str]] = field(default_factory=list)
    """Column labels, one row per column level; repeats of the previous label blanked."""
    column_level_names: list[str] = field(default_factory=list)
    """The column axis's name per level (``df.columns.name``/``names``; blank where unnamed)."""
    dtypes: list[str] = field(default_factory=list)
    """dtype per shown column (empty when unknown)."""
    rows: list[tuple[list[str], list[str]]] = field(default_factory=list)
    """``(index labels, cells)`` per sample row, formatted."""
    numeric: list[bool] = field(default_factory=list)
    """Per shown column: right-align (numbers)."""
    notes: list[str] = field(default_factory=list)
    """``+N more rows``, ``+N more columns``, truncation."""
    text: str | None = None
    """For values that are not tables: a short description (a string's head, a dict's keys)."""

    @property
    def names_columns(self) -> bool:
        """The column axis is named: as pandas prints it, each header row's corner holds its level's name
        and the index names get a row of their own under the header."""
        return any(self.column_level_names)

    def corner(self, level: int, n_index: int) -> list[str]:
        """The cells left of header row ``level``: a level name (named columns) or the index names (last row)."""
        last = level == len(self.header_rows) - 1
        if self.names_columns:
            name = self.column_level_names[level] if level < len(self.column_level_names) else ""
            return [""] * (n_index - 1) + [name]
        if last:
            return [self.index_names[k] if k < len(self.index_names) else "" for k in range(n_index)]
        return [""] * n_index


def format_number(value: Any, decimals: int | None = None) -> str:
    """Numbers as people read them: thousands separators, a few decimals, scientific when huge or tiny."""
    if isinstance(value, bool) or value is None:
        return _plain(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if value != 0 and (abs(value) >= 1e15 or abs(value) < 1e-4):
            return f"{value:.3e}"
        return f"{value:,.{2 if decimals is None else decimals}f}"
    return _plain(value)


def _plain(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def _label(value: Any) -> str:
    if isinstance(value, list):
        return " / ".join(_label(v) for v in value)
    return "" if value is None else str(value)


def _decimals(values: list[Any]) -> int:
    """Decimals for a float column: 2 for ordinary magnitudes, 4 when every value is below 1."""
    floats = [abs(v) for v in values if isinstance(v, float) and not math.isnan(v)]
    if floats and max(floats) < 1:
        return 4
    return 2


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _format_column(values: list[Any]) -> tuple[list[str], bool]:
    numbers = [v for v in values if v is not None]
    numeric = bool(numbers) and all(_is_number(v) for v in numbers)
    if numeric:
        decimals = _decimals(numbers)
        return [format_number(v, decimals) if v is not None else "—" for v in values], True
    return [_plain(v) for v in values], False


def _header_rows(labels: list[Any], nlevels: int) -> list[list[str]]:
    """One row per level; a label equal to its left neighbour on this and every outer level is blanked."""
    parts = [lab if isinstance(lab, list) else [lab] for lab in labels]
    nlevels = max([nlevels, *(len(p) for p in parts)] or [1])
    parts = [p + [""] * (nlevels - len(p)) for p in parts]
    rows: list[list[str]] = []
    for level in range(nlevels):
        row = []
        for j, p in enumerate(parts):
            same = j > 0 and parts[j - 1][: level + 1] == p[: level + 1] and level < nlevels - 1
            row.append("" if same else _label(p[level]))
        rows.append(row)
    return rows


def _index_cells(labels: list[Any], nlevels: int) -> list[list[str]]:
    """Index labels per row, one cell per level; an outer level repeating the row above is blanked."""
    parts = [lab if isinstance(lab, list) else [lab] for lab in labels]
    out = []
    for i, p in enumerate(parts):
        p = p + [None] * (nlevels - len(p))
        cells = []
        for level, value in enumerate(p[:nlevels]):
            same = i > 0 and level < nlevels - 1 and parts[i - 1][: level + 1] == p[: level + 1]
            cells.append("" if same else (format_number(value) if _is_number(value) and isinstance(value, float)
                                          else _plain(value) if value is not None else ""))
        out.append(cells)
    return out


def _shape_text(shape: Any) -> str:
    if isinstance(shape, (list, tuple)):
        return " × ".join(f"{s:,}" if isinstance(s, int) else str(s) for s in shape)
    return ""


def _dict_at(mapping: dict[str, Any], key: str) -> dict[str, Any]:
    """``mapping[key]`` when it is a dict, else an empty dict (snapshots are untrusted JSON)."""
    value = mapping.get(key)
    return value if isinstance(value, dict) else {}


def _list_at(mapping: dict[str, Any], key: str) -> list[Any]:
    """``mapping[key]`` when it is a list, else an empty list (snapshots are untrusted JSON)."""
    value = mapping.get(key)
    return value if isinstance(value, list) else []


def _index_of(snapshot: dict[str, Any], n_rows: int) -> tuple[list[str], list[list[str]]]:
    index = _dict_at(snapshot, "index")
    head = index.get("head")
    if index.get("type") == "RangeIndex" or not isinstance(head, list):
        start, step = index.get("start", 0), index.get("step", 1)
        if not isinstance(start, int) or not isinstance(step, int):
            start, step = 0, 1
        names = [_label(index.get("name"))]
        return names, [[f"{start + i * step:,}"] for i in range(n_rows)]
    if index.get("type") == "MultiIndex" or any(isinstance(h, list) for h in head):
        declared = index.get("nlevels")
        nlevels = declared if isinstance(declared, int) else max(
            (len(h) for h in head if isinstance(h, list)), default=1)
        raw_names = _list_at(index, "names")
        names = [_label(n) for n in raw_names] + [""] * (nlevels - len(raw_names))
        return names[:nlevels], _index_cells(head[:n_rows], nlevels)
    return [_label(index.get("name"))], _index_cells(head[:n_rows], 1)


def snapshot_table(name: str, snapshot: dict[str, Any]) -> SnapshotTable:
    """Lay ``snapshot`` out for display (see the module doc); never raises on odd input."""
    kind = str(snapshot.get("type", "?"))
    table = SnapshotTable(name=str(name), kind=kind, shape=_shape_text(snapshot.get("shape")))
    shape = _list_at(snapshot, "shape")
    sample = snapshot.get("sample")
    if kind == "dataframe" and isinstance(sample, list):
        columns = _list_at(snapshot, "columns")
        if sample and isinstance(sample[0], dict):
            keys = list(sample[0])
            rows = [[r.get(k) for k in keys] for r in sample if isinstance(r, dict)]
        else:
            keys = [str(k) for k in snapshot.get("sample_columns") or []]
            rows = [list(r) for r in sample if isinstance(r, list)]
        width = max([len(keys), *(len(r) for r in rows)] or [0])
        labels = list(columns[:width]) if len(columns) >= width else keys[:width]
        col_index = _dict_at(snapshot, "column_index")
        declared_levels = col_index.get("nlevels")
        nlevels = declared_levels if isinstance(declared_levels, int) else 1
        table.header_rows = _header_rows(labels, nlevels) if labels else []
        level_names = col_index.get("names")
        names = level_names if isinstance(level_names, list) else [col_index.get("name")]
        table.column_level_names = [_label(n) for n in names]
        dtypes = _dict_at(snapshot, "dtypes")
        dtype_list = list(dtypes.values())
        table.dtypes = [str(dtypes.get(k, dtype_list[j] if j < len(dtype_list) else "")) for j, k in enumerate(keys)]
        formatted = [_format_column([r[j] if j < len(r) else None for r in rows]) for j in range(width)]
        table.numeric = [f[1] for f in formatted]
        table.index_names, index_cells = _index_of(snapshot, len(rows))
        table.rows = [(index_cells[i] if i < len(index_cells) else [""], [f[0][i] for f in formatted])
                      for i in range(len(rows))]
        n_rows = shape[0] if len(shape) > 0 and isinstance(shape[0], int) else len(rows)
        n_cols = shape[1] if len(shape) > 1 and isinstance(shape[1], int) else width
        if n_rows > len(rows):
            table.notes.append("+" + count(n_rows - len(rows), "more row"))
        if n_cols > width:
            table.notes.append("+" + count(n_cols - width, "more column"))
    elif kind == "series" and isinstance(sample, list):
        cells, numeric = _format_column(sample)
        table.header_rows = [[_label(snapshot.get("name")) or "value"]]
        table.dtypes = [str(snapshot.get("dtype", ""))]
        table.numeric = [numeric]
        table.index_names, index_cells = _index_of(snapshot, len(sample))
        table.rows = [(index_cells[i] if i < len(index_cells) else [""], [cells[i]]) for i in range(len(sample))]
        n = shape[0] if shape and isinstance(shape[0], int) else len(sample)
        if n > len(sample):
            table.notes.append("+" + count(n - len(sample), "more row"))
    else:
        table.text = _describe_other(snapshot)
    if snapshot.get("truncated"):
        table.notes.append("snapshot truncated")
    return table


def _describe_other(snapshot: dict[str, Any]) -> str:
    kind = snapshot.get("type")
    if kind == "str":
        head, tail = str(snapshot.get("head", "")), str(snapshot.get("tail", ""))
        text = head + (f"\n…\n{tail}" if tail else "")
        return text if len(text) <= _TEXT_PREVIEW_CHARS else text[: _TEXT_PREVIEW_CHARS - 1] + "…"
    for key in ("value", "first_values", "head", "keys", "repr", "error"):
        if key in snapshot:
            value = snapshot[key]
            if key == "keys" and isinstance(snapshot.get("sample"), dict):
                value = snapshot["sample"]
            text = value if isinstance(value, str) else _plain(value)
            extra = {"first_values": "first values: ", "head": "first items: ", "keys": ""}.get(key, "")
            if snapshot.get("keys_omitted"):
                text += f" (+{count(snapshot['keys_omitted'], 'more key')})"
            if snapshot.get("dtype"):
                extra = f"dtype {snapshot['dtype']} · " + extra
            return extra + text
    return ""


# -- renderers --------------------------------------------------------------------------------

_e = html.escape


def _head_line(table: SnapshotTable) -> str:
    bits = [table.kind]
    if table.shape:
        bits.append(table.shape)
    return " ".join(bits)


def snapshot_html(name: str, snapshot: dict[str, Any]) -> str:
    """The snapshot as an escaped HTML table in a scrolling box, with its notes."""
    table = snapshot_table(name, snapshot)
    parts = [
        '<div class="agent-snapshot" style="border:1px solid #d0d7de;border-radius:6px;padding:4px 8px;margin:4px 0">',
        f'<b>{_e(table.name)}</b> <span style="{_MUTED}">{_e(_head_line(table))}</span>',
    ]
    if table.text is not None:
        parts.append(f'<pre style="white-space:pre-wrap;word-break:break-word;margin:4px 0;font-size:0.9em">'
                     f"{_e(table.text)}</pre>")
    elif table.rows or table.header_rows:
        parts.append('<div class="agent-snapshot-scroll" style="overflow-x:auto;max-width:100%">')
        parts.append('<table class="agent-snapshot-table" style="border-collapse:collapse;font-size:0.85em;'
                     'font-variant-numeric:tabular-nums;margin:4px 0">')
        n_index = max(len(table.index_names), 1)
        head = []
        for level, row in enumerate(table.header_rows):
            last = level == len(table.header_rows) - 1
            corner_cells = "".join(f'<th class="agent-axis-name" style="{_CELL};text-align:left">{_e(text)}</th>'
                                   for text in table.corner(level, n_index))
            cells = "".join(
                f'<th style="{_CELL};text-align:{"right" if table.numeric[j] and last else "left"}">{_e(c)}</th>'
                for j, c in enumerate(row)
            )
            head.append(f"<tr>{corner_cells}{cells}</tr>")
        if table.names_columns and any(table.index_names):
            name_cells = "".join(f'<th style="{_CELL};text-align:left">{_e(n)}</th>' for n in
                                 table.index_names + [""] * (n_index - len(table.index_names)))
            blanks = "".join(f'<th style="{_CELL}"></th>' for _ in table.numeric)
            head.append(f'<tr class="agent-index-names">{name_cells}{blanks}</tr>')
        if table.dtypes and any(table.dtypes):
            corner = "".join(f'<th style="{_CELL}"></th>' for _ in range(n_index))
            dts = "".join(f'<td class="agent-dtype" style="{_CELL};{_MUTED};text-align:{"right" if table.numeric[j] else "left"}">'
                          f"{_e(d)}</td>" for j, d in enumerate(table.dtypes))
            head.append(f'<tr class="agent-dtype-row">{corner}{dts}</tr>')
        body = []
        for index_cells, row_cells in table.rows:
            idx = "".join(f'<th style="{_CELL};text-align:left">{_e(c)}</th>' for c in index_cells)
            idx += "".join(f'<th style="{_CELL}"></th>' for _ in range(n_index - len(index_cells)))
            tds = "".join(f'<td style="{_CELL};text-align:{"right" if table.numeric[j] else "left"}">{_e(c)}</td>'
                          for j, c in enumerate(row_cells))
            body.append(f"<tr>{idx}{tds}</tr>")
        parts.append(f"<thead>{''.join(head)}</thead><tbody>{''.join(body)}</tbody></table></div>")
    if table.notes:
        parts.append(f'<div class="agent-snapshot-notes" style="{_MUTED}">{_e(" · ".join(table.notes))}</div>')
    parts.append("</div>")
    return "".join(parts)


def snapshot_rich(name: str, snapshot: dict[str, Any]) -> Any:
    """The snapshot as a rich renderable (a Table, or a Text for values that are not tables)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = snapshot_table(name, snapshot)
    title = Text.assemble((table.name, "bold"), " ", (_head_line(table), "dim"))
    if table.text is not None:
        return Group(title, Text(table.text))
    grid = Table(show_edge=False, header_style="bold", pad_edge=False)
    n_index = max(len(table.index_names), 1)
    headers = [" / ".join(h for h in col if h) for col in zip(*table.header_rows)] if table.header_rows else []
    corner = [" / ".join(n for n in col if n) for col in zip(*(table.corner(level, n_index)
                                                             for level in range(len(table.header_rows))))]
    for k in range(n_index):
        grid.add_column(Text(corner[k] if k < len(corner) else ""), style="bold")
    for j, header in enumerate(headers):
        grid.add_column(Text(header), justify="right" if table.numeric[j] else "left")
    if table.names_columns and any(table.index_names):
        grid.add_row(*[Text(n, style="bold") for n in table.index_names],
                     *[Text("")] * (n_index - len(table.index_names) + len(headers)))
    if table.dtypes and any(table.dtypes):
        grid.add_row(*[Text("") for _ in range(n_index)], *[Text(d, style="dim") for d in table.dtypes])
    for index_cells, cells in table.rows:
        pad = [Text("")] * (n_index - len(index_cells))
        grid.add_row(*[Text(c) for c in index_cells], *pad, *[Text(c) for c in cells])
    items: list[Any] = [title, grid]
    if table.notes:
        items.append(Text(" · ".join(table.notes), style="dim"))
    return Group(*items)


def snapshot_text(name: str, snapshot: dict[str, Any]) -> str:
    """The snapshot as aligned plain text (for ``text/plain`` and the Markdown export)."""
    table = snapshot_table(name, snapshot)
    lines = [f"{table.name}: {_head_line(table)}"]
    if table.text is not None:
        lines.append(table.text)
    else:
        n_index = max(len(table.index_names), 1)
        grid: list[list[str]] = []
        for level, row in enumerate(table.header_rows):
            grid.append(table.corner(level, n_index) + row)
        if table.names_columns and any(table.index_names):
            grid.append(table.index_names + [""] * (n_index - len(table.index_names)))
        if table.dtypes and any(table.dtypes):
            grid.append([""] * n_index + table.dtypes)
        for index_cells, cells in table.rows:
            grid.append(index_cells + [""] * (n_index - len(index_cells)) + cells)
        if grid:
            width = max(len(r) for r in grid)
            grid = [r + [""] * (width - len(r)) for r in grid]
            widths = [max(len(r[j]) for r in grid) for j in range(width)]
            right = [False] * n_index + list(table.numeric)
            for r in grid:
                lines.append("  ".join((c.rjust(widths[j]) if j < len(right) and right[j] else c.ljust(widths[j]))
                                       for j, c in enumerate(r)).rstrip())
    if table.notes:
        lines.append(" · ".join(table.notes))
    return "\n".join(lines)
