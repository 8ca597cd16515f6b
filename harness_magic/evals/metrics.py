"""The harness's own metrics, from a results document and the run logs it links.

Per results document (one suite run with one model):

``completion``
    Pass rate over all attempts and over the tasks tagged ``single_step`` /
    ``multi_step`` (tags from the result, else from the suite's task files).
``verification``
    Of the attempts whose final answer the verifier checked (it cited a source or
    restated a retrieved definition: ``event`` records ``name: verification``,
    ``tool: final_answer`` in the run log), the share it accepted.
``clarification``
    Of the attempts whose task expects a clarifying question (``clarification:
    {expected: true}``), the share that asked at least one (``ask_user``).
``unneeded_questions``
    Of the other attempts (the task expects none, or declares nothing), the share
    that asked one anyway. Results written before questions were recorded (no
    ``questions`` key) count in neither.
``prevention``
    In tasks that forbid writes (a ``no_writes`` grader): writes attempted, and the
    share stopped (denied by the approval policy or refused by a read-only tool).
``time_to_correct``
    Wall seconds of the passed attempts: median and mean.
``grounding``
    Of the verifier's findings on final answers (each cited source id, each restated
    definition), the share that held: cited sources the run retrieved, definitions
    consistent with the retrieved formula.
``taxonomy``
    Failed attempts by kind (wrong answer, ambiguous, no answer, policy violation,
    budget, tool error, timeout, provider error), each with one example and its run log.

A metric that has nothing to measure is ``None`` with the reason in ``notes``;
no metric is ever a made-up number.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any, Iterable

from harness_magic.core.text.counts import count

__all__ = ["harness_metrics", "metric_lines", "taxonomy_kind", "TAXONOMY", "CLARIFICATION_NOTE", "task_tags",
           "verification_facts"]

CLARIFICATION_NOTE = "n/a: no task expects a clarifying question"
TAXONOMY = ("wrong answer", "ambiguous", "no answer", "policy violation", "budget", "tool error", "timeout",
            "provider error")
"""Failure kinds of the taxonomy table, in order (provider error: the model or its script failed)."""
MAX_LOG_BYTES = 64 * 1024 * 1024
"""A run log larger than this is not read (its attempt then counts as unchecked)."""
MAX_TASK_FILE_BYTES = 1_000_000
"""A task file larger than this is not read for tags (the loader refuses it too)."""
STOPPED = ("denied", "refused")
"""Write-attempt outcomes that mean the write did not run."""


def taxonomy_kind(result: dict[str, Any]) -> str | None:
    """The taxonomy row of a failed attempt (None when it passed)."""
    if result.get("passed"):
        return None
    failure = result.get("failure")
    if failure == "limit":
        return "timeout" if result.get("status") == "budget_wall_time" else "budget"
    return {"wrong_answer": "wrong answer", "ambiguous": "ambiguous", "no_answer": "no answer",
            "policy_violation": "policy violation", "policy_refusal": "policy violation",
            "tool_error_loop": "tool error"}.get(str(failure), "provider error")


def task_tags(data: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Task id -> tags: from the results when they carry them, else from the suite's task files (if still there)."""
    tags = {r["task_id"]: tuple(r["tags"]) for r in data["results"] if isinstance(r.get("tags"), list)}
    folder = data.get("suite_path")
    if tags or not isinstance(folder, str) or not os.path.isdir(folder):
        return tags
    import yaml

    for file in sorted(Path(folder).glob("*.yaml")):
        try:
            if file.stat().st_size > MAX_TASK_FILE_BYTES:
                continue
            raw = yaml.safe_load(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if isinstance(raw, dict) and isinstance(raw.get("id"), str) and isinstance(raw.get("tags"), list):
            tags[raw["id"]] = tuple(str(t) for t in raw["tags"])
    return tags


def _records(run_file: Any) -> list[dict[str, Any]] | None:
    if not isinstance(run_file, str) or not os.path.isfile(run_file) or os.path.getsize(run_file) > MAX_LOG_BYTES:
        return None
    from harness_magic.core.transcript.log import read_log

    try:
        return read_log(run_file)
    except (OSError, ValueError):
        return None


def verification_facts(records: Iterable[dict[str, Any]]) -> tuple[bool | None, int, int]:
    """(final answer accepted, or None when not checked; findings that held; findings) from run-log records."""
    accepted: bool | None = None
    held = total = 0
    for record in records:
        if record.get("type") != "event" or record.get("name") != "verification" \
                or record.get("tool") != "final_answer":
            continue
        checks = [c for c in record.get("checks") or [] if isinstance(c, dict)]
        total += len(checks)
        held += sum(bool(c.get("ok")) for c in checks)
        accepted = bool(record.get("passed")) if accepted is None else accepted and bool(record.get("passed"))
    return accepted, held, total


def _rate(right: int, total: int) -> dict[str, Any] | None:
    return {"rate": right / total, "right": right, "total": total} if total else None


def harness_metrics(data: dict[str, Any]) -> dict[str, Any]:
    """The metrics of one results document (see the module docstring)."""
    results = data["results"]
    notes: dict[str, str] = {"clarification": CLARIFICATION_NOTE}
    tags = task_tags(data)
    completion: dict[str, Any] = {"all": _rate(sum(r["passed"] for r in results), len(results))}
    for kind in ("single_step", "multi_step"):
        picked = [r for r in results if kind in tags.get(r["task_id"], ())]
        completion[kind] = _rate(sum(r["passed"] for r in picked), len(picked))
        if not picked:
            notes[f"completion.{kind}"] = f"n/a: no task tagged {kind}" + ("" if tags else " (no task tags found)")
    checked = accepted = held = findings = unread = 0
    for r in results:
        records = _records(r.get("run_file"))
        if records is None:
            unread += 1
            continue
        ok, h, n = verification_facts(records)
        if ok is not None:
            checked += 1
            accepted += ok
        held += h
        findings += n
    verification = _rate(accepted, checked)
    grounding = _rate(held, findings)
    log_note = f" ({count(unread, 'run log')} not found)" if unread else ""
    if verification is None:
        notes["verification"] = "n/a: no final answer cited a source or restated a definition" + log_note
    if grounding is None:
        notes["grounding"] = "n/a: no claim with a citation or definition to verify" + log_note
    recorded = [r for r in results if isinstance(r.get("questions"), list)]
    expecting = [r for r in recorded if r.get("clarification_expected") is True]
    others = [r for r in recorded if r.get("clarification_expected") is not True]
    clarification = _rate(sum(bool(r["questions"]) for r in expecting), len(expecting))
    unneeded = _rate(sum(bool(r["questions"]) for r in others), len(others))
    old = f" ({count(len(results) - len(recorded), 'result')} from before questions were recorded)" if len(recorded) < len(results) \
        else ""
    if clarification is None:
        notes["clarification"] = CLARIFICATION_NOTE + old
    else:
        del notes["clarification"]
    if unneeded is None:
        notes["unneeded_questions"] = "n/a: every attempt's task expects a question" + old if recorded \
            else "n/a: no result records its questions" + old
    guarded = [r for r in results if any(g.get("kind") == "no_writes" for g in r.get("grades", []))]
    attempts = [a for r in guarded for a in r.get("write_attempts") or [] if isinstance(a, dict)]
    prevention = _rate(sum(a.get("outcome") in STOPPED for a in attempts), len(attempts))
    if prevention is None:
        notes["prevention"] = ("n/a: no task forbids writes" if not guarded
                               else f"n/a: no write attempted in {count(len(guarded), 'read-only attempt')}")
    times = [float(r.get("wall_s", 0.0)) for r in results if r["passed"]]
    time_to_correct = {"median_s": statistics.median(times), "mean_s": statistics.fmean(times),
                       "n": len(times)} if times else None
    if time_to_correct is None:
        notes["time_to_correct"] = "n/a: no attempt passed"
    taxonomy: dict[str, dict[str, Any]] = {kind: {"count": 0, "example": None} for kind in TAXONOMY}
    for r in results:
        failure_kind = taxonomy_kind(r)
        if failure_kind is None:
            continue
        row = taxonomy[failure_kind]
        row["count"] += 1
        if row["example"] is None:
            detail = "; ".join(g.get("detail", "") for g in r.get("grades", []) if not g.get("passed"))
            if failure_kind == "provider error" and r.get("error"):
                detail = str(r["error"])  # the model or its script failed: that is the example's story
            row["example"] = {"task_id": r["task_id"], "repeat": r["repeat"], "variant": r.get("variant", ""),
                              "failure": r.get("failure"), "status": r.get("status", ""),
                              "detail": (detail or r.get("error") or "")[:300], "run_file": r.get("run_file")}
    return {"suite": data.get("suite", "?"), "model": data.get("model", "?"), "attempts": len(results),
            "completion": completion, "verification": verification, "clarification": clarification,
            "unneeded_questions": unneeded,
            "prevention": prevention, "writes_attempted": len(attempts), "time_to_correct": time_to_correct,
            "grounding": grounding, "taxonomy": taxonomy, "notes": notes}


def metric_lines(metrics: dict[str, Any]) -> list[tuple[str, str]]:
    """(metric, value as text) rows for reports and ``compare``; n/a rows say why."""
    notes = metrics["notes"]

    def rate(value: dict[str, Any] | None, key: str) -> str:
        if value is None:
            return notes.get(key, "n/a")
        return f"{value['rate']:.1%} ({value['right']}/{value['total']})"

    c = metrics["completion"]
    t = metrics["time_to_correct"]
    return [
        ("task completion", rate(c["all"], "completion.all")),
        ("task completion, single-step", rate(c["single_step"], "completion.single_step")),
        ("task completion, multi-step", rate(c["multi_step"], "completion.multi_step")),
        ("verification pass rate", rate(metrics["verification"], "verification")),
        ("clarification rate", rate(metrics.get("clarification"), "clarification")),
        ("questions asked when none was expected", rate(metrics.get("unneeded_questions"), "unneeded_questions")),
        ("policy-violation prevention (writes stopped / attempted)", rate(metrics["prevention"], "prevention")),
        ("time to a correct answer", notes["time_to_correct"] if t is None
         else f"median {t['median_s']:.2f} s, mean {t['mean_s']:.2f} s ({t['n']} passed)"),
        ("grounding quality (verified claims / checked claims)", rate(metrics["grounding"], "grounding")),
    ]
