"""Spec: values handed out by ``view`` cannot change what the cache holds (O(1) for frames and arrays)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness_magic.core.cache import BoundaryCopyError, SessionCache, boundary_copy


@pytest.fixture
def cache(tmp_path):
    with SessionCache(spill_dir=tmp_path) as c:
        yield c


def _sales() -> pd.DataFrame:
    frame = pd.DataFrame({"amount": [1.0, None, 3.0], "region": ["n", "s", "e"]},
                         index=pd.Index([10, 20, 30], name="id"))
    frame.attrs["source"] = {"table": "sales"}
    return frame


def test_setting_cells_of_a_frame_view_leaves_the_cache_unchanged(cache) -> None:
    handle = cache.put("sales", _sales())
    view = cache.view(handle)
    view.iloc[0, 0] = 99.0
    view.loc[20, "region"] = "w"
    assert cache.get(handle).equals(_sales())


def test_inplace_methods_on_a_frame_view_leave_the_cache_unchanged(cache) -> None:
    handle = cache.put("sales", _sales())
    view = cache.view(handle)
    view.dropna(inplace=True)
    view["extra"] = 1
    view.rename(columns={"amount": "amt"}, inplace=True)
    view.index.name = "other"
    view.attrs["source"]["table"] = "changed"
    pd.testing.assert_frame_equal(cache.get(handle), _sales())
    assert cache.get(handle).attrs == {"source": {"table": "sales"}}


def test_arrays_taken_from_a_frame_view_are_read_only(cache) -> None:
    view = cache.view(cache.put("sales", _sales()))
    with pytest.raises(ValueError, match="read-only"):
        view["amount"].to_numpy()[0] = 5.0


def test_frame_view_is_lazy_not_a_deep_copy(cache) -> None:
    stored = pd.DataFrame({"x": np.arange(1_000_000)})
    view = cache.view(cache.put("big", stored))
    assert np.shares_memory(view["x"].to_numpy(), stored["x"].to_numpy())


def test_series_view_mutation_leaves_the_cache_unchanged(cache) -> None:
    handle = cache.put("s", pd.Series([1, 2, 3], name="n"))
    view = cache.view(handle)
    view.iloc[0] = 100
    view.name = "renamed"
    pd.testing.assert_series_equal(cache.get(handle), pd.Series([1, 2, 3], name="n"))


def test_array_view_is_read_only_and_cannot_be_made_writeable(cache) -> None:
    handle = cache.put("arr", np.arange(6.0).reshape(2, 3))
    view = cache.view(handle)
    with pytest.raises(ValueError, match="read-only"):
        view[0, 0] = 42
    with pytest.raises(ValueError):
        view.flags.writeable = True
    with pytest.raises(ValueError):
        view.view().flags.writeable = True
    np.testing.assert_array_equal(cache.get(handle), np.arange(6.0).reshape(2, 3))


def test_array_view_shares_memory_instead_of_copying(cache) -> None:
    stored = np.zeros(1_000_000)
    view = cache.view(cache.put("arr", stored))
    assert np.shares_memory(view, stored) and view.shape == stored.shape and view.dtype == stored.dtype


def test_array_view_supports_new_arrays_from_arithmetic(cache) -> None:
    view = cache.view(cache.put("arr", np.arange(3)))
    assert (view * 2).tolist() == [0, 2, 4] and (view * 2).flags.writeable


def test_dict_and_list_view_mutation_leaves_the_cache_unchanged(cache) -> None:
    handle = cache.put("cfg", {"a": [1, 2], "b": {"c": 3}})
    view = cache.view(handle)
    view["a"].append(3)
    view["b"]["c"] = 4
    view["new"] = 1
    assert cache.get(handle) == {"a": [1, 2], "b": {"c": 3}}
    items = cache.put("items", [[1], {"k": "v"}])
    lview = cache.view(items)
    lview[0].append(2)
    lview[1]["k"] = "changed"
    lview.append("x")
    assert cache.get(items) == [[1], {"k": "v"}]


def test_frames_inside_containers_are_copied_cheaply_and_safely(cache) -> None:
    handle = cache.put("bundle", {"frame": _sales(), "array": np.zeros(3)})
    view = cache.view(handle)
    view["frame"].iloc[0, 0] = -1.0
    with pytest.raises(ValueError):
        view["array"][0] = 1.0
    assert cache.get(handle)["frame"].iloc[0, 0] == 1.0


def test_custom_mutable_objects_are_deep_copied(cache) -> None:
    class Box:
        def __init__(self) -> None:
            self.items = [1]

    handle = cache.put("box", Box())
    cache.view(handle).items.append(2)
    assert cache.get(handle).items == [1]


def test_uncopyable_values_fail_clearly_naming_the_handle(cache) -> None:
    import threading

    handle = cache.put("lock", threading.Lock())
    with pytest.raises(BoundaryCopyError, match="'lock'"):
        cache.view(handle)


def test_immutable_values_are_passed_through(cache) -> None:
    text = "x" * 10_000
    assert boundary_copy(text) is text
    assert boundary_copy(3) == 3 and boundary_copy((1, "a")) == (1, "a")
