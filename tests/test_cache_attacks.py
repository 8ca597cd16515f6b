"""Spec (issue 11, points 1-2): nothing the cache reads back from disk runs code or is trusted blindly.

Written as attacks: crafted checkpoints whose payload would create a marker
file, manifest entries that escape the directory, a spill directory another
user could plant files in, a flipped byte in every spill format, object data
that has no safe encoding.
"""

from __future__ import annotations

import decimal
import json
import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness_magic.core.cache import CheckpointError, SessionCache, SpillReadError
from harness_magic.core.cache.digest import DIGEST_ALGORITHM, file_digest


class _Payload:
    """Unpickling this creates the marker file: the canary for code execution."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _checkpoint(tmp_path: Path, **values) -> Path:
    root = tmp_path / "ckpt"
    with SessionCache(spill_dir=tmp_path / "spill") as cache:
        for name, value in values.items():
            cache.put(name, value)
        cache.save(root)
    return root


def _manifest(root: Path) -> dict:
    return json.loads((root / "manifest.json").read_text())


def _write_manifest(root: Path, manifest: dict) -> None:
    (root / "manifest.json").write_text(json.dumps(manifest))


def test_pickle_entry_in_a_checkpoint_is_refused_and_never_run(tmp_path) -> None:
    root = _checkpoint(tmp_path, frame=pd.DataFrame({"a": [1, 2]}))
    marker = tmp_path / "pwned"
    (root / "evil.pkl").write_bytes(pickle.dumps(_Payload(marker)))
    manifest = _manifest(root)
    manifest["entries"].append({**manifest["entries"][0], "name": "evil", "file": "evil.pkl", "format": "pickle",
                                DIGEST_ALGORITHM: file_digest(root / "evil.pkl")})
    _write_manifest(root, manifest)
    with pytest.raises(CheckpointError, match=r"handle 'evil' has format 'pickle'.*never read"):
        SessionCache.load(root, spill_dir=tmp_path / "spill2")
    assert not marker.exists()


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_pickled_schema_metadata_is_never_unpickled(tmp_path, fmt) -> None:
    """The old layout pickled labels into the Parquet metadata: a crafted file (either format) with a valid digest."""
    root = _checkpoint(tmp_path, frame=pd.DataFrame({"a": [1, 2]}))
    marker = tmp_path / "pwned"
    entry = _manifest(root)["entries"][0]
    path = root / entry["file"]
    table = pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
    meta = dict(table.schema.metadata)
    meta[b"harness_magic"] = pickle.dumps(_Payload(marker))
    table = table.replace_schema_metadata(meta)
    path.unlink()
    manifest = _manifest(root)
    if fmt == "parquet":
        path = path.with_suffix(".parquet")
        pq.write_table(table, path)
    else:
        with pa.ipc.new_file(str(path), table.schema) as writer:
            writer.write_table(table)
    manifest["entries"][0].update({"file": path.name, "format": fmt, DIGEST_ALGORITHM: file_digest(path)})
    _write_manifest(root, manifest)
    cache = SessionCache.load(root, spill_dir=tmp_path / "spill2")
    with pytest.raises(SpillReadError, match="handle 'frame'.*not JSON"):
        cache.get("frame")
    assert not marker.exists()
    cache.close()


@pytest.mark.parametrize("field, bad, message", [
    ("name", "../../escape", "not a valid, unique handle"),
    ("name", "a/b", "not a valid, unique handle"),
    ("file", "/etc/passwd", "only plain file names"),
    ("file", "../outside.arrow", "only plain file names"),
    ("file", "sub/frame.arrow", "only plain file names"),
    ("file", "..", "only plain file names"),
    ("format", "pickle", "has format 'pickle'"),
    ("format", "parquet", "does not match format parquet"),
    (DIGEST_ALGORITHM, "", "lacks a digest"),
    (DIGEST_ALGORITHM, "ab" * 31, "lacks a digest"),
])
def test_manifest_entries_that_escape_or_lie_are_refused_naming_the_entry(tmp_path, field, bad, message) -> None:
    root = _checkpoint(tmp_path, frame=pd.DataFrame({"a": [1, 2]}))
    (tmp_path / "outside.arrow").write_bytes((root / "frame.arrow").read_bytes())
    manifest = _manifest(root)
    manifest["entries"][0][field] = bad
    _write_manifest(root, manifest)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(CheckpointError, match=message):
        SessionCache.load(root, spill_dir=tmp_path / "spill2")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "spill2") == \
        [n for n in before if n != "spill2"]


def test_a_linked_checkpoint_file_is_refused(tmp_path) -> None:
    root = _checkpoint(tmp_path, frame=pd.DataFrame({"a": [1, 2]}))
    secret = tmp_path / "secret.arrow"
    os.replace(root / "frame.arrow", secret)
    os.symlink(secret, root / "frame.arrow")
    with pytest.raises(CheckpointError, match=r"handle 'frame'.*link or not a plain file"):
        SessionCache.load(root, spill_dir=tmp_path / "spill2")


def test_foreign_owned_spill_dir_is_refused(tmp_path) -> None:
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o700)
    if os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    os.chown(planted, 12345, 12345)
    with pytest.raises(PermissionError, match=r"owned by uid 12345, not by you"):
        SessionCache(spill_dir=planted)


def test_group_or_world_writable_spill_dir_is_refused(tmp_path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(PermissionError, match=r"writable by group or others \(mode 777\)"):
        SessionCache(spill_dir=shared)


def test_missing_spill_dir_is_created_private(tmp_path) -> None:
    target = tmp_path / "fresh"
    with SessionCache(hot_count=0, spill_dir=target) as cache:
        cache.put("a", np.arange(3))
        cache.put("b", 1)
        assert (target.stat().st_mode & 0o777) == 0o700


def test_default_spill_dir_is_private(tmp_path) -> None:
    with SessionCache(hot_count=0) as cache:
        cache.put("a", np.arange(3))
        cache.put("b", 1)
        directory = next(e for e in cache.entries() if e.name == "a")
        assert directory.location == "disk"
        path = cache._dir.path
        assert (path.stat().st_mode & 0o777) == 0o700


@pytest.mark.parametrize("value, storage", [
    (pd.DataFrame({"a": np.arange(1000, dtype="int64")}), "arrow"),
    (pd.DataFrame({"t": np.arange(1000).astype("datetime64[s]")}), "arrow"),
    (pd.DataFrame({"x": np.arange(3_000_000, dtype="float64")}), "arrow"),
    (np.arange(1000, dtype="float64"), "npy"),
    ({"k": list(range(100))}, "json"),
], ids=["arrow", "arrow-seconds", "arrow-striped", "npy", "json"])
def test_a_flipped_byte_in_any_spill_format_is_an_error_naming_the_handle(tmp_path, value, storage) -> None:
    with SessionCache(hot_count=0, spill_dir=tmp_path) as cache:
        cache.put("victim", value)
        cache.put("newer", 0)
        info = next(e for e in cache.entries() if e.name == "victim")
        assert info.storage == storage
        path = next(p for p in tmp_path.iterdir() if p.name.startswith("victim"))
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
        with pytest.raises(SpillReadError, match=r"handle 'victim'.*changed since it was written"):
            cache.get("victim")


def test_a_flipped_byte_in_a_checkpoint_is_an_error_naming_the_handle(tmp_path) -> None:
    root = _checkpoint(tmp_path, prices=pd.DataFrame({"p": np.arange(500, dtype="float64")}))
    path = root / "prices.arrow"
    data = bytearray(path.read_bytes())
    data[200] ^= 0x40
    path.write_bytes(bytes(data))
    cache = SessionCache.load(root, spill_dir=tmp_path / "spill2")
    with pytest.raises(SpillReadError, match="handle 'prices'"):
        cache.get("prices")
    cache.close()


def test_object_data_without_a_safe_encoding_is_refused_at_save_naming_handle_and_column(tmp_path) -> None:
    sock = socket.socket()
    try:
        frame = pd.DataFrame({"ok": [1, 2], "conn": pd.Series([sock, None], dtype=object)})
        with SessionCache(spill_dir=tmp_path / "spill") as cache:
            cache.put("links", frame)
            with pytest.raises(CheckpointError, match=r"links .*column 'conn' holds socket.socket values"):
                cache.save(tmp_path / "ckpt")
            assert not (tmp_path / "ckpt" / "manifest.json").exists()
            assert cache.get("links") is frame
    finally:
        sock.close()


def test_object_cells_keep_their_python_types_through_a_checkpoint(tmp_path) -> None:
    cells = [1, 1.0, "1", None, float("nan"), pd.NA, decimal.Decimal("2.00"), [1, [2]], {"k": (1, None)},
             np.float32(1.5), np.int64(7), pd.Timestamp("2024-01-01 00:00:00.000000001", tz="Europe/Paris")]
    frame = pd.DataFrame({"o": pd.Series(cells, dtype=object)})
    root = _checkpoint(tmp_path, cells=frame)
    cache = SessionCache.load(root, spill_dir=tmp_path / "spill2")
    back = cache.get("cells")["o"].tolist()
    cache.close()
    assert [type(v) for v in back] == [type(v) for v in cells]
    assert back[0] == 1 and back[2] == "1" and back[3] is None and back[4] != back[4] and back[5] is pd.NA
    assert str(back[6]) == "2.00" and back[7] == [1, [2]] and back[8] == {"k": (1, None)}
    assert back[11] == cells[11] and back[11].nanosecond == 1 and str(back[11].tz) == "Europe/Paris"


def test_checkpoint_with_periods_and_intervals_loads_exactly_in_a_fresh_process(tmp_path) -> None:
    frame = pd.DataFrame({"p": pd.period_range("2024-01", periods=3, freq="M"), "i": pd.interval_range(0, 3)},
                         index=pd.period_range("2024Q1", periods=3, freq="Q", name="q"))
    root = _checkpoint(tmp_path, periods=frame)
    script = (
        "import sys, pandas as pd, pandas.testing as tm\n"
        "from harness_magic.core.cache import SessionCache\n"
        f"cache = SessionCache.load({str(root)!r}, spill_dir={str(tmp_path / 'fresh')!r})\n"
        "got = cache.get('periods')\n"
        "exp = pd.DataFrame({'p': pd.period_range('2024-01', periods=3, freq='M'), 'i': pd.interval_range(0, 3)},"
        " index=pd.period_range('2024Q1', periods=3, freq='Q', name='q'))\n"
        "tm.assert_frame_equal(got, exp, check_exact=True, check_index_type=True, check_column_type=True)\n"
        "print('ok', got.dtypes.tolist())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "period[M]" in done.stdout and "interval" in done.stdout


def _as_version_2(root: Path) -> None:
    """Rewrite a checkpoint's manifest the way version 2 wrote it: BLAKE2b digests under "blake2b"."""
    manifest = _manifest(root)
    manifest["version"] = 2
    for row in manifest["entries"]:
        if "file" in row:
            del row[DIGEST_ALGORITHM]
            row["blake2b"] = file_digest(root / row["file"], "blake2b")
    _write_manifest(root, manifest)


def _as_version_3(root: Path) -> None:
    """Rewrite a checkpoint's manifest the way version 3 wrote it: frames as Parquet, SHA-256 under "sha256"."""
    manifest = _manifest(root)
    manifest["version"] = 3
    for row in manifest["entries"]:
        if row.get("format") == "arrow":
            path = root / row["file"]
            table = pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
            path.unlink()
            path = path.with_suffix(".parquet")
            pq.write_table(table, path, compression=None)
            row.update(file=path.name, format="parquet")
        if "file" in row:
            del row[DIGEST_ALGORITHM]
            row["sha256"] = file_digest(root / row["file"], "sha256")
    _write_manifest(root, manifest)


def test_new_checkpoints_carry_striped_sha256_digests_of_their_files(tmp_path) -> None:
    root = _checkpoint(tmp_path, frame=pd.DataFrame({"a": [1, 2]}), array=np.arange(3))
    manifest = _manifest(root)
    assert manifest["version"] == 4
    for row in manifest["entries"]:
        assert "blake2b" not in row and "sha256" not in row
        assert row["sha256-stripes"] == file_digest(root / row["file"], "sha256-stripes")


def test_a_version_3_checkpoint_of_parquet_files_with_sha256_digests_still_loads_exactly(tmp_path) -> None:
    frame = pd.DataFrame({"a": [1.5, -0.0], "b": pd.Categorical(["x", "y"]), "s": ["u", None]})
    array = np.arange(6).reshape(2, 3)
    root = _checkpoint(tmp_path, frame=frame, array=array)
    _as_version_3(root)
    with SessionCache.load(root, spill_dir=tmp_path / "spill2") as cache:
        assert {e.name: e.storage for e in cache.entries()} == {"frame": "parquet", "array": "npy"}
        pd.testing.assert_frame_equal(cache.get("frame"), frame, check_exact=True)
        np.testing.assert_array_equal(cache.get("array"), array)
        cache.save(tmp_path / "again")  # carried over: the file keeps its format and its sha256 digest
    row = next(r for r in _manifest(tmp_path / "again")["entries"] if r["name"] == "frame")
    assert row["format"] == "parquet" and row["sha256"] == file_digest(tmp_path / "again" / row["file"], "sha256")
    with SessionCache.load(tmp_path / "again", spill_dir=tmp_path / "spill3") as cache:
        pd.testing.assert_frame_equal(cache.get("frame"), frame, check_exact=True)


def test_a_version_3_checkpoint_whose_file_changed_is_refused_by_its_sha256_digest(tmp_path) -> None:
    root = _checkpoint(tmp_path, frame=pd.DataFrame({"a": [1, 2]}))
    _as_version_3(root)
    path = root / _manifest(root)["entries"][0]["file"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with SessionCache.load(root, spill_dir=tmp_path / "spill2") as cache:
        with pytest.raises(SpillReadError, match="sha256 digest"):
            cache.get("frame")


def test_a_version_2_checkpoint_with_blake2b_digests_still_loads_exactly(tmp_path) -> None:
    frame = pd.DataFrame({"a": [1.5, -0.0], "b": pd.Categorical(["x", "y"])})
    array = np.asfortranarray(np.arange(6).reshape(2, 3))
    root = _checkpoint(tmp_path, frame=frame, array=array)
    _as_version_2(root)
    with SessionCache.load(root, spill_dir=tmp_path / "spill2") as cache:
        pd.testing.assert_frame_equal(cache.get("frame"), frame, check_exact=True)
        loaded = cache.get("array")
        np.testing.assert_array_equal(loaded, array)
        assert loaded.flags.f_contiguous and loaded.dtype == array.dtype


def test_a_version_2_checkpoint_whose_file_changed_is_refused_by_its_blake2b_digest(tmp_path) -> None:
    root = _checkpoint(tmp_path, frame=pd.DataFrame({"a": [1, 2]}))
    _as_version_2(root)
    path = root / _manifest(root)["entries"][0]["file"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with SessionCache.load(root, spill_dir=tmp_path / "spill2") as cache:
        with pytest.raises(SpillReadError, match="blake2b digest"):
            cache.get("frame")


@pytest.mark.parametrize("version", [1, 5, "3", None])
def test_a_checkpoint_of_another_version_is_refused_naming_the_readable_ones(tmp_path, version) -> None:
    root = _checkpoint(tmp_path, frame=pd.DataFrame({"a": [1, 2]}))
    manifest = _manifest(root)
    manifest["version"] = version
    _write_manifest(root, manifest)
    with pytest.raises(CheckpointError, match="is not a version 2, 3 or 4 cache checkpoint"):
        SessionCache.load(root, spill_dir=tmp_path / "spill2")


def test_a_digest_under_an_unknown_algorithm_is_no_digest(tmp_path) -> None:
    root = _checkpoint(tmp_path, frame=pd.DataFrame({"a": [1, 2]}))
    manifest = _manifest(root)
    row = manifest["entries"][0]
    row["md5"] = row.pop(DIGEST_ALGORITHM)
    _write_manifest(root, manifest)
    with pytest.raises(CheckpointError, match=r"handle 'frame' lacks a digest \(sha256-stripes or sha256 or blake2b"):
        SessionCache.load(root, spill_dir=tmp_path / "spill2")
