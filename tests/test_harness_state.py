"""Per-harness state lives on the harness it describes, and tools meet their harness through a context object.

Budget guards and the citation ledger were module-level tables keyed by
harness; now they are attributes of the harness (``harness.state``,
``harness.citations``), so they go when the harness goes and no module holds
them. Tools built before their harness exists reach it through a
:class:`ToolContext` bound once.
"""

from __future__ import annotations

import gc
import types
import weakref

import pytest

from harness_magic import Harness, ProviderAdapter, ScriptedModel, ToolSpec
from harness_magic.core.agent.state import HarnessState, StateKey
from harness_magic.core.control import budgets as budgets_module
from harness_magic.core.control.budgets import BUDGET_GUARDS, Budgets, child_budgets, installed_budgets
from harness_magic.core.execution.tools import ToolContext
from harness_magic.core.knowledge import citations as citations_module
from harness_magic.core.knowledge.citations import Source, record_retrieval, retrieved_sources

SYSTEM = "You test per-harness state."


def make_harness(tmp_path, tools=(), script=None) -> Harness:
    model = ScriptedModel(script or [{"text": "done"}])
    return Harness(ProviderAdapter("scripted", transport=model), SYSTEM, list(tools), run_dir=str(tmp_path / "runs"))


def holders_in(module: types.ModuleType, *objects: object) -> list[str]:
    """Module globals (tables of any kind, weak ones included) holding one of ``objects`` as a key, value or item."""
    found = []
    for name, value in vars(module).items():
        if isinstance(value, (dict, weakref.WeakKeyDictionary, weakref.WeakValueDictionary)):
            items = [*value.keys(), *value.values()]
            items += [i for v in value.values() if isinstance(v, (list, tuple, set)) for i in v]
        elif isinstance(value, (list, tuple, set, weakref.WeakSet)):
            items = list(value)
        else:
            continue
        if any(item is obj for item in items for obj in objects):
            found.append(name)
    return found


def test_budget_guards_live_on_the_harness_they_were_installed_on(tmp_path):
    parent, other = make_harness(tmp_path), make_harness(tmp_path)
    guard = Budgets(max_tool_calls=4, max_tokens=1_000).install(parent)
    assert parent.state.get(BUDGET_GUARDS) == [guard]
    assert installed_budgets(parent) == [Budgets(max_tool_calls=4, max_tokens=1_000)]
    assert installed_budgets(other) == []
    assert BUDGET_GUARDS not in other.state  # reading another harness's budgets creates nothing on it
    guard.budgets = Budgets(max_tool_calls=2)  # a guard's budgets are swapped per run: the current value is read
    assert installed_budgets(parent) == [Budgets(max_tool_calls=2)]
    assert child_budgets(other, None) == (Budgets(), None)


def test_budget_state_is_gone_with_its_harness(tmp_path):
    harness = make_harness(tmp_path)
    guard = Budgets(max_turns=3).install(harness)
    assert holders_in(budgets_module, harness, guard) == []  # no module-level table, weak or not
    harness_ref, guard_ref = weakref.ref(harness), weakref.ref(guard)
    del harness, guard
    gc.collect()
    assert harness_ref() is None and guard_ref() is None


def test_citation_ledger_is_the_harness_attribute_and_goes_with_it(tmp_path):
    context = ToolContext()

    def lookup() -> str:
        record_retrieval(context.host, "lookup", [Source("doc:a.md#b", "A", "snippet b")])
        return "found [doc:a.md#b]"

    spec = ToolSpec(name="lookup", description="Look up.", parameters={"type": "object", "properties": {}},
                    handler=lookup)
    harness = make_harness(tmp_path, [spec], [{"tool_calls": [{"name": "lookup", "arguments": {}}]},
                                              {"text": "cites [doc:a.md#b]"}])
    context.bind(harness)
    other = make_harness(tmp_path)
    assert harness.run_result("look it up").status == "completed"
    assert list(retrieved_sources(harness)) == ["doc:a.md#b"]
    assert list(harness.citations.entries) == ["doc:a.md#b"]
    assert retrieved_sources(other) == {} and other.citations.entries == {}
    assert holders_in(citations_module, harness, harness.citations) == []
    ledger_ref, harness_ref = weakref.ref(harness.citations), weakref.ref(harness)
    del harness, spec, lookup, context
    gc.collect()
    assert harness_ref() is None and ledger_ref() is None


def test_state_keys_type_their_value_and_compare_by_identity():
    state = HarnessState()
    first, second = StateKey("guards", list), StateKey("guards", list)
    state.get(first).append("x")
    assert state.get(first) == ["x"] and state.get(second) == []  # same name, different state
    assert state.peek(StateKey("never", dict)) is None
    with pytest.raises(TypeError, match="StateKey"):
        state.get("guards")  # type: ignore[arg-type]  # a string is not a key: the error names what it got
    with pytest.raises(ValueError, match="non-empty name"):
        StateKey("", list)
    with pytest.raises(TypeError, match="must be callable"):
        StateKey("x", [])  # type: ignore[arg-type]  # hostile factory value


def test_tool_context_reports_to_the_harness_bound_once(tmp_path):
    context = ToolContext()
    assert context.current_turn() is None and context.host is None
    context.tool_output("printed before any harness")  # dropped, not an error
    seen: list[tuple[int | None, str]] = []

    def shout(text: str) -> str:
        context.tool_output(text)
        seen.append((context.current_turn(), text))
        return "ok"

    spec = ToolSpec(name="shout", description="Print.", handler=shout,
                    parameters={"type": "object", "properties": {"text": {"type": "string"}}})
    harness = make_harness(tmp_path, [spec], [{"tool_calls": [{"name": "shout", "arguments": {"text": "hi\n"}}]},
                                              {"text": "done"}])
    context.bind(harness)
    deltas: list[str] = []
    harness.subscribe(lambda event: deltas.append(event.text) if event.kind == "tool_output_delta" else None)
    assert harness.run_result("print").status == "completed"
    assert seen == [(1, "hi\n")] and deltas == ["hi\n"]
    assert context.current_turn() is None  # no run in progress
    with pytest.raises(RuntimeError, match="already bound"):
        context.bind(make_harness(tmp_path))
