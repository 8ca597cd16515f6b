"""The workspace audit log: the chain verifies, every kind of tampering is found and named, writers in
two processes keep one chain, and the session's decisions, pulls and exports reach it (never values)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from harness_magic.core.transcript.audit import (
    FIELD_MAX_CHARS,
    GENESIS,
    RECORD_MAX_BYTES,
    AuditError,
    AuditLog,
    read_tail,
    record_hash,
    verify_file,
)

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def filled(path: Path, n: int = 5) -> AuditLog:
    log = AuditLog(path, actor="ana")
    for i in range(n):
        log.append("pull", handle=f"h{i}", name=f"v{i}", columns=["id", "email"], sensitive={"email": "pii"})
    return log


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def rewrite(path: Path, new_lines: list[str]) -> None:
    path.write_text("".join(new_lines))


# -- the chain ---------------------------------------------------------------------------------


def test_a_fresh_chain_verifies_and_links_each_record_to_the_previous(tmp_path):
    path = tmp_path / "audit.jsonl"
    filled(path)
    records = [json.loads(line) for line in lines(path)]
    assert [r["seq"] for r in records] == [1, 2, 3, 4, 5]
    assert records[0]["prev"] == GENESIS
    for before, after in zip(records, records[1:]):
        assert after["prev"] == before["hash"] == record_hash(before)
    result = verify_file(path)
    assert result.ok and result.records == 5 and result.head == records[-1]["hash"]


def test_an_empty_log_verifies(tmp_path):
    path = tmp_path / "audit.jsonl"
    path.write_text("")
    assert verify_file(path).ok and verify_file(path).records == 0


def test_editing_one_field_is_detected_and_named(tmp_path):
    path = tmp_path / "audit.jsonl"
    filled(path)
    text = lines(path)
    text[2] = text[2].replace('"h2"', '"h9"')
    rewrite(path, text)
    result = verify_file(path)
    assert not result.ok and result.line == 3 and result.problem == "edited" and result.records == 2


def test_an_edit_with_its_hash_recomputed_breaks_the_link_to_the_next_record(tmp_path):
    path = tmp_path / "audit.jsonl"
    filled(path)
    text = lines(path)
    record = json.loads(text[1])
    record["name"] = "someone_else"
    record["hash"] = record_hash(record)
    text[1] = json.dumps(record) + "\n"
    rewrite(path, text)
    result = verify_file(path)
    assert not result.ok and result.line == 3 and result.problem == "forged"


def test_deleting_one_record_is_detected_as_a_gap(tmp_path):
    path = tmp_path / "audit.jsonl"
    filled(path)
    text = lines(path)
    del text[2]
    rewrite(path, text)
    result = verify_file(path)
    assert not result.ok and result.line == 3 and result.problem == "deleted"
    assert "record 3 missing" in result.detail


def test_reordering_two_records_is_detected(tmp_path):
    path = tmp_path / "audit.jsonl"
    filled(path)
    text = lines(path)
    text[1], text[2] = text[2], text[1]
    rewrite(path, text)
    result = verify_file(path)
    assert not result.ok and result.line == 2 and result.problem == "reordered"
    assert "record 2 is at line 3" in result.detail


def test_a_forged_record_appended_without_the_right_previous_hash_is_detected(tmp_path):
    path = tmp_path / "audit.jsonl"
    filled(path, 3)
    forged = {"seq": 4, "ts": "2026-01-01T00:00:00.000000Z", "kind": "approval", "actor": "mallory",
              "tool": "sql__execute", "prev": GENESIS}
    forged["hash"] = record_hash(forged)
    with open(path, "a") as handle:
        handle.write(json.dumps(forged) + "\n")
    result = verify_file(path)
    assert not result.ok and result.line == 4 and result.problem == "forged"


def test_a_truncated_last_line_is_detected(tmp_path):
    path = tmp_path / "audit.jsonl"
    filled(path, 3)
    data = path.read_bytes()
    path.write_bytes(data[:-40])
    result = verify_file(path)
    assert not result.ok and result.line == 3 and result.problem == "truncated" and result.records == 2


def test_a_last_record_without_its_line_end_is_truncated(tmp_path):
    path = tmp_path / "audit.jsonl"
    filled(path, 2)
    path.write_bytes(path.read_bytes()[:-1])
    result = verify_file(path)
    assert not result.ok and result.line == 2 and result.problem == "truncated"


def test_whole_records_cut_off_the_end_are_found_against_a_noted_head(tmp_path):
    path = tmp_path / "audit.jsonl"
    filled(path, 4)
    head = verify_file(path).head
    rewrite(path, lines(path)[:3])
    assert verify_file(path).ok  # the file alone cannot tell
    result = verify_file(path, head=head)
    assert not result.ok and result.problem == "head"
    assert verify_file(path, head=json.loads(lines(path)[1])["hash"]).ok


def test_appending_after_a_torn_write_keeps_the_evidence(tmp_path):
    path = tmp_path / "audit.jsonl"
    log = filled(path, 2)
    with open(path, "a") as handle:
        handle.write('{"seq": 3, "kind": "appro')  # a crash mid-write
    log.append("export", path="out.html", format="html")
    result = verify_file(path)
    assert not result.ok and result.line == 3 and result.problem == "malformed"
    assert json.loads(lines(path)[3])["seq"] == 3  # chained on from the last whole record


# -- what a record may hold ---------------------------------------------------------------------


def test_records_are_bounded(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    record = log.append("governed_write", statement="x" * 50_000, tables=[f"t{i}" for i in range(1000)],
                        notes={f"k{i}": "y" * 1500 for i in range(100)})
    assert len(record["statement"]) < FIELD_MAX_CHARS + 40 and "cut 48000 chars" in record["statement"]
    assert len(record["tables"]) == 201 and "cut 800 items" in record["tables"][-1]
    assert all(len(line.encode()) <= RECORD_MAX_BYTES for line in lines(tmp_path / "audit.jsonl"))
    assert verify_file(tmp_path / "audit.jsonl").ok


def test_bad_kinds_fields_and_values_are_refused_with_their_name(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    with pytest.raises(AuditError, match="'approve'"):
        log.append("approve")
    with pytest.raises(AuditError, match="hash"):
        log.append("approval", hash="0" * 64)
    with pytest.raises(AuditError, match="frame is a DataFrame"):
        log.append("pull", frame=pd.DataFrame({"email": ["a@example.com"]}))
    with pytest.raises(AuditError, match="rows is nan"):
        log.append("governed_write", rows=float("nan"))
    assert not (tmp_path / "audit.jsonl").exists()


def test_secrets_and_sensitive_values_in_text_fields_are_not_recorded(tmp_path, monkeypatch):
    from harness_magic.core.control.audit import redact_sensitive

    monkeypatch.setenv("WAREHOUSE_PASSWORD", "hunter2-very-secret")
    log = AuditLog(tmp_path / "audit.jsonl", redact=redact_sensitive)
    log.append("approval", tool="sql__execute", summary="UPDATE customers SET email = 'ana@example.com', "
               "card = '4111 1111 1111 1111' WHERE pw = 'hunter2-very-secret'",
               sensitive={"ana@example.com": "pii"})
    text = (tmp_path / "audit.jsonl").read_text()
    for value in ("ana@example.com", "4111 1111 1111 1111", "hunter2-very-secret"):
        assert value not in text
    assert "[pii:email]" in text and "[financial:card]" in text
    assert verify_file(tmp_path / "audit.jsonl").ok


def test_an_unwritable_log_raises_audit_error_naming_the_path(tmp_path):
    log = AuditLog(tmp_path / "missing_dir" / "audit.jsonl")
    with pytest.raises(AuditError, match="missing_dir"):
        log.append("export", path="x.html")


def test_read_tail_returns_the_latest_records_oldest_first(tmp_path):
    path = tmp_path / "audit.jsonl"
    filled(path, 30)
    assert [r["seq"] for r in read_tail(path, 3)] == [28, 29, 30]
    assert read_tail(tmp_path / "none.jsonl", 3) == []


# -- writers in two processes -------------------------------------------------------------------


WRITER = textwrap.dedent("""\
    import sys
    from harness_magic.core.transcript.audit import AuditLog
    log = AuditLog(sys.argv[1], actor=sys.argv[2])
    for i in range(int(sys.argv[3])):
        log.append("masking", where="tool_result", counts={"pii": i})
""")


def test_two_processes_appending_at_once_keep_one_valid_chain(tmp_path):
    path = tmp_path / "audit.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writers = [subprocess.Popen([PYTHON, "-c", WRITER, str(path), actor, "150"], env=env) for actor in ("a", "b")]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    result = verify_file(path)
    assert result.ok and result.records == 300
    actors = [json.loads(line)["actor"] for line in lines(path)]
    assert actors.count("a") == actors.count("b") == 150


# -- the command line ---------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "harness_magic.audit", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)


def test_cli_verify_exit_codes_name_the_first_broken_record(tmp_path):
    path = tmp_path / "audit.jsonl"
    filled(path, 3)
    ok = cli("verify", str(path))
    assert ok.returncode == 0 and "ok, 3 records, head " in ok.stdout
    text = lines(path)
    del text[1]
    rewrite(path, text)
    broken = cli("verify", str(path))
    assert broken.returncode == 1 and f"{path}: line 2: deleted: record 2 missing" in broken.stdout
    missing = cli("verify", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and "nope.jsonl" in missing.stderr
    assert cli("verify").returncode == 2
    tail = cli("tail", str(path), "-n", "1")
    assert tail.returncode == 0 and json.loads(tail.stdout)["seq"] == 3


# -- through a session --------------------------------------------------------------------------


def _session(tmp_path, turns, approval):
    from harness_magic.core.execution.connectors import Connector
    from harness_magic.core.providers.offline import ScriptedModel
    from harness_magic.core.providers.adapter import ProviderAdapter
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    notes = Connector("notes", "Notes.")
    written: list[str] = []

    @notes.tool(safety="write")
    def add(text: str) -> str:
        """Add a note."""
        written.append(text)
        return "added"

    adapter = ProviderAdapter("scripted/test", transport=ScriptedModel(turns))
    config = AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess", audit_log=str(tmp_path / "audit.jsonl"))
    session = AgentSession(config, adapter=adapter)
    session.add_connector(notes, approval=approval)
    return session, written


def _calls(*texts: str) -> list[dict]:
    turns: list[dict] = [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "notes"}}]}]
    turns += [{"tool_calls": [{"name": "notes__add", "arguments": {"text": t}}]} for t in texts]
    return turns + [{"text": "done"}]


def test_session_records_approvals_denials_and_refusals(tmp_path):
    from harness_magic.core.execution.connectors import ApprovalDecision, ApprovalPolicy

    answers = iter([True, ApprovalDecision(False, "not today")])
    session, written = _session(tmp_path, _calls("ok", "nope"), ApprovalPolicy(approver=lambda r: next(answers)))
    assert session.ask("go").ok and written == ["ok"]
    session2, written2 = _session(tmp_path, _calls("never"), ApprovalPolicy.deny_all())
    session2.ask("go")
    assert written2 == []
    records = read_tail(tmp_path / "audit.jsonl", 10)
    assert [(r["kind"], r.get("by")) for r in records] == [("approval", "user"), ("denial", None), ("refusal", None)]
    assert records[1]["reason"] == "not today" and records[0]["tool"] == "notes__add"
    assert records[0]["safety"] == "write" and records[0]["tool_use_id"]
    assert verify_file(tmp_path / "audit.jsonl").ok


def test_an_approval_the_log_cannot_record_is_denied(tmp_path):
    from harness_magic.core.execution.connectors import ApprovalPolicy
    session, written = _session(tmp_path, _calls("unrecorded"), ApprovalPolicy(approver=lambda r: True))
    session.harness.audit = AuditLog(tmp_path / "no_such_dir" / "audit.jsonl")
    result = session.ask("go")
    assert written == []
    denied = [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"][-1]
    assert denied.is_error and "the audit log cannot record the approval" in denied.content


def test_masking_events_become_masking_records(tmp_path):
    from harness_magic.core.execution.connectors import ApprovalPolicy
    from harness_magic.core.transcript.events import MaskingApplied

    session, _ = _session(tmp_path, [{"text": "done"}], ApprovalPolicy())
    session.harness.emit(MaskingApplied(where="snapshot", tool_use_id="t1", counts=(("pii", 3), ("financial", 1))))
    (record,) = read_tail(tmp_path / "audit.jsonl", 5)
    assert record["kind"] == "masking" and record["counts"] == {"pii": 3, "financial": 1}
    assert record["where"] == "snapshot"


def test_a_subagents_masking_and_approvals_reach_the_parents_log(tmp_path):
    from harness_magic.core.execution.connectors import ApprovalPolicy
    from harness_magic.core.transcript.events import MaskingApplied, SubagentEvent

    session, written = _session(tmp_path, [{"text": "done"}], ApprovalPolicy(approver=lambda r: True))
    inner = MaskingApplied(where="tool_result", tool_use_id="c1", counts=(("pii", 2),))
    session.harness.emit(SubagentEvent(parent_tool_use_id="p1", event=inner))
    (record,) = read_tail(tmp_path / "audit.jsonl", 5)
    assert record["where"] == "subagent tool_result" and record["parent_tool_use_id"] == "p1"
    assert record["counts"] == {"pii": 2}


def test_a_subagents_approved_write_is_in_the_parents_audit_log(tmp_path):
    from harness_magic.core.agent.loop import Harness
    from harness_magic.core.cache import SessionCache
    from harness_magic.core.control.subagent import SUBAGENT_TOOL_NAME, enable_subagents
    from harness_magic.core.execution.connectors import ApprovalPolicy, Connector, ConnectorRegistry
    from harness_magic.core.execution.interpreter import InProcessInterpreter, make_interpreter_tools
    from harness_magic.core.providers.offline import ScriptedModel
    from harness_magic.core.providers.adapter import ProviderAdapter

    notes = Connector("notes", "Notes.")

    @notes.tool(safety="write")
    def add(text: str) -> str:
        """Add a note."""
        return "added"

    registry = ConnectorRegistry([notes], approval=ApprovalPolicy(approver=lambda r: True))
    child_turns = _calls("from the child")
    parent = Harness(ProviderAdapter("scripted/p", transport=ScriptedModel(
        [{"tool_calls": [{"name": SUBAGENT_TOOL_NAME, "arguments": {"task": "note it"}}]}, {"text": "done"}])),
        "You analyse.", [], run_dir=str(tmp_path), cache=SessionCache())
    parent.audit = AuditLog(tmp_path / "audit.jsonl")
    enable_subagents(parent, connectors=registry,
                     adapter_factory=lambda _a: ProviderAdapter("scripted/c", transport=ScriptedModel(child_turns)),
                     tools_factory=lambda cache, turn: make_interpreter_tools(cache, InProcessInterpreter(),
                                                                              current_turn=turn))
    assert parent.run_result("go").status == "completed"
    (record,) = read_tail(tmp_path / "audit.jsonl", 5)
    assert record["kind"] == "approval" and record["tool"] == "notes__add" and record["by"] == "user"


def test_an_empty_audit_log_setting_turns_auditing_off(tmp_path):
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    session = AgentSession(AgentConfig(run_dir=str(tmp_path), sandbox="inprocess", audit_log=""))
    assert session.audit is None and session.harness.audit is None


def test_a_pull_records_configured_classes_detection_cannot_see(tmp_path):
    from harness_magic.core.control.audit import record_pull
    from harness_magic.core.text.masking import ColumnClass

    frame = pd.DataFrame({"id": [1, 2], "email": ["ana@example.com", "bo@example.org"], "diagnosis": ["x", "y"]})
    log = AuditLog(tmp_path / "audit.jsonl")
    record = record_pull(log, frame, handle="patients", name="p",
                         known={"diagnosis": ColumnClass("restricted", "config")})
    assert record["columns"] == ["id", "email", "diagnosis"]
    assert record["sensitive"] == {"email": "pii", "diagnosis": "restricted"}
    assert "ana@example.com" not in (tmp_path / "audit.jsonl").read_text()


def test_column_classes_name_the_sensitive_columns_of_a_frame():
    from harness_magic.core.control.audit import column_classes, column_names

    frame = pd.DataFrame({"id": [1, 2], "email": ["ana@example.com", "bo@example.org"],
                          "card": ["4111111111111111", "5500005555555559"], "city": ["Oslo", "Rome"]})
    assert column_names(frame) == ["id", "email", "card", "city"]
    assert column_classes(frame) == {"email": "pii", "card": "financial"}
    assert column_classes(frame["email"]) == {"email": "pii"} and column_classes([1, 2]) == {}


# -- in a real kernel ---------------------------------------------------------------------------


@pytest.mark.kernel
def test_an_approval_a_pull_and_an_export_appear_in_agent_audit(tmp_path):
    pytest.importorskip("jupyter_client")
    from kernel_helpers import Kernel, answer, code_turn
    from test_magics_integration import calls, run_answering

    kernel = Kernel(tmp_path)
    try:
        setup = kernel.run(textwrap.dedent('''\
            %load_ext harness_magic
            from harness_magic.core.execution.connectors import Connector
            from harness_magic.notebook.extension import agent_session

            notes = Connector("notes", "Notes kept in the notebook.")

            @notes.tool(name="add", safety="write")
            def add_note(text: str) -> str:
                """Add a note."""
                return "added"

            agent_session().add_connector(notes)
        '''))
        assert setup.ok, setup.outputs
        make = ("import pandas as pd\nsave('customers', pd.DataFrame({'id': [1, 2], "
                "'email': ['ana@example.com', 'bo@example.org'], 'spend': [10.5, 20.0]}))")
        turns = [calls(("load_connectors", {"connector_name": "notes"})), calls(("notes__add", {"text": "hi"})),
                 code_turn(make), answer("Done.")]
        (tmp_path / "audit_model.json").write_text(json.dumps({"turns": turns}))
        cell, prompts = run_answering(kernel, "%%agent -m scripted/audit_model.json\nNote it and load customers.", "y")
        assert cell.ok and prompts, cell.outputs
        assert kernel.run("%agent_pull customers").ok
        assert kernel.run("%agent_export run.html").ok
        shown = kernel.run("%agent_audit -n 6")
        assert shown.ok, shown.outputs
        head, *entries = shown.stdout.splitlines()
        assert head.endswith(f"chain verified, {len(entries)} records"), shown.stdout
        kinds = [line.split()[2] for line in entries]
        assert kinds[0] == "approval" and kinds[-2:] == ["pull", "export"], shown.stdout
        assert set(kinds[1:-2]) == {"masking"}, shown.stdout
        assert "notes__add (write) approved by user" in entries[0]
        assert "customers -> customers (3 columns); sensitive: email (pii)" in entries[-2]
        assert entries[-1].endswith(f"{tmp_path / 'run.html'} (html)")
        text = (tmp_path / ".harness_audit.jsonl").read_text()
        assert "ana@example.com" not in text and "bo@example.org" not in text
        assert "-n 0: must be at least 1" in kernel.run("%agent_audit -n 0").stderr
        unwritable = tmp_path / "no_such_dir" / "audit.jsonl"
        assert kernel.run(f"%config AgentMagics.audit_log = {str(unwritable)!r}").ok
        refused = kernel.run("%agent_pull customers again")
        assert "customers not pulled: cannot write the audit log" in refused.stderr
        assert kernel.value("'again' in globals()") is False  # the value never reached the notebook
    finally:
        kernel.close()


def test_a_sqlite_write_without_a_preview_is_audited_with_its_row_count(tmp_path):
    import sqlite3

    from harness_magic.core.execution.connectors import ApprovalPolicy
    from harness_magic.core.execution.connectors.sql.connector import sql_connector
    from harness_magic.core.providers.offline import ScriptedModel
    from harness_magic.core.providers.adapter import ProviderAdapter
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    db = tmp_path / "shop.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER, status TEXT)")
        conn.executemany("INSERT INTO orders VALUES (?, ?)", [(1, "open"), (2, "cancelled"), (3, "cancelled")])
    turns = [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "shop"}}]},
             {"tool_calls": [{"name": "shop__execute",
                              "arguments": {"sql": "DELETE FROM orders WHERE status = 'cancelled'"}}]},
             {"text": "done"}]
    config = AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess", audit_log=str(tmp_path / "audit.jsonl"))
    session = AgentSession(config, adapter=ProviderAdapter("scripted/test", transport=ScriptedModel(turns)))
    session.add_connector(sql_connector(f"sqlite:///{db}", name="shop"), approval=ApprovalPolicy(approver=lambda r: True))
    try:
        assert session.ask("clean up").ok
    finally:
        session.close()
    records = read_tail(tmp_path / "audit.jsonl", 10)
    assert [r["kind"] for r in records] == ["approval", "governed_write"]
    write = records[1]
    assert (write["connector"], write["rows"], write["outcome"], write["previewed"]) == ("shop", 2, "committed", False)
    assert write["tool_use_id"] == records[0]["tool_use_id"]
    assert verify_file(tmp_path / "audit.jsonl").ok
