"""The sandbox's per-call path, made lean (issue 35 point 4), keeps every check it had.

Contracts:

- A frame crosses exactly (lone surrogates, NUL, NaN, huge numbers included). A reader takes a small frame in
  one read; frames a read brought along wait in the reader (never lost, returned without another read); a large
  frame is assembled a chunk at a time; an empty, oversized, cut, padded, trailing or too deeply nested frame is
  refused with ProtocolError.
- An empty call's reply is ``{"op": "result", "seq": N}``: the worker leaves out every field at its default.
- The result socket is read only when something waits on it: an empty call opens no memory file, and a sealed
  memory file the worker sends without naming it in its reply is closed by that call, never kept. An empty reply
  is taken as it is (no socket read, no sweep): what the worker queued beside it is closed before the next
  request, so it never answers a later call, even under that call's own slot number.
- The wait takes a quick call's reply from its first poll; output, a stale result or a worker ending read there
  go on to the watchdog's loop as before, and a reply past the first interval, or a time limit below or above
  it, are met as before.
- Scratch is swept for result files only after a reply that may have left some (an error, or a result that is
  not inline or sealed); the model's own scratch files stay either way.
- The worker parses each call's code once for the pre-check and the compile: refusals, syntax errors (with
  their line), NUL bytes, nesting too deep for the parser and trailing values read as errors or values, and
  the worker survives each. The pre-check walks the tree in :func:`ast.walk`'s order, leaving out only the leaf
  singletons (``Load``, ``Add``...) and reading only the fields each node class's ASDL signature says hold nodes
  (every field of a class without one); every class the parser makes has its signature read.
- A worker killed between two quick calls is still found by the next one, which runs once in a new worker.
- The audit hook refuses only in the thread that armed it and only while armed, each armed thread with its own
  writable directory (two at once included); disarmed, it lets everything through.
- A kernel holding more than 1,024 descriptors still starts workers and waits for their replies (``poll``, not
  ``select``, whose descriptor sets stop at 1,024).
- A call whose code disarms the audit hook disarms only itself: the next call is armed again.
- A worker is sent the cache's handle names (for ``save()``) only when they changed since its last request, and
  a new worker always; a call that wipes the worker's copy misnames only inside the worker: the kernel names
  saved values itself.
- An ``exec`` request travels packed (its seq in a binary head, its code's UTF-8 as is, JSON only for inputs and
  names when there are any) and an empty call's reply as 9 bytes; both read back as their JSON forms did, exactly
  (surrogates, NUL, code past one read). A packed frame cut short, padded, with fields past its end, fields that
  are not a JSON object, fields naming ``op``, ``seq`` or ``code`` again, or code that is not UTF-8 is refused.
  A packed reply the code forges for another call is dropped as any stale reply is: it never answers a later call.
- The pre-check is handed only the nodes of the classes it checks (names, attributes, constants, imports, and
  their subclasses), in ``ast.walk``'s order: a corpus of allowed and refused sources gets the verdict and the
  message it got before, and every module of the execution plane and every notebook cell the verdict a walk
  looking at every node gives.
- The worker keeps one output capture and empties it for each call: a call's output, its count of dropped
  characters and its stream of output frames are its own, and a call that closes the capture or sets anything on
  it leaves the next call a new one.
"""

from __future__ import annotations

import ast
import json
import os
import resource
import select
import struct
import threading
import warnings
from pathlib import Path

import pytest
from test_worker_revival import kill_and_wait

from harness_magic.core.execution.interpreter import handles_named, referenced_names
from harness_magic.core.execution.sandbox import SandboxedInterpreter, backend, checks, probe_confinement, protocol
from harness_magic.core.execution.sandbox.backend import _may_name_scratch_files
from harness_magic.core.execution.sandbox.launcher_client import LauncherClient
from harness_magic.core.execution.sandbox.protocol import FrameReader, ProtocolError, send_frame

confined = pytest.mark.skipif(not probe_confinement()["confined"], reason="no OS confinement here")

def _memory_files() -> set[str]:
    """This process's descriptors of memory files (what a sealed result arrives as)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:"):
                found.add(fd)
        except OSError:
            pass  # closed meanwhile (the listing's own descriptor)
    return found


@pytest.fixture
def pipe():
    read, write = os.pipe()
    os.set_blocking(read, False)
    yield read, write
    for fd in (read, write):
        try:
            os.close(fd)
        except OSError:
            pass


# -- frames ----------------------------------------------------------------------------------------------------


def test_frames_read_together_come_out_one_at_a_time_without_another_read(pipe) -> None:
    read, write = pipe
    send_frame(write, {"op": "result", "seq": 1})
    send_frame(write, {"op": "result", "seq": 2, "text": "é" * 10})
    reader = FrameReader(read)
    assert reader.feed() == {"op": "result", "seq": 1}  # one read took both frames
    assert reader.pending > 0
    with pytest.raises(BlockingIOError):
        os.read(read, 1)  # the pipe is empty: the second frame waits in the reader
    assert reader.take() == {"op": "result", "seq": 2, "text": "é" * 10}
    assert (reader.take(), reader.feed(), reader.pending) == (None, None, 0)  # nothing left: no wait, no error


def test_a_frame_arriving_in_pieces_is_assembled_across_feeds(pipe) -> None:
    read, write = pipe
    body = b'{"op": "output", "seq": 3, "text": "hello"}'
    data = struct.pack(">I", len(body)) + body
    reader = FrameReader(read)
    for cut in (2, 4, 9):  # mid-header, header alone, mid-body
        os.write(write, data[:cut])
        assert reader.feed() is None
        data = data[cut:]
    os.write(write, data)
    assert reader.feed() == {"op": "output", "seq": 3, "text": "hello"}


@pytest.mark.parametrize("message", [
    {"op": "output", "seq": 7, "text": "a\ud800b\udc80 \x00 é 漢字 \U0001f600 \\ \"q\""},  # lone surrogates, NUL
    {"op": "result", "seq": 2**70, "value": {"t": "float", "v": "nan"}, "n": [float("inf"), -0.0, 1e308, 5e-324]},
    {"op": "result", "seq": 1, "nested": [[[{"k": [None, True, False, ""]}]]], "": {"": []}},
])
def test_frames_cross_exactly(pipe, message: dict) -> None:
    read, write = pipe
    send_frame(write, message)
    received = FrameReader(read).feed()
    assert repr(received) == repr(message)  # repr: NaN and -0.0 compared as written


def _deliver(write: int, data: bytes, reader: FrameReader, frames_wanted: int) -> list[dict]:
    """Write ``data`` as fast as the pipe takes it (a small pipe included), feeding ``reader`` between writes."""
    os.set_blocking(write, False)
    frames: list[dict] = []
    for _ in range(100_000):  # bounded: a reader that never completes a frame fails the test, not the run
        if data:
            try:
                data = data[os.write(write, data):]
            except BlockingIOError:
                pass
        frame = reader.feed()
        if frame is not None:
            frames.append(frame)
        if not data and len(frames) == frames_wanted:
            return frames
    raise AssertionError(f"only {len(frames)} of {frames_wanted} frames came out")


def _frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def test_a_frame_larger_than_one_read_is_assembled_and_the_frame_after_it_kept(pipe) -> None:
    read, write = pipe
    big = {"op": "result", "seq": 1, "stdout": "x" * (3 * FrameReader.READ_BYTES)}
    data = (_frame(b'{"op":"output","seq":1,"text":"first"}') + _frame(json.dumps(big).encode())
            + _frame(b'{"op":"x","s":22}'))
    reader = FrameReader(read)
    frames = _deliver(write, data, reader, 3)
    assert frames == [{"op": "output", "seq": 1, "text": "first"}, big, {"op": "x", "s": 22}]
    assert reader.pending == 0


@pytest.mark.parametrize("frame, error", [
    (struct.pack(">I", 0), "not JSON"),
    (struct.pack(">I", 4) + b"{} x", "extra data"),
    (struct.pack(">I", 3) + b" {}", "not JSON"),
    (struct.pack(">I", 60_000) + b"[" * 60_000, "not JSON"),  # nesting past the recursion limit: refused, not raised
    (struct.pack(">I", 7) + b'{"a":1,', "not JSON"),
    (struct.pack(">I", 2**31), "exceeds"),
    (struct.pack(">I", 5) + b"[1,2]", "not a JSON object"),
    (struct.pack(">I", 4) + b"\xff\xfe{}", "not JSON"),
])
def test_hostile_frames_are_refused(pipe, frame: bytes, error: str) -> None:
    read, write = pipe
    with pytest.raises(ProtocolError, match=error):
        _deliver(write, frame, FrameReader(read), 1)


def test_a_peer_closing_mid_frame_is_an_eof(pipe) -> None:
    read, write = pipe
    os.write(write, struct.pack(">I", 50) + b'{"op"')
    os.close(write)
    reader = FrameReader(read)
    with pytest.raises(EOFError, match="mid-frame"):
        while True:
            reader.feed()


def test_a_whole_frame_in_one_read_over_the_readers_limit_is_refused(pipe) -> None:
    read, write = pipe
    body = b'{"op":"result","seq":1,"pad":"' + b"x" * 40 + b'"}'
    os.write(write, _frame(body))  # header and body arrive in one read: the reader's quick path
    with pytest.raises(ProtocolError, match="exceeds"):
        FrameReader(read, max_bytes=len(body) - 1).feed()
    os.write(write, _frame(body))
    assert FrameReader(read, max_bytes=len(body)).feed() == json.loads(body)  # at the limit: taken


# -- which replies may leave result files in scratch -----------------------------------------------------------


@pytest.mark.parametrize("reply, sweep", [
    ({"error": None, "value": None, "saved": []}, False),
    ({"error": None, "value": {"kind": "tagged", "value": {"t": "int", "v": "2"}}, "saved": []}, False),
    ({"error": None, "value": {"kind": "arrow", "shape": "frame", "fd_slot": 1},
      "saved": [["t", {"kind": "npy", "fd_slot": 2}]]}, False),
    ({"error": None, "value": {"kind": "arrow", "shape": "frame", "file": "out_1_value.arrow"}, "saved": []}, True),
    ({"error": None, "value": None, "saved": [["t", {"kind": "npy", "file": "out_1_0.npy"}]]}, True),
    ({"error": "TransferRefused: too big", "value": None, "saved": []}, True),  # a result half written
    ({"op": "result", "seq": 1}, False),  # an empty call's reply: fields at their defaults are left out
    ({"error": None, "value": None, "saved": "out_1_0.npy"}, True),
    ({"error": None, "value": "out_1_value.arrow", "saved": []}, True),  # a descriptor that is not one
    ({"error": None, "value": None, "saved": [["t"]]}, True),
    ({"error": None, "value": None, "saved": [["t", ["file"]]]}, True),
])
def test_scratch_is_swept_after_every_reply_that_may_have_left_result_files(reply: dict, sweep: bool) -> None:
    assert _may_name_scratch_files(reply) is sweep


# -- the real worker -------------------------------------------------------------------------------------------


@pytest.fixture
def interp():
    sandbox = SandboxedInterpreter(timeout=30.0)
    yield sandbox
    sandbox.close()


@pytest.fixture
def unfriendly():
    """The friendly refusals off (the OS layers still hold): code reaches the worker's own modules."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sandbox = SandboxedInterpreter(timeout=30.0, ast_precheck=False, audit_hooks=False, allow_unconfined=True)
    yield sandbox
    sandbox.close()


@confined
def test_empty_calls_return_nothing_and_hold_no_memory_file(interp) -> None:
    first = interp.execute("pass", {}, [])
    assert (first.error, first.has_value, first.stdout, first.saved, first.charts) == (None, False, "", [], [])
    before = _memory_files()
    for _ in range(50):
        assert interp.execute("pass", {}, []).error is None
    assert _memory_files() == before


def test_a_sealed_file_the_reply_does_not_name_is_closed_by_the_call(unfriendly) -> None:
    assert unfriendly.execute("pass", {}, []).error is None
    before = _memory_files()
    pid = unfriendly.worker_pid
    sneaked = unfriendly.execute(
        "import sys, numpy as np\n"
        "sent = sys.modules['harness_magic.core.execution.sandbox.transfer_worker']"
        ".write_result(np.arange(1000), '.', 'x', [])\n"
        "sent['fd_slot']", {}, [])
    assert sneaked.error is None and isinstance(sneaked.value, int)  # a slot was sent, the reply names none
    assert not unfriendly._worker.results_queued()  # taken off the socket by this call...
    assert _memory_files() == before  # ...and closed
    after = unfriendly.execute("6 * 7", {}, [])
    assert (after.error, after.value, unfriendly.worker_pid) == (None, 42, pid)


@confined
def test_an_empty_calls_reply_holds_no_field_at_its_default(interp, monkeypatch) -> None:
    replies = []
    decode = protocol._decode_frame

    def recording(data: bytes) -> dict:
        frame = decode(data)
        if frame.get("op") == "result":
            replies.append(frame)
        return frame

    monkeypatch.setattr(protocol, "_decode_frame", recording)  # every frame the kernel reads is decoded here
    for code in ("pass", "x = 1", "def f():\n    return 2\n"):
        assert interp.execute(code, {}, []).error is None
        assert replies[-1] == {"op": "result", "seq": interp._seq}
    refused = interp.execute("import subprocess", {}, [])
    assert replies[-1].keys() == {"op", "seq", "error"} and refused.error.startswith("SandboxViolation")
    printed = interp.execute("print('a')\n1/0", {}, [])
    assert replies[-1].keys() == {"op", "seq", "stdout", "error"}
    assert printed.stdout == "a\n" and "ZeroDivisionError" in printed.error and not printed.has_value
    valued = interp.execute("6 * 7", {}, [])
    assert replies[-1].keys() == {"op", "seq", "value"} and valued.value == 42


@confined
def test_lone_surrogates_cross_both_ways_and_the_worker_stays(interp) -> None:
    pid = interp.worker_pid
    printed = interp.execute("print('a\\ud800b')\n'x\\udc80'", {}, [])
    assert (printed.error, printed.stdout, printed.value) == (None, "a\ud800b\n", "x\udc80")
    sent = interp.execute("text", {"text": "in\udfff"}, [])
    assert (sent.error, sent.value, interp.worker_pid) == (None, "in\udfff", pid)


def test_the_models_scratch_files_stay_after_calls_that_return_nothing(unfriendly) -> None:
    made = unfriendly.execute("open('notes.txt', 'w').write('kept')\nopen('out_mine.txt', 'w').write('kept')", {}, [])
    assert made.error is None
    assert unfriendly.execute("pass", {}, []).error is None
    assert {"notes.txt", "out_mine.txt"} <= set(os.listdir(unfriendly.scratch_dir))


@confined
def test_code_parsed_once_still_reads_as_before(interp) -> None:
    pid = interp.worker_pid
    refused = interp.execute("import subprocess", {}, [])
    assert refused.error is not None and refused.error.startswith("SandboxViolation") and refused.stdout == ""
    broken = interp.execute("x = 1\ny = (\n", {}, [])
    assert broken.error is not None and "SyntaxError" in broken.error and "line 2" in broken.error
    nul = interp.execute("x = 1\x00", {}, [])
    assert nul.error is not None and "SyntaxError" in nul.error and "null bytes" in nul.error
    for deep in ("-" * 10_000 + "1", "1+" * 10_000 + "1"):  # the parser gives up: an error, not a dead worker
        too_deep = interp.execute(deep, {}, [])
        assert too_deep.error is not None and ("MemoryError" in too_deep.error or "RecursionError" in too_deep.error)
    value = interp.execute("print('hi')\nx = 20\nx + 22", {}, [])
    assert (value.error, value.value, value.stdout) == (None, 42, "hi\n")
    assert interp.worker_pid == pid  # none of these cost the worker


def test_a_worker_killed_between_quick_calls_is_replaced_and_the_next_call_runs_once(unfriendly) -> None:
    for _ in range(20):
        assert unfriendly.execute("pass", {}, []).error is None
    pid = unfriendly.worker_pid
    kill_and_wait(pid)
    result = unfriendly.execute("with open('runs.txt', 'a') as runs:\n    runs.write('run\\n')\n6 * 7", {}, [])
    assert (result.error, result.value) == (None, 42)
    assert result.replaced is not None and result.replaced.pid == pid and unfriendly.worker_pid != pid
    with open(os.path.join(unfriendly.scratch_dir, "runs.txt")) as runs:
        assert runs.read() == "run\n"


# -- the pre-check's walk --------------------------------------------------------------------------------------


_LEAVES = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop)
"""The singletons the pre-check's walk leaves out (``Load``, ``Add``, ``Eq``...): no fields, no check."""


@pytest.mark.parametrize("code", [
    "pass",
    "import pandas as pd\nx = df.groupby('a')['b'].sum()\nfor i in range(3):\n    z = {'k': [1, i], 'v': f'{i!r:>3}'}\n",
    "class A:\n    def f(self, *a, k=1, **kw):\n        return lambda y: [q async for q in y] if a else (yield from kw)\n",
    "match p:\n    case {'x': [1, *rest]} if rest:\n        pass\n    case _:\n        del p[0:2:1]\n",
    "x = {**a, 'b': -c, None: not d}\nif a < b <= c and d or e:\n    x @= y ** 2 // 3\n",
    "try:\n    pass\nexcept* (ValueError, TypeError) as group:\n    raise\nfinally:\n    global g\n",
    "async def f(x: 'int' = 1, /, *, y: list[int]) -> None:\n    async with a as (b, c):\n        await d\n",
])
def test_the_pre_checks_walk_visits_what_ast_walk_visits_in_the_same_order(code: str) -> None:
    tree = ast.parse(code)
    walked = [ast.dump(node) for node in ast.walk(tree) if not isinstance(node, _LEAVES)]
    assert [ast.dump(node) for node in checks._nodes(tree)] == walked


def test_the_pre_checks_walk_visits_what_ast_walk_visits_in_every_module_of_the_sandbox() -> None:
    for path in sorted(Path(checks.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert list(checks._nodes(tree)) == [node for node in ast.walk(tree) if not isinstance(node, _LEAVES)], path


def test_every_node_class_the_parser_makes_has_its_signature_read() -> None:
    classes = [kind for kind in vars(ast).values() if isinstance(kind, type) and issubclass(kind, ast.AST)
               and kind._fields and not (kind.__doc__ or "").startswith("Deprecated")]
    assert len(classes) > 60
    for kind in classes:
        branches = checks._branches_of(kind)
        assert branches is not None, kind
        assert [name for name, _ in branches] == [name for name in kind._fields if name in dict(branches)], kind
    assert checks._branches_of(ast.Name) == ()  # its id is text, its ctx a leaf
    assert checks._branches_of(ast.Dict) == (("keys", True), ("values", True))


def test_a_node_class_without_its_signature_has_every_field_read() -> None:
    class Odd(ast.expr):  # no ASDL signature in its docstring: read field by field, as ast.walk does
        _fields = ("inner", "items", "text")

    odd = Odd(inner=ast.Name(id="eval", ctx=ast.Load()), items=[ast.Constant(value="__globals__"), 3], text="x")
    assert checks._branches_of(Odd) is None
    assert [type(node).__name__ for node in checks._nodes(ast.Expr(value=odd))] == ["Expr", "Odd", "Name", "Constant"]
    assert "'eval'" in (checks.precheck_tree(ast.Expr(value=odd)) or "")


@pytest.mark.parametrize("code, refusal", [
    ("import os", "import of 'os'"),
    ("x = [1, [2, [3, __import__('os')]]]", "'__import__'"),
    ("def f():\n    class A:\n        y = (lambda: ().__class__)()\n", "'__class__'"),
    ("print(f'{df.__dict__}')", "'__dict__'"),
    ("s = 'a' + '__globals__'", "interpreter internals"),
    ("import numpy\nnumpy.os.system('ls')", "'system'"),
])
def test_the_pre_check_finds_what_it_found_before_however_deep(code: str, refusal: str) -> None:
    found = checks.precheck(code)
    assert found is not None and refusal in found


# -- the session tool's look-up of the handles a call reads ----------------------------------------------------


@pytest.mark.parametrize("code", [
    "pass", "df.head()", "x = sales['df']", "print('df')", "ｄｆ.head()", "dF + df_2", "sales_2023 = sales",
    "def f(df=df):\n    return [df for df in range(3)]", "lambda: sales", "x = (\n", "é = df", "\x00df",
    "class A:\n    df = sales\n", "from x import df", "f'{sales!r}'",
])
@pytest.mark.parametrize("handles", [[], ["df"], ["df", "sales", "sales_2023"], ["é", "ｄｆ", "A"]])
def test_the_handles_a_call_names_are_those_its_parse_finds(code: str, handles: list[str]) -> None:
    assert handles_named(code, handles) == referenced_names(code) & set(handles)


# -- the audit hook's arming -----------------------------------------------------------------------------------


def test_the_audit_hook_refuses_only_in_the_thread_that_armed_it_and_only_while_armed(tmp_path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    outside, inside = tmp_path / "outside.txt", scratch / "inside.txt"
    arm = checks.install_audit_hook(str(scratch))
    seen: dict[str, object] = {}

    def other_thread() -> None:  # runs while the main thread is armed: not this thread's arming
        seen["active"] = checks.audit_active()
        outside.write_text("from another thread")

    with arm:
        assert checks.audit_active()
        with pytest.raises(checks.SandboxViolation, match="writing files"):
            outside.write_text("no")
        inside.write_text("yes")  # the armed thread's own directory
        with pytest.raises(checks.SandboxViolation, match="not available"):
            os.kill(os.getpid(), 0)
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        with pytest.raises(checks.SandboxViolation, match="writing files"):  # still armed here after the thread
            outside.write_text("no")
    assert seen == {"active": False} and outside.read_text() == "from another thread"
    assert not checks.audit_active()
    outside.write_text("after the call")  # disarmed: nothing is refused any more
    assert inside.read_text() == "yes" and outside.read_text() == "after the call"


def test_two_threads_armed_at_once_keep_their_own_directories(tmp_path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    ready, done = threading.Barrier(2), threading.Event()
    outcome: dict[str, str] = {}

    def armed_in(directory, own, other) -> None:
        with checks.install_audit_hook(str(directory)):
            ready.wait(10)  # both armed now
            (directory / "mine.txt").write_text(own)
            try:
                (other / f"from_{own}.txt").write_text(own)
                outcome[own] = "written"
            except checks.SandboxViolation:
                outcome[own] = "refused"
            ready.wait(10)  # neither disarms before both tried
        if own == "second":
            done.set()

    threads = [threading.Thread(target=armed_in, args=(first, "first", second)),
               threading.Thread(target=armed_in, args=(second, "second", first))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert done.is_set() and outcome == {"first": "refused", "second": "refused"}
    assert (first / "mine.txt").read_text() == "first" and (second / "mine.txt").read_text() == "second"
    assert not checks.audit_active()


# -- descriptors numbered past select()'s limit ----------------------------------------------------------------


FD_SETSIZE = 1024
"""The highest descriptor number ``select.select`` can watch, plus one."""


@confined
def test_a_worker_whose_pipes_are_numbered_past_1024_reports_in_and_answers() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = FD_SETSIZE + 200
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"this process may hold only {hard} descriptors")
    LauncherClient.shared()  # started before the descriptors fill up: the launcher outlives this test, its ends low
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    fillers: list[int] = []
    try:
        while not fillers or fillers[-1] < FD_SETSIZE + 10:  # a kernel holding many files: the next ones are high
            fillers.append(os.open(os.devnull, os.O_RDONLY))
        with SandboxedInterpreter(timeout=30.0) as sandbox:
            assert sandbox._worker is not None and sandbox._worker.resp_fd >= FD_SETSIZE
            first = sandbox.execute("print('hi')\n6 * 7", {}, [])
            assert (first.error, first.value, first.stdout) == (None, 42, "hi\n")
            sandbox.fresh_worker()  # a new worker reports in on descriptors past the limit too
            assert sandbox.execute("pass", {}, []).error is None
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@confined
def test_a_call_that_disarms_the_audit_hook_disarms_only_itself() -> None:
    with SandboxedInterpreter(timeout=30.0, ast_precheck=False) as sandbox:  # the hook on, the AST refusals off
        disarmed = sandbox.execute(
            "import sys\nsys.modules['harness_magic.core.execution.sandbox.checks']._armed.clear()\n"
            "import os\nos.kill(os.getpid(), 0)\n'not refused'", {}, [])
        assert (disarmed.error, disarmed.value) == (None, "not refused")  # this call got past its own hook...
        again = sandbox.execute("import os\nos.kill(os.getpid(), 0)", {}, [])
        assert again.error is not None and "SandboxViolation" in again.error  # ...the next call is armed again
        assert "os.kill is not available" in again.error


# -- the cache's handle names a worker keeps -------------------------------------------------------------------


@pytest.fixture
def requests_sent(monkeypatch) -> list[dict]:
    """Every request the kernel sends to a worker, in order, as the worker reads it."""
    sent: list[dict] = []
    send = backend.send_exec

    def recording(fd: int, seq: int, code: str, fields: dict | None = None) -> None:
        read, write = os.pipe()
        try:
            send(write, seq, code, fields)
            sent.append(FrameReader(read).feed())
        finally:
            os.close(read)
            os.close(write)
        send(fd, seq, code, fields)

    monkeypatch.setattr(backend, "send_exec", recording)
    return sent


@confined
def test_a_worker_is_sent_the_caches_names_only_when_they_changed_and_a_new_worker_always(interp, requests_sent):
    def saved_as(taken: list[str]) -> tuple[str, bool]:
        result = interp.execute("save('a', 1)", {}, taken)
        assert result.error is None and [h for h, _ in result.saved] == [result.value]
        return result.value, "taken" in requests_sent[-1]

    assert saved_as(["a"]) == ("a_2", True)  # the first request names them
    assert saved_as(["a"]) == ("a_2", False)  # unchanged: the worker kept them
    assert saved_as(["a", "a_2"]) == ("a_3", True)  # one more handle
    assert saved_as([]) == ("a", True)  # dropped handles are free again
    assert saved_as([]) == ("a", False)
    interp.fresh_worker()
    assert saved_as([]) == ("a", True)  # a new worker knows nothing: it is sent them, the same or not
    kill_and_wait(interp.worker_pid)
    replaced = interp.execute("save('a', 1)", {}, ["a"])  # found dead: the request goes again, to the new worker
    assert (replaced.error, replaced.value, replaced.replaced is not None) == (None, "a_2", True)
    assert [r.get("taken") for r in requests_sent[-2:]] == [["a"], ["a"]]


def test_a_call_that_wipes_the_workers_names_misnames_only_inside_the_worker(unfriendly, requests_sent) -> None:
    wipe = ("import sys\nsys.modules['harness_magic.core.execution.sandbox.worker']._taken = []\nsave('a', 1)")
    wiped = unfriendly.execute(wipe, {}, ["a"])
    assert (wiped.error, wiped.value) == (None, "a")  # the worker's own answer, after the model's code wiped it
    assert [h for h, _ in wiped.saved] == ["a_2"]  # the kernel names saved values itself: "a" stays the cache's
    later = unfriendly.execute("save('a', 2)", {}, ["a"])
    assert "taken" not in requests_sent[-1] and later.value == "a"  # unchanged names are not sent again...
    assert [h for h, _ in later.saved] == ["a_2"]  # ...and still cannot take a handle that exists


# -- packed frames: the exec request and the empty reply -------------------------------------------------------


@pytest.mark.parametrize("code, fields", [
    ("pass", {}),
    ("", None),
    ("print('a\\ud800b\\udc80 \\x00 é 漢字 \\U0001f600')\n'\"q\"'", {"taken": ["a", "é"]}),
    ("x = 1\n" * 30_000, {"inputs": {"df": {"kind": "arrow", "file": "in_1.arrow"}}, "taken": []}),  # past one read
])
def test_a_packed_exec_request_reads_back_as_its_json_form(pipe, code: str, fields: dict | None) -> None:
    read, write = pipe
    sender = threading.Thread(target=protocol.send_exec, args=(write, 2**40 + 3, code, fields))  # may fill the pipe
    sender.start()
    reader, request = FrameReader(read), None
    while request is None:
        assert select.select([read], [], [], 10)[0] or reader.pending, "the request did not arrive"
        request = reader.feed()
    sender.join(10)
    assert repr(request) == repr({"op": "exec", "seq": 2**40 + 3, "code": code, **(fields or {})})


def test_an_empty_reply_is_nine_bytes_and_any_other_reply_json(pipe) -> None:
    read, write = pipe
    protocol.send_reply(write, {"op": "result", "seq": 7})
    assert os.read(read, 100) == struct.pack(">IBQ", 9, protocol.RESULT_FRAME, 7)
    for reply in ({"op": "result", "seq": 7, "stdout": "a"}, {"op": "result", "seq": 2**64},
                  {"op": "result", "seq": True}, {"op": "fatal", "seq": 7}):
        protocol.send_reply(write, reply)
        data = os.read(read, 100)
        assert data[4:5] == b"{" and repr(FrameReader(read).take() or protocol._decode_frame(data[4:])) == repr(reply)


def _packed(seq: int, fields: bytes, code: bytes, extra: int | None = None) -> bytes:
    body = struct.pack(">BQI", protocol.EXEC_FRAME, seq, len(fields) if extra is None else extra) + fields + code
    return struct.pack(">I", len(body)) + body


@pytest.mark.parametrize("frame, error", [
    (struct.pack(">IB", 1, protocol.EXEC_FRAME), "shorter than its 13-byte head"),
    (struct.pack(">IBQ", 9, protocol.EXEC_FRAME, 1), "shorter than its 13-byte head"),
    (_packed(1, b"", b"pass", extra=5), "names 5 bytes of fields"),
    (_packed(1, b"[1]", b"pass"), "not a JSON object"),
    (_packed(1, b'{"a":', b"pass"), "not JSON"),
    (_packed(1, b'{"seq":9}', b"pass"), "repeat its head or code: \\['seq'\\]"),
    (_packed(1, b'{"code":"import os","op":"exec"}', b"pass"), "repeat its head or code: \\['code', 'op'\\]"),
    (_packed(1, b"", b"\xff pass"), "not UTF-8"),
    (struct.pack(">IBI", 5, protocol.RESULT_FRAME, 1), "packed reply of 5 bytes, not 9"),
    (struct.pack(">IBQB", 10, protocol.RESULT_FRAME, 1, 0), "packed reply of 10 bytes, not 9"),
    (struct.pack(">IB", 1, 3), "not JSON"),  # no other kind of packed frame
])
def test_hostile_packed_frames_are_refused(pipe, frame: bytes, error: str) -> None:
    read, write = pipe
    with pytest.raises(ProtocolError, match=error):
        _deliver(write, frame, FrameReader(read), 1)


@confined
def test_an_empty_calls_reply_crosses_packed(interp, monkeypatch) -> None:
    bodies: list[bytes] = []
    decode = protocol._decode_frame

    def recording(data: bytes) -> dict:
        bodies.append(bytes(data))
        return decode(data)

    monkeypatch.setattr(protocol, "_decode_frame", recording)
    assert interp.execute("pass", {}, []).error is None
    assert bodies[-1] == struct.pack(">BQ", protocol.RESULT_FRAME, interp._seq)
    assert interp.execute("1", {}, []).value == 1 and bodies[-1][:1] == b"{"


def test_a_packed_reply_forged_for_a_later_call_never_answers_it(unfriendly) -> None:
    forge = ("import os, struct, sys\n"
             "out = sys.modules['harness_magic.core.execution.sandbox.worker']._stream[0]\n"
             "for later in range(out.seq + 1, out.seq + 4):\n"
             "    os.write(out.fd, struct.pack('>IBQ', 9, 2, later))\n"
             "'forged'")
    forged = unfriendly.execute(forge, {}, [])
    assert (forged.error, forged.value) == (None, "forged")  # the forged frames were stale for this call: dropped
    for value in (1, 2, 3):  # the calls they named run and answer for themselves
        result = unfriendly.execute(f"print('ran')\n{value}", {}, [])
        assert (result.error, result.value, result.stdout) == (None, value, "ran\n")


# -- the worker's one output capture ---------------------------------------------------------------------------


@confined
def test_each_call_has_its_own_output_and_its_own_count_of_dropped_characters() -> None:
    with SandboxedInterpreter(timeout=30.0, stdout_max_chars=10) as sandbox:
        first = sandbox.execute("print('a' * 25)", {}, [])
        assert first.stdout.startswith("a" * 10 + "\n... [16 more characters")
        streamed: list[str] = []
        second = sandbox.execute("print('b')", {}, [], on_output=streamed.append)
        assert (second.stdout, "".join(streamed)) == ("b\n", "b\n")
        assert sandbox.execute("pass", {}, []).stdout == ""


@pytest.mark.parametrize("tamper, replaced", [
    ("sys.stdout.close()", True),
    ("sys.stdout.write = lambda text: len(text)", True),  # output swallowed: for this call only
    ("sys.stdout.value = lambda: 'forged'", True),
    ("sys.stdout.limit = 10**12", False),  # past the cap for this call only: the next call's reset sets it again
])
def test_a_call_that_tampers_with_its_output_capture_leaves_the_next_call_a_working_one(
        unfriendly, tamper: str, replaced: bool) -> None:
    keep = "import builtins, sys\nbuiltins._capture = sys.stdout\n"  # held: a new capture cannot take its address
    same = "import builtins, sys\nsys.stdout is builtins._capture"
    assert unfriendly.execute(keep, {}, []).error is None
    assert unfriendly.execute(same, {}, []).value is True  # one capture, kept between calls
    assert unfriendly.execute(f"{keep}{tamper}", {}, []).error is None
    assert unfriendly.execute(same, {}, []).value is not replaced
    pid = unfriendly.worker_pid
    big = unfriendly._limits["stdout_chars"] + 5
    after = unfriendly.execute(f"print('after')\nprint('x' * {big})", {}, [])
    assert after.error is None and after.stdout.startswith("after\nxxx")
    assert "[12 more characters of output dropped]" in after.stdout  # the cap holds again: 'after\n' + big + '\n'
    assert unfriendly.worker_pid == pid


# -- an empty reply's short way back ---------------------------------------------------------------------------


def test_a_sealed_file_sent_beside_an_empty_reply_never_answers_a_later_call_and_is_closed_before_it(
        unfriendly) -> None:
    assert unfriendly.execute("pass", {}, []).error is None
    before = _memory_files()
    pid = unfriendly.worker_pid
    # A memory file sent with no result naming it, its slot then handed out again: the next call's own array gets
    # the same slot number. The reply names nothing, so this call reads nothing off the result socket.
    sneak = ("import sys, numpy as np\n"
             "worker = sys.modules['harness_magic.core.execution.sandbox.transfer_worker']\n"
             "worker.write_result(np.full(1000, 666), '.', 'x', [])\n"
             "worker._CHANNEL['slot'] -= 1\n")
    sneaked = unfriendly.execute(sneak, {}, [])
    assert (sneaked.error, sneaked.has_value, sneaked.saved) == (None, False, [])
    own = unfriendly.execute("import numpy as np\nnp.arange(1000)", {}, [])
    assert own.error is None and own.value.tolist() == list(range(1000))  # its own array, never the one sneaked
    del own
    assert not unfriendly._worker.results_queued() and _memory_files() == before  # both closed by now
    assert unfriendly.worker_pid == pid


def test_an_empty_reply_after_output_or_a_stale_result_is_still_this_calls(unfriendly) -> None:
    streamed: list[str] = []
    printed = unfriendly.execute("print('first')", {}, [], on_output=streamed.append)
    assert (printed.error, printed.stdout, "".join(streamed)) == (None, "first\n", "first\n")
    stale = ("import os, struct, sys\n"
             "out = sys.modules['harness_magic.core.execution.sandbox.worker']._stream[0]\n"
             "_ = os.write(out.fd, struct.pack('>IBQ', 9, 2, out.seq - 1))\n")  # the call before's empty reply, again
    again = unfriendly.execute(stale, {}, [])
    assert (again.error, again.has_value, again.stdout) == (None, False, "")
    assert unfriendly.execute("6 * 7", {}, []).value == 42


@pytest.mark.parametrize("code, waited", [
    ("import time\ntime.sleep(0.12)\n7", "a reply after the first watchdog interval"),
    ("import os\nos._exit(3)", "a worker ending within it"),
])
def test_a_reply_past_the_first_interval_or_a_worker_ending_within_it_is_read_as_before(
        unfriendly, code: str, waited: str) -> None:
    result = unfriendly.execute(code, {}, [])
    if waited.startswith("a reply"):
        assert (result.error, result.value) == (None, 7)
    else:
        assert result.error is not None and "died before the code finished" in result.error
        assert "exit status 3" in result.error
    assert unfriendly.execute("6 * 7", {}, []).value == 42


@pytest.mark.parametrize("timeout", [0.03, 0.2])
def test_a_time_limit_below_or_above_the_first_interval_still_stops_the_code(timeout: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sandbox = SandboxedInterpreter(timeout=timeout, ast_precheck=False, audit_hooks=False, allow_unconfined=True)
    with sandbox:
        stopped = sandbox.execute("while True:\n    pass", {}, [])
        assert stopped.error is not None and f"{timeout:g}-second time limit" in stopped.error
        assert sandbox.execute("pass", {}, []).error is None


# -- the pre-check looks only at the nodes it checks -----------------------------------------------------------


_IMPORT_REFUSED = ("import of {!r} is not available in the sandbox. Imports other than "
                   + ", ".join(sorted(checks.ALLOWED_IMPORTS)) + " are not available.")

_CORPUS = [
    ('pass', None),
    ('x = 1', None),
    ("df.groupby('a')['b'].sum()", None),
    ('import pandas as pd\nimport numpy.linalg as la', None),
    ('from collections import Counter', None),
    ("print(f'{x!r:>10}')", None),
    ("s = 'a__b'", None),
    ("s = '__' + 'x'", None),
    ("eval('1')", "'eval' is not available in the sandbox: work with the cached handles instead."),
    ('x = exec', "'exec' is not available in the sandbox: work with the cached handles instead."),
    ('compile', "'compile' is not available in the sandbox: work with the cached handles instead."),
    ("__import__('os')", "'__import__' is not available in the sandbox: work with the cached handles instead."),
    ("open('f')", "'open' is not available in the sandbox: work with the cached handles instead."),
    ('breakpoint()', "'breakpoint' is not available in the sandbox: work with the cached handles instead."),
    ('vars()', "'vars' is not available in the sandbox: work with the cached handles instead."),
    ('get_ipython()', "'get_ipython' is not available in the sandbox: work with the cached handles instead."),
    ('().__class__', "attribute '__class__' is not available in the sandbox."),
    ('f.__globals__', "attribute '__globals__' is not available in the sandbox."),
    ("x.__dict__['a']", "attribute '__dict__' is not available in the sandbox."),
    ('g.gi_frame', "attribute 'gi_frame' is not available in the sandbox."),
    ('sys.modules', "attribute 'modules' is not available in the sandbox."),
    ("os.system('ls')", "attribute 'system' is not available in the sandbox."),
    ('numpy.os.environ', "attribute 'environ' is not available in the sandbox."),
    ("s = '__globals__'", 'strings naming interpreter internals are not available in the sandbox.'),
    ("s = f'{x}__subclasses__'", 'strings naming interpreter internals are not available in the sandbox.'),
    ("b = b'__globals__'", None),
    ("x = {'__builtins__': 1}", 'strings naming interpreter internals are not available in the sandbox.'),
    ("match x:\n    case {'a': eval}:\n        pass", None),
    ('def f(open=1):\n    return open',
     "'open' is not available in the sandbox: work with the cached handles instead."),
    ('lambda: quit', "'quit' is not available in the sandbox: work with the cached handles instead."),
    ("class A:\n    __module__ = 'x'", None),
    ("x: 'eval' = 1", None),
    ('async def f():\n    await x.__self__', "attribute '__self__' is not available in the sandbox."),
    ('try:\n    pass\nexcept E as help:\n    pass', None),
    ('[y for y in z if y.f_back]', "attribute 'f_back' is not available in the sandbox."),
    ('import scipy.stats\nfrom sklearn import tree\nx.compat', "attribute 'compat' is not available in the sandbox."),
    ("'''doc __reduce_ex__'''", 'strings naming interpreter internals are not available in the sandbox.'),
    ('import os', _IMPORT_REFUSED.format('os')),
    ('import os.path', _IMPORT_REFUSED.format('os.path')),
    ('from os import path', _IMPORT_REFUSED.format('os')),
    ('from . import x', _IMPORT_REFUSED.format('')),
    ('from .pandas import x', _IMPORT_REFUSED.format('pandas')),
    ('import pandas, subprocess', _IMPORT_REFUSED.format('subprocess')),
    ('x = 1\ny = x.__code__\nimport os', _IMPORT_REFUSED.format('os')),
]
"""Sources allowed and refused, each with the pre-check's verdict and message as it gave them before it looked
only at the nodes it checks (the first refusal in ``ast.walk``'s order: statements before what they hold)."""


@pytest.mark.parametrize("code, verdict", _CORPUS)
def test_the_pre_check_gives_every_source_of_the_corpus_the_verdict_and_message_it_gave_before(
        code: str, verdict: str | None) -> None:
    assert checks.precheck(code) == verdict


def _sources() -> list[str]:
    """Every module of the execution plane and every code cell of the notebooks: nodes of every kind."""
    root = Path(__file__).resolve().parents[1]
    modules = sorted((root / "harness_magic" / "core" / "execution").rglob("*.py"))
    sources = [path.read_text(encoding="utf-8") for path in modules]
    for notebook in sorted((root / "notebooks").glob("*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        sources += ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
    return sources


def test_the_pre_check_gives_each_module_and_notebook_cell_the_verdict_a_walk_looking_at_every_node_gives(
        monkeypatch) -> None:
    trees = []
    for source in _sources():
        try:
            trees.append(ast.parse(source))
        except SyntaxError:
            continue  # a cell holding a magic: never sent to the worker as it is
    assert len(trees) > 100
    verdicts = [checks.precheck_tree(tree) for tree in trees]
    assert sum(v is not None for v in verdicts) > 30 and None in verdicts  # refused and allowed ones both
    monkeypatch.setattr(checks, "_nodes", lambda tree, checked_only=False: ast.walk(tree))  # every node looked at
    assert [checks.precheck_tree(tree) for tree in trees] == verdicts


@pytest.mark.parametrize("code", [
    "pass", "import pandas as pd\nx = df.groupby('a')['b'].sum()\nfrom os import path\n",
    "class A:\n    def f(self):\n        return [q.__class__ for q in 'ab__cd']\n",
])
def test_the_pre_check_is_handed_the_nodes_it_checks_in_ast_walks_order(code: str) -> None:
    tree = ast.parse(code)
    assert list(checks._nodes(tree, checked_only=True)) == [n for n in ast.walk(tree) if isinstance(n, checks._CHECKED)]


def test_a_subclass_of_a_checked_node_class_is_still_looked_at() -> None:
    class Quiet(ast.Name):  # never made by the parser: a tree built by hand
        pass

    tree = ast.Module(body=[ast.Expr(value=Quiet(id="eval", ctx=ast.Load()))], type_ignores=[])
    assert [type(node).__name__ for node in checks._nodes(tree, checked_only=True)] == ["Quiet"]
    assert checks.precheck_tree(tree) == "'eval' is not available in the sandbox: work with the cached handles instead."
