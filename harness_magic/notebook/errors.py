"""Errors the notebook layer raises on purpose (beside IPython's one-line :class:`UsageError`).

:class:`AgentRunError` fails an ``%%agent`` cell whose run ended in error, so
that Run All stops there like at any failing cell. It is shown as one line
(``_render_traceback_``), and carries the run's result.
"""

from __future__ import annotations

from typing import Any

__all__ = ["AgentRunError"]


class AgentRunError(RuntimeError):
    """An ``%%agent`` run ended with status ``error``; raised after its output is shown.

    :attr:`result` is the :class:`~harness_magic.core.agent.result.RunResult`
    (after the cell: ``sys.last_value.result``). Not raised for a user's
    interrupt or a budget or turn limit, nor when ``AgentMagics.raise_on_error``
    is False.
    """

    def __init__(self, result: Any) -> None:
        reason = (result.error or "no reason given").strip().splitlines() or ["no reason given"]
        super().__init__(f"run {result.run_id} ended in error: {reason[0]} (the run's result is "
                         "sys.last_value.result; %config AgentMagics.raise_on_error = False keeps such cells passing)")
        self.result = result

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of a traceback: the one line (the run's output is above it)."""
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]
