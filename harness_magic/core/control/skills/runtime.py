"""Progressive disclosure of skills: the ``skills__load`` tool and the rules a loaded skill adds to a run.

Before loading, the model sees each skill's name and one-line trigger in the
description of ``skills__load`` (a tool, so the system prompt stays
byte-stable; the list changes only when the skill directories do). Calling
``skills__load(name)`` returns the template (:meth:`Skill.load_text`), adds the
skill's handle rules to the session's :class:`Verifier` and its answer rules
to the final-answer check, and emits
:class:`~harness_magic.core.transcript.events.SkillLoaded`. Both are for the
run in progress only: they are dropped when it finishes (``run_finished``).
An unknown name is a tool error listing the available skills.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from harness_magic.core.control.skills.loader import SkillSet
from harness_magic.core.control.skills.rules import SkillRule, check_answer_rule, totals_check
from harness_magic.core.control.verification import FINAL_ANSWER, CheckOutcome, Rule, Verifier, handle_matches
from harness_magic.core.execution.tools import ToolError, ToolSpec
from harness_magic.core.transcript.events import AssistantMessage, Event, Notice, RunFinished, SkillLoaded, VerificationChecked

if TYPE_CHECKING:
    from harness_magic.core.agent.host import HarnessHost

__all__ = ["SkillsRuntime", "install_skills", "SKILLS_TOOL_NAME"]

SKILLS_TOOL_NAME = "skills__load"


class SkillsRuntime:
    """The skills of one harness: the ``skills__load`` tool and the rules loaded in the current run."""

    def __init__(self, harness: HarnessHost, verifier: Verifier, skill_set: SkillSet) -> None:
        self.harness = harness
        self.verifier = verifier
        self.skill_set = skill_set
        self._loaded: list[str] = []
        self._handle_rules: list[Rule] = []
        self._answer_rules: list[SkillRule] = []

    @property
    def loaded(self) -> tuple[str, ...]:
        """Skills loaded in the run in progress (or the next one, when loaded between runs)."""
        return tuple(self._loaded)

    def tool(self) -> ToolSpec:
        """The ``skills__load`` tool; its description lists every skill's name and trigger line."""
        lines = "\n".join(f"- {s.name}: {s.trigger_line}" for s in self.skill_set)
        return ToolSpec(
            name=SKILLS_TOOL_NAME,
            description=("Load a skill: a tested workflow for a kind of data question. Returns its steps and the "
                         "checks your results and answer must pass (they are enforced for this run). Load one "
                         "when the request matches it, before you start.\nSkills:\n" + lines),
            parameters={"type": "object",
                        "properties": {"name": {"type": "string", "description": "The skill to load."}},
                        "required": ["name"]},
            handler=self._handle,
        )

    def _handle(self, name: str) -> str:
        run = self.harness.current_run
        use = run.current_tool_use if run is not None else None
        try:
            return self.load(name, tool_use_id=getattr(use, "id", None))
        except KeyError as exc:
            raise ToolError(exc.args[0]) from None

    def load(self, name: str, tool_use_id: str | None = None) -> str:
        """Load ``name`` for this run: add its rules, emit SkillLoaded, return its template text.

        KeyError listing the available skills when there is no such skill. Loading a skill twice in a run
        adds its rules once.
        """
        skill = self.skill_set.get(name)
        if skill.name not in self._loaded:
            self._loaded.append(skill.name)
            for rule in skill.rules:
                if rule.on_answer:
                    self._answer_rules.append(rule)
                else:
                    self._handle_rules.append(self._add_handle_rule(rule))
        self.harness.log_event("skill_loaded", skill=skill.name, rules=list(skill.rule_names),
                               tool_use_id=tool_use_id or "")
        self.harness.emit(SkillLoaded(name=skill.name, rules=skill.rule_names, tool_use_id=tool_use_id))
        return skill.load_text()

    def _add_handle_rule(self, rule: SkillRule) -> Rule:
        p, verifier = rule.params, self.verifier
        if rule.kind == "totals_reconcile":
            first, second = p["handles"]
            verifier.add_rule(rule.name, totals_check(rule, lambda: self._latest(first)), handles=second)
        elif rule.kind == "row_count":
            verifier.row_count(p.get("min"), p.get("max"), handles=p.get("handles", "*"), tools=p.get("tools", "*"))
        else:
            build = verifier.require_columns if rule.kind == "require_columns" else verifier.no_nulls
            build(list(p["columns"]), handles=p.get("handles", "*"), tools=p.get("tools", "*"))
        return verifier.rules[-1]

    def _latest(self, pattern: str) -> Any:
        """The newest cached value whose handle is ``pattern`` (or ``pattern_N``); KeyError when none."""
        cache = self.harness.cache
        names = [n for n in cache.names() if handle_matches(n, pattern)]
        if not names:
            raise KeyError(pattern)
        return cache.get(names[-1])

    def _on_event(self, event: Event) -> None:
        if isinstance(event, RunFinished):
            self._clear()
        elif isinstance(event, AssistantMessage) and self._answer_rules:
            message = event.message
            if not message.tool_uses and message.text:
                self._check_answer(message.text, event.turn)

    def _check_answer(self, text: str, turn: int | None) -> None:
        outcomes = []
        for rule in self._answer_rules:
            problem = check_answer_rule(rule, text)
            outcomes.append(CheckOutcome(rule=rule.name, handle=FINAL_ANSWER, ok=problem is None, detail=problem or ""))
        self.verifier.history.extend(outcomes)
        failed = [o for o in outcomes if not o.ok]
        checks = [asdict(o) for o in outcomes]
        self.harness.log_event("verification", tool_use_id="", tool=FINAL_ANSWER, passed=not failed, checks=checks)
        self.harness.emit(VerificationChecked(turn=turn, tool_use_id="", tool=FINAL_ANSWER, passed=not failed,
                                              checks=tuple(checks)))
        if failed:
            self.harness.emit(Notice(text="Skill check failed on the answer: "
                                          + "; ".join(f"{o.rule}: {o.detail}" for o in failed), level="warning"))

    def _clear(self) -> None:
        for rule in self._handle_rules:
            if rule in self.verifier.rules:
                self.verifier.rules.remove(rule)
        self._handle_rules.clear()
        self._answer_rules.clear()
        self._loaded.clear()


def install_skills(harness: HarnessHost, verifier: Verifier, skill_set: SkillSet) -> SkillsRuntime:
    """Offer ``skills__load`` on ``harness`` (when there are skills) and drop loaded rules after each run."""
    runtime = SkillsRuntime(harness, verifier, skill_set)
    if len(skill_set):
        harness.add_tool(runtime.tool())
    harness.subscribe(runtime._on_event)
    return runtime
