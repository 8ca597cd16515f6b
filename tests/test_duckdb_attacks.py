"""DuckDB file-write attacks: configured files stay byte-identical, nothing new appears on disk.

Each statement goes through ``duckdb__query`` (refused or failing) and
straight into :meth:`DuckDBEngine.query` with the classifier skipped — what
the engine itself enforces: external access is off and the configuration
locked; DuckDB reaches configured Parquet files only through a read-only file
system (opened ``O_RDONLY``, writes refused) and CSV files through Arrow
datasets Python opened.
"""

from __future__ import annotations

import hashlib

import pandas as pd
import pytest

from harness_magic.core.cache import SessionCache
from harness_magic.core.execution.connectors import ConnectorRegistry, duckdb_connector
from harness_magic.core.execution.connectors.duckdb.engine import DuckDBEngine
from harness_magic.core.agent.loop import Harness
from harness_magic.core.providers.offline import ScriptedModel
from harness_magic.core.providers.adapter import ProviderAdapter
from harness_magic.core.execution.tools import ToolError

ATTACKS = [
    "COPY (SELECT 1 AS a) TO '{url}' (USE_TMP_FILE false)",
    "COPY (SELECT 1 AS a) TO '{url}' (FORMAT csv, USE_TMP_FILE false)",
    "COPY sales_pq TO '{url}'",
    "COPY (SELECT 1 AS a) TO '{url_root}/new.parquet'",
    "COPY sales_csv TO '{csv}' (USE_TMP_FILE false)",
    "COPY (SELECT 1 AS a) TO '{pq}' (FORMAT parquet, USE_TMP_FILE false)",
    "COPY sales_pq TO '{csv}' (HEADER false)",
    "SELECT 1; COPY sales_csv TO '{csv}' (USE_TMP_FILE false)",
    "SELECT $$ [ $$; COPY sales_csv TO '{csv}' (USE_TMP_FILE false)",
    "SELECT 1 AS é$a$; COPY sales_csv TO '{csv}'; SELECT 1 AS é$a$",
    "SELECT '`'; COPY sales_csv TO '{csv}'; SELECT '`'",
    "COPY sales_csv TO '{root}/new.csv'",
    "COPY sales_csv FROM '{secret}'",
    "EXPORT DATABASE '{root}/export'",
    "ATTACH '{root}/attached.duckdb' AS x",
    "ATTACH '{pq}' AS y",
    "INSTALL httpfs",
    "FORCE INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "RESET enable_external_access",
    "SET allowed_paths = ['/']",
    "SET profiling_output = '{csv}'",
    "SELECT * FROM read_csv('{secret}')",
    "SELECT * FROM read_text('{secret}')",
    "SELECT * FROM read_csv('{csv}')",
    "SELECT * FROM query('COPY sales_csv TO ''{csv}''')",
    "CREATE TABLE t AS SELECT * FROM sales_csv",
    "EXPLAIN ANALYZE COPY sales_csv TO '{csv}'",
]


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def files(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    frame = pd.DataFrame({"region": ["north", "south"], "amount": [10, 20]})
    frame.to_csv(root / "sales.csv", index=False)
    frame.to_parquet(root / "sales.parquet")
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2\n")
    return {"root": root, "csv": root / "sales.csv", "pq": root / "sales.parquet", "secret": secret}


def disk(files):
    found = {str(p): digest(p) for p in sorted(files["root"].rglob("*")) if p.is_file()}
    return {**found, "secret": digest(files["secret"])}


def render(attack, files, engine=None):
    """The attack's SQL; ``{url}`` is the read-only file system's name for the configured Parquet file."""
    url = engine.parquet_urls()["sales_pq"][0] if engine is not None else "harness-ro-0://sales_pq/0.parquet"
    return attack.format(**{k: str(v) for k, v in files.items()}, url=url, url_root=url.rsplit("/", 1)[0])


def test_the_corpus_covers_the_file_write_forms():
    assert len(ATTACKS) >= 20 and sum("COPY" in a for a in ATTACKS) >= 8


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_file_attack_through_the_tool_is_refused_and_changes_no_file(tmp_path, files, attack):
    before = disk(files)
    registry = ConnectorRegistry([duckdb_connector({"sales_csv": files["csv"], "sales_pq": files["pq"]})])
    sql = render(attack, files, registry["duckdb"].engine)
    turns = [{"tool_calls": [{"name": "load_connectors", "arguments": {"connector_name": "duckdb"}}]},
             {"tool_calls": [{"name": "duckdb__query", "arguments": {"sql": sql}}]}, {"text": "done"}]
    harness = Harness(ProviderAdapter("scripted/duck", transport=ScriptedModel(turns)), "sys", [],
                      run_dir=str(tmp_path / "runs"), cache=SessionCache())
    registry.install(harness)
    result = harness.run_result("go")
    block = [b for m in result.messages for b in m.content if getattr(b, "type", "") == "tool_result"][-1]
    assert block.is_error and "hunter2" not in block.content
    assert disk(files) == before


@pytest.mark.parametrize("attack", ATTACKS)
def test_the_engine_alone_cannot_write_a_file(files, attack):
    """Classifier skipped: DuckDB itself has no file access."""
    engine = DuckDBEngine({"sales_csv": files["csv"], "sales_pq": files["pq"]})
    before = disk(files)
    try:
        frame, _ = engine.query(SessionCache(), render(attack, files, engine))
        assert "hunter2" not in frame.to_string()
    except ToolError:
        pass
    assert disk(files) == before


def test_configured_files_are_still_readable(files):
    engine = DuckDBEngine({"sales_csv": files["csv"], "sales_pq": files["pq"]})
    frame, _ = engine.query(SessionCache(), "SELECT c.region, c.amount + p.amount AS twice FROM sales_csv c "
                                            "JOIN sales_pq p USING (region) ORDER BY 1")
    assert frame.to_dict("list") == {"region": ["north", "south"], "twice": [20, 40]}


def test_only_one_statement_runs_per_call(files):
    engine = DuckDBEngine({"sales_csv": files["csv"]})
    with pytest.raises(ToolError, match="2 statements"):
        engine.query(SessionCache(), "CREATE TABLE x AS SELECT 1; SELECT * FROM x")


def test_a_write_through_the_read_only_file_system_fails_with_a_clear_error(files):
    engine = DuckDBEngine({"sales_pq": files["pq"]})
    url = engine.parquet_urls()["sales_pq"][0]
    before = disk(files)
    with pytest.raises(ToolError, match=r"duckdb error: PermissionError: .*read-only"):
        engine.query(SessionCache(), f"COPY (SELECT 1 AS a) TO '{url}' (USE_TMP_FILE false)")
    assert disk(files) == before
    frame, _ = engine.query(SessionCache(), f"SELECT sum(amount) AS s FROM read_parquet('{url}')")
    assert frame.s.tolist() == [30]  # the allowed name reads the configured file, nothing else


def test_the_read_only_file_system_opens_configured_files_for_reading_only(files, tmp_path):
    import io
    import os

    from harness_magic.core.execution.connectors.duckdb.readonly_fs import ReadOnlyFiles

    fs = ReadOnlyFiles({"sales/0.parquet": files["pq"]})
    url = fs.url("sales/0.parquet")
    before = disk(files)
    with fs.open(url, "rb") as handle:
        assert handle.read(4) == b"PAR1"
        raw = handle if not hasattr(handle, "raw") else handle.raw
        fd = getattr(raw, "_fd", None)
        if fd is not None:  # the OS itself refuses writes through the descriptor
            with pytest.raises(OSError):
                os.write(fd, b"x")
    for mode in ("wb", "ab", "r+b", "w"):
        with pytest.raises(PermissionError, match="read-only"):
            fs.open(url, mode)
    for call in (lambda: fs.rm(url), lambda: fs.mv(url, url + ".x"), lambda: fs.touch(url),
                 lambda: fs.mkdir(fs.url("x")), lambda: fs.pipe_file(url, b"x"), lambda: fs.cp_file(url, url + "2")):
        with pytest.raises(PermissionError):
            call()
    for unknown in (fs.url("../secret.txt"), str(files["secret"]), fs.url("sales/1.parquet"), "/etc/passwd"):
        with pytest.raises(FileNotFoundError):
            fs.open(unknown, "rb")
    assert fs.ls(fs.url(""), detail=False) == ["sales/0.parquet"]
    assert disk(files) == before
    assert isinstance(fs.open(url, "rb"), io.IOBase)
