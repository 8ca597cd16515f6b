"""Fast memory estimates for the hot set's byte budget.

Contract of :func:`estimate_nbytes`: an estimate of the bytes a value keeps
alive, computed in time independent of the number of rows.

* frames and series: ``memory_usage(index=True, deep=False)`` (for frames
  summed from the block arrays' ``nbytes``, the same figure), which is exact
  for numeric, datetime, categorical and Arrow-backed (the pandas 3 default
  ``str``) columns because it reads buffer sizes; ``object`` columns are
  estimated from a sample of :data:`SIZE_SAMPLE_VALUES` values
  (``sys.getsizeof``) times the length, instead of a deep scan.
* arrays: ``nbytes`` (object arrays sampled the same way).
* strings and bytes: their size; containers: shallow size plus a sample of
  their items scaled to the length; anything else ``sys.getsizeof``.
"""

from __future__ import annotations

import itertools
import sys
from typing import Any

__all__ = ["estimate_nbytes", "SIZE_SAMPLE_VALUES"]

SIZE_SAMPLE_VALUES = 64
"""Values sampled to size an object column or container: steady estimate, bounded cost."""


def estimate_nbytes(value: Any) -> int:
    """Estimated bytes held by ``value`` (see module doc); never raises."""
    try:
        return int(_estimate(value, depth=0))
    except Exception:  # an estimate must not break a put
        return sys.getsizeof(value, 64)


def _sampled(values: Any, length: int) -> float:
    """Average ``getsizeof`` of the first sampled values, scaled to ``length``."""
    if length == 0:
        return 0.0
    sample = list(itertools.islice(iter(values), SIZE_SAMPLE_VALUES))
    if not sample:
        return 0.0
    return sum(sys.getsizeof(v, 64) for v in sample) / len(sample) * length


def _frame_buffers(frame: Any) -> float:
    """``frame.memory_usage(index=True, deep=False).sum()``, read from the blocks.

    The same figure (each column's ``nbytes`` plus the index's shallow
    usage), summed over the frame's blocks -- one array per dtype -- instead
    of building a Series per column, which costs far more than the sizes
    themselves. Falls back to ``memory_usage`` when pandas internals differ.
    """
    try:
        blocks = frame._mgr.blocks
        return float(sum(_array_bytes(block.values) for block in blocks) + frame.index.memory_usage(deep=False))
    except Exception:  # pandas internals moved: the public figure is always right
        return float(frame.memory_usage(index=True, deep=False).sum())


def _array_bytes(values: Any) -> int:
    """Shallow bytes of one block's array, as ``Series.memory_usage(deep=False)`` counts them."""
    usage = getattr(values, "memory_usage", None)  # Categorical: codes + its categories' own usage
    return int(usage(deep=False)) if callable(usage) else int(values.nbytes)


def _block_dtypes(frame: Any) -> list[Any]:
    """The distinct dtypes held by the frame's blocks (falls back to every column's dtype)."""
    try:
        return [block.dtype for block in frame._mgr.blocks]
    # broad: pandas internals (_mgr.blocks) differ across versions; the public dtypes are the fallback
    except Exception:
        return list(frame.dtypes)


def _estimate(value: Any, depth: int) -> float:
    import numpy as np
    import pandas as pd

    if isinstance(value, pd.DataFrame):
        total = _frame_buffers(value)
        if not any(dtype == object for dtype in _block_dtypes(value)):
            return total
        for position in np.flatnonzero((value.dtypes == object).to_numpy()):
            column = value.iloc[: SIZE_SAMPLE_VALUES, position]
            total += _sampled(column.tolist(), len(value))
        return total
    if isinstance(value, pd.Series):
        total = float(value.memory_usage(index=True, deep=False))
        if value.dtype == object:
            total += _sampled(value.iloc[:SIZE_SAMPLE_VALUES].tolist(), len(value))
        return total
    if isinstance(value, pd.Index):
        return float(value.memory_usage(deep=False))
    if isinstance(value, np.ndarray):
        total = float(value.nbytes)
        if value.dtype == object and value.size:
            total += _sampled(value.flat[:SIZE_SAMPLE_VALUES].tolist(), value.size)
        return total
    if isinstance(value, (str, bytes, bytearray)):
        return float(sys.getsizeof(value))
    if depth < 2 and isinstance(value, dict):
        items = list(itertools.islice(value.items(), SIZE_SAMPLE_VALUES))
        per_item = sum(_estimate(k, depth + 1) + _estimate(v, depth + 1) for k, v in items) / max(len(items), 1)
        return sys.getsizeof(value) + per_item * len(value)
    if depth < 2 and isinstance(value, (list, tuple, set, frozenset)):
        items = list(itertools.islice(iter(value), SIZE_SAMPLE_VALUES))
        per_item = sum(_estimate(v, depth + 1) for v in items) / max(len(items), 1)
        return sys.getsizeof(value) + per_item * len(value)
    return float(sys.getsizeof(value, 64))
