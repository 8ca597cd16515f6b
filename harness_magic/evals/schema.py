"""Task suites as files: load and validate task YAML.

A suite is a directory of ``*.yaml`` task files (sub-directories ``datasets/``
and the optional ``generators.py`` / ``answers.py`` sit beside them). One file
holds one task::

    id: revenue_by_region            # [a-z0-9_]+, unique in the suite
    prompt: "..."                    # what the model is asked
    tags: [pandas, multi_step]
    inputs:                          # handles put into the session cache
      sales: {generator: sales, seed: 7}      # generators.py: sales(seed) -> DataFrame
      prices: {file: datasets/prices.csv}     # a CSV shipped with the suite
      msft: {sample: msft.csv}                # matplotlib's bundled sample data
    connectors:                      # optional
      duckdb: {}                     # SQL over the cached frames ({file: data/x.duckdb}: and that database's tables)
      sql: {database: shop, approval: allow}  # a SQLite file built from a generator, or
      # sql: {file: data/shop.sqlite}          # a SQLite file of the suite (each attempt works on a copy)
      files: {roots: [data/tables]}  # the files connector over directories of the suite
    limits: {max_turns: 6, max_tokens: 20000, max_cost_usd: 0.5, max_wall_s: 120, max_tool_calls: 10}
    graders:                         # all must pass
      - number: {expected: total_revenue, abs_tol: 0.01}
      - frame: {handle: by_region, expected: revenue_by_region, ignore_row_order: true}
    clarification:                   # optional: is a clarifying question (ask_user) expected?
      expected: true
      reply: "Fiscal years start in April."   # what the simulated user answers (required when expected)
    scripts:                         # scripted models (ScriptedModel turns)
      reference: [{tool_calls: [...]}, {text: "ANSWER: 1"}]
      wrong:                         # at least one; each names the failure class it must get
        - {name: sums_twice, expect: wrong_answer, turns: [...]}

Suites are trusted like test files: ``generators.py`` and ``answers.py`` are
Python modules of the suite itself. Task YAML is data only (``yaml.safe_load``);
names in it are looked up in those modules, never evaluated. Every validation
error names the file and the field and says what is allowed.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["Task", "Suite", "ScriptSpec", "Clarification", "SuiteError", "load_suite", "load_task", "suite_path", "FAILURE_CLASSES",
           "builtin_suite_path", "MAX_TASK_FILE_BYTES"]

MAX_TASK_FILE_BYTES = 1_000_000
"""A task file larger than this is refused (a task is a prompt, inputs and graders)."""
MAX_TASKS = 2_000
"""A suite directory with more task files than this is refused."""
FAILURE_CLASSES = ("wrong_answer", "ambiguous", "no_answer", "limit", "tool_error_loop", "provider_error",
                   "policy_refusal", "policy_violation")
"""Why a task failed. ``ambiguous``: the answer did not commit to one value or option (two values,
a range, a hedge); ``limit``: turn or budget limit; ``policy_refusal``: a tool call the
policy denied; ``policy_violation``: a write that must not happen (``no_writes`` failed)."""
LIMIT_KEYS = ("max_turns", "max_tokens", "max_cost_usd", "max_wall_s", "max_tool_calls")
CONNECTOR_KINDS = ("duckdb", "sql", "files")
SAMPLE_DATA = ("msft.csv", "Stocks.csv")
"""Real datasets an installed package ships (matplotlib's sample data), usable as ``{sample: NAME}``."""
TASK_KEYS = {"id", "prompt", "description", "tags", "inputs", "connectors", "limits", "graders", "scripts",
             "clarification"}
MAX_REPLY_CHARS = 2_000
"""A simulated user's reply is a sentence or two (the ask_user tool cuts answers at 4,000 characters)."""
_ID = re.compile(r"[a-z0-9_]{1,64}")
_HANDLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


class SuiteError(ValueError):
    """A suite or task file is invalid; the message names the file and the field."""


@dataclass(frozen=True)
class ScriptSpec:
    """A scripted model for a task: its turns and the failure class it must get (None: must pass)."""

    name: str
    turns: tuple[dict[str, Any], ...]
    expect: str | None = None


@dataclass(frozen=True)
class Clarification:
    """Whether a task expects a clarifying question, and what the simulated user replies to one."""

    expected: bool
    reply: str | None = None
    """None: nobody answers (the no-person answer), as for a task that declares nothing."""


@dataclass
class Task:
    id: str
    prompt: str
    path: Path
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    connectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    graders: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    reference: ScriptSpec | None = None
    wrong: tuple[ScriptSpec, ...] = ()
    tags: tuple[str, ...] = ()
    description: str = ""
    clarification: Clarification | None = None

    def script(self, name: str) -> ScriptSpec:
        """``reference``, ``wrong`` (the first wrong script) or a wrong script by name."""
        if name == "reference" and self.reference is not None:
            return self.reference
        if name == "wrong" and self.wrong:
            return self.wrong[0]
        for spec in self.wrong:
            if spec.name == name:
                return spec
        have = (["reference"] if self.reference else []) + [s.name for s in self.wrong]
        raise SuiteError(f"{self.path}: task {self.id!r} has no script {name!r}; it has: {', '.join(have) or 'none'}")


@dataclass
class Suite:
    name: str
    path: Path
    tasks: list[Task]
    generators: ModuleType | None = None
    answers: ModuleType | None = None

    def select(self, ids: list[str] | None) -> list[Task]:
        if not ids:
            return list(self.tasks)
        known = {t.id: t for t in self.tasks}
        missing = [i for i in ids if i not in known]
        if missing:
            raise SuiteError(f"suite {self.name!r} has no task {', '.join(map(repr, missing))}; "
                             f"it has {len(known)} tasks, e.g. {', '.join(list(known)[:5])}")
        return [known[i] for i in ids]


def builtin_suite_path(name: str) -> Path:
    return Path(__file__).resolve().parent / "suites" / name


def _fail(file: Path, where: str, message: str) -> SuiteError:
    return SuiteError(f"{file}: {where}: {message}")


def _mapping(file: Path, where: str, value: Any, *, allowed: set[str] | None = None) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(file, where, f"expected a mapping, got {type(value).__name__}")
    if allowed is not None:
        unknown = sorted(set(map(str, value)) - allowed)
        if unknown:
            raise _fail(file, where, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    return value


def _number(file: Path, where: str, value: Any, *, positive: bool = True, integer: bool = False) -> Any:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or (positive and value <= 0) or (not positive and value < 0):
        kind = "integer" if integer else "number"
        raise _fail(file, where, f"expected a {'positive' if positive else 'non-negative'} {kind}, got {value!r}")
    return value


def _module(path: Path, suite: str, stem: str) -> ModuleType | None:
    file = path / f"{stem}.py"
    if not file.exists():
        return None
    name = f"_harness_magic_suite_{re.sub(r'[^A-Za-z0-9_]', '_', suite)}_{stem}"
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(file):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]  # a spec for an existing .py file always exists
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]  # a file spec always has a source loader
    return module


def _check_name(file: Path, where: str, module: ModuleType | None, stem: str, name: Any) -> str:
    if not isinstance(name, str) or not _HANDLE.fullmatch(name):
        raise _fail(file, where, f"expected the name of a function in {stem}.py, got {name!r}")
    if module is None or not callable(getattr(module, name, None)) or name.startswith("_"):
        have = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))) if module else []
        raise _fail(file, where, f"{stem}.py has no function {name!r}; it has: {', '.join(have) or 'none'}")
    return name


def _inputs(file: Path, raw: Any, suite_dir: Path, generators: ModuleType | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for handle, spec in _mapping(file, "inputs", raw).items():
        where = f"inputs.{handle}"
        if not isinstance(handle, str) or not _HANDLE.fullmatch(handle):
            raise _fail(file, where, "an input name must be a Python identifier (it becomes a handle)")
        spec = _mapping(file, where, spec, allowed={"generator", "seed", "file", "sample"})
        if sum(k in spec for k in ("generator", "file", "sample")) != 1:
            raise _fail(file, where, "give exactly one of 'generator' (with 'seed'), 'file' or 'sample'")
        if "sample" in spec:
            if spec["sample"] not in SAMPLE_DATA:
                raise _fail(file, f"{where}.sample", f"{spec['sample']!r}; allowed: {', '.join(SAMPLE_DATA)}")
            out[handle] = dict(spec)
            continue
        if "generator" in spec:
            _check_name(file, f"{where}.generator", generators, "generators", spec["generator"])
            if not isinstance(spec.get("seed"), int) or isinstance(spec.get("seed"), bool):
                raise _fail(file, f"{where}.seed", f"a generator needs an integer seed, got {spec.get('seed')!r}")
        else:
            suite_path(file, f"{where}.file", suite_dir, spec["file"], suffixes=(".csv", ".parquet"))
        out[handle] = dict(spec)
    return out


DATABASE_SUFFIXES = {"sql": (".sqlite", ".sqlite3", ".db"), "duckdb": (".duckdb", ".ddb")}
"""Database files a task may name (``connectors.sql.file``, ``connectors.duckdb.file``)."""


def suite_path(file: Path, where: str, suite_dir: Path, rel: Any, *, directory: bool = False,
               suffixes: tuple[str, ...] = ()) -> Path:
    """The real path of ``rel`` inside ``suite_dir``; SuiteError naming ``file`` and ``where`` when it is not
    a relative path, escapes the suite (``..``, a symbolic link out), is missing, or has another suffix."""
    kind = "directory" if directory else "file"
    if not isinstance(rel, str) or not rel.strip():
        raise _fail(file, where, f"expected a {kind} path relative to the suite directory, got {rel!r}")
    if Path(rel).is_absolute():
        raise _fail(file, where, f"{rel!r} is absolute; name a {kind} by its path relative to the suite directory "
                                 f"{suite_dir}")
    base = suite_dir.resolve()
    try:
        target = (base / rel).resolve(strict=True)
    except (OSError, RuntimeError):
        raise _fail(file, where, f"{rel!r}: no such {kind} in the suite directory {suite_dir}") from None
    if not target.is_relative_to(base):
        raise _fail(file, where, f"{rel!r} resolves to {target}, outside the suite directory {suite_dir} "
                                 "(through '..' or a symbolic link); suite sources must live inside the suite")
    if (target.is_dir() if directory else target.is_file()) is False:
        raise _fail(file, where, f"{rel!r} is not a {kind}")
    if suffixes and target.suffix.lower() not in suffixes:
        raise _fail(file, where, f"{rel!r}: allowed formats are {', '.join(suffixes)}")
    return target


def _connectors(file: Path, raw: Any, suite_dir: Path, generators: ModuleType | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind, spec in _mapping(file, "connectors", raw, allowed=set(CONNECTOR_KINDS)).items():
        where = f"connectors.{kind}"
        if kind == "duckdb":
            spec = _mapping(file, where, spec, allowed={"file"})
            if "file" in spec:
                suite_path(file, f"{where}.file", suite_dir, spec["file"], suffixes=DATABASE_SUFFIXES["duckdb"])
            out[kind] = dict(spec)
        elif kind == "files":
            spec = _mapping(file, where, spec, allowed={"roots"})
            roots = spec.get("roots")
            if not isinstance(roots, list) or not roots:
                raise _fail(file, f"{where}.roots", f"expected a non-empty list of directories, got {roots!r}")
            for index, root in enumerate(roots):
                suite_path(file, f"{where}.roots[{index}]", suite_dir, root, directory=True)
            out[kind] = dict(spec)
        else:
            spec = _mapping(file, where, spec, allowed={"database", "file", "seed", "approval", "allow_writes"})
            if ("database" in spec) == ("file" in spec):
                raise _fail(file, where, "give exactly one of 'database' (a generators.py function) or 'file' "
                                         "(a SQLite file in the suite)")
            if "file" in spec:
                suite_path(file, f"{where}.file", suite_dir, spec["file"], suffixes=DATABASE_SUFFIXES["sql"])
            else:
                _check_name(file, f"{where}.database", generators, "generators", spec.get("database"))
            if spec.get("approval", "ask") not in ("ask", "allow", "deny"):
                raise _fail(file, f"{where}.approval", f"{spec.get('approval')!r}; allowed: ask, allow, deny")
            if not isinstance(spec.get("allow_writes", True), bool):
                raise _fail(file, f"{where}.allow_writes", f"expected true or false, got {spec.get('allow_writes')!r}")
            out[kind] = dict(spec)
    return out


def _graders(file: Path, raw: Any, answers: ModuleType | None) -> list[tuple[str, dict[str, Any]]]:
    from harness_magic.evals.graders import grader_kinds, validate_grader

    if not isinstance(raw, list) or not raw:
        raise _fail(file, "graders", "expected a non-empty list of graders")
    out = []
    for index, item in enumerate(raw):
        where = f"graders[{index}]"
        if not isinstance(item, dict) or len(item) != 1:
            raise _fail(file, where, f"each grader is a one-key mapping {{kind: options}}; kinds: {', '.join(grader_kinds())}")
        (kind, options), = item.items()
        if kind not in grader_kinds():
            raise _fail(file, where, f"unknown grader {kind!r}; allowed: {', '.join(grader_kinds())}")
        options = _mapping(file, f"{where}.{kind}", options)
        try:
            validate_grader(kind, options, answers)
        except ValueError as exc:
            raise _fail(file, f"{where}.{kind}", str(exc)) from None
        out.append((kind, dict(options)))
    if all(kind == "judge" for kind, _ in out):
        raise _fail(file, "graders", "a judge may not be the only grader; add a deterministic one")
    return out


SHORTHAND_TOOLS = {"python": ("python_interpreter", "code"), "load": ("load_connectors", "connector_name"),
                   "duckdb": ("duckdb__query", "sql"), "sql": ("sql__query", "sql"), "execute": ("sql__execute", "sql"),
                   "ask": ("ask_user", "question")}
"""Turn shorthands: ``{python: CODE}`` is a call of ``python_interpreter(code=CODE)``, and so on.
A mapping value gives all arguments, e.g. ``{duckdb: {sql: ..., name: top}}``."""


def expand_turn(turn: dict[str, Any]) -> dict[str, Any]:
    """A scripted turn with its shorthand keys turned into ``tool_calls`` (in the order given)."""
    out = {k: v for k, v in turn.items() if k not in SHORTHAND_TOOLS}
    calls = list(out.get("tool_calls") or [])
    for key, value in turn.items():
        if key in SHORTHAND_TOOLS:
            tool, argument = SHORTHAND_TOOLS[key]
            calls.append({"name": tool, "arguments": dict(value) if isinstance(value, dict) else {argument: value}})
    if calls:
        out["tool_calls"] = calls
    return out


def _turns(file: Path, where: str, raw: Any) -> tuple[dict[str, Any], ...]:
    from harness_magic.core.providers.offline import ScriptedTurn

    if not isinstance(raw, list) or not raw:
        raise _fail(file, where, "expected a non-empty list of turns")
    out = []
    for index, turn in enumerate(raw):
        if not isinstance(turn, dict):
            raise _fail(file, f"{where}[{index}]", "a turn is a mapping with 'text' and/or 'tool_calls' "
                                                   f"(or a shorthand: {', '.join(SHORTHAND_TOOLS)})")
        for key in SHORTHAND_TOOLS:
            if key in turn and not isinstance(turn[key], (str, dict)):
                raise _fail(file, f"{where}[{index}].{key}", f"expected a string or a mapping, got {turn[key]!r}")
        turn = expand_turn(turn)
        try:
            ScriptedTurn.from_dict(turn)
        except ValueError as exc:
            raise _fail(file, f"{where}[{index}]", str(exc)) from None
        out.append(turn)
    return tuple(out)


def _scripts(file: Path, raw: Any) -> tuple[ScriptSpec | None, tuple[ScriptSpec, ...]]:
    raw = _mapping(file, "scripts", raw, allowed={"reference", "wrong"})
    reference = ScriptSpec("reference", _turns(file, "scripts.reference", raw["reference"])) if "reference" in raw else None
    wrong = []
    names = set()
    for index, item in enumerate(raw.get("wrong") or []):
        where = f"scripts.wrong[{index}]"
        item = _mapping(file, where, item, allowed={"name", "expect", "turns"})
        name = item.get("name")
        if not isinstance(name, str) or not _ID.fullmatch(name) or name in ("reference", "wrong") or name in names:
            raise _fail(file, f"{where}.name", f"expected a unique name of [a-z0-9_], not reference/wrong; got {name!r}")
        names.add(name)
        if item.get("expect") not in FAILURE_CLASSES:
            raise _fail(file, f"{where}.expect", f"{item.get('expect')!r}; allowed: {', '.join(FAILURE_CLASSES)}")
        wrong.append(ScriptSpec(name, _turns(file, f"{where}.turns", item.get("turns")), item["expect"]))
    return reference, tuple(wrong)


def _clarification(file: Path, raw: Any) -> Clarification | None:
    if raw is None:
        return None
    spec = _mapping(file, "clarification", raw, allowed={"expected", "reply"})
    expected = spec.get("expected")
    if not isinstance(expected, bool):
        raise _fail(file, "clarification.expected", f"expected true or false, got {expected!r}")
    reply = spec.get("reply")
    if reply is None and expected:
        raise _fail(file, "clarification.reply", "a task that expects a question needs the reply the simulated "
                                                 "user gives (a non-empty string)")
    if reply is not None and (not isinstance(reply, str) or not reply.strip()):
        raise _fail(file, "clarification.reply", f"expected a non-empty string, got {reply!r}")
    if reply is not None and len(reply) > MAX_REPLY_CHARS:
        raise _fail(file, "clarification.reply", f"{len(reply)} characters; at most {MAX_REPLY_CHARS}")
    return Clarification(expected, reply)


def load_task(file: Path, suite_dir: Path, generators: ModuleType | None = None,
              answers: ModuleType | None = None) -> Task:
    """Parse and validate one task file (see the module docstring)."""
    import yaml

    try:
        size = file.stat().st_size
    except OSError as exc:
        raise SuiteError(f"{file}: cannot read: {exc}") from None
    if size > MAX_TASK_FILE_BYTES:
        raise SuiteError(f"{file}: {size} bytes; a task file may have at most {MAX_TASK_FILE_BYTES}")
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SuiteError(f"{file}: not valid YAML: {exc}") from None
    raw = _mapping(file, "(top level)", raw, allowed=TASK_KEYS)
    task_id = raw.get("id")
    if not isinstance(task_id, str) or not _ID.fullmatch(task_id):
        raise _fail(file, "id", f"expected 1-64 characters of [a-z0-9_], got {task_id!r}")
    prompt = raw.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise _fail(file, "prompt", "expected a non-empty string")
    limits = _mapping(file, "limits", raw.get("limits"), allowed=set(LIMIT_KEYS))
    for key, value in limits.items():
        _number(file, f"limits.{key}", value, integer=key in ("max_turns", "max_tokens", "max_tool_calls"))
    tags = raw.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise _fail(file, "tags", "expected a list of strings")
    reference, wrong = _scripts(file, raw.get("scripts"))
    return Task(
        id=task_id, prompt=prompt, path=file,
        inputs=_inputs(file, raw.get("inputs"), suite_dir, generators),
        connectors=_connectors(file, raw.get("connectors"), suite_dir, generators),
        limits=dict(limits), graders=_graders(file, raw.get("graders"), answers),
        reference=reference, wrong=wrong, tags=tuple(tags), description=str(raw.get("description") or ""),
        clarification=_clarification(file, raw.get("clarification")),
    )


def load_suite(suite: str | Path) -> Suite:
    """A suite by directory path or built-in name (``core``); every task validated."""
    path = Path(suite)
    if not path.is_dir():
        builtin = builtin_suite_path(str(suite))
        if isinstance(suite, str) and re.fullmatch(r"[a-z0-9_]+", suite) and builtin.is_dir():
            path = builtin
        else:
            names = sorted(p.name for p in builtin_suite_path("x").parent.iterdir() if p.is_dir()
                           and not p.name.startswith("_"))
            raise SuiteError(f"suite {str(suite)!r} is neither a directory nor a built-in suite; built-in: {', '.join(names)}")
    files = sorted(path.glob("*.yaml"))
    if not files:
        raise SuiteError(f"{path}: no task files (*.yaml) in the suite directory")
    if len(files) > MAX_TASKS:
        raise SuiteError(f"{path}: {len(files)} task files; a suite may have at most {MAX_TASKS}")
    generators = _module(path, path.name, "generators")
    answers = _module(path, path.name, "answers")
    tasks: list[Task] = []
    seen: dict[str, Path] = {}
    for file in files:
        task = load_task(file, path, generators, answers)
        if task.id in seen:
            raise _fail(file, "id", f"{task.id!r} is already used by {seen[task.id]}")
        seen[task.id] = file
        tasks.append(task)
    return Suite(name=path.name, path=path, tasks=tasks, generators=generators, answers=answers)
