"""What both live renderers share: folding an event into the run's record, and the status line.

A :class:`~harness_magic.core.export.RunRecord` is folded alongside the view, so
the live form, the final output and the exports render the same content.
"""

from __future__ import annotations

from typing import Any

from harness_magic.core import export
from harness_magic.core.export import RunRecord
from harness_magic.core.text.counts import count
from harness_magic.core.transcript.events import RunFinished

__all__ = ["fold_event", "status_text"]


def fold_event(record: RunRecord, event: Any, state: Any) -> None:
    """Fold ``event`` into ``record``; a finished run counts its subagents' usage too."""
    export.apply_event(record, event, state)
    if isinstance(event, RunFinished):
        record.usage = getattr(event.result, "total_usage", event.result.usage)


def status_text(record: RunRecord, state: str, elapsed_s: float | None = None) -> str:
    """``turn 2/25 · 1,234 tokens (200 cached) · $0.0012 · 1.3 s · running``."""
    bits = [f"turn {record.turn}/{record.max_turns or '?'}"]
    usage = record.usage
    if usage is not None:
        bits.append(f"{count(usage.total_tokens, 'token')} ({usage.cached_tokens:,} cached)")
        bits.append(f"${usage.cost:.4f}")
    bits.append(f"{record.elapsed_s if elapsed_s is None else elapsed_s:.1f} s")
    bits.append(state)
    return " · ".join(bits)
