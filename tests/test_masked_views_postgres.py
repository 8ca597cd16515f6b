"""PostgreSQL masked views (issue 31, Build 2): the read role's direct access to sensitive columns is named,
and the DDL a DBA would run makes it read masked views only."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from postgres import postgres_url  # noqa: F401  (session fixture)
from test_pseudonyms import AMOUNTS, LONG_EMAILS, NAMES, NOTES

pytestmark = pytest.mark.postgres

READER = "harness_masked_reader"
CLASSES = {"crm_people.email": "pii", "name": "pii", "crm_people.notes": "restricted", "amount": "financial"}


@pytest.fixture
def crm(postgres_url):  # noqa: F811
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql("DROP SCHEMA IF EXISTS masked CASCADE")
        conn.exec_driver_sql("DROP TABLE IF EXISTS crm_people, crm_regions")
        conn.exec_driver_sql(f"DROP ROLE IF EXISTS {READER}")
        conn.exec_driver_sql("CREATE TABLE crm_people (id int, name text, email text, notes text, amount numeric)")
        conn.exec_driver_sql("CREATE TABLE crm_regions (id int, region text)")
        for i, row in enumerate(zip(NAMES, LONG_EMAILS, NOTES, AMOUNTS), 1):
            conn.execute(sa.text("INSERT INTO crm_people VALUES (:i, :n, :e, :o, :a)"),
                         {"i": i, "n": row[0], "e": row[1], "o": row[2], "a": row[3]})
        conn.exec_driver_sql(f"CREATE ROLE {READER} LOGIN")
        conn.exec_driver_sql(f"GRANT SELECT ON crm_people, crm_regions TO {READER}")
    yield postgres_url.replace("postgres@", f"{READER}@"), admin
    with admin.connect() as conn:
        conn.exec_driver_sql("DROP SCHEMA IF EXISTS masked CASCADE")
        conn.exec_driver_sql("DROP TABLE IF EXISTS crm_people, crm_regions")
        conn.exec_driver_sql(f"DROP ROLE IF EXISTS {READER}")
    admin.dispose()


def test_a_read_role_reading_sensitive_columns_is_named_and_the_dba_ddl_leaves_it_masked_views(crm, postgres_url):  # noqa: F811
    from harness_magic.core.execution.connectors.sql.masked_views import masked_view_ddl, sensitive_column_access
    from harness_magic.core.execution.connectors.sql.connector import SQLConnection

    reader_url, admin = crm
    db = SQLConnection(postgres_url, read_url=reader_url, timeout_s=5)
    try:
        found = sensitive_column_access(db, CLASSES)
        assert sorted((f.table, f.column, f.cls) for f in found) == [
            ("crm_people", "email", "pii"), ("crm_people", "name", "pii"), ("crm_people", "notes", "restricted")]
        assert str(found[0]).startswith(f"the read role '{READER}' can read")  # amount (financial) stays real
        ddl = masked_view_ddl(db, CLASSES, salt="s3cret")
        assert "CREATE OR REPLACE VIEW \"masked\".\"crm_people\"" in ddl and "crm_regions" not in ddl
        assert f'REVOKE SELECT ON "public"."crm_people" FROM "{READER}";' in ddl
        with admin.connect() as conn:
            conn.exec_driver_sql(ddl)  # what the DBA runs
        assert sensitive_column_access(db, CLASSES) == []  # the base table is out of the role's reach now
        frame, _ = db.query("SELECT * FROM masked.crm_people ORDER BY id")
        text = frame.to_string()
        assert not any(v in text for v in NAMES + LONG_EMAILS + NOTES)
        assert frame["email"].str.startswith("pii:").all() and frame["notes"].isna().all()
        assert [float(a) for a in frame["amount"]] == AMOUNTS  # financial numbers stay real: sums exact
        assert frame["email"].nunique() == 3  # a keyed hash: distinct values stay distinct (joins, counts)
        with pytest.raises(Exception, match="permission denied"):
            db.query("SELECT email FROM crm_people")
        assert "nothing to do" in masked_view_ddl(db, CLASSES)
    finally:
        db.read_engine.dispose()
        db.engine.dispose()


def test_the_first_query_of_a_connector_with_sensitive_columns_warns_naming_them(crm, postgres_url):  # noqa: F811
    from harness_magic.core.execution.connectors.sql.masked_views import masked_view_warnings
    from harness_magic.core.cache import SessionCache
    from harness_magic.core.execution.connectors.registry import ToolContext
    from harness_magic.core.execution.connectors.sql.connector import SQLConnection, sql_connector

    reader_url, _admin = crm
    connector = sql_connector(postgres_url, read_url=reader_url, name="crm")
    connector.sensitivity = {"crm_people.email": "pii"}
    try:
        query = next(t for t in connector.tools if t.name == "crm__query").handler
        context = ToolContext(cache=SessionCache(), harness=None, tool_name="crm__query")
        first = query(sql="SELECT count(*) AS n FROM crm_regions", context=context)
        assert "WARNING: the read role" in first.note and "public.crm_people.email" in first.note
        assert "masked_view_ddl" in first.note and "crm_people.name" not in first.note  # only the configured one
        assert "WARNING" not in (query(sql="SELECT 1 AS x", context=context).note or "")  # said once
    finally:
        connector.connection.read_engine.dispose()
        connector.connection.engine.dispose()
    with pytest.raises(ValueError, match="PostgreSQL only"):
        masked_view_warnings(SQLConnection("sqlite://"), {"email": "pii"})
