"""Spec: put's fast paths (sizes from blocks, snapshot heads from the block manager, snapshot copies)
give exactly what the public pandas calls give, for every kind in the value matrix and hostile frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness_magic.core.cache import SessionCache, estimate_nbytes
from harness_magic.core.cache.sizing import _frame_buffers
from harness_magic.core.cache.snapshot import _column_head
from value_matrix import CASES, build, describe


def _hostile_frames() -> dict[str, pd.DataFrame]:
    wide = pd.DataFrame({f"c{i}": (np.arange(7) if i % 3 == 0 else [f"v{i}"] * 7 if i % 3 == 1 else
                                   pd.array([1, None, 3, 4, 5, 6, 7], dtype="Int64")) for i in range(300)})
    dup = pd.DataFrame(np.arange(12).reshape(4, 3), columns=["a", "a", "b"])
    dup["c"] = pd.Categorical(["x", "y", "x", "z"])
    multi = pd.DataFrame(np.ones((3, 4)), columns=pd.MultiIndex.from_product([["p", "q"], [1, 2]]))
    objects = pd.DataFrame({"blob": ["x" * 100_000, None, b"\x00" * 10], "mixed": [1, "two", 3.0]}, dtype=object)
    sparse = pd.DataFrame({"s": pd.arrays.SparseArray([0, 0, 1, 0, 2])})
    tz = pd.DataFrame({"t": pd.date_range("2024", periods=4, freq="h", tz="Europe/Paris"),
                       "iv": pd.interval_range(0, 4), "td": pd.to_timedelta([1, 2, None, 4], unit="s")})
    return {"wide": wide, "duplicate_labels": dup, "multiindex_columns": multi, "objects": objects,
            "sparse": sparse, "tz_interval_timedelta": tz, "empty": pd.DataFrame(),
            "no_rows": pd.DataFrame({"a": pd.Series([], dtype="float32"), "b": pd.Series([], dtype="str")})}


def _frames() -> dict[str, pd.DataFrame]:
    frames = {f"matrix:{name}": value for name in CASES if isinstance(value := build(name), pd.DataFrame)}
    frames.update(_hostile_frames())
    return frames


FRAMES = _frames()


@pytest.mark.parametrize("name", sorted(FRAMES))
def test_block_sizes_equal_public_memory_usage(name: str) -> None:
    frame = FRAMES[name]
    assert _frame_buffers(frame) == float(frame.memory_usage(index=True, deep=False).sum())


@pytest.mark.parametrize("name", sorted(FRAMES))
def test_column_heads_equal_series_tolist(name: str) -> None:
    sub = FRAMES[name].iloc[:5]
    for j in range(sub.shape[1]):
        assert describe(_column_head(sub, j)) == describe(sub.iloc[:, j].tolist()), (name, j)


def test_column_heads_fall_back_to_iloc_when_the_internal_fails(monkeypatch) -> None:
    from pandas.core.internals.managers import BlockManager

    frame = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "yy", None], "t": pd.date_range("2024", periods=3)})
    expected = [frame.iloc[:, j].tolist() for j in range(3)]

    def moved(self, i):
        raise AttributeError("iget_values moved")

    monkeypatch.setattr(BlockManager, "iget_values", moved)
    assert [_column_head(frame, j) for j in range(3)] == expected


def test_object_columns_still_sampled_into_the_size() -> None:
    frame = pd.DataFrame({"n": np.arange(1000), "text": ["x" * 1000] * 1000}).astype({"text": object})
    shallow = float(frame.memory_usage(index=True, deep=False).sum())
    assert estimate_nbytes(frame) > shallow + 1000 * 1000  # each 1000-char string counted, not just its pointer


def test_snapshot_is_a_deep_copy_a_caller_cannot_mutate() -> None:
    with SessionCache() as cache:
        handle = cache.put("orders", pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}))
        first = cache.snapshot(handle)
        first["sample"][0]["a"] = "INJECTED"
        first["columns"].append("evil")
        first["shape"][0] = 10**9
        first["index"]["start"] = -1
        second = cache.snapshot(handle)
        assert second["sample"][0]["a"] == 1 and second["columns"] == ["a", "b"] and second["shape"] == [2, 2]
        assert second["index"]["start"] == 0
        assert second is not first and second["sample"] is not first["sample"]
