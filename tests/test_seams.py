"""Defects at the seams, tested through the paths users take (AgentSession, a real IPython shell).

* The interpreter backend is one declared seam: every wrapper forwards every
  member, so "exported once per value version" holds through AgentSession.
* ``%unload_ext`` removes every magic ``%load_ext`` registered (one list drives both).
* An empty frame without columns spills and comes back exactly.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness_magic import AgentConfig, AgentSession, ProviderAdapter, ScriptedModel
from harness_magic.core.execution.interpreter import BACKEND_MEMBERS, InProcessInterpreter, InterpreterBackend
from harness_magic.core.execution.sandbox import SandboxedInterpreter, probe_confinement
from harness_magic.core.session import SessionBackend

PACKAGE = Path(__file__).resolve().parent.parent / "harness_magic"
confined = pytest.mark.skipif(not probe_confinement()["confined"], reason="no OS confinement here")


def _call(code: str) -> dict:
    return {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]}


def _session(tmp_path: Path, turns: list, sandbox: str = "worker", **config) -> AgentSession:
    adapter = ProviderAdapter("scripted/seams", transport=ScriptedModel(turns))
    return AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox=sandbox, **config), adapter=adapter)


# -- the interpreter backend seam -----------------------------------------------------------------


def test_the_protocol_declares_exactly_the_members_every_backend_and_the_wrapper_define():
    declared = set(InterpreterBackend.__annotations__) | {n for n in vars(InterpreterBackend) if not n.startswith("_")}
    assert declared == set(BACKEND_MEMBERS)
    for cls in (InProcessInterpreter, SandboxedInterpreter, SessionBackend):
        missing = [m for m in BACKEND_MEMBERS if not hasattr(cls, m)]
        assert missing == [], f"{cls.__name__} lacks {missing}"


def test_no_module_probes_for_a_backend_capability():
    names = "|".join(m for m in BACKEND_MEMBERS if m not in ("name", "execute", "close"))
    probe = re.compile(rf"""(getattr|hasattr)\([^()]*["']({names})["']""")
    offenders = [f"{p.relative_to(PACKAGE)}: {m.group(0)}" for p in PACKAGE.rglob("*.py")
                 for m in probe.finditer(p.read_text())]
    assert offenders == []


def test_a_backend_missing_members_is_refused_naming_them(tmp_path):
    class Bare:
        name = "bare"

        def execute(self, code, inputs, taken_names):
            raise AssertionError("never called")

        def close(self):
            pass

    with pytest.raises(TypeError, match=r"backend Bare lacks exports_inputs, streams_output, has_workers"):
        AgentSession(AgentConfig(run_dir=str(tmp_path)), backend=Bare(), adapter=ProviderAdapter(
            "scripted/x", transport=ScriptedModel([{"text": "x"}])))


@confined
def test_the_session_wrapper_forwards_every_member_to_the_sandbox(tmp_path):
    session = _session(tmp_path, [_call("1"), {"text": "done"}])
    try:
        assert session.ask("go").ok
        wrapper, real = session._tool_backend, session.backend
        for member in ("exports_inputs", "streams_output", "has_workers", "worker_pid", "restarts", "last_start_s"):
            assert getattr(wrapper, member) == getattr(real, member), member
        assert wrapper.exports_inputs and wrapper.streams_output and wrapper.has_workers
        first = real.worker_pid
        wrapper.retire_worker()
        assert real.worker_pid is None and wrapper.worker_pid is None
        assert wrapper.start_worker() > 0 and real.worker_pid not in (None, first)
        second = real.worker_pid
        wrapper.fresh_worker()
        assert real.worker_pid not in (None, second)
        child = wrapper.sibling()
        try:
            assert isinstance(child, SandboxedInterpreter) and child.worker_pid not in (None, real.worker_pid)
        finally:
            child.close()
        wrapper.close()  # the session owns its backend: the wrapper's close leaves it running
        assert real.execute("6 * 7", {}, []).value == 42
    finally:
        session.close()


def test_the_session_wrapper_over_an_in_process_backend_declares_no_workers(tmp_path):
    session = _session(tmp_path, [_call("print('hi')\n2"), {"text": "done"}], sandbox="inprocess")
    try:
        assert session.ask("go").ok
        wrapper = session._tool_backend
        assert (wrapper.exports_inputs, wrapper.has_workers, wrapper.worker_pid, wrapper.sibling()) == \
            (False, False, None, None)
        assert wrapper.start_worker() == 0.0
    finally:
        session.close()


@confined
def test_through_agent_session_a_second_call_on_an_unchanged_frame_exports_nothing(tmp_path):
    code = "float(orders['amount'].sum())"
    turns = [_call(code), _call(code), {"text": "one"}, _call(code), {"text": "two"}]
    session = _session(tmp_path, turns)
    frame = pd.DataFrame({"amount": np.arange(200_000, dtype="float64"), "k": np.arange(200_000) % 7})
    try:
        session.cache.put("orders", frame)
        counts = []
        session.subscribe(lambda event: counts.append(session.backend.inputs_written)
                          if type(event).__name__ == "ToolCallFinished" else None)
        first = session.ask("sum it twice")
        assert first.ok
        files = session.backend.exported_files()
        inodes = [os.stat(p).st_ino for p in files]
        assert counts == [1, 1], "the first call exports the frame once; the second maps the same file"
        second = session.ask("again, in a new cell")  # a fresh worker maps the file exported before
        assert second.ok
        assert counts == [1, 1, 1]
        assert session.backend.exported_files() == files and [os.stat(p).st_ino for p in files] == inodes
        results = [m.tool_results[0].content for r in (first, second) for m in r.messages if m.tool_results]
        assert all(str(float(frame["amount"].sum())) in str(content) for content in results)
    finally:
        session.close()


@confined
def test_through_agent_session_a_replaced_value_is_exported_again(tmp_path):
    turns = [_call("float(orders['x'].sum())"), {"text": "one"}, _call("float(orders['x'].sum())"), {"text": "two"}]
    session = _session(tmp_path, turns)
    try:
        session.cache.put("orders", pd.DataFrame({"x": [1.0, 2.0]}))
        assert session.ask("one").ok
        session.cache.retire("orders")
        session.cache.put("orders", pd.DataFrame({"x": [10.0, 20.0]}))
        second = session.ask("two")
        assert session.backend.inputs_written == 2
        assert "30.0" in str([m.tool_results[0].content for m in second.messages if m.tool_results])
    finally:
        session.close()


# -- %load_ext / %unload_ext ----------------------------------------------------------------------

SHELL_SCRIPT = r'''
import json, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
def ours():
    """Magic name -> owner class, for every registered magic whose owner comes from harness_magic."""
    found = {}
    for kind, table in shell.magics_manager.magics.items():
        for name, method in table.items():
            owner = getattr(method, "__self__", None)
            if type(owner).__module__.startswith("harness_magic"):
                found[f"{kind}:{name}"] = [type(owner).__name__, id(owner)]
    registry = sorted(k for k, v in shell.magics_manager.registry.items()
                      if type(v).__module__.startswith("harness_magic"))
    configurables = sorted(type(c).__name__ for c in shell.configurables
                           if type(c).__module__.startswith("harness_magic"))
    return {"magics": found, "registry": registry, "configurables": configurables}
states = []
for line in ("load_ext", "unload_ext", "load_ext", "unload_ext", "load_ext"):
    shell.run_line_magic(line, "harness_magic")
    states.append(ours())
from harness_magic.notebook.extension import magics_classes
declared = {f"{kind}:{name}" for cls in magics_classes() for kind, names in cls.magics.items() for name in names}
print(json.dumps({"states": states, "declared": sorted(declared)}))
'''


def test_unload_then_load_leaves_exactly_one_registration_of_each_magic_in_a_real_shell(tmp_path):
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", SHELL_SCRIPT], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "IPYTHONDIR": str(tmp_path / "ipython")})
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    loaded, unloaded, reloaded, unloaded_again, last = report["states"]
    declared = set(report["declared"])
    assert {"cell:agent", "line:agent_replay", "line:agent_status", "line:agent_code", "line:agent_docs",
            "line:agent_eval", "line:agent_checkpoint", "line:agent_memory", "line:agent_audit",
            "line:agent_skills"} <= declared
    for state in (loaded, reloaded, last):
        assert set(state["magics"]) == declared
        owners = {tuple(owner) for owner in state["magics"].values()}
        assert len({cls for cls, _ in owners}) == len(owners), "one live instance per class, no stale one"
        classes = ["AgentMagics", "AuditMagics", "CheckpointMagics", "ControlMagics", "DocsMagics", "EvalMagics",
                   "MemoryMagics", "SessionMagics", "SkillsMagics"]
        assert state["registry"] == classes and state["configurables"] == classes
    for state in (unloaded, unloaded_again):
        assert state == {"magics": {}, "registry": [], "configurables": []}
    assert {tuple(v) for v in loaded["magics"].values()}.isdisjoint({tuple(v) for v in reloaded["magics"].values()})


# -- a frame of rows without columns --------------------------------------------------------------


def test_through_agent_session_a_frame_without_columns_spills_and_comes_back_exactly(tmp_path):
    import warnings

    from harness_magic.core.cache.spill import SPILL_FORMATS

    make = "import pandas as pd\nf = pd.DataFrame(index=pd.RangeIndex(2, 12, 2, name='i'))\nf.attrs['unit'] = 'rows'\n"
    turns = [_call(make + "save('rows_only', f)"), _call("save('later', 1)"), {"text": "saved"},
             _call("(rows_only.shape, list(rows_only.index), rows_only.index.name)"), {"text": "read"}]
    session = _session(tmp_path, turns, sandbox="inprocess", hot_count=1, spill_dir=str(tmp_path / "spill"))
    expected = pd.DataFrame(index=pd.RangeIndex(2, 12, 2, name="i"))
    expected.attrs["unit"] = "rows"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a failed spill warns: here it must not
            assert session.ask("save them").ok
            row = next(e for e in session.cache.entries() if e.name == "rows_only")
            assert row.location == "disk" and row.storage in SPILL_FORMATS
            result = session.ask("read it back")  # hydrated from its spill file for the call
        assert result.ok
        answer = [m.tool_results[0].content for m in result.messages if m.tool_results][-1]
        assert "[[5, 0], [2, 4, 6, 8, 10], \"i\"]" in str(answer)
        back = session.cache.get("rows_only")
        pd.testing.assert_frame_equal(back, expected, check_exact=True, check_index_type=True,
                                      check_column_type=True)
        assert back.attrs == {"unit": "rows"} and type(back.index) is pd.RangeIndex
    finally:
        session.close()


@pytest.mark.parametrize("frame", [
    pd.DataFrame(index=range(3)),
    pd.DataFrame(index=pd.RangeIndex(5, -7, -3, name="r")),
    pd.DataFrame(index=range(4), columns=pd.Index([], dtype="int64")),
    pd.DataFrame(),
    pd.DataFrame(index=pd.date_range("2024", periods=3, freq="D")),
], ids=["range", "negative-step-named", "int-columns", "no-rows", "dates"])
def test_a_frame_without_columns_round_trips_exactly_through_a_spill_and_a_checkpoint(tmp_path, frame):
    from harness_magic.core.cache import SessionCache

    with SessionCache(hot_count=0, spill_dir=tmp_path / "spill") as cache:
        cache.put("empty", frame)
        cache.put("newer", 0)
        assert cache.location("empty") == "disk"
        cache.save(tmp_path / "ckpt")
        pd.testing.assert_frame_equal(cache.get("empty"), frame, check_exact=True, check_index_type=True,
                                      check_column_type=True, check_freq=True)
    with SessionCache.load(tmp_path / "ckpt", spill_dir=tmp_path / "spill2") as loaded:
        pd.testing.assert_frame_equal(loaded.get("empty"), frame, check_exact=True, check_index_type=True,
                                      check_column_type=True, check_freq=True)


def test_row_metadata_that_does_not_fit_the_data_is_refused(tmp_path):
    import json

    import pyarrow as pa

    from harness_magic.core.cache.frames import frame_to_table, table_to_frame

    table = frame_to_table(pd.DataFrame({"a": [1, 2]}))
    meta = dict(table.schema.metadata)
    forged = json.loads(meta[b"harness_magic"])
    forged["row_index"] = {"range": [0, 10, 1], "names": [["none"]]}
    meta[b"harness_magic"] = json.dumps(forged).encode()
    with pytest.raises(ValueError, match="row index metadata does not fit the data"):
        table_to_frame(table.replace_schema_metadata(meta))
    assert isinstance(table, pa.Table)
