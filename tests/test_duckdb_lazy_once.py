"""A lazy DuckDB handle's query runs once from its creation to its pulls (real DuckDB, counted by the engine).

The counter is a vectorised UDF with side effects registered on the engine's
database: DuckDB calls it for every row the query really computes, so the
rows it saw tell how many times the query ran (an optimiser cannot skip a
function declared to have side effects).
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.connectors import duckdb_connector
from harness_magic.core.execution.connectors.duckdb.engine import ONE_PASS_MAX_ROWS, RESULT_TABLE_PREFIX, DuckDBEngine
from harness_magic.core.execution.connectors.lazy import MaterializeLimitError, materialize_count
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession
from harness_magic.core.execution.tools import ToolError

ROWS = 10_000
AGGREGATE = "SELECT x % 10 AS k, sum(tick(x)) AS s, count(*) AS n FROM t GROUP BY 1"


def counting_engine(**kwargs) -> tuple[DuckDBEngine, list[int]]:
    """An engine whose SQL may call ``tick(x)`` (returns x); the list counts the rows DuckDB computed it for."""
    engine = DuckDBEngine(**kwargs)
    return engine, add_counter(engine)


def add_counter(engine: DuckDBEngine) -> list[int]:
    """Register ``tick(x)`` on ``engine``'s database; the list counts the rows DuckDB computes it for."""
    from duckdb.sqltypes import BIGINT

    seen = [0]

    def tick(values):
        seen[0] += len(values)
        return values

    engine._database().create_function("tick", tick, [BIGINT], BIGINT, type="arrow", side_effects=True)
    return seen


def counting_connector() -> tuple[object, list[int]]:
    connector = duckdb_connector()
    return connector, add_counter(connector.engine)


def frame_cache(rows: int = ROWS) -> SessionCache:
    cache = SessionCache()
    cache.put("t", pd.DataFrame({"x": range(rows)}))
    return cache


def expected_sums(rows: int = ROWS) -> list[int]:
    return [sum(range(k, rows, 10)) for k in range(10)]


def test_creating_and_pulling_an_aggregate_runs_its_query_once():
    engine, seen = counting_engine()
    cache = frame_cache()
    relation = engine.lazy(cache, AGGREGATE)
    handle = cache.put("by_k", relation)
    assert seen[0] == ROWS  # the snapshot computed the result once...
    for _ in range(3):  # ...and every pull reads it: the query does not run again
        frame = relation.materialize(cache, 10**6, max_rows=100, handle=handle)
        assert frame.sort_values("k").s.tolist() == expected_sums() and frame.n.sum() == ROWS
    assert seen[0] == ROWS
    assert cache.snapshot(handle)["shape"] == [10, 3]


def test_a_scan_too_big_to_keep_runs_once_per_pull_streamed():
    """A plain scan DuckDB estimates past ONE_PASS_MAX_ROWS is not computed by its snapshot; a pull runs it once."""
    rows = 2 * ONE_PASS_MAX_ROWS
    engine, seen = counting_engine(batch_rows=65_536)
    cache = SessionCache()
    relation = engine.lazy(cache, f"SELECT tick(range) AS y FROM range({rows})")
    assert relation.result is None and relation.rows == rows
    seen[0] = 0
    frame = relation.materialize(cache, 10**9, max_rows=rows)
    assert len(frame) == rows and seen[0] == rows  # every row computed exactly once
    seen[0] = 0
    with pytest.raises(MaterializeLimitError, match=r"more than 100,000 rows .*limit materialize_max_rows"):
        relation.materialize(cache, 10**9, max_rows=100_000, handle="y")
    assert seen[0] < rows  # the stream was cancelled past the cap, not read to the end


def test_the_caps_still_hold_for_a_kept_result():
    engine, seen = counting_engine(batch_rows=1_000)
    cache = frame_cache()
    relation = engine.lazy(cache, "SELECT tick(x) AS y, x::VARCHAR AS label FROM t WHERE x % 2 = 0")
    handle = cache.put("evens", relation)
    assert relation.result is not None and seen[0] == ROWS // 2  # the filter runs first: tick sees the evens
    before = materialize_count()
    with pytest.raises(MaterializeLimitError, match=r"more than 2,000 rows .*of its 5,000 rows") as rows_cap:
        relation.materialize(cache, 10**9, max_rows=2_000, handle=handle)
    assert rows_cap.value.limit == "rows" and "`evens` is too big" in str(rows_cap.value)
    with pytest.raises(MaterializeLimitError, match=r"more than 10,000 bytes .*materialize_max_bytes") as bytes_cap:
        relation.materialize(cache, 10_000, handle=handle)
    assert bytes_cap.value.limit == "bytes"
    assert materialize_count() == before and seen[0] == ROWS // 2
    whole = relation.materialize(cache, 10**9, max_rows=5_000)  # exactly at the cap: allowed
    assert whole.y.tolist() == list(range(0, ROWS, 2)) and whole.label.tolist() == [str(i) for i in whole.y]
    for bad in (0, -1, True, 1.5, "10", 2**63):  # hostile caps are refused before anything is read
        with pytest.raises(ValueError, match=r"max_rows must be a positive integer"):
            relation.materialize(cache, 10**6, max_rows=bad)


def test_a_kept_result_still_refuses_replaced_or_retired_inputs():
    engine, seen = counting_engine()
    cache = frame_cache()
    relation = engine.lazy(cache, AGGREGATE)
    cache.put("by_k", relation)
    cache.retire("t")
    cache.put("t", pd.DataFrame({"x": range(5)}))  # same name, another value
    with pytest.raises(ToolError, match="built on `t`, which was retired or replaced"):
        relation.materialize(cache, 10**6)
    cache.retire("t")
    with pytest.raises(ToolError, match="built on `t`, which was retired or replaced"):
        relation.materialize(cache, 10**6)
    assert seen[0] == ROWS


def test_a_chain_over_a_kept_result_reads_it_instead_of_running_it_again():
    engine, seen = counting_engine()
    cache = frame_cache()
    cache.put("by_k", engine.lazy(cache, AGGREGATE))
    total = engine.lazy(cache, "SELECT sum(s) AS total FROM by_k")
    frame, _ = engine.query(cache, "SELECT k, s FROM by_k ORDER BY k")
    assert seen[0] == ROWS
    assert total.materialize(cache, 10**6).total.tolist() == [sum(range(ROWS))]
    assert frame.s.tolist() == expected_sums()


def test_model_sql_cannot_change_or_drop_a_kept_result(tmp_path):
    """The model may read a kept table (its own rows) but every write to it is refused; the pull stays exact."""
    connector, seen = counting_connector()
    engine = connector.engine
    cache = frame_cache()
    relation = engine.lazy(cache, AGGREGATE)
    cache.put("by_k", relation)
    table = relation.result
    assert table.startswith(RESULT_TABLE_PREFIX)
    hostile = [f'DROP TABLE "{table}"', f'DELETE FROM "{table}"', f'UPDATE "{table}" SET s = 0',
               f'INSERT INTO "{table}" VALUES (99, 1, 1)', f'CREATE OR REPLACE TABLE "{table}" AS SELECT 1 AS k',
               f'ALTER TABLE "{table}" RENAME TO x', f'SELECT 1; DROP TABLE "{table}"',
               f'WITH d AS (DELETE FROM "{table}" RETURNING *) SELECT * FROM d', "SET lock_configuration = false"]
    turns = [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "duckdb"}}]}]
    turns += [{"tool_calls": [{"name": "duckdb__query", "arguments": {"sql": sql}}]} for sql in hostile]
    turns += [{"tool_calls": [{"name": "duckdb__query", "arguments": {"sql": f'SELECT count(*) AS n FROM "{table}"'}}]},
              {"text": "done"}]
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess"),
                           adapter=ProviderAdapter("scripted/once", transport=ScriptedModel(turns)))
    session.cache.put("t", cache.get("t"))
    session.cache.put("by_k", relation)
    session.add_connector(connector)
    try:
        blocks = [b for m in session.ask("go").messages for b in m.content if getattr(b, "type", "") == "tool_result"]
    finally:
        session.close()
    refused = blocks[1:1 + len(hostile)]
    assert all(b.is_error for b in refused), [(sql, b.content) for sql, b in zip(hostile, refused) if not b.is_error]
    assert not blocks[-1].is_error
    pulled = relation.materialize(cache, 10**6)
    assert pulled.sort_values("k").s.tolist() == expected_sums() and len(pulled) == 10 and seen[0] == ROWS


def test_a_kept_result_goes_with_its_last_handle():
    engine, _ = counting_engine()
    cache = frame_cache()
    cache.put("by_k", engine.lazy(cache, AGGREGATE))
    cache.put("total", engine.lazy(cache, "SELECT sum(s) AS total FROM by_k"))
    kept = sorted({cache.get("by_k").result, cache.get("total").result})
    assert engine.result_tables() == kept and len(kept) == 2
    cache.retire("by_k")  # `total` was built on it: its rows stay while `total` lives
    gc.collect()
    assert engine.result_tables() == kept
    cache.retire("total")
    gc.collect()
    assert engine.result_tables() == []
    engine.close()


def test_agent_pull_runs_the_query_of_a_lazy_handle_once(tmp_path):
    """In IPython: creating a lazy aggregate and %agent_pull it (twice) compute the query once; the cap still holds."""
    driver = textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from IPython.core.interactiveshell import InteractiveShell
        from test_support import counting_engine, frame_cache
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "harness_magic")
        shell.run_line_magic("config", 'AgentMagics.sandbox = "inprocess"')
        cache = shell.magics_manager.registry["AgentMagics"].session.cache
        engine, seen = counting_engine()
        cache.put("t", frame_cache().get("t"))
        cache.put("by_k", engine.lazy(cache, {AGGREGATE!r}))
        shell.run_line_magic("agent_pull", "by_k got")
        shell.run_line_magic("agent_pull", "by_k again")
        shell.run_cell("%agent_pull by_k capped --max-rows 5")
        print("SUM", int(shell.user_ns["got"].s.sum()), int(shell.user_ns["again"].n.sum()))
        print("CAPPED", "capped" in shell.user_ns)
        print("RAN", seen[0])
    """)
    (tmp_path / "test_support.py").write_text(
        f"import sys\nsys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})\n"
        "from test_duckdb_lazy_once import counting_engine, frame_cache\n")
    out = subprocess.run([sys.executable, "-c", driver], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    assert f"SUM {sum(range(ROWS))} {ROWS}" in text
    assert "CAPPED False" in text and "more than 5 rows" in text and "--max-rows N" in text
    assert f"RAN {ROWS}" in text


def test_python_naming_a_lazy_handle_in_several_calls_runs_its_query_once(tmp_path):
    connector, seen = counting_connector()
    code = "int(by_k.s.sum())"
    turns = [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "duckdb"}}]},
             {"tool_calls": [{"name": "duckdb__query", "arguments": {"sql": AGGREGATE, "name": "by_k", "lazy": True}}]},
             {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]},
             {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]},
             {"text": "done"}]
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess"),
                           adapter=ProviderAdapter("scripted/once", transport=ScriptedModel(turns)))
    session.cache.put("t", pd.DataFrame({"x": range(ROWS)}))
    session.add_connector(connector)
    try:
        blocks = [b for m in session.ask("go").messages for b in m.content if getattr(b, "type", "") == "tool_result"]
    finally:
        session.close()
    assert [b.content for b in blocks[-2:]] == [str(sum(range(ROWS)))] * 2, [b.content for b in blocks]
    assert seen[0] == ROWS
