"""Import a DABstep-style benchmark (multi-step questions over shared context files) as a suite.

The tasks JSONL has per line ``task_id``, ``question``, ``guidelines`` (the answer
format), ``answer`` (the label), optionally ``level`` and ``context_files`` (file
names in the context folder; default: every file there, as in DABstep, whose
questions all share one set of files). Context files are offered by kind:

* ``.csv``: an input frame (copied to ``context/``);
* ``.json`` holding a list of objects (or one object): an input frame (stored as
  Parquet in ``context/``, so nested lists survive);
* ``.md`` / ``.txt``: a context document, given in the prompt (at most
  :data:`MAX_DOCUMENT_CHARS` per task).

Per task ``dabstep_<task_id>.yaml`` gets a ``dabstep`` grader (the benchmark's own
answer normalisation, :mod:`harness_magic.evals.dabstep`) on the committed
``ANSWER:`` line, a reference script stating the label and wrong scripts
(``changed_answer``: wrong_answer, ``hedged``: ambiguous, ``no_answer_given``:
no_answer). Tasks whose context files are missing, empty or unreadable are
skipped with the reason.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness_magic.evals.dabstep import MAX_EXPECTED_CHARS, answers_match, grade_dabstep
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

__all__ = ["import_dabstep", "changed_answer", "MAX_DOCUMENT_CHARS", "MAX_CONTEXT_FILES"]

MAX_DOCUMENT_CHARS = 100_000
"""Context documents given in one prompt, together, at most (DABstep's manual is about 22,000)."""
MAX_CONTEXT_FILES = 32
"""A task may use at most this many context files (DABstep has 7)."""
MAX_TEXT_CHARS = 20_000
"""A question or guidelines text longer than this is refused."""
DEFAULT_LIMITS = {"max_turns": 20, "max_wall_s": 600}
"""Per task: DABstep's hard questions take many steps; a hung attempt cannot hold the run."""
SUFFIXES = (".csv", ".json", ".md", ".txt")
_NO_ANSWER = "I could not work out the answer."


def changed_answer(label: str) -> str | None:
    """An answer DABstep's comparison tells apart from ``label``, or None when none of the tries is."""
    tries = []
    items = [i.strip() for i in label.replace(";", ",").split(",") if i.strip()]
    if len(items) > 1:
        tries.append(", ".join(items[:-1]))
    try:
        number = float(label.strip().replace(",", "").lstrip("$").rstrip("%"))
        tries.append(f"{number + max(1.0, abs(number)):g}")
    except ValueError:
        pass
    tries += ["zzchangedzz", "qqalteredqq 0"]
    return next((t for t in tries if not answers_match(t, label)), None)


def _documents_and_frames(names: list[str], context: Path, suite: Path, cache: dict[str, tuple[str, str, str]],
                          report: ImportReport) -> tuple[dict[str, dict[str, str]], list[tuple[str, str]], str]:
    """(inputs, [(document name, text)], problem) for one task's context files."""
    inputs: dict[str, dict[str, str]] = {}
    documents: list[tuple[str, str]] = []
    taken: set[str] = set()
    for name in names:
        if name not in cache:
            cache[name] = _prepare(name, context, suite)
            report.tables[name] = cache[name][2]
        kind, value, status = cache[name]
        if status != "ok":
            return {}, [], status
        if kind == "document":
            documents.append((name, value))
        else:
            inputs[handle_name(name, taken)] = {"file": value, "from": name}
    if sum(len(text) for _, text in documents) > MAX_DOCUMENT_CHARS:
        return {}, [], f"context documents hold more than {MAX_DOCUMENT_CHARS} characters together"
    return inputs, documents, ""


def _prepare(name: str, context: Path, suite: Path) -> tuple[str, str, str]:
    """(kind, relative path or document text, "ok" or why unusable) for one context file."""
    import pandas as pd

    path, status = check_table(context, name, SUFFIXES)
    if path is None:
        return "", "", status
    suffix = path.suffix.lower()
    if suffix == ".csv":
        _, status = read_frame(path)
        return ("frame", copy_table(path, suite, "context", path.name), "ok") if status == "ok" else ("", "", status)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        return "", "", f"context file {name!r} is not UTF-8 ({exc.reason} at byte {exc.start})"
    if suffix in (".md", ".txt"):
        if not text.strip():
            return "", "", f"context file {name!r} is empty"
        return "document", text, "ok"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return "", "", f"context file {name!r} is not JSON ({exc.msg} at line {exc.lineno})"
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data or not all(isinstance(item, dict) for item in data):
        return "", "", f"context file {name!r} is not a non-empty list of JSON objects (it cannot be a table)"
    target = suite / "context" / f"{Path(name).stem}.parquet"
    target.parent.mkdir(exist_ok=True)
    try:
        pd.DataFrame(data).to_parquet(target, index=False)
    except (ValueError, TypeError, ImportError) as exc:  # pyarrow refuses mixed-type columns
        return "", "", f"context file {name!r} cannot be stored as a table: {type(exc).__name__}: {str(exc)[:200]}"
    return "frame", f"context/{target.name}", "ok"


def _context_names(record: dict[str, Any], everything: list[str]) -> tuple[list[str], str]:
    listed = record.get("context_files")
    if listed is None:
        return everything, ""
    if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
        return [], f"context_files must be a list of file names, got {listed!r}"[:200]
    if len(listed) > MAX_CONTEXT_FILES:
        return [], f"{len(listed)} context files; at most {MAX_CONTEXT_FILES}"
    return list(dict.fromkeys(listed)), ""


def _string(record: dict[str, Any], key: str, limit: int, *, required: bool = True) -> tuple[str, str]:
    value = record.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and key == "answer":
        value = str(value)
    if not required and (value is None or value == ""):
        return "", ""
    if not isinstance(value, str) or not value.strip():
        return "", f"{key} must be a non-empty string, got {value!r}"[:200]
    if len(value) > limit:
        return "", f"{key} has {len(value)} characters; at most {limit}"
    return value.strip(), ""


def _outcome(expected: str, text: str) -> str:
    g = grade_dabstep({"expected": expected}, GradeContext(answer=text))
    return "pass" if g.passed else "ambiguous" if g.ambiguous else "no_answer" if g.missing else "wrong_answer"


def import_dabstep(tasks: str | os.PathLike[str], context: str | os.PathLike[str],
                   out: str | os.PathLike[str]) -> ImportReport:
    """Write the suite into ``out`` (new or empty); the report of what was imported and skipped."""
    context_dir = Path(context)
    if not context_dir.is_dir():
        raise BenchmarkImportError(f"the context folder {context_dir} is not a folder")
    report = ImportReport("dabstep", str(out))
    rows = read_jsonl(tasks, "tasks", report)
    everything = sorted(p.name for p in context_dir.iterdir() if not p.name.startswith("."))
    unused = [n for n in everything if not n.lower().endswith(SUFFIXES)]
    everything = [n for n in everything if n.lower().endswith(SUFFIXES)]
    for name in unused:
        report.tables[name] = f"not offered: allowed kinds are {', '.join(SUFFIXES)}"
    if len(everything) > MAX_CONTEXT_FILES:
        raise BenchmarkImportError(f"the context folder {context_dir} has {len(everything)} files; "
                                   f"at most {MAX_CONTEXT_FILES} are offered")
    suite = prepare_out(out)
    cache: dict[str, tuple[str, str, str]] = {}
    seen: set[str] = set()
    for number, record in rows:
        raw_id = record.get("task_id", record.get("id"))
        tid = task_id("dabstep", raw_id)
        label = f"task {raw_id!r} ({Path(tasks).name} line {number})"
        if tid is None or tid in seen:
            why = "id used by an earlier task" if tid else "task_id must be an integer or a short string"
            report.skipped.append((str(raw_id)[:40], f"{label}: {why}"))
            continue
        seen.add(tid)
        if len(report.imported) >= MAX_RECORDS:
            report.skipped.append((str(raw_id), f"{label}: more than {MAX_RECORDS} tasks"))
            continue
        question, problem = _string(record, "question", MAX_TEXT_CHARS)
        guidelines, why = _string(record, "guidelines", MAX_TEXT_CHARS, required=False)
        answer, why2 = _string(record, "answer", MAX_EXPECTED_CHARS)
        problem = problem or why or why2
        if not problem and ("\n" in answer or "\r" in answer):
            problem = "the answer holds a line break; an ANSWER: line cannot state it"
        level = record.get("level") if isinstance(record.get("level"), (str, int)) else None
        names, why = _context_names(record, everything)
        problem = problem or why or ("" if names else "no context files")
        inputs: dict[str, dict[str, str]] = {}
        documents: list[tuple[str, str]] = []
        if not problem:
            inputs, documents, problem = _documents_and_frames(names, context_dir, suite, cache, report)
        changed = changed_answer(answer) if not problem else None
        if not problem and changed is None:
            problem = f"no wrong answer DABstep's comparison tells apart from {answer!r}"
        if problem:
            report.skipped.append((str(raw_id), f"{label}: {problem}"))
            continue
        assert changed is not None
        right, hedged = f"ANSWER: {answer}", f"ANSWER: {answer}\nANSWER: {changed}"
        checks = {right: "pass", f"ANSWER: {changed}": "wrong_answer", hedged: "ambiguous", _NO_ANSWER: "no_answer"}
        failed = [want for text, want in checks.items() if _outcome(answer, text) != want]
        if failed:
            report.skipped.append((str(raw_id), f"{label}: the grader does not tell its scripts apart "
                                                f"({', '.join(failed)} not as expected)"))
            continue
        frames = ", ".join(f"`{h}` (from {spec.pop('from')})" for h, spec in inputs.items())
        docs = "".join(f"\n\nContext document {name}:\n<<<\n{text.strip()}\n>>>" for name, text in documents)
        prompt = (f"{question}\n\n" + (f"Guidelines: {guidelines}\n\n" if guidelines else "")
                  + (f"Data loaded as DataFrames: {frames}." if frames else "No tables come with this task.")
                  + docs + "\n\nEnd your reply with one line `ANSWER: <answer>` that follows the guidelines.")
        grader: dict[str, Any] = {"expected": answer, "id": str(raw_id)}
        if level is not None:
            grader["level"] = str(level)
        probe = "; ".join(f"print('{h}', {h}.shape)" for h in inputs) or "print('no tables')"
        task = {
            "id": tid,
            "description": f"DABstep task {raw_id}" + (f" ({level})" if level is not None else ""),
            "tags": ["dabstep"] + ([str(level)] if level is not None else []) + ["multi_step"],
            "prompt": prompt,
            "inputs": inputs,
            "limits": dict(DEFAULT_LIMITS),
            "graders": [{"dabstep": grader}],
            "scripts": {
                "reference": [{"python": probe}, {"text": right}],
                "wrong": [
                    {"name": "changed_answer", "expect": "wrong_answer", "turns": [{"text": f"ANSWER: {changed}"}]},
                    {"name": "hedged", "expect": "ambiguous", "turns": [{"text": hedged}]},
                    {"name": "no_answer_given", "expect": "no_answer", "turns": [{"text": _NO_ANSWER}]},
                ],
            },
        }
        write_task(suite, task, f"DABstep task {raw_id}, imported by harness_magic.evals import dabstep")
        report.imported.append(tid)
    write_report(suite, report)
    return report
