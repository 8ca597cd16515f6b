"""Spec: handles are valid identifiers chosen by the cache, never a silent overwrite."""

from __future__ import annotations

import keyword

import pytest

from harness_magic.core.cache import SessionCache, UnknownHandleError, resolve_handle_name, sanitize_identifier


@pytest.fixture
def cache(tmp_path):
    with SessionCache(spill_dir=tmp_path) as c:
        yield c


def test_put_returns_the_preferred_name_when_free(cache) -> None:
    assert cache.put("sales_orders", 1) == "sales_orders"


def test_repeated_puts_are_suffixed_never_overwritten(cache) -> None:
    names = [cache.put("sales_orders", i) for i in range(3)]
    assert names == ["sales_orders", "sales_orders_2", "sales_orders_3"]
    assert [cache.get(n) for n in names] == [0, 1, 2]


@pytest.mark.parametrize("preferred", ["Sales Orders!", "2024 report", "class", "match", "", "x" * 500, "naïve-ü"])
def test_handles_are_valid_non_keyword_identifiers(preferred) -> None:
    name = sanitize_identifier(preferred)
    assert name.isidentifier() and not keyword.iskeyword(name) and not keyword.issoftkeyword(name)


def test_resolve_handle_name_skips_taken_suffixes() -> None:
    assert resolve_handle_name("a", {"a", "a_2"}) == "a_3"


def test_get_of_unknown_handle_names_it_and_lists_known_handles(cache) -> None:
    cache.put("orders", 1)
    with pytest.raises(UnknownHandleError, match=r"no handle 'ordrs'; known handles: orders"):
        cache.get("ordrs")


def test_retire_forgets_the_handle_and_frees_its_name(cache) -> None:
    cache.put("orders", 1)
    cache.retire("orders")
    assert "orders" not in cache and len(cache) == 0
    assert cache.put("orders", 2) == "orders"


def test_names_are_listed_in_creation_order(cache) -> None:
    for name in ["b", "a", "c"]:
        cache.put(name, 0)
    cache.get("b")
    assert cache.names() == ["b", "a", "c"]


def test_snapshot_returned_is_a_copy(cache) -> None:
    cache.put("d", {"k": 1})
    cache.snapshot("d")["type"] = "changed"
    assert cache.snapshot("d")["type"] == "dict"


def test_entries_describe_every_handle_for_agent_vars(cache) -> None:
    import pandas as pd

    cache.put("orders", pd.DataFrame({"a": [1, 2]}), turn=2, tool="sql_query")
    cache.put("note", "x" * 5000)
    orders, note = cache.entries()
    assert (orders.name, orders.type, orders.shape, orders.location, orders.turn, orders.tool) == \
        ("orders", "dataframe", [2, 1], "memory", 2, "sql_query")
    assert orders.size_bytes > 0 and note.shape == [5000] and note.type == "str"


def test_clear_drops_every_handle(cache) -> None:
    cache.put("a", 1)
    cache.clear()
    assert cache.names() == []


def test_invalid_bounds_are_rejected_naming_the_value() -> None:
    with pytest.raises(ValueError, match="hot_count"):
        SessionCache(hot_count=-1)
    with pytest.raises(ValueError, match="memory_budget_bytes"):
        SessionCache(memory_budget_bytes=1.5)
