"""Governed writes against real engines: environments, the policy table, preview-then-commit.

PostgreSQL runs through the suite's throwaway server (tests/postgres.py); DuckDB
writes to a database file. Every write goes through the harness the way the
model's calls do (a scripted model calling the connector's tools), and a SECOND
connection checks what other sessions see while the approver is deciding.
"""

from __future__ import annotations

import json

import duckdb
import pytest
import sqlalchemy as sa

from harness_magic.core.agent.loop import Harness
from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.connectors import ApprovalPolicy, ConnectorRegistry, sql_connector
from harness_magic.core.execution.connectors.approval import ApprovalDecision
from harness_magic.core.execution.connectors.duckdb.connector import duckdb_connector
from harness_magic.core.execution.connectors.policy import Actor, GovernancePolicy, PolicyError
from harness_magic.core.execution.connectors.preview import DUCKDB_WRITE_CONFIG, PREVIEW_SAMPLE_ROWS
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.transcript.audit import AuditLog
from postgres import postgres_url  # noqa: F401  (session fixture)

UPDATE = "UPDATE accounts SET balance = balance * 2 WHERE id <= 3"


def call(tool, **arguments):
    return {"name": tool, "arguments": arguments}


def run_tools(tmp_path, connector, calls, approval, others=()):
    """Run ``calls`` through a harness with ``connector`` loaded (``others`` registered beside it, not loaded);
    the tool results and the audit records."""
    registry = ConnectorRegistry([connector, *others], approval=approval)
    turns = [{"tool_calls": [call("load_connectors", connector_name=connector.name)]}]
    turns += [{"tool_calls": [c]} for c in calls] + [{"text": "done"}]
    harness = Harness(ProviderAdapter("scripted/gov", transport=ScriptedModel(turns)), "sys", [],
                      run_dir=str(tmp_path), cache=SessionCache())
    harness.audit = AuditLog(tmp_path / "audit.jsonl")
    registry.install(harness)
    result = harness.run_result("go")
    blocks = [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"]
    path = tmp_path / "audit.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return blocks[1:], records


# --------------------------------------------------------------------------- PostgreSQL


@pytest.fixture()
def bank(postgres_url):  # noqa: F811
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS accounts")
        conn.exec_driver_sql("CREATE TABLE accounts (id int PRIMARY KEY, email text, balance int)")
        conn.exec_driver_sql("INSERT INTO accounts SELECT g, 'user' || g || '@example.com', 100 "
                             "FROM generate_series(1, 10) g")
    yield postgres_url
    engine.dispose()


def balances(url):
    """What a separate connection sees (committed data only)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return dict(conn.exec_driver_sql("SELECT id, balance FROM accounts ORDER BY id").all())
    finally:
        engine.dispose()


ORIGINAL = {i: 100 for i in range(1, 11)}


def test_a_prod_write_is_refused_when_the_connector_does_not_allow_writes(tmp_path, bank):
    asked = []
    connector = sql_connector(bank, name="bank", environment="prod")
    policy = ApprovalPolicy(rules={"write": "allow", "destructive": "allow"},
                            approver=lambda r: asked.append(r) or True)
    (result,), records = run_tools(tmp_path, connector, [call("bank__execute", sql=UPDATE)], policy)
    assert result.is_error and "prod" in result.content and "allow_writes" in result.content
    assert asked == [] and balances(bank) == ORIGINAL
    assert [r["kind"] for r in records] == ["refusal"] and records[0]["environment"] == "prod"


def test_a_prod_write_always_asks_even_when_the_rules_allow_writes(tmp_path, bank):
    asked = []
    connector = sql_connector(bank, name="bank", environment="prod", allow_writes=True)
    policy = ApprovalPolicy(rules={"write": "allow", "destructive": "allow"},
                            approver=lambda r: asked.append(r) or False)
    (result,), _ = run_tools(tmp_path, connector, [call("bank__execute", sql=UPDATE)], policy)
    assert len(asked) == 1 and asked[0].environment == "prod" and asked[0].preflight is not None
    assert result.is_error and "rolled back" in result.content


def test_an_allowed_prod_write_is_previewed_invisible_to_others_and_rolled_back_on_denial(tmp_path, bank):
    seen = {}

    def approver(request):
        seen["request"] = request
        seen["others"] = balances(bank)  # a second connection, while the preview transaction is open
        return ApprovalDecision(False, "not today")

    connector = sql_connector(bank, name="bank", environment="prod", allow_writes=True)
    (result,), records = run_tools(tmp_path, connector, [call("bank__execute", sql=UPDATE)],
                                   ApprovalPolicy(approver=approver))
    assert seen["others"] == ORIGINAL
    assert result.is_error and "rolled back" in result.content and "not today" in result.content
    assert balances(bank) == ORIGINAL
    write = [r for r in records if r["kind"] == "governed_write"]
    assert [r["kind"] for r in records] == ["denial", "governed_write"]
    assert write[0]["outcome"] == "rolled_back" and write[0]["rows"] == 3 and write[0]["previewed"] is True


def test_an_approved_previewed_write_is_committed_and_then_visible(tmp_path, bank):
    seen = {}

    def approver(request):
        seen["others"] = balances(bank)
        return True

    connector = sql_connector(bank, name="bank", environment="prod", allow_writes=True)
    (result,), records = run_tools(tmp_path, connector, [call("bank__execute", sql=UPDATE)],
                                   ApprovalPolicy(approver=approver))
    assert seen["others"] == ORIGINAL
    assert not result.is_error and "Committed UPDATE" in result.content and "3 rows affected" in result.content
    assert balances(bank) == {**ORIGINAL, 1: 200, 2: 200, 3: 200}
    assert [(r["kind"], r.get("outcome")) for r in records] == [("approval", None), ("governed_write", "committed")]


def test_the_preflight_summary_shows_rows_tables_and_changed_rows_before_and_after(tmp_path, bank):
    seen = []
    connector = sql_connector(bank, name="bank", environment="staging")
    run_tools(tmp_path, connector, [call("bank__execute", sql="UPDATE accounts SET balance = 7 WHERE id > 1")],
              ApprovalPolicy(approver=lambda r: seen.append(r) or False))
    preflight = seen[0].preflight
    assert preflight.previewed and preflight.rows_affected == 9 and preflight.keyword == "UPDATE"
    assert preflight.tables == (("accounts", 9),)
    assert len(preflight.before["accounts"]) == PREVIEW_SAMPLE_ROWS == len(preflight.after["accounts"])
    assert {row["balance"] for row in preflight.before["accounts"]} == {100}
    assert {row["balance"] for row in preflight.after["accounts"]} == {7}
    assert "deny rolls it back" in preflight.undo and "9 rows affected" in preflight.text()


def test_a_previewed_delete_shows_the_deleted_rows_and_an_insert_the_new_ones(tmp_path, bank):
    seen = []
    connector = sql_connector(bank, name="bank")
    run_tools(tmp_path, connector, [call("bank__execute", sql="DELETE FROM accounts WHERE id = 4"),
                                    call("bank__execute", sql="INSERT INTO accounts VALUES (99, 'n@x.org', 5)")],
              ApprovalPolicy(approver=lambda r: seen.append(r.preflight) or False))
    assert [r["id"] for r in seen[0].before["accounts"]] == [4] and "accounts" not in seen[0].after
    assert [r["id"] for r in seen[1].after["accounts"]] == [99] and "accounts" not in seen[1].before
    assert balances(bank) == ORIGINAL


def test_a_write_that_commits_inside_itself_is_not_previewed_and_refused_in_prod(tmp_path, bank):
    asked = []
    connector = sql_connector(bank, name="bank", environment="prod", allow_writes=True)
    attacks = [f"{UPDATE}; COMMIT", "COMMIT", f"DO $$ BEGIN {UPDATE}; COMMIT; END $$"]
    results, records = run_tools(tmp_path, connector, [call("bank__execute", sql=a) for a in attacks],
                                 ApprovalPolicy(approver=lambda r: asked.append(r) or True))
    assert asked == [] and balances(bank) == ORIGINAL
    for result in results:
        assert result.is_error and "cannot be previewed" in result.content
    assert [r["kind"] for r in records] == ["refusal"] * 3


def test_in_dev_a_self_committing_write_is_asked_first_and_the_server_refuses_the_commit(tmp_path, bank):
    asked = []
    connector = sql_connector(bank, name="bank")
    (multi, do_block), _ = run_tools(
        tmp_path, connector, [call("bank__execute", sql=f"{UPDATE}; COMMIT"),
                              call("bank__execute", sql=f"DO $$ BEGIN {UPDATE}; COMMIT; END $$")],
        ApprovalPolicy(approver=lambda r: asked.append(r) or True))
    assert [r.preflight.previewed for r in asked] == [False, False]
    assert "NO PREVIEW" in asked[0].summary and "2 statements" in asked[0].summary
    assert multi.is_error and "2 statements" in multi.content
    assert do_block.is_error and "invalid transaction termination" in do_block.content
    assert balances(bank) == ORIGINAL


def test_a_long_running_update_is_cancelled_by_the_timeout_before_anyone_is_asked(tmp_path, bank):
    asked = []
    connector = sql_connector(bank, name="bank", timeout_s=0.5)
    (result,), records = run_tools(
        tmp_path, connector,
        [call("bank__execute", sql="UPDATE accounts SET balance = 0 WHERE pg_sleep(5) IS NOT NULL")],
        ApprovalPolicy(approver=lambda r: asked.append(r) or True))
    assert result.is_error and "timed out after 0.5 s" in result.content
    assert asked == [] and balances(bank) == ORIGINAL
    assert [(r["kind"], r.get("outcome")) for r in records] == [("governed_write", "failed")]


def test_a_side_effect_function_is_never_run_before_approval(tmp_path, bank):
    asked = []
    connector = sql_connector(bank, name="bank")
    (result,), _ = run_tools(tmp_path, connector, [
        call("bank__execute", sql="INSERT INTO accounts SELECT 50, 'x', pg_terminate_backend(pg_backend_pid())::int")],
        ApprovalPolicy(approver=lambda r: asked.append(r) or False))
    assert asked[0].preflight.previewed is False and "pg_terminate_backend" in asked[0].summary
    assert result.is_error and "denied" in result.content and balances(bank) == ORIGINAL


def test_a_rule_naming_approver_roles_refuses_an_actor_without_them(tmp_path, bank):
    asked = []
    table = GovernancePolicy.from_config({"rules": [{"environment": "staging", "action": "ask",
                                                     "approvers": ["dba"]}]})
    policy = ApprovalPolicy(approver=lambda r: asked.append(r) or True, governance=table,
                            actor=Actor("ana", "analyst"))
    connector = sql_connector(bank, name="bank", environment="staging")
    (result,), _ = run_tools(tmp_path, connector, [call("bank__execute", sql=UPDATE)], policy)
    assert asked == [] and result.is_error and "role dba" in result.content and "analyst" in result.content
    policy.actor = Actor("dee", "dba")
    (result,), _ = run_tools(tmp_path, connector, [call("bank__execute", sql=UPDATE)], policy)
    assert len(asked) == 1 and not result.is_error


def test_the_policy_table_keys_on_the_sensitivity_of_the_touched_table(tmp_path, bank):
    table = GovernancePolicy.from_config([{"sensitivity": "pii", "action": "deny"},
                                          {"action": "allow"}])
    connector = sql_connector(bank, name="bank")
    connector.sensitivity = {"accounts.email": "pii"}
    (result,), _ = run_tools(tmp_path, connector, [call("bank__execute", sql=UPDATE)],
                             ApprovalPolicy(governance=table))
    assert result.is_error and "sensitivity=pii" in result.content and balances(bank) == ORIGINAL


# --------------------------------------------------------------------------- DuckDB


@pytest.fixture()
def ledger(tmp_path):
    path = str(tmp_path / "ledger.duckdb")
    con = duckdb.connect(path)
    con.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER)")
    con.execute("INSERT INTO accounts SELECT i, 100 FROM range(1, 11) t(i)")
    con.close()
    return path


def duck_rows(path, table):
    """Every row of ``table``, sorted, as another connection sees it."""
    con = duckdb.connect(path, config=DUCKDB_WRITE_CONFIG)  # same config: the same in-process database
    try:
        return con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
    finally:
        con.close()


def duck_balances(path):
    return dict(duck_rows(path, "accounts"))


@pytest.mark.parametrize("approve", [False, True])
def test_a_duckdb_write_is_previewed_invisible_to_others_then_committed_or_rolled_back(tmp_path, ledger, approve):
    seen = {}

    def approver(request):
        seen["preflight"] = request.preflight
        seen["others"] = duck_balances(ledger)
        return approve

    connector = duckdb_connector(name="ledger", database=ledger, environment="prod", allow_writes=True)
    (result,), records = run_tools(tmp_path, connector, [call("ledger__execute", sql=UPDATE)],
                                   ApprovalPolicy(approver=approver))
    assert seen["others"] == ORIGINAL
    preflight = seen["preflight"]
    assert preflight.rows_affected == 3 and preflight.tables == (("accounts", 3),)
    assert sorted(r["balance"] for r in preflight.before["accounts"]) == [100] * 3
    assert sorted(r["balance"] for r in preflight.after["accounts"]) == [200] * 3
    expected = {**ORIGINAL, 1: 200, 2: 200, 3: 200} if approve else ORIGINAL
    assert duck_balances(ledger) == expected
    assert result.is_error is not approve
    assert records[-1]["outcome"] == ("committed" if approve else "rolled_back")


def test_a_long_running_duckdb_update_is_interrupted_by_the_timeout_before_anyone_is_asked(tmp_path, ledger):
    asked = []
    connector = duckdb_connector(name="ledger", database=ledger, timeout_s=0.5)
    slow = "UPDATE accounts SET balance = (SELECT sum(i) % 7 FROM range(100000000000) t(i))::INTEGER"
    (result,), records = run_tools(tmp_path, connector, [call("ledger__execute", sql=slow)],
                                   ApprovalPolicy(approver=lambda r: asked.append(r) or True))
    assert result.is_error and "timed out after 0.5 s" in result.content
    assert asked == [] and duck_balances(ledger) == ORIGINAL
    assert records[-1]["outcome"] == "failed"


def test_a_duckdb_write_with_two_statements_is_not_previewed_and_refused_in_prod(tmp_path, ledger):
    asked = []
    connector = duckdb_connector(name="ledger", database=ledger, environment="prod", allow_writes=True)
    (result,), _ = run_tools(tmp_path, connector, [call("ledger__execute", sql=f"{UPDATE}; COMMIT")],
                             ApprovalPolicy(approver=lambda r: asked.append(r) or True))
    assert asked == [] and result.is_error and "cannot be previewed" in result.content
    assert duck_balances(ledger) == ORIGINAL


def test_a_duckdb_prod_connector_without_allow_writes_refuses(tmp_path, ledger):
    connector = duckdb_connector(name="ledger", database=ledger, environment="prod")
    (result,), _ = run_tools(tmp_path, connector, [call("ledger__execute", sql=UPDATE)],
                             ApprovalPolicy(approver=lambda r: True))
    assert result.is_error and "does not allow writes" in result.content
    assert duck_balances(ledger) == ORIGINAL


def test_a_duckdb_write_cannot_reach_other_files(tmp_path, ledger):
    target = tmp_path / "dump.csv"
    connector = duckdb_connector(name="ledger", database=ledger)
    (result,), _ = run_tools(tmp_path, connector, [call("ledger__execute", sql=f"COPY accounts TO '{target}'")],
                             ApprovalPolicy(approver=lambda r: True))
    assert result.is_error and not target.exists()


def test_a_duckdb_create_table_is_previewed_and_rolled_back(tmp_path, ledger):
    seen = []
    connector = duckdb_connector(name="ledger", database=ledger)
    run_tools(tmp_path, connector, [call("ledger__execute", sql="CREATE TABLE extra AS SELECT 1 AS x")],
              ApprovalPolicy(approver=lambda r: seen.append(r.preflight) or False))
    assert seen[0].previewed and "creates table extra" in seen[0].notes
    con = duckdb.connect(ledger, config=DUCKDB_WRITE_CONFIG)
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'extra'").fetchone()[0] == 0
    con.close()


# --------------------------------------------------------------------------- the approval display


def test_the_approval_display_shows_the_preflight_with_hostile_values_escaped(tmp_path, bank):
    from harness_magic.notebook.approval import request_html, request_text

    seen = []
    hostile = "<img src=x onerror=alert(1)>\x1b[2J"
    connector = sql_connector(bank, name="bank", environment="prod", allow_writes=True)
    run_tools(tmp_path, connector, [call("bank__execute", sql=f"UPDATE accounts SET email = '{hostile}' WHERE id = 1")],
              ApprovalPolicy(approver=lambda r: seen.append(r) or False))
    page, text = request_html(seen[0]), request_text(seen[0])
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page and "\x1b" not in page
    assert "user1@example.com" in page and "1 rows affected" in page and "environment" in page
    assert "\x1b" not in text and "before (accounts" in text and "after (accounts" in text
    assert "NOT PREVIEWED" not in text


def test_an_unpreviewed_write_is_flagged_in_the_approval_display(tmp_path, bank):
    from harness_magic.notebook.approval import request_html, request_text

    seen = []
    connector = sql_connector(bank, name="bank", environment="staging")
    run_tools(tmp_path, connector, [call("bank__execute", sql="VACUUM accounts")],
              ApprovalPolicy(approver=lambda r: seen.append(r) or False))
    assert request_text(seen[0]).startswith("NOT PREVIEWED") and "NOT PREVIEWED" in request_html(seen[0])
    assert "VACUUM may act outside the transaction" in request_text(seen[0])


# --------------------------------------------------------------------------- writes without a preview


def unpreviewed(environment, **fields):
    from harness_magic.core.execution.connectors.approval import ApprovalRequest

    return ApprovalRequest(tool="spark__execute", connector="spark", safety="write", arguments={"sql": "x"},
                           environment=environment, **fields)


def test_a_write_without_a_preview_is_refused_in_prod_even_when_allowed_and_approved():
    asked = []
    policy = ApprovalPolicy(rules={"write": "allow"}, approver=lambda r: asked.append(r) or True)
    decision = policy.decide(unpreviewed("prod", allow_writes=True))
    assert not decision.approved and "cannot be previewed" in decision.reason and asked == []


def test_a_write_without_a_preview_is_never_auto_allowed_in_staging_but_is_in_dev():
    asked = []
    policy = ApprovalPolicy(rules={"write": "allow"}, approver=lambda r: asked.append(r) or False)
    assert not policy.decide(unpreviewed("staging")).approved and len(asked) == 1
    assert policy.decide(unpreviewed("dev")).approved and len(asked) == 1


# --------------------------------------------------------------------------- policy files


@pytest.mark.parametrize("text, named", [
    ("rules: [{environment: prod, action: 3}]", "action = 3"),
    ("rules: [{environment: production, action: ask}]", "environment = 'production'"),
    ("rules: [{safety: write, action: allow, approvers: [dba]}]", "approvers only make sense"),
    ("rules: [{action: ask, approvers: dba}]", "approvers = 'dba'"),
    ("rules: [{action: ask, when: always}]", "unknown key(s) 'when'"),
    ("rules: {action: ask}", "must be a list"),
    ("rule: []", "unknown top-level key(s) 'rule'"),
    ("rules: [[1, 2]]", "rule 1 must be a mapping"),
    ("rules: [{action: ask}\n", "not valid YAML"),
    ("!!python/object/apply:os.system ['true']", "not valid YAML"),
])
def test_a_bad_policy_file_is_refused_with_the_bad_value_named(tmp_path, text, named):
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as raised:
        GovernancePolicy.load(path)
    assert named in str(raised.value) and str(path) in str(raised.value)


def test_an_oversized_policy_file_is_refused(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("rules:\n" + "  - {action: ask}\n" * 10_000)
    with pytest.raises(PolicyError, match="is over"):
        GovernancePolicy.load(path)


def test_a_policy_file_loads_and_the_first_matching_rule_decides(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("rules:\n  - {environment: prod, safety: destructive, action: deny}\n"
                    "  - {environment: prod, action: ask, approvers: [dba]}\n  - {action: allow}\n")
    table = GovernancePolicy.load(path)
    assert table.verdict("prod", "destructive", "none").action == "deny"
    assert table.verdict("prod", "write", "pii").approvers == ("dba",)
    assert table.verdict("dev", "write", "none").action == "allow"


# --------------------------------------------------------------------------- through a real kernel


@pytest.mark.kernel
@pytest.mark.parametrize("reply", ["y", "n"])
def test_in_a_notebook_the_prod_write_is_previewed_in_the_cell_and_committed_only_on_yes(tmp_path, ledger, reply):
    import textwrap

    from lab_frontend import run_answering
    from kernel_helpers import Kernel, script

    kernel = Kernel(tmp_path)
    try:
        setup = kernel.run(textwrap.dedent(f"""\
            %load_ext harness_magic
            %config AgentMagics.run_dir = "runs"
            %config AgentMagics.actor_role = "dba"
            %config AgentMagics.policy = {{"rules": [{{"environment": "prod", "action": "ask", "approvers": ["dba"]}}]}}
            %config AgentMagics.connectors = [{{"type": "duckdb", "name": "ledger", "database": {ledger!r}, \
"environment": "prod", "allow_writes": True}}]
        """))
        assert setup.ok, setup.outputs
        model = script(kernel, {"text": "", "tool_calls": [{"name": "load_connectors",
                                                             "arguments": {"connector_name": "ledger"}}]},
                       {"text": "", "tool_calls": [{"name": "ledger__execute", "arguments": {"sql": UPDATE}}]},
                       {"text": "Done."})
        cell, prompts = run_answering(kernel, f"%%agent {model}\nDouble the first balances.", reply)
        assert cell.ok, cell.outputs
        (prompt,) = prompts
        assert prompt.labels == ["Commit", "Deny"], "a previewed write's transaction is open: commit or not"
        shown = prompt.header
        assert "agent-approval" in shown and "agent-preflight" in shown and "3 rows affected" in shown
        assert "prod" in shown
        records = [json.loads(line) for line in (tmp_path / ".harness_audit.jsonl").read_text().splitlines()]
        write = [r for r in records if r["kind"] == "governed_write"]
        assert write[-1]["outcome"] == ("committed" if reply == "y" else "rolled_back")
        assert "dba" in write[-1]["actor"]
    finally:
        kernel.close()
    expected = {**ORIGINAL, 1: 200, 2: 200, 3: 200} if reply == "y" else ORIGINAL
    assert duck_balances(ledger) == expected


def test_a_governed_write_outside_a_harness_runs_once_and_reports_without_an_audit_log() -> None:
    """A tool called with no harness (``context.harness`` None): asked, run once, reported — no crash after the write."""
    from harness_magic.core.execution.connectors import Connector
    from harness_magic.core.execution.connectors.governed import run_governed
    from harness_magic.core.execution.connectors.registry import ToolContext

    asked, ran = [], []

    def approve(request):
        asked.append(request)
        return ApprovalDecision(True, "ok")

    def direct(sql):
        ran.append(sql)
        return 2

    context = ToolContext(SessionCache(), None, "db__execute", approve=approve)
    said = run_governed(None, direct, "UPDATE t SET a = 1", "sqlite", context, Connector("db", "a test database"))
    assert said.endswith("without a preview; 2 rows affected.")
    assert len(asked) == 1 and ran == ["UPDATE t SET a = 1"]
