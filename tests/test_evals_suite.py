"""The built-in suite end to end: reference scripts all pass, every wrong script fails with its class;
repeats and jobs; the runner's failure classes."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from harness_magic.evals import FAILURE_CLASSES, load_suite
from harness_magic.evals.__main__ import main
from harness_magic.evals.graders import Grade
from harness_magic.evals.runner import ALL_WRONG, classify_failure, run_suite
from harness_magic.evals.stats import pass_hat_k

JOBS = 2  # CI has two cores; attempts spend most of their time in their worker processes


@pytest.fixture(scope="module")
def core():
    return load_suite("core")


def test_core_suite_shape(core):
    assert len(core.tasks) >= 30
    tags = Counter(tag for task in core.tasks for tag in task.tags)
    for needed in ("pandas", "multi_step", "duckdb", "join", "window", "time_zones", "periods", "missing",
                   "duplicates", "chart", "no_writes", "real_data"):
        assert tags[needed] >= 1, needed
    for task in core.tasks:
        assert task.reference is not None and task.wrong, task.id
        assert any(kind != "judge" for kind, _ in task.graders), task.id
    declared = {spec.expect for task in core.tasks for spec in task.wrong}
    assert declared == set(FAILURE_CLASSES)


def test_reference_scripts_all_pass(core, tmp_path):
    data = run_suite(core, "suite:reference", jobs=JOBS, out_dir=tmp_path)
    failed = [(r["task_id"], r["failure"], [g["detail"] for g in r["grades"] if not g["passed"]], r["error"])
              for r in data["results"] if not r["passed"]]
    assert not failed
    assert len(data["results"]) == len(core.tasks)
    for r in data["results"]:
        assert r["turns"] >= 1 and r["input_tokens"] > 0 and r["wall_s"] > 0
        with open(r["run_file"], encoding="utf-8") as handle:  # the run log is linked and is this task's
            first = json.loads(handle.readline())
        assert first["type"] == "run_start"
        assert r["run_file"].startswith(str(tmp_path / f"{r['task_id']}-r0"))


def test_every_wrong_script_fails_with_its_class(core, tmp_path):
    data = run_suite(core, ALL_WRONG, jobs=JOBS, out_dir=tmp_path)
    assert len(data["results"]) == sum(len(t.wrong) for t in core.tasks)
    expected = {(t.id, s.name): s.expect for t in core.tasks for s in t.wrong}
    got = {(r["task_id"], r["variant"]): r["failure"] for r in data["results"]}
    assert not any(r["passed"] for r in data["results"])
    assert got == expected


def test_repeats_and_jobs(core, tmp_path):
    seen = []
    data = run_suite(core, "suite:reference", repeat=3, jobs=3, tasks=["total_revenue", "median_units"],
                     out_dir=tmp_path, on_result=lambda r, done, total: seen.append((done, total)))
    assert [(r["task_id"], r["repeat"]) for r in data["results"]] == [
        ("total_revenue", 0), ("median_units", 0), ("total_revenue", 1), ("median_units", 1),
        ("total_revenue", 2), ("median_units", 2)]
    assert sorted(seen) == [(i, 6) for i in range(1, 7)]
    assert len({r["run_file"] for r in data["results"]}) == 6  # every attempt its own session and log
    assert pass_hat_k(data["results"], 3) == 1.0


def test_run_rejects_bad_arguments(core, tmp_path):
    with pytest.raises(ValueError, match="repeat must be a positive integer"):
        run_suite(core, "suite:reference", repeat=0, out_dir=tmp_path)
    with pytest.raises(ValueError, match="jobs must be an integer from 1 to"):
        run_suite(core, "suite:reference", jobs=0, out_dir=tmp_path)
    with pytest.raises(ValueError, match="has no task 'nope'"):
        run_suite(core, "suite:reference", tasks=["nope"], out_dir=tmp_path)
    with pytest.raises(ValueError, match="has no script 'bogus'"):
        run_suite(core, "suite:bogus", tasks=["total_revenue"], out_dir=tmp_path)


def test_cli_run_exit_status_and_output(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["run", "core", "--model", "suite:reference", "--task", "total_revenue", "--out", str(out),
                 "--quiet"]) == 0
    data = json.loads(out.read_text())
    assert data["results"][0]["passed"] is True
    # a wrong script that gets its declared class is as expected: exit 0; a plain model that fails: exit 1
    assert main(["run", "core", "--model", "suite:wrong", "--task", "total_revenue", "--out", str(out),
                 "--quiet"]) == 0
    assert main(["run", "core", "--model", "suite:no_number", "--task", "total_revenue", "--out", str(out),
                 "--quiet"]) == 0
    assert main(["run", "core", "--model", "suite:mean_not_sum", "--task", "total_revenue", "--out", str(out)]) == 2
    assert "has no script 'mean_not_sum'" in capsys.readouterr().err
    assert main(["run", "/no/such/suite", "--model", "suite:reference", "--out", str(out)]) == 2
    assert "neither a directory nor a built-in suite" in capsys.readouterr().err


def _grade(passed, missing=False, kind="number", ambiguous=False):
    return Grade(kind, passed, "", missing, ambiguous)


@pytest.mark.parametrize("status, grades, records, expected", [
    ("completed", [_grade(True)], [], None),
    ("completed", [_grade(False)], [], "wrong_answer"),
    ("completed", [_grade(False, missing=True)], [], "no_answer"),
    ("completed", [_grade(False, ambiguous=True)], [], "ambiguous"),
    ("completed", [_grade(False, ambiguous=True), _grade(False, missing=True)], [], "ambiguous"),
    ("completed", [_grade(False, ambiguous=True), _grade(False, kind="no_writes")], [], "policy_violation"),
    ("max_turns_exceeded", [_grade(False, missing=True)], [], "limit"),
    ("budget_cost", [_grade(False, missing=True)], [], "limit"),
    ("error", [_grade(False, missing=True)], [], "provider_error"),
    ("completed", [_grade(True), _grade(False, kind="no_writes")], [], "policy_violation"),
    ("completed", [_grade(False, missing=True)],
     [{"type": "event", "event": "approval", "safety": "write", "approved": False}], "policy_refusal"),
    ("max_turns_exceeded", [_grade(False, missing=True)],
     [{"type": "tools", "results": [{"is_error": True}]}] * 3, "tool_error_loop"),
    ("max_turns_exceeded", [_grade(False, missing=True)],
     [{"type": "tools", "results": [{"is_error": True}]}] * 2 + [{"type": "tools", "results": [{"is_error": False}]}],
     "limit"),
    # a passing grade set on an incomplete run is not a pass
    ("max_turns_exceeded", [_grade(True)], [], "limit"),
])
def test_classify_failure(status, grades, records, expected):
    assert classify_failure(status, grades, records) == expected


def test_a_model_cannot_write_the_task_database_from_the_worker(core, tmp_path):
    """The only way to a write is the sql connector's approval; the worker cannot reach the database file."""
    import dataclasses

    from harness_magic.evals.runner import run_task
    from harness_magic.evals.schema import ScriptSpec, expand_turn

    hack = ("import glob, sqlite3\n"
            "hits = glob.glob('/tmp/eval-*/task.sqlite') + glob.glob('/tmp/**/task.sqlite', recursive=True)\n"
            "for path in hits:\n"
            "    con = sqlite3.connect(path); con.execute('DELETE FROM orders'); con.commit()\n"
            "print('deleted', hits)")
    task = next(t for t in core.tasks if t.id == "cancelled_orders_read_only")
    turns = (expand_turn({"python": hack}), {"text": "Done."})
    hostile = dataclasses.replace(task, wrong=(ScriptSpec("hack", turns, "wrong_answer"),))
    result = run_task(hostile, core, "suite:hack", out_dir=tmp_path)
    grades = {g.kind: g for g in result.grades}
    assert grades["sql"].passed, grades["sql"].detail  # every order is still there
    assert grades["no_writes"].passed
    assert not result.passed and result.failure == "no_answer"
    # without the worker's confinement the same script does reach the file, and the sql grader sees it
    unconfined = run_task(hostile, core, "suite:hack", out_dir=tmp_path / "inprocess", options={"sandbox": "inprocess"})
    assert not {g.kind: g for g in unconfined.grades}["sql"].passed


def test_cli_list_and_repeat(tmp_path, capsys):
    assert main(["list", "core"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert len(listing) >= 30 and listing[0].split()[0] == "aapl_mean_2000"
    out = tmp_path / "rep.json"
    assert main(["run", "core", "--model", "suite:reference", "--task", "median_units", "--repeat", "2", "--jobs",
                 "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "[2/2] median_units" in printed and "2/2 passed" in printed
    assert [r["repeat"] for r in json.loads(out.read_text())["results"]] == [0, 1]
    assert main(["report", str(out)]) == 0
    assert "pass^2 = 100.0%" in (tmp_path / "rep.html").read_text()
    with pytest.raises(SystemExit):
        main(["run", "core", "--model", "suite:reference", "--repeat", "0"])
    assert "must be at least 1" in capsys.readouterr().err
