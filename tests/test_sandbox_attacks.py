"""Attack suite: untrusted code in the sandbox must not be able to do harm.

Every payload runs through the real ``python_interpreter`` tool over a
``SandboxedInterpreter``, twice: with the friendly checks (AST pre-check and
audit hook) and without them, which proves the OS layers hold on their own.
After each payload the same canaries are checked: no file appeared or vanished
outside scratch, no listener was contacted, no signal reached this process, no
secret appears in the tool result, the user's variables and pandas are
untouched, the launcher is alive, and the next call works.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import harness_magic
from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.interpreter import make_interpreter_tools
from harness_magic.core.execution.sandbox import SandboxedInterpreter, probe_confinement

SECRET = "sk-canary-5f1d0c0ffee-do-not-leak"

USER_VAR = {"value": "untouched"}
PANDAS_SUM = pd.DataFrame.sum
HARNESS_INIT = Path(harness_magic.__file__)
SITE_PACKAGES = Path(pd.__file__).parent.parent

pytestmark = pytest.mark.skipif(
    not probe_confinement()["confined"], reason="no OS confinement on this machine"
)

_signals: list[int] = []


@pytest.fixture(scope="module", autouse=True)
def kernel_secrets_and_signal_trap():
    """The kernel's environment holds secrets, as in real use; SIGUSR1 here is recorded."""
    saved = {k: os.environ.get(k) for k in ("OPENAI_API_KEY", "SSH_AUTH_SOCK")}
    os.environ["OPENAI_API_KEY"] = SECRET
    os.environ["SSH_AUTH_SOCK"] = "/tmp/ssh-canary/agent.sock"
    previous = signal.signal(signal.SIGUSR1, lambda *_: _signals.append(1))
    yield
    signal.signal(signal.SIGUSR1, previous)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


class Canaries:
    def __init__(self, root: Path) -> None:
        self.dir = root
        (root / "ssh").mkdir()
        (root / "ssh" / "id_rsa").write_text(f"-----BEGIN KEY-----\n{SECRET}\n")
        (root / "jupyter" / "runtime").mkdir(parents=True)
        (root / "jupyter" / "runtime" / "kernel-1.json").write_text(f'{{"key": "{SECRET}"}}')
        (root / "startup").mkdir()
        (root / "victim.txt").write_text("intact")
        os.chmod(root, 0o755)
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(8)
        self.tcp.setblocking(False)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.setblocking(False)
        self.unix_path = str(root / "agent.sock")
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.unix_path)
        os.chmod(self.unix_path, 0o777)
        self.unix.listen(8)
        self.unix.setblocking(False)
        self.init_hash = hashlib.sha256(HARNESS_INIT.read_bytes()).hexdigest()

    def fill(self, code: str) -> str:
        return (code.replace("@DIR@", str(self.dir)).replace("@PID@", str(os.getpid()))
                .replace("@PORT@", str(self.tcp.getsockname()[1]))
                .replace("@UPORT@", str(self.udp.getsockname()[1]))
                .replace("@USOCK@", self.unix_path).replace("@SITE@", str(SITE_PACKAGES)))

    def assert_nothing_happened(self) -> None:
        created = sorted(p.name for p in self.dir.rglob("*pwn*"))
        assert created == [], f"files appeared: {created}"
        assert list((self.dir / "startup").iterdir()) == []
        assert (self.dir / "victim.txt").read_text() == "intact"
        assert not list(SITE_PACKAGES.glob("*pwn*"))
        assert hashlib.sha256(HARNESS_INIT.read_bytes()).hexdigest() == self.init_hash
        for listener in (self.tcp, self.unix):
            with pytest.raises(BlockingIOError):
                listener.accept()
        with pytest.raises(BlockingIOError):
            self.udp.recv(100)
        assert _signals == []
        assert USER_VAR == {"value": "untouched"}
        assert pd.DataFrame.sum is PANDAS_SUM
        assert pd.DataFrame({"a": [1, 2]}).sum()["a"] == 3


@pytest.fixture(scope="module")
def canaries(tmp_path_factory: pytest.TempPathFactory) -> Canaries:
    return Canaries(tmp_path_factory.mktemp("canary"))


@pytest.fixture(scope="module", params=[True, False], ids=["friendly-checks", "os-layers-only"])
def sandbox(request: pytest.FixtureRequest):
    backend = SandboxedInterpreter(timeout=3.0, rss_limit=1536 * 2**20, memory_limit=6 * 2**30,
                                   ast_precheck=request.param, audit_hooks=request.param)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def tool(sandbox):
    cache = SessionCache()
    cache.put("sales", pd.DataFrame({"region": ["n", "s"], "amount": [1.0, 2.0]}))
    tools = {t.name: t for t in make_interpreter_tools(cache, sandbox)}
    return tools["python_interpreter"].handler, cache


PAYLOADS: dict[str, str] = {
    # direct imports
    "os_system": "import os\nos.system('touch @DIR@/pwned')",
    "subprocess_run": "import subprocess\nsubprocess.run(['touch', '@DIR@/pwned'])",
    "os_popen": "import os\nos.popen('touch @DIR@/pwned').read()",
    "os_execv": "import os\nos.execv('/bin/sh', ['sh', '-c', 'touch @DIR@/pwned'])",
    "posix_spawn": "import os\nos.posix_spawn('/usr/bin/touch', ['touch', '@DIR@/pwned'], {})",
    "pty_spawn": "import pty\npty.spawn(['touch', '@DIR@/pwned'])",
    "shutil_copy": "import shutil\nshutil.copy('/etc/hostname', '@DIR@/pwned')",
    # builtins tricks
    "dunder_import": "__import__('os').system('touch @DIR@/pwned')",
    "builtins_module_import": "__builtins__.__import__('os').system('touch @DIR@/pwned')",
    "eval_string": "eval(\"__import__('os').system('touch @DIR@/pwned')\")",
    "exec_string": "exec('import os\\nos.system(\"touch @DIR@/pwned\")')",
    "getattr_concat": "getattr(__builtins__, '__imp' + 'ort__')('os').system('touch @DIR@/pwned')",
    "builtins_open_write": "import builtins\nbuiltins.open('@DIR@/pwned', 'w').write('x')",
    "open_write": "open('@DIR@/pwned', 'w').write('x')",
    # obfuscated identifiers
    "bytes_built_name": ("n = bytes([95,95,105,109,112,111,114,116,95,95]).decode()\n"
                         "getattr(__builtins__, n)('os').system('touch @DIR@/pwned')"),
    "reversed_name": ("n = ''.join(reversed('__tropmi__'))\n"
                      "getattr(__builtins__, n)(''.join(['o', 's'])).system('touch @DIR@/pwned')"),
    "importlib_concat": "import importlib\nimportlib.import_module('o' + 's').system('touch @DIR@/pwned')",
    "globals_builtins": "globals()['__builtins__'].__import__('os').system('touch @DIR@/pwned')",
    # introspection escapes
    "subclasses_popen": ("[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'Popen'][0]"
                         "(['touch', '@DIR@/pwned'])"),
    "subclasses_wrap_close": ("[c for c in object.__subclasses__() if c.__name__ == '_wrap_close'][0]"
                              ".__init__.__globals__['system']('touch @DIR@/pwned')"),
    "helper_globals_os": "save.__globals__['os'].system('touch @DIR@/pwned')",
    "helper_globals_sys_modules": "save.__globals__['sys'].modules['os'].system('touch @DIR@/pwned')",
    "lambda_globals": "(lambda: 0).__globals__['__builtins__'].__import__('os').system('touch @DIR@/pwned')",
    "disarm_audit_hook": ("g = save.__globals__\ng['checks']._state.active = False\n"
                          "g['os'].system('touch @DIR@/pwned')\ng['os'].open('@DIR@/pwned2', 65)"),
    # format-string attribute walks
    "format_env": "'{0.__globals__[os].environ}'.format(save)",
    "format_sys_modules": "'{0.__globals__[sys].modules[os].environ}'.format(save)",
    "format_pandas_globals": "import pandas as pd\n'{0.__class__.__init__.__globals__}'.format(pd.DataFrame())",
    # frame walking
    "getframe_walk": ("import sys\nf = sys._getframe()\nwhile f.f_back: f = f.f_back\n"
                      "f.f_globals['os'].system('touch @DIR@/pwned')"),
    "traceback_frame": ("try:\n    1/0\nexcept Exception as e:\n    g = e.__traceback__.tb_frame.f_back\n"
                        "    g = g.f_globals if g else e.__traceback__.tb_frame.f_globals\n"
                        "    b = g['__builtins__']\n    imp = b['__import__'] if isinstance(b, dict) else b.__import__\n"
                        "    imp('os').system('touch @DIR@/pwned')"),
    "generator_frame": ("x = (i for i in [1])\nb = x.gi_frame.f_builtins\n"
                        "b['__import__']('os').system('touch @DIR@/pwned')"),
    "frame_reads_config": ("import sys\nf = sys._getframe()\nwhile f.f_back: f = f.f_back\n"
                           "print(f.f_locals)"),
    # gc walking
    "gc_find_env": ("import gc\n[o for o in gc.get_objects() if isinstance(o, dict) "
                    "and 'OPENAI_API_KEY' in o]"),
    "gc_find_os_module": ("import gc\nm = [o for o in gc.get_objects() if type(o).__name__ == 'module' "
                          "and o.__name__ == 'os'][0]\nm.system('touch @DIR@/pwned')"),
    "gc_find_user_var": ("import gc\n[o for o in gc.get_objects() if isinstance(o, dict) "
                         "and 'USER_VAR' in o]"),
    # library pivots
    "pandas_io_common_os": "import pandas as pd\npd.io.common.os.system('touch @DIR@/pwned')",
    "pandas_compat_platform": "import pandas as pd\npd.compat.platform.os.system('touch @DIR@/pwned')",
    "numpy_testing_os": "import numpy as np\nnp.testing._private.utils.os.system('touch @DIR@/pwned')",
    "matplotlib_subprocess": "import matplotlib\nmatplotlib.subprocess.run(['touch', '@DIR@/pwned'])",
    "pyarrow_osfile": "import pyarrow as pa\npa.OSFile('@DIR@/pwned', 'wb').write(b'x')",
    "pandas_to_csv": "import pandas as pd\npd.DataFrame({'a': [1]}).to_csv('@DIR@/pwned')",
    "numpy_save": "import numpy as np\nnp.save('@DIR@/pwned', np.arange(3))",
    "matplotlib_savefig": "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.savefig('@DIR@/pwned.png')",
    "numpy_stride_write": ("import numpy as np\na = np.lib.stride_tricks.as_strided(np.zeros(1), "
                           "shape=(10**7,), strides=(4096,))\na[:] = 1"),
    # deserialization
    "pickle_loads": "import pickle\npickle.loads(b\"cos\\nsystem\\n(S'touch @DIR@/pwned'\\ntR.\")",
    "pandas_read_pickle": ("import pandas as pd, io\n"
                           "pd.read_pickle(io.BytesIO(b\"cos\\nsystem\\n(S'touch @DIR@/pwned'\\ntR.\"))"),
    "marshal_code": ("import marshal, types\nc = marshal.loads(marshal.dumps(compile("
                     "\"__import__('os').system('touch @DIR@/pwned')\", 'x', 'exec')))\n"
                     "types.FunctionType(c, {})()"),
    "numpy_load_pickle": ("import numpy as np, io\n"
                          "np.load(io.BytesIO(b\"cos\\nsystem\\n(S'touch @DIR@/pwned'\\ntR.\"), allow_pickle=True)"),
    "reduce_back_to_parent": ("class E:\n    def __reduce__(self):\n        import os\n"
                              "        return (os.system, ('touch @DIR@/pwned',))\nsave('e', E())\nE()"),
    "forged_reply_frame": ("import os, json, struct\nfor fd in range(3, 12):\n    msg = json.dumps({'op': 'result', "
                           "'seq': 0, 'value': {'kind': 'npy', 'file': '../../../../etc/passwd'}}).encode()\n"
                           "    try: os.write(fd, struct.pack('>I', len(msg)) + msg)\n    except OSError: pass"),
    "pickle_descriptor": ("import os, json, struct, pickle\nopen('out_x.pkl', 'wb').write(pickle.dumps(1))\n"
                          "for fd in range(3, 12):\n    msg = json.dumps({'op': 'result', 'seq': 0, 'value': "
                          "{'kind': 'pickle', 'file': 'out_x.pkl'}}).encode()\n"
                          "    try: os.write(fd, struct.pack('>I', len(msg)) + msg)\n    except OSError: pass"),
    # filesystem writes, deletes, persistence
    "overwrite_victim": "open('@DIR@/victim.txt', 'w').write('')",
    "remove_victim": "import os\nos.remove('@DIR@/victim.txt')",
    "rmtree": "import shutil\nshutil.rmtree('@DIR@')",
    "pathlib_write": "import pathlib\npathlib.Path('@DIR@/pwned').write_text('x')",
    "pth_persistence": "open('@SITE@/zz_pwn.pth', 'w').write('import os')",
    "ipython_startup": "open('@DIR@/startup/00-pwn.py', 'w').write('import os')",
    "patch_harness_source": f"open('{HARNESS_INIT}', 'a').write('\\nimport os  # pwn\\n')",
    "symlink_to_secret": "import os\nos.symlink('@DIR@/ssh/id_rsa', 'out_link.npy')",
    # secrets
    "env_dump": "import os\ndict(os.environ)",
    "parent_proc_environ": "open('/proc/@PID@/environ', 'rb').read()",
    "self_proc_environ": "open('/proc/self/environ', 'rb').read()",
    "parent_proc_cmdline_mem": "import os\nfd = os.open('/proc/@PID@/mem', os.O_RDONLY)\nos.read(fd, 100)",
    "ssh_key": "open('@DIR@/ssh/id_rsa').read()",
    "jupyter_connection_file": "open('@DIR@/jupyter/runtime/kernel-1.json').read()",
    "glob_jupyter_runtime": ("import glob\n[open(p).read() for p in glob.glob('/root/.local/share/jupyter/runtime/*')"
                             " + glob.glob('@DIR@/jupyter/runtime/*')]"),
    "etc_shadow": "open('/etc/shadow').read()",
    # network
    "tcp_connect": "import socket\ns = socket.create_connection(('127.0.0.1', @PORT@), timeout=1)\ns.send(b'pwn')",
    "udp_send": "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(b'pwn', ('127.0.0.1', @UPORT@))",
    "unix_connect": "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('@USOCK@')\ns.send(b'pwn')",
    "urllib_open": "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:@PORT@/', timeout=1)",
    "pandas_read_url": "import pandas as pd\npd.read_csv('http://127.0.0.1:@PORT@/x.csv')",
    "http_client": "import http.client\nhttp.client.HTTPConnection('127.0.0.1', @PORT@, timeout=1).request('GET', '/')",
    "ctypes_raw_socket": ("import ctypes, struct\nlibc = ctypes.CDLL(None)\nfd = libc.socket(2, 1, 0)\n"
                          "addr = struct.pack('<HH4s8x', 2, socket_port := (@PORT@ >> 8) | ((@PORT@ & 255) << 8), "
                          "bytes([127, 0, 0, 1]))\nlibc.connect(fd, addr, len(addr))\nfd"),
    # namespace reach into the user's kernel
    "get_ipython": "get_ipython().user_ns['USER_VAR'] = 'pwned'",
    "main_module": "import __main__\n__main__.USER_VAR = {'value': 'pwned'}",
    "sys_modules_test_module": ("import sys\nfor m in list(sys.modules.values()):\n"
                                "    if hasattr(m, 'USER_VAR'): m.USER_VAR['value'] = 'pwned'"),
    "monkeypatch_pandas": "import pandas as pd\npd.DataFrame.sum = lambda *a, **k: 42",
    "mutate_input": "sales.loc[0, 'amount'] = -1\nsales.drop(columns=['region'], inplace=True)",
    # memory tricks
    "ctypes_null_read": "import ctypes\nctypes.string_at(0)",
    "ctypes_memset_input": ("import ctypes, numpy as np\na = np.asarray(sales['amount'])\n"
                            "ctypes.memset(a.ctypes.data, 0, a.nbytes)"),
    "read_own_memory_for_secrets": ("import ctypes, gc\n[ctypes.string_at(id(o), 64) for o in gc.get_objects()"
                                    "[:2000]]\nNone"),
    # output flooding
    "print_forever": "while True:\n    print('x' * 100000)",
    "print_huge": "print('x' * 50_000_000)",
    "huge_value": "'y' * 10**8",
    "stderr_flood": "import sys\nsys.stderr.write('z' * 10**7)",
    "fd_write_flood": "import os\nos.write(1, b'x' * 10**7)",
    "many_charts": "import matplotlib.pyplot as plt\nfor i in range(60):\n    plt.figure()\n    plt.plot([i])",
    "save_flood": "for i in range(1000):\n    save(f'x{i}', i)",
    # resource exhaustion
    "infinite_loop": "while True:\n    pass",
    "sleep": "import time\ntime.sleep(100)",
    "huge_bigint": "10 ** (10 ** 9)",
    "catastrophic_regex": "import re\nre.match(r'(a+)+$', 'a' * 64 + 'b')",
    "huge_allocation": "bytearray(10**12)",
    "growing_allocation": "x = []\nwhile True:\n    x.append(bytearray(10**8))",
    "os_fork": "import os\nif os.fork() == 0:\n    open('@DIR@/pwned_child', 'w')\n    os._exit(0)",
    "multiprocessing": "import multiprocessing as mp\np = mp.Process(target=print)\np.start()\np.join()",
    "background_thread": ("import threading\ndef spin():\n    while True:\n        try: open('@DIR@/pwned_thread', 'w')\n"
                          "        except OSError: pass\nthreading.Thread(target=spin, daemon=True).start()"),
    "signal_parent": "import os, signal\nos.kill(@PID@, signal.SIGUSR1)",
    "signal_parent_group": "import os, signal\nos.killpg(os.getpgid(@PID@), signal.SIGUSR1)",
    "kill_launcher": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
    "ptrace_parent": "import ctypes\nctypes.CDLL(None).ptrace(16, @PID@, 0, 0)",
    "raise_rlimit": "import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))",
    "unshare_userns": "import ctypes\nctypes.CDLL(None).unshare(0x10000000 | 0x40000000)",
}


def _tracer_pid() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("TracerPid:"):
            return int(line.split()[1])
    return 0


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_payload_does_no_harm(payload: str, tool, sandbox, canaries: Canaries) -> None:
    run, cache = tool
    launcher_pid = sandbox._launcher.pid
    before = cache.names()
    output = run(code=canaries.fill(PAYLOADS[payload]))
    time.sleep(0.05)  # let a stray connection or signal land before looking
    canaries.assert_nothing_happened()
    assert SECRET not in output.text
    for name in cache.names():
        if name not in before:
            assert SECRET not in repr(cache.get(name))
    assert len(output.text) < 200_000
    assert cache.get("sales")["amount"].tolist() == [1.0, 2.0]
    assert list(cache.get("sales").columns) == ["region", "amount"]
    assert _tracer_pid() == 0
    os.kill(launcher_pid, 0)  # the launcher is alive
    follow_up = run(code="sum(range(10))")
    assert not follow_up.is_error and "45" in follow_up.text


def test_suite_has_at_least_sixty_payloads() -> None:
    assert len(PAYLOADS) >= 60
