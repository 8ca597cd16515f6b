"""The sql connector against a real PostgreSQL server started by the suite."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.connectors import ApprovalPolicy, ConnectorRegistry, sql_connector
from harness_magic.core.agent.loop import Harness
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter
from postgres import postgres_url  # noqa: F401  (session fixture)

pytestmark = pytest.mark.postgres

RESULT_BOUND_CHARS = 5_000


def call(tool, **arguments):
    return {"name": tool, "arguments": arguments}


@pytest.fixture(scope="module")
def warehouse(postgres_url):  # noqa: F811
    """1,000,000 orders and 1,000 customers, generated server-side."""
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS orders, customers")
        conn.exec_driver_sql("CREATE TABLE customers (customer_id int PRIMARY KEY, name text NOT NULL, region text)")
        conn.exec_driver_sql("INSERT INTO customers SELECT g, 'customer ' || g, "
                             "(ARRAY['north','south','east','west'])[1 + g %% 4] FROM generate_series(0, 999) g")
        conn.exec_driver_sql("CREATE TABLE orders (order_id bigint PRIMARY KEY, "
                             "customer_id int REFERENCES customers, amount int)")
        conn.exec_driver_sql("INSERT INTO orders SELECT g, g %% 1000, (g * 7) %% 100 "
                             "FROM generate_series(1, 1000000) g")
        conn.exec_driver_sql("CREATE SEQUENCE ticket")
        conn.exec_driver_sql("ANALYZE")
    yield postgres_url
    engine.dispose()


def run_sql(tmp_path, url, calls, *, approval=None, **options):
    registry = ConnectorRegistry([sql_connector(url, name="warehouse", **options)], approval=approval)
    turns = [{"tool_calls": [call("load_connectors", connector_name="warehouse")]}]
    turns += [{"tool_calls": [c]} for c in calls] + [{"text": "done"}]
    harness = Harness(ProviderAdapter("scripted/pg", transport=ScriptedModel(turns)), "sys", [],
                      run_dir=str(tmp_path), cache=SessionCache())
    registry.install(harness)
    result = harness.run_result("go")
    blocks = [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"]
    return blocks[1:], harness


def count_customers(url):
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql("SELECT count(*) FROM customers").scalar()
    finally:
        engine.dispose()


def test_schema_discovery_lists_tables_with_row_estimates_and_describes_columns(tmp_path, warehouse):
    (tables, described), _ = run_sql(tmp_path, warehouse, [
        call("warehouse__list_tables"), call("warehouse__describe_table", table="orders")])
    listing = {t["name"]: t for t in json.loads(tables.content)}
    assert listing["orders"]["row_estimate"] == 1_000_000 and listing["orders"]["kind"] == "table"
    assert listing["customers"]["row_estimate"] == 1_000
    table = json.loads(described.content)
    assert [c["name"] for c in table["columns"]] == ["order_id", "customer_id", "amount"]
    assert table["columns"][0]["type"] == "BIGINT" and table["columns"][0]["nullable"] is False
    assert table["primary_key"] == ["order_id"] and table["row_estimate"] == 1_000_000
    assert table["foreign_keys"] == [{"columns": ["customer_id"], "references": "customers(customer_id)"}]


def test_describing_an_unknown_table_names_the_tables(tmp_path, warehouse):
    (result,), _ = run_sql(tmp_path, warehouse, [call("warehouse__describe_table", table="ordrs")])
    assert result.is_error and "orders" in result.content and "customers" in result.content


def test_a_join_over_a_million_rows_comes_back_as_a_handle(tmp_path, warehouse):
    sql = "SELECT o.order_id, o.amount, c.region FROM orders o JOIN customers c USING (customer_id)"
    (result,), harness = run_sql(tmp_path, warehouse, [call("warehouse__query", sql=sql, name="order_regions")])
    assert not result.is_error and "1,000,000 rows" in result.content
    assert len(result.content) < RESULT_BOUND_CHARS
    frame = harness.cache.get("order_regions")
    assert frame.shape == (1_000_000, 3) and set(frame["region"]) == {"north", "south", "east", "west"}


def test_an_aggregate_over_a_million_rows_runs_in_the_engine(tmp_path, warehouse):
    sql = ("SELECT c.region, sum(o.amount) AS revenue, count(*) AS orders FROM orders o "
           "JOIN customers c USING (customer_id) GROUP BY c.region ORDER BY c.region")
    (result,), harness = run_sql(tmp_path, warehouse, [call("warehouse__query", sql=sql, name="by_region")])
    frame = harness.cache.get("by_region")
    assert list(frame["region"]) == ["east", "north", "south", "west"]
    assert frame["orders"].sum() == 1_000_000
    assert frame["revenue"].sum() == sum((g * 7) % 100 for g in range(1, 1_000_001))


def test_the_row_cap_truncates_and_says_so(tmp_path, warehouse):
    (result,), harness = run_sql(tmp_path, warehouse, [call("warehouse__query", sql="SELECT * FROM orders")],
                                 max_rows=5_000)
    assert "truncated at 5,000 rows" in result.content
    assert len(harness.cache.get("warehouse_result")) == 5_000


def test_percent_signs_and_colons_are_not_placeholders(tmp_path, warehouse):
    (result,), harness = run_sql(tmp_path, warehouse, [
        call("warehouse__query", sql="SELECT '50%' AS pct, ':name' AS colon, 7 % 3 AS modulo")])
    assert not result.is_error
    assert harness.cache.get("warehouse_result").iloc[0].tolist() == ["50%", ":name", 1]


def test_statement_timeout_cancels_a_slow_query(tmp_path, warehouse):
    (result,), _ = run_sql(tmp_path, warehouse, [call("warehouse__query", sql="SELECT pg_sleep(10)")],
                           timeout_s=0.5)
    assert result.is_error and "timed out after 0.5 s" in result.content


def test_a_write_is_classified_and_blocked_without_approval(tmp_path, warehouse):
    before = count_customers(warehouse)
    insert = "INSERT INTO customers VALUES (5000, 'mallory', 'north')"
    (via_query, via_execute), _ = run_sql(tmp_path, warehouse, [
        call("warehouse__query", sql=insert), call("warehouse__execute", sql=insert)])
    assert via_query.is_error and "classified write" in via_query.content
    assert via_execute.is_error and "no approver" in via_execute.content
    assert count_customers(warehouse) == before


def test_a_denied_write_leaves_the_database_unchanged(tmp_path, warehouse):
    before = count_customers(warehouse)
    requests = []

    def deny(request):
        requests.append(request)
        return False

    (result,), _ = run_sql(tmp_path, warehouse, [call("warehouse__execute", sql="UPDATE customers SET region = 'gone'")],
                           approval=ApprovalPolicy(approver=deny))
    assert result.is_error and "denied" in result.content and "rolled back" in result.content
    assert requests[0].safety == "destructive" and "UPDATE" in requests[0].summary
    assert count_customers(warehouse) == before
    engine = sa.create_engine(warehouse)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM customers WHERE region = 'gone'").scalar() == 0
    engine.dispose()


def test_an_approved_write_runs_in_its_own_transaction(tmp_path, warehouse):
    before = count_customers(warehouse)
    (result,), _ = run_sql(tmp_path, warehouse, [
        call("warehouse__execute", sql="INSERT INTO customers VALUES (7000, 'new', 'east')")],
        approval=ApprovalPolicy(approver=lambda request: True))
    assert not result.is_error and "1 rows affected" in result.content
    assert count_customers(warehouse) == before + 1


def test_queries_run_read_only_in_the_engine_too(tmp_path, warehouse):
    (result,), _ = run_sql(tmp_path, warehouse, [call("warehouse__query", sql="SELECT nextval('ticket')")])
    assert result.is_error and "read-only" in result.content
