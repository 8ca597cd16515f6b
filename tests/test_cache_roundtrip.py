"""Spec: whatever spills comes back identical (issue 3, "Exact round trips").

Every value in EDGE_CASES is put into a cache that keeps nothing hot, pushed
to disk, read back, and compared with exact equality: values, dtypes, index
(type, name, RangeIndex start/step, freq), columns, categorical order, attrs,
flags. ``assert_identical`` is shared with the checkpoint tests.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any, Callable

import numpy as np
import pandas as pd
import pandas.testing as tm
import pytest

from harness_magic.core.cache import SessionCache


def assert_identical(expected: Any, actual: Any) -> None:
    """Exact equality, strictest settings pandas and numpy offer, plus attrs and flags."""
    assert type(actual) is type(expected)
    if isinstance(expected, pd.DataFrame):
        tm.assert_frame_equal(actual, expected, check_exact=True, check_index_type=True, check_column_type=True,
                              check_categorical=True, check_freq=True, check_flags=True)
        assert actual.attrs == expected.attrs
        if isinstance(expected.index, pd.RangeIndex):
            assert (actual.index.start, actual.index.step) == (expected.index.start, expected.index.step)
    elif isinstance(expected, pd.Series):
        tm.assert_series_equal(actual, expected, check_exact=True, check_index_type=True,
                               check_series_type=True, check_categorical=True, check_freq=True, check_flags=True)
        assert actual.attrs == expected.attrs
        assert type(actual.name) is type(expected.name)
    elif isinstance(expected, np.ndarray):
        assert actual.dtype == expected.dtype and str(actual.dtype) == str(expected.dtype)
        assert actual.shape == expected.shape
        assert actual.flags.f_contiguous == expected.flags.f_contiguous
        np.testing.assert_array_equal(actual, expected, strict=True)
    else:
        assert actual == expected


def _with_attrs(df: pd.DataFrame, **attrs: Any) -> pd.DataFrame:
    df.attrs.update(attrs)
    return df


def _with_column_name(df: pd.DataFrame, name: str) -> pd.DataFrame:
    df.columns.name = name
    return df


EDGE_CASES: dict[str, Callable[[], Any]] = {
    "range_index_with_start_step_and_name": lambda: pd.DataFrame(
        {"a": [1, 2, 3]}, index=pd.RangeIndex(5, 11, 2, name="r")),
    "named_integer_index": lambda: pd.DataFrame({"a": [1.5, 2.5, 3.5]}, index=pd.Index([10, 30, 20], name="k")),
    "string_index": lambda: pd.DataFrame({"a": [1, 2]}, index=pd.Index(["x", "y"], name="key")),
    "multiindex_rows": lambda: pd.DataFrame(
        {"v": [1, 2, 3, 4]}, index=pd.MultiIndex.from_product([["a", "b"], [1, 2]], names=["l", "n"])),
    "multiindex_columns": lambda: pd.DataFrame(
        np.arange(8).reshape(2, 4),
        columns=pd.MultiIndex.from_product([["a", "b"], ["x", "y"]], names=["upper", "lower"])),
    "categorical_ordered_with_unused_categories": lambda: pd.DataFrame(
        {"c": pd.Categorical(["b", "a", None], categories=["z", "b", "a"], ordered=True)}),
    "categorical_with_integer_categories": lambda: pd.DataFrame(
        {"c": pd.Categorical([3, 1, 3], categories=[3, 2, 1])}),
    "categorical_index": lambda: pd.DataFrame(
        {"a": [1, 2]}, index=pd.CategoricalIndex(["x", "y"], categories=["y", "x", "z"], name="cat")),
    "nullable_dtypes_with_missing": lambda: pd.DataFrame({
        "i": pd.array([1, None, 3], dtype="Int64"), "b": pd.array([True, None, False], dtype="boolean"),
        "s": pd.array(["a", None, "c"], dtype="string"), "f": pd.array([1.5, None, 2.0], dtype="Float64")}),
    "default_str_dtype_with_missing": lambda: pd.DataFrame({"s": pd.Series(["a", None, "ccc"])}),
    "tz_aware_datetimes_with_nat": lambda: pd.DataFrame(
        {"t": pd.to_datetime(["2024-03-31 01:30", None, "2024-10-27 02:30"]).tz_localize("Europe/Paris",
                                                                                            ambiguous=True)}),
    "datetime_index_with_freq": lambda: pd.DataFrame(
        {"a": [1, 2, 3]}, index=pd.date_range("2024-01-01", periods=3, freq="h", tz="UTC", name="ts")),
    "datetime_seconds_resolution": lambda: pd.DataFrame(
        {"t": np.array(["2024-01-01T00:00:01", "1900-02-01"], dtype="datetime64[s]")}),
    "timedeltas_with_nat": lambda: pd.DataFrame({"d": pd.to_timedelta([1, None, 86_400], unit="s")}),
    "periods": lambda: pd.DataFrame({"p": pd.period_range("2024-01", periods=3, freq="M")}),
    "intervals_column_and_index": lambda: pd.DataFrame(
        {"i": pd.interval_range(0, 3)}, index=pd.interval_range(0.0, 1.5, periods=3, closed="left")),
    "object_column_of_mixed_types": lambda: pd.DataFrame(
        {"o": pd.Series([1, "a", 2.5, None, [1, 2], {"k": 1}, dt.date(2024, 1, 1)], dtype=object)}),
    "object_column_of_strings": lambda: pd.DataFrame({"o": pd.Series(["a", "b"], dtype=object)}),
    "decimal_objects": lambda: pd.DataFrame({"d": [decimal.Decimal("1.10"), decimal.Decimal("2.5")]}),
    "integer_column_names": lambda: pd.DataFrame({1: [1], 2: [2]}),
    "mixed_type_column_names": lambda: pd.DataFrame([[1, 2, 3]], columns=pd.Index([1, "a", 2.5], dtype=object)),
    "duplicate_column_names": lambda: pd.DataFrame([[1, 2.0, "x"]], columns=["a", "a", "b"]),
    "named_column_index": lambda: _with_column_name(pd.DataFrame({"a": [1], "b": [2]}), "fields"),
    "attrs_nested": lambda: _with_attrs(pd.DataFrame({"a": [1]}), source="sales", params={"k": [1, 2]}),
    "flags_disallow_duplicate_labels": lambda: pd.DataFrame({"a": [1]}).set_flags(allows_duplicate_labels=False),
    "empty_frame": lambda: pd.DataFrame(),
    "empty_frame_with_typed_columns": lambda: pd.DataFrame(
        {"a": pd.Series([], dtype="int64"), "b": pd.Series([], dtype="str"), "c": pd.Series([], dtype="category")}),
    "numeric_widths_nan_inf": lambda: pd.DataFrame({
        "f": np.array([1.5, np.nan, np.inf, -0.0], dtype="float32"), "u": np.array([1, 2, 3, 255], dtype="uint8"),
        "b": [True, False, True, False]}),
    "complex_numbers": lambda: pd.DataFrame({"z": np.array([1 + 2j, 3 - 1j])}),
    "sparse_column": lambda: pd.DataFrame({"s": pd.arrays.SparseArray([0, 0, 1, 0])}),
    "pyarrow_backed_dtypes": lambda: pd.DataFrame({
        "i": pd.array([1, None], dtype="int64[pyarrow]"), "s": pd.array(["x", None], dtype="large_string[pyarrow]")}),
    "series_named_with_tz_index": lambda: pd.Series(
        [1.0, None], name="price", index=pd.DatetimeIndex(["2024-01-01", "2024-01-02"], tz="Asia/Tokyo", name="day")),
    "series_with_integer_name_categorical": lambda: pd.Series(pd.Categorical(["x", "y"]), name=7),
    "series_unnamed_with_attrs": lambda: _with_attrs(pd.Series([1, 2, 3]), unit="kg"),
    "ndarray_zero_d": lambda: np.array(3.25),
    "ndarray_three_d_fortran": lambda: np.asfortranarray(np.arange(24, dtype="int16").reshape(2, 3, 4)),
    "ndarray_structured": lambda: np.array([(1, 2.5, b"ab"), (2, -1.0, b"c")],
                                           dtype=[("id", "<i4"), ("x", "<f8"), ("tag", "S2")]),
    "ndarray_big_endian": lambda: np.arange(5, dtype=">i4"),
    "ndarray_datetime_ms": lambda: np.array(["2024-01-01", "NaT"], dtype="datetime64[ms]"),
    "ndarray_of_objects": lambda: np.array([1, "a", None], dtype=object),
    "long_string": lambda: "line\n" * 10_000,
    "nested_dict": lambda: {"a": [1, 2, {"b": (3, 4)}], 5: {"c": None}},
    "bytes": lambda: bytes(range(256)) * 10,
}


@pytest.mark.parametrize("case", sorted(EDGE_CASES))
def test_value_round_trips_exactly_after_spill(case: str, tmp_path) -> None:
    original = EDGE_CASES[case]()
    expected = EDGE_CASES[case]()
    with SessionCache(hot_count=0, spill_dir=tmp_path) as cache:
        handle = cache.put("value", original)
        cache.put("newer", 0)  # pushes `value` out of the (empty) hot set
        assert cache.location(handle) == "disk"
        del original
        assert_identical(expected, cache.get(handle))


def test_edge_case_matrix_has_at_least_25_values() -> None:
    assert len(EDGE_CASES) >= 25


def _storage_of(value: Any, tmp_path) -> str | None:
    with SessionCache(hot_count=0, spill_dir=tmp_path) as cache:
        handle = cache.put("value", value)
        cache.put("newer", 0)
        return next(e.storage for e in cache.entries() if e.name == handle)


def test_plain_frames_and_series_spill_to_arrow_ipc(tmp_path) -> None:
    frame = pd.DataFrame({"a": [1, 2], "s": ["x", "y"], "t": pd.date_range("2024", periods=2, tz="UTC")})
    assert _storage_of(frame, tmp_path) == "arrow"
    assert _storage_of(frame["a"], tmp_path) == "arrow"


def test_frames_parquet_cannot_hold_use_arrow_ipc_too(tmp_path) -> None:
    assert _storage_of(EDGE_CASES["datetime_seconds_resolution"](), tmp_path) == "arrow"


def test_arrays_spill_to_npy(tmp_path) -> None:
    assert _storage_of(np.zeros((2, 3)), tmp_path) == "npy"
    assert _storage_of(EDGE_CASES["ndarray_structured"](), tmp_path) == "npy"


def test_object_data_is_stored_as_tagged_json_cells(tmp_path) -> None:
    assert _storage_of(EDGE_CASES["object_column_of_mixed_types"](), tmp_path) in ("parquet", "arrow")
    assert _storage_of(EDGE_CASES["ndarray_of_objects"](), tmp_path) == "json"


def test_large_frame_with_several_row_groups_round_trips(tmp_path) -> None:
    n = 1_200_000  # above Parquet's default row-group size, so dictionaries span groups
    expected = pd.DataFrame({
        "c": pd.Categorical.from_codes(np.arange(n) % 2, categories=["q", "z", "unused"], ordered=True),
        "x": np.arange(n, dtype="int32"),
    })
    with SessionCache(hot_count=0, spill_dir=tmp_path) as cache:
        cache.put("big", expected.copy())
        cache.put("newer", 0)
        assert_identical(expected, cache.get("big"))
