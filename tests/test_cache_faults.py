"""Spec: disk faults never lose a value; unreadable spill files fail clearly, naming the handle."""

from __future__ import annotations

import contextlib
import resource
import signal

import numpy as np
import pandas as pd
import pytest

from harness_magic.core.cache import CacheError, SessionCache, SpillReadError, SpillWarning, UnknownHandleError


def _frame() -> pd.DataFrame:
    return pd.DataFrame({"x": np.arange(50_000)})


@contextlib.contextmanager
def _disk_full(max_file_bytes: int = 1_000):
    """Real EFBIG errors from the OS: files may not grow past ``max_file_bytes``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_unwritable_spill_directory_keeps_the_value_in_memory_with_a_warning(tmp_path) -> None:
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("")
    with SessionCache(hot_count=0, spill_dir=blocker / "spill") as cache:
        a = cache.put("a", _frame())
        with pytest.warns(SpillWarning, match="'a'.*stays in memory"):
            cache.put("b", 1)
        assert cache.location(a) == "memory"
        with pytest.warns(SpillWarning, match="'b'"):
            assert cache.get(a).equals(_frame())


def test_full_disk_keeps_the_value_in_memory_with_a_warning(tmp_path) -> None:
    with SessionCache(hot_count=2, spill_dir=tmp_path) as cache:
        a = cache.put("a", _frame())
        arr = cache.put("arr", np.ones(50_000))
        with _disk_full(), pytest.warns(SpillWarning) as caught:
            cache.put("c", 1)
        assert {w.message.args[0].split("'")[1] for w in caught} == {"a", "arr"}
        assert cache.get(a).equals(_frame()) and cache.get(arr).sum() == 50_000
        assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")], "no half-written files"


def test_value_no_format_can_hold_stays_in_memory_with_a_warning(tmp_path) -> None:
    with SessionCache(hot_count=0, spill_dir=tmp_path) as cache:
        fn = cache.put("fn", lambda x: x + 1)
        with pytest.warns(SpillWarning, match="'fn'.*no format can hold it"):
            cache.put("b", 1)
        assert cache.get(fn)(1) == 2


def test_failed_spill_warns_once_per_handle(tmp_path, recwarn) -> None:
    with SessionCache(hot_count=0, spill_dir=tmp_path) as cache:
        cache.put("fn", lambda: None)
        for i in range(3):
            cache.put(f"n{i}", i)
        assert len([w for w in recwarn if issubclass(w.category, SpillWarning)]) == 1


def _spilled(cache: SessionCache, name: str, value) -> str:
    handle = cache.put(name, value)
    cache.put("pusher", 0)
    assert cache.location(handle) == "disk"
    return handle


@pytest.mark.parametrize("value", [_frame(), np.arange(10), {"k": "v"}], ids=["parquet", "npy", "pickle"])
def test_corrupted_spill_file_raises_an_error_naming_the_handle(tmp_path, value) -> None:
    with SessionCache(hot_count=0, spill_dir=tmp_path) as cache:
        handle = _spilled(cache, "victim", value)
        for path in tmp_path.glob("victim-*"):
            path.write_bytes(b"garbage" * 3)
        with pytest.raises(SpillReadError, match="'victim'"):
            cache.get(handle)


def test_deleted_spill_file_raises_an_error_naming_the_handle(tmp_path) -> None:
    with SessionCache(hot_count=0, spill_dir=tmp_path) as cache:
        handle = _spilled(cache, "victim", _frame())
        for path in tmp_path.glob("victim-*"):
            path.unlink()
        with pytest.raises(SpillReadError, match="'victim'") as info:
            cache.view(handle)
        assert info.value.handle == "victim"


def test_other_handles_keep_working_after_a_corrupt_file(tmp_path) -> None:
    with SessionCache(hot_count=0, spill_dir=tmp_path) as cache:
        good = _spilled(cache, "good", _frame())
        bad = _spilled(cache, "bad", _frame())
        for path in tmp_path.glob("bad-*"):
            path.write_bytes(b"\x00")
        with pytest.raises(SpillReadError):
            cache.get(bad)
        assert cache.get(good).equals(_frame())
        assert cache.snapshot(bad)["shape"] == [50_000, 1]
        cache.retire(bad)
        assert bad not in cache and good in cache


def test_cache_errors_are_key_errors_with_plain_messages(tmp_path) -> None:
    with SessionCache(spill_dir=tmp_path) as cache:
        cache.put("sales", 1)
        with pytest.raises(KeyError) as info:
            cache.get("slaes")
        assert isinstance(info.value, UnknownHandleError) and isinstance(info.value, CacheError)
        assert str(info.value) == "no handle 'slaes'; known handles: sales"
