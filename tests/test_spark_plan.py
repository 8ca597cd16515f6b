"""Spark reads are checked on Spark's own plan before any job runs (issue 22), against a real local Spark
Connect server that the connector itself starts (``master=``), so it runs with the connector's pinned settings.

Attacks: ``TRANSFORM/MAP/REDUCE ... USING`` (directly, in a CTE, UNION, subquery, view, lazy handle,
checkpoint, approved execute; case, comment and whitespace variants) and reads of files outside the configured
file views (``text.``/``csv.``/``json.``/``parquet.`` paths, ``read_files``, a temp view over a file); each is
refused with nothing run and nothing returned. Legitimate queries (joins, windows, file views, chained lazy
handles, checkpoints) still work. Hostile files live in directories the server may read (the owner's own file
views), so what stops them is the check under test, not the server's file confinement."""

from __future__ import annotations

import importlib
import json
import re
import warnings
from pathlib import Path

import pandas as pd
import pytest
from spark_servers import quick_jvm

pytest.importorskip("pyspark")

from harness_magic.core.cache import SessionCache  # noqa: E402
from harness_magic.core.execution.connectors import ApprovalPolicy, ConnectorRegistry  # noqa: E402
from harness_magic.core.execution.connectors.spark.engine import ONE_PASS_ROWS, SparkEngine
from harness_magic.core.execution.connectors.spark.connector import spark_connector, spark_rebinder
from harness_magic.core.execution.connectors.spark.plan import PINNED_CONF  # noqa: E402
from harness_magic.core.providers.offline import ScriptedModel  # noqa: E402
from harness_magic.core.providers.adapter import ProviderAdapter  # noqa: E402
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession
from harness_magic.core.execution.tools import ToolError  # noqa: E402

engine_mod = importlib.import_module("harness_magic.core.execution.connectors.spark.engine")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

REGIONS = ["north", "south", "east", "west"]
ROWS = 2_000
SECRET = "SECRETKEY-4242"
EXACT = 600.0
"""Count budget: a loaded 2-core machine must not turn exact counts into estimates."""


class Lake:
    """The shared server and the files around it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.events = root / "events"  # a partitioned Parquet directory: a configured view of every test engine
        self.parts = root / "parts"  # single Parquet files: a configured glob view
        self.private = root / "private"  # outside the test engines' views, readable by the server
        self.csv = root / "private_csv" / "secret.csv"
        self.json = root / "private_json" / "secret.json"

    def files(self) -> dict[str, str]:
        return {"events": str(self.events), "parts": str(self.parts / "part-*.parquet")}


def events_frame() -> pd.DataFrame:
    ids = list(range(ROWS))
    return pd.DataFrame({"id": ids, "amount": [float(i % 97) for i in ids], "region": [REGIONS[i % 4] for i in ids]})


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """One local server started by a ``master=`` connector engine (the owner), whose own file views make the
    private files readable to the server; test engines connect to it as a remote with fewer views."""
    lake = Lake(tmp_path_factory.mktemp("lake"))
    events_frame().to_parquet(lake.events, partition_cols=["region"], index=False)
    lake.parts.mkdir()
    for part in range(3):
        events_frame().iloc[part::3].to_parquet(lake.parts / f"part-{part}.parquet", index=False)
    lake.private.mkdir()
    pd.DataFrame({"secret": [SECRET]}).to_parquet(lake.private / "secret.parquet", index=False)
    lake.csv.parent.mkdir()
    lake.csv.write_text(f"secret\n{SECRET}\n")
    lake.json.parent.mkdir()
    lake.json.write_text(json.dumps({"secret": SECRET}) + "\n")
    sales = lake.root / "sales"
    sales.mkdir()
    events_frame().to_parquet(sales / "part-0.parquet", index=False)
    owner = SparkEngine(master="local[2]", files={"private": str(lake.private), "private_csv": str(lake.csv),
                                                  "private_json": str(lake.json), "sales_files": str(sales),
                                                  **lake.files()},
                        conf=quick_jvm({"spark.sql.shuffle.partitions": "4",
                                        # the plan check is tested on its own: Spark's restricted mode (on by
                                        # default in the local server) would refuse scripts and reflection first
                                        "spark.sql.restrictedMode.enabled": "false"}))
    admin = owner.spark  # starts the server; the owner's own session acts as the cluster's administrator
    admin.sql(f"CREATE TABLE sales USING parquet LOCATION '{sales}'")  # a catalog table (over files the server reads)
    lake.url, lake.admin, lake.owner = owner.server.url, admin, owner
    try:
        yield lake
    finally:
        owner.close()


@pytest.fixture
def spark(lake):
    """Connectors on the shared server (each its own session, views ``events`` and ``parts`` only)."""
    made = []

    def make(**options):
        options.setdefault("count_budget_s", EXACT)
        options.setdefault("files", lake.files())
        made.append(spark_connector(lake.url, **options))
        return made[-1]

    yield make
    for built in made:
        built.engine.close()


def call(tool, **arguments):
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


def session_for(tmp_path, turns, connector, approval=None):
    adapter = ProviderAdapter("scripted/spark", transport=ScriptedModel(turns))
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess"), adapter=adapter)
    session.add_connector(connector, approval=approval)
    return session


def results(run):
    return [b for m in run.messages for b in m.content if getattr(b, "type", "") == "tool_result"]


def ask_query(tmp_path, connector, sql, **arguments):
    """One spark__query call as the model makes it; its result block and the session."""
    turns = [call("load_connectors", connector_name="spark"), call("spark__query", sql=sql, **arguments),
             {"text": "done"}]
    session = session_for(tmp_path, turns, connector)
    return results(session.ask("go"))[-1], session


# -- the settings the server and every session run with ---------------------------------------------------


def test_the_local_server_starts_with_sql_on_raw_files_off(lake, spark):
    from pyspark.sql.connect.session import SparkSession

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = SparkSession.builder.remote(lake.url).create()  # a bare session: no per-session setting from us
    try:
        assert raw.conf.get("spark.sql.runSQLOnFiles") == "false"
        with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
            raw.sql(f"SELECT * FROM text.`{lake.csv}`").collect()
    finally:
        raw.stop()
    engine = spark().engine
    engine.spark.sql("SELECT 1").collect()
    assert engine.pinned == {key: True for key in PINNED_CONF}
    assert {key: engine.spark.conf.get(key) for key in PINNED_CONF} == PINNED_CONF


def test_a_connector_conf_cannot_turn_sql_on_files_back_on(lake):
    with pytest.raises(ValueError, match=r"'spark.sql.runSQLOnFiles'='true' cannot be set.*'false'"):
        spark_connector(lake.url, conf={"spark.sql.runSQLOnFiles": "true"})
    with pytest.raises(ValueError, match="spark.sql.maxMetadataStringLength"):
        SparkEngine(master="local[1]", conf={"spark.sql.maxMetadataStringLength": "100"})
    spark_connector(lake.url, conf={"spark.sql.runSQLOnFiles": "false"})  # the pinned value itself is fine


# -- scripts -------------------------------------------------------------------------------------------------


SCRIPTS = [
    "SELECT TRANSFORM(id) USING 'touch {m}' AS (a STRING) FROM range(1)",
    "select transform ( id )\n\tusing   'touch {m}'   as (a string) from range(1) -- trailing; comment",
    "/* a comment */ SeLeCt/**/TrAnSfOrM(id)/**/UsInG 'touch {m}' AS (a STRING) FROM range(1)",
    "FROM range(1) SELECT TRANSFORM(id) USING 'touch {m}' AS (a STRING)",
    "FROM range(1) MAP id USING 'touch {m}' AS a",
    "FROM range(1) REDUCE id USING 'touch {m}' AS a",
    "WITH t AS (SELECT TRANSFORM(id) USING 'touch {m}' AS (a STRING) FROM range(1)) SELECT * FROM t",
    "WITH a AS (SELECT 1 AS x), b AS (WITH c AS (SELECT TRANSFORM(x) USING 'touch {m}' AS (y STRING) FROM a) "
    "SELECT * FROM c) SELECT * FROM b",
    "SELECT region AS a FROM sales UNION ALL SELECT TRANSFORM(id) USING 'touch {m}' AS (a STRING) FROM range(1)",
    "SELECT * FROM sales WHERE region IN (SELECT TRANSFORM(id) USING 'touch {m}' AS (a STRING) FROM range(1))",
    "SELECT (SELECT max(a) FROM (SELECT TRANSFORM(id) USING 'touch {m}' AS (a STRING) FROM range(1))) AS x",
    "SELECT s.id FROM sales s JOIN (SELECT TRANSFORM(id) USING 'touch {m}' AS (a STRING) FROM range(1)) t "
    "ON s.region = t.a",
    "SELECT * FROM events e, LATERAL (SELECT TRANSFORM(id) USING 'touch {m}' AS (a STRING) FROM range(1))",
]


@pytest.mark.parametrize("sql", SCRIPTS)
def test_a_query_that_runs_a_script_is_refused_before_it_runs(tmp_path, spark, sql):
    marker = tmp_path / "touched"
    built = spark()
    block, session = ask_query(tmp_path, built, sql.format(m=marker))
    assert block.is_error, block.content
    assert "plan runs an external script" in block.content or "Cannot run this SQL" in block.content  # sqlglot
    assert not marker.exists() and session.cache.names() == []
    # straight to the engine (no classification, as a checkpoint's or another caller's SQL may come)
    with pytest.raises(ToolError, match=f"spark__query refused: the plan runs an external script "
                                        f"\\(\\w*ScriptTransformation: 'touch {re.escape(str(marker))}'\\)"):
        built.engine.lazy(SessionCache(), sql.format(m=marker))
    assert not marker.exists()


def test_a_fetched_query_that_runs_a_script_is_refused_too(tmp_path, spark):
    marker = tmp_path / "touched"
    block, _ = ask_query(tmp_path, spark(), SCRIPTS[0].format(m=marker), lazy=False)
    assert block.is_error and "runs an external script" in block.content and not marker.exists()


def test_without_the_plan_check_the_script_reaches_the_server(tmp_path, spark, monkeypatch):
    """Control: the refusals above come from the plan check, not from something else on the way."""
    marker = tmp_path / "touched"
    monkeypatch.setattr(engine_mod, "check_read", lambda plan, views, tool: None)
    engine = spark().engine
    try:
        engine.query(None, SCRIPTS[0].format(m=marker))
    except ToolError as exc:  # a server that may not start programs says so; the query got that far
        assert "spark error" in str(exc) and "refused" not in str(exc), exc
    else:
        assert marker.exists()


def test_a_literal_naming_plan_nodes_is_not_refused(spark):
    frame, _ = spark().engine.query(
        None, "SELECT 'ScriptTransformation' AS `ScriptTransformation`, 'FileScan text [value] Location: "
              "InMemoryFileIndex(1 paths)[file:/etc/passwd]' AS `FileScan`, 'InsertIntoStatement' AS cmd, "
              "'reflect' AS reflect")
    assert frame.iloc[0].tolist() == ["ScriptTransformation", "FileScan text [value] Location: "
                                      "InMemoryFileIndex(1 paths)[file:/etc/passwd]", "InsertIntoStatement",
                                      "reflect"]


def test_views_that_hide_a_script_or_reflection_are_refused(tmp_path, lake, spark):
    marker = tmp_path / "touched"
    lake.admin.sql(f"CREATE OR REPLACE VIEW hidden_script AS SELECT TRANSFORM(id) USING 'touch {marker}' "
                   "AS (a STRING) FROM range(1)")
    lake.admin.sql("CREATE OR REPLACE VIEW hidden_reflect AS "
                   "SELECT reflect('java.lang.System', 'getProperty', 'user.home') AS home")
    lake.admin.sql("CREATE OR REPLACE VIEW outer_view AS SELECT * FROM sales JOIN hidden_script ON true")
    try:
        built = spark()
        for sql in ["SELECT * FROM hidden_script", "SELECT count(*) FROM outer_view",
                    "SELECT * FROM events WHERE region IN (SELECT a FROM hidden_script)"]:
            block, session = ask_query(tmp_path, built, sql)
            assert block.is_error and "runs an external script" in block.content, (sql, block.content)
            assert session.cache.names() == []
        block, _ = ask_query(tmp_path, built, "SELECT * FROM hidden_reflect")
        assert block.is_error and "calls a Java method by reflection (reflect(java.lang.System" in block.content
        assert "user.home" in block.content and not marker.exists()
    finally:
        lake.admin.sql("DROP VIEW IF EXISTS outer_view")
        lake.admin.sql("DROP VIEW IF EXISTS hidden_script")
        lake.admin.sql("DROP VIEW IF EXISTS hidden_reflect")


def test_a_lazy_handle_whose_view_turns_into_a_script_is_refused_when_pulled_or_chained(tmp_path, lake, spark):
    marker = tmp_path / "touched"
    rows = ONE_PASS_ROWS * 2  # too many to keep with the handle: a pull asks Spark again
    lake.admin.sql(f"CREATE OR REPLACE VIEW swap AS SELECT CAST(id AS STRING) AS a FROM range({rows})")
    try:
        engine = spark().engine
        cache = SessionCache()
        cache.put("h", engine.lazy(cache, "SELECT * FROM swap"))
        assert cache.get("h").result is None and cache.snapshot("h")["shape"] == [rows, 1]
        lake.admin.sql(f"CREATE OR REPLACE VIEW swap AS SELECT TRANSFORM(id) USING 'touch {marker}' AS (a STRING) "
                       f"FROM range({rows})")
        with pytest.raises(ToolError, match="runs an external script"):
            cache.get("h").materialize(cache, 10**9)
        with pytest.raises(ToolError, match="runs an external script"):
            engine.lazy(cache, "SELECT count(*) AS n FROM h")
        with pytest.raises(ToolError, match="runs an external script"):
            engine.query(cache, "SELECT * FROM h")
        assert not marker.exists()
    finally:
        lake.admin.sql("DROP VIEW IF EXISTS swap")


def test_a_checkpoint_cannot_restore_a_handle_that_runs_a_script(tmp_path, lake, spark):
    marker = tmp_path / "touched"
    built = spark(name="lake")
    cache = SessionCache()
    cache.put("north", built.engine.lazy(cache, "SELECT id, amount FROM events WHERE region = 'north'"))
    cache.save(tmp_path / "ckpt")
    manifest_path = tmp_path / "ckpt" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    row = {r["name"]: r for r in manifest["entries"]}["north"]
    lake.admin.sql(f"CREATE OR REPLACE VIEW ckpt_script AS SELECT TRANSFORM(id) USING 'touch {marker}' "
                   "AS (a STRING) FROM range(1)")
    try:
        for sql in [SCRIPTS[0].format(m=marker), SCRIPTS[6].format(m=marker), "SELECT * FROM ckpt_script"]:
            row["definition"]["sql"] = sql
            manifest_path.write_text(json.dumps(manifest))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                loaded = SessionCache.load(tmp_path / "ckpt", rebind=spark_rebinder(ConnectorRegistry([built])))
            assert "runs an external script" in loaded.not_restored.get("north", ""), loaded.not_restored
            assert loaded.names() == []
        assert not marker.exists()
    finally:
        lake.admin.sql("DROP VIEW IF EXISTS ckpt_script")


# -- execute: an approval never covers a script -------------------------------------------------------------


def test_an_approved_execute_cannot_run_a_script(tmp_path, lake, spark):
    marker = tmp_path / "touched"
    script = f"SELECT TRANSFORM(id, amount, region) USING 'touch {marker}' AS (id BIGINT, amount DOUBLE, " \
             "region STRING) FROM sales"
    statements = [f"INSERT INTO sales {script}", f"CREATE TABLE from_script USING parquet AS {script}",
                  f"CREATE OR REPLACE TEMPORARY VIEW script_view AS {script}", f"CACHE TABLE script_cache AS {script}",
                  script]
    asked = []
    turns = [call("load_connectors", connector_name="spark"),
             *[call("spark__execute", sql=sql) for sql in statements], {"text": "done"}]
    session = session_for(tmp_path, turns, spark(), approval=ApprovalPolicy(approver=lambda r: asked.append(r) or True))
    blocks = results(session.ask("go"))[1:]
    assert len(asked) == len(statements)  # each was approved ...
    for sql, block in zip(statements, blocks):  # ... and still refused
        assert block.is_error and "spark__execute refused: the plan runs an external script" in block.content, \
            (sql, block.content)
        assert "an approval never covers running a program" in block.content
    assert not marker.exists()
    assert lake.admin.table("sales").count() == ROWS and not lake.admin.catalog.tableExists("from_script")


def test_an_approved_execute_still_runs_ordinary_statements_and_cannot_unpin_settings(tmp_path, lake, spark):
    built = spark()
    turns = [call("load_connectors", connector_name="spark"),
             call("spark__execute", sql="CREATE OR REPLACE TEMPORARY VIEW big AS SELECT * FROM events WHERE "
                                        "amount > 90"),
             call("spark__execute", sql="SET spark.sql.runSQLOnFiles=true"),
             call("spark__execute", sql="RESET"),
             call("spark__execute", sql="SET spark.sql.maxMetadataStringLength=10"),
             call("spark__query", sql="SELECT count(*) AS n FROM big", lazy=False),
             {"text": "done"}]
    session = session_for(tmp_path, turns, built, approval=ApprovalPolicy(approver=lambda r: True))
    blocks = results(session.ask("go"))
    assert not any(b.is_error for b in blocks), [b.content for b in blocks]
    frame = events_frame()
    assert f'"n":{int((frame.amount > 90).sum())}' in blocks[-1].content.replace(" ", "")
    assert {key: built.engine.spark.conf.get(key) for key in PINNED_CONF} == PINNED_CONF
    with pytest.raises(ToolError, match="TABLE_OR_VIEW_NOT_FOUND"):
        built.engine.query(None, f"SELECT * FROM text.`{lake.csv}`")


# -- files outside the configured views ---------------------------------------------------------------------


def file_attacks(lake: Lake) -> list[str]:
    return [
        f"SELECT * FROM text.`{lake.csv}`",
        f"select * from CSV.`{lake.csv}`",
        f"SELECT * FROM json.`{lake.json}`",
        f"SELECT * FROM parquet.`{lake.private}`",
        f"SELECT * FROM parquet.`{lake.private / 'secret.parquet'}`",
        f"SELECT * FROM parquet.`{lake.events}/region=north`",  # inside a view's directory, but not the view
        f"SELECT e.id, t.value FROM events e JOIN text.`{lake.csv}` t ON true",
        f"WITH s AS (SELECT * FROM text.`{lake.csv}`) SELECT * FROM s",
        f"SELECT region FROM events UNION ALL SELECT value FROM text.`{lake.csv}`",
        f"SELECT * FROM events WHERE region IN (SELECT value FROM text.`{lake.csv}`)",
        f"SELECT (SELECT max(value) FROM text.`{lake.csv}`) AS m",
        f"SELECT * FROM (SELECT * FROM (SELECT * FROM\n  text . `{lake.csv}` /* spaced */))",
    ]


ATTACKS = 12


@pytest.mark.parametrize("index", range(ATTACKS))
def test_sql_on_raw_files_is_off_even_without_the_plan_check(tmp_path, lake, spark, monkeypatch, index):
    sql = file_attacks(lake)[index]
    monkeypatch.setattr(engine_mod, "check_read", lambda plan, views, tool: None)
    block, session = ask_query(tmp_path, spark(), sql, lazy=False)
    assert block.is_error and "TABLE_OR_VIEW_NOT_FOUND" in block.content, block.content
    assert SECRET not in block.content and session.cache.names() == []


@pytest.mark.parametrize("index", range(ATTACKS))
def test_the_plan_check_alone_refuses_files_outside_the_views(tmp_path, lake, spark, index):
    """As on a cluster that keeps SQL on raw files on: the plan check is what refuses."""
    sql = file_attacks(lake)[index]
    built = spark()
    built.engine.spark.conf.set("spark.sql.runSQLOnFiles", "true")
    block, session = ask_query(tmp_path, built, sql, lazy=index % 2 == 0)
    assert block.is_error and "spark__query refused: the plan reads file '" in block.content, block.content
    assert "which is not one of the configured file views (events: " in block.content
    assert f"parts: {lake.parts}/part-*.parquet" in block.content
    assert SECRET not in block.content and session.cache.names() == []


def test_the_refusal_names_the_file(tmp_path, lake, spark):
    built = spark()
    built.engine.spark.conf.set("spark.sql.runSQLOnFiles", "true")
    block, _ = ask_query(tmp_path, built, f"SELECT * FROM text.`{lake.csv}`")
    assert f"reads file '{lake.csv}', which is not one of the configured file views (events: {lake.events}; " \
           f"parts: {lake.parts}/part-*.parquet)" in block.content


def test_a_temp_view_over_a_private_file_is_refused_by_the_plan_check(tmp_path, lake, spark):
    """The pin does not stop a view made by an approved execute over a file; the plan check does."""
    turns = [call("load_connectors", connector_name="spark"),
             call("spark__execute", sql=f"CREATE TEMPORARY VIEW leak USING text OPTIONS (path '{lake.csv}')"),
             call("spark__execute", sql=f"CREATE TEMPORARY VIEW leak2 USING parquet OPTIONS (path '{lake.private}')"),
             call("spark__query", sql="SELECT * FROM leak"),
             call("spark__query", sql="SELECT * FROM leak2 JOIN events ON true", lazy=False),
             {"text": "done"}]
    session = session_for(tmp_path, turns, spark(), approval=ApprovalPolicy(approver=lambda r: True))
    blocks = results(session.ask("go"))
    assert not blocks[1].is_error and not blocks[2].is_error, [b.content for b in blocks]
    assert blocks[3].is_error and f"reads file '{lake.csv}'" in blocks[3].content
    assert blocks[4].is_error and f"reads file '{lake.private}'" in blocks[4].content
    assert all(SECRET not in b.content for b in blocks) and session.cache.names() == []


def test_read_files_does_not_exist_in_this_spark(tmp_path, lake, spark):
    block, _ = ask_query(tmp_path, spark(), f"SELECT * FROM read_files('{lake.csv}')", lazy=False)
    assert block.is_error and "spark error" in block.content and SECRET not in block.content


def test_a_session_without_the_long_metadata_setting_refuses_file_view_reads(tmp_path, spark, monkeypatch):
    """Spark cuts locations short by default, which would make two paths look alike: refused, never guessed."""
    monkeypatch.setattr(engine_mod, "PINNED_CONF", {"spark.sql.runSQLOnFiles": "false"})
    built = spark()
    built.engine.spark.conf.set("spark.sql.maxMetadataStringLength", "20")
    with pytest.raises(ToolError, match="reads file"):
        built.engine.query(None, "SELECT count(*) FROM parts")


# -- legitimate work still runs -------------------------------------------------------------------------------


def test_joins_windows_file_views_and_cached_frames_still_work(tmp_path, spark):
    targets = pd.DataFrame({"region": REGIONS, "target": [1.0, 2.0, 3.0, 4.0]})
    turns = [call("load_connectors", connector_name="spark"),
             call("spark__query", name="ranked", lazy=False,
                  sql="SELECT e.region, e.id, row_number() OVER (PARTITION BY e.region ORDER BY e.amount DESC, e.id) "
                      "AS rank FROM events e WHERE e.region IN ('north', 'south')"),
             call("spark__query", name="joined",
                  sql="SELECT p.region, count(*) AS n, max(t.target) AS target FROM parts p JOIN sales s "
                      "ON p.id = s.id JOIN targets t ON t.region = p.region GROUP BY p.region"),
             {"text": "done"}]
    session = session_for(tmp_path, turns, spark())
    session.cache.put("targets", targets)
    blocks = results(session.ask("go"))
    assert not any(b.is_error for b in blocks), [b.content for b in blocks]
    ranked = session.cache.get("ranked")
    frame = events_frame()
    assert len(ranked) == int(frame.region.isin(["north", "south"]).sum()) and ranked["rank"].min() == 1
    joined = session.cache.get("joined").materialize(session.cache, 10**6).sort_values("region")
    assert joined.n.tolist() == [ROWS // 4] * 4 and joined.target.tolist() == [3.0, 1.0, 2.0, 4.0]


def test_chained_lazy_handles_and_their_checkpoint_still_work(tmp_path, spark):
    built = spark(name="lake")
    cache = SessionCache()
    engine = built.engine
    cache.put("big", engine.lazy(cache, "SELECT * FROM events WHERE amount > 10"))
    cache.put("by_region", engine.lazy(cache, "SELECT b.region, count(*) AS n, sum(s.amount) AS total FROM big b "
                                              "JOIN sales s ON b.id = s.id GROUP BY b.region"))
    frame = events_frame()
    want = frame[frame.amount > 10].groupby("region").agg(n=("id", "size"), total=("amount", "sum")).sort_index()
    got = cache.get("by_region").materialize(cache, 10**6).set_index("region").sort_index()
    assert got.n.tolist() == want.n.tolist() and got.total.tolist() == pytest.approx(want.total.tolist())
    cache.save(tmp_path / "ckpt")
    loaded = SessionCache.load(tmp_path / "ckpt", rebind=spark_rebinder(ConnectorRegistry([built])))
    assert loaded.not_restored == {} and loaded.location("by_region") == "spark"
    again = loaded.get("by_region").materialize(loaded, 10**6).set_index("region").sort_index()
    pd.testing.assert_frame_equal(again, got)
