"""Replay with live tools and retry run every call through the session's approval policy and budgets."""

from __future__ import annotations

import json
import sqlite3

from harness_magic.core.control.budgets import Budgets
from harness_magic.core.execution.connectors import ApprovalPolicy, sql_connector
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.control.replay import live_tools_of, replay_run
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession

DROP = "DROP TABLE accounts"


def database(tmp_path):
    path = tmp_path / "bank.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE accounts (id int, balance int)")
        conn.executemany("INSERT INTO accounts VALUES (?, ?)", [(1, 100), (2, 250)])
    return path


def tables(path):
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


def session_with(tmp_path, db_path, turns, approver, **config):
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess", **config),
                           adapter=ProviderAdapter("scripted/bank", transport=ScriptedModel(turns)))
    session.add_connector(sql_connector(f"sqlite:///{db_path}", name="bank"),
                          approval=ApprovalPolicy(approver=approver))
    return session


def load_and(call):
    return [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "bank"}}]},
            {"tool_calls": [call]}, {"text": "done"}]


def test_a_denied_write_replayed_with_live_tools_is_asked_again_and_changes_nothing(tmp_path):
    db_path = database(tmp_path)
    recorded_asks, replay_asks = [], []
    session = session_with(tmp_path, db_path, load_and({"name": "bank__execute", "arguments": {"sql": DROP}}),
                           lambda r: recorded_asks.append(r) or False)
    result = session.ask("clean up")
    assert [r.arguments["sql"] for r in recorded_asks] == [DROP] and tables(db_path) == ["accounts"]

    session.connectors.registry.approval.approver = lambda r: replay_asks.append(r) or False
    replay = replay_run(result.run_file, run_dir=tmp_path / "replay", **live_tools_of(session.harness))
    assert [r.arguments["sql"] for r in replay_asks] == [DROP]
    assert replay_asks[0].safety == "destructive"
    assert tables(db_path) == ["accounts"]
    denied = [b for m in replay.replayed for b in m.content if getattr(b, "type", "") == "tool_result"][-1]
    assert denied.is_error and "denied" in denied.content


def test_a_crafted_log_gets_no_more_than_the_live_policy_allows(tmp_path):
    """A log whose recorded result claims success still has its write put to the approver."""
    db_path = database(tmp_path)
    session = session_with(tmp_path, db_path, load_and({"name": "bank__execute", "arguments": {"sql": DROP}}),
                           lambda r: True)
    result = session.ask("clean up")
    assert tables(db_path) == []  # approved in the recording
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TABLE accounts (id int, balance int)")
    asks = []
    session.connectors.registry.approval.approver = lambda r: asks.append(r) or False
    replay_run(result.run_file, run_dir=tmp_path / "replay", **live_tools_of(session.harness))
    assert len(asks) == 1 and tables(db_path) == ["accounts"]


def test_replay_with_live_tools_stops_at_the_session_budget(tmp_path):
    db_path = database(tmp_path)
    reads = [{"tool_calls": [{"name": "bank__query", "arguments": {"sql": "SELECT count(*) FROM accounts"}}]}] * 4
    turns = [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "bank"}}]}, *reads,
             {"text": "done"}]
    session = session_with(tmp_path, db_path, turns, lambda r: False)
    result = session.ask("count")
    assert result.status == "completed"
    session._set_budgets(Budgets(max_tool_calls=2))
    replay = replay_run(result.run_file, run_dir=tmp_path / "replay", **live_tools_of(session.harness))
    assert replay.result.status == "budget_tool_calls"
    refused = [b for m in replay.replayed for b in m.content if getattr(b, "type", "") == "tool_result"]
    assert "tool-call budget exhausted" in refused[2].content


def test_retry_asks_again_for_a_write_the_recording_shows_denied(tmp_path):
    db_path = database(tmp_path)
    drop = {"tool_calls": [{"name": "bank__execute", "arguments": {"sql": DROP}}]}
    turns = [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "bank"}}]}, drop,
             {"text": "denied, stopping"}, drop, {"text": "done"}]
    asks = []
    session = session_with(tmp_path, db_path, turns, lambda r: asks.append(r) or False)
    first = session.ask("clean up")
    assert len(asks) == 1
    retried = session.retry(2, first.run_file)
    assert [r.arguments["sql"] for r in asks] == [DROP, DROP]
    assert tables(db_path) == ["accounts"]
    log = [json.loads(line) for line in open(retried.run_file)]
    assert any(r.get("event") == "approval" and r.get("approved") is False for r in log)
