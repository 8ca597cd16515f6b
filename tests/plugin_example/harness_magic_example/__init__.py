"""An example harness_magic plugin: each object below is named by an entry point in ``pyproject.toml``.

* ``facts`` connector type: ``{"type": "facts", "facts": {"fiscal_year_start": "April"}}`` gives the model
  a ``facts__lookup`` tool answering from that mapping.
* ``fiscal_quarter`` tool: the fiscal quarter of a calendar month, for a year starting in April.
* ``keywords`` grader: ``{keywords: {all: [word, ...]}}`` passes when the answer names every word.
* ``example`` skills: the folders under ``skills/`` (each a ``SKILL.md``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness_magic.core.execution.connectors.registry import Connector
from harness_magic.core.execution.tools import ToolSpec
from harness_magic.evals.graders import Grade, GradeContext, GraderPlugin

SKILLS_DIR = str(Path(__file__).resolve().parent / "skills")
"""The skills this package ships (the ``harness_magic.skills`` entry point names this path)."""
MAX_FACTS = 100
"""A facts connector is a short reference table, not a database."""
FISCAL_YEAR_START_MONTH = 4


def facts_connector(*, facts: dict[str, str], name: str = "facts",
                    description: str = "Reference facts about the business (fiscal calendar, units, owners).") -> Connector:
    """A connector type: called with a configuration entry's options as keywords, returns a Connector."""
    if not isinstance(facts, dict) or not facts or len(facts) > MAX_FACTS:
        raise ValueError(f"facts must be a mapping of 1 to {MAX_FACTS} names to text, got {facts!r}")
    table = {str(k): str(v) for k, v in facts.items()}
    connector = Connector(name, description)

    @connector.tool()
    def lookup(key: str) -> str:
        """Look up one fact by name.

        Args:
            key: The fact's name, e.g. fiscal_year_start.
        """
        if key not in table:
            return f"no fact named {key!r}; known: {', '.join(sorted(table))}"
        return table[key]

    return connector


def fiscal_quarter_tool() -> ToolSpec:
    """A tool factory: called once per session, returns the ToolSpec the model is offered."""

    def fiscal_quarter(month: int) -> str:
        if isinstance(month, bool) or not isinstance(month, int) or not 1 <= month <= 12:
            return f"month must be a whole number from 1 to 12, got {month!r}"
        return f"Q{(month - FISCAL_YEAR_START_MONTH) % 12 // 3 + 1}"

    return ToolSpec(
        name="fiscal_quarter",
        description="The fiscal quarter (Q1-Q4) of a calendar month (1-12); the fiscal year starts in April.",
        parameters={"type": "object", "properties": {"month": {"type": "integer", "minimum": 1, "maximum": 12}},
                    "required": ["month"]},
        handler=fiscal_quarter,
    )


def _grade_keywords(options: dict[str, Any], ctx: GradeContext) -> Grade:
    answer = ctx.answer.casefold()
    missing = [word for word in options["all"] if word.casefold() not in answer]
    if missing:
        return Grade("keywords", False, f"the answer does not name {', '.join(missing)}")
    return Grade("keywords", True, f"names {', '.join(options['all'])}")


def _validate_keywords(options: dict[str, Any], answers: Any) -> None:
    if set(options) != {"all"}:
        raise ValueError(f"keywords takes one option, all (a list of words), got {sorted(map(str, options))}")
    words = options["all"]
    if not isinstance(words, list) or not words or not all(isinstance(w, str) and w.strip() for w in words):
        raise ValueError(f"all must be a non-empty list of words, got {words!r}")


KEYWORDS = GraderPlugin(_grade_keywords, _validate_keywords)
"""A grader: ``grade(options, ctx) -> Grade`` and ``validate(options, answers)`` raising ValueError."""
