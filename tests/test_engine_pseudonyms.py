"""The engine serves the pseudonyms (issue 31, Build 2): a DuckDB connector's files are views over them.

Through ``AgentSession`` with litellm talking HTTP to the scripted server, every request body read: the
model filters, joins, groups and counts on the pseudonyms it saw and finds the rows; a probe of a value's
characters sees only a pseudonym's; sums over ``financial`` columns are exact; a pull restores the real
values; nothing real reaches a request body or the run log. Hostile SQL (the file path read directly, the
view's hidden source, the pseudonym function fed guessed values, casts) never sees a real value.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from test_pseudonyms import AMOUNTS, LONG_EMAILS, NAMES, call, glossary, leaks, logged, make_session, people, sent

duckdb = pytest.importorskip("duckdb")

ORDERS = pd.DataFrame({"order_id": [10, 11, 12, 13],
                       "email": [LONG_EMAILS[1], LONG_EMAILS[1], LONG_EMAILS[2], "nobody@example.com"],
                       "total": [5.0, 7.5, 20.0, 1.0]})


@pytest.fixture
def lake(tmp_path):
    people().to_parquet(tmp_path / "customers.parquet")
    ORDERS.to_csv(tmp_path / "orders.csv", index=False)
    return {"type": "duckdb", "name": "lake",
            "files": {"customers": str(tmp_path / "customers.parquet"), "orders": str(tmp_path / "orders.csv")}}


def queries(*sqls: str, prefix: str = "r") -> list[dict]:
    """One ``lake__query`` turn per statement, the results named ``<prefix>0``, ``<prefix>1``..."""
    return [{"tool_calls": [{"id": f"{prefix}{i}", **call("lake__query", sql=sql, name=f"{prefix}{i}")}]}
            for i, sql in enumerate(sqls)]


def load() -> dict:
    return {"tool_calls": [{"id": "c0", **call("load_connectors", connector_name="lake")}]}


def seen_email(server, tld: str) -> str:
    """The pseudonym e-mail with top-level domain ``tld`` the model was shown."""
    found = set(re.findall(r"user-[0-9a-f]{8}@[0-9a-f]{6}\." + tld + r"\b", sent(server)))
    assert len(found) == 1, found
    return found.pop()


def test_the_model_filters_joins_groups_and_counts_on_the_pseudonyms_the_view_serves(tmp_path, server, lake):
    session = make_session(tmp_path, server, [glossary(tmp_path), lake])
    try:
        server.replies = [load(), *queries("SELECT id, name, email, notes, amount FROM customers ORDER BY id"),
                          {"text": "seen"}]
        assert session.ask("who are the customers?").status == "completed"
        everyone = session.cache.get("r0")
        assert all(session.pseudonyms.is_pseudonym(v) for v in [*everyone["name"], *everyone["email"]])
        pseudonym = seen_email(server, "org")  # Bartholomew's, as the model saw it
        server.replies = [*queries(
            f"SELECT id, amount FROM customers WHERE email = '{pseudonym}'",
            "SELECT c.id, count(*) AS n, sum(o.total) AS spent FROM customers c JOIN orders o ON o.email = c.email "
            "GROUP BY c.id ORDER BY c.id",
            "SELECT count(DISTINCT email) AS people FROM orders",
            "SELECT substr(email, 1, 1) AS first, count(*) AS n FROM customers GROUP BY 1",
            "SELECT id FROM customers WHERE substr(email, 1, 1) = 'a' OR name LIKE 'Ali%' OR notes LIKE '%landl%'",
            "SELECT sum(amount) AS total FROM customers", prefix="s"), {"text": "done"}]
        result = session.ask("what did they buy?")
        assert result.status == "completed", result.error
        value = session.cache.get
        assert value("s0")["id"].tolist() == [2] and value("s0")["amount"].tolist() == [AMOUNTS[1]]
        assert value("s1").to_dict("list") == {"id": [2, 3], "n": [2, 1], "spent": [12.5, 20.0]}  # a join on pii
        assert value("s2")["people"].tolist() == [3]
        probe = session.cache.user_value("s3", value("s3"))  # what the engine computed (the model got it concealed)
        assert probe.to_dict("list") == {"first": ["u"], "n": [3]}  # every e-mail's first character: 'u'
        assert value("s4").empty  # Alice's e-mail starts with 'a', her name with 'Ali': the view shows neither
        assert value("s5")["total"].tolist() == [sum(AMOUNTS)]  # financial numbers stay real: the sum is exact
        assert leaks(sent(server)) == [] and leaks(logged(tmp_path)) == []
        pulled = session.cache.user_value("s0", session.cache.get("s0"))
        assert pulled["amount"].tolist() == [AMOUNTS[1]]
        restored = session.cache.user_value(None, everyone)  # a pull restores every pseudonym the view issued
        assert restored["name"].tolist() == NAMES and restored["email"].tolist() == LONG_EMAILS
        assert set(restored["notes"]) == {"[denied restricted]"}  # restricted is denied: never there to restore
    finally:
        session.close()


def test_the_files_cannot_be_read_around_the_views(tmp_path, server, lake):
    """Hostile: the model reads the configured path, names the view's hidden source, or asks the catalog."""
    path = lake["files"]["customers"]
    session = make_session(tmp_path, server, [glossary(tmp_path), lake])
    try:
        engine = session.connectors.registry["lake"].engine
        server.replies = [load(), *queries("SELECT count(*) AS n FROM customers"), {"text": "ok"}]
        assert session.ask("count").status == "completed"
        catalog, _ = engine.query(session.cache, "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal")
        hidden = re.search(r"AS (arrow_object_\w+)", catalog["sql"].iloc[0]).group(1)  # the scan the view reads
        server.replies = [*queries(
            f"SELECT * FROM read_parquet('{path}')",
            f"SELECT * FROM read_csv('{lake['files']['orders']}')",
            f"SELECT * FROM {hidden}",
            "SELECT * FROM python_arrow_scan()",
            "SELECT * FROM query_table('customers')",
            "SELECT * FROM query('SELECT name, email FROM customers')", prefix="s"), {"text": "done"}]
        result = session.ask("read the files directly")
        assert result.status == "completed", result.error
        tool_results = [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"]
        errors = [b.content for b in tool_results if b.is_error]
        assert len(errors) == 4, errors
        assert "file system operations are disabled" in errors[0] and "does not exist" in errors[2]
        for handle in ("s4", "s5"):  # the catalog's own routes reach the views, and the views only
            assert all(session.pseudonyms.is_pseudonym(v) for v in session.cache.get(handle)["name"])
        assert leaks(sent(server)) == [] and leaks(logged(tmp_path)) == []
    finally:
        session.close()


def test_the_pseudonym_function_makes_pseudonyms_and_cannot_invert_them(tmp_path, server, lake):
    """Hostile: the model calls the views' function itself, on guessed values and on what it saw, and casts."""
    session = make_session(tmp_path, server, [glossary(tmp_path), lake])
    try:
        server.replies = [load(), *queries(
            "SELECT email, harness_pseudonym(email, 'email', 'pii') AS again, "
            "harness_pseudonym(name, 'pii', 'pii') AS name_again FROM customers ORDER BY id",
            "SELECT harness_pseudonym('guess.who@example.com', 'email', 'pii') AS guess",
            "SELECT harness_pseudonym('x', 'plaintext', 'pii') AS bad",
            "SELECT CAST(name AS BLOB) AS b, hex(email) AS h, CAST(email AS VARCHAR(3)) AS short, "
            "upper(name) AS loud, name::BLOB::VARCHAR AS round_trip FROM customers ORDER BY id"), {"text": "done"}]
        result = session.ask("invert them")
        assert result.status == "completed", result.error
        again = session.cache.get("r0")
        assert again["again"].tolist() == again["email"].tolist()  # a pseudonym's pseudonym is itself
        guess = session.cache.get("r1")["guess"].iloc[0]
        assert guess != "guess.who@example.com" and session.pseudonyms.is_pseudonym(guess)  # a guess: a pseudonym
        bad = [b.content for m in result.messages for b in m.content
               if getattr(b, "type", "") == "tool_result" and b.is_error]
        assert len(bad) == 1 and "'plaintext' must be one of" in bad[0]
        casts = session.cache.user_value("r3", session.cache.get("r3"))  # what the engine computed, for the user
        assert all(bytes(b).decode().startswith("<pii:") for b in casts["b"])  # casts see pseudonyms only
        assert all(bytes.fromhex(h).decode().startswith("user-") for h in casts["h"])
        assert all(loud.startswith("<PII:") for loud in casts["loud"])
        assert casts["round_trip"].tolist() == NAMES  # a pseudonym cast back and forth is one: a pull restores it
        assert leaks(sent(server)) == [] and leaks(logged(tmp_path)) == []
    finally:
        session.close()


def test_a_changed_policy_or_glossary_redefines_the_views_before_the_next_query(tmp_path):
    from harness_magic.core.cache import SessionCache
    from harness_magic.core.control.pseudonyms import Pseudonyms
    from harness_magic.core.execution.connectors.duckdb.engine import DuckDBEngine
    from harness_magic.core.text.masking import ColumnClass, Masker

    people().to_csv(tmp_path / "c.csv", index=False)
    policy = {"pii": "mask", "restricted": "deny", "financial": "mask"}
    declared: dict[str, ColumnClass] = {}
    cache = SessionCache()
    pseudonyms = Pseudonyms(Masker(lambda: policy, declared=lambda: declared))
    cache.set_guard(pseudonyms.guard())
    engine = DuckDBEngine({"customers": tmp_path / "c.csv"})
    try:
        def names() -> list[str]:
            return engine.query(cache, "SELECT name FROM customers ORDER BY id")[0]["name"].tolist()

        assert names() == NAMES  # no class configured, and names are not detected: real
        declared["customers.name"] = ColumnClass("pii", "glossary")
        served = names()
        assert all(pseudonyms.is_pseudonym(n) for n in served) and pseudonyms.reveal_value(served) == NAMES
        policy["pii"] = "deny"
        assert names() == ["[denied pii]"] * 3
        policy["pii"] = "allow"
        assert names() == NAMES
        emails = engine.query(cache, "SELECT email FROM customers")[0]["email"].tolist()
        assert emails == LONG_EMAILS  # pii allowed: a detected e-mail is real too
    finally:
        engine.close()
        cache.close()


def test_outside_a_session_the_engine_reads_its_files_as_before_and_never_serves_a_session_after(tmp_path):
    from harness_magic.core.cache import SessionCache
    from harness_magic.core.control.pseudonyms import Pseudonyms
    from harness_magic.core.execution.connectors.duckdb.engine import DuckDBEngine
    from harness_magic.core.execution.tools import ToolError
    from harness_magic.core.text.masking import Masker

    people().to_parquet(tmp_path / "c.parquet")
    engine = DuckDBEngine({"customers": tmp_path / "c.parquet"})
    guarded = SessionCache()
    guarded.set_guard(Pseudonyms(Masker()).guard())
    try:
        assert engine.query(SessionCache(), "SELECT email FROM customers")[0]["email"].tolist() == LONG_EMAILS
        with pytest.raises(ToolError, match="first used outside a session"):
            engine.query(guarded, "SELECT email FROM customers")  # its files are readable by path: never masked
    finally:
        engine.close()
        guarded.close()


@pytest.mark.kernel
def test_in_a_kernel_a_view_result_shows_pseudonyms_and_agent_pull_restores_the_real_values(tmp_path, lake):
    pytest.importorskip("jupyter_client")
    from kernel_helpers import agent_kernel, script

    glossary(tmp_path)
    with agent_kernel(tmp_path, run_dir="runs",
                      connectors=[{"type": "glossary", "files": ["terms.yaml"]}, lake]) as kernel:
        model = script(kernel, load(),
                       {"tool_calls": [{"name": "lake__query", "arguments": {
                           "sql": "SELECT id, name, email, amount FROM customers ORDER BY id", "name": "people"}}]},
                       {"text": "Three customers."})
        run = kernel.run(f"%%agent {model}\nWho are the customers?")
        assert run.ok, run.outputs
        assert leaks(json.dumps(run.outputs, ensure_ascii=False)) == []  # the cell holds what the model saw
        pulled = kernel.run("%agent_pull people real")
        assert pulled.ok, pulled.outputs
        assert kernel.value("list(real['name'])") == NAMES and kernel.value("list(real['email'])") == LONG_EMAILS
        assert kernel.value("[float(a) for a in real['amount']]") == AMOUNTS
        assert leaks(logged(tmp_path)) == []


def test_a_star_query_over_a_view_is_classified_and_marked_though_its_values_arrive_concealed(tmp_path, server, lake):
    """``SELECT *`` gives lineage no column names: the classes come from what the view served (the real values
    behind its pseudonyms, its denied text), and the tool result carries the masking mark with the counts."""
    contacts = pd.DataFrame({"id": [1, 2], "phone": ["+44 20 7946 0958", "+1 415-555-0132"],
                             "card": ["4111 1111 1111 1111", "5500 0000 0000 0004"]})  # detected on real values only
    contacts.to_parquet(tmp_path / "contacts.parquet")
    lake = {**lake, "files": {**lake["files"], "contacts": str(tmp_path / "contacts.parquet")}}
    session = make_session(tmp_path, server, [glossary(tmp_path), lake])
    try:
        server.replies = [load(), *queries("SELECT * FROM customers", "SELECT * FROM orders",
                                           "SELECT * FROM contacts ORDER BY id"), {"text": "seen"}]
        assert session.ask("look at everything").status == "completed"
        classes = session.masking.masker.columns
        assert {c: (cc.cls, cc.kind) for c, cc in classes["r0"].items() if c in ("email", "notes", "name")} == {
            "email": ("pii", "email"), "notes": ("restricted", None), "name": ("pii", None)}
        assert (classes["r1"]["email"].cls, classes["r1"]["email"].kind) == ("pii", "email")  # a file with no glossary
        assert {c: (cc.cls, cc.kind) for c, cc in classes["r2"].items()} == {
            "phone": ("pii", "phone"), "card": ("financial", "card")}  # their pseudonyms are no valid phone or card
        shown = session.cache.get("r2")
        assert not set(shown["phone"]) & set(contacts["phone"]) and not set(shown["card"]) & set(contacts["card"])
        assert session.cache.user_value("r2", shown).equals(contacts)
        events = [json.loads(line) for line in logged(tmp_path).splitlines()]
        applied = {e["tool_use_id"]: e["counts"] for e in events if e.get("name") == "masking_applied"}
        assert applied["r0"] == {"financial": 3, "pii": 6, "restricted": 3} and applied["r1"] == {"pii": 4}
        assert applied["r2"] == {"financial": 2, "pii": 2}
        assert leaks(sent(server)) == [] and leaks(logged(tmp_path)) == []
    finally:
        session.close()


@pytest.mark.parametrize("dtype", ["str", "string[pyarrow]", "large_string[pyarrow]", "string[python]", "object"])
def test_every_kind_of_text_column_is_concealed_and_restored_exactly_with_its_dtype_and_missing_cells(dtype):
    """The Arrow path (pandas' default text) and the object path give the same pseudonyms; a missing cell stays
    missing; a pull restores the column exactly, dtype included."""
    import pyarrow as pa

    from harness_magic.core.control.pseudonyms import Pseudonyms
    from harness_magic.core.text.masking import ColumnClass, Masker

    kind = pd.ArrowDtype(pa.large_string()) if dtype == "large_string[pyarrow]" else dtype
    column = pd.Series([LONG_EMAILS[0], None, LONG_EMAILS[1], LONG_EMAILS[0], "[denied pii]"], dtype=kind)
    frame = pd.DataFrame({"who": column, "n": range(5)})
    pseudonyms = Pseudonyms(Masker(declared=lambda: {"who": ColumnClass("pii", "config")}))
    concealed = pseudonyms.conceal("h", frame, None)
    shown = concealed["who"]
    assert shown.dtype == column.dtype and shown.isna().tolist() == column.isna().tolist()
    assert shown[0] == shown[3] != shown[2] and leaks(shown.astype(str).str.cat()) == []
    assert shown[0] == pseudonyms.masker.pseudonyms("email", [LONG_EMAILS[0]])[0]  # the keyed function, as views use
    assert pseudonyms.conceal("h2", concealed, None)["who"].equals(shown)  # never pseudonymised twice
    restored = pseudonyms.reveal_value(concealed)
    assert restored["who"].dtype == column.dtype and restored["who"].equals(column)
