"""compare (the gate) in both directions on results that differ by known amounts; report; statistics."""

from __future__ import annotations

import json
import math

import pytest

from harness_magic.evals.__main__ import main
from harness_magic.evals.compare import GateOptions, compare_results
from harness_magic.evals.report import render_report, summarise
from harness_magic.evals.stats import load_results, mcnemar_one_sided, pass_hat_k, wilson_interval


def results(passes, *, cost=0.001, wall=2.0, repeat=1, model="m", extra=None):
    """A results document: ``passes[i]`` is whether task i passed (same for every repeat)."""
    rows = []
    for r in range(repeat):
        for i, ok in enumerate(passes):
            rows.append({"task_id": f"t{i:02d}", "repeat": r, "model": model, "passed": ok,
                         "failure": None if ok else "wrong_answer", "grades": [], "turns": 2, "input_tokens": 100,
                         "output_tokens": 10, "cached_tokens": 50, "cost": cost, "wall_s": wall, "model_s": 1.0,
                         "run_file": f"runs/t{i}.jsonl", "variant": ""})
    doc = {"format": "harness_magic.evals/1", "suite": "s", "model": model, "repeat": repeat, "jobs": 1,
           "wall_s": 1.0, "results": rows}
    doc.update(extra or {})
    return doc


def test_wilson_and_mcnemar_values():
    low, high = wilson_interval(8, 10)
    assert math.isclose(low, 0.4902, abs_tol=1e-3) and math.isclose(high, 0.9433, abs_tol=1e-3)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert mcnemar_one_sided(0, 0) == 1.0
    assert mcnemar_one_sided(1, 0) == 0.5  # one flipped task is noise
    assert math.isclose(mcnemar_one_sided(5, 0), 1 / 32)
    assert math.isclose(mcnemar_one_sided(6, 1), 8 / 128)


def test_pass_hat_k():
    rows = [{"task_id": "a", "passed": p} for p in (True, True, False)] + [{"task_id": "b", "passed": True}] * 3
    assert math.isclose(pass_hat_k(rows, 1), (2 / 3 + 1) / 2)
    assert math.isclose(pass_hat_k(rows, 2), (1 / 3 + 1) / 2)
    assert pass_hat_k(rows, 3) == 0.5
    assert pass_hat_k(rows, 4) is None


def test_gate_flags_a_real_regression_in_one_direction_only():
    a = results([True] * 20)
    b = results([True] * 14 + [False] * 6)  # 6 regressed pairs, 0 improved: p = 1/64
    worse = compare_results(a, b)
    assert worse.worse and worse.b_worse_pairs == 6 and math.isclose(worse.p_value, 1 / 64)
    assert "McNemar" in worse.reasons[0]
    better = compare_results(b, a)
    assert not better.worse and better.b_better_pairs == 6


def test_gate_ignores_noise():
    a = results([True] * 10 + [False] * 10)
    flipped = [True] * 9 + [False] + [True] + [False] * 9  # one regressed, one improved
    assert not compare_results(a, results(flipped)).worse
    two = [True] * 8 + [False] * 12  # two regressed: p = 0.25
    assert not compare_results(a, results(two)).worse
    assert compare_results(a, results(two), GateOptions(alpha=0.3)).worse


def test_gate_cost_and_time_thresholds_both_directions():
    base = results([True] * 10, cost=0.010, wall=4.0)
    pricier = results([True] * 10, cost=0.013, wall=4.0)  # +30 % > 20 %
    assert any(r.startswith("cost") for r in compare_results(base, pricier).reasons)
    assert not compare_results(pricier, base).worse
    assert not compare_results(base, results([True] * 10, cost=0.0115, wall=4.0)).worse  # +15 %: within tolerance
    slower = results([True] * 10, cost=0.010, wall=6.5)  # +62 % and +2.5 s
    assert any(r.startswith("time") for r in compare_results(base, slower).reasons)
    assert not compare_results(slower, base).worse
    tiny = results([True] * 10, cost=0.010, wall=0.1)
    assert not compare_results(tiny, results([True] * 10, cost=0.010, wall=0.3)).worse  # +200 % but only +0.2 s


def test_gate_missing_tasks_and_repeats():
    a = results([True] * 5, repeat=3)
    b = results([True] * 4, repeat=3)
    comp = compare_results(a, b)
    assert comp.worse and comp.missing_in_b == ["t04"]
    assert len(comp.rows) == 4 and comp.rows[0]["n"] == 3


def test_gate_explains_when_only_one_file_has_variants_so_nothing_pairs():
    reference = results([True] * 3)
    all_wrong = results([False] * 3)
    for row, variant in zip(all_wrong["results"], ["wrong_pick", "error_loop", "wrong_pick"]):
        row["variant"] = variant
    comp = compare_results(reference, all_wrong)
    assert comp.worse and comp.b_worse_pairs == 0
    assert comp.reasons[0] == ("no task attempt is in both files; attempts pair by task, repeat and variant, and only "
                               "one file has variants (error_loop, wrong_pick: a suite:all-wrong run; compare it "
                               "with another suite:all-wrong run)")
    assert compare_results(reference, results([True] * 3, extra={"results": []})).reasons[0] == \
        "no task attempt is in both files"


def test_cli_compare_exit_codes(tmp_path, capsys):
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(results([True] * 12)))
    pb.write_text(json.dumps(results([True] * 6 + [False] * 6)))
    assert main(["compare", str(pa), str(pb)]) == 1
    out = capsys.readouterr().out
    assert "GATE: FAIL" in out and "REGRESSED (wrong_answer)" in out and "t06" in out
    assert main(["compare", str(pb), str(pa)]) == 0
    assert "GATE: PASS" in capsys.readouterr().out


@pytest.mark.parametrize("content, message", [
    ("not json", "not JSON"),
    ('{"format": "other", "results": []}', "expected format"),
    ('{"format": "harness_magic.evals/1", "results": [{"task_id": 1}]}', "results[0] needs task_id"),
    ('{"format": "harness_magic.evals/1", "results": [{"task_id": "a", "repeat": 0, "passed": true, "cost": -1}]}',
     "results[0].cost must be a non-negative number"),
    ('{"format": "harness_magic.evals/1", "results": [{"task_id": "a", "repeat": 0, "passed": true, '
     '"wall_s": "NaN"}]}', "results[0].wall_s"),
])
def test_bad_results_files(tmp_path, capsys, content, message):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(ValueError, match="bad.json"):
        load_results(str(bad))
    assert main(["compare", str(bad), str(bad)]) == 2
    assert message in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    assert "cannot read results file" in capsys.readouterr().err


def test_report_is_self_contained_and_escapes(tmp_path):
    doc = results([True, False, True, True], repeat=2, model="<script>alert(1)</script>")
    doc["results"][1]["task_id"] = "<img src=x onerror=alert(1)>"
    page = render_report(doc)
    assert "<script>alert" not in page and "onerror=alert(1)>" not in page
    assert "&lt;script&gt;" in page
    assert "<svg" in page and "Pass rate" in page and "Wilson" in page and "pass^2" in page
    assert "src=\"http" not in page and "<link" not in page  # no external assets
    s = summarise(doc)
    assert s["attempts"] == 8 and s["failures"] == {"wrong_answer": 2}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    assert main(["report", str(path)]) == 0
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_report_links_run_logs_relative_to_the_report(tmp_path):
    doc = results([True])
    doc["results"][0]["run_file"] = str(tmp_path / "runs" / "t 0" / "run\"<x>.jsonl")
    page = render_report(doc, base=str(tmp_path))
    assert '<a href="runs/t%200/run%22%3Cx%3E.jsonl">' in page
