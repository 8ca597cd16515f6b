"""Lazy DuckDB handles over a multi-file Parquet dataset: chaining, pushdown snapshots,
materialisation under a byte cap, out-of-core settings and progress events (real DuckDB)."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.connectors import duckdb_connector
from harness_magic.core.execution.connectors.duckdb.engine import DuckDBEngine
from harness_magic.core.execution.connectors.lazy import LazyRelation, MaterializeLimitError, materialize_count
from harness_magic.core.transcript.events import EngineProgress
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession
from harness_magic.core.execution.tools import ToolError

FILES = 4
ROWS_PER_FILE = 25_000
REGIONS = np.array(["north", "south", "east", "west"])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A Parquet dataset of several files (a directory, read through a glob)."""
    root = tmp_path_factory.mktemp("lake") / "events"
    root.mkdir()
    for part in range(FILES):
        ids = np.arange(part * ROWS_PER_FILE, (part + 1) * ROWS_PER_FILE)
        pq.write_table(pa.table({"id": ids, "region": REGIONS[ids % 4], "amount": (ids % 97).astype("float64")}),
                       root / f"part-{part}.parquet")
    frame = pd.concat([pq.read_table(p).to_pandas() for p in sorted(root.glob("*.parquet"))], ignore_index=True)
    return root, frame


def call(tool, **arguments):
    return {"tool_calls": [{"name": tool, "arguments": arguments}]}


def session_for(tmp_path, turns, connector, **config):
    adapter = ProviderAdapter("scripted/lazy", transport=ScriptedModel(turns))
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess", **config),
                           adapter=adapter)
    session.add_connector(connector)
    return session


def results(run):
    return [b for m in run.messages for b in m.content if getattr(b, "type", "") == "tool_result"]


def test_three_lazy_queries_chain_in_the_engine_without_materialising(tmp_path, dataset, monkeypatch):
    root, frame = dataset
    moved = []
    monkeypatch.setattr(LazyRelation, "materialize", lambda *a, **k: moved.append(a) or pytest.fail("materialised"))
    turns = [call("load_connectors", connector_name="duckdb"),
             call("duckdb__query", sql="SELECT * FROM events WHERE amount > 10", name="big", lazy=True),
             call("duckdb__query", sql="SELECT region, sum(amount) AS total, count(*) AS n FROM big GROUP BY region",
                  name="by_region", lazy=True),
             call("duckdb__query", sql="SELECT region, total / n AS mean FROM by_region ORDER BY region",
                  name="means", lazy=True),
             call("list_variables"), {"text": "done"}]
    session = session_for(tmp_path, turns, duckdb_connector({"events": str(root / "*.parquet")}))
    run = session.ask("go")
    blocks = results(run)
    assert not any(b.is_error for b in blocks), [b.content for b in blocks]
    cache = session.cache
    assert [cache.location(h) for h in ("big", "by_region", "means")] == ["duckdb"] * 3
    assert moved == [] and all(isinstance(cache.get(h), LazyRelation) for h in ("big", "by_region", "means"))
    assert cache.usage()["memory_bytes"] == 0  # nothing but descriptions in the cache
    expected = frame[frame.amount > 10]
    snap = cache.snapshot("big")
    assert snap["type"] == "lazy_frame" and snap["engine"] == "duckdb"
    assert snap["shape"] == [len(expected), 3] and "rows_estimated" not in snap
    assert snap["engine_types"] == {"id": "BIGINT", "region": "VARCHAR", "amount": "DOUBLE"}
    assert len(snap["sample"]) == 5
    assert cache.snapshot("means")["shape"] == [4, 2]
    listing = [json.loads(line) for line in blocks[-1].content.splitlines()]
    assert {row["name"]: row.get("location") for row in listing} == {"big": "duckdb", "by_region": "duckdb",
                                                                      "means": "duckdb"}
    # the rows, once brought in, are exactly what pandas computes
    monkeypatch.undo()
    got = cache.get("means").materialize(cache, 10**6, handle="means").set_index("region")["mean"]
    want = expected.groupby("region")["amount"].mean().sort_index()
    pd.testing.assert_series_equal(got, want, check_names=False)


def test_interpreter_materialises_under_the_cap_and_refuses_over_it(tmp_path, dataset):
    root, frame = dataset
    turns = [call("load_connectors", connector_name="duckdb"),
             call("duckdb__query", sql="SELECT * FROM events", name="everything", lazy=True),
             call("duckdb__query", sql="SELECT region, sum(amount) AS total FROM everything GROUP BY 1",
                  name="small", lazy=True),
             call("python_interpreter", code="small.sort_values('region').total.tolist()"),
             call("python_interpreter", code="len(everything)"),
             {"text": "done"}]
    session = session_for(tmp_path, turns, duckdb_connector({"events": str(root)}),
                          materialize_max_bytes=64 * 1024)
    before = materialize_count()
    blocks = results(session.ask("go"))
    want = frame.groupby("region")["amount"].sum().sort_index().tolist()
    assert not blocks[-2].is_error and json.loads(blocks[-2].content) == want
    over = blocks[-1]
    assert over.is_error and "too big to bring into the kernel" in over.content
    assert "65,536 bytes" in over.content and "aggregate or filter" in over.content
    assert materialize_count() == before + 1  # only the small one came in
    assert session.cache.location("everything") == "duckdb"  # state intact


def test_materialise_streams_and_stops_at_the_cap(dataset):
    root, frame = dataset
    engine = DuckDBEngine({"events": str(root / "part-*.parquet")}, batch_rows=2_048)
    cache = SessionCache()
    relation = engine.lazy(cache, "SELECT id, amount FROM events")
    cache.put("rel", relation)
    exact = relation.materialize(cache, 10 * 1024**2)
    assert len(exact) == len(frame) and exact["id"].sum() == frame["id"].sum()
    with pytest.raises(MaterializeLimitError, match=r"more than 50,000 bytes"):
        relation.materialize(cache, 50_000, handle="rel")
    for bad in (0, -1, True, 1.5, "1GB"):
        with pytest.raises(ValueError, match="max_bytes must be a positive integer"):
            relation.materialize(cache, bad)


def test_a_query_joins_a_cached_pandas_frame_and_a_lazy_handle(tmp_path, dataset):
    root, frame = dataset
    targets = pd.DataFrame({"region": ["north", "south", "east"], "target": [1.0, 2.0, 3.0]})
    turns = [call("load_connectors", connector_name="duckdb"),
             call("duckdb__query", sql="SELECT region, avg(amount) AS mean FROM events GROUP BY 1", name="means",
                  lazy=True),
             call("duckdb__query", sql="SELECT m.region, m.mean - t.target AS gap FROM means m "
                                       "JOIN targets t USING (region) ORDER BY 1", name="gaps"),
             call("duckdb__query", sql="SELECT * FROM means JOIN targets USING (region)", name="lazy_gaps",
                  lazy=True),
             {"text": "done"}]
    session = session_for(tmp_path, turns, duckdb_connector({"events": str(root / "*.parquet")}))
    session.cache.put("targets", targets)
    blocks = results(session.ask("go"))
    assert not any(b.is_error for b in blocks), [b.content for b in blocks]
    gaps = session.cache.get("gaps")
    means = frame.groupby("region")["amount"].mean()
    want = sorted((r, means[r] - t) for r, t in zip(targets.region, targets.target))
    assert list(gaps.region) == [r for r, _ in want]
    assert list(gaps.gap) == pytest.approx([g for _, g in want])
    assert session.cache.location("gaps") == "memory" and session.cache.location("lazy_gaps") == "duckdb"
    # the lazy join remembers the frame's exact value: retiring it makes the chain refuse, not guess
    session.cache.retire("targets")
    session.cache.put("targets", targets.assign(target=99.0))
    with pytest.raises(ToolError, match="retired or replaced"):
        session.cache.get("lazy_gaps").materialize(session.cache, 10**6)


def test_hostile_sql_through_a_lazy_handle_is_still_refused(tmp_path, dataset):
    root, _ = dataset
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2\n")
    target = root / "part-0.parquet"
    before = target.read_bytes()
    engine = DuckDBEngine({"events": str(root / "*.parquet")})
    cache = SessionCache()
    cache.put("base", engine.lazy(cache, "SELECT * FROM events"))
    attacks = [f"SELECT * FROM read_csv('{secret}')",
               f"COPY (SELECT * FROM base) TO '{target}' (FORMAT parquet)",
               "SELECT 1; SELECT 2",
               "SET memory_limit = '100TB'",
               f"SELECT * FROM base, read_text('{secret}')",
               "ATTACH ':memory:' AS x"]
    for sql in attacks:
        with pytest.raises(ToolError):
            engine.lazy(cache, sql)
    assert target.read_bytes() == before
    # a lazy handle of another engine is not silently rebound to this one
    other = DuckDBEngine({"events": str(root / "*.parquet")})
    with pytest.raises(ToolError, match="another duckdb connector"):
        other.lazy(cache, "SELECT count(*) FROM base")


def test_memory_limit_and_private_temp_directory_are_in_force(dataset):
    root, _ = dataset
    engine = DuckDBEngine({"events": str(root)}, memory_limit="64MB", threads=1)
    mode = stat.S_IMODE(os.stat(engine.temp_dir).st_mode)
    assert mode == 0o700 and engine.temp_dir.name.startswith(f"harness-duckdb-{os.getpid()}-")
    settings, _ = engine.query(SessionCache(), "SELECT current_setting('memory_limit') AS m, "
                                               "current_setting('temp_directory') AS t, "
                                               "current_setting('threads') AS n")
    assert settings.m[0] == "61.0 MiB" and settings.t[0] == str(engine.temp_dir) and int(settings.n[0]) == 1
    # a group-by with far more state than 64 MB finishes by spilling into the private directory
    seen = []
    big, _ = engine.query(SessionCache(), "SELECT count(*) AS groups FROM (SELECT i, any_value(i::VARCHAR || "
                                          "repeat('x', 40)) FROM range(3000000) t(i) GROUP BY i)",
                          progress=lambda pct, done: seen.append((pct, done)))
    assert big.groups[0] == 3_000_000
    assert seen and seen[-1] == (None, True)
    with pytest.raises(ToolError, match="lock|configuration|Refused"):
        engine.query(SessionCache(), "SET memory_limit = '100GB'")
    path = engine.temp_dir
    engine.close()
    assert not path.exists()
    with pytest.raises(ValueError, match="memory_limit 'lots' is not valid"):
        DuckDBEngine({}, memory_limit="lots")
    for bad in (0, True, "2"):
        with pytest.raises(ValueError, match="threads"):
            DuckDBEngine({}, threads=bad)


def test_datasets_accept_globs_and_directories_of_one_kind(tmp_path, dataset):
    root, frame = dataset
    for view, where in (("by_glob", str(root / "part-*.parquet")), ("by_dir", str(root))):
        engine = DuckDBEngine({view: where})
        got, _ = engine.query(SessionCache(), f"SELECT count(*) AS n, sum(id) AS s FROM {view}")
        assert (got.n[0], got.s[0]) == (len(frame), frame.id.sum())
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    frame.head(3).to_csv(mixed / "a.csv", index=False)
    frame.head(3).to_parquet(mixed / "b.parquet")
    with pytest.raises(ValueError, match="one kind"):
        DuckDBEngine({"m": str(mixed)})
    with pytest.raises(ValueError, match="matches no files"):
        DuckDBEngine({"m": str(tmp_path / "nothing-*.parquet")})
    (mixed / "b.parquet").unlink()
    (mixed / "c.csv").write_text("id,region,amount\n7,north,1.5\n")
    csv, _ = DuckDBEngine({"m": str(mixed / "*.csv")}).query(SessionCache(), "SELECT count(*) AS n FROM m")
    assert csv.n[0] == 4


def test_a_count_past_the_budget_is_skipped_not_estimated(dataset, monkeypatch):
    root, frame = dataset
    import importlib

    module = importlib.import_module("harness_magic.core.execution.connectors.duckdb.engine")
    monkeypatch.setattr(module, "COUNT_BUDGET_S", 0.05)
    engine = DuckDBEngine({"events": str(root)})
    cache = SessionCache()
    # a count that cannot finish within the budget on any machine (10^11 rows), whose head is instant
    relation = engine.lazy(cache, "SELECT a.id FROM events a, range(100000000) r WHERE a.id < 1000")
    cache.put("slow", relation)
    snap = cache.snapshot("slow")
    # past the budget: no number pretends to be the count; what the snapshot saw is a lower bound
    assert "rows_estimated" not in snap and snap["count_skipped"] is True
    assert snap["shape"] == [None, 1] and snap["rows_at_least"] == module.ONE_PASS_MAX_ROWS + 1
    assert len(snap["sample"]) == 5 and relation.result is None
    assert relation.rows_phrase() == f"at least {module.ONE_PASS_MAX_ROWS + 1:,}"


def test_the_plan_is_read_as_text_inside_a_notebook_kernel(monkeypatch):
    """Under Jupyter DuckDB's ``explain()`` displays HTML and returns "": the engine must ask for text."""
    import importlib

    module = importlib.import_module("harness_magic.core.execution.connectors.duckdb.engine")
    monkeypatch.setattr(importlib.import_module("_duckdb"), "__jupyter__", True, raising=False)
    monkeypatch.setattr(importlib.import_module("duckdb._relation"), "_display_html",
                        lambda *a, **k: pytest.fail("a query plan was displayed in the cell"))
    groups = module.ONE_PASS_MAX_ROWS + 10
    # an aggregate with more groups than a non-aggregate's snapshot reads: kept whole only if the plan was read
    relation = DuckDBEngine().lazy(SessionCache(), f"SELECT range % {groups} AS k, count(*) AS n "
                                                   f"FROM range({groups + 5}) GROUP BY 1")
    assert (relation.rows, relation.rows_estimated, relation.count_skipped) == (groups, False, False)
    assert relation.result is not None


def test_query_progress_reaches_the_harness_as_events(tmp_path, dataset):
    root, _ = dataset
    turns = [call("load_connectors", connector_name="duckdb"),
             call("duckdb__query", sql="SELECT count(*) AS n FROM (SELECT a.id FROM events a, range(60) r "
                                       "WHERE a.amount * r.range > 1)"),
             {"text": "done"}]
    session = session_for(tmp_path, turns, duckdb_connector({"events": str(root)}))
    events = []
    session.subscribe(events.append)
    assert session.ask("go").ok
    progress = [e for e in events if isinstance(e, EngineProgress)]
    assert progress and progress[-1].done and progress[-1].engine == "duckdb"


def test_agent_pull_and_agent_vars_of_a_lazy_handle(tmp_path, dataset):
    """In IPython: %agent_vars shows the engine as location; %agent_pull obeys the cap and --max-bytes."""
    import subprocess
    import sys
    import textwrap

    root, frame = dataset
    driver = textwrap.dedent(f"""\
        import json
        from IPython.core.interactiveshell import InteractiveShell
        from harness_magic.core.execution.connectors.duckdb.engine import DuckDBEngine
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "harness_magic")
        shell.run_line_magic("config", 'AgentMagics.sandbox = "inprocess"')
        shell.run_line_magic("config", "AgentMagics.materialize_max_bytes = 100000")
        magics = shell.magics_manager.registry["AgentMagics"]
        cache = magics.session.cache
        engine = DuckDBEngine({{"events": {str(root)!r}}})
        cache.put("everything", engine.lazy(cache, "SELECT * FROM events"))
        cache.put("small", engine.lazy(cache, "SELECT region, count(*) AS n FROM events GROUP BY 1"))
        shell.run_line_magic("agent_vars", "")
        shell.run_line_magic("agent_pull", "small got_small")
        print("SMALL", sorted(shell.user_ns["got_small"].n.tolist()))
        result = shell.run_cell("%agent_pull everything got_all")
        print("REFUSED", "got_all" not in shell.user_ns)
        shell.run_line_magic("agent_pull", "everything got_all --max-bytes 100000000")
        print("ALL", len(shell.user_ns["got_all"]))
        shell.run_cell("%agent_pull small x --max-bytes 0")
    """)
    out = subprocess.run([sys.executable, "-c", driver], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    assert "duckdb" in text.split("SMALL")[0]  # the listing's "where" column names the engine
    assert f"SMALL {[ROWS_PER_FILE] * 4}" in text
    assert "REFUSED True" in text and "100,000 bytes" in text and "--max-bytes N" in text
    assert f"ALL {len(frame)}" in text
    assert "--max-bytes must be a number of bytes >= 1, got 0" in text


def test_a_lazy_handle_reaches_the_sandboxed_worker_as_a_frame(tmp_path, dataset):
    """The default backend: the materialised rows cross into the confined worker exactly."""
    root, frame = dataset
    turns = [call("load_connectors", connector_name="duckdb"),
             call("duckdb__query", sql="SELECT region, sum(amount) AS total FROM events GROUP BY 1", name="totals",
                  lazy=True),
             call("python_interpreter", code="save('pulled', totals.sort_values('region').reset_index(drop=True))"),
             {"text": "done"}]
    adapter = ProviderAdapter("scripted/lazy", transport=ScriptedModel(turns))
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="worker"), adapter=adapter)
    session.add_connector(duckdb_connector({"events": str(root)}))
    try:
        blocks = results(session.ask("go"))
        assert not blocks[-1].is_error, blocks[-1].content
        want = frame.groupby("region", as_index=False)["amount"].sum().rename(columns={"amount": "total"})
        pd.testing.assert_frame_equal(session.cache.get("pulled"), want)
        assert session.cache.location("totals") == "duckdb"
    finally:
        session.close()


def test_snapshot_strategy_follows_the_plan(dataset):
    """Aggregating plans are computed whole into an engine table; others are read up to ONE_PASS_MAX_ROWS + 1."""
    import importlib

    module = importlib.import_module("harness_magic.core.execution.connectors.duckdb.engine")
    root, frame = dataset
    engine = DuckDBEngine({"events": str(root)})
    con = engine.connect(SessionCache(), "events")
    try:
        def aggregates(sql):
            return module._aggregates(con.sql(sql).explain(format="text"))

        assert aggregates("SELECT region, count(*) FROM events GROUP BY 1")
        assert aggregates("SELECT DISTINCT region FROM events")
        assert aggregates("SELECT count(*) AS n FROM events WHERE amount > 3")
        assert aggregates("SELECT region, n FROM (SELECT region, count(*) AS n FROM events GROUP BY 1) ORDER BY n")
        assert not aggregates("SELECT * FROM events ORDER BY amount LIMIT 3")
        assert not aggregates("SELECT * FROM events WHERE amount > 3")
        assert not aggregates("SELECT range AS id FROM range(5000000)")
    finally:
        con.close()
    cache = SessionCache()
    for sql, rows in (("SELECT region, count(*) AS n FROM events GROUP BY 1", 4),
                      ("SELECT * FROM events WHERE amount > 3", int((frame.amount > 3).sum())),
                      ("SELECT * FROM events ORDER BY amount LIMIT 3", 3)):
        relation = engine.lazy(cache, sql)
        snap = cache.snapshot(cache.put("r", relation))
        assert snap["shape"][0] == rows and "rows_estimated" not in snap and "count_skipped" not in snap
        assert snap["sample"] and relation.result is not None  # computed whole: kept for pulls


def test_a_handle_living_in_another_engine_is_named_not_silently_skipped(dataset):
    root, _ = dataset
    engine = DuckDBEngine({"events": str(root)})
    cache = SessionCache()
    here = engine.lazy(cache, "SELECT region, amount FROM events")
    elsewhere = type("ElsewhereRelation", (LazyRelation,), {"__harness_engine__": "spark"})
    cache.put("remote", elsewhere(object(), here.sql, {}, {}, dict(here._info)))
    cache.put("local", pd.DataFrame({"region": ["north"], "target": [1.0]}))
    with pytest.raises(ToolError, match="`remote` lives in spark, not in duckdb"):
        engine.query(cache, "SELECT * FROM remote JOIN local USING (region)")
    joined, _ = engine.query(cache, "SELECT count(*) AS n FROM local")  # the rest still works
    assert joined.n[0] == 1
    # a connection over every readable handle leaves the foreign one out instead of failing
    con = engine.connect(cache, None)
    try:
        assert con.sql("SELECT count(*) FROM local").fetchall() == [(1,)]
    finally:
        con.close()


def test_a_reused_handle_name_in_a_chain_is_refused_not_guessed(dataset):
    root, frame = dataset
    engine = DuckDBEngine({"events": str(root)})
    cache = SessionCache()
    cache.put("a", engine.lazy(cache, "SELECT * FROM events WHERE amount < 10"))
    cache.put("b", engine.lazy(cache, "SELECT count(*) AS n FROM a"))
    cache.retire("a")
    cache.put("a", engine.lazy(cache, "SELECT * FROM events WHERE amount >= 10"))
    with pytest.raises(ToolError, match="`a` names two different values"):
        engine.query(cache, "SELECT * FROM a, b")
    alone, _ = engine.query(cache, "SELECT n FROM b")  # b still means what it meant
    assert alone.n[0] == (frame.amount < 10).sum() == cache.get("b").materialize(cache, 10**6).n[0]


def test_config_entry_and_list_tables_show_datasets_and_lazy_handles(tmp_path, dataset):
    from harness_magic.core.execution.connectors import connectors_from_config

    root, frame = dataset
    registry = connectors_from_config([{"type": "duckdb", "files": {"events": str(root / "*.parquet")},
                                        "memory_limit": "128MB", "threads": 1}])
    engine = registry["duckdb"].engine
    assert (engine.memory_limit, engine.threads, len(engine.sources["events"][1])) == ("128MB", 1, FILES)
    turns = [call("load_connectors", connector_name="duckdb"),
             call("duckdb__query", sql="SELECT * FROM events WHERE region = 'north'", name="north", lazy=True),
             call("duckdb__list_tables"), {"text": "done"}]
    session = session_for(tmp_path, turns, registry["duckdb"])
    listing = json.loads(results(session.ask("go"))[-1].content)
    assert {"name": "events", "kind": "file", "path": "*.parquet", "files": FILES} in listing
    assert {"name": "north", "kind": "lazy handle", "rows": int((frame.region == "north").sum())} in listing
    with pytest.raises(ValueError, match="memory_limit"):
        connectors_from_config([{"type": "duckdb", "files": {}, "memory_limit": "-5 parsecs"}])


def test_materialise_stops_at_the_row_cap_with_an_engine_first_hint(dataset):
    root, frame = dataset
    engine = DuckDBEngine({"events": str(root)}, batch_rows=2_048)
    cache = SessionCache()
    relation = engine.lazy(cache, "SELECT id, amount FROM events")
    cache.put("rel", relation)
    exact = relation.materialize(cache, 10 * 1024**2, max_rows=len(frame))  # exactly at the cap: allowed
    assert len(exact) == len(frame)
    before = materialize_count()
    with pytest.raises(MaterializeLimitError, match=r"more than 5,000 rows") as info:
        relation.materialize(cache, 10 * 1024**2, max_rows=5_000, handle="rel")
    assert info.value.limit == "rows" and info.value.handle == "rel"
    assert "materialize_max_rows" in str(info.value) and "aggregate or filter it there" in str(info.value)
    assert materialize_count() == before  # nothing came in
    for bad in (0, -1, True, 1.5, "10", 2**63):
        with pytest.raises(ValueError, match=r"max_rows must be a positive integer \(1 to"):
            relation.materialize(cache, 10**6, max_rows=bad)


def test_interpreter_obeys_the_row_cap_and_hostile_row_caps_are_refused(tmp_path, dataset):
    root, frame = dataset
    turns = [call("load_connectors", connector_name="duckdb"),
             call("duckdb__query", sql="SELECT id FROM events", name="ids", lazy=True),
             call("duckdb__query", sql="SELECT region, count(*) AS n FROM events GROUP BY 1", name="counts",
                  lazy=True),
             call("python_interpreter", code="int(counts.n.sum())"),
             call("python_interpreter", code="len(ids)"),
             {"text": "done"}]
    # the byte cap is generous: only the row cap can stop `ids`
    session = session_for(tmp_path, turns, duckdb_connector({"events": str(root)}),
                          materialize_max_rows=1_000, materialize_max_bytes=1024**3)
    blocks = results(session.ask("go"))
    assert not blocks[-2].is_error and json.loads(blocks[-2].content) == len(frame)
    assert blocks[-1].is_error and "more than 1,000 rows" in blocks[-1].content
    assert "materialize_max_rows" in blocks[-1].content and "aggregate or filter" in blocks[-1].content
    assert session.cache.location("ids") == "duckdb"
    for bad in (0, -5, True, 2.5, "1000", None, 2**64):
        with pytest.raises(ValueError, match="materialize_max_rows must be a positive integer"):
            AgentConfig(materialize_max_rows=bad)


def test_agent_pull_max_rows_raises_the_row_cap_and_refuses_hostile_values(tmp_path, dataset):
    import subprocess
    import sys
    import textwrap

    root, frame = dataset
    driver = textwrap.dedent(f"""\
        from IPython.core.interactiveshell import InteractiveShell
        from harness_magic.core.execution.connectors.duckdb.engine import DuckDBEngine
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "harness_magic")
        shell.run_line_magic("config", 'AgentMagics.sandbox = "inprocess"')
        shell.run_line_magic("config", "AgentMagics.materialize_max_rows = 1000")
        magics = shell.magics_manager.registry["AgentMagics"]
        cache = magics.session.cache
        engine = DuckDBEngine({{"events": {str(root)!r}}})
        cache.put("ids", engine.lazy(cache, "SELECT id FROM events"))
        shell.run_cell("%agent_pull ids got")
        print("REFUSED", "got" not in shell.user_ns)
        for bad in ["-5", "0", "abc", "1.5", "1e400", "99999999999999999999999", "nan"]:
            print("BAD", bad)
            shell.run_cell("%agent_pull ids got --max-rows " + bad)
            print("STILL", "got" not in shell.user_ns)
        shell.run_cell("%config AgentMagics.materialize_max_rows = -1")
        print("TRAIT", magics.materialize_max_rows)
        shell.run_line_magic("agent_pull", "ids got --max-rows 1e6")
        print("ALL", len(shell.user_ns["got"]))
    """)
    out = subprocess.run([sys.executable, "-c", driver], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    assert "REFUSED True" in text and "more than 1,000 rows" in text and "--max-rows N" in text
    assert "--max-rows must be a number of rows >= 1, got -5" in text
    assert "--max-rows must be a number of rows >= 1, got 0" in text
    assert "--max-rows must be a whole number of rows >= 1, got 'abc'" in text
    assert "--max-rows must be a whole number of rows >= 1, got '1.5'" in text
    assert "--max-rows must be a whole number of rows >= 1, got '1e400'" in text
    assert "--max-rows must be a whole number of rows >= 1, got 'nan'" in text
    assert "--max-rows must be at most 9,223,372,036,854,775,807 rows, got 99999999999999999999999" in text
    assert text.count("STILL True") == 7
    assert "materialize_max_rows must be a positive integer (1 to" in text and "TRAIT 1000" in text
    assert f"ALL {len(frame)}" in text


# -- checkpoints ---------------------------------------------------------------------------------


def _checkpointed(tmp_path, dataset):
    """A cache with a frame, a lazy handle over a file view and the frame, and a lazy handle over that one."""
    from harness_magic.core.execution.connectors import ConnectorRegistry

    root, frame = dataset
    registry = ConnectorRegistry([duckdb_connector({"events": str(root)}, name="lake")])
    engine = registry["lake"].engine
    cache = SessionCache()
    cache.put("targets", pd.DataFrame({"region": ["north", "south"], "target": [1.0, 2.0]}))
    cache.put("joined", engine.lazy(cache, "SELECT e.region, e.amount - t.target AS gap FROM events e "
                                           "JOIN targets t USING (region)"))
    cache.put("by_region", engine.lazy(cache, "SELECT region, sum(gap) AS gap FROM joined GROUP BY 1 ORDER BY 1"))
    cache.save(tmp_path / "ckpt")
    return registry, cache


def test_a_checkpoint_keeps_lazy_handles_as_definitions_and_rebinds_them(tmp_path, dataset):
    from harness_magic.core.execution.connectors.duckdb.connector import lazy_rebinder

    registry, cache = _checkpointed(tmp_path, dataset)
    manifest = json.loads((tmp_path / "ckpt" / "manifest.json").read_text())
    rows = {row["name"]: row for row in manifest["entries"]}
    assert rows["joined"]["definition"]["connector"] == "lake" and "file" not in rows["joined"]
    assert set(rows["by_region"]["definition"]) == {"connector", "sql"}
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["manifest.json", "targets.arrow"]
    loaded = SessionCache.load(tmp_path / "ckpt", rebind=lazy_rebinder(registry))
    assert loaded.not_restored == {}
    assert [loaded.location(n) for n in ("joined", "by_region")] == ["duckdb", "duckdb"]
    assert loaded.location("targets") in ("memory", "disk")
    pd.testing.assert_frame_equal(loaded.get("by_region").materialize(loaded, 10**7),
                                  cache.get("by_region").materialize(cache, 10**7))
    assert loaded.snapshot("by_region")["shape"] == [2, 2]


def test_without_its_connector_a_lazy_handle_is_named_and_the_rest_loads(tmp_path, dataset):
    from harness_magic.core.cache import CheckpointWarning
    from harness_magic.core.execution.connectors.duckdb.connector import lazy_rebinder

    registry, cache = _checkpointed(tmp_path, dataset)
    with pytest.warns(CheckpointWarning, match=r"2 engine handle\(s\) not restored: joined .*rebind"):
        loaded = SessionCache.load(tmp_path / "ckpt")
    assert loaded.names() == ["targets"] and set(loaded.not_restored) == {"joined", "by_region"}
    other = duckdb_connector({}, name="other")
    with pytest.warns(CheckpointWarning, match="connector 'lake' is not a configured duckdb connector here "
                                               r"\(duckdb connectors: other\)"):
        loaded = SessionCache.load(tmp_path / "ckpt", rebind=lazy_rebinder([other]))
    assert loaded.names() == ["targets"]
    pd.testing.assert_frame_equal(loaded.get("targets"), cache.get("targets"))


def test_load_checkpoint_chains_the_engines_and_the_spark_rebinder_alone_refuses_duckdb_handles(tmp_path, dataset):
    """The engine packages do not import each other: the Spark rebinder re-binds Spark handles only, and
    the shared ``load_checkpoint`` chains it with the DuckDB one (from a list read twice, too)."""
    from harness_magic.core.cache import CheckpointWarning
    from harness_magic.core.execution.connectors.checkpoint import load_checkpoint
    from harness_magic.core.execution.connectors.spark.connector import spark_rebinder

    registry, cache = _checkpointed(tmp_path, dataset)
    with pytest.warns(CheckpointWarning, match="no connector re-binds 'duckdb' handles here"):
        alone = SessionCache.load(tmp_path / "ckpt", rebind=spark_rebinder(registry))
    assert alone.names() == ["targets"] and set(alone.not_restored) == {"joined", "by_region"}
    for connectors in (registry, iter([registry["lake"]])):
        loaded = load_checkpoint(tmp_path / "ckpt", connectors)
        assert loaded.not_restored == {} and loaded.location("by_region") == "duckdb"
        pd.testing.assert_frame_equal(loaded.get("by_region").materialize(loaded, 10**7),
                                      cache.get("by_region").materialize(cache, 10**7))


HOSTILE_DEFINITIONS = [
    "COPY (SELECT 'pwned' AS a) TO '{target}' (FORMAT csv)",
    "SELECT 1; COPY (SELECT 'pwned' AS a) TO '{target}' (FORMAT csv)",
    "SELECT * FROM read_csv('{secret}')",
    "ATTACH '{target}' AS x",
    "INSTALL httpfs",
    "SET enable_external_access = true",
    "CREATE TABLE t AS SELECT 1",
    "SELECT * FROM query('COPY (SELECT 1) TO ''{target}''')",
    "",
]


@pytest.mark.parametrize("sql", HOSTILE_DEFINITIONS)
def test_a_crafted_query_in_a_checkpoint_runs_nothing_the_model_could_not(tmp_path, dataset, sql):
    from harness_magic.core.cache import CheckpointWarning
    from harness_magic.core.execution.connectors.duckdb.connector import lazy_rebinder

    registry, cache = _checkpointed(tmp_path, dataset)
    target, secret = tmp_path / "written.csv", tmp_path / "secret.txt"
    secret.write_text("hunter2\n")
    path = tmp_path / "ckpt" / "manifest.json"
    manifest = json.loads(path.read_text())
    for row in manifest["entries"]:
        if row["name"] == "joined":
            row["definition"]["sql"] = sql.format(target=target, secret=secret)
    path.write_text(json.dumps(manifest))
    with pytest.warns(CheckpointWarning) as caught:
        loaded = SessionCache.load(tmp_path / "ckpt", rebind=lazy_rebinder(registry))
    assert not target.exists(), "nothing was written"
    assert "joined" in loaded.not_restored and "hunter2" not in str(loaded.not_restored)
    assert "hunter2" not in " ".join(str(w.message) for w in caught)
    assert loaded.get("targets").shape == (2, 2)  # the rest loaded


@pytest.mark.parametrize("row_change", [
    {"definition": "SELECT 1"}, {"definition": {"connector": "lake", "sql": 5}}, {"definition": {}},
    {"definition": {"connector": "lake", "sql": "SELECT 1 " + " " * 100_000}}, {"engine": "duck db"},
    {"engine": None}, {"file": "x.parquet"}, {"code": "__import__('os').system('touch pwned')"},
    {"snapshot": "x"}, {"turn": "1"},
])
def test_a_malformed_engine_entry_refuses_the_checkpoint_naming_it(tmp_path, dataset, row_change):
    from harness_magic.core.cache import CheckpointError

    _checkpointed(tmp_path, dataset)
    path = tmp_path / "ckpt" / "manifest.json"
    manifest = json.loads(path.read_text())
    for row in manifest["entries"]:
        if row["name"] == "joined":
            row.update(row_change)
    path.write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="handle 'joined'"):
        SessionCache.load(tmp_path / "ckpt")
    assert not (tmp_path / "pwned").exists()


def test_an_engine_handle_without_a_definition_still_refuses_the_save(tmp_path):
    from harness_magic.core.cache import CheckpointError

    class Opaque:
        __harness_engine__ = "elsewhere"

        def __harness_snapshot__(self, describe_frame):
            return {"type": "lazy_frame", "shape": [None, 0]}

    cache = SessionCache()
    cache.put("keep", pd.DataFrame({"a": [1]}))
    cache.put("opaque", Opaque())
    with pytest.raises(CheckpointError, match="opaque .*elsewhere handle: it has no checkpoint definition"):
        cache.save(tmp_path / "ckpt")
    assert not (tmp_path / "ckpt" / "manifest.json").exists()


def test_each_query_runs_on_its_own_cursor_and_leaves_nothing_behind(dataset):
    """One database per engine; frames, lazy views and snapshot tables of a query vanish with its cursor; the
    only table left is the kept result of a live lazy handle, and it goes with the handle."""
    import gc

    root, frame = dataset
    engine = DuckDBEngine({"events": str(root)})
    cache = SessionCache()
    cache.put("targets", pd.DataFrame({"region": ["north"], "target": [1.0]}))
    cache.put("joined", engine.lazy(cache, "SELECT region, count(*) AS n FROM events JOIN targets USING (region) "
                                           "GROUP BY 1"))  # a reducing plan: its snapshot used a temporary table
    engine.query(cache, "SELECT * FROM joined")
    listing_sql = ("SELECT (SELECT coalesce(list(table_name), []) FROM duckdb_tables()) AS tables, "
                   "(SELECT list(view_name) FROM duckdb_views() WHERE NOT internal) AS v")
    listing, _ = engine.query(SessionCache(), listing_sql)
    assert list(listing.tables[0]) == [cache.get("joined").result] and list(listing.v[0]) == ["events"]
    cache.retire("joined")
    gc.collect()
    listing, _ = engine.query(SessionCache(), listing_sql)
    assert list(listing.tables[0]) == [] and list(listing.v[0]) == ["events"]
    with pytest.raises(ToolError, match="targets"):
        engine.query(SessionCache(), "SELECT * FROM targets")  # another cache: the frame is not there
    engine.close()
    with pytest.raises(ToolError, match="closed"):
        engine.query(cache, "SELECT 1")


def test_a_lazy_handle_resolved_without_a_cache_reports_its_input_gone() -> None:
    """No cache at all: a lazy handle built on a cached frame is refused as retired, never a TypeError."""
    from harness_magic.core.execution.connectors.lazy import LazyRelation, resolve_inputs
    from harness_magic.core.execution.tools import ToolError

    engine = object()
    lazy = LazyRelation(engine, "select * from t", {"t": "v1"}, {}, {"columns": ["a"], "rows": 1, "head": []})
    with pytest.raises(ToolError, match="`t`, which was retired or replaced"):
        resolve_inputs(None, (), engine, "duckdb", lazy)
