"""Spec: the hot set is bounded by count and bytes; LRU values spill and hydrate transparently."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from harness_magic.core.cache import DEFAULT_HOT_COUNT, SessionCache


def _frame(i: int, rows: int = 10) -> pd.DataFrame:
    return pd.DataFrame({"i": np.full(rows, i), "x": np.arange(rows, dtype="float64")})


def _locations(cache: SessionCache) -> dict[str, str]:
    return {e.name: e.location for e in cache.entries()}


def test_default_hot_set_keeps_ten_handles_in_memory(tmp_path) -> None:
    assert DEFAULT_HOT_COUNT == 10
    with SessionCache(spill_dir=tmp_path) as cache:
        names = [cache.put(f"frame_{i}", _frame(i)) for i in range(12)]
        assert [cache.location(n) for n in names] == ["disk"] * 2 + ["memory"] * 10


def test_least_recently_used_handles_spill_by_count(tmp_path) -> None:
    with SessionCache(hot_count=2, spill_dir=tmp_path) as cache:
        a, b, c = (cache.put(n, _frame(i)) for i, n in enumerate("abc"))
        assert _locations(cache) == {a: "disk", b: "memory", c: "memory"}


def test_least_recently_used_handles_spill_by_bytes(tmp_path) -> None:
    one_mb = 1_000_000
    with SessionCache(hot_count=100, memory_budget_bytes=int(2.5 * one_mb), spill_dir=tmp_path) as cache:
        names = [cache.put(f"arr_{i}", np.zeros(one_mb // 8)) for i in range(4)]
        assert [cache.location(n) for n in names] == ["disk", "disk", "memory", "memory"]
        assert cache.usage()["memory_bytes"] <= 2.5 * one_mb


def test_get_hydrates_transparently_and_makes_the_handle_recent(tmp_path) -> None:
    with SessionCache(hot_count=2, spill_dir=tmp_path) as cache:
        a, b, c = (cache.put(n, _frame(i)) for i, n in enumerate("abc"))
        assert cache.get(a)["i"].iloc[0] == 0
        assert _locations(cache) == {a: "memory", b: "disk", c: "memory"}


def test_view_counts_as_use_for_recency(tmp_path) -> None:
    with SessionCache(hot_count=2, spill_dir=tmp_path) as cache:
        a, b = cache.put("a", _frame(0)), cache.put("b", _frame(1))
        cache.view(a)
        c = cache.put("c", _frame(2))
        assert _locations(cache) == {a: "memory", b: "disk", c: "memory"}


def test_views_hydrates_several_handles_without_spilling_each_other(tmp_path) -> None:
    with SessionCache(hot_count=1, spill_dir=tmp_path) as cache:
        names = [cache.put(f"f{i}", _frame(i)) for i in range(3)]
        values = cache.views(names)
        assert [values[n]["i"].iloc[0] for n in names] == [0, 1, 2]


def test_copy_to_puts_boundary_copies_into_another_cache_and_counts_as_use(tmp_path) -> None:
    with SessionCache(hot_count=2, spill_dir=tmp_path / "p") as parent, \
            SessionCache(spill_dir=tmp_path / "s") as sub:
        a, b = parent.put("sales", _frame(0)), parent.put("other", _frame(1))
        sub.put("sales", 1)
        mapping = parent.copy_to(sub, [a])
        parent.put("newest", _frame(2))
        assert mapping == {"sales": "sales_2"}
        assert _locations(parent)["other"] == "disk" and _locations(parent)["sales"] == "memory"
        sub.get("sales_2").iloc[0, 0] = 99
        assert parent.get("sales").iloc[0, 0] == 0


def test_listing_and_snapshots_never_hydrate(tmp_path) -> None:
    with SessionCache(hot_count=0, spill_dir=tmp_path) as cache:
        a = cache.put("a", _frame(0))
        cache.put("b", 1)
        assert cache.location(a) == "disk"
        cache.names(), cache.snapshot(a), cache.metadata(), cache.entries(), cache.usage(), a in cache, len(cache)
        assert cache.location(a) == "disk"


def test_spilled_handle_keeps_its_snapshot(tmp_path) -> None:
    with SessionCache(hot_count=0, spill_dir=tmp_path) as cache:
        a = cache.put("a", _frame(0, rows=3))
        before = cache.snapshot(a)
        cache.put("b", 1)
        assert cache.snapshot(a) == before and before["shape"] == [3, 2]


def test_rehydrated_value_spills_again_without_rewriting_its_file(tmp_path) -> None:
    with SessionCache(hot_count=1, spill_dir=tmp_path) as cache:
        a = cache.put("a", _frame(0))
        cache.put("b", _frame(1))
        files = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
        cache.get(a)  # hydrate a, spill b
        cache.get("b")  # hydrate b, spill a again: its file is reused
        assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir() if p.name in files} == files


def test_value_larger_than_budget_stays_in_memory_while_most_recent(tmp_path) -> None:
    with SessionCache(memory_budget_bytes=1_000, spill_dir=tmp_path) as cache:
        big = cache.put("big", np.zeros(10_000))
        assert cache.location(big) == "memory"
        cache.put("next", np.zeros(10_000))
        assert cache.location(big) == "disk"


def test_retire_removes_the_handle_and_its_spill_file(tmp_path) -> None:
    with SessionCache(hot_count=0, spill_dir=tmp_path) as cache:
        a = cache.put("a", _frame(0))
        cache.put("b", 1)
        assert any(p.name.startswith("a-") for p in tmp_path.iterdir())
        cache.retire(a)
        assert a not in cache
        assert not any(p.name.startswith("a-") for p in tmp_path.iterdir())


def test_close_removes_spill_files(tmp_path) -> None:
    cache = SessionCache(hot_count=0, spill_dir=tmp_path)
    cache.put("a", _frame(0))
    cache.put("b", np.zeros(3))
    cache.put("c", 1)
    assert list(tmp_path.iterdir())
    cache.close()
    assert list(tmp_path.iterdir()) == []


def test_default_spill_directory_is_private_and_removed_on_close(tmp_path, monkeypatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp puts the private directory
    cache = SessionCache(hot_count=0)
    cache.put("a", _frame(0))
    cache.put("b", 1)
    [private] = list(tmp_path.iterdir())
    assert private.name.startswith(f"harness-cache-{os.getpid()}-") and list(private.iterdir())
    cache.close()
    assert list(tmp_path.iterdir()) == []


def test_metadata_reports_location_and_storage_but_no_payload(tmp_path) -> None:
    with SessionCache(hot_count=0, spill_dir=tmp_path) as cache:
        cache.put("secret_frame", pd.DataFrame({"token": ["sk-very-secret"]}), turn=3, tool="sql")
        cache.put("b", 1)
        row = cache.metadata()[0]
        assert row == {"name": "secret_frame", "type": "dataframe", "shape": [1, 1], "size_bytes": row["size_bytes"],
                       "location": "disk", "storage": "arrow", "turn": 3, "tool": "sql"}
        assert "sk-very-secret" not in repr(cache.metadata())


def test_size_estimate_is_fast_for_object_columns_and_close_for_numeric(tmp_path) -> None:
    from harness_magic.core.cache import estimate_nbytes

    numeric = pd.DataFrame({"a": np.zeros(1000), "b": np.zeros(1000, dtype="int32")})
    assert estimate_nbytes(numeric) == numeric.memory_usage(index=True, deep=False).sum()
    objects = pd.DataFrame({"o": pd.Series(["x" * 100] * 1000, dtype=object)})
    deep = objects.memory_usage(index=True, deep=True).sum()
    assert 0.8 * deep <= estimate_nbytes(objects) <= 1.2 * deep


def test_interpreter_call_hydrates_only_the_handles_its_code_names(tmp_path) -> None:
    from harness_magic.core.execution.interpreter import InProcessInterpreter, make_interpreter_tools

    with SessionCache(hot_count=0, spill_dir=tmp_path) as cache:
        used, unused = cache.put("used", _frame(1)), cache.put("unused", _frame(2))
        cache.put("pusher", 0)
        tool = {t.name: t for t in make_interpreter_tools(cache, InProcessInterpreter())}["python_interpreter"]
        out = tool.handler(code="int(used['i'].sum())")
        assert out.text.strip() == "10"
        assert cache.location(unused) == "disk"
        assert cache.get(used)["i"].sum() == 10


def test_parquet_spill_files_dictionary_encode_text_only(tmp_path) -> None:
    """Numbers are written plain (dictionary encoding them costs ~2.5x the frame in encoder memory)."""
    import pyarrow.parquet as pq

    from harness_magic.core.cache.spill import read_value, write_value

    frame = pd.DataFrame({"n": np.arange(5000) % 7, "x": np.arange(5000) / 3, "label": ["north", "south"] * 2500,
                          "when": pd.date_range("2024", periods=5000, freq="min")})
    record = write_value(frame, tmp_path / "f", "parquet")  # the fallback format; frames go to Arrow IPC first
    assert record.format == "parquet"
    meta = pq.ParquetFile(record.path).metadata
    encodings = {meta.schema.column(i).name: set(meta.row_group(0).column(i).encodings)
                 for i in range(meta.num_columns)}
    assert not any("DICTIONARY" in e for e in encodings["c0"] | encodings["c1"] | encodings["c3"])
    assert any("DICTIONARY" in e for e in encodings["c2"])
    pd.testing.assert_frame_equal(read_value(record), frame, check_exact=True)


@pytest.mark.parametrize("rows", [1000, 3_000_000], ids=["one-stripe", "parallel-stripes"])
def test_a_spill_file_is_decoded_from_the_bytes_its_digest_was_checked_on(tmp_path, monkeypatch, rows) -> None:
    """One read: the digest is checked on the very buffer that is decoded, and a file changing size is refused."""
    import pytest

    from harness_magic.core.cache import digest
    from harness_magic.core.cache.digest import SpillIntegrityError
    from harness_magic.core.cache.spill import read_value, write_value

    frame = pd.DataFrame({"x": np.arange(float(rows))})
    record = write_value(frame, tmp_path / "f")
    assert record.format == "arrow" and record.algorithm == "sha256-stripes"
    forged = write_value(pd.DataFrame({"x": -np.arange(float(rows))}), tmp_path / "g").path.read_bytes()
    real_fill = digest._fill_and_digest

    def swap_after_check(*args):  # another process replaces the file right after its digest was computed
        checked = real_fill(*args)
        record.path.write_bytes(forged)
        return checked

    monkeypatch.setattr(digest, "_fill_and_digest", swap_after_check)
    pd.testing.assert_frame_equal(read_value(record), frame, check_exact=True)
    monkeypatch.undo()
    with pytest.raises(SpillIntegrityError):  # and the forged file itself is refused
        read_value(record)
    record = write_value(frame, tmp_path / "h")

    real_fstat = digest.os.fstat

    class Shrunk:  # the size seen when the read starts is not the size of the file: it changed meanwhile
        def __init__(self, fd):
            self._stat = real_fstat(fd)

        def __getattr__(self, name):
            return self._stat.st_size - 1 if name == "st_size" else getattr(self._stat, name)

    monkeypatch.setattr(digest.os, "fstat", Shrunk)
    with pytest.raises(SpillIntegrityError, match="changed size while it was read"):
        read_value(record)


@pytest.mark.parametrize("size_stripes", [0, 1, 4 * 1024**2 - 1, 4 * 1024**2, 4 * 1024**2 + 1, 5 * 4 * 1024**2 + 7])
def test_the_striped_digest_is_its_definition_whatever_the_threads(tmp_path, monkeypatch, size_stripes) -> None:
    """SHA-256 over the tag, the size and each 4 MiB stripe's SHA-256; sequential, threaded and file forms agree."""
    import hashlib

    from harness_magic.core.cache import digest

    data = np.random.default_rng(size_stripes).integers(0, 256, size_stripes, dtype=np.uint8).tobytes()
    stripes = [data[i:i + digest.DIGEST_STRIPE_BYTES] for i in range(0, len(data), digest.DIGEST_STRIPE_BYTES)]
    top = hashlib.sha256(b"harness_magic sha256-stripes 4MiB\x00" + len(data).to_bytes(8, "big"))
    for stripe in stripes:
        top.update(hashlib.sha256(stripe).digest())
    expected = top.hexdigest()
    path = tmp_path / "blob"
    path.write_bytes(data)
    hasher = digest.new_hasher("sha256-stripes")
    for i in range(0, len(data), 1_000_003):  # fed in pieces that straddle stripe edges
        hasher.update(data[i:i + 1_000_003])
    assert hasher.hexdigest() == expected
    monkeypatch.setattr(digest, "HASH_PARALLEL_MIN_BYTES", 1)  # every size on as many threads as it has stripes
    assert digest.buffer_digest(data) == digest.file_digest(path) == expected
    monkeypatch.setattr(digest, "HASH_THREADS_MAX", 1)
    assert digest.buffer_digest(data) == digest.file_digest(path) == expected


@pytest.mark.parametrize("change", ["grown", "truncated"])
def test_a_striped_spill_file_that_grew_or_shrank_is_refused(tmp_path, change) -> None:
    from harness_magic.core.cache.digest import SpillIntegrityError
    from harness_magic.core.cache.spill import read_value, write_value

    record = write_value(pd.DataFrame({"x": np.arange(3_000_000.0)}), tmp_path / "f")
    data = record.path.read_bytes()
    record.path.write_bytes(data + b"\0" if change == "grown" else data[:-1])
    with pytest.raises(SpillIntegrityError, match="f.arrow does not match its sha256-stripes digest"):
        read_value(record)
