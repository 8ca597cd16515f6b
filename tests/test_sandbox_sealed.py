"""Spec (issue 12.3): a result leaves the worker in sealed memory files, striped when large, mapped as one buffer.

The parts are written in parallel (one thread per memory file: page
allocation is serialised per file), each sealed against writing, growing and
shrinking; the kernel maps them back to back read-only. Hostile parts — an
unsealed one, one missing the shrink seal, a middle part cut off a page
boundary, too many, a plain file, a pipe — are refused with a clear error,
never a crash.
"""

from __future__ import annotations

import fcntl
import io
import mmap
import os
import socket

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import harness_magic.core.execution.sandbox.backend as backend
from harness_magic.core.execution.sandbox import SandboxedInterpreter, probe_confinement
from harness_magic.core.execution.sandbox.protocol import ProtocolError
from harness_magic.core.execution.sandbox.sealed import STRIPE_MAX_PARTS, STRIPE_MIN_PART_BYTES, map_sealed, stripe_count, \
    write_sealed
from harness_magic.core.execution.sandbox.transfer_kernel import read_result, read_sealed_result, receive_sealed
from harness_magic.core.execution.sandbox.transfer_codec import arrow_writer, npy_writer

from value_matrix import assert_identical

confined = pytest.mark.skipif(not probe_confinement()["confined"], reason="no OS confinement here")
PAGE = mmap.PAGESIZE
SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _close(fds) -> None:
    for fd in fds:
        os.close(fd)


@pytest.mark.parametrize("size,parts", [(1, 1), (PAGE, 2), (PAGE + 1, 2), (5 * PAGE - 7, 3), (3 * 2**20 + 5, 4)])
def test_striped_parts_join_into_the_same_bytes_read_only(size, parts) -> None:
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    fds = write_sealed(lambda sink: [sink.write(data[i:i + 1000]) for i in range(0, size, 1000)], size, parts)
    try:
        assert 1 <= len(fds) <= parts
        for fd in fds[:-1]:
            assert os.fstat(fd).st_size % PAGE == 0  # cut on page boundaries
        for fd in fds:
            assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SEALS == SEALS
            with pytest.raises(PermissionError):
                os.pwrite(fd, b"x", 0)
        buffer, total = map_sealed(fds, 2**30)
    finally:
        _close(fds)
    assert total == size
    view = np.frombuffer(buffer, dtype=np.uint8)
    assert not view.flags.writeable  # numpy refuses writes instead of faulting on the read-only mapping
    np.testing.assert_array_equal(view, data)


def test_large_results_use_one_part_per_core_up_to_the_cap() -> None:
    assert stripe_count(STRIPE_MIN_PART_BYTES - 1, 8) == 1
    assert stripe_count(2 * STRIPE_MIN_PART_BYTES, 1) == 1
    assert stripe_count(2 * STRIPE_MIN_PART_BYTES, 8) == 2
    assert stripe_count(2**30, 2) == 2
    assert stripe_count(2**30, 64) == STRIPE_MAX_PARTS


def test_a_failing_writer_raises_its_error_and_leaks_no_descriptor() -> None:
    before = _open_fds()

    def write(sink):
        sink.write(b"x" * (3 * PAGE))
        raise ValueError("boom in the middle")

    with pytest.raises(ValueError, match="boom in the middle"):
        write_sealed(write, 8 * PAGE, 4)
    with pytest.raises(RuntimeError, match="wrote 10 bytes where 20 were announced"):
        write_sealed(lambda sink: sink.write(b"0123456789"), 20, 1)
    assert _open_fds() == before


def test_the_joined_mapping_is_released_with_its_last_reader() -> None:
    import gc

    fds = write_sealed(lambda sink: sink.write(b"\x07" * (4 * PAGE)), 4 * PAGE, 2)
    buffer, _ = map_sealed(fds, 2**30)
    _close(fds)
    array = np.frombuffer(buffer, dtype=np.uint8)
    address = array.ctypes.data
    del buffer
    gc.collect()
    assert array[-1] == 7  # the array keeps the mapping alive
    del array
    gc.collect()
    mapped = [line for line in open("/proc/self/maps") if int(line.split("-")[0], 16) == address]
    assert mapped == []


def _parts(data: bytes, cuts: list[int], *, seals=SEALS) -> list[int]:
    fds = []
    for start, end in zip([0, *cuts], [*cuts, len(data)]):
        fd = os.memfd_create("part", os.MFD_ALLOW_SEALING)
        os.write(fd, data[start:end])
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        fds.append(fd)
    return fds


def _frame_ipc(rows: int = 20_000) -> tuple[pd.DataFrame, bytes]:
    frame = pd.DataFrame({"a": np.arange(rows, dtype=float), "b": np.arange(rows) % 7})
    from harness_magic.core.cache.frames import frame_to_table

    write, size = arrow_writer(frame_to_table(frame))
    chunks: list[bytes] = []

    class Sink(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, data) -> int:
            chunks.append(bytes(data))
            return len(chunks[-1])

    write(Sink())
    data = b"".join(chunks)
    assert len(data) == size  # the announced size is the written size
    return frame, data


def test_hand_made_parts_decode_exactly() -> None:
    frame, data = _frame_ipc()
    fds = _parts(data, [PAGE, 8 * PAGE])
    try:
        back = read_result({"kind": "arrow", "shape": "frame", "fd_slot": 3}, "/nonexistent", sealed={3: fds})
    finally:
        _close(fds)
    assert_identical(frame, back)


@pytest.mark.parametrize("attack", ["unsealed_part", "no_shrink_seal", "middle_not_page_aligned", "too_many_parts",
                                    "plain_file_part", "pipe_part", "empty_part", "over_cap", "parts_swapped",
                                    "write_only_part", "write_only_single"])
def test_crafted_striped_results_are_refused_cleanly(tmp_path, attack) -> None:
    _, data = _frame_ipc()
    cuts = [PAGE, 2 * PAGE]
    extra: list[int] = []
    if attack == "unsealed_part":
        fds = _parts(data, cuts)
        os.close(fds[1])
        fds[1] = os.memfd_create("open", os.MFD_ALLOW_SEALING)
        os.write(fds[1], data[PAGE:2 * PAGE])
    elif attack == "no_shrink_seal":  # a part that could shrink under the mapping would fault the kernel
        fds = _parts(data, cuts, seals=SEALS & ~fcntl.F_SEAL_SHRINK)
    elif attack == "middle_not_page_aligned":
        fds = _parts(data, [PAGE - 8, 2 * PAGE])
    elif attack == "too_many_parts":
        fds = _parts(data, [PAGE * (i + 1) for i in range(STRIPE_MAX_PARTS)])
    elif attack == "plain_file_part":
        fds = _parts(data, cuts)
        (tmp_path / "plain").write_bytes(data[PAGE:2 * PAGE])
        os.close(fds[1])
        fds[1] = os.open(tmp_path / "plain", os.O_RDONLY)
    elif attack == "pipe_part":
        fds = _parts(data, cuts)
        read_end, write_end = os.pipe()
        os.close(fds[1])
        fds[1] = read_end
        extra.append(write_end)
    elif attack == "empty_part":
        fds = _parts(data[:3 * PAGE], cuts) + _parts(b"", [])
    elif attack in ("write_only_part", "write_only_single"):  # sealed, but a descriptor that cannot be mapped
        fds = _parts(data, cuts) if attack == "write_only_part" else _parts(data, [])
        reopened = os.open(f"/proc/self/fd/{fds[-1]}", os.O_WRONLY)
        os.close(fds[-1])
        fds[-1] = reopened
    elif attack == "parts_swapped":
        fds = _parts(data, cuts)
        fds[0], fds[1] = fds[1], fds[0]
    else:
        fds = _parts(data, cuts)
    expected = {
        "unsealed_part": "part 2 of 3 is not sealed", "no_shrink_seal": "not sealed against writing, growing and "
        "shrinking", "middle_not_page_aligned": "not a whole number of", "too_many_parts": "1 to 4 memory files",
        "plain_file_part": "part 2 of 3: the descriptor is not a sealed memory file",
        "pipe_part": "part 2 of 3: the descriptor is not a sealed memory file", "empty_part": "part 4 of 4 is empty",
        "over_cap": "over the 3000-byte result limit",
        "write_only_part": "cannot map a result part", "write_only_single": "cannot map the result memory file", "parts_swapped": "Arrow",
    }[attack]
    try:
        with pytest.raises(ProtocolError, match=expected):
            read_sealed_result({"kind": "arrow", "shape": "frame"}, fds, 3000 if attack == "over_cap" else 2**30)
    finally:
        _close(set(fds) | set(extra))


def test_receive_sealed_takes_up_to_four_parts_per_result_and_drops_the_rest() -> None:
    kernel, worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    kernel.setblocking(False)  # as the backend's: Python 3.11's recv_fds drops its flags argument
    try:
        two = _parts(b"a" * (2 * PAGE), [PAGE])
        five = _parts(b"b" * (5 * PAGE), [PAGE, 2 * PAGE, 3 * PAGE, 4 * PAGE])
        socket.send_fds(worker, [b'{"slot": 1}'], two)
        socket.send_fds(worker, [b'{"slot": 2}'], five)
        socket.send_fds(worker, [b'{"slot": 3}'], [])
        _close(two + five)
        before = len(_open_fds())
        found = receive_sealed(kernel, 4)
        assert list(found) == [1] and len(found[1]) == 2
        assert len(_open_fds()) == before + 2  # the five-part message's descriptors were closed
        _close(found[1])
    finally:
        kernel.close()
        worker.close()


def test_npy_writer_announces_its_exact_size_and_keeps_memory_order() -> None:
    for array in (np.arange(12.0).reshape(3, 4), np.asfortranarray(np.arange(12).reshape(3, 4)),
                  np.arange(40)[::3], np.array(2.5), np.zeros((0, 3)),
                  np.arange(6).astype("datetime64[s]"), np.zeros(3, dtype=[("x", "<i4"), ("y", "<f8")])):
        write, size = npy_writer(array)
        fds = write_sealed(write, size, 3)
        try:
            back = read_sealed_result({"kind": "npy"}, fds, 2**30)
        finally:
            _close(fds)
        assert back.dtype == array.dtype and back.shape == array.shape
        assert back.flags.f_contiguous == (array.flags.f_contiguous and not array.flags.c_contiguous) or \
            back.flags.c_contiguous
        np.testing.assert_array_equal(back, array)


@confined
def test_a_large_worker_result_comes_back_striped_and_exact(monkeypatch) -> None:
    cpus = len(os.sched_getaffinity(0))
    seen: list[int] = []
    real = backend.receive_sealed

    def spy(sock, limit):
        found = real(sock, limit)
        seen.extend(len(parts) for parts in found.values())
        return found

    monkeypatch.setattr(backend, "receive_sealed", spy)
    rows = (2 * STRIPE_MIN_PART_BYTES + 2**20) // 16
    sandbox = SandboxedInterpreter(timeout=120.0)
    try:
        sandbox.execute("1", {}, [])
        worker = sandbox._worker.pid
        result = sandbox.execute(
            "import numpy as np, pandas as pd\n"
            f"frame = pd.DataFrame({{'x': np.arange({rows}, dtype='float64'), 'y': np.arange({rows}) * 3}},"
            " index=pd.RangeIndex(5, 5 + " + str(rows) + ", name='i'))\n"
            "save('wide', frame)\n"
            f"np.asfortranarray(np.arange({rows * 2}, dtype='float64').reshape(-1, 2))", {}, [])
        assert sandbox.execute("2", {}, []).value == 2
        assert sandbox._worker.pid == worker  # the writer threads were joined: no recycled worker
    finally:
        sandbox.close()
    assert result.error is None, result.error
    expected = pd.DataFrame({"x": np.arange(rows, dtype="float64"), "y": np.arange(rows) * 3},
                            index=pd.RangeIndex(5, 5 + rows, name="i"))
    assert_identical(expected, result.saved[0][1])
    array = result.value
    assert array.flags.f_contiguous and not array.flags.writeable
    np.testing.assert_array_equal(array, np.asfortranarray(np.arange(rows * 2, dtype="float64").reshape(-1, 2)))
    assert seen == [min(cpus, STRIPE_MAX_PARTS, 2)] * 2


@confined
def test_a_large_input_is_exported_striped_once_and_read_exactly() -> None:
    """Kernel -> worker: a big frame or array is written over one file per core, mapped back to back."""
    cpus = len(os.sched_getaffinity(0))
    parts = min(cpus, STRIPE_MAX_PARTS, 2)
    rows = (2 * STRIPE_MIN_PART_BYTES + 2**20) // 16
    frame = pd.DataFrame({"x": np.arange(rows, dtype="float64") / 3, "y": np.arange(rows) * 7},
                         index=pd.RangeIndex(3, 3 + rows, name="i"))
    frame.attrs["unit"] = "eur"
    array = np.asfortranarray(np.arange(rows * 2, dtype="float64").reshape(-1, 2))
    sandbox = SandboxedInterpreter(timeout=120.0)
    try:
        versions = {"frame": "frame-v1", "array": "array-v1"}
        first = sandbox.execute("frame", {"frame": frame, "array": array}, ["frame", "array"], versions=versions)
        assert first.error is None, first.error
        files = sandbox.exported_files()
        assert len(files) == 2 * parts
        assert all(os.stat(path).st_mode & 0o777 == 0o444 for path in files)
        assert_identical(frame, first.value)
        again = sandbox.execute("save('a', array)\nfloat(frame['x'].iloc[-1])", {"frame": frame, "array": array},
                                ["frame", "array"], versions=versions)
        assert again.error is None, again.error
        assert sandbox.exported_files() == files  # exported once: the parts are mapped again, not rewritten
        assert again.value == frame["x"].iloc[-1]
        back = again.saved[0][1]
        assert back.flags.f_contiguous
        np.testing.assert_array_equal(back, array)
        child = sandbox.sibling()  # a subagent links every part of the parent's export: same inodes, no rewrite
        try:
            seen = child.execute("float(frame['y'].iloc[-1])", {"frame": frame}, ["frame"],
                                 versions={"frame": "frame-v1"})
            assert seen.error is None and seen.value == float(frame["y"].iloc[-1])
            linked = child.exported_files()
            assert len(linked) == parts
            assert sorted(os.stat(p).st_ino for p in linked) == \
                sorted(os.stat(p).st_ino for p in files if "_frame.arrow" in p)
        finally:
            child.close()
        sandbox.execute("1", {}, [], versions={})  # both handles gone: every part is removed
        assert sandbox.exported_files() == [] and not any(os.path.exists(path) for path in files)
    finally:
        sandbox.close()
