"""Spec: ``save(dir)`` / ``SessionCache.load(dir)`` carry the whole cache across a kernel restart."""

from __future__ import annotations

import json
import shutil
import threading

import numpy as np
import pandas as pd
import pytest

from harness_magic.core.cache import CheckpointError, SessionCache
from test_cache_roundtrip import EDGE_CASES, assert_identical


def test_checkpoint_restores_every_edge_case_value_exactly(tmp_path) -> None:
    with SessionCache(hot_count=5, spill_dir=tmp_path / "spill") as cache:
        handles = {case: cache.put(case, make()) for case, make in EDGE_CASES.items()}
        cache.save(tmp_path / "ckpt")
    with SessionCache.load(tmp_path / "ckpt", spill_dir=tmp_path / "spill2") as restored:
        for case, handle in handles.items():
            assert_identical(EDGE_CASES[case](), restored.get(handle))


def test_checkpoint_restores_snapshots_provenance_and_recency(tmp_path) -> None:
    with SessionCache(hot_count=1, spill_dir=tmp_path / "spill") as cache:
        cache.put("orders", pd.DataFrame({"a": [1, 2]}), turn=1, tool="sql_query")
        cache.put("summary", np.arange(3), turn=2, tool="python_interpreter")
        cache.get("orders")
        before = [(e.name, e.type, e.shape, e.size_bytes, e.turn, e.tool) for e in cache.entries()]
        snapshots = {n: cache.snapshot(n) for n in cache.names()}
        cache.save(tmp_path / "ckpt")
    restored = SessionCache.load(tmp_path / "ckpt")
    assert [(e.name, e.type, e.shape, e.size_bytes, e.turn, e.tool) for e in restored.entries()] == before
    assert {n: restored.snapshot(n) for n in restored.names()} == snapshots
    assert restored.hot_count == 1
    restored.put("new", 0)  # least recent is "summary", then "orders": both leave the hot set
    assert {e.name: e.location for e in restored.entries()} == {"orders": "disk", "summary": "disk", "new": "memory"}
    restored.close()


def test_loaded_cache_reads_values_lazily(tmp_path) -> None:
    with SessionCache(spill_dir=tmp_path / "spill") as cache:
        cache.put("orders", pd.DataFrame({"a": [1, 2]}))
        cache.save(tmp_path / "ckpt")
    with SessionCache.load(tmp_path / "ckpt") as restored:
        assert restored.location("orders") == "disk"
        assert restored.get("orders")["a"].tolist() == [1, 2]
        assert restored.location("orders") == "memory"


def test_loaded_cache_does_not_depend_on_the_checkpoint_directory(tmp_path) -> None:
    with SessionCache(spill_dir=tmp_path / "spill") as cache:
        cache.put("orders", pd.DataFrame({"a": [1, 2]}))
        cache.save(tmp_path / "ckpt")
    restored = SessionCache.load(tmp_path / "ckpt")
    shutil.rmtree(tmp_path / "ckpt")
    assert restored.get("orders")["a"].tolist() == [1, 2]
    restored.close()


def test_closing_a_loaded_cache_keeps_the_checkpoint(tmp_path) -> None:
    with SessionCache(spill_dir=tmp_path / "spill") as cache:
        cache.put("orders", pd.DataFrame({"a": [1, 2]}))
        cache.save(tmp_path / "ckpt")
    SessionCache.load(tmp_path / "ckpt").close()
    with SessionCache.load(tmp_path / "ckpt") as again:
        assert again.get("orders")["a"].tolist() == [1, 2]


def test_saving_does_not_hydrate_spilled_values(tmp_path) -> None:
    with SessionCache(hot_count=0, spill_dir=tmp_path / "spill") as cache:
        cache.put("orders", pd.DataFrame({"a": [1, 2]}))
        cache.put("pusher", 0)
        cache.save(tmp_path / "ckpt")
        assert cache.location("orders") == "disk"


def test_saving_twice_to_the_same_directory_replaces_the_checkpoint(tmp_path) -> None:
    with SessionCache(spill_dir=tmp_path / "spill") as cache:
        cache.put("orders", [1])
        cache.save(tmp_path / "ckpt")
        cache.retire("orders")
        cache.put("orders", [2])
        cache.save(tmp_path / "ckpt")
    with SessionCache.load(tmp_path / "ckpt") as restored:
        assert restored.get("orders") == [2]


def test_manifest_is_json_without_payloads(tmp_path) -> None:
    with SessionCache(spill_dir=tmp_path / "spill") as cache:
        cache.put("secret", pd.DataFrame({"token": ["x" * 5000]}))
        manifest_path = cache.save(tmp_path / "ckpt")
    manifest = json.loads(manifest_path.read_text())
    assert manifest["entries"][0]["name"] == "secret"
    assert "x" * 1000 not in manifest_path.read_text()


def test_unsaveable_value_fails_the_whole_checkpoint_naming_it(tmp_path) -> None:
    with SessionCache(spill_dir=tmp_path / "spill") as cache:
        cache.put("orders", [1])
        cache.put("lock", threading.Lock())
        with pytest.raises(CheckpointError, match="lock"):
            cache.save(tmp_path / "ckpt")
    with pytest.raises(CheckpointError):
        SessionCache.load(tmp_path / "ckpt")


def test_loading_a_directory_without_a_checkpoint_fails_clearly(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="manifest"):
        SessionCache.load(tmp_path)


def test_loading_a_checkpoint_with_a_missing_file_names_the_handle(tmp_path) -> None:
    with SessionCache(spill_dir=tmp_path / "spill") as cache:
        cache.put("orders", pd.DataFrame({"a": [1]}))
        cache.save(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "orders.arrow").unlink()
    with pytest.raises(CheckpointError, match="orders"):
        SessionCache.load(tmp_path / "ckpt")
