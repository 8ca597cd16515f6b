"""A cheap fingerprint of a value: did this object change since we last looked at it?

Identity is not enough to tell whether a notebook variable still holds what a
pull put there: ``df["new"] = 1`` or ``df.loc[0, "x"] = 9`` edit the very same
object. :func:`fingerprint` reads a value's structure and its data:

- a ``DataFrame``/``Series``/``Index``: type, shape, column names and dtypes,
  index type, and a digest of :func:`pandas.util.hash_pandas_object`'s row hashes, in order, over every row
  while the frame has at most :data:`FULL_HASH_MAX_CELLS` cells, over a bounded
  sample (head, tail and evenly spaced rows, :data:`SAMPLE_ROWS` in all) beyond;
- a NumPy array: shape, dtype, memory order and a BLAKE2b digest of its bytes
  (all of them up to :data:`FULL_HASH_MAX_BYTES`, evenly spaced slices beyond);
- ``None``, booleans, numbers, strings and bytes: a digest of the value;
- lists, tuples, dicts and sets: a digest of their ``repr`` while it is at most
  :data:`REPR_MAX_CHARS` characters.

Contract: equal fingerprints are taken to mean "unchanged"; an edit to data
inside the hashed part always changes the fingerprint (up to hash collisions).
Beyond the full-hash limits an edit to a row outside the sample can go
unnoticed (a shape, column or dtype change never does); so can one in a frame
of more than :data:`SAMPLE_ROWS` rows whose cells pandas cannot hash (lists in
an object column), read through the ``repr`` of a sample. A value with no cheap
fingerprint (an arbitrary object, a huge ``repr``) gets ``None``: callers then
fall back to identity. Pure: pandas and NumPy are imported only when the value
is theirs.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["fingerprint", "FULL_HASH_MAX_CELLS", "FULL_HASH_MAX_BYTES", "SAMPLE_ROWS", "REPR_MAX_CHARS"]

FULL_HASH_MAX_CELLS = 10_000_000
"""Frames up to this many cells are hashed whole (about 0.3 s for 10 M float cells here): every edit is seen."""
FULL_HASH_MAX_BYTES = 64 * 2**20
"""Arrays up to this many bytes are hashed whole (about 0.2 s here: BLAKE2b runs near 300 MB/s on one core)."""
SAMPLE_ROWS = 10_000
"""Rows (or array slices) hashed beyond the full-hash limits: head, tail and evenly spaced ones."""
REPR_MAX_CHARS = 1_000_000
"""Containers whose ``repr`` is longer get no fingerprint (identity only) rather than a slow one."""

_SCALARS = (type(None), bool, int, float, complex, str, bytes)


def _digest(data: bytes | memoryview) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _sample_positions(n: int) -> Any:
    """Row positions hashed for a long value: head, tail and evenly spaced rows, :data:`SAMPLE_ROWS` in all."""
    import numpy as np

    quarter = SAMPLE_ROWS // 4
    spaced = np.linspace(0, n - 1, SAMPLE_ROWS - 2 * quarter).astype("int64")
    return np.unique(np.concatenate([np.arange(quarter), spaced, np.arange(n - quarter, n)]))


def _pandas(value: Any) -> tuple[Any, ...]:
    import pandas as pd

    frame = value.to_frame() if isinstance(value, pd.Series) else value
    if isinstance(value, pd.Index):
        frame = value.to_frame(index=False)
    rows, cols = frame.shape
    structure = (type(value).__name__, value.shape, tuple(map(repr, frame.columns)), tuple(map(str, frame.dtypes)),
                 type(value.index).__name__ if not isinstance(value, pd.Index) else "", repr(value.index.names)
                 if not isinstance(value, pd.Index) else repr(value.names), repr(getattr(value, "name", None)))
    part = frame if rows * max(cols, 1) <= FULL_HASH_MAX_CELLS else frame.iloc[_sample_positions(rows)]
    index = not isinstance(value, pd.Index)
    try:
        data = _digest(pd.util.hash_pandas_object(part, index=index).to_numpy().tobytes())  # order counts
    except (TypeError, ValueError):  # unhashable cells (lists, tuples in an object column or index): their repr
        if rows > SAMPLE_ROWS:
            part = frame.iloc[_sample_positions(rows)]
        data = _digest(repr(part.to_dict("split")).encode("utf-8", "surrogatepass"))
    return ("pandas", *structure, data)


def _numpy(value: Any) -> tuple[Any, ...]:
    import numpy as np

    order = "F" if value.flags.f_contiguous and not value.flags.c_contiguous else "C"
    structure = ("ndarray", value.shape, str(value.dtype), order)
    if value.dtype.hasobject:
        text = repr(value.tolist())
        return (*structure, _digest(text.encode("utf-8", "surrogatepass"))) if len(text) <= REPR_MAX_CHARS \
            else (*structure, None)
    if value.nbytes <= FULL_HASH_MAX_BYTES or value.ndim == 0:
        return (*structure, _digest(np.ascontiguousarray(value).view(np.uint8).reshape(-1).data))
    sample = np.ascontiguousarray(value[_sample_positions(value.shape[0])])
    return (*structure, _digest(sample.view(np.uint8).reshape(-1).data))


def fingerprint(value: Any) -> tuple[Any, ...] | None:
    """A small comparable tuple describing ``value``'s structure and data (see the module docstring); None when
    the value has no cheap fingerprint, or reading it fails (never raises)."""
    try:
        return _fingerprint(value)
    except Exception:  # an odd value (a subclass with a broken repr, a frame pandas cannot hash): identity only
        return None


def _fingerprint(value: Any) -> tuple[Any, ...] | None:
    module = type(value).__module__.split(".")[0]
    if module == "pandas" and type(value).__name__ in ("DataFrame", "Series") or (
            module == "pandas" and type(value).__name__.endswith("Index")):
        return _pandas(value)
    if module == "numpy" and type(value).__name__ == "ndarray":
        return _numpy(value)
    if isinstance(value, _SCALARS) and type(value) in _SCALARS:
        data = value if isinstance(value, bytes) else repr(value).encode("utf-8", "surrogatepass")
        return ("scalar", type(value).__name__, _digest(data))
    if type(value) in (list, tuple, dict, set, frozenset):
        text = repr(value)
        if len(text) > REPR_MAX_CHARS:
            return None
        return ("container", type(value).__name__, len(value), _digest(text.encode("utf-8", "surrogatepass")))
    return None
