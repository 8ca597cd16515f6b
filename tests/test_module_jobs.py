"""Modules are sized by cohesion, not by a line count (issue 33, point 8; docs/design.md "How big a module is").

Each module of the package says in the first line of its docstring what its one job is; no test caps
its length. This keeps the rule checkable: a module added without saying what it is for fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "harness_magic"
JOB_MIN_WORDS = 3
"""A first docstring line shorter than this names no job ("Helpers." does not)."""


def _first_line(path: Path) -> str:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return docstring.strip().splitlines()[0].strip() if docstring.strip() else ""


def test_every_module_names_its_job_in_the_first_line_of_its_docstring() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 100, "the package was not found"
    silent = [str(p.relative_to(PACKAGE.parent)) for p in modules
              if len(_first_line(p).split()) < JOB_MIN_WORDS]
    assert silent == [], f"modules whose docstring names no job: {silent}"


def test_the_check_refuses_a_module_that_names_no_job(tmp_path: Path) -> None:
    (tmp_path / "bare.py").write_text("x = 1\n")
    (tmp_path / "vague.py").write_text('"""Helpers."""\n')
    (tmp_path / "named.py").write_text('"""Parse the run log\'s lines into events.\n\nMore."""\n')
    assert [len(_first_line(tmp_path / n).split()) >= JOB_MIN_WORDS for n in ("bare.py", "vague.py", "named.py")] \
        == [False, False, True]
