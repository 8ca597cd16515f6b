"""Sensitive values never enter the agent's side (issue 31): pseudonymised where they come in, restored on pull.

Each attack from the outside suite runs through ``AgentSession`` with litellm
talking HTTP to the scripted server, and every request body the server
received is read: no ``pii`` or ``restricted`` value of a pushed frame, an
aliased or derived column, a cut print, an engine error or a docs snippet
reaches the model or the run log; pulls give the real values back; a query
filtering on a pseudonym finds the row; sums over ``financial`` columns are
exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy as sa

from harness_magic.core.text.masking import denied_text

NAMES = ["Alice Quinton-Smythe", "Bartholomew Okonkwo", "Carmen Delacroix-Ibarra"]
NOTES = ["owes the landlord 4,000 since May", "asked us never to call before noon", "VIP: escalate to Dana"]
LONG_EMAILS = ["alice.quinton-smythe.personal.account.2024@very-long-example-domain.com",
               "bartholomew.okonkwo@example.org", "carmen.delacroix@example.net"]
AMOUNTS = [99000.5, 1250.25, 310.0]


def call(tool, /, **arguments):
    return {"name": tool, "arguments": arguments}


def people() -> pd.DataFrame:
    return pd.DataFrame({"id": [1, 2, 3], "name": NAMES, "notes": NOTES, "email": LONG_EMAILS,
                         "amount": AMOUNTS})


def secrets() -> list[str]:
    out = NAMES + NOTES + LONG_EMAILS
    out += [e.split("@")[0][:20] for e in LONG_EMAILS]  # a cut e-mail still names the person
    out += [n.split()[0] for n in NAMES]  # first names alone
    return out


def leaks(text: str) -> list[str]:
    return sorted({s for s in secrets() if s in text})


def glossary(tmp_path: Path) -> dict:
    (tmp_path / "terms.yaml").write_text(
        "tables:\n"
        "  customers.name: {kind: dimension, definition: The customer's name., sensitivity: pii}\n"
        "  customers.notes: {kind: dimension, definition: Free-text notes., sensitivity: restricted}\n"
        "  customers.amount: {kind: dimension, definition: Amount owed., sensitivity: financial}\n")
    return {"type": "glossary", "files": [str(tmp_path / "terms.yaml")]}


@pytest.fixture
def crm(tmp_path):
    db = tmp_path / "crm.sqlite"
    engine = sa.create_engine(f"sqlite:///{db}")
    people().to_sql("customers", engine, index=False)
    engine.dispose()
    return f"sqlite:///{db}"


def make_session(tmp_path, server, config, *, sandbox="inprocess", subagents=False):
    from harness_magic import ProviderAdapter
    from harness_magic.core.execution.connectors.config import connectors_from_config
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    adapter = ProviderAdapter("openai/test-model", api_base=server.api_base, api_key="sk-test",
                              sleep=lambda s: None)
    return AgentSession(AgentConfig(model="openai/test-model", run_dir=str(tmp_path / "runs"), sandbox=sandbox,
                                    planner=False, reminders=False),
                        adapter=adapter, connectors=connectors_from_config(config), subagents=subagents)


def sent(server) -> str:
    return "\n".join(json.dumps(r, ensure_ascii=False) for r in server.requests)


def logged(tmp_path) -> str:
    return "\n".join(p.read_text() for p in (tmp_path / "runs").rglob("*.jsonl"))


# -- a pushed frame --------------------------------------------------------------------------


def test_a_pushed_frame_reaches_the_worker_pseudonymised_and_comes_back_real(tmp_path, server):
    code = ("print(frame[['name', 'notes']])\nprint(frame)\nprint(frame.email.iloc[0])\n"
            "print('TOTAL', frame.amount.sum(), 'DISTINCT', frame.name.nunique())\n"
            "save('mine', frame[frame.amount > 1000][['name', 'email', 'amount']])")
    server.replies = [{"tool_calls": [{"id": "c1", **call("python_interpreter", code=code)}]},
                      {"text": "done"}]
    session = make_session(tmp_path, server, [glossary(tmp_path)], sandbox="worker")
    try:
        handle = session.cache.put("frame", people(), tool="notebook")  # what --in / %agent_push do
        result = session.ask("look at the frame")
        assert result.status == "completed", result.error
        assert leaks(sent(server)) == [] and leaks(logged(tmp_path)) == []
        body = sent(server)
        assert denied_text("restricted") in body
        assert f"TOTAL {sum(AMOUNTS)} DISTINCT 3" in body  # financial stays real in the worker: sums exact
        pulled = session.cache.user_value(handle, session.cache.get(handle))
        pd.testing.assert_frame_equal(pulled, people())
        mine = session.cache.user_value("mine", session.cache.get("mine"))  # derived in the worker
        assert list(mine["name"]) == NAMES[:2] and list(mine["email"]) == LONG_EMAILS[:2]
    finally:
        session.close()


def test_an_input_handle_is_classified_before_anything_reads_it(tmp_path, server):
    server.replies = [{"text": "ok"}]
    session = make_session(tmp_path, server, [glossary(tmp_path)])
    try:
        session.cache.put("frame", people(), tool="notebook")
        snapshot = json.dumps(session.cache.snapshot("frame"))
        assert leaks(snapshot) == []
        classes = session.masking.column_classes("frame")
        assert classes["name"].cls == "pii" and classes["notes"].cls == "restricted"
        assert classes["email"].cls == "pii" and classes["amount"].cls == "financial"
    finally:
        session.close()


# -- SQL: aliases, derived columns, errors, filters --------------------------------------------


def test_an_alias_or_a_derived_column_keeps_its_class(tmp_path, server, crm):
    queries = ["SELECT name AS who, notes AS memo FROM customers",
               "SELECT upper(name) AS shout, substr(notes, 1, 12) AS gist, email AS e FROM customers",
               "WITH c AS (SELECT name AS n, notes AS x FROM customers) SELECT * FROM c",
               "SELECT id, name || ' <' || email || '>' AS contact FROM customers",
               "SELECT count(DISTINCT name) AS people, sum(amount) AS total FROM customers"]
    server.replies = ([{"tool_calls": [{"id": "c0", **call("load_connectors", connector_name="crm")}]}]
                      + [{"tool_calls": [{"id": f"q{i}", **call("crm__query", sql=q, name=f"r{i}")}]}
                         for i, q in enumerate(queries)]
                      + [{"tool_calls": [{"id": "p", **call("python_interpreter",
                                                            code="print(r0); print(r1); print(r2); print(r3)")}]},
                         {"text": "done"}])
    session = make_session(tmp_path, server, [glossary(tmp_path), {"type": "sql", "name": "crm", "url": crm}])
    try:
        result = session.ask("who are they?")
        assert result.status == "completed", result.error
        assert leaks(sent(server)) == [] and leaks(logged(tmp_path)) == []
        body = sent(server)
        assert f"{sum(AMOUNTS)}" in body  # an aggregate of a financial column is exact ...
        assert json.dumps("people") in body or "people" in body  # ... and a count is a count
        classes = session.masking.column_classes("r0")
        assert classes["who"].cls == "pii" and "computed from name" in classes["who"].source
        assert classes["memo"].cls == "restricted"
        assert session.masking.column_classes("r3")["contact"].cls == "pii"
        r4 = session.cache.get("r4")
        assert int(r4["people"].iloc[0]) == 3  # COUNT carries no value: not pseudonymised
    finally:
        session.close()


def test_a_query_filtering_on_a_pseudonym_finds_the_row(tmp_path, server, crm):
    session = make_session(tmp_path, server, [glossary(tmp_path), {"type": "sql", "name": "crm", "url": crm}])
    try:
        session.cache.put("frame", people(), tool="notebook")
        pseudonym = session.cache.get("frame")["name"].iloc[1]
        assert pseudonym != NAMES[1]
        server.replies = [
            {"tool_calls": [{"id": "c0", **call("load_connectors", connector_name="crm")}]},
            {"tool_calls": [{"id": "c1", **call("crm__query", sql=f"SELECT id, amount FROM customers WHERE name = "
                                                                  f"'{pseudonym}'", name="hit")}]},
            {"tool_calls": [{"id": "c2", **call("crm__query", sql=f"SELECT '{pseudonym}' AS echo", name="echo")}]},
            {"text": "done"}]
        result = session.ask("find that customer")
        assert result.status == "completed", result.error
        hit = session.cache.get("hit")
        assert list(hit["id"]) == [2] and list(hit["amount"]) == [AMOUNTS[1]]
        assert NAMES[1] not in sent(server)  # a pseudonym selected as a literal is never made real
        assert session.cache.get("echo")["echo"].iloc[0] == pseudonym
    finally:
        session.close()


def test_an_engine_error_does_not_carry_a_value_back(tmp_path, server):
    duckdb = pytest.importorskip("duckdb")
    csv = tmp_path / "customers.csv"
    people().to_csv(csv, index=False)
    server.replies = [
        {"tool_calls": [{"id": "c0", **call("load_connectors", connector_name="lake")}]},
        {"tool_calls": [{"id": "c1", **call("lake__query", sql="SELECT CAST(name AS INTEGER) AS n FROM customers")}]},
        {"tool_calls": [{"id": "c2", **call("lake__query", sql="SELECT CAST(notes AS DATE) AS d FROM customers")}]},
        {"text": "done"}]
    session = make_session(tmp_path, server, [glossary(tmp_path),
                                              {"type": "duckdb", "name": "lake", "files": {"customers": str(csv)}}])
    try:
        result = session.ask("cast them")
        assert result.status == "completed", result.error
        assert leaks(sent(server)) == [] and leaks(logged(tmp_path)) == []
        assert "[value hidden]" in sent(server)
    finally:
        session.close()
    del duckdb


# -- the person's prompt ------------------------------------------------------------------------


def test_a_sensitive_value_in_the_prompt_is_sent_as_its_pseudonym_and_still_finds_the_rows(tmp_path, server, crm):
    session = make_session(tmp_path, server, [glossary(tmp_path), {"type": "sql", "name": "crm", "url": crm}])
    try:
        session.cache.put("frame", people(), tool="notebook")
        pseudonym = session.cache.get("frame")["email"].iloc[1]
        server.replies = [
            {"tool_calls": [{"id": "c0", **call("load_connectors", connector_name="crm")}]},
            {"tool_calls": [{"id": "c1", **call("crm__query", sql=f"SELECT amount FROM customers WHERE email = "
                                                                  f"'{pseudonym}'", name="bought")}]},
            {"text": "done"}]
        result = session.ask(f"what did {LONG_EMAILS[1]} buy?")
        assert result.status == "completed", result.error
        assert LONG_EMAILS[1] not in sent(server)
        assert pseudonym in json.dumps(server.requests[0], ensure_ascii=False)
        assert list(session.cache.get("bought")["amount"]) == [AMOUNTS[1]]
    finally:
        session.close()


# -- subagents, checkpoints, docs ---------------------------------------------------------------


def test_a_subagent_gets_the_pseudonymised_copy(tmp_path, server):
    server.replies = [
        {"tool_calls": [{"id": "c1", **call("subagent", task="describe the people", input_handles=["frame"])}]},
        {"tool_calls": [{"id": "s1", **call("python_interpreter", code="print(frame.to_string())")}]},
        {"text": "child done"},
        {"text": "done"}]
    session = make_session(tmp_path, server, [glossary(tmp_path)], subagents=True)
    try:
        session.cache.put("frame", people(), tool="notebook")
        result = session.ask("delegate")
        assert result.status == "completed", result.error
        assert len(server.requests) == 4
        assert leaks(sent(server)) == [] and leaks(logged(tmp_path)) == []
        assert denied_text("restricted") in json.dumps(server.requests[2])
    finally:
        session.close()


def test_a_checkpoint_written_with_real_values_is_pseudonymised_when_restored(tmp_path, server):
    from harness_magic.core.cache import SessionCache

    foreign = SessionCache()
    foreign.put("frame", people())
    foreign.save(tmp_path / "ckpt")
    foreign.close()
    server.replies = [{"tool_calls": [{"id": "c1", **call("python_interpreter", code="print(frame.to_string())")}]},
                      {"text": "done"}]
    session = make_session(tmp_path, server, [glossary(tmp_path)])
    try:
        session.restore_checkpoint(tmp_path / "ckpt")
        result = session.ask("show it")
        assert result.status == "completed", result.error
        assert leaks(sent(server)) == []
        pd.testing.assert_frame_equal(session.cache.user_value("frame", session.cache.get("frame")), people())
    finally:
        session.close()


def test_the_run_log_holds_the_docs_snippets_the_model_saw(tmp_path, server):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "contacts.md").write_text("# Escalation contacts\n\nFor billing disputes write to "
                                      "dana.whitfield@corp-example.com or call +44 20 7946 0958.\n")
    server.replies = [
        {"tool_calls": [{"id": "c0", **call("load_connectors", connector_name="docs")}]},
        {"tool_calls": [{"id": "c1", **call("docs__search", query="billing disputes escalation")}]},
        {"text": "done"}]
    session = make_session(tmp_path, server, [{"type": "docs", "name": "docs", "roots": [str(docs)],
                                               "index_path": str(tmp_path / "index.sqlite")}])
    try:
        result = session.ask("who handles billing disputes?")
        assert result.status == "completed", result.error
        log = logged(tmp_path)
        assert '"retrieval"' in log
        for value in ("dana.whitfield@corp-example.com", "+44 20 7946 0958"):
            assert value not in sent(server) and value not in log
    finally:
        session.close()


# -- the rules underneath -----------------------------------------------------------------------


def test_pseudonyms_are_stable_across_handles_and_never_applied_twice():
    from harness_magic.core.control.pseudonyms import Pseudonyms
    from harness_magic.core.text.masking import ColumnClass, Masker

    masker = Masker(declared=lambda: {"name": ColumnClass("pii", "config")})
    pseudonyms = Pseudonyms(masker)
    first = pseudonyms.conceal("a", people(), None)
    second = pseudonyms.conceal("b", people().iloc[::-1], None)
    assert list(first["name"]) == list(second["name"].iloc[::-1])  # joins and group-bys stay right
    again = pseudonyms.conceal("c", first, None)  # a derived value saved back
    assert list(again["name"]) == list(first["name"]) and list(again["email"]) == list(first["email"])
    assert pseudonyms.reveal_value(again["name"]).tolist() == NAMES


def test_a_categorical_or_nullable_sensitive_column_keeps_its_dtype():
    from harness_magic.core.control.pseudonyms import Pseudonyms
    from harness_magic.core.text.masking import ColumnClass, Masker

    masker = Masker(declared=lambda: {"name": ColumnClass("pii", "config")})
    pseudonyms = Pseudonyms(masker)
    frame = pd.DataFrame({"name": pd.Categorical(["Ann Lee", None, "Bo Chan", "Ann Lee"],
                                                 categories=["Bo Chan", "Ann Lee", "Unused Name"])})
    frame["name2"] = pd.array(["Ann Lee", None, "Bo Chan", pd.NA], dtype="string")
    frame = frame.rename(columns={"name2": "name"}, errors="raise").iloc[:, [0, 1]]
    concealed = pseudonyms.conceal("t", frame, None)
    assert isinstance(concealed.iloc[:, 0].dtype, pd.CategoricalDtype) and len(concealed.iloc[:, 0].cat.categories) == 3
    assert str(concealed.iloc[:, 1].dtype) == "string" and concealed.iloc[:, 1].isna().tolist() == [False, True, False, True]
    assert "Ann Lee" not in concealed.to_string()
    restored = pseudonyms.reveal_value(concealed)
    pd.testing.assert_frame_equal(restored, frame)


def test_a_column_that_cannot_be_read_is_named_and_the_run_goes_on():
    from harness_magic.core.control.pseudonyms import Pseudonyms
    from harness_magic.core.text.masking import ColumnClass, Masker

    masker = Masker(declared=lambda: {"name": ColumnClass("pii", "config")})
    pseudonyms = Pseudonyms(masker)
    frame = pd.DataFrame({"name": [["Ann", "Lee"], ["Bo", "Chan"]]})  # unhashable cells
    assert pseudonyms.conceal("t", frame, None) is frame
    assert any("t.name" in note for note in pseudonyms.notes)


def test_the_widened_filter_never_touches_a_selected_pseudonym():
    from harness_magic.core.control.pseudonyms import Pseudonyms
    from harness_magic.core.text.masking import ColumnClass, Masker

    pseudonyms = Pseudonyms(Masker(declared=lambda: {"name": ColumnClass("pii", "config")}))
    fake = pseudonyms.conceal("t", people(), None)["name"].iloc[0]
    assert pseudonyms.query_for_engine(f"SELECT '{fake}' AS x", "duckdb") == f"SELECT '{fake}' AS x"
    # compared *and* selected: never replaced (the selected literal would carry the value out)
    both = f"SELECT '{fake}' AS x FROM t WHERE name = '{fake}'"
    assert pseudonyms.query_for_engine(both, "duckdb") == both
    widened = pseudonyms.query_for_engine(f"SELECT id FROM t WHERE name = '{fake}'", "duckdb")
    assert NAMES[0] in widened and fake in widened
    assert pseudonyms.query_for_engine("SELECT 'x' FROM t WHERE name = 'not a pseudonym'") == \
        "SELECT 'x' FROM t WHERE name = 'not a pseudonym'"


def test_column_lineage_follows_aliases_ctes_and_stars_but_not_counts():
    from harness_magic.core.execution.connectors.lineage import column_sources

    sources = column_sources("WITH c AS (SELECT name AS who, notes FROM crm.customers) "
                             "SELECT upper(who) AS shout, notes AS memo, count(DISTINCT who) AS n FROM c", "duckdb")
    assert {"name"} <= sources["shout"] and sources["memo"] >= {"notes"} and sources["n"] == frozenset()
    assert column_sources("SELECT * FROM (SELECT email AS e FROM t) s")["e"] >= {"email"}
    assert column_sources("SELECT a FROM t UNION ALL SELECT secret FROM u")["a"] >= {"a", "secret"}
    assert column_sources("this is not ((( sql") is None
    deep = "SELECT " + "(" * 400 + "1" + ")" * 400
    assert column_sources(deep) is None


def test_a_lazy_engine_handle_serves_pseudonyms_to_its_snapshot_the_worker_and_later_queries(tmp_path, server):
    pytest.importorskip("duckdb")
    csv = tmp_path / "customers.csv"
    people().to_csv(csv, index=False)
    server.replies = [
        {"tool_calls": [{"id": "c0", **call("load_connectors", connector_name="lake")}]},
        {"tool_calls": [{"id": "c1", **call("lake__query", sql="SELECT name AS who, notes, email FROM customers",
                                            name="q", lazy=True)}]},
        {"tool_calls": [{"id": "c2", **call("python_interpreter", code="print(q.to_string())")}]},
        {"tool_calls": [{"id": "c3", **call("lake__query", sql="SELECT who AS again, upper(who) AS loud FROM q",
                                            name="q2")}]},
        {"text": "done"}]
    session = make_session(tmp_path, server, [glossary(tmp_path),
                                              {"type": "duckdb", "name": "lake", "files": {"customers": str(csv)}}])
    try:
        result = session.ask("go")
        assert result.status == "completed", result.error
        assert session.cache.location("q") == "duckdb"
        assert leaks(sent(server)) == [] and leaks(logged(tmp_path)) == []
        q2 = session.cache.get("q2")
        frame = session.cache.get("frame") if "frame" in session.cache else None
        assert frame is None and all(session.pseudonyms.is_pseudonym(v) for v in q2["again"])  # same pseudonyms as q's
        assert session.cache.user_value("q2", q2)["again"].tolist() == NAMES
    finally:
        session.close()


# -- the notebook: a real kernel -----------------------------------------------------------------


@pytest.mark.kernel
def test_in_a_kernel_the_cell_shows_pseudonyms_and_pull_and_out_restore_the_real_values(tmp_path):
    pytest.importorskip("jupyter_client")
    from kernel_helpers import Kernel, script

    glossary(tmp_path)
    kernel = Kernel(tmp_path)
    try:
        setup = kernel.run(
            "%load_ext harness_magic\n%config AgentMagics.run_dir = 'runs'\n"
            "%config AgentMagics.connectors = [{'type': 'glossary', 'files': ['terms.yaml']}]\n"
            "import pandas as pd\n"
            f"customers = pd.DataFrame({{'id': [1, 2, 3], 'name': {NAMES!r}, 'notes': {NOTES!r}, "
            f"'email': {LONG_EMAILS!r}, 'amount': {AMOUNTS!r}}})")
        assert setup.ok, setup.outputs
        code = ("print(customers[['name', 'notes', 'email']])\n"
                "save('big_spenders', customers[customers.amount > 1000][['name', 'email', 'amount']])")
        model = script(kernel, {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]},
                       {"text": "Two big spenders."})
        run = kernel.run(f"%%agent {model} --in customers --out big_spenders=top\nWho spends most?")
        assert run.ok, run.outputs
        shown = json.dumps(run.outputs, ensure_ascii=False)
        assert leaks(shown) == []  # the saved notebook holds what the model saw
        assert kernel.value("sorted(top['name'])") == sorted(NAMES[:2])  # --out restores
        pulled = kernel.run("%agent_pull big_spenders again")
        assert pulled.ok, pulled.outputs
        assert kernel.value("list(again['email'])") == LONG_EMAILS[:2]
        assert kernel.value("list(customers['name'])") == NAMES  # the user's own frame is untouched
        listed = kernel.run("%agent_vars customers")
        text = json.dumps(listed.outputs, ensure_ascii=False)
        assert leaks(text) == [] and "notes restricted (glossary)" in text
    finally:
        kernel.close()


def test_a_pseudonym_assigned_by_an_update_is_never_made_real():
    from harness_magic.core.control.pseudonyms import Pseudonyms
    from harness_magic.core.text.masking import ColumnClass, Masker

    pseudonyms = Pseudonyms(Masker(declared=lambda: {"name": ColumnClass("pii", "config")}))
    fake = pseudonyms.conceal("t", people(), None)["name"].iloc[0]
    # writing the real value into another (unclassified) column would carry it out on the next read
    assigned = f"UPDATE customers SET city = '{fake}' WHERE id = 2"
    assert pseudonyms.query_for_engine(assigned, "duckdb") == assigned
    filtered = pseudonyms.query_for_engine(f"UPDATE customers SET status = 'x' WHERE name = '{fake}'", "duckdb")
    assert NAMES[0] in filtered and "SET status = 'x'" in filtered


def test_pseudonyms_printed_side_by_side_are_never_read_as_new_values():
    from harness_magic.core.control.pseudonyms import Pseudonyms
    from harness_magic.core.text.masking import Masker

    frame = pd.DataFrame({"phone": ["+44 20 7946 0958", "+1 415 555 2671", "+49 89 636 48018"],
                          "card": ["4111 1111 1111 1111", "5500 0055 5555 5559", "3400 0000 0000 009"]})
    for _ in range(20):  # pseudonyms are keyed per session: a phone's digits beside a card's made a "card" often
        masker = Masker()
        concealed = Pseudonyms(masker).conceal("people", frame, None)
        printed = concealed.to_string(index=False)  # a pseudonym phone beside a pseudonym card, in every row
        masked = masker.mask_text(printed)
        assert masked.text == printed and masked.counts == {}
    real = masker.mask_text("call +44 20 7946 0958")  # a real value in text still gets its pseudonym
    assert real.text == f"call {concealed['phone'].iloc[0]}"


def test_only_a_querys_result_inherits_the_classes_of_other_cached_handles():
    from harness_magic.core.control.pseudonyms import Pseudonyms
    from harness_magic.core.text.masking import ColumnClass, Masker

    masker = Masker(declared=lambda: {"customers.note": ColumnClass("restricted", "config")})
    pseudonyms = Pseudonyms(masker)
    pseudonyms.conceal("customers", pd.DataFrame({"note": ["vault code 1"], "who": ["Ann Lee"]}), None)
    masker.columns["customers"]["who"] = ColumnClass("pii", "detected")
    pushed = pd.DataFrame({"who": ["Team A"]})  # a push shares a column name only by chance
    assert pseudonyms.conceal("teams", pushed, None) is pushed
    queried = pseudonyms.conceal("q", pd.DataFrame({"who": ["Ann Lee"]}), {"who": frozenset({"who"})})
    assert queried["who"].iloc[0] != "Ann Lee"
    assert masker.columns["q"]["who"].source == "detected in customers"
