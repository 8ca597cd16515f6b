"""Spec: snapshots are ``ls`` + ``head`` — structured, valid JSON, bounded, size independent."""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest

from harness_magic.core.cache import SNAPSHOT_MAX_BYTES, make_snapshot
from harness_magic.core.cache.snapshot import SNAPSHOT_MAX_COLUMNS, SNAPSHOT_SAMPLE_ROWS


def _json(snapshot: dict) -> str:
    return json.dumps(snapshot, allow_nan=False)


def test_frame_snapshot_has_type_shape_columns_dtypes_index_and_sample_rows() -> None:
    frame = pd.DataFrame({"order_id": ["A1", "A2", "A3", "A4", "A5", "A6"], "amount": [1.5, 2, 3, 4, 5, 6]},
                         index=pd.Index([100, 101, 102, 103, 104, 105], name="row"))
    snap = make_snapshot(frame)
    assert snap["type"] == "dataframe" and snap["shape"] == [6, 2]
    assert snap["columns"] == ["order_id", "amount"]
    assert snap["dtypes"] == {"order_id": "str", "amount": "float64"}
    assert snap["index"] == {"type": "Index", "name": "row", "dtype": "int64", "head": [100, 101, 102, 103, 104]}
    assert len(snap["sample"]) == SNAPSHOT_SAMPLE_ROWS
    assert snap["sample"][0] == {"order_id": "A1", "amount": 1.5}


def test_range_index_is_described_by_start_and_step() -> None:
    snap = make_snapshot(pd.DataFrame({"a": range(3)}, index=pd.RangeIndex(10, 16, 2)))
    assert snap["index"] == {"type": "RangeIndex", "name": None, "dtype": "int64", "start": 10, "step": 2}


def test_series_snapshot_has_name_dtype_index_and_sample() -> None:
    snap = make_snapshot(pd.Series([3, 1, 2], name="qty", index=pd.date_range("2024-01-01", periods=3, freq="D")))
    assert snap["type"] == "series" and snap["name"] == "qty" and snap["dtype"] == "int64"
    assert snap["shape"] == [3] and snap["sample"] == [3, 1, 2]
    assert snap["index"]["type"] == "DatetimeIndex" and snap["index"]["freq"] == "D"
    assert snap["index"]["head"][0] == "2024-01-01"


@pytest.mark.parametrize("array, shape", [
    (np.array(2.5), []), (np.arange(5), [5]), (np.zeros((2, 3, 4), dtype="float32"), [2, 3, 4]),
    (np.zeros((1, 1, 1, 1, 2)), [1, 1, 1, 1, 2])])
def test_array_snapshot_has_dtype_shape_and_first_values_for_any_rank(array, shape) -> None:
    snap = make_snapshot(array)
    assert snap["type"] == "ndarray" and snap["shape"] == shape and snap["dtype"] == str(array.dtype)
    assert snap["ndim"] == array.ndim
    if array.ndim == 0:
        assert snap["value"] == 2.5
    else:
        assert snap["first_values"] == array.ravel()[:10].tolist()


def test_structured_array_snapshot_lists_fields() -> None:
    arr = np.array([(1, 2.5)], dtype=[("id", "<i4"), ("x", "<f8")])
    snap = make_snapshot(arr)
    assert snap["fields"] == {"id": "int32", "x": "float64"} and snap["first_values"] == [[1, 2.5]]


def test_dict_snapshot_has_key_count_and_first_keys() -> None:
    snap = make_snapshot({f"k{i}": i for i in range(100)})
    assert snap["type"] == "dict" and snap["length"] == 100
    assert snap["keys"][:2] == ["k0", "k1"] and snap["keys_omitted"] == 80


def test_string_snapshot_has_length_head_and_tail() -> None:
    text = "HEADER\n" + "x" * 100_000 + "\nTOTAL 42"
    snap = make_snapshot(text)
    assert snap["type"] == "str" and snap["length"] == len(text)
    assert snap["head"].startswith("HEADER") and snap["tail"].endswith("TOTAL 42")


def test_missing_and_non_finite_values_become_null_or_strings() -> None:
    frame = pd.DataFrame({
        "f": [np.nan, np.inf, -np.inf], "i": pd.array([None, 1, 2], dtype="Int64"),
        "t": pd.to_datetime([None, "2024-01-01", None]), "s": pd.array([None, "a", "b"], dtype="string"),
        "td": pd.to_timedelta([None, 1, 2], unit="s")})
    snap = make_snapshot(frame)
    _json(snap)
    assert snap["sample"][0] == {"f": None, "i": None, "t": None, "s": None, "td": None}
    assert snap["sample"][1]["f"] == "inf" and snap["sample"][2]["f"] == "-inf"


def test_extension_dtypes_are_named_and_sampled() -> None:
    frame = pd.DataFrame({
        "s": pd.array(["a", "b"], dtype="string"), "i": pd.array([1, None], dtype="Int64"),
        "b": pd.array([True, None], dtype="boolean"), "c": pd.Categorical(["x", "y"], categories=["y", "x"],
                                                                           ordered=True),
        "t": pd.date_range("2024-01-01", periods=2, tz="Europe/Paris"), "p": pd.period_range("2024Q1", periods=2, freq="Q"),
        "iv": pd.interval_range(0, 2)})
    snap = make_snapshot(frame)
    assert snap["dtypes"] == {"s": "string", "i": "Int64", "b": "boolean", "c": "category",
                              "t": "datetime64[us, Europe/Paris]", "p": "period[Q-DEC]",
                              "iv": "interval[int64, right]"}
    assert snap["categories"]["c"] == {"count": 2, "ordered": True, "head": ["y", "x"]}
    assert snap["sample"][0] == {"s": "a", "i": 1, "b": True, "c": "x", "t": "2024-01-01 00:00+01:00",
                                 "p": "2024Q1", "iv": "(0, 1]"}


def test_multiindex_rows_and_columns_are_described() -> None:
    columns = pd.MultiIndex.from_product([["sales", "cost"], ["q1", "q2"]], names=["metric", "quarter"])
    rows = pd.MultiIndex.from_tuples([("eu", 1), ("us", 2)], names=["region", "store"])
    snap = make_snapshot(pd.DataFrame(np.arange(8).reshape(2, 4), index=rows, columns=columns))
    assert snap["columns"][0] == ["sales", "q1"]
    assert snap["column_index"]["type"] == "MultiIndex" and snap["column_index"]["names"] == ["metric", "quarter"]
    assert snap["index"]["names"] == ["region", "store"] and snap["index"]["head"] == [["eu", 1], ["us", 2]]
    assert snap["sample"][0]["('sales', 'q1')"] == 0
    _json(snap)


def test_duplicate_column_names_keep_every_sample_value() -> None:
    snap = make_snapshot(pd.DataFrame([[1, 2]], columns=["a", "a"]))
    assert snap["sample_columns"] == ["a", "a"] and snap["sample"] == [[1, 2]]


def test_snapshot_of_5000_column_frame_stays_under_the_byte_bound() -> None:
    frame = pd.DataFrame(np.zeros((3, 5000)), columns=[f"a_rather_long_column_name_{i}" for i in range(5000)])
    snap = make_snapshot(frame)
    assert len(_json(snap)) <= SNAPSHOT_MAX_BYTES
    assert snap["shape"] == [3, 5000] and snap["columns_omitted"] == 5000 - len(snap["columns"])
    assert len(snap["columns"]) <= SNAPSHOT_MAX_COLUMNS


def test_snapshot_with_1mb_string_cells_stays_under_the_byte_bound() -> None:
    big = "é" * 1_000_000
    frame = pd.DataFrame({f"c{i}": [big] * 5 for i in range(20)}, index=pd.Index([big[:-i] for i in range(1, 6)]))
    snap = make_snapshot(frame)
    assert len(_json(snap)) <= SNAPSHOT_MAX_BYTES
    assert len(json.dumps(snap, ensure_ascii=False).encode()) <= SNAPSHOT_MAX_BYTES
    assert snap["sample"][0]["c0"].startswith("éé")


@pytest.mark.parametrize("value", [
    pd.DataFrame({"x" * 1_000_000: [1]}),
    pd.DataFrame({"n": [[list(range(1000))] * 1000]}, dtype=object),
    {("k" * 100_000) + str(i): "v" * 100_000 for i in range(50)},
    [10 ** 5000, "y" * 1_000_000, b"z" * 1_000_000],
    np.array(["w" * 100_000] * 20),
    pd.Series(["v" * 1_000_000] * 3, name="n" * 1_000_000),
], ids=["huge_column_name", "nested_lists_in_cells", "dict_of_long_keys", "huge_int_and_text", "wide_unicode_array",
        "long_series_name"])
def test_snapshot_is_valid_json_under_the_bound_for_pathological_values(value) -> None:
    assert len(_json(make_snapshot(value))) <= SNAPSHOT_MAX_BYTES


def test_unknown_objects_get_a_bounded_repr_even_when_repr_fails() -> None:
    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    snap = make_snapshot(Broken())
    assert "Broken" in snap["repr"]
    assert len(_json(make_snapshot(type("Huge", (), {"__repr__": lambda self: "r" * 10**6})()))) <= SNAPSHOT_MAX_BYTES


def test_snapshot_time_does_not_grow_with_rows() -> None:
    def frame(n: int) -> pd.DataFrame:
        return pd.DataFrame({"i": np.arange(n), "f": np.arange(n) * 0.5,
                             "o": pd.Series(np.array(["text"], dtype=object)).repeat(n).to_numpy()})

    def best(value) -> float:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            make_snapshot(value)
            times.append(time.perf_counter() - start)
        return min(times)

    small, large = best(frame(100)), best(frame(3_000_000))
    assert large < 5 * small + 0.02, (small, large)
