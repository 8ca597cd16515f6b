"""Spark serves the pseudonyms (issue 31, Build 2): a Spark connector's files are views over copies the kernel wrote.

A local Spark Connect server (``master``), an ``AgentSession`` whose litellm talks HTTP to the scripted server,
every request body read: the model filters on a pseudonym it saw and finds the row, an aliased column holds
pseudonyms, joins / group-bys / distinct counts stay right, sums over ``financial`` numbers are exact, nothing
real reaches a request body or the run log, and a pull restores the real values. The session key never reaches
Spark: no function of the server computes a pseudonym, the copy holds none of the real values, and the original
file cannot be read around the view.
"""

from __future__ import annotations

import os

import pandas as pd
import pytest

from spark_servers import quick_jvm
from test_engine_pseudonyms import ORDERS, load, seen_email
from test_pseudonyms import AMOUNTS, LONG_EMAILS, NAMES, NOTES, call, glossary, leaks, logged, make_session, people, sent

pytest.importorskip("pyspark")

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


@pytest.fixture
def lake(tmp_path):
    people().to_parquet(tmp_path / "customers.parquet")
    orders = tmp_path / "orders"
    orders.mkdir()
    ORDERS.iloc[:2].to_csv(orders / "part-0.csv", index=False)  # a directory of CSV parts, read like Spark reads it
    ORDERS.iloc[2:].to_csv(orders / "part-1.csv", index=False)
    return {"type": "spark", "name": "lake", "master": "local[1]", "count_budget_s": 600, "conf": quick_jvm(),
            "files": {"customers": str(tmp_path / "customers.parquet"), "orders": str(orders) + "/*.csv"}}


def queries(*sqls: str, prefix: str = "r") -> list[dict]:
    """One ``lake__query`` turn per statement (fetched now), the results named ``<prefix>0``, ``<prefix>1``..."""
    return [{"tool_calls": [{"id": f"{prefix}{i}", **call("lake__query", sql=sql, name=f"{prefix}{i}", lazy=False)}]}
            for i, sql in enumerate(sqls)]


def errors(result) -> list[str]:
    return [b.content for m in result.messages for b in m.content
            if getattr(b, "type", "") == "tool_result" and b.is_error]


def test_the_model_filters_aliases_joins_and_counts_on_the_pseudonyms_a_spark_view_serves(tmp_path, server, lake):
    session = make_session(tmp_path, server, [glossary(tmp_path), lake])
    try:
        server.replies = [load(), *queries("SELECT id, name, email, notes, amount FROM customers ORDER BY id"),
                          {"text": "seen"}]
        assert session.ask("who are the customers?").status == "completed"
        everyone = session.cache.get("r0")
        assert all(session.pseudonyms.is_pseudonym(v) for v in [*everyone["name"], *everyone["email"]])
        assert set(everyone["notes"]) == {"[denied restricted]"}  # restricted: no value in the copy at all
        pseudonym = seen_email(server, "org")  # Bartholomew's, as the model saw it
        server.replies = [*queries(
            f"SELECT id, amount FROM customers WHERE email = '{pseudonym}'",
            "SELECT name AS who, notes AS memo, email AS e FROM customers ORDER BY id",
            "SELECT c.id, count(*) AS n, sum(o.total) AS spent FROM customers c JOIN orders o ON o.email = c.email "
            "GROUP BY c.id ORDER BY c.id",
            "SELECT count(DISTINCT email) AS people FROM orders",
            "SELECT id FROM customers WHERE substr(email, 1, 1) = 'a' OR name LIKE 'Ali%' OR notes LIKE '%landl%'",
            "SELECT sum(amount) AS total FROM customers", prefix="s"), {"text": "done"}]
        result = session.ask("what did they buy?")
        assert result.status == "completed", result.error
        assert errors(result) == []
        value = session.cache.get
        assert value("s0")["id"].tolist() == [2] and value("s0")["amount"].tolist() == [AMOUNTS[1]]
        aliased = value("s1")
        assert all(session.pseudonyms.is_pseudonym(v) for v in [*aliased["who"], *aliased["e"]])
        assert set(aliased["memo"]) == {"[denied restricted]"}
        assert value("s2").to_dict("list") == {"id": [2, 3], "n": [2, 1], "spent": [12.5, 20.0]}  # a join on pii
        assert value("s3")["people"].tolist() == [3]
        assert value("s4").empty  # Alice's e-mail starts with 'a', her name with 'Ali': the view shows neither
        assert value("s5")["total"].tolist() == [sum(AMOUNTS)]  # financial numbers stay real: the sum is exact
        assert leaks(sent(server)) == [] and leaks(logged(tmp_path)) == []
        pulled = session.cache.user_value("s1", value("s1"))
        assert pulled["who"].tolist() == NAMES and pulled["e"].tolist() == LONG_EMAILS
        restored = session.cache.user_value(None, everyone)  # a pull restores every pseudonym the copy holds
        assert restored["name"].tolist() == NAMES and restored["email"].tolist() == LONG_EMAILS
    finally:
        session.close()


def test_the_copy_holds_no_real_value_is_made_once_and_the_original_cannot_be_read_around_it(tmp_path, server, lake):
    """Hostile: the model reads the configured path, asks Spark for the view's definition and plan, and
    guesses; the copy is made once, made again when its file changes, refused when it turns unreadable, and
    removed with the engine."""
    session = make_session(tmp_path, server, [glossary(tmp_path), lake])
    engine = session.connectors.registry["lake"].engine
    copies = ""
    try:
        server.replies = [load(), *queries("SELECT count(*) AS n FROM customers"), {"text": "ok"}]
        assert session.ask("count").status == "completed"
        copies = os.path.join(engine.server.directory, "pseudonyms")
        made = sorted(os.listdir(copies))
        assert len(made) == 2 and all(name.endswith(".parquet") for name in made)
        assert oct(os.stat(copies).st_mode & 0o777) == "0o700"
        for name in made:  # what the server reads holds pseudonyms and denied text only
            copy = pd.read_parquet(os.path.join(copies, name))
            text = copy.astype(str).to_csv()
            assert leaks(text) == [] and not any(e in text for e in LONG_EMAILS + NOTES)
        server.replies = [*queries(
            f"SELECT * FROM parquet.`{lake['files']['customers']}`",
            f"SELECT * FROM csv.`{tmp_path / 'orders'}`",
            "SELECT * FROM customers WHERE input_file_name() LIKE '%customers%'",
            "SELECT name FROM customers WHERE name LIKE '%Okonkwo%' OR email LIKE '%example.org'",
            prefix="s"), {"text": "done"}]
        result = session.ask("read the files directly")
        assert result.status == "completed", result.error
        assert len(errors(result)) == 2, errors(result)  # SQL on raw files is off: the paths are no tables
        assert session.cache.get("s3").empty  # a guessed real value matches nothing: the view holds pseudonyms
        plan = engine.run(lambda spark: spark.sql("EXPLAIN EXTENDED SELECT * FROM customers").collect()[0][0])
        assert copies in plan and "harness_pseudonym" not in plan  # a Parquet scan of the copy: no key, no function
        assert lake["files"]["customers"] not in plan  # the view scans the copy, not the original
        assert leaks(sent(server)) == [] and leaks(logged(tmp_path)) == []

        server.replies = [*queries("SELECT count(*) AS n FROM customers", prefix="t"), {"text": "same"}]
        assert session.ask("again").status == "completed"
        assert sorted(os.listdir(copies)) == made  # the file did not change: the copy is reused
        bigger = pd.concat([people(), people().assign(id=[4, 5, 6])])
        bigger.to_parquet(lake["files"]["customers"])
        server.replies = [*queries("SELECT count(*) AS n, count(DISTINCT email) AS e FROM customers", prefix="u"),
                          {"text": "changed"}]
        assert session.ask("and now?").status == "completed"
        assert session.cache.get("u0").to_dict("list") == {"n": [6], "e": [3]}  # the new file, pseudonymised
        now = sorted(os.listdir(copies))
        assert len(now) == 2 and now != made  # a new copy of the changed file, the old one removed

        (tmp_path / "customers.parquet").write_bytes(b"PAR1 not really parquet PAR1")  # the file turns unreadable
        server.replies = [*queries("SELECT name FROM customers", prefix="v"), {"text": "refused"}]
        result = session.ask("names")
        assert "file view 'customers' is not served" in errors(result)[-1], errors(result)  # fails closed: the
        # original file is not read by Spark instead
    finally:
        session.close()
        engine.close()
    assert not os.path.exists(copies)  # removed with the engine's server


def test_a_remote_server_is_sent_the_pseudonymised_rows_and_outside_a_session_the_originals(tmp_path, server, lake):
    """A cluster may not see this machine's files: the copy's rows are sent to it, never the original's. An engine
    used outside a session reads its files as they are."""
    from harness_magic.core.cache import SessionCache
    from harness_magic.core.execution.connectors.spark.connector import spark_connector
    from harness_magic.core.execution.connectors.spark.engine import SparkEngine

    host = SparkEngine(master="local[1]", files=lake["files"], count_budget_s=600, conf=quick_jvm())
    plain = SessionCache()
    try:
        frame, _ = host.query(plain, "SELECT name, email FROM customers ORDER BY id")
        assert frame["name"].tolist() == NAMES and frame["email"].tolist() == LONG_EMAILS
        remote = spark_connector(host.server.url, files={"customers": lake["files"]["customers"]}, name="lake",
                                 count_budget_s=600)  # the local server's URL stands for a cluster's
        session = make_session(tmp_path, server, [glossary(tmp_path)])
        session.add_connector(remote)
        try:
            server.replies = [load(), *queries("SELECT name, email FROM customers ORDER BY id"), {"text": "ok"}]
            result = session.ask("who?")
            assert result.status == "completed" and errors(result) == [], (result.error, errors(result))
            shown = session.cache.get("r0")
            assert all(session.pseudonyms.is_pseudonym(v) for v in [*shown["name"], *shown["email"]])
            plan = remote.engine.run(lambda spark: spark.sql("EXPLAIN SELECT * FROM customers").collect()[0][0])
            assert "LocalTableScan" in plan and "parquet" not in plan.lower(), plan  # rows sent, no file scanned
            assert session.cache.user_value(None, shown)["email"].tolist() == LONG_EMAILS
            assert leaks(sent(server)) == []
        finally:
            session.close()
            remote.engine.close()
        frame, _ = host.query(plain, "SELECT name FROM customers ORDER BY id")  # the host's own views: untouched
        assert frame["name"].tolist() == NAMES
    finally:
        host.close()
        plain.close()
