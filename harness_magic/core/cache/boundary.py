"""The copy boundary: values handed out of the cache cannot change it.

Contract of :func:`boundary_copy`: the returned object behaves like the cached
value, and any in-place mutation of it (or of anything reachable from it
through ordinary APIs) either fails or changes only the copy. Frames and
arrays are handled in O(1) time and memory:

* pandas ``DataFrame``/``Series``/``Index``: ``copy(deep=False)`` under
  copy-on-write (the default from pandas 3; turned into a deep copy on older
  pandas without CoW). Writes to the copy copy the touched data first;
  ``attrs`` are deep-copied by pandas, and index names are per object.
* numpy ``ndarray``: a read-only view whose ``WRITEABLE`` flag cannot be
  switched back on (``as_strided(..., writeable=False)``).
* ``list``/``dict``/``tuple``/``set``: rebuilt container by container, each
  element passed through this function (so a dict of frames stays O(1)
  per frame).
* immutable scalars, ``str``, ``bytes``: returned as is.
* anything else: ``copy.deepcopy``; when that fails, :class:`BoundaryCopyError`.

Limits (documented, not hidden): Python objects stored *inside* ``object``
columns or object arrays are shared with the cache, because copying them is
O(rows); replacing cells is safe, mutating a list held in a cell is not.
Deliberately reaching into pandas internals (e.g. re-enabling the writeable
flag on ``frame.values``) is out of scope: that is the sandbox's job.
"""

from __future__ import annotations

import copy
import datetime as _dt
import decimal
import fractions
from typing import Any

from harness_magic.core.cache.errors import BoundaryCopyError

__all__ = ["boundary_copy"]

_IMMUTABLE = (type(None), bool, int, float, complex, str, bytes, range, decimal.Decimal, fractions.Fraction,
              _dt.date, _dt.time, _dt.timedelta, _dt.timezone, frozenset)
"""Types whose instances cannot be mutated (frozenset elements are hashable, so immutable enough)."""


def boundary_copy(value: Any, *, handle: str | None = None) -> Any:
    """A copy of ``value`` that cannot change the original (see module doc)."""
    import numpy as np
    import pandas as pd

    if isinstance(value, _IMMUTABLE) or isinstance(value, np.generic):
        return value
    if isinstance(value, (pd.DataFrame, pd.Series)):
        return value.copy(deep=not _copy_on_write())
    if isinstance(value, pd.Index):
        return value.copy()  # Index data is immutable; a new object keeps name changes local
    if type(value) is np.ndarray and value.dtype != object:
        return np.lib.stride_tricks.as_strided(value, writeable=False)
    if type(value) is list:
        return [boundary_copy(v, handle=handle) for v in value]
    if type(value) is tuple:
        return tuple(boundary_copy(v, handle=handle) for v in value)
    if type(value) is dict:
        return {k: boundary_copy(v, handle=handle) for k, v in value.items()}
    if type(value) is set:
        return set(value)
    try:
        return copy.deepcopy(value)
    # broad: deepcopy runs the value's own __deepcopy__/__reduce__; any failure means no safe copy
    except Exception as exc:
        raise BoundaryCopyError(
            f"handle {handle!r} holds a {type(value).__name__} that cannot be copied safely "
            f"({type(exc).__name__}: {exc})", handle=handle,
        ) from exc


def _copy_on_write() -> bool:
    import pandas as pd

    if int(pd.__version__.split(".")[0]) >= 3:
        return True
    return bool(pd.get_option("mode.copy_on_write") is True)
