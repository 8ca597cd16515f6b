"""The spark connector against a real Spark Connect server (started once for the whole suite):
catalog tools, lazy handles chained and joined with cached frames, materialisation under a byte
cap, approval of writes, hostile SQL, progress events and interrupting a running job."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("pyspark")

from harness_magic.core.execution.connectors import ApprovalPolicy, connectors_from_config  # noqa: E402
from harness_magic.core.execution.connectors import classify as classify_mod  # noqa: E402
from harness_magic.core.execution.connectors.lazy import LazyRelation, MaterializeLimitError, materialize_count  # noqa: E402
from harness_magic.core.execution.connectors.spark.engine import SparkEngine, SparkRelation
from harness_magic.core.execution.connectors.spark.connector import spark_connector
from harness_magic.core.execution.connectors.spark.query import wrap_query
from harness_magic.core.execution.connectors.spark.server import LocalSparkConnect  # noqa: E402
from harness_magic.core.transcript.events import EngineProgress  # noqa: E402
from harness_magic.core.providers.offline import ScriptedModel  # noqa: E402
from harness_magic.core.providers.adapter import ProviderAdapter  # noqa: E402
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession
from harness_magic.core.execution.tools import ToolError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

REGIONS = ["north", "south", "east", "west"]
ROWS = 20_000
EXACT = 600.0
"""Count budget for tests that assert exact counts: a loaded 2-core machine must not turn them into estimates."""
LONG_SQL = "SELECT sum(a.id * b.id) AS s FROM range(200000) a CROSS JOIN range(200000) b"
"""4e10 joined rows: minutes of work, so it is surely running when interrupted."""
SERVER_MASTER = "local[1]"
"""The tests' server runs one task at a time: the jobs cancelled mid-way (an interrupt, a timeout, a count past its
budget) burn one core until the cancel lands instead of both (the suite runs on two cores beside other test files),
and the progress test's join took 1-2 s instead of 4-5 (measured on the loaded 2-core machine); this file's CPU
fell from 100 to 69 s. A job never queues behind a cancelled one (the interrupt test checks it), and what a query
returns does not depend on the task slots."""
PROGRESS_REPORT_INTERVAL = "100ms"
"""How often the tests' server sends a running query's progress (Spark's default is every 2 s): the progress test's
join lasts 1-2 s, so with the default its percentages arrived only when the machine was slow enough."""


@pytest.fixture(scope="session")
def spark_server(tmp_path_factory):
    """One local Spark Connect server (loopback, token) for every Spark test; stopped at the end."""
    warehouse = tmp_path_factory.mktemp("warehouse")
    server = LocalSparkConnect(SERVER_MASTER, {"spark.sql.warehouse.dir": str(warehouse),
                                               "spark.sql.shuffle.partitions": "4",
                                               "spark.connect.progress.reportInterval": PROGRESS_REPORT_INTERVAL},
                               read_paths=[str(tmp_path_factory.getbasetemp())])  # tests' file views live there
    from pyspark.sql.connect.session import SparkSession

    admin = SparkSession.builder.remote(server.url).create()
    frame = sales_frame()
    admin.createDataFrame(frame).write.partitionBy("region").format("parquet").saveAsTable("sales")
    try:
        yield server, admin, warehouse
    finally:
        admin.stop()
        pid = server.pid
        server.stop()
        # stopped for good: the JVM is gone and its private directory removed
        assert gone(pid), f"the Spark Connect server (pid {pid}) still runs after stop()"
        assert not os.path.lexists(server.directory) and not server.running


def gone(pid: int) -> bool:
    """The process has exited (or is a zombie waiting for its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def sales_frame() -> pd.DataFrame:
    ids = list(range(ROWS))
    return pd.DataFrame({"id": ids, "amount": [float(i % 97) for i in ids],
                         "region": [REGIONS[i % 4] for i in ids]})


def call(tool, **arguments):
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


def session_for(tmp_path, turns, connector, approval=None, **config):
    adapter = ProviderAdapter("scripted/spark", transport=ScriptedModel(turns))
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess", **config),
                           adapter=adapter)
    session.add_connector(connector, approval=approval)
    return session


def results(run):
    return [b for m in run.messages for b in m.content if getattr(b, "type", "") == "tool_result"]


def connector(spark_server, **options):
    server, _, _ = spark_server
    options.setdefault("count_budget_s", EXACT)
    built = spark_connector(server.url, **options)
    return built


@pytest.fixture
def spark(spark_server):
    """A Spark connector on the shared server (its own session), closed after the test."""
    made = []

    def make(**options):
        made.append(connector(spark_server, **options))
        return made[-1]

    yield make
    for built in made:
        built.engine.close()


def test_list_describe_and_query_through_spark_connect(tmp_path, spark):
    turns = [call("load_connectors", connector_name="spark"),
             call("spark__list_databases"),
             call("spark__list_tables"),
             call("spark__describe_table", table="sales"),
             call("spark__query", sql="SELECT region, sum(amount) AS total FROM sales GROUP BY region",
                  name="totals"),
             {"text": "done"}]
    session = session_for(tmp_path, turns, spark())
    blocks = results(session.ask("go"))
    assert not any(b.is_error for b in blocks), [b.content for b in blocks]
    assert {"name": "default", "description": "default database"} in json.loads(blocks[1].content)
    tables = json.loads(blocks[2].content)
    assert {"name": "sales", "database": "default", "kind": "managed"} in tables
    described = json.loads(blocks[3].content)
    assert described["columns"][:3] == [{"name": "id", "type": "bigint"}, {"name": "amount", "type": "double"},
                                        {"name": "region", "type": "string"}]
    assert described["partitioned_by"] == ["region"] and described["provider"] == "parquet"
    assert described["rows_estimated"] is True and "rows" in described
    snap = session.cache.snapshot("totals")
    assert session.cache.location("totals") == "spark"
    assert snap["type"] == "lazy_frame" and snap["engine"] == "spark" and snap["shape"] == [4, 2]
    assert "rows_estimated" not in snap and snap["engine_types"] == {"region": "string", "total": "double"}
    got = session.cache.get("totals").materialize(session.cache, 10**6).set_index("region")["total"].sort_index()
    want = sales_frame().groupby("region")["amount"].sum().sort_index()
    pd.testing.assert_series_equal(got, want, check_names=False)


def test_a_lazy_handle_joins_a_cached_pandas_frame(tmp_path, spark):
    targets = pd.DataFrame({"region": REGIONS, "target": [10.0, 20.0, 30.0, 40.0]})
    turns = [call("load_connectors", connector_name="spark"),
             call("spark__query", sql="SELECT region, count(*) AS n FROM sales WHERE amount > 50 GROUP BY region",
                  name="counts"),
             call("spark__query", sql="SELECT c.region, c.n, t.target, c.n / t.target AS ratio "
                                      "FROM counts c JOIN targets t ON c.region = t.region ORDER BY c.region",
                  name="joined"),
             {"text": "done"}]
    session = session_for(tmp_path, turns, spark())
    session.cache.put("targets", targets)
    blocks = results(session.ask("go"))
    assert not any(b.is_error for b in blocks), [b.content for b in blocks]
    got = session.cache.get("joined").materialize(session.cache, 10**6)
    frame = sales_frame()
    counts = frame[frame.amount > 50].groupby("region").size().rename("n").reset_index()
    want = counts.merge(targets, on="region").sort_values("region").reset_index(drop=True)
    want["ratio"] = want.n / want.target
    assert got.region.tolist() == want.region.tolist()
    assert got.n.tolist() == want.n.tolist() and got.ratio.tolist() == pytest.approx(want.ratio.tolist())
    # the frame crossed as a temp view: replacing the handle is noticed, never silently reused
    session.cache.retire("targets")
    session.cache.put("targets", targets.assign(target=1.0))
    with pytest.raises(ToolError, match="retired or replaced"):
        session.cache.get("joined").materialize(session.cache, 10**6)


def test_three_chained_queries_stay_in_spark(tmp_path, spark, monkeypatch):
    moved = []
    monkeypatch.setattr(LazyRelation, "materialize", lambda *a, **k: moved.append(a) or pytest.fail("materialised"))
    monkeypatch.setattr(SparkEngine, "fetch_lazy", lambda *a, **k: moved.append(a) or pytest.fail("fetched"))
    turns = [call("load_connectors", connector_name="spark"),
             call("spark__query", sql="SELECT * FROM sales WHERE amount > 10", name="big"),
             call("spark__query", sql="SELECT region, sum(amount) AS total, count(*) AS n FROM big GROUP BY region",
                  name="by_region"),
             call("spark__query", sql="SELECT region, total / n AS mean FROM by_region", name="means"),
             call("list_variables"), {"text": "done"}]
    session = session_for(tmp_path, turns, spark())
    blocks = results(session.ask("go"))
    assert not any(b.is_error for b in blocks), [b.content for b in blocks]
    cache = session.cache
    assert [cache.location(h) for h in ("big", "by_region", "means")] == ["spark"] * 3
    assert moved == [] and all(isinstance(cache.get(h), SparkRelation) for h in ("big", "by_region", "means"))
    assert cache.usage()["memory_bytes"] == 0
    frame = sales_frame()
    assert cache.snapshot("big")["shape"] == [int((frame.amount > 10).sum()), 3]
    listing = {json.loads(line)["name"]: json.loads(line).get("location") for line in blocks[-1].content.splitlines()}
    assert listing == {"big": "spark", "by_region": "spark", "means": "spark"}
    monkeypatch.undo()
    got = cache.get("means").materialize(cache, 10**6).set_index("region")["mean"].sort_index()
    want = frame[frame.amount > 10].groupby("region")["amount"].mean().sort_index()
    pd.testing.assert_series_equal(got, want, check_names=False)


def test_interpreter_materialises_under_the_cap_and_refuses_over_it(tmp_path, spark):
    turns = [call("load_connectors", connector_name="spark"),
             call("spark__query", sql="SELECT * FROM sales", name="everything"),
             call("spark__query", sql="SELECT region, sum(amount) AS total FROM everything GROUP BY 1",
                  name="small"),
             call("python_interpreter", code="small.sort_values('region').total.tolist()"),
             call("python_interpreter", code="len(everything)"),
             {"text": "done"}]
    session = session_for(tmp_path, turns, spark(), materialize_max_bytes=64 * 1024)
    before = materialize_count()
    blocks = results(session.ask("go"))
    want = sales_frame().groupby("region")["amount"].sum().sort_index().tolist()
    assert not blocks[-2].is_error and json.loads(blocks[-2].content) == want
    over = blocks[-1]
    assert over.is_error and "too big to bring into the kernel" in over.content
    assert "65,536 bytes" in over.content and "stays in Spark" in over.content
    assert materialize_count() == before + 1  # only the small one came in
    assert session.cache.location("everything") == "spark"
    # raising the cap brings everything in, exactly
    everything = session.cache.get("everything").materialize(session.cache, 10**8)
    assert sorted(everything.id.tolist()) == list(range(ROWS))
    with pytest.raises(MaterializeLimitError, match="more than 100 rows") as caught:
        session.cache.get("everything").materialize(session.cache, 10**8, max_rows=100)
    assert caught.value.limit == "rows"
    assert session.cache.get("everything").__harness_checkpoint__() == {"connector": "spark",
                                                                        "sql": "SELECT * FROM sales"}


def test_a_write_asks_for_approval_and_a_denied_one_writes_nothing(tmp_path, spark, spark_server):
    _, admin, warehouse = spark_server
    asked = []

    def deny(request):
        asked.append(request)
        return False

    statements = ["CREATE TABLE copy_denied USING parquet AS SELECT * FROM sales",
                  f"INSERT OVERWRITE DIRECTORY '{tmp_path / 'exported'}' USING parquet SELECT * FROM sales",
                  "INSERT INTO sales SELECT id + 1000000, amount, region FROM sales",
                  "DROP TABLE sales"]
    turns = [call("load_connectors", connector_name="spark"),
             *[call("spark__execute", sql=sql) for sql in statements], {"text": "done"}]
    before = sorted(p.relative_to(warehouse) for p in Path(warehouse).rglob("*"))
    session = session_for(tmp_path, turns, spark(), approval=ApprovalPolicy(approver=deny))
    blocks = results(session.ask("go"))
    assert [r.tool for r in asked] == ["spark__execute"] * 4
    assert [r.safety for r in asked] == ["write", "destructive", "write", "destructive"]
    assert "CREATE" in asked[0].summary and "copy_denied" in asked[0].summary
    assert all(b.is_error and "denied" in b.content for b in blocks[1:])
    assert not admin.catalog.tableExists("copy_denied")
    assert not (tmp_path / "exported").exists()
    assert admin.table("sales").count() == ROWS
    assert sorted(p.relative_to(warehouse) for p in Path(warehouse).rglob("*")) == before
    # the same statement, approved, does write: the check above can fail
    turns = [call("load_connectors", connector_name="spark"),
             call("spark__execute",
                  sql="CREATE TABLE copy_approved USING parquet AS SELECT * FROM sales WHERE id < 10"),
             {"text": "done"}]
    session = session_for(tmp_path, turns, spark(), approval=ApprovalPolicy(approver=lambda r: True))
    blocks = results(session.ask("go"))
    assert not blocks[-1].is_error, blocks[-1].content
    try:
        assert admin.table("copy_approved").count() == 10
    finally:
        admin.sql("DROP TABLE IF EXISTS copy_approved")


HOSTILE = [
    "SELECT 1; DROP TABLE sales",
    "SELECT 1 -- harmless\n; DROP TABLE sales",
    "SELECT 1 /* ; */; INSERT INTO sales SELECT * FROM sales",
    "INSERT OVERWRITE DIRECTORY '/tmp/harness_spark_hostile' USING parquet SELECT * FROM sales",
    "INSERT OVERWRITE LOCAL DIRECTORY '/tmp/harness_spark_hostile' SELECT * FROM sales",
    "CREATE TABLE hostile_ctas USING parquet AS SELECT * FROM sales",
    "CACHE TABLE hostile_cache AS SELECT * FROM sales",
    "CACHE TABLE sales",
    "UNCACHE TABLE sales",
    "ADD JAR /tmp/evil.jar",
    "SET spark.sql.ansi.enabled=false",
    "RESET",
    "SELECT reflect('java.lang.Thread', 'sleep', 100000)",
    "SELECT java_method('java.lang.System', 'getProperty', 'user.home')",
    "SELECT try_reflect('java.lang.Thread', 'sleep', 100000)",
    "LOAD DATA LOCAL INPATH '/etc/passwd' INTO TABLE sales",
    "WITH x AS (SELECT 1) INSERT INTO sales SELECT * FROM sales",
    "CREATE TEMPORARY VIEW sales AS SELECT 1 AS id",
    "DROP TABLE sales",
    "TRUNCATE TABLE sales",
    "USE other_db",
    "CREATE FUNCTION evil AS 'x.Evil' USING JAR '/tmp/evil.jar'",
    "MSCK REPAIR TABLE sales",
    "EXECUTE IMMEDIATE 'DROP TABLE sales'",
    "WITH d AS (DELETE FROM sales RETURNING *) SELECT * FROM d",
    "with D as (insert into sales select * from sales) select * from D",
    "SELECT * FROM (WITH d AS (UPDATE sales SET amount = 0 WHERE id > 0) SELECT 1) s",
]


@pytest.mark.parametrize("sql", HOSTILE)
def test_hostile_sql_is_refused_by_query(tmp_path, spark, spark_server, sql):
    _, admin, _ = spark_server
    turns = [call("load_connectors", connector_name="spark"), call("spark__query", sql=sql), {"text": "done"}]
    session = session_for(tmp_path, turns, spark())
    block = results(session.ask("go"))[-1]
    assert block.is_error and ("Refused" in block.content or "Cannot run this SQL" in block.content), block.content
    assert len(session.cache.names()) == 0
    assert admin.table("sales").count() == ROWS and not admin.catalog.tableExists("hostile_ctas")
    assert not os.path.exists("/tmp/harness_spark_hostile")


COMMANDS = ["CREATE TABLE engine_refused USING parquet AS SELECT * FROM sales",
            "INSERT INTO sales SELECT * FROM sales",
            "CACHE TABLE engine_refused_cache AS SELECT 1",
            "DROP TABLE sales",
            "SET spark.sql.shuffle.partitions=1",
            "SELECT 1) AS q; DROP TABLE sales; SELECT * FROM (SELECT 1",
            "WITH d AS (INSERT INTO sales SELECT * FROM sales) SELECT * FROM d",
            "WITH d AS (DELETE FROM sales WHERE id > 0) SELECT * FROM d"]


@pytest.mark.parametrize("sql", COMMANDS)
def test_spark_parser_refuses_commands_the_classifier_missed(spark, spark_server, sql, monkeypatch):
    """With the classifier fooled into calling everything a read, Spark itself still runs only a query."""
    _, admin, _ = spark_server
    monkeypatch.setattr(classify_mod, "_classify_sqlglot",
                        lambda text, dialect: [classify_mod.StatementInfo("SELECT", "read", "fooled")])
    engine = spark().engine
    with pytest.raises(ToolError, match="Refused by Spark's parser"):
        engine.lazy(None, sql)
    assert admin.table("sales").count() == ROWS and not admin.catalog.tableExists("engine_refused")
    assert admin.conf.get("spark.sql.shuffle.partitions") == "4"


def test_wrapped_text_keeps_comments_and_semicolons_inside():
    assert wrap_query("SELECT 1 -- note;  \n ;; ") == "SELECT * FROM (\nSELECT 1 -- note\n) AS __harness_query"


def test_progress_reaches_the_harness_as_events(tmp_path, spark):
    turns = [call("load_connectors", connector_name="spark"),
             call("spark__query", sql="SELECT count(*) AS n FROM range(3000000) a JOIN range(3000000) b "
                                      "ON a.id = b.id", lazy=False),
             {"text": "done"}]
    session = session_for(tmp_path, turns, spark())
    events = []
    session.subscribe(events.append)
    assert session.ask("go").ok
    progress = [e for e in events if isinstance(e, EngineProgress)]
    assert progress and progress[-1].done and {e.engine for e in progress} == {"spark"}
    assert any(e.percent is not None and 0 <= e.percent <= 100 for e in progress[:-1])


def test_interrupt_cancels_the_running_job(tmp_path, spark, spark_server):
    _, admin, _ = spark_server
    built = spark()
    turns = [call("load_connectors", connector_name="spark"), call("spark__query", sql=LONG_SQL, lazy=False),
             {"text": "not reached"}]
    session = session_for(tmp_path, turns, built)
    started = threading.Event()
    session.subscribe(lambda e: started.set() if isinstance(e, EngineProgress) and not e.done else None)
    sent = {}

    def interrupt():
        started.wait(60)
        time.sleep(1.0)
        sent["at"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)  # the kernel's stop button

    killer = threading.Thread(target=interrupt, daemon=True)
    killer.start()
    run = session.ask("go")
    returned = time.monotonic()
    killer.join()
    assert started.is_set(), "the job never reported progress"
    assert run.status == "interrupted"
    # the job runs for minutes (LONG_SQL): returning well within them is returning at the interrupt, on a machine
    # however loaded
    assert returned - sent["at"] < 30
    assert built.engine.interrupted, "no interrupt was sent to Spark"
    # the task slot is free again: a new job does not queue behind the cancelled one's minutes (a loaded
    # machine may take seconds to run it, never minutes)
    begin = time.monotonic()
    assert admin.sql("SELECT count(*) FROM range(1000)").collect()[0][0] == 1000
    assert time.monotonic() - begin < 60
    # and the connector's session still works
    frame, _ = built.engine.query(None, "SELECT 41 + 1 AS x")
    assert frame.x.tolist() == [42]


def test_a_job_past_the_timeout_is_cancelled(spark):
    engine = spark(timeout_s=2).engine
    begin = time.monotonic()
    with pytest.raises(ToolError, match="ran past 2 s and was cancelled"):
        engine.query(None, LONG_SQL)
    assert time.monotonic() - begin < 15
    assert engine.interrupted and engine.interrupted[-1][1], "Spark cancelled no operation"


def test_row_count_falls_back_to_the_estimate_past_the_budget(spark):
    engine = spark(count_budget_s=1.0).engine
    begin = time.monotonic()
    relation = engine.lazy(None, "SELECT a.id FROM range(200000) a CROSS JOIN range(200000) b")
    assert time.monotonic() - begin < 30  # the 4e10-row count was cancelled, not waited for
    assert relation.rows_estimated and relation.rows in (None, 40_000_000_000), relation.rows
    snap = relation.__harness_snapshot__(lambda head: {"dtypes": {"id": "int64"}})
    assert snap["rows_estimated"] is True and snap["engine"] == "spark"


class _CancelledWhileInterrupting:
    """A Spark session and frame where our budget's interrupt cancels the count at once and ``interruptTag``
    returns only afterwards (a loaded machine: the server's reply is late), so the count fails while the timer
    thread is still inside the interrupt."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.count_failed = threading.Event()
        self.tags: list[str] = []

    def addTag(self, tag: str) -> None:  # noqa: N802 - pyspark's names
        self.tags.append(tag)

    def removeTag(self, tag: str) -> None:  # noqa: N802
        self.tags.remove(tag)

    def interruptTag(self, tag: str) -> list[str]:  # noqa: N802
        self.cancelled.set()
        self.count_failed.wait(30)
        return ["operation-1"]

    def count(self) -> int:
        self.cancelled.wait(30)
        self.count_failed.set()
        raise RuntimeError("[OPERATION_CANCELED] Operation has been canceled. SQLSTATE: HY008")


def test_a_count_cancelled_by_its_budget_is_no_error_even_before_the_interrupt_returns():
    engine = SparkEngine("sc://127.0.0.1:1", count_budget_s=0.05)
    session = _CancelledWhileInterrupting()
    assert engine._count(session, session) is None, "the budget cut the count: an estimate follows, not an error"
    assert session.cancelled.is_set() and session.tags == [], "the count's tag was interrupted, then removed"


class _FailingCount(_CancelledWhileInterrupting):
    def count(self) -> int:
        raise RuntimeError("[TABLE_OR_VIEW_NOT_FOUND] no such table")


def test_a_count_that_fails_within_its_budget_is_an_error():
    engine = SparkEngine("sc://127.0.0.1:1", count_budget_s=60)
    with pytest.raises(RuntimeError, match="TABLE_OR_VIEW_NOT_FOUND"):
        engine._count(_FailingCount(), _FailingCount())
    assert engine.interrupted == []


def test_config_entry_and_bad_configurations(spark_server):
    server, _, _ = spark_server
    registry = connectors_from_config([{"type": "spark", "remote": server.url, "name": "lake"}])
    assert registry.names == ["lake"]
    for entry, message in [({"type": "spark"}, "exactly one of 'remote'"),
                           ({"type": "spark", "remote": server.url, "master": "local[2]"}, "exactly one"),
                           ({"type": "spark", "master": "yarn"}, "not a local master"),
                           ({"type": "spark", "master": "local[0]"}, "not a local master"),
                           ({"type": "spark", "remote": "http://host:15002"}, "Spark Connect URL")]:
        with pytest.raises(ValueError, match=message):
            connectors_from_config([entry])
    with pytest.raises(ValueError, match="not a local master"):
        LocalSparkConnect("spark://cluster:7077")


def test_the_local_server_is_private(spark_server):
    server, _, _ = spark_server
    assert server.url.startswith("sc://localhost:") and ";token=" in server.url
    assert oct(os.stat(server.directory).st_mode & 0o777) == "0o700"
    import socket

    import psutil

    hosts = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
             if a.family == socket.AF_INET and not a.address.startswith("127.")]
    for host in hosts:  # loopback only: no other interface answers
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(1)
            assert sock.connect_ex((host, server.port)) != 0, host
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        assert sock.connect_ex(("127.0.0.1", server.port)) == 0
    from pyspark.sql.connect.session import SparkSession

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrong = SparkSession.builder.remote(f"sc://localhost:{server.port}/;token=wrong").create()
        with pytest.raises(Exception):
            wrong.sql("SELECT 1").collect()


def test_file_views_are_tables_and_win_over_a_handle_of_the_same_name(tmp_path, spark_server):
    server, _, _ = spark_server
    folder = tmp_path / "orders"
    folder.mkdir()
    frame = sales_frame()
    for part in range(3):
        frame.iloc[part::3].to_parquet(folder / f"part-{part}.parquet", index=False)
    built = spark_connector(server.url, files={"orders": str(folder)}, count_budget_s=EXACT)
    try:
        turns = [call("load_connectors", connector_name="spark"), call("spark__list_tables"),
                 call("spark__query", sql="SELECT count(*) AS n, sum(amount) AS total FROM orders", name="t"),
                 {"text": "done"}]
        session = session_for(tmp_path, turns, built)
        session.cache.put("orders", pd.DataFrame({"n": [1]}))  # a handle cannot shadow the configured view
        blocks = results(session.ask("go"))
        assert not any(b.is_error for b in blocks), [b.content for b in blocks]
        assert {"name": "orders", "database": None, "kind": "file view", "path": str(folder)} in \
            json.loads(blocks[1].content)
        got = session.cache.get("t").materialize(session.cache, 10**6)
        assert got.n.tolist() == [ROWS] and got.total.tolist() == [frame.amount.sum()]
    finally:
        built.engine.close()
    for bad, message in [({"bad name": "x.parquet"}, "must be an identifier"), ({"v": "notes.txt"}, "cannot read")]:
        with pytest.raises(ValueError, match=message):
            spark_connector(server.url, files=bad)


def test_a_checkpoint_rebinds_spark_handles_and_refuses_crafted_queries(tmp_path, spark_server):
    import warnings as _warnings

    from harness_magic.core.cache import CheckpointWarning, SessionCache
    from harness_magic.core.execution.connectors import ConnectorRegistry
    from harness_magic.core.execution.connectors.spark.connector import spark_rebinder

    server, admin, _ = spark_server
    built = spark_connector(server.url, name="lake", count_budget_s=EXACT)
    try:
        cache = SessionCache()
        cache.put("targets", pd.DataFrame({"region": REGIONS, "target": [1.0, 2.0, 3.0, 4.0]}))
        engine = built.engine
        cache.put("by_region", engine.lazy(cache, "SELECT s.region, count(*) AS n, max(t.target) AS target "
                                                  "FROM sales s JOIN targets t ON s.region = t.region GROUP BY 1"))
        cache.save(tmp_path / "ckpt")
        manifest = json.loads((tmp_path / "ckpt" / "manifest.json").read_text())
        row = {r["name"]: r for r in manifest["entries"]}["by_region"]
        assert row["definition"]["connector"] == "lake" and "file" not in row
        loaded = SessionCache.load(tmp_path / "ckpt", rebind=spark_rebinder(ConnectorRegistry([built])))
        assert loaded.not_restored == {} and loaded.location("by_region") == "spark"
        got = loaded.get("by_region").materialize(loaded, 10**6).sort_values("region").reset_index(drop=True)
        want = cache.get("by_region").materialize(cache, 10**6).sort_values("region").reset_index(drop=True)
        pd.testing.assert_frame_equal(got, want)
        # a crafted definition runs nothing the model could not
        for sql in ["CREATE TABLE from_checkpoint USING parquet AS SELECT 1 AS a",
                    "SELECT 1; DROP TABLE sales", "SELECT reflect('java.lang.Thread', 'sleep', 100000)"]:
            row["definition"]["sql"] = sql
            (tmp_path / "ckpt" / "manifest.json").write_text(json.dumps(manifest))
            with _warnings.catch_warnings(record=True) as caught:
                _warnings.simplefilter("always")
                loaded = SessionCache.load(tmp_path / "ckpt", rebind=spark_rebinder([built]))
            assert "by_region" in loaded.not_restored and "Refused" in loaded.not_restored["by_region"]
            assert any(issubclass(w.category, CheckpointWarning) for w in caught)
            assert loaded.names() == ["targets"]
        assert not admin.catalog.tableExists("from_checkpoint") and admin.table("sales").count() == ROWS
    finally:
        built.engine.close()


def test_a_small_result_is_counted_by_its_head_job_and_a_large_one_by_count(spark, monkeypatch):
    import importlib

    module = importlib.import_module("harness_magic.core.execution.connectors.spark.engine")
    engine = spark().engine
    counted = []
    real_count = SparkEngine._count
    monkeypatch.setattr(SparkEngine, "_count", lambda self, s, df: counted.append(df) or real_count(self, s, df))
    small = engine.lazy(None, "SELECT region, count(*) AS n FROM sales GROUP BY region")
    assert (small.rows, small.rows_estimated, counted) == (4, False, [])  # one job: head and count together
    monkeypatch.setattr(module, "ONE_PASS_BYTES", 1_000)
    wide = engine.lazy(None, "SELECT id, repeat('x', 100) AS s FROM range(2000)")
    assert (wide.rows, wide.rows_estimated, len(counted)) == (2000, False, 1)
    assert len(wide._info["head"]) == 5 and wide._info["head"].id.tolist() == [0, 1, 2, 3, 4]
    monkeypatch.setattr(module, "ONE_PASS_ROWS", 100)
    many = engine.lazy(None, "SELECT id FROM range(150)")
    assert (many.rows, len(counted)) == (150, 2)


def test_a_spark_lazy_handle_reaches_the_sandboxed_worker_as_a_frame(tmp_path, spark):
    """The default backend: the materialised rows cross into the confined worker exactly."""
    turns = [call("load_connectors", connector_name="spark"),
             call("spark__query", sql="SELECT region, sum(amount) AS total FROM sales GROUP BY 1", name="totals"),
             call("python_interpreter", code="save('pulled', totals.sort_values('region').reset_index(drop=True))"),
             {"text": "done"}]
    adapter = ProviderAdapter("scripted/spark", transport=ScriptedModel(turns))
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="worker"), adapter=adapter)
    session.add_connector(spark())
    try:
        blocks = results(session.ask("go"))
        assert not blocks[-1].is_error, blocks[-1].content
        want = sales_frame().groupby("region", as_index=False)["amount"].sum().rename(columns={"amount": "total"})
        pd.testing.assert_frame_equal(session.cache.get("pulled"), want)
        assert session.cache.location("totals") == "spark"
    finally:
        session.close()


def server_jobs(engine, monkeypatch):
    """Operation ids of the ExecutePlan requests that ask the Spark server to run a query (a relation plan, not a
    command such as ``spark.sql``'s analysis) on ``engine``'s session, spied at the client's gRPC seam."""
    client = engine.spark.client
    real = client._execute_and_fetch_as_iterator
    seen: list[str] = []

    def spy(req, *args, **kwargs):
        if req.plan.WhichOneof("op_type") == "root":
            seen.append(req.operation_id)
        return real(req, *args, **kwargs)

    monkeypatch.setattr(client, "_execute_and_fetch_as_iterator", spy)
    return seen


def test_creating_and_pulling_a_small_result_runs_one_spark_job(spark, monkeypatch):
    """The snapshot's LIMIT job read the aggregate whole: pulls ask nothing of Spark, and the caps still hold."""
    engine = spark().engine
    jobs = server_jobs(engine, monkeypatch)
    cache = __import__("harness_magic.core.cache", fromlist=["SessionCache"]).SessionCache()
    relation = engine.lazy(cache, "SELECT region, count(*) AS n, sum(amount) AS total FROM sales GROUP BY region")
    handle = cache.put("by_region", relation)
    assert len(jobs) == 1 and relation.result is not None and relation.rows == 4  # the snapshot's LIMIT job
    created = list(jobs)
    want = sales_frame().groupby("region")["amount"].sum().sort_index().tolist()
    for _ in range(2):
        frame = relation.materialize(cache, 10**6, max_rows=4, handle=handle)
        assert frame.sort_values("region").total.tolist() == want and frame.n.sum() == ROWS
    assert jobs == created  # no Spark job ran for the pulls
    before = materialize_count()
    with pytest.raises(MaterializeLimitError, match=r"more than 3 rows .*limit materialize_max_rows") as rows_cap:
        relation.materialize(cache, 10**6, max_rows=3, handle=handle)
    assert rows_cap.value.limit == "rows" and "`by_region` is too big" in str(rows_cap.value)
    with pytest.raises(MaterializeLimitError, match=r"more than 10 bytes .*materialize_max_bytes"):
        relation.materialize(cache, 10, handle=handle)
    for bad in (0, -1, True, 1.5, "10", 2**63):
        with pytest.raises(ValueError, match="must be a positive integer"):
            relation.materialize(cache, 10**6, max_rows=bad)
    assert materialize_count() == before and jobs == created


def test_a_result_too_big_to_keep_is_pulled_by_one_spark_job(spark, monkeypatch):
    import importlib

    module = importlib.import_module("harness_magic.core.execution.connectors.spark.engine")
    engine = spark().engine
    monkeypatch.setattr(module, "ONE_PASS_ROWS", 100)
    relation = engine.lazy(None, "SELECT id, amount FROM sales WHERE amount > 10")
    assert relation.result is None and len(relation._info["head"]) == 5
    jobs = server_jobs(engine, monkeypatch)
    frame = relation.materialize(None, 10**8)
    assert sorted(frame.id.tolist()) == [i for i in range(ROWS) if i % 97 > 10]
    assert len(jobs) == 1  # the pull ran the query once


def test_a_kept_spark_result_still_refuses_a_replaced_input(spark):
    from harness_magic.core.cache import SessionCache

    engine = spark().engine
    cache = SessionCache()
    cache.put("targets", pd.DataFrame({"region": REGIONS, "target": [1.0, 2.0, 3.0, 4.0]}))
    relation = engine.lazy(cache, "SELECT sum(target) AS s FROM targets")
    assert relation.result is not None
    assert relation.materialize(cache, 10**6).s.tolist() == [10.0]
    cache.retire("targets")
    cache.put("targets", pd.DataFrame({"region": ["x"], "target": [99.0]}))
    with pytest.raises(ToolError, match="built on `targets`, which was retired or replaced"):
        relation.materialize(cache, 10**6)
