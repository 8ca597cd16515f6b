"""Public benchmarks in one command: the DABench and DABstep importers on our own example files
(written in the benchmarks' published formats; their data is not redistributable), graded by
each benchmark's own rule, with hostile input refused or reported."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from harness_magic.evals import load_suite
from harness_magic.evals.__main__ import main
from harness_magic.evals.dabench import answer_equal, benchmark_figures, grade_dabench
from harness_magic.evals.dabstep import answers_match, grade_dabstep
from harness_magic.evals.dabstep import benchmark_figures as dabstep_figures
from harness_magic.evals.graders import GradeContext
from harness_magic.evals.importers import BenchmarkImportError
from harness_magic.evals.importers import common
from harness_magic.evals.importers.dabench import import_dabench
from harness_magic.evals.importers.dabstep import import_dabstep
from harness_magic.evals.runner import ALL_WRONG, run_suite

FIXTURES = Path(__file__).parent / "evals_fixtures"
DABENCH = FIXTURES / "dabench"
DABSTEP = FIXTURES / "dabstep"


def dabench_args(out: Path) -> list[str]:
    return ["import", "dabench", str(DABENCH / "questions.jsonl"), str(DABENCH / "labels.jsonl"),
            str(DABENCH / "tables"), "--out", str(out)]


@pytest.fixture(scope="module")
def dabench_suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("dabench") / "suite"
    report = import_dabench(DABENCH / "questions.jsonl", DABENCH / "labels.jsonl", DABENCH / "tables", out)
    return out, report


@pytest.fixture(scope="module")
def dabstep_suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("dabstep") / "suite"
    return out, import_dabstep(DABSTEP / "tasks.jsonl", DABSTEP / "context", out)


def grade(answer: str, answers: list[list[str]]):
    return grade_dabench({"answers": answers}, GradeContext(answer=answer))


# -- the DABench rule -------------------------------------------------------------------------------------

def test_reference_answer_in_benchmark_form_passes():
    g = grade("The mean is 4.70.\n@mean_price[4.70]", [["mean_price", "4.70"]])
    assert g.passed and g.to_dict()["benchmark"]["correct"] == {"mean_price": True}


def test_perturbed_answer_fails_as_wrong_answer():
    g = grade("@top_region[south] @top_revenue[22.01]", [["top_region", "south"], ["top_revenue", "22.00"]])
    assert not g.passed and not g.missing and not g.ambiguous
    assert g.to_dict()["benchmark"]["correct"] == {"top_region": True, "top_revenue": False}
    assert "top_revenue: got '22.01', expected '22.00'" in g.detail


def test_numbers_equal_within_the_benchmarks_tolerance_only():
    assert answer_equal("4.7", "4.70") and answer_equal("4.7000004", "4.70")
    assert not answer_equal("4.700002", "4.70")
    assert not answer_equal("South", "south")  # text: exact string
    assert not answer_equal("nan", "4.70") and not answer_equal("inf", "inf ") and answer_equal("inf", "inf")
    assert not answer_equal(None, "1")


def test_every_sub_answer_must_be_right_and_present():
    labels = [["a", "1"], ["b", "2"]]
    assert not grade("@a[1]", labels).passed
    assert "b: missing" in grade("@a[1]", labels).detail
    assert grade("@b[2] and @a[1.0000000]", labels).passed  # order and number spelling do not matter


def test_no_answer_field_is_no_answer_and_two_values_are_ambiguous():
    assert grade("The mean price is 4.70.", [["mean_price", "4.70"]]).missing
    assert grade("@mean[4.70]", [["mean_price", "4.70"]]).missing  # a name the label does not know
    hedged = grade("@mean_price[4.70] or maybe @mean_price[4.80]", [["mean_price", "4.70"]])
    assert hedged.ambiguous and not hedged.passed
    # the benchmark's own figures keep its rule (the last value counts); only pass/fail is stricter
    assert hedged.to_dict()["benchmark"]["correct"] == {"mean_price": False}
    assert grade("@mean_price[4.70] ... so @mean_price[4.70]", [["mean_price", "4.70"]]).passed


def test_accuracy_figures_equal_the_benchmarks_definition():
    """Four answered questions and one empty response; every figure computed by hand below."""
    cases = [  # (labels, concepts, answer)
        ([["p", "4.70"]], ["Summary Statistics"], "@p[4.7]"),                                     # right
        ([["n", "5"], ["s", "5"], ["e", "7"]], ["Summary Statistics", "Feature Engineering"],
         "@n[5] @s[5] @e[8]"),                                                                  # 2 of 3
        ([["r", "south"], ["v", "22.00"]], ["Feature Engineering", "Summary Statistics"], "@r[south] @v[22]"),
        ([["c", "-0.87"]], ["Correlation Analysis"], "@c[0.87]"),                                # wrong
        ([["x", "1"], ["y", "2"]], ["A", "B", "C"], ""),                                        # empty response
    ]
    results = [{"task_id": f"q{i}", "grades": [grade_dabench({"answers": labels, "concepts": concepts, "id": i},
                                                             GradeContext(answer=text)).to_dict()]}
               for i, (labels, concepts, text) in enumerate(cases)]
    f = benchmark_figures(results)
    assert f["questions"] == 5 and f["answered"] == 4
    assert f["by_question"] == 2 / 4
    assert math.isclose(f["by_sub_question"], (1 + 2 + 2 + 0) / (1 + 3 + 2 + 1))
    assert math.isclose(f["proportional"], (1 + 2 / 3 + 1 + 0) / 4)
    assert f["by_question_all"] == 2 / 5
    assert f["by_concept"] == {"Correlation Analysis": (0.0, 0, 1), "Feature Engineering": (0.5, 1, 2),
                               "Summary Statistics": (2 / 3, 2, 3)}
    assert f["by_concept_count"] == {1: (0.5, 1, 2), 2: (0.5, 1, 2)}
    assert f["two_or_more_concepts"] == 0.5
    assert benchmark_figures([{"grades": [{"kind": "number", "passed": True}]}]) is None


# -- the DABench importer ---------------------------------------------------------------------------------

def test_importer_writes_a_suite_and_reports_what_it_skipped(dabench_suite):
    out, report = dabench_suite
    assert report.imported == ["dabench_0", "dabench_1", "dabench_2", "dabench_3", "dabench_4"]
    reasons = dict(report.skipped)
    assert "table 'sales.csv' is missing" in reasons["5"]
    assert "table 'empty.csv' is empty (0 bytes)" in reasons["6"]
    assert "'../secret.csv' is not a plain file name" in reasons["7"]
    assert "'/etc/passwd' is not a plain file name" in reasons["8"]
    assert "'header_only.csv' is empty (0 rows, 2 columns)" in reasons["9"]
    assert "no label" in reasons["10"]
    assert report.problems == ["questions.jsonl line 12: not JSON (Expecting value at column 1); skipped"]
    assert sorted(p.name for p in (out / "tables").iterdir()) == ["city temps.csv", "orders.csv"]
    saved = json.loads((out / common.REPORT_FILE).read_text())
    assert saved["imported"] == report.imported and len(saved["skipped"]) == 6


def test_imported_task_holds_question_format_table_and_grader(dabench_suite):
    out, _ = dabench_suite
    task = {t.id: t for t in load_suite(out).tasks}["dabench_4"]
    assert "largest range between its January and July" in task.prompt
    assert "Round to one decimal place" in task.prompt and "@city[name] @range_c[value]" in task.prompt
    assert task.inputs == {"city_temps": {"file": "tables/city temps.csv"}}
    assert task.graders == [("dabench", {"answers": [["city", "Oslo"], ["range_c", "21.4"]], "id": 4,
                                         "concepts": ["Summary Statistics", "Comprehensive Data Preprocessing",
                                                      "Feature Engineering"], "level": "hard"})]
    assert {"dabench", "hard", "multi_step", "concept:Feature Engineering"} <= set(task.tags)


def test_imported_suite_reference_passes_and_every_wrong_script_fails_with_its_class(dabench_suite, tmp_path):
    out, _ = dabench_suite
    suite = load_suite(out)
    reference = run_suite(suite, "suite:reference", out_dir=tmp_path / "ref")
    assert [r["passed"] for r in reference["results"]] == [True] * 5
    wrong = run_suite(suite, ALL_WRONG, out_dir=tmp_path / "wrong")
    got = {(r["task_id"], r["variant"]): r["failure"] for r in wrong["results"]}
    assert got == {(t.id, s.name): s.expect for t in suite.tasks for s in t.wrong}
    assert set(got.values()) == {"wrong_answer", "ambiguous", "no_answer"}
    f = benchmark_figures(wrong["results"])
    assert f["by_question"] == 0.0 and f["answered"] == 15


def test_symlink_leading_out_of_the_tables_folder_is_refused(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    secret = tmp_path / "secret.csv"
    secret.write_text("a,b\n1,2\n")
    os.symlink(secret, tables / "link.csv")
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": 1, "question": "q", "format": "@a[n]", "file_name": "link.csv"}) + "\n")
    labels = tmp_path / "l.jsonl"
    labels.write_text(json.dumps({"id": 1, "common_answers": [["a", "1"]]}) + "\n")
    report = import_dabench(questions, labels, tables, tmp_path / "out")
    assert report.imported == []
    assert "leads outside" in report.skipped[0][1] and str(secret) in report.skipped[0][1]
    assert not (tmp_path / "out" / "tables").exists()


def test_huge_input_files_and_lines_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "MAX_JSONL_BYTES", 100)
    big = tmp_path / "q.jsonl"
    big.write_text(json.dumps({"id": 1, "question": "x" * 200}) + "\n")
    with pytest.raises(BenchmarkImportError, match=r"q.jsonl has \d+ bytes; at most 100"):
        import_dabench(big, DABENCH / "labels.jsonl", DABENCH / "tables", tmp_path / "out")
    monkeypatch.setattr(common, "MAX_JSONL_BYTES", 10_000)
    monkeypatch.setattr(common, "MAX_LINE_CHARS", 50)
    report = import_dabench(big, DABENCH / "labels.jsonl", DABENCH / "tables", tmp_path / "out2")
    assert report.problems[0].startswith("q.jsonl line 1: ") and "longer than 50" in report.problems[0]


def test_label_values_that_cannot_be_written_and_non_object_lines_are_reported(tmp_path):
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": 1, "question": "q", "format": "@a[n]", "file_name": "orders.csv"})
                         + "\n[1, 2]\n")
    labels = tmp_path / "l.jsonl"
    labels.write_text(json.dumps({"id": 1, "common_answers": [["a", "x]y"]]}) + "\n")
    report = import_dabench(questions, labels, DABENCH / "tables", tmp_path / "out")
    assert "cannot be written as @a[value]" in report.skipped[0][1]
    assert report.problems == ["q.jsonl line 2: expected a JSON object, got list; skipped"]


def test_command_line_import_exit_status_and_output_folder_rules(tmp_path, capsys):
    out = tmp_path / "suite"
    assert main(dabench_args(out)) == 1  # questions were skipped: reported, status 1
    printed = capsys.readouterr().out
    assert "5 tasks written" in printed and "skipped 7:" in printed and "questions.jsonl line 12" in printed
    assert main(dabench_args(out)) == 2  # the folder is in use now
    assert "is not empty" in capsys.readouterr().err
    assert main(["import", "dabench", str(tmp_path / "nope.jsonl"), str(DABENCH / "labels.jsonl"),
                 str(DABENCH / "tables"), "--out", str(tmp_path / "x")]) == 2
    assert "cannot read the questions file" in capsys.readouterr().err


def test_report_shows_the_benchmarks_accuracy_figures(dabench_suite, tmp_path, capsys):
    out, _ = dabench_suite
    results = tmp_path / "wrong.json"
    assert main(["run", str(out), "--model", ALL_WRONG, "--out", str(results), "--quiet",
                 "--task", "dabench_0", "--task", "dabench_1"]) == 0
    assert main(["report", str(results)]) == 0
    page = results.with_suffix(".html").read_text()
    assert "InfiAgent-DABench accuracy" in page and "Accuracy by Question</td><td>0.00%" in page
    # by hand: dabench_0 has one sub-answer, dabench_1 three; of the six attempts only dabench_1's changed
    # answer gets any right (2 of 3; the hedge states one name only, its last value the changed one)
    assert "Accuracy by Sub-Question</td><td>16.67%" in page  # 2 / (3*1 + 3*3)
    assert "Accuracy Proportional by Sub-Question</td><td>11.11%" in page  # (2/3) / 6
    assert "Failure taxonomy" in page and "n/a: no task expects a clarifying question" in page


# -- DABstep ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("answer,label,same", [
    ("1,234.5", "1234.5", True), ("$0.75", "0.7500", True), ("12", "13", False), ("6", "6.0", True),
    ("fee_3, fee_1", "fee_1;fee_3", True), ("[Belles_cookbook, Golfclub_Baron]", "Golfclub_Baron, Belles_cookbook",
                                            True),
    ("Belles_cookbook", "Belles_cookbook, Golfclub_Baron", False), ("NexPay", "nexpay", True),
    ("Not Applicable", "not applicable", True), ("GlobalCard", "NexPay", False), ("0.29", "0.29005", True),
    ("0.29", "0.30", False), ("520.74", "520.7", True),  # rounded to the fewer decimals, as the benchmark does
])
def test_dabstep_comparison_follows_the_benchmarks_normalisation(answer, label, same):
    assert answers_match(answer, label) is same


def test_dabstep_grader_reads_the_committed_answer_only():
    def run(text):
        return grade_dabstep({"expected": "NexPay", "level": "easy"}, GradeContext(answer=text))

    assert run("The most used scheme is NexPay.\nANSWER: NexPay").passed
    assert not run("NexPay has the most payments.").passed and run("NexPay has the most payments.").missing
    two = run("ANSWER: NexPay\nANSWER: GlobalCard")
    assert two.ambiguous and not two.passed
    assert not run("ANSWER: GlobalCard").passed


def test_dabstep_import_offers_frames_and_documents_and_skips_missing_files(dabstep_suite, tmp_path):
    out, report = dabstep_suite
    assert report.imported == [f"dabstep_{i}" for i in range(1, 6)]
    reasons = dict(report.skipped)
    assert "'refunds.csv' is missing" in reasons["6"] and "'../tasks.jsonl' is not a plain file name" in reasons["7"]
    assert report.problems == ["tasks.jsonl line 8: not JSON (Expecting value at column 1); skipped"]
    tasks = {t.id: t for t in load_suite(out).tasks}
    fee = tasks["dabstep_3"]
    assert fee.inputs == {"fees": {"file": "context/fees.parquet"}, "payments": {"file": "context/payments.csv"}}
    assert "fixed_amount + rate * eur_amount / 10000" in fee.prompt  # the context document is in the prompt
    assert "Answer must be a number in EUR rounded to 2 decimals." in fee.prompt
    assert tasks["dabstep_5"].inputs == {"payments": {"file": "context/payments.csv"}}  # its own context_files
    suite = load_suite(out)
    reference = run_suite(suite, "suite:reference", out_dir=tmp_path / "ref")
    assert all(r["passed"] for r in reference["results"])
    wrong = run_suite(suite, ALL_WRONG, out_dir=tmp_path / "wrong")
    assert {(r["task_id"], r["variant"]): r["failure"] for r in wrong["results"]} == \
        {(t.id, s.name): s.expect for t in suite.tasks for s in t.wrong}
    assert dabstep_figures(reference["results"]) == {"tasks": 5, "answered": 5, "accuracy": (1.0, 5, 5),
                                                     "by_level": {"easy": (1.0, 2, 2), "hard": (1.0, 3, 3)}}
    f = dabstep_figures(reference["results"] + wrong["results"])
    assert f["accuracy"] == (5 / 20, 5, 20) and f["by_level"]["easy"] == (2 / 8, 2, 8)


def test_dabstep_nested_json_keeps_its_lists(dabstep_suite):
    import pandas as pd

    out, _ = dabstep_suite
    fees = pd.read_parquet(out / "context" / "fees.parquet")
    assert list(fees.loc[0, "account_type"]) == ["R", "D"] and fees.shape == (3, 5)
