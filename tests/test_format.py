"""Spec: one formatter for every tool result; small things inline, large or structured things become handles."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import numpy as np
import pandas as pd
import pytest

from harness_magic.core.cache import SNAPSHOT_MAX_BYTES, SessionCache
from harness_magic.core.execution.format import (
    INLINE_JSON_MAX_CHARS,
    INLINE_MAX_ITEMS,
    INLINE_STR_MAX_CHARS,
    REPR_MAX_CHARS,
    format_exception,
    format_tool_output,
    truncate_middle,
)
from harness_magic.core.execution.tools import ToolOutput


@pytest.fixture
def cache(tmp_path):
    with SessionCache(spill_dir=tmp_path) as c:
        yield c


def _snapshot_in(text: str) -> dict:
    return json.loads(text.split("Snapshot: ", 1)[1])


@pytest.mark.parametrize("value", [
    pd.DataFrame({"a": [1]}), pd.Series([1.0]), np.zeros(1), np.array(5), pd.Index([1, 2]),
    pd.array([1, None], dtype="Int64")], ids=["frame", "series", "array", "array_0d", "index", "extension_array"])
def test_frames_series_and_arrays_always_become_handles(cache, value) -> None:
    out = format_tool_output(value, cache, "sales_orders")
    assert out.handles == ["sales_orders"] and "sales_orders" in cache
    assert out.text.startswith("Saved as `sales_orders`\nSnapshot: ")
    assert not out.is_error


def test_handle_text_carries_the_snapshot_json(cache) -> None:
    out = format_tool_output(pd.DataFrame({"amount": [1.5, 2.5]}), cache, "orders")
    assert _snapshot_in(out.text) == cache.snapshot("orders")


def test_taken_preferred_name_is_suffixed_and_reported(cache) -> None:
    format_tool_output(pd.DataFrame({"a": [1]}), cache, "weekly summary")
    out = format_tool_output(pd.DataFrame({"a": [2]}), cache, "weekly summary")
    assert out.handles == ["weekly_summary_2"]
    assert out.text.startswith("Saved as `weekly_summary_2` (`weekly_summary` was taken)")


def test_turn_and_tool_are_recorded_as_provenance(cache) -> None:
    format_tool_output(np.zeros(3), cache, "arr", turn=4, tool="sql_query")
    assert (cache.entries()[0].turn, cache.entries()[0].tool) == (4, "sql_query")


@pytest.mark.parametrize("value, text", [
    (None, "None"), (True, "True"), (42, "42"), (2.5, "2.5"), (np.int64(7), "7"), (np.float32(0.5), "0.5"),
    (decimal.Decimal("1.10"), "1.10"), (dt.date(2024, 1, 2), "2024-01-02"), (pd.Timestamp("2024-01-02"),
                                                                               "2024-01-02 00:00:00")])
def test_scalars_are_inlined(cache, value, text) -> None:
    assert format_tool_output(value, cache, "x") == ToolOutput(text=text)
    assert len(cache) == 0


def test_short_strings_are_inlined_verbatim(cache) -> None:
    text = "x" * INLINE_STR_MAX_CHARS
    assert format_tool_output(text, cache, "note") == ToolOutput(text=text)


def test_long_strings_are_cached_with_head_and_tail(cache) -> None:
    text = "BEGIN " + "x" * INLINE_STR_MAX_CHARS + " END"
    out = format_tool_output(text, cache, "report")
    assert out.handles == ["report"] and cache.get("report") == text
    snap = _snapshot_in(out.text)
    assert snap["length"] == len(text) and snap["head"].startswith("BEGIN") and snap["tail"].endswith("END")


def test_small_dicts_and_lists_are_inlined_as_json(cache) -> None:
    out = format_tool_output({"rows": 3, "ok": True, "ratio": float("nan"), "tags": ("a", "b")}, cache, "x")
    assert json.loads(out.text) == {"rows": 3, "ok": True, "ratio": None, "tags": ["a", "b"]}
    assert format_tool_output([1, 2, 3], cache, "x").text == "[1, 2, 3]"
    assert len(cache) == 0


def test_large_dicts_and_lists_are_cached(cache) -> None:
    big = {f"key_{i}": i for i in range(INLINE_JSON_MAX_CHARS)}
    out = format_tool_output(big, cache, "lookup")
    assert out.handles == ["lookup"] and _snapshot_in(out.text)["length"] == len(big)


def test_huge_lists_are_cached_without_serialising_them(cache, monkeypatch) -> None:
    huge = list(range(5_000_000))
    longest = [0]  # the most items of any list or dict serialised to JSON during the call
    dumps = json.dumps

    def measured(value, *args, **kwargs):
        if isinstance(value, (list, dict)):
            longest[0] = max(longest[0], len(value))
        return dumps(value, *args, **kwargs)

    monkeypatch.setattr(json, "dumps", measured)
    out = format_tool_output(huge, cache, "ids")
    assert out.handles == ["ids"]
    assert longest[0] <= INLINE_MAX_ITEMS, "no more than the inline budget of items is ever serialised"


def test_containers_holding_frames_are_cached(cache) -> None:
    out = format_tool_output({"frame": pd.DataFrame({"a": [1]})}, cache, "bundle")
    assert out.handles == ["bundle"]


def test_bytes_short_inline_long_cached(cache) -> None:
    assert format_tool_output(b"abc", cache, "b").text == "b'abc'"
    assert format_tool_output(b"x" * 10_000, cache, "blob").handles == ["blob"]


def test_exceptions_become_readable_error_results(cache) -> None:
    out = format_tool_output(ValueError("amount must be positive"), cache, "x")
    assert out == ToolOutput(text="ValueError: amount must be positive", is_error=True)


def test_unknown_objects_fall_back_to_a_truncated_repr(cache) -> None:
    class Model:
        def __repr__(self) -> str:
            return "Model(" + "w" * 100_000 + ")"

    out = format_tool_output(Model(), cache, "m")
    assert out.text.startswith("Model(www") and out.text.endswith("ww)")
    assert len(out.text) <= REPR_MAX_CHARS + 60 and len(cache) == 0


def test_tool_outputs_pass_through_unchanged(cache) -> None:
    done = ToolOutput(text="already formatted", handles=["h"])
    assert format_tool_output(done, cache, "x") is done


def _frame(rows: int) -> pd.DataFrame:
    return pd.DataFrame({
        "id": np.arange(rows), "amount": np.arange(rows) * 0.25,
        "when": pd.date_range("2024-01-01", periods=rows, freq="s", tz="UTC"),
        "region": pd.Categorical.from_codes(np.arange(rows) % 4, ["north", "south", "east", "west"]),
        "flag": np.arange(rows) % 3 == 0})


def test_text_for_10m_row_frame_is_no_larger_than_for_100_rows_except_the_row_count(tmp_path) -> None:
    with SessionCache(spill_dir=tmp_path / "a") as small_cache, SessionCache(spill_dir=tmp_path / "b") as big_cache:
        small = format_tool_output(_frame(100), small_cache, "events").text
        big = format_tool_output(_frame(10_000_000), big_cache, "events").text
    assert big.replace("[10000000, 5]", "[100, 5]") == small, "only the row count differs"
    assert len(big) - len(small) == len("10000000") - len("100")
    assert len(small) <= SNAPSHOT_MAX_BYTES + 100


def test_truncate_middle_keeps_head_and_tail_within_the_limit() -> None:
    text = "A" * 5_000 + "Z" * 5_000
    cut = truncate_middle(text, 1_000)
    assert cut.startswith("AAA") and cut.endswith("ZZZ") and "characters omitted" in cut
    assert len(cut) <= 1_000 + 60
    assert truncate_middle("short", 1_000) == "short"


def test_format_exception_is_bounded() -> None:
    assert len(format_exception(RuntimeError("e" * 100_000))) <= INLINE_STR_MAX_CHARS + 60
