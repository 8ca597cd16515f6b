"""Task files name real sources: a SQLite file, a DuckDB file and the files connector by path relative to the
suite, run through the real runner; hostile paths are refused at load time naming the file and the field; every
attempted write (approved, denied, refused by a read tool) is in the result."""

from __future__ import annotations

import json
import os
import sqlite3
import textwrap

import pytest

from harness_magic.evals import SuiteError, load_suite
from harness_magic.evals.runner import ALL_WRONG, run_suite

ROWS = [(1, "North", 10.5), (2, "South", 20.25), (3, "North", 4.0), (4, "East", 7.75)]


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")


@pytest.fixture()
def suite_dir(tmp_path):
    root = tmp_path / "suite"
    data = root / "data"
    (data / "tables").mkdir(parents=True)
    con = sqlite3.connect(data / "shop.sqlite")
    con.execute("CREATE TABLE orders (id INTEGER, region TEXT, revenue REAL)")
    con.executemany("INSERT INTO orders VALUES (?, ?, ?)", ROWS)
    con.commit()
    con.close()
    import duckdb

    con = duckdb.connect(str(data / "warehouse.duckdb"))
    con.execute("CREATE TABLE orders (id INTEGER, region VARCHAR, revenue DOUBLE)")
    con.executemany("INSERT INTO orders VALUES (?, ?, ?)", ROWS)
    con.close()
    (data / "tables" / "orders.csv").write_text("id,region,revenue\n" + "".join(f"{a},{b},{c}\n" for a, b, c in ROWS))
    _write(root / "answers.py", """
        def north_revenue(inputs):
            return sum(r["revenue"] for r in inputs["orders"].to_dict("records") if r["region"] == "North")
    """)
    _write(root / "sqlite_file.yaml", """
        id: sqlite_file
        prompt: "North revenue in the shop database? End with ANSWER: <number>."
        connectors: {sql: {file: data/shop.sqlite, approval: allow}}
        graders:
        - number: {expected: north_revenue, abs_tol: 0.001}
        - no_writes: {}
        - sql: {query: "SELECT count(*) FROM orders", expected: [[4]]}
        scripts:
          reference:
          - load: sql
          - sql: "DELETE FROM orders WHERE region = 'North'"
          - sql: "SELECT sum(revenue) AS s FROM orders WHERE region = 'North'"
          - text: "ANSWER: 14.5"
          wrong:
          - name: deletes
            expect: policy_violation
            turns:
            - load: sql
            - execute: "DELETE FROM orders WHERE region = 'North'"
            - text: "ANSWER: 14.5"
    """)
    _write(root / "duckdb_file.yaml", """
        id: duckdb_file
        prompt: "North revenue in the warehouse? End with ANSWER: <number>."
        connectors: {duckdb: {file: data/warehouse.duckdb}}
        graders:
        - number: {expected: north_revenue, abs_tol: 0.001}
        scripts:
          reference:
          - load: duckdb
          - duckdb: {sql: "SELECT sum(revenue) AS s FROM orders WHERE region = 'North'", name: north}
          - text: "ANSWER: 14.5"
          wrong:
          - name: all_regions
            expect: wrong_answer
            turns:
            - load: duckdb
            - duckdb: {sql: "SELECT sum(revenue) AS s FROM orders", name: total}
            - text: "ANSWER: 42.5"
    """)
    _write(root / "files_root.yaml", """
        id: files_root
        prompt: "Read tables/orders.csv and save it as the handle `orders_copy`."
        connectors: {files: {roots: [data/tables]}}
        graders:
        - sql: {"on": handles, query: "SELECT count(*) FROM orders_copy", expected: [[4]]}
        scripts:
          reference:
          - load: files
          - tool_calls: [{name: files__read, arguments: {path: tables/orders.csv, name: orders_copy}}]
          - text: Saved as orders_copy.
          wrong:
          - name: reads_nothing
            expect: no_answer
            turns:
            - text: I did not read it.
    """)
    return root


def test_real_sources_reference_passes_and_wrong_fails(suite_dir, tmp_path):
    suite = load_suite(suite_dir)
    data = run_suite(suite, "suite:reference", out_dir=tmp_path / "ref")
    failed = [(r["task_id"], r["failure"], [g["detail"] for g in r["grades"]], r["error"]) for r in data["results"]
              if not r["passed"]]
    assert not failed
    wrong = run_suite(suite, ALL_WRONG, out_dir=tmp_path / "wrong")
    assert {r["task_id"]: r["failure"] for r in wrong["results"]} == {
        "sqlite_file": "policy_violation", "duckdb_file": "wrong_answer", "files_root": "no_answer"}


def test_a_write_refused_by_the_read_tool_is_reported(suite_dir, tmp_path):
    data = run_suite(load_suite(suite_dir), "suite:reference", tasks=["sqlite_file"], out_dir=tmp_path)
    result = json.loads(json.dumps(data))["results"][0]
    assert result["passed"]  # nothing was written: the task passes, and the attempt is on record
    (attempt,) = result["write_attempts"]
    assert attempt["outcome"] == "refused" and attempt["tool"] == "sql__query"
    assert "DELETE FROM orders" in attempt["statement"]
    no_writes = next(g for g in result["grades"] if g["kind"] == "no_writes")
    assert "1 attempted and stopped: refused: sql__query: DELETE FROM orders" in no_writes["detail"]


def test_an_approved_write_changes_a_copy_not_the_suite_file(suite_dir, tmp_path):
    data = run_suite(load_suite(suite_dir), ALL_WRONG, tasks=["sqlite_file"], out_dir=tmp_path)
    result = data["results"][0]
    assert [a["outcome"] for a in result["write_attempts"]] == ["approved"]
    con = sqlite3.connect(suite_dir / "data" / "shop.sqlite")
    try:
        assert con.execute("SELECT count(*) FROM orders").fetchone() == (4,)
    finally:
        con.close()


def test_no_writes_attempts_fail_option(suite_dir, tmp_path):
    path = suite_dir / "sqlite_file.yaml"
    path.write_text(path.read_text().replace("- no_writes: {}", "- no_writes: {attempts: fail}"))
    data = run_suite(load_suite(suite_dir), "suite:reference", tasks=["sqlite_file"], out_dir=tmp_path)
    result = data["results"][0]
    assert not result["passed"] and result["failure"] == "policy_violation"


HOSTILE = [
    ("connectors: {sql: {file: ../outside.sqlite}}", "connectors.sql.file", "outside the suite directory"),
    ("connectors: {sql: {file: /etc/passwd}}", "connectors.sql.file", "is absolute"),
    ("connectors: {sql: {file: data/link.sqlite}}", "connectors.sql.file", "symbolic link"),
    ("connectors: {duckdb: {file: data/../../outside.duckdb}}", "connectors.duckdb.file", "outside the suite"),
    ("connectors: {files: {roots: [data/linkdir]}}", "connectors.files.roots[0]", "outside the suite directory"),
    ("connectors: {files: {roots: [/tmp]}}", "connectors.files.roots[0]", "is absolute"),
    ("connectors: {files: {roots: [data/missing]}}", "connectors.files.roots[0]", "no such directory"),
    ("connectors: {files: {roots: data/tables}}", "connectors.files.roots", "non-empty list"),
    ("connectors: {sql: {file: data/tables/orders.csv}}", "connectors.sql.file", "allowed formats"),
    ("connectors: {sql: {file: data/shop.sqlite, database: shop}}", "connectors.sql", "exactly one of"),
    ("inputs: {x: {file: data/link.csv}}", "inputs.x.file", "symbolic link"),
]


@pytest.mark.parametrize("connectors, field, message", HOSTILE)
def test_hostile_source_paths_are_refused(suite_dir, connectors, field, message):
    outside = suite_dir.parent
    (outside / "outside.sqlite").write_bytes((suite_dir / "data" / "shop.sqlite").read_bytes())
    (outside / "outside.duckdb").write_bytes(b"")
    (outside / "secret").mkdir(exist_ok=True)
    (outside / "secret.csv").write_text("a\n1\n")
    os.symlink(outside / "outside.sqlite", suite_dir / "data" / "link.sqlite")
    os.symlink(outside / "secret", suite_dir / "data" / "linkdir")
    os.symlink(outside / "secret.csv", suite_dir / "data" / "link.csv")
    for name in ("sqlite_file", "duckdb_file", "files_root"):
        (suite_dir / f"{name}.yaml").unlink()
    _write(suite_dir / "hostile.yaml", f"""
        id: hostile
        prompt: hi
        {connectors}
        graders: [{{number: {{expected: 1}}}}]
    """)
    with pytest.raises(SuiteError) as info:
        load_suite(suite_dir)
    text = str(info.value)
    assert "hostile.yaml" in text and field in text and message in text, text
