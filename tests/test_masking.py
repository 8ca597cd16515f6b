"""Sensitive values never reach the model unmasked (issue 24): detection, the masker, and the whole path.

The end-to-end test points a session at a real PostgreSQL customer table with
e-mails, phones, card numbers and a column configured ``restricted``, talks
litellm over HTTP to the scripted server (the path users take) and reads every
request body the server received: snapshots, printed output, an error, SQL
results and a subagent's own requests. Out of scope, by design: values the
worker's code encodes (base64, hex, a value cut in two and printed on two lines)
— the masker sees text, not intent.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import sqlalchemy as sa

from harness_magic.core.text.masking import DEFAULT_POLICY, ColumnClass, Masker, check_policy, denied_text
from harness_magic.core.text.sensitivity import (
    check_sensitivity_map,
    classify_column,
    find_sensitive,
)

CARD_OK = "4111 1111 1111 1111"
CARD_BAD_LUHN = "4111 1111 1111 1112"


def luhn_card(rng: random.Random) -> str:
    from stdnum import luhn

    body = "4" + "".join(str(rng.randrange(10)) for _ in range(14))
    return body + luhn.calc_check_digit(body)


# -- detection ---------------------------------------------------------------------------------


def test_detection_finds_each_kind_in_running_text():
    text = ("mail ann.lee@acme-mail.com, call +1 212-555-0187, card 4111 1111 1111 1111, "
            "iban GB82 WEST 1234 5698 7654 32, ssn 123-45-6789, from 192.168.1.20 or 2001:db8::1")
    assert [f.kind for f in find_sensitive(text)] == ["email", "phone", "card", "iban", "national_id", "ip", "ip"]


def test_values_printed_side_by_side_are_each_found():
    # a printed frame row puts a phone beside a card: the run of digit groups is neither as a whole
    row = (" 1 user@x.com +44 20 7946 0958 4111 1111 1111 1111\n"
           " 3 a@b.net +49 89 636 48018 3400 0000 0000 009\n +49 30 901820 +33 1 42 68 53 00")
    assert [(f.kind, f.value) for f in find_sensitive(row)] == [
        ("email", "user@x.com"), ("phone", "+44 20 7946 0958"), ("card", "4111 1111 1111 1111"),
        ("email", "a@b.net"), ("phone", "+49 89 636 48018"), ("card", "3400 0000 0000 009"),
        ("phone", "+49 30 901820"), ("phone", "+33 1 42 68 53 00")]


def test_a_printed_row_of_a_classified_frame_reaches_the_model_masked(tmp_path):
    from harness_magic.core.providers.offline import ScriptedModel
    from harness_magic.core.providers.adapter import ProviderAdapter
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    phones = ["+44 20 7946 0958", "+49 30 901820", "+33 1 42 68 53 00"]
    cards = [CARD_OK, "3400 0000 0000 009", "4111 1111 1111 1111"]
    code = ("import pandas as pd\n"
            f"df = pd.DataFrame({{'id': [1, 2, 3], 'phone': {phones!r}, 'card': {cards!r}}})\n"
            "save('people', df)\nprint(df.to_string(index=False))")
    turns = [{"tool_calls": [call("python_interpreter", code=code)]},
             {"tool_calls": [call("python_interpreter", code="print(people.to_string(index=False))")]},
             {"text": "done"}]
    session = AgentSession(AgentConfig(model="scripted/p", sandbox="inprocess", run_dir=str(tmp_path / "runs")),
                           adapter=ProviderAdapter("scripted/p", transport=ScriptedModel(turns)))
    try:
        result = session.ask("print them")
    finally:
        session.close()
    assert result.status == "completed", result.error
    sent = "\n".join(str(b.content) for m in result.messages for b in m.content if hasattr(b, "tool_use_id"))
    for value in phones + cards:
        assert value not in sent, value


def test_card_numbers_need_a_valid_luhn_check():
    assert [f.kind for f in find_sensitive(f"a {CARD_OK} b")] == ["card"]
    assert list(find_sensitive(f"a {CARD_BAD_LUHN} b")) == []


def test_counts_ids_and_dates_are_not_sensitive_in_text():
    assert list(find_sensitive("rows 4155550132, id 12345, total 1234567.89, on 2024-01-15 at 12:30:45")) == []


def test_a_column_is_classified_from_its_values_bare_digit_phones_included():
    assert classify_column(["2125550187", "2125550188", None, ""]) == "phone"
    assert classify_column(["north", "south"]) is None


def test_sensitivity_configuration_names_the_bad_entry():
    with pytest.raises(ValueError, match="'customers.email'.*'secret'"):
        check_sensitivity_map({"customers.email": "secret"}, "connector 'crm'")


def test_masking_policy_names_the_bad_action():
    with pytest.raises(ValueError, match="'hide' for 'pii'"):
        check_policy({"pii": "hide"})
    assert check_policy(None) == DEFAULT_POLICY == {"pii": "mask", "financial": "mask", "restricted": "deny"}


# -- the masker --------------------------------------------------------------------------------


def test_pseudonyms_are_stable_and_keep_the_shape():
    masker = Masker()
    first = masker.mask_text("ann.lee@acme-mail.com paid with 4111 1111 1111 1111").text
    again = masker.mask_text("4111 1111 1111 1111 / ann.lee@acme-mail.com").text
    email, card = first.split(" paid with ")
    assert "ann.lee" not in first and "@" in email and email in again
    assert card != CARD_OK and len(card) == len(CARD_OK) and card.endswith("1111") and card in again


def test_another_session_gets_other_pseudonyms():
    assert Masker().mask_text("ann.lee@acme-mail.com").text != Masker().mask_text("ann.lee@acme-mail.com").text


def test_policy_allow_mask_deny_per_class():
    masker = Masker({"pii": "allow", "financial": "deny"})
    masked = masker.mask_text("ann.lee@acme-mail.com 4111 1111 1111 1111")
    assert masked.text == f"ann.lee@acme-mail.com {denied_text('financial')}"
    assert masked.counts == {"financial": 1}


def test_known_values_of_a_configured_column_are_denied_anywhere_but_not_inside_words():
    masker = Masker()
    masker.learn_column("customers", "secret_note", ColumnClass("restricted", "config"), ["vault 77", "Ann"])
    masked = masker.mask_text("KeyError: 'vault 77'; Annual report for Ann")
    assert masked.text == f"KeyError: '{denied_text('restricted')}'; Annual report for {denied_text('restricted')}"


def test_snapshot_keys_and_cells_are_masked():
    masker = Masker()
    snap = masker.mask_value({"columns": ["ann.lee@acme-mail.com"], "sample": [{"ann.lee@acme-mail.com": 3}]})
    assert "ann.lee" not in json.dumps(snap)


# -- the whole path: PostgreSQL -> worker -> litellm -> scripted server ---------------------------

pg = pytest.importorskip("postgres")
postgres_url = pg.postgres_url  # session fixture

N_CUSTOMERS = 40


@pytest.fixture(scope="module")
def customers(postgres_url):  # noqa: F811
    """A customer table with e-mails, phones, cards, a restricted note and an amount (the real values)."""
    rng = random.Random(24)
    rows = [{"id": i, "email": f"person.{i}@acme-mail.com", "phone": f"+1 212-555-{100 + i:04d}",
             "card": luhn_card(rng), "secret_note": f"vault-code-{i:05d}-{rng.choice(['alpha', 'beta'])}",
             "amount": 10 * i + 7} for i in range(N_CUSTOMERS)]
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS customers CASCADE")
        conn.exec_driver_sql("CREATE TABLE customers (id int PRIMARY KEY, email text, phone text, card text, "
                             "secret_note text, amount int)")
        conn.execute(sa.text("INSERT INTO customers VALUES (:id, :email, :phone, :card, :secret_note, :amount)"),
                     rows)
    engine.dispose()
    return postgres_url, rows


def call(tool, /, **arguments):
    return {"name": tool, "arguments": arguments}


def sensitive_strings(rows):
    out = []
    for r in rows:
        out += [r["email"], r["phone"], r["card"], r["phone"].replace(" ", "").replace("-", ""), r["secret_note"]]
    return out


@pytest.mark.postgres
def test_no_request_holds_an_unmasked_value_while_the_worker_computes_on_real_ones(customers, server, tmp_path):
    from harness_magic import ProviderAdapter
    from harness_magic.core.execution.connectors.config import connectors_from_config
    from harness_magic.core.export import RunRecorder, export_runs
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession
    from harness_magic.core.transcript.events import MaskingApplied

    url, rows = customers
    third = rows[3]["email"]
    code = (
        "df = customers.to_pandas() if hasattr(customers, 'to_pandas') else customers\n"
        "print(df[['email', 'phone', 'card', 'secret_note']].to_string())\n"
        "print('split chunk:', df.email.iloc[5][:6], end='', flush=True); print(df.email.iloc[5][6:])\n"
        "save('by_email', df.pivot_table(columns='email', values='amount', aggfunc='sum'))\n"
        "print(f\"AGG distinct={df.email.nunique()} total={df.amount.sum()} "
        "visa={df.card.str.startswith('4').sum()} note_chars={df.secret_note.str.len().sum()}\")\n"
    )
    server.replies = [
        {"tool_calls": [{"id": "c1", **call("load_connectors", connector_name="crm")}]},
        {"tool_calls": [{"id": "c2", **call("crm__query", sql="SELECT * FROM customers ORDER BY id",
                                            name="customers")}]},
        {"tool_calls": [{"id": "c3", **call("python_interpreter", code=code)}]},
        {"tool_calls": [{"id": "c4", **call("python_interpreter",
                                            code=f"raise KeyError(customers.to_pandas().email.iloc[3] "
                                                 f"if hasattr(customers, 'to_pandas') else customers.email.iloc[3])")}]},
        {"tool_calls": [{"id": "c5", **call("subagent", task="list the customers' contact details",
                                            input_handles=["customers"])}]},
        {"tool_calls": [{"id": "s1", **call("python_interpreter",
                                            code="df = customers.to_pandas() if hasattr(customers, 'to_pandas') "
                                                 "else customers\nprint(df.to_string())")}]},
        {"text": "child done"},
        {"text": "done"},
    ]
    registry = connectors_from_config([{"type": "sql", "name": "crm", "url": url,
                                        "sensitivity": {"customers.secret_note": "restricted"}}])
    adapter = ProviderAdapter("openai/test-model", api_base=server.api_base, api_key="sk-test",
                              sleep=lambda s: None)
    session = AgentSession(AgentConfig(model="openai/test-model", run_dir=str(tmp_path / "runs"),
                                       planner=False, reminders=False),
                           adapter=adapter, connectors=registry, subagents=True)
    recorder, masked_events = RunRecorder(), []
    session.subscribe(recorder)
    session.subscribe(lambda e: masked_events.append(e) if isinstance(e, MaskingApplied) else None)
    result = session.ask("profile the customers")
    assert result.status == "completed", result.error
    assert len(server.requests) == 8

    bodies = [json.dumps(r, ensure_ascii=False) for r in server.requests]
    everything = "\n".join(bodies)
    leaked = sorted({v for v in sensitive_strings(rows) if v in everything})
    assert leaked == []
    masker = session.masking.masker
    assert masker.pseudonym("email", third) in bodies[4]  # the KeyError, masked with the same pseudonym
    assert masker.pseudonym("email", third) in bodies[2]  # ... as in the SQL snapshot
    assert '"secret_note"' in server.requests[2]["messages"][-1]["content"]  # a denied column is listed
    assert "`by_email`" in bodies[3]  # a snapshot whose column names are e-mails (checked above: none leaked)
    assert denied_text("restricted") in bodies[2] and denied_text("restricted") in bodies[6]  # subagent's request
    total = sum(r["amount"] for r in rows)
    note_chars = N_CUSTOMERS * len(denied_text("restricted"))  # a restricted column never reaches the worker
    assert f"AGG distinct={N_CUSTOMERS} total={total} visa={N_CUSTOMERS} note_chars={note_chars}" in bodies[3]
    assert "by_email" in session.cache.names() and rows[0]["email"] not in session.cache.get("by_email").columns
    pulled = session.cache.user_value("by_email", session.cache.get("by_email"))  # what %agent_pull gives back
    assert rows[0]["email"] in pulled.columns

    live = "".join(chunk for r in recorder.records for t in r.tools for _, chunk in t.output)
    assert "split chunk: " + masker.pseudonym("email", rows[5]["email"]) in live  # two flushes, masked whole
    assert sorted({v for v in sensitive_strings(rows) if v in live}) == []

    wheres = {e.where for e in masked_events}
    assert "tool_result" in wheres  # the KeyError holds a pseudonym made at entry: nothing left to mask there
    entry = next(dict(e.counts) for e in masked_events if e.tool_use_id == "c2")  # the SQL result, marked
    assert entry.get("pii", 0) >= N_CUSTOMERS and entry.get("restricted", 0) == N_CUSTOMERS
    assert all(n > 0 for e in masked_events for _, n in e.counts)

    logs = list((tmp_path / "runs").rglob("*.jsonl"))
    assert len(logs) >= 2  # the parent's and the subagent's
    log_text = "\n".join(p.read_text() for p in logs)
    assert sorted({v for v in sensitive_strings(rows) if v in log_text}) == []
    assert '"masking_applied"' in log_text
    for suffix in (".html", ".md", ".jsonl"):
        exported = export_runs(recorder.records, tmp_path / f"export{suffix}").read_text()
        assert sorted({v for v in sensitive_strings(rows) if v in exported}) == [], suffix
        said = '"masking_applied"' if suffix == ".jsonl" else "sensitive values masked before the model saw this"
        assert said in exported, suffix


@pytest.mark.postgres
def test_allowing_every_class_sends_the_real_values(customers, server, tmp_path):
    """The control: with masking off, the same query does send the values (the check above can fail)."""
    from harness_magic import ProviderAdapter
    from harness_magic.core.execution.connectors.config import connectors_from_config
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    url, rows = customers
    server.replies = [
        {"tool_calls": [{"id": "c1", **call("load_connectors", connector_name="crm")}]},
        {"tool_calls": [{"id": "c2", **call("crm__query", sql="SELECT * FROM customers ORDER BY id LIMIT 2")}]},
        {"text": "done"},
    ]
    adapter = ProviderAdapter("openai/test-model", api_base=server.api_base, api_key="sk-test", sleep=lambda s: None)
    session = AgentSession(AgentConfig(model="openai/test-model", sandbox="inprocess", run_dir=str(tmp_path),
                                       masking={"pii": "allow", "financial": "allow", "restricted": "allow"}),
                           adapter=adapter, connectors=connectors_from_config([{"type": "sql", "name": "crm",
                                                                                  "url": url}]))
    assert session.ask("go").status == "completed"
    assert rows[0]["email"] in json.dumps(server.requests[-1]) and rows[0]["card"] in json.dumps(server.requests[-1])


def test_a_bad_sensitivity_option_names_the_connector():
    from harness_magic.core.execution.connectors.config import connectors_from_config

    with pytest.raises(ValueError, match="connector 'crm'.*'top-secret'"):
        connectors_from_config([{"type": "sql", "name": "crm", "url": "sqlite://",
                                 "sensitivity": {"customers.note": "top-secret"}}])


# -- the notebook: a real kernel --------------------------------------------------------------


@pytest.mark.kernel
def test_notebook_shows_masked_calls_and_lists_column_classes_with_their_source(tmp_path):
    pytest.importorskip("jupyter_client")
    from kernel_helpers import Kernel, answer, script, usage_error

    db = tmp_path / "crm.sqlite"
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE customers (id int, email text, note text)")
        conn.exec_driver_sql("INSERT INTO customers VALUES (1, 'ann.lee@acme-mail.com', 'vault-code-0001'), "
                             "(2, 'bo.chan@acme-mail.com', 'vault-code-0002')")
    engine.dispose()
    kernel = Kernel(tmp_path)
    try:
        setup = kernel.run(
            "%load_ext harness_magic\n%config AgentMagics.run_dir = 'runs'\n"
            "%config AgentMagics.sandbox = 'inprocess'\n"
            f"%config AgentMagics.connectors = [{{'type': 'sql', 'name': 'crm', 'url': 'sqlite:///{db}', "
            "'sensitivity': {'customers.note': 'restricted'}}]")
        assert setup.ok, setup.outputs
        model = script(kernel, {"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "crm"}}]},
                       {"tool_calls": [{"name": "crm__query", "arguments": {"sql": "SELECT * FROM customers",
                                                                           "name": "customers"}}]},
                       answer("Two customers."))
        run = kernel.run(f"%%agent {model}\nWho are the customers?")
        assert run.ok, run.outputs
        shown = json.dumps(run.outputs)
        assert "ann.lee@acme-mail.com" not in shown and "vault-code-0001" not in shown
        assert denied_text("restricted") in shown

        listed = kernel.run("%agent_vars customers")
        text = "".join(o.get("data", {}).get("text/plain", "") for o in listed.outputs) + listed.stdout
        assert "ann.lee@acme-mail.com" not in text  # a saved notebook holds what the model saw (pull for real values)
        assert "email pii (detected email)" in text and "note restricted (config)" in text

        connectors = kernel.run("%agent_connectors")
        assert "customers.note: restricted (config)" in connectors.stdout
        assert "result customers: email: pii (detected email)" in connectors.stdout

        pulled = kernel.run("%agent_pull customers crm_customers")
        assert pulled.ok, pulled.outputs
        assert kernel.value("sorted(crm_customers.email)") == ["ann.lee@acme-mail.com", "bo.chan@acme-mail.com"]

        bad = kernel.run("%config AgentMagics.masking = {'pii': 'hide'}")
        assert "'hide'" in usage_error(bad)
    finally:
        kernel.close()


# -- glossary entries ---------------------------------------------------------------------------


def test_a_glossary_entry_classes_a_column_no_pattern_recognises(tmp_path):
    from harness_magic.core.execution.connectors.config import connectors_from_config
    from harness_magic.core.providers.offline import ScriptedModel
    from harness_magic.core.providers.adapter import ProviderAdapter
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    (tmp_path / "terms.yaml").write_text(
        "tables:\n  customers.full_name: {kind: dimension, definition: The customer's name., sensitivity: pii}\n")
    db = tmp_path / "crm.sqlite"
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE customers (id int, full_name text)")
        conn.exec_driver_sql("INSERT INTO customers VALUES (1, 'Ann Lee'), (2, 'Bo Chan')")
    engine.dispose()
    registry = connectors_from_config([{"type": "glossary", "files": [str(tmp_path / "terms.yaml")]},
                                       {"type": "sql", "name": "crm", "url": f"sqlite:///{db}"}])
    turns = [{"tool_calls": [call("load_connectors", connector_name="crm")]},
             {"tool_calls": [call("crm__query", sql="SELECT * FROM customers", name="customers")]},
             {"tool_calls": [call("python_interpreter", code="print('top customer:', customers.full_name.iloc[0])")]},
             {"text": "done"}]
    session = AgentSession(AgentConfig(model="scripted/g", sandbox="inprocess", run_dir=str(tmp_path / "runs")),
                           adapter=ProviderAdapter("scripted/g", transport=ScriptedModel(turns)), connectors=registry)
    result = session.ask("who are they?")
    assert result.status == "completed", result.error
    sent = "\n".join(str(b.content) for m in result.messages for b in m.content if hasattr(b, "tool_use_id"))
    assert "Ann Lee" not in sent and "Bo Chan" not in sent
    assert f"top customer: {session.masking.masker.pseudonym('pii', 'Ann Lee')}" in sent
    assert ("full_name", "pii (glossary)") in session.masking.column_rows(session.cache, "customers")


def test_a_bad_glossary_sensitivity_names_the_entry(tmp_path):
    from harness_magic.core.knowledge.glossary import GlossaryError, load_glossary

    (tmp_path / "terms.yaml").write_text("tables:\n  customers.email: {sensitivity: secret}\n")
    with pytest.raises(GlossaryError, match="customers.email.*'secret'"):
        load_glossary([tmp_path / "terms.yaml"])


# -- the hook on the loop -----------------------------------------------------------------------


def test_a_value_printed_in_two_flushes_is_shown_masked_whole(tmp_path):
    from harness_magic.core.agent.loop import Harness
    from harness_magic.core.control.masking import SessionMasking
    from harness_magic.core.execution.tools import ToolSpec
    from harness_magic.core.providers.offline import ScriptedModel
    from harness_magic.core.providers.adapter import ProviderAdapter
    from harness_magic.core.transcript.events import ToolOutputDelta

    def chatty() -> str:
        harness.tool_output("mail: ann.le")
        harness.tool_output("e@acme-mail.com\nnext: bo.chan@acme-")
        harness.tool_output("mail.com")  # no line break: passed on when the call ends
        return "ok"

    turns = [{"tool_calls": [call("chatty")]}, {"text": "done"}]
    harness = Harness(ProviderAdapter("scripted/p", transport=ScriptedModel(turns)), "sys",
                      [ToolSpec("chatty", "prints", {"type": "object", "properties": {}}, chatty)],
                      run_dir=str(tmp_path))
    masking = SessionMasking(lambda: {})
    harness.set_masker(masking)
    shown: list[str] = []
    harness.subscribe(lambda e: shown.append(e.text) if isinstance(e, ToolOutputDelta) else None)
    assert harness.run_result("go").status == "completed"
    live = "".join(shown)
    assert "acme-mail.com" not in live.replace(masking.masker.pseudonym("email", "ann.lee@acme-mail.com"), "")
    assert live == (f"mail: {masking.masker.pseudonym('email', 'ann.lee@acme-mail.com')}\n"
                    f"next: {masking.masker.pseudonym('email', 'bo.chan@acme-mail.com')}")
