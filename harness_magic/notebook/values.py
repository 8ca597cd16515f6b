"""Values crossing between the notebook and the agent's cache (``--in``/``--out``, ``%agent_push``/``%agent_pull``).

Nothing crosses by reference: :func:`copy_value` copies each value, so
neither side can change the other's.
"""

from __future__ import annotations

import copy
from typing import Any

from IPython.core.error import UsageError

__all__ = ["copy_value", "describe"]


def copy_value(value: Any) -> Any:
    """A copy for crossing the boundary: frames and arrays copy their data (arrays keep their memory order),
    the rest deep-copies."""
    try:
        copier = getattr(value, "copy", None)
        module = type(value).__module__.split(".")[0]
        if copier is not None and module in ("pandas", "numpy"):
            if module == "pandas":
                return copier(deep=True)
            return copier(order="K") if type(value).__name__ == "ndarray" else copier()  # keep memory order
        return copy.deepcopy(value)
    # broad: copying runs the value's own __deepcopy__/copy, which may raise anything; the user gets one line
    except Exception as exc:
        raise UsageError(f"cannot copy a {type(value).__name__} across to the agent: {exc}") from None


def describe(value: Any) -> str:
    """``DataFrame 36×20``, ``list of 3``, ``int``: what a variable holds, in a few words."""
    kind = type(value).__name__
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple) and all(isinstance(n, int) for n in shape):
        return f"{kind} {'×'.join(str(n) for n in shape)}"
    if isinstance(value, (list, tuple, dict, set, str)):
        return f"{kind} of {len(value):,}"
    return kind
