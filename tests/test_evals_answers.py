"""Graders cannot be talked into a pass: every false pass and false fail of issue 23, and adversarial answers
beyond them (hedges, lists, negations, two answer lines, numbers inside labels and dates)."""

from __future__ import annotations

import pytest

from harness_magic.evals.answer_parse import committed_answer, read_number
from harness_magic.evals.graders import GradeContext, grade
from harness_magic.evals.runner import classify_failure


def outcome(kind, options, answer):
    """passed / ambiguous / no_answer / wrong_answer, as the runner would class a completed run."""
    result = grade(kind, options, GradeContext(answer=answer))
    return classify_failure("completed", [result], []) or "passed"


NUMBER = {"expected": 0.586, "abs_tol": 0.0005}


# -- numbers: the false passes ------------------------------------------------------------------

@pytest.mark.parametrize("answer", [
    "ANSWER: 46 or 49",
    "ANSWER: 0.586, 0.561, 0.566",
    "ANSWER: between 0.586 and 0.61",
    "ANSWER: 0.586 +/- 0.15",
    "ANSWER: 0.586 ± 0.15",
    "ANSWER: 0.2\nANSWER: 0.586",  # the right one last
    "ANSWER: 0.586\nANSWER: 0.2",
    "ANSWER: at least 46",  # bounds say where the value lies, not which it is
    "ANSWER: more than 46",
    "ANSWER: no more than 46",
    "ANSWER: up to 46",
    "ANSWER: < 46.5",
    "ANSWER: >=46",
    "ANSWER: 46 (at most)",
])
def test_number_answers_that_do_not_commit_are_ambiguous(answer):
    options = {"expected": 46, "abs_tol": 0.5} if "46" in answer else NUMBER
    assert outcome("number", options, answer) == "ambiguous"


# -- numbers: the false fails -------------------------------------------------------------------

@pytest.mark.parametrize("answer, expected", [
    ("ANSWER: .586", 0.586),
    ("ANSWER: 29 328.62", 29328.62),
    ("ANSWER: 29\u2009328.62", 29328.62),  # thin space
    ("ANSWER: 29\u202f328.62", 29328.62),  # narrow no-break space
    ("ANSWER: 29,328.62", 29328.62),
    ("ANSWER: 29 328,62", 29328.62),
    ("ANSWER: 2008 vs 2007: +0.44%", 0.44),
    ("ANSWER: of 442 patients, 46", 46),
    ("ANSWER: 46 of 442 patients", 46),
    ("ANSWER: \u22120.5", -0.5),
    ("ANSWER: 1.5e-3", 0.0015),
    ("ANSWER: 1.5×10^6", 1.5e6),
    ("ANSWER: $1,234.50", 1234.5),
    ("ANSWER: €12.5 million", 12.5e6),
    ("ANSWER: 34.71%", 34.71),
    ("**Answer:** 46.", 46),
    ("Final answer:\n46", 46),
    ("ANSWER: 46\nANSWER: 46.0", 46),  # two identical lines commit
])
def test_number_formats_people_write(answer, expected):
    assert outcome("number", {"expected": expected, "rel_tol": 1e-9}, answer) == "passed"


# -- numbers: adversarial answers beyond the issue ------------------------------------------------------

@pytest.mark.parametrize("answer, kind", [
    ("ANSWER: maybe 46", "ambiguous"),
    ("ANSWER: 46?", "ambiguous"),
    ("ANSWER: probably 46, could be 49", "ambiguous"),
    ("ANSWER: 46 (or 49)", "ambiguous"),  # an alternative hidden in an aside
    ("ANSWER: 46-49", "ambiguous"),
    ("ANSWER: 46\u201349", "ambiguous"),
    ("ANSWER: 46 to 49", "ambiguous"),
    ("ANSWER: 2023: 40, 2024: 46", "ambiguous"),  # several labelled values
    ("ANSWER: 46, 49", "ambiguous"),
    ("ANSWER: 4,6", "ambiguous"),  # a comma that is not a thousands separator separates numbers
    ("ANSWER: 46; 49", "ambiguous"),
    ("ANSWER: not 46", "wrong_answer"),  # a denial commits to nothing right
    ("ANSWER: 49, not 46", "wrong_answer"),
    ("ANSWER: unknown", "no_answer"),
    ("ANSWER: 2024-03-11", "no_answer"),  # a date is not the number asked for
    ("It is 46 or 49.", "ambiguous"),
    ("Revenue rose 12% in 2024 to 46 units across 3 regions.", "no_answer"),  # prose with many numbers: no answer
])
def test_adversarial_number_answers(answer, kind):
    assert outcome("number", {"expected": 46, "abs_tol": 0.5}, answer) == kind


@pytest.mark.parametrize("answer", [
    "ANSWER: 46, not 49",
    "ANSWER: 46 (95% CI 40-52)",  # a range inside an aside annotates the one value
    "ANSWER: 46 (46/442 = 10.4%)",
    "ANSWER: On 2024-03-11: 46",  # a date label
    "ANSWER: Q4 2024: 46",
    "ANSWER: 46 in 2008",
    "ANSWER: a total of 46",
    "ANSWER: 46 patients",
    "The count is 46.",  # prose with one number
])
def test_right_numbers_with_labels_and_asides_pass(answer):
    assert outcome("number", {"expected": 46, "abs_tol": 0.5}, answer) == "passed"


def test_an_answer_line_inside_prose_is_the_commitment():
    answer = "I looked at 2007 and 2008; growth was 0.5% then 0.44%.\nANSWER: 0.44"
    assert outcome("number", {"expected": 0.44, "abs_tol": 1e-6}, answer) == "passed"
    assert committed_answer(answer).text == "0.44"


def test_a_huge_hostile_answer_is_bounded():
    answer = "ANSWER: " + "1 " * 300_000
    reading = read_number(committed_answer(answer).text)
    assert reading.value is None  # cut and read, neither hung nor guessed


# -- text graders: the false passes and false fails ---------------------------------------------

@pytest.mark.parametrize("answer, kind", [
    ("It is not Westinghouse.", "wrong_answer"),
    ("Either Westinghouse or General Motors.", "ambiguous"),
    ("ANSWER: Westinghouse or General Motors", "ambiguous"),
    ("ANSWER: maybe Westinghouse", "ambiguous"),
    ("ANSWER: Westinghouse", "passed"),
    ("ANSWER: Westinghouse, not General Motors", "passed"),
    ("It isn't General Motors but Westinghouse.", "passed"),
])
def test_contains_grades_the_committed_answer(answer, kind):
    assert outcome("contains", {"text": "Westinghouse"}, answer) == kind


@pytest.mark.parametrize("answer, kind", [
    ("Not 1980Q2: the largest fall was in 2009Q1.", "wrong_answer"),
    ("The largest fall was in 1980Q2.", "passed"),
    ("ANSWER: 1980Q2 or 2009Q1", "ambiguous"),
])
def test_regex_skips_negated_matches(answer, kind):
    assert outcome("regex", {"pattern": r"1980Q2"}, answer) == kind


@pytest.mark.parametrize("answer", [
    "ANSWER: Gadget (Doohickey was second)",
    "Gadget sold the most units, ahead of Doohickey.",
    "Gadget sold the most; Doohickey came second.",
    "The runner-up Doohickey trailed.\nANSWER: Gadget",  # absent bans only within the committed answer
])
def test_a_right_answer_mentioning_the_runner_up_passes_an_absent_ban(answer):
    assert outcome("contains", {"text": "Gadget", "absent": ["Doohickey"]}, answer) == "passed"


def test_absent_still_bans_a_named_option():
    assert outcome("contains", {"text": "Gadget", "absent": ["Doohickey"]}, "ANSWER: Gadget and Doohickey") \
        == "wrong_answer"


# -- choice ----------------------------------------------------------------------------------------------

CHOICE = {"options": ["Widget", "Gadget", "Gizmo", "Doohickey"], "expected": "Gadget"}


@pytest.mark.parametrize("answer, kind", [
    ("ANSWER: Gadget", "passed"),
    ("ANSWER: gadget", "passed"),
    ("ANSWER: Gadget, ahead of Doohickey", "passed"),
    ("It is not Doohickey but Gadget.", "passed"),
    ("There is no doubt it is Gadget.", "passed"),  # a negation word far from the option is another phrase
    ("ANSWER: Doohickey", "wrong_answer"),
    ("ANSWER: not Doohickey", "wrong_answer"),
    ("ANSWER: not Gadget", "wrong_answer"),
    ("ANSWER: Gadget or Doohickey", "ambiguous"),
    ("ANSWER: Gadget, Doohickey", "ambiguous"),
    ("ANSWER: Gadget/Gizmo", "ambiguous"),
    ("ANSWER: Either Gadget or Gizmo", "ambiguous"),
    ("ANSWER: probably Gadget", "ambiguous"),
    ("ANSWER: Gadget?", "ambiguous"),
    ("ANSWER: Doohickey\nANSWER: Gadget", "ambiguous"),
    ("ANSWER: none of them", "no_answer"),
    ("ANSWER: Gadgets", "no_answer"),  # whole words only
])
def test_choice_names_exactly_one_option(answer, kind):
    assert outcome("choice", CHOICE, answer) == kind


def test_choice_prefers_the_longer_overlapping_option():
    options = {"options": ["Q1", "Q1 2024", "Q2 2024"], "expected": "Q1 2024"}
    assert outcome("choice", options, "ANSWER: Q1 2024") == "passed"
