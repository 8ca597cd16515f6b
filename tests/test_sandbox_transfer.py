"""Spec (issues 11.4 and 12): results cross back exactly, bounded, and crafted ones fail cleanly.

Real analyses that used to crash or change values run in the worker and
come back identical to the same analysis in the kernel. Crafted result
files (compressed bombs, rows claimed without data, flipped bytes) raise
``ProtocolError`` before anything large is materialised.
"""

from __future__ import annotations

import io
import os
import random

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from harness_magic.core.execution.sandbox import SandboxedInterpreter, probe_confinement
from harness_magic.core.execution.sandbox.protocol import ProtocolError
from harness_magic.core.execution.sandbox.transfer_kernel import read_result
from harness_magic.core.execution.sandbox.transfer_worker import write_result

from value_matrix import assert_identical

confined = pytest.mark.skipif(not probe_confinement()["confined"], reason="no OS confinement here")

SETUP = (
    "import numpy as np, pandas as pd\n"
    "rng = np.random.default_rng(0)\n"
    "sales = pd.DataFrame({'region': pd.Categorical(rng.choice(['n', 's', 'e'], 60), categories=['n', 's', 'e', 'w']),"
    " 'kind': pd.Categorical(rng.choice(['a', 'b'], 60)), 'amount': rng.integers(1, 100, 60).astype('float64'),"
    " 'day': pd.date_range('2024-01-01', periods=60, freq='D')})\n"
)

ANALYSES = {
    "categorical_unstack": "sales.groupby(['region', 'kind'], observed=False)['amount'].sum().unstack()",
    "categorical_pivot_table": "sales.pivot_table(index='region', columns='kind', values='amount', aggfunc='sum',"
                               " observed=False)",
    "groupby_observed_false": "sales.groupby('region', observed=False)['amount'].mean()",
    "cut_value_counts": "pd.cut(sales['amount'], bins=[0, 25, 50, 75, 100]).value_counts()",
    "to_period_groupby": "sales.groupby(sales['day'].dt.to_period('M'))['amount'].sum()",
    "resample_with_freq": "sales.set_index('day')['amount'].resample('W').sum()",
    "crosstab": "pd.crosstab(sales['region'], sales['kind'])",
    "describe": "sales.describe()",
}


@pytest.fixture(scope="module")
def sandbox():
    backend = SandboxedInterpreter(timeout=60.0)
    yield backend
    backend.close()


def _expected(code: str):
    namespace: dict = {}
    exec(SETUP, namespace)
    return eval(code, namespace)


@confined
@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_real_analysis_comes_back_exactly_as_value_and_saved(sandbox, name) -> None:
    code = ANALYSES[name]
    result = sandbox.execute(SETUP + f"save('r', {code})\n{code}", {}, [])
    assert result.error is None, result.error
    assert_identical(_expected(code), result.value)
    assert_identical(_expected(code), result.saved[0][1])


@confined
def test_a_value_without_exact_encoding_is_refused_naming_it_and_the_worker_lives_on(sandbox) -> None:
    result = sandbox.execute("import pandas as pd\nsave('funcs', pd.Series([len, 1], dtype=object))", {}, [])
    assert result.error is not None
    assert "TransferRefused" in result.error and "save('funcs'" in result.error
    assert "builtin_function_or_method" in result.error
    assert result.saved == []
    again = sandbox.execute("1 + 1", {}, [])
    assert again.error is None and again.value == 2


@confined
def test_an_unknown_saved_object_is_refused_not_stored_as_text(sandbox) -> None:
    result = sandbox.execute("class Thing:\n    pass\nsave('thing', Thing())", {}, [])
    assert "TransferRefused" in result.error and "Thing" in result.error
    assert result.saved == []


@confined
def test_an_oversize_result_names_the_limit(tmp_path) -> None:
    backend = SandboxedInterpreter(timeout=60.0, result_max_bytes=4 * 2**20)
    try:
        result = backend.execute("import numpy as np\nsave('big', np.zeros(2**20))", {}, [])
        assert "TransferRefused" in result.error and "result limit" in result.error and "4.0 MiB" in result.error
        assert "requested and" not in result.error
        assert backend.execute("2", {}, []).value == 2
    finally:
        backend.close()


def _arrow_file(directory, name, batches, schema, compression=None) -> str:
    path = os.path.join(directory, name)
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema,
                                                         options=pa.ipc.IpcWriteOptions(compression=compression)) as w:
        for batch in batches:
            w.write_batch(batch)
    return name


def test_a_compressed_result_bomb_is_refused_before_decoding(tmp_path) -> None:
    zeros = pa.record_batch([pa.array(np.zeros(2**17))], names=["z"])  # 1 MiB decoded, a few hundred bytes zstd
    name = _arrow_file(tmp_path, "out_bomb.arrow", (zeros for _ in range(4096)), zeros.schema, "zstd")
    assert os.path.getsize(tmp_path / name) < 8 * 2**20  # 4 GiB once decoded
    with pytest.raises(ProtocolError, match="compressed Arrow buffers are not accepted"):
        read_result({"kind": "arrow", "shape": "table", "file": name}, str(tmp_path))


def test_rows_claimed_without_data_are_refused_within_the_cap(tmp_path) -> None:
    nulls = pa.record_batch([pa.nulls(2**31 - 1)], names=["n"])  # no buffers: pandas would allocate 16 GiB
    name = _arrow_file(tmp_path, "out_nulls.arrow", [nulls], nulls.schema)
    with pytest.raises(ProtocolError, match="more than the 1073741824-byte result limit"):
        read_result({"kind": "arrow", "shape": "frame", "file": name}, str(tmp_path), max_bytes=2**30)


def test_flipped_bytes_in_a_result_raise_protocol_errors_never_crash(tmp_path) -> None:
    frame = pd.DataFrame({"a": np.arange(50), "s": [f"x{i}" for i in range(50)],
                          "c": pd.Categorical(["p", "q"] * 25)})
    desc = write_result(frame, str(tmp_path), "clean", [])
    clean = (tmp_path / desc["file"]).read_bytes()
    rng = random.Random(7)
    outcomes = {"error": 0, "value": 0}
    for trial in range(300):
        data = bytearray(clean)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        name = f"out_flip{trial}.arrow"
        (tmp_path / name).write_bytes(bytes(data))
        try:
            read_result({**desc, "file": name}, str(tmp_path))
            outcomes["value"] += 1
        except ProtocolError:
            outcomes["error"] += 1
    assert outcomes["error"] > 0


def test_a_worker_result_file_that_is_a_link_is_refused(tmp_path) -> None:
    os.symlink("/etc/passwd", tmp_path / "out_link.npy")
    with pytest.raises((ProtocolError, OSError)):
        read_result({"kind": "npy", "file": "out_link.npy"}, str(tmp_path))


def test_results_keep_fortran_order(tmp_path) -> None:
    array = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    desc = write_result(array, str(tmp_path), "f", [])
    back = read_result(desc, str(tmp_path))
    assert back.flags.f_contiguous and not back.flags.c_contiguous
    np.testing.assert_array_equal(back, array)


@confined
def test_inputs_are_exported_once_per_value_and_removed_with_the_handle(tmp_path) -> None:
    from harness_magic.core.cache import SessionCache
    from harness_magic.core.execution.interpreter import make_interpreter_tools

    backend = SandboxedInterpreter(timeout=60.0)
    try:
        with SessionCache(spill_dir=tmp_path / "spill") as cache:
            tool = next(t for t in make_interpreter_tools(cache, backend) if t.name == "python_interpreter")
            cache.put("prices", pd.DataFrame({"p": np.arange(1000.0)}))
            first = tool.handler(code="float(prices['p'].sum())")
            assert "499500.0" in first.text
            [path] = backend.exported_files()
            stamp = os.stat(path)
            again = tool.handler(code="int(prices.shape[0])")
            assert "1000" in again.text
            assert backend.exported_files() == [path]
            assert os.stat(path).st_ino == stamp.st_ino and os.stat(path).st_mtime_ns == stamp.st_mtime_ns
            cache.retire("prices")
            cache.put("prices", pd.DataFrame({"p": [1.0, 2.0]}))  # same name, new value: a new export
            third = tool.handler(code="float(prices['p'].sum())")
            assert "3.0" in third.text
            assert not os.path.exists(path)
            assert len(backend.exported_files()) == 1
            cache.retire("prices")
            tool.handler(code="1")
            assert backend.exported_files() == []
    finally:
        backend.close()


MUTATIONS = [
    "frame.loc[10, 'text'] = 'changed'", "frame['objects'].to_numpy()[1] = 'changed'",
    "frame['objects'].array[2] = 'changed'", "frame['n'].to_numpy()[0] = -1", "frame['n'].array[3] = -1",
    "frame._mgr.blocks[0].values[0] = -1", "frame['kind'].cat.categories.values[0] = 'X'",
    "frame['kind'] = frame['kind'].cat.rename_categories(['X', 'Y'])", "frame.attrs['source'] = 'changed'",
    "frame.attrs['nested']['k'] = 'changed'", "frame.index.name = 'changed'", "frame.columns.name = 'changed'",
    "frame['new'] = 1", "frame.flags.allows_duplicate_labels = False",
    "frame.sort_values('n', ascending=False, inplace=True)",
]
"""What code might do to an input in place; each line may succeed or be refused (read-only memory)."""
MUTATE = "".join(f"try:\n    {line}\nexcept (ValueError, TypeError, AttributeError):\n    pass\n" for line in MUTATIONS)


@confined
def test_what_one_call_does_to_an_input_never_reaches_the_next_call_in_the_same_worker(tmp_path) -> None:
    from harness_magic.core.cache import SessionCache
    from harness_magic.core.execution.interpreter import make_interpreter_tools

    frame = pd.DataFrame({"n": np.arange(6.0), "text": pd.array(list("abcdef"), dtype="string[python]"),
                          "objects": pd.Series(["p", "q", "r", "s", "t", "u"], dtype=object),
                          "kind": pd.Categorical(list("ababab"))},
                         index=pd.Index(range(10, 16), name="row"))
    frame.attrs = {"source": "ledger", "nested": {"k": "v"}}
    backend = SandboxedInterpreter(timeout=60.0)
    try:
        with SessionCache(spill_dir=tmp_path / "spill") as cache:
            tool = next(t for t in make_interpreter_tools(cache, backend) if t.name == "python_interpreter")
            cache.put("frame", frame.copy(deep=True))
            for _ in range(2):  # the second round runs on the input table mapped for the first
                mutated = tool.handler(code=MUTATE + "save('mutated', frame)")
                assert not mutated.is_error, mutated.text
                assert cache.get(mutated.handles[-1]).attrs["source"] == "changed"  # the mutations ran
                seen = tool.handler(code="save('seen', frame)")
                assert_identical(frame, cache.get(seen.handles[-1]))
            assert cache.get("frame").equals(frame)
    finally:
        backend.close()


def test_the_worker_reuses_an_input_table_only_for_the_same_file_and_drops_the_others(tmp_path) -> None:
    from harness_magic.core.execution.sandbox import transfer_kernel, transfer_worker

    first = transfer_kernel.write_input("a", pd.DataFrame({"x": np.arange(5.0)}), str(tmp_path), "v1")
    second = transfer_kernel.write_input("b", pd.DataFrame({"y": np.arange(3)}), str(tmp_path), "v2")
    transfer_worker.keep_input_tables([])
    try:
        one = transfer_worker._input_table(first, str(tmp_path))
        assert transfer_worker._input_table(first, str(tmp_path)) is one
        transfer_worker._input_table(second, str(tmp_path))
        transfer_worker.keep_input_tables([second])
        assert list(transfer_worker._INPUT_TABLES) == [(second["file"],)]
        assert transfer_worker._input_table(first, str(tmp_path)) is not one  # mapped again after it was dropped
        path = tmp_path / first["file"]  # a file that is not the one mapped (another inode) is mapped afresh
        (tmp_path / "other").mkdir()
        replacement = transfer_kernel.write_input("a", pd.DataFrame({"x": -np.arange(5.0)}), str(tmp_path / "other"), "v9")
        os.replace(tmp_path / "other" / replacement["file"], path)
        assert_identical(transfer_worker.read_input(first, str(tmp_path)), pd.DataFrame({"x": -np.arange(5.0)}))
    finally:
        transfer_worker.keep_input_tables([])


def _memfd(data: bytes, *, seal: bool = True) -> int:
    import fcntl

    fd = os.memfd_create("test", os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    return fd


def _arrow_bytes(frame, compression=None) -> bytes:
    from harness_magic.core.cache.frames import frame_to_table

    table = frame_to_table(frame)
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_table(table)
    return sink.getvalue()


def test_a_sealed_result_is_mapped_read_only_and_decoded_exactly() -> None:
    frame = pd.DataFrame({"a": np.arange(5.0)}, index=pd.date_range("2024", periods=5, freq="D"))
    fd = _memfd(_arrow_bytes(frame))
    try:
        back = read_result({"kind": "arrow", "shape": "frame", "fd_slot": 1}, "/nonexistent", sealed={1: fd})
    finally:
        os.close(fd)
    assert_identical(frame, back)


@pytest.mark.parametrize("attack", ["unsealed", "regular_file", "over_cap", "compressed", "unknown_slot", "garbage"])
def test_crafted_sealed_results_are_refused_cleanly(tmp_path, attack) -> None:
    frame = pd.DataFrame({"a": np.zeros(10_000)})
    desc = {"kind": "arrow", "shape": "frame", "fd_slot": 1}
    if attack == "unsealed":
        fd = _memfd(_arrow_bytes(frame), seal=False)
    elif attack == "regular_file":
        (tmp_path / "plain").write_bytes(_arrow_bytes(frame))
        fd = os.open(tmp_path / "plain", os.O_RDONLY)
    elif attack == "compressed":
        fd = _memfd(_arrow_bytes(frame, "zstd"))
    elif attack == "garbage":
        fd = _memfd(b"ARROW1\x00\x00" + os.urandom(4096) + b"ARROW1")
    else:
        fd = _memfd(_arrow_bytes(frame))
    sealed = {1: fd} if attack != "unknown_slot" else {2: fd}
    try:
        with pytest.raises(ProtocolError, match={
            "unsealed": "not sealed", "regular_file": "not a sealed memory file", "over_cap": "over the 1000-byte",
            "compressed": "compressed Arrow buffers", "unknown_slot": "did not send", "garbage": "Arrow",
        }[attack]):
            read_result(desc, "/nonexistent", max_bytes=1000 if attack == "over_cap" else 2**30, sealed=sealed)
    finally:
        os.close(fd)


@confined
def test_worker_results_arrive_as_sealed_memory_files(sandbox) -> None:
    result = sandbox.execute("import numpy as np\nsave('a', np.asfortranarray(np.ones((3, 2))))", {}, [])
    assert result.error is None, result.error
    back = result.saved[0][1]
    assert back.flags.f_contiguous and not back.flags.writeable  # a read-only mapping of the sealed file
    np.testing.assert_array_equal(back, np.ones((3, 2)))


def test_float_columns_cross_without_a_scan_or_copy_and_keep_every_nan_bit(tmp_path) -> None:
    """Floats are handed to Arrow as they are: no NaN->null bitmap, same buffer, NaN payloads and -0.0 kept."""
    from harness_magic.core.cache.frames import prepare_frame
    from harness_magic.core.cache.frames import frame_to_table
    from harness_magic.core.cache.spill import read_value, write_value

    payload = np.array([0x7FF8_0000_DEAD_BEEF, 0xFFF8_0000_0000_0001], dtype="<u8").view("<f8")
    f64 = np.concatenate([payload, [-0.0, np.inf, -np.inf, 1.5, np.nan]])
    f32 = np.array([1, 2, 3, 4, 5, 6, 7], dtype="<u4").view("<f4").copy()
    f32[0] = np.array([0x7FC0_1234], dtype="<u4").view("<f4")[0]
    frame = pd.DataFrame({"x": f64, "y": f32, ("t", 1): np.arange(7), "s": list("abcdefg")},
                         index=pd.Index(np.arange(7.0) * 0.5, name="half"))
    table = frame_to_table(frame)
    for position in (0, 1):
        chunk = table.column(position).chunk(0)
        assert chunk.null_count == 0 and chunk.buffers()[0] is None  # no validity bitmap was computed
    assert table.column(0).chunk(0).buffers()[1].address == frame["x"].to_numpy().ctypes.data  # no copy
    flat, _ = prepare_frame(frame)
    assert table.schema.pandas_metadata == pa.Table.from_pandas(flat, preserve_index=None).schema.pandas_metadata

    def bits(df):
        return df["x"].to_numpy().view("<u8").tolist(), df["y"].to_numpy().view("<u4").tolist()

    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    fd = _memfd(sink.getvalue())
    try:
        back = read_result({"kind": "arrow", "shape": "frame", "fd_slot": 1}, "/nonexistent", sealed={1: fd})
    finally:
        os.close(fd)
    assert_identical(frame, back)
    assert bits(back) == bits(frame)
    spilled = read_value(write_value(frame, tmp_path / "f"))
    assert_identical(frame, spilled)
    assert bits(spilled) == bits(frame)
