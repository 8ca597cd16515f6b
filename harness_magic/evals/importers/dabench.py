"""Import InfiAgent-DABench (closed-form questions over CSV tables) as a suite.

Inputs are the benchmark's published files: a questions JSONL (``id``, ``question``,
``concepts``, ``constraints``, ``format``, ``file_name``, ``level``), a labels
JSONL (``id``, ``common_answers``: ``[[name, value], ...]``) and the folder of
tables. Per question the suite gets ``dabench_<id>.yaml``:

* the table as an input frame (``inputs: {<handle>: {file: tables/<file_name>}}``);
* the prompt: the question, its constraints and its answer format, and where the
  table is;
* a ``dabench`` grader (:mod:`harness_magic.evals.dabench`) with the labelled answers;
* tags: ``dabench``, the level, ``concept:<name>`` per concept, and ``single_step`` or
  ``multi_step`` (a question testing two or more concepts, the benchmark's own split);
* scripts: ``reference`` states the labelled answers as ``@name[value]``;
  ``changed_answer`` changes one sub-answer (must fail as ``wrong_answer``),
  ``hedged`` gives one name two values (``ambiguous``), ``no_answer_given`` states
  none (``no_answer``). So ``--model suite:reference`` and ``suite:all-wrong`` check
  the import and the grader as on the built-in suite.

Questions whose table is missing, empty or unreadable, that have no label, or
whose label cannot be written as ``@name[value]`` are skipped with the reason.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from harness_magic.evals.dabench import NAME, answer_equal, format_answers, grade_dabench, valid_value
from harness_magic.evals.graders import GradeContext
from harness_magic.evals.importers.common import (
    MAX_RECORDS,
    BenchmarkImportError,
    ImportReport,
    check_table,
    copy_table,
    handle_name,
    prepare_out,
    read_frame,
    read_jsonl,
    task_id,
    write_report,
    write_task,
)

__all__ = ["import_dabench", "changed_value", "DEFAULT_LIMITS"]

DEFAULT_LIMITS = {"max_turns": 12, "max_wall_s": 300}
"""Per task: enough for load, a few analysis steps and the answer; a hung attempt cannot hold the run."""
MAX_TEXT_CHARS = 20_000
"""A question, constraints or format longer than this is refused (the published ones are under 2,000)."""
_PLAIN_NUMBER = re.compile(r"-?\d+(?:\.(\d+))?")


def changed_value(value: str) -> str:
    """A value the benchmark's rule tells apart from ``value`` (numbers move by at least 1, text changes)."""
    try:
        number = float(value)
    except (ValueError, OverflowError):
        number = None
    if number is not None and number == number and abs(number) != float("inf"):
        moved = number + max(1.0, abs(number) * 0.5)
        plain = _PLAIN_NUMBER.fullmatch(value.strip())
        text = f"{moved:.{len(plain.group(1) or '')}f}" if plain else repr(moved)
        if not answer_equal(text, value):
            return text
    return "changed" if value.strip().lower() != "changed" else "altered"


def _text(record: dict[str, Any], key: str, *, required: bool = True) -> tuple[str, str]:
    value = record.get(key, "" if not required else None)
    if not isinstance(value, str) or (required and not value.strip()):
        return "", f"{key} must be a non-empty string, got {value!r}"[:200]
    if len(value) > MAX_TEXT_CHARS:
        return "", f"{key} has {len(value)} characters; at most {MAX_TEXT_CHARS}"
    return value.strip(), ""


def _labels(number: int, record: dict[str, Any]) -> tuple[list[list[str]] | None, str]:
    pairs = record.get("common_answers")
    if not isinstance(pairs, list) or not pairs:
        return None, f"common_answers must be a non-empty list of [name, value], got {pairs!r}"[:200]
    out, seen = [], set()
    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            return None, f"common_answers item {pair!r} is not a [name, value] pair of strings"[:200]
        name, value = pair
        if not NAME.fullmatch(name):
            return None, f"answer name {name!r} is not a @name (letters, digits, _)"
        if not valid_value(value):
            return None, f"label {name}={value!r} cannot be written as @{name}[value] (']' or a line break)"
        if name in seen:
            return None, f"answer name {name!r} is labelled twice"
        seen.add(name)
        out.append([name, value])
    return out, ""


def _self_check(grader: dict[str, Any], text: str, want: str) -> bool:
    g = grade_dabench(grader, GradeContext(answer=text))
    got = "pass" if g.passed else "ambiguous" if g.ambiguous else "no_answer" if g.missing else "wrong_answer"
    return got == want


def import_dabench(questions: str | os.PathLike[str], labels: str | os.PathLike[str],
                   tables: str | os.PathLike[str], out: str | os.PathLike[str]) -> ImportReport:
    """Write the suite into ``out`` (new or empty); the report of what was imported and skipped.

    Raises :class:`BenchmarkImportError` when an input file cannot be read at all or
    ``out`` is in use; everything else is reported per line or per question.
    """
    tables_dir = Path(tables)
    if not tables_dir.is_dir():
        raise BenchmarkImportError(f"the tables folder {tables_dir} is not a folder")
    report = ImportReport("dabench", str(out))
    question_rows = read_jsonl(questions, "questions", report)
    label_rows = read_jsonl(labels, "labels", report)
    suite = prepare_out(out)
    by_id: dict[str, list[list[str]] | str] = {}
    for number, record in label_rows:
        key = str(record.get("id"))
        if key in by_id:
            report.problems.append(f"{Path(labels).name} line {number}: id {key} is labelled twice; kept the first")
            continue
        pairs, why = _labels(number, record)
        by_id[key] = pairs if pairs is not None else why
    frames: dict[str, tuple[str, str]] = {}  # file name -> (relative path, "ok") or ("", why)
    seen: set[str] = set()
    for number, record in question_rows:
        raw_id = record.get("id")
        tid = task_id("dabench", raw_id)
        label = f"question {raw_id!r} ({Path(questions).name} line {number})"
        if tid is None:
            report.skipped.append((str(raw_id)[:40], f"{label}: id must be an integer or a short string"))
            continue
        if tid in seen:
            report.skipped.append((str(raw_id), f"{label}: id used by an earlier question"))
            continue
        seen.add(tid)
        if len(report.imported) >= MAX_RECORDS:
            report.skipped.append((str(raw_id), f"{label}: more than {MAX_RECORDS} questions"))
            continue
        texts = {}
        problem = ""
        for key in ("question", "constraints", "format"):
            texts[key], why = _text(record, key, required=key != "constraints")
            problem = problem or why
        concepts = record.get("concepts") or []
        if not isinstance(concepts, list) or not all(isinstance(c, str) and c.strip() for c in concepts):
            problem = problem or f"concepts must be a list of strings, got {concepts!r}"[:200]
        level = record.get("level") if isinstance(record.get("level"), str) else None
        answers = by_id.get(str(raw_id))
        if answers is None:
            problem = problem or "no label for this id in the labels file"
        elif isinstance(answers, str):
            problem = problem or f"label unusable: {answers}"
        file_name = record.get("file_name")
        if not problem:
            key = str(file_name)
            if key not in frames:
                path, status = check_table(tables_dir, file_name)
                if path is not None:
                    _, status = read_frame(path)
                if status == "ok" and path is not None:  # check_table gives a path with every "ok"
                    frames[key] = (copy_table(path, suite, "tables", path.name), "ok")
                else:
                    frames[key] = ("", status)
                report.tables[key] = status
            relative, status = frames[key]
            if status != "ok":
                problem = status
        if problem:
            report.skipped.append((str(raw_id), f"{label}: {problem}"))
            continue
        assert isinstance(answers, list)
        handle = handle_name(str(file_name))
        grader = {"answers": answers, "id": raw_id, "concepts": [c.strip() for c in concepts]}
        if level:
            grader["level"] = level
        right = format_answers(answers)
        first, value = answers[0]
        changed = format_answers([(first, changed_value(value)), *(tuple(a) for a in answers[1:])])
        hedged = f"@{first}[{value}] or perhaps @{first}[{changed_value(value)}]"
        checks = [(right, "pass"), (changed, "wrong_answer"), (hedged, "ambiguous"),
                  ("I could not compute the answer.", "no_answer")]
        failed = [want for text, want in checks if not _self_check(grader, text, want)]
        if failed:
            report.skipped.append((str(raw_id), f"{label}: the grader does not tell its scripts apart "
                                                f"({', '.join(failed)} not as expected)"))
            continue
        prompt = (f"{texts['question']}\n\n"
                  + (f"Constraints: {texts['constraints']}\n\n" if texts["constraints"] else "")
                  + f"Answer format: {texts['format']}\n\n"
                  f"The table {file_name} is loaded as the DataFrame `{handle}`.\n"
                  "End your reply with every answer in the format above, each as @name[value].")
        task = {
            "id": tid,
            "description": f"InfiAgent-DABench question {raw_id}" + (f" ({level})" if level else ""),
            "tags": ["dabench", "multi_step" if len(concepts) > 1 else "single_step"] + ([level] if level else [])
                    + ["concept:" + c.strip() for c in concepts],
            "prompt": prompt,
            "inputs": {handle: {"file": relative}},
            "limits": dict(DEFAULT_LIMITS),
            "graders": [{"dabench": grader}],
            "scripts": {
                "reference": [{"python": f"print({handle}.shape)"}, {"text": right}],
                "wrong": [
                    {"name": "changed_answer", "expect": "wrong_answer", "turns": [{"text": changed}]},
                    {"name": "hedged", "expect": "ambiguous", "turns": [{"text": hedged}]},
                    {"name": "no_answer_given", "expect": "no_answer",
                     "turns": [{"text": "I could not compute the answer."}]},
                ],
            },
        }
        write_task(suite, task, f"InfiAgent-DABench question {raw_id}, imported by harness_magic.evals import dabench")
        report.imported.append(tid)
    write_report(suite, report)
    return report
