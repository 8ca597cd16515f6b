"""Subagents: delegate a piece of analysis to an isolated agent run.

``subagent(task, input_handles=[], output_policy="publish_created")`` is a tool
on the parent harness. Each call builds a new :class:`~harness_magic.core.agent.loop.Harness`
with

* a fresh adapter (``adapter_factory(parent_adapter)``; by default
  ``parent_adapter.fresh()``, except that an offline scripted model is shared
  so one script drives parent and subagent in order),
* an empty history and a fresh cache: the parent's history, planner, reminders
  and connectors are not inherited (connectors only when passed explicitly),
* its inputs: each name in ``input_handles`` is copied into the fresh cache
  through ``parent_cache.view(name)`` — the type-aware copy boundary — so
  mutating an input inside the subagent never changes the parent's value;
  the copy keeps the parent's value token (:meth:`SessionCache.versions`), so a
  sandboxed subagent maps the input file the parent's sandbox exported for
  that value (read-only) instead of writing it again,
* a turn budget capped by the parent's remaining turns, and at most what is
  left of the parent's token, cost, wall-time and tool-call budgets
  (:func:`~harness_magic.core.control.budgets.child_budgets`, installed on the child);
  the child's usage and tool calls count against the parent's run,
* its own JSONL log whose ``run_start`` names ``parent_run_id``,
  ``parent_tool_use_id`` and ``parent_run_file``; the parent's log gets an
  ``event`` record (``event: subagent``) naming the child's run id and file.

Results come back on two channels: the final text, and (``publish_created``)
every handle the subagent created, put into the parent cache under the
parent-side name the cache resolves — collisions are suffixed, never
overwritten — reported as lines ``- summary -> weekly_summary_2``.
``text_only`` publishes nothing. A subagent that calls ``subagent`` gets
:class:`SubagentRecursionError` as an error result; a subagent run that does
not complete returns an ``is_error`` result and publishes nothing. The
child's events are re-emitted on the parent wrapped in
:class:`~harness_magic.core.transcript.events.SubagentEvent` so a notebook can render the
nested transcript.

``preset`` (optional) names a domain subagent
(:mod:`harness_magic.core.control.presets`): its role text and skill templates
join the system prompt, and the child is given only the tools of the preset's
subset — its own tools and the connectors of ``preset_connectors()`` (the
session's), filtered. The preset's skills are loaded into a verifier of the
child's own. An unknown preset is an error result listing the presets.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Callable, cast

from harness_magic.core.control.budgets import child_budgets
from harness_magic.core.control.presets import (PRESETS, PresetError, SubagentPreset, get_preset, preset_catalogue,
                                              subset_registry)
from harness_magic.core.transcript.events import SubagentEvent
from harness_magic.core.execution.connectors.estimates import budget_for
from harness_magic.core.execution.format import truncate_middle
from harness_magic.core.execution.tools import ToolContext, ToolError, ToolOutput, ToolSpec

if TYPE_CHECKING:
    from harness_magic.core.agent.host import HarnessHost
    from harness_magic.core.cache.protocol import HandleCache
    from harness_magic.core.execution.interpreter import InterpreterBackend
    from harness_magic.core.providers.protocol import ModelAdapter, SyncModelAdapter

__all__ = [
    "SubagentRecursionError",
    "make_subagent_tool",
    "enable_subagents",
    "default_adapter_factory",
    "SUBAGENT_TOOL_NAME",
    "OUTPUT_POLICIES",
    "DEFAULT_SUBAGENT_MAX_TURNS",
    "SUBAGENT_SYSTEM_SUFFIX",
    "preset_system",
]

SUBAGENT_TOOL_NAME = "subagent"
OUTPUT_POLICIES = ("publish_created", "text_only")
DEFAULT_SUBAGENT_MAX_TURNS = 12
"""A delegated piece of analysis should finish in a dozen steps; the parent's remaining turns cap it further."""
ANSWER_MAX_CHARS = 4_000
"""The subagent's final text is cut (head and tail kept) to keep the parent's context bounded."""
SUBAGENT_SYSTEM_SUFFIX = (
    "\n\nYou are a subagent working on one delegated task. You see only the handles you were given. "
    "Save results you want to hand back with save(name, value); finish with a short answer."
)


class SubagentRecursionError(RuntimeError):
    """Raised (as an error result) when a subagent tries to spawn a subagent."""


def default_adapter_factory(parent_adapter: ModelAdapter) -> ModelAdapter:
    """A fresh adapter for a subagent.

    Real providers: ``parent_adapter.fresh()``. An offline scripted model is
    shared instead of restarted, so a single script holds the parent's turns
    and, in order, the subagent's.
    """
    from harness_magic.core.providers.adapter import AsyncProviderAdapter, ProviderAdapter
    from harness_magic.core.providers.offline import ScriptedModel

    if isinstance(parent_adapter, (ProviderAdapter, AsyncProviderAdapter)) \
            and isinstance(parent_adapter.transport, ScriptedModel):
        clone = copy.copy(parent_adapter)
        clone.last_payload = None
        return clone
    return parent_adapter.fresh()


def _parameters(presets: dict[str, SubagentPreset] | None = None) -> dict[str, Any]:
    table = PRESETS if presets is None else presets
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "What the subagent should do, stated completely."},
            "input_handles": {"type": "array", "items": {"type": "string"}, "default": [],
                              "description": "Cache handles the subagent may use (copied; it sees nothing else)."},
            "output_policy": {"type": "string", "enum": list(OUTPUT_POLICIES), "default": "publish_created",
                              "description": "publish_created: handles it creates come back to you; "
                                             "text_only: only its answer."},
        },
        "required": ["task"],
    }
    if table:
        schema["properties"]["preset"] = {
            "type": "string", "enum": list(table),
            "description": "Optional domain subagent (its own prompt and a subset of tools):\n" + preset_catalogue(table)}
    return schema


def _recursion_stub() -> ToolSpec:
    def refuse(**_: Any) -> Any:
        raise SubagentRecursionError("a subagent cannot spawn another subagent; do the work yourself")

    return ToolSpec(name=SUBAGENT_TOOL_NAME, description="Unavailable inside a subagent (calling it is an error).",
                    parameters=_parameters(), handler=refuse)


def _put(cache: HandleCache, name: str, value: Any, turn: int | None) -> str:
    try:
        return cache.put(name, value, turn=turn, tool=SUBAGENT_TOOL_NAME)
    except TypeError:  # a cache without provenance keywords
        return cache.put(name, value)


def _put_input(cache: HandleCache, name: str, value: Any, version: str | None) -> str:
    """Put a copy of a parent handle into the child cache, keeping the parent's value token.

    Same token, same value: the sandbox maps the file it exported for the
    parent (a hard link, read-only) instead of writing a second one.
    """
    import inspect

    if version is not None and "version" in inspect.signature(cache.put).parameters:
        return cache.put(name, value, version=version)
    return cache.put(name, value)


def make_subagent_tool(
    parent: HarnessHost,
    *,
    adapter_factory: Callable[[ModelAdapter], ModelAdapter] | None = None,
    tools_factory: Callable[[HandleCache, Callable[[], "int | None"]], list[ToolSpec]] | None = None,
    backend: InterpreterBackend | None = None,
    backend_factory: Callable[[], InterpreterBackend | None] | None = None,
    cache_factory: Callable[[], HandleCache] | None = None,
    system_prompt: str | None = None,
    max_turns: int = DEFAULT_SUBAGENT_MAX_TURNS,
    connectors: Any | None = None,
    run_dir: str | None = None,
    presets: dict[str, SubagentPreset] | None = None,
    preset_connectors: Callable[[], Any] | None = None,
    preset_skills: Callable[[], Any] | None = None,
) -> ToolSpec:
    """The ``subagent`` tool for ``parent`` (a Harness); add it with ``parent.add_tool``.

    ``tools_factory(cache, current_turn) -> [ToolSpec]`` builds the child's
    tools over its fresh cache; by default the interpreter tools over
    ``backend`` (an :class:`~harness_magic.core.execution.interpreter.InProcessInterpreter`
    when None — no security boundary; :class:`AgentSession` passes its
    sandboxed backend). ``backend_factory`` instead makes a backend for each
    subagent run (closed when the run ends), so no state of one run's
    interpreter reaches another's or the parent's; when it returns None the
    run uses ``backend``. Both implement
    :class:`~harness_magic.core.execution.interpreter.InterpreterBackend`. ``connectors`` (a
    ConnectorRegistry) is installed in the child only when given.

    ``presets`` (default :data:`~harness_magic.core.control.presets.PRESETS`)
    are the domain subagents the ``preset`` argument may name; a preset run
    gets ``connectors``, else ``preset_connectors()`` (the session's registry,
    or None), filtered to the preset's subset, and its skills from
    ``preset_skills()`` (a SkillSet; default the built-in skills).
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns!r}")
    make_adapter = adapter_factory or default_adapter_factory
    table = dict(PRESETS if presets is None else presets)

    def build_tools(cache: HandleCache, current_turn: Callable[[], "int | None"], own: Any,
                    on_output: Callable[[str], None] | None = None) -> list[ToolSpec]:
        if tools_factory is not None:
            return list(tools_factory(cache, current_turn))
        from harness_magic.core.execution.interpreter import InProcessInterpreter, make_interpreter_tools

        return make_interpreter_tools(cache, own or backend or InProcessInterpreter(), current_turn=current_turn,
                                      on_output=on_output)

    def subagent(task: str, input_handles: list[str] | None = None,
                 output_policy: str = "publish_created", preset: str | None = None) -> ToolOutput:
        try:
            chosen = None if preset is None else get_preset(preset, table)
        except PresetError as exc:
            raise ToolError(str(exc)) from None
        runs_code = chosen is None or chosen.allows_name("python_interpreter")  # else no worker is started
        own = backend_factory() if backend_factory is not None and tools_factory is None and runs_code else None
        try:
            return run_subagent(task, input_handles, output_policy, own, chosen)
        finally:
            if own is not None:
                own.close()

    def run_subagent(task: str, input_handles: list[str] | None, output_policy: str, own: Any,
                     preset: SubagentPreset | None) -> ToolOutput:
        from harness_magic.core.cache import SessionCache
        from harness_magic.core.agent.loop import Harness

        if not isinstance(task, str) or not task.strip():
            raise ToolError("task must be a non-empty description of the work")
        if output_policy not in OUTPUT_POLICIES:
            raise ToolError(f"output_policy {output_policy!r} is invalid; use one of {', '.join(OUTPUT_POLICIES)}")
        inputs = list(input_handles or [])
        if not all(isinstance(h, str) for h in inputs):
            raise ToolError("input_handles must be a list of handle names")
        parent_cache = parent.cache
        unknown = [h for h in inputs if h not in parent_cache]
        if unknown:
            raise ToolError(f"Unknown handles {', '.join(unknown)}; known: {', '.join(parent_cache.names()) or '(none)'}")
        run = parent.current_run
        use = getattr(run, "current_tool_use", None)
        use_id = getattr(use, "id", None) or "direct"
        remaining = parent.max_turns - (run.turn if run is not None else 0)
        budget = min(max_turns, remaining)
        if budget < 1:
            raise ToolError("No turns left in your budget for a subagent; finish the work yourself.")
        limits, spent = child_budgets(parent, run)
        if spent is not None:
            raise ToolError(f"No budget left for a subagent ({spent}); finish the work yourself.")

        child_cache = cache_factory() if cache_factory is not None else SessionCache()
        tokens = parent_cache.versions()
        local_inputs = [_put_input(child_cache, h, parent_cache.view(h), tokens.get(h)) for h in inputs]
        context = ToolContext()  # the child's tools report to the child harness built below
        tools = build_tools(child_cache, context.current_turn, own, context.tool_output)
        tools = [t for t in tools if t.name != SUBAGENT_TOOL_NAME]
        system = system_prompt if system_prompt is not None else parent.system + SUBAGENT_SYSTEM_SUFFIX
        registry = connectors
        skill_set = None
        if preset is not None:
            tools = [t for t in tools if preset.allows(t)]
            skill_set = _preset_skill_set(preset, preset_skills)
            system = preset_system(system, preset, skill_set)
            base = connectors if connectors is not None else (preset_connectors() if preset_connectors else None)
            registry = subset_registry(preset, base)
        # a subagent runs on the sync Harness, so its parent's adapter is a sync one (AgentSession builds sync
        # harnesses only); the host protocol types the adapter of either driver
        child = Harness(
            cast("SyncModelAdapter", make_adapter(parent.adapter)),
            system,
            tools + [_recursion_stub()],
            max_turns=budget,
            run_dir=run_dir or parent.run_dir,
            cache=child_cache,
            log_extra={
                "parent_run_id": getattr(run, "run_id", None),
                "parent_tool_use_id": use_id,
                "parent_run_file": str(run.logger.path) if run is not None else None,
                "depth": 1,
                "input_handles": inputs,
                "output_policy": output_policy,
                **({"preset": preset.name} if preset is not None else {}),
            },
        )
        context.bind(child)
        child.set_masker(parent.masker)  # the child's requests pass the parent's masking step too
        child.audit = parent.audit  # the child's approvals and governed writes go to the workspace audit log
        if limits.active:
            limits.install(child)
        if registry is not None:
            registry.install(child)
        child.subscribe(lambda event: parent.emit(SubagentEvent(parent_tool_use_id=use_id, event=event, depth=1)))
        if preset is not None:
            _preload_skills(child, preset, skill_set)
            for spec in child.tools:  # what the preset does not allow is not given at all
                if spec.name != SUBAGENT_TOOL_NAME and not preset.allows(spec):
                    child.remove_tool(spec.name)
        result = child.run_result(task, session_id=getattr(run, "session_id", None))
        if run is not None:  # the child's calls and approved writes count against the parent's budgets
            run.tool_calls += sum(len(m.tool_results) for m in result.messages)
            budget_for(parent).count_write(run, budget_for(child).latest_writes())

        created = [n for n in child_cache.names() if n not in local_inputs]
        published: list[tuple[str, str]] = []
        if result.status == "completed" and output_policy == "publish_created":
            turn = run.turn if run is not None else None
            published = [(n, _put(parent_cache, n, child_cache.get(n), turn)) for n in created]
        if run is not None:
            run.logger.write("event", event="subagent", tool_use_id=use_id, child_run_id=result.run_id,
                             child_run_file=result.run_file, preset=preset.name if preset else None,
                             status=result.status, turns=result.turns,
                             usage=result.usage.to_dict(), published=[{"child": c, "parent": p} for c, p in published])
        child_cache.close()
        if result.status == "interrupted":
            raise KeyboardInterrupt
        role = f" ({preset.name})" if preset is not None else ""
        header = f"Subagent{role} {result.status} in {result.turns} turns (run {result.run_id})."
        if result.status != "completed":
            return ToolOutput(text=f"{header} It failed: {result.error or result.status}. Nothing was published.",
                              is_error=True)
        lines = [header, "Answer:", truncate_middle(result.text or "(no text)", ANSWER_MAX_CHARS)]
        if output_policy == "text_only":
            lines.append(f"Published handles: none (text_only; {len(created)} created inside were discarded).")
        elif published:
            lines.append("Published handles:")
            lines.extend(f"- {child_name} -> {parent_name}" for child_name, parent_name in published)
        else:
            lines.append("Published handles: none (the subagent created none).")
        return ToolOutput(text="\n".join(lines), handles=[p for _, p in published])

    return ToolSpec(
        name=SUBAGENT_TOOL_NAME,
        description=("Delegate a self-contained piece of analysis to an isolated subagent. It starts with no "
                     "history and sees only input_handles (copied). Returns its answer and, with "
                     "publish_created, the handles it created (renamed on collision). A preset makes it a "
                     "domain subagent with its own role and a subset of the tools."),
        parameters=_parameters(table),
        handler=subagent,
    )


def _preset_skill_set(preset: SubagentPreset, source: Callable[[], Any] | None) -> Any:
    """The SkillSet holding the preset's skills (None when it names none); ToolError naming a missing one."""
    if not preset.skills:
        return None
    from harness_magic.core.control.skills import load_skills

    skill_set = source() if source is not None else None
    if skill_set is None:
        skill_set = load_skills()
    missing = [name for name in preset.skills if name not in skill_set]
    if missing:
        raise ToolError(f"Preset {preset.name!r} names skill(s) {', '.join(map(repr, missing))} that are not "
                        f"installed; skills: {', '.join(skill_set.names()) or '(none)'}")
    return skill_set


def preset_system(system: str, preset: SubagentPreset, skill_set: Any) -> str:
    """``system`` with the preset's role text and its skills' action templates after it."""
    parts = [system, f"Your role ({preset.name}): {preset.prompt}"]
    parts.extend(skill_set.get(name).load_text() for name in preset.skills)
    return "\n\n".join(parts)


def _preload_skills(child: Any, preset: SubagentPreset, skill_set: Any) -> None:
    """Load the preset's skills in ``child``: their verification rules check the child's handles and answer."""
    if skill_set is None:
        return
    from harness_magic.core.control.skills import install_skills
    from harness_magic.core.control.verification import Verifier
    from harness_magic.core.transcript.events import RunStarted

    runtime = install_skills(child, Verifier().install(child), skill_set)

    def load_at_start(event: Any) -> None:  # inside the run: the loads are logged and count for it
        if isinstance(event, RunStarted) and not runtime.loaded:
            for name in preset.skills:
                runtime.load(name)

    child.subscribe(load_at_start)


def enable_subagents(harness: HarnessHost, **options: Any) -> ToolSpec:
    """Add the ``subagent`` tool to ``harness`` (options as :func:`make_subagent_tool`)."""
    spec = make_subagent_tool(harness, **options)
    harness.add_tool(spec)
    return spec
