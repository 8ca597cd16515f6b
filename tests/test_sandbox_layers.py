"""Each confinement layer on its own, crash recovery, refusal without confinement, and lifecycle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from harness_magic.core.execution.sandbox import SandboxedInterpreter, SandboxUnavailableError, probe_confinement
from harness_magic.core.confinement import layers as confinement

PROBE = probe_confinement()
FRIENDLY_OFF = {"ast_precheck": False, "audit_hooks": False}


def needs(layer: str):
    held = PROBE.get(layer)
    ok = held is True or (isinstance(held, str) and not held.startswith(("unavailable", "not ")))
    return pytest.mark.skipif(not ok, reason=f"{layer} unavailable here: {held}")


def only(layer: str | None, **kwargs) -> SandboxedInterpreter:
    """A sandbox with the base layers plus at most one OS layer, friendly checks off."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SandboxedInterpreter(layers=[layer] if layer else [], allow_unconfined=True,
                                    timeout=kwargs.pop("timeout", 5.0), **FRIENDLY_OFF, **kwargs)


def run(sandbox, code):
    return sandbox.execute(code, {}, [])


def test_probe_reports_every_layer():
    for layer in (*confinement.BASE_LAYERS, *confinement.OS_LAYERS, "rss_watchdog", "confined"):
        assert layer in PROBE


def test_without_confinement_the_sandbox_refuses_and_names_the_opt_in():
    with pytest.raises(SandboxUnavailableError, match="allow_unconfined=True"):
        SandboxedInterpreter(layers=[])


def test_unconfined_opt_in_warns():
    from harness_magic.core.execution.sandbox import UnconfinedWarning

    with pytest.warns(UnconfinedWarning):
        SandboxedInterpreter(layers=[], allow_unconfined=True).close()


@needs("seccomp")
def test_seccomp_without_a_file_layer_refuses_because_model_code_could_write_the_users_files():
    # What a non-root kernel without Landlock gets: seccomp holds, nothing confines files.
    with pytest.raises(SandboxUnavailableError) as caught:
        SandboxedInterpreter(layers=["seccomp", "netns", "ipcns"])
    message = str(caught.value)
    assert "nothing confines the worker's file access" in message and "'landlock': 'not requested'" in message
    assert "allow_unconfined=True" in message


@needs("seccomp")
def test_seccomp_without_a_file_layer_runs_only_when_opted_in_and_warns_why():
    from harness_magic.core.execution.sandbox import UnconfinedWarning

    with pytest.warns(UnconfinedWarning, match="could write every file this kernel's user can"):
        SandboxedInterpreter(layers=["seccomp"], allow_unconfined=True).close()


@needs("seccomp")
@needs("drop_root")
def test_seccomp_with_drop_root_confines_files_without_landlock(recwarn):
    import pathlib
    import shutil
    import tempfile

    # A directory the worker can enter (pytest's tmp_path sits under a root-only one), so the
    # file's owner and mode are what refuse the writes.
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="drop-root-"))
    tmp_path.chmod(0o755)
    owned = tmp_path / "owned_by_the_kernel_user.txt"
    owned.write_text("kept")
    owned.chmod(0o644)
    try:
        _writes_refused_under_drop_root(tmp_path, owned, recwarn)
    finally:
        shutil.rmtree(tmp_path)


def _writes_refused_under_drop_root(tmp_path, owned, recwarn) -> None:
    with SandboxedInterpreter(layers=["seccomp", "drop_root"], timeout=5.0, **FRIENDLY_OFF) as sandbox:
        readable = run(sandbox, f"open({str(owned)!r}).read()").value  # reachable: ownership refuses below
        written = run(sandbox, f"open({str(owned)!r}, 'w').write('changed')")
        created = run(sandbox, f"open({str(tmp_path / 'new.txt')!r}, 'w').write('x')")
        chmod = run(sandbox, f"import os\nos.chmod({str(owned)!r}, 0o666)")
    assert readable == "kept"
    assert "Permission denied" in written.error and "Permission denied" in created.error
    assert "PermissionError" in chmod.error
    assert owned.read_text() == "kept" and not (tmp_path / "new.txt").exists()
    assert not [w for w in recwarn if "confinement" in str(w.message).lower()]


@needs("landlock")
def test_landlock_alone_is_enough_to_run_without_the_opt_in():
    SandboxedInterpreter(layers=["landlock"], **FRIENDLY_OFF).close()


def test_the_sessions_unconfined_mode_is_the_opt_in_and_worker_mode_is_not(tmp_path):
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import make_backend

    backend = make_backend(AgentConfig(sandbox="unconfined", run_dir=str(tmp_path)))
    try:
        assert backend.allow_unconfined is True
    finally:
        backend.close()
    backend = make_backend(AgentConfig(sandbox="worker", run_dir=str(tmp_path)))
    try:
        assert backend.allow_unconfined is False
    finally:
        backend.close()


def test_the_probe_says_confined_only_when_files_are_confined_too():
    from harness_magic.core.execution.sandbox import confinement_gap

    assert confinement_gap({"landlock": "ABI 7"}) is None
    assert confinement_gap({"seccomp": "115 rules", "drop_root": "uid 65534"}) is None
    assert "no OS confinement" in confinement_gap({"drop_root": "uid 65534", "landlock": "unavailable: ENOSYS"})
    assert "file access" in confinement_gap({"seccomp": "115 rules", "drop_root": "unavailable: not root"})
    # What a non-root kernel's worker reports (confinement.apply_drop_root), with Landlock missing:
    assert "file access" in confinement_gap({"seccomp": "115 rules", "drop_root": "not root",
                                             "landlock": "unavailable: [Errno 38] landlock_create_ruleset"})
    assert PROBE["confined"] == (confinement_gap(PROBE) is None)


# -- base layers (always on) -----------------------------------------------------------------


def test_environment_is_an_allowlist(monkeypatch):
    with only(None) as sandbox:
        env = run(sandbox, "import os\ndict(os.environ)").value
        initial = run(sandbox, "open('/proc/self/environ', 'rb').read()").value
    assert not any(k in env for k in ("OPENAI_API_KEY", "SSH_AUTH_SOCK", "ANTHROPIC_API_KEY", "JPY_SESSION_NAME"))
    assert set(env) <= {"HOME", "TMPDIR", "MPLCONFIGDIR", "LANG", "MPLBACKEND", "OPENBLAS_NUM_THREADS",
                        "OMP_NUM_THREADS"}
    for name in (b"KEY", b"TOKEN", b"SECRET", b"SSH_AUTH_SOCK", b"PASSWORD"):
        assert name not in initial


def test_clean_environment_drops_credentials(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("GITHUB_TOKEN", "x")
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    env = confinement.clean_environment()
    assert "AWS_SECRET_ACCESS_KEY" not in env and "GITHUB_TOKEN" not in env
    assert env["LANG"] == "en_US.UTF-8"


def test_working_directory_is_empty_scratch_and_fds_are_closed():
    with only(None) as sandbox:
        value = run(sandbox, "import os\n(os.listdir('.'), sorted(int(f) for f in os.listdir('/proc/self/fd')))").value
    listing, fds = value
    assert listing == []
    assert len(fds) <= 7  # stdin/out/err on /dev/null, request and reply pipes, the result socket, the listdir fd


def test_worker_has_its_own_process_group_and_session():
    with only(None) as sandbox:
        pid, pgid, sid = run(sandbox, "import os\n(os.getpid(), os.getpgrp(), os.getsid(0))").value
    assert pid == pgid == sid
    assert pgid != os.getpgrp()


def test_rlimits_are_set():
    with only(None, memory_limit=3 * 2**30) as sandbox:
        limits = run(sandbox, "import resource as r\n[r.getrlimit(x) for x in (r.RLIMIT_CORE, r.RLIMIT_AS, "
                              "r.RLIMIT_NOFILE)]").value
        assert limits[0] == [0, 0] or tuple(limits[0]) == (0, 0)
        assert tuple(limits[1]) == (3 * 2**30, 3 * 2**30)
        assert run(sandbox, "bytearray(4 * 2**30)").error.rstrip().endswith("MemoryError")


def test_worker_dies_with_its_parent(tmp_path):
    script = textwrap.dedent("""
        import sys, time, warnings
        warnings.simplefilter('ignore')
        from harness_magic.core.execution.sandbox import SandboxedInterpreter
        s = SandboxedInterpreter(layers=[], allow_unconfined=True)
        print(s.worker_pid, s._launcher.pid, flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    worker, launcher = map(int, proc.stdout.readline().split())
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = [p for p in (worker, launcher) if os.path.exists(f"/proc/{p}") and
                 "Z" not in open(f"/proc/{p}/stat").read().split()[2]]
        if not alive:
            break
        time.sleep(0.1)
    assert not alive


# -- OS layers, one at a time -----------------------------------------------------------------


@needs("seccomp")
def test_seccomp_alone_blocks_exec_fork_sockets_and_signals():
    with only("seccomp") as sandbox:
        assert "Operation not permitted" in run(sandbox, "import os\nos.execv('/bin/true', ['true'])").error
        assert "Operation not permitted" in run(sandbox, "import os\nos.fork()").error
        assert "Operation not permitted" in run(sandbox, "import socket\nsocket.socket()").error
        assert "Operation not permitted" in run(sandbox, "import socket\nsocket.socket(socket.AF_UNIX)").error
        assert "Operation not permitted" in run(sandbox, f"import os\nos.kill({os.getpid()}, 0)").error
        assert run(sandbox, "import os, signal\nos.kill(os.getpid(), 0)\n'self ok'").value == "self ok"
        assert run(sandbox, "import threading\nt = threading.Thread(target=lambda: None)\nt.start()\n"
                            "t.join()\n'threads ok'").value == "threads ok"
        assert run(sandbox, "import resource as r\nr.setrlimit(r.RLIMIT_CORE, (0, 0))").error


@needs("landlock")
def test_landlock_alone_confines_the_filesystem(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    with only("landlock") as sandbox:
        assert "Permission denied" in run(sandbox, f"open({str(secret)!r}).read()").error
        assert "Permission denied" in run(sandbox, f"open({str(tmp_path / 'new')!r}, 'w')").error
        assert "Permission denied" in run(sandbox, f"open('/proc/{os.getpid()}/environ').read()").error
        assert run(sandbox, "open('scratch.txt', 'w').write('ok')\nopen('scratch.txt').read()").value == "ok"
        assert run(sandbox, "import statistics, decimal\nstatistics.mean([1, 2])").value == 1.5
    assert not (tmp_path / "new").exists()


@needs("netns")
def test_network_namespace_alone_has_no_route_out():
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    with only("netns") as sandbox:
        result = run(sandbox, f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)")
        interfaces = run(sandbox, "import socket\n[n for _, n in socket.if_nameindex()]").value
    assert result.error and ("refused" in result.error or "unreachable" in result.error)
    assert interfaces == ["lo"]
    listener.close()


@needs("drop_root")
def test_drop_root_alone_removes_privilege():
    with only("drop_root") as sandbox:
        uid = run(sandbox, "import os\nos.getuid()").value
        caps = run(sandbox, "[l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1]").value
    assert uid != 0 or int(caps, 16) == 0


# -- crash recovery --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sandbox():
    backend = SandboxedInterpreter(timeout=3.0, rss_limit=768 * 2**20, **FRIENDLY_OFF)
    yield backend
    backend.close()


def test_worker_killed_mid_call_gives_an_error_and_the_session_continues(sandbox):
    pid = sandbox.worker_pid
    threading.Timer(0.5, lambda: os.kill(pid, signal.SIGKILL)).start()
    result = run(sandbox, "import time\ntime.sleep(2.5)")
    assert "SandboxError" in result.error and "SIGKILL" in result.error
    assert run(sandbox, "6 * 7").value == 42
    assert sandbox.worker_pid != pid


def test_segfault_is_reported_and_recovered(sandbox):
    result = run(sandbox, "import ctypes\nctypes.string_at(0)")
    assert "SIGSEGV" in result.error
    assert run(sandbox, "'alive'").value == "alive"


def test_memory_limit_kills_and_recovers():
    # its own sandbox with a generous time limit: on a loaded machine filling 768 MiB can take
    # longer than the shared fixture's 3 s, and the time limit must not be what stops it
    backend = SandboxedInterpreter(timeout=30.0, rss_limit=768 * 2**20, **FRIENDLY_OFF)
    try:
        result = run(backend, "import numpy as np\nx = []\nwhile True:\n    x.append(np.ones(2**24))")
        assert "memory limit" in result.error
        assert run(backend, "'alive'").value == "alive"
    finally:
        backend.close()


def test_timeout_kills_the_process_group_and_recovers(sandbox):
    result = run(sandbox, "while True:\n    pass")
    assert "time limit" in result.error  # the loop never ends by itself
    assert run(sandbox, "'alive'").value == "alive"


def test_launcher_killed_is_replaced(sandbox):
    from test_worker_revival import kill_launcher

    kill_launcher(sandbox._launcher, sandbox.worker_pid)  # its worker dies with it (PR_SET_PDEATHSIG)
    result = run(sandbox, "1")
    assert result.error is None and result.value == 1  # its worker died with it: both replaced before the call
    assert result.replaced is not None and result.replaced.process == "launcher"
    assert run(sandbox, "'alive'").value == "alive"


def test_closed_sandbox_refuses_calls():
    backend = SandboxedInterpreter()
    backend.close()
    with pytest.raises(RuntimeError, match="closed"):
        run(backend, "1")


def test_the_notebook_layer_offers_exactly_the_sessions_sandbox_modes():
    # the trait is derived from the core's setting, so its validator is the session's own
    from traitlets import TraitError

    from harness_magic.core.config import SANDBOX_MODES
    from harness_magic.notebook.agent_magics import AgentMagics

    magics = AgentMagics(shell=None)
    for mode in SANDBOX_MODES:
        magics.sandbox = mode
        assert magics.sandbox == mode
    with pytest.raises(TraitError, match=f"allowed: {', '.join(SANDBOX_MODES)}$"):
        magics.sandbox = "chroot"
