"""Spec (issue 12.2): a subagent maps the input file its parent's sandbox exported, read-only.

A handle's value is exported once per value version; a subagent given that
handle gets a copy under the same value token, and its sandbox links the
parent's file (same inode) instead of writing a second one. Writing to it
from the subagent's worker is refused by the OS (file mode and ownership,
Landlock), not by our checks: the audit hooks and AST precheck are off here.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pandas as pd
import pytest

from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.interpreter import make_interpreter_tools
from harness_magic.core.execution.sandbox import SandboxedInterpreter, probe_confinement

confined = pytest.mark.skipif(not probe_confinement()["confined"], reason="no OS confinement here")

ATTACK = r'''
import json, mmap, os
folder = os.path.join(os.path.dirname(os.getcwd()), "inputs")
names = sorted(os.listdir(folder))
outcome = {"names": names}
def attempt(label, action):
    try:
        action()
        outcome[label] = "done"
    except OSError as exc:
        outcome[label] = type(exc).__name__
for name in names:
    path = os.path.join(folder, name)
    attempt("open_rw", lambda: open(path, "r+b").write(b"X"))
    attempt("open_append", lambda: open(path, "ab").write(b"X"))
    attempt("truncate", lambda: os.truncate(path, 0))
    attempt("chmod", lambda: os.chmod(path, 0o666))
    attempt("unlink", lambda: os.unlink(path))
    attempt("rename", lambda: os.rename(path, path + ".moved"))
    attempt("link_out", lambda: os.link(path, "stolen"))
    def writable_map():
        fd = os.open(path, os.O_RDONLY)
        try:
            mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
    attempt("mmap_shared_write", writable_map)
outcome["sum"] = float(prices["p"].sum())
json.dumps(outcome)
'''

WRITES = ("open_rw", "open_append", "truncate", "chmod", "unlink", "rename", "mmap_shared_write")


def _tool(cache, backend):
    return next(t for t in make_interpreter_tools(cache, backend) if t.name == "python_interpreter")


def _digest(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.blake2b(handle.read()).hexdigest()


def _files(folder: str) -> list[str]:
    return sorted(os.path.join(folder, n) for n in os.listdir(folder))


def _outcome(text: str) -> dict:
    start, end = text.index("{"), text.rindex("}") + 1
    payload = text[start:end]
    try:
        return json.loads(payload)
    except ValueError:
        return json.loads(json.loads(f'"{payload}"'))


@confined
def test_a_subagent_maps_the_parents_export_read_only_and_writes_no_second_one(tmp_path) -> None:
    parent = SandboxedInterpreter(timeout=60.0, ast_precheck=False, audit_hooks=False)
    child = parent.sibling()
    layers = child.layers
    if not (str(layers["drop_root"]).startswith("uid") or str(layers["landlock"]).startswith("ABI")):
        child.close()
        parent.close()
        pytest.skip("neither a separate user nor Landlock holds here: nothing in the OS makes inputs read-only")
    try:
        with SessionCache(spill_dir=tmp_path / "p") as parent_cache, \
                SessionCache(spill_dir=tmp_path / "c") as child_cache:
            parent_cache.put("prices", pd.DataFrame({"p": np.arange(1000.0)}))
            parent_cache.put("secret_plan", pd.DataFrame({"x": [42.0]}))
            parent_tool = _tool(parent_cache, parent)
            assert "499500.0" in parent_tool.handler(code="float(prices['p'].sum())").text
            assert "42.0" in parent_tool.handler(code="float(secret_plan['x'][0])").text
            parent_files = _files(parent.input_dir)
            assert len(parent_files) == 2
            [prices_file] = [p for p in parent.exported_files() if p.endswith("_prices.arrow")]
            before = _digest(prices_file)

            parent_cache.copy_to(child_cache, ["prices"])  # what the subagent tool does with input_handles
            assert child_cache.versions()["prices"] == parent_cache.versions()["prices"]
            out = _tool(child_cache, child).handler(code=ATTACK)
            assert not out.is_error, out.text
            outcome = _outcome(out.text)

            [child_file] = child.exported_files()
            assert os.stat(child_file).st_ino == os.stat(prices_file).st_ino  # the same file, mapped again
            assert os.stat(prices_file).st_nlink == 2
            assert _files(parent.input_dir) == parent_files  # nothing new written for the subagent
            assert outcome["names"] == [os.path.basename(child_file)]  # it sees its input only, not secret_plan
            assert outcome["sum"] == 499500.0
            for write in WRITES:
                assert outcome[write] in ("PermissionError", "OSError"), (write, outcome)
            assert _digest(prices_file) == before
            assert oct(os.stat(prices_file).st_mode & 0o777) == oct(0o444)

            parent_cache.retire("prices")  # the parent's link goes; the subagent's copy stays usable
            parent_tool.handler(code="1")
            assert not os.path.exists(prices_file)
            assert "499500.0" in _tool(child_cache, child).handler(code="float(prices['p'].sum())").text
    finally:
        child.close()
        parent.close()


@confined
def test_a_subagent_exports_through_its_parent_when_the_parent_never_used_the_handle(tmp_path) -> None:
    parent = SandboxedInterpreter(timeout=60.0)
    child = parent.sibling()
    try:
        with SessionCache(spill_dir=tmp_path / "p") as parent_cache, \
                SessionCache(spill_dir=tmp_path / "c") as child_cache:
            parent_cache.put("prices", pd.DataFrame({"p": np.arange(10.0)}))
            parent_cache.copy_to(child_cache, ["prices"])
            assert "45.0" in _tool(child_cache, child).handler(code="float(prices['p'].sum())").text
            [exported] = parent.exported_files()  # written once, in the parent's session
            assert os.stat(exported).st_ino == os.stat(child.exported_files()[0]).st_ino
            assert "45.0" in _tool(parent_cache, parent).handler(code="float(prices['p'].sum())").text
            assert parent.exported_files() == [exported]  # the parent's later call reuses it too
    finally:
        child.close()
        parent.close()


def test_a_version_token_must_be_a_token() -> None:
    with SessionCache() as cache:
        for bad in ("", 3, ["1-2"]):
            with pytest.raises(ValueError, match="version must be a non-empty token"):
                cache.put("x", 1, version=bad)
        assert cache.names() == []


@confined
def test_the_subagent_tool_hands_its_sandbox_the_parents_value_token(tmp_path) -> None:
    from harness_magic.core.agent.loop import Harness
    from harness_magic.core.providers.offline import ScriptedModel
    from harness_magic.core.providers.adapter import ProviderAdapter
    from harness_magic.core.control.subagent import enable_subagents

    turns = [
        {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": "float(prices['p'].sum())"}}]},
        {"tool_calls": [{"name": "subagent", "arguments": {"task": "sum", "input_handles": ["prices"]}}]},
        {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": "float(prices['p'].sum())"}}]},
        {"text": "summed"},
        {"text": "done"},
    ]
    backend = SandboxedInterpreter(timeout=60.0)
    seen: dict = {}

    def sibling():
        child = SandboxedInterpreter.sibling(backend)
        original = child.execute

        def execute(*args, **kwargs):
            result = original(*args, **kwargs)
            seen["inodes"] = [os.stat(p).st_ino for p in child.exported_files()]
            seen["parent_files"] = _files(backend.input_dir)
            return result

        child.execute = execute
        return child

    try:
        with SessionCache(spill_dir=tmp_path / "s") as cache:
            cache.put("prices", pd.DataFrame({"p": np.arange(100.0)}))
            parent = Harness(ProviderAdapter("scripted/test", transport=ScriptedModel(turns)), "sys",
                             make_interpreter_tools(cache, backend), max_turns=6, run_dir=str(tmp_path), cache=cache)
            enable_subagents(parent, backend_factory=sibling)
            result = parent.run_result("go")
            assert result.status == "completed", result.error
            [exported] = backend.exported_files()
            assert seen["inodes"] == [os.stat(exported).st_ino]
            assert seen["parent_files"] == [exported]
    finally:
        backend.close()
