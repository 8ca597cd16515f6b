"""Which cell an ``%%agent`` (or ``%agent_retry``) run comes from: the run key the core ties re-runs to.

JupyterLab (and other front ends on ipykernel 6+) send the cell's id with
every execution; IPython hands it to the ``pre_run_cell`` event as
``info.cell_id``. :class:`CellTracker` follows that event and turns the cell in
progress into a *run key*:

* ``cell:<id>`` when the front end sent an id: editing the prompt and running
  the cell again is still the same cell;
* ``source:<digest>`` otherwise (terminal IPython, nbclient and nbval send no
  id): a SHA-256 of the cell's text, so running the same text again is a re-run,
  and two cells with the same text count as one;
* a second run started within one execution (code calling ``run_cell_magic``
  twice, two ``%agent_retry`` lines) gets ``#2``, ``#3``... after the key, so it
  does not replace the first.

A magic called outside any execution the tracker saw (the shell's
``run_cell_magic`` from a script) is keyed by its own text.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["CellTracker", "CELL_KEY_PREFIX", "SOURCE_KEY_PREFIX", "SOURCE_DIGEST_CHARS", "CELL_ID_MAX_CHARS"]

CELL_KEY_PREFIX = "cell:"
SOURCE_KEY_PREFIX = "source:"
SOURCE_DIGEST_CHARS = 32
"""Hex digits of the source digest kept in a key: 128 bits, no accidental collision between cells."""
CELL_ID_MAX_CHARS = 64
"""nbformat's limit on a cell id; a longer one (a front end's mistake) is keyed by its digest."""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:SOURCE_DIGEST_CHARS]


class CellTracker:
    """Follows the shell's executions; :meth:`run_key` names the cell an ``%%agent`` run belongs to.

    Register :meth:`started` for IPython's ``pre_run_cell`` event (the extension does).
    """

    def __init__(self) -> None:
        self._cell_id: str | None = None
        self._source: str | None = None
        self._runs = 0

    def started(self, info: Any) -> None:
        """``pre_run_cell`` handler: a new execution began (``info`` is IPython's ``ExecutionInfo``)."""
        cell_id, raw = info.cell_id, info.raw_cell
        if isinstance(cell_id, str) and len(cell_id) > CELL_ID_MAX_CHARS:
            cell_id = _digest(cell_id)
        self._cell_id = cell_id if isinstance(cell_id, str) and cell_id else None
        self._source = raw if isinstance(raw, str) else None
        self._runs = 0

    def run_key(self, magic: str, anchor: str) -> str:
        """The run key of a run started by ``magic`` (the magic's own text, e.g. ``%%agent --in x\nPrompt``);
        ``anchor`` is the part of it the cell holds verbatim (a cell magic's body, a line magic's arguments).
        See the module docstring."""
        if self._source is None or anchor.strip() not in self._source:  # not called from the execution we saw
            return SOURCE_KEY_PREFIX + _digest(magic)
        self._runs += 1
        key = CELL_KEY_PREFIX + self._cell_id if self._cell_id else SOURCE_KEY_PREFIX + _digest(self._source)
        return key if self._runs == 1 else f"{key}#{self._runs}"
