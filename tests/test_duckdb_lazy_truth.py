"""Lazy handles tell the truth and run once, whatever the count budget (real DuckDB, executions counted).

Issue 22 point 9: a 4-row aggregate whose count passed the budget was shown as
"about 31,606,027 rows" beside its own 4-row sample, and its query ran three
times (snapshot, head, pull). Here the budget is made tiny so the "past the
budget" path runs on any machine; executions are counted by the side-effect
UDF ``tick`` of :mod:`test_duckdb_lazy_once` (DuckDB calls it for every row it
really computes).
"""

from __future__ import annotations

import importlib
import json

import pandas as pd
import pytest

from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.connectors.lazy import LazyRelation, MaterializeLimitError
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.config import AgentConfig
from harness_magic.core.session import AgentSession
from test_duckdb_lazy_once import counting_connector, counting_engine

module = importlib.import_module("harness_magic.core.execution.connectors.duckdb.engine")
ROWS = 400_000
FOUR = "SELECT x % 4 AS k, sum(tick(x)) AS s, count(*) AS n FROM t GROUP BY 1"
"""A 4-row aggregate over ROWS rows: the shape of the issue's 5e7-row case."""
LONG = "SELECT tick(a.range) AS y FROM range(1000) a, range(100000000) b"
"""10^11 rows: no count of them finishes within any budget here; the first rows come at once."""
TINY_BUDGET_S = 1e-6
"""A count budget no count can meet: every budget-dependent decision takes its 'past the budget' branch."""


@pytest.fixture
def tiny_budget(monkeypatch):
    monkeypatch.setattr(module, "COUNT_BUDGET_S", TINY_BUDGET_S)


def frame_cache() -> SessionCache:
    cache = SessionCache()
    cache.put("t", pd.DataFrame({"x": range(ROWS)}))
    return cache


def expected_four() -> list[int]:
    return [sum(range(k, ROWS, 4)) for k in range(4)]


def test_a_four_row_aggregate_past_the_budget_is_four_rows_and_runs_once(tiny_budget):
    engine, seen = counting_engine()
    cache = frame_cache()
    relation = engine.lazy(cache, FOUR)
    handle = cache.put("by_k", relation)
    snap = cache.snapshot(handle)
    assert snap["shape"] == [4, 3] and len(snap["sample"]) == 4
    assert "rows_estimated" not in snap and "count_skipped" not in snap and "rows_at_least" not in snap
    assert (relation.rows, relation.rows_estimated, relation.rows_phrase()) == (4, False, "4")
    assert seen[0] == ROWS  # created and snapshotted: one run
    for _ in range(2):
        frame = relation.materialize(cache, 10**6, handle=handle)
        assert frame.sort_values("k").s.tolist() == expected_four() and frame.n.sum() == ROWS
    assert seen[0] == ROWS  # pulled twice: still one run
    assert engine.result_tables() == [relation.result]


def test_a_short_result_of_a_plain_query_is_its_exact_count_past_the_budget(tiny_budget):
    """Not an aggregate: the snapshot's read ends within its limit, so the rows it read are the count."""
    engine, seen = counting_engine()
    cache = frame_cache()
    relation = engine.lazy(cache, "SELECT tick(x) AS y FROM t WHERE x % 100000 = 7")
    snap = cache.snapshot(cache.put("few", relation))
    assert snap["shape"] == [4, 1] and len(snap["sample"]) == 4 and "count_skipped" not in snap
    assert "rows_estimated" not in snap and relation.result is not None
    computed = seen[0]
    assert relation.materialize(cache, 10**6).y.tolist() == [7, 100_007, 200_007, 300_007]
    assert seen[0] == computed  # the pull read the kept rows


def test_a_long_result_past_the_budget_says_count_skipped_never_an_estimate(tiny_budget):
    limit = module.ONE_PASS_MAX_ROWS
    engine, seen = counting_engine(batch_rows=65_536)
    cache = SessionCache()
    relation = engine.lazy(cache, LONG)
    snap = cache.snapshot(cache.put("long", relation))
    assert "rows_estimated" not in snap and snap["count_skipped"] is True
    assert snap["shape"] == [None, 1] and snap["rows_at_least"] == limit + 1 and len(snap["sample"]) == 5
    assert relation.result is None  # too long to hold twice: only the head was kept
    # the snapshot read the first limit + 1 rows (DuckDB computes whole vectors), not the whole result
    assert limit + 1 <= seen[0] < limit + 1 + 3 * 2048
    with pytest.raises(MaterializeLimitError, match=rf"more than 1,000 rows .* of at least {limit + 1:,} rows"):
        relation.materialize(cache, 10**9, max_rows=1_000, handle="long")


def test_a_long_result_counted_within_the_budget_is_exact():
    engine, _ = counting_engine()
    relation = engine.lazy(SessionCache(), f"SELECT range AS y FROM range({2 * module.ONE_PASS_MAX_ROWS})")
    assert (relation.rows, relation.rows_estimated, relation.count_skipped) == (2 * module.ONE_PASS_MAX_ROWS,
                                                                                False, False)


@pytest.mark.parametrize("info, want", [
    # an engine that estimated past its budget but whose head is shorter than its limit: the head is the result
    ({"rows": 31_606_027, "rows_estimated": True, "head_limit": 5}, (4, False, False, None)),
    ({"rows": None, "rows_estimated": True, "head_limit": 5}, (4, False, False, None)),
    # an estimate below the sample it stands beside is dropped: at least the sample's rows
    ({"rows": 3, "rows_estimated": True}, (None, False, True, 4)),
    # an estimate the sample does not contradict stays, marked
    ({"rows": 31_606_027, "rows_estimated": True}, (31_606_027, True, False, None)),
])
def test_shared_rule_no_count_contradicts_the_sample(info, want):
    """The rule every engine's relation obeys (Spark's SparkRelation is a LazyRelation): checked on snapshots."""
    head = pd.DataFrame({"k": range(4)})
    relation = LazyRelation(object(), "SELECT 1", {}, {}, {"columns": ["k"], "engine_types": {"k": "BIGINT"},
                                                            "head": head, **info})
    got = (relation.rows, relation.rows_estimated, relation.count_skipped, relation.rows_at_least)
    assert got == want
    snap = relation.__harness_snapshot__(lambda frame: {"sample": frame.to_dict("records"), "dtypes": {"k": "int"}})
    assert snap["shape"][0] == want[0] and snap.get("rows_estimated", False) is want[1]
    assert snap.get("count_skipped", False) is want[2] and snap.get("rows_at_least") == want[3]


def _session(tmp_path, turns, connector) -> AgentSession:
    session = AgentSession(AgentConfig(run_dir=str(tmp_path / "runs"), sandbox="inprocess"),
                           adapter=ProviderAdapter("scripted/truth", transport=ScriptedModel(turns)))
    session.add_connector(connector)
    return session


def _results(run) -> list:
    return [b for m in run.messages for b in m.content if getattr(b, "type", "") == "tool_result"]


def test_through_a_session_the_model_sees_four_rows_and_the_query_runs_once(tmp_path, tiny_budget):
    """The path users take: ``duckdb__query(lazy=true)`` from a (scripted) model, listed, then pulled twice."""
    connector, seen = counting_connector()
    code = "int(by_k.s.sum()) * 10 + len(by_k)"
    turns = [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "duckdb"}}]},
             {"tool_calls": [{"name": "duckdb__query", "arguments": {"sql": FOUR, "name": "by_k", "lazy": True}}]},
             {"tool_calls": [{"name": "duckdb__query", "arguments": {
                 "sql": LONG.replace("tick(a.range)", "a.range"), "name": "long", "lazy": True}}]},
             {"tool_calls": [{"name": "duckdb__list_tables", "arguments": {}}]},
             {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]},
             {"tool_calls": [{"name": "python_interpreter", "arguments": {"code": code}}]},
             {"text": "done"}]
    session = _session(tmp_path, turns, connector)
    session.cache.put("t", pd.DataFrame({"x": range(ROWS)}))
    try:
        blocks = _results(session.ask("go"))
        snap = session.cache.snapshot("by_k")
        long_snap = session.cache.snapshot("long")
    finally:
        session.close()
    assert not any(b.is_error for b in blocks), [b.content for b in blocks]
    made, long_made, listed, *pulls = [b.content for b in blocks[1:]]
    assert "(4 rows)" in made and "about" not in made
    assert f"at least {module.ONE_PASS_MAX_ROWS + 1:,}" in long_made and "count was skipped" in long_made
    assert "about" not in long_made
    rows = {row["name"]: row for row in json.loads(listed)} if listed.lstrip().startswith("[") else {
        row["name"]: row for row in map(json.loads, listed.splitlines())}
    assert rows["by_k"]["rows"] == 4 and "rows_estimated" not in rows["by_k"]
    assert rows["long"]["rows"] is None and rows["long"]["count_skipped"] is True
    assert rows["long"]["rows_at_least"] == module.ONE_PASS_MAX_ROWS + 1 and "rows_estimated" not in rows["long"]
    assert snap["shape"] == [4, 3] and "rows_estimated" not in snap and long_snap["count_skipped"] is True
    assert pulls == [str(sum(range(ROWS)) * 10 + 4)] * 2, pulls
    assert seen[0] == ROWS  # created, listed, pulled twice: the aggregate ran once
