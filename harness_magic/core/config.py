"""AgentConfig: the plain settings of one session (the notebook maps its traitlets onto them).

Validated on construction: a bad value raises ValueError naming it and what
is allowed. :class:`~harness_magic.core.session.AgentSession` wires them into
a harness; this module only holds and checks them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness_magic.core.agent.prompts import DEFAULT_SYSTEM_PROMPT
from harness_magic.core.control.budgets import Budgets
from harness_magic.core.execution.interpreter import DEFAULT_MATERIALIZE_MAX_BYTES, DEFAULT_MATERIALIZE_MAX_ROWS

__all__ = ["AgentConfig", "SANDBOX_MODES", "DEFAULT_MODEL"]

DEFAULT_MODEL = "openai/gpt-4o-mini"
"""A cheap, capable default; needs OPENAI_API_KEY. Offline ids need no key."""
SANDBOX_MODES = ("worker", "inprocess", "unconfined")
"""``worker``: OS-confined subprocess (default). ``inprocess``: no security boundary. ``unconfined``: the
worker subprocess even where the OS confines it only partly or not at all (warns what is missing)."""


@dataclass
class AgentConfig:
    """Plain settings of a session (the notebook maps traitlets onto this)."""

    model: str = DEFAULT_MODEL
    api_base: str | None = None
    max_turns: int = 25
    sandbox: str = "worker"
    run_dir: str = "./runs"
    hot_count: int = 10
    memory_budget_bytes: int | None = None
    spill_dir: str | None = None
    stream: bool = True
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    allow_unconfined: bool = False
    """Let the worker run where the OS offers no confinement (with a warning)."""
    extra: dict[str, Any] = field(default_factory=dict)
    max_tokens: int | None = None
    """Token budget per run, subagents included (None: unlimited); status ``budget_tokens``."""
    max_cost_usd: float | None = None
    """Cost budget per run in USD from litellm's prices; status ``budget_cost``."""
    max_wall_s: float | None = None
    """Wall-time budget per run, checked between steps; status ``budget_wall_time``."""
    max_tool_calls: int | None = None
    """Tool-call budget per run; status ``budget_tool_calls``."""
    planner: bool = True
    """Offer the ``plan`` tool."""
    reminders: bool = True
    """Escalating suffix reminders when the model makes no progress, and the final-turn warning."""
    ask_confidence: bool = False
    """Ask the model (a suffix note on each run's first request) to end its answer with ``Confidence:`` and
    ``Open questions:`` lines, shown in the run's state panel."""
    prompt_caching: str = "auto"
    """Cache markers: ``auto`` (where litellm says the model caches prompts), ``on`` (custom gateways that
    cache) or ``off`` (gateways that reject unknown fields)."""
    context_window: int | None = None
    """Input-token limit override; None: litellm's model information (offline models: none)."""
    materialize_max_bytes: int = DEFAULT_MATERIALIZE_MAX_BYTES
    """Bytes (Arrow) a lazy engine handle may bring into the kernel when code names it or it is pulled."""
    materialize_max_rows: int = DEFAULT_MATERIALIZE_MAX_ROWS
    """Rows a lazy engine handle may bring into the kernel when code names it or it is pulled."""
    masking: dict[str, str] = field(default_factory=lambda: {"pii": "mask", "financial": "mask", "restricted": "deny"})
    """What the model sees of each sensitivity class: ``allow``, ``mask`` (stable pseudonyms) or ``deny``."""
    skill_dirs: tuple[str, ...] = ()
    """Directories of skill folders (``<dir>/<name>/SKILL.md``) offered beside the built-in skills."""
    workspace_memory: str | None = None
    """Workspace memory file (definitions the user approved, kept across sessions); None: none."""
    audit_log: str | None = ".harness_audit.jsonl"
    """The workspace's hash-chained audit log (approvals, refusals, governed writes, masking, pulls, exports),
    relative to the working directory at session start; None or "": not audited."""
    actor_role: str | None = None
    """The session actor's role (checked against a policy rule's approvers, written in the audit log);
    the actor is the OS user."""
    max_questions: int = 3
    """``ask_user`` questions per run; over it the tool answers the no-answer text (0: never asks)."""
    question_timeout_s: float | None = 300.0
    """Seconds an answerer waits for the person (passed in each QuestionRequest); None: no limit."""

    def budgets(self) -> Budgets:
        """The per-run budgets these settings ask for."""
        return Budgets(max_tokens=self.max_tokens, max_cost_usd=self.max_cost_usd, max_wall_s=self.max_wall_s,
                       max_tool_calls=self.max_tool_calls)

    def __post_init__(self) -> None:
        self.budgets()  # validates the budget fields
        from harness_magic.core.text.masking import check_policy

        self.masking = check_policy(self.masking)
        if self.sandbox not in SANDBOX_MODES:
            raise ValueError(f"sandbox {self.sandbox!r} is not valid; allowed: {', '.join(SANDBOX_MODES)}")
        from harness_magic.core.execution.connectors.lazy import check_cap

        check_cap(self.materialize_max_bytes, "materialize_max_bytes")
        check_cap(self.materialize_max_rows, "materialize_max_rows")
        if not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise ValueError(f"max_turns must be a positive integer, got {self.max_turns!r}")
        from harness_magic.core.providers.adapter import PROMPT_CACHING_MODES

        if self.prompt_caching not in PROMPT_CACHING_MODES:
            raise ValueError(f"prompt_caching {self.prompt_caching!r} is not valid; allowed: "
                             f"{', '.join(PROMPT_CACHING_MODES)}")
        if self.context_window is not None and (not isinstance(self.context_window, int) or self.context_window < 1):
            raise ValueError(f"context_window must be a positive number of tokens or None, got {self.context_window!r}")
        from harness_magic.core.control.questions import Questions

        Questions(lambda: None, max_questions=self.max_questions, timeout_s=self.question_timeout_s)  # validates
