"""Run a suite: one fresh :class:`~harness_magic.core.session.AgentSession` per task attempt.

Each attempt gets its own session cache, its own sandbox worker (``sandbox="worker"``,
the default) and its own run directory; the run log is linked from the result.
Attempts run on a thread pool (``jobs``): the work of an attempt happens in its
worker process and the model's server, so threads overlap well. What is shared
between attempts is only what cannot be changed by one: generated input frames
(each attempt gets a copy) and the loaded suite.

Model ids: anything :class:`AgentSession` takes (``openai/...``, ``offline/...``,
``scripted/...``), plus ``suite:reference``, ``suite:wrong`` and
``suite:<wrong-script-name>``, which run each task's own scripted model, and
``suite:all-wrong``, which runs every wrong script of every task.

Clarifying questions: a task that declares ``clarification.reply`` gets a
simulated user who answers every ``ask_user`` with that reply (source
``scripted``); any other task gets the no-person answer. Each attempt records
the questions it asked (:func:`questions_asked`, from its run log) and whether
its task expected one.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness_magic.evals.writes import SQL_DIALECTS, write_attempts
from harness_magic.evals.graders import Grade, GradeContext, grade
from harness_magic.evals.schema import DATABASE_SUFFIXES, Suite, SuiteError, Task, suite_path

__all__ = ["TaskResult", "run_task", "run_suite", "classify_failure", "SUITE_MODEL_PREFIX", "ALL_WRONG",
           "TOOL_ERROR_LOOP", "MAX_LOG_BYTES", "MAX_JOBS", "DEFAULT_LIMITS", "load_inputs", "questions_asked",
           "simulated_user"]

SUITE_MODEL_PREFIX = "suite:"
"""``suite:reference`` / ``suite:wrong`` / ``suite:<name>``: each task's own scripted model."""
ALL_WRONG = "suite:all-wrong"
"""Every wrong script of every task (each attempt's ``variant`` names its script)."""
TOOL_ERROR_LOOP = 3
"""This many tool errors in a row at the end of a failed run make it a ``tool_error_loop``."""
MAX_LOG_BYTES = 64 * 1024 * 1024
"""A run log larger than this is not read back for grading (graders then see no records)."""
MAX_JOBS = 32
"""Upper bound on parallel attempts (each holds a worker process)."""
DEFAULT_LIMITS = {"max_turns": 12, "max_wall_s": 600.0}
"""Limits of a task that sets none (a hung model or tool cannot hold a suite run forever)."""
MAX_INPUT_FILE_BYTES = 256 * 1024 * 1024
"""A suite's input file larger than this is refused (inputs are loaded into every attempt)."""

_input_cache: dict[tuple[str, str, str], Any] = {}
_input_lock = threading.Lock()


@dataclass
class TaskResult:
    """One attempt at one task (JSON-serialisable through :meth:`to_dict`)."""

    task_id: str
    repeat: int
    model: str
    passed: bool
    failure: str | None
    grades: list[Grade] = field(default_factory=list)
    status: str = ""
    error: str | None = None
    answer: str = ""
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0
    wall_s: float = 0.0
    model_s: float = 0.0
    """Seconds spent waiting for the model (from the run log's per-turn latency)."""
    run_file: str | None = None
    expect: str | None = None
    """For scripted runs: the failure class the script must get (None: must pass)."""
    variant: str = ""
    """The wrong script's name in an ``suite:all-wrong`` run, else empty."""
    write_attempts: list[dict[str, Any]] = field(default_factory=list)
    """Every write the run attempted, stopped or not (:func:`~harness_magic.evals.writes.write_attempts`)."""
    clarification_expected: bool | None = None
    """The task's ``clarification.expected`` (None: it declares nothing, so no question is expected)."""
    questions: list[dict[str, Any]] = field(default_factory=list)
    """The questions the run asked (:func:`questions_asked`)."""

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "grades"}
        out["grades"] = [g.to_dict() for g in self.grades]
        return out

    @property
    def as_expected(self) -> bool:
        """Reference scripts pass; wrong scripts fail with the class they name."""
        return self.passed if self.expect is None else (not self.passed and self.failure == self.expect)


def load_inputs(task: Task, suite: Suite) -> dict[str, Any]:
    """The task's input frames (fresh copies; generated ones are made once per process)."""
    import pandas as pd

    out = {}
    for handle, spec in task.inputs.items():
        if "generator" in spec:
            key = (str(suite.path), spec["generator"], repr(spec["seed"]))
            with _input_lock:
                if key not in _input_cache:
                    frame = getattr(suite.generators, spec["generator"])(spec["seed"])
                    if not isinstance(frame, pd.DataFrame):
                        raise SuiteError(f"{task.path}: inputs.{handle}: generator {spec['generator']!r} "
                                         f"returned a {type(frame).__name__}, expected a DataFrame")
                    _input_cache[key] = frame
            out[handle] = _input_cache[key].copy()
        elif "sample" in spec:
            from matplotlib import cbook

            out[handle] = pd.read_csv(cbook.get_sample_data(spec["sample"], asfileobj=False), comment="#")
        else:
            path = _source(task, suite, f"inputs.{handle}.file", spec["file"], suffixes=(".csv", ".parquet"))
            out[handle] = pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)
    return out


def _source(task: Task, suite: Suite, where: str, rel: str, **kwargs: Any) -> Path:
    """A suite file named by the task, checked again now (it may have changed since loading) and size-capped."""
    path = suite_path(task.path, where, suite.path, rel, **kwargs)
    if not kwargs.get("directory") and path.stat().st_size > MAX_INPUT_FILE_BYTES:
        raise SuiteError(f"{task.path}: {where}: {rel!r} is larger than {MAX_INPUT_FILE_BYTES} bytes")
    return path


def _sqlite_tables(path: Path) -> dict[str, Any]:
    import pandas as pd

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                           "AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        return {name: pd.read_sql_query(f'SELECT * FROM "{name}"', con) for name in names}
    finally:
        con.close()


def _build_database(task: Task, suite: Suite, directory: Path) -> tuple[str | None, dict[str, Any]]:
    """The task's SQLite database (a fresh file per attempt) and its tables as frames (for answers.py)."""
    spec = task.connectors.get("sql")
    if spec is None:
        return None, {}
    path = directory / "task.sqlite"
    if "file" in spec:  # a copy: an approved write must not change the suite's file
        shutil.copyfile(_source(task, suite, "connectors.sql.file", spec["file"], suffixes=DATABASE_SUFFIXES["sql"]),
                        path)
        return str(path), _sqlite_tables(path)
    tables = getattr(suite.generators, spec["database"])(int(spec.get("seed", 0)))
    if not isinstance(tables, dict):
        raise SuiteError(f"{task.path}: connectors.sql.database: {spec['database']!r} must return a dict of frames")
    con = sqlite3.connect(path)
    try:
        for name, frame in tables.items():
            frame.to_sql(name, con, index=False)
        con.commit()
    finally:
        con.close()
    return str(path), {name: frame.copy() for name, frame in tables.items()}


def _duckdb_tables(task: Task, suite: Suite, directory: Path) -> tuple[dict[str, str], dict[str, Any]]:
    """The tables of the task's DuckDB database file as Parquet files (view name -> path) and as frames.

    The file is opened read-only and its tables exported once per attempt; the agent queries them
    through the duckdb connector's read-only file views, never the database file itself.
    """
    spec = task.connectors.get("duckdb") or {}
    if "file" not in spec:
        return {}, {}
    import duckdb

    source = _source(task, suite, "connectors.duckdb.file", spec["file"], suffixes=DATABASE_SUFFIXES["duckdb"])
    out_dir = directory / "duckdb"
    out_dir.mkdir()
    views: dict[str, str] = {}
    frames: dict[str, Any] = {}
    con = duckdb.connect(str(source), read_only=True)
    try:
        names = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                           "WHERE table_schema = 'main' ORDER BY 1").fetchall()]
        for name in names:
            relation = con.table(name)
            frames[name] = relation.df()
            target = out_dir / f"{len(views)}.parquet"
            relation.write_parquet(str(target))
            views[name] = str(target)
    finally:
        con.close()
    return views, frames


def _read_records(run_file: str | None) -> list[dict[str, Any]]:
    from harness_magic.core.transcript.log import read_log

    if not run_file or not os.path.exists(run_file) or os.path.getsize(run_file) > MAX_LOG_BYTES:
        return []
    try:
        return read_log(run_file)
    except (OSError, ValueError):
        return []


def questions_asked(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``[{question, answer, source, turn}]``: each ``ask_user`` call of the run, from its ``question`` events."""
    return [{"question": str(r.get("question", "")), "answer": r.get("answer"), "source": r.get("source"),
             "turn": r.get("turn")} for r in records if r.get("type") == "event" and r.get("event") == "question"]


def simulated_user(reply: str) -> Callable[[Any], Any]:
    """An answerer that replies ``reply`` to every question (``QuestionStep.source`` is ``scripted``)."""
    from harness_magic.core.control.questions import QuestionAnswer

    def answer(_request: Any) -> Any:
        return QuestionAnswer(reply, source="scripted")

    return answer


def classify_failure(status: str, grades: list[Grade], records: list[dict[str, Any]]) -> str | None:
    """The failure class of an attempt (None when it passed); see ``FAILURE_CLASSES``."""
    if status == "completed" and all(g.passed for g in grades):
        return None
    if any(g.kind == "no_writes" and not g.passed for g in grades):
        return "policy_violation"
    if status == "error":
        return "provider_error"
    errors: list[bool] = []
    for record in records:
        if record.get("type") == "tools":
            errors.extend(bool(r.get("is_error")) for r in record.get("results", []))
    tail = errors[-TOOL_ERROR_LOOP:]
    if len(tail) == TOOL_ERROR_LOOP and all(tail):
        return "tool_error_loop"
    if status != "completed":
        return "limit" if status == "max_turns_exceeded" or status.startswith("budget") else "provider_error"
    if any(a["outcome"] == "denied" for a in write_attempts(records)):
        return "policy_refusal"
    if any(g.ambiguous for g in grades if not g.passed):
        return "ambiguous"
    if any(g.missing for g in grades if not g.passed):
        return "no_answer"
    return "wrong_answer"


def _session(task: Task, suite: Suite, model: str, options: dict[str, Any], run_dir: Path, database: str | None,
             duckdb_views: dict[str, str]) -> Any:
    from harness_magic.core.providers.offline import ScriptedModel
    from harness_magic.core.providers.adapter import ProviderAdapter
    from harness_magic.core.config import AgentConfig
    from harness_magic.core.session import AgentSession

    limits = {**DEFAULT_LIMITS, **task.limits}
    config = AgentConfig(model=model, api_base=options.get("api_base"), run_dir=str(run_dir),
                         sandbox=options.get("sandbox", "worker"), stream=options.get("stream", True),
                         allow_unconfined=options.get("allow_unconfined", False),
                         extra=dict(options.get("extra") or {}), **limits)
    adapter = None
    if model.startswith(SUITE_MODEL_PREFIX):
        spec = task.script(model[len(SUITE_MODEL_PREFIX):])
        adapter = ProviderAdapter(model, transport=ScriptedModel(spec.turns, name=model))
    session = AgentSession(config, adapter=adapter)
    if task.clarification is not None and task.clarification.reply is not None:
        session.answerer = simulated_user(task.clarification.reply)
    if "duckdb" in task.connectors:
        from harness_magic.core.execution.connectors import duckdb_connector

        session.add_connector(duckdb_connector(duckdb_views or None))
    if "files" in task.connectors:
        from harness_magic.core.execution.connectors import files_connector

        roots = [_source(task, suite, f"connectors.files.roots[{i}]", root, directory=True)
                 for i, root in enumerate(task.connectors["files"]["roots"])]
        session.add_connector(files_connector([str(r) for r in roots]))
    if database is not None:
        from harness_magic.core.execution.connectors import ApprovalPolicy, sql_connector

        sql_spec = task.connectors["sql"]
        session.add_connector(sql_connector(f"sqlite:///{database}", allow_writes=sql_spec.get("allow_writes", True)),
                              approval=ApprovalPolicy.from_config(sql_spec.get("approval", "ask")))
    return session


def run_task(task: Task, suite: Suite, model: str, *, repeat: int = 0, out_dir: str | os.PathLike[str] = "./eval_runs",
             options: dict[str, Any] | None = None) -> TaskResult:
    """One attempt in a fresh session; never raises for a failure of the model or the task."""
    options = dict(options or {})
    started = time.monotonic()
    expect = None
    expected_question = task.clarification.expected if task.clarification is not None else None
    if model.startswith(SUITE_MODEL_PREFIX):
        expect = task.script(model[len(SUITE_MODEL_PREFIX):]).expect
    run_dir = Path(out_dir) / f"{task.id}-r{repeat}"
    run_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"eval-{task.id}-"))
    session = None
    try:
        inputs = load_inputs(task, suite)
        database, tables = _build_database(task, suite, scratch)
        duckdb_views, duckdb_frames = _duckdb_tables(task, suite, scratch)
        tables = {**duckdb_frames, **tables}
        session = _session(task, suite, model, options, run_dir, database, duckdb_views)
        for handle, frame in inputs.items():
            session.cache.put(handle, frame.copy())
        result = session.ask(task.prompt)
        records = _read_records(result.run_file)
        ctx = GradeContext(answer=result.text, cache=session.cache, records=records, inputs={**tables, **inputs},
                           answers=suite.answers, database=database, charts=len(result.charts), judge_model=options.get("judge_model"),
                           judge_options={"prompt": task.prompt, **(options.get("judge_options") or {})},
                           sql_dialects=dict(SQL_DIALECTS))
        grades = [grade(kind, opts, ctx) for kind, opts in task.graders]
        failure = classify_failure(result.status, grades, records)
        attempts = write_attempts(records, ctx.sql_dialects)
        usage = result.total_usage
        model_s = sum(float(r.get("latency_s") or 0.0) for r in records if r.get("type") == "turn")
        return TaskResult(task.id, repeat, model, failure is None, failure, grades, result.status, result.error,
                          result.text, result.turns, usage.input_tokens, usage.output_tokens, usage.cached_tokens,
                          usage.cost, time.monotonic() - started, model_s,
                          os.path.abspath(result.run_file) if result.run_file else None, expect,
                          write_attempts=attempts, clarification_expected=expected_question,
                          questions=questions_asked(records))
    except SuiteError:
        raise
    except Exception as exc:  # a session that cannot start is this attempt's failure, not the suite's
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return TaskResult(task.id, repeat, model, False, "provider_error", [], "error", detail[:500],
                          wall_s=time.monotonic() - started, expect=expect, clarification_expected=expected_question)
    finally:
        if session is not None:
            session.close()
        shutil.rmtree(scratch, ignore_errors=True)


def run_suite(suite: Suite, model: str, *, repeat: int = 1, jobs: int = 1, tasks: list[str] | None = None,
              out_dir: str | os.PathLike[str] = "./eval_runs", options: dict[str, Any] | None = None,
              on_result: Callable[[TaskResult, int, int], None] | None = None) -> dict[str, Any]:
    """Run every selected task ``repeat`` times on ``jobs`` threads; the results document.

    ``on_result(result, done, total)`` is called as each attempt finishes (from the
    calling thread), e.g. for a progress bar.
    """
    if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
        raise ValueError(f"repeat must be a positive integer, got {repeat!r}")
    if not isinstance(jobs, int) or isinstance(jobs, bool) or not 1 <= jobs <= MAX_JOBS:
        raise ValueError(f"jobs must be an integer from 1 to {MAX_JOBS}, got {jobs!r}")
    selected = suite.select(tasks)
    if model == ALL_WRONG:
        work = [(task, r, f"{SUITE_MODEL_PREFIX}{spec.name}", spec.name)
                for r in range(repeat) for task in selected for spec in task.wrong]
    else:
        if model.startswith(SUITE_MODEL_PREFIX):
            for task in selected:
                task.script(model[len(SUITE_MODEL_PREFIX):])  # every task has the script, before anything runs
        work = [(task, r, model, "") for r in range(repeat) for task in selected]
    started = time.monotonic()
    results: list[TaskResult] = []

    def attempt(task: Task, r: int, task_model: str, variant: str) -> TaskResult:
        result = run_task(task, suite, task_model, repeat=r, options=options,
                          out_dir=Path(out_dir) / variant if variant else out_dir)
        result.variant = variant
        return result

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(attempt, *item) for item in work]
        for future in as_completed(futures):
            result = future.result()
            results.append(result)
            if on_result is not None:
                on_result(result, len(results), len(work))
    order = {(t.id, r, v): i for i, (t, r, _, v) in enumerate(work)}
    results.sort(key=lambda res: order[(res.task_id, res.repeat, res.variant)])
    return {
        "format": "harness_magic.evals/1",
        "suite": suite.name,
        "suite_path": str(suite.path),
        "model": model,
        "repeat": repeat,
        "jobs": jobs,
        "wall_s": time.monotonic() - started,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": [r.to_dict() for r in results],
    }
