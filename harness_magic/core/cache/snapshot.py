"""Snapshots: ``ls`` + ``head`` for one cached value (first version)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["make_snapshot", "SNAPSHOT_SAMPLE_ROWS"]

SNAPSHOT_SAMPLE_ROWS = 5
"""Enough rows to see the shape of the data, few enough to stay cheap."""


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def make_snapshot(value: Any) -> dict[str, Any]:
    """Structured, JSON-serialisable summary of ``value``."""
    import numpy as np
    import pandas as pd

    if isinstance(value, pd.DataFrame):
        head = value.head(SNAPSHOT_SAMPLE_ROWS)
        return {
            "type": "dataframe",
            "shape": list(value.shape),
            "columns": [str(c) for c in value.columns],
            "dtypes": {str(c): str(t) for c, t in value.dtypes.items()},
            "sample": _jsonable(head.astype(object).where(head.notna(), None).to_dict("records")),
        }
    if isinstance(value, pd.Series):
        return {"type": "series", "name": str(value.name), "shape": list(value.shape), "dtype": str(value.dtype),
                "sample": _jsonable(value.head(SNAPSHOT_SAMPLE_ROWS).tolist())}
    if isinstance(value, np.ndarray):
        return {"type": "ndarray", "shape": list(value.shape), "dtype": str(value.dtype)}
    if isinstance(value, str):
        return {"type": "str", "length": len(value), "head": value[:200], "tail": value[-200:]}
    return {"type": type(value).__name__, "repr": repr(value)[:200]}
