"""Attacks on the edges around the sandbox's OS layers (issue 11, points 3, 5 and 6).

Each test is an attack with a canary: a worker that stalls mid-frame and then
allocates, a memmap fill of scratch, SysV IPC and message queues, signal
routing through ``fcntl`` with Landlock off, and a previous cell or a subagent
that monkeypatches pandas and leaves a raw ``_thread`` thread behind. The
friendly checks (AST pre-check, audit hook) are off throughout: what holds here
is the OS and the kernel-side loop.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import threading
import time
import warnings

import pytest

from harness_magic.core.execution.sandbox import SandboxedInterpreter, probe_confinement

PROBE = probe_confinement()
FRIENDLY_OFF = {"ast_precheck": False, "audit_hooks": False}
MiB = 2**20

pytestmark = pytest.mark.skipif(not PROBE["confined"], reason="no OS confinement on this machine")


def held(layer: str) -> bool:
    value = PROBE.get(layer)
    return value is True or (isinstance(value, str) and not value.startswith(("unavailable", "not ")))


def needs(layer: str):
    return pytest.mark.skipif(not held(layer), reason=f"{layer} unavailable here: {PROBE.get(layer)}")


def sandbox_with(layers=None, **options) -> SandboxedInterpreter:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SandboxedInterpreter(layers=layers, allow_unconfined=layers is not None, **FRIENDLY_OFF, **options)


def run(sandbox, code):
    return sandbox.execute(code, {}, [])


class PeakMemory:
    """Samples a worker's resident anonymous + shared memory from outside while a call runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                fields = dict(line.split(":", 1) for line in open(f"/proc/{self.pid}/status"))
                used = (int(fields["RssAnon"].split()[0]) + int(fields["RssShmem"].split()[0])) * 1024
                self.peak = max(self.peak, used)
            except (OSError, KeyError, ValueError):
                pass
            time.sleep(0.005)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


# -- point 3: every wait has a deadline and a memory bound ----------------------------------------

FORGE_HALF_FRAME = """
import os, struct
for fd in range(3, 16):
    try:
        os.write(fd, struct.pack('>I', 10_000_000) + b'{"op": "result", "seq": ')
    except OSError:
        pass
"""


def test_a_worker_stalling_mid_frame_then_allocating_is_stopped_by_the_memory_limit():
    limit = 256 * MiB
    with sandbox_with(timeout=5.0, rss_limit=limit, memory_limit=3 * 2**30) as sandbox:
        with PeakMemory(sandbox.worker_pid) as memory:
            result = run(sandbox, FORGE_HALF_FRAME + "x = []\nwhile True:\n    x.append(bytearray(2**24))")
        assert "memory limit" in result.error  # the reason names the limit that stopped it (not "time limit")
        assert memory.peak < limit + 256 * MiB
        assert run(sandbox, "6 * 7").value == 42


def test_a_worker_stalling_mid_frame_meets_the_wall_clock_limit():
    with sandbox_with(timeout=2.0) as sandbox:
        result = run(sandbox, FORGE_HALF_FRAME + "import time\ntime.sleep(60)")
        assert "time limit" in result.error  # the 2 s limit stopped it, not the 60 s sleep's end
        assert run(sandbox, "'alive'").value == "alive"


def test_a_flood_of_forged_stale_frames_does_not_blind_the_watchdog():
    limit = 256 * MiB
    flood = ("import os, json, struct, threading\nframe = json.dumps({'op': 'result', 'seq': -1}).encode()\n"
             "frame = struct.pack('>I', len(frame)) + frame\ndef spam(os=os, frame=frame):\n    while True:\n"
             "        for fd in range(3, 16):\n            try: os.write(fd, frame)\n            except OSError: pass\n"
             "threading.Thread(target=spam, daemon=True).start()\n"
             "x = []\nwhile True:\n    x.append(bytearray(2**24))")
    with sandbox_with(timeout=8.0, rss_limit=limit, memory_limit=3 * 2**30) as sandbox:
        result = run(sandbox, flood)
        assert "memory limit" in result.error  # a blinded watchdog would have ended it by the time limit
        assert run(sandbox, "6 * 7").value == 42


def test_a_trickled_oversized_frame_is_refused_without_buffering_it():
    with sandbox_with(timeout=5.0) as sandbox:
        result = run(sandbox, "import os, struct\nfor fd in range(3, 16):\n    try: os.write(fd, struct.pack('>I', "
                              "2**31))\n    except OSError: pass\nimport time\ntime.sleep(30)")
        assert "exceeds" in result.error  # refused on the length, not ended by the time limit
        assert run(sandbox, "1 + 1").value == 2


def test_a_memmap_fill_of_scratch_counts_against_the_memory_limit_and_is_deleted():
    limit = 512 * MiB
    with sandbox_with(timeout=20.0, rss_limit=limit) as sandbox:
        with PeakMemory(sandbox.worker_pid) as memory:
            result = run(sandbox, "import numpy as np\nm = np.memmap('fill.bin', dtype='uint8', mode='w+', "
                                  "shape=(3 * 2**30,))\nfor i in range(0, 3 * 2**30, 2**24):\n    m[i:i + 2**24] = 1")
        assert "memory limit" in result.error
        assert memory.peak < limit + 512 * MiB
        assert os.listdir(sandbox.scratch_dir) == []  # the attack's residue does not stay for the session
        assert run(sandbox, "'alive'").value == "alive"


@pytest.mark.parametrize("hoard", [
    "import os\nfd = os.memfd_create('hoard')\nfor i in range(192):\n    os.write(fd, b'x' * 2**24)",
    "import os\nf = open('hidden', 'wb')\nos.unlink('hidden')\nfor i in range(192):\n    f.write(b'x' * 2**24)",
], ids=["unmapped-memfd", "deleted-open-file"])
def test_memory_held_only_through_descriptors_counts_against_the_limit(hoard):
    with sandbox_with(timeout=30.0, rss_limit=512 * MiB) as sandbox:
        result = run(sandbox, hoard)
        assert "memory limit" in result.error  # not the 30 s time limit
        assert run(sandbox, "'alive'").value == "alive"


@needs("memory_cgroup")
def test_the_memory_cgroup_alone_holds_the_limit_between_watchdog_samples(monkeypatch):
    from harness_magic.core.execution.sandbox.watchdog import ReplyWatch

    with sandbox_with(timeout=20.0, rss_limit=256 * MiB) as sandbox:
        # blind the watchdog: only the OS is left
        monkeypatch.setattr(ReplyWatch, "over_memory", lambda *args, **kwargs: None)
        assert sandbox.layers["memory_cgroup"].startswith("cgroup v")
        result = run(sandbox, "import numpy as np\nm = np.memmap('burst.bin', dtype='uint8', mode='w+', "
                              "shape=(2**30,))\nm[:] = 1\nblob = b'x' * 2**30")
        assert "memory cgroup" in result.error
        assert os.listdir(sandbox.scratch_dir) == []
        assert run(sandbox, "'alive'").value == "alive"


def test_scratch_files_written_and_closed_are_capped():
    with sandbox_with(timeout=20.0, scratch_max_bytes=128 * MiB) as sandbox:
        result = run(sandbox, "import time\nfor i in range(40):\n    with open(f'f{i}.bin', 'wb') as f:\n"
                              "        f.write(b'x' * 2**23)\n    time.sleep(0.02)")
        assert "scratch limit" in result.error
        assert os.listdir(sandbox.scratch_dir) == []
        assert run(sandbox, "open('ok.txt', 'w').write('ok')").value == 2  # scratch still works


def test_scratch_left_by_a_dead_kernel_is_swept_and_nothing_else(tmp_path):
    from harness_magic.core.execution.sandbox.launcher_client import sweep_stale_roots

    dead = 2**22 + 12345  # above the default pid_max: never a live process
    stale = tmp_path / f"harness-sandbox-{dead}-abc"
    (stale / "session-x" / "scratch").mkdir(parents=True)
    (stale / "session-x" / "scratch" / "fill.bin").write_bytes(b"x" * 4096)
    live = tmp_path / f"harness-sandbox-{os.getpid()}-def"
    live.mkdir()
    other = tmp_path / "harness-sandboxed-notes"
    other.mkdir()
    assert sweep_stale_roots(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and live.exists() and other.exists()


def test_many_small_scratch_files_are_refused():
    with sandbox_with(timeout=20.0) as sandbox:
        result = run(sandbox, "import time\nfor i in range(12_000):\n    open(f'n{i}', 'w').close()\ntime.sleep(1)")
        assert "scratch files" in result.error
        assert os.listdir(sandbox.scratch_dir) == []


# -- point 5: the worker holds nothing -----------------------------------------------------------

IPC_KEY = 0x4841524E
"""The System V key the worker tries to create its objects under."""
IPC_CALLS = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def attempt(fn, *args):
    ctypes.set_errno(0)
    value = fn(*args)
    return (value, ctypes.get_errno())
KEY = %d
results = {
    'shmget': attempt(libc.shmget, KEY, 4096, 0o1666),
    'semget': attempt(libc.semget, KEY, 1, 0o1666),
    'msgget': attempt(libc.msgget, KEY, 0o1666),
    'mq_open': attempt(libc.mq_open, b'/harness-pwn', os.O_CREAT | os.O_RDWR, 0o666, None),
}
results
""" % IPC_KEY


def _host_sysv_keys() -> set[int]:
    keys = set()
    for table in ("shm", "sem", "msg"):
        with open(f"/proc/sysvipc/{table}") as listing:
            next(listing)
            keys |= {int(line.split()[0]) for line in listing if line.strip()}
    return keys


@needs("seccomp")
def test_seccomp_denies_sysv_ipc_and_posix_message_queues():
    assert IPC_KEY not in _host_sysv_keys()
    with sandbox_with() as sandbox:
        results = run(sandbox, IPC_CALLS).value
    assert results == {name: (-1, errno.EPERM) for name in ("shmget", "semget", "msgget", "mq_open")}
    assert IPC_KEY not in _host_sysv_keys()  # the key the worker asked for (other processes' keys come and go)
    assert not os.path.exists("/dev/mqueue/harness-pwn")


@needs("ipcns")
def test_the_ipc_namespace_hides_host_segments_and_takes_the_worker_s_with_it():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    key = 0x48415253
    host_id = libc.shmget(key, 4096, 0o1600)  # IPC_CREAT | 0600, as another process's private segment
    assert host_id >= 0
    address = libc.shmat(host_id, None, 0)
    ctypes.memmove(address, b"host-canary", 11)
    try:
        with sandbox_with(layers=["ipcns"]) as sandbox:
            seen = run(sandbox, f"import ctypes\nlibc = ctypes.CDLL(None)\nlibc.shmget({key}, 0, 0)").value
            made = run(sandbox, "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.shmget(0x4841524f, 4096, 0o1666)").value
        assert seen == -1  # the host's segment does not exist inside
        assert made >= 0  # the worker made one in its own namespace...
        assert 0x4841524F not in _host_sysv_keys()  # ...which never reached the host's
        assert ctypes.string_at(address, 11) == b"host-canary"
    finally:
        libc.shmdt(ctypes.c_void_p(address))
        libc.shmctl(host_id, 0, None)  # IPC_RMID


FCNTL_SIGNAL = """
import fcntl, os, signal
r, w = os.pipe()
outcome = {}
for name, call in [
    ('F_SETOWN', lambda: fcntl.fcntl(r, fcntl.F_SETOWN, @PID@)),
    ('F_SETSIG', lambda: fcntl.fcntl(r, 10, signal.SIGUSR1)),
    ('F_SETOWN_EX', lambda: fcntl.fcntl(r, 15, (0).to_bytes(4, 'little') + (@PID@).to_bytes(4, 'little'))),
    ('O_ASYNC', lambda: fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)),
    ('FIOASYNC', lambda: fcntl.ioctl(r, 0x5452, (1).to_bytes(4, 'little'))),
    ('FIOSETOWN', lambda: fcntl.ioctl(r, 0x8901, (@PID@).to_bytes(4, 'little'))),
]:
    try:
        call()
        outcome[name] = 'allowed'
    except OSError as exc:
        outcome[name] = exc.errno
os.write(w, b'x')
outcome['plain_flags'] = fcntl.fcntl(r, fcntl.F_SETFL, os.O_NONBLOCK)
outcome
"""


@needs("seccomp")
def test_signals_routed_through_fcntl_are_denied_by_seccomp_alone():
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: received.append(1))
    try:
        # Landlock (whose signal scope would also stop this on 6.12+) and drop_root are off:
        # the worker is root here, so only seccomp stands between it and this process.
        with sandbox_with(layers=["seccomp"]) as sandbox:
            outcome = run(sandbox, FCNTL_SIGNAL.replace("@PID@", str(os.getpid()))).value
        time.sleep(0.1)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert received == []
    for name in ("F_SETOWN", "F_SETSIG", "F_SETOWN_EX", "O_ASYNC", "FIOASYNC", "FIOSETOWN"):
        assert outcome[name] == errno.EPERM, (name, outcome)
    assert outcome["plain_flags"] == 0  # ordinary flags still work


@needs("drop_root")
def test_the_worker_never_keeps_uid_0_and_says_how():
    with sandbox_with() as sandbox:
        ids = run(sandbox, "import os\n(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())").value
        status = sandbox.layers["drop_root"]
        assert run(sandbox, "import pandas, statistics\nstatistics.mean([1, 2])").value == 1.5
    if os.geteuid() == 0:
        assert ids[0] != 0 and ids[1] != 0 and ids[2] != 0 and ids[3] == []
        assert status.startswith("uid 65534")
    else:
        assert status == "not root"


@needs("drop_root")
def test_agent_sandbox_names_the_arrangement_that_drops_root():
    pytest.importorskip("IPython")
    from harness_magic.notebook.tables import sandbox_rows

    rows = {row["layer"]: row for row in sandbox_rows(PROBE)}
    assert rows["drop_root"]["state"] == "on"
    assert rows["drop_root"]["detail"].startswith(("uid 65534", "not root"))
    assert "memory" in rows["rss_watchdog"]["detail"] and "scratch" in rows["rss_watchdog"]["detail"]
    assert {"ipcns", "memory_cgroup"} <= set(rows)


# -- point 6: a fresh worker per cell and per subagent -------------------------------------------

POISON = ("import pandas as pd, _thread, time\npd.Series.sum = lambda self, *a, **k: 10 * 42\n"
          "def spin(time=time, log=[]):\n    while True:\n        log.append(1)\n        time.sleep(0.005)\n"
          "_thread.start_new_thread(spin, ())\n'poisoned'")
TOTAL = "import pandas as pd\npd.Series([1.5, 2.5, 3.0]).sum()"


def _threads(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.02)
    return False


def _session(tmp_path, turns, **options):
    from harness_magic.core.providers.offline import ScriptedModel
    from harness_magic.core.providers.adapter import ProviderAdapter
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    adapter = ProviderAdapter("scripted/test", transport=ScriptedModel(turns))
    return AgentSession(AgentConfig(run_dir=str(tmp_path), sandbox="worker"), adapter=adapter,
                        backend=sandbox_with(), **options)


def _python(code):
    return {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]}


def _tool_texts(result):
    return [b.content for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"]


def test_a_previous_cell_s_monkeypatch_and_raw_thread_do_not_outlive_it(tmp_path):
    session = _session(tmp_path, [_python(POISON), {"text": "poisoned"}, _python(TOTAL), {"text": "total"}])
    try:
        first = session.ask("cell 1")
        poisoned_pid = session.backend.worker_pid
        assert "poisoned" in _tool_texts(first)[-1]
        second = session.ask("cell 2")
        assert "7.0" in _tool_texts(second)[-1] and "420" not in _tool_texts(second)[-1]
        assert _gone(poisoned_pid)
        assert session.backend.worker_pid != poisoned_pid
        assert _threads(session.backend.worker_pid) == 1
    finally:
        session.close()


def test_a_raw_thread_left_by_a_call_recycles_the_worker_within_the_cell():
    """Best effort inside the worker (a thread not yet scheduled can be missed); the boundary is per cell."""
    with sandbox_with() as sandbox:
        result = run(sandbox, POISON.replace("\n'poisoned'", "\ntime.sleep(0.05)\n'poisoned'"))
        assert "threads were still running" in result.stdout
        assert run(sandbox, TOTAL).value == 7.0


def test_a_subagent_s_monkeypatch_and_raw_thread_never_reach_the_parent(tmp_path):
    turns = [
        _python("import pandas as pd\npd.Series([1.0]).sum()"),  # the parent's worker is warm
        {"tool_calls": [{"name": "subagent", "arguments": {"task": "poison", "output_policy": "text_only"}}]},
        _python(POISON),  # the subagent's turns
        {"text": "done poisoning"},
        _python(TOTAL),  # the parent again, same cell
        {"text": "total"},
    ]
    session = _session(tmp_path, turns, subagents=True)
    try:
        parent_pid_holder = {}
        original = session.backend.sibling

        def spy():
            child = original()
            parent_pid_holder["child"] = child.worker_pid
            return child

        session.backend.sibling = spy
        result = session.ask("cell")
        texts = _tool_texts(result)
        assert result.ok, result.error
        assert "7.0" in texts[-1] and "420" not in texts[-1]
        assert parent_pid_holder["child"] != session.backend.worker_pid
        assert _gone(parent_pid_holder["child"])  # the subagent's worker is closed with its run
        assert _threads(session.backend.worker_pid) == 1
    finally:
        session.close()
